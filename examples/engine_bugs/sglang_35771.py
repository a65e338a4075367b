"""SGLang: the target-only tree sampler accepts a draft of target probability zero when its float32 coin is exactly 0
(sgl-project/sglang#35771, fix PR #35798, 2026-08-21).

``tree_speculative_sampling_target_only`` accepts a child when ``coin <= prob_acc / threshold_acc`` (``prob_acc``:
the target mass of the children tried so far at the node). "DFlash creates unseeded verification coins with
``torch.rand(..., dtype=torch.float32)``, whose range includes zero. A draft model may legitimately propose a token
removed by the target model's top-k/top-p filtering. For that token, ``target_prob_single == 0`` and ``prob_acc ==
0``. If the RNG returns zero, the inclusive comparison evaluates ``0 <= 0`` and accepts the impossible draft"
(#35771). The fix (#35798): "Use the half-open condition ``coin < prob_acc / threshold_acc`` and require
``target_prob_single > 0`` before either acceptance path can take a draft".

The re-creation keeps the kernel's walk and arguments as in ``sglang_7207.py`` (one coin per node from
``uniform_samples``, a separate ``uniform_samples_for_final_sampling``, ``retrive_next_token`` /
``retrive_next_sibling`` links, rejected children copied into ``draft_probs`` so that the final draw from
``relu(target_probs - draft_probs)`` leaves them out) and the caller's float32 coins: torch draws a float32 uniform
as k * 2^-24 with k uniform on 0 .. 2^24 - 1, so the coin here is the layout's float64 uniform rounded down to that
grid (the same law; the coin is 0 with probability 2^-24). The target law is handed after the target's top-k (a
token it removed has probability 0), the draft law unfiltered. Left out: CUDA blocks, the relaxed thresholds (both
1.0), KV-cache bookkeeping. Written for verispec from the threads' description; no code copied.

Check: the ``tree-parent`` layout, chain:1 (DFlash verifies a chain), V = 3, the target after top-k = 2
p = (0.5, 0.5, 0), q = (0.2, 0.2, 0.6): the old predicate emits token 2 with probability 0.6 * 2^-24 (TV 3.6e-8,
above verispec's exact-mode threshold of 1e-9), the fixed one never. Exact mode finds the piece [0, 2^-24) of the
root's coin and gives TV 3.5762786854e-08 = 0.6 * 2^-24 to 1e-17 relative, and TV 0 for the fixed predicate.
"""

from __future__ import annotations

import math

import torch

BUG = {
    "repository": "sgl-project/sglang",
    "threads": ["sgl-project/sglang#35771", "sgl-project/sglang#35798"],
    "url": "https://github.com/sgl-project/sglang/issues/35771",
    "date": "2026-08-21",
    "title": "coin <= prob_acc accepts a zero-probability draft when the float32 coin is 0",
    "class": "other",
    "layout": "tree-parent", "tree": "chain:1",
    "target": [0.5, 0.5, 0.0], "draft": [0.2, 0.2, 0.6],
    "arrays": "torch",
    "mode": "auto",
}

#: torch.rand's float32 grid: 24 random bits.
FLOAT32_STEPS = 2 ** 24


