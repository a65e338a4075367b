"""vLLM's V1 rejection sampler driven in verispec's step layouts (the functions ``verispec check-engine vllm`` checks).

Imported in the process that runs the engine's code (check-external's sandbox): it turns Triton's interpreter on,
imports vLLM's sampler (``VERISPEC_ENGINE_SOURCE`` replaces its file) and makes one call of every route outside any
capture, so that what vLLM and its libraries import lazily on a first call is imported here, not inside a checked
call (scipy.stats draws from numpy's generators while it imports). ``verispec.engines.vllm`` states the checks.
"""

from __future__ import annotations

import inspect
import os

#: Triton's interpreter on the CPU; no CUDA device, so vLLM's triton_utils does not look for a driver; and vLLM's
#: GPU path (its default target), whose kernels are Triton's: a VLLM_TARGET_DEVICE=cpu in the caller's environment
#: would send the sampler to the compiled CPU operators of vllm._C, which a wheel built for CUDA does not carry.
os.environ["TRITON_INTERPRET"] = "1"
os.environ["CUDA_VISIBLE_DEVICES"] = ""
os.environ["VLLM_TARGET_DEVICE"] = "cuda"

from verispec.engines import EngineError, module_present
from verispec.engines.vllm import SAMPLER_MODULE, SOURCE_VARIABLE, check_padding, supported_range
from verispec.engines.vllm_v1_compat import RunnerOrder, parsed, release_fields


def _load_engine():
    """vLLM's sampler modules (the override of ``VERISPEC_ENGINE_SOURCE`` first); EngineError when they do not
    import."""
    import importlib
    import sys

    source = os.environ.get(SOURCE_VARIABLE)
    try:
        if source and SAMPLER_MODULE not in sys.modules:
            import importlib.util

            importlib.import_module("vllm.v1.sample")
            spec = importlib.util.spec_from_file_location(SAMPLER_MODULE, source)
            module = importlib.util.module_from_spec(spec)
            sys.modules[SAMPLER_MODULE] = module
            try:
                spec.loader.exec_module(module)
            except BaseException:
                del sys.modules[SAMPLER_MODULE]
                raise
        rejection = importlib.import_module(SAMPLER_MODULE)
        sampler = importlib.import_module("vllm.v1.sample.sampler")
        metadata = importlib.import_module("vllm.v1.sample.metadata")
        processors = (importlib.import_module("vllm.v1.sample.logits_processor")
                      if module_present("vllm.v1.sample.logits_processor") else None)  # 0.9 on
        spec_metadata = importlib.import_module("vllm.v1.spec_decode.metadata")
    except Exception as error:  # the wheel's own import: one line, never a verdict
        where = f"the sampler file {source}" if source else "vLLM's sampler"
        missing = getattr(error, "name", None) or ""
        if isinstance(error, ModuleNotFoundError) and missing.split(".")[0] == "vllm":  # not this machine's fault
            raise EngineError(f"this vLLM release has no module {missing!r}, where the adapter finds the V1 "
                              f"sampler's entry points (it knows releases {supported_range()}): the release "
                              "predates them or they moved") from None
        raise EngineError(f"{where} fails to import on this machine ({type(error).__name__}: "
                          f"{str(error).splitlines()[0] if str(error) else ''}); see "
                          "verispec/engines/requirements/vllm.txt") from None
    _stand_in_for_a_gpu()
    from verispec.engines.interpreter import repair_loop_counters, reuse_language_patch, skip_unasserted_overflow_checks

    reuse_language_patch()
    skip_unasserted_overflow_checks()
    repair_loop_counters()
    for owner, name in ((rejection, "RejectionSampler"), (rejection, "GREEDY_TEMPERATURE"), (sampler, "Sampler"),
                        (metadata, "SamplingMetadata"), (spec_metadata, "SpecDecodeMetadata")):
        if not hasattr(owner, name):
            raise EngineError(f"vLLM's {owner.__name__}.{name} is gone: an entry point moved; verispec's adapter "
                              f"knows releases {supported_range()}")
    return rejection, sampler, metadata, processors, spec_metadata


