"""The multi-path optimum as select-then-verify: a smaller exact LP for ``iid:K,L``, per-depth bounds, and the
program that shows why no rule that sees only the drafted nodes reaches the optimum (the analysis and
the numbers are in docs/guides/rules_2025_26.md).

**Select-then-verify is optimal.** For K i.i.d. draft paths of length L, let B be the set of *selection laws*:
the laws g on paths of length L of one path picked (with any randomisation, looking at all K) from the K drafts.
Then

    max over valid verifiers of E[tau + 1]  =  max over g in B of BV(p, g),

BV(p, g) being block verification's efficiency on one path drawn from g (the single-path optimum, which
block verification attains; docs/guides/multistep_optimum.md). ">=": select a path with law g, verify it by block
verification with draft g; the selection only decides which path is read, so the output has the target's law.
"<=": given any valid verifier, emitting block (a, y) on tree D, pick uniformly one of D's paths that extends the
accepted part a. That path's law g is a selection law, and the pair (path, block) transports g to the verifier's
block law M with every block's accepted part a prefix of its path, which is exactly Hall's condition for M to be
producible on a single path drawn from g (docs/guides/verifier_classes.md); so E[tau + 1] <= BV(p, g). B is also the
base polytope of the polymatroid f(C) = 1 - (1 - q(C))^K (C a set of paths; Hall again), whose vertices are the
maxima of orders of the paths: GBV's selection (the lexicographic maximum) is one vertex, and GBV is block
verification with that vertex's law.

With r(u) = min over prefixes v of u of g(v) p(u | v) (g(empty) = 1), BV(p, g) = 1 + sum_u r(u), the mass
accepting at least u (docs/guides/verifier_classes.md's least feasible flows). That makes the optimum an LP over a
selection from each MULTISET of K paths (exchangeability: averaging a selection over the orders of the draws keeps
its law) with variables s(S, x) >= 0 for every multiset S and path x in S, sum_x s(S, x) = P(S), g(v) = the s of
paths through v, and r(u) <= g(u), r(u t) <= p(t | u) r(u), r(t) <= p(t): C(V^L + K - 1, K) K + (prefixes)
variables instead of the multi-step LP's V^(K L) (tree nodes) V (``selection_optimum``; equal to the multi-step
LP to 1e-9 in the tests, and it reaches iid:3,3 at V = 4, about 1.4e5 variables, where the multi-step LP would need
1e7).

**Delayed trees: still select-then-verify.** On ``delayed:K,L1,L2`` (a trunk t of L1 tokens drawn from q, then K
i.i.d. branches of L2 tokens from q(. | t); ``branch-iid:1,..,1,K,1,..,1`` is the same law) the equality above holds
with B the laws of one full path (trunk + branch) picked, with any randomisation, from the tree. The proof above
never used that the paths start at the root: ">=" selects a full path with law g and runs block verification with
draft g (lossless for any law of one path; g's conditionals along the trunk are q's own, since every full path of
a tree has that tree's trunk, so this is block verification with q on the trunk and the selection's law below it,
the form psbv takes on delayed trees). "<=" picks, uniformly, one of the K full paths extending the accepted part a
of the verifier's block: a is a node of the tree, on the trunk (then all K full paths extend it) or in a branch
(then the branches through a do), so such a path exists, and because all K full paths share the trunk its law g is
the law of a full path picked from the tree, a selection law. Drawing the block given the picked path alone (from
the joint law of tree, path and block) is a verifier on one path drawn from g with the same output law and the
same E[tau + 1], its accepted part a prefix of that path (Hall's condition), so E[tau + 1] <= BV(p, g), the
single-path optimum. Only "every node lies on a full path of the tree" was used: the equality holds for any draft
tree law whose leaves are all at depth L, the tree law deciding only what B is. A delayed tree is (t, multiset of
branches), so the LP has variables s(t, S, x) >= 0 for every trunk t with q(t) > 0, multiset S of K branches drawn
from q(. | t) and branch x in S, with sum_x s(t, S, x) = q(t) P(S | t), g(v) the s of full paths t x through v,
and the same r(u) rows: about sum_t C(P_t + K - 1, K) K + (prefixes) variables (P_t branches of positive
probability below t) instead of the multi-step LP's V^(L1 + K L2) V (1 + L1 + K L2). delayed:K,0,L2 is iid:K,L2
and delayed:1,L1,L2 (one path) is chain:L1+L2, whose optimum is block verification's; the tests
(tests/bounds/test_selection_delayed.py) find this LP equal to the multi-step LP to 1e-9 on random
context-dependent problems at V = 2..4. With one token per branch (L2 = 1) psbv attains the optimum: every
selection law is q on the trunk, so r(u) there does not depend on g, and below a trunk t only the last depth's
sum_x min(g(t x), r(t) p(x | t)) does, which psbv's split at t (the lexicographically optimal base with respect to
p(. | t), ``verispec.verifiers.psbv``) maximises for every value of r(t) at once. With L2 >= 2 it is often below.

**Depths trade off.** P(tau >= d) <= alpha*_d = 1 + min_H [p(H) - q(H)^K] over sets H of length-d sequences
(the K-draft OT value of the length-d laws; the output's first d tokens follow p, and tau >= d needs them to be a
drafted prefix), so E[tau + 1] <= 1 + sum_d alpha*_d (``depth_bounds``). The bounds are not attained together,
already on one path (K = 1: Sun et al.'s toy, 11/9 against 12/9, docs/guides/multistep_optimum.md), and a deeper one is
not attained even alone: P(tau >= d) needs the first d - 1 tokens accepted on the same path, which the selection
LP's r(u) <= p(t | u') r(u') charges and the OT value of the length-d laws does not.

**What drafted-node rules cannot do** (``drafted_node_program``). A rule that sees only p and q at the nodes of
the drafted tree must give equal emission laws to a tree in two problems that agree at all its nodes. Stacking the
multi-step LPs of problems P_1..P_n with those equalities (one per tree and pair of problems, cvxpy constraints
z_i[tree] == z_j[tree] in ``drafted_node_cvxpy``) bounds every such rule: its efficiencies satisfy sum_i E_i <= the
stacked optimum. When that is below sum_i OPT_i, no drafted-node rule is optimal on all of them; ``certify=True``
proves both sides in exact rationals (``verispec.bounds.certificate``).
"""

