"""A rational certificate of a linear program's optimum: a primal and a dual solution in exact rationals whose
objectives are equal, both checked exactly.

For the LP  maximise c x  subject to  A x = b, x >= 0  (``MultiStepLP``) and its dual  minimise b y  subject to
A^T y >= c, weak duality gives c x <= y A x = b y for every feasible pair; a feasible pair with c x = b y is
therefore optimal on both sides, and the common value is THE optimum, exactly (LP duality; e.g. Schrijver,
"Theory of Linear and Integer Programming", Cor. 7.1g). The float solution only suggests the pair:

1. the primal support J = {j : x_j > SUPPORT_TOLERANCE} (the columns HiGHS used); A_J x_J = b is solved in
   rationals (free unknowns, if A_J has dependent columns, take the float values as rationals);
2. the dual: HiGHS's dual values y give the reduced costs A^T y - c; on the columns where they vanish to
   ``TIGHT_TOLERANCE`` (J among them, complementary slackness) A_K^T y = c_K is solved in rationals (free
   unknowns again from the floats);
3. everything is re-checked exactly: x >= 0, A x = b, A^T y >= c, c x = b y. A check that fails is a
   ``CertificateError`` (no certificate: the float optimum stands as checked by ``solve_lp``, nothing is
   claimed exactly).

Elimination is over sparse rows of Fractions; the certificate is meant for the small LPs where an exact
statement matters (``MAX_CERTIFIED_COLUMNS``), and refuses larger ones before it starts.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from verispec.errors import ProblemTooLargeError, SolverError

#: Entries of the float primal above this are its support.
SUPPORT_TOLERANCE = 1e-10

#: Reduced costs below this count as zero (columns that may be basic).
TIGHT_TOLERANCE = 1e-7

#: Largest LP (columns) certified: rational elimination costs grow with fill-in, and a certificate of
#: chain:3 at V = 3 (1,000 columns) takes about a second.
MAX_CERTIFIED_COLUMNS = 20_000

#: Denominator bound for turning a free float unknown into a rational.
FREE_DENOMINATOR = 10 ** 12


class CertificateError(SolverError):
    """No rational certificate was found for an LP's optimum (the float optimum is not claimed exactly)."""


@dataclass(frozen=True)
class RationalCertificate:
    """The exact optimum with its proof: ``primal`` (column -> nonzero value) is feasible, ``dual`` (one value per
    equality row) is dual feasible, and both have objective ``optimum``."""

    optimum: Fraction
    primal: dict[int, Fraction]
    dual: tuple[Fraction, ...]

    def to_json(self) -> dict:
        return {"optimum": str(self.optimum), "optimum_float": float(self.optimum),
                "primal_support": len(self.primal), "dual_rows": len(self.dual)}


def _rational(value) -> Fraction:
    return value if isinstance(value, Fraction) else Fraction(value)


def solve_rational(equations: list[dict[int, Fraction]], rhs: list[Fraction], num_unknowns: int,
                   fallback: list[Fraction]) -> list[Fraction] | None:
    """A solution of the sparse system sum_j equations[i][j] u_j = rhs[i] in rationals, the free unknowns set
    to ``fallback``; None when the system is inconsistent.

    Forward elimination keeps one pivot row per pivot unknown (normalised to coefficient one); a new row is
    reduced by the pivots it meets in the order they were created, which ends because a pivot row only holds
    unknowns that were not pivots when it was made."""
    pivot_rows: dict[int, tuple[dict[int, Fraction], Fraction]] = {}
    order: dict[int, int] = {}
    for row, value in zip(equations, rhs):
        row = {j: a for j, a in row.items() if a != 0}
        value = _rational(value)
        while True:
            pending = [j for j in row if j in pivot_rows]
            if not pending:
                break
            j = min(pending, key=order.__getitem__)
            factor = row[j]
            pivot, pivot_value = pivot_rows[j]
            for k, a in pivot.items():
                updated = row.get(k, 0) - factor * a
                if updated == 0:
                    row.pop(k, None)
                else:
                    row[k] = updated
            value -= factor * pivot_value
        if not row:
            if value != 0:
                return None
            continue
        j = min(row)  # any unknown of the row would do; the smallest id, for determinism
        scale = row[j]
        pivot_rows[j] = ({k: a / scale for k, a in row.items()}, value / scale)
        order[j] = len(order)
    solution = [_rational(v) for v in fallback]
    for j in sorted(pivot_rows, key=order.__getitem__, reverse=True):
        pivot, pivot_value = pivot_rows[j]
        solution[j] = pivot_value - sum((a * solution[k] for k, a in pivot.items() if k != j), Fraction(0))
    return solution


