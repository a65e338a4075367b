"""SGLang: min_p is not applied to the tokens an EAGLE verify step emits (sgl-project/sglang#10617, 2025-09-18).

"Some sampling settings (logit_bias, min_p) do not seem to apply to every token when using EAGLE (with PDD).
top_p seems to work. My current guess that this is due to some difference in the code path taken with speculative
decoding" (#10617, open; no fix is linked in the thread). In EAGLE's verify the target law of the tree is built as
``softmax(logits / temperature)``, then ``top_k_renorm_prob`` and ``top_p_renorm_prob``, and handed to
``tree_speculative_sampling_target_only``, which both accepts drafts and draws the step's last token from it: min_p
has no step on that path (plain decoding applies it in its sampler), so every token of a speculative step follows
the law without the min_p cut, and tokens below ``min_p * max p`` are emitted. The fixed twin is the verify the
thread asks for: the min_p cut (``p >= min_p * max p``, renormalised) applied to the target law before the walk.

The re-creation keeps the step in SGLang's shape: the EAGLE drafter with ``topk = 1`` (each draft the argmax of the
draft model's logits, a chain), one target pass, the verify's target law (temperature, ``top_k_renorm_prob``,
``top_p_renorm_prob``), the caller's coins (``torch.rand`` for one coin per node and a separate
``coins_for_final_sampling``; the request's seed set with ``torch.manual_seed``) and the target-only walk (accept
the child whose cumulative target mass passes the coin; after a rejection the child's mass is left out of the
final draw). Left out: the tree with ``topk > 1``, logit_bias (verispec's sampling has no logit bias), CUDA
kernels, the KV cache. Written for verispec from the thread's description; no code copied.

Check: the ``step`` layout, chain:1, V = 3, target p = (0.6, 0.3, 0.1), draft (0.2, 0.3, 0.5), ``temperature=1,
min_p=0.2`` (the requested law (2/3, 1/3, 0)): the EAGLE draft is token 2, which the old verify accepts with
probability 0.1 though min_p removes it. Exact mode gives TV 0.1 for the old verify (the closed form: its tokens follow
(0.6, 0.3, 0.1) for (2/3, 1/3, 0)) and 8e-17 for the verify with the min_p cut.
"""

from __future__ import annotations

import torch

BUG = {
    "repository": "sgl-project/sglang",
    "threads": ["sgl-project/sglang#10617"],
    "url": "https://github.com/sgl-project/sglang/issues/10617",
    "date": "2025-09-18",
    "title": "min_p not applied to the target law of EAGLE's verify",
    "class": "sampling settings applied to some tokens",
    "layout": "step", "tree": "chain:1",
    "target": [0.6, 0.3, 0.1], "draft": [0.2, 0.3, 0.5],
    "sampling": "temperature=1,min_p=0.2",
    "rng": "capture",
    "mode": "auto",
}


def top_k_renorm_prob(probs, top_k):
    """Keep the k largest probabilities (ties at the k-th kept), renormalised; 0 keeps all."""
    if top_k <= 0 or top_k >= probs.shape[-1]:
        return probs
    kth = torch.topk(probs, int(top_k)).values[..., -1, None]
    kept = probs.masked_fill(probs < kth, 0.0)
    return kept / kept.sum(-1, keepdim=True)


def top_p_renorm_prob(probs, top_p):
    """Keep the most probable tokens until their mass reaches top_p (the most probable always), renormalised."""
    if top_p >= 1.0:
        return probs
    ordered, index = torch.sort(probs, descending=False)
    drop = ordered.cumsum(-1) <= 1 - top_p
    drop[..., -1:] = False
    kept = probs.masked_fill(drop.scatter(-1, index, drop), 0.0)
    return kept / kept.sum(-1, keepdim=True)


def min_p_renorm_prob(probs, min_p):
    """Keep p >= min_p * max p, renormalised (the cut SGLang's sampler applies in plain decoding)."""
    if min_p <= 0:
        return probs
    kept = probs.masked_fill(probs < min_p * probs.max(-1, keepdim=True).values, 0.0)
    return kept / kept.sum(-1, keepdim=True)


def tree_speculative_sampling_target_only(candidates, target_probs, coins, coin_for_final_sampling):
    """The target-only walk on a chain: ``candidates`` [K+1] (root first), ``target_probs`` [K+1, V], ``coins``
    [K+1]; returns the accepted drafts and the final token."""
    out, node = [], 0
    left_out = torch.zeros_like(target_probs[0])
    while node + 1 < candidates.shape[0]:
        token = int(candidates[node + 1])
        if float(coins[node]) < float(target_probs[node, token]):
            out.append(token)
            node += 1
            left_out = torch.zeros_like(target_probs[0])
            continue
        left_out[token] = target_probs[node, token]
        break
    residual = torch.clamp(target_probs[node] - left_out, min=0)
    cumulative = torch.cumsum(residual, 0)
    threshold = float(coin_for_final_sampling) * float(cumulative[-1])
    token = int(torch.searchsorted(cumulative, torch.tensor([threshold], dtype=cumulative.dtype), right=True)[0])
    return out + [min(token, residual.shape[0] - 1)]


def _eagle_step(draft_model, target_model, input_ids, num_draft_tokens, temperature, top_k, top_p, min_p, seed, *,
                apply_min_p):
    torch.manual_seed(seed)
    prompt = input_ids.shape[1]
    ids = input_ids
    for _ in range(num_draft_tokens):  # EAGLE with topk = 1: each draft the draft model's argmax
        draft = torch.argmax(draft_model(ids)[0, -1]).reshape(1, 1)
        ids = torch.cat([ids, draft], dim=1)
    candidates = torch.cat([input_ids[0, -1:], ids[0, prompt:]])  # [K+1], the root first
    next_token_logits = target_model(ids)[0, prompt - 1:]  # [K+1, V]
    target_probs = torch.softmax(next_token_logits / temperature, dim=-1)
    target_probs = top_k_renorm_prob(target_probs, top_k)
    target_probs = top_p_renorm_prob(target_probs, top_p)
    if apply_min_p:
        target_probs = min_p_renorm_prob(target_probs, min_p)
    coins = torch.rand(num_draft_tokens + 1, dtype=torch.float64)
    coins_for_final_sampling = torch.rand(1, dtype=torch.float64)
    return torch.tensor(tree_speculative_sampling_target_only(candidates, target_probs, coins,
                                                              coins_for_final_sampling[0]))


def buggy(draft_model, target_model, input_ids, num_draft_tokens, temperature, top_k, top_p, min_p, seed):
    return _eagle_step(draft_model, target_model, input_ids, num_draft_tokens, temperature, top_k, top_p, min_p,
                       seed, apply_min_p=False)


def fixed(draft_model, target_model, input_ids, num_draft_tokens, temperature, top_k, top_p, min_p, seed):
    return _eagle_step(draft_model, target_model, input_ids, num_draft_tokens, temperature, top_k, top_p, min_p,
                       seed, apply_min_p=True)
