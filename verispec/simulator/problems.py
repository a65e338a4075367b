"""Problems: the target law p and the draft law q as conditionals over a vocabulary of size V.

A problem answers ``target(prefix)`` and ``draft(prefix)`` with probability vectors of length V, for every
prefix (a tuple of token ids) up to its horizon: the target is needed for prefixes of length 0..L (the
bonus token after L accepted drafts), the draft for lengths 0..L-1.

``state(prefix)`` names what the conditionals depend on (the whole prefix by default; nothing for a
context-independent problem; the last token for a Markov problem). Engines that memoise may key on it.

Here: the ``Problem`` contract, its kinds (context-free, Markov, tabular, shifted) and the joint laws they define
(``target_law``, ``draft_law``). Synthetic problems are made in ``verispec.simulator.generators``, problem files
read and written in ``verispec.simulator.problem_files``; the size limits live in ``verispec.sizes``.
"""

from __future__ import annotations

import itertools
import math
from abc import ABC, abstractmethod
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field

import numpy as np

from verispec.errors import InvalidProblemError, describe
from verispec.simulator.distributions import as_distribution
from verispec.sizes import check_vocab_size

Prefix = tuple[int, ...]
#: A law over V tokens as (support, values): the positive entries' ids [n] int64 and probabilities [n] float64, or
#: (None, the whole [V] vector) when over half of it is positive.
CompactLaw = tuple[np.ndarray | None, np.ndarray]


def compact_law(law) -> CompactLaw:
    """A probability vector [V] as a ``CompactLaw``, float64 (a law after top-k or top-p keeps a few of Qwen's
    151,936 tokens: its support and values take 16 bytes a kept token instead of 8 a token of the vocabulary)."""
    law = np.asarray(law, dtype=np.float64)
    if 2 * np.count_nonzero(law) > len(law):  # a dense law: no [V] index array made only to be dropped
        return None, law
    support = np.flatnonzero(law)
    return support, law[support]


def expand_law(compact: CompactLaw, vocab_size: int) -> np.ndarray:
    """The [V] float64 vector of a ``CompactLaw`` (a new array)."""
    support, values = compact
    if support is None:
        return np.array(values, dtype=np.float64)
    law = np.zeros(vocab_size)
    law[support] = values
    return law


class Problem(ABC):
    """Target and draft conditionals by prefix. Subclasses are immutable."""

    vocab_size: int
    exact: bool

    #: Longest prefix with a target conditional (None: unbounded). The draft is given up to horizon - 1.
    horizon: int | None

    @abstractmethod
    def target(self, prefix: Prefix) -> np.ndarray:
        """p(. | prefix), shape [V]."""

    @abstractmethod
    def draft(self, prefix: Prefix) -> np.ndarray:
        """q(. | prefix), shape [V]."""

    def target_compact(self, prefix: Prefix) -> CompactLaw:
        """``target(prefix)`` as ``compact_law`` gives it (a problem that stores its laws compactly returns them
        without building the [V] vector)."""
        return compact_law(self.target(prefix))

    def draft_compact(self, prefix: Prefix) -> CompactLaw:
        """``draft(prefix)`` as ``compact_law`` gives it."""
        return compact_law(self.draft(prefix))

    def prepare_drafts(self, prefixes) -> None:
        """A hint from a drafter: ``draft(prefix)`` is about to be asked for each of these prefixes (one level
        of a tree). Tables ignore it; a problem backed by a draft model computes them in one forward pass."""
        return None

    def state(self, prefix: Prefix) -> Hashable:
        """A key such that equal keys give equal conditionals (default: the prefix itself).

        It must be Markov: state(prefix + (t,)) is a function of state(prefix) and t, so that engines may
        memoise on it (context-free: one state; order-1 Markov: the last token)."""
        return prefix

    def log_state_count(self, length: int) -> float:
        """Natural log of an upper bound on the number of distinct ``state`` values of prefixes of this length
        (every one of the V^length prefixes by default): engines that memoise on ``state`` estimate their size
        with it before any work (``verispec.simulator.dp.check_walk_size``)."""
        return length * math.log(self.vocab_size)

    def draft_support_bound(self) -> int:
        """An upper bound on the tokens any draft conditional puts positive mass on (V by default): the walk DP
        enumerates a node's draw lists over the drafted tokens only, and sizes that work with it before any work
        (``verispec.simulator.dp.check_walk_size``)."""
        return self.vocab_size

    def require_depth(self, depth: int) -> None:
        """Raise InvalidProblemError unless the problem covers draft trees of this depth."""
        if self.horizon is not None and depth > self.horizon:
            raise InvalidProblemError(
                f"the problem gives target conditionals up to prefix length {self.horizon}, "
                f"so it supports draft trees of depth at most {self.horizon}; the tree needs depth {depth}")

    def prefixes(self, length: int):
        """Every prefix of the given length, in lexicographic order."""
        return itertools.product(range(self.vocab_size), repeat=length)


