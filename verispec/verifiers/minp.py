"""The min-p rule ("Revisiting Lossy Verification", arXiv 2607.26627; min-p sampling: Nguyen et al. 2024, arXiv
2407.01082): lossy by design.

Token-level verification (recursive rejection sampling on i.i.d. children) whose native rejection of a draft x is
overridden, the draft accepted, when x lies strictly inside the target's min-p set: p(x) > m max_v p(v). m = 1 empties
the set and is the lossless rule; smaller m accepts more of the tokens the target finds plausible.

Reconstructed: arXiv 2607.26627 could not be read here (no stored text, abstract or thread). The form, a native
rejection overridden inside a truncation set of p, is the one the engines' ports of FLy (vLLM #53987) and ASD
(transformers #48636) take; the strict inequality (so that m = 1 is lossless) is verispec's choice.
"""

from __future__ import annotations

import numpy as np

from verispec.verifiers.relaxed import RelaxedRejectionSolver, RelaxedRule, checked_number

DEFAULT_RATIO = 0.1


class MinPSolver(RelaxedRejectionSolver):
    name = "minp"
    summary = "min-p rule: a rejected draft is accepted anyway when p(x) > m max p"
    citation = "Revisiting Lossy Verification, arXiv 2607.26627 (2026); min-p: Nguyen et al. 2024, arXiv 2407.01082"

    def __init__(self, ratio: float = DEFAULT_RATIO):
        self.ratio = checked_number("minp", "ratio", ratio, 0.0, 1.0)

    def overrides(self, p_host, children):
        drafted = np.take_along_axis(p_host, children, axis=-1)          # [N, m]
        return drafted > self.ratio * p_host.max(axis=-1, keepdims=True)


class MinPVerifier(RelaxedRule):
    """``minp`` and ``minp(ratio=M)``, M in (0, 1]."""

    base = "minp"
    parameters = ("ratio",)
    defaults = {"ratio": DEFAULT_RATIO}
    solver_class = MinPSolver
