"""The exact OT node solver: verify with an optimal coupling of the draft law and p (SpecTr's "OTM", Sun et al.
2023, arXiv 2310.15141, Sec. 3, Eq. (3); reference, "OT optimum").

At a node with K i.i.d. children drawn from q, solve the OT LP of ``verispec.lp_analysis.ot`` over ordered
K-tuples with Q(x) = prod q(x_i); given the node's ordered child tuple x, output y ~ pi(x, .) / Q(x). The
acceptance probability at the node is then the OT optimum alpha* = 1 + min_T [p(T) - q(T)^K], the best of
any verifier for this draft law.

Exactness: the LP is solved in float64 by HiGHS (through the checked helper), and ``repair_marginals``
makes the coupling's marginals hold to rounding, so the rule is lossless to 1e-12 (not just to the
solver's 1e-9). Exact mode (Fraction problems) converts: the float coupling is turned into Fractions and
repaired in exact arithmetic against the exact Q and p, which gives an exactly lossless coupling whose
acceptance is within the solver's tolerance (~1e-9) of alpha*.

Each (p, q, K) is solved once per solver instance (``NodeCache``): tree outcomes that share a node
context reuse its coupling, and the closed form and the sampling procedure read the same table.
"""

from __future__ import annotations

import numpy as np

from verispec.lp_analysis.draft_laws import iid_draft_law
from verispec.lp_analysis.ot import OTCoupling, acceptance, ot_coupling, repair_marginals
from verispec.simulator.chooser import Chooser
from verispec.simulator.distributions import positive_part, residual
from verispec.simulator.drafters import DraftLaw
from verispec.verifiers.node_cache import NodeCache, node_key
from verispec.verifiers.tree_walk import NodeSolver


def single_draft_coupling(p: np.ndarray, q: np.ndarray) -> OTCoupling:
    """K = 1 in closed form: the maximal coupling pi(x, x) = min(p, q)(x), pi(x, y) = (q(x) - p(x))+ r(y)
    with r = norm((p - q)+) (Leviathan et al. 2023, the token-level rule), exact in both number systems."""
    outcomes = tuple((token,) for token in range(len(q)) if q[token] > 0)
    rows = [token for (token,) in outcomes]
    excess = positive_part(q[rows] - p[rows])  # [num_outcomes]
    coupling = excess[:, None] * residual(p, q)[None, :]
    for index, token in enumerate(rows):
        coupling[index, token] += min(p[token], q[token])
    probabilities = q[rows].copy()
    return OTCoupling(outcomes=outcomes, probabilities=probabilities, coupling=coupling,
                      optimum=acceptance(outcomes, coupling))


def iid_coupling(p: np.ndarray, q: np.ndarray, num_drafts: int) -> OTCoupling:
    """The optimal coupling for K i.i.d. drafts, in the number system of p and q."""
    if num_drafts == 1:
        return single_draft_coupling(p, q)
    if p.dtype != object:
        return ot_coupling(p, iid_draft_law(q, num_drafts))
    approximate = ot_coupling(p.astype(np.float64), iid_draft_law(q.astype(np.float64), num_drafts))
    exact_law = iid_draft_law(q, num_drafts)
    probabilities = np.array([exact_law[outcome] for outcome in approximate.outcomes], dtype=object)
    coupling = repair_marginals(approximate.coupling, probabilities, p)
    return OTCoupling(outcomes=approximate.outcomes, probabilities=probabilities, coupling=coupling,
                      optimum=acceptance(approximate.outcomes, coupling))


class OTLPSolver(NodeSolver):
    name = "otlp"
    valid_for = frozenset({DraftLaw.IID_CHILDREN})

    def __init__(self):
        self._cache = NodeCache()

    def coupling(self, p: np.ndarray, q: np.ndarray, num_drafts: int) -> OTCoupling:
        """The (cached) optimal coupling at a node."""
        return self._cache.get_or_build(node_key(p, q, num_drafts), lambda: iid_coupling(p, q, num_drafts))

    def output_law(self, p: np.ndarray, q: np.ndarray, children: tuple[int, ...]) -> np.ndarray:
        return self.coupling(p, q, len(children)).conditional(children)

    def sample(self, p: np.ndarray, q: np.ndarray, children: tuple[int, ...], chooser: Chooser) -> int:
        return chooser.categorical(self.coupling(p, q, len(children)).conditional(children))
