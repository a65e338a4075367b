"""The top-down tree walk that turns any node-local solver into a tree verifier, written once.

A *solver* (an "OTLP solver" in the DDTE paper, arXiv 2602.16994, Sec. 2; interface
``verispec.simulator.interfaces.NodeSolver``) is a Markov kernel: given the target law p, the draft law q
and the ordered child list (x_1..x_m) drafted at one node, it outputs one token Y with Y ~ p whenever the
children follow the solver's draft law. The draft is accepted at that node iff Y is one of the children.

The walk (DDTE Eqs. 1-3; docs/guides/reference.md, "Trees"): at node c apply the solver with p(.|c), q(.|c) and c's
child
list; if the output t is a child, move to it; otherwise stop and emit t. At a leaf emit a bonus token
from p(.|leaf). Its emission law is therefore

    reach(root) = 1,   reach(child t of c) = reach(c) * K_c(t),
    law[c, y] = reach(c) * K_c(y) for y not among c's children,   law[leaf, y] = reach(leaf) * p(y | leaf),

with K_c the solver's output law at c. It is lossless exactly when every node's children follow the
solver's draft law given the node. ``TopDownVerifier.emission_laws`` computes it for a whole batch of
trees of one topology on any backend; the exact engine's walk DP (verispec.simulator.dp) sums the same
kernels over draft outcomes without enumerating trees.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from verispec import backend
from verispec.simulator.chooser import Chooser
from verispec.simulator.drafters import DraftLaw
from verispec.simulator.interfaces import NodeSolver, Verifier
from verispec.simulator.trees import DraftTree, TreeBatch


def node_output_laws(solver: NodeSolver, batch: TreeBatch, node: int):
    """The solver's output law at ``node`` of every row, [N, V]; computed once per distinct (context,
    child list) when rows repeat (fast enumeration hands over many rows that share a node)."""
    p, q, children = batch.p[:, node], batch.q[:, node], batch.children(node)
    if batch.num_rows == 1:
        return solver.output_laws(p, q, children)
    xp = backend.namespace(children)
    keys = xp.concat([batch.contexts[:, node:node + 1], children], axis=1)
    first, inverse = backend.unique_rows(keys)
    if len(first) == batch.num_rows:
        return solver.output_laws(p, q, children)
    return solver.output_laws(p[first], q[first], children[first])[inverse]


def _stopping_law(output, children, size: int):
    """The output law outside the child list [N, V] (what the walk emits when it stops at the node): ``output`` with
    the children's tokens zeroed."""
    return backend.where(backend.membership(children, size), backend.zero(output), output)


def _node_scalars(output, children, size: int) -> tuple[np.ndarray, np.ndarray]:
    """(the output mass at each entry of the child list [N, m], the stopping mass [N]) as float64 host arrays."""
    taken = backend.to_numpy(backend.take_along_last(output, children))
    stop = backend.to_numpy(backend.total(_stopping_law(output, children, size)))
    return np.asarray(taken, dtype=np.float64), np.asarray(stop, dtype=np.float64)


def _walk(batch: TreeBatch, one, at_node, at_leaf) -> list[tuple]:
    """The walk's reach (DDTE Eqs. 1-3) over one topology's batch on any backend, for the laws (the masses, float64
    scalars, walk many trees at once: ``forest_masses``): reach(root) = ``one`` [N], and
    reach(child) = reach(node) K_node(child's token), with ``at_node(node)`` -> (K at each entry of the node's child
    list [N, m], what the node emits when the walk stops there) and ``at_leaf(node)`` -> what a leaf emits. Returns
    (reach [N], emission) per node; the caller weighs each emission by its reach."""
    reach, steps = {0: one}, []
    for node in range(batch.num_nodes):  # parents come before their children
        if batch.child_lists[node]:
            taken, emitted = at_node(node)
            for child in batch.child_nodes[node]:
                reach[child] = reach[node] * taken[:, batch.child_lists[node].index(child)]
        else:
            emitted = at_leaf(node)
        steps.append((reach[node], emitted))
    return steps


@dataclass(frozen=True, eq=False)
class Forest:
    """Many trees' nodes in one flat table, so that one walk serves them all (a label build's root holds thousands
    of small trees of hundreds of topologies; walking each topology apart costs Python per node and topology).
    Within a tree a parent comes before its children.

    tree   [F] int64  the tree each node is in (0, 1, ..)
    parent [F] int64  the flat index of the node's parent, -1 at a tree's root
    slot   [F] int64  the first place of the node's token in its parent's child list, -1 at a root
    depth  [F] int64  tokens from the tree's root
    key    [F] int64  the row of the solver's scalars at the node (``forest_masses``), -1 at a leaf
    """

    tree: np.ndarray
    parent: np.ndarray
    slot: np.ndarray
    depth: np.ndarray
    key: np.ndarray


def forest_masses(forest: Forest, taken: np.ndarray, stop: np.ndarray, leaf_total=None) -> np.ndarray:
    """The stopping mass at every node of ``forest``, [F] float64: the walk's reach (DDTE Eqs. 1-3, as ``_walk``)
    level by level over all trees at once, reach(child) = reach(node) K_node(child's token), times what the node
    emits when the walk stops there: ``stop[key]`` at an internal node, p's total at a leaf (``leaf_total`` [F],
    read at leaves; 1 when None). ``taken`` [K, m] holds K at each entry of key k's child list (zero-padded to the
    longest list), ``stop`` [K] the mass outside it (``TopDownVerifier.node_scalars``)."""
    reach = np.ones(len(forest.parent))                                               # [F]
    order = np.argsort(forest.depth, kind="stable")
    levels = np.searchsorted(forest.depth[order], np.arange(1, int(forest.depth.max(initial=0)) + 2))
    for start, end in zip(levels[:-1], levels[1:]):  # depth 1, 2, ..: every parent's reach is final
        nodes = order[start:end]
        parents = forest.parent[nodes]
        reach[nodes] = reach[parents] * taken[forest.key[parents], forest.slot[nodes]]
    internal = forest.key >= 0
    at_leaf = 1.0 if leaf_total is None else leaf_total
    return reach * np.where(internal, stop[np.where(internal, forest.key, 0)], at_leaf)


