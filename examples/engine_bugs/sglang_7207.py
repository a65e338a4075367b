"""SGLang: the final token of a tree step drawn with the acceptance coin that just failed
(sgl-project/sglang#7207, #7231, 2025-06-15).

SGLang verifies an EAGLE draft tree with ``tree_speculative_sampling_target_only``: at each node one coin from
``uniform_samples`` walks the node's children in order, adding each child's target probability to ``prob_acc`` and
accepting the first child with ``coin <= prob_acc`` (naive sampling by inverse CDF; a rejected child's target mass
is copied into ``draft_probs`` so that ``relu(target_probs - draft_probs)`` leaves it out). The step's last token
is drawn from that residual by inverse CDF. Before #7207 that last draw reused the node's coin; after a rejection
the coin is known to lie above every rejected child's cumulative mass, so the residual is read only on the top
part of its CDF and its first tokens are under-drawn. #7207 and #7231: "Use a different coin for the final
sampling in speculative sampling" (a new ``uniform_samples_for_final_sampling [bs]``). The threads show the fix's
description and call sites, not the old kernel lines; the reuse of the node's coin is read from that sentence and
from the new argument.

The re-creation keeps the kernel's arguments (``predicts``, ``accept_index``, ``accept_token_num``, ``candidates``
[bs, num_draft_tokens] with the root at index 0, ``retrive_index``, ``retrive_next_token``,
``retrive_next_sibling``, ``uniform_samples`` [bs, num_draft_tokens], ``uniform_samples_for_final_sampling``
[bs], ``target_probs`` and ``draft_probs`` [bs, num_draft_tokens, V], ``threshold_single``, ``threshold_acc``) and
its walk, and the caller's draws (``torch.rand`` of the coins, as EAGLE's verify does); the verispec tree-parent
arrays are turned into sglang's first-child / next-sibling links. Left out: CUDA blocks, the thresholds' relaxed
acceptance (both 1.0, the lossless setting), the KV-cache bookkeeping. Coins are float64 here (float32 in SGLang)
so that no coin rounds to 1.0. Written for verispec from the threads' description; no code copied.

Check: chain:1 (one child under the root) at V = 3, p = (0.5, 0.3, 0.2), q = (0.2, 0.2, 0.6): after the child x is
rejected the coin lies in (p(x), 1], and the residual, which keeps two tokens, is read on that part only. Exact
mode gives TV 87/1400 = 0.062143 for the old kernel, equal to the closed form (the draw's law integrated over the
conditioned coin, in Fractions), and 5e-17 for the fixed one. With two distinct children under the root at V = 3
the bias vanishes (a rejection of both leaves one token in the residual; an acceptance moves on to a fresh coin),
so the smallest witness is a chain.
"""

from __future__ import annotations

import torch

BUG = {
    "repository": "sgl-project/sglang",
    "threads": ["sgl-project/sglang#7207", "sgl-project/sglang#7231"],
    "url": "https://github.com/sgl-project/sglang/pull/7207",
    "date": "2025-06-15",
    "title": "final sampling reuses the acceptance coin of the node where the walk stopped",
    "class": "keyed randomness reuse",
    "layout": "tree-parent", "tree": "chain:1",
    "target": [0.5, 0.3, 0.2], "draft": [0.2, 0.2, 0.6],
    "rng": "capture", "arrays": "torch", "per_row": True,
    "mode": "auto",
}


