"""SpecInfer tree verification with recursive rejection sampling (layouts "tree-parent" and "tree-sibling", numpy).

Published rule: the multi-step speculative sampling of SpecInfer (Miao et al., arXiv 2305.09781) for a token tree
whose children of a node are i.i.d. draws from the draft law q(. | node) ("with replacement": two children may
carry the same token). Walk down from the root. At the current node set r = p(. | node) and test its children in
sibling (drafting) order: child x is accepted iff u_child < r(x) / q(x), and the walk moves to it; on rejection
r = norm((r - q)+) and the next child is tested (a repeated token still applies its update). If all children are
rejected one token is drawn from r; at a leaf the bonus token is drawn from p(. | leaf). Both draws use u[:, N].

Tree arrays: node 0 is the root, drafted nodes are 1..N, a parent comes before its children and siblings appear in
drafting order. draft_tokens[:, j] is the token of node j+1, draft_probs[:, j] the law q at its parent (shared by
siblings), target_probs[:, n] the target law p at node n, uniforms[:, j] (j < N) the test of node j+1 and
uniforms[:, N] the single final inverse-CDF draw.

Bug re-implemented by `verify_resample_from_target` (a representative defect, the mix-up asked about in
NJUNLP/MCSD#5, where the code turned out to be correct): once every child of a node is rejected, it draws the
correction from the target law p(. | node) instead of from the residual r left by the rejections. The rejected
children have already been given their accepted share of p, so drawing again from p gives the drafted tokens
too much mass and the others too little: the function is LOSSY whenever a rejection can happen (p != q).
`verify` (tree-parent layout) and `verify_sibling` (tree-sibling layout) are correct.

All functions are pure and deterministic (randomness only from `uniforms`) and vectorised over the batch: each
row keeps its current node, its next child to test and its residual r [B, V]; the loop runs over walk steps (every
row still walking tests one child per step; at most N + 1 steps).
"""

import numpy as np


def _inverse_cdf(r, u):
    """Inverse-CDF draw of the (maybe unnormalised) law r [B, V] with uniforms u [B]; returns int64 [B]."""
    c = np.cumsum(r, axis=-1)  # [B, V]
    threshold = u * c[:, -1]  # [B]
    token = np.sum(c <= threshold[:, None], axis=-1)  # [B]  first t with c[t] > u * sum(r)
    last_positive = r.shape[-1] - 1 - np.argmax(r[:, ::-1] > 0, axis=-1)  # [B]
    return np.minimum(token, last_positive).astype(np.int64)


def _normalised_residual(a, b):
    """norm((a - b)+) per row [B, V]; rows where (a - b)+ sums to 0 fall back to norm(a)."""
    res = np.maximum(a - b, 0.0)  # [B, V]
    total = res.sum(axis=-1, keepdims=True)  # [B, 1]
    res = np.where(total > 0, res, a)  # [B, V]
    total = res.sum(axis=-1, keepdims=True)  # [B, 1]
    return res / np.where(total > 0, total, 1.0)


def _depth_from_parents(parents):
    """Depth of every node 0..N from parents [B, N]; returns int64 [B, N+1]."""
    batch, n = parents.shape
    rows = np.arange(batch)  # [B]
    depth = np.zeros((batch, n + 1), dtype=np.int64)  # [B, N+1]
    for j in range(n):
        depth[:, j + 1] = depth[rows, parents[:, j]] + 1
    return depth


def _siblings_from_parents(parents):
    """first_child and next_sibling [B, N+1] (-1 if none) from parents [B, N], siblings in node order."""
    batch, n = parents.shape
    rows = np.arange(batch)  # [B]
    first_child = np.full((batch, n + 1), -1, dtype=np.int64)  # [B, N+1]
    next_sibling = np.full((batch, n + 1), -1, dtype=np.int64)  # [B, N+1]
    for j in reversed(range(n)):  # prepend in reverse order, so each sibling list ends up in node order
        node = j + 1
        parent = parents[:, j]  # [B]
        next_sibling[:, node] = first_child[rows, parent]
        first_child[rows, parent] = node
    return first_child, next_sibling