class TopDownVerifier(Verifier):
    """The top-down walk of a node-local solver over a draft tree."""

    def __init__(self, solver: NodeSolver):
        self.solver = solver
        self.name = solver.name
        self.valid_for = solver.valid_for

    @property
    def node_solver(self) -> NodeSolver:
        return self.solver

    @property
    def summary(self) -> str:
        """The solver's one-line summary (a registered solver has one; a user's may not)."""
        return self.solver.summary

    @property
    def citation(self) -> str:
        """Where the solver's rule comes from."""
        return self.solver.citation

    def emission_laws(self, batch: TreeBatch):
        def at_node(node: int):
            output = node_output_laws(self.solver, batch, node)  # [N, V]
            children = batch.children(node)  # [N, m]
            return backend.take_along_last(output, children), _stopping_law(output, children, batch.vocab_size)

        steps = _walk(batch, backend.ones((batch.num_rows,), batch.p[:, 0, 0]), at_node,
                      lambda node: batch.p[:, node])
        return backend.stack([reach[:, None] * emitted for reach, emitted in steps], axis=1)

    def emission_masses(self, batch: TreeBatch):
        """The mass of stopping at each node, [N, n] float64: ``emission_laws(batch)`` summed over tokens (tested
        equal to 1e-12), by the walk on scalars (``forest_masses``): the solver's output law at a node gives its
        children's acceptance masses and the stopping mass (the law outside the children); no [N, n, V] law is made.
        The solver runs as in ``emission_laws`` (``node_output_laws``: once per distinct context id and child list
        of the batch). An exact batch gets its emission laws' totals (Fractions). Many trees of many topologies whose
        nodes repeat: ``node_scalars`` once per distinct node, then ``forest_masses``."""
        if batch.exact:
            return backend.total(self.emission_laws(batch))  # [N, n] Fractions
        rows, nodes = batch.num_rows, batch.num_nodes
        widest = max(len(children) for children in batch.child_lists)
        taken, stop = np.zeros((rows, nodes, max(1, widest))), np.zeros((rows, nodes))  # key of (row, node): its place
        leaf_total = np.ones((rows, nodes))
        for node, children in enumerate(batch.child_lists):
            if children:
                taken[:, node, :len(children)], stop[:, node] = _node_scalars(
                    node_output_laws(self.solver, batch, node), batch.children(node), batch.vocab_size)
            else:
                leaf_total[:, node] = backend.to_numpy(backend.total(batch.p[:, node]))
        flat = np.arange(rows * nodes).reshape(rows, nodes)                              # [N, n]
        parent = np.array(batch.parent)                                                  # [n]
        slot = [-1] + [batch.child_lists[up].index(node) for node, up in enumerate(batch.parent) if up >= 0]
        forest = Forest(tree=np.repeat(np.arange(rows), nodes),
                        parent=np.where(parent >= 0, flat[:, np.maximum(parent, 0)], -1).ravel(),
                        slot=np.tile(np.array(slot), rows), depth=np.tile(np.array(batch.depth), rows),
                        key=np.where([bool(children) for children in batch.child_lists], flat, -1).ravel())
        return forest_masses(forest, taken.reshape(rows * nodes, -1), stop.ravel(), leaf_total.ravel()).reshape(
            rows, nodes)  # [N, n]

    def node_scalars(self, p, q, children) -> tuple[np.ndarray, np.ndarray]:
        """What the walk needs of the solver at M nodes, p and q [M, V] and child lists [M, m] (column indices): the
        output mass at each entry of the child list [M, m] and the stopping mass [M], float64 on the host."""
        return _node_scalars(self.solver.output_laws(p, q, children), children, p.shape[-1])

    def procedure(self, tree: DraftTree, chooser: Chooser) -> tuple[int, int]:
        node = 0
        while tree.child_tokens[node]:
            token = self.solver.sample(tree.p[node], tree.q[node], tree.child_tokens[node], chooser)
            child = tree.child(node, token)
            if child is None:
                return node, token
            node = child
        return node, chooser.categorical(tree.p[node])


class ProcedureSolver(NodeSolver):
    """A node-local solver given only as a sampling procedure ``sample(p, q, children, chooser) -> token``;
    its output law comes from the generic enumerator, node by node. Wrap it in ``TopDownVerifier``."""

    def __init__(self, name: str, sample, valid_for=frozenset({DraftLaw.IID_CHILDREN})):
        self.name = name
        self._sample = sample
        self.valid_for = frozenset(valid_for)

    def sample(self, p, q, children: tuple[int, ...], chooser: Chooser) -> int:
        return self._sample(p, q, children, chooser)

    def output_laws(self, p, q, children):
        host = [backend.to_numpy(array) for array in (p, q, children)]
        laws = [self.enumerated_output_law(host[0][row], host[1][row], tuple(int(t) for t in host[2][row]))
                for row in range(len(host[2]))]
        return backend.asarray(backend.stack(laws, axis=0), p)


__all__ = ["Forest", "NodeSolver", "ProcedureSolver", "TopDownVerifier", "forest_masses", "node_output_laws"]
