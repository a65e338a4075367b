"""What the V1 sampler's older releases take differently, so ``vllm_v1`` calls each release as its own model
runner does: before 0.11 the bonus token is drawn outside ``RejectionSampler`` (``RunnerOrder``), before 0.10 min-p,
min-tokens and logit bias are fields of ``SamplingMetadata`` (``release_fields``), and ``parse_output`` has three
shapes (``parsed``). Read from each release's ``vllm/v1/sample/rejection_sampler.py`` and
``vllm/v1/worker/gpu_model_runner.py``."""

from __future__ import annotations

import inspect

from verispec.engines import EngineError


class RunnerOrder:
    """The step as the model runner of releases before 0.11 makes it (``GPUModelRunner.execute_model``, 0.10.2): the
    regular ``Sampler`` draws each request's bonus token from the bonus rows, then ``RejectionSampler.forward``
    (which takes the bonus tokens as an argument there) verifies the drafts against the target rows, and its tokens
    replace the sampler output's. Called as a later release's ``RejectionSampler`` is: (metadata, draft probs,
    every row, sampling metadata)."""

    def __init__(self, rejection_sampler, sampler):
        self.rejection_sampler, self.sampler = rejection_sampler, sampler

    def __call__(self, metadata, draft_probs, logits, sampling_metadata):
        bonus = self.sampler(logits=logits[metadata.bonus_logits_indices], sampling_metadata=sampling_metadata)
        tokens = self.rejection_sampler(metadata, draft_probs, logits[metadata.target_logits_indices],
                                        bonus.sampled_token_ids, sampling_metadata)
        bonus.sampled_token_ids = tokens
        return bonus


#: ``SamplingMetadata`` fields of releases before 0.10 that later releases hold in logits processors, which vLLM
#: does not load when speculative decoding is on (min-tokens aside, which the batch never asks for): given to a
#: release that has them, left out of one that does not.
MOVED_TO_PROCESSORS = ("min_p", "min_tokens", "logit_bias")


def release_fields(cls, fields: dict) -> dict:
    """``fields`` as the release's ``SamplingMetadata`` takes them: a field it does not have is left out where it asks
    for nothing (None, an empty dict or list, or the no-penalty defaults) or moved to a logits processor
    (``MOVED_TO_PROCESSORS``), and refused otherwise: the check cannot ask this release for it."""
    import dataclasses

    names = {field.name for field in dataclasses.fields(cls)}
    unset = ("no_penalties", "prompt_token_ids", "frequency_penalties", "presence_penalties",
             "repetition_penalties", "output_token_ids")
    kept = {}
    for name, value in fields.items():
        if name in names:
            kept[name] = value
        elif not (name in MOVED_TO_PROCESSORS or value is None or (isinstance(value, (dict, list)) and not value)
                  or fields.get("no_penalties") and name in unset):
            raise EngineError(f"this vLLM release's SamplingMetadata has no field {name!r}, which the check sets: "
                              "it cannot be asked of this release")
    return kept


def parsed(parse, output, vocab_size: int) -> tuple[list, object]:
    """(each request's tokens, the ``LogprobsLists`` or None) from ``parse_output`` as the release has it: with the
    logprobs tensors from 0.14 on (tokens and lists), before that without (tokens and cumulative counts, 0.11-0.13;
    the tokens alone, before)."""
    if "logprobs_tensors" in inspect.signature(parse).parameters:
        return parse(output.sampled_token_ids, vocab_size, logprobs_tensors=output.logprobs_tensors)
    result = parse(output.sampled_token_ids, vocab_size)
    return (result[0], None) if isinstance(result, tuple) else (result, None)
