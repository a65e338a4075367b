"""vLLM's V2 model runner's probabilistic rejection sampler driven in verispec's ``step`` layout.

The V2 model runner (``vllm/v1/worker/gpu``) drafts a probabilistic token with ``gumbel_sample``
(``vllm/v1/worker/gpu/sample/gumbel.py``): the argmax of logits / T plus Gumbel noise computed inside the kernel
from ``tl.rand(tl.randint(seed, pos), token)``, keyed by the request's seed and the position, the draft's raw
logits kept in a cache for the verifier. ``rejection_sample`` (``vllm/v1/worker/gpu/spec_decode/
rejection_sampler_utils.py``, from release 0.22; ``probabilistic_rejection_sample`` in
``probabilistic_rejection_sampler_utils.py`` in 0.20 and 0.21, with the same arguments) accepts draft x at a
position when ``log p(x) > log u + log q(x)`` with u = ``tl.rand(seed, pos)`` and, at the first rejection, resamples
from the residual ``max(p - q, 0)`` by the same Gumbel-max kernel, keyed by the same (seed, pos). Where the
draft's noise and the resample's share a key, the resample races the very noise that chose the rejected draft (vLLM
#47386); release 0.29 salts the draft's positions (#54282, ``_DRAFT_NOISE_SALT``).

What is vLLM's and what is verispec's: the drafting *kernel* is vLLM's (``gumbel_sample`` called as the
speculator calls it: ``is_drafting=True`` where the release has it, the draft logits cached under the release's
own argument names), and so are the verification kernels and every draw. verispec stands for the draft and target
models (their logits) and for the input batch: one request, the drafted token at sequence position P + k keyed
by position P + k - 1 (the speculator's ``positions + 1``: the position whose logits row verifies it), and the
verification rows at positions P - 1 ... P + K - 1. Sampling parameters other than temperature (penalties, top-k,
top-p, applied by the runner's ``Sampler.apply_sampling_params`` before ``rejection_sample``) are not applied.

Under ``verispec check-external --rng capture`` every ``tl.rand`` is one of verispec's keyed uniforms, read by its
(seed, offset) key (``verispec.external.rng.triton_races``), and a Gumbel-max race over them is read as one categorical
draw, so the law of a step is exact. From release 0.31 the Gumbel noise is ``murmur3_uniform32(seed, pos, token)``,
a hash computed in the kernel: it is fed the same way, keyed by (seed, pos) with the token as the lane, and so is
``tl_rand64``, the acceptance uniform up to 0.24 (``_feed_hashed_noise``); the draft's keys then differ from the
resample's by the step mixed into the seed (``spec_step_seed``) and by ``_DRAFT_NOISE_SALT``.

Adaptive verification (``v2_adaptive``, release 0.28 on) adds a second request and vLLM's own admission function,
``_assign_draft_token_budget`` (``adaptive_verification.py``), between drafting and verification: verispec stands
for the confidence head (``ADAPTIVE_CONFIDENCE``, read from the token before each slot) and for the cost model (the
budget), vLLM decides how many of each request's drafts are verified.
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
from verispec.engines.vllm import ADAPTIVE_CONFIDENCE, FLY, LILICORR_COUPLING, NEIGHBOUR_CONFIDENCE

#: The modules of the V2 path.
GUMBEL_MODULE = "vllm.v1.worker.gpu.sample.gumbel"
REJECTION_MODULE = "vllm.v1.worker.gpu.spec_decode.rejection_sampler_utils"
#: The V2 runner's verification module of releases 0.20 and 0.21 and its entry point there: the same arguments as
#: ``rejection_sample`` (the kernels differ; 0.20 and 0.21 read the draft's logits only, 0.22 also runs without them).
EARLIER_MODULE = "vllm.v1.worker.gpu.spec_decode.probabilistic_rejection_sampler_utils"
EARLIER_ENTRY = "probabilistic_rejection_sample"
#: ``gumbel_sample``'s argument names for the draft-logits cache and its column, newest first; 0.20 takes the
#: step's own [num_reqs, V] slice of the cache and no column (its speculator passes ``draft_logits[:, step]``).
_CACHE_NAMES = (("logits_cache", "logits_cache_col"), ("output_processed_logits", "output_processed_logits_col"),
                ("processed_logits_out", None))

_ENGINE = {}


def _engine() -> dict:
    """vLLM's ``gumbel_sample`` and ``rejection_sample`` with what the adapter reads of their signatures;
    EngineError in one line when the release has no such entry points."""
    if _ENGINE:
        return _ENGINE
    import importlib

    from verispec.engines.vllm import supported_range

    try:
        gumbel = importlib.import_module(GUMBEL_MODULE)
        module, entry = REJECTION_MODULE, "rejection_sample"
        if not module_present(REJECTION_MODULE) and module_present(EARLIER_MODULE):
            module, entry = EARLIER_MODULE, EARLIER_ENTRY
        rejection = importlib.import_module(module)
    except ImportError as error:
        raise EngineError(f"this vLLM has no V2 rejection sampler ({type(error).__name__}: {error}); the V2 checks "
                          f"need release 0.20 or later (verispec's adapter knows {supported_range()})") from None
    except Exception as error:  # the wheel's own import: one line, never a verdict
        raise EngineError(f"vLLM's V2 sampler fails to import on this machine ({type(error).__name__}: "
                          f"{str(error).splitlines()[0] if str(error) else ''})") from None
    _feed_hashed_noise(gumbel, rejection)  # tl_rand64 (up to 0.30) and murmur3 (0.31 on): fed as keyed uniforms
    sample = getattr(gumbel, "gumbel_sample", None)
    verify = getattr(rejection, entry, None)
    if sample is None or verify is None:
        raise EngineError(f"vLLM's V2 gumbel_sample or {entry} is gone: an entry point moved; verispec's "
                          f"adapter knows releases {supported_range()}")
    sample_parameters = inspect.signature(sample).parameters
    verify_parameters = inspect.signature(verify).parameters
    cache = next((names for names in _CACHE_NAMES if names[0] in sample_parameters), None)
    needed = ("target_logits", "draft_logits", "draft_sampled", "cu_num_logits", "pos", "idx_mapping",
              "expanded_idx_mapping", "expanded_local_pos", "temperature", "seed", "num_speculative_steps")
    if cache is None or any(name not in verify_parameters for name in needed):
        raise EngineError("vLLM's V2 gumbel_sample keeps no draft-logits cache, or rejection_sample takes other "
                          f"arguments: an entry point moved; verispec's adapter knows releases {supported_range()}")
    from verispec.engines.interpreter import (
        repair_loop_counters,
        repair_masks,
        reuse_language_patch,
        skip_unasserted_overflow_checks,
        supply_libdevice,
    )

    repair_masks()
    supply_libdevice()
    repair_loop_counters()
    reuse_language_patch()
    skip_unasserted_overflow_checks()
    _ENGINE.update(sample=sample, verify=verify, cache=cache, drafting="is_drafting" in sample_parameters,
                   block="use_block_verification" in verify_parameters,
                   fly=all(name in verify_parameters for name in FLY))
    return _ENGINE


def _feed_hashed_noise(gumbel, rejection) -> None:
    """The V2 runner's uniforms that are not ``tl.rand``'s, fed as keyed uniforms under a capture
    (``rng.triton_random.feed_hashed_uniform``); outside a capture vLLM's own functions run.

    - Up to release 0.30, ``tl_rand64(seed, offset)`` (the acceptance uniform up to 0.24, the Gumbel noise with
      ``use_fp64``): a float64 uniform from two words of ``tl.randint4x`` (Philox), keyed by the seed, the offset
      its lane.
    - From release 0.31, ``murmur3_uniform32(seed, pos, token)`` (and ``murmur3_uniform64`` with ``use_fp64``): the
      Gumbel noise as a hash computed in the kernel, keyed by (seed, pos), the token its lane, taken through
      ``_log1p_neg_stable`` (a series for log(1 - u) near 0), read as log(1 - u), so the race is read as one
      categorical draw, as ``tl.rand``'s are."""
    from verispec.external.rng.triton_random import feed_hashed_uniform, read_as_log1p_neg

    for module in (gumbel, rejection):
        if hasattr(module, "tl_rand64"):
            feed_hashed_uniform(module.__name__, "tl_rand64", ("seed",), "offset", "float64")
    for function, dtype in (("murmur3_uniform32", "float32"), ("murmur3_uniform64", "float64")):
        if hasattr(gumbel, function):
            feed_hashed_uniform(GUMBEL_MODULE, function, ("seed", "pos"), "offset", dtype)
    if hasattr(gumbel, "_log1p_neg_stable"):
        read_as_log1p_neg(GUMBEL_MODULE, "_log1p_neg_stable")


