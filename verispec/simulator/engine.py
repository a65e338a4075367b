"""The exact engine: (problem, drafter, verifier) -> law of the emitted block -> metrics.

For every draft tree the drafter can produce (with its exact probability) the verifier's emission law
says, for each node n and token y, the probability of accepting the path to n and emitting y. Summing
over trees gives the law of the emitted sequence (x_1..x_tau, y), an ``OutputLaw`` (laws.py), on which
losslessness is checked by the definition of docs/guides/reference.md; ``tv_distance`` is the total-variation distance
to
the target's law.

Methods (``analyze(method=...)``, ``choose_method``): 'closed-form' (the reference oracle: every draft tree
with its exact probability, the verifier's law per tree as a one-row batch), 'enumerate' (the same, each law
from the verifier's sampling procedure by the generic enumerator), 'fast-enumeration' (the same trees as
arrays, laws batched over trees of one topology; fast_enumeration.py), 'dp' and 'dp-metrics' (the walk
dynamic program for top-down node solvers on i.i.d.-structured trees; dp.py) and 'rule-dp' (a whole-tree
rule's own method, ``Verifier.rule_dp``: GBV's selected-path sum, Traversal's post-order DP). Tests hold
every fast method to the oracle at 1e-12. Every method estimates its size first (in logs) and refuses
clearly when it cannot finish; ``deadline`` stops any of them at a time budget.

The engine works on any object with the verifier interface of verispec.simulator.interfaces; it never
imports the concrete rules (verispec.verifiers sits above it). ``verispec.analyze`` also takes names.

Tolerance: in float64 every law is a sum of products of at most a few hundred terms, each exact to
about 1e-16 relative; ``DEFAULT_TOLERANCE`` = 1e-12 on the total-variation distance separates rounding
from any real bias (the broken rules in the tests are biased by more than 1e-3). In exact mode
(Fractions) the tolerance is zero.
"""

from __future__ import annotations

import math
import os
import sys
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np
from tqdm import tqdm

from verispec.errors import IncompatibleDraftError, ProblemTooLargeError, VerispecError, describe
from verispec.guard import budget
from verispec.guard.limits import MAX_RATIONAL_SECONDS, METHODS
from verispec.simulator import fast_enumeration
from verispec.simulator.chooser import DEFAULT_MAX_TRACES
from verispec.simulator.dp import MAX_LAW_MODE_ENTRIES, check_walk_size, estimate_walk, walk_dp
from verispec.simulator.drafters import Drafter
from verispec.simulator.interfaces import Verifier
from verispec.simulator.laws import OutputLaw, check_emission_laws
from verispec.simulator.problems import Problem, target_law
from verispec.simulator.tree_specs import parse_tree
from verispec.simulator.trees import TreeBatch
from verispec.sizes import log_prefix_count, readable_count

DEFAULT_TOLERANCE = 1e-12

#: 'auto' keeps the full output law (and so checks losslessness) while it has at most this many entries.
MAX_LAW_ENTRIES = 1 << 22

#: Draft trees beyond which no enumeration is even planned (each method then checks its own, finer limit).
MAX_ENUMERATED_TREES = 10**15


def check_compatible(verifier: Verifier, drafter: Drafter) -> None:
    """Raise IncompatibleDraftError unless the drafter satisfies one of the verifier's draft laws."""
    if not (drafter.draft_laws & verifier.valid_for):
        wanted = ", ".join(sorted(law.value for law in verifier.valid_for))
        has = ", ".join(sorted(law.value for law in drafter.draft_laws))
        raise IncompatibleDraftError(
            f"verifier '{verifier.name}' is valid only for draft laws [{wanted}]; tree {drafter.spec} draws [{has}]")


