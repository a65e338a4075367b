"""Khisti et al.'s two-step frame ("Multi-Draft Speculative Sampling: Canonical Decomposition and Theoretical
Limits", arXiv 2410.18234), shared by the node solvers that differ only in their step-1 rule (khisti, globalres).

Step 1 picks one of the node's K drafts, Y', or none, by a rule whose law given the drafts is known; p_I is the
exact law of Y' over the drafts (sub-stochastic when step 1 may pick none). Step 2 is single-draft speculative
sampling of Y' against p with proposal p_I: accept Y' with probability min(1, p(Y') / p_I(Y')), otherwise (and
when step 1 picked none) emit Y ~ norm((p - p_I)+). The output law is p for ANY step-1 rule, provided p_I is the
law of the rule actually used; the rule decides only how much is accepted. With one draft, Y' = x_1 and p_I = q
(the token-level rule).

A subclass writes ``rule(p, q, num_drafts)`` (host arrays of one node), returning an object with
``intermediate`` [V] (p_I), ``laws(children)`` [R, V] (the law of Y' for every row of drafts [R, K], host
integers) and ``sample(children, chooser)`` (Y', or None when step 1 picks none).
"""

from __future__ import annotations

import numpy as np

from verispec import backend
from verispec.simulator.chooser import Chooser
from verispec.simulator.distributions import ratio_min_one, residual
from verispec.simulator.interfaces import NodeSolver


class TwoStepSolver(NodeSolver):
    """The two-step frame over a subclass's step-1 ``rule``."""

    def rule(self, p: np.ndarray, q: np.ndarray, num_drafts: int):
        raise NotImplementedError

    def step_one(self, p, q, children):
        """(law of Y' given the drafts [N, V], p_I [N, V]) in the backend of p; the rule is built on the host once
        per distinct (p, q, K)."""
        if children.shape[1] == 1:  # Y' = x_1, p_I = q
            return backend.where(backend.one_hot(children[:, 0], p.shape[-1]), backend.one(p), backend.zero(p)), q
        host_p, host_q, host_children = (backend.to_numpy(array) for array in (p, q, children))
        first, inverse = backend.unique_value_rows(host_p, host_q)
        chosen = np.empty(host_p.shape, dtype=host_p.dtype)
        intermediate = np.empty(host_p.shape, dtype=host_p.dtype)
        for row, rows in zip(first, backend.rows_by_group(inverse, len(first))):
            rule = self.rule(host_p[row], host_q[row], host_children.shape[1])
            chosen[rows] = rule.laws(host_children[rows])
            intermediate[rows] = rule.intermediate
        return backend.asarray(chosen, p), backend.asarray(intermediate, p)

    def output_laws(self, p, q, children):
        chosen, intermediate = self.step_one(p, q, children)
        accept = backend.minimum_one(backend.divide(p, intermediate, where_zero=backend.one(p)))  # [N, V]
        kept = chosen * accept
        return kept + (1 - backend.total(kept))[:, None] * residual(p, intermediate)

    def sample(self, p: np.ndarray, q: np.ndarray, children: tuple[int, ...], chooser: Chooser) -> int:
        if len(children) == 1:
            intermediate, token = q, children[0]
        else:
            rule = self.rule(p, q, len(children))
            intermediate, token = rule.intermediate, rule.sample(children, chooser)
        if token is not None and chooser.bernoulli(ratio_min_one(p[token], intermediate[token])):
            return token
        return chooser.categorical(residual(p, intermediate))