def tree_speculative_sampling_target_only(predicts, accept_index, accept_token_num, candidates, retrive_index,
                                          retrive_next_token, retrive_next_sibling, uniform_samples,
                                          uniform_samples_for_final_sampling, target_probs, draft_probs,
                                          threshold_single=1.0, threshold_acc=1.0, *, final_coin_is_fresh=True):
    """One block per request: walk the tree from the root, one coin per node; write the accepted path's tokens
    and the final token into ``predicts`` [bs, num_draft_tokens] (at the accepted nodes' ``retrive_index``) and
    their node indices into ``accept_index``; ``accept_token_num`` [bs] counts the accepted drafts.
    ``final_coin_is_fresh=False`` is the code before #7207: the final draw reads the last node's coin."""
    bs, num_draft_tokens = candidates.shape
    for bx in range(bs):
        node = 0
        coin = float(uniform_samples[bx, 0])
        accept_index[bx, 0] = 0
        accepted = 0
        while True:
            child = int(retrive_next_token[bx, node])
            prob_acc = 0.0
            chosen = -1
            while child != -1:
                token = int(candidates[bx, child])
                target_prob_single = float(target_probs[bx, node, token])
                prob_acc += target_prob_single
                if coin <= prob_acc / threshold_acc or target_prob_single >= threshold_single:
                    chosen = child
                    break
                draft_probs[bx, node, token] = target_probs[bx, node, token]  # leave it out of the residual
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
        final_coin = float(uniform_samples_for_final_sampling[bx]) if final_coin_is_fresh else coin
        threshold = final_coin * float(residual.sum())
        cumulative = torch.cumsum(residual, 0)
        token = int(torch.searchsorted(cumulative, torch.tensor([threshold], dtype=cumulative.dtype), right=True)[0])
        predicts[bx, int(retrive_index[bx, node])] = min(token, residual.shape[0] - 1)


def _links(parents):
    """sglang's ``retrive_next_token`` / ``retrive_next_sibling`` [bs, N+1] from verispec's parents [bs, N]."""
    bs, count = parents.shape
    next_token = torch.full((bs, count + 1), -1, dtype=torch.int64)
    next_sibling = torch.full((bs, count + 1), -1, dtype=torch.int64)
    for b in range(bs):
        last_child = {}
        for j in range(count):
            node, parent = j + 1, int(parents[b, j])
            if parent in last_child:
                next_sibling[b, last_child[parent]] = node
            else:
                next_token[b, parent] = node
            last_child[parent] = node
    return next_token, next_sibling


def _verify(draft_tokens, parents, draft_probs, target_probs, *, final_coin_is_fresh):
    """EAGLE's verify step around the kernel: candidates with the root at 0, the coins drawn by the caller."""
    bs, count = draft_tokens.shape
    num_draft_tokens = count + 1
    candidates = torch.cat([torch.zeros((bs, 1), dtype=torch.int64), draft_tokens.to(torch.int64)], dim=1)
    retrive_index = torch.arange(num_draft_tokens).repeat(bs, 1)
    retrive_next_token, retrive_next_sibling = _links(parents)
    coins = torch.rand((bs, num_draft_tokens), dtype=torch.float64)
    coins_for_final_sampling = torch.rand((bs,), dtype=torch.float64)
    predicts = torch.full((bs, num_draft_tokens), -1, dtype=torch.int64)
    accept_index = torch.full((bs, num_draft_tokens), -1, dtype=torch.int64)
    accept_token_num = torch.zeros(bs, dtype=torch.int64)
    sampled_draft_probs = torch.zeros_like(target_probs)  # target-only: the draft law is not read
    tree_speculative_sampling_target_only(predicts, accept_index, accept_token_num, candidates, retrive_index,
                                          retrive_next_token, retrive_next_sibling, coins,
                                          coins_for_final_sampling, target_probs.clone(), sampled_draft_probs,
                                          final_coin_is_fresh=final_coin_is_fresh)
    depth = int(max(_depths(parents[b]) for b in range(bs)))
    out = torch.full((bs, depth + 1), -1, dtype=torch.int64)
    for b in range(bs):
        path = [int(n) for n in accept_index[b] if n >= 0]  # root, then the accepted nodes
        out[b, :len(path)] = torch.stack([predicts[b, n] for n in path])
    return out


def _depths(parents):
    depth = [0]
    for parent in parents.tolist():
        depth.append(depth[int(parent)] + 1)
    return max(depth)


def buggy(draft_tokens, parents, draft_probs, target_probs):
    return _verify(draft_tokens, parents, draft_probs, target_probs, final_coin_is_fresh=False)


def fixed(draft_tokens, parents, draft_probs, target_probs):
    return _verify(draft_tokens, parents, draft_probs, target_probs, final_coin_is_fresh=True)
