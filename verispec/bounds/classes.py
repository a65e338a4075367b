"""Verifier classes as cvxpy programs over the multi-step LP's variables: write a class as constraints, get its
optimum, its optimal verifier and the gap of every built-in rule.

The variables (``LPVariables``) are those of ``verispec.bounds.multistep``: the joint emission masses
z(n, y, D) = Q(D) pi(n, y | D) of every node n of every draft outcome D (``v.z``, one cvxpy vector, outcome by
outcome, node by node, token by token; ``v.masses(i)`` is outcome i's [num_nodes, V] block) and the flow
variables F(u) of the output prefixes (``v.flows``). Every program here holds the multi-step LP's own constraints
(each outcome emits its probability, the emitted block continued by the target follows the target's law); a
class adds its constraints through a function

    def my_class(v: LPVariables) -> list[cvxpy.Constraint]

and ``optimize_class`` maximises E[tau + 1] over the verifiers that satisfy them. Auxiliary variables of the
function's own are allowed; every constraint must be convex (DCP), and a linear class is solved by HiGHS through
cvxpy, the same solver as the scipy path (``optimal_block_efficiency``), with which it agrees to 1e-9 in the tests.

The classes and programs defined here over those variables:

* ``every_valid``: no extra constraint, the multi-step LP (``optimal_block_efficiency``).
* ``selected_path``: GBV's class, emissions only on the greedy selected path (``RESTRICTIONS``; the class optimum
  is GBV's block efficiency, multistep.py).
* ``coupling_program``: a relaxation, not a class. Losslessness is replaced by its consequence at each prefix,
  P(the block starts with the accepted prefix x_1..x_i) <= p(x_1..x_i): the mass of emissions at nodes whose path
  extends x_1..x_i is at most p(x_1..x_i). Its optimum lies between the multi-step optimum and ``coupling_bound``
  (the closed form, which also drops the rule that an outcome emits at one node); on a single path the two
  coincide (docs/guides/verifier_classes.md).
* ``information_agnostic_program``: the LP over the law of the emitted block alone, M(s) = sum_D z(., s, D) (the
  information a verifier uses does not enter; it is the form in which Thomas & Pal 2026, arXiv 2602.16961,
  prove block verification optimal even among verifiers that read off-path probabilities). The draft enters
  only through capacities: the mass of blocks whose accepted part extends the path u is at most
  P(the tree contains u). A draft law can produce M exactly when a transport from outcomes to blocks exists;
  on a single path the sets of outcomes that can emit a block are nested cones, so these capacities are Hall's
  condition in full and the program's optimum IS the multi-step optimum (with far fewer variables: one per
  block, not per outcome and block); on trees the sets overlap, the capacities are necessary only, and the
  optimum is an upper bound on every valid verifier (docs/guides/verifier_classes.md).

Bad input: a class function that raises or returns something other than cvxpy constraints, a program the solver
reports infeasible (the class is empty at this problem), unbounded or inaccurate, a solver that is not installed:
one-line ``VerispecError``s; cvxpy itself missing: ``MissingExtraError`` naming the ``lp`` extra. The LP's size is
estimated (``estimate_lp_size``) before anything is built.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import numpy as np
from scipy import sparse

from verispec.bounds.gaps import GapRow, verifier_gaps
from verispec.bounds.multistep import (
    DEFAULT_MAX_NONZEROS,
    MultiStepLP,
    TabulatedVerifier,
    build_multistep_lp,
    coupling_bound,
    optimal_block_efficiency,
    path_probabilities,
)
from verispec.errors import SolverError, VerispecError
from verispec.lp_analysis.solve import DEFAULT_MAX_VARIABLES, checked_solution
from verispec.lp_analysis.solve import require_cvxpy as _require_cvxpy
from verispec.simulator.drafters import Drafter
from verispec.simulator.problems import Problem, target_law
from verispec.simulator.selection import greedy_path

#: Solvers tried when none is named: HiGHS through scipy (simplex, exact vertices, the very solver of the scipy
#: path; cvxpy's "SCIPY") for linear programs, then HiGHS through highspy, then Clarabel (interior point, tight
#: tolerances) for a class with convex non-linear constraints.
DEFAULT_SOLVERS = ("SCIPY", "HIGHS", "CLARABEL")

#: Options per solver: tolerances tighter than the defaults, so that results agree with HiGHS to 1e-9.
SOLVER_OPTIONS = {
    "HIGHS": {"primal_feasibility_tolerance": 1e-10, "dual_feasibility_tolerance": 1e-10, "output_flag": False},
    "CLARABEL": {"tol_gap_abs": 1e-11, "tol_gap_rel": 1e-11, "tol_feas": 1e-11},
    "SCIPY": {"scipy_options": {"method": "highs", "primal_feasibility_tolerance": 1e-10,
                                "dual_feasibility_tolerance": 1e-10}},
}

#: Largest violation of a class's own constraint accepted in the solution (the solver's feasibility tolerance).
CLASS_TOLERANCE = 1e-7

#: Solvers that return a vertex (simplex): their optimal verifier must be lossless to the exact engine's float
#: tolerance. An interior-point solver (Clarabel, SCS) stops inside the feasible set, at its own accuracy: its
#: verifier is accepted at TV <= INTERIOR_TOLERANCE from the target, and the result says so.
VERTEX_SOLVERS = frozenset({"SCIPY", "HIGHS"})
INTERIOR_TOLERANCE = 1e-8

ClassConstraints = Callable[["LPVariables"], Iterable]


def require_cvxpy():
    """The cvxpy module, imported on first use rather than with this module; ``MissingExtraError`` naming the ``lp``
    extra when it is missing (``verispec.lp_analysis.solve.require_cvxpy``)."""
    return _require_cvxpy("verifier classes in cvxpy (bound --restriction FILE.py:NAME, verispec.bounds.classes)")


@dataclass(eq=False)
class LPVariables:
    """The multi-step LP's variables as cvxpy expressions, handed to a class's constraint function.

    ``z``: the emission masses [num_emissions], ``flows``: F(u) [num_flows]; ``outcomes``: the draft outcomes
    (DraftTree, Q(D)) in the order of ``z``; ``problem`` and ``drafter`` for anything else a class needs."""

    problem: Problem
    drafter: Drafter
    lp: MultiStepLP
    z: object  # cvxpy Variable [num_emissions]
    flows: object  # cvxpy Variable [num_flows]

    @property
    def outcomes(self) -> list:
        return self.lp.outcomes

    @property
    def vocab_size(self) -> int:
        return self.lp.vocab_size

    def columns(self, outcome: int, nodes: Iterable[int] | None = None) -> np.ndarray:
        """Indices into ``z`` of the emissions of outcome ``outcome`` at ``nodes`` (all its nodes when None),
        node by node, token by token: ``v.z[v.columns(i, [n])]`` is the [V] emission masses of node n."""
        start = self.lp.first_column[outcome]
        nodes = range(self.lp.outcomes[outcome][0].num_nodes) if nodes is None else nodes
        return np.asarray([start + node * self.vocab_size + token for node in nodes
                           for token in range(self.vocab_size)], dtype=np.int64)

    def masses(self, outcome: int):
        """Outcome ``outcome``'s emission masses as a [num_nodes, V] cvxpy expression (rows: nodes)."""
        cp = require_cvxpy()
        tree = self.lp.outcomes[outcome][0]
        start = self.lp.first_column[outcome]
        return cp.reshape(self.z[start:start + tree.num_nodes * self.vocab_size], (tree.num_nodes, self.vocab_size),
                          order="C")