#: The streaming multiprocessors vLLM's top-k/top-p kernel is told of where no device answers (an H100's 132):
#: they set how many programs share the rows, not what a row computes.
STAND_IN_COMPUTE_UNITS = 132


def _stand_in_for_a_gpu() -> None:
    """vLLM asks its platform for the device's compute units to size the top-k/top-p kernel's grid; the platform
    of a CPU-only install raises NotImplementedError. Answer as an H100 would, on the platform object only (no file
    of vLLM is changed). Releases before 0.17 have no such method (the platform answers None for a missing name) and
    their kernel never asks."""
    from vllm.platforms import current_platform

    try:
        if callable(getattr(type(current_platform), "num_compute_units", None)):
            current_platform.num_compute_units(0)
    except NotImplementedError:
        current_platform.num_compute_units = lambda device_id=None: STAND_IN_COMPUTE_UNITS
    # vLLM stages host copies in pinned memory (the penalised output history, the penalties' row indices:
    # ``PIN_MEMORY``, read from the platform at import into each module that uses it; before 0.33 the function
    # ``is_pin_memory_available``, imported by name and called when a sampler is built or a batch penalised), and
    # torch refuses to pin without a device. Pinning changes where the same numbers sit, not the numbers: the flag
    # is set off, and the function answers False, in vLLM's modules where torch has no device.
    import sys

    import torch

    if not torch.cuda.is_available():
        for name, module in list(sys.modules.items()):
            if name.split(".")[0] != "vllm":
                continue
            if getattr(module, "PIN_MEMORY", None) is True:
                module.PIN_MEMORY = False
            if callable(getattr(module, "is_pin_memory_available", None)):
                module.is_pin_memory_available = _no_pinning


def _no_pinning() -> bool:
    """``is_pin_memory_available`` where torch has no device (``_stand_in_for_a_gpu``)."""
    return False


_ENGINE = {}


def _engine():
    if not _ENGINE:
        rejection, sampler, metadata, processors, spec_metadata = _load_engine()
        if "sampler" in inspect.signature(rejection.RejectionSampler.__init__).parameters:  # 0.11 on: bonus inside
            verify = rejection.RejectionSampler(sampler.Sampler())
        else:
            verify = RunnerOrder(rejection.RejectionSampler(), sampler.Sampler())
        _ENGINE.update(rejection=rejection, sampler_module=sampler, metadata=metadata, processors=processors,
                       spec_metadata=spec_metadata, sampler=verify)
    return _ENGINE


def _draft(draft_model, input_ids, num_draft_tokens, temperature, generators, with_probs: bool):
    """Each request's drafts from the draft model's raw logits: a draw from q = softmax(logits / T) (the request's
    generator, or torch's global one) with q handed over, or the argmax when greedy or without draft probs.
    -> (drafts: list of lists, draft_probs [num_tokens, V] float32 or None)."""
    import torch

    drafts, rows = [], []
    for request in range(input_ids.shape[0]):
        ids = input_ids[request:request + 1]
        chosen = []
        for _ in range(int(num_draft_tokens[request])):
            logits = draft_model(ids)[0, -1].to(torch.float32)  # [V]
            temp = float(temperature[request])
            probs = torch.softmax(logits / (temp if temp > 0 else 1.0), -1)
            if temp > 0 and with_probs:
                token = int(torch.multinomial(probs, 1, generator=generators.get(request)))
            else:
                token = int(torch.argmax(logits))
            chosen.append(token)
            rows.append(probs)
            ids = torch.cat([ids, torch.tensor([[token]], dtype=ids.dtype)], dim=1)
        drafts.append(chosen)
    return drafts, (torch.stack(rows) if with_probs and rows else None)


