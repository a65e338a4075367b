"""Problems: the target law p and the draft law q as conditionals over a vocabulary of size V.

A problem answers ``target(prefix)`` and ``draft(prefix)`` with probability vectors of length V, for every
prefix (a tuple of token ids) up to its horizon: the target is needed for prefixes of length 0..L (the
bonus token after L accepted drafts), the draft for lengths 0..L-1.

``state(prefix)`` names what the conditionals depend on (the whole prefix by default; nothing for a
context-independent problem; the last token for a Markov problem). Engines that memoise may key on it.
"""

from __future__ import annotations

import itertools
import json
import math
import re
from abc import ABC, abstractmethod
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from fractions import Fraction
from pathlib import Path

import numpy as np

from verispec.errors import InvalidDistributionError, InvalidProblemError, ProblemTooLargeError, describe
from verispec.io import OutputKind, read_user_file
from verispec.simulator.distributions import SUM_TOLERANCE, as_distribution, float_rows, parse_number

Prefix = tuple[int, ...]

#: Largest table a generator builds: prefixes of length 0..depth (each with a target and a draft law), and
#: probabilities per law (prefixes x V). Generating takes about 40 us per prefix (random_problem(4, 8): 87k
#: prefixes in 3.3 s; (2, 19), 2^20 prefixes, in 71 s on a loaded machine), so the limits are about a minute
#: and a few hundred MB; random_problem(50, 12) asked for 10^20.4 prefixes and hung before they existed.
MAX_TABLE_PREFIXES = 1 << 20
MAX_TABLE_ENTRIES = 1 << 22

