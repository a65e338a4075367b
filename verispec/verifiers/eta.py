"""The eta rule ("Revisiting Lossy Verification", arXiv 2607.26627; eta sampling: Hewitt et al. 2022, arXiv
2210.15191): lossy by design.

Token-level verification (recursive rejection sampling on i.i.d. children) whose native rejection of a draft x is
overridden, the draft accepted, when p(x) > min(eta, sqrt(eta) exp(-H(p))), eta sampling's threshold, with H the
entropy of p in nats (0 log 0 = 0). It is Medusa's typical acceptance threshold with alpha = sqrt(epsilon), applied as
a relaxation of the lossless rule rather than in its place. There is no lossless setting in (0, 1]: at eta = 1 the
threshold is exp(-H) <= max p, so the most likely token still passes unless p is uniform on its support.

Reconstructed: arXiv 2607.26627 could not be read here (no stored text, abstract or thread). The threshold is eta
sampling's; the form (a native rejection overridden) is the one the engines' ports of FLy and ASD take.
"""

from __future__ import annotations

import numpy as np

from verispec.verifiers.relaxed import RelaxedRejectionSolver, RelaxedRule, checked_number

#: Hewitt et al.'s recommended range is 3e-4 to 2e-3 at real vocabularies; at the small vocabularies of the exact
#: engine a larger value keeps the threshold above the least likely tokens.
DEFAULT_ETA = 0.1


def eta_thresholds(p_host: np.ndarray, eta: float) -> np.ndarray:
    """min(eta, sqrt(eta) exp(-H(p))) for each row of p [..., V] (float64 host) -> [...]."""
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(p_host > 0, -p_host * np.log(p_host), 0.0)
    return np.minimum(eta, np.sqrt(eta) * np.exp(-terms.sum(axis=-1)))


class EtaSolver(RelaxedRejectionSolver):
    name = "eta"
    summary = "eta rule: a rejected draft is accepted anyway when p(x) > min(eta, sqrt(eta) exp(-H(p)))"
    citation = "Revisiting Lossy Verification, arXiv 2607.26627 (2026); eta sampling: Hewitt et al. 2022, " \
               "arXiv 2210.15191"

    def __init__(self, eta: float = DEFAULT_ETA):
        self.eta = checked_number("eta", "eta", eta, 0.0, 1.0)

    def overrides(self, p_host, children):
        drafted = np.take_along_axis(p_host, children, axis=-1)          # [N, m]
        return drafted > eta_thresholds(p_host, self.eta)[:, None]


class EtaVerifier(RelaxedRule):
    """``eta`` and ``eta(eta=E)``, E in (0, 1]."""

    base = "eta"
    parameters = ("eta",)
    defaults = {"eta": DEFAULT_ETA}
    solver_class = EtaSolver
