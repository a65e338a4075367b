"""The eta rule, truncation-based verification with the eta allowed set (Medusa's typical acceptance as Zhou et al.
2026, "Revisiting Lossy Verification in Speculative Decoding", arXiv 2607.26627, Sec. 3.2, Eq. 4, classify it; eta
sampling: Hewitt et al. 2022, arXiv 2210.15191): lossy by design.

A draft x is accepted iff it lies in A = {v : p(v) >= min(eta, delta exp(-H(p)))}, H the entropy of p in nats
(0 log 0 = 0), with no coin; the drafts of a node are read in order and the first inside A is accepted; none is: the
token comes from p restricted to A, renormalised. delta = 1 is the paper's default (Hewitt et al.'s eta sampling
takes delta = sqrt(eta), Medusa's typical acceptance alpha). Since exp(-H) <= max p the most likely token is always
in A. There is no lossless setting.

Read: the paper's abstract and the authors' code (github.com/ZhouYuxuanYX/Fast-HSD: fast_hsd/core/
truncation_verification.py, the allowed set with epsilon and delta = 1, acceptance iff x lies in it; its sweep
{0.05, ..., 0.25}). Reconstructed: the token after a rejection (verispec samples the truncated target, as for
``minp``) and the bonus token from p. ``typical`` is the same family with Medusa's smoothed entropy, a strict
inequality and Medusa's choice of the deepest accepted path in a tree.
"""

from __future__ import annotations

import numpy as np

from verispec.verifiers.relaxed import RelaxedRule, TruncationSolver, checked_number

DEFAULT_ETA, DEFAULT_DELTA = 0.1, 1.0


def eta_thresholds(p_host: np.ndarray, eta: float, delta: float) -> np.ndarray:
    """min(eta, delta exp(-H(p))) for each row of p [..., V] (float64 host) -> [...]."""
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(p_host > 0, -p_host * np.log(p_host), 0.0)
    return np.minimum(eta, delta * np.exp(-terms.sum(axis=-1)))


class EtaSolver(TruncationSolver):
    name = "eta"
    summary = "eta rule: accept a draft iff p(x) >= min(eta, delta exp(-H(p))); else sample p restricted to that set"
    citation = "Zhou et al. 2026, arXiv 2607.26627, Sec. 3.2 (Medusa typical); eta sampling: Hewitt et al. 2022, " \
               "arXiv 2210.15191"

    def __init__(self, eta: float = DEFAULT_ETA, delta: float = DEFAULT_DELTA):
        self.eta = checked_number("eta", "eta", eta, 0.0, 1.0)
        self.delta = checked_number("eta", "delta", delta, 0.0, 1.0)

    def allowed(self, p_host):
        return p_host >= eta_thresholds(p_host, self.eta, self.delta)[..., None]


class EtaVerifier(RelaxedRule):
    """``eta`` and ``eta(eta=E,delta=D)``, E and D in (0, 1]."""

    base = "eta"
    parameters = ("eta", "delta")
    defaults = {"eta": DEFAULT_ETA, "delta": DEFAULT_DELTA}
    solver_class = EtaSolver
