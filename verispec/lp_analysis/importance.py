"""The selection-weight LPs of Khisti et al. 2025 ("Multi-Draft Speculative Sampling: Canonical Decomposition
and Theoretical Limits", arXiv 2410.18234).

Their canonical decomposition (Thm. 1): an optimal multi-draft verifier first picks ONE intermediate
token Y' among the drafts x = (x_1..x_K) with weights beta_y(x) (summing to one over the drafted tokens),
which gives Y' the law p_I(y) = sum_x Q(x) beta_y(x); then it runs single-draft speculative sampling of Y'
against p with proposal p_I. Its acceptance is sum_y min(p(y), p_I(y)), so the best weights solve

    maximise sum_y t_y  subject to  t_y <= p(y),  t_y <= sum_x Q(x) beta_y(x),  sum_y beta_y(x) = 1,

whose optimum equals the OT optimum (``importance_weights``, an LP; ``flow_weights`` builds optimal weights
from a maximum flow instead: route each draft set's flow f(S, y) to its tokens and spread the unrouted rest
r(S) evenly over S; then p_I >= f(., y) summed over S, so sum_y min(p, p_I) >= the flow value = alpha*).

The deployed scheme (their Sec. 4 and App. I; ``truncated_pair_weights``) handles two drafts a ~ q1,
b ~ q2: rank the tokens by p - q1 q2 decreasing (ties by token id), keep the top s as Omega_1; a pair
with both tokens in Omega_1 picks the better-ranked one with a free probability w[rank a, rank b]; any
other pair picks the better-ranked token deterministically. Only the O(s^2) weights are optimised, for
sum over Omega_1 of min(p, p_I). Every LP goes through ``solve_lp``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from verispec.lp_analysis.maxflow import set_flow
from verispec.lp_analysis.solve import DEFAULT_MAX_VARIABLES, check_size, solve_lp


@dataclass(frozen=True, eq=False)
class ImportanceWeights:
    """Optimal step-1 weights for an explicit draft law.

    outcomes      ordered draft tuples x
    weights       [num_outcomes, V]  beta_y(x), zero off the drafted tokens, rows sum to one
    intermediate  [V]                p_I(y) = sum_x Q(x) beta_y(x)
    optimum       sum_y min(p(y), p_I(y)), the LP's value
    """

    outcomes: tuple[tuple[int, ...], ...]
    weights: np.ndarray
    intermediate: np.ndarray
    optimum: float


def _polish(p: np.ndarray, probabilities: np.ndarray, drafted: list, weights: np.ndarray) -> None:
    """Move weight, in place, from drafted tokens whose p_I already exceeds p to drafted tokens of the same
    outcome whose p_I falls short of p. Each move keeps the weights valid and can only raise sum min(p, p_I).
    The LP's optimality holds only to HiGHS's dual tolerance (1e-10) on reduced costs scaled by Q(x), so an
    outcome of Q(x) ~ 1e-9 may keep its weight on a useless token (p = 0) and cost the optimum up to ~1e-8;
    this removes exactly such leftovers."""
    intermediate = probabilities @ weights                                     # [V]
    for _ in range(len(p)):  # until a pass moves nothing: a move can open others earlier in the pass
        moves = 0
        for outcome, tokens in enumerate(drafted):
            mass = probabilities[outcome]
            if mass <= 0 or len(tokens) < 2:
                continue
            for source in tokens:
                for target in tokens:
                    excess, deficit = intermediate[source] - p[source], p[target] - intermediate[target]
                    if target == source or excess <= 0 or deficit <= 0 or weights[outcome, source] <= 0:
                        continue
                    moved = min(weights[outcome, source], excess / mass, deficit / mass)
                    weights[outcome, source] -= moved
                    weights[outcome, target] += moved
                    intermediate[source] -= moved * mass
                    intermediate[target] += moved * mass
                    moves += 1
        if not moves:
            break


def importance_weights(p: np.ndarray, draft_law: Mapping[tuple[int, ...], object], *,
                       limit: int = DEFAULT_MAX_VARIABLES) -> ImportanceWeights:
    """Solve the step-1 weight LP exactly for target p and an explicit draft law (float64)."""
    size = len(p)
    outcomes = tuple(tuple(int(t) for t in outcome) for outcome in draft_law)
    drafted = [sorted(set(outcome)) for outcome in outcomes]
    num_weights = sum(len(tokens) for tokens in drafted)
    check_size(num_weights + size, what=f"weight LP over {len(outcomes)} draft outcomes", limit=limit)
    probabilities = np.array([float(draft_law[outcome]) for outcome in draft_law])
    # Variables: beta_y(x) for each outcome x and drafted y (in that order), then t_0..t_{V-1}. The weights
    # themselves (rows summing to one) rather than Q(x) beta_y(x) keep rows of tiny Q(x) well posed.
    owner, token = [], []
    for i, tokens in enumerate(drafted):
        owner.extend([i] * len(tokens))
        token.extend(tokens)
    owner, token = np.array(owner, dtype=int), np.array(token, dtype=int)
    objective = np.concatenate([np.zeros(num_weights), np.ones(size)])
    from scipy import sparse  # imported when an LP is built: the verifiers' import stays light

    a_eq = sparse.csr_matrix((np.ones(num_weights), (owner, np.arange(num_weights))),
                             shape=(len(outcomes), num_weights + size))
    # t_y - sum_x Q(x) beta_y(x) <= 0
    a_ub = sparse.csr_matrix(
        (np.concatenate([-probabilities[owner], np.ones(size)]),
         (np.concatenate([token, np.arange(size)]), np.arange(num_weights + size))),
        shape=(size, num_weights + size))
    bounds = [(0, None)] * num_weights + [(0, float(p[y])) for y in range(size)]
    groups = []
    start = 0
    for tokens in drafted:
        groups.append((np.arange(start, start + len(tokens)), 1.0))
        start += len(tokens)
    solution = solve_lp(objective, maximize=True, a_eq=a_eq, b_eq=np.ones(len(outcomes)), a_ub=a_ub,
                        b_ub=np.zeros(size), bounds=bounds, groups=groups,
                        what=f"weight LP ({len(outcomes)} draft outcomes, V = {size})", limit=limit)
    weights = np.zeros((len(outcomes), size))
    weights[owner, token] = solution.x[:num_weights]
    _polish(np.asarray(p, dtype=np.float64), probabilities, drafted, weights)
    # p_I is recomputed from the weights actually returned, never taken from the LP's t variables.
    intermediate = probabilities @ weights
    return ImportanceWeights(outcomes=outcomes, weights=weights, intermediate=intermediate,
                             optimum=float(np.minimum(np.asarray(p, dtype=np.float64), intermediate).sum()))


def flow_weights(p: np.ndarray, draft_law: Mapping[tuple[int, ...], object]) -> ImportanceWeights:
    """Optimal step-1 weights from a maximum flow, in the number system of p (exact with Fractions)."""
    flow = set_flow(p, draft_law)
    weights = np.full((len(flow.outcomes), len(p)), 0 * p[0], dtype=flow.accepted.dtype)
    for row, index in enumerate(flow.set_of):
        members = sorted(flow.sets[index])
        spread = (flow.set_mass[index] - flow.accepted[index].sum()) / len(members)
        for token in members:
            weights[row, token] = (flow.accepted[index, token] + spread) / flow.set_mass[index]
    intermediate = flow.probabilities @ weights
    optimum = np.minimum(p, intermediate).sum()
    return ImportanceWeights(outcomes=flow.outcomes, weights=weights, intermediate=intermediate,
                             optimum=optimum if p.dtype == object else float(optimum))


@dataclass(frozen=True, eq=False)
class PairSelection:
    """The truncated two-draft selection rule.

    rank     [V]     rank of each token by p - q1 q2 decreasing (0 = best), ties by token id
    better   [s, s]  better[i, j] = P(pick the better-ranked token | first draft has rank i, second rank j),
                     for i != j both below s (the diagonal is unused: equal drafts pick that token)
    """

    rank: np.ndarray
    better: np.ndarray

    @property
    def truncation(self) -> int:
        return self.better.shape[0]

    def first_wins(self, first: int, second: int) -> float:
        """P(the pair (first, second) selects ``first``)."""
        if first == second:
            return 1.0
        a, b = int(self.rank[first]), int(self.rank[second])
        if a < self.truncation and b < self.truncation:
            return float(self.better[a, b]) if a < b else 1.0 - float(self.better[a, b])
        return 1.0 if a < b else 0.0


def truncated_pair_weights(p: np.ndarray, q1: np.ndarray, q2: np.ndarray, truncation: int) -> PairSelection:
    """Solve Khisti et al.'s s-truncated LP for two independent drafts a ~ q1, b ~ q2 (float64)."""
    p, q1, q2 = (np.asarray(v, dtype=np.float64) for v in (p, q1, q2))
    size = len(p)
    order = sorted(range(size), key=lambda t: (-(p[t] - q1[t] * q2[t]), t))
    rank = np.empty(size, dtype=int)
    rank[order] = np.arange(size)
    s = min(truncation, size)
    top = order[:s]
    rest1 = q1.sum() - q1[top].sum()
    rest2 = q2.sum() - q2[top].sum()
    # Variables: better[i, j] at i * s + j (diagonal fixed to 0), then t_0..t_{s-1}.
    num_pairs = s * s
    objective = np.concatenate([np.zeros(num_pairs), np.ones(s)])
    # t_i <= p_I(top[i]) written as t_i - (linear part of p_I) <= constant part of p_I.
    a_ub = np.zeros((s, num_pairs + s))
    b_ub = np.zeros(s)
    for i in range(s):
        a1, a2 = q1[top[i]], q2[top[i]]
        b_ub[i] = a1 * a2 + a1 * rest2 + rest1 * a2  # equal drafts, or the other token outside Omega_1
        for j in range(s):
            if j == i:
                continue
            c1, c2 = q1[top[j]], q2[top[j]]
            if i < j:  # top[i] is the better-ranked token of the pair: it wins with prob better
                a_ub[i, i * s + j] -= a1 * c2
                a_ub[i, j * s + i] -= c1 * a2
            else:  # top[i] is the worse-ranked token: it wins with prob 1 - better
                b_ub[i] += a1 * c2 + c1 * a2
                a_ub[i, i * s + j] += a1 * c2
                a_ub[i, j * s + i] += c1 * a2
        a_ub[i, num_pairs + i] = 1.0
    bounds = [(0.0, 0.0) if i == j else (0.0, 1.0) for i in range(s) for j in range(s)]
    bounds += [(0.0, float(p[top[i]])) for i in range(s)]
    solution = solve_lp(objective, maximize=True, a_ub=a_ub, b_ub=b_ub, bounds=bounds,
                        what=f"truncated weight LP (s = {s}, V = {size})")
    better = np.clip(solution.x[:num_pairs].reshape(s, s), 0.0, 1.0)
    return PairSelection(rank=rank, better=better)