def rational_text(value) -> str:
    """An exact value as 'p/q' (or 'p'), whatever its length. Python refuses to write an int of more than 4,300
    digits (``sys.get_int_max_str_digits``, a guard against untrusted input) and the exact engine's own rationals
    pass it: psbv's E[tau+1] on iid:3,5 at V = 4 has 19,461 digits over 19,461, and the printing raised a
    ValueError after the whole analysis. These numbers come from verispec's own arithmetic, bounded by its size
    checks, so the guard is lifted for the one conversion."""
    value = Fraction(value)
    limit = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(0)
    try:
        return str(value)
    finally:
        sys.set_int_max_str_digits(limit)


def _plain(value):
    """A JSON-ready Python value: floats, ints, strings, bools, None, lists and dicts of them."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating, Fraction)):
        return float(value)
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if value is None or isinstance(value, str):
        return value
    return str(value)


@dataclass(frozen=True, eq=False)
class ExactResult:
    """Exact metrics of one (problem, drafter, verifier) triple."""

    verifier: str
    tree: str
    method: str
    output_law: OutputLaw | None  # None for 'dp-metrics', which keeps only the law of tau
    tv_distance: float | Fraction | None  # None when the output law was not computed
    tolerance: float
    tau_law: list
    num_draft_outcomes: int | None  # trees (or multisets of paths) enumerated; None for the DP methods
    exact: bool = False
    extras: dict = field(default_factory=dict)
    #: Why this method was used (which one 'auto' took, and whether losslessness was checked).
    note: str = ""

    @property
    def lossless(self) -> bool | None:
        """TV distance within tolerance; None when the method did not compute the output law."""
        if self.tv_distance is None:
            return None
        return bool(self.tv_distance <= self.tolerance)

    @property
    def block_efficiency(self):
        """E[tau + 1]: expected tokens emitted per target call."""
        return sum((index + 1) * mass for index, mass in enumerate(self.tau_law))

    @property
    def expected_accepted(self):
        """E[tau]: expected accepted draft tokens."""
        return sum(index * mass for index, mass in enumerate(self.tau_law))

    @property
    def acceptance_by_depth(self) -> list:
        """[P(tau >= d) for d = 1..L]: probability that the d-th draft position is accepted (tail sums, one pass
        from the deepest: chain:1000000 took O(L^2) here)."""
        tails, running = [], 0 * self.tau_law[0]
        for mass in reversed(self.tau_law[1:]):
            running = running + mass
            tails.append(running)
        return tails[::-1]

    @property
    def conditional_acceptance(self) -> list:
        """[P(tau >= d | tau >= d - 1) for d = 1..L] (NaN where the condition has probability zero)."""
        reach = [sum(self.tau_law)] + self.acceptance_by_depth
        return [reach[d] / reach[d - 1] if reach[d - 1] > 0 else float("nan") for d in range(1, len(reach))]

    def to_json(self) -> dict:
        """Plain Python values only (floats, ints, strings, bools, None)."""
        data = {
            "verifier": self.verifier,
            "tree": self.tree,
            "method": self.method,
            "block_efficiency": float(self.block_efficiency),
            "expected_accepted": float(self.expected_accepted),
            "tv_distance": None if self.tv_distance is None else float(self.tv_distance),
            "lossless": self.lossless,
            "tolerance": float(self.tolerance),
            "tau_law": [float(v) for v in self.tau_law],
            "acceptance_by_depth": [float(v) for v in self.acceptance_by_depth],
            "num_draft_outcomes": None if self.num_draft_outcomes is None else int(self.num_draft_outcomes),
            "details": _plain(self.extras),
            "note": self.note,
            "exact": bool(self.exact),
        }
        if self.exact:
            data["exact_values"] = {
                "block_efficiency": rational_text(self.block_efficiency),
                "expected_accepted": rational_text(self.expected_accepted),
                "tv_distance": None if self.tv_distance is None else rational_text(self.tv_distance),
                "tau_law": [rational_text(v) for v in self.tau_law],
            }
        return data

    def __repr__(self) -> str:
        tv = "not computed" if self.tv_distance is None else f"{float(self.tv_distance):.3g}"
        efficiency = rational_text(self.block_efficiency) if self.exact else f"{float(self.block_efficiency):.6g}"
        return (f"ExactResult(verifier={self.verifier!r}, tree={self.tree!r}, method={self.method!r}, "
                f"block_efficiency={efficiency}, tv_distance={tv}, lossless={self.lossless})")


def dp_applies(drafter: Drafter, verifier: Verifier) -> bool:
    """The walk DP is exact for a top-down walk of a node-local solver on i.i.d.-structured trees."""
    return verifier.node_solver is not None and drafter.iid_branching is not None


def rule_dp_applies(drafter: Drafter, verifier: Verifier) -> bool:
    """The verifier has its own exact method (``Verifier.rule_dp``) and it covers the drafter's trees."""
    return verifier.rule_dp is not None and verifier.rule_dp.applies(drafter)