def _sampling_metadata(engine, temperature, top_k, top_p, generators, vocab_size: int, penalised=None,
                       logprobs: int | None = None, banned: dict | None = None, min_p=()):
    """vLLM's ``SamplingMetadata`` for the batch: per-request temperature (greedy as the release's own
    ``GREEDY_TEMPERATURE``), top-k and top-p where any request asks for them, the seeded requests' generators, the
    logits processors vLLM loads when speculative decoding is on (min-tokens only), and no penalties, or with
    ``penalised`` (``_penalties``' fields: prompt ids, output history, the three penalties, the drafts as
    ``spec_token_ids``, which vLLM's input batch fills when penalties are on) those; ``logprobs``: vLLM's
    ``max_num_logprobs`` (None: none asked); ``banned``: the fields ``_banned`` sets (a mask or bad words);
    ``min_p``: each request's min-p, which only releases before 0.10 read from here (``release_fields``)."""
    import torch

    rejection, metadata, processors = engine["rejection"], engine["metadata"], engine["processors"]
    greedy = float(rejection.GREEDY_TEMPERATURE)
    temps = torch.tensor([float(t) if float(t) > 0 else greedy for t in temperature], dtype=torch.float32)
    random = [float(t) > 0 for t in temperature]
    batch = len(random)
    k = [int(x) for x in top_k]
    p = [float(x) for x in top_p]
    fields = dict(
        temperature=temps, all_greedy=not any(random), all_random=all(random),
        top_p=torch.tensor(p, dtype=torch.float32) if any(x < 1.0 for x in p) else None,
        top_k=torch.tensor([x if x > 0 else vocab_size for x in k], dtype=torch.int32) if any(x > 0 for x in k)
        else None,
        generators=generators, max_num_logprobs=logprobs,
        **{"allowed_token_ids_mask": None, "bad_words_token_ids": {}, **(banned or {})},
        **(penalised or {
            "no_penalties": True, "prompt_token_ids": None, "frequency_penalties": torch.zeros(batch),
            "presence_penalties": torch.zeros(batch), "repetition_penalties": torch.ones(batch),
            "output_token_ids": [[] for _ in range(batch)]}))
    min_p = [float(x) for x in min_p]
    fields.update(min_p=torch.tensor(min_p, dtype=torch.float32) if any(x > 0 for x in min_p) else None,
                  min_tokens={}, logit_bias=[None] * batch)
    if processors is not None:  # LogitsProcessors from 0.10, LogitsProcessorManager in 0.9; none before
        manager = getattr(processors, "LogitsProcessors", None) or processors.LogitsProcessorManager
        fields["logitsprocs"] = manager()
    return metadata.SamplingMetadata(**release_fields(metadata.SamplingMetadata, fields))


def _penalties(input_ids, histories, drafts, repetition: float, frequency: float, presence: float) -> dict:
    """``SamplingMetadata``'s penalty fields for the batch, every request with the same three penalties: the prompts
    [B, P] int64, each request's earlier output, the penalties (float32, as vLLM's input batch holds them) and the
    drafts as ``spec_token_ids`` (an empty list for a request that drafted nothing, as vLLM's input batch has it)."""
    import torch

    batch = len(drafts)
    return {"no_penalties": False, "prompt_token_ids": input_ids.to(torch.int64),
            "output_token_ids": [list(map(int, history)) for history in histories],
            "spec_token_ids": [list(map(int, chosen)) for chosen in drafts],
            "repetition_penalties": torch.full((batch,), repetition, dtype=torch.float32),
            "frequency_penalties": torch.full((batch,), frequency, dtype=torch.float32),
            "presence_penalties": torch.full((batch,), presence, dtype=torch.float32)}


#: Whether ``_warm_up`` is running (its calls compile the kernels; their output is not checked).
_WARMING = [False]


