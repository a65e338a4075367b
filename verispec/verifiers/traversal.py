"""Traversal Verification (Weng et al. 2025, "Traversal Verification for Speculative Tree Decoding",
arXiv 2505.12398, Alg. 1): verify a draft tree from the leaves to the root.

Every node a carries a sequence-level weight p_a; p_root = 1 and, for a node a with parent b,

    p_a = min(p_b * p(x_a | X_b) / q(x_a | X_b), 1)                                    (init formula)

Loop: a = the first leaf in post-order (from the root always take the first remaining child). If a is the
root, emit Y ~ the root's current p(. | X_root) and stop. Otherwise accept the path root..a with
probability p_a and emit Y ~ the current (possibly residual) p(. | X_a); on rejection delete a and update
its parent b with the OLD values on the right:

    S = sum_x (p_b p(x | X_b) - q(x | X_b))+
    p(. | X_b) <- (p_b p(. | X_b) - q(. | X_b))+ / S
    q(. | X_b) <- q(. | X_b) with x_a zeroed, renormalised
    p_b        <- S / (S + 1 - p_b)                                                     (1 when 0 / 0)

then recompute p for every remaining descendant of b with the init formula. On a chain it is block
verification (Sun et al. 2024). Getting the update S / (S + 1 - p_b), the recomputation or the residual
at emission wrong is lossy (reference, trap 4; tests/broken_paths.py).

Glossary: *weight* = p_a above; *state* of a node = (weight, current target p, current draft q).

Exact law without enumerating choice traces. The only randomness is one Bernoulli per visited leaf, and
the state after a rejection does not depend on how the subtree below was rejected. So the leaves are
visited in one fixed order (post-order, a node counted when its last child is deleted), each with a
deterministic state: the emission law is a product of rejection probabilities along that order, computed
in one post-order recursion in O(num_nodes * V).

Draft law. The rule needs each node's children to be drawn one after another without replacement from
q(. | node), in child-list order, each child's subtree independent of its later siblings. On i.i.d. child
lists (duplicates) ``TraversalIIDVerifier`` runs the same rule on the DISTINCT children in order of first
appearance; docs/traversal_iid.md explains why that is lossless too.
"""

from __future__ import annotations

import numpy as np

from verispec.simulator.chooser import Chooser
from verispec.simulator.distributions import (
    batched_stop_probability,
    batched_weighted_residual,
    normalize,
    ratio_min_one,
    stop_probability,
    weighted_residual,
    zeros,
)
from verispec.simulator.drafters import DraftLaw
from verispec.simulator.trees import DraftTree
from verispec.verifiers.base import Verifier


def child_weight(weight, p: np.ndarray, q: np.ndarray, token: int):
    """The init formula: min(p_b p(x_a | X_b) / q(x_a | X_b), 1) with b's CURRENT state."""
    return ratio_min_one(weight * p[token], q[token])


def deletion_update(weight, p: np.ndarray, q: np.ndarray, token: int):
    """The parent's new state after its first remaining child ``token`` is deleted (Weng et al., Alg. 1).

    Returns (S / (S + 1 - weight), norm((weight p - q)+), q with ``token`` zeroed and renormalised); new
    arrays, the inputs are not modified. The first two are block verification's stop probability and
    correction (``distributions.stop_probability`` and ``weighted_residual``, shared with ``bv``, with
    their float64 fallback when rounding empties the residual). S / (S + 1 - weight) is 0/0 only when
    weight = 1 and p = q, a state whose children all have weight 1 and so are never deleted; 1 is used.
    """
    remaining = q.copy()
    remaining[token] = 0 * remaining[token]
    return stop_probability(weight, p, q), weighted_residual(weight, p, q), normalize(remaining)


def traversal_emission_law(tree: DraftTree) -> np.ndarray:
    """law[node, token] of Traversal Verification, by one post-order pass (see the module docstring)."""
    law = zeros((tree.num_nodes, tree.vocab_size), exact=tree.exact)
    one = 1 + 0 * tree.p[0, 0]

    def visit(node: int, weight, reach):
        """Process the subtree of ``node`` entered with probability ``reach`` (everything earlier in
        post-order rejected) and node weight ``weight``; return the probability that it is then deleted."""
        p, q = tree.p[node], tree.q[node]
        for child in tree.child_nodes[node]:
            token = int(tree.token[child])
            reach = visit(child, child_weight(weight, p, q, token), reach)
            weight, p, q = deletion_update(weight, p, q, token)
        if node == 0:  # the root, once a leaf, always emits
            law[node] += reach * p
            return reach * 0
        law[node] += reach * weight * p
        return reach * (1 - weight)

    visit(0, one, one)
    return law