def tree_speculative_sampling_target_only(predicts, accept_index, accept_token_num, candidates, retrive_index,
                                          retrive_next_token, retrive_next_sibling, uniform_samples,
                                          uniform_samples_for_final_sampling, target_probs, draft_probs,
                                          threshold_single=1.0, threshold_acc=1.0, *, half_open=True):
    """As SGLang's kernel; ``half_open=False`` is the predicate before #35798 (``coin <= prob_acc``, no check that
    the child has target mass)."""
    bs = candidates.shape[0]
    for bx in range(bs):
        node, accepted = 0, 0
        coin = float(uniform_samples[bx, 0])
        accept_index[bx, 0] = 0
        while True:
            child, prob_acc, chosen = int(retrive_next_token[bx, node]), 0.0, -1
            while child != -1:
                token = int(candidates[bx, child])
                target_prob_single = float(target_probs[bx, node, token])
                prob_acc += target_prob_single
                if half_open:
                    take = target_prob_single > 0 and (coin < prob_acc / threshold_acc
                                                       or target_prob_single >= threshold_single)
                else:
                    take = coin <= prob_acc / threshold_acc or target_prob_single >= threshold_single
                if take:
                    chosen = child
                    break
                draft_probs[bx, node, token] = target_probs[bx, node, token]
                child = int(retrive_next_sibling[bx, child])
            if chosen == -1:
                break
            predicts[bx, int(retrive_index[bx, node])] = int(candidates[bx, chosen])
            accepted += 1
            accept_index[bx, accepted] = chosen
            node = chosen
            coin = float(uniform_samples[bx, node])
        accept_token_num[bx] = accepted
        residual = torch.clamp(target_probs[bx, node] - draft_probs[bx, node], min=0)
        cumulative = torch.cumsum(residual, 0)
        threshold = float(uniform_samples_for_final_sampling[bx]) * float(cumulative[-1])
        token = int(torch.searchsorted(cumulative, torch.tensor([threshold], dtype=cumulative.dtype), right=True)[0])
        predicts[bx, int(retrive_index[bx, node])] = min(token, residual.shape[0] - 1)


def _float32_coin(u):
    """torch.rand(dtype=float32)'s value for the uniform u: u rounded down to the grid k * 2^-24."""
    return math.floor(float(u) * FLOAT32_STEPS) / FLOAT32_STEPS


def _verify(draft_tokens, parents, draft_probs, target_probs, uniforms, *, half_open):
    """The verify step around the kernel. Node n's coin is uniform n (n < N; node N, the last in parent order, is a
    leaf and has no children to test), the final coin uniform N."""
    bs, count = draft_tokens.shape
    num_draft_tokens = count + 1
    candidates = torch.cat([torch.zeros((bs, 1), dtype=torch.int64), draft_tokens.to(torch.int64)], dim=1)
    retrive_index = torch.arange(num_draft_tokens).repeat(bs, 1)
    next_token = torch.full((bs, num_draft_tokens), -1, dtype=torch.int64)
    next_sibling = torch.full((bs, num_draft_tokens), -1, dtype=torch.int64)
    for b in range(bs):
        last_child = {}
        for j in range(count):
            node, parent = j + 1, int(parents[b, j])
            if parent in last_child:
                next_sibling[b, last_child[parent]] = node
            else:
                next_token[b, parent] = node
            last_child[parent] = node
    coins = torch.tensor([[_float32_coin(uniforms[b, min(n, count)]) for n in range(num_draft_tokens)]
                          for b in range(bs)], dtype=torch.float64)
    final_coins = torch.tensor([_float32_coin(uniforms[b, count]) for b in range(bs)], dtype=torch.float64)
    predicts = torch.full((bs, num_draft_tokens), -1, dtype=torch.int64)
    accept_index = torch.full((bs, num_draft_tokens), -1, dtype=torch.int64)
    accept_token_num = torch.zeros(bs, dtype=torch.int64)
    tree_speculative_sampling_target_only(predicts, accept_index, accept_token_num, candidates, retrive_index,
                                          next_token, next_sibling, coins, final_coins, target_probs.clone(),
                                          torch.zeros_like(target_probs), half_open=half_open)
    depth = [0]
    for parent in parents[0].tolist():
        depth.append(depth[int(parent)] + 1)
    out = torch.full((bs, max(depth) + 1), -1, dtype=torch.int64)
    for b in range(bs):
        path = [int(n) for n in accept_index[b] if n >= 0]
        out[b, :len(path)] = torch.stack([predicts[b, n] for n in path])
    return out


def buggy(draft_tokens, parents, draft_probs, target_probs, uniforms):
    return _verify(draft_tokens, parents, draft_probs, target_probs, uniforms, half_open=False)


def fixed(draft_tokens, parents, draft_probs, target_probs, uniforms):
    return _verify(draft_tokens, parents, draft_probs, target_probs, uniforms, half_open=True)
