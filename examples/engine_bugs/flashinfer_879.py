"""FlashInfer: chain speculative sampling reads -1 padding draft ids as offsets and "accepts" them
(flashinfer-ai/flashinfer#879, 2025-02-19; fix PR #3551, 2026-06-09).

``chain_speculative_sampling(draft_probs [B, K, V], draft_token_ids [B, K], uniform_samples [B, K+1], target_probs
[B, K+1, V])`` has no per-row lengths: a row with fewer drafts is padded with -1 ids (and, in the report, zero
draft rows). The kernel "used ``draft_token_ids[i]`` directly as an array index into ``draft_probs`` and
``target_probs`` without validating the value"; "using -1 as an index causes out-of-bounds memory access, reading
garbage values that happen to satisfy the acceptance condition (``u * 0 < garbage_q``)", so "invalid -1 tokens
[are] accepted as draft output" and "``output_emitted_token_num`` [exceeds] the number of valid draft tokens"
(#3551; #879: "it should never be greater than 3, but in some instances, it returns 4"). Index -1 of row i in a
flat buffer is entry V - 1 of row i - 1; the accepted padding then moves the final draw to the row after the
padding, which holds no law of this request. The fix: "Negative IDs are treated as immediate rejections", so the
final token is drawn at the first padded position, from the target law after the real drafts.

The re-creation keeps the kernel's flat offsets (``(row * K + i) * V + draft_id``, as the CUDA code computes them,
so -1 reads the previous row's last entry), its test ``u * p < q`` (FlashInfer's naming: p draft, q target),
one uniform per position and the last one for the final draw, its outputs (``output_token_ids`` with -1 past the
end, the accepted and emitted counts), and the serving engine around it: padded draft ids set to -1, padded draft
rows zero (the engine's zero-initialised buffer, as in the report), ``uniform_samples`` from ``torch.rand``, and
placeholder ids dropped from what is emitted (vLLM's ``parse_output`` drops -1). Left out: CUDA blocks and the
sampling kernel's vectorised CDF scan (an inverse CDF here). Written for verispec from the threads' description;
no code copied.

Check: the ``padded`` layout (each row one padding column past its L drafts: candidate 0, target row a point mass
on token 0), chain:1, V = 3, p = (0.3, 0.3, 0.4), q = (0.5, 0.4, 0.1). After an accepted draft x the padding reads
q(V - 1) = 0.1 and p(V - 1) = 0.4 from the real row before it and is always accepted, so the bonus comes from the
padding's target row: token 0 every time. Exact mode gives TV 0.49 for the unguarded kernel, the closed form
sum_x min(p, q)(x) * (1 - p(0)) = 0.7 * 0.7, and 3e-17 for the guarded one.
"""

from __future__ import annotations

import torch

BUG = {
    "repository": "flashinfer-ai/flashinfer",
    "threads": ["flashinfer-ai/flashinfer#879", "flashinfer-ai/flashinfer#3551"],
    "url": "https://github.com/flashinfer-ai/flashinfer/issues/879",
    "date": "2025-02-19",
    "title": "-1 padding draft ids index the previous row and are accepted",
    "class": "wrong slice or offset",
    "layout": "padded", "tree": "chain:1",
    "target": [0.3, 0.3, 0.4], "draft": [0.5, 0.4, 0.1],
    "rng": "capture", "arrays": "torch", "per_row": True,
    "mode": "auto",
}


def chain_speculative_sampling(draft_probs, draft_token_ids, uniform_samples, target_probs, *, guard_negative_ids):
    """Returns (output_token_ids [B, K+1], output_accepted_token_num [B], output_emitted_token_num [B]).
    ``guard_negative_ids`` is the fix of #3551."""
    batch_size, num_speculative_tokens = draft_token_ids.shape
    d = draft_probs.shape[-1]
    flat_draft, flat_target = draft_probs.reshape(-1), target_probs.reshape(-1)
    output_token_ids = torch.full((batch_size, num_speculative_tokens + 1), -1, dtype=torch.int64)
    accepted_num = torch.zeros(batch_size, dtype=torch.int64)
    emitted_num = torch.zeros(batch_size, dtype=torch.int64)
    for row_idx in range(batch_size):
        pos = 0
        while pos < num_speculative_tokens:
            draft_id = int(draft_token_ids[row_idx, pos])
            if guard_negative_ids and draft_id < 0:
                break
            p = float(flat_draft[(row_idx * num_speculative_tokens + pos) * d + draft_id])
            q = float(flat_target[(row_idx * (num_speculative_tokens + 1) + pos) * d + draft_id])
            u = float(uniform_samples[row_idx, pos])
            if not u * p < q:
                break
            output_token_ids[row_idx, pos] = draft_id
            pos += 1
        emitted_num[row_idx] = pos
        accepted_num[row_idx] = pos
        law = target_probs[row_idx, pos]
        if pos < num_speculative_tokens:
            law = torch.clamp(law - draft_probs[row_idx, pos], min=0)
        cumulative = torch.cumsum(law, 0)
        threshold = float(uniform_samples[row_idx, num_speculative_tokens]) * float(cumulative[-1])
        token = int(torch.searchsorted(cumulative, torch.tensor([threshold], dtype=cumulative.dtype), right=True)[0])
        output_token_ids[row_idx, pos] = min(token, d - 1)
    return output_token_ids, accepted_num, emitted_num


def _engine_step(candidate_ids, candidate_lengths, draft_probs, target_probs, *, guard_negative_ids):
    """The serving engine's call: -1 ids and zero draft rows past each row's length, torch.rand uniforms, then the
    emitted ids with the -1 placeholders dropped, left-aligned."""
    batch_size, width = candidate_ids.shape
    positions = torch.arange(width).expand(batch_size, width)
    padded = positions >= candidate_lengths[:, None]
    draft_token_ids = candidate_ids.masked_fill(padded, -1)
    draft_probs = draft_probs.masked_fill(padded[:, :, None], 0.0)
    uniform_samples = torch.rand((batch_size, width + 1), dtype=torch.float64)
    output_token_ids, _, _ = chain_speculative_sampling(draft_probs, draft_token_ids, uniform_samples, target_probs,
                                                        guard_negative_ids=guard_negative_ids)
    out = torch.full_like(output_token_ids, -1)
    for row in range(batch_size):
        kept = [int(t) for t in output_token_ids[row] if t >= 0]
        out[row, :len(kept)] = torch.tensor(kept)
    return out


def buggy(candidate_ids, candidate_lengths, draft_probs, target_probs):
    return _engine_step(candidate_ids, candidate_lengths, draft_probs, target_probs, guard_negative_ids=False)


def fixed(candidate_ids, candidate_lengths, draft_probs, target_probs):
    return _engine_step(candidate_ids, candidate_lengths, draft_probs, target_probs, guard_negative_ids=True)