def traversal_procedure(tree: DraftTree, chooser: Chooser) -> tuple[int, int]:
    """Weng et al., Alg. 1, as written: a mutable tree of states, one uniform per visited leaf."""
    weight = [None] * tree.num_nodes
    target = [tree.p[n] for n in range(tree.num_nodes)]
    draft = [tree.q[n] for n in range(tree.num_nodes)]
    remaining = [list(children) for children in tree.child_nodes]

    def recompute_below(node: int):
        for child in remaining[node]:
            weight[child] = child_weight(weight[node], target[node], draft[node], int(tree.token[child]))
            recompute_below(child)

    weight[0] = 1 + 0 * tree.p[0, 0]
    recompute_below(0)
    while True:
        leaf = 0
        while remaining[leaf]:
            leaf = remaining[leaf][0]
        if leaf == 0:
            return 0, chooser.categorical(target[0])
        if chooser.bernoulli(weight[leaf]):
            return leaf, chooser.categorical(target[leaf])
        parent = int(tree.parent[leaf])
        remaining[parent].pop(0)
        weight[parent], target[parent], draft[parent] = deletion_update(
            weight[parent], target[parent], draft[parent], int(tree.token[leaf]))
        recompute_below(parent)


def _batched_deletion_update(weight: np.ndarray, p: np.ndarray, q: np.ndarray, token: np.ndarray):
    """``deletion_update`` row by row: weight [N], p and q [N, V], token [N]; new arrays."""
    remaining = q.copy()
    remaining[np.arange(len(token)), token] = 0.0
    total = remaining.sum(axis=1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        new_draft = np.where(total > 0, remaining / total, 0.0)
    return batched_stop_probability(weight, p, q), batched_weighted_residual(weight, p, q), new_draft


def batched_traversal_laws(group) -> np.ndarray:
    """``traversal_emission_law`` for every row of a ``TreeGroup`` (one topology) at once, [N, n, V]: the
    same post-order recursion over the topology, with numpy over the rows."""
    rows = group.num_rows
    everyone = np.arange(rows)
    law = np.zeros((rows, group.num_nodes, group.vocab_size))

    def visit(node: int, weight: np.ndarray, reach: np.ndarray) -> np.ndarray:
        p, q = group.p(node), group.q(node)
        for child in group.child_nodes[node]:
            token = group.tokens[:, child]
            child_weight_ = np.minimum(weight * p[everyone, token] / q[everyone, token], 1.0)
            reach = visit(child, child_weight_, reach)
            weight, p, q = _batched_deletion_update(weight, p, q, token)
        if node == 0:
            law[:, node] += reach[:, None] * p
            return reach * 0
        law[:, node] += (reach * weight)[:, None] * p
        return reach * (1 - weight)

    visit(0, np.ones(rows), np.ones(rows))
    return law


class TraversalVerifier(Verifier):
    """Traversal Verification on trees whose siblings are drawn without replacement (``branch:...``)."""

    name = "traversal"
    valid_for = frozenset({DraftLaw.WITHOUT_REPLACEMENT})

    def emission_law(self, tree: DraftTree) -> np.ndarray:
        return traversal_emission_law(tree)

    def emission_laws(self, group) -> np.ndarray:
        """``emission_law`` for every row of a ``TreeGroup`` at once, [N, n, V] (fast enumeration)."""
        return batched_traversal_laws(group)

    def procedure(self, tree: DraftTree, chooser: Chooser) -> tuple[int, int]:
        return traversal_procedure(tree, chooser)


class TraversalIIDVerifier(TraversalVerifier):
    """Traversal Verification on i.i.d. child lists (``iid:K,L``, ``delayed:K,L1,L2``, ``branch-iid:...``).

    Weng et al. define the rule for siblings drawn without replacement only. Here it runs unchanged on
    each node's DISTINCT children in order of first appearance (``DraftTree.child_nodes``), as if they had
    been drawn without replacement. That is exactly lossless: given the first distinct child c and its
    multiplicity m, c ~ q, c's subtree is drawn from m i.i.d. continuations, and the later siblings are
    i.i.d. draws from q(. | not c), independent of c's subtree; the induction behind Traversal needs only
    that (docs/traversal_iid.md gives the argument and the exact checks). Any other order of the distinct
    children (e.g. by token id) is lossy.
    """

    name = "traversal-iid"
    valid_for = frozenset({DraftLaw.IID_CHILDREN, DraftLaw.ROOT_IID_PATHS})
