"""SpecTr's K-SEQ node solver (Sun et al. 2023, "SpecTr: Fast Speculative Decoding via Optimal Transport",
arXiv 2310.15141, Alg. 3 "K-SEQ"; reference, "Single position, K drafts").

For K i.i.d. drafts x_1..x_K from q (K = the length of the node's child list):

    beta(rho)  = sum_x min(q(x), p(x) / rho),
    p_acc(rho) = 1 - (1 - beta(rho))^K,

rho* in [1, K] is the root of rho * beta(rho) = p_acc(rho). Candidate i is accepted with probability
min(1, p(x_i) / (rho* q(x_i))), candidates in order, each tested independently (no residual update between
candidates; a repeated token is tested again). If all are rejected, Y ~ p_res = norm((p - min(q, p/rho*)
p_acc / beta)+). Why this is lossless: the first accepted candidate has law min(q, p/rho)/beta and some
candidate is accepted with probability p_acc, so P(Y = y, accepted) = min(q, p/rho)(y) p_acc / beta, which
is at most p(y) exactly when p_acc(rho) <= rho beta(rho); the residual then carries the rest.

Precision (trap 5 of the reference): any rho with p_acc(rho) <= rho beta(rho) is lossless and the root is
the smallest such rho (g(rho) = rho beta(rho) - p_acc(rho) is nondecreasing: rho beta = sum min(rho q, p)
grows, p_acc shrinks). ``kseq_rho`` therefore returns the UPPER end of a float64 bisection bracket, on
which the computed g is >= 0; with the computed beta and p_acc at that rho the subtracted part exceeds p by
at most rounding (~1e-16), so the rule is lossless to 1e-12. In exact mode the float root is converted to
a Fraction and nudged up until g(rho) >= 0 holds exactly, which makes the rule exactly lossless.
K = 1 gives rho* = 1 and the naive rule.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from verispec.simulator.chooser import Chooser
from verispec.simulator.distributions import normalize, positive_part, ratio_min_one, zeros
from verispec.simulator.drafters import DraftLaw
from verispec.verifiers.node_cache import NodeCache, node_key
from verispec.verifiers.tree_walk import NodeSolver

#: Bisection steps; 200 halvings of [1, K] reach adjacent float64 values long before they run out.
BISECTION_STEPS = 200


def kseq_beta(p: np.ndarray, q: np.ndarray, rho):
    """beta(rho) = sum_x min(q(x), p(x) / rho)."""
    return np.minimum(q, p / rho).sum()


def kseq_acceptance(beta, num_drafts: int):
    """p_acc = 1 - (1 - beta)^K: the probability that at least one of K candidates is accepted."""
    return 1 - (1 - beta) ** num_drafts


def kseq_gap(p: np.ndarray, q: np.ndarray, rho, num_drafts: int):
    """g(rho) = rho beta(rho) - p_acc(rho); the rule is lossless iff g(rho) >= 0."""
    beta = kseq_beta(p, q, rho)
    return rho * beta - kseq_acceptance(beta, num_drafts)


def kseq_rho(p: np.ndarray, q: np.ndarray, num_drafts: int):
    """The smallest rho in [1, K] with p_acc(rho) <= rho beta(rho), up to float64 resolution.

    Float inputs give a float on which the computed gap is >= 0; Fraction inputs give a Fraction on which
    the exact gap is >= 0.
    """
    exact = p.dtype == object
    if num_drafts == 1:
        return Fraction(1) if exact else 1.0
    p_float, q_float = p.astype(np.float64), q.astype(np.float64)
    low, high = 1.0, float(num_drafts)
    if kseq_gap(p_float, q_float, low, num_drafts) >= 0:
        high = low
    for _ in range(BISECTION_STEPS):
        middle = (low + high) / 2
        if not low < middle < high:
            break
        if kseq_gap(p_float, q_float, middle, num_drafts) >= 0:
            high = middle
        else:
            low = middle
    if not exact:
        return high
    rho, step = Fraction(high), Fraction(1, 2**50)
    while kseq_gap(p, q, rho, num_drafts) < 0:
        rho, step = min(rho + step, Fraction(num_drafts)), 2 * step
    return rho


def kseq_residual(p: np.ndarray, q: np.ndarray, rho, num_drafts: int) -> np.ndarray:
    """p_res = norm((p - min(q, p/rho) p_acc / beta)+).

    p itself when nothing can be accepted (beta = 0), and when the vector vanishes in float64: its mass is
    (1 - beta)^K, the probability of reaching the residual at all, so it vanishes only when that
    probability is at rounding level and any stand-in moves the output by at most that much.
    """
    beta = kseq_beta(p, q, rho)
    if beta == 0:
        return p.copy()
    law = normalize(positive_part(p - np.minimum(q, p / rho) * (kseq_acceptance(beta, num_drafts) / beta)))
    return law if law.sum() > 0 else p.copy()


class SpecTrSolver(NodeSolver):
    name = "spectr"
    valid_for = frozenset({DraftLaw.IID_CHILDREN})

    def __init__(self):
        self._cache = NodeCache()

    def parameters(self, p: np.ndarray, q: np.ndarray, num_drafts: int):
        """(rho*, p_res) at a node, cached: the bisection runs once per distinct (p, q, K)."""
        def build():
            rho = kseq_rho(p, q, num_drafts)
            return rho, kseq_residual(p, q, rho, num_drafts)
        return self._cache.get_or_build(node_key(p, q, num_drafts), build)

    def output_law(self, p: np.ndarray, q: np.ndarray, children: tuple[int, ...]) -> np.ndarray:
        rho, leftover = self.parameters(p, q, len(children))
        law = zeros(p.shape, exact=p.dtype == object)
        all_rejected = 1  # P(candidates 1..i-1 all rejected)
        for token in children:
            accept = ratio_min_one(p[token], rho * q[token])
            law[token] += all_rejected * accept
            all_rejected = all_rejected * (1 - accept)
        return law + all_rejected * leftover

    def sample(self, p: np.ndarray, q: np.ndarray, children: tuple[int, ...], chooser: Chooser) -> int:
        rho, leftover = self.parameters(p, q, len(children))
        for token in children:
            if chooser.bernoulli(ratio_min_one(p[token], rho * q[token])):
                return token
        return chooser.categorical(leftover)