#: Largest problem file read: a problem file of the largest table (MAX_TABLE_ENTRIES probabilities per law, up
#: to 24 bytes each as JSON floats, plus the prefix keys) takes under 200 MiB: random_problem(2, 19) writes 121 MiB,
#: random_problem(2047, 1) 93 MiB. ``/dev/zero`` was read to 7.7 GB.
MAX_PROBLEM_FILE_BYTES = 256 << 20


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

    def target(self, prefix: Prefix) -> np.ndarray:
        return self.base.target(self.prefix + tuple(prefix))

    def draft(self, prefix: Prefix) -> np.ndarray:
        return self.base.draft(self.prefix + tuple(prefix))

    def _prepare(self, prefixes) -> None:
        self.base.prepare([self.prefix + tuple(prefix) for prefix in prefixes])

    def prepare_drafts(self, prefixes) -> None:
        self.base.prepare_drafts([self.prefix + tuple(prefix) for prefix in prefixes])

    def state(self, prefix: Prefix) -> Hashable:
        return self.base.state(self.prefix + tuple(prefix))

    def log_state_count(self, length: int) -> float:
        return min(self.base.log_state_count(len(self.prefix) + length), length * math.log(self.vocab_size))


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
    budget (``verispec.budget``: a sweep's --cell-timeout) is checked every 4,096 prefixes."""
    from verispec import budget

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
            if isinstance(table, _CheckedRows):  # validated in bulk by ``_checked_rows`` (float problem files)
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
            raise InvalidProblemError(f"the problem has no target distribution at prefix '{_label(prefix)}'") from None

    def draft(self, prefix: Prefix) -> np.ndarray:
        try:
            return self.draft_table[tuple(prefix)]
        except KeyError:
            raise InvalidProblemError(f"the problem has no draft distribution at prefix '{_label(prefix)}'") from None

    def require_depth(self, depth: int) -> None:
        if depth > self.horizon:
            target_missing = _missing_at(self.target_table, self.vocab_size, depth)
            draft_missing = _missing_at(self.draft_table, self.vocab_size, depth - 1)
            detail = (f"target at prefix '{target_missing}'" if target_missing is not None
                      else f"draft at prefix '{draft_missing}'")
            raise InvalidProblemError(
                f"the tree needs depth {depth} but the problem covers depth {self.horizon}: "
                f"missing the {detail} (give the target for every prefix of length 0..L and the draft for 0..L-1)")


def _label(prefix) -> str:
    return ",".join(map(str, prefix))


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
                return _label(prefix)
    return None


# --------------------------------------------------------------------------------------------------
# Synthetic generators. Every generator takes an explicit seed or numpy Generator.


def _apply_temperature(probs: np.ndarray, temperature: float) -> np.ndarray:
    """p_T(x) proportional to p(x)^(1/T): the law of sampling the same logits at temperature T."""
    if temperature == 1.0:
        return probs
    powered = probs ** (1.0 / temperature)
    return powered / powered.sum()


def _sparsify(rng: np.random.Generator, probs: np.ndarray, zero_fraction: float) -> np.ndarray:
    """Set each entry to exactly zero with probability ``zero_fraction``, keeping at least one entry."""
    if zero_fraction == 0:
        return probs
    keep = rng.random(len(probs)) >= zero_fraction
    keep[rng.integers(len(probs))] = True
    kept = np.where(keep, probs, 0.0)
    return kept / kept.sum()


def _dirichlet_pair(rng: np.random.Generator, size: int, concentration: float, divergence: float,
                    temperature: float, zero_fraction: float) -> tuple[np.ndarray, np.ndarray]:
    target = rng.dirichlet(np.full(size, concentration))
    other = rng.dirichlet(np.full(size, concentration))
    draft = (1.0 - divergence) * target + divergence * other
    target = _sparsify(rng, target, zero_fraction)
    draft = _sparsify(rng, draft, zero_fraction)
    return _apply_temperature(target, temperature), _apply_temperature(draft, temperature)


def check_knobs(size: int, concentration: float, divergence: float, temperature: float, zero_fraction: float):
    """InvalidProblemError unless the knobs of the random problem generators (below) are usable."""
    if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 1:
        raise InvalidProblemError(f"vocab_size must be a positive integer, got {describe(size)}")
    check_vocab_size(int(size), "the problem generator")
    for name, value in (("concentration", concentration), ("divergence", divergence), ("temperature", temperature),
                        ("zero_fraction", zero_fraction)):
        if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
            raise InvalidProblemError(f"{name} must be a number, got {describe(value)}")
    if not (concentration > 0 and np.isfinite(concentration)):
        raise InvalidProblemError(f"concentration must be positive and finite, got {describe(concentration)}")
    if not 0.0 <= divergence <= 1.0:
        raise InvalidProblemError(f"divergence must lie in [0, 1], got {describe(divergence)}")
    if not (temperature > 0 and np.isfinite(temperature)):
        raise InvalidProblemError(f"temperature must be positive and finite, got {describe(temperature)}")
    if not 0.0 <= zero_fraction < 1.0:
        raise InvalidProblemError(f"zero_fraction must lie in [0, 1), got {describe(zero_fraction)}")


def check_table_size(vocab_size: int, depth, what: str) -> None:
    """ProblemTooLargeError, before anything is built, when a table of every prefix of length 0..depth at this
    vocabulary exceeds MAX_TABLE_PREFIXES prefixes or MAX_TABLE_ENTRIES probabilities per law (sizes in logs,
    so absurd depths cost nothing); InvalidProblemError for a depth that is not a non-negative integer."""
    if isinstance(depth, bool) or not isinstance(depth, (int, np.integer)) or depth < 0:
        raise InvalidProblemError(f"{what}: depth must be a non-negative integer, got {describe(depth)}")
    size = int(vocab_size)
    log_prefixes = log_prefix_count(size, 0, depth)
    log_entries = log_prefixes + math.log(size)
    if log_prefixes > math.log(MAX_TABLE_PREFIXES) or log_entries > math.log(MAX_TABLE_ENTRIES):
        raise ProblemTooLargeError(
            f"{what}: a table of every prefix of length 0..{depth} at V={size} has {readable_count(log_prefixes)} "
            f"prefixes and {readable_count(log_entries)} probabilities per law, above the limits of "
            f"{MAX_TABLE_PREFIXES:,} prefixes and {MAX_TABLE_ENTRIES:,} probabilities; use a smaller vocabulary or "
            "depth, or a context-free or Markov problem (any depth)")


def check_vocab_size(size: int, what: str, *, markov: bool = False) -> None:
    """ProblemTooLargeError, before anything of size V is built, when the probability vectors a problem of this
    vocabulary holds at least (one per law; V + 1 for a Markov problem: the root and a row per token) exceed
    MAX_TABLE_ENTRIES entries: a problem file declaring a vocabulary of 10^9 is refused at once instead of
    allocating gigabytes for it."""
    rows = size + 1 if markov else 1
    if size * rows > MAX_TABLE_ENTRIES:
        largest = (math.isqrt(4 * MAX_TABLE_ENTRIES + 1) - 1) // 2 if markov else MAX_TABLE_ENTRIES  # V (V + 1)
        tables = f"{rows:,} probability vectors" if markov else "one probability vector"
        raise ProblemTooLargeError(
            f"{what}: a vocabulary of {size:,} tokens needs {tables} of {size:,} entries per law, above the limit of "
            f"{MAX_TABLE_ENTRIES:,} probabilities; use a vocabulary of at most {largest:,} tokens")


def log_prefix_count(size: int, first: int, last: int) -> float:
    """Natural log of V^first + V^(first + 1) + .. + V^last (the prefixes of lengths first..last), computed
    without building the number (-inf when last < first): size estimates of tables, output laws and LPs."""
    if last < first:
        return -math.inf
    count = last - first + 1
    if size == 1:
        return math.log(count)
    log_size = math.log(size)
    # V^first (V^count - 1) / (V - 1)
    return (first + count) * log_size + math.log1p(-math.exp(-count * log_size)) - math.log(size - 1)


def log_add(a: float, b: float) -> float:
    """log(e^a + e^b) without overflow (either may be -inf)."""
    high, low = max(a, b), min(a, b)
    return high + math.log1p(math.exp(low - high)) if math.isfinite(low) else high


def readable_count(log_value: float) -> str:
    """A count given by its natural log, for messages: '87,381' below a million, else '10^20.4', and
    '10^(10^84.7)' when even the exponent is astronomical (greedy-tree:50,50's draft trees)."""
    if log_value < math.log(1e6):
        return f"{math.exp(log_value):,.0f}"
    if not math.isfinite(log_value):
        return "infinitely many"
    exponent = log_value / math.log(10)
    return f"10^{exponent:.1f}" if exponent < 1e6 else f"10^(10^{math.log10(exponent):.1f})"


# Synthetic generators share these knobs.
# ``concentration`` of the Dirichlet draws (small values give peaked laws); ``divergence`` in
# [0, 1] moves the draft away from the target: q = (1 - divergence) p + divergence r with r an
# independent Dirichlet draw (0 gives q = p, 1 an independent draft); ``temperature`` T is applied to both
# laws (p^(1/T), renormalised); ``zero_fraction`` zeroes each entry of p and of q independently with
# that probability (at least one entry stays), which exercises tokens the draft never proposes and
# drafted tokens the target forbids.


def random_problem(vocab_size: int, depth: int, seed: int | np.random.Generator, *, concentration: float = 1.0,
                   divergence: float = 0.5, temperature: float = 1.0, zero_fraction: float = 0.0) -> TabularProblem:
    """A context-dependent problem: an independent Dirichlet (target, draft) pair per prefix (knobs above).

    Conditionals are given for every prefix of length 0..depth.
    """
    check_knobs(vocab_size, concentration, divergence, temperature, zero_fraction)
    check_table_size(vocab_size, depth, "random_problem")
    rng = np.random.default_rng(seed)
    target_table, draft_table = {}, {}
    for length in range(depth + 1):
        for prefix in itertools.product(range(vocab_size), repeat=length):
            target_table[prefix], draft_table[prefix] = _dirichlet_pair(rng, vocab_size, concentration, divergence,
                                                                        temperature, zero_fraction)
    return TabularProblem(vocab_size, target_table, draft_table, horizon=depth)


def random_context_free_problem(vocab_size: int, seed: int | np.random.Generator, *, concentration: float = 1.0,
                                divergence: float = 0.5, temperature: float = 1.0,
                                zero_fraction: float = 0.0) -> ContextFreeProblem:
    """One Dirichlet pair (p, q) used at every prefix; knobs as in ``random_problem``."""
    check_knobs(vocab_size, concentration, divergence, temperature, zero_fraction)
    rng = np.random.default_rng(seed)
    return ContextFreeProblem(*_dirichlet_pair(rng, vocab_size, concentration, divergence, temperature, zero_fraction))


def random_markov_problem(vocab_size: int, seed: int | np.random.Generator, *, concentration: float = 1.0,
                          divergence: float = 0.5, temperature: float = 1.0,
                          zero_fraction: float = 0.0) -> MarkovProblem:
    """An order-1 Markov problem with Dirichlet rows; knobs as in ``random_problem``."""
    check_knobs(vocab_size, concentration, divergence, temperature, zero_fraction)
    check_vocab_size(int(vocab_size), "random_markov_problem", markov=True)
    rng = np.random.default_rng(seed)
    p0, q0 = _dirichlet_pair(rng, vocab_size, concentration, divergence, temperature, zero_fraction)
    rows = [_dirichlet_pair(rng, vocab_size, concentration, divergence, temperature, zero_fraction)
            for _ in range(vocab_size)]
    return MarkovProblem(p0, q0, np.stack([r[0] for r in rows]), np.stack([r[1] for r in rows]))


# --------------------------------------------------------------------------------------------------
# JSON problems: {"vocab_size": V, "target": {"": [...], "0": [...], "0,1": [...]}, "draft": {...}}


#: Top-level keys of a problem file: the three required ones and two optional free-text notes.
REQUIRED_KEYS = ("vocab_size", "target", "draft")
NOTE_KEYS = ("comment", "description")
#: Optional keys holding JSON objects that readers ignore: "derived" is the provenance ``verispec derive``
#: writes (the pair, context, settings and the real tokens behind every derived prefix).
METADATA_KEYS = ("derived",)


class _CheckedRows(dict):
    """Prefix -> read-only float64 row, every row already a valid distribution (``_checked_rows``); ``depth``: the
    table holds exactly every prefix of length 0..depth when known (a file in ``problem_to_json``'s layout)."""

    depth: int | None = None


def _checked_rows(prefixes: list, rows, size: int, largest_token: int | None = None, *, numbers_only: bool = False,
                  depth: int | None = None) -> _CheckedRows | None:
    """Float mode in bulk: ``rows`` (lists of JSON numbers, or a [n, V] array) as one [n, V] float64 matrix,
    checked at once by ``float_rows`` (``as_distribution``'s float rule, batched) and
    handed out as read-only row views. None when a row has another length, an entry is not a number (a string
    such as "1/3", a bool, null) or a check fails: the per-vector path (``as_distribution``) then reads the table
    and names the first problem, so the errors are the same as before. ``largest_token``: the prefixes' largest
    token when the caller knows it (non-negative tokens); else it is found here. ``numbers_only``: the caller
    knows no entry is a bool (a JSON file without the literals true and false), so numpy's conversion, which
    leaves strings as strings and None as an object, tells the rest apart without a Python pass. ``depth``: the
    complete depth, when the caller knows the layout (``_CheckedRows.depth``)."""
    if isinstance(rows, np.ndarray):
        matrix = rows
        if matrix.ndim != 2 or matrix.shape[1] != size or matrix.dtype.kind not in "fiu":
            return None
        matrix = matrix.astype(np.float64)
    else:
        if numbers_only:  # numpy tells rows of V numbers from anything else (ragged, nested, strings, null)
            try:
                matrix = np.array(rows)
            except ValueError:  # ragged rows
                return None
            if matrix.shape != (len(rows), size) or matrix.dtype.kind not in "fi":
                return None
            matrix = matrix.astype(np.float64, copy=False)
        else:
            if any(type(row) is not list or len(row) != size for row in rows):
                return None
            if not {type(value) for row in rows for value in row} <= {float, int}:
                return None
            matrix = np.array(rows, dtype=np.float64).reshape(len(rows), size)
    matrix = float_rows(matrix)
    if matrix is None:
        return None
    matrix.setflags(write=False)
    if largest_token is None:
        tokens = [prefix for prefix in prefixes if prefix]
        if tokens and min(map(min, tokens)) < 0:
            return None
        largest_token = max(map(max, tokens), default=-1)
    if largest_token >= size:
        return None
    table = _CheckedRows(zip(prefixes, matrix))
    table.depth = depth
    return table


def problem_from_json(data: Mapping, *, exact: bool = False) -> TabularProblem:
    """Build a TabularProblem from the JSON layout documented in docs/cli.md (the README links it).

    The object has exactly the keys "vocab_size", "target" and "draft", plus optionally "comment" and/or
    "description" (free text, ignored) and "derived" (an object, ignored: ``verispec derive``'s provenance);
    any other key is refused. Keys of "target" and "draft" are prefixes
    as comma-joined token ids ("" is the root; spaces around ids are allowed, but two keys naming the same
    prefix, such as "0,1" and "0, 1", are refused); values are lists of probabilities: JSON numbers or
    strings such as "1/3" or "0.25".

    Exact mode (``exact=True``) reads every entry as an exact rational: an integer or a string as itself,
    and a JSON number with a fraction or an exponent (a float) as the decimal written in the file (a Python
    float as its shortest round-trip decimal, ``repr``, which is what ``json.dumps`` writes). A vector with
    at least one such float entry is taken to be rounded: when its exact sum lies within ``SUM_TOLERANCE``
    (1e-8) of 1 it is divided by that sum, exactly, so it sums to exactly 1. A vector given only as integers
    and strings must sum to exactly 1. So a file that ``problem_to_json`` wrote from a float problem is
    readable in exact mode, within about 1e-16 of the float values. Float mode renormalises every vector
    whose sum is within ``SUM_TOLERANCE`` of 1.
    """
    return _problem_from_json(data, exact=exact)


def _problem_from_json(data: Mapping, *, exact: bool = False, numbers_only: bool = False) -> TabularProblem:
    """``problem_from_json``; ``numbers_only``: the file holds no JSON true or false (``_checked_rows``)."""
    if not isinstance(data, Mapping):
        raise InvalidProblemError(f"a problem file must hold a JSON object, got {type(data).__name__}")
    for key in REQUIRED_KEYS:
        if key not in data:
            raise InvalidProblemError(f"problem JSON is missing the key {key!r}")
    for key in data:
        if key not in REQUIRED_KEYS and key not in NOTE_KEYS and key not in METADATA_KEYS:
            raise InvalidProblemError(
                f"problem JSON has an unknown key {str(key)!r}; allowed keys: "
                f"{', '.join(REQUIRED_KEYS)} (required), {', '.join(NOTE_KEYS)} (optional text), "
                f"{', '.join(METADATA_KEYS)} (optional object)")
        if key in METADATA_KEYS and not isinstance(data[key], Mapping):
            raise InvalidProblemError(f"problem JSON key {key!r} must be an object, got {type(data[key]).__name__}")
        if key in NOTE_KEYS and not isinstance(data[key], str):
            raise InvalidProblemError(f"problem JSON key {key!r} must be a string (free text), "
                                      f"got {type(data[key]).__name__}")
    size = data["vocab_size"]
    if not isinstance(size, int) or isinstance(size, bool) or size < 1:
        raise InvalidProblemError(f"vocab_size must be a positive integer, got {_json_text(size)}")
    check_vocab_size(size, "vocab_size")
    tables = {}
    for name in ("target", "draft"):
        raw = data[name]
        if not isinstance(raw, Mapping):
            raise InvalidProblemError(f"problem JSON key {name!r} must map prefixes to probability lists")
        layout = _lexicographic_layout(list(raw), size)
        if layout is not None:  # problem_to_json's own layout: every prefix of length 0..L, in order
            parsed, depth = layout
            largest, keys = (size - 1 if depth else -1), dict(zip(parsed, raw))
        else:
            keys, largest, depth = {}, None, None
            try:  # all at once; a key that does not parse is named by _parse_prefix_key below
                parsed = [tuple(map(int, key.split(","))) if key.strip() else () for key in raw]
            except (ValueError, AttributeError):
                parsed = [_parse_prefix_key(key, name) for key in raw]
        if len(keys) != len(raw):  # two keys naming one prefix ("0,1" and "0, 1"): name them
            keys = {}
            for key, prefix in zip(raw, parsed):
                if prefix in keys:
                    raise InvalidProblemError(
                        f"{name}: prefix keys {keys[prefix]!r} and {key!r} both name the prefix '{_label(prefix)}'; "
                        "keep one")
                keys[prefix] = key
        bulk = None if exact else _checked_rows(list(keys), list(raw.values()), size, largest,
                                                numbers_only=numbers_only, depth=depth)
        if bulk is not None:  # float mode, every row a valid distribution: checked at once
            tables[name] = bulk
            continue
        table = {}
        for prefix, key in keys.items():
            values = raw[key]
            if not isinstance(values, list):
                raise InvalidDistributionError(f"{name} at prefix '{key}': expected a list of probabilities")
            try:
                table[prefix] = _read_vector(values, exact)
            except InvalidDistributionError as error:
                raise InvalidDistributionError(f"{name} at prefix '{key}': {error}") from None
        tables[name] = table
    return TabularProblem(size, tables["target"], tables["draft"], exact=exact)


def _json_text(value) -> str:
    """A JSON value as the file wrote it, for messages (no Python reprs such as Decimal('2.0'))."""
    if isinstance(value, Decimal):
        return str(value)
    return json.dumps(value) if isinstance(value, (str, int, float, bool, type(None), list, dict)) else repr(value)


def _read_vector(values: list, exact: bool) -> list:
    """One probability list of a problem file, by the rule of ``problem_from_json``."""
    if not exact:
        return [parse_number(value, exact=False) for value in values]
    entries, rounded = [], False
    for value in values:
        if isinstance(value, float):  # a Python float stands for the decimal json.dumps writes for it
            parse_number(value, exact=True)  # refuses NaN and infinities
            value = Decimal(repr(value))
        rounded = rounded or isinstance(value, Decimal)  # a JSON number with a fraction or an exponent
        entries.append(parse_number(value, exact=True))
    total = sum(entries, Fraction(0))
    if rounded and total != 1 and total > 0 and abs(total - 1) <= Fraction(SUM_TOLERANCE):
        entries = [value / total for value in entries]
    return entries


def _lexicographic_layout(keys: list, size: int) -> tuple[list[Prefix], int] | None:
    """(the prefixes, L) when ``keys`` are exactly the keys ``problem_to_json`` writes, every prefix of length 0..L
    in lexicographic order ("", "0", "1", "0,0", ...), found by one list comparison and turned into tuples by
    itertools.product at C speed; else None, and the caller parses the keys one by one."""
    total, depth = 1, 0
    while total < len(keys) and depth < 64:
        depth += 1
        total += size ** depth
    if total != len(keys):
        return None
    digits = [str(token) for token in range(size)] if depth else []  # depth >= 1: at most len(keys) of them
    level, expected = [""], [""]
    for length in range(1, depth + 1):
        level = digits if length == 1 else [f"{key},{digit}" for key in level for digit in digits]
        expected += level
    if keys != expected:
        return None
    return list(itertools.chain.from_iterable(itertools.product(range(size), repeat=length)
                                              for length in range(depth + 1))), depth


def _prefix_tuples(lengths: np.ndarray, tokens: np.ndarray) -> list[Prefix]:
    """The prefixes as tuples of Python ints from their lengths [n] and tokens [n, longest] (padded), grouped by
    length so that each group converts in one call."""
    prefixes: list = [None] * len(lengths)
    for length in np.unique(lengths).tolist():
        rows = np.flatnonzero(lengths == length)
        for row, prefix in zip(rows.tolist(), map(tuple, tokens[rows, :length].tolist())):
            prefixes[row] = prefix
    return prefixes


def _parse_prefix_key(key: str, name: str) -> Prefix:
    if not isinstance(key, str):
        raise InvalidProblemError(f"{name}: prefix key {describe(key)} is not a string of comma-joined token ids")
    if key.strip() == "":
        return ()
    try:
        return tuple(map(int, key.split(",")))
    except ValueError:
        raise InvalidProblemError(f"{name}: prefix key {key!r} is not comma-joined token ids") from None


def _refuse_duplicate_keys(pairs: list) -> dict:
    """object_pairs_hook for json.loads: a key given twice in one object is an error, not 'last one wins'."""
    data = dict(pairs)
    if len(data) == len(pairs):
        return data
    data = {}
    for key, value in pairs:
        if key in data:
            raise InvalidProblemError(f"key {key!r} appears twice in one JSON object; keep one")
        data[key] = value
    return data


def load_problem(path: str | Path, *, exact: bool = False) -> TabularProblem:
    """Read a problem file: JSON (see ``problem_from_json`` for the layout and the exact-mode rule) or the binary
    ``.npz`` form (``problem_to_npz``), told apart by their first bytes, whatever the file is called.

    A key repeated within one JSON object is refused. In exact mode JSON numbers with a fraction or an exponent are
    read as the decimals written in the file; in float mode they are read as floats (the same values, correctly
    rounded) and every table is checked at once (``_checked_rows``), at about a million numbers a second; a file
    that fails a check is read again the exact way, so that the error names the first problem as before.
    """
    content = read_user_file(path, limit=MAX_PROBLEM_FILE_BYTES, what="problem file", error=InvalidProblemError,
                             why=f"a file of the largest table verispec generates, {MAX_TABLE_ENTRIES:,} probabilities "
                                 "per law, takes under 200 MiB", binary=True)
    if content[:4] == NPZ_MAGIC:
        return problem_from_npz(content, exact=exact, name=str(path))
    try:
        text = content.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidProblemError(f"problem file {str(path)!r} is neither JSON (it is not UTF-8 text) nor verispec's "
                                  ".npz problem form; write one with problem_to_json or problem_to_npz") from None
    if not exact:
        try:
            # json's own float reading (C) when no number can pass the exponent limit; else one call per number
            reading = {} if _floats_read_plainly(content) else {"parse_float": _plain_float}
            data = json.loads(text, object_pairs_hook=_refuse_duplicate_keys, **reading)
            return _problem_from_json(data, exact=False, numbers_only=b"true" not in content
                                      and b"false" not in content)
        except ProblemTooLargeError as error:
            raise ProblemTooLargeError(f"problem file {str(path)!r}: {error}") from None
        except (json.JSONDecodeError, RecursionError, InvalidProblemError, InvalidDistributionError, _ReadExactly):
            pass  # read again the exact way below, for the canonical message
    try:
        data = json.loads(text, object_pairs_hook=_refuse_duplicate_keys, parse_float=Decimal)
    except json.JSONDecodeError as error:
        raise InvalidProblemError(
            f"problem file {str(path)!r} is not valid JSON: {error.msg} at line {error.lineno}") from None
    except RecursionError:  # arrays or objects nested thousands deep; a problem file nests three levels
        raise InvalidProblemError(f"problem file {str(path)!r} nests JSON arrays or objects too deeply to be a "
                                  "problem (a problem nests three levels: object, prefix table, list)") from None
    except InvalidProblemError as error:
        raise InvalidProblemError(f"problem file {str(path)!r}: {error}") from None
    try:
        return problem_from_json(data, exact=exact)
    except ProblemTooLargeError as error:
        raise ProblemTooLargeError(f"problem file {str(path)!r}: {error}") from None


#: The float reading of a problem file refers to the exact one any JSON number longer than this (more digits than
#: any float's shortest form) or with an exponent of at least ``_EXPONENT_DIGITS`` digits: such a number may pass
#: MAX_EXPONENT, which the exact reading refuses, where a float would silently become 0 or infinity.
_LONGEST_PLAIN_NUMBER = 40
_EXPONENT_DIGITS = 5
_LONG_EXPONENT = re.compile(rf"[eE][+-]?\d{{{_EXPONENT_DIGITS},}}")


class _ReadExactly(Exception):
    """A JSON number the float reading must not take (``_plain_float``)."""


def _plain_float(text: str) -> float:
    """A JSON number with a fraction or an exponent, as a float; ``_ReadExactly`` for one the float reading must
    not take (``_LONGEST_PLAIN_NUMBER``): such a file is read the exact way, which refuses it as before (float and
    exact mode decide alike)."""
    if len(text) > _LONGEST_PLAIN_NUMBER or (("e" in text or "E" in text) and _LONG_EXPONENT.search(text)):
        raise _ReadExactly(text)
    return float(text)


def _floats_read_plainly(content: bytes) -> bool:
    """Whether no JSON number in ``content`` (UTF-8) is one that ``_plain_float`` refers to the exact reading, found
    by a few vectorised passes over the bytes (runs of number bytes anywhere, strings included: a false alarm only
    costs the slower reading); then json's own float parser reads the file."""
    chars = np.frombuffer(content, dtype=np.uint8)
    exponent = (chars | 32) == ord("e")                             # e or E
    # + - . and digits are bytes 43..57 except ',' (44) and '/' (47)
    number = (((chars - np.uint8(43)) < 15) & (chars != ord(",")) & (chars != ord("/"))) | exponent
    if _all_in_window(number, _LONGEST_PLAIN_NUMBER + 1).any():
        return False
    positions = np.flatnonzero(exponent)
    padded = np.concatenate((chars, np.zeros(_EXPONENT_DIGITS + 2, dtype=np.uint8)))
    after = positions + 1 + ((padded[positions + 1] == ord("+")) | (padded[positions + 1] == ord("-")))
    digits = [(padded[after + k] - np.uint8(48)) < 10 for k in range(_EXPONENT_DIGITS)]
    return not np.logical_and.reduce(digits).any() if len(positions) else True


def _all_in_window(mask: np.ndarray, width: int) -> np.ndarray:
    """windows[i] = mask[i:i + width].all() for every full window, by doubling (blocks of 1, 2, 4, .. combined
    along the binary digits of ``width``): O(n log width) instead of O(n width)."""
    count = len(mask) - width + 1
    if count <= 0:
        return np.zeros(0, dtype=bool)
    windows, block, size, offset, remaining = np.ones(count, dtype=bool), mask, 1, 0, width
    while remaining:
        if remaining & 1:
            windows &= block[offset:offset + count]
            offset += size
        remaining >>= 1
        if remaining:
            block = block[:-size] & block[size:]
            size *= 2
    return windows

#: The first bytes of a .npz file (a zip archive).
NPZ_MAGIC = b"PK\x03\x04"

#: Most bytes the arrays of a .npz problem file may take uncompressed, checked from the archive's directory and
#: the arrays' headers before anything is decompressed: twice what the largest table verispec generates takes
#: (random_problem(2, 19): 2^20 - 1 target and 2^19 - 1 draft prefixes, their lengths, tokens padded to 19 and 18
#: columns and rows, 8 bytes each, some 260 MiB).
MAX_NPZ_ARRAY_BYTES = 512 << 20

#: Arrays of the .npz problem form: the vocabulary, then per law the prefixes (lengths and tokens, padded with -1)
#: and the rows, as float64 "values" or as int64 "numerators" and "denominators" (an exact problem).
NPZ_FORMAT = "verispec-problem-1"


def _prefix_arrays(prefixes: list) -> tuple[np.ndarray, np.ndarray]:
    lengths = np.asarray([len(prefix) for prefix in prefixes], dtype=np.int64)
    tokens = np.full((len(prefixes), int(lengths.max(initial=0))), -1, dtype=np.int64)
    for row, prefix in enumerate(prefixes):
        tokens[row, :len(prefix)] = prefix
    return lengths, tokens


def problem_to_npz(problem: Problem, depth: int, path: str | Path, *, metadata: Mapping | None = None) -> None:
    """Write ``problem`` (prefixes of length <= depth; draft <= depth - 1) in the binary .npz form, atomically.

    A float problem stores float64 rows; an exact one stores each row as int64 numerators and denominators, and
    refuses (InvalidProblemError) an entry whose numerator or denominator does not fit (write JSON instead).
    ``metadata`` (JSON-serialisable: a description, ``verispec derive``'s provenance) is kept as JSON text."""
    import io

    from verispec.io import atomic_write_bytes

    problem.require_depth(depth)
    arrays = {"format": np.asarray(NPZ_FORMAT), "vocab_size": np.asarray(problem.vocab_size, dtype=np.int64),
              "metadata": np.asarray(json.dumps(dict(metadata or {}), default=str))}
    for name, last, law in (("target", depth, problem.target), ("draft", depth - 1, problem.draft)):
        prefixes = [prefix for length in range(last + 1) for prefix in problem.prefixes(length)]
        arrays[f"{name}_lengths"], arrays[f"{name}_tokens"] = _prefix_arrays(prefixes)
        rows = [law(prefix) for prefix in prefixes]
        if problem.exact:
            fractions = [Fraction(value) for row in rows for value in row]
            if any(abs(f.numerator) >= 2 ** 63 or f.denominator >= 2 ** 63 for f in fractions):
                raise InvalidProblemError("an exact probability's numerator or denominator does not fit in 64 bits; "
                                          "write this problem as JSON (problem_to_json), which keeps any rational")
            shape = (len(prefixes), problem.vocab_size)
            arrays[f"{name}_numerators"] = np.asarray([f.numerator for f in fractions], dtype=np.int64).reshape(shape)
            arrays[f"{name}_denominators"] = np.asarray([f.denominator for f in fractions],
                                                        dtype=np.int64).reshape(shape)
        else:
            arrays[f"{name}_values"] = np.asarray(rows, dtype=np.float64).reshape(len(prefixes), problem.vocab_size)
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **arrays)
    atomic_write_bytes(path, buffer.getvalue())