def _log_law_entries(size: int, depth: int) -> float:
    """log of V^(L+1), the entries of the output law's longest block."""
    return (depth + 1) * math.log(size)


def _check_output_law_size(problem: Problem, drafter: Drafter) -> None:
    """The enumeration methods build the whole output law, V + V^2 + .. + V^(L+1) entries: refused above
    MAX_LAW_MODE_ENTRIES as in the DP's law mode (argmax-chain:1000000 has one draft outcome but asked numpy for
    a 4^16-entry array before this check)."""
    size, depth = problem.vocab_size, drafter.depth
    log_entries = log_prefix_count(size, 1, depth + 1)
    if log_entries > math.log(MAX_LAW_MODE_ENTRIES):
        raise ProblemTooLargeError(
            f"the output law of {drafter.spec} at V={size} has {readable_count(log_entries)} entries (every block "
            f"of length 1..{depth + 1}), above {MAX_LAW_MODE_ENTRIES:,} ({MAX_LAW_MODE_ENTRIES * 8 / 2**30:.0f} "
            "GiB); an enumeration builds it whole: use a shallower tree or a smaller vocabulary")


def _check_closed_form_size(problem: Problem, drafter: Drafter) -> None:
    _check_output_law_size(problem, drafter)
    outcomes = drafter.log_num_outcomes(problem.vocab_size)
    if outcomes > math.log(DEFAULT_MAX_TRACES):
        raise ProblemTooLargeError(
            f"whole-tree enumeration of {drafter.spec} at V={problem.vocab_size} visits up to "
            f"{readable_count(outcomes)} draft trees, above the limit of {DEFAULT_MAX_TRACES:,}; use a smaller "
            "tree or vocabulary, or a faster method (dp for node solvers on i.i.d. trees)")


