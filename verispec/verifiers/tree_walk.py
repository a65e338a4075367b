"""Node-local solvers and the top-down tree walk that turns any of them into a tree verifier.

A *solver* (an "OTLP solver" in the DDTE paper, arXiv 2602.16994, Sec. 2) is a Markov kernel: given the
target law p, the draft law q and the ordered child list (x_1..x_m) drafted at one node, it outputs one
token Y with Y ~ p whenever the children follow the solver's draft law. The draft is accepted at that
node iff Y is one of the children.

The walk (DDTE Eqs. 1-3; reference, "Trees"): at node c apply the solver with p(.|c), q(.|c) and c's child
list; if the output t is a child, move to it; otherwise stop and emit t. At a leaf emit a bonus token
from p(.|leaf). Its emission law is therefore

    reach(root) = 1,   reach(child t of c) = reach(c) * K_c(t),
    law[c, y] = reach(c) * K_c(y) for y not among c's children,   law[leaf, y] = reach(leaf) * p(y | leaf),

with K_c the solver's output law at c. It is lossless exactly when every node's children follow the
solver's draft law given the node.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import numpy as np

from verispec.simulator.chooser import Chooser, enumerate_law
from verispec.simulator.distributions import zeros
from verispec.simulator.drafters import DraftLaw
from verispec.simulator.trees import DraftTree
from verispec.verifiers.base import Verifier


class NodeSolver(ABC):
    """The law of the output token at one node, given (p, q, ordered child list)."""

    #: Registry name of the tree verifier built from this solver.
    name: str
    #: Draft laws of a node's child list under which the output has law p.
    valid_for: frozenset[DraftLaw] = frozenset({DraftLaw.IID_CHILDREN})

    @abstractmethod
    def output_law(self, p: np.ndarray, q: np.ndarray, children: tuple[int, ...]) -> np.ndarray:
        """P(Y = y | children), shape [V]; sums to one."""

    @abstractmethod
    def sample(self, p: np.ndarray, q: np.ndarray, children: tuple[int, ...], chooser: Chooser) -> int:
        """The rule as a sampling procedure: draw Y through ``chooser``."""

    def enumerated_output_law(self, p: np.ndarray, q: np.ndarray, children: tuple[int, ...]) -> np.ndarray:
        """``output_law`` derived from ``sample`` by the generic enumerator (for parity tests)."""
        exact = p.dtype == object
        law = zeros(p.shape, exact=exact)
        for token, probability in enumerate_law(lambda chooser: self.sample(p, q, children, chooser),
                                                exact=exact).items():
            law[token] += probability
        return law


class TopDownVerifier(Verifier):
    """The top-down walk of a node-local solver over a draft tree."""

    standard_walk = True

    def __init__(self, solver: NodeSolver):
        self.solver = solver
        self.name = solver.name
        self.valid_for = solver.valid_for

    def emission_law(self, tree: DraftTree) -> np.ndarray:
        law = zeros((tree.num_nodes, tree.vocab_size), exact=tree.exact)
        reach = [0] * tree.num_nodes
        reach[0] = 1 + 0 * tree.p[0, 0]
        # Node ids are breadth first, so a parent is always handled before its children.
        for node in range(tree.num_nodes):
            if reach[node] == 0:
                continue
            children = tree.child_tokens[node]
            if not children:
                law[node] = reach[node] * tree.p[node]
                continue
            output = self.solver.output_law(tree.p[node], tree.q[node], children)
            stop = output.copy()
            for child in tree.child_nodes[node]:
                reach[child] = reach[node] * output[tree.token[child]]
                stop[tree.token[child]] = 0 * stop[tree.token[child]]
            law[node] = reach[node] * stop
        return law

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
    its output law comes from the generic enumerator. Wrap it in ``TopDownVerifier`` to verify trees."""

    def __init__(self, name: str, sample, valid_for=frozenset({DraftLaw.IID_CHILDREN})):
        self.name = name
        self._sample = sample
        self.valid_for = frozenset(valid_for)

    def sample(self, p: np.ndarray, q: np.ndarray, children: tuple[int, ...], chooser: Chooser) -> int:
        return self._sample(p, q, children, chooser)

    def output_law(self, p: np.ndarray, q: np.ndarray, children: tuple[int, ...]) -> np.ndarray:
        return self.enumerated_output_law(p, q, children)
