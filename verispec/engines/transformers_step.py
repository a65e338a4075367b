"""transformers' assisted generation driven in verispec's ``step`` layout (the functions ``verispec check-engine
transformers`` checks).

``assisted_generate`` runs ``GenerationMixin.generate(input_ids, assistant_model=..., do_sample=True)`` of the
installed release, unmodified, on two stand-in models: ``PreTrainedModel``s with no weights whose forward returns
verispec's raw logits for the whole sequence (``verispec.external.step``'s ``LogitsModel``). Everything between the
two models is transformers' own code: the processor list from the request's sampling, the
``AssistedCandidateGenerator`` (the assistant's own ``generate``, its float32 scores handed back as
``candidate_logits``), the target's per-position processing, ``_speculative_sampling`` (Leviathan et al. 2023,
Algorithm 1), the candidate-length bookkeeping of a second round, every draw on torch's global generator seeded by
``transformers.set_seed`` as a user's script does.

The stand-ins keep no state of their own: ``prepare_inputs_for_generation`` hands them the whole sequence, so every
forward reads the exact prefix, and the cache object ``generate`` makes (``past_key_values`` up to 4.x, ``cache`` in
5.x) gets one empty entry per new position, so its length is the sequence's and transformers crops it after a
rejection as it crops a real model's. ``generate`` is asked for
``K + 1`` new tokens with ``num_assistant_tokens = K`` on the constant schedule and no confidence cut: its first
round drafts K tokens and emits the accepted ones and one more; where a draft was rejected, the later rounds
complete the K + 1 tokens with transformers' own rules, so the check reads the law of K + 1 tokens of the
target (``step``'s emitted block, continued by nothing).

``speculative_sampling`` is ``transformers.generation.utils._speculative_sampling`` as the ``transformers`` layout
calls it (float64 logits), found or refused here so that a moved entry point is one line.
"""

from __future__ import annotations

import inspect

from verispec.engines import EngineError

_ENGINE = {}


def _engine() -> dict:
    """transformers' pieces the checks use, read once; EngineError in one line where they do not import or moved."""
    if _ENGINE:
        return _ENGINE
    from verispec.engines.transformers import supported_range

    try:
        import torch
        import transformers
        from transformers import GenerationConfig, PretrainedConfig, PreTrainedModel
        from transformers.cache_utils import DynamicCache
        from transformers.generation import utils as generation_utils
        from transformers.modeling_outputs import CausalLMOutputWithPast
    except Exception as error:  # the wheel's own import: one line, never a verdict
        raise EngineError(f"transformers fails to import on this machine ({type(error).__name__}: "
                          f"{str(error).splitlines()[0] if str(error) else ''})") from None
    speculative = getattr(generation_utils, "_speculative_sampling", None)
    if speculative is None or not hasattr(generation_utils.GenerationMixin, "_assisted_decoding"):
        raise EngineError("transformers' _speculative_sampling or GenerationMixin._assisted_decoding is gone: an "
                          f"entry point moved; verispec's adapter knows releases {supported_range()}")
    transformers.logging.set_verbosity_error()  # generate's advice on every call is not the check's output
    fields = CausalLMOutputWithPast.__dataclass_fields__
    cache_names = tuple(name for name in ("cache", "past_key_values") if name in fields)

    class StandInConfig(PretrainedConfig):
        model_type = "verispec-stand-in"

    class StandIn(PreTrainedModel, generation_utils.GenerationMixin):
        """A causal LM whose logits are verispec's for the whole sequence (module docstring)."""

        config_class = StandInConfig
        main_input_name = "input_ids"
        _supports_cache_class = True  # 4.x: generate makes a DynamicCache, which assisted decoding crops

        def __init__(self, config):
            super().__init__(config)
            self.weightless = torch.nn.Parameter(torch.zeros(1))  # a device and a dtype for generate to read
            self.logits_of = None

        def forward(self, input_ids=None, **kwargs):
            found = {name: kwargs[name] for name in cache_names if kwargs.get(name) is not None}
            if not found and kwargs.get("use_cache"):  # 5.0 leaves the first forward to make it, as models do
                found = {cache_names[0]: DynamicCache()}
            for cache in found.values():  # one empty entry per new position: the cache's length is the sequence's
                new = input_ids.shape[1] - cache.get_seq_length()
                if new > 0:
                    empty = torch.zeros((input_ids.shape[0], 1, new, 4))
                    cache.update(empty, empty.clone(), 0)
            return CausalLMOutputWithPast(logits=self.logits_of(input_ids), **found)

        def prepare_inputs_for_generation(self, input_ids, **kwargs):
            found = {name: kwargs[name] for name in ("cache", "past_key_values", "use_cache")
                     if kwargs.get(name) is not None}
            return {"input_ids": input_ids, **found}

    config_fields = inspect.signature(GenerationConfig).parameters
    known = set(GenerationConfig().to_dict()) | set(config_fields)
    _ENGINE.update(torch=torch, transformers=transformers, speculative=speculative, StandIn=StandIn,
                   StandInConfig=StandInConfig, ensemble="assistant_ensemble_weight" in known,
                   confidence="assistant_confidence_threshold" in known,
                   done_argument="is_done_candidate" in inspect.signature(speculative).parameters)
    return _ENGINE


def _stand_ins(vocab: int):
    """(the target's stand-in, the assistant's) for a vocabulary of ``vocab`` tokens, made once per size."""
    engine = _engine()
    key = ("models", vocab)
    if key not in _ENGINE:
        config = engine["StandInConfig"](vocab_size=vocab, num_hidden_layers=1, num_attention_heads=1, hidden_size=4,
                                         pad_token_id=0)
        _ENGINE[key] = (engine["StandIn"](config).eval(), engine["StandIn"](config).eval())
    return _ENGINE[key]