def choose_method(problem: Problem, drafter: Drafter, verifier: Verifier, method: str = "auto", *,
                  need_output_law: bool = False) -> str:
    """The fastest correct method that fits: the walk DP where it applies (keeping the output law while it
    has at most MAX_LAW_ENTRIES entries, or whenever ``need_output_law``; else only the law of tau), else the
    rule's own method (``Verifier.rule_dp``) where it covers the tree, else fast enumeration where the
    drafter declares a slot plan, whole-tree enumeration otherwise. Sizes are
    estimated first; a method that cannot finish is refused with ProblemTooLargeError."""
    if method not in METHODS:
        raise VerispecError(f"unknown method {method!r}; choose one of {', '.join(METHODS)}")
    size = problem.vocab_size
    if method in ("dp", "dp-metrics"):
        if not dp_applies(drafter, verifier):
            raise IncompatibleDraftError(
                f"method '{method}' needs a top-down solver verifier on an i.i.d.-structured tree "
                f"(chain, iid, delayed, branch-iid); '{verifier.name}' on {drafter.spec} is not one")
        check_walk_size(size, drafter.iid_branching, "law" if method == "dp" else "metrics",
                        verifier.node_solver, problem=problem)
    elif method == "fast-enumeration":
        if not fast_enumeration.applies(problem, drafter):
            raise IncompatibleDraftError(
                f"method 'fast-enumeration' needs a float problem and a chain, delayed, iid or branch tree; "
                f"{drafter.spec} on this problem is not one")
        _check_output_law_size(problem, drafter)
        fast_enumeration.check_size(problem, drafter, fast_enumeration.uses_multisets(drafter, verifier))
    elif method == "rule-dp":
        if not rule_dp_applies(drafter, verifier):
            raise IncompatibleDraftError(
                f"method 'rule-dp' needs a verifier with its own exact method covering the tree (gbv and "
                f"psbv on chain, iid and delayed trees; traversal on branch trees; traversal-iid on chain, iid, "
                f"delayed and branch-iid trees); "
                f"'{verifier.name}' on {drafter.spec} is not one")
        _check_output_law_size(problem, drafter)
        verifier.rule_dp.check_size(problem, drafter)
    elif method in ("closed-form", "enumerate"):
        _check_closed_form_size(problem, drafter)
    if method != "auto":
        if need_output_law and method == "dp-metrics":
            raise VerispecError("method 'dp-metrics' keeps only the law of tau, so it cannot check losslessness; "
                                "use method 'dp' (or auto) for the output law")
        return method
    if dp_applies(drafter, verifier):
        check_walk_size(size, drafter.iid_branching, "metrics", verifier.node_solver, problem=problem)
        keep_law = need_output_law or _log_law_entries(size, drafter.depth) <= math.log(MAX_LAW_ENTRIES)
        if keep_law:
            check_walk_size(size, drafter.iid_branching, "law", verifier.node_solver, problem=problem)
        return "dp" if keep_law else "dp-metrics"
    if rule_dp_applies(drafter, verifier):
        _check_output_law_size(problem, drafter)
        verifier.rule_dp.check_size(problem, drafter)
        return "rule-dp"
    outcomes = drafter.log_num_outcomes(size)
    if outcomes > math.log(MAX_ENUMERATED_TREES):  # before any slot plan is built
        raise ProblemTooLargeError(
            f"exact enumeration of {drafter.spec} at V={size} covers up to {readable_count(outcomes)} draft trees; "
            f"'{verifier.name}' is not a node solver on an i.i.d. tree, so the walk DP does not apply; use a "
            "smaller tree or vocabulary")
    if fast_enumeration.applies(problem, drafter):
        _check_output_law_size(problem, drafter)
        fast_enumeration.check_size(problem, drafter, fast_enumeration.uses_multisets(drafter, verifier))
        return "fast-enumeration"
    _check_closed_form_size(problem, drafter)
    return "closed-form"


#: Rough costs of an analysis on one core, for ``estimate_analysis`` (measured here, 2 cores under load, on chains
#: and trees of V = 3 to 64; each within a factor of about 3 of the cases measured):
#: seconds per prefix (of length 0..L) of the conditional tables a law-keeping method fills one prefix at a time
#: (3-18 us: the rule DPs' tables, the losslessness check's target law, fast enumeration's prefix tables) ...
PREFIX_SECONDS = 6e-6
#: ... and per entry of the output law (V + .. + V^(L+1) entries, 0.3-1 us with its continuation by the target);
LAW_ENTRY_SECONDS = 3e-7
#: bytes held per entry of the output law at the peak (40-440 measured: the law, its continuation by the target,
#: the target's law, the conditional tables, and the method's own arrays of the same order, such as the walk's
#: per-depth states or the post-order DP's deletion sequences);
LAW_ENTRY_BYTES = 256
#: seconds per byte of fast enumeration's working arrays (``fast_enumeration.log_bytes``: 4-5 ns);
FAST_BYTE_SECONDS = 3e-9
#: seconds per node of each draft tree of whole-tree enumeration, one tree at a time (0.1-1 of this: the count of
#: trees is an upper bound);
TREE_NODE_SECONDS = 1e-5
#: seconds per element operation of the walk DP (``dp.estimate_walk`` counts them; about 1.5 ns).
WALK_OPERATION_SECONDS = 1.5e-9
#: How many times slower an exact (rational) analysis is than the float estimate above, at least: measured 20
#: (specinfer on iid:50,3 at V = 4, 3.4 s) to 90 (nss on iid:100,2, 25 s), 200 (gbv on iid:6,5), 1,400
#: (traversal-iid on iid:4,4) and past 2,000 (psbv on iid:3,5, 22 s; spectr on iid:50,2, over 60 s): a Fraction
#: operation costs microseconds where numpy's costs nanoseconds, and the numbers grow with depth. The least of these
#: is the factor, so an exact analysis it refuses surely runs past the limit.
RATIONAL_SLOWDOWN = 20.0


