"""Deliberately broken SpecTr K-SEQ variants (trap 5 of docs/guides/reference.md).

Both are node solvers walked top-down and wrapped as ProcedureVerifiers, so the engine derives their laws
from the sampling procedure alone. Each must be flagged lossy on problems where the trap matters.
"""

from __future__ import annotations

import numpy as np

from verispec.simulator.distributions import normalize, positive_part, ratio_min_one
from verispec.simulator.drafters import DraftLaw
from verispec.verifiers import ProcedureVerifier, TopDownVerifier
from verispec.verifiers.spectr import kseq_acceptance, kseq_beta, kseq_residual, kseq_rho
from verispec.verifiers.tree_walk import NodeSolver, ProcedureSolver

IID = frozenset({DraftLaw.IID_CHILDREN})


class _KSeqProcedure(ProcedureSolver):
    """K-SEQ as a sampling procedure with a pluggable rho and residual (its law: the generic enumerator)."""

    valid_for = IID

    def __init__(self):  # the procedure is ``sample`` below, not a function handed in
        pass

    def rho(self, p, q, num_drafts):
        return kseq_rho(p, q, num_drafts)

    def leftover(self, p, q, rho, num_drafts):
        return kseq_residual(p, q, rho, num_drafts)

    def sample(self, p, q, children, chooser):
        rho = self.rho(p, q, len(children))
        for token in children:
            if chooser.bernoulli(ratio_min_one(p[token], rho * q[token])):
                return token
        return chooser.categorical(self.leftover(p, q, rho, len(children)))


class SingleDraftNormaliser(_KSeqProcedure):
    """Residual built as if one candidate had been tried: norm((p - min(q, p/rho))+), i.e. the accepted
    part scaled by 1 instead of p_acc / beta = (1 - (1 - beta)^K) / beta."""

    name = "kseq-single-draft-normaliser"

    def leftover(self, p, q, rho, num_drafts):
        return normalize(positive_part(p - np.minimum(q, p / rho)))


class RhoOne(_KSeqProcedure):
    """rho = 1 for every K: each candidate accepted w.p. min(1, p/q), so p_acc(1) > 1 * beta(1) when
    0 < beta < 1 and K >= 2; the accepted part then exceeds p on tokens with q >= p."""

    name = "kseq-rho-one"

    def rho(self, p, q, num_drafts):
        return 1.0


class RhoBelowRoot(_KSeqProcedure):
    """rho halfway between 1 and the root rho*: p_acc(rho) > rho beta(rho) whenever rho* > 1."""

    name = "kseq-rho-below-root"

    def rho(self, p, q, num_drafts):
        return (1.0 + kseq_rho(p, q, num_drafts)) / 2


def _verifier(solver: NodeSolver) -> ProcedureVerifier:
    return ProcedureVerifier(solver.name, TopDownVerifier(solver).procedure, IID)


BROKEN_KSEQ_VERIFIERS = {solver.name: _verifier(solver)
                         for solver in (SingleDraftNormaliser(), RhoOne(), RhoBelowRoot())}


def gap_at(p, q, rho, num_drafts):
    """rho beta(rho) - p_acc(rho), for the tests' choice of problems where the trap bites."""
    beta = kseq_beta(p, q, rho)
    return rho * beta - kseq_acceptance(beta, num_drafts)
