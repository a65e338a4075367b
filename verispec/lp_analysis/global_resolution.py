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
(``solve_system``) and the chosen law p_I computed for the weights used to about 1e-16 per unit mass. The tests
hold the two to each other where both run. ``minimise_luce`` is the projected damped Newton method both use (the
exact Hessian; quadratic convergence to 1e-15 in a few dozen steps); ``solve_luce_cvxpy`` states the enumerated
program in cvxpy (log-sum-exp atoms, exponential cone) as the tests' second solver. verispec's verifier
(``verifiers/globalres.py``) uses the weights in Khisti et al.'s two-step frame, which is lossless for any weights,
so a solver's tolerance costs acceptance, never exactness.
"""

from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from verispec.errors import ProblemTooLargeError
from verispec.lp_analysis.luce_integrals import (
    BINS,
    GRID_POINTS,
    GRID_STEP,
    GRID_TOLERANCE,
    INNER_CEILING,
    JACOBIAN_BINS,
    OUTER_FLOOR,
    ROUND_TOLERANCE,
    ROUNDS,
    SOLVE_TERMS,
    TERMS,
    ChoiceSystem,
    Expansion,
    Nodes,
)

#: Largest number of draft multisets a node's programs are enumerated over (both systems together).
MAX_MULTISETS = 20_000
#: Largest drafted support the enumerated programs keep (the Newton step is cubic in it).
MAX_SUPPORT = 64
#: Bound on the inner exponents: a face of the polytope sends weights to infinity; e^60 is past float precision.
WEIGHT_BOUND = INNER_CEILING
#: Lower bound on the inner exponents of the enumerated programs (a target of 1e-300 still has a weight above it).
LOWEST_EXPONENT = -700.0
#: Newton stops when every gradient entry is below this (over multisets; on bins, which only seed the chord
#: steps and whose integrals carry rounding near 1e-15, at the second).
GRADIENT_TOLERANCE = 1e-15
BINNED_TOLERANCE = 1e-12
NEWTON_STEPS = 200
#: The cubic Lagrange weights of points k-1, k, k+1, k+2 as polynomials in theta (coefficients of 1, theta,
#: theta^2, theta^3) for a token at y_k + theta * step.
LAGRANGE = ((0.0, -1 / 3, 1 / 2, -1 / 6), (1.0, -1 / 2, -1.0, 1 / 2), (0.0, 1.0, 1 / 2, -1 / 2),
            (0.0, -1 / 6, 0.0, 1 / 6))
#: Margin (in log weight) beyond the binned solution's extrapolated range that the quadrature and clusters cover.
RANGE_MARGIN = 4.0
#: Buckets of log(p/q) the vocabulary-scale scan for H* sorts within (only buckets that may hold the minimum).
SCAN_BUCKETS = 2048


def multiset_count(support: int, num_drafts: int) -> int:
    return math.comb(support + num_drafts - 1, num_drafts)


@dataclass(frozen=True, eq=False)
class Multisets:
    """The multisets of K draws from m tokens with probabilities q (float64 or Fractions).

    counts      [M, m] int   how many of the K draws are token j
    probability [M]          K! / prod n_j! prod q_j^(n_j)
    """

    counts: np.ndarray
    probability: np.ndarray

    @classmethod
    def of(cls, q: np.ndarray, num_drafts: int) -> Multisets:
        size = len(q)
        count = multiset_count(size, num_drafts)
        if count > 10 * MAX_MULTISETS:
            raise ProblemTooLargeError(f"{count:,} multisets of {num_drafts} draws from {size} tokens")
        counts, ways = _multiset_counts(size, num_drafts)  # [M, m], [M] (shared, read only)
        if q.dtype == object:
            probability = np.array([int(w) * math.prod((q[j] ** int(n) for j, n in enumerate(row) if n),
                                                       start=Fraction(1)) for w, row in zip(ways, counts)],
                                   dtype=object)
        else:
            probability = ways * np.prod(np.asarray(q, dtype=np.float64)[None, :] ** counts, axis=1)
        return cls(counts=counts, probability=probability)


@functools.lru_cache(maxsize=64)
def _multiset_counts(size: int, num_drafts: int) -> tuple[np.ndarray, np.ndarray]:
    """Every multiset of K draws from ``size`` tokens as counts [M, m] and its number of orderings
    K! / prod n_j! [M] (exact integers in float64: K <= 20)."""
    combos = np.array(list(itertools.combinations_with_replacement(range(size), num_drafts)), dtype=np.int64)
    counts = np.zeros((len(combos), size), dtype=np.int64)
    np.add.at(counts, (np.repeat(np.arange(len(combos)), num_drafts), combos.ravel()), 1)
    factorials = np.array([math.factorial(n) for n in range(num_drafts + 1)], dtype=np.float64)
    ways = math.factorial(num_drafts) / np.prod(factorials[counts], axis=1)
    counts.flags.writeable = False
    ways.flags.writeable = False
    return counts, np.rint(ways)


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
    drafted = np.flatnonzero(q > 0)
    mask = np.zeros(len(p), dtype=bool)
    pd, qd = p[drafted], q[drafted]
    zero = pd <= 0
    mask[drafted[zero]] = True
    start_q = float(qd[zero].sum())
    best, best_tokens = -start_q ** num_drafts, drafted[:0]
    rest = np.flatnonzero(~zero)
    if rest.size:
        log_ratio = np.log(pd[rest]) - np.log(qd[rest])
        low, high = float(log_ratio.min()), float(log_ratio.max())
        count = min(SCAN_BUCKETS, rest.size)
        scale = count / (high - low) if high > low else 0.0
        bucket = np.minimum(((log_ratio - low) * scale).astype(np.int64), count - 1)
        mass_q = np.bincount(bucket, qd[rest], minlength=count)
        mass_p = np.bincount(bucket, pd[rest], minlength=count)
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
            running_q = np.cumsum(qd[rest][order])
            running_p = np.cumsum(pd[rest][order])
            offset_q = np.repeat(running_q[group_start] - qd[rest][order][group_start], np.diff(np.r_[group_start,
                                                                                                  len(order)]))
            offset_p = np.repeat(running_p[group_start] - pd[rest][order][group_start], np.diff(np.r_[group_start,
                                                                                                  len(order)]))
            prefix_psi = (begin_p[groups] + running_p - offset_p) - (begin_q[groups] + running_q - offset_q) \
                ** num_drafts
            at = int(np.argmin(prefix_psi))
            if prefix_psi[at] < best:
                best, best_cut = float(prefix_psi[at]), at
        if best_cut is not None:
            cut_bucket = groups[best_cut]
            within = order[(groups == cut_bucket) & (np.arange(len(order)) <= best_cut)]
            best_tokens = np.concatenate([rest[bucket < cut_bucket], rest[within]])
        elif best_end >= 0:
            best_tokens = rest[bucket <= best_end]
        mask[drafted[best_tokens]] = True
    return mask, 1 + best


def luce_moments(exponents: np.ndarray, counts: np.ndarray, probability: np.ndarray, reject: float):
    """(objective, gradient without the target, Hessian) of sum_w P(w) log(reject + sum_j c_j(w) e^(a_j)) at a
    [n]; counts [M, n] (draws of each token in multiset w), probability [M] (float64)."""
    shift = max(float(exponents.max(initial=0.0)), 0.0)  # e^(a - shift), reject e^(-shift): no overflow
    weights = np.exp(exponents - shift)                              # [n]
    scaled = counts * weights[None, :]                               # [M, n]
    total = reject * math.exp(-shift) + scaled.sum(axis=1)          # [M]
    live = total > 0
    safe = np.where(live, total, 1.0)
    chosen = scaled / safe[:, None]                                  # [M, n] P(pick j | w)
    objective = float(probability @ np.where(live, np.log(safe) + shift, 0.0))
    marginal = probability @ chosen                                  # [n]
    hessian = np.diag(marginal) - chosen.T @ (probability[:, None] * chosen)
    return objective, marginal, hessian


def minimise_luce(moments, target: np.ndarray, start: np.ndarray, lower: float, upper: float,
                  tolerance: float = GRADIENT_TOLERANCE, patience: int | None = None) -> np.ndarray:
    """The exponents a minimising f(a) - target . a with lower <= a <= upper, where ``moments(a)`` gives
    (f, grad f, Hessian of f) of a convex f: projected damped Newton with backtracking on the objective (a step
    that keeps the full length is tried longer too: on a face the minimum lies far out). It stops when the free
    gradient is below ``tolerance``, the Newton step below 1e-12, or (given a ``patience``) that many steps in a
    row were cut below 1/1000 (the objective's rounding hides what is left)."""
    size = len(target)
    exponents = np.clip(np.asarray(start, dtype=np.float64), lower, upper)
    if size == 0:
        return exponents

    def value(a):
        objective, marginal, hessian = moments(a)
        return objective - float(target @ a), marginal - target, hessian

    current, gradient, hessian = value(exponents)
    stalled = 0
    for _ in range(NEWTON_STEPS):
        # a bound is active when the exponent sits on it (within 1e-9) and the descent direction points out
        free = ~(((exponents >= upper - 1e-9) & (gradient < 0)) | ((exponents <= lower + 1e-9) & (gradient > 0)))
        if np.abs(gradient[free]).max(initial=0.0) < tolerance:
            break
        newton = np.zeros(size)
        block = hessian[np.ix_(free, free)]
        ridge = 1e-12 * max(np.trace(block), 1e-300)
        newton[free] = np.linalg.solve(block + ridge * np.eye(int(free.sum())), -gradient[free])
        if np.abs(newton).max(initial=0.0) < 1e-12:
            break
        accepted = None
        for step in (newton, np.where(free, -gradient, 0.0)):  # Newton, else projected steepest descent
            scale = 1.0
            while scale > 1e-12:
                trial = np.clip(exponents + scale * step, lower, upper)
                candidate, new_gradient, new_hessian = value(trial)
                if candidate <= current + 1e-4 * float(gradient @ (trial - exponents)) + 1e-15 * abs(current):
                    accepted = (trial, candidate, new_gradient, new_hessian)
                    break
                scale /= 2
            if accepted is not None:
                break
        if accepted is None:  # near the minimum the objective's rounding hides the decrease: judge the gradient
            trial = np.clip(exponents + newton, lower, upper)
            candidate, new_gradient, new_hessian = value(trial)
            if np.abs(new_gradient[free]).max(initial=0.0) < np.abs(gradient[free]).max(initial=0.0) / 2:
                accepted, scale, step = (trial, candidate, new_gradient, new_hessian), 1.0, newton
        if accepted is None:
            break
        far = np.abs(step).max(initial=0.0) >= 1.0  # a long full step: on a face, where the minimum lies far out
        while far and scale >= 1.0:  # then try 2x, 4x, ... further
            longer = np.clip(exponents + 2 * scale * step, lower, upper)
            if np.array_equal(longer, accepted[0]):
                break
            value_longer = value(longer)
            if value_longer[0] >= accepted[1]:
                break
            accepted, scale = (longer, *value_longer), 2 * scale
        if np.array_equal(accepted[0], exponents):
            break
        stalled = stalled + 1 if scale < 1e-3 else 0
        if patience is not None and stalled >= patience:
            break
        exponents, current, gradient, hessian = accepted
    return exponents


def solve_luce(counts: np.ndarray, probability: np.ndarray, target: np.ndarray, reject: float,
               upper: float = WEIGHT_BOUND, lower: float = LOWEST_EXPONENT) -> np.ndarray:
    """The exponents a minimising sum_w P(w) log(reject + sum_j c_j(w) e^(a_j)) - target . a over enumerated
    multisets (float64), with lower <= a <= upper (``minimise_luce``, started at log(target / presence))."""
    counts = np.asarray(counts, dtype=np.float64)
    presence = probability @ counts
    start = np.log(np.maximum(target, 1e-300) / np.maximum(presence, 1e-300))
    return minimise_luce(lambda a: luce_moments(a, counts, probability, reject), target, start, lower, upper)


def solve_luce_cvxpy(counts: np.ndarray, probability: np.ndarray, target: np.ndarray, reject: float,
                     upper: float = WEIGHT_BOUND, lower: float = LOWEST_EXPONENT) -> np.ndarray:
    """The same program in cvxpy (a sum of log-sum-exp atoms over a_j + log c_j, solved through the exponential
    cone): the tests' second solver, with the bounds of ``solve_luce``."""
    import cvxpy as cp

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
                            p = 0); floats, or Fractions in exact mode (the float solution rounded), since the
                            rule's law is computed from them
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
        weighing its count times its weight); the reject mass is what the probabilities leave of 1."""
        tokens = [int(token) for token in row_children]
        if not all(self.drafted[token] for token in tokens):
            raise ValueError("a drafted token the draft law gives no mass to")
        outer = [token for token in tokens if not self.inner[token]]
        pool, reject = (outer, 0) if outer else (tokens, 1)
        total = sum((self.weights[token] for token in pool), reject * (self.weights[tokens[0]] * 0 + 1))
        counts: dict[int, int] = {}
        for token in pool:
            counts[token] = counts.get(token, 0) + 1
        return [(token, count * self.weights[token] / total) for token, count in counts.items()]

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
        outer = ~self.inner[children]                                   # [R, K]
        outer_row = outer.any(axis=1)                                   # [R]
        pick = np.where(outer_row[:, None], self.weights[children] * outer, self.weights[children])
        total = pick.sum(axis=1) + np.where(outer_row, 0.0, 1.0)        # reject weight 1 in inner rows
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
    drafted = np.array([bool(v) for v in q])
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
    outer_rows = (sets.counts[:, ~inner] > 0).any(axis=1)
    eligible = float_p > 0  # an outer token with q > 0 has p > 0 (else adding it to H* would lower psi)
    exponents = np.zeros(len(support))
    for rows, columns, reject, lower, upper in ((outer_rows, ~inner, 0.0, OUTER_FLOOR, 0.0),
                                                (~outer_rows, inner, 1.0, LOWEST_EXPONENT, WEIGHT_BOUND)):
        chosen = columns & eligible
        if chosen.any() and rows.any():
            solved = solve_luce(sets.counts[np.ix_(rows, chosen)], sets.probability[rows], float_p[chosen], reject,
                                upper, lower)
            if not reject:  # only ratios matter without a reject: the largest outer weight is 1
                solved = np.clip(solved - solved.max(), lower, upper)
            exponents[chosen] = solved
    weights = np.where(eligible, np.exp(exponents), 0.0)
    probability = sets.probability
    if exact:
        weights = np.array([Fraction(float(w)).limit_denominator(10**15) if w else Fraction(0) for w in weights],
                           dtype=object)
        probability = Multisets.of(support_q, num_drafts).probability
    chosen = _marginals(sets.counts, probability, weights, inner)  # [m]
    vocabulary_weights = np.array([zero] * len(p), dtype=object) if exact else np.zeros(len(p))
    intermediate = vocabulary_weights.copy()
    vocabulary_weights[support] = weights
    intermediate[support] = chosen
    vocabulary_inner = np.zeros(len(p), dtype=bool)
    vocabulary_inner[support] = inner
    return Resolution(drafted=drafted, inner=vocabulary_inner, weights=vocabulary_weights,
                      intermediate=intermediate, method="enumeration")


def _marginals(counts: np.ndarray, probability: np.ndarray, weights: np.ndarray, inner: np.ndarray) -> np.ndarray:
    """The law of the chosen support token [m] under the count-weighted Luce rule (outer tuples among their outer
    drafts, inner tuples among their drafts or reject with weight 1), in the number system of ``weights``."""
    if weights.dtype != object:
        outer_rows = (counts[:, ~inner] > 0).any(axis=1)
        pool = np.where(outer_rows[:, None], counts * ~inner[None, :], counts)  # [M, m]
        scaled = pool * weights[None, :]
        total = scaled.sum(axis=1) + np.where(outer_rows, 0.0, 1.0)
        return probability @ (scaled / np.where(total > 0, total, 1.0)[:, None])
    out = np.array([Fraction(0)] * counts.shape[1], dtype=object)
    for row, mass in zip(counts, probability):
        present = np.flatnonzero(row)
        outer = [j for j in present if not inner[j]]
        pool, reject = (outer, 0) if outer else (list(present), 1)
        total = sum((int(row[j]) * weights[j] for j in pool), Fraction(reject))
        if total == 0:
            continue
        for j in pool:
            out[j] += mass * int(row[j]) * weights[j] / total
    return out


@dataclass(frozen=True, eq=False)
class SystemSolution:
    """A system's log weights [n] and chosen law q Phi(w) [n], with the quadrature state the tests inspect."""

    log_weights: np.ndarray
    intermediate: np.ndarray
    nodes: Nodes
    free: np.ndarray   # G - c0 at the nodes, from the weights used (TERMS terms)
    residual: float    # max |G_true - G| of the last chord step