class ProblemShape(Problem):
    """A problem known by its size only: its vocabulary, whether its laws are exact, and the log of how many
    distinct states its prefixes of each length have (``log_states``; every prefix by default), which is all that
    ``choose_method`` and ``estimate_analysis`` read. It lets a build estimate its cells before their problems
    are drawn (``verispec.study.cells.family_shape``); its laws are never asked for."""

    horizon = None

    def __init__(self, vocab_size: int, log_states=None, *, exact: bool = False):
        self.vocab_size, self.exact, self._log_states = int(vocab_size), bool(exact), log_states

    def target(self, prefix):
        raise VerispecError("a ProblemShape holds sizes, not laws: analyse the problem itself")

    draft = target

    def log_state_count(self, length: int) -> float:
        return super().log_state_count(length) if self._log_states is None else self._log_states(length)


@dataclass(frozen=True)
class AnalysisEstimate:
    """What ``analyze`` would do and roughly what it would cost (``estimate_analysis``): the ``method`` it
    would use, ``seconds`` of one core and peak ``bytes`` of working memory, each an order-of-magnitude figure
    (within a few times of what was measured), for deciding before a build whether its cells can run."""

    method: str
    seconds: float
    bytes: float

    def describe(self) -> str:
        """'about 12 min and 47 GiB with rule-dp'."""
        return f"about {readable_cost(self.seconds, self.bytes)} with {self.method}"


def readable_cost(seconds: float, count: float) -> str:
    """'12 min and 47.0 GiB': a time on one core and a memory size (none where ``count`` is 0), for messages."""
    if seconds < 120:
        time_text = f"{seconds:.2g} s" if seconds < 10 else f"{seconds:.0f} s"
    elif seconds < 7200:
        time_text = f"{seconds / 60:.0f} min"
    else:
        hours = seconds / 3600
        time_text = f"{hours:.3g} h" if hours < 1e6 else f"10^{math.log10(hours):.1f} h"
    if count <= 0:  # not estimated
        return time_text
    size_text = f"{count / 2**20:.0f} MiB" if count < 2**30 else fast_enumeration.readable_bytes(math.log(count))
    return f"{time_text} and {size_text}"


