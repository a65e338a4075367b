"""Global Resolution (Thomas & Pal, arXiv 2511.15898, ICLR 2026): the optimal-transport verification law for K
i.i.d. drafts, as two Luce (softmax) choice programs.

The paper's text was not reachable from this project's machines; what follows was rebuilt from reading notes of
it and checked here against the OT optimum (``iid_ot_optimum``) and the max-flow construction. With
psi(H) = p(H) - q(H)^K, alpha* = 1 + min_H psi(H) (Hu et al. 2025; ``single_position``), and H* a minimiser:

* Complementary slackness splits the optimal coupling in two systems. A draft tuple with some draft outside H*
  ("outer") is always accepted, as one of its drafts outside H*. A tuple inside H* ("inner") emits each token
  y of H* with total probability exactly p(y) and rejects the rest, q(H*)^K - p(H*) = 1 - alpha*.
* Each system is a Luce choice over draft POSITIONS (verispec's choice, the count-weighted rule): an outer tuple
  picks one of its drafts outside H*, draft i with weight e^(a_(x_i)); an inner tuple picks draft i with weight
  e^(b_(x_i)) or rejects with weight 1. A token drafted c times thus weighs c e^(a). The weights minimise the
  convex
      Phi(a)   = E[log sum_(i: x_i outside H*) e^(a_(x_i)); outer]  - sum_(y outside H*) p(y) a_y,   a <= 0,
      Theta(b) = E[log (1 + sum_i e^(b_(x_i))); inner]             - sum_(y in H*) p(y) b_y,
  whose gradients are (chosen marginal - p). Theta's minimum makes the inner marginals p (the paper's program).
  For the outer system the paper fixes targets x <= p by a polymatroid formula, which sits on faces of the
  polytope (Luce weights at infinity); verispec instead bounds a <= 0, where the minimum has marginal = p at
  every a_y < 0 and marginal <= p at a_y = 0 (the KKT conditions), which is all optimality needs (the outer mass
  1 - q(H*)^K accepted whole), at finite weights. The outer choice has no reject, so only weight ratios matter:
  the largest outer weight is 1.
* The count-weighted rule reaches the same polytope as a choice among distinct drafts (the objectives differ by
  bounded log c terms, so their recession functions, max(0, max_(y drafted) a_y) - p.a, and hence the interiors
  their gradients cover, agree), and it has two properties the distinct choice lacks: tokens of equal weight can
  be lumped into one (a lumped token drafted c times is c positions), and every expectation over draft tuples is
  a one-dimensional integral (``luce_integrals``: E[c_x e^(-tS)] = K q_x e^(-t w_x) G(t)^(K-1)).

Two derivations of the same rule. Where the node's draft multisets can be enumerated (at most
``MAX_MULTISETS`` over at most ``MAX_SUPPORT`` drafted tokens, and always in exact mode), the programs are sums
over the multisets with their multinomial probabilities (``Multisets``, ``luce_moments``). At any vocabulary they
are integrals over t (``luce_integrals``): the optimum is a fixed point in the one function G, solved in stages
(``luce_solver.solve_system``) and the chosen law p_I computed for the weights used to about 1e-16 per unit mass.
The tests hold the two to each other where both run. ``luce_solver.minimise_luce`` is the projected damped Newton
method both use (the exact Hessian; quadratic convergence to 1e-15 in a few dozen steps); ``solve_luce_cvxpy``
states the enumerated program in cvxpy (log-sum-exp atoms, exponential cone) as the tests' second solver.
verispec's verifier (``verifiers/globalres.py``) uses the weights in Khisti et al.'s two-step frame, which is
lossless for any weights, so a solver's tolerance costs acceptance, never exactness.
"""

from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from verispec.errors import ProblemTooLargeError
from verispec.lp_analysis.luce_integrals import INNER_CEILING, OUTER_FLOOR, ChoiceSystem
from verispec.lp_analysis.luce_solver import LOWEST_EXPONENT, minimise_luce, solve_system
from verispec.native import series

