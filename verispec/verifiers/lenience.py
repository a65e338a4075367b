"""The lenience rule (Leviathan et al. 2023, arXiv 2211.17192, Appendix A.5, as revisited by "Revisiting Lossy
Verification", arXiv 2607.26627): lossy by design.

With lenience l in (0, 1] a draft x ~ q is accepted with probability min(1, p(x) / (l q(x))), and a rejection
resamples from norm((p - l q)+); l = 1 is the token-level rule and lossless, l -> 0 accepts every draft. On one draft
the first token has law min(q, p / l) + (1 - sum min(q, p / l)) norm((p - l q)+). On several i.i.d. drafts verispec
runs SpecInfer's residual chain with the same scaling: r_1 = p, coins min(1, r_j(x) / (l q(x))), r_(j+1) =
norm((r_j - l q)+).

Reconstructed: arXiv 2607.26627 could not be read here (no stored text, abstract or thread); the rule is taken from
the lenience of Leviathan et al.'s appendix as verispec's authors know it, and its extension to several drafts is
verispec's.
"""

from __future__ import annotations

from verispec.verifiers.relaxed import RelaxedRejectionSolver, RelaxedRule, checked_number

DEFAULT_LENIENCE = 0.5


class LenienceSolver(RelaxedRejectionSolver):
    name = "lenience"
    summary = "lenience: accept a draft with probability min(1, p(x) / (l q(x)))"
    citation = "Leviathan et al. 2023, arXiv 2211.17192, App. A.5; revisited in arXiv 2607.26627 (2026)"

    def __init__(self, lenience: float = DEFAULT_LENIENCE):
        self.lenience = self.scale = checked_number("lenience", "lenience", lenience, 0.0, 1.0)


class LenienceVerifier(RelaxedRule):
    """``lenience`` and ``lenience(lenience=L)``, L in (0, 1]."""

    base = "lenience"
    parameters = ("lenience",)
    defaults = {"lenience": DEFAULT_LENIENCE}
    solver_class = LenienceSolver
