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

from verispec import backend
from verispec.lp_analysis.global_resolution import MAX_MULTISETS, Resolution, resolve
from verispec.simulator.chooser import Chooser
from verispec.simulator.distributions import ratio_min_one, residual
from verispec.simulator.drafters import DraftLaw
from verispec.simulator.interfaces import NodeSolver
from verispec.verifiers.node_cache import NodeCache, node_key


class GlobalResolutionSolver(NodeSolver):
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

    def step_one(self, p, q, children):
        """(law of the step-1 token given the drafts [N, V], sub-stochastic; p_I [N, V]) in the backend of p."""
        if children.shape[1] == 1:  # one draft: take it, p_I = q; step 2 is then the token-level rule, whose
            # acceptance sum min(p, q) is alpha* for K = 1 (no program to solve)
            return backend.where(backend.one_hot(children[:, 0], p.shape[-1]), backend.one(p), backend.zero(p)), q
        host_p, host_q, host_children = (backend.to_numpy(array) for array in (p, q, children))
        first, inverse = backend.unique_value_rows(host_p, host_q)
        chosen = np.empty(host_p.shape, dtype=host_p.dtype)
        intermediate = np.empty(host_p.shape, dtype=host_p.dtype)
        for row, rows in zip(first, backend.rows_by_group(inverse, len(first))):
            resolution = self.resolution(host_p[row], host_q[row], host_children.shape[1])
            chosen[rows] = resolution.laws(host_children[rows])
            intermediate[rows] = resolution.intermediate
        return backend.asarray(chosen, p), backend.asarray(intermediate, p)

    def output_laws(self, p, q, children):
        chosen, intermediate = self.step_one(p, q, children)
        accept = backend.minimum_one(backend.divide(p, intermediate, where_zero=backend.one(p)))  # [N, V]
        kept = chosen * accept
        return kept + (1 - backend.total(kept))[:, None] * residual(p, intermediate)

    def sample(self, p: np.ndarray, q: np.ndarray, children: tuple[int, ...], chooser: Chooser) -> int:
        if len(children) == 1:
            token = children[0]
            if chooser.bernoulli(ratio_min_one(p[token], q[token])):
                return token
            return chooser.categorical(residual(p, q))
        resolution = self.resolution(p, q, len(children))
        picks = resolution.choice(np.asarray(children, dtype=np.int64))
        probabilities = [probability for _, probability in picks]
        left = 1 - sum(probabilities, 0 * p[0])  # step-1 rejection
        probabilities.append(left if p.dtype == object else max(float(left), 0.0))
        index = chooser.categorical(probabilities)
        if index < len(picks):
            token = picks[index][0]
            if chooser.bernoulli(ratio_min_one(p[token], resolution.intermediate[token])):
                return token
        return chooser.categorical(residual(p, resolution.intermediate))
