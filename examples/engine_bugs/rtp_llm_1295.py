"""RTP-LLM: MTP rejection sampling that accepts on "same token OR ratio test" and emits the verifier's own token
after a rejection (alibaba/rtp-llm#1295, 2026-08-13).

RTP-LLM's ``rejection_sampling_kernel`` gets, per row, the MTP head's top-1 drafts (a point mass: "MTP top-1
proposal p is always 1.0", in the review), the target's probabilities, the target sampler's own tokens
``target_token_ids`` (one draw from the target law per position) and ``uniform_samples [rows, K+1]``. Before the
fix a draft was accepted when ``same_token || (do_sample[row_idx] && u * p < q)`` (p: draft probability, q: target
probability, RTP-LLM's naming): the union of the exact-match rule and the ratio test, which over-accepts (with a
point-mass draft x: 1 - (1 - q(x))^2 instead of q(x)). After a rejection, "if every previous accepted token was an
exact target/draft match, the verifier token at this rejected position is already target-distributed and can be
emitted" (the old comment): but that token was drawn before the test and is now conditioned on having lost it.
The fix (#1295's diff): ``(do_sample && u * p < q) || (!do_sample && same_token)``; a sampled row that rejects
draws from the residual instead of emitting the verifier token (review point 2), and a row that accepts every draft
takes the target sampler's last token as its bonus (point 3).

The re-creation keeps the kernel's per-row loop and arguments (``draft_probs``, ``draft_token_ids``,
``uniform_samples``, ``target_probs``, ``target_token_ids``, ``do_sample``, ``output_token_ids [rows, K+1]``,
``num_accepted_tokens``), the point-mass draft probabilities the MTP path hands it, and the caller's draws
(``torch.rand`` for the uniforms, ``torch.multinomial`` for the target sampler's tokens and the residual). Left out:
the block reductions over the vocabulary, greedy rows' argmax fast path, the old full-accept bonus drawn through the
zeroed-``p_vec`` residual (it reads the target law too, so it does not change the law). Written for verispec from
the thread's diff excerpts and review; no code copied.

Check: ``argmax-chain:1`` (the top-1 draft of q; the verifier is handed a point mass, as the MTP path does), V = 3,
p = (0.5, 0.3, 0.2), q = (0.6, 0.3, 0.1): the draft is token 0, which the old rule emits with probability
1 - (1 - 0.5)^2 = 0.75 instead of 0.5 (TV 0.25); the fixed rule is the token-level rule with a point-mass q.
"""

from __future__ import annotations

import torch

BUG = {
    "repository": "alibaba/rtp-llm",
    "threads": ["alibaba/rtp-llm#1295"],
    "url": "https://github.com/alibaba/rtp-llm/pull/1295",
    "date": "2026-08-13",
    "title": "accept on same token OR ratio test, emit the verifier's token after a rejection",
    "class": "wrong residual",
    "layout": "chain", "tree": "argmax-chain:1",
    "target": [0.5, 0.3, 0.2], "draft": [0.6, 0.3, 0.1],
    "rng": "capture", "arrays": "torch", "per_row": True,
    "mode": "auto",
}


def rejection_sampling_kernel(draft_probs, draft_token_ids, uniform_samples, target_probs, target_token_ids,
                              do_sample, output_token_ids, num_accepted_tokens, *, old_semantics):
    """Per row: test drafts in order, stop at the first rejection; ``draft_probs`` [rows, K, V], ``target_probs``
    [rows, K+1, V], ``draft_token_ids`` [rows, K], ``target_token_ids`` [rows, K+1], ``uniform_samples``
    [rows, K+1]; writes ``output_token_ids`` [rows, K+1] (-1 past the end) and ``num_accepted_tokens`` [rows]."""
    rows, num_speculative_tokens = draft_token_ids.shape
    for row_idx in range(rows):
        all_exact = True
        pos = 0
        while pos < num_speculative_tokens:
            draft_id = int(draft_token_ids[row_idx, pos])
            target_id = int(target_token_ids[row_idx, pos])
            p = float(draft_probs[row_idx, pos, draft_id])
            q = float(target_probs[row_idx, pos, draft_id])
            u = float(uniform_samples[row_idx, pos])
            same_token = target_id == draft_id
            if old_semantics:
                accept = same_token or (bool(do_sample[row_idx]) and u * p < q)
            else:
                accept = (bool(do_sample[row_idx]) and u * p < q) or (not bool(do_sample[row_idx]) and same_token)
            if not accept:
                break
            output_token_ids[row_idx, pos] = draft_id
            all_exact = all_exact and same_token
            pos += 1
        num_accepted_tokens[row_idx] = pos
        if pos == num_speculative_tokens:  # every draft accepted: the target sampler's token is the bonus
            output_token_ids[row_idx, pos] = target_token_ids[row_idx, pos]
        elif (old_semantics and all_exact) or not bool(do_sample[row_idx]):
            output_token_ids[row_idx, pos] = target_token_ids[row_idx, pos]
        else:
            residual = torch.clamp(target_probs[row_idx, pos] - draft_probs[row_idx, pos], min=0)
            output_token_ids[row_idx, pos] = torch.multinomial(residual / residual.sum(), 1)[0]


def _mtp_verify(draft_tokens, draft_probs, target_probs, *, old_semantics):
    """The MTP verify step around the kernel: point-mass draft probabilities for the top-1 drafts, the target
    sampler's tokens and the uniforms drawn by the caller, every row sampled (``do_sample``)."""
    rows, count = draft_tokens.shape
    size = target_probs.shape[-1]
    point_mass = torch.nn.functional.one_hot(draft_tokens.to(torch.int64), size).to(target_probs.dtype)
    uniform_samples = torch.rand((rows, count + 1), dtype=torch.float64)
    target_token_ids = torch.multinomial(target_probs.reshape(-1, size), 1).reshape(rows, count + 1)
    output_token_ids = torch.full((rows, count + 1), -1, dtype=torch.int64)
    num_accepted_tokens = torch.zeros(rows, dtype=torch.int64)
    rejection_sampling_kernel(point_mass, draft_tokens, uniform_samples, target_probs, target_token_ids,
                              torch.ones(rows, dtype=torch.bool), output_token_ids, num_accepted_tokens,
                              old_semantics=old_semantics)
    return output_token_ids


def buggy(draft_tokens, draft_probs, target_probs):
    return _mtp_verify(draft_tokens, draft_probs, target_probs, old_semantics=True)


def fixed(draft_tokens, draft_probs, target_probs):
    return _mtp_verify(draft_tokens, draft_probs, target_probs, old_semantics=False)