#: Largest number of draft multisets a node's programs are enumerated over (both systems together).
MAX_MULTISETS = 20_000
#: Largest drafted support the enumerated programs keep (the Newton step is cubic in it).
MAX_SUPPORT = 64
#: Bound on the inner exponents: a face of the polytope sends weights to infinity; e^60 is past float precision.
WEIGHT_BOUND = INNER_CEILING
#: Buckets of log(p/q) the vocabulary-scale scan for H* sorts within (only buckets that may hold the minimum).
SCAN_BUCKETS = 2048


def multiset_count(support: int, num_drafts: int) -> int:
    return math.comb(support + num_drafts - 1, num_drafts)


@dataclass(frozen=True, eq=False)
class Multisets:
    """The multisets of K draws from m tokens with probabilities q (float64 or Fractions).

    counts      [M, m] int   how many of the K draws are token j
    probability [M]          K! / prod n_j! prod q_j^(n_j)
    positions   [M, K] int   the multiset's tokens in increasing order, one a draw (the sums below run over these
                             K positions, not the m columns: a row of K = 4 draws from 20 tokens has 4 of them)
    """

    counts: np.ndarray
    probability: np.ndarray
    positions: np.ndarray

    @classmethod
    def of(cls, q: np.ndarray, num_drafts: int) -> Multisets:
        size = len(q)
        count = multiset_count(size, num_drafts)
        if count > 10 * MAX_MULTISETS:
            raise ProblemTooLargeError(f"{count:,} multisets of {num_drafts} draws from {size} tokens")
        counts, ways, positions = _multiset_counts(size, num_drafts)  # [M, m], [M], [M, K] (shared, read only)
        if q.dtype == object:
            probability = np.array([int(w) * math.prod((q[j] ** int(n) for j, n in enumerate(row) if n),
                                                       start=Fraction(1)) for w, row in zip(ways, counts)],
                                   dtype=object)
        else:
            probability = ways * np.prod(np.asarray(q, dtype=np.float64).take(positions), axis=1)
        return cls(counts=counts, probability=probability, positions=positions)


