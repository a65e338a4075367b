"""The best block efficiency of ANY valid verifier for a problem and a drafter, as a linear program.

Variables pi(n, y | D) >= 0 for every draft outcome D (a draft tree with probability Q(D)), every node n of
D and every token y: the probability of accepting the path to n and emitting y (an emission law, as every
verifier in verispec returns; the LP itself holds the joint masses Q(D) pi, which HiGHS solves far more
accurately). Constraints (reference, "Optimality analysis"):

    sum_{n, y} pi(n, y | D) = 1                                  for every D;
    sum_D Q(D) sum_{s = path(n) y prefix of x} pi(n, y | D) p(x_rest | s) = p(x)   for every x in V^(L+1),

the second being losslessness: emit the block, then continue with the target; the first L+1 tokens must
follow the target's law. Objective: maximise E[tau + 1] = sum_D Q(D) sum_{n, y} pi(n, y | D) (depth(n) + 1).

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
  tests/test_lp_classes.py confirms GBV = class optimum to 1e-9 on random problems.

The "on-path information" class (the law for an outcome D may depend only on the conditionals at D's own
nodes, and must be valid for every problem consistent with them) is NOT computed here, because the
per-instance LP cannot express it. Within one problem every conditional is a fixed number and every
outcome D is told apart by its shape, so any table pi(. | D) is trivially "a function of D's conditionals":
the information restriction adds no constraint to this LP. What it really demands is validity
simultaneously for the continuum of problems that agree on D's nodes but differ elsewhere (which also
changes the draft laws of the other outcomes); that is a semi-infinite program over functions of real
conditionals, not a finite LP. The unrestricted optimum is an upper bound for that class, and it is the
class optimum wherever an on-path verifier attains it: on a single path (block verification) and at one
position, where the optimum is 1 + alpha* of the OT LP (tests/test_lp_classes.py) and the node-local OT
verifier attains it. For deeper trees the gap between the two is not determined by this module.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
from scipy import sparse

from verispec.errors import InvalidTreeError, ProblemTooLargeError, VerispecError
from verispec.lp_analysis.solve import DEFAULT_MAX_VARIABLES, check_size, solve_lp
from verispec.simulator.chooser import Chooser
from verispec.simulator.drafters import Drafter
from verispec.simulator.engine import target_conditionals, target_law
from verispec.simulator.problems import Problem
from verispec.simulator.trees import DraftTree
from verispec.verifiers.base import Verifier
from verispec.verifiers.gbv import greedy_path

#: Restricted classes of verifiers the multi-step LP can optimise over (None: every valid verifier).
RESTRICTIONS = ("selected-path",)

#: Largest number of nonzero coefficients the multi-step LP builds. An emission at depth d meets V^(L-d)
#: validity rows (every continuation of its block), so the matrix grows as (draft outcomes) * V^(L+1) and
#: reaches gigabytes long before the variable limit: chain:6 at V = 4 has 115k variables but 90M nonzeros,
#: and building it took 13 GB of memory (benchmarks/bench_lp.py) before this limit existed.
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

    def emission_law(self, tree: DraftTree) -> np.ndarray:
        try:
            return self._laws[tree.shape].copy()
        except KeyError:
            raise InvalidTreeError(f"verifier '{self.name}' has no emission law for {tree!r}") from None

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


def _continuation_factors(problem: Problem, depth: int) -> list[np.ndarray]:
    """factors[l][x] = p(x_{l+1} .. x_{L+1} | x_1 .. x_l) for x in V^(L+1), l = 1..L+1 (index l - 1)."""
    size = problem.vocab_size
    factors = [np.ones((size,) * (depth + 1))]
    for length in range(depth, 0, -1):  # build from the longest emitted length down
        conditional = np.asarray(target_conditionals(problem, length), dtype=np.float64)  # (V,)*length + (V,)
        shape = (size,) * (length + 1) + (1,) * (depth - length)
        factors.insert(0, factors[0] * conditional.reshape(shape))
    return factors


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


def _count_nonzeros(outcomes, nodes_of, size: int, depth: int) -> int:
    """Nonzeros of the constraint matrix before it is built: V^(L - depth) validity rows per variable at a
    node of that depth, plus one entry in its outcome's row."""
    return sum(size * (size ** (depth - int(tree.depth[node])) + 1)
               for (tree, _), nodes in zip(outcomes, nodes_of) for node in nodes)


