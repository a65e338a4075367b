"""Global Resolution (Thomas & Pal, arXiv 2511.15898, ICLR 2026): the optimal-transport verification law for K
i.i.d. drafts, as two Luce (softmax) choice programs over the node's draft multisets.

The paper's text was not reachable from this project's machines; what follows was rebuilt from reading notes of
it and checked here against the OT optimum (``iid_ot_optimum``) and the max-flow construction. With
psi(H) = p(H) - q(H)^K, alpha* = 1 + min_H psi(H) (Hu et al. 2025; ``single_position``), and H* a minimiser:

* Complementary slackness splits the optimal coupling in two systems. A draft tuple with some draft outside H*
  ("outer") is always accepted, as one of its drafts outside H*. A tuple inside H* ("inner") emits each token
  y of H* with total probability exactly p(y) and rejects the rest, q(H*)^K - p(H*) = 1 - alpha*.
* Each system is a Luce choice: an outer tuple w picks y in set(w) - H* with weight e^(a_y); an inner tuple picks
  y in set(w) with weight e^(b_y), or rejects with weight 1. The weights minimise the convex
      Phi(a)   = sum_(w outer) P(w) log sum_(j in set(w) - H*) e^(a_j)   - sum_(i outside H*) p(i) a_i,  a <= 0,
      Theta(b) = sum_(w inner) P(w) log (1 + sum_(j in set(w)) e^(b_j)) - sum_(i in H*) p(i) b_i,
  whose gradients are (chosen marginal - p). Theta's minimum makes the inner marginals p (the paper's program).
  For the outer system the paper fixes targets x <= p by a polymatroid formula, which sits on faces of the
  polytope (Luce weights at infinity); verispec instead bounds a <= 0, where the minimum has marginal = p at
  every a_i < 0 and marginal <= p at a_i = 0 (the KKT conditions), which is all optimality needs (the outer mass
  1 - q(H*)^K accepted whole), at finite weights.

The sums run over the multisets of K draws (their multinomial probabilities P(w)); they are enumerated, so the
programs are solved on at most ``MAX_MULTISETS`` multisets: a node whose draft support is larger is solved on
groups of tokens with close p / q (``ratio_groups``), a chosen group emitting the row's first drafted token in
it. ``solve_luce`` is a damped Newton method with the exact Hessian (quadratic convergence to 1e-13 in a
few dozen steps); ``solve_luce_cvxpy`` states the same program in cvxpy (log-sum-exp atoms, exponential cone)
and is the tests' second solver. verispec's verifier (``verifiers/globalres.py``) uses the weights in Khisti et
al.'s two-step frame, which is lossless for any weights, so the solver's tolerance and the lumping cost
acceptance, never exactness.
"""

from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from verispec.errors import ProblemTooLargeError

#: Largest number of draft multisets a node's programs are written over (both systems together).
MAX_MULTISETS = 20_000
#: Largest support the programs keep token by token (the Newton step is cubic in it).
MAX_SUPPORT = 64
#: Bound on the inner exponents: a face of the polytope sends weights to infinity; e^60 is past float precision.
WEIGHT_BOUND = 60.0
#: Lower bound on every exponent (a target of 1e-300 still has a finite weight above it).
LOWEST_EXPONENT = -700.0
#: Newton stops when every gradient entry is below this.
GRADIENT_TOLERANCE = 1e-15
NEWTON_STEPS = 200


def multiset_count(support: int, num_drafts: int) -> int:
    return math.comb(support + num_drafts - 1, num_drafts)