@functools.lru_cache(maxsize=64)
def _multiset_counts(size: int, num_drafts: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every multiset of K draws from ``size`` tokens as counts [M, m], its number of orderings K! / prod n_j! [M]
    (exact integers in float64: K <= 20) and its tokens in increasing order [M, K]."""
    combos = np.array(list(itertools.combinations_with_replacement(range(size), num_drafts)), dtype=np.int64)
    counts = np.zeros((len(combos), size), dtype=np.int64)
    np.add.at(counts, (np.repeat(np.arange(len(combos)), num_drafts), combos.ravel()), 1)
    factorials = np.array([math.factorial(n) for n in range(num_drafts + 1)], dtype=np.float64)
    ways = math.factorial(num_drafts) / np.prod(factorials[counts], axis=1)
    ways = np.rint(ways)
    for array in (counts, ways, combos):
        array.flags.writeable = False
    return counts, ways, combos


def draw_positions(counts: np.ndarray) -> np.ndarray:
    """The multisets of ``counts`` [M, n] as the tokens of their draws [M, L] (L the largest row total; a count c
    of token j puts j at c positions), n at the positions a shorter row lacks."""
    counts = np.asarray(counts, dtype=np.int64)
    rows, size = counts.shape
    totals = counts.sum(axis=1)
    tokens = np.repeat(np.tile(np.arange(size), rows), counts.ravel())
    slot = np.arange(len(tokens)) - np.repeat(np.cumsum(totals) - totals, totals)
    positions = np.full((rows, int(totals.max(initial=0))), size)
    positions[np.repeat(np.arange(rows), totals), slot] = tokens
    return positions


def optimal_set(p: np.ndarray, q: np.ndarray, num_drafts: int) -> np.ndarray:
    """H*, a minimiser of psi(H) = p(H) - q(H)^K, as a boolean mask: the best prefix of the tokens sorted by q/p
    decreasing (``single_position.iid_ot_optimum``, exact in exact mode), tokens with q = 0 never in it."""
    from verispec.lp_analysis.single_position import iid_ot_optimum

    mask = np.zeros(len(p), dtype=bool)
    mask[list(iid_ot_optimum(p, q, num_drafts).minimiser)] = True
    return mask & np.array([bool(v) for v in q])


def optimal_split(p: np.ndarray, q: np.ndarray, num_drafts: int) -> tuple[np.ndarray, float]:
    """(H* as a mask over the vocabulary, alpha*) by the sorted-prefix scan of ``iid_ot_optimum`` in float64, at a
    real vocabulary without sorting it. Drafted tokens of p = 0 come first (each lowers psi). The rest is
    bucketed by log(p/q); psi at every bucket's end is a cumulative sum, and inside bucket b every prefix has
    psi >= min(psi at its start, P_start + r_low Q_b - Q_end^K) (p >= r_low q there, and -Q^K is concave), so
    only buckets whose bound beats the best end are sorted and scanned. Tokens with q = 0 are never in H*."""
    positive = q > 0
    # at full support (a real vocabulary without top-k) no index of the drafted tokens is made: None stands for all
    drafted = None if int(np.count_nonzero(positive)) == len(q) else np.flatnonzero(positive)
    mask = np.zeros(len(p), dtype=bool)
    pd, qd = (p, q) if drafted is None else (p.take(drafted), q.take(drafted))  # no copy at full support
    zero = pd <= 0
    zeros = int(np.count_nonzero(zero))
    if zeros:  # else no [n] selects
        mask[zero if drafted is None else drafted[zero]] = True
    start_q = float(qd[zero].sum()) if zeros else 0.0
    best = -start_q ** num_drafts
    if zeros < len(pd):
        if zeros:  # else every drafted token is one of the rest: no copies
            rest = np.flatnonzero(~zero)
            pd, qd, drafted = pd.take(rest), qd.take(rest), rest if drafted is None else drafted.take(rest)
        # from here pd, qd and drafted hold the rest, and token indices point into them
        log_ratio = np.log(pd)
        log_ratio -= np.log(qd)
        low, high = float(log_ratio.min()), float(log_ratio.max())
        count = min(SCAN_BUCKETS, len(pd))
        scale = count / (high - low) if high > low else 0.0
        bucket, mass_q, mass_p = _scan_buckets(log_ratio, pd, qd, low, scale, count)
        end_q = start_q + np.cumsum(mass_q)
        end_p = np.cumsum(mass_p)
        end_psi = end_p - end_q ** num_drafts
        begin_q = end_q - mass_q
        begin_p = end_p - mass_p
        begin_psi = np.concatenate([[best], end_psi[:-1]])
        # a token sits in bucket b only if its log ratio >= low + b / scale (up to rounding: a margin of 1e-12)
        floor_ratio = np.exp(low + np.arange(count) / scale - 1e-12) if scale else np.full(count, math.exp(low))
        bound = np.minimum(begin_psi, begin_p + floor_ratio * mass_q - end_q ** num_drafts)
        ends = int(np.argmin(end_psi))
        if end_psi[ends] < best:
            best, best_end = float(end_psi[ends]), ends
        else:
            best_end = -1
        candidates = np.flatnonzero(bound < best)
        best_cut = None
        if candidates.size:
            chosen = np.zeros(count, dtype=bool)
            chosen[candidates] = True
            inside = np.flatnonzero(chosen[bucket])
            order = inside[np.lexsort((log_ratio[inside], bucket[inside]))]
            # prefixes of each candidate bucket, in ratio order
            groups = bucket[order]
            first = np.r_[True, groups[1:] != groups[:-1]]
            group_start = np.flatnonzero(first)
            ordered_q, ordered_p = qd.take(order), pd.take(order)
            running_q = np.cumsum(ordered_q)
            running_p = np.cumsum(ordered_p)
            lengths = np.diff(np.r_[group_start, len(order)])
            offset_q = np.repeat(running_q[group_start] - ordered_q[group_start], lengths)
            offset_p = np.repeat(running_p[group_start] - ordered_p[group_start], lengths)
            prefix_psi = (begin_p[groups] + running_p - offset_p) - (begin_q[groups] + running_q - offset_q) \
                ** num_drafts
            at = int(np.argmin(prefix_psi))
            if prefix_psi[at] < best:
                best, best_cut = float(prefix_psi[at]), at
        below, within = (bucket <= best_end, np.empty(0, np.int64)) if best_end >= 0 else (None, None)
        if best_cut is not None:
            cut_bucket = groups[best_cut]
            below, within = bucket < cut_bucket, order[(groups == cut_bucket) & (np.arange(len(order)) <= best_cut)]
        if below is not None and len(pd) == len(mask):  # every token drafted, p > 0: the mask is H* itself
            mask = below
            mask[within] = True
        elif below is not None:
            mask[drafted[np.flatnonzero(below)]] = True
            mask[drafted[within]] = True
    return mask, 1 + best


def _scan_buckets(log_ratio: np.ndarray, p: np.ndarray, q: np.ndarray, low: float, scale: float, count: int):
    """``optimal_split``'s bucket of each token [n], min(trunc((log ratio - low) scale), count - 1), and the q and p
    mass of each bucket [count]: one compiled pass (``series.scan_buckets``), else numpy's."""
    scanned = series.scan_buckets(log_ratio, p, q, low, scale, count)
    if scanned is not None:
        return scanned
    scaled = np.subtract(log_ratio, low)
    scaled *= scale
    bucket = scaled.astype(np.int64)
    np.minimum(bucket, count - 1, out=bucket)
    return bucket, np.bincount(bucket, q, minlength=count), np.bincount(bucket, p, minlength=count)


def luce_moments(exponents: np.ndarray, counts: np.ndarray | None, probability: np.ndarray, reject: float,
                 positions: np.ndarray | None = None, pairs: np.ndarray | None = None):
    """(objective, gradient without the target, Hessian) of sum_w P(w) log(reject + sum_j c_j(w) e^(a_j)) at a
    [n]; counts [M, n] (draws of each token in multiset w), or their ``positions`` [M, L] (``draw_positions``),
    probability [M] (float64). The sums run over each multiset's draws, P(pick draw i | w) = e^(a_(x_i)) / total,
    so a token drafted c times gets c of them; ``pairs`` (``draw_pairs``) may be passed where they are reused."""
    positions = draw_positions(counts) if positions is None else positions
    size = len(exponents)
    shift = max(float(exponents.max(initial=0.0)), 0.0)  # e^(a - shift), reject e^(-shift): no overflow
    weights = np.append(np.exp(exponents - shift), 0.0)              # [n + 1], an empty position weighs 0
    scaled = weights.take(positions)                                 # [M, L]
    total = reject * math.exp(-shift) + scaled.sum(axis=1)          # [M]
    live = total > 0
    safe = np.where(live, total, 1.0)
    chosen = scaled / safe[:, None]                                  # [M, L] P(pick draw i | w)
    objective = float(probability @ np.where(live, np.log(safe) + shift, 0.0))
    weighted = probability[:, None] * chosen                         # [M, L]
    marginal = np.bincount(positions.ravel(), weighted.ravel(), minlength=size + 1)[:size]
    # sum_w P(w) chosen_j chosen_k over the ordered pairs of draws (i, i'): those with i = i' (on the diagonal, D),
    # and the pairs i < i' once (U, landing on or above it: a multiset's draws are in increasing token order), so
    # the sum is D + U + U^T; bincounts of M L (L + 1) / 2 terms, not an [n, M] @ [M, n] product
    pairs = draw_pairs(positions, size) if pairs is None else pairs
    first, second = np.triu_indices(positions.shape[1], 1)
    upper = np.bincount(pairs, (weighted[:, first] * chosen[:, second]).ravel(), minlength=(size + 1) ** 2)
    upper = upper.reshape(size + 1, size + 1)[:size, :size]
    own = np.bincount(positions.ravel(), (weighted * chosen).ravel(), minlength=size + 1)[:size]
    return objective, marginal, np.diag(marginal - own) - upper - upper.T


def solve_luce(counts: np.ndarray | None, probability: np.ndarray, target: np.ndarray, reject: float,
               upper: float = WEIGHT_BOUND, lower: float = LOWEST_EXPONENT,
               positions: np.ndarray | None = None) -> np.ndarray:
    """The exponents a minimising sum_w P(w) log(reject + sum_j c_j(w) e^(a_j)) - target . a over enumerated
    multisets (float64; their ``counts`` or draw ``positions``), with lower <= a <= upper (``minimise_luce``,
    started at log(target / presence))."""
    positions = draw_positions(counts) if positions is None else positions
    size = len(target)
    presence = np.bincount(positions.ravel(), np.repeat(probability, positions.shape[1]), minlength=size + 1)[:size]
    start = np.log(np.maximum(target, 1e-300) / np.maximum(presence, 1e-300))
    pairs = draw_pairs(positions, size)
    return minimise_luce(lambda a: luce_moments(a, None, probability, reject, positions, pairs), target, start,
                         lower, upper)


def draw_pairs(positions: np.ndarray, size: int) -> np.ndarray:
    """The pairs of draws i < i' of each multiset as the flat index x_i (n + 1) + x_i' [M L (L - 1) / 2]."""
    first, second = np.triu_indices(positions.shape[1], 1)
    return (positions[:, first] * (size + 1) + positions[:, second]).ravel()


def solve_luce_cvxpy(counts: np.ndarray, probability: np.ndarray, target: np.ndarray, reject: float,
                     upper: float = WEIGHT_BOUND, lower: float = LOWEST_EXPONENT) -> np.ndarray:
    """The same program in cvxpy (a sum of log-sum-exp atoms over a_j + log c_j, solved through the exponential
    cone): the tests' second solver, with the bounds of ``solve_luce``. Needs the ``lp`` extra (cvxpy)."""
    from verispec.lp_analysis.solve import require_cvxpy

    cp = require_cvxpy("Global Resolution's program in cvxpy (solve_luce_cvxpy)")

    size = counts.shape[1]
    exponents = cp.Variable(size)
    terms = []
    for row, mass in zip(counts, probability):
        inside = [exponents[j] + math.log(row[j]) for j in np.flatnonzero(row)]
        if reject > 0:
            inside.append(cp.Constant(math.log(reject)))
        if inside and mass > 0:
            terms.append(float(mass) * cp.log_sum_exp(cp.hstack(inside)))
    problem = cp.Problem(cp.Minimize(cp.sum(terms) - target @ exponents),
                         [exponents <= upper, exponents >= lower])
    problem.solve(solver=cp.CLARABEL, tol_gap_abs=1e-10, tol_gap_rel=1e-10, tol_feas=1e-10)
    return np.asarray(exponents.value, dtype=np.float64)


@dataclass(frozen=True, eq=False)
class Resolution:
    """Global Resolution's step-1 rule at one node, over the vocabulary.

    drafted      [V] bool   q > 0 (a token the draft law can give)
    inner        [V] bool   H*
    weights      [V]        the Luce weight of each token: e^(a) outside H* (the largest 1), e^(b) inside (0 where
                            p = 0); floats, or Fractions in exact mode (the float solution: outer weights as
                            they are, inner ones rounded to 10^-15), since the rule's law is computed from them
    intermediate [V]        p_I, the exact law of the chosen token for these weights (total 1 - P(reject))
    method       str        "enumeration" (sums over multisets) or "integrals" (``luce_integrals``)
    """

    drafted: np.ndarray
    inner: np.ndarray
    weights: np.ndarray
    intermediate: np.ndarray
    method: str

    def choice(self, row_children: np.ndarray) -> list[tuple[int, object]]:
        """[(vocabulary id, probability)] of the chosen token for one row of drafts [K] (each distinct token once,
        weighing its count times its weight; ``row_choice``); the reject mass is what the probabilities leave of 1."""
        tokens = [int(token) for token in row_children]
        if not all(self.drafted[token] for token in tokens):
            raise ValueError("a drafted token the draft law gives no mass to")
        return row_choice(tokens, self.weights, self.inner)

    def sample(self, children, chooser):
        """The chosen token for one row of drafts, or None when the rule rejects (``chooser`` decides)."""
        picks = self.choice(np.asarray(children, dtype=np.int64))
        probabilities = [probability for _, probability in picks]
        left = 1 - sum(probabilities, 0 * self.intermediate[0])  # the reject mass
        probabilities.append(left if self.intermediate.dtype == object else max(float(left), 0.0))
        index = chooser.categorical(probabilities)
        return picks[index][0] if index < len(picks) else None

    def laws(self, children: np.ndarray) -> np.ndarray:
        """The law of the chosen token for every row of drafts [R, K], [R, V] (sub-stochastic: the reject mass
        is missing). Draft position i weighs w(x_i); a row with a draft outside H* chooses among those."""
        rows, size = len(children), len(self.intermediate)
        if self.intermediate.dtype == object:
            out = np.full((rows, size), 0 * self.intermediate[0], dtype=object)
            for row, drafts in enumerate(children):
                for token, probability in self.choice(drafts):
                    out[row, token] += probability
            return out
        children = np.asarray(children, dtype=np.int64)
        if not self.drafted[children].all():
            raise ValueError("a drafted token the draft law gives no mass to")
        pick, total = pool_weights(self.weights[children], ~self.inner[children])  # [R, K], [R]
        out = np.zeros((rows, size))
        np.add.at(out, (np.repeat(np.arange(rows), children.shape[1]), children.ravel()),
                  (pick / total[:, None]).ravel())
        return out


def resolve(p: np.ndarray, q: np.ndarray, num_drafts: int, *, max_multisets: int = MAX_MULTISETS,
            method: str = "auto") -> Resolution:
    """Global Resolution's step-1 rule at a node (p, q over the vocabulary; float64, or Fractions for an exact
    law of the rule actually used). ``method``: "enumeration" (sums over the node's draft multisets; the only one
    in exact mode), "integrals" (``luce_integrals``, any vocabulary, float64), or "auto": enumeration where the
    multisets fit ``max_multisets``, integrals elsewhere."""
    exact = p.dtype == object
    support = sum(1 for v in q if v) if exact else int(np.count_nonzero(q > 0))
    fits = support <= MAX_SUPPORT and multiset_count(support, num_drafts) <= max_multisets
    if method == "auto":
        method = "enumeration" if exact or fits else "integrals"
    if method == "integrals":
        if exact:
            raise ProblemTooLargeError("globalres's integrals run in float64; exact mode enumerates the node's "
                                       "draft multisets: use float mode, or a smaller support")
        return _resolve_by_integrals(np.asarray(p, dtype=np.float64), np.asarray(q, dtype=np.float64), num_drafts)
    if not fits:
        raise ProblemTooLargeError(f"globalres enumerates a node's draft multisets: {support} drafted tokens give "
                                   f"{multiset_count(support, num_drafts):,} multisets of {num_drafts}; the limit is "
                                   f"{max_multisets:,}" + (": use float mode" if exact else ""))
    return _resolve_by_enumeration(p, q, num_drafts)


def _resolve_by_enumeration(p: np.ndarray, q: np.ndarray, num_drafts: int) -> Resolution:
    exact = p.dtype == object
    zero = 0 * p[0]
    drafted = np.array([bool(v) for v in q]) if exact else q != 0  # the float test vectorised: a [V] loop is 8 ms
    support = np.flatnonzero(drafted)
    support_p, support_q = p[support], q[support]
    # the p of tokens nobody drafts, which no tuple reaches: one more entry with q = 0 (outside every multiset)
    never = 1 - sum(support_p, zero)
    full_p = np.array([*support_p, never if exact else max(float(never), 0.0)], dtype=p.dtype)
    full_q = np.array([*support_q, zero], dtype=p.dtype)
    # a drafted token with p = 0 lowers psi when added to H (q(H)^K grows), so the exact H* holds it; the float
    # scan can miss it when its q is below the rounding of q(H) (q = 2e-25 beside 1.0), and an outer tuple whose
    # outer drafts all have p = 0 would then have nothing to pick
    inner = optimal_set(full_p, full_q, num_drafts)[:-1] | np.array([not value for value in support_p], dtype=bool)
    float_p = np.asarray(support_p, dtype=np.float64)
    sets = Multisets.of(np.asarray(support_q, dtype=np.float64), num_drafts)
    outer_rows = (~inner).take(sets.positions).any(axis=1)
    eligible = float_p > 0  # an outer token with q > 0 has p > 0 (else adding it to H* would lower psi)
    exponents = np.zeros(len(support))
    for rows, columns, reject, lower, upper in ((outer_rows, ~inner, 0.0, OUTER_FLOOR, 0.0),
                                                (~outer_rows, inner, 1.0, LOWEST_EXPONENT, WEIGHT_BOUND)):
        chosen = columns & eligible
        if chosen.any() and rows.any():
            # the system's draws as positions among its chosen tokens (any other token: an empty position)
            renumber = np.full(len(support), int(chosen.sum()))
            renumber[chosen] = np.arange(int(chosen.sum()))
            solved = solve_luce(None, sets.probability[rows], float_p[chosen], reject, upper, lower,
                                positions=renumber.take(sets.positions[rows]))
            if not reject:  # only ratios matter without a reject: the largest outer weight is 1
                solved = np.clip(solved - solved.max(), lower, upper)
            exponents[chosen] = solved
    weights = np.where(eligible, np.exp(exponents), 0.0)
    probability = sets.probability
    if exact:
        # an outer weight is kept as the float it is (a dyadic rational): rounded to 10^-15, weights below 5e-16
        # would become 0 and their ratios, which decide an outer tuple's choice, would be lost
        weights = np.array([Fraction(float(w)) if not inside else Fraction(float(w)).limit_denominator(10**15)
                            for w, inside in zip(weights, inner)], dtype=object)
        probability = Multisets.of(support_q, num_drafts).probability
    chosen = _marginals(sets.counts, probability, weights, inner, sets.positions)  # [m]
    vocabulary_weights = np.array([zero] * len(p), dtype=object) if exact else np.zeros(len(p))
    intermediate = vocabulary_weights.copy() if exact else np.zeros(len(p))  # zeros: untouched pages stay unmapped
    vocabulary_weights[support] = weights
    intermediate[support] = chosen
    vocabulary_inner = np.zeros(len(p), dtype=bool)
    vocabulary_inner[support] = inner
    return Resolution(drafted=drafted, inner=vocabulary_inner, weights=vocabulary_weights,
                      intermediate=intermediate, method="enumeration")


def _marginals(counts: np.ndarray, probability: np.ndarray, weights: np.ndarray, inner: np.ndarray,
               positions: np.ndarray | None = None) -> np.ndarray:
    """The law of the chosen support token [m] under the count-weighted Luce rule (outer tuples among their outer
    drafts, inner tuples among their drafts or reject with weight 1), in the number system of ``weights``; in
    floats over the draws' ``positions`` (``draw_positions`` of the counts when not given)."""
    if weights.dtype != object:
        size = len(weights)
        positions = draw_positions(counts) if positions is None else positions
        outer = np.append(~inner, False).take(positions)                    # [M, L] the draw is outside H*
        scaled, total = pool_weights(np.append(weights, 0.0).take(positions), outer)
        chosen = probability[:, None] * scaled / total[:, None]
        return np.bincount(positions.ravel(), chosen.ravel(), minlength=size + 1)[:size]
    out = np.array([Fraction(0)] * counts.shape[1], dtype=object)
    for row, mass in zip(counts, probability):
        for j, chosen in row_choice(np.repeat(np.arange(len(row)), row).tolist(), weights, inner):
            out[j] += mass * chosen
    return out


def row_choice(draws: list[int], weights: np.ndarray, inner: np.ndarray) -> list[tuple[int, object]]:
    """[(token, probability)] of the count-weighted Luce choice for one tuple of draws, in the number system of
    ``weights``: a tuple with a draw outside H* chooses among those draws (draw i with weight w(x_i)) and never
    rejects; an inner tuple chooses among its draws or rejects with weight 1 (the reject mass is what is left).
    An outer pool whose weights are all 0 chooses its draws with equal weights (``pool_weights``)."""
    outer = [token for token in draws if not inner[token]]
    pool, reject = (outer, 0) if outer else (draws, 1)
    one = weights[draws[0]] * 0 + 1
    weigh = [weights[token] for token in pool]
    total = sum(weigh, reject * one)
    if total == 0:  # only an outer pool can sum to 0 (an inner one has the reject's 1)
        weigh, total = [one] * len(pool), len(pool) * one
    chosen: dict[int, object] = {}
    for token, weight in zip(pool, weigh):
        chosen[token] = chosen.get(token, 0 * one) + weight / total
    return list(chosen.items())


def pool_weights(draw_weights: np.ndarray, outer: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the weight each draw is chosen with [R, L], the row's total with the reject [R]) of the count-weighted Luce
    choice over float rows of draws, ``draw_weights`` [R, L] and ``outer`` [R, L] (the draw lies outside H*).

    An outer tuple has no reject (Thomas & Pal's outer system, arXiv 2511.15898: every tuple with a draft outside
    H* is accepted, as one of those drafts; alpha* counts all of that mass), so when its outer draws all weigh 0
    (a rounded or underflowed weight; the program's floor is e^OUTER_FLOOR) the choice is the limit of equal
    weights, each outer draw alike, not 0/0 and not a reject: a reject would take the tuple's mass out of the
    step-1 acceptance sum min(p, p_I) (8/9 instead of alpha* = 1 at p = (1/3, 1/9, 5/9), q = (1/4, 1/3, 5/12),
    K = 2, the pair (1, 1)) and part from float mode, whose weights there are small but positive."""
    outer_rows = outer.any(axis=1)                                              # [R]
    pick = np.where(outer_rows[:, None], draw_weights * outer, draw_weights)    # an outer tuple: its outer draws
    empty = outer_rows & ~(pick.sum(axis=1) > 0)
    if empty.any():
        pick[empty] = outer[empty]
    return pick, pick.sum(axis=1) + np.where(outer_rows, 0.0, 1.0)            # reject weight 1 in inner rows


def _resolve_by_integrals(p: np.ndarray, q: np.ndarray, num_drafts: int) -> Resolution:
    drafted = q > 0
    # on the drafted tokens only (top-k 20 at V = 151,936: 20 of them), then placed in [V] arrays; index arrays,
    # not boolean masks: a [V] mask of scattered tokens indexes several times slower than take
    every = int(np.count_nonzero(drafted)) == len(p)
    support = None if every else np.flatnonzero(drafted)  # every token drafted: no [V] index made
    support_p, support_q = (p, q) if every else (p.take(support), q.take(support))
    support_inner, _ = optimal_split(support_p, support_q, num_drafts)
    inner = support_inner if every else np.zeros(len(p), dtype=bool)
    if not every:
        inner[support] = support_inner
    inner_at, outer_at = np.flatnonzero(support_inner), np.flatnonzero(~support_inner)
    inner_tokens, outer = (inner_at, outer_at) if every else (support.take(inner_at), support.take(outer_at))
    inner_p = support_p.take(inner_at)
    positive = inner_p > 0
    every_positive = bool(positive.all())  # the usual case: the inner system is H* itself, no more copies
    free_inner = inner_tokens if every_positive else inner_tokens.take(np.flatnonzero(positive))
    weights, intermediate = np.zeros(len(p)), np.zeros(len(p))
    if num_drafts == 1:  # one draft: an outer draft is always chosen, an inner one with w / (1 + w) = p / q
        ratio = p[free_inner] / q[free_inner]
        weights[free_inner] = np.minimum(ratio / np.maximum(1 - ratio, 0.0), math.exp(INNER_CEILING))
        weights[outer] = 1.0
        intermediate[free_inner] = q[free_inner] * weights[free_inner] / (1 + weights[free_inner])
        intermediate[outer] = q[outer]
        return Resolution(drafted=drafted, inner=inner, weights=weights, intermediate=intermediate,
                          method="integrals")
    inner_q = support_q.take(inner_at)
    systems = ((free_inner, 1, float(inner_q[inner_p <= 0].sum()), -math.inf, INNER_CEILING),
               (outer, 0, float(inner_q.sum()), OUTER_FLOOR, 0.0))
    for members, reject, fixed, lower, upper in systems:
        if members.size:
            mass, ratio = ((inner_q, inner_p) if members is free_inner and every_positive else
                           (q.take(members), p.take(members)))
            ratio = np.divide(ratio, mass, out=ratio if ratio is not inner_p else None)
            system = ChoiceSystem(mass=mass, ratio=ratio, drafts=num_drafts, reject=reject, fixed=fixed,
                                  lower=lower, upper=upper)
            solution = solve_system(system)
            weights[members] = solution.weights
            intermediate[members] = solution.intermediate
    return Resolution(drafted=drafted, inner=inner, weights=weights, intermediate=intermediate, method="integrals")