def estimate_analysis(problem: Problem, drafter: Drafter | str, verifier: Verifier, method: str = "auto", *,
                      need_output_law: bool = False) -> AnalysisEstimate:
    """The method ``analyze`` would use (``choose_method``, which refuses with ProblemTooLargeError what cannot
    finish at all) and a rough estimate of its time and memory, computed in logs without building anything.

    The engine's own limits admit analyses of minutes and gigabytes, which one ``verispec exact`` may well
    spend; a build of many cells (``verispec sweep``, ``selector dataset``) checks this estimate of its largest
    cell before the first one runs. Costs counted: the output law and the conditional tables a law-keeping
    method fills prefix by prefix (every method but 'dp-metrics'), the walk DP's element operations
    (``estimate_walk``), fast enumeration's arrays, whole-tree enumeration's trees. The rule DPs' own work
    beyond their tables is not counted (Traversal's post-order DP merges states, so no bound before it runs is
    tight); their limits per depth still refuse the hopeless ones while they run."""
    problem, drafter, verifier = as_problem(problem), as_drafter(drafter), as_verifier(verifier)
    check_compatible(verifier, drafter)
    used = choose_method(problem, drafter, verifier, method, need_output_law=need_output_law)
    size, depth = problem.vocab_size, drafter.depth
    seconds = law_bytes = work_bytes = 0.0
    if used != "dp-metrics":
        prefixes = math.exp(min(log_prefix_count(size, 0, depth), 700.0))
        entries = math.exp(min(log_prefix_count(size, 1, depth + 1), 700.0))
        seconds += PREFIX_SECONDS * prefixes + LAW_ENTRY_SECONDS * entries
        law_bytes = LAW_ENTRY_BYTES * entries
    if used in ("dp", "dp-metrics"):
        walk = estimate_walk(size, drafter.iid_branching, "law" if used == "dp" else "metrics",
                             verifier.node_solver.has_sequential_tests, problem)
        seconds += WALK_OPERATION_SECONDS * math.exp(min(walk.log_operations, 700.0))
        work_bytes = 3 * 8.0 * math.exp(min(walk.log_state_entries, 700.0))  # masses, moves and their products
    elif used == "fast-enumeration":
        work_bytes = math.exp(min(fast_enumeration.log_bytes(size, drafter, fast_enumeration.uses_multisets(
            drafter, verifier)), 700.0))
        seconds += FAST_BYTE_SECONDS * work_bytes
    elif used in ("closed-form", "enumerate"):
        seconds += TREE_NODE_SECONDS * drafter.max_nodes * math.exp(min(drafter.log_num_outcomes(size), 700.0))
    if problem.exact:
        seconds *= RATIONAL_SLOWDOWN
    return AnalysisEstimate(method=used, seconds=seconds, bytes=law_bytes + work_bytes)


def check_rational_cost(problem: Problem, drafter: Drafter, verifier: Verifier, method: str = "auto", *,
                        need_output_law: bool = False) -> None:
    """ProblemTooLargeError, before anything is built, when an exact (rational) analysis is estimated to take
    more than ``MAX_RATIONAL_SECONDS``, or than the time budget in force where that is longer: the size checks
    count operations and entries as float64 ones, and rationals cost at least ``RATIONAL_SLOWDOWN`` times more
    (``estimate_analysis`` counts it), so an analysis that passed every size check in float could run for hours
    exactly (bv on chain:9 at V = 4, 29 s of float estimate, ran past 60 s where float took 4 s). Float problems
    pass untouched."""
    if not problem.exact:
        return
    estimate = estimate_analysis(problem, drafter, verifier, method, need_output_law=need_output_law)
    left = budget.remaining()
    limit = MAX_RATIONAL_SECONDS if left is None else max(MAX_RATIONAL_SECONDS, left)
    if estimate.seconds > limit:
        raise ProblemTooLargeError(
            f"the exact (rational) analysis of '{verifier.name}' on {drafter.spec} at V={problem.vocab_size} would "
            f"take at least {readable_cost(estimate.seconds, 0)} with {estimate.method} ({RATIONAL_SLOWDOWN:g} "
            f"times its float estimate of {readable_cost(estimate.seconds / RATIONAL_SLOWDOWN, 0)}: rationals "
            f"are slower, and grow), above the limit of {readable_cost(limit, 0)}; run without --exact "
            "(float64), use a smaller tree or vocabulary, or give a --time-budget above the estimate")


