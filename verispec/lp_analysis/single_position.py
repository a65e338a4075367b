"""Closed forms of the single-position OT optimum (the value of the LP in ``ot.py``) by max-flow / min-cut.

The OT LP only rewards mass on pairs (x, y) with y in x, so it is a bipartite flow: source -> draft SET S
(capacity Q(S)), S -> y for y in S (unbounded), y -> sink (capacity p(y)). A finite cut keeps on the source
side a token set U and every S contained in it, so (docs/guides/reference.md, "Optimality analysis")

    alpha* = min_U [ Q(S not inside U) + p(U) ] = 1 + min_U [ p(U) - Q(S inside U) ].

* K i.i.d. drafts: Q(S inside U) = q(U)^K, and alpha* = 1 + min_T [p(T) - q(T)^K] (Sun et al. 2023,
  arXiv 2310.15141, Thm. 2; Khisti et al. 2025, arXiv 2410.18234, Thm. 3 for K = 2). A minimising T is
  a prefix of the tokens sorted by q/p decreasing (p = 0 tokens first), so a scan over the V + 1 prefixes
  finds it (``iid_ot_optimum``). Exchange argument: let T be optimal with s = q(T), a in T, b outside.
  Optimality against adding b and against removing a, with the convexity of t -> t^K, gives
  p_b >= (s + q_b)^K - s^K >= K s^(K-1) q_b and p_a <= s^K - (s - q_a)^K <= K s^(K-1) q_a, hence
  q_b / p_b <= q_a / p_a: no token outside T has a larger ratio than one inside.
* Any explicit law of the draft set (e.g. K draws without replacement): ``set_law_ot_optimum`` evaluates
  Q(S inside U) for all 2^V sets U at once by a subset-sum (zeta) transform and takes the exact minimum.
  It is exhaustive and refuses V above ``MAX_EXHAUSTIVE_VOCAB`` with ProblemTooLargeError.
  For K draws without replacement (``without_replacement_ot_optimum``) Q(S inside U) is not a function of
  q(U) alone and the exchange argument above does not carry over. Empirically a prefix of the q/p order
  still attained the exhaustive minimum on every problem tried (tests/lp_analysis/test_lp_single_position.py::
  test_without_replacement_sorted_prefix_attains_minimum on hypothesis-random problems; 20,000 further
  random problems with V <= 5, zeros in p and q, and a local search for a counterexample during
  development), but without a proof the exhaustive search is what this module uses.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from verispec.errors import ProblemTooLargeError
from verispec.lp_analysis.draft_laws import set_law, without_replacement_draft_law

#: Largest vocabulary the exhaustive subset search accepts (2^V subsets are evaluated).
MAX_EXHAUSTIVE_VOCAB = 20


@dataclass(frozen=True)
class SinglePositionOptimum:
    """alpha* (the best acceptance probability) and a token set U attaining the minimum of the cut."""

    alpha: float
    minimiser: frozenset[int]


def sorted_by_ratio(p: np.ndarray, q: np.ndarray) -> list[int]:
    """Tokens sorted by q/p decreasing; p = 0 tokens first (ratio +inf), ties by token id."""
    def key(token: int):
        if p[token] == 0:
            return (0, -q[token], token)  # every p = 0 token before any p > 0 token
        return (1, -(q[token] / p[token]), token)
    return sorted(range(len(p)), key=key)


def iid_ot_optimum(p: np.ndarray, q: np.ndarray, num_drafts: int) -> SinglePositionOptimum:
    """alpha* = 1 + min_T [p(T) - q(T)^K] for K i.i.d. drafts, by a scan over sorted prefixes."""
    order = sorted_by_ratio(p, q)
    best_value, best_length = 0 * p[0], 0  # T = {} gives 0
    mass_p, mass_q = 0 * p[0], 0 * q[0]
    for length, token in enumerate(order, start=1):
        mass_p, mass_q = mass_p + p[token], mass_q + q[token]
        value = mass_p - mass_q ** num_drafts
        if value < best_value:
            best_value, best_length = value, length
    return SinglePositionOptimum(alpha=1 + best_value, minimiser=frozenset(order[:best_length]))


def subset_masses(size: int, sets: Mapping[frozenset[int], object]) -> list:
    """F[U] = sum of the law over sets S contained in U, for every bitmask U of {0..size-1} (zeta transform)."""
    if size > MAX_EXHAUSTIVE_VOCAB:
        raise ProblemTooLargeError(f"exhaustive subset search over V = {size} tokens needs 2^{size} subsets; "
                                   f"the limit is V = {MAX_EXHAUSTIVE_VOCAB}")
    zero = 0 * next(iter(sets.values())) if sets else 0.0
    masses = [zero] * (1 << size)
    for subset, probability in sets.items():
        mask = sum(1 << token for token in subset)
        masses[mask] = masses[mask] + probability
    for bit in range(size):
        step = 1 << bit
        for mask in range(1 << size):
            if mask & step:
                masses[mask] = masses[mask] + masses[mask ^ step]
    return masses


def set_law_ot_optimum(p: np.ndarray, sets: Mapping[frozenset[int], object]) -> SinglePositionOptimum:
    """alpha* = 1 + min_U [p(U) - Q(S inside U)] for an explicit law of the draft set, exhaustively."""
    size = len(p)
    inside = subset_masses(size, sets)
    best_value, best_mask = 0 * p[0], 0
    for mask in range(1 << size):
        value = sum((p[t] for t in range(size) if mask >> t & 1), 0 * p[0]) - inside[mask]
        if value < best_value:
            best_value, best_mask = value, mask
    return SinglePositionOptimum(alpha=1 + best_value,
                                 minimiser=frozenset(t for t in range(size) if best_mask >> t & 1))


def without_replacement_ot_optimum(p: np.ndarray, q: np.ndarray, num_drafts: int) -> SinglePositionOptimum:
    """alpha* for K sequential draws without replacement from q (exhaustive over token sets)."""
    return set_law_ot_optimum(p, set_law(without_replacement_draft_law(q, num_drafts)))