def _v2_step(draft_model, target_model, input_ids, num_draft_tokens: int, temperature: float, seed: int, *,
             block_verification: bool, fly: bool = False):
    """One request's speculative step through vLLM's V2 kernels. -> its emitted tokens [accepted + 1] int64."""
    import numpy as np

    with np.errstate(invalid="ignore", divide="ignore"):  # the interpreter computes masked lanes too (-inf logits)
        return _v2_kernels(draft_model, target_model, input_ids, num_draft_tokens, temperature, seed,
                           block_verification=block_verification, fly=fly)


def _drafts(engine, draft_model, input_ids, steps: int, temp, seeds, requests: int = 1):
    """Request 0's drafts by vLLM's ``gumbel_sample`` as its speculator calls it, the draft's logits cached under the
    release's argument names. -> (drafts, the cache [requests, max(K, 1), V] float32)."""
    import torch

    prompt, ids, drafts = input_ids.shape[1], input_ids[:1], []
    vocab = int(draft_model(ids).shape[-1])
    draft_logits = torch.zeros((requests, max(steps, 1), vocab), dtype=torch.float32)  # [max_num_reqs, K, V]
    cache, column = engine["cache"]
    for step in range(steps):
        logits = draft_model(ids)[0, -1:].to(torch.float32).contiguous()  # [1, V]
        options = ({cache: draft_logits, column: torch.tensor(step, dtype=torch.int64)} if column
                   else {cache: draft_logits[:, step]})
        if engine["drafting"]:
            options["is_drafting"] = True
        position = torch.tensor([prompt - 1 + step], dtype=torch.int64)  # the speculator's positions + 1
        token = engine["sample"](logits, torch.zeros(1, dtype=torch.int32), temp, seeds, position,
                                 apply_temperature=True, **options)
        drafts.append(int(token.reshape(-1)[0]))
        ids = torch.cat([ids, torch.tensor([[drafts[-1]]], dtype=ids.dtype)], dim=1)
    return drafts, draft_logits


