"""The lenience rule (the "collaborative" family of Zhou et al. 2026, "Revisiting Lossy Verification in Speculative
Decoding", arXiv 2607.26627, Sec. 3.1, Eq. 6; the lenience of Leviathan et al. 2023, arXiv 2211.17192): lossy by
design.

With lenience l in (0, 1] a draft x ~ q is accepted with probability min(1, p(x) / (l q(x))); a rejection resamples
from norm((p - q)+), the unscaled residual; l = 1 is the token-level rule and lossless. On one draft the first
token has law min(q, p / l) + (1 - sum min(q, p / l)) norm((p - q)+), the paper's Eq. 7: q where q <= p / l, capped
at p / l where the draft overshoots, and a blend of p and q where it undershoots. On several i.i.d. drafts verispec
runs SpecInfer's residual chain with the scaled coins: r_1 = p, coins min(1, r_j(x) / (l q(x))), r_(j+1) =
norm((r_j - q)+).

Read: the paper's abstract and the authors' code (github.com/ZhouYuxuanYX/Fast-HSD: fast_hsd/core/
collaborative_verification.py, the coin and the induced law of Eq. 7; the patched transformers _speculative_sampling,
which scales q in the coin only and resamples from norm((p - q)+)). Reconstructed: the extension to several i.i.d.
drafts (the paper verifies one draft path).
"""

from __future__ import annotations

from verispec.verifiers.relaxed import RelaxedRejectionSolver, RelaxedRule, checked_number

#: The middle of the paper's sweep {0.2, 0.4, 0.6, 0.8}.
DEFAULT_LENIENCE = 0.6


class LenienceSolver(RelaxedRejectionSolver):
    name = "lenience"
    summary = "lenience: accept a draft with probability min(1, p(x) / (l q(x))), resample from norm((p - q)+)"
    citation = "Zhou et al. 2026, arXiv 2607.26627, Sec. 3.1, Eq. 6; Leviathan et al. 2023, arXiv 2211.17192"

    def __init__(self, lenience: float = DEFAULT_LENIENCE):
        self.lenience = self.scale = checked_number("lenience", "lenience", lenience, 0.0, 1.0)


class LenienceVerifier(RelaxedRule):
    """``lenience`` and ``lenience(lenience=L)``, L in (0, 1]."""

    base = "lenience"
    parameters = ("lenience",)
    defaults = {"lenience": DEFAULT_LENIENCE}
    solver_class = LenienceSolver