def _resolve_by_integrals(p: np.ndarray, q: np.ndarray, num_drafts: int) -> Resolution:
    drafted = q > 0
    inner, _ = optimal_split(p, q, num_drafts)
    free_inner = inner & (p > 0)
    outer = drafted & ~inner
    weights, intermediate = np.zeros(len(p)), np.zeros(len(p))
    if num_drafts == 1:  # one draft: an outer draft is always chosen, an inner one with w / (1 + w) = p / q
        ratio = p[free_inner] / q[free_inner]
        weights[free_inner] = np.minimum(ratio / np.maximum(1 - ratio, 0.0), math.exp(INNER_CEILING))
        weights[outer] = 1.0
        intermediate[free_inner] = q[free_inner] * weights[free_inner] / (1 + weights[free_inner])
        intermediate[outer] = q[outer]
        return Resolution(drafted=drafted, inner=inner, weights=weights, intermediate=intermediate,
                          method="integrals")
    systems = ((free_inner, 1, float(q[inner & ~free_inner].sum()), -math.inf, INNER_CEILING),
               (outer, 0, float(q[inner].sum()), OUTER_FLOOR, 0.0))
    for members, reject, fixed, lower, upper in systems:
        if members.any():
            mass = q[members]
            system = ChoiceSystem(mass=mass, ratio=p[members] / mass, drafts=num_drafts, reject=reject,
                                  fixed=fixed, lower=lower, upper=upper)
            solution = solve_system(system)
            weights[members] = np.exp(solution.log_weights)
            intermediate[members] = solution.intermediate
    return Resolution(drafted=drafted, inner=inner, weights=weights, intermediate=intermediate, method="integrals")