def _v2_kernels(draft_model, target_model, input_ids, num_draft_tokens: int, temperature: float, seed: int, *,
                block_verification: bool, fly: bool):
    import torch

    engine = _engine()
    if block_verification and not engine["block"]:  # a moved argument (the check's ``since`` keeps older releases)
        raise EngineError("this vLLM's rejection_sample has no block verification (use_block_verification: "
                          "release 0.25 or later)")
    if fly and not engine["fly"]:
        raise EngineError("this vLLM's V2 rejection_sample has no FLy (fly_window_size: release 0.33 or later)")
    steps = int(num_draft_tokens)
    temp = torch.tensor([float(temperature)], dtype=torch.float32)
    seeds = torch.tensor([int(seed)], dtype=torch.int64)
    drafts, draft_logits = _drafts(engine, draft_model, input_ids, steps, temp, seeds)
    options = {"use_block_verification": True} if block_verification else {}
    if fly:
        options.update(FLY)
    return _verify(engine, target_model, input_ids, drafts, draft_logits, temp, seeds, **options)


def _verify(engine, target_model, input_ids, drafts: list[int], draft_logits, temp, seeds, **options):
    """One request's drafts verified by vLLM's ``rejection_sample`` against the target's rows, the draft's logits
    as its speculator cached them ([1, max(K, 1), V]). -> its emitted tokens [accepted + 1] int64."""
    import torch

    steps, prompt = len(drafts), input_ids.shape[1]
    ids = torch.cat([input_ids[:1], torch.tensor([drafts], dtype=input_ids.dtype)], dim=1)
    target_rows = target_model(ids)[0, prompt - 1:].to(torch.float32).contiguous()  # [K + 1, V]
    rows = steps + 1
    draft_sampled = torch.tensor([int(input_ids[0, -1]), *drafts], dtype=torch.int64)  # the rows' input tokens
    sampled, num_sampled = engine["verify"](
        target_logits=target_rows, draft_logits=draft_logits, draft_sampled=draft_sampled,
        cu_num_logits=torch.tensor([0, rows], dtype=torch.int32),
        pos=torch.arange(prompt - 1, prompt - 1 + rows, dtype=torch.int64),
        idx_mapping=torch.zeros(1, dtype=torch.int32), expanded_idx_mapping=torch.zeros(rows, dtype=torch.int32),
        expanded_local_pos=torch.arange(rows, dtype=torch.int32), temperature=temp, seed=seeds,
        num_speculative_steps=max(steps, 1), **options)
    count = int(num_sampled.reshape(-1)[0])
    return sampled[0, :count].to(torch.int64)