def _verify(engine, drafts, target_rows, draft_probs, sampling_metadata, sampler: str = "sampler",
            with_logprobs: bool = False):
    """``RejectionSampler.forward`` on the batch, its output read by ``RejectionSampler.parse_output`` as vLLM's model
    runner reads it: ``target_rows`` [num_tokens + B, V] float32, each request's draft rows then its bonus row.
    -> each request's tokens [B, max drafts + 1] int64 padded with -1; ``with_logprobs``: and the ``LogprobsLists``
    ``parse_output`` returns (every request's emitted tokens in order)."""
    import torch

    metadata = engine["spec_metadata"].SpecDecodeMetadata.make_dummy(drafts, torch.device("cpu"))
    target, bonus, row = [], [], 0
    for chosen in drafts:  # make_dummy leaves the logits indices to the caller
        target += range(row, row + len(chosen))
        bonus.append(row + len(chosen))
        row += len(chosen) + 1
    metadata.target_logits_indices = torch.tensor(target, dtype=torch.int32)
    metadata.bonus_logits_indices = torch.tensor(bonus, dtype=torch.int32)
    metadata.logits_indices = torch.arange(row, dtype=torch.int32)
    output = engine[sampler](metadata, draft_probs, target_rows, sampling_metadata)
    if not _WARMING[0]:  # the checks' calls: a broken padding is the check's finding (RAISES), not the import's
        check_padding(output.sampled_token_ids, target_rows.shape[-1])
    # what the model runner hands each request: ``RejectionSampler.parse_output`` keeps a row's tokens that are not
    # the placeholder and lie inside the vocabulary (its own code, so a mutant of it is checked too)
    parse = getattr(engine["rejection"].RejectionSampler, "parse_output", None)
    if parse is None:
        return output.sampled_token_ids.to(torch.int64)
    rows, lists = parsed(parse, output, target_rows.shape[-1])
    emitted = torch.full(tuple(output.sampled_token_ids.shape), -1, dtype=torch.int64)
    for request, row in enumerate(rows):
        emitted[request, :len(row)] = torch.tensor(row, dtype=torch.int64)
    return (emitted, lists) if with_logprobs else emitted


def _v1_step(draft_model, target_model, input_ids, num_draft_tokens, temperature, top_k, top_p, min_p, seeds, *,
             seeded: bool, with_probs: bool, history=None, penalties: tuple = (), method: str = "", ban: str = ""):
    """The batch's step; ``history`` (each request's earlier output [B, H], which the models read after the
    prompt) and ``penalties`` (repetition, frequency, presence) for ``v1_single_penalties``; ``method``: verified by
    the sampler of that ``rejection_sample_method`` (``_method_sampler``; "" the plain one); ``ban``: the banned
    token's logit filled and the token banned again by vLLM (``_banned``)."""
    import torch

    engine = _engine()
    prompt_ids = input_ids
    if history is not None:
        input_ids = torch.cat([input_ids, history.to(input_ids.dtype)], dim=1)
    generators = {}
    if seeded:
        for request, temp in enumerate(temperature):
            if float(temp) > 0:  # vLLM makes a generator for each request with a seed that samples
                generators[request] = torch.Generator().manual_seed(int(seeds[request]))
    drafts, draft_probs = _draft(draft_model, input_ids, num_draft_tokens, temperature, generators, with_probs)
    if ban:
        target_model = _unbanned(target_model)
    prompt = input_ids.shape[1]
    rows = []
    for request, chosen in enumerate(drafts):
        ids = torch.cat([input_ids[request:request + 1], torch.tensor([chosen], dtype=input_ids.dtype)
                         .reshape(1, -1)], dim=1)
        rows.append(target_model(ids)[0, prompt - 1:].to(torch.float32))  # [len(chosen) + 1, V]
    vocab = rows[0].shape[-1]
    penalised = None if history is None else _penalties(prompt_ids, history.tolist(), drafts, *penalties)
    sampling = _sampling_metadata(engine, temperature, top_k, top_p, generators, vocab, penalised,
                                  banned=_banned(ban, drafts, vocab) if ban else None, min_p=min_p)
    return _verify(engine, drafts, torch.cat(rows), draft_probs, sampling,
                   _method_sampler(engine, method) if method else "sampler")


#: The token the ``v1-allowed-ids`` and ``v1-bad-words`` checks ban, and the logit the adapter gives it in the target's
#: rows: the check's problem gives the token no mass, the adapter fills its logit with the rows' largest (so a ban
#: left unapplied puts mass on it), and vLLM must ban it again, by an allowed-ids mask or a one-token bad word.
BANNED_TOKEN = 2
BANNED_LOGIT = 0.0


def _unbanned(model):
    """``model`` with ``BANNED_TOKEN``'s logits set to ``BANNED_LOGIT`` where the model gives it none (-inf);
    where it has mass, as it is (the check then wants that mass, and vLLM's ban moves the law)."""
    import torch

    def filled(ids):
        logits = model(ids).clone()
        column = logits[..., BANNED_TOKEN]
        logits[..., BANNED_TOKEN] = torch.where(torch.isinf(column), torch.full_like(column, BANNED_LOGIT), column)
        return logits

    return filled