def problem_from_npz(content: bytes, *, exact: bool = False, name: str = "problem file") -> TabularProblem:
    """A problem from the bytes of a .npz file (``problem_to_npz``), validated as a JSON file is: shapes, NaN,
    negative entries and sums, with one-line errors; a .npz that is not a verispec problem is named as such."""
    import io
    import zipfile

    from verispec.io import check_zip_sizes

    check_zip_sizes(io.BytesIO(content), limit=MAX_NPZ_ARRAY_BYTES, what=f"problem file {name!r}",
                    error=InvalidProblemError)  # before anything is decompressed
    try:
        archive = np.load(io.BytesIO(content), allow_pickle=False)
        found = "format" in archive.files and str(archive["format"]) == NPZ_FORMAT
        arrays = {key: archive[key] for key in archive.files} if found else dict.fromkeys(archive.files)
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as error:
        raise InvalidProblemError(f"problem file {name!r} is a zip archive but not a readable .npz ({error}); write "
                                  "one with problem_to_npz") from None
    if not found:
        raise InvalidProblemError(f"problem file {name!r} is a .npz file but not a verispec problem (no format "
                                  f"{NPZ_FORMAT!r}; found arrays: {', '.join(sorted(arrays)) or 'none'})")
    try:
        size = int(arrays["vocab_size"])
        check_vocab_size(size, "vocab_size")
        tables = {}
        for law in ("target", "draft"):
            lengths, tokens = arrays[f"{law}_lengths"], arrays[f"{law}_tokens"]
            if lengths.ndim != 1 or tokens.ndim != 2 or tokens.shape[0] != lengths.size or (
                    lengths.size and (lengths.min() < 0 or lengths.max() > tokens.shape[1])):
                raise InvalidProblemError(f"{law}: the prefix arrays have inconsistent shapes "
                                          f"{lengths.shape} and {tokens.shape}")
            prefixes = _prefix_tuples(lengths, tokens.astype(np.int64, copy=False))
            if len(set(prefixes)) != len(prefixes):
                raise InvalidProblemError(f"{law}: a prefix appears twice")
            if f"{law}_values" in arrays:
                rows = arrays[f"{law}_values"]
                if rows.ndim != 2 or rows.shape != (len(prefixes), size):
                    raise InvalidProblemError(f"{law}: rows of shape {rows.shape}, expected ({len(prefixes)}, {size})")
                if exact:
                    tables[law] = {prefix: _read_vector([float(v) for v in row], True)
                                   for prefix, row in zip(prefixes, rows)}
                    continue
                bulk = _checked_rows(prefixes, rows, size)
                tables[law] = bulk if bulk is not None else dict(zip(prefixes, (list(row) for row in rows)))
            else:
                numerators, denominators = arrays[f"{law}_numerators"], arrays[f"{law}_denominators"]
                if numerators.shape != (len(prefixes), size) or denominators.shape != numerators.shape:
                    raise InvalidProblemError(f"{law}: rational rows of shapes {numerators.shape} and "
                                              f"{denominators.shape}, expected ({len(prefixes)}, {size})")
                if (denominators <= 0).any():
                    raise InvalidProblemError(f"{law}: a denominator is not positive")
                rows = [[Fraction(int(a), int(b)) for a, b in zip(top, bottom)]
                        for top, bottom in zip(numerators, denominators)]
                tables[law] = dict(zip(prefixes, rows if exact else ([float(v) for v in row] for row in rows)))
    except KeyError as error:
        raise InvalidProblemError(f"problem file {name!r} lacks the array {error.args[0]!r} of the .npz problem "
                                  "form") from None
    except (InvalidProblemError, InvalidDistributionError) as error:
        raise type(error)(f"problem file {name!r}: {error}") from None
    try:
        return TabularProblem(size, tables["target"], tables["draft"], exact=exact)
    except (InvalidProblemError, InvalidDistributionError) as error:
        raise type(error)(f"problem file {name!r}: {error}") from None