#: Where vLLM's adaptive verification admits draft slots (release 0.28 on).
ADAPTIVE_MODULE = "vllm.v1.worker.gpu.spec_decode.adaptive_verification"


def _greedy_drafts(draft_model, input_ids, steps: int) -> list[int]:
    """A greedy neighbour's drafts: the draft model's argmax at each step (it draws nothing)."""
    import torch

    ids, drafts = input_ids[:1], []
    for _ in range(steps):
        drafts.append(int(draft_model(ids)[0, -1].argmax()))
        ids = torch.cat([ids, torch.tensor([[drafts[-1]]], dtype=ids.dtype)], dim=1)
    return drafts


def _adaptive_kernels(draft_model, target_model, input_ids, num_draft_tokens: int, temperature: float, seed: int,
                      *, own_token: bool):
    """The checked request and a greedy neighbour, both drafting ``num_draft_tokens``; vLLM's
    ``_assign_draft_token_budget`` (the function its runner compiles) admits the globally best slots by survival,
    the running product of the confidences, under a budget of all slots but one (verispec stands for the cost
    model, which reads the previous step only); ``rejection_sample`` verifies each request's admitted prefix.
    ``own_token``: a planted confidence that reads the slot's own draft (a negative control). -> the checked
    request's emitted tokens."""
    import importlib

    import torch

    engine = _engine()
    try:
        admit = importlib.import_module(ADAPTIVE_MODULE)._assign_draft_token_budget
    except (ImportError, AttributeError) as error:
        raise EngineError(f"this vLLM has no adaptive verification ({type(error).__name__}: {error}; "
                          "enable_adaptive_verification: release 0.28 or later)") from None
    steps, prompt = int(num_draft_tokens), input_ids.shape[1]
    temp = torch.tensor([float(temperature), 0.0], dtype=torch.float32)  # the neighbour greedy
    seeds = torch.tensor([int(seed), int(seed) + 1], dtype=torch.int64)  # each request keyed by its own seed
    drafts, draft_logits = _drafts(engine, draft_model, input_ids, steps, temp[:1], seeds[:1], requests=2)
    neighbour = _greedy_drafts(draft_model, input_ids, steps)
    before = [int(input_ids[0, -1]), *drafts]  # slot i's previous token is before[i]; its own is before[i + 1]
    read = before[1:] if own_token else before[:-1]
    confidence = torch.tensor([[ADAPTIVE_CONFIDENCE[token % len(ADAPTIVE_CONFIDENCE)] for token in read],
                               [NEIGHBOUR_CONFIDENCE] * steps], dtype=torch.float32)  # [2, K]
    capacities = torch.tensor([steps, steps], dtype=torch.int32)
    admit(confidence, torch.tensor([0, 1], dtype=torch.int64), capacities, 2 * steps - 1, steps)
    admitted = [int(count) for count in capacities]
    rows, tokens, positions, local = [], [], [], []
    for request, ids in enumerate((drafts, neighbour)):
        sequence = torch.cat([input_ids[:1], torch.tensor([ids[:admitted[request]]], dtype=input_ids.dtype)], dim=1)
        rows.append(target_model(sequence)[0, prompt - 1:].to(torch.float32))  # [admitted + 1, V]
        tokens += [int(input_ids[0, -1]), *ids[:admitted[request]]]
        positions += range(prompt - 1, prompt + admitted[request])
        local += range(admitted[request] + 1)
    counts = [admitted[0] + 1, admitted[1] + 1]
    sampled, num_sampled = engine["verify"](
        target_logits=torch.cat(rows).contiguous(), draft_logits=draft_logits,
        draft_sampled=torch.tensor(tokens, dtype=torch.int64),
        cu_num_logits=torch.tensor([0, counts[0], sum(counts)], dtype=torch.int32),
        pos=torch.tensor(positions, dtype=torch.int64), idx_mapping=torch.tensor([0, 1], dtype=torch.int32),
        expanded_idx_mapping=torch.tensor([0] * counts[0] + [1] * counts[1], dtype=torch.int32),
        expanded_local_pos=torch.tensor(local, dtype=torch.int32), temperature=temp, seed=seeds,
        num_speculative_steps=steps)
    return sampled[0, :int(num_sampled[0])].to(torch.int64)


