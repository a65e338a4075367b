"""The single-position optimal-transport LP ("OTLP"; SpecTr's OTM, Sun et al. 2023, arXiv 2310.15141, Sec. 3;
docs/guides/reference.md, "OT optimum").

Variables pi(x, y) >= 0 for every draft outcome x (an ordered tuple with probability Q(x)) and every token y;

    maximise  sum_x sum_{y in x} pi(x, y)
    subject to  sum_y pi(x, y) = Q(x)  for every x,     sum_x pi(x, y) = p(y)  for every y.

The optimum is the best acceptance probability of ANY verifier that sees the drafts and must output Y ~ p;
verifying by drawing y ~ pi(x, .) / Q(x) attains it. The LP goes through ``solve_lp`` (status, cleaning,
row renormalisation, marginal check to 1e-9); ``repair_marginals`` then moves the last ~1e-9 of column
error so that the coupling's marginals hold to rounding (float64) or exactly (Fractions), which is what
makes the verifier built on it lossless to 1e-12 rather than to the solver's tolerance.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from verispec.lp_analysis.solve import DEFAULT_MAX_VARIABLES, check_size, solve_lp


@dataclass(frozen=True, eq=False)
class OTCoupling:
    """An optimal coupling of the draft law and p.

    outcomes       ordered draft tuples x, in the order of the rows
    probabilities  [num_outcomes]        Q(x)
    coupling       [num_outcomes, V]     pi(x, y); rows sum to Q(x), columns to p(y)
    optimum        the maximal acceptance probability sum_x sum_{y in x} pi(x, y)
    """

    outcomes: tuple[tuple[int, ...], ...]
    probabilities: np.ndarray
    coupling: np.ndarray
    optimum: float

    def row(self, outcome: tuple[int, ...]) -> np.ndarray:
        """pi(x, .) for one draft outcome x."""
        return self.coupling[self._index[tuple(outcome)]]

    def conditional(self, outcome: tuple[int, ...]) -> np.ndarray:
        """The verifier's output law given the drafts: pi(x, .) / Q(x)."""
        index = self._index[tuple(outcome)]
        return self.coupling[index] / self.probabilities[index]

    def index_of(self, outcome: tuple[int, ...]) -> int:
        """The row of the draft outcome x."""
        return self._index[outcome]

    @property
    def _index(self) -> dict[tuple[int, ...], int]:
        index = self.__dict__.get("_index_cache")
        if index is None:
            index = {outcome: i for i, outcome in enumerate(self.outcomes)}
            object.__setattr__(self, "_index_cache", index)
        return index


def acceptance(outcomes, coupling: np.ndarray):
    """sum_x sum_{y in set(x)} pi(x, y), in the coupling's number system."""
    return sum((coupling[i, list(set(outcome))].sum() for i, outcome in enumerate(outcomes)), 0 * coupling[0, 0])


def ot_coupling(p: np.ndarray, draft_law: Mapping[tuple[int, ...], object], *,
                limit: int = DEFAULT_MAX_VARIABLES) -> OTCoupling:
    """Solve the OT LP for target p and an explicit draft law {ordered tuple: probability}.

    Float64 in, float64 out. Raises ProblemTooLargeError past ``limit`` variables and SolverError when
    HiGHS fails or its solution misses the marginals by more than 1e-9.
    """
    size = len(p)
    outcomes = tuple(tuple(int(t) for t in outcome) for outcome in draft_law)
    count = len(outcomes)
    check_size(count * size, what=f"OT LP over {count} draft outcomes and {size} tokens", limit=limit)
    target = np.asarray(p, dtype=np.float64)
    probabilities = np.array([float(draft_law[outcome]) for outcome in draft_law], dtype=np.float64)
    # Variable x * V + y is pi(x, y).
    objective = np.zeros(count * size)
    for i, outcome in enumerate(outcomes):
        for token in set(outcome):
            objective[i * size + token] = 1.0
    variables = np.arange(count * size)
    # Row constraints for every outcome, column constraints for every token but the last: the last is
    # implied (both laws sum to one), and keeping it makes HiGHS report rounding-level inconsistencies
    # between sum Q and sum p as infeasibility. Rows are exact after renormalisation and the other columns
    # are checked to 1e-9, so the last column holds to V * 1e-9 as well, before the repair.
    columns = variables[variables % size != size - 1]
    rows = np.concatenate([variables // size, count + columns % size])
    from scipy import sparse  # imported when an LP is built: the verifiers' import stays light

    constraints = sparse.csr_matrix(
        (np.ones(len(rows)), (rows, np.concatenate([variables, columns]))), shape=(count + size - 1, count * size))
    solution = solve_lp(objective, maximize=True, a_eq=constraints,
                        b_eq=np.concatenate([probabilities, target[:-1]]),
                        groups=[(variables[i * size:(i + 1) * size], probabilities[i]) for i in range(count)],
                        what=f"OT LP ({count} draft outcomes, V = {size})", limit=limit)
    coupling = repair_marginals(solution.x.reshape(count, size), probabilities, target)
    coupling.setflags(write=False)
    probabilities.setflags(write=False)
    return OTCoupling(outcomes=outcomes, probabilities=probabilities, coupling=coupling,
                      optimum=float(acceptance(outcomes, coupling)))


def repair_marginals(coupling: np.ndarray, row_law: np.ndarray, column_law: np.ndarray) -> np.ndarray:
    """A coupling with row sums ``row_law`` and column sums ``column_law`` built from a near-coupling.

    Rows are rescaled to their totals; then, inside every row, mass is moved from columns in excess to
    columns in deficit in proportion to the excesses and deficits. Rows keep their sums, entries stay
    nonnegative (a row gives up at most the excess share of what it holds), and each column ends at its
    target: exactly with Fractions (both laws summing to one), to rounding in float64. The input need only
    be nonnegative with positive row sums where ``row_law`` is positive; a near-optimal input stays
    near-optimal (its columns moved by at most the input's column error).
    """
    exact = coupling.dtype == object or row_law.dtype == object or column_law.dtype == object
    zero = Fraction(0) if exact else 0.0
    out = np.array(coupling, dtype=object if exact else np.float64)
    if exact:
        out = np.vectorize(lambda v: Fraction(v), otypes=[object])(out)
    for i in range(out.shape[0]):
        total = out[i].sum()
        out[i] = out[i] * (row_law[i] / total) if total > 0 else out[i] * 0
    columns = out.sum(axis=0)
    difference = column_law - columns
    excess = np.maximum(-difference, zero * difference)
    deficit = np.maximum(difference, zero * difference)
    deficit_mass = deficit.sum()
    if deficit_mass == 0:
        return out
    share = np.array([excess[y] / columns[y] if excess[y] > 0 else zero for y in range(len(columns))],
                     dtype=out.dtype)
    removed = out * share  # [num_rows, V]
    out = out - removed
    out = out + np.outer(removed.sum(axis=1), deficit / deficit_mass)
    if not exact:
        out = np.maximum(out, 0.0)
    return out