def _banned(ban: str, drafts, vocab_size: int) -> dict:
    """``SamplingMetadata``'s fields that ban ``BANNED_TOKEN`` for every request: ``allowed_token_ids_mask`` True at
    it ("allowed-ids": every other token allowed), or the one-token bad word [BANNED_TOKEN] ("bad-words"), with the
    drafts as ``spec_token_ids`` (vLLM's input batch fills them when bad words are on: each draft row is banned after
    the drafts before it)."""
    import torch

    if ban == "allowed-ids":
        mask = torch.zeros((len(drafts), vocab_size), dtype=torch.bool)
        mask[:, BANNED_TOKEN] = True
        return {"allowed_token_ids_mask": mask}
    return {"bad_words_token_ids": {request: [[BANNED_TOKEN]] for request in range(len(drafts))},
            "spec_token_ids": [list(map(int, chosen)) for chosen in drafts]}


def _method_sampler(engine, method: str) -> str:
    """The key of a ``RejectionSampler`` built with ``rejection_sample_method`` ``method``: "fly" (``FLY``'s window,
    threshold and top-k) or "synthetic" (``SYNTHETIC_RATES``), as vLLM's own tests build them: a ``spec_config``
    namespace and no device (vLLM refuses FLy on a CPU device). EngineError where the release's V1 sampler does not
    take the method (it would verify as the plain sampler does)."""
    key = f"{method}_sampler"
    if key not in engine:
        from types import SimpleNamespace

        from verispec.engines.vllm import FLY, SYNTHETIC_RATES

        config = SimpleNamespace(rejection_sample_method=method, synthetic_acceptance_rates=list(SYNTHETIC_RATES),
                                 **FLY)
        built = engine["rejection"].RejectionSampler(engine["sampler_module"].Sampler(), config)
        if not getattr(built, "use_fly" if method == "fly" else "synthetic_mode", False):
            raise EngineError(f"this vLLM's V1 RejectionSampler has no rejection_sample_method {method!r} (release "
                              "0.33 has both FLy and synthetic acceptance)")
        engine[key] = built
    return key


def _batch_function(name: str, seeded: bool, with_probs: bool, doc: str):
    """A function of the ``step-ragged`` layout (its signature is the layout's contract) driving ``_v1_step``."""
    def step(draft_model, target_model, input_ids, num_draft_tokens, temperature, top_k, top_p, min_p, seeds):
        return _v1_step(draft_model, target_model, input_ids, num_draft_tokens, temperature, top_k, top_p, min_p,
                        seeds, seeded=seeded, with_probs=with_probs)

    step.__name__ = step.__qualname__ = name
    step.__doc__ = doc
    return step


v1_step_seeded = _batch_function(
    "v1_step_seeded", True, True, "V1 with a seed per request: vLLM's per-request ``torch.Generator``s (drafts, "
    "acceptance uniforms, recovery noise and bonus token each from the request's generator).")
v1_step_unseeded = _batch_function(
    "v1_step_unseeded", False, True, "V1 without request seeds: every draw from torch's global generator.")
v1_step_ngram = _batch_function(
    "v1_step_ngram", True, False, "V1 without draft probabilities (``draft_probs=None``, the kernels' NO_DRAFT_PROBS "
    "path): the drafts are the draft model's argmax, a point mass, as an n-gram proposer's are.")


def v1_greedy_batch(draft_lists, target_logits):
    """An all-greedy batch (``all_greedy``: the greedy kernel alone): request i drafted ``draft_lists[i]`` and its
    target logits are ``target_logits[i]`` [K + 1, V]. -> output_token_ids [B, K + 1] int64."""
    import torch

    engine = _engine()
    drafts = [list(map(int, chosen)) for chosen in draft_lists]
    rows = torch.cat([torch.as_tensor(logits, dtype=torch.float32) for logits in target_logits])
    batch = len(drafts)
    sampling = _sampling_metadata(engine, [0.0] * batch, [0] * batch, [1.0] * batch, {}, rows.shape[-1])
    return _verify(engine, drafts, rows, None, sampling)


