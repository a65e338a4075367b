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
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
from scipy import sparse

from verispec.errors import InvalidTreeError
from verispec.lp_analysis.solve import DEFAULT_MAX_VARIABLES, check_size, solve_lp
from verispec.simulator.chooser import Chooser
from verispec.simulator.drafters import Drafter
from verispec.simulator.engine import target_conditionals, target_law
from verispec.simulator.problems import Problem
from verispec.simulator.trees import DraftTree
from verispec.verifiers.base import Verifier


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


def _continuation_factors(problem: Problem, depth: int) -> list[np.ndarray]:
    """factors[l][x] = p(x_{l+1} .. x_{L+1} | x_1 .. x_l) for x in V^(L+1), l = 1..L+1 (index l - 1)."""
    size = problem.vocab_size
    factors = [np.ones((size,) * (depth + 1))]
    for length in range(depth, 0, -1):  # build from the longest emitted length down
        conditional = np.asarray(target_conditionals(problem, length), dtype=np.float64)  # (V,)*length + (V,)
        shape = (size,) * (length + 1) + (1,) * (depth - length)
        factors.insert(0, factors[0] * conditional.reshape(shape))
    return factors


def optimal_block_efficiency(problem: Problem, drafter: Drafter, *,
                             limit: int = DEFAULT_MAX_VARIABLES) -> MultiStepOptimum:
    """Maximise E[tau + 1] over every valid verifier for trees drawn by ``drafter`` on ``problem``."""
    start = time.monotonic()
    size, depth = problem.vocab_size, drafter.depth
    outcomes = drafter.outcomes(problem)
    num_variables = sum(tree.num_nodes for tree, _ in outcomes) * size
    check_size(num_variables, what=f"multi-step LP for {drafter.spec} at V={size}", limit=limit)
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
    for index, (tree, probability) in enumerate(outcomes):
        probability = float(probability)
        first = column
        for path in tree.paths:
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
    solution = solve_lp(objective, what=f"multi-step LP for {drafter.spec} at V={size}", maximize=True,
                        a_eq=a_eq, b_eq=b_eq, groups=groups, limit=limit)
    laws = {}
    column = 0
    for tree, _ in outcomes:
        count = tree.num_nodes * size
        masses = solution.x[column:column + count].reshape(tree.num_nodes, size)
        laws[tree.shape] = masses / masses.sum()
        column += count
    verifier = TabulatedVerifier(f"lp-optimal[{drafter.spec}]", laws, drafter.draft_laws)
    return MultiStepOptimum(block_efficiency=solution.objective, verifier=verifier, num_variables=num_variables,
                            num_constraints=a_eq.shape[0], num_draft_outcomes=len(outcomes),
                            seconds=time.monotonic() - start)


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
