"""Global Resolution (Thomas & Pal, "Global Resolution: Optimal Multi-Draft Speculative Sampling via Convex
Minimization", arXiv 2511.15898, ICLR 2026) as a node solver for K i.i.d. children.

Step 1 picks one of the node's drafts, or none, by the Luce rule whose weights solve the paper's two convex
programs (``lp_analysis.global_resolution``: outer tuples choose among their drafts outside the optimal set H*
and never reject; inner tuples choose among their drafts or reject with weight 1). Step 2 is Khisti et al.'s
(arXiv 2410.18234): with p_I the exact law of the step-1 token, accept it with probability min(1, p / p_I),
otherwise (and on a step-1 rejection) emit Y ~ norm((p - p_I)+). This frame is lossless for ANY weights, since
p_I is computed from the weights actually used, so a solver's tolerance or a truncation costs acceptance and never
exactness; at the programs' solution p_I <= p, step 2 always accepts, and the acceptance is alpha* = 1 + min_T
[p(T) - q(T)^K] (Hu et al. 2025), which the tests check to 1e-9.

Choices verispec made where the paper's text could not be read here (see the module above): the outer targets
by the polymatroid formula, a damped Newton solver (cvxpy states the same programs as the tests' second solver),
and, for a node whose draft support is too large to enumerate its multisets (more than
``global_resolution.MAX_MULTISETS`` or ``MAX_SUPPORT`` tokens, e.g. a real vocabulary without top-k), the
programs solved on groups of tokens with close p / q, a chosen group emitting the row's first drafted token in
it. The grouped rule stays exactly lossless (step 2) and gives up acceptance (none when a group's tokens share
one ratio), which verispec reports against alpha* (``verispec optimum``); it differs from the paper's
truncation, which drops mass and is lossy by up to 15 tau in L1 (its Lemma 6.6, as reported).
"""

from __future__ import annotations

import numpy as np

from verispec.lp_analysis.global_resolution import MAX_MULTISETS, Resolution, resolve
from verispec.simulator.drafters import DraftLaw
from verispec.verifiers.node_cache import NodeCache, node_key
from verispec.verifiers.two_step import TwoStepSolver


class GlobalResolutionSolver(TwoStepSolver):
    name = "globalres"
    valid_for = frozenset({DraftLaw.IID_CHILDREN})

    def __init__(self, *, max_multisets: int = MAX_MULTISETS, name: str = "globalres"):
        self.name = name
        self.max_multisets = max_multisets
        self._cache = NodeCache()

    def resolution(self, p: np.ndarray, q: np.ndarray, num_drafts: int) -> Resolution:
        """The (cached) step-1 rule at a node (host arrays)."""
        return self._cache.get_or_build(node_key(p, q, num_drafts) + (self.max_multisets,),
                                        lambda: resolve(p, q, num_drafts, max_multisets=self.max_multisets))

    rule = resolution
