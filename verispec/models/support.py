"""A problem restricted to its support: the exact tabular problem, over the few tokens that the target or the draft
can ever put mass on within a depth, of a problem whose vocabulary is too large to tabulate (a model pair at
V = 151,936).

Why it is exact. After top-k (or top-p) sampling each conditional keeps at most k tokens, so from a root only the
prefixes u whose every token lies in supp p(. | u') or supp q(. | u') at its parent u' carry mass under either law:
the *reachable* prefixes. ``restrict_to_support`` walks them breadth first to ``depth`` (the draft at prefixes of
length 0..depth-1, the target at 0..depth, as ``Problem`` asks: the target's law after a full block gives the bonus
token), computing each level's laws in one batched call (``ModelProblem.prepare``), and takes S, every token in
those supports. The restriction is the ``TabularProblem`` over V' = |S| tokens whose laws at the reachable prefixes
are the problem's own, read at S (no mass lies outside S there, by S's definition). Every other prefix of S^(<=
depth) leaves the reachable tree at some token that neither law can draw there: no draft tree ever holds it and no
lossless output emits it, so no verifier's output law or E[tau + 1] reads its laws with positive weight (the
exact engine weighs a node by its draft probability; the selection LP of ``verispec.bounds.path_selection`` bounds
r(u) by p(t | u') r(u') = 0 past such a token), and it gets the point mass on S's first token, a placeholder.
Efficiencies, optima and acceptance laws on the restriction are those of the full problem; the tests
(tests/bounds/test_real_context_gaps.py) compare the restriction's laws with the model problem's at every reachable
prefix, and the optimum on it with the multi-step LP.

The restriction's size: the reachable tree has at most sum_d (2k)^d prefixes (k from top-k), and the table V'^d
entries a depth; both are checked against limits before the work (``ProblemTooLargeError``, naming the size)."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import numpy as np

from verispec.errors import ProblemTooLargeError, VerispecError
from verispec.simulator.problems import Prefix, Problem, TabularProblem

#: Most reachable prefixes (each two laws from the models) a restriction computes by default.
DEFAULT_MAX_REACHABLE = 1 << 16
#: Most prefixes of the restricted table (sum over lengths 0..depth of V'^length) by default.
DEFAULT_MAX_TABLE = 1 << 18


@dataclass(frozen=True, eq=False)
class SupportRestriction:
    """``problem``: the ``TabularProblem`` over ``tokens`` (restricted id i is the full problem's token
    ``tokens[i]``), horizon ``depth``; ``reachable``: the prefixes (full ids) whose laws are the full problem's,
    by length (``reachable[d]`` those of length d); ``table_prefixes``: the table's prefixes, reachable or not."""

    problem: TabularProblem
    tokens: tuple[int, ...]
    depth: int
    reachable: tuple[tuple[Prefix, ...], ...] = field(repr=False)
    table_prefixes: int = 0

    @property
    def vocab_size(self) -> int:
        return len(self.tokens)

    def restricted(self, prefix) -> Prefix:
        """A prefix of full token ids in the restriction's ids (VerispecError for a token outside S)."""
        index = {token: i for i, token in enumerate(self.tokens)}
        try:
            return tuple(index[int(token)] for token in prefix)
        except KeyError as error:
            raise VerispecError(f"token {error.args[0]} is outside the restriction's support of "
                                f"{len(self.tokens)} tokens") from None


def _support(law) -> np.ndarray:
    """The token ids of positive mass of a ``CompactLaw``."""
    support, values = law
    if support is None:
        return np.flatnonzero(np.asarray(values) > 0)
    return np.asarray(support)[np.asarray(values) > 0]


def _prepare(problem: Problem, prefixes: list, *, draft: bool) -> None:
    """One batched computation of a level's laws where the problem offers it (``ModelProblem.prepare``)."""
    prepare = getattr(problem, "prepare", None)
    if prepare is not None and prefixes:
        prepare(prefixes, draft=draft)