def v2_adaptive(draft_model, target_model, input_ids, num_draft_tokens, temperature, top_k, top_p, min_p, seed):
    """Adaptive verification (vLLM's ``enable_adaptive_verification``, release 0.28 on): the checked request's
    verified draft length is chosen after drafting, from confidences that read its drafted tokens (``ADAPTIVE_
    CONFIDENCE``), by vLLM's own admission function, then verified by ``rejection_sample``. Temperature only."""
    import numpy as np

    with np.errstate(invalid="ignore", divide="ignore"):
        return _adaptive_kernels(draft_model, target_model, input_ids, num_draft_tokens, temperature, seed,
                                 own_token=False)


#: Where the candidate walk of DFlash2 (release 0.28 on) and LiLiCorr (0.31 on) lives: its two kernels.
CANDIDATE_MODULE = "vllm.v1.worker.gpu.spec_decode.dflash2.speculator"


def _candidate_kernels(draft_model, target_model, input_ids, num_draft_tokens: int, temperature: float, seed: int):
    """One request drafted by vLLM's candidate walk and verified by ``rejection_sample``.

    DFlash2 and LiLiCorr draft all K positions from one parallel forward: each position gets top-k candidates from
    a unary head, and a pairwise head scores position s's candidates given each candidate of position s - 1
    (scores [reqs, K, top_k, top_k]). vLLM's ``_selector_walk_kernel`` walks them with Gumbel-max: at step s it
    reads the row of the candidate drawn at s - 1, draws, and stores that row as the realized scores;
    ``_cache_draft_logits_kernel`` writes the realized scores at the candidates' token ids into the draft-logits
    cache (-inf elsewhere), which ``rejection_sample`` reads as q. verispec stands for the two heads: the unary logits
    are the draft model's at the prompt (the heads read the prompt only), the candidates all V tokens in the order
    ``torch.topk`` gives them, and the pairwise score adds ``LILICORR_COUPLING[previous token][token]`` to the unary
    one. The draft law of position s then depends on the token drawn before it, so a q read from another row than
    the one drawn from (the question the issue asks of LiLiCorr) shows in the law. -> the emitted tokens."""
    import importlib

    import torch

    engine = _engine()
    try:
        walk = importlib.import_module(CANDIDATE_MODULE)
        walk_kernel, cache_kernel = walk._selector_walk_kernel, walk._cache_draft_logits_kernel
    except (ImportError, AttributeError) as error:
        raise EngineError(f"this vLLM has no candidate walk ({type(error).__name__}: {error}; DFlash2 from release "
                          "0.28, LiLiCorr from 0.31)") from None
    steps, prompt = int(num_draft_tokens), input_ids.shape[1]
    unary = draft_model(input_ids[:1])[0, -1].to(torch.float32)  # [V]
    vocab = top_k = int(unary.shape[0])
    order = torch.sort(unary, descending=True, stable=True).indices  # the candidates, as topk orders them
    coupling = torch.tensor([[LILICORR_COUPLING[a % len(LILICORR_COUPLING)][t % len(LILICORR_COUPLING)]
                              for t in range(vocab)] for a in range(vocab)], dtype=torch.float32)  # [V, V]
    scores = unary[order].repeat(1, steps, top_k, 1)  # [1, K, top_k (previous), top_k]
    scores[0, 1:] += coupling[order][:, order]  # step s >= 1: the row of previous candidate j
    candidates = order.repeat(steps, 1).contiguous()  # [K, top_k]
    draft_logits = torch.full((1, max(steps, 1), vocab), float("-inf"), dtype=torch.float32)  # the speculator's fill
    realized = torch.empty((1, steps, top_k), dtype=torch.float32)
    drafts = torch.zeros((1, steps), dtype=torch.int64)
    idx_mapping = torch.zeros(steps, dtype=torch.int64)
    temp = torch.tensor([float(temperature)], dtype=torch.float32)
    seeds = torch.tensor([int(seed)], dtype=torch.int64)
    block = 1 << (top_k - 1).bit_length()  # triton.next_power_of_2
    walk_kernel[(1,)](scores.contiguous(), candidates, torch.arange(prompt, prompt + steps, dtype=torch.int64),
                      idx_mapping, temp, seeds, drafts, realized, num_steps=steps, top_k=top_k, BLOCK_K=block,
                      SAMPLE_PROBABILISTIC=True, USE_FP64=False, num_warps=1)
    cache_kernel[(steps,)](draft_logits, torch.zeros((1, steps, top_k), dtype=torch.int64), candidates, realized,
                           idx_mapping, draft_logits.stride(0), draft_logits.stride(1), num_steps=steps, top_k=top_k,
                           BLOCK_K=block, num_warps=1)
    return _verify(engine, target_model, input_ids, [int(token) for token in drafts[0]], draft_logits, temp, seeds)