def every_valid(v: LPVariables) -> list:
    """No extra constraint: every valid verifier (the multi-step LP)."""
    return []


def selected_path(v: LPVariables) -> list:
    """GBV's class (``RESTRICTIONS``' "selected-path"): no emission off the greedy selected path."""
    off = [v.columns(index, sorted(set(range(tree.num_nodes)) - set(greedy_path(tree))))
           for index, (tree, _) in enumerate(v.outcomes)]
    off = np.concatenate(off) if off else np.zeros(0, dtype=np.int64)
    return [v.z[off] == 0] if off.size else []


#: Classes by name (``verispec bound --restriction NAME``; a file's class is FILE.py:NAME).
CLASSES: dict[str, ClassConstraints] = {"every-valid": every_valid, "selected-path": selected_path}


@dataclass(frozen=True, eq=False)
class ClassOptimum:
    """A class's optimum (``block_efficiency``), its optimal verifier (valid at this problem and drafter; the
    exact engine confirmed it lossless at that efficiency), and the gap of every built-in rule to it.
    ``references``: the multi-step optimum and the selected-path optimum by the scipy/HiGHS path."""

    name: str
    tree: str
    block_efficiency: float
    verifier: TabulatedVerifier
    solver: str
    status: str
    seconds: float
    num_variables: int
    tv_distance: float  # the optimal verifier's exact TV distance to the target (the exact engine)
    tolerance: float  # the TV accepted: the engine's float tolerance after a vertex solver, else INTERIOR_TOLERANCE
    rows: tuple[GapRow, ...] = ()  # ratio above 1: a rule outside the class
    references: dict[str, float] = field(default_factory=dict)

    def to_json(self) -> dict:
        return {"class": self.name, "tree": self.tree, "optimal_block_efficiency": self.block_efficiency,
                "solver": self.solver, "status": self.status, "seconds": self.seconds,
                "lp_variables": self.num_variables, "tv_distance": self.tv_distance, "tolerance": self.tolerance,
                "references": dict(self.references),
                "verifiers": [row.__dict__ for row in self.rows]}

    def table(self) -> str:
        header = ("verifier", "E[tau+1]", "ratio to class optimum", "gap", "lossless")
        best = self.block_efficiency
        rows = [(f"class optimum ({self.name})", f"{best:.6f}", "1.000000", "0", "yes"),
                *((f"LP optimum ({label})", f"{value:.6f}", f"{value / best:.6f}", f"{best - value:.2e}", "yes")
                  for label, value in self.references.items()),
                *((r.verifier, f"{r.block_efficiency:.6f}", f"{r.ratio:.6f}", f"{r.gap:.2e}",
                   "yes" if r.lossless else ("?" if r.lossless is None else "NO")) for r in self.rows)]
        widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]
        lines = ["  ".join(f"{cell:<{w}}" for cell, w in zip(row, widths)).rstrip()
                 for row in [header, tuple("-" * w for w in widths), *rows]]
        lines.append(f"(solved by {self.solver} through cvxpy in {self.seconds:.2f} s; its optimal verifier's exact "
                     f"TV to the target: {self.tv_distance:.1e} <= {self.tolerance:g}; a ratio above 1 is a verifier "
                     "outside the class)")
        return "\n".join(lines)


