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
at emission wrong is lossy (docs/guides/reference.md, trap 4; tests/support/broken_paths.py).

Glossary: *weight* = p_a above; *state* of a node = (weight, current target p, current draft q).

Exact law without enumerating choice traces. The only randomness is one Bernoulli per visited leaf, and
the state after a rejection does not depend on how the subtree below was rejected. So the leaves are
visited in one fixed order (post-order, a node counted when its last child is deleted), each with a
deterministic state: the emission law is a product of rejection probabilities along that order, computed
in one post-order recursion in O(num_nodes * V), batched over trees of one topology. The sampling
procedure (the parity twin) runs Alg. 1 as written, on a mutable tree. Summed over draft outcomes without
enumerating trees: the post-order DP of verispec.verifiers.traversal_dp (``rule_dp``), which runs this
class's ``child_weight`` and ``deletion_update``.

Draft law. The rule needs each node's children to be drawn one after another without replacement from
q(. | node), in child-list order, each child's subtree independent of its later siblings. On i.i.d. child
lists (duplicates) ``TraversalIIDVerifier`` runs the same rule on the DISTINCT children in order of first
appearance; docs/guides/traversal_iid.md explains why that is lossless too.
"""

from __future__ import annotations

import numpy as np

from verispec import backend
from verispec.simulator.chooser import Chooser
from verispec.simulator.distributions import normalize, ratio_min_one, stop_probability, weighted_residual
from verispec.simulator.drafters import DraftLaw
from verispec.simulator.interfaces import Verifier
from verispec.simulator.trees import DraftTree, LawForest, TreeBatch
from verispec.verifiers.traversal_dp import PostOrderDP


def child_weight(weight, p, q, token):
    """The init formula: min(p_b p(x_a | X_b) / q(x_a | X_b), 1) with b's CURRENT state; batched
    (weight [N], p and q [N, V], token [N] -> [N])."""
    return backend.minimum_one(weight * backend.take(p, token) / backend.take(q, token))


def deletion_update(weight, p, q, token):
    """The parent's new state after its first remaining child ``token`` is deleted (Weng et al., Alg. 1);
    batched (weight [N], p and q [N, V], token [N]).

    Returns (S / (S + 1 - weight), norm((weight p - q)+), q with ``token`` zeroed and renormalised); new
    arrays, the inputs are not modified. The first two are block verification's stop probability and
    correction (``distributions.stop_probability`` and ``weighted_residual``, shared with ``bv``, with
    their float64 fallback when rounding empties the residual). S / (S + 1 - weight) is 0/0 only when
    weight = 1 and p = q, a state whose children all have weight 1 and so are never deleted; 1 is used.
    """
    remaining = backend.where(backend.one_hot(token, q.shape[-1]), backend.zero(q), q)
    return stop_probability(weight, p, q), weighted_residual(weight, p, q), normalize(remaining)


#: Float64 entries of the [rows, W] states ``forest_stopping_masses`` updates at once.
FOREST_ELEMENTS = 1 << 22


class TraversalVerifier(Verifier):
    """Traversal Verification on trees whose siblings are drawn without replacement (``branch:...``)."""

    name = "traversal"
    summary = "Traversal Verification, leaf to root"
    citation = "Weng et al. 2025, arXiv 2505.12398, Alg. 1"
    valid_for = frozenset({DraftLaw.WITHOUT_REPLACEMENT})
    #: The rule's two parts, used by the law and by the post-order DP (a variant overriding one is analysed as
    #: written by both); the sampling procedure states Alg. 1 on its own.
    child_weight = staticmethod(child_weight)
    deletion_update = staticmethod(deletion_update)

    @property
    def rule_dp(self) -> PostOrderDP:
        """The post-order DP over every draft outcome (verispec.verifiers.traversal_dp)."""
        return PostOrderDP(self)

    def emission_laws(self, batch: TreeBatch):
        """One post-order recursion over the topology (module docstring), batched over the rows."""
        laws = [None] * batch.num_nodes
        one = backend.ones((batch.num_rows,), batch.p[:, 0, 0])
        self._visit(batch, laws, 0, one, one)
        return backend.stack(laws, axis=1)

    def _visit(self, batch: TreeBatch, laws: list, node: int, weight, reach):
        """Process the subtree of ``node`` entered with probability ``reach`` [N] (everything earlier in post-order
        rejected) and node weight ``weight`` [N], writing each node's emission law [N, V] into ``laws``; return the
        probability that the subtree is then deleted, [N]. A method, not a nested function: a closure that calls
        itself is a reference cycle, which kept every batch and its laws alive until a full collection (1.3 GB of
        dead batches in a T = 1 Qwen label build)."""
        p, q = batch.p[:, node], batch.q[:, node]
        for child in batch.child_nodes[node]:
            token = batch.tokens[:, child]
            reach = self._visit(batch, laws, child, self.child_weight(weight, p, q, token), reach)
            weight, p, q = self.deletion_update(weight, p, q, token)
        if node == 0:  # the root, once a leaf, always emits
            laws[node] = reach[:, None] * p
            return reach * 0
        laws[node] = (reach * weight)[:, None] * p
        return reach * (1 - weight)

    @property
    def reads_forest(self) -> bool:
        """Whether ``forest_stopping_masses`` is this rule's law: its recursion is Traversal's own (a variant may
        change ``child_weight`` or ``deletion_update``, which both read, but not the recursion)."""
        return type(self)._visit is TraversalVerifier._visit and \
            type(self).emission_laws is TraversalVerifier.emission_laws

    def forest_stopping_masses(self, forest: LawForest) -> np.ndarray:
        """The stopping mass at every node of many trees of many topologies at once (``LawForest``), [F] float64:
        the total of ``emission_laws`` at each node, from the same two parts in the two passes the post-order
        recursion factors into. A node's states along its deletions read nothing below it and no reach: the weight
        a child is entered with is ``child_weight`` of its parent's state after its earlier siblings' deletions.
        (1) Top-down, depth by depth, every internal node's chain (``child_weight`` then ``deletion_update`` for
        each distinct child in order), once per distinct (law row, entry weight, children): its children's entry
        weights and its final state. (2) The reach of a node when it finishes is the product of (1 - final
        weight) over the nodes finished before it in post-order; it stops there with reach x final weight x the
        total of its final p (reach x the total at the root, which always emits)."""
        entry = np.ones(len(forest.parent))                                          # [F] weight entered with
        final = np.ones(len(forest.parent))                                          # [F] weight when finished
        total = np.ones(len(forest.parent))                                          # [F] its final p's total
        for depth in range(int(forest.depth.max(initial=0)) + 1):
            nodes = np.flatnonzero((forest.depth == depth) & (forest.law >= 0))
            if len(nodes):
                self._forest_chains(forest, nodes, entry, final, total)
        leaf = forest.law < 0
        final[leaf] = entry[leaf]
        post = forest.post                                                           # [T, n]
        factor = np.where(post >= 0, 1 - final[post], 1.0)                           # [T, n]
        reach = np.ones(post.shape)
        for place in range(1, post.shape[1]):  # the recursion's own order of products
            reach[:, place] = reach[:, place - 1] * factor[:, place - 1]
        root = forest.parent[post] < 0
        masses = np.zeros(len(forest.parent))
        kept = post >= 0
        masses[post[kept]] = (reach * np.where(root, 1.0, final[post]) * total[post])[kept]
        return masses

    def _forest_chains(self, forest: LawForest, nodes, entry, final, total) -> None:
        """Pass (1) of ``forest_stopping_masses`` at the internal ``nodes`` of one depth (their entry weights final):
        writes their children's ``entry`` and their own ``final`` weight and p ``total``."""
        children = forest.children[nodes]                                            # [r, m]
        tokens = np.where(children >= 0, forest.token[np.maximum(children, 0)], -1)  # [r, m] columns
        keys = np.column_stack([forest.law[nodes], entry[nodes].view(np.int64), tokens])
        _, first, inverse = np.unique(keys, axis=0, return_index=True, return_inverse=True)
        inverse = inverse.reshape(-1)
        width = forest.p.shape[1]
        step = max(1, FOREST_ELEMENTS // width)
        for start in range(0, len(first), step):
            rows = first[start:start + step]                                         # distinct chains
            weight = entry[nodes[rows]]
            p, q = forest.p[forest.law[nodes[rows]]], forest.q[forest.law[nodes[rows]]]  # [u, W]
            entered = np.zeros((len(rows), children.shape[1]))                       # [u, m]
            for place in range(children.shape[1]):
                live = np.flatnonzero(tokens[rows, place] >= 0)
                if not len(live):
                    break
                token = tokens[rows[live], place]
                held = (weight[live], p[live], q[live])
                entered[live, place] = self.child_weight(*held, token)
                weight[live], p[live], q[live] = self.deletion_update(*held, token)
            mine = np.flatnonzero((inverse >= start) & (inverse < start + len(rows)))
            where = inverse[mine] - start
            final[nodes[mine]], total[nodes[mine]] = weight[where], p.sum(axis=-1)[where]
            placed = children[mine] >= 0
            entry[children[mine][placed]] = entered[where][placed]

    def procedure(self, tree: DraftTree, chooser: Chooser) -> tuple[int, int]:
        """Weng et al., Alg. 1, as written: a mutable tree of states, one uniform per visited leaf."""
        weight = [None] * tree.num_nodes
        target = [tree.p[n] for n in range(tree.num_nodes)]
        draft = [tree.q[n] for n in range(tree.num_nodes)]
        remaining = [list(children) for children in tree.child_nodes]

        def recompute_below(node: int):
            # an explicit stack, not recursion: a self-referencing closure is a cycle that keeps the tree's laws
            # alive until a full collection
            stack = [node]
            while stack:
                above = stack.pop()
                for child in remaining[above]:
                    token = int(tree.token[child])
                    weight[child] = ratio_min_one(weight[above] * target[above][token], draft[above][token])
                    stack.append(child)

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
            old_weight, old_target, old_draft = weight[parent], target[parent], draft[parent]
            weight[parent] = stop_probability(old_weight, old_target, old_draft)
            target[parent] = weighted_residual(old_weight, old_target, old_draft)
            rest = old_draft.copy()
            rest[int(tree.token[leaf])] = 0 * rest[int(tree.token[leaf])]
            draft[parent] = normalize(rest)
            recompute_below(parent)


class TraversalIIDVerifier(TraversalVerifier):
    """Traversal Verification on i.i.d. child lists (``iid:K,L``, ``delayed:K,L1,L2``, ``branch-iid:...``).

    Weng et al. define the rule for siblings drawn without replacement only. Here it runs unchanged on
    each node's DISTINCT children in order of first appearance (``TreeBatch.child_nodes``), as if they had
    been drawn without replacement. That is exactly lossless: given the first distinct child c and its
    multiplicity m, c ~ q, c's subtree is drawn from m i.i.d. continuations, and the later siblings are
    i.i.d. draws from q(. | not c), independent of c's subtree; the induction behind Traversal needs only
    that (docs/guides/traversal_iid.md gives the argument and the exact checks). First appearance with the draws
    read in another fixed order (e.g. backwards) is lossless too; ordering by token id is lossy, and so are
    frequency orders and the reversed list from K = 3 paths on (docs/guides/traversal_iid.md).
    """

    name = "traversal-iid"
    summary = "Traversal on i.i.d. rollouts, its distinct children in order of first appearance (lossless)"
    citation = "verispec, docs/guides/traversal_iid.md; the rule of Weng et al. 2025, arXiv 2505.12398, Alg. 1"
    valid_for = frozenset({DraftLaw.IID_CHILDREN, DraftLaw.ROOT_IID_PATHS})