def _walk(draft_tokens, first_child, next_sibling, max_depth, draft_probs, target_probs, uniforms, from_target):
    """Top-down recursive rejection sampling; from_target=True draws the correction from p (the bug)."""
    batch, n = draft_tokens.shape
    out = np.full((batch, max_depth + 1), -1, dtype=np.int64)  # [B, D+1]
    node = np.zeros(batch, dtype=np.int64)  # [B]  current node
    pos = np.zeros(batch, dtype=np.int64)  # [B]  tokens emitted so far (= depth of node)
    child = first_child[:, 0].copy()  # [B]  next child of node to test (-1: none left)
    r = np.array(target_probs[:, 0], dtype=np.float64)  # [B, V]  residual law at node
    u_final = uniforms[:, n]  # [B]
    live = np.arange(batch)  # rows still walking (done = not in live)

    while live.size:
        c = child[live]  # [b]
        stop = c < 0  # [b]  no child left: leaf (bonus) or all children rejected (correction)
        if stop.any():
            rows = live[stop]
            law = target_probs[rows, node[rows]] if from_target else r[rows]  # [s, V]
            out[rows, pos[rows]] = _inverse_cdf(law, u_final[rows])
            live, c = live[~stop], c[~stop]
            if not live.size:
                break
        k = np.arange(live.size)  # [b]
        x = draft_tokens[live, c - 1]  # [b]
        q = draft_probs[live, c - 1]  # [b, V]
        r_live = r[live]  # [b, V]
        ok = uniforms[live, c - 1] * q[k, x] < r_live[k, x]  # [b]  u < r(x) / q(x)

        acc, c_acc = live[ok], c[ok]
        out[acc, pos[acc]] = x[ok]
        pos[acc] += 1
        node[acc] = c_acc
        r[acc] = target_probs[acc, c_acc]
        child[acc] = first_child[acc, c_acc]

        rej, c_rej = live[~ok], c[~ok]
        r[rej] = _normalised_residual(r_live[~ok], q[~ok])
        child[rej] = next_sibling[rej, c_rej]
    return out


def _walk_parents(draft_tokens, parents, draft_probs, target_probs, uniforms, from_target):
    """Tree-parent layout: derive the sibling lists and the depth from parents [B, N], then walk."""
    draft_tokens = np.asarray(draft_tokens, dtype=np.int64)  # [B, N]
    parents = np.asarray(parents, dtype=np.int64)  # [B, N]
    first_child, next_sibling = _siblings_from_parents(parents)  # [B, N+1] each
    max_depth = int(_depth_from_parents(parents).max(initial=0))
    return _walk(
        draft_tokens,
        first_child,
        next_sibling,
        max_depth,
        np.asarray(draft_probs),
        np.asarray(target_probs),
        np.asarray(uniforms),
        from_target,
    )


def verify(draft_tokens, parents, draft_probs, target_probs, uniforms):
    """SpecInfer tree verification, tree-parent layout (correct, lossless).

    draft_tokens int64 [B, N] (token of node j+1); parents int64 [B, N] (parent of node j+1, in 0..j);
    draft_probs float [B, N, V] (row j: q at the parent of node j+1); target_probs float [B, N+1, V]
    (row n: p at node n); uniforms float64 [B, N+1]. Returns int64 [B, D+1] (D = deepest node's depth):
    the accepted path's tokens then one correction or bonus token, left-aligned, padded with -1.
    """
    return _walk_parents(draft_tokens, parents, draft_probs, target_probs, uniforms, from_target=False)


def verify_sibling(draft_tokens, first_child, next_sibling, tree_mask, draft_probs, target_probs, uniforms):
    """SpecInfer tree verification, tree-sibling layout (correct, lossless).

    draft_tokens int64 [B, N]; first_child, next_sibling int64 [B, N+1] (-1 if none); tree_mask bool
    [B, N+1, N+1] (tree_mask[b, i, j]: node j is node i or an ancestor of it; a node's depth is its row sum - 1);
    draft_probs float [B, N, V]; target_probs float [B, N+1, V]; uniforms float64 [B, N+1].
    Returns int64 [B, D+1], as `verify`.
    """
    depth = np.asarray(tree_mask).sum(axis=-1) - 1  # [B, N+1]
    max_depth = int(depth.max(initial=0))
    return _walk(
        np.asarray(draft_tokens, dtype=np.int64),
        np.asarray(first_child, dtype=np.int64),
        np.asarray(next_sibling, dtype=np.int64),
        max_depth,
        np.asarray(draft_probs),
        np.asarray(target_probs),
        np.asarray(uniforms),
        from_target=False,
    )


def verify_resample_from_target(draft_tokens, parents, draft_probs, target_probs, uniforms):
    """The same walk, but after all children of a node are rejected it draws from p(. | node) (LOSSY).

    Shapes as in `verify`: draft_tokens [B, N], parents [B, N], draft_probs [B, N, V], target_probs [B, N+1, V],
    uniforms [B, N+1]; returns int64 [B, D+1].
    """
    return _walk_parents(draft_tokens, parents, draft_probs, target_probs, uniforms, from_target=True)
