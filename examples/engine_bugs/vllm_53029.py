"""vLLM: an all-NaN target logits row laundered into a token id by the rejection sampler
(vllm-project/vllm#53029, 2026-08-20).

"If any verification row of ``target_logits`` is all-NaN ... its NaN-poisoned block-argmax chain emits a token id
equal to ``vocab_size`` exactly" (#53029): the argmax runs over vocabulary blocks with a running (value, index)
initialised to (-inf, vocab_size) and updated on ``>``, every comparison with NaN is false, so the initial index
survives and is emitted; it surfaces later as a device assert far from its origin. A comment on the thread
(2026-09-18, ROCm) shows the worse variant after #50183 masked NaN block maxima to -inf: block 0 wins the outer
argmax and its own NaN-corrupted local argmax, an in-vocabulary id (8191), is emitted silently. The fix asked for:
detect the NaN row and fail the request (or fall back), never emit an id.

The re-creation keeps the V2 shape (greedy verification of ``draft_sampled`` against the target's block-wise argmax
over ``target_logits [num_logits, V]``, ``expanded_idx_mapping``, ``expanded_local_pos``; the checked request's
sampled rows by Gumbel-max keyed by (seed, position) through ``verispec.keyed.rand``, argmax by the same block
argmax) and its fix (a NaN row raises ``ValueError`` naming the request). Written for verispec from the thread's
description; no code copied.

NOT EXPRESSIBLE as a lossless/lossy question: the bug needs a verification row of NaN logits, and a NaN row is not a
law. verispec's step layouts hand models backed by the problem's laws (``LogitsModel``: NaN only before the prompt's
last position and past the depth the problem holds, rows no correct step reads) and problem files refuse NaN laws,
so no check can hand the code an all-NaN row at a position it must verify; and at such a position there is no target
law for the emitted token to be compared with. On every row verispec can hand, the buggy and the fixed version
compute the same thing (they differ only in the NaN check). Outside verispec: ``buggy`` on a step whose target row
is all NaN returns token id V (3 at V = 3); ``fixed`` raises.
"""

from __future__ import annotations

import torch

from verispec import keyed

BUG = {
    "repository": "vllm-project/vllm",
    "threads": ["vllm-project/vllm#53029"],
    "url": "https://github.com/vllm-project/vllm/issues/53029",
    "date": "2026-08-20",
    "title": "all-NaN target logits row laundered into a token id (vocab_size, or an in-vocabulary id on ROCm)",
    "class": "NaN handling",
    "layout": "step-ragged", "tree": "chain:1",
    "target": [0.5, 0.3, 0.2], "draft": [0.2, 0.2, 0.6],
    "sampling": "temperature=1",
    "rng": "capture",
    "expressible": False,
    "reason": ("the bug needs an all-NaN target logits row at a position the step verifies; a NaN row is not a law, "
               "so no verispec problem or model can hand one there (LogitsModel returns the log of the problem's laws, "
               "NaN only at rows a correct step never reads; problem files refuse NaN), and there is no target law to "
               "compare the emitted token with; on every row verispec can hand, buggy and fixed agree"),
}

#: The vocabulary block of the Triton kernel (8192 in vLLM); 2 here, so V = 3 spans two blocks.
VOCAB_BLOCK_SIZE = 2


def block_argmax(scores: torch.Tensor) -> int:
    """The kernel's argmax over ``scores`` [V] block by block: a running (value, index) from (-inf, V), replaced
    where a block's maximum is strictly greater. With an all-NaN row nothing is greater, and V comes out."""
    vocab_size = scores.shape[-1]
    best_value, best_index = float("-inf"), vocab_size
    for start in range(0, vocab_size, VOCAB_BLOCK_SIZE):
        block = scores[start:start + VOCAB_BLOCK_SIZE]
        local = int(torch.argmax(block))  # NaN-aware in torch; the kernel's local max is NaN-poisoned either way
        value = float(block[local])
        if value > best_value:
            best_value, best_index = value, start + local
    return best_index


def _gumbel(seed: int, pos: int, vocab_size: int) -> torch.Tensor:
    """Gumbel noise [V] keyed by (seed, pos)."""
    u = keyed.rand((int(seed) << 32) | int(pos), torch.arange(vocab_size))
    return -torch.log(-torch.log(u))


def sample_rows(target_logits, expanded_idx_mapping, temperature, seeds, pos, *, check_nan: bool):
    """The target's token at every row: block argmax of logits / T + Gumbel noise (greedy rows: of the logits).
    target_logits [num_logits, V]; expanded_idx_mapping, pos [num_logits]; temperature, seeds [num_reqs]."""
    sampled = []
    for row in range(target_logits.shape[0]):
        request = int(expanded_idx_mapping[row])
        logits = target_logits[row]
        if check_nan and bool(torch.isnan(logits).all()):
            raise ValueError(f"request {request}: target logits row {row} is all NaN; failing the request instead "
                             "of emitting a token")
        temp = float(temperature[request])
        scores = logits if temp == 0 else logits / temp + _gumbel(int(seeds[request]), int(pos[row]),
                                                                  logits.shape[-1])
        sampled.append(block_argmax(scores))
    return torch.tensor(sampled, dtype=torch.int64)


def _step(draft_model, target_model, input_ids, num_draft_tokens, temperature, seeds, *, check_nan: bool):
    """Greedy drafts, then strict verification: accept while the draft equals the target's token at its row."""
    prompt = input_ids.shape[1]
    rows, mapping, local_pos, pos, drafts = [], [], [], [], []
    for request in range(len(num_draft_tokens)):
        ids = input_ids[request:request + 1]
        count = int(num_draft_tokens[request])
        for _ in range(count):
            token = int(torch.argmax(draft_model(ids)[0, -1]))
            drafts.append(token)
            ids = torch.cat([ids, torch.tensor([[token]])], dim=1)
        rows.append(target_model(ids)[0, prompt - 1:])  # [count + 1, V]
        mapping += [request] * (count + 1)
        local_pos += list(range(count + 1))
        pos += [prompt + i for i in range(count + 1)]
    sampled = sample_rows(torch.cat(rows), mapping, temperature, seeds, pos, check_nan=check_nan)
    out = torch.full((len(num_draft_tokens), int(num_draft_tokens.max()) + 1), -1, dtype=torch.int64)
    row, draft = 0, 0
    for request in range(len(num_draft_tokens)):
        count = int(num_draft_tokens[request])
        for i in range(count + 1):
            out[request, i] = sampled[row + i]
            if i == count or int(sampled[row + i]) != drafts[draft + i]:
                break
        row += count + 1
        draft += count
    return out


def buggy(draft_model, target_model, input_ids, num_draft_tokens, temperature, top_k, top_p, min_p, seeds):
    return _step(draft_model, target_model, input_ids, num_draft_tokens, temperature, seeds, check_nan=False)


def fixed(draft_model, target_model, input_ids, num_draft_tokens, temperature, top_k, top_p, min_p, seeds):
    return _step(draft_model, target_model, input_ids, num_draft_tokens, temperature, seeds, check_nan=True)