from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np
from scipy import sparse

from verispec.bounds.multistep import build_multistep_lp, optimal_block_efficiency
from verispec.errors import ProblemTooLargeError, VerispecError
from verispec.guard import budget
from verispec.lp_analysis.single_position import iid_ot_optimum
from verispec.lp_analysis.solve import DEFAULT_MAX_VARIABLES, require_cvxpy, solve_lp
from verispec.simulator.drafters import DelayedDrafter, Drafter
from verispec.simulator.problems import Problem, draft_law, target_law


def _root_iid(drafter: Drafter) -> tuple[int, int]:
    """(K, L) of a root-i.i.d. drafter (``iid:K,L``; a chain is K = 1), else VerispecError."""
    if isinstance(drafter, DelayedDrafter) and drafter.trunk == 0:
        return drafter.branches, drafter.tail
    branching = drafter.iid_branching
    if branching and all(b == 1 for b in branching):
        return 1, len(branching)
    raise VerispecError(f"the selection LP covers K i.i.d. paths from the root (iid:K,L or a chain), not "
                        f"{drafter.spec}")


def _trunk_iid(drafter: Drafter) -> tuple[int, int, int]:
    """(K, L1, L2) of a drafter whose trees are one trunk of L1 tokens then K i.i.d. branches of L2 tokens
    (``delayed:K,L1,L2``, ``iid:K,L`` with L1 = 0, ``branch-iid`` with one branching depth; a chain or a one-branch
    tree is (1, 0, L)), else VerispecError."""
    branching = drafter.iid_branching
    if branching and all(b >= 1 for b in branching):
        wide = [depth for depth, b in enumerate(branching) if b > 1]
        if not wide:
            return 1, 0, len(branching)
        if len(wide) == 1:
            return branching[wide[0]], wide[0], len(branching) - wide[0]
    raise VerispecError(f"the selection LP covers K i.i.d. paths after a trunk (delayed:K,L1,L2, iid:K,L or a "
                        f"chain), not {drafter.spec}")


@dataclass(frozen=True, eq=False)
class SelectionOptimum:
    """The multi-path optimum from the selection LP: ``block_efficiency`` = 1 + sum_d ``acceptance[d-1]``
    (P(tau >= d) of the optimal rule), an optimal selection law ``selection`` {path: g(path)}, the LP's size."""

    block_efficiency: float
    acceptance: tuple[float, ...]
    selection: dict = field(repr=False)
    num_variables: int = 0
    num_multisets: int = 0
    seconds: float = 0.0


