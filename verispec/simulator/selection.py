"""GBV's strict token order and its greedily selected path (Thomas & Pal 2026, arXiv 2602.16961).

The *rank key* at a node u orders tokens by p(t|u) / q(t|u), ties (the tie rule of
verispec.simulator.ranking, the same in float and exact mode) by token id, the larger id ranking higher;
tokens with q(t|u) = 0 are never drafted and rank above every drafted one (they carry no draft mass, so
where they sit changes nothing). The *selected path* starts at the root and moves to the child with the
largest key at every step. ONE order serves both the descent and GBV's CDFs: breaking ties differently in
the two places is lossy (docs/reference.md, trap 6; tests/support/broken_paths.py).

GBV (verispec.verifiers.gbv) verifies the selected path; the multi-step LP's ``selected-path`` class
(verispec.bounds.multistep) restricts verifiers to it. Both use these functions.
"""

from __future__ import annotations

from verispec import backend
from verispec.errors import InvalidTreeError
from verispec.simulator.ranking import order_with_ties, ranks_from_order
from verispec.simulator.trees import DraftTree, TreeBatch


def rank_order(p, q):
    """Tokens in increasing rank-key order, [..., V] (p and q [..., V], any backend)."""
    xp = backend.namespace(q)
    ratio = backend.divide(p, q, where_zero=backend.zero(q))
    tier = xp.astype(~(q > 0), xp.int64)
    return order_with_ties(ratio, descending=False, tier=tier)


def token_ranks(p, q):
    """rank[..., t]: position of token t in the rank-key order (0 = lowest), [..., V]."""
    return ranks_from_order(rank_order(p, q))


def mass_ranked_below(p, q):
    """below[..., t] = sum of q(s) over tokens s ranked strictly below t, [..., V]."""
    xp = backend.namespace(q)
    order = rank_order(p, q)
    ordered = xp.take_along_axis(q, order, axis=-1)
    before = backend.cumulative_sum(ordered) - ordered  # exclusive prefix sums, in rank order
    return xp.take_along_axis(before, ranks_from_order(order), axis=-1)


def selected_path(batch: TreeBatch) -> list:
    """Node ids of the selected path of every row, one array [N] per depth 0..L (all rows must reach a
    leaf at the same depth, as K i.i.d. paths of one length do)."""
    rows = backend.arange(batch.num_rows, batch.tokens)
    selected = [backend.index_array([0] * batch.num_rows, batch.tokens)]
    for level in range(1, max(batch.depth) + 1):
        candidates = [node for node in range(batch.num_nodes) if batch.depth[node] == level]
        here = selected[-1]
        xp = backend.namespace(here)
        is_child = xp.stack([here == batch.parent[c] for c in candidates], axis=1)  # [N, candidates]
        found = xp.any(is_child, axis=1)
        if not bool(xp.any(found)):
            break
        if not bool(xp.all(found)):
            raise InvalidTreeError("GBV's selection needs every root-to-leaf path to have the same length")
        ranks = token_ranks(batch.p[rows, here], batch.q[rows, here])  # [N, V] at each row's node
        scores = xp.stack([backend.take(ranks, batch.tokens[:, c]) for c in candidates], axis=1)
        choice = xp.argmax(xp.where(is_child, scores, -1), axis=1)
        selected.append(backend.index_array(candidates, batch.tokens)[choice])
    return selected


def greedy_path(tree: DraftTree) -> list[int]:
    """Node ids root..leaf of one tree's selected path (the one-row case of ``selected_path``)."""
    return [int(nodes[0]) for nodes in selected_path(tree.as_batch())]
