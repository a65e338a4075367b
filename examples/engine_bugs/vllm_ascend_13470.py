"""vllm-ascend: the NPU probabilistic rejection kernel tests every draft against u = 0, so every draft is accepted
(vllm-project/vllm-ascend#13470, #13730, 2026-08-04).

"Previously ``_probabilistic_rejection_kernel`` always accepted every draft token (``u = 0.0``) because NPU Triton
lacks float64 ``tl_rand64`` and scalar ``tl.rand``, which made the reported acceptance rate 1.0" (#13470). The issue
(#13730) spells out the test: with ``u = 0.0``, ``log(u) = -inf``, so ``target_log_prob > log(u) +
draft_log_prob`` holds for every draft the target does not rule out, "no draft token is ever rejected for
non-greedy requests", and the emitted tokens follow the draft law q instead of the target's p. The fix draws a real
uniform per position, keyed by the request's seed and the position.

The re-creation keeps the V2 shape: probabilistic drafts per request and position (their noise keyed apart from the
verifier's, as after vLLM #54282, so only this bug is present), ``probabilistic_rejection_sample`` over the
flattened ``target_logits`` / ``draft_logits`` ``[num_logits, V]`` with ``expanded_idx_mapping``, per-request
``temperature`` and ``seed``, per-row ``pos``, the acceptance test in log space, the recovered token by a race on
(p - q)+ and the bonus by a race on p. Each race is the kernel's Gumbel-max keyed by (seed, position), written as
the equivalent exponential race with a torch generator seeded by that key (the acceptance uniform first, then the
race's noise), which exact mode integrates; greedy requests take argmaxes. Left out: NPU kernels, logprobs, the
DFlash graph padding the PR also fixes. Written for verispec from the threads' description; no code copied.

On p = (0.5, 0.3, 0.2), q = (0.2, 0.2, 0.6), one draft, T = 1: the bug emits the draft, so its first token follows
q, TV(p, q) = 0.4 exactly.
"""

from __future__ import annotations

import math

import torch

BUG = {
    "repository": "vllm-project/vllm-ascend",
    "threads": ["vllm-project/vllm-ascend#13470", "vllm-project/vllm-ascend#13730"],
    "url": "https://github.com/vllm-project/vllm-ascend/pull/13470",
    "date": "2026-08-04",
    "title": "probabilistic rejection kernel tests every draft against u = 0 and accepts it",
    "class": "other",
    "layout": "step-ragged", "tree": "chain:1",
    "target": [0.5, 0.3, 0.2], "draft": [0.2, 0.2, 0.6],
    "sampling": "temperature=1",
    "rng": "capture",
    "mode": "auto",
}

#: The draft's keys live apart from the verifier's (vLLM #54282's salt).
DRAFT_SALT = 1 << 30


def _generator(seed: int, pos: int) -> torch.Generator:
    """The stream keyed by (seed, pos)."""
    return torch.Generator().manual_seed(int(seed) * (1 << 31) + int(pos))


def _race(weights: torch.Tensor, generator: torch.Generator) -> int:
    """argmax(weights / E), E exponential: a token drawn with probability proportional to ``weights`` [V]."""
    noise = torch.empty_like(weights).exponential_(generator=generator)
    return int(torch.argmax(weights / noise, dim=-1))


def gumbel_sample(logits: torch.Tensor, temperature: float, seed: int, pos: int) -> int:
    """One token from softmax(logits / temperature), keyed by (seed, pos); argmax when greedy."""
    if temperature == 0:
        return int(torch.argmax(logits))
    return _race(torch.softmax(logits / temperature, -1), _generator(seed, pos))


