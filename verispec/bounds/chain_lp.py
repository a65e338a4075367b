"""The multi-step LP on a single draft path, in its information-agnostic form with the block masses eliminated:
one variable per output prefix, one row per edge of the prefix tree (docs/guides/verifier_classes.md, "The multi-step
LP on a single path").

On a single path the LP over every draft outcome (``multistep.build_multistep_lp``: V^L outcomes x (L+1) nodes x
V emissions, plus flows) equals the LP over the law of the emitted block alone (``classes``, the capacities are
Hall's condition in full there). In that form the losslessness flows F(u) (the mass of outputs starting with u
whose emitted block has at most |u| tokens) determine every block mass:

    M(t) = F(t),   M(u t) = F(u t) - p(t | u) F(u)  (|u t| <= L),   M(u t) = p(t | u) (p(u) - F(u))  (|u t| = L + 1),

and the mass of blocks that accept at least u is A(u) = p(u) - F(u) (outputs starting with u come from blocks of at
most |u| tokens, counted in F(u), or from longer blocks starting with u). So the LP is

    minimise  sum_u F(u)   subject to   max(0, p(u) - Q(u)) <= F(u) <= p(u),   F(u t) >= p(t | u) F(u),

over the prefixes u of lengths 1..L (Q: the draft's law of u), and E[tau + 1] = 1 + sum_u (p(u) - F(u)): the
capacity A(u) <= Q(u) became a lower bound, M >= 0 the edge rows and the upper bounds. HiGHS solves it (the
bound); its minimum is also the componentwise least feasible point, F(u) = max(0, p(u) - Q(u), p(t | u') F(u')) top
down (every constraint bounds F(u) from below by its parent, and that point meets the upper bounds), which the
solution must match to 1e-9 (a second derivation). The rational certificate follows from complementary
slackness bottom up (``certify_chain``). The optimal verifier is rebuilt from the block masses by sending each
cone's mass to the outcomes in it in proportion to what they have left (``_chain_laws``).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import numpy as np
from scipy import sparse

from verispec.errors import ProblemTooLargeError, SolverError
from verispec.lp_analysis.solve import DEFAULT_MAX_VARIABLES, MARGINAL_TOLERANCE, solve_lp
from verispec.simulator.problems import Problem, draft_law, target_conditionals, target_law
from verispec.sizes import log_prefix_count, readable_count

#: Largest number of prefixes (V + ... + V^L) whose optimal verifier is tabulated: its law per draft outcome has
#: V^L x (L + 1) x V entries.
MAX_TABULATED_ENTRIES = 50_000_000


@dataclass(frozen=True)
class ChainCertificate:
    """The exact optimum on a single path with its proof: the least feasible point ``flows`` (F), the dual values of
    the lower bounds (``bound_duals``) and of the edge rows (``edge_duals``), one per prefix in level order."""

    optimum: Fraction
    flows: tuple
    bound_duals: tuple
    edge_duals: tuple

    def to_json(self) -> dict:
        return {"optimum": str(self.optimum), "optimum_float": float(self.optimum), "primal_support": len(self.flows),
                "dual_rows": 2 * len(self.flows), "form": "single path, flows only"}


def chain_tables(problem: Problem, depth: int) -> tuple[list, list, list]:
    """(p(u), Q(u), p(t | u)) flat by level: the joint laws of the prefixes of lengths 1..L, and the conditionals
    after prefixes of lengths 1..L (the edge coefficients, k < L, and after a full path, k = L, which split the
    final blocks), in the problem's number type."""
    levels = range(1, depth + 1)
    return ([target_law(problem, k).ravel() for k in levels], [draft_law(problem, k).ravel() for k in levels],
            [target_conditionals(problem, k).ravel() for k in levels])


def least_flows(target: list, draft: list, conditional: list, size: int) -> list:
    """The componentwise least feasible F, level by level (module docstring); exact in the arrays' number type."""
    flows = []
    for level, (p, q) in enumerate(zip(target, draft)):
        lower = np.maximum(p - q, 0 * p)
        if level:
            inherited = np.repeat(flows[-1], size) * conditional[level - 1]
            lower = np.maximum(lower, inherited)
        flows.append(lower)
    return flows


