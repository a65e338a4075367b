"""The one helper every linear program of verispec goes through.

``solve_lp`` calls HiGHS through ``scipy.optimize.linprog(method="highs")`` and only returns a solution it
has checked:

1. the solver status is "optimal" (anything else is a ``SolverError`` quoting the solver's message);
2. tiny negative entries (rounding, above ``-CLEAN_TOLERANCE``) are set to zero; a larger negative entry
   is a ``SolverError``;
3. each declared group of variables (for a coupling: one row; for selection weights: the weights of one
   draft outcome) is rescaled to its exact total, so the marginals it owns hold to the last bit (a group
   the solver left all zero because its total is below the tolerance is spread evenly);
4. every constraint (the marginals) is re-checked on the cleaned solution to ``MARGINAL_TOLERANCE``;
   a violation is a ``SolverError``.

Programs stated in cvxpy (verifier classes, the drafted-node program, Global Resolution's second solver) need the
``lp`` extra; ``require_cvxpy`` is the one import of it, refused in one line naming the extra where it is missing.

Size is checked before anything is built: ``check_size`` raises ``ProblemTooLargeError`` giving the
estimated variable count and the limit. Under a time budget (``verispec.guard.budget``) HiGHS gets the time left as
its ``time_limit`` (a C solver is out of reach of the budget's timer), and a solve that ends past the deadline
raises ``AnalysisTimeoutError``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from verispec.errors import MissingExtraError, ProblemTooLargeError, SolverError
from verispec.guard import budget

if TYPE_CHECKING:  # scipy is imported when an LP is solved
    from scipy import sparse

#: Default largest number of LP variables an exact analysis builds (a few seconds of HiGHS at most).
DEFAULT_MAX_VARIABLES = 200_000

#: Seconds by which HiGHS overran its ``time_limit`` here (0.06 to 0.12 s on the multi-step LP of chain:6 at
#: V = 4): under a time budget it is given the time left less this.
HIGHS_OVERRUN = 0.1

#: Negative entries above -CLEAN_TOLERANCE are rounding and are set to zero.
CLEAN_TOLERANCE = 1e-9

#: Largest violation of an equality constraint (a marginal) accepted after cleaning.
MARGINAL_TOLERANCE = 1e-9

#: HiGHS settings tried in turn until one reaches an optimum that meets MARGINAL_TOLERANCE: the default
#: feasibility tolerances (1e-7) are looser than ours, and presolve can declare a feasible LP whose
#: coefficients reach 1e-15 infeasible, so tight tolerances come first and presolve-free runs follow.
SOLVER_ATTEMPTS = (
    {"primal_feasibility_tolerance": 1e-10, "dual_feasibility_tolerance": 1e-10},
    {"presolve": False, "primal_feasibility_tolerance": 1e-10, "dual_feasibility_tolerance": 1e-10},
    {},
    {"presolve": False},
)


#: The extra that installs cvxpy (``pip install 'verispec[lp]'``).
LP_EXTRA = "lp"


def require_cvxpy(what: str):
    """The cvxpy module, imported on first use; where it is not installed (or fails to import), ``MissingExtraError``
    in one line naming the extra that installs it and ``what`` needs it."""
    try:
        import cvxpy
    except ImportError as error:
        if getattr(error, "name", None) == "cvxpy":
            found = "cvxpy is not installed"
        else:  # installed, but one of its own imports fails
            found = f"cvxpy fails to import ({type(error).__name__}: {' '.join(str(error).split())})"
        raise MissingExtraError(f"{found}: pip install 'verispec[{LP_EXTRA}]' for {what}") from None
    return cvxpy


@dataclass(frozen=True)
class LPSolution:
    """A checked optimal solution: ``x`` (cleaned, groups renormalised) and ``objective`` = c @ x in the
    caller's sense (maximised when the LP was a maximisation)."""

    x: np.ndarray  # [num_variables]
    objective: float
    # HiGHS's dual values of the equality rows in the caller's sense (the objective's derivative with respect to
    # b_eq, maximised or minimised as asked): the starting point of a rational certificate
    eq_duals: np.ndarray | None = None  # [num_equality_rows]


