"""MARS, margin-aware verification (Song et al. 2026, arXiv 2601.15498): lossy by design.

Token-level verification (recursive rejection sampling on i.i.d. children) whose native rejection of a draft x is
overridden, the draft accepted, when the target is undecided between its two most likely tokens and x is one of
them: log p(1) - log p(2) < delta, with p(1) >= p(2) the two largest entries of p (ties by token id) and delta the
margin in nats (at temperature 1 the logit gap z(1) - z(2)). delta = 0 is the lossless rule.

Read: the abstract (verification conditioned on "decision stability measured directly from the target logits",
relaxing rejection "only when strict verification provides minimal benefit", i.e. in low-margin regimes where the
runner-up is rejected) and secondary summaries (a single global threshold on the target's logit margin, accepting a
plausible runner-up when the margin is small). Reconstructed: the paper's text was not readable here, so the margin
as the top-2 log-probability gap, the strict inequality, the top-1 token being overridden too (a sampled rule can
reject it; a greedy one cannot) and the application to several i.i.d. drafts are verispec's reading.
"""

from __future__ import annotations

import numpy as np

from verispec.verifiers.relaxed import RelaxedRejectionSolver, RelaxedRule, checked_number

DEFAULT_MARGIN = 0.5


def top_two(p_host: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The two most likely tokens of each row of p [N, V] (ties by token id), [N, 2], and the gap log p(1) - log p(2)
    [N] (inf when p(2) = 0)."""
    order = np.argsort(-p_host, axis=-1, kind="stable")[:, :2]            # [N, 2]
    values = np.take_along_axis(p_host, order, axis=-1)
    with np.errstate(divide="ignore"):
        gap = np.where(values[:, 1] > 0, np.log(values[:, 0]) - np.log(np.maximum(values[:, 1], 1e-300)), np.inf)
    return order, gap


class MarsSolver(RelaxedRejectionSolver):
    name = "mars"
    summary = "MARS: a rejected draft among p's top two is accepted anyway when their log-margin is below the margin"
    citation = "Song et al. 2026, arXiv 2601.15498 (margin-aware verification)"

    def __init__(self, margin: float = DEFAULT_MARGIN):
        self.margin = checked_number("mars", "margin", margin, 0.0, float("inf"), open_low=False)

    def overrides(self, p_host, children):
        order, gap = top_two(p_host)
        among = (children[:, :, None] == order[:, None, :]).any(axis=-1)  # [N, m]
        return among & (gap < self.margin)[:, None]


class MarsVerifier(RelaxedRule):
    """``mars`` and ``mars(margin=D)``, D >= 0 nats."""

    base = "mars"
    parameters = ("margin",)
    defaults = {"margin": DEFAULT_MARGIN}
    solver_class = MarsSolver