def v1_greedy_logprobs(draft_lists, target_logits):
    """``v1_greedy_batch`` asking for logprobs (vLLM's ``max_num_logprobs=1`` in its default ``raw_logprobs`` mode:
    the target's log-softmax before any processing), read by ``parse_output`` as the model runner reads them.
    -> (tokens [B, K + 1] int64 padded with -1, logprobs [B, K + 1, 2] float64: each emitted token's, then the
    largest, NaN where nothing was emitted, their token ids [B, K + 1, 2] int64, -1 there)."""
    import numpy as np
    import torch

    engine = _engine()
    drafts = [list(map(int, chosen)) for chosen in draft_lists]
    rows = torch.cat([torch.as_tensor(logits, dtype=torch.float32) for logits in target_logits])
    batch = len(drafts)
    sampling = _sampling_metadata(engine, [0.0] * batch, [0] * batch, [1.0] * batch, {}, rows.shape[-1],
                                  logprobs=1)
    emitted, lists = _verify(engine, drafts, rows, None, sampling, with_logprobs=True)
    width = emitted.shape[1]
    logprobs, ids = np.full((batch, width, 2), np.nan), np.full((batch, width, 2), -1, dtype=np.int64)
    start = 0
    for request in range(batch):
        count = int((emitted[request] >= 0).sum())
        logprobs[request, :count] = np.asarray(lists.logprobs[start:start + count], dtype=np.float64)[:, :2]
        ids[request, :count] = np.asarray(lists.logprob_token_ids[start:start + count], dtype=np.int64)[:, :2]
        start += count
    return emitted, logprobs, ids


def _single(draft_model, target_model, input_ids, num_draft_tokens, temperature, top_k, top_p, min_p, seed, *,
            seeded: bool, with_probs: bool, method: str = "", ban: str = ""):
    """One request alone in its batch (the ``step`` layout): -> its emitted tokens [m + 1]."""
    out = _v1_step(draft_model, target_model, input_ids, [int(num_draft_tokens)], [float(temperature)],
                   [int(top_k)], [float(top_p)], [float(min_p)], [int(seed)], seeded=seeded, with_probs=with_probs,
                   method=method, ban=ban)
    row = out[0]
    return row[row >= 0]


def _single_function(name: str, seeded: bool, with_probs: bool):
    """A function of the ``step`` layout: the batch function of the same name, one request alone in its batch."""
    def step(draft_model, target_model, input_ids, num_draft_tokens, temperature, top_k, top_p, min_p, seed):
        return _single(draft_model, target_model, input_ids, num_draft_tokens, temperature, top_k, top_p, min_p,
                       seed, seeded=seeded, with_probs=with_probs)

    step.__name__ = step.__qualname__ = name
    step.__doc__ = f"``{name.replace('single', 'step')}`` for one request alone in its batch (``step`` layout)."
    return step


def _penalised(draft_model, target_model, input_ids, output_ids, num_draft_tokens, temperature, top_k, top_p, min_p,
               penalties: tuple, seed, *, behind_empty: bool):
    """One request of the ``step-penalties`` layout, alone in its batch or (``behind_empty``) second behind a greedy
    request that drafted nothing, with the same prompt and penalties and an earlier output of its own (token 0 where
    the checked request's is V - 1). -> the checked request's emitted tokens [m + 1]."""
    import torch

    if behind_empty:
        batch = dict(input_ids=input_ids.repeat(2, 1), num_draft_tokens=[0, int(num_draft_tokens)],
                     temperature=[0.0, float(temperature)], top_k=[0, int(top_k)], top_p=[1.0, float(top_p)],
                     min_p=[0.0, float(min_p)], seeds=[0, int(seed)],
                     history=torch.cat([torch.zeros_like(output_ids), output_ids]))
    else:
        batch = dict(input_ids=input_ids, num_draft_tokens=[int(num_draft_tokens)], temperature=[float(temperature)],
                     top_k=[int(top_k)], top_p=[float(top_p)], min_p=[float(min_p)], seeds=[int(seed)],
                     history=output_ids)
    out = _v1_step(draft_model, target_model, seeded=True, with_probs=False,
                   penalties=tuple(float(value) for value in penalties), **batch)
    row = out[-1]
    return row[row >= 0]


