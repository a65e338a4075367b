"""The best block efficiency of ANY valid verifier for a problem and a drafter, as a linear program.

Variables pi(n, y | D) >= 0 for every draft outcome D (a draft tree with probability Q(D)), every node n of
D and every token y: the probability of accepting the path to n and emitting y (an emission law, as every
verifier in verispec returns). Constraints (docs/guides/reference.md, "Optimality analysis"):

    sum_{n, y} pi(n, y | D) = 1                                  for every D;
    sum_D Q(D) sum_{s = path(n) y prefix of x} pi(n, y | D) p(x_rest | s) = p(x)   for every x in V^(L+1),

the second being losslessness: emit the block, then continue with the target; the first L+1 tokens must
follow the target's law. Objective: maximise E[tau + 1] = sum_D Q(D) sum_{n, y} pi(n, y | D) (depth(n) + 1).

As solved, the LP holds the joint masses z = Q(D) pi (HiGHS resolves them far more accurately than pi)
and writes losslessness as a flow over output prefixes with auxiliary variables F(u), the mass of outputs
starting with u: F(t) = M(t), F(u t) = p(t | u) F(u) + M(u t) up to length L, and the same expression equal
to p(u t) at length L + 1, where M(s) sums the z that emit s. Eliminating F gives the rows above; the
flow form has O(variables + prefixes) nonzeros instead of one entry per (emitted sequence, extension),
which had grown to 9e7 nonzeros (13 GB) at chain:6, V = 4.

The optimum bounds every valid verifier for that draft law; the maximiser is itself a verifier
(``TabulatedVerifier``) that the exact engine runs and confirms lossless at that efficiency.

On a single path the optimum equals block verification (Thomas & Pal 2026, arXiv 2602.16961: BV is optimal
even among verifiers that use off-path probabilities). In particular on Sun et al.'s toy it is
E[tau] = 11/9, not the 12/9 of ``coupling_bound``, which maximally couples the draft and target laws of each
prefix length separately and which no valid verifier attains (see ``coupling_bound``).

Restricted classes (``restriction``). A class of verifiers enters the LP only if it is a set of emission
laws cut out by finitely many linear conditions on this one problem's variables. One such class is
implemented:

* ``"selected-path"``: the verifier first selects ONE root-to-leaf path of D by GBV's strict greedy
  ranking (from the root, move to the child with the largest key (p/q, token id);
  ``verispec.verifiers.gbv.greedy_path``, the very function GBV uses), then accepts a prefix of that path
  and emits one token at the node where it stops: pi(n, y | D) = 0 for every node n off the selected path.
  It may still look at everything else (the other paths, every conditional). This is the class of
  multi-path block verification with a fixed greedy path choice of Thomas & Pal 2026 (arXiv 2602.16961);
  GBV belongs to it, so GBV <= class optimum <= unrestricted optimum, with equality on a single path.
  In the LP the restriction just removes the off-path variables.

  GBV is optimal in this class. Let S be the selected path and R the rest of D. The objective and the
  emitted block depend on D only through S and the emissions on S, and both are linear in pi; so averaging
  pi(. | S, R) over R given S yields a verifier that sees S alone, with the same efficiency and output law.
  The class optimum is therefore the single-path optimum for S's law, the skewed draft q_skew of
  ``gbv.py``, and on a single path the optimum is block verification (above), which with q_skew is GBV.
  tests/bounds/test_lp_classes.py confirms GBV = class optimum to 1e-9 on random problems.

The "on-path information" class (the law for an outcome D may depend only on the conditionals at D's own
nodes, and must be valid for every problem consistent with them) is NOT computed here, because the
per-instance LP cannot express it. Within one problem every conditional is a fixed number and every
outcome D is told apart by its shape, so any table pi(. | D) is trivially "a function of D's conditionals":
the information restriction adds no constraint to this LP. What it really demands is validity
simultaneously for the continuum of problems that agree on D's nodes but differ elsewhere (which also
changes the draft laws of the other outcomes); that is a semi-infinite program over functions of real
conditionals, not a finite LP. The unrestricted optimum is an upper bound for that class, and it is the
class optimum wherever an on-path verifier attains it: on a single path (block verification) and at one
position, where the optimum is 1 + alpha* of the OT LP (tests/bounds/test_lp_classes.py) and the node-local OT
verifier attains it. For deeper trees the gap between the two is not determined by this module.

Classes of the user's own, and two relaxations over the same variables (the coupling program, and an
information-agnostic LP over the law of the emitted block alone, exact on a single path), are stated in cvxpy in
``verispec.bounds.classes`` on the ``MultiStepLP`` built here; ``verispec.bounds.certificate`` proves an
optimum of this LP in exact rationals.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np
from scipy import sparse

from verispec import backend
from verispec.errors import InvalidTreeError, ProblemTooLargeError, VerispecError
from verispec.guard.limits import RESTRICTIONS
from verispec.lp_analysis.solve import DEFAULT_MAX_VARIABLES, check_size, solve_lp
from verispec.simulator.chooser import Chooser
from verispec.simulator.drafters import ChainDrafter, Drafter
from verispec.simulator.interfaces import Verifier
from verispec.simulator.problems import Problem, target_conditionals, target_law
from verispec.simulator.selection import greedy_path
from verispec.simulator.trees import DraftTree, TreeBatch, shape_paths
from verispec.sizes import log_add, log_prefix_count, readable_count

#: Largest number of nonzero coefficients the multi-step LP builds. An emission at depth d meets V^(L-d)
#: validity rows (every continuation of its block), so the matrix grows as (draft outcomes) * V^(L+1) and
#: reaches gigabytes long before the variable limit: chain:6 at V = 4 has 115k variables but 90M nonzeros,
#: and building it took 13 GB of memory (experiments/lp_sizes.py) before this limit existed.
DEFAULT_MAX_NONZEROS = 10_000_000


class TabulatedVerifier(Verifier):
    """A verifier given by an explicit emission law per draft tree (e.g. an LP's optimal verifier).

    It is valid only for the problem and drafter it was computed for; a tree it has no law for is an
    InvalidTreeError.
    """

    def __init__(self, name: str, laws: dict, valid_for):
        self.name = name
        self._laws = laws  # tree shape -> [num_nodes, V]
        self.valid_for = frozenset(valid_for)

    def emission_laws(self, batch: TreeBatch):
        """Each row's tabulated law, moved from the canonical node order of its shape to the batch's."""
        laws = []
        for row in range(batch.num_rows):
            shape = batch.shape(row)
            if shape not in self._laws:
                raise InvalidTreeError(f"verifier '{self.name}' has no emission law for the tree {shape}")
            canonical = {path: node for node, path in enumerate(shape_paths(shape))}
            order = [canonical[path] for path in batch.tree(row).paths]
            laws.append(self._laws[shape][order])
        return backend.asarray(np.stack(laws), batch.p)

    def procedure(self, tree: DraftTree, chooser: Chooser) -> tuple[int, int]:
        law = self.emission_law(tree)
        flat = chooser.categorical(law.ravel() / law.sum())
        return divmod(flat, tree.vocab_size)


@dataclass(frozen=True, eq=False)
class MultiStepOptimum:
    """The LP's optimum and an optimal verifier, with the LP's size and solve time."""

    block_efficiency: float
    verifier: TabulatedVerifier
    num_variables: int
    num_constraints: int
    num_draft_outcomes: int
    seconds: float
    num_nonzeros: int = 0
    restriction: str | None = None
    certificate: object = None  # a RationalCertificate when asked for (certify=True)


def _check_restriction(restriction: str | None) -> None:
    if restriction is not None and restriction not in RESTRICTIONS:
        raise VerispecError(f"unknown restriction {restriction!r} of the multi-step LP; known: "
                            f"{', '.join(RESTRICTIONS)} (or None for every valid verifier)")


def emitting_nodes(tree: DraftTree, restriction: str | None) -> list[int]:
    """The nodes at which a verifier of the class may stop and emit, in increasing id order."""
    if restriction is None:
        return list(range(tree.num_nodes))
    _check_restriction(restriction)
    return sorted(greedy_path(tree))


def _prefix_offsets(size: int, depth: int) -> list[int]:
    """Column offset of the flow variables F(u) of each prefix length 1..L (index length - 1)."""
    offsets, total = [], 0
    for length in range(1, depth + 1):
        offsets.append(total)
        total += size ** length
    return offsets + [total]


def _flat(sequence, size: int) -> int:
    index = 0
    for token in sequence:
        index = index * size + int(token)
    return index


@dataclass(frozen=True, eq=False)
class MultiStepLP:
    """The multi-step LP of one (problem, drafter, restriction), built once and solved by any path: HiGHS
    (``optimal_block_efficiency``), cvxpy (``verispec.bounds.classes``) or checked in exact rationals
    (``verispec.bounds.certificate``).

    maximise objective @ x subject to a_eq x = b_eq, x >= 0, where x = [z, F]: the joint emission masses
    z(n, y, D) = Q(D) pi(n, y | D) of the emitting nodes of every outcome (outcome by outcome, node by node,
    token by token) and then the flow variables F(u) of the output prefixes of lengths 1..L. The entries of
    ``values`` and ``b_eq`` keep the problem's number type (Fractions for an exact problem, floats otherwise).
    """

    what: str
    vocab_size: int
    depth: int
    outcomes: list  # [(DraftTree, Q(D))]
    nodes_of: list  # emitting nodes of each outcome, increasing ids
    first_column: np.ndarray  # [num_outcomes + 1] column of each outcome's first emission variable (last: end)
    num_emissions: int
    num_flows: int
    rows: np.ndarray  # [nonzeros] of a_eq
    cols: np.ndarray  # [nonzeros]
    values: np.ndarray  # [nonzeros] (object dtype for an exact problem)
    b_eq: np.ndarray  # [num_rows]
    objective: np.ndarray  # [num_columns] integer: depth(n) + 1 on z, 0 on F
    restriction: str | None = None

    @property
    def num_columns(self) -> int:
        return self.num_emissions + self.num_flows

    @property
    def num_rows(self) -> int:
        return len(self.b_eq)

    def float_matrix(self) -> sparse.csr_matrix:
        """a_eq in float64 (CSR)."""
        return sparse.csr_matrix((self.values.astype(np.float64), (self.rows, self.cols)),
                                 shape=(self.num_rows, self.num_columns))

    def groups(self) -> list[tuple[np.ndarray, float]]:
        """Each outcome's emission columns and its probability Q(D), for ``solve_lp``'s renormalisation."""
        return [(np.arange(self.first_column[i], self.first_column[i + 1]), float(probability))
                for i, (_, probability) in enumerate(self.outcomes)]

    def laws(self, emissions: np.ndarray) -> dict:
        """Tree shape -> emission law [num_nodes, V] from the emission masses z (nodes outside the class emit
        nothing); each outcome's masses are normalised to sum to one."""
        laws = {}
        for index, ((tree, _), nodes) in enumerate(zip(self.outcomes, self.nodes_of)):
            start, stop = self.first_column[index], self.first_column[index + 1]
            law = np.zeros((tree.num_nodes, self.vocab_size))
            law[nodes] = np.asarray(emissions[start:stop], dtype=np.float64).reshape(len(nodes), self.vocab_size)
            total = law.sum()
            laws[tree.shape] = law / total if total > 0 else np.full_like(law, 1.0 / law.size)
        return laws


def build_multistep_lp(problem: Problem, drafter: Drafter, *, limit: int = DEFAULT_MAX_VARIABLES,
                       restriction: str | None = None,
                       max_nonzeros: int = DEFAULT_MAX_NONZEROS) -> MultiStepLP:
    """The multi-step LP for trees drawn by ``drafter`` on ``problem`` (of the class ``restriction`` when given),
    its size estimated and refused (ProblemTooLargeError) before any draft outcome is enumerated."""
    _check_restriction(restriction)
    size, depth = problem.vocab_size, drafter.depth
    what = f"multi-step LP for {drafter.spec} at V={size}" + (f" ({restriction})" if restriction else "")
    problem.require_depth(depth)
    drafter.check_problem(problem)
    estimate_lp_size(problem, drafter, what=what, limit=limit, restriction=restriction, max_nonzeros=max_nonzeros)
    outcomes = drafter.outcomes(problem)
    nodes_of = [emitting_nodes(tree, restriction) for tree, _ in outcomes]
    num_variables = sum(len(nodes) for nodes in nodes_of) * size
    check_size(num_variables, what=what, limit=limit)
    # Constraints as a flow over output prefixes (linear in size, unlike one row per x in V^(L+1) with
    # every emitted sequence repeated in all rows it is a prefix of): F(u) is the mass of outputs whose
    # first |u| tokens are u once the block is continued by the target, M(s) the mass emitted as block s:
    #     F(t) = M(t),   F(u t) = p(t | u) F(u) + M(u t)   for |u t| <= L,
    #     p(t | u) F(u) + M(u t) = p(u t)                   for |u t| = L + 1   (losslessness),
    # and each outcome's emission masses sum to Q(D). Variables are the joint masses z(n, y, D) =
    # Q(D) pi(n, y | D) (with pi, outcomes of tiny probability put coefficients near 1e-15 into the rows
    # and HiGHS returned "optimal" bases that were not), then the F(u) of lengths 1..L.
    offsets = _prefix_offsets(size, depth)
    num_flows = offsets[-1]
    num_columns = num_variables + num_flows
    check_size(num_columns, what=what, limit=limit)
    nonzeros = 2 * num_variables + (size + 1) * num_flows
    if nonzeros > max_nonzeros:
        raise ProblemTooLargeError(
            f"{what}: the linear program would have about {nonzeros:,} nonzero coefficients ({num_columns:,} "
            f"variables), above the limit of {max_nonzeros:,}; use a smaller vocabulary or a shallower tree, "
            f"or raise max_nonzeros explicitly")
    # rows: prefix rows of length 1..L+1 (offset as the flow columns, length L+1 after them), then outcomes
    prefix_rows = num_flows + size ** (depth + 1)
    dtype = object if problem.exact else np.float64  # Fractions stay Fractions; floats are never boxed
    rows, cols, values = [], [], []
    objective = np.zeros(num_columns, dtype=np.int64)
    first_column = [0]
    column = 0
    for index, ((tree, _), nodes) in enumerate(zip(outcomes, nodes_of)):
        first = column
        for node in nodes:
            path = tree.paths[node]
            length = len(path) + 1
            row_base = offsets[length - 1] + _flat(path, size) * size
            rows.append(row_base + np.arange(size))
            cols.append(column + np.arange(size))
            values.append(np.full(size, -1 if length <= depth else 1, dtype=dtype))  # -M in flow rows, +M final
            objective[column:column + size] = length
            column += size
        rows.append(np.full(column - first, prefix_rows + index))
        cols.append(np.arange(first, column))
        values.append(np.ones(column - first, dtype=dtype))
        first_column.append(column)
    number = (lambda value: value) if problem.exact else float
    b_eq = np.zeros(prefix_rows + len(outcomes), dtype=dtype)
    b_eq[num_flows:prefix_rows] = np.asarray(target_law(problem, depth + 1), dtype=dtype).ravel()
    b_eq[prefix_rows:] = [number(probability) for _, probability in outcomes]
    for length in range(1, depth + 1):
        flows = num_variables + offsets[length - 1] + np.arange(size ** length)
        rows.append(offsets[length - 1] + np.arange(size ** length))  # +F(u) in its own row
        cols.append(flows)
        values.append(np.ones(size ** length, dtype=dtype))
        conditional = np.asarray(target_conditionals(problem, length), dtype=dtype).reshape(-1, size)
        child_rows = offsets[length] + np.arange(size ** (length + 1))  # rows of u t (offsets[L] = finals)
        rows.append(child_rows)
        cols.append(np.repeat(flows, size))
        values.append(-conditional.ravel() if length < depth else conditional.ravel())
    rows, cols, values = np.concatenate(rows), np.concatenate(cols), np.concatenate(values)
    # The final rows sum to the outcome rows (both total one, through the flow rows), so one is implied;
    # leaving it in makes the system inconsistent at rounding level and HiGHS may call it infeasible.
    dropped = num_flows
    keep = rows != dropped
    rows, cols, values = rows[keep], cols[keep], values[keep]
    rows = rows - (rows > dropped)
    b_eq = np.delete(b_eq, dropped)
    return MultiStepLP(what=what, vocab_size=size, depth=depth, outcomes=outcomes, nodes_of=nodes_of,
                       first_column=np.asarray(first_column), num_emissions=num_variables, num_flows=num_flows,
                       rows=rows, cols=cols, values=values, b_eq=b_eq, objective=objective, restriction=restriction)


#: Forms of the multi-step LP: "auto" takes the single-path form on a chain (``chain_lp``), the full LP elsewhere;
#: "full" always builds the LP over every draft outcome (the tests compare the two).
FORMS = ("auto", "full")


def optimal_block_efficiency(problem: Problem, drafter: Drafter, *, limit: int = DEFAULT_MAX_VARIABLES,
                             restriction: str | None = None, max_nonzeros: int = DEFAULT_MAX_NONZEROS,
                             certify: bool = False, form: str = "auto") -> MultiStepOptimum:
    """Maximise E[tau + 1] over every valid verifier for trees drawn by ``drafter`` on ``problem``, or over
    the verifiers of a restricted class (``restriction``, one of ``RESTRICTIONS``; see the module docstring).

    ``certify``: also prove the optimum in exact rationals (``verispec.bounds.certificate``: a primal and a
    dual solution, both checked exactly, with equal objectives) on an exact problem's own Fractions (a float
    problem's joint laws are products rounded to float64, not exactly consistent with its conditionals, so its
    LP has no exact solution to certify: VerispecError); CertificateError when none is found.

    ProblemTooLargeError when the LP would have more than ``limit`` variables or ``max_nonzeros`` nonzero
    coefficients."""
    start = time.monotonic()
    if form not in FORMS:
        raise VerispecError(f"unknown form {form!r} of the multi-step LP; known: {', '.join(FORMS)}")
    if certify and not problem.exact:
        raise VerispecError("a rational certificate needs an exact problem (rational conditionals, exact=True): a "
                            "float problem's joint laws are rounded products, so its LP has no exact solution")
    _check_restriction(restriction)
    if form == "auto" and type(drafter) is ChainDrafter:  # on one path the selected path is the path
        return _chain_optimum(problem, drafter, limit=limit, restriction=restriction, certify=certify, start=start)
    lp = build_multistep_lp(problem, drafter, limit=limit, restriction=restriction, max_nonzeros=max_nonzeros)
    a_eq = lp.float_matrix()
    solution = solve_lp(lp.objective.astype(np.float64), what=lp.what, maximize=True, a_eq=a_eq,
                        b_eq=lp.b_eq.astype(np.float64), groups=lp.groups(), limit=limit)
    certificate = None
    if certify:
        from verispec.bounds.certificate import certify_optimum

        certificate = certify_optimum(lp, solution)
    label = drafter.spec if restriction is None else f"{drafter.spec},{restriction}"
    verifier = TabulatedVerifier(f"lp-optimal[{label}]", lp.laws(solution.x[:lp.num_emissions]), drafter.draft_laws)
    return MultiStepOptimum(block_efficiency=solution.objective, verifier=verifier, num_variables=lp.num_columns,
                            num_constraints=lp.num_rows, num_draft_outcomes=len(lp.outcomes),
                            seconds=time.monotonic() - start, num_nonzeros=a_eq.nnz, restriction=restriction,
                            certificate=certificate)


def _chain_optimum(problem: Problem, drafter: ChainDrafter, *, limit: int, restriction: str | None, certify: bool,
                   start: float) -> MultiStepOptimum:
    """The multi-step LP on a single path in its single-path form (``verispec.bounds.chain_lp``)."""
    from verispec.bounds.chain_lp import certify_chain, chain_laws, solve_chain_lp

    depth, size = drafter.depth, problem.vocab_size
    problem.require_depth(depth)
    drafter.check_problem(problem)
    efficiency, flows, target, draft, conditional = solve_chain_lp(problem, depth, limit=limit)
    certificate = certify_chain(target, draft, conditional, size) if certify else None
    label = drafter.spec if restriction is None else f"{drafter.spec},{restriction}"
    verifier = TabulatedVerifier(f"lp-optimal[{label}]", chain_laws(flows, target, draft, conditional, size, depth),
                                 drafter.draft_laws)
    num_variables = sum(size ** length for length in range(1, depth + 1))
    num_edges = num_variables - size
    return MultiStepOptimum(block_efficiency=efficiency, verifier=verifier, num_variables=num_variables,
                            num_constraints=num_edges, num_draft_outcomes=int(np.count_nonzero(
                                np.asarray(draft[-1], dtype=np.float64) > 0)),
                            seconds=time.monotonic() - start, num_nonzeros=2 * num_edges, restriction=restriction,
                            certificate=certificate)


def estimate_lp_size(problem: Problem, drafter: Drafter, *, what: str, limit: int = DEFAULT_MAX_VARIABLES,
                     restriction: str | None = None, max_nonzeros: int = DEFAULT_MAX_NONZEROS) -> float:
    """ProblemTooLargeError BEFORE any draft outcome is enumerated when the multi-step LP would exceed ``limit``
    variables or ``max_nonzeros`` nonzeros; else the natural log of its estimated variables.

    The flow variables F(u), one per prefix of length 1..L, are counted exactly (in logs). The emission
    variables are at most (draft outcomes) x (emitting nodes per tree) x V, with the outcomes bounded by
    ``Drafter.log_num_outcomes`` at the largest support s of the draft laws (every draw picks one of at most s
    tokens): ``verispec bound --tree iid:6,6`` enumerated 2^36 draft trees before this estimate existed."""
    size, depth = problem.vocab_size, drafter.depth
    log_size = math.log(size)
    log_flows = log_prefix_count(size, 1, depth)  # one flow variable per output prefix of length 1..L
    if log_flows > math.log(limit):
        raise ProblemTooLargeError(
            f"{what}: the linear program would have {readable_count(log_flows)} flow variables (one per output prefix "
            f"of length 1..{depth}), above the limit of {limit:,}; use a smaller vocabulary or a shallower tree")
    support = max((int(np.count_nonzero(np.asarray(problem.draft(prefix), dtype=np.float64) > 0))
                   for length in range(depth) for prefix in problem.prefixes(length)), default=1)
    emitting = depth + 1 if restriction is not None else drafter.max_nodes
    log_variables = drafter.log_num_outcomes(max(support, 1)) + math.log(emitting) + log_size
    log_columns = log_add(log_variables, log_flows)
    log_nonzeros = log_add(math.log(2) + log_variables, math.log(size + 1) + log_flows)
    if log_columns > math.log(limit) or log_nonzeros > math.log(max_nonzeros):
        raise ProblemTooLargeError(
            f"{what}: the linear program would have up to {readable_count(log_columns)} variables and "
            f"{readable_count(log_nonzeros)} nonzero coefficients ({readable_count(drafter.log_num_outcomes(support))} "
            f"draft outcomes over {support} drafted tokens, {emitting} emitting nodes each), above the limits of "
            f"{limit:,} variables and {max_nonzeros:,} nonzeros; use a smaller vocabulary or tree, or raise the "
            "limits explicitly")
    return log_columns


def coupling_bound(problem: Problem, drafter: Drafter) -> float:
    """1 + sum_{i=1..L} sum_{x_1..x_i} min(p(x_1..x_i), P(the tree contains the path x_1..x_i)).

    P(tau >= i) can never exceed the maximal coupling of the prefix laws at length i, so this bounds the
    block efficiency; for a single path it is Sun et al.'s "oracle that knows the joint laws" (12/9 + 1 on
    their toy). The bounds for different lengths are not attainable together: a valid verifier must also
    place the emitted corrections, and ``optimal_block_efficiency`` is the attainable optimum.
    """
    contains = path_probabilities(drafter.outcomes(problem))
    joint = {length: np.asarray(target_law(problem, length), dtype=np.float64)
             for length in range(1, drafter.depth + 1)}
    return 1.0 + sum(min(joint[len(path)][path], mass) for path, mass in contains.items() if path)


def path_probabilities(outcomes) -> dict[tuple, float]:
    """P(the draft tree contains the path u) for every path u of some outcome (the empty path included: 1)."""
    contains: dict[tuple, float] = {}
    for tree, probability in outcomes:
        for path in set(tree.paths):
            contains[path] = contains.get(path, 0.0) + float(probability)
    return contains
