"""Best-of-K verification of K i.i.d. one-token drafts (layout "tree-parent", depth-1 trees, numpy).

Published rule: GBV of Thomas & Pal 2026 (arXiv 2602.16961) at path length L = 1. The root has K children drawn
i.i.d. from the draft law q. Rank the tokens by a strict total order; select the drafted child whose token ranks
highest. Under K i.i.d. draws the selected token has law

    q_max(t) = F(t)^K - (F(t) - q(t))^K,   F(t) = q-mass of the tokens ranked at or below t,

so the usual token-level test against q_max keeps the target law: accept the selected token x iff
u_x < min(1, p(x) / q_max(x)) (u_x = the uniform of the selected child's node); on acceptance emit x and a bonus
token from p(. | x) (the target row of that child node); on rejection emit one token from norm((p - q_max)+).
Both final draws use u[:, N]. `verify` ranks by the key (p/q, token id), lexicographic, and uses that ONE order for
the CDF and for the choice of the child (any strict order is lossless as long as both agree; p/q puts the tokens
the target prefers on top, which maximises acceptance).

Bug re-implemented by `verify_inconsistent_ties` (a representative defect, not a reported issue): it ranks by the
clipped ratio min(1, p/q), so every token with p >= q ties at 1. The CDF F breaks the ties by token id (a lower id
ranks lower) but the child selection breaks them by drafting order (the first drafted among the tied children
wins). When two drafted tokens tie, the token actually selected no longer has law q_max, so the acceptance
probabilities and the residual are computed for the wrong proposal: the function is LOSSY.

Both functions are pure and deterministic: all randomness comes from `uniforms`.
"""

import numpy as np


def _inverse_cdf(r, u):
    """Inverse-CDF draw of the (maybe unnormalised) law r [B, V] with uniforms u [B]; returns int64 [B]."""
    c = np.cumsum(r, axis=-1)  # [B, V]
    threshold = u * c[:, -1]  # [B]
    token = np.sum(c <= threshold[:, None], axis=-1)  # [B]  first t with c[t] > u * sum(r)
    last_positive = r.shape[-1] - 1 - np.argmax(r[:, ::-1] > 0, axis=-1)  # [B]
    return np.minimum(token, last_positive).astype(np.int64)


def _best_of_k(draft_tokens, parents, draft_probs, target_probs, uniforms, clipped_ties):
    draft_tokens = np.asarray(draft_tokens, dtype=np.int64)  # [B, K]
    parents = np.asarray(parents, dtype=np.int64)  # [B, K]
    draft_probs = np.asarray(draft_probs)  # [B, K, V]
    target_probs = np.asarray(target_probs)  # [B, K+1, V]
    uniforms = np.asarray(uniforms)  # [B, K+1]
    batch, k = draft_tokens.shape
    rows = np.arange(batch)  # [B]
    if np.any(parents != 0):
        raise ValueError("best_of_k expects depth-1 trees: every drafted node must be a child of the root")

    p = target_probs[:, 0]  # [B, V]  target law at the root
    if k == 0:
        return _inverse_cdf(p, uniforms[:, 0])[:, None]
    q = draft_probs[:, 0]  # [B, V]  draft law at the root (shared by all children)

    with np.errstate(divide="ignore", invalid="ignore"):
        key = np.where(q > 0, p / np.where(q > 0, q, 1.0), np.inf)  # [B, V]  p / q, +inf where q = 0
    if clipped_ties:
        key = np.minimum(key, 1.0)  # [B, V]  the bug: every token with p >= q ties at 1
    order = np.argsort(key, axis=-1, kind="stable")  # [B, V]  ascending (key, token id)
    rank = np.empty_like(order)  # [B, V]  position of each token in that order
    np.put_along_axis(rank, order, np.arange(q.shape[-1])[None, :], axis=-1)

    cdf_sorted = np.cumsum(np.take_along_axis(q, order, axis=-1), axis=-1)  # [B, V]
    cdf = np.empty_like(cdf_sorted)  # [B, V]  F(t)
    np.put_along_axis(cdf, order, cdf_sorted, axis=-1)
    below = np.maximum(cdf - q, 0.0)  # [B, V]  F_(t)
    q_max = cdf**k - below**k  # [B, V]  law of the selected token under K i.i.d. draws

    if clipped_ties:
        child_key = np.take_along_axis(key, draft_tokens, axis=-1)  # [B, K]  ties left to argmax: first drafted
    else:
        child_key = np.take_along_axis(rank, draft_tokens, axis=-1)  # [B, K]  strict order (p/q, token id)
    chosen = np.argmax(child_key, axis=-1)  # [B]  column j: node j+1
    x = draft_tokens[rows, chosen]  # [B]

    accept = uniforms[rows, chosen] * q_max[rows, x] < p[rows, x]  # [B]  u < min(1, p / q_max)
    residual = np.maximum(p - q_max, 0.0)  # [B, V]
    residual = np.where(residual.sum(axis=-1, keepdims=True) > 0, residual, p)  # [B, V]
    law = np.where(accept[:, None], target_probs[rows, chosen + 1], residual)  # [B, V]  bonus or correction
    final = _inverse_cdf(law, uniforms[:, k])  # [B]

    out = np.full((batch, 2), -1, dtype=np.int64)  # [B, 2]
    out[:, 0] = np.where(accept, x, final)
    out[:, 1] = np.where(accept, final, -1)
    return out


def verify(draft_tokens, parents, draft_probs, target_probs, uniforms):
    """GBV at L = 1 over K i.i.d. children of the root, one strict order (p/q, token id) (correct, lossless).

    draft_tokens int64 [B, K] (token of node j+1); parents int64 [B, K] (all 0); draft_probs float [B, K, V]
    (every row: q at the root); target_probs float [B, K+1, V] (row 0: p at the root, row j+1: p after child j+1);
    uniforms float64 [B, K+1]. Returns int64 [B, 2] ([B, 1] when K = 0): the accepted child and its bonus, or one
    correction token then -1.
    """
    return _best_of_k(draft_tokens, parents, draft_probs, target_probs, uniforms, clipped_ties=False)


def verify_inconsistent_ties(draft_tokens, parents, draft_probs, target_probs, uniforms):
    """GBV at L = 1 ranking by min(1, p/q): CDF ties by token id, child ties by drafting order (LOSSY).

    Shapes as in `verify`: draft_tokens [B, K], parents [B, K], draft_probs [B, K, V], target_probs [B, K+1, V],
    uniforms [B, K+1]; returns int64 [B, 2].
    """
    return _best_of_k(draft_tokens, parents, draft_probs, target_probs, uniforms, clipped_ties=True)