@dataclass(frozen=True, eq=False)
class Multisets:
    """The multisets of K draws from m tokens with probabilities q (float64 or Fractions).

    members     [M, m] bool   token j occurs in multiset w
    probability [M]           K! / prod n_j! prod q_j^(n_j)
    """

    members: np.ndarray
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
        return cls(members=counts > 0, probability=probability)


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
    decreasing (``single_position.iid_ot_optimum``), tokens with q = 0 never in it."""
    from verispec.lp_analysis.single_position import iid_ot_optimum

    mask = np.zeros(len(p), dtype=bool)
    mask[list(iid_ot_optimum(p, q, num_drafts).minimiser)] = True
    return mask & np.array([bool(v) for v in q])


def luce_moments(exponents: np.ndarray, members: np.ndarray, probability: np.ndarray, reject: float):
    """(objective, gradient without the target, Hessian) of sum_w P(w) log(reject + sum_(j in w) e^(a_j)) at a
    [n]; members [M, n] bool, probability [M] (float64)."""
    shift = max(float(exponents.max(initial=0.0)), 0.0)  # e^(a - shift), reject e^(-shift): no overflow
    weights = np.exp(exponents - shift)                              # [n]
    scaled = members * weights[None, :]                             # [M, n] (members 0/1)
    total = reject * math.exp(-shift) + scaled.sum(axis=1)          # [M]
    live = total > 0
    safe = np.where(live, total, 1.0)
    chosen = scaled / safe[:, None]                                  # [M, n] P(pick j | w)
    objective = float(probability @ np.where(live, np.log(safe) + shift, 0.0))
    marginal = probability @ chosen                                  # [n]
    hessian = np.diag(marginal) - chosen.T @ (probability[:, None] * chosen)
    return objective, marginal, hessian


def solve_luce(members: np.ndarray, probability: np.ndarray, target: np.ndarray, reject: float,
               upper: float = WEIGHT_BOUND) -> np.ndarray:
    """The exponents a minimising sum_w P(w) log(reject + sum_(j in w) e^(a_j)) - target . a (float64) with
    ``LOWEST_EXPONENT`` <= a <= ``upper``, by projected damped Newton with backtracking on the objective (a step
    that keeps the full length is tried longer too: on a face the minimum lies far out)."""
    size = members.shape[1]
    exponents = np.zeros(size)
    if size == 0:
        return exponents
    members = np.asarray(members, dtype=np.float64)
    lower = LOWEST_EXPONENT
    presence = probability @ members
    exponents = np.clip(np.log(np.maximum(target, 1e-300) / np.maximum(presence, 1e-300)), lower, upper)

    def value(a):
        objective, marginal, hessian = luce_moments(a, members, probability, reject)
        return objective - float(target @ a), marginal - target, hessian

    current, gradient, hessian = value(exponents)
    for _ in range(NEWTON_STEPS):
        # a bound is active when the exponent sits on it (within 1e-9) and the descent direction points out
        free = ~(((exponents >= upper - 1e-9) & (gradient < 0)) | ((exponents <= lower + 1e-9) & (gradient > 0)))
        if np.abs(gradient[free]).max(initial=0.0) < GRADIENT_TOLERANCE:
            break
        newton = np.zeros(size)
        block = hessian[np.ix_(free, free)]
        ridge = 1e-12 * max(np.trace(block), 1e-300)
        newton[free] = np.linalg.solve(block + ridge * np.eye(int(free.sum())), -gradient[free])
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
                accepted = (trial, candidate, new_gradient, new_hessian)
        if accepted is None:
            break
        far = np.abs(step).max(initial=0.0) >= 1.0  # a long full step: on a face, where the minimum lies far out
        while far and (scale == 1.0 or scale > 1.0):  # then try 2x, 4x, ... further
            longer = np.clip(exponents + 2 * scale * step, lower, upper)
            if np.array_equal(longer, accepted[0]):
                break
            value_longer = value(longer)
            if value_longer[0] >= accepted[1]:
                break
            accepted, scale = (longer, *value_longer), 2 * scale
        if np.array_equal(accepted[0], exponents):
            break
        exponents, current, gradient, hessian = accepted
    return exponents


def solve_luce_cvxpy(members: np.ndarray, probability: np.ndarray, target: np.ndarray, reject: float,
                     upper: float = WEIGHT_BOUND) -> np.ndarray:
    """The same program in cvxpy (a sum of log-sum-exp atoms, solved through the exponential cone): the tests'
    second solver, with the bounds of ``solve_luce``."""
    import cvxpy as cp

    size = members.shape[1]
    exponents = cp.Variable(size)
    terms = []
    for row, mass in zip(members, probability):
        inside = [exponents[j] for j in np.flatnonzero(row)]
        if reject > 0:
            inside.append(cp.Constant(math.log(reject)))
        if inside and mass > 0:
            terms.append(float(mass) * cp.log_sum_exp(cp.hstack(inside)))
    problem = cp.Problem(cp.Minimize(cp.sum(terms) - target @ exponents),
                         [exponents <= upper, exponents >= LOWEST_EXPONENT])
    problem.solve(solver=cp.CLARABEL, tol_gap_abs=1e-10, tol_gap_rel=1e-10, tol_feas=1e-10)
    return np.asarray(exponents.value, dtype=np.float64)


@dataclass(frozen=True, eq=False)
class Resolution:
    """Global Resolution's step-1 rule at one node, on a support of m entries (tokens, or groups of tokens).

    group        [V] int32  the support entry of each drafted token (-1 where q = 0): one entry per drafted token
                            when its multisets fit, else groups of tokens with close p / q (``ratio_groups``)
    grouped      bool       whether an entry may hold several tokens (a chosen entry emits the row's first
                            drafted token in it)
    inner        [m]        H* on the support
    weights      [m]        Luce weights e^(a) (outer entries) or e^(b) (inner entries): floats, or Fractions in
                            exact mode (the float solution rounded), since the rule's law is computed from them
    intermediate [V]        p_I, the exact law of the chosen token (its total is 1 - P(reject))
    """

    group: np.ndarray
    grouped: bool
    inner: np.ndarray
    weights: np.ndarray
    intermediate: np.ndarray

    def choice(self, row_children: np.ndarray) -> list[tuple[int, object]]:
        """[(vocabulary id, probability)] of the chosen token for one row of drafts [K]; the reject mass is what
        the probabilities leave of 1."""
        entries = [int(e) for e in self.group[row_children]]
        if min(entries) < 0:
            raise ValueError("a drafted token the draft law gives no mass to")
        first = {}
        for token, entry in zip(row_children, entries):
            first.setdefault(entry, int(token))
        outer = [e for e in first if not self.inner[e]]
        pool, reject = (outer, 0) if outer else (list(first), 1)
        total = sum((self.weights[e] for e in pool), reject * (self.weights[0] * 0 + 1))
        return [(first[entry], self.weights[entry] / total) for entry in pool]

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
        is missing)."""
        out = np.full((len(children), len(self.intermediate)), 0 * self.intermediate[0],
                      dtype=self.intermediate.dtype)
        for row, drafts in enumerate(children):
            for token, probability in self.choice(drafts):
                out[row, token] += probability
        return out


