"""SGLang: EAGLE's verify commits the target's argmax on platforms without the sampling kernels, whatever the
request's temperature (sgl-project/sglang#31214, #37134, 2026-07-14; the greedy fallback since #9127, 2025-08-12).

In ``eagle_sample`` the verify takes ``target_predict = torch.argmax(next_token_logits)`` and accepts drafts equal
to it when ``sampling_info.is_all_greedy or _is_cpu or _is_npu or _is_hip or _is_xpu``: the sampling branch needs
``tree_speculative_sampling_target_only``, ``top_k_renorm_prob`` and ``top_p_renorm_prob``, which ``sgl_kernel``
builds for CUDA and MUSA only. "On ROCm/HIP, EAGLE speculative decoding always commits argmax (greedy) in verify. It
ignores temperature and top_p ... So any EAGLE spec-decode run at temperature>0 on ROCm decodes greedy. On long
reasoning output that turns into repetition loops" (#31214; #9127 had forced it: "we should treat all requests as
greedy sampling on AMD"). The fix (#37134, merged 2026-08-30) routes a batch that is not all-greedy through a
sampling verify (a Triton chain sampler with a Triton top-k/top-p renorm) and keeps argmax for greedy requests
only; on every other platform the gate "reduces to the predicate it replaces" (#37134), so CPU builds keep the
greedy verify.

The re-creation keeps the step in SGLang's shape: the EAGLE drafter with ``topk = 1`` (drafts by argmax, a chain),
one target pass, ``eagle_sample``'s gate, the greedy verify (``target_predict`` by argmax, drafts accepted while
equal, the first mismatch's ``target_predict`` committed) and the sampling verify of the CUDA path (temperature,
``top_k_renorm_prob``, ``top_p_renorm_prob``, ``torch.rand`` coins, the target-only walk; the request's seed set
with ``torch.manual_seed``). The platform is an argument: ``buggy`` runs the gate of a HIP (or CPU) build before
#37134, ``fixed`` the gate after it. Left out: trees with ``topk > 1``, Triton and CUDA kernels, the KV cache.
Written for verispec from the threads' description; no code copied.

Check: the ``step`` layout, chain:1, V = 3, target p = (0.6, 0.3, 0.1), draft (0.2, 0.3, 0.5), ``temperature=1``:
the greedy verify emits token 0 (the argmax) every time: exact TV 0.4 (= 1 - 0.6), and 9e-17 for the sampling
verify.
"""

from __future__ import annotations

import torch

BUG = {
    "repository": "sgl-project/sglang",
    "threads": ["sgl-project/sglang#31214", "sgl-project/sglang#37134", "sgl-project/sglang#9127"],
    "url": "https://github.com/sgl-project/sglang/pull/37134",
    "date": "2026-07-14",
    "title": "EAGLE verify commits argmax on HIP and CPU whatever the temperature",
    "class": "sampling settings applied to some tokens",
    "layout": "step", "tree": "chain:1",
    "target": [0.6, 0.3, 0.1], "draft": [0.2, 0.3, 0.5],
    "sampling": "temperature=1",
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


def _verify_uses_greedy(is_all_greedy, platform, *, after_fix):
    """``eagle_sample``'s gate: before #37134 every platform without the CUDA sampling kernels verified greedily."""
    if after_fix:
        return is_all_greedy
    return is_all_greedy or platform in ("cpu", "npu", "hip", "xpu")


def eagle_sample(candidates, next_token_logits, temperature, top_k, top_p, platform, *, after_fix):
    """The verify of one request's chain: ``candidates`` [K+1] (root first), ``next_token_logits`` [K+1, V]."""
    if _verify_uses_greedy(temperature == 0, platform, after_fix=after_fix):
        target_predict = torch.argmax(next_token_logits, dim=-1)  # [K+1]
        out = []
        for i in range(candidates.shape[0] - 1):
            if int(candidates[i + 1]) != int(target_predict[i]):
                return out + [int(target_predict[i])]
            out.append(int(candidates[i + 1]))
        return out + [int(target_predict[-1])]
    target_probs = torch.softmax(next_token_logits / temperature, dim=-1)
    target_probs = top_k_renorm_prob(target_probs, top_k)
    target_probs = top_p_renorm_prob(target_probs, top_p)
    coins = torch.rand(candidates.shape[0], dtype=torch.float64)
    coins_for_final_sampling = torch.rand(1, dtype=torch.float64)
    return tree_speculative_sampling_target_only(candidates, target_probs, coins, coins_for_final_sampling[0])


def _eagle_step(draft_model, target_model, input_ids, num_draft_tokens, temperature, top_k, top_p, seed, *,
                after_fix):
    torch.manual_seed(seed)
    prompt = input_ids.shape[1]
    ids = input_ids
    for _ in range(num_draft_tokens):  # EAGLE with topk = 1: each draft the draft model's argmax
        draft = torch.argmax(draft_model(ids)[0, -1]).reshape(1, 1)
        ids = torch.cat([ids, draft], dim=1)
    candidates = torch.cat([input_ids[0, -1:], ids[0, prompt:]])  # [K+1], the root first
    next_token_logits = target_model(ids)[0, prompt - 1:]  # [K+1, V]
    return torch.tensor(eagle_sample(candidates, next_token_logits, temperature, top_k, top_p, "hip",
                                     after_fix=after_fix))


def buggy(draft_model, target_model, input_ids, num_draft_tokens, temperature, top_k, top_p, min_p, seed):
    return _eagle_step(draft_model, target_model, input_ids, num_draft_tokens, temperature, top_k, top_p, seed,
                       after_fix=False)


def fixed(draft_model, target_model, input_ids, num_draft_tokens, temperature, top_k, top_p, min_p, seed):
    return _eagle_step(draft_model, target_model, input_ids, num_draft_tokens, temperature, top_k, top_p, seed,
                       after_fix=True)
