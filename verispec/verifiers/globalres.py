"""Global Resolution (Thomas & Pal, "Global Resolution: Optimal Multi-Draft Speculative Sampling via Convex
Minimization", arXiv 2511.15898, ICLR 2026) as a node solver for K i.i.d. children.

Step 1 picks one of the node's drafts, or none, by the count-weighted Luce rule whose weights solve the paper's
two convex programs (``lp_analysis.global_resolution``: outer tuples choose among their drafts outside the optimal
set H* and never reject; inner tuples choose among their drafts or reject with weight 1; each draft position
weighs the weight of its token). Step 2 is Khisti et al.'s (arXiv 2410.18234): with p_I the exact law of the
step-1 token, accept it with probability min(1, p / p_I), otherwise (and on a step-1 rejection) emit
Y ~ norm((p - p_I)+). This frame is lossless for ANY weights, since p_I is computed from the weights actually
used, so a solver's tolerance costs acceptance and never exactness; at the programs' solution p_I <= p, step 2
always accepts, and the acceptance is alpha* = 1 + min_T [p(T) - q(T)^K] (Hu et al. 2025).

At every vocabulary: a node whose draft multisets fit ``global_resolution.MAX_MULTISETS`` (and every node in
exact mode) is solved over its multisets; any other, e.g. a real vocabulary without top-k, through the
one-dimensional integrals of ``lp_analysis.luce_integrals`` (p_I exact to 1e-12 in L1 as measured, 1.2e-10 with
worst-case rounding at V = 151,936; acceptance within 1e-8 of alpha* on most laws tested and 1e-6 on all, also
where alpha* is within 1e-7 of 1, and 2.4e-9 at most at 108 nodes of the Qwen pair at T = 1; a shortfall would
cost acceptance only, never exactness).
Choices verispec made where the paper's text could not be read here (see the module above): the count-weighted
choice, the outer program bounded by a <= 0 instead of the paper's polymatroid targets, a damped Newton solver
(cvxpy states the same programs as the tests' second solver). The paper's truncation at real vocabularies drops
mass and is lossy by up to 15 tau in L1 (its Lemma 6.6, as reported); this rule needs no truncation.
"""

from __future__ import annotations

import numpy as np

from verispec.lp_analysis.global_resolution import MAX_MULTISETS, Resolution, resolve
from verispec.simulator.drafters import DraftLaw
from verispec.verifiers.node_cache import NodeCache, node_key
from verispec.verifiers.two_step import TwoStepSolver


class GlobalResolutionSolver(TwoStepSolver):
    """``method``: "auto" (multisets where they fit, integrals elsewhere), "enumeration" or "integrals" (the
    tests hold the two derivations to each other)."""

    name = "globalres"
    summary = ("Global Resolution: the OT-optimal Luce choice among a node's drafts from two convex programs, in "
               "Khisti's two-step frame (lossless for any weights)")
    citation = "Thomas & Pal 2026, arXiv 2511.15898, ICLR 2026"
    valid_for = frozenset({DraftLaw.IID_CHILDREN})

    def __init__(self, *, max_multisets: int = MAX_MULTISETS, method: str = "auto", name: str = "globalres"):
        self.name = name
        self.max_multisets = max_multisets
        self.method = method
        self._cache = NodeCache()

    def resolution(self, p: np.ndarray, q: np.ndarray, num_drafts: int) -> Resolution:
        """The (cached) step-1 rule at a node (host arrays)."""
        return self._cache.get_or_build(node_key(p, q, num_drafts) + (self.max_multisets, self.method),
                                        lambda: resolve(p, q, num_drafts, max_multisets=self.max_multisets,
                                                        method=self.method))

    rule = resolution