def _variables(problem: Problem, drafter: Drafter, limit: int, max_nonzeros: int):
    cp = require_cvxpy()
    lp = build_multistep_lp(problem, drafter, limit=limit, max_nonzeros=max_nonzeros)
    z = cp.Variable(lp.num_emissions, nonneg=True, name="z")
    flows = cp.Variable(lp.num_flows, nonneg=True, name="F")
    return lp, LPVariables(problem=problem, drafter=drafter, lp=lp, z=z, flows=flows)


def _class_constraints(constraints: ClassConstraints, variables: LPVariables, name: str) -> list:
    cp = require_cvxpy()
    try:
        produced = constraints(variables)
        produced = [] if produced is None else list(produced)
    except VerispecError:
        raise
    except Exception as error:  # a user's class may fail in any way: one line naming it
        message = " ".join(f"{type(error).__name__}: {error}".split())
        raise VerispecError(f"the class {name} raised {message}; it must return a list of cvxpy constraints on "
                            "the variables it is given") from None
    for item in produced:
        if not isinstance(item, cp.constraints.constraint.Constraint):
            raise VerispecError(f"the class {name} returned {type(item).__name__} {str(item)[:60]!r}, not a cvxpy "
                                "constraint; return a list of constraints such as v.z[columns] == 0")
        if not item.is_dcp():
            raise VerispecError(f"the class {name} returned a non-convex constraint {str(item)[:60]!r}; a class must "
                                "be convex (cvxpy's DCP rules), e.g. linear equalities and inequalities")
    return produced