def v2_lilicorr(draft_model, target_model, input_ids, num_draft_tokens, temperature, top_k, top_p, min_p, seed):
    """The candidate walk of DFlash2 and LiLiCorr (``_candidate_kernels``): drafts drawn by vLLM's walk kernel from
    pairwise scores, their q written by its cache kernel, verified by ``rejection_sample``. Temperature only."""
    import numpy as np

    with np.errstate(invalid="ignore", divide="ignore"):
        return _candidate_kernels(draft_model, target_model, input_ids, num_draft_tokens, temperature, seed)


def v2_single(draft_model, target_model, input_ids, num_draft_tokens, temperature, top_k, top_p, min_p, seed):
    """The ``step`` layout: one request through the V2 runner's drafting ``gumbel_sample`` and its probabilistic
    ``rejection_sample`` (module docstring). Temperature only (top-k, top-p and min-p are not applied)."""
    return _v2_step(draft_model, target_model, input_ids, num_draft_tokens, temperature, seed,
                    block_verification=False)


def v2_block(draft_model, target_model, input_ids, num_draft_tokens, temperature, top_k, top_p, min_p, seed):
    """``v2_single`` with ``use_block_verification=True`` (block verification, Sun et al. 2024; release 0.25 on)."""
    return _v2_step(draft_model, target_model, input_ids, num_draft_tokens, temperature, seed,
                    block_verification=True)


def v2_fly(draft_model, target_model, input_ids, num_draft_tokens, temperature, top_k, top_p, min_p, seed):
    """``v2_single`` with FLy (Li et al. 2025, arXiv 2511.22972; vLLM's ``fly_window_size``, release 0.33 on): a
    rejected draft is deferred while the target's top-3 entropy is at least the threshold and kept when the next
    ``fly_window_size`` drafts are accepted natively (``FLY``). Lossy by design."""
    return _v2_step(draft_model, target_model, input_ids, num_draft_tokens, temperature, seed,
                    block_verification=False, fly=True)


def _warm_up() -> None:
    """One call of each route with constant logits, outside any capture (what vLLM imports lazily is imported
    here, not inside a checked call)."""
    import torch

    def model(ids):
        return torch.zeros((ids.shape[0], ids.shape[1], 3), dtype=torch.float64)

    ids = torch.zeros((1, 3), dtype=torch.int64)
    _v2_step(model, model, ids, 1, 1.0, 1, block_verification=False)
    if _engine()["block"]:
        _v2_step(model, model, ids, 1, 1.0, 1, block_verification=True)
    if _engine()["fly"]:
        _v2_step(model, model, ids, 2, 1.0, 1, block_verification=False, fly=True)
    if module_present(ADAPTIVE_MODULE):
        _adaptive_kernels(model, model, ids, 2, 1.0, 1, own_token=False)
    if module_present(CANDIDATE_MODULE):
        _candidate_kernels(model, model, ids, 2, 1.0, 1)


_warm_up()