def _free(value: float) -> Fraction:
    return Fraction(float(value)).limit_denominator(FREE_DENOMINATOR)


def certify_optimum(lp, solution) -> RationalCertificate:
    """The rational certificate of ``lp`` (a ``MultiStepLP``: maximise objective @ x, a_eq x = b_eq, x >= 0) from
    a checked float ``solution`` (``LPSolution`` with its dual values). CertificateError when one of the exact
    checks fails; ProblemTooLargeError above ``MAX_CERTIFIED_COLUMNS``."""
    num_columns, num_rows = lp.num_columns, lp.num_rows
    if num_columns > MAX_CERTIFIED_COLUMNS:
        raise ProblemTooLargeError(
            f"{lp.what}: a rational certificate of {num_columns:,} columns is above the limit of "
            f"{MAX_CERTIFIED_COLUMNS:,} (rational elimination); certify a smaller vocabulary or tree")
    if solution.eq_duals is None:
        raise CertificateError(f"{lp.what}: the solver returned no dual values to start a certificate from")
    values = [_rational(v) for v in lp.values]
    b = [_rational(v) for v in lp.b_eq]
    c = [Fraction(int(v)) for v in lp.objective]
    by_row: list[dict[int, Fraction]] = [{} for _ in range(num_rows)]
    by_column: list[dict[int, Fraction]] = [{} for _ in range(num_columns)]
    for i, j, a in zip(lp.rows.tolist(), lp.cols.tolist(), values):
        by_row[i][j] = by_row[i].get(j, 0) + a
        by_column[j][i] = by_column[j].get(i, 0) + a
    x_float = np.asarray(solution.x, dtype=np.float64)
    y_float = np.asarray(solution.eq_duals, dtype=np.float64)
    support = [j for j in range(num_columns) if x_float[j] > SUPPORT_TOLERANCE]
    local = {j: index for index, j in enumerate(support)}
    primal_values = solve_rational([{local[j]: a for j, a in row.items() if j in local} for row in by_row], b,
                                   len(support), [_free(x_float[j]) for j in support])
    if primal_values is None:
        raise CertificateError(f"{lp.what}: the solver's primal support admits no exact solution of the constraints")
    primal = {j: v for j, v in zip(support, primal_values) if v != 0}
    reduced = np.asarray([sum(a * y_float[i] for i, a in column.items()) for column in by_column]) - lp.objective
    tight = sorted(set(support) | {j for j in range(num_columns) if abs(reduced[j]) <= TIGHT_TOLERANCE})
    dual = solve_rational([by_column[j] for j in tight], [c[j] for j in tight], num_rows,
                          [_free(v) for v in y_float])
    if dual is None:
        raise CertificateError(f"{lp.what}: complementary slackness admits no exact dual solution")
    _check(lp.what, primal, dual, by_row, by_column, b, c)
    optimum = sum((c[j] * v for j, v in primal.items()), Fraction(0))
    return RationalCertificate(optimum=optimum, primal=primal, dual=tuple(dual))


def _check(what: str, primal, dual, by_row, by_column, b, c) -> None:
    """Every condition of the certificate, exactly; CertificateError naming the first that fails."""
    if any(v < 0 for v in primal.values()):
        raise CertificateError(f"{what}: the exact primal solution has a negative entry")
    for i, row in enumerate(by_row):
        if sum((a * primal.get(j, 0) for j, a in row.items()), Fraction(0)) != b[i]:
            raise CertificateError(f"{what}: the exact primal solution misses constraint row {i}")
    for j, column in enumerate(by_column):
        if sum((a * dual[i] for i, a in column.items()), Fraction(0)) < c[j]:
            raise CertificateError(f"{what}: the exact dual solution violates dual constraint {j} (column {j})")
    primal_value = sum((c[j] * v for j, v in primal.items()), Fraction(0))
    dual_value = sum((b_i * y for b_i, y in zip(b, dual)), Fraction(0))
    if primal_value != dual_value:
        raise CertificateError(f"{what}: primal {float(primal_value)!r} and dual {float(dual_value)!r} objectives "
                               "differ")