@contextlib.contextmanager
def _stdout_to_stderr():
    """File descriptor 1 onto 2 for the block: highspy prints its banner from C++ to stdout, which would break
    ``--json`` output."""
    sys.stdout.flush()
    try:
        saved = os.dup(1)
    except OSError:  # no file descriptor 1 (embedded interpreters)
        yield
        return
    try:
        os.dup2(2, 1)
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def solve_program(problem, solver: str | None, what: str) -> str:
    """Solve a cvxpy problem with ``solver`` (or the first default that supports it); the solver's name."""
    cp = require_cvxpy()
    installed = set(cp.installed_solvers())
    if solver is not None:
        solver = solver.upper()
        if solver not in installed:
            raise SolverError(f"{what}: the solver {solver!r} is not installed; installed: "
                              f"{', '.join(sorted(installed))}")
        candidates = [solver]
    else:
        candidates = [name for name in DEFAULT_SOLVERS if name in installed]
        if not candidates:
            raise SolverError(f"{what}: none of the solvers {', '.join(DEFAULT_SOLVERS)} is installed; "
                              "pip install highspy clarabel")
    failure = "no solver was tried"
    for name in candidates:
        try:
            with warnings.catch_warnings(), _stdout_to_stderr():
                warnings.simplefilter("ignore")  # cvxpy's "may be inaccurate": the status below says it
                problem.solve(solver=name, **SOLVER_OPTIONS.get(name, {}))
        except cp.error.SolverError as error:
            failure = f"{name}: {' '.join(str(error).split())}"
            continue
        status = problem.status
        if status == cp.OPTIMAL:
            return name
        if status in (cp.INFEASIBLE, cp.INFEASIBLE_INACCURATE):
            raise SolverError(f"{what}: {name} reports the program infeasible: no valid verifier satisfies the "
                              "class's constraints at this problem (the class is empty); loosen its constraints")
        if status in (cp.UNBOUNDED, cp.UNBOUNDED_INACCURATE):
            raise SolverError(f"{what}: {name} reports the program unbounded, which a bounded objective cannot be; "
                              "a constraint of the class is malformed")
        failure = (f"{name} ended with status {status!r} (inaccurate); name another solver "
                   f"({', '.join(sorted(installed))}) with solver=")
    raise SolverError(f"{what}: {failure}")