def check_size(num_variables: int, *, what: str, limit: int = DEFAULT_MAX_VARIABLES) -> None:
    """Raise ProblemTooLargeError if an LP of ``num_variables`` variables exceeds ``limit``."""
    if num_variables > limit:
        raise ProblemTooLargeError(
            f"{what}: the linear program would have about {num_variables:,} variables, above the limit of "
            f"{limit:,}; use a smaller vocabulary or fewer drafts, or raise the limit explicitly")


def solve_lp(c: np.ndarray, *, what: str, maximize: bool = False,
             a_eq: sparse.spmatrix | np.ndarray | None = None, b_eq: np.ndarray | None = None,
             a_ub: sparse.spmatrix | np.ndarray | None = None, b_ub: np.ndarray | None = None,
             bounds=(0, None), groups: Sequence[tuple[np.ndarray, float]] = (),
             limit: int = DEFAULT_MAX_VARIABLES) -> LPSolution:
    """Solve min (or max) c @ x subject to a_eq x = b_eq, a_ub x <= b_ub, bounds; return a checked solution.

    ``groups``: (variable indices, exact total) pairs; after cleaning each group is rescaled to its total.
    ``what`` names the LP in every error message.
    """
    from scipy.optimize import linprog  # a quarter of a second to import: only when an LP is solved

    c = np.asarray(c, dtype=np.float64)
    check_size(c.size, what=what, limit=limit)
    objective = -c if maximize else c
    failure = "no attempt was made"
    for options in SOLVER_ATTEMPTS:
        budget.check(what)
        remaining = budget.remaining()
        if remaining is not None:  # HiGHS runs in C, where no timer reaches it: it keeps the deadline itself
            options = {**options, "time_limit": max(remaining - HIGHS_OVERRUN, 1e-3)}
        result = linprog(objective, A_ub=a_ub, b_ub=b_ub, A_eq=a_eq, b_eq=b_eq, bounds=bounds, method="highs",
                         options=options)
        budget.check(what)
        if result.status != 0 or result.x is None:
            failure = f"HiGHS did not reach an optimum (status {result.status}: {result.message})"
            continue
        try:
            x = checked_solution(np.array(result.x, dtype=np.float64), a_eq, b_eq, a_ub, b_ub, groups)
        except SolverError as error:
            failure = str(error)
            continue
        duals = None
        if a_eq is not None and getattr(result, "eqlin", None) is not None:
            duals = np.asarray(result.eqlin.marginals, dtype=np.float64) * (-1.0 if maximize else 1.0)
        return LPSolution(x=x, objective=float(c @ x), eq_duals=duals)
    raise SolverError(f"{what}: {failure}")


def checked_solution(x: np.ndarray, a_eq, b_eq, a_ub, b_ub, groups) -> np.ndarray:
    """Clean a raw solution (tiny negatives, group totals) and verify every constraint; SolverError if not. Every
    LP solution verispec uses goes through here, whichever solver found it (HiGHS through scipy, or cvxpy)."""
    if not np.isfinite(x).all():
        raise SolverError("the solver returned non-finite values")
    if x.size and x.min() < -CLEAN_TOLERANCE:
        raise SolverError(f"the solver returned a clearly negative variable ({x.min():.3g})")
    x = np.maximum(x, 0.0)
    for indices, total in groups:
        mass = x[indices].sum()
        if mass > 0:
            x[indices] *= total / mass
        elif total > CLEAN_TOLERANCE:
            raise SolverError(f"a group of variables that must carry mass {total:.3g} is all zero")
        else:
            # Below the solver's resolution (e.g. a draft outcome of probability 1e-24): any split meets
            # the constraint and moves the objective by less than the tolerance; spread it evenly.
            x[indices] = total / len(indices)
    if a_eq is not None:
        violation = np.abs(a_eq @ x - b_eq).max(initial=0.0)
        if violation > MARGINAL_TOLERANCE:
            raise SolverError(f"the solution violates an equality constraint (a marginal) by "
                              f"{violation:.3g} > {MARGINAL_TOLERANCE:g}")
    if a_ub is not None:
        excess = (a_ub @ x - b_ub).max(initial=0.0)
        if excess > MARGINAL_TOLERANCE:
            raise SolverError(f"the solution violates an inequality constraint by {excess:.3g}")
    return x
