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

import hashlib

import numpy as np

from verispec import backend
from verispec.lp_analysis.global_resolution import MAX_MULTISETS, Resolution, resolve
from verispec.simulator.distributions import residual
from verispec.simulator.drafters import DraftLaw
from verispec.verifiers.node_cache import NodeCache, node_key
from verispec.verifiers.two_step import TwoStepSolver


class GlobalResolutionSolver(TwoStepSolver):
    """``method``: "auto" (multisets where they fit, integrals elsewhere), "enumeration" or "integrals" (the
    tests hold the two derivations to each other)."""

    name = "globalres"
    summary = "Global Resolution: the OT-optimal Luce choice among a node's drafts, in Khisti's two-step frame"
    citation = "Thomas & Pal 2026, arXiv 2511.15898, ICLR 2026"
    valid_for = frozenset({DraftLaw.IID_CHILDREN})

    def __init__(self, *, max_multisets: int = MAX_MULTISETS, method: str = "auto", name: str = "globalres"):
        self.name = name
        self.max_multisets = max_multisets
        self.method = method
        self._cache = NodeCache()

    def resolution(self, p: np.ndarray, q: np.ndarray, num_drafts: int) -> Resolution:
        """The step-1 rule at a node (host arrays): cached by the node's key, or built and kept nowhere inside
        ``node_cache.fresh_nodes`` (real decoding: every node new, the key alone about 5% of a node)."""
        def build():
            return resolve(p, q, num_drafts, max_multisets=self.max_multisets, method=self.method)

        return self._cache.get_or_build(lambda: support_key(p, q, num_drafts) + (self.max_multisets, self.method),
                                        build)

    rule = resolution

    def output_laws(self, p, q, children):
        """As the two-step frame's; one float64 numpy row (a node as decoding asks it) is computed on the drafted
        tokens, where the law of Y' lives, instead of as [V] products: the same terms, summed in another order."""
        if not (type(p) is np.ndarray and p.dtype == np.float64 and children.shape[0] == 1
                and children.shape[1] > 1):
            return super().output_laws(p, q, children)
        rule = self.rule(p[0], q[0], children.shape[1])
        picks = rule.choice(np.asarray(children[0], dtype=np.int64))               # [(token, P(Y' = token))]
        tokens = np.array([token for token, _ in picks])
        target, intermediate = p[0, tokens], rule.intermediate[tokens]
        accept = np.minimum(np.divide(target, intermediate, out=np.ones_like(target), where=intermediate != 0), 1.0)
        kept = np.array([probability for _, probability in picks]) * accept
        leftover = np.subtract(p[0], rule.intermediate)                            # [V], in place from here
        np.maximum(leftover, 0.0, out=leftover)
        mass = leftover.sum()
        if mass > 0:
            leftover /= mass                                                       # norm((p - p_I)+)
        else:  # rounding emptied it: the frame's fallback
            leftover = residual(p, rule.intermediate[None, :])[0]
        leftover *= 1 - kept.sum()
        leftover[tokens] += kept
        return leftover[None, :]

    def step_one(self, p, q, children):
        """As the two-step frame's, without grouping equal rows when there is one row (a node as decoding asks
        it: grouping would hash the [V] row once more)."""
        if children.shape[0] != 1 or children.shape[1] == 1:
            return super().step_one(p, q, children)
        host_p, host_q, host_children = (backend.to_numpy(array) for array in (p, q, children))
        rule = self.rule(host_p[0], host_q[0], host_children.shape[1])
        return backend.asarray(rule.laws(host_children), p), backend.asarray(rule.intermediate[None, :], p)


def support_key(p: np.ndarray, q: np.ndarray, num_drafts: int) -> tuple:
    """A cache key of the node: the rule depends on (p, q) only through the drafted tokens (q > 0) and their p and
    q, so the digest covers those (``node_key``'s SHA-256) and the support as a bit mask: at top-k 20 it hashes
    20 values, not 2 x 151,936. Exact mode keys on the Fractions themselves."""
    if p.dtype == object:
        return node_key(p, q, num_drafts)
    drafted = np.count_nonzero(q)
    if drafted == len(q):  # every token drafted: p and q as they are, no copies
        return node_key(p, q, num_drafts) + ("support", drafted)
    support = np.flatnonzero(q)
    digest = hashlib.sha256(np.packbits(q != 0).data)
    digest.update(p.take(support).astype(np.float64, copy=False).data)
    digest.update(q.take(support).astype(np.float64, copy=False).data)
    return ("support", digest.digest(), len(p), len(support), num_drafts)