def probabilistic_rejection_sample(target_logits, draft_logits, draft_sampled, expanded_idx_mapping,
                                   expanded_local_pos, num_draft_tokens, seed, pos, temperature, *, real_uniform):
    """Accept draft x while log p(x) > log u + log q(x), u keyed by (seed, pos) (0.0 before #13470); at the first
    rejection the recovered token from (p - q)+; after all drafts the bonus from p. target_logits [num_logits, V]
    (each request's draft rows, then its bonus row); draft_logits [num_drafts, V]; draft_sampled [num_drafts];
    expanded_idx_mapping, expanded_local_pos, pos [num_logits]; seed, temperature [num_reqs].
    Returns [num_reqs, max(num_draft_tokens) + 1], padded with -1."""
    out = torch.full((len(num_draft_tokens), int(num_draft_tokens.max()) + 1), -1, dtype=torch.int64)
    done = [False] * len(num_draft_tokens)
    draft_row = 0
    for row in range(target_logits.shape[0]):
        request, local = int(expanded_idx_mapping[row]), int(expanded_local_pos[row])
        count, temp = int(num_draft_tokens[request]), float(temperature[request])
        is_draft = local < count
        x = int(draft_sampled[draft_row]) if is_draft else -1
        q_logits = draft_logits[draft_row] if is_draft else None
        draft_row += is_draft
        if done[request]:
            continue
        if not is_draft:
            out[request, local] = gumbel_sample(target_logits[row], temp, int(seed[request]), int(pos[row]))
            continue
        if temp == 0:
            out[request, local] = best = int(torch.argmax(target_logits[row]))
            done[request] = best != x
            continue
        target_log_prob = torch.log_softmax(target_logits[row] / temp, -1)
        draft_log_prob = torch.log_softmax(q_logits / temp, -1)
        generator = _generator(int(seed[request]), int(pos[row]))
        u = float(torch.rand(1, dtype=torch.float64, generator=generator)) if real_uniform else 0.0
        log_u = math.log(u) if u > 0 else float("-inf")
        if float(target_log_prob[x]) > log_u + float(draft_log_prob[x]):
            out[request, local] = x
            continue
        residual = torch.clamp(target_log_prob.exp() - draft_log_prob.exp(), min=0)
        out[request, local] = _race(residual, generator)
        done[request] = True
    return out


def _step(draft_model, target_model, input_ids, num_draft_tokens, temperature, seeds, *, real_uniform):
    prompt = input_ids.shape[1]
    draft_sampled, draft_rows, rows, mapping, local_pos, pos = [], [], [], [], [], []
    for request in range(len(num_draft_tokens)):
        ids = input_ids[request:request + 1]
        count = int(num_draft_tokens[request])
        for i in range(count):
            logits = draft_model(ids)[0, -1]  # [V]
            draft_sampled.append(gumbel_sample(logits, float(temperature[request]), int(seeds[request]),
                                               prompt + i + DRAFT_SALT))
            draft_rows.append(logits)
            ids = torch.cat([ids, torch.tensor([[draft_sampled[-1]]])], dim=1)
        rows.append(target_model(ids)[0, prompt - 1:])  # [count + 1, V]
        mapping += [request] * (count + 1)
        local_pos += list(range(count + 1))
        pos += [prompt + i for i in range(count + 1)]
    return probabilistic_rejection_sample(torch.cat(rows), torch.stack(draft_rows), torch.tensor(draft_sampled),
                                          torch.tensor(mapping), torch.tensor(local_pos), num_draft_tokens, seeds,
                                          torch.tensor(pos), temperature, real_uniform=real_uniform)


def buggy(draft_model, target_model, input_ids, num_draft_tokens, temperature, top_k, top_p, min_p, seeds):
    """Before #13470: u = 0.0 on the NPU."""
    return _step(draft_model, target_model, input_ids, num_draft_tokens, temperature, seeds, real_uniform=False)


def fixed(draft_model, target_model, input_ids, num_draft_tokens, temperature, top_k, top_p, min_p, seeds):
    """#13470: a real uniform per position."""
    return _step(draft_model, target_model, input_ids, num_draft_tokens, temperature, seeds, real_uniform=True)