def _generate(draft_model, target_model, input_ids, num_draft_tokens, temperature, top_k, top_p, min_p, seed,
              ensemble_weight=None):
    """One ``generate`` call with an assistant (module docstring). -> the K + 1 new tokens [K + 1] int64."""
    engine = _engine()
    torch = engine["torch"]
    steps = int(num_draft_tokens)
    vocab = int(target_model(input_ids[:1]).shape[-1])
    target, assistant = _stand_ins(vocab)
    target.logits_of, assistant.logits_of = target_model, draft_model
    options = {"do_sample": True, "max_new_tokens": steps + 1, "num_assistant_tokens": steps,
               "num_assistant_tokens_schedule": "constant", "temperature": float(temperature), "top_k": int(top_k),
               "top_p": float(top_p), "min_p": float(min_p) if min_p > 0 else None, "pad_token_id": 0,
               "use_cache": True}  # assisted decoding crops the cache (5.0 reads no default from the config)
    if engine["confidence"]:  # 4.45 on: the assistant stops drafting below this confidence (0.4 by default)
        options["assistant_confidence_threshold"] = 0.0
    if ensemble_weight is not None:
        options["assistant_ensemble_weight"] = float(ensemble_weight)
    engine["transformers"].set_seed(int(seed))
    with torch.no_grad():
        out = target.generate(torch.as_tensor(input_ids[:1], dtype=torch.int64), assistant_model=assistant,
                              **options)
    return out[0, input_ids.shape[1]:]


def assisted_generate(draft_model, target_model, input_ids, num_draft_tokens, temperature, top_k, top_p, min_p,
                      seed):
    """``generate(assistant_model=..., do_sample=True)``: transformers' assisted generation (``step`` layout)."""
    return _generate(draft_model, target_model, input_ids, num_draft_tokens, temperature, top_k, top_p, min_p, seed)


#: DIVERSE's weight w of the ensemble checked: the verification law w p + (1 - w) q (transformers' docstring).
ENSEMBLE_WEIGHT = 0.5


def _assisted_generate_ensemble(draft_model, target_model, input_ids, num_draft_tokens, temperature, top_k, top_p,
                                min_p, seed):
    """``assisted_generate`` with ``assistant_ensemble_weight = ENSEMBLE_WEIGHT``: lossy by design."""
    return _generate(draft_model, target_model, input_ids, num_draft_tokens, temperature, top_k, top_p, min_p, seed,
                     ensemble_weight=ENSEMBLE_WEIGHT)


def speculative_sampling(candidate_input_ids, candidate_logits, candidate_length, new_logits):
    """transformers' ``_speculative_sampling`` itself (``transformers`` layout). Releases before 5.0 take a fifth
    argument, ``is_done_candidate`` (the candidates ended the sequence): False, as a step that goes on."""
    engine = _engine()
    if engine["done_argument"]:
        return engine["speculative"](candidate_input_ids, candidate_logits, candidate_length, new_logits, False)
    return engine["speculative"](candidate_input_ids, candidate_logits, candidate_length, new_logits)


def handed_draft_law(draft, temperature: float) -> list[float]:
    """The q that ``generate`` hands ``_speculative_sampling`` for the first draft of one assisted step at
    ``temperature`` (top-k, top-p, min-p off), with a context-free assistant of law ``draft`` (a list of V
    probabilities) and a uniform target. The draft was drawn from this q (the check's law says so); whether it is
    ``draft`` at ``temperature`` (softmax(log q / T)) is the drafting's efficiency, not its losslessness:
    ``experiments/engine_releases.py`` reads it per release."""
    import sys

    engine = _engine()
    torch = engine["torch"]
    module = sys.modules[engine["speculative"].__module__]
    shipped = module._speculative_sampling
    seen = []

    def spy(candidate_input_ids, candidate_logits, *args, **kwargs):
        seen.append(candidate_logits.double().softmax(dim=-1)[0, 0].tolist())
        return shipped(candidate_input_ids, candidate_logits, *args, **kwargs)

    def model_of(law):
        logits = torch.log(torch.as_tensor(law, dtype=torch.float64))
        return lambda ids: logits.expand(ids.shape[0], ids.shape[1], logits.shape[0]).clone()

    module._speculative_sampling = spy  # _assisted_decoding reads the module's name at each call
    try:
        _generate(model_of(draft), model_of([1.0 / len(draft)] * len(draft)), torch.zeros((1, 3), dtype=torch.int64),
                  1, temperature, 0, 1.0, 0.0, 0)
    finally:
        module._speculative_sampling = shipped
    if not seen:
        raise EngineError("transformers' generate called no _speculative_sampling in an assisted step: the entry "
                          "point moved")
    return seen[0]


def __getattr__(name: str):
    """``assisted_generate_ensemble`` where the release has the ensemble; EngineError in one line where it has not
    (read when verispec loads the check's function, before any check runs: the check is refused, not RAISES)."""
    if name == "assisted_generate_ensemble":
        if _engine()["ensemble"]:
            return _assisted_generate_ensemble
        raise EngineError("this transformers has no assistant_ensemble_weight (DIVERSE's static ensemble "
                          "verification, 5.x)")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _warm_up() -> None:
    """One call outside any capture, so that what generate imports on a first call is imported here (as
    ``verispec.engines.vllm_v1`` does)."""
    import torch

    def model(ids):
        return torch.zeros((ids.shape[0], ids.shape[1], 3), dtype=torch.float64)

    assisted_generate(model, model, torch.zeros((1, 3), dtype=torch.int64), 1, 1.0, 0, 1.0, 0.0, 1)


_warm_up()
