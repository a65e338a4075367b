"""GBV's strict token order and its greedily selected path (Thomas & Pal 2026, arXiv 2602.16961).

The *rank key* at a node u orders tokens by p(t|u) / q(t|u), ties (the tie rule of
verispec.simulator.ranking, the same in float and exact mode) by token id, the larger id ranking higher;
tokens with q(t|u) = 0 are never drafted and rank above every drafted one (they carry no draft mass, so
where they sit changes nothing). The *selected path* starts at the root and moves to the child with the
largest key at every step. ONE order serves both the descent and GBV's CDFs: breaking ties differently in
the two places is lossy (docs/guides/reference.md, trap 6; tests/support/broken_paths.py).

GBV (verispec.verifiers.gbv) verifies the selected path; the multi-step LP's ``selected-path`` class
(verispec.bounds.multistep) restricts verifiers to it. Both use these functions.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

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


def mass_ranked_below(p, q, order=None):
    """below[..., t] = sum of q(s) over tokens s ranked strictly below t, [..., V]; ``order`` [..., V] is
    ``rank_order(p, q)`` when the caller has it."""
    order = rank_order(p, q) if order is None else order
    ordered = backend.take_along_last(q, order)
    before = backend.cumulative_sum(ordered) - ordered  # exclusive prefix sums, in rank order
    return backend.unpermute(before, order)


@dataclass(frozen=True)
class NodeRanking:
    """The rank order at one node of each of N rows, computed once per distinct context (equal context ids of
    a ``TreeBatch`` mean equal p and q) and only when first read: ``order`` [U, V] is ``rank_order`` of the
    distinct rows' ``p`` and ``q`` [U, V], and row r ranks as distinct row ``row[r]`` ([N]). All rows of one
    root share its ranking."""

    p: Any
    q: Any
    row: Any

    @cached_property
    def order(self):
        return rank_order(self.p, self.q)

    @classmethod
    def at(cls, batch: TreeBatch, nodes) -> NodeRanking:
        """The ranking at node ``nodes[r]`` of each row r (``nodes`` [N])."""
        rows = backend.arange(batch.num_rows, nodes)
        first, row = backend.unique_rows(batch.contexts[rows, nodes][:, None])
        p, q = batch.p[first, nodes[first]], batch.q[first, nodes[first]]  # [U, V]
        return cls(p=p, q=q, row=row)

    def ranks_at(self, tokens):
        """The rank of tokens[r, j] in row r's order (0 = lowest), [N, m] for ``tokens`` [N, m]."""
        return ranks_from_order(self.order)[self.row[:, None], tokens]

    def mass_below(self):
        """``mass_ranked_below`` of every row, [N, V]."""
        return mass_ranked_below(self.p, self.q, self.order)[self.row]


def selected_path(batch: TreeBatch) -> list:
    """Node ids of the selected path of every row, one array [N] per depth 0..L (all rows must reach a
    leaf at the same depth, as K i.i.d. paths of one length do)."""
    return ranked_selected_path(batch)[0]


def ranked_selected_path(batch: TreeBatch) -> tuple[list, list[NodeRanking]]:
    """(``selected_path``, the ranking at each of its nodes of depth < L): GBV's CDFs read the rankings that
    chose the path. A level with one candidate node needs no ranking to choose it."""
    selected = [backend.index_array([0] * batch.num_rows, batch.tokens)]
    rankings = []
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
        rankings.append(NodeRanking.at(batch, here))
        if len(candidates) == 1:  # every row's one child (a single path, or K paths that all agree so far)
            selected.append(backend.index_array(candidates * batch.num_rows, batch.tokens))
            continue
        scores = rankings[-1].ranks_at(batch.tokens[:, candidates])  # [N, candidates]
        choice = xp.argmax(xp.where(is_child, scores, -1), axis=1)
        selected.append(backend.index_array(candidates, batch.tokens)[choice])
    return selected, rankings


def greedy_path(tree: DraftTree) -> list[int]:
    """Node ids root..leaf of one tree's selected path (the one-row case of ``selected_path``)."""
    return [int(nodes[0]) for nodes in selected_path(tree.as_batch())]