def optimize_class(problem: Problem, drafter: Drafter, constraints: ClassConstraints | str = every_valid, *,
                   name: str | None = None, solver: str | None = None, verifiers: Iterable = (),
                   limit: int = DEFAULT_MAX_VARIABLES, max_nonzeros: int = DEFAULT_MAX_NONZEROS,
                   references: bool = True) -> ClassOptimum:
    """Maximise E[tau + 1] over the valid verifiers for ``drafter``'s trees on ``problem`` that satisfy
    ``constraints`` (a function of ``LPVariables`` returning cvxpy constraints, or a name in ``CLASSES``).

    The optimal verifier is run through the exact engine, which must find it lossless at the optimum's efficiency
    (1e-9); ``verifiers`` (e.g. ``REGISTRY.values()``) are compared with the optimum, those valid for the drafter
    only; ``references`` adds the multi-step and selected-path optima of the scipy/HiGHS path."""
    from verispec.simulator.engine import analyze

    cp = require_cvxpy()
    if isinstance(constraints, str):
        if constraints not in CLASSES:
            raise VerispecError(f"unknown verifier class {constraints!r}; known: {', '.join(CLASSES)}, or a function "
                                "of the LP's variables (FILE.py:NAME on the command line)")
        name, constraints = name or constraints, CLASSES[constraints]
    name = name or getattr(constraints, "__name__", "class")
    start = time.monotonic()
    lp, variables = _variables(problem, drafter, limit, max_nonzeros)
    what = f"the class {name} on {drafter.spec} at V={problem.vocab_size}"
    extra = _class_constraints(constraints, variables, name)
    x = cp.hstack([variables.z, variables.flows])
    program = cp.Problem(cp.Maximize(lp.objective.astype(np.float64) @ x),
                         [lp.float_matrix() @ x == lp.b_eq.astype(np.float64), *extra])
    used = solve_program(program, solver, what)
    for constraint in extra:
        violation = float(np.max(constraint.violation(), initial=0.0))
        if violation > CLASS_TOLERANCE:
            raise SolverError(f"{what}: {used} returned a point that violates the class's constraint "
                              f"{str(constraint)[:60]!r} by {violation:.3g}; name another solver")
    if variables.z.value is None or variables.flows.value is None:
        raise SolverError(f"{what}: {used} returned no solution; name another solver")
    try:  # the multi-step LP's own check: tiny negatives cleaned, each outcome's total Q(D), every row to 1e-9
        x = checked_solution(np.concatenate([variables.z.value, variables.flows.value]).astype(np.float64),
                             lp.float_matrix(), lp.b_eq.astype(np.float64), None, None, lp.groups())
    except SolverError as error:
        raise SolverError(f"{what}: {error}: {used}'s answer is inaccurate; name another solver") from None
    z = x[:lp.num_emissions]
    optimum = float(lp.objective[:lp.num_emissions] @ z)
    verifier = TabulatedVerifier(f"class-optimal[{name},{drafter.spec}]", lp.laws(z), drafter.draft_laws)
    tolerance = None if used in VERTEX_SOLVERS else INTERIOR_TOLERANCE
    check = analyze(problem, drafter, verifier, tolerance=tolerance)
    if not check.lossless or abs(float(check.block_efficiency) - optimum) > 1e-9 * max(1.0, optimum):
        raise SolverError(f"{what}: the optimum's verifier is not valid at this problem (TV to the target "
                          f"{float(check.tv_distance):.2g} > {check.tolerance:g}, E[tau+1] "
                          f"{float(check.block_efficiency):.12g} against {optimum:.12g}); the solver's answer is "
                          "inaccurate: name another solver (SCIPY or HIGHS for a linear class)")
    rows = verifier_gaps(problem, drafter, verifiers, optimum)
    refs = {}
    if references:
        refs["every valid verifier"] = optimal_block_efficiency(problem, drafter, limit=limit).block_efficiency
        refs["selected-path"] = optimal_block_efficiency(problem, drafter, limit=limit,
                                                         restriction="selected-path").block_efficiency
    return ClassOptimum(name=name, tree=drafter.spec, block_efficiency=optimum, verifier=verifier, solver=used,
                        status=program.status, seconds=time.monotonic() - start, num_variables=lp.num_columns,
                        tv_distance=float(check.tv_distance), tolerance=float(check.tolerance), rows=tuple(rows),
                        references=refs)


def _extension_rows(entries, size: int, num_columns: int) -> tuple[dict, sparse.csr_matrix]:
    """For ``entries`` (accepted path, first of its V columns), the prefixes u of the paths (the empty one included)
    and the 0/1 matrix whose row u sums the columns of every path that extends u: the mass of blocks that accept at
    least u. One pass over the paths and their prefixes."""
    index, rows, cols = {}, [], []
    for path, first in entries:
        columns = first + np.arange(size)
        for length in range(len(path) + 1):
            rows.append(np.full(size, index.setdefault(path[:length], len(index))))
            cols.append(columns)
    rows, cols = np.concatenate(rows), np.concatenate(cols)
    return index, sparse.csr_matrix((np.ones(rows.size), (rows, cols)), shape=(len(index), num_columns))


def _prefix_masses(lp: MultiStepLP) -> tuple[dict, sparse.csr_matrix]:
    """``_extension_rows`` over the emission masses z of every outcome's emitting nodes."""
    size = lp.vocab_size
    entries = ((tree.paths[node], lp.first_column[outcome] + position * size)
               for outcome, ((tree, _), nodes) in enumerate(zip(lp.outcomes, lp.nodes_of))
               for position, node in enumerate(nodes))
    return _extension_rows(entries, size, lp.num_emissions)


