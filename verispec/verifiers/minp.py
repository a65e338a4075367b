"""The min-p rule, truncation-based verification with the min-p allowed set (SpecCascade's rule as Zhou et al. 2026,
"Revisiting Lossy Verification in Speculative Decoding", arXiv 2607.26627, Sec. 3.2, Eq. 3, classify it; min-p
sampling: Nguyen et al. 2024, arXiv 2407.01082): lossy by design.

A draft x is accepted iff it lies in the target's min-p set A = {v : p(v) >= m max p}, with no coin; the drafts of
a node are read in order and the first inside A is accepted; none is: the token comes from p restricted to A,
renormalised (min-p sampling of the target). m -> 0 accepts every draft (the draft's law); m = 1 keeps only the most
likely tokens (greedy). There is no lossless setting: the accepted tokens follow q inside A, which is the paper's
pitfall (the "yield" of Eq. 9 is q-shaped, not p-shaped).

Read: the paper's abstract and the authors' code (github.com/ZhouYuxuanYX/Fast-HSD: fast_hsd/core/
truncation_verification.py, the allowed set p(v) >= p_base max p and the acceptance iff x lies in it; its sweep
{0.1, 0.3, 0.5, 0.7, 0.9}). Reconstructed: the token after a rejection. The code says only "no residual resampling";
verispec samples the truncated target there (what the paper's "true truncation sampling baseline" samples), and the
bonus token after the last accepted draft from p, as for every rule of the walk.
"""

from __future__ import annotations

from verispec.verifiers.relaxed import RelaxedRule, TruncationSolver, checked_number

DEFAULT_RATIO = 0.3


class MinPSolver(TruncationSolver):
    name = "minp"
    summary = "min-p rule: accept a draft iff p(x) >= m max p; else sample p restricted to that set"
    citation = "Zhou et al. 2026, arXiv 2607.26627, Sec. 3.2 (SpecCascade); min-p: Nguyen et al. 2024, arXiv 2407.01082"

    def __init__(self, ratio: float = DEFAULT_RATIO):
        self.ratio = checked_number("minp", "ratio", ratio, 0.0, 1.0)

    def allowed(self, p_host):
        return p_host >= self.ratio * p_host.max(axis=-1, keepdims=True)


class MinPVerifier(RelaxedRule):
    """``minp`` and ``minp(ratio=M)``, M in (0, 1]."""

    base = "minp"
    parameters = ("ratio",)
    defaults = {"ratio": DEFAULT_RATIO}
    solver_class = MinPSolver