def is_problem_file(path: str | Path) -> bool:
    """Whether ``path`` holds a problem file in one of the forms ``load_problem`` reads: a .npz whose format array
    names NPZ_FORMAT, or a JSON object whose keys are those of the layout (vocab_size, target, draft and the
    optional notes and metadata); the tables themselves are not checked. What the commands that write problem
    files (hunt, check-external, derive, sweep --save-problems) may replace without --overwrite."""
    import io
    import zipfile

    from verispec.io import check_zip_sizes

    try:
        content = read_user_file(path, limit=MAX_PROBLEM_FILE_BYTES, what="problem file", error=InvalidProblemError,
                                 binary=True)
        if content[:4] == NPZ_MAGIC:
            check_zip_sizes(io.BytesIO(content), limit=MAX_NPZ_ARRAY_BYTES, what="problem file",
                            error=InvalidProblemError)
            with np.load(io.BytesIO(content), allow_pickle=False) as archive:
                return "format" in archive.files and str(archive["format"]) == NPZ_FORMAT
        data = json.loads(content)
    except (InvalidProblemError, OSError, ValueError, EOFError, RecursionError, zipfile.BadZipFile):
        return False
    allowed = set(REQUIRED_KEYS) | set(NOTE_KEYS) | set(METADATA_KEYS)
    return isinstance(data, dict) and set(REQUIRED_KEYS) <= set(data) <= allowed


#: What the commands that write problem files write (``verispec.io.check_output``).
PROBLEM_FILE = OutputKind("verispec problem file (JSON or .npz)", is_problem_file, "problem.json")


def problem_to_json(problem: Problem, depth: int) -> dict:
    """The JSON layout of any problem, restricted to prefixes of length <= depth (draft: <= depth - 1)."""
    problem.require_depth(depth)

    def encode(vector):
        return [str(v) if isinstance(v, Fraction) else float(v) for v in vector]

    target, draft = {}, {}
    for length in range(depth + 1):
        for prefix in problem.prefixes(length):
            key = _label(prefix)
            target[key] = encode(problem.target(prefix))
            if length < depth:
                draft[key] = encode(problem.draft(prefix))
    return {"vocab_size": problem.vocab_size, "target": target, "draft": draft}


def sun_toy_problem(*, exact: bool = False) -> ContextFreeProblem:
    """Sun et al. 2024 (arXiv 2403.10444), Sec. 2: V = {a, b}, p = (1/3, 2/3), q = (2/3, 1/3)."""
    third = Fraction(1, 3)
    return ContextFreeProblem([third, 2 * third], [2 * third, third], exact=exact)