def _method_note(requested: str, used: str, size: int, depth: int) -> str:
    how = "chosen by auto" if requested == "auto" else "as requested"
    if used == "dp-metrics":
        reason = (f"the output law would have V^(L+1) = {size}^{depth + 1} entries, above {MAX_LAW_ENTRIES:,}"
                  if requested == "auto" else "this method")
        return (f"{used} ({how}): {reason}, so only the law of tau is computed; losslessness is NOT checked "
                "(method 'dp' checks it with the output law)")
    return f"{used} ({how}); losslessness checked on the full output law"


def _numbers(values, exact: bool) -> list:
    """Fractions in exact mode, Python floats otherwise (no numpy scalars in results)."""
    return [Fraction(v) if exact else float(v) for v in values]


def as_drafter(drafter) -> Drafter:
    """``drafter`` itself, or the drafter of a tree specification ('iid:2,3'); else a one-line VerispecError."""
    if isinstance(drafter, str):
        return parse_tree(drafter)
    if not isinstance(drafter, Drafter):
        raise VerispecError("expected a Drafter or a tree specification such as 'chain:3', got "
                            f"{type(drafter).__name__}")
    return drafter


def as_problem(problem) -> Problem:
    """``problem`` itself when it is a verispec Problem; else a one-line VerispecError saying what to pass."""
    if not isinstance(problem, Problem):
        hint = (f"; for a problem file use verispec.simulator.load_problem({str(problem)!r})"
                if isinstance(problem, (str, os.PathLike)) else "")
        raise VerispecError("expected a verispec Problem (e.g. verispec.simulator.sun_toy_problem(), random_problem("
                            f"V, depth, seed) or load_problem(PATH)), got {type(problem).__name__}{hint}")
    return problem


def check_deadline(deadline) -> None:
    """A one-line VerispecError unless ``deadline`` is None or a number (a ``time.monotonic()`` value)."""
    if deadline is not None and (isinstance(deadline, bool) or not isinstance(deadline, (int, float, np.integer,
                                                                                        np.floating))
                                 or math.isnan(deadline)):
        raise VerispecError(f"deadline must be None or a time.monotonic() value (a number, e.g. time.monotonic() + 60),"
                            f" got {describe(deadline)}")


def as_verifier(verifier) -> Verifier:
    """``verifier`` itself when it is a verispec Verifier; else a one-line VerispecError (names are resolved a
    layer up, by ``verispec.analyze``)."""
    if isinstance(verifier, str):
        raise VerispecError(f"verifier given by name {verifier!r}: use verispec.analyze, which resolves names, or "
                            f"pass verispec.verifiers.get_verifier({verifier!r})")
    if not isinstance(verifier, Verifier):
        raise VerispecError(f"expected a verispec Verifier (a subclass of verispec.verifiers.Verifier), got "
                            f"{type(verifier).__name__}")
    return verifier


def analyze(problem: Problem, drafter: Drafter | str, verifier: Verifier, *, method: str = "auto",
            tolerance: float | None = None, kernel_cache: dict | None = None, progress: bool = False,
            deadline: float | None = None, need_output_law: bool = False) -> ExactResult:
    """Exact output law and metrics of ``verifier`` on trees drawn by ``drafter`` for ``problem``.

    ``drafter`` may be a tree specification ('iid:2,3'). ``method``: see the module docstring; 'auto' picks
    with ``choose_method`` and ``ExactResult.note`` says what it took and whether losslessness was checked
    (``need_output_law`` makes it keep the output law or refuse). ``kernel_cache`` may be shared between DP
    calls on the same problem and verifier. ``progress`` shows progress bars. ``deadline`` (a
    ``time.monotonic()`` value) stops the analysis with AnalysisTimeoutError once passed.
    """
    problem, drafter, verifier = as_problem(problem), as_drafter(drafter), as_verifier(verifier)
    check_deadline(deadline)
    if kernel_cache is not None and not isinstance(kernel_cache, dict):
        raise VerispecError(f"kernel_cache must be a dict (shared between DP calls) or None, got "
                            f"{type(kernel_cache).__name__}")
    if tolerance is not None and not (isinstance(tolerance, (int, float, Fraction)) and tolerance >= 0
                                      and math.isfinite(tolerance)):
        raise VerispecError(f"tolerance must be a finite number >= 0, got {tolerance!r}")
    with budget.time_budget(deadline):
        check_compatible(verifier, drafter)
        problem.require_depth(drafter.depth)
        drafter.check_problem(problem)
        used = choose_method(problem, drafter, verifier, method, need_output_law=need_output_law)
        check_rational_cost(problem, drafter, verifier, used, need_output_law=need_output_law)
        return _analyze(problem, drafter, verifier, used, method, tolerance, kernel_cache, progress)