def v1_single_penalties(draft_model, target_model, input_ids, output_ids, num_draft_tokens, temperature, top_k, top_p,
                        min_p, repetition_penalty, frequency_penalty, presence_penalty, seed):
    """``v1_single_ngram`` with the request's earlier output and its repetition, frequency and presence penalties
    (the ``step-penalties`` layout): vLLM penalises each draft position's target logits after the output and the
    drafts before it (``RejectionSampler._combine_outputs_with_spec_tokens``) and the bonus token's after all of
    them. The drafts are the draft model's argmax without draft probs: penalties act on the target side, and
    without drafting noise the exact law costs a third of the evaluations. -> the emitted tokens [m + 1]."""
    return _penalised(draft_model, target_model, input_ids, output_ids, num_draft_tokens, temperature, top_k, top_p,
                      min_p, (repetition_penalty, frequency_penalty, presence_penalty), seed, behind_empty=False)


def v1_ragged_penalties(draft_model, target_model, input_ids, output_ids, num_draft_tokens, temperature, top_k, top_p,
                        min_p, repetition_penalty, frequency_penalty, presence_penalty, seed):
    """``v1_single_penalties`` with the request second in its batch, behind a greedy request that drafted nothing
    (``_penalised``): vLLM lines each draft row up with its request's history by skipping the requests without
    drafts, so a row read against the other request's history moves the checked law. -> the emitted tokens."""
    return _penalised(draft_model, target_model, input_ids, output_ids, num_draft_tokens, temperature, top_k, top_p,
                      min_p, (repetition_penalty, frequency_penalty, presence_penalty), seed, behind_empty=True)


#: Drafts of the greedy request ``v1_behind_greedy`` puts first: more than the checked request's one, so the batch's
#: longest draft list (the rows' stride, max_spec_len + 1) is not the checked request's own.
BEHIND_DRAFTS = 2


def v1_behind_greedy(draft_model, target_model, input_ids, num_draft_tokens, temperature, top_k, top_p, min_p, seed):
    """``v1_single_seeded`` with the request second in its batch, behind a greedy request that drafted
    ``BEHIND_DRAFTS`` tokens (its draft model's argmax): the checked request's rows start at ``BEHIND_DRAFTS``, not
    0, and the output rows' stride is ``BEHIND_DRAFTS + 1``, not its own, so a kernel that reads or writes another
    request's rows, or strides the output by another width, moves the checked law. -> its emitted tokens."""
    count = int(num_draft_tokens)
    out = _v1_step(draft_model, target_model, input_ids.repeat(2, 1), [BEHIND_DRAFTS, count], [0.0, float(temperature)],
                   [0, int(top_k)], [1.0, float(top_p)], [0.0, float(min_p)], [0, int(seed)], seeded=True,
                   with_probs=True)
    row = out[-1]
    return row[row >= 0]


def v1_single_fly(draft_model, target_model, input_ids, num_draft_tokens, temperature, top_k, top_p, min_p, seed):
    """``v1_single_seeded`` verified by vLLM's V1 FLy (Li et al. 2025, arXiv 2511.22972; ``rejection_sample_method
    = "fly"``, release 0.33 on: a pre-pass that sets a rejected position's uniform to 0 when the target's top-k
    entropy there reaches the threshold and the next ``fly_window_size`` drafts pass natively). Lossy by design.
    -> the emitted tokens [m + 1]."""
    return _single(draft_model, target_model, input_ids, num_draft_tokens, temperature, top_k, top_p, min_p, seed,
                   seeded=True, with_probs=True, method="fly")


def v1_single_synthetic(draft_model, target_model, input_ids, num_draft_tokens, temperature, top_k, top_p, min_p,
                        seed):
    """``v1_single_seeded`` verified by vLLM's synthetic acceptance (``rejection_sample_method = "synthetic"`` with
    ``synthetic_acceptance_rates`` ``SYNTHETIC_RATES``: draft i accepted when the request's uniform falls below the
    conditional rate a_i / a_(i-1), whatever the target says; a benchmarking mode). Lossy by design.
    -> the emitted tokens [m + 1]."""
    return _single(draft_model, target_model, input_ids, num_draft_tokens, temperature, top_k, top_p, min_p, seed,
                   seeded=True, with_probs=True, method="synthetic")