def coupling_program(problem: Problem, drafter: Drafter, *, solver: str | None = None,
                     limit: int = DEFAULT_MAX_VARIABLES) -> float:
    """The coupling relaxation over the multi-step LP's emission masses (module docstring): each outcome emits
    its probability, and the mass of blocks accepting at least the prefix u is at most p(u). Its optimum is
    >= the multi-step optimum, <= ``coupling_bound``, and equal to it on a single path."""
    cp = require_cvxpy()
    lp, variables = _variables(problem, drafter, limit, DEFAULT_MAX_NONZEROS)
    prefixes, accepted = _prefix_masses(lp)
    depth = lp.depth
    joint = {length: np.asarray(target_law(problem, length), dtype=np.float64) for length in range(1, depth + 1)}
    caps = np.asarray([1.0 if not prefix else float(joint[len(prefix)][prefix]) for prefix in prefixes])
    groups = sparse.csr_matrix((np.ones(lp.num_emissions),
                                (np.repeat(np.arange(len(lp.outcomes)), np.diff(lp.first_column)),
                                 np.arange(lp.num_emissions))), shape=(len(lp.outcomes), lp.num_emissions))
    totals = np.asarray([float(probability) for _, probability in lp.outcomes])
    z = variables.z
    program = cp.Problem(cp.Maximize(lp.objective[:lp.num_emissions].astype(np.float64) @ z),
                         [groups @ z == totals, accepted @ z <= caps])
    solve_program(program, solver, f"the coupling program on {drafter.spec} at V={problem.vocab_size}")
    return float(program.value)


def information_agnostic_program(problem: Problem, drafter: Drafter, *, solver: str | None = None,
                                 limit: int = DEFAULT_MAX_VARIABLES) -> float:
    """The information-agnostic LP (module docstring): variables M(s), the mass emitting the block s (the
    multi-step LP's emission masses summed over outcomes), and the same flows F(u); losslessness as in the
    multi-step LP, total mass one, and the mass of blocks accepting at least u at most P(the tree contains u).
    Equal to the multi-step optimum on a single path; an upper bound on every valid verifier on trees."""
    cp = require_cvxpy()
    lp = build_multistep_lp(problem, drafter, limit=limit)
    size = lp.vocab_size
    # block s = (accepted path, token): one column per distinct block; z columns merge into it
    block_of, merge = {}, np.empty(lp.num_emissions, dtype=np.int64)
    for outcome, ((tree, _), nodes) in enumerate(zip(lp.outcomes, lp.nodes_of)):
        for position, node in enumerate(nodes):
            path = tree.paths[node]
            base = block_of.setdefault(path, len(block_of))
            merge[lp.first_column[outcome] + position * size + np.arange(size)] = base * size + np.arange(size)
    num_blocks = len(block_of) * size
    a_eq = lp.float_matrix().tocsc()
    emission_part = a_eq[:, :lp.num_emissions]
    # M(s) enters the prefix rows with the coefficient each of its z columns has there (the same for all); the
    # outcome rows (each outcome emits Q(D)) are replaced by one total-mass row and the capacities below
    representative = np.empty(num_blocks, dtype=np.int64)
    representative[merge] = np.arange(lp.num_emissions)
    num_prefix_rows = lp.num_rows - len(lp.outcomes)
    emitted = emission_part[:, representative].tocsr()[:num_prefix_rows]
    flow_part = a_eq[:, lp.num_emissions:].tocsr()[:num_prefix_rows]
    b_prefix = lp.b_eq[:num_prefix_rows].astype(np.float64)
    paths = list(block_of)
    prefixes, capacity = _extension_rows(((path, block * size) for path, block in block_of.items()), size, num_blocks)
    contains = path_probabilities(lp.outcomes)
    caps = [contains[prefix] for prefix in prefixes]  # every prefix of an emitting path is a path of its tree
    lengths = np.asarray([len(path) + 1 for path in paths for _ in range(size)], dtype=np.float64)
    blocks = cp.Variable(num_blocks, nonneg=True, name="M")
    flows = cp.Variable(lp.num_flows, nonneg=True, name="F")
    program = cp.Problem(cp.Maximize(lengths @ blocks),
                         [emitted @ blocks + flow_part @ flows == b_prefix, cp.sum(blocks) == 1,
                          capacity @ blocks <= np.asarray(caps)])
    solve_program(program, solver, f"the information-agnostic LP on {drafter.spec} at V={problem.vocab_size}")
    return float(program.value)


__all__ = [
    "CLASSES", "ClassOptimum", "LPVariables", "coupling_bound", "coupling_program", "every_valid",
    "information_agnostic_program", "optimize_class", "selected_path",
]
