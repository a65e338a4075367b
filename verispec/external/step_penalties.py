"""The law a whole step must emit (``requested_problem``), and the ``step-penalties`` layout, whose law reads the
token history: the repetition, frequency and presence penalties of ``verispec.models.penalties`` (vLLM's).

``step-penalties`` (one request with penalties; vLLM's ``SamplingMetadata`` prompt ids, output history and
penalties):
    f(draft_model, target_model, input_ids [1, P], output_ids [1, H], num_draft_tokens K, temperature, top_k,
      top_p, min_p, repetition_penalty, frequency_penalty, presence_penalty, seed) -> emitted tokens [m + 1] int.
    ``input_ids`` is the prompt (P tokens 0) and ``output_ids`` the tokens the request emitted before this step
    (``history``: H = 2 tokens V - 1). The models read the prompt, then the history, then the block
    (``model(cat(input_ids, output_ids, block))``). Their logits are the log of the raw law plus ``LOGIT_SHIFT``: a
    softmax does not see the shift, but the repetition penalty does (it divides a positive logit and multiplies a
    negative one), so both kinds occur and a step that swaps them is seen.
    The law at each position of the block, after the block's tokens s so far: the raw logits penalised
    (``Penalties.apply``: prompt the P zeros, output the history then s), then the requested sampling. Token 0 is
    in the prompt only (repetition alone), token V - 1 in the output twice (all three penalties, frequency counted
    twice), and the drafts join the output as they are accepted: a step that ignores the history, counts the
    prompt as output, penalises a position with drafts after it, or samples the bonus token without the drafts
    before it emits another law.
"""

from __future__ import annotations

import itertools

import numpy as np

#: Junk prompt tokens before the block in every step layout's ``input_ids``.
STEP_PROMPT = 3
#: What ``step-penalties``' models add to the log of the raw law (module docstring).
LOGIT_SHIFT = 1.0
#: How many earlier output tokens ``step-penalties`` hands (each the vocabulary's last token).
HISTORY_LENGTH = 2


def history(vocab_size: int) -> tuple[int, ...]:
    """The request's output before the step in ``step-penalties``: ``HISTORY_LENGTH`` tokens V - 1."""
    return (vocab_size - 1,) * HISTORY_LENGTH


def requested_problem(problem, sampling, depth: int, penalties=None):
    """The problem the user asked for: every conditional up to ``depth`` tokens after the requested transform
    (``Sampling.probabilities`` of the raw logits; with ``penalties``, a ``Penalties``, the target's logits first
    shifted and penalised after the prompt and the history then the prefix, as ``step-penalties`` hands them), as a
    ``TabularProblem``, whose target law and continuation the simulator already computes (``target_law``,
    ``OutputLaw.continued_with_target``). The draft is transformed by the sampling alone: engines draft without
    penalties, and any drafting law is allowed."""
    from verispec.simulator.problems import TabularProblem

    size = problem.vocab_size
    prompt, before = (0,) * STEP_PROMPT, history(size)

    def transformed(law, prefix: tuple | None = None) -> np.ndarray:
        with np.errstate(divide="ignore"):
            logits = np.log(np.asarray(law, dtype=np.float64))
        if prefix is not None and penalties is not None:
            logits = penalties.apply(logits + LOGIT_SHIFT, prompt, before + prefix)
        return np.asarray(sampling.probabilities(logits), dtype=np.float64)

    prefixes = [prefix for length in range(depth + 1) for prefix in itertools.product(range(size), repeat=length)]
    return TabularProblem(size, {prefix: transformed(problem.target(prefix), prefix) for prefix in prefixes},
                          {prefix: transformed(problem.draft(prefix)) for prefix in prefixes if len(prefix) < depth})


def penalties_arguments(draft, target, depth: int, params: tuple, penalties, seed: int) -> tuple:
    """``step-penalties``' arguments: the models (built reading P + H tokens before the block, shifted), the prompt,
    the history, K, the sampling parameters, the three penalties and the seed."""
    import torch

    return (draft, target, torch.zeros((1, STEP_PROMPT), dtype=torch.int64),
            torch.tensor([history(draft.vocab_size)], dtype=torch.int64), depth, *params,
            float(penalties.repetition), float(penalties.frequency), float(penalties.presence), seed)


def penalties_note(penalties, vocab_size: int) -> str:
    """What a report adds when the step was penalised ("" when not)."""
    if penalties is None:
        return ""
    return f", penalised ({penalties.describe()}) after the prompt and the history {history(vocab_size)}"


__all__ = ["HISTORY_LENGTH", "LOGIT_SHIFT", "STEP_PROMPT", "history", "penalties_arguments", "penalties_note",
           "requested_problem"]