def selection_lp_size(num_paths: int, paths: int) -> int:
    """Columns of the selection LP below one trunk before prefixes: C(P + K - 1, K) multisets of the P drafted
    branches (paths for iid:K,L) times at most K distinct ones."""
    return math.comb(num_paths + paths - 1, paths) * min(paths, num_paths)


def _drafted_branches(problem: Problem, trunk: int, tail: int):
    """(the draft's law of full paths [V^depth] flat, of trunks [V^trunk] flat, the full paths of positive draft
    probability (flat indices), trunk's flat index -> positions in that support of its full paths)."""
    size = problem.vocab_size
    joint_q = np.asarray(draft_law(problem, trunk + tail), dtype=np.float64).ravel()
    trunk_q = np.asarray(draft_law(problem, trunk), dtype=np.float64).ravel() if trunk else np.ones(1)
    support = np.flatnonzero(joint_q > 0)
    branches_of: dict[int, list[int]] = {}  # positions increasing
    for position, flat in enumerate(support):
        branches_of.setdefault(int(flat) // size ** tail, []).append(position)
    return joint_q, trunk_q, support, branches_of


def selection_lp_estimate(problem: Problem, drafter: Drafter) -> int:
    """The variables ``selection_optimum`` estimates for its LP on ``problem`` (the size it checks against its
    limit): one per prefix of length 1..depth, and per trunk of positive draft probability the
    ``selection_lp_size`` of its drafted branches. What a refused LP would need, without building it; it tabulates
    the draft's law of full paths (V^depth entries), so call it on a problem small enough for that (a restriction
    to the support, ``verispec.models.support``)."""
    paths, trunk, tail = _trunk_iid(drafter)
    depth = trunk + tail
    problem.require_depth(depth)
    num_prefixes = sum(problem.vocab_size ** length for length in range(1, depth + 1))
    _, _, _, branches_of = _drafted_branches(problem, trunk, tail)
    return sum(selection_lp_size(len(members), paths) for members in branches_of.values()) + num_prefixes


def _multiset_columns(branches_of: dict, trunk_q: np.ndarray, joint_q: np.ndarray, support: np.ndarray, paths: int,
                      what: str) -> tuple[list, list, list]:
    """(columns: (multiset id, full path's position in support), groups: (its columns, its probability) a multiset,
    probabilities) of the selection LP: every multiset of ``paths`` branches drafted below each trunk, with its
    probability q(trunk) x multinomial x prod q(branch | trunk)."""
    columns, groups, probabilities = [], [], []
    for trunk_flat, members in branches_of.items():
        trunk_mass = float(trunk_q[trunk_flat])
        branch_q = {index: joint_q[support[index]] / trunk_mass for index in members}  # q(branch | trunk)
        for combo in itertools.combinations_with_replacement(members, paths):
            budget.check(what)
            counts = {}
            for index in combo:
                counts[index] = counts.get(index, 0) + 1
            weight = math.factorial(paths)
            for count in counts.values():
                weight //= math.factorial(count)
            probability = trunk_mass * weight * float(np.prod([branch_q[i] ** c for i, c in counts.items()]))
            first = len(columns)
            columns.extend((len(probabilities), index) for index in counts)
            groups.append((np.arange(first, len(columns)), probability))
            probabilities.append(probability)
    return columns, groups, probabilities


def selection_optimum(problem: Problem, drafter: Drafter, *, depth_weights=None,
                      limit: int = DEFAULT_MAX_VARIABLES) -> SelectionOptimum:
    """The best E[tau + 1] of any valid verifier for ``iid:K,L`` or ``delayed:K,L1,L2`` trees (or a chain) on
    ``problem``, from the selection LP (module docstring: select-then-verify is the optimum on both, the delayed
    tree's selection being one per trunk and multiset of branches). ``depth_weights`` (w_1..w_L, L the tree's depth,
    default ones) maximises sum_d w_d P(tau >= d) instead, to see the depths trade off (``block_efficiency`` is still
    1 + sum_d P(tau >= d) of the maximiser). ProblemTooLargeError before the LP is built (and before the draft's
    law of full paths is tabulated when the prefixes alone are too many) when it would exceed ``limit`` variables."""
    start = time.monotonic()
    paths, trunk, tail = _trunk_iid(drafter)
    depth = trunk + tail
    weights = [1.0] * depth if depth_weights is None else [float(w) for w in depth_weights]
    if len(weights) != depth or not all(w >= 0 for w in weights):
        raise VerispecError(f"depth_weights must be {depth} non-negative numbers, got {depth_weights!r}")
    problem.require_depth(depth)
    size = problem.vocab_size
    what = f"the selection LP for {drafter.spec} at V={size}"
    num_prefixes = sum(size ** length for length in range(1, depth + 1))
    if num_prefixes > limit:
        raise ProblemTooLargeError(f"{what}: at least {num_prefixes:,} variables (one per prefix of length "
                                   f"1..{depth}), above the limit of {limit:,}; use a smaller vocabulary or tree, or "
                                   "raise the limit explicitly")
    joint_q, trunk_q, support, branches_of = _drafted_branches(problem, trunk, tail)
    estimate = sum(selection_lp_size(len(members), paths) for members in branches_of.values()) + num_prefixes
    if estimate > limit:
        widest = max(len(members) for members in branches_of.values())
        raise ProblemTooLargeError(f"{what}: about {estimate:,} variables ({len(branches_of)} trunks, each with up to "
                                   f"C({widest} + {paths} - 1, {paths}) multisets of drafted branches, and "
                                   f"{num_prefixes:,} prefixes), above the limit of {limit:,}; use a smaller "
                                   "vocabulary or tree, or raise the limit explicitly")
    prefixes = [u for length in range(1, depth + 1) for u in itertools.product(range(size), repeat=length)]
    prefix_index = {u: i for i, u in enumerate(prefixes)}
    sequence = [tuple(int(t) for t in np.unravel_index(int(flat), (size,) * depth)) for flat in support]
    columns, groups, probabilities = _multiset_columns(branches_of, trunk_q, joint_q, support, paths, what)
    multisets = len(probabilities)
    num_s, num_r = len(columns), len(prefixes)
    # rows: multiset totals (equalities); r(u) - g(u) <= 0; r(u t) - p(t|u) r(u) <= 0 and r(t) <= p(t)
    eq_rows = np.asarray([m for m, _ in columns])
    a_eq = sparse.csr_matrix((np.ones(num_s), (eq_rows, np.arange(num_s))), shape=(multisets, num_s + num_r))
    rows, cols, vals = [], [], []
    for i in range(num_r):
        rows.append(i), cols.append(num_s + i), vals.append(1.0)
    for column, (_, index) in enumerate(columns):
        path = sequence[index]
        for length in range(1, depth + 1):
            rows.append(prefix_index[path[:length]]), cols.append(column), vals.append(-1.0)
    b_ub = [0.0] * num_r
    conditional_rows = num_r
    target = {length: np.asarray(target_law(problem, length), dtype=np.float64) for length in range(1, depth + 1)}
    for i, u in enumerate(prefixes):
        row = conditional_rows + i
        rows.append(row), cols.append(num_s + i), vals.append(1.0)
        if len(u) == 1:
            b_ub.append(float(target[1][u]))
        else:
            parent = float(target[len(u) - 1][u[:-1]])
            step = float(target[len(u)][u]) / parent if parent > 0 else 0.0
            rows.append(row), cols.append(num_s + prefix_index[u[:-1]]), vals.append(-step)
            b_ub.append(0.0)
    a_ub = sparse.csr_matrix((vals, (rows, cols)), shape=(2 * num_r, num_s + num_r))
    objective = np.concatenate([np.zeros(num_s), [weights[len(u) - 1] for u in prefixes]])
    solution = solve_lp(objective, what=what, maximize=True, a_eq=a_eq, b_eq=np.asarray(probabilities),
                        a_ub=a_ub, b_ub=np.asarray(b_ub), groups=groups, limit=max(limit, num_s + num_r))
    r = solution.x[num_s:]
    acceptance = tuple(float(sum(r[prefix_index[u]] for u in prefixes if len(u) == length))
                       for length in range(1, depth + 1))
    selection = {}
    for column, (_, index) in enumerate(columns):
        selection[sequence[index]] = selection.get(sequence[index], 0.0) + float(solution.x[column])
    return SelectionOptimum(block_efficiency=1.0 + sum(acceptance), acceptance=acceptance, selection=selection,
                            num_variables=num_s + num_r, num_multisets=multisets, seconds=time.monotonic() - start)


def depth_bounds(problem: Problem, drafter: Drafter) -> tuple:
    """alpha*_d for d = 1..L: the K-draft OT value between the target's and the draft's laws of length-d sequences,
    a bound on P(tau >= d) for every valid verifier (module docstring). Exact for an exact problem."""
    paths, depth = _root_iid(drafter)
    return tuple(iid_ot_optimum(np.asarray(target_law(problem, length)).ravel(),
                                np.asarray(draft_law(problem, length)).ravel(), paths).alpha
                 for length in range(1, depth + 1))


@dataclass(frozen=True, eq=False)
class DraftedNodeBound:
    """The stacked program over ``problems`` (module docstring): ``joint`` = the largest sum of E[tau + 1] of a rule
    that sees only drafted nodes, ``efficiencies`` its terms at that optimum, ``optima`` each problem's own
    multi-step optimum, ``tied_trees`` the equalities' count; with ``certify``, ``exact`` holds the three proved
    in rationals (joint, optima)."""

    joint: float
    efficiencies: tuple[float, ...]
    optima: tuple[float, ...]
    tied_trees: int
    exact: dict | None = None

    @property
    def shortfall(self) -> float:
        """sum_i OPT_i - joint: at least this much of the optima is out of reach of every drafted-node rule."""
        return sum(self.optima) - self.joint


def _same_conditionals(first, second) -> bool:
    """Equal p and q at every node (leaves' undefined q included) of two DraftTrees of one shape."""
    if first.exact != second.exact:
        return False
    if first.exact:
        return (first.p == second.p).all() and all(a == b for a, b in zip(first.q.ravel(), second.q.ravel()))
    return np.array_equal(first.p, second.p) and np.array_equal(first.q, second.q, equal_nan=True)


@dataclass(frozen=True, eq=False)
class _StackedLP:
    """The stacked multi-step LPs with the ties, in ``MultiStepLP``'s form (for ``certify_optimum``)."""

    what: str
    rows: np.ndarray
    cols: np.ndarray
    values: np.ndarray
    b_eq: np.ndarray
    objective: np.ndarray
    num_columns: int

    @property
    def num_rows(self) -> int:
        return len(self.b_eq)


def _tied_columns(lps: list, offsets) -> list[tuple[np.ndarray, np.ndarray]]:
    """The ties of the drafted-node program: for every pair of problems and every tree that looks the same at all
    its nodes in both, its emission columns in the first and in the second (columns of the stacked LPs, ``offsets``
    being each LP's first), whose masses must be equal."""
    tied = []
    for i, j in itertools.combinations(range(len(lps)), 2):
        others = {tree.shape: (index, tree) for index, (tree, _) in enumerate(lps[j].outcomes)}
        for index, (tree, _) in enumerate(lps[i].outcomes):
            match = others.get(tree.shape)
            if match is None or not _same_conditionals(tree, match[1]):
                continue
            tied.append((np.arange(lps[i].first_column[index], lps[i].first_column[index + 1]) + offsets[i],
                         np.arange(lps[j].first_column[match[0]], lps[j].first_column[match[0] + 1]) + offsets[j]))
    return tied


def drafted_node_program(problems: list[Problem], drafter: Drafter, *, certify: bool = False,
                         limit: int = DEFAULT_MAX_VARIABLES) -> DraftedNodeBound:
    """The largest sum over ``problems`` of E[tau + 1] of one rule whose law on a tree may depend only on p and q at
    the tree's nodes (module docstring): the problems' multi-step LPs side by side, a tree's emission masses tied
    across two problems that agree at all its nodes (its probability Q(D) is then the same in both, so equal masses
    are equal laws). With ``certify`` (exact problems), the joint optimum and each problem's optimum are proved in
    rationals."""
    if len(problems) < 2:
        raise VerispecError("the drafted-node program compares at least two problems")
    lps = [build_multistep_lp(problem, drafter, limit=limit) for problem in problems]
    offsets = np.cumsum([0] + [lp.num_columns for lp in lps])
    row_offsets = np.cumsum([0] + [lp.num_rows for lp in lps])
    exact = all(problem.exact for problem in problems)
    dtype = object if exact else np.float64
    rows = [lp.rows + row_offsets[i] for i, lp in enumerate(lps)]
    cols = [lp.cols + offsets[i] for i, lp in enumerate(lps)]
    values = [np.asarray(lp.values, dtype=dtype) for lp in lps]
    b_eq = [np.asarray(lp.b_eq, dtype=dtype) for lp in lps]
    tied = _tied_columns(lps, offsets)
    next_row = row_offsets[-1]
    for first, second in tied:
        count = len(first)
        tie_rows = next_row + np.arange(count)
        rows += [tie_rows, tie_rows]
        cols += [first, second]
        values += [np.ones(count, dtype=dtype), -np.ones(count, dtype=dtype)]
        b_eq.append(np.zeros(count, dtype=dtype) if not exact else np.asarray([Fraction(0)] * count, dtype=object))
        next_row += count
    stacked = _StackedLP(what=f"the drafted-node program over {len(problems)} problems on {drafter.spec}",
                         rows=np.concatenate(rows), cols=np.concatenate(cols), values=np.concatenate(values),
                         b_eq=np.concatenate(b_eq), objective=np.concatenate([lp.objective for lp in lps]),
                         num_columns=int(offsets[-1]))
    matrix = sparse.csr_matrix((stacked.values.astype(np.float64), (stacked.rows, stacked.cols)),
                               shape=(stacked.num_rows, stacked.num_columns))
    solution = solve_lp(stacked.objective.astype(np.float64), what=stacked.what, maximize=True, a_eq=matrix,
                        b_eq=stacked.b_eq.astype(np.float64), limit=max(limit, stacked.num_columns))
    efficiencies = tuple(float(lp.objective @ solution.x[offsets[i]:offsets[i + 1]]) for i, lp in enumerate(lps))
    optima = [optimal_block_efficiency(problem, drafter, limit=limit, certify=certify) for problem in problems]
    proved = None
    if certify:
        from verispec.bounds.certificate import certify_optimum

        joint = certify_optimum(stacked, solution)
        proved = {"joint": joint.optimum, "optima": tuple(optimum.certificate.optimum for optimum in optima)}
    return DraftedNodeBound(joint=solution.objective, efficiencies=efficiencies,
                            optima=tuple(optimum.block_efficiency for optimum in optima), tied_trees=len(tied),
                            exact=proved)


def drafted_node_cvxpy(problems: list[Problem], drafter: Drafter, *, tied: bool = True, solver: str | None = None,
                       limit: int = DEFAULT_MAX_VARIABLES) -> float:
    """``drafted_node_program``'s optimum stated in cvxpy (the modelling layer of verifier classes,
    ``verispec.bounds.classes``): one variable vector per problem over its multi-step LP, the ties
    z_i[tree] == z_j[tree] as cvxpy constraints, solved by ``classes``' solver chain (HiGHS first). The class is not a
    ``ClassConstraints`` of one LP because it ties several problems' LPs. ``tied=False`` drops the ties: the sum of
    the problems' own optima."""
    if len(problems) < 2:
        raise VerispecError("the drafted-node program compares at least two problems")
    cp = require_cvxpy("the drafted-node program in cvxpy (drafted_node_cvxpy)")
    from verispec.bounds.classes import solve_program

    lps = [build_multistep_lp(problem, drafter, limit=limit) for problem in problems]
    offsets = np.cumsum([0] + [lp.num_columns for lp in lps])
    x = cp.Variable(int(offsets[-1]), nonneg=True, name="x")  # [z_1, F_1, z_2, F_2, ...]
    constraints = [lp.float_matrix() @ x[offsets[i]:offsets[i + 1]] == lp.b_eq.astype(np.float64)
                   for i, lp in enumerate(lps)]
    if tied:
        pairs = _tied_columns(lps, offsets)
        if pairs:
            first, second = (np.concatenate(side) for side in zip(*pairs))
            constraints.append(x[first] == x[second])
    objective = np.concatenate([lp.objective for lp in lps]).astype(np.float64)
    program = cp.Problem(cp.Maximize(objective @ x), constraints)
    solve_program(program, solver, f"the drafted-node program over {len(problems)} problems on {drafter.spec} in cvxpy")
    return float(program.value)


__all__ = ["DraftedNodeBound", "SelectionOptimum", "depth_bounds", "drafted_node_cvxpy", "drafted_node_program",
           "selection_lp_estimate", "selection_optimum"]