def optimal_block_efficiency(problem: Problem, drafter: Drafter, *, limit: int = DEFAULT_MAX_VARIABLES,
                             restriction: str | None = None,
                             max_nonzeros: int = DEFAULT_MAX_NONZEROS) -> MultiStepOptimum:
    """Maximise E[tau + 1] over every valid verifier for trees drawn by ``drafter`` on ``problem``, or over
    the verifiers of a restricted class (``restriction``, one of ``RESTRICTIONS``; see the module docstring).

    ProblemTooLargeError when the LP would have more than ``limit`` variables or ``max_nonzeros`` nonzero
    coefficients."""
    _check_restriction(restriction)
    start = time.monotonic()
    size, depth = problem.vocab_size, drafter.depth
    outcomes = drafter.outcomes(problem)
    nodes_of = [emitting_nodes(tree, restriction) for tree, _ in outcomes]
    num_variables = sum(len(nodes) for nodes in nodes_of) * size
    what = f"multi-step LP for {drafter.spec} at V={size}" + (f" ({restriction})" if restriction else "")
    check_size(num_variables, what=what, limit=limit)
    nonzeros = _count_nonzeros(outcomes, nodes_of, size, depth)
    if nonzeros > max_nonzeros:
        raise ProblemTooLargeError(
            f"{what}: the linear program would have about {nonzeros:,} nonzero coefficients ({num_variables:,} "
            f"variables), above the limit of {max_nonzeros:,}; use a smaller vocabulary or a shallower tree, "
            f"or raise max_nonzeros explicitly")
    factors = [f.ravel() for f in _continuation_factors(problem, depth)]
    num_sequences = size ** (depth + 1)
    # Variables are joint masses z(n, y, D) = Q(D) pi(n, y | D), not the conditional pi: with pi, draft
    # outcomes of tiny probability put coefficients near 1e-15 into the validity rows and HiGHS then
    # returns "optimal" bases that are not (seen: 1.7e-4 below block verification on a chain). With z,
    # validity coefficients are continuation probabilities in [0, 1] and each outcome's row is sum z = Q(D).
    rows, cols, values = [], [], []
    objective = np.empty(num_variables)
    groups, totals = [], []
    column = 0
    for index, ((tree, probability), nodes) in enumerate(zip(outcomes, nodes_of)):
        probability = float(probability)
        first = column
        for node in nodes:
            path = tree.paths[node]
            length = len(path) + 1
            span = size ** (depth + 1 - length)
            base = 0
            for token in path:
                base = base * size + token
            for token in range(size):
                offset = (base * size + token) * span
                rows.append(np.arange(offset, offset + span))
                cols.append(np.full(span, column))
                values.append(factors[length - 1][offset:offset + span])
                objective[column] = length
                column += 1
        rows.append(np.array([num_sequences + index]))  # sum of this outcome's masses is Q(D)
        cols.append(np.arange(first, column))
        values.append(np.ones(column - first))
        groups.append((np.arange(first, column), probability))
        totals.append(probability)
    rows_flat = np.concatenate([np.broadcast_to(r, c.shape) for r, c in zip(rows, cols)])
    a_eq = sparse.csr_matrix((np.concatenate(values), (rows_flat, np.concatenate(cols))),
                             shape=(num_sequences + len(outcomes), num_variables))
    b_eq = np.concatenate([np.asarray(target_law(problem, depth + 1), dtype=np.float64).ravel(), totals])
    # The validity rows sum to the outcome rows (both total one), so one of them is implied; leaving it in
    # makes the system inconsistent at rounding level and HiGHS may call it infeasible.
    keep = np.arange(1, a_eq.shape[0])
    a_eq, b_eq = a_eq[keep].tocsr(), b_eq[keep]
    solution = solve_lp(objective, what=what, maximize=True, a_eq=a_eq, b_eq=b_eq, groups=groups, limit=limit)
    laws = {}
    column = 0
    for (tree, _), nodes in zip(outcomes, nodes_of):
        count = len(nodes) * size
        law = np.zeros((tree.num_nodes, size))  # nodes outside the class emit nothing
        law[nodes] = solution.x[column:column + count].reshape(len(nodes), size)
        laws[tree.shape] = law / law.sum()
        column += count
    label = drafter.spec if restriction is None else f"{drafter.spec},{restriction}"
    verifier = TabulatedVerifier(f"lp-optimal[{label}]", laws, drafter.draft_laws)
    return MultiStepOptimum(block_efficiency=solution.objective, verifier=verifier, num_variables=num_variables,
                            num_constraints=a_eq.shape[0], num_draft_outcomes=len(outcomes),
                            seconds=time.monotonic() - start, num_nonzeros=a_eq.nnz, restriction=restriction)


def coupling_bound(problem: Problem, drafter: Drafter) -> float:
    """1 + sum_{i=1..L} sum_{x_1..x_i} min(p(x_1..x_i), P(the tree contains the path x_1..x_i)).

    P(tau >= i) can never exceed the maximal coupling of the prefix laws at length i, so this bounds the
    block efficiency; for a single path it is Sun et al.'s "oracle that knows the joint laws" (12/9 + 1 on
    their toy). The bounds for different lengths are not attainable together: a valid verifier must also
    place the emitted corrections, and ``optimal_block_efficiency`` is the attainable optimum.
    """
    depth = drafter.depth
    contains = [dict() for _ in range(depth + 1)]
    for tree, probability in drafter.outcomes(problem):
        for path in set(tree.paths[1:]):
            contains[len(path)][path] = contains[len(path)].get(path, 0) + float(probability)
    total = 1.0
    for length in range(1, depth + 1):
        joint = np.asarray(target_law(problem, length), dtype=np.float64)
        total += sum(min(joint[path], mass) for path, mass in contains[length].items())
    return total