def ratio_groups(p: np.ndarray, q: np.ndarray, drafted: np.ndarray, count: int, num_drafts: int) -> np.ndarray:
    """The group (0..count-1) of each drafted token [D] (float64 laws): tokens sorted by p / q, the optimal set H*
    (the prefix minimising p(H) - q(H)^K) kept apart from the rest, and each side cut at quantiles of its q mass
    and on an even grid of its log ratio, so that a group holds tokens of close ratio on one side of H*.
    Tokens of one ratio lose nothing by sharing a group (H* is a union of ratio classes, and the group's chosen
    mass then splits as p does); the spread of the ratio inside a group is what grouping costs."""
    ratio = np.log(np.maximum(p[drafted], 1e-300)) - np.log(q[drafted])  # [D]
    ratio[p[drafted] <= 0] = -np.inf
    order = np.argsort(ratio, kind="stable")                           # H* is a prefix of this order
    psi = np.concatenate([[0.0], np.cumsum(p[drafted][order]) - np.cumsum(q[drafted][order]) ** num_drafts])
    boundary = int(np.argmin(psi))                                      # |H*|
    groups = np.empty(len(drafted), dtype=np.int64)
    sides = [order[:boundary], order[boundary:]]
    masses = [float(q[drafted][side].sum()) for side in sides]
    shares = [0 if len(side) == 0 else max(1, round(count * mass / max(sum(masses), 1e-300)))
              for side, mass in zip(sides, masses)]
    while sum(shares) > count:
        shares[int(np.argmax(shares))] -= 1
    offset = 0
    for side, share in zip(sides, shares):
        if len(side) == 0:
            continue
        values = ratio[side]
        finite = values[np.isfinite(values)]
        mass = np.cumsum(q[drafted][side])
        halves = max(share // 2, 1)
        cuts = values[np.minimum(np.searchsorted(mass, mass[-1] * np.arange(1, halves) / halves), len(side) - 1)]
        grid = np.linspace(finite.min(), finite.max(), share - halves + 1)[1:-1] if finite.size else np.empty(0)
        edges = np.unique(np.concatenate([cuts, grid]))
        edges = edges[np.isfinite(edges)][: max(share - 1, 0)]
        local = np.searchsorted(edges, values, side="right")
        groups[side] = offset + local
        offset += len(edges) + 1
    return groups


def resolve(p: np.ndarray, q: np.ndarray, num_drafts: int, *, max_multisets: int = MAX_MULTISETS,
            solver=solve_luce) -> Resolution:
    """Global Resolution's step-1 rule at a node (p, q over the vocabulary; float64, or Fractions for an exact
    law of the rule actually used)."""
    exact = p.dtype == object
    zero = 0 * p[0]
    drafted = np.array([t for t, v in enumerate(q) if v], dtype=np.int64) if exact else np.flatnonzero(q > 0)
    fits = len(drafted) <= MAX_SUPPORT and multiset_count(len(drafted), num_drafts) <= max_multisets
    if fits:
        entries, size = np.arange(len(drafted)), len(drafted)
    else:
        if exact:
            raise ProblemTooLargeError(f"globalres in exact mode solves a node on {len(drafted)} drafted tokens "
                                       f"({multiset_count(len(drafted), num_drafts):,} multisets of {num_drafts}); "
                                       f"the limit is {max_multisets:,}: use float mode")
        size = 2
        while size < MAX_SUPPORT and multiset_count(size + 1, num_drafts) <= max_multisets:
            size += 1
        raw = ratio_groups(p, q, drafted, size, num_drafts)
        used, entries = np.unique(raw, return_inverse=True)
        size = len(used)
    group = np.full(len(p), -1, dtype=np.int32)
    group[drafted] = entries
    if exact:
        support_q = np.array([zero] * size, dtype=object)
        support_p = np.array([zero] * size, dtype=object)
        for token, entry in zip(drafted, entries):
            support_q[entry] += q[token]
            support_p[entry] += p[token]
    else:
        support_q = np.bincount(entries, weights=q[drafted], minlength=size)
        support_p = np.bincount(entries, weights=p[drafted], minlength=size)
    # the p of tokens nobody drafts, which no tuple reaches: one more entry with q = 0 (outside every multiset)
    never = 1 - sum(support_p, zero)
    full_p = np.array([*support_p, never if exact else max(float(never), 0.0)], dtype=p.dtype)
    full_q = np.array([*support_q, zero], dtype=p.dtype)
    # a drafted entry with p = 0 lowers psi when added to H (q(H)^K grows), so the exact H* holds it; the float
    # scan can miss it when its q is below the rounding of q(H) (q = 2e-25 beside 1.0), and an outer tuple whose
    # outer drafts all have p = 0 would then have nothing to pick
    inner = optimal_set(full_p, full_q, num_drafts)[:-1] | np.array([not value for value in support_p], dtype=bool)
    float_p = np.asarray(support_p, dtype=np.float64)
    sets = Multisets.of(np.asarray(support_q, dtype=np.float64), num_drafts)
    outer_rows = (sets.members & ~inner[None, :]).any(axis=1)
    eligible = float_p > 0  # an outer token with q > 0 has p > 0 (else adding it to H* would lower psi)
    exponents = np.zeros(size)
    for rows, columns, reject, upper in ((outer_rows, ~inner, 0.0, 0.0), (~outer_rows, inner, 1.0, WEIGHT_BOUND)):
        chosen = columns & eligible
        if chosen.any() and rows.any():
            exponents[chosen] = solver(sets.members[np.ix_(rows, chosen)], sets.probability[rows], float_p[chosen],
                                       reject, upper)
    weights = np.where(eligible, np.exp(exponents), 0.0)
    probability = sets.probability
    if exact:
        weights = np.array([Fraction(float(w)).limit_denominator(10**15) if w else Fraction(0) for w in weights],
                           dtype=object)
        probability = Multisets.of(support_q, num_drafts).probability
    chosen = _marginals(sets.members, probability, weights, inner)  # [m]
    if exact:
        intermediate = np.array([zero] * len(p), dtype=object)
        for token, entry in zip(drafted, entries):
            intermediate[token] = chosen[entry] * q[token] / support_q[entry]
    else:
        intermediate = np.zeros(len(p))
        intermediate[drafted] = (chosen / support_q)[entries] * q[drafted]
    return Resolution(group=group, grouped=not fits, inner=inner, weights=weights, intermediate=intermediate)


def _marginals(members: np.ndarray, probability: np.ndarray, weights: np.ndarray, inner: np.ndarray) -> np.ndarray:
    """The law of the chosen support entry [m] under the Luce rule (outer tuples among their outer members,
    inner tuples among their members or reject with weight 1), in the number system of ``weights``."""
    if weights.dtype != object:
        outer_rows = (members & ~inner[None, :]).any(axis=1)
        pool = np.where(outer_rows[:, None], members & ~inner[None, :], members)  # [M, m]
        scaled = pool * weights[None, :]
        total = scaled.sum(axis=1) + np.where(outer_rows, 0.0, 1.0)
        return probability @ (scaled / np.where(total > 0, total, 1.0)[:, None])
    out = np.array([Fraction(0)] * members.shape[1], dtype=object)
    for row, mass in zip(members, probability):
        present = np.flatnonzero(row)
        outer = [j for j in present if not inner[j]]
        pool, reject = (outer, 0) if outer else (list(present), 1)
        total = sum((weights[j] for j in pool), Fraction(reject))
        if total == 0:
            continue
        for j in pool:
            out[j] += mass * weights[j] / total
    return out