class ShiftedProblem(Problem):
    """``base`` continued after a fixed ``prefix`` s: ``target(u)`` = p(. | s + u), ``draft(u)`` = q(. | s + u),
    the state and the batched preparation likewise (a model-backed problem still computes a level in one forward
    pass); the horizon shrinks by len(s). What a block that starts after s sees: the selector's roots and the
    exact law of blockwise policies (``verispec.policy``) both analyse blocks on it."""

    def __init__(self, base: Problem, prefix: Prefix):
        self.base = base
        self.prefix = tuple(int(token) for token in prefix)
        self.vocab_size = base.vocab_size
        self.exact = base.exact
        self.horizon = None if base.horizon is None else base.horizon - len(self.prefix)
        if self.horizon is not None and self.horizon < 0:
            raise InvalidProblemError(f"a prefix of length {len(self.prefix)} is beyond the problem's horizon "
                                      f"{base.horizon}")
        if hasattr(base, "prepare"):  # a model-backed problem: batched p and q, and a bounded law cache
            self.prepare = self._prepare
            self.cache_capacity = base.cache_capacity
        if hasattr(base, "largest_law_entries"):
            self.largest_law_entries = base.largest_law_entries
        if hasattr(base, "extend_drafts"):  # q alone, the draft fed only the nodes it has not seen
            self.extend_drafts = self._extend_drafts

    def target(self, prefix: Prefix) -> np.ndarray:
        return self.base.target(self.prefix + tuple(prefix))

    def draft(self, prefix: Prefix) -> np.ndarray:
        return self.base.draft(self.prefix + tuple(prefix))

    def target_compact(self, prefix: Prefix) -> CompactLaw:  # a model problem's stored laws, never made [V]
        return self.base.target_compact(self.prefix + tuple(prefix))

    def draft_compact(self, prefix: Prefix) -> CompactLaw:
        return self.base.draft_compact(self.prefix + tuple(prefix))

    def _prepare(self, prefixes, **models) -> None:
        self.base.prepare([self.prefix + tuple(prefix) for prefix in prefixes], **models)

    def _extend_drafts(self, prefixes) -> None:
        self.base.extend_drafts([self.prefix + tuple(prefix) for prefix in prefixes])

    def prepare_drafts(self, prefixes) -> None:
        self.base.prepare_drafts([self.prefix + tuple(prefix) for prefix in prefixes])

    def state(self, prefix: Prefix) -> Hashable:
        return self.base.state(self.prefix + tuple(prefix))

    def log_state_count(self, length: int) -> float:
        return min(self.base.log_state_count(len(self.prefix) + length), length * math.log(self.vocab_size))

    def draft_support_bound(self) -> int:
        return self.base.draft_support_bound()


def target_conditionals(problem: Problem, length: int) -> np.ndarray:
    """p(. | prefix) for every prefix of the given length, shape (V,)*length + (V,)."""
    return _conditionals(problem, length, problem.target)


def draft_conditionals(problem: Problem, length: int) -> np.ndarray:
    """q(. | prefix) for every prefix of the given length, shape (V,)*length + (V,)."""
    return _conditionals(problem, length, problem.draft)


def target_law(problem: Problem, length: int) -> np.ndarray:
    """The target's joint law of the first ``length`` tokens, shape (V,)*length."""
    return _joint(problem, length, target_conditionals)


def draft_law(problem: Problem, length: int) -> np.ndarray:
    """The draft's joint law of the first ``length`` tokens (a single draft path), shape (V,)*length."""
    return _joint(problem, length, draft_conditionals)


def _conditionals(problem: Problem, length: int, law) -> np.ndarray:
    """Every prefix's law, one call each (a few microseconds apiece: 3^16 prefixes are minutes), so the time
    budget (``verispec.guard.budget``: a sweep's --cell-timeout) is checked every 4,096 prefixes."""
    from verispec.guard import budget

    size = problem.vocab_size
    table = np.empty((size,) * length + (size,), dtype=object if problem.exact else np.float64)
    for index, prefix in enumerate(problem.prefixes(length)):
        if not index & 4095:
            budget.check("tabulating the problem's laws")
        table[prefix] = law(prefix)
    return table


