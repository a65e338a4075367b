"""SpecTr's K-SEQ node solver (Sun et al. 2023, "SpecTr: Fast Speculative Decoding via Optimal Transport",
arXiv 2310.15141, Alg. 3 "K-SEQ"; docs/guides/reference.md, "Single position, K drafts").

For K i.i.d. drafts x_1..x_K from q (K = the length of the node's child list):

    beta(rho)  = sum_x min(q(x), p(x) / rho),
    p_acc(rho) = 1 - (1 - beta(rho))^K,

rho* in [1, K] is the root of rho * beta(rho) = p_acc(rho). Candidate i is accepted with probability
min(1, p(x_i) / (rho* q(x_i))), candidates in order, each tested independently (no residual update between
candidates; a repeated token is tested again). If all are rejected, Y ~ p_res = norm((p - min(q, p/rho*)
p_acc / beta)+). Why this is lossless: the first accepted candidate has law min(q, p/rho)/beta and some
candidate is accepted with probability p_acc, so P(Y = y, accepted) = min(q, p/rho)(y) p_acc / beta, which
is at most p(y) exactly when p_acc(rho) <= rho beta(rho); the residual then carries the rest.

Precision (trap 5 of docs/guides/reference.md): any rho with p_acc(rho) <= rho beta(rho) is lossless and the root is
the smallest such rho (g(rho) = rho beta(rho) - p_acc(rho) is nondecreasing: rho beta = sum min(rho q, p)
grows, p_acc shrinks). ``kseq_rho`` therefore returns the UPPER end of a bisection bracket (one bisection
for all nodes of a batch, in the precision of the inputs), on which the computed g is >= 0; with the
computed beta and p_acc at that rho the subtracted part exceeds p by at most rounding (~1e-16 in float64),
so the rule is lossless to 1e-12. In exact mode the float root is converted to a Fraction and nudged up
until g(rho) >= 0 holds exactly, which makes the rule exactly lossless. rho* and p_res are solved once per
node (``SpecTrSolver.parameters``).
K = 1 gives rho* = 1 and the naive rule.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from verispec import backend
from verispec.simulator.chooser import Chooser
from verispec.simulator.distributions import normalize, ratio_min_one
from verispec.simulator.drafters import DraftLaw
from verispec.simulator.interfaces import NodeSolver
from verispec.verifiers.node_cache import NodeCache, node_key, nodes_are_fresh

#: Bisection steps; 200 halvings of [1, K] reach adjacent float64 values long before they run out.
BISECTION_STEPS = 200


def kseq_beta(p, q, rho):
    """beta(rho) = sum_x min(q(x), p(x) / rho); p, q [..., V], rho scalar or [...] -> [...]."""
    xp = backend.namespace(p, q)
    return backend.total(xp.minimum(q, p / backend.per_row(rho, p)))


def kseq_acceptance(beta, num_drafts: int):
    """p_acc = 1 - (1 - beta)^K: the probability that at least one of K candidates is accepted."""
    return 1 - (1 - beta) ** num_drafts


def kseq_gap(p, q, rho, num_drafts: int):
    """g(rho) = rho beta(rho) - p_acc(rho); the rule is lossless iff g(rho) >= 0."""
    beta = kseq_beta(p, q, rho)
    return rho * beta - kseq_acceptance(beta, num_drafts)


def kseq_rho(p, q, num_drafts: int):
    """The smallest rho in [1, K] with p_acc(rho) <= rho beta(rho), up to float resolution; batched over
    leading axes (p, q [..., V] -> [...]), by one bisection for all rows at once.

    Float inputs give floats on which the computed gap is >= 0 (in their own precision); Fraction inputs
    give Fractions on which the exact gap is >= 0 (the float64 root, nudged up until it holds exactly).
    """
    if backend.is_exact(p):
        floats = kseq_rho(p.astype(np.float64), q.astype(np.float64), num_drafts)
        return _exact_roots(p, q, np.asarray(floats, dtype=np.float64), num_drafts)
    xp = backend.namespace(p, q)
    low = backend.ones(p.shape[:-1], p)
    if num_drafts == 1:
        return low
    high = low * num_drafts
    high = xp.where(kseq_gap(p, q, low, num_drafts) >= 0, low, high)
    for _ in range(BISECTION_STEPS):
        middle = (low + high) / 2
        moving = (low < middle) & (middle < high)
        if not bool(xp.any(moving)):
            break
        holds = kseq_gap(p, q, middle, num_drafts) >= 0
        high = xp.where(moving & holds, middle, high)
        low = xp.where(moving & ~holds, middle, low)
    return high


def _exact_roots(p, q, floats, num_drafts: int):
    """Fractions at or above the float roots on which the exact gap is >= 0 (each row nudged up)."""
    rows = p.reshape(-1, p.shape[-1]), q.reshape(-1, q.shape[-1])
    roots = np.empty(floats.size, dtype=object)
    for index, start in enumerate(floats.reshape(-1)):
        rho, step = Fraction(float(start)), Fraction(1, 2**50)
        while kseq_gap(rows[0][index], rows[1][index], rho, num_drafts) < 0:
            rho, step = min(rho + step, Fraction(num_drafts)), 2 * step
        roots[index] = rho
    return roots.reshape(floats.shape) if floats.ndim else roots[0]


def kseq_residual(p, q, rho, num_drafts: int):
    """p_res = norm((p - min(q, p/rho) p_acc / beta)+); batched as ``kseq_beta``.

    p itself when nothing can be accepted (beta = 0), and when the vector vanishes in float: its mass is
    (1 - beta)^K, the probability of reaching the residual at all, so it vanishes only when that
    probability is at rounding level and any stand-in moves the output by at most that much.
    """
    xp = backend.namespace(p, q)
    beta = kseq_beta(p, q, rho)
    scale = backend.divide(kseq_acceptance(beta, num_drafts), beta, where_zero=backend.zero(p))
    law = normalize(backend.positive_part(p - xp.minimum(q, p / backend.per_row(rho, p)) * backend.per_row(scale, p)))
    keep_p = (backend.total(law, keepdims=True) == 0) | backend.per_row(beta == 0, p)
    return backend.where(keep_p, p, law)


class SpecTrSolver(NodeSolver):
    name = "spectr"
    summary = "SpecTr K-SEQ, rho* by bisection"
    citation = "Sun et al. 2023, arXiv 2310.15141, Alg. 3"
    valid_for = frozenset({DraftLaw.IID_CHILDREN})

    def __init__(self):
        self._cache = NodeCache()

    def parameters(self, p, q, num_drafts: int):
        """(rho* [N], p_res [N, V]) for every row, solved once per node: per run of equal rows, and across
        calls through a cache of host copies (the exact engine asks for the same nodes over and over)."""
        first, inverse = backend.runs(p, q)
        host_p, host_q = backend.to_numpy(p[first]), backend.to_numpy(q[first])
        if nodes_are_fresh():  # real decoding: every node new, so no key is computed and nothing kept
            rho = kseq_rho(host_p, host_q, num_drafts)
            leftover = kseq_residual(host_p, host_q, rho, num_drafts)
            return backend.asarray(rho, p)[inverse], backend.asarray(leftover, p)[inverse]
        keys = [node_key(host_p[u], host_q[u], num_drafts) for u in range(len(host_p))]
        solved = [self._cache.get(key) if key in self._cache else None for key in keys]
        missing = [u for u, value in enumerate(solved) if value is None]
        if missing:
            rho = kseq_rho(host_p[missing], host_q[missing], num_drafts)
            leftover = kseq_residual(host_p[missing], host_q[missing], rho, num_drafts)
            for index, u in enumerate(missing):
                # an owned row: a view would keep the whole [missing, V] batch alive in the cache
                solved[u] = (rho[index], np.array(leftover[index]))
                self._cache.put(keys[u], solved[u])
        rho = backend.asarray([value[0] for value in solved], p)
        leftover = backend.asarray(np.stack([value[1] for value in solved]), p)
        return rho[inverse], leftover[inverse]

    def output_laws(self, p, q, children):
        count = children.shape[1]
        rho, leftover = self.parameters(p, q, count)
        law = backend.zeros(p.shape, p)
        all_rejected = backend.ones(p.shape[:-1], p)  # P(candidates 1..i-1 all rejected), [N]
        for i in range(count):
            token = children[:, i]
            accept = backend.minimum_one(backend.take(p, token) / (rho * backend.take(q, token)))
            mass = all_rejected * accept
            law = backend.add_to_tokens(law, token, mass)
            all_rejected = all_rejected * (1 - accept)
        return law + all_rejected[:, None] * leftover

    def sequential_tests(self, p, q, draws: int):
        # every candidate takes the same test: t is accepted with q(t) min(1, p(t) / (rho q(t))) = min(q, p / rho)
        rho, leftover = self.parameters(p, q, draws)
        accept = backend.namespace(p, q).minimum(q, p / backend.per_row(rho, p))
        return [accept] * draws, leftover

    def sample(self, p, q, children: tuple[int, ...], chooser: Chooser) -> int:
        rho, leftover = (value[0] for value in self.parameters(p[None], q[None], len(children)))
        for token in children:
            if chooser.bernoulli(ratio_min_one(p[token], rho * q[token])):
                return token
        return chooser.categorical(leftover)