def solve_system(system: ChoiceSystem) -> SystemSolution:
    """One system's weights and chosen law by the integrals of ``luce_integrals`` (see its docstring):

    1. the convex program on ``BINS`` bins of the tokens' logit y (each token its own bin when they are few),
       solved by ``minimise_luce`` with the integrals' moments;
    2. chord steps on g = G - c0 at the nodes, g <- g + (I - A)^(-1) (G_true(g) - g), with A the Jacobian of the
       fixed-point map on a measure of ``JACOBIAN_BINS`` bins of the current weights (first the binned solution;
       low rank: Woodbury). G_true sums the tokens' own weights, read off the inverse of y(log w) under the current
       g at the tokens themselves (at most ``GRID_POINTS`` of them), or else at grid points in y (the tokens' mass
       carried to the grid by cubic Lagrange weights, their weights interpolated by cubic Hermite; on a grid
       coarser than ``GRID_STEP`` one pass over the tokens measures what the carrying misses, which further steps
       add back). The steps keep the state of smallest residual: near a face of the polytope the fixed point is
       flat in one direction;
    3. p_I = q Phi(w) for the weights used, from the G of exactly those weights (``TERMS`` terms).

    Inner tokens whose weight is below e^(lower) at every node (t w <= 2^-55) are solved in closed form,
    w = r / (K J(0)), which makes their p_I equal p; they count in G as their mass. In the outer system the token
    of largest ratio is held at weight 1, which the optimum satisfies (weights rise with the ratio, the largest is
    1) and which fixes the scale of a choice that has none when no outer token needs the cap (alpha* = 1)."""
    K, b = system.drafts, system.reject
    mass, count = system.mass, len(system.mass)
    y = system.logit(system.ratio)
    low, span = system.low, system.high - system.low
    # 1. the binned program, on nodes covering every weight the bounds allow
    clipped = np.clip(y, -60.0, 60.0)
    if count <= BINS:
        bin_of = np.arange(count)
    else:
        bottom, top = float(clipped.min()), float(clipped.max())
        scale = BINS / (top - bottom) if top > bottom else 0.0
        bin_of = np.minimum(((clipped - bottom) * scale).astype(np.int64), BINS - 1)
    bin_q = np.bincount(bin_of, mass)
    bin_p = np.bincount(bin_of, mass * system.ratio)
    used = bin_q > 0
    bin_q, bin_p = bin_q[used], bin_p[used]
    bin_y = np.clip(system.logit(bin_p / bin_q), -60.0, 60.0)
    program_lower = max(system.lower, LOWEST_EXPONENT)
    wide = Nodes.covering(program_lower if b == 0 else 0.0, system.upper, b)
    bin_u = minimise_luce(system.program(wide, bin_q, bin_p), bin_p, np.clip(bin_y, program_lower, system.upper),
                          program_lower, system.upper, BINNED_TOLERANCE, patience=3)
    if not b:
        bin_u = np.clip(bin_u - bin_u.max(), program_lower, system.upper)
    # the range of the tokens' weights: y - u is about constant at both ends
    order = np.argsort(bin_y, kind="stable")
    bin_y, bin_u, bin_q, bin_p = bin_y[order], bin_u[order], bin_q[order], bin_p[order]
    finite = y[np.isfinite(y)]
    y_top = float(finite.max()) if finite.size else float(bin_y[-1])
    y_bottom = float(finite.min()) if finite.size else float(bin_y[0])
    upper = min(system.upper, float(bin_u[-1] + max(y_top - bin_y[-1], 0.0)) + RANGE_MARGIN)
    if np.isposinf(y).any() or not b:
        upper = system.upper
    lower = max(system.lower, float(bin_u[0] - max(bin_y[0] - y_bottom, 0.0)) - RANGE_MARGIN)
    if b:
        nodes = Nodes.covering(0.0, upper, b)
        negligible = math.log(2.0 ** -55) - float(math.log(nodes.t[-1]))  # t w <= 2^-55 at every node below
        lower = min(max(lower, negligible), upper)
    else:
        negligible = -math.inf
        nodes = Nodes.covering(lower, upper, b)
    expansion = Expansion(nodes, lower, upper)
    # 2. chord steps: A = dG_true/dg = diag(t) X^T diag(d) X diag(v) on a measure of weights (X = e^(-t w),
    # d = mass K (K-1) w / Phi'(w), v = weight e^(-bt) G^(K-2)), of rank the number of bins: Woodbury
    bin_w = np.exp(bin_u)
    table = np.exp(-np.outer(bin_w, nodes.t))                       # [B, T]
    free = bin_q @ table
    kernel = system.kernel(nodes, free)
    value = table @ kernel
    slope = -(table * nodes.t) @ kernel * bin_w                     # dJ/du
    moving = (bin_u < upper - 1e-9) & (bin_u > lower + 1e-9)

    def chord_for(log_w, derivative, g_now):
        table = np.exp(-np.outer(np.exp(log_w), nodes.t))           # [B, T]
        columns = nodes.weight * np.exp(-b * nodes.t) * (system.fixed + g_now) ** (K - 2)
        left = (nodes.t[:, None] * table.T) * derivative[None, :]   # [T, B]
        right = table * columns[None, :]                            # [B, T]
        small = np.eye(len(log_w)) - right @ left
        return lambda residual: residual + left @ np.linalg.solve(small, right @ residual)

    def response(log_w, mass_of, value, slope):
        """d = mass K (K-1) w / Phi'(w), with Phi'(w) = K (J + dJ/du) (J = sum_l a_l e^(-t_l w), u = log w)."""
        return mass_of * K * (K - 1) * np.exp(log_w) / np.maximum(K * (value + slope), 1e-300)

    chord = chord_for(bin_u[moving], response(bin_u, bin_q, value, slope)[moving], free)

    # the tokens: closed-form tiny ones (inner), capped ones, and the rest solved at points in y
    if b:
        zero_value = kernel.sum()
        tiny = y < negligible + math.log(K * zero_value / span) - 1.0
    else:
        tiny = np.zeros(count, dtype=bool)
    tiny_mass = float(mass[tiny].sum())
    capped_high = np.isposinf(y)
    if not b:  # the outer token of largest ratio has weight 1 (see the docstring)
        capped_high |= system.ratio == system.ratio.max()
    capped_low = np.isneginf(y) & ~tiny
    solved = ~(tiny | capped_high | capped_low)
    solved_y = y[solved]
    direct = int(solved.sum()) <= GRID_POINTS
    if direct:
        points = solved_y
        carried = mass[solved]
    else:
        bottom, top = float(solved_y.min()), float(solved_y.max())
        grid_step = max(GRID_STEP, (top - bottom) / (GRID_POINTS - 4))
        points = bottom - grid_step + grid_step * np.arange(math.ceil((top - bottom) / grid_step) + 3)
        cell = np.minimum(((solved_y - points[0]) / grid_step).astype(np.int64), len(points) - 3)
        cell = np.maximum(cell, 1)
        theta = (solved_y - points[cell]) / grid_step
        square = theta * theta
        cube = square * theta
        # cubic Hermite basis interpolating u at the tokens: u = u_k + h01 (u_(k+1) - u_k) + h10 u'_k + h11 u'_(k+1)
        hermite = (3 * square - 2 * cube, (theta - 2 * square + cube) * grid_step, (cube - square) * grid_step)
        # cubic Lagrange weights on points k-1..k+2 carry the tokens' mass: from the cell moments sum q theta^j
        moments = [np.bincount(cell, mass[solved] * power, minlength=len(points))
                   for power in (1.0, theta, square, cube)]
        carried = np.zeros(len(points))
        for shift, row in zip((-1, 0, 1, 2), LAGRANGE):
            carried[1 + shift: len(points) - 2 + shift] += sum(c * m for c, m in zip(row, moments))[1:-2]
    guess = np.interp(points, bin_y, bin_u)
    guess += np.where(points > bin_y[-1], points - bin_y[-1], 0.0) + np.where(points < bin_y[0], points - bin_y[0], 0.0)
    point_u = np.clip(guess, lower, upper)
    g = free.copy()
    correction = np.zeros(nodes.size)

    terms, step_tolerance, residual_limit = (TERMS, 1e-12, ROUND_TOLERANCE) if direct else \
        (SOLVE_TERMS, 1e-10, GRID_TOLERANCE)

    def invert(point_u):
        """log weights at the points under g (safeguarded Newton on the monotone y(u)), and du/dy there."""
        coefficients = expansion.coefficients(system.kernel(nodes, g), terms)
        bracket_low, bracket_high = np.full(len(points), lower), np.full(len(points), upper)
        ends = np.array([lower, upper])
        end_value, end_slope = expansion.evaluate(coefficients, expansion.locate(ends), derivative=True)
        end_y, _ = system.curve(ends, end_value, end_slope)
        bracket_high[points <= end_y[0]] = lower  # pinned at a bound: nothing to solve
        bracket_low[points >= end_y[1]] = upper
        u = np.clip(point_u, bracket_low, bracket_high)
        for _ in range(60):
            located = expansion.locate(u)
            value, slope = expansion.evaluate(coefficients, located, derivative=True)
            current, rate = system.curve(u, value, slope)
            above = current > points
            bracket_high = np.where(above, np.minimum(bracket_high, u), bracket_high)
            bracket_low = np.where(above, bracket_low, np.maximum(bracket_low, u))
            target = u - (current - points) / rate
            outside = (target < bracket_low) | (target > bracket_high)
            target = np.where(outside, 0.5 * (bracket_low + bracket_high), target)
            done = np.abs(target - u).max(initial=0.0) < step_tolerance
            u = target
            if done:
                break
        located = expansion.locate(u)
        value, slope = expansion.evaluate(coefficients, located, derivative=True)
        _, rate = system.curve(u, value, slope)
        pinned = (u <= lower + 1e-12) | (u >= upper - 1e-12)
        return u, np.where(pinned, 0.0, 1 / rate), response(u, np.where(pinned, 0.0, carried), value, slope)

    def token_log_weights(point_u, point_du):
        u = np.empty(count)
        u[capped_high], u[capped_low] = upper, lower
        if direct:
            u[solved] = point_u
        else:
            rise = np.diff(point_u)
            u[solved] = (point_u[cell] + hermite[0] * rise[cell] + hermite[1] * point_du[cell]
                         + hermite[2] * point_du[cell + 1])
            np.clip(u, lower, upper, out=u)
        u[tiny] = lower  # their G terms are their mass; their weights are set from the final G
        return u

    total_mass = float(mass.sum())

    def lumped(point_u, derivative):
        """The points' responses lumped into at most JACOBIAN_BINS bins of log weight (their d-weighted mean)."""
        live = derivative != 0
        if live.sum() <= JACOBIAN_BINS:
            return point_u[live], derivative[live]
        u, d = point_u[live], derivative[live]
        bottom, top = float(u.min()), float(u.max())
        index = np.minimum(((u - bottom) * (JACOBIAN_BINS / max(top - bottom, 1e-300))).astype(np.int64),
                           JACOBIAN_BINS - 1)
        size = np.bincount(index, np.abs(d), minlength=JACOBIAN_BINS)
        keep = size > 0
        centre = np.bincount(index, np.abs(d) * u, minlength=JACOBIAN_BINS)[keep] / size[keep]
        return centre, np.bincount(index, d, minlength=JACOBIAN_BINS)[keep]

    def settle(point_u, residual_limit):
        """Chord steps until the compressed fixed point holds, keeping the state of the smallest residual (near a
        face of the polytope the fixed point is flat in one direction and the steps stop helping: then the best
        state stands, which costs acceptance only); returns (point u, du/dy, compressed G)."""
        nonlocal g, chord
        best, worse = None, 0
        for _ in range(ROUNDS):
            point_u, point_du, derivative = invert(point_u)
            compressed = expansion.sums(expansion.locate(point_u), carried, terms) + tiny_mass
            if capped_high.any() or capped_low.any():
                held = capped_high | capped_low
                held_u = np.where(capped_high, upper, lower)[held]
                compressed += expansion.sums(expansion.locate(held_u), mass[held], terms)
            difference = compressed + correction - g
            residual = float(np.abs(difference).max())
            if best is None or residual < best[-1]:
                best, worse = (g, point_u, point_du, compressed, residual), 0
            else:
                worse += 1
            if worse >= 2 or not residual > residual_limit:  # stalled, met, or not a number
                break
            chord = chord_for(*lumped(point_u, derivative), g)
            g = np.clip(g + chord(difference), 0.0, total_mass)
        g = best[0]
        return best[1:4]

    point_u, point_du, compressed = settle(point_u, residual_limit)
    if not direct and grid_step > GRID_STEP:  # what carrying the mass to a coarse grid misses, measured once
        u = token_log_weights(point_u, point_du)
        measured = expansion.sums(expansion.locate(u), np.where(tiny, 0.0, mass), SOLVE_TERMS) + tiny_mass
        correction = measured - compressed
        point_u, point_du, compressed = settle(point_u, residual_limit)
    # 3. p_I for the weights used, from their own G
    u = token_log_weights(point_u, point_du)
    located = expansion.locate(u)
    final = expansion.sums(located, np.where(tiny, 0.0, mass), TERMS) + tiny_mass
    kernel = system.kernel(nodes, final)
    value = expansion.evaluate(expansion.coefficients(kernel, TERMS), located)
    chosen = low + K * np.exp(u) * value
    if tiny.any():  # J(w) = J(0) to 2^-55 below ``lower``: the weight that meets r exactly
        zero_value = kernel.sum()
        u[tiny] = np.log(system.ratio[tiny] - low) - math.log(K * zero_value)
        chosen[tiny] = low + K * np.exp(u[tiny]) * zero_value
    return SystemSolution(log_weights=u, intermediate=mass * chosen, nodes=nodes, free=final,
                          residual=float(np.abs(final - g).max()))
