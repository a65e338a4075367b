"""vllm-ascend: the Gumbel sampling kernel reads request state (temperature, seed) by token index, not through the
expanded index mapping (vllm-project/vllm-ascend#9173, 2026-05-14).

In Model Runner V2 the verification rows of speculative decoding are sampled by one Gumbel kernel over
``[num_tokens, V]`` logits, ``num_tokens = sum(num_draft_tokens + 1)``, so a request owns several rows. The NPU
kernel did not handle "cases (temperature>0) where num_tokens does not equal num_reqs (i.e., multi-token-per-request
scenarios)"; the fix updates it "to correctly handle expanded index mapping, allowing multiple tokens to be
processed while correctly mapping them to their respective request states (temperature, seed)" (#9173). Before it,
a row's temperature and seed were those of the request-state slot at the row's own index: rows of one request were
sampled at other requests' temperatures and seeds (a greedy neighbour's 0, or a free slot's), and a greedy request's
row at a sampled neighbour's temperature.

The re-creation keeps V2's shape: persistent per-request state (``temperature``, ``seed`` over ``MAX_NUM_REQS``
slots, the batch in slots 0..B-1, free slots zero), greedy drafts (V2's default), ``gumbel_sample`` over the
flattened target logits with ``expanded_idx_mapping [num_tokens]`` and per-row ``pos``, then strict verification
(accept a draft while it equals the target's sampled token at its row; the first mismatch or the bonus is the
target's own token), which keeps the target law for any draft. The kernel's Gumbel-max keyed by (seed, pos) is
written as the equivalent exponential race argmax(softmax(logits / T) / E) with E from a torch generator seeded by
(seed, pos), which exact mode integrates. Left out: NPU kernels, logprobs, the processed-logits output. Written for
verispec from the thread's description (the pre-fix kernel lines are not in it; the indexing by token is the reading
its words give); no code copied.

On p = (0.5, 0.3, 0.2), greedy drafts from q = (0.2, 0.2, 0.6), one draft, T = 0.7: the checked request's rows read
a greedy neighbour's slot and a free slot, so it decodes greedily and always emits token 0, where the request asks
for softmax(log p / 0.7) = (0.5707, 0.2751, 0.1542): TV = 1 - 0.5707 = 0.4293 (exact mode agrees to 1e-12).
"""

from __future__ import annotations

import torch

BUG = {
    "repository": "vllm-project/vllm-ascend",
    "threads": ["vllm-project/vllm-ascend#9173"],
    "url": "https://github.com/vllm-project/vllm-ascend/pull/9173",
    "date": "2026-05-14",
    "title": "Gumbel sampling reads temperature and seed by token index instead of the expanded index mapping",
    "class": "wrong slice or offset",
    "layout": "step-ragged", "tree": "chain:1",
    "target": [0.5, 0.3, 0.2], "draft": [0.2, 0.2, 0.6],
    "sampling": "temperature=0.7",
    "rng": "capture",
    "mode": "auto",
}

#: Request-state slots of the persistent buffers (the batch takes slots 0..B-1; the rest are free, zero).
MAX_NUM_REQS = 8


def gumbel_sample(logits, expanded_idx_mapping, temperature, seed, pos, *, use_expanded_mapping: bool):
    """One token per row of ``logits`` [num_tokens, V] at its request's temperature (argmax when 0), noise keyed by
    (its request's seed, pos[row]). temperature, seed [MAX_NUM_REQS] (request state); expanded_idx_mapping, pos
    [num_tokens]. Before #9173 the row's own index stood for its request-state slot."""
    sampled = torch.empty(logits.shape[0], dtype=torch.int64)
    for token_idx in range(logits.shape[0]):
        req_state_idx = int(expanded_idx_mapping[token_idx]) if use_expanded_mapping else token_idx
        temp = float(temperature[req_state_idx])
        if temp == 0:
            sampled[token_idx] = torch.argmax(logits[token_idx])
            continue
        generator = torch.Generator().manual_seed(int(seed[req_state_idx]) * 4096 + int(pos[token_idx]))
        probs = torch.softmax(logits[token_idx] / temp, -1)
        noise = torch.empty_like(probs).exponential_(generator=generator)
        sampled[token_idx] = torch.argmax(probs / noise, dim=-1)
    return sampled


def strict_rejection_sample(target_sampled, draft_sampled, num_draft_tokens):
    """Accept each draft while it equals the target's token at its row; then the target's token. target_sampled
    [num_tokens], draft_sampled [num_drafts]. Returns [num_reqs, max(num_draft_tokens) + 1], padded with -1."""
    out = torch.full((len(num_draft_tokens), int(num_draft_tokens.max()) + 1), -1, dtype=torch.int64)
    row = draft = 0
    for request, count in enumerate(num_draft_tokens.tolist()):
        for i in range(count + 1):
            out[request, i] = target_sampled[row + i]
            if i == count or int(target_sampled[row + i]) != int(draft_sampled[draft + i]):
                break
        row, draft = row + count + 1, draft + count
    return out


def _step(draft_model, target_model, input_ids, num_draft_tokens, temperature, seeds, *, use_expanded_mapping):
    prompt = input_ids.shape[1]
    num_reqs = len(num_draft_tokens)
    temperature_state = torch.zeros(MAX_NUM_REQS, dtype=torch.float64)
    seed_state = torch.zeros(MAX_NUM_REQS, dtype=torch.int64)
    temperature_state[:num_reqs], seed_state[:num_reqs] = temperature, seeds  # idx_mapping = arange(num_reqs)
    rows, expanded_idx_mapping, pos, drafts = [], [], [], []
    for request in range(num_reqs):
        ids = input_ids[request:request + 1]
        count = int(num_draft_tokens[request])
        for _ in range(count):  # greedy drafts
            drafts.append(int(torch.argmax(draft_model(ids)[0, -1])))
            ids = torch.cat([ids, torch.tensor([[drafts[-1]]])], dim=1)
        rows.append(target_model(ids)[0, prompt - 1:])  # [count + 1, V]
        expanded_idx_mapping += [request] * (count + 1)
        pos += [prompt + i for i in range(count + 1)]
    target_sampled = gumbel_sample(torch.cat(rows), torch.tensor(expanded_idx_mapping), temperature_state,
                                   seed_state, torch.tensor(pos), use_expanded_mapping=use_expanded_mapping)
    return strict_rejection_sample(target_sampled, torch.tensor(drafts, dtype=torch.int64), num_draft_tokens)


def buggy(draft_model, target_model, input_ids, num_draft_tokens, temperature, top_k, top_p, min_p, seeds):
    """Before #9173: each row reads the request state at its own index."""
    return _step(draft_model, target_model, input_ids, num_draft_tokens, temperature, seeds,
                 use_expanded_mapping=False)


def fixed(draft_model, target_model, input_ids, num_draft_tokens, temperature, top_k, top_p, min_p, seeds):
    """#9173: each row reads its request's state through expanded_idx_mapping."""
    return _step(draft_model, target_model, input_ids, num_draft_tokens, temperature, seeds,
                 use_expanded_mapping=True)
