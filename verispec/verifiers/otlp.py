"""The exact OT node solver: verify with an optimal coupling of the draft law and p (SpecTr's "OTM", Sun et al.
2023, arXiv 2310.15141, Sec. 3, Eq. (3); docs/guides/reference.md, "OT optimum").

At a node with K i.i.d. children drawn from q, build an optimal coupling pi of the law of ordered K-tuples
(Q(x) = prod q(x_i)) and p; given the node's ordered child tuple x, output y ~ pi(x, .) / Q(x). The
acceptance probability at the node is then the OT optimum alpha* = 1 + min_T [p(T) - q(T)^K], the best of
any verifier for this draft law, so the walk is node-wise optimal.

The coupling comes from a maximum flow (``verispec.lp_analysis.maxflow``), not from the LP: it is optimal
by max-flow / min-cut, its marginals hold to rounding in float64 and exactly with Fractions (so the rule is
exactly lossless and exactly optimal in exact mode), and it costs no solver call. K = 1 is the token-level
maximal coupling in closed form. tests/lp_analysis/test_maxflow_coupling.py holds the flow to the OT LP of
``verispec.lp_analysis.ot`` and to the closed form.

Each (p, q, K) is built once per solver instance (``NodeCache``): tree outcomes that share a node context
reuse its coupling, and the closed form and the sampling procedure read the same table.
"""

from __future__ import annotations

import numpy as np

from verispec import backend
from verispec.lp_analysis.draft_laws import iid_draft_law
from verispec.lp_analysis.maxflow import maxflow_coupling
from verispec.lp_analysis.ot import OTCoupling, acceptance
from verispec.simulator.chooser import Chooser
from verispec.simulator.distributions import positive_part, residual
from verispec.simulator.drafters import DraftLaw
from verispec.simulator.interfaces import NodeSolver
from verispec.verifiers.node_cache import NodeCache, node_key


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
    return maxflow_coupling(p, iid_draft_law(q, num_drafts))


class OTLPSolver(NodeSolver):
    name = "otlp"
    summary = "an optimal-transport coupling per node (built by max flow; node-wise optimal)"
    citation = "SpecTr's OTM, Sun et al. 2023, arXiv 2310.15141, Sec. 3, Eq. 3"
    valid_for = frozenset({DraftLaw.IID_CHILDREN})

    def __init__(self):
        self._cache = NodeCache()

    def coupling(self, p: np.ndarray, q: np.ndarray, num_drafts: int) -> OTCoupling:
        """The (cached) optimal coupling at a node (host arrays)."""
        return self._cache.get_or_build(lambda: node_key(p, q, num_drafts), lambda: iid_coupling(p, q, num_drafts))

    def output_laws(self, p, q, children):
        # The coupling is solved on the host (a maximum flow), once per distinct (p, q, K); the result comes
        # back in the backend, dtype and device of p.
        host_p, host_q, host_children = (backend.to_numpy(array) for array in (p, q, children))
        first, inverse = backend.unique_value_rows(host_p, host_q)
        laws = np.empty(host_p.shape, dtype=host_p.dtype)
        for row, rows in zip(first, backend.rows_by_group(inverse, len(first))):
            coupling = self.coupling(host_p[row], host_q[row], host_children.shape[1])
            outcome = [coupling.index_of(tuple(drafts)) for drafts in host_children[rows].tolist()]
            laws[rows] = coupling.coupling[outcome] / coupling.probabilities[outcome][:, None]  # pi(x, .) / Q(x)
        return backend.asarray(laws, p)

    def sample(self, p, q, children: tuple[int, ...], chooser: Chooser) -> int:
        return chooser.categorical(self.coupling(p, q, len(children)).conditional(children))