def estimate_chain_lp(problem: Problem, depth: int, *, limit: int) -> int:
    """The reduced LP's variables (V + ... + V^L), refused past ``limit`` before anything is built."""
    size = problem.vocab_size
    log_count = log_prefix_count(size, 1, depth)
    if log_count > np.log(limit) or sum(size ** length for length in range(1, depth + 1)) > limit:
        raise ProblemTooLargeError(f"the multi-step LP on chain:{depth} at V={size} would have "
                                   f"{readable_count(log_count)} variables (one per output prefix of length "
                                   f"1..{depth}), above the limit of {limit:,}; use a smaller vocabulary or a shorter "
                                   "chain")
    return sum(size ** length for length in range(1, depth + 1))


def solve_chain_lp(problem: Problem, depth: int, *, limit: int = DEFAULT_MAX_VARIABLES):
    """(E[tau + 1], F by level, the target and draft prefix laws by level) of the reduced single-path LP, solved by
    HiGHS and checked against the least feasible point."""
    size = problem.vocab_size
    count = estimate_chain_lp(problem, depth, limit=limit)  # in logs first: V^L may be astronomically large
    target, draft, conditional = chain_tables(problem, depth)
    p = np.concatenate(target).astype(np.float64)
    q = np.concatenate(draft).astype(np.float64)
    offsets = np.cumsum([0] + [size ** length for length in range(1, depth + 1)])
    rows, cols, values = [], [], []
    row = 0
    for level in range(1, depth):
        parents = offsets[level - 1] + np.repeat(np.arange(size ** level), size)
        children = offsets[level] + np.arange(size ** (level + 1))
        edge = row + np.arange(children.size)
        rows += [edge, edge]
        cols += [children, parents]
        values += [-np.ones(children.size), conditional[level - 1].astype(np.float64)]  # p F(u) - F(u t) <= 0
        row += children.size
    a_ub = sparse.csr_matrix((np.concatenate(values), (np.concatenate(rows), np.concatenate(cols))),
                             shape=(row, count)) if row else None
    lower = np.maximum(p - q, 0.0)
    bounds = np.stack([lower, np.maximum(p, lower)], axis=1)
    what = f"multi-step LP on chain:{depth} at V={size} (single-path form)"
    solution = solve_lp(np.ones(count), what=what, a_ub=a_ub, b_ub=np.zeros(row) if row else None,
                        bounds=bounds, limit=limit)
    least = np.concatenate(least_flows(target, draft, conditional, size)).astype(np.float64)
    if np.abs(solution.x - least).max(initial=0.0) > MARGINAL_TOLERANCE:
        raise SolverError(f"{what}: HiGHS's solution differs from the least feasible point by "
                          f"{np.abs(solution.x - least).max():.3g}")
    flows = [solution.x[offsets[k]:offsets[k + 1]] for k in range(depth)]
    efficiency = 1.0 + float((p - solution.x).sum())
    return efficiency, flows, target, draft, conditional


def certify_chain(target: list, draft: list, conditional: list, size: int) -> ChainCertificate:
    """The exact optimum on a single path of an exact problem, proved by a primal point and a dual solution that
    meet every constraint exactly and have equal objectives (module docstring): the dual value of a prefix's row
    that holds F(u) at its value (its lower bound, else its parent's edge) is 1 + sum_t p(t | u) mu(u t).
    ``target``, ``draft``, ``conditional``: ``chain_tables`` of the exact problem."""
    depth = len(target)
    flows = least_flows(target, draft, conditional, size)
    zero = Fraction(0)
    bound_duals, edge_duals = [None] * depth, [None] * depth
    below = None  # edge duals of the next level
    for level in range(depth - 1, -1, -1):
        carried = np.zeros(size ** (level + 1), dtype=object) + zero
        if below is not None:
            carried = carried + (conditional[level] * below).reshape(-1, size).sum(axis=1)
        lower = np.maximum(target[level] - draft[level], zero)
        at_bound = flows[level] == lower
        if level == 0:
            at_bound = np.ones_like(at_bound, dtype=bool)  # no edge above the first level
        total = carried + 1
        bound_duals[level] = np.where(at_bound, total, zero)
        edge_duals[level] = np.where(at_bound, zero, total)
        below = edge_duals[level]
    _check_chain(target, draft, conditional, flows, bound_duals, edge_duals, size)
    primal = sum((f.sum() for f in flows), zero)
    optimum = 1 + sum((t.sum() for t in target), zero) - primal
    return ChainCertificate(optimum=Fraction(optimum), flows=tuple(np.concatenate(flows)),
                            bound_duals=tuple(np.concatenate(bound_duals)),
                            edge_duals=tuple(np.concatenate(edge_duals)))