def _analyze(problem, drafter, verifier, used, requested, tolerance, kernel_cache, progress) -> ExactResult:
    size, depth, exact = problem.vocab_size, drafter.depth, problem.exact
    if tolerance is None:
        tolerance = 0 if exact else DEFAULT_TOLERANCE
    note = _method_note(requested, used, size, depth)
    if used in ("dp", "dp-metrics"):
        walk = walk_dp(problem, drafter.iid_branching, verifier.node_solver,
                       mode="law" if used == "dp" else "metrics", kernel_cache=kernel_cache, progress=progress)
        extras = {"dp_states": walk.num_states}
        if walk.emitted is None:
            return ExactResult(verifier=verifier.name, tree=drafter.spec, method=used, output_law=None,
                               tv_distance=None, tolerance=tolerance, tau_law=_numbers(walk.tau_law, exact),
                               num_draft_outcomes=None, exact=exact, extras=extras, note=note)
        emitted, num_outcomes = list(walk.emitted), None
    elif used == "rule-dp":
        law = verifier.rule_dp.output_law(problem, drafter, progress=progress)
        emitted, num_outcomes = list(law.emitted), None
        extras = {"rule_dp": verifier.rule_dp.name, **law.details}
    elif used == "fast-enumeration":
        fast = fast_enumeration.fast_output_law(problem, drafter, verifier)
        emitted, num_outcomes = list(fast.emitted), fast.num_rows
        extras = {"topologies": fast.num_topologies, "multiset_paths": fast.multisets}
    else:
        emitted = [np.zeros((size,) * length, dtype=object if exact else np.float64)
                   for length in range(1, depth + 2)]
        if exact:
            for array in emitted:
                array[...] = Fraction(0)
        outcomes = drafter.outcomes(problem)
        trees = [tree for tree, _ in outcomes]
        with tqdm(total=len(trees), desc="draft trees", disable=not progress, leave=False) as bar:
            # 'closed-form': the verifier's law once per topology of the drafter's trees; 'enumerate': the
            # procedure over every choice trace, tree by tree
            for batch, members in TreeBatch.of_trees(trees):
                budget.check("whole-tree enumeration")
                if used == "enumerate":
                    laws = np.stack([verifier.enumerated_emission_law(trees[index]) for index in members])
                else:
                    laws = verifier.emission_laws(batch)
                check_emission_laws(verifier.name, batch, laws)
                for row, index in enumerate(members):
                    tree, probability = outcomes[index]
                    for node, path in enumerate(tree.paths):
                        emitted[len(path)][path] += probability * laws[row][node]
                bar.update(len(members))
        num_outcomes, extras = len(outcomes), {}
    output_law = OutputLaw(size, depth, tuple(emitted))
    difference = output_law.continued_with_target(problem) - target_law(problem, depth + 1)
    tv_distance = abs(difference).sum() / 2
    return ExactResult(verifier=verifier.name, tree=drafter.spec, method=used, output_law=output_law,
                       tv_distance=tv_distance if exact else float(tv_distance), tolerance=tolerance,
                       tau_law=_numbers(output_law.length_law(), exact), num_draft_outcomes=num_outcomes, exact=exact,
                       extras=extras, note=note)
