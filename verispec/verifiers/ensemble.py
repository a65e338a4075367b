"""Static ensemble verification (transformers PR #45979, ``assistant_ensemble_weight``; merged 2026): lossy by
design.

The drafts are verified against the blend v = w p + (1 - w) q instead of the target p: token-level verification
(recursive rejection sampling on i.i.d. children) run with v in the place of p, so a draft x is accepted with
probability min(1, v(x) / q(x)) = min(1, 1 - w + w p(x) / q(x)), and a rejection resamples from
norm((v - q)+) = norm((p - q)+). The bonus token after the last accepted draft comes from p (transformers has no q
at that position). At a node with drafts the output token therefore has law v exactly: its total variation from
p is (1 - w) TV(p, q), and w = 1 is the lossless rule.

It is the "collaborative" verification CoS-WE of Zhou et al. 2026 ("Revisiting Lossy Verification in Speculative
Decoding", arXiv 2607.26627, Sec. 3.1: coin (w p(x) + (1 - w) q(x)) / q(x) clipped at 1, induced law w p + (1 - w) q),
whose code (github.com/ZhouYuxuanYX/Fast-HSD, fast_hsd/core/collaborative_verification.py) was read.

Read: the PR's description (the blend, the acceptance ratio, w in (0, 1], default off) and the code above.
Reconstructed: the bonus token from p and, on several i.i.d. drafts, the residual chain of SpecInfer started at v
(the PR and the paper verify one draft path); the PR's "Proposition 1" (Pareto optimality) cites a paper not read
here.
"""

from __future__ import annotations

from verispec.verifiers.relaxed import RelaxedRejectionSolver, RelaxedRule, checked_number, number_like

#: verispec's default weight (the PR's default is off, i.e. w = 1, the lossless rule).
DEFAULT_WEIGHT = 0.5


class EnsembleSolver(RelaxedRejectionSolver):
    name = "ensemble"
    summary = "static ensemble verification: verify the drafts against w p + (1 - w) q"
    citation = "transformers PR #45979 (2026), assistant_ensemble_weight; CoS-WE of Zhou et al. 2026, arXiv 2607.26627"

    def __init__(self, weight: float = DEFAULT_WEIGHT):
        self.weight = checked_number("ensemble", "weight", weight, 0.0, 1.0)

    def verified(self, p, q):
        weight = number_like(self.weight, p)
        return weight * p + (1 - weight) * q


class EnsembleVerifier(RelaxedRule):
    """``ensemble`` and ``ensemble(weight=W)``, W in (0, 1]."""

    base = "ensemble"
    parameters = ("weight",)
    defaults = {"weight": DEFAULT_WEIGHT}
    solver_class = EnsembleSolver