def v1_single_synthetic_greedy(draft_model, target_model, input_ids, num_draft_tokens, temperature, top_k, top_p,
                               min_p, seed):
    """``v1_single_synthetic`` for a greedy request (temperature 0 whatever ``temperature`` says): vLLM's greedy
    kernel's synthetic branch (draft i accepted when the uniform falls below the conditional rate, else the target's
    argmax), which a sampling request never reaches. On a problem whose target and draft are point masses greedy
    decoding and sampling have one law, verispec's synthetic rule's (the residual of a point mass is its argmax).
    -> the emitted tokens [m + 1]."""
    return _single(draft_model, target_model, input_ids, num_draft_tokens, 0.0, top_k, top_p, min_p, seed,
                   seeded=True, with_probs=True, method="synthetic")


def v1_single_allowed_ids(draft_model, target_model, input_ids, num_draft_tokens, temperature, top_k, top_p, min_p,
                          seed):
    """``v1_single_seeded`` with vLLM's ``allowed_token_ids`` leaving out ``BANNED_TOKEN``, whose logit the adapter
    fills (``_unbanned``): the check's problem gives it no mass, so the law is the target's only where vLLM bans it
    in every row (draft rows and bonus). -> the emitted tokens [m + 1]."""
    return _single(draft_model, target_model, input_ids, num_draft_tokens, temperature, top_k, top_p, min_p, seed,
                   seeded=True, with_probs=True, ban="allowed-ids")


def v1_single_bad_words(draft_model, target_model, input_ids, num_draft_tokens, temperature, top_k, top_p, min_p,
                        seed):
    """``v1_single_allowed_ids`` with the one-token bad word [``BANNED_TOKEN``] banning it instead (vLLM's
    ``apply_bad_words_with_drafts`` on the draft rows, the Sampler's bad words on the bonus row). -> the emitted
    tokens [m + 1]."""
    return _single(draft_model, target_model, input_ids, num_draft_tokens, temperature, top_k, top_p, min_p, seed,
                   seeded=True, with_probs=True, ban="bad-words")


v1_single_seeded = _single_function("v1_single_seeded", True, True)
v1_single_unseeded = _single_function("v1_single_unseeded", False, True)
v1_single_ngram = _single_function("v1_single_ngram", True, False)


def _warm_up() -> None:
    """One call of each route with constant logits, outside any capture (module docstring)."""
    _WARMING[0] = True
    try:
        _warm_up_routes()
    finally:
        _WARMING[0] = False


def _warm_up_routes() -> None:
    import torch

    def model(ids):
        return torch.zeros((ids.shape[0], ids.shape[1], 3), dtype=torch.float64)

    ids = torch.zeros((3, 3), dtype=torch.int64)
    try:
        for seeded, with_probs in ((True, True), (False, True), (True, False)):
            _v1_step(model, model, ids, [1, 1, 0], [0.0, 1.0, 0.0], [0] * 3, [1.0] * 3, [0.0] * 3, [1, 2, 3],
                     seeded=seeded, with_probs=with_probs)
        _single(model, model, ids[:1], 1, 1.0, 0, 1.0, 0.0, 1, seeded=True, with_probs=True)
        v1_greedy_batch([[0], [1]], [torch.zeros((2, 3)), torch.zeros((2, 3))])
    except Exception as error:  # a kernel of every route: no check could run
        if type(error).__name__ != "InterpreterError":
            raise
        raise EngineError(f"Triton's interpreter cannot run a kernel of vLLM's sampler ({error}); nothing was "
                          "checked") from None
    try:  # top-k and top-p run a kernel of their own, which the interpreter may not run: the check says so
        _v1_step(model, model, ids, [1, 1, 0], [0.0, 1.0, 0.0], [0, 2, 0], [1.0, 0.75, 1.0], [0.0] * 3, [1, 2, 3],
                 seeded=True, with_probs=True)
    except Exception:  # reported by the check that asks for top-k or top-p (UNRUNNABLE)
        pass

_warm_up()