def _check_chain(target, draft, conditional, flows, bound_duals, edge_duals, size) -> None:
    """Every condition of the single-path certificate, exactly; CertificateError naming the first that fails."""
    from verispec.bounds.certificate import CertificateError

    zero = Fraction(0)
    depth = len(target)
    for level in range(depth):
        lower = np.maximum(target[level] - draft[level], zero)
        if (flows[level] < lower).any() or (flows[level] > target[level]).any():
            raise CertificateError(f"chain certificate: a flow of level {level + 1} is outside its bounds")
        if level and (flows[level] < np.repeat(flows[level - 1], size) * conditional[level - 1]).any():
            raise CertificateError(f"chain certificate: an edge row into level {level + 1} is violated")
        if (bound_duals[level] < 0).any() or (edge_duals[level] < 0).any():
            raise CertificateError(f"chain certificate: a negative dual value at level {level + 1}")
        # dual row of F(u): lambda(u) + mu(u) - sum_t p(t | u) mu(u t) <= 1 (minimisation, F >= 0)
        outgoing = ((conditional[level] * edge_duals[level + 1]).reshape(-1, size).sum(axis=1) if level + 1 < depth
                    else np.zeros(size ** (level + 1), dtype=object) + zero)
        if (bound_duals[level] + edge_duals[level] - outgoing > 1).any():
            raise CertificateError(f"chain certificate: a dual constraint of level {level + 1} is violated")
        if level == 0 and any(value != 0 for value in edge_duals[0]):
            raise CertificateError("chain certificate: the first level has no edge rows")
    primal = sum((f.sum() for f in flows), zero)
    dual = sum(((np.maximum(t - d, zero) * b).sum() for t, d, b in zip(target, draft, bound_duals)), zero)
    if primal != dual:
        raise CertificateError(f"chain certificate: primal {float(primal)!r} and dual {float(dual)!r} differ")


def chain_laws(flows: list, target: list, draft: list, conditional: list, size: int, depth: int) -> dict:
    """Tree shape -> emission law [L + 1, V] of the optimal verifier: the block masses from F (module docstring),
    each cone's mass at its depth sent to the outcomes in it in proportion to their remaining probability (Hall's
    condition on nested cones guarantees the remainder suffices), deepest cones first."""
    entries = size ** depth * (depth + 1) * size
    if entries > MAX_TABULATED_ENTRIES:
        raise ProblemTooLargeError(f"the optimal verifier on chain:{depth} at V={size} has {entries:,} entries, above "
                                   f"{MAX_TABULATED_ENTRIES:,}; the optimum itself is computed without it")
    flows = [np.asarray(f, dtype=np.float64) for f in flows]
    target = [np.asarray(t, dtype=np.float64) for t in target]
    conditional = [np.asarray(c, dtype=np.float64) for c in conditional]
    remaining = np.asarray(draft[-1], dtype=np.float64).copy()  # [V^L] outcome probabilities Q(D)
    law = np.zeros((size ** depth, depth + 1, size))  # [outcome, node depth, token]
    for level in range(depth, -1, -1):  # blocks whose accepted part has `level` tokens
        if level == depth:  # M(u t) = p(t | u) (p(u) - F(u))
            blocks = ((target[depth - 1] - flows[depth - 1])[:, None]
                      * conditional[depth - 1].reshape(-1, size))
        elif level == 0:  # M(t) = F(t)
            blocks = flows[0].reshape(1, size)
        else:  # M(u t) = F(u t) - p(t | u) F(u)
            blocks = (flows[level] - np.repeat(flows[level - 1], size) * conditional[level - 1]).reshape(-1, size)
        blocks = np.maximum(blocks, 0.0)  # [V^level, V]
        cones = remaining.reshape(size ** level, -1)  # [V^level, V^(L - level)]
        available = cones.sum(axis=1)
        needed = blocks.sum(axis=1)
        share = np.divide(needed, available, out=np.zeros_like(needed), where=available > 0)
        taken = cones * np.minimum(share, 1.0)[:, None]
        direction = np.divide(blocks, needed[:, None], out=np.zeros_like(blocks), where=needed[:, None] > 0)
        law[:, level, :] = (taken[:, :, None] * direction[:, None, :]).reshape(size ** depth, size)
        remaining = (cones - taken).ravel()
    laws = {}
    for outcome, path in enumerate(np.ndindex(*(size,) * depth)):
        probability = float(np.asarray(draft[-1][outcome], dtype=np.float64))
        if probability <= 0:
            continue
        shape = tuple((token,) for token in path) + ((),)
        row = law[outcome]
        laws[shape] = row / row.sum()
    return laws