def reachable_tree(problem: Problem, depth: int, *, max_reachable: int = DEFAULT_MAX_REACHABLE):
    """(levels, tokens): the reachable prefixes by length 0..depth (module docstring) and S, the sorted tokens of
    positive target or draft mass at them (the target's at length ``depth`` included). ProblemTooLargeError when a
    level would pass ``max_reachable`` prefixes in all, before its laws are computed."""
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 0:
        raise VerispecError(f"depth must be a non-negative integer, got {depth!r}")
    problem.require_depth(depth)
    levels: list[list[Prefix]] = [[()]]
    tokens: set[int] = set()
    count = 1
    for length in range(depth + 1):
        frontier = levels[-1]
        last = length == depth
        _prepare(problem, frontier, draft=not last)
        children: list[Prefix] = []
        for prefix in frontier:
            kept = set(_support(problem.target_compact(prefix)).tolist())
            if not last:
                kept |= set(_support(problem.draft_compact(prefix)).tolist())
                children.extend(prefix + (int(token),) for token in sorted(kept))
            tokens |= kept
        if not last:
            count += len(children)
            if count > max_reachable:
                raise ProblemTooLargeError(f"restricting the problem to its support to depth {depth}: at least "
                                           f"{count:,} reachable prefixes, above the limit of {max_reachable:,}; use a "
                                           "narrower sampling (top-k, top-p) or a smaller depth")
            levels.append(children)
    return levels, sorted(tokens)


def table_prefixes(size: int, depth: int) -> int:
    """The prefixes of a restricted table over ``size`` tokens to ``depth``: sum of size^l over lengths 0..depth."""
    return sum(size ** length for length in range(depth + 1))


def restrict_to_support(problem: Problem, depth: int, *, max_reachable: int = DEFAULT_MAX_REACHABLE,
                        max_table: int = DEFAULT_MAX_TABLE, reachable=None) -> SupportRestriction:
    """The exact tabular problem of ``problem`` over its support to ``depth`` (module docstring): the target at
    every prefix of length 0..depth and the draft at 0..depth-1 over V' tokens, the full problem's laws at the
    reachable prefixes, a placeholder elsewhere. ProblemTooLargeError (one line, the size) past ``max_reachable``
    reachable prefixes or ``max_table`` table prefixes. ``reachable``: ``reachable_tree``'s (levels, tokens) for
    this problem and depth, when the caller has them already."""
    levels, tokens = reachable or reachable_tree(problem, depth, max_reachable=max_reachable)
    size = len(tokens)
    table = table_prefixes(size, depth)
    if table > max_table:
        raise ProblemTooLargeError(f"the restriction to the support at depth {depth}: {size} tokens, {table:,} table "
                                   f"prefixes, above the limit of {max_table:,}; use a narrower sampling or a smaller "
                                   "depth")
    index = {token: i for i, token in enumerate(tokens)}
    placeholder = np.zeros(size)
    placeholder[0] = 1.0
    placeholder.setflags(write=False)

    def restricted(law, where: str) -> np.ndarray:
        full_support, values = law
        if full_support is None:
            full_support = np.flatnonzero(np.asarray(values) > 0)
            values = np.asarray(values)[full_support]
        out = np.zeros(size)
        for token, value in zip(np.asarray(full_support).tolist(), np.asarray(values, dtype=np.float64).tolist()):
            if value > 0:
                if token not in index:  # cannot happen: S holds every supported token of a reachable prefix
                    raise VerispecError(f"the {where} puts mass on token {token} outside the support")
                out[index[token]] = value
        out.setflags(write=False)
        return out

    target_table: dict[Prefix, np.ndarray] = {}
    draft_table: dict[Prefix, np.ndarray] = {}
    for length, level in enumerate(levels):
        for prefix in level:
            key = tuple(index[token] for token in prefix)
            target_table[key] = restricted(problem.target_compact(prefix), f"target at {prefix}")
            if length < depth:
                draft_table[key] = restricted(problem.draft_compact(prefix), f"draft at {prefix}")
    for length in range(depth + 1):
        for key in itertools.product(range(size), repeat=length):
            target_table.setdefault(key, placeholder)
            if length < depth:
                draft_table.setdefault(key, placeholder)
    tabular = TabularProblem(size, target_table, draft_table, horizon=depth)
    return SupportRestriction(tabular, tuple(tokens), depth, tuple(tuple(level) for level in levels), table)


__all__ = ["DEFAULT_MAX_REACHABLE", "DEFAULT_MAX_TABLE", "SupportRestriction", "reachable_tree",
           "restrict_to_support"]