def _joint(problem: Problem, length: int, conditionals) -> np.ndarray:
    joint = conditionals(problem, 0)
    for depth in range(1, length):
        joint = joint[..., None] * conditionals(problem, depth)
    return joint


def _check_prefix(prefix, vocab_size: int) -> Prefix:
    prefix = tuple(int(t) for t in prefix)
    for token in prefix:
        if not 0 <= token < vocab_size:
            raise InvalidProblemError(f"prefix {prefix} has token {token} outside the vocabulary 0..{vocab_size - 1}")
    return prefix


@dataclass(frozen=True, eq=False)
class ContextFreeProblem(Problem):
    """p and q do not depend on the prefix (the classic single-distribution toy problems)."""

    p: np.ndarray
    q: np.ndarray
    exact: bool = False
    horizon: int | None = None

    def __post_init__(self):
        exact = self.exact
        p = as_distribution(self.p, exact=exact, name="target")
        q = as_distribution(self.q, exact=exact, name="draft", size=len(p))
        object.__setattr__(self, "p", p)
        object.__setattr__(self, "q", q)

    @property
    def vocab_size(self) -> int:
        return len(self.p)

    def target(self, prefix: Prefix) -> np.ndarray:
        return self.p

    def draft(self, prefix: Prefix) -> np.ndarray:
        return self.q

    def state(self, prefix: Prefix) -> Hashable:
        return ()

    def log_state_count(self, length: int) -> float:
        return 0.0

    def draft_support_bound(self) -> int:
        return _positive_count(self.q)


@dataclass(frozen=True, eq=False)
class MarkovProblem(Problem):
    """Conditionals depend only on the last token (order-1 Markov chains for target and draft).

    ``target_initial``/``draft_initial`` are the laws at the root, ``target_transition[a]`` the target's
    law after token a (rows are distributions), likewise for the draft.
    """

    target_initial: np.ndarray
    draft_initial: np.ndarray
    target_transition: np.ndarray
    draft_transition: np.ndarray
    exact: bool = False
    horizon: int | None = None

    def __post_init__(self):
        exact = self.exact
        p0 = as_distribution(self.target_initial, exact=exact, name="target at the root")
        size = len(p0)
        q0 = as_distribution(self.draft_initial, exact=exact, name="draft at the root", size=size)
        rows = {}
        for name, table in (("target", self.target_transition), ("draft", self.draft_transition)):
            table = np.asarray(table, dtype=object if exact else np.float64)
            if table.shape != (size, size):
                raise InvalidProblemError(f"{name} transition must have shape ({size}, {size}), got {table.shape}")
            rows[name] = np.stack([as_distribution(table[a], exact=exact, name=f"{name} after token {a}", size=size)
                                   for a in range(size)])
            rows[name].setflags(write=False)
        object.__setattr__(self, "target_initial", p0)
        object.__setattr__(self, "draft_initial", q0)
        object.__setattr__(self, "target_transition", rows["target"])
        object.__setattr__(self, "draft_transition", rows["draft"])

    @property
    def vocab_size(self) -> int:
        return len(self.target_initial)

    def target(self, prefix: Prefix) -> np.ndarray:
        return self.target_transition[prefix[-1]] if prefix else self.target_initial

    def draft(self, prefix: Prefix) -> np.ndarray:
        return self.draft_transition[prefix[-1]] if prefix else self.draft_initial

    def state(self, prefix: Prefix) -> Hashable:
        return prefix[-1] if prefix else None

    def log_state_count(self, length: int) -> float:
        return math.log(self.vocab_size) if length else 0.0


class CheckedRows(dict):
    """Prefix -> read-only float64 row, every row already a valid distribution (checked in bulk by the float reading
    of problem files, ``verispec.simulator.problem_files``); ``depth``: the table holds exactly every prefix of length
    0..depth when known (a file in ``problem_to_json``'s layout)."""

    depth: int | None = None


@dataclass(frozen=True, eq=False)
class TabularProblem(Problem):
    """Explicit tables: a target and a draft distribution for every prefix up to the horizon.

    ``target_table`` must hold every prefix of length 0..horizon and ``draft_table`` every prefix of
    length 0..horizon-1 (more is allowed); ``horizon`` is inferred as the largest complete target depth.
    """

    vocab_size: int
    target_table: Mapping[Prefix, np.ndarray]
    draft_table: Mapping[Prefix, np.ndarray]
    exact: bool = False
    horizon: int | None = field(default=None)

    def __post_init__(self):
        try:
            size = int(self.vocab_size)
        except (TypeError, ValueError, OverflowError):
            size = 0
        if size < 1 or size != self.vocab_size:
            raise InvalidProblemError(f"vocab_size must be a positive integer, got {describe(self.vocab_size)}")
        check_vocab_size(size, "vocab_size")
        tables, depths = {}, {}
        for name, table in (("target", self.target_table), ("draft", self.draft_table)):
            if isinstance(table, CheckedRows):  # validated in bulk (float problem files)
                tables[name], depths[name] = dict(table), table.depth
                continue
            checked = {}
            for prefix, values in table.items():
                prefix = _check_prefix(prefix, size)
                label = ",".join(map(str, prefix))
                vector = as_distribution(values, exact=self.exact, name=f"{name} at prefix '{label}'", size=size)
                checked[prefix] = vector
            tables[name] = checked
        horizon = depths.get("target")
        if horizon is None:
            horizon = _complete_depth(tables["target"], size)
        if horizon < 0:
            raise InvalidProblemError("the target table has no entry for the root prefix ''")
        draft_depth = depths.get("draft")
        if draft_depth is None:
            draft_depth = _complete_depth(tables["draft"], size)
        # The draft must cover one level less than the target: horizon = min(target depth, draft depth + 1).
        horizon = min(horizon, draft_depth + 1)
        requested = self.horizon
        object.__setattr__(self, "vocab_size", size)
        object.__setattr__(self, "target_table", tables["target"])
        object.__setattr__(self, "draft_table", tables["draft"])
        object.__setattr__(self, "horizon", horizon)
        if requested is not None:
            self.require_depth(requested)  # raises, naming the first missing prefix, if the tables fall short
            object.__setattr__(self, "horizon", requested)

    def target(self, prefix: Prefix) -> np.ndarray:
        try:
            return self.target_table[tuple(prefix)]
        except KeyError:
            raise InvalidProblemError(
                f"the problem has no target distribution at prefix '{prefix_label(prefix)}'") from None

    def draft(self, prefix: Prefix) -> np.ndarray:
        try:
            return self.draft_table[tuple(prefix)]
        except KeyError:
            raise InvalidProblemError(
                f"the problem has no draft distribution at prefix '{prefix_label(prefix)}'") from None

    def draft_support_bound(self) -> int:
        bound = self.__dict__.get("_draft_support_bound")
        if bound is None:  # the tables are immutable: counted once
            bound = max((_positive_count(row) for row in self.draft_table.values()), default=self.vocab_size)
            object.__setattr__(self, "_draft_support_bound", bound)
        return bound

    def require_depth(self, depth: int) -> None:
        if depth > self.horizon:
            target_missing = _missing_at(self.target_table, self.vocab_size, depth)
            draft_missing = _missing_at(self.draft_table, self.vocab_size, depth - 1)
            detail = (f"target at prefix '{target_missing}'" if target_missing is not None
                      else f"draft at prefix '{draft_missing}'")
            raise InvalidProblemError(
                f"the tree needs depth {depth} but the problem covers depth {self.horizon}: "
                f"missing the {detail} (give the target for every prefix of length 0..L and the draft for 0..L-1)")


def prefix_label(prefix) -> str:
    """A prefix as problem files and messages write it: comma-joined token ids ("" for the root)."""
    return ",".join(map(str, prefix))


def _positive_count(row) -> int:
    """Entries of positive mass of a distribution vector (floats or exact rationals)."""
    return int(np.count_nonzero(np.asarray(row) != 0))


def _complete_depth(table: Mapping[Prefix, np.ndarray], size: int) -> int:
    """Largest d such that every prefix of length 0..d is in the table (-1 if not even the root)."""
    depth = -1
    while all(prefix in table for prefix in itertools.product(range(size), repeat=depth + 1)):
        depth += 1
        if depth > 64:
            break
    return depth


def _missing_at(table, size: int, depth: int):
    for length in range(max(depth, 0) + 1):
        for prefix in itertools.product(range(size), repeat=length):
            if prefix not in table:
                return prefix_label(prefix)
    return None

