"""Counterexample search: the simplest problem on which a verifier is lossy.

The search spends its first effort where published bugs live: a fixed *canonical suite* of small problems
(``canonical_problems``: two-token vocabularies, p = q with ties, point-mass and disjoint-support drafts, targets
that give a drafted token probability 0, Sun et al.'s toy, and context-dependent laws that catch a target row read
one position off), so that a slow function meets the most revealing problems first. Then random problems are
drawn as small integer weights (probabilities w / sum(w), exact rationals), first context-free and then
context-dependent, with hypothesis doing the search and the shrinking: a failing problem is shrunk towards fewer
tokens, a context-free law and small weights, so the witness is as simple as the search can make it. Each
candidate is evaluated exactly by the engine (float64) unless a ``judge`` replaces that; a problem counts as a
witness when its TV distance exceeds ``threshold`` (default 1e-9, far above rounding).

A search that finds nothing proves nothing: ``HuntResult`` says what was tried (every canonical problem with its
TV distance, how many random problems) and why the search stopped, so callers can say "inconclusive" honestly.
The whole search runs under a hard time budget (``verispec.guard.budget``), which also stops a rule stuck in a loop.

The witness is returned in the JSON problem layout, with probabilities as fraction strings, so
``verispec exact --problem witness.json`` reproduces it.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass
from fractions import Fraction

from hypothesis import HealthCheck, Phase, find, settings
from hypothesis import strategies as st
from hypothesis.errors import Flaky, NoSuchExample

from verispec.errors import AnalysisTimeoutError, VerifierError, VerispecError
from verispec.guard import budget, supervisor
from verispec.guard.limits import DEFAULT_THRESHOLD
from verispec.simulator.drafters import Drafter
from verispec.simulator.engine import analyze, check_compatible
from verispec.simulator.problem_files import problem_to_json
from verispec.simulator.problems import ContextFreeProblem, TabularProblem

#: Context-dependent canonical problems are tabulated over every prefix: at most this many conditionals.
MAX_CANONICAL_PREFIXES = 4096


@dataclass(frozen=True)
class Witness:
    problem_json: dict
    tv_distance: float
    vocab_size: int
    context_free: bool
    examples_tried: int
    seconds: float
    #: The canonical problem's name when the witness is one of the canonical suite, else "".
    label: str = ""


@dataclass(frozen=True)
class CanonicalProblem:
    """One problem of the canonical suite: a name that says what it probes, and its integer weights
    (vocab_size, context_free, target weights, draft weights) as the search's candidates carry them."""

    label: str
    candidate: tuple

    @property
    def vocab_size(self) -> int:
        return self.candidate[0]

    @property
    def context_free(self) -> bool:
        return self.candidate[1]


@dataclass(frozen=True)
class CanonicalCheck:
    """What the search saw on one canonical problem: its distance (TV, or the judge's), or why it was skipped
    (the tree cannot be drawn on it, e.g. more siblings without replacement than tokens)."""

    label: str
    vocab_size: int
    context_free: bool
    distance: float | None
    skipped: str = ""


@dataclass(frozen=True)
class HuntResult:
    """The outcome of a search: the witness if one was found, and everything that was tried."""

    witness: Witness | None
    #: The canonical problems checked, in order (a prefix of the suite when the search stopped early).
    canonical: tuple[CanonicalCheck, ...]
    canonical_total: int
    random_tried: int
    seconds: float
    #: Why the search ended: "witness", "time budget" or "max examples".
    stopped: str

    @property
    def canonical_complete(self) -> bool:
        return len(self.canonical) == self.canonical_total

    @property
    def examples_tried(self) -> int:
        return len(self.canonical) + self.random_tried

    def describe(self) -> str:
        """What was tried, in one sentence (for 'no witness' messages)."""
        skipped = sum(1 for check in self.canonical if check.skipped)
        suite = (f"all {self.canonical_total} canonical problems" if self.canonical_complete
                 else f"{len(self.canonical)} of {self.canonical_total} canonical problems")
        return (f"{suite}{f' ({skipped} not drawable for this tree)' if skipped else ''} and "
                f"{self.random_tried} random problems in {self.seconds:.1f} s (stopped: {self.stopped})")


def _probabilities(weights: list[int]) -> list[Fraction]:
    total = sum(weights)
    return [Fraction(w, total) for w in weights]


def _rotated(weights: list[int], shift: int) -> list[int]:
    shift %= len(weights)
    return weights[-shift:] + weights[:-shift] if shift else list(weights)


def _point_mass(size: int, token: int) -> list[int]:
    return [1 if index == token else 0 for index in range(size)]


def _by_last_token(size: int, depth: int, root_target, root_draft, target_after, draft_after) -> tuple | None:
    """A context-dependent candidate whose conditionals depend on the last token only (None when too many
    prefixes to tabulate)."""
    if sum(size ** length for length in range(depth + 1)) > MAX_CANONICAL_PREFIXES:
        return None
    target, draft = {}, {}
    for length in range(depth + 1):
        for prefix in itertools.product(range(size), repeat=length):
            target[prefix] = list(root_target if not prefix else target_after(prefix[-1]))
            if length < depth:
                draft[prefix] = list(root_draft if not prefix else draft_after(prefix[-1]))
    return size, False, target, draft


def canonical_problems(depth: int, max_vocab: int = 3, context_free: bool | None = None) -> list[CanonicalProblem]:
    """The canonical suite for trees of ``depth``, vocabularies 2..min(max_vocab, 3), most revealing first.

    Context-free problems probe the single-position rule: ties (p = q), Sun et al.'s toy (arXiv 2403.10444,
    Sec. 2: p = (1/3, 2/3), q = (2/3, 1/3)), point-mass drafts (n-gram and greedy drafters), point-mass targets
    that give a drafted token probability 0, disjoint and partly overlapping supports (each law missing a token
    the other has, so residuals and acceptance ratios both have zeros), and equal ratios p/q (tie-breaks).
    Context-dependent ones (``context_free`` not True, depth >= 1) make the target row at each position differ,
    so a rule that reads the target (or draft) law of the wrong position is caught: a target that is a point
    mass on the token after the last one, and laws skewed by the last token."""
    problems: list[CanonicalProblem] = []

    def free(label: str, target: list[int], draft: list[int]) -> None:
        problems.append(CanonicalProblem(f"V={len(target)} {label}", (len(target), True, target, draft)))

    def dependent(label: str, candidate: tuple | None) -> None:
        if candidate is not None and context_free is not True and depth >= 1:
            problems.append(CanonicalProblem(f"V={candidate[0]} {label}", candidate))

    for size in range(2, min(max_vocab, 3) + 1):
        uniform = [1] * size
        skewed = list(range(1, size + 1))                     # (1, 2[, 3])
        if size == 2:
            free("p = q uniform (ties)", uniform, uniform)
            free("Sun et al. toy p = (1/3, 2/3), q = (2/3, 1/3)", [1, 2], [2, 1])
            free("point-mass draft on token 0", uniform, _point_mass(2, 0))
            free("point-mass target: the draft's token 1 has target probability 0", _point_mass(2, 0), uniform)
            free("point-mass target: the draft's token 0 has target probability 0", _point_mass(2, 1), uniform)
            free("disjoint supports", _point_mass(2, 0), _point_mass(2, 1))
            free("p = q point mass", _point_mass(2, 0), _point_mass(2, 0))
            free("p = q skewed", [1, 2], [1, 2])
        else:
            free("p = q uniform (ties)", uniform, uniform)
            free("equal ratios p/q on tokens 1 and 2 (tie-breaks)", [2, 1, 1], [1, 2, 2])
            free("point-mass draft on token 0", uniform, _point_mass(3, 0))
            free("target probability 0 on a likely draft token", [0, 1, 1], [2, 1, 1])
            free("disjoint supports", [1, 1, 0], [0, 0, 1])
            free("partly overlapping supports", [1, 1, 0], [0, 1, 1])
            free("each law gives 0 to a token the other drafts, unequal weights", [0, 1, 1], [2, 0, 1])
            free("the same, mirrored (token order matters to tie-breaks and sibling order)", [1, 0, 1], [0, 3, 1])
            free("skewed draft that misses a target token (a residual on it)", uniform, [0, 1, 3])
            free("p = q skewed", [1, 1, 2], [1, 1, 2])
            free("reversed skew", [3, 2, 1], [1, 2, 3])
        dependent("target is a point mass on the token after the last one (row offsets)",
                  _by_last_token(size, depth, uniform, uniform,
                                 lambda last, size=size: _point_mass(size, (last + 1) % size),
                                 lambda last, uniform=uniform: uniform))
        dependent("target and draft skewed by the last token",
                  _by_last_token(size, depth, skewed, skewed[::-1],
                                 lambda last, skewed=skewed: _rotated(skewed, last + 1),
                                 lambda last, skewed=skewed: _rotated(skewed[::-1], last)))
        dependent("draft is a point mass on the last token, target uniform",
                  _by_last_token(size, depth, uniform, _point_mass(size, 0), lambda last, uniform=uniform: uniform,
                                 lambda last, size=size: _point_mass(size, last)))
    return problems


@st.composite
def _weights(draw, size: int, max_weight: int):
    weights = draw(st.lists(st.integers(0, max_weight), min_size=size, max_size=size))
    if sum(weights) == 0:
        weights[0] = 1
    return weights


class _OutOfTime(BaseException):
    """Ends the search at the time budget. A BaseException, so that hypothesis does not treat it as a
    failure of the condition and spend the rest of the day shrinking it."""


class _RuleFailed(BaseException):
    """Ends the search: the rule itself failed on a candidate (its VerifierError is re-raised)."""


@st.composite
def candidate_problems(draw, depth: int, max_vocab: int, max_weight: int = 6, context_free: bool | None = None,
                       deadline: float | None = None):
    """A small rational problem: (vocab_size, context_free, target weights, draft weights). Drawing a large
    context-dependent problem takes a while, so it stops at ``deadline`` (``time.monotonic()``) too."""
    size = draw(st.integers(2, max_vocab))
    # False shrinks first, so 'context_dependent' = False (context-free) is preferred in witnesses.
    dependent = draw(st.booleans()) if context_free is None else not context_free
    if not dependent:
        return size, True, draw(_weights(size, max_weight)), draw(_weights(size, max_weight))
    target, draft = {}, {}
    for length in range(depth + 1):
        for prefix in itertools.product(range(size), repeat=length):
            if deadline is not None and time.monotonic() > deadline:
                raise _OutOfTime
            target[prefix] = draw(_weights(size, max_weight))
            if length < depth:
                draft[prefix] = draw(_weights(size, max_weight))
    return size, False, target, draft


def build_problem(candidate, *, exact: bool = False):
    size, context_free, target, draft = candidate
    if context_free:
        return ContextFreeProblem(_probabilities(target), _probabilities(draft), exact=exact)
    return TabularProblem(size, {k: _probabilities(v) for k, v in target.items()},
                          {k: _probabilities(v) for k, v in draft.items()}, exact=exact)


class _Search:
    """One run of ``hunt``: how a candidate is judged, and everything tried so far (what ``HuntResult`` reports)."""

    def __init__(self, verifier, drafter: Drafter, suite: list[CanonicalProblem], *, threshold: float, start: float,
                 deadline: float, judge, progress):
        self.verifier, self.drafter, self.suite = verifier, drafter, suite
        self.threshold, self.start, self.deadline = threshold, start, deadline
        self.judge, self.progress = judge, progress
        self.checks: list[CanonicalCheck] = []
        self.tried = 0
        self.random_tried = 0
        #: (candidate, distance) of the simplest random witness so far
        self.simplest: tuple | None = None
        #: the rule's own error, when it failed on a candidate
        self.failure: VerifierError | None = None

    def distance(self, candidate) -> float:
        size, context_free, target, draft = candidate
        supervisor.note(f"hunt's problem #{self.tried}: vocabulary {size}, target weights {target}, draft weights "
                        f"{draft}{' (context-free)' if context_free else ''}")
        problem = build_problem(candidate)
        if self.judge is not None:
            return float(self.judge(problem, self.deadline))
        return float(analyze(problem, self.drafter, self.verifier, deadline=self.deadline).tv_distance)

    def evaluate(self, candidate) -> float | str:
        """The candidate's distance, or why it cannot be analysed (a str). Raises _OutOfTime / _RuleFailed."""
        if time.monotonic() > self.deadline:
            raise _OutOfTime
        self.tried += 1
        if self.progress is not None:
            self.progress(self.tried)
        try:
            return self.distance(candidate)
        except (AnalysisTimeoutError, budget.HardTimeout):  # the budget holds inside one analysis too
            raise _OutOfTime from None
        except VerifierError as error:  # the rule failed (raised, returned nonsense, looped): not a verdict
            self.failure = self.failure or error
            raise _RuleFailed from None
        except VerispecError as error:  # a candidate the tree cannot be analysed on (e.g. too large)
            return str(error)

    def lossy(self, candidate) -> bool:
        """hypothesis's condition: whether a random candidate is a witness."""
        self.random_tried += 1
        found = self.evaluate(candidate)
        if isinstance(found, str) or not found > self.threshold:
            return False
        self.simplest = (candidate, found)  # hypothesis only reports candidates simpler than the last witness
        return True

    def canonical_witness(self) -> HuntResult | None:
        """The canonical suite, in order: the result at its first witness, else None (every check recorded)."""
        for problem in self.suite:
            found = self.evaluate(problem.candidate)
            skipped = found if isinstance(found, str) else ""
            self.checks.append(CanonicalCheck(problem.label, problem.vocab_size, problem.context_free,
                                              None if skipped else found, skipped))
            if not skipped and found > self.threshold:
                return self.result(self.witness_of(problem.candidate, found, problem.label), "witness")
        return None

    def random_witness(self, max_examples: int, max_vocab: int, context_free: bool | None):
        """The simplest random witness hypothesis finds and shrinks (NoSuchExample when there is none)."""
        config = settings(max_examples=max_examples, deadline=None, database=None, derandomize=True,
                          suppress_health_check=list(HealthCheck), phases=[Phase.generate, Phase.shrink])
        strategy = candidate_problems(self.drafter.depth, max_vocab, context_free=context_free, deadline=self.deadline)
        return find(strategy, self.lossy, settings=config)

    def witness_of(self, candidate, tv_distance: float, label: str = "") -> Witness:
        exact_problem = build_problem(candidate, exact=True)
        return Witness(problem_json=problem_to_json(exact_problem, self.drafter.depth), tv_distance=tv_distance,
                       vocab_size=candidate[0], context_free=candidate[1], examples_tried=self.tried,
                       seconds=time.monotonic() - self.start, label=label)

    def out_of_time(self) -> HuntResult:
        """The result when the time budget ran out: the simplest random witness so far, if any."""
        if self.simplest is None:
            return self.result(None, "time budget")
        return self.result(self.witness_of(*self.simplest), "witness")

    def result(self, witness: Witness | None, stopped: str) -> HuntResult:
        return HuntResult(witness=witness, canonical=tuple(self.checks), canonical_total=len(self.suite),
                          random_tried=self.random_tried, seconds=time.monotonic() - self.start, stopped=stopped)


def hunt(verifier, drafter: Drafter, *, max_vocab: int = 3, max_examples: int = 3000,
         threshold: float = DEFAULT_THRESHOLD, time_budget: float = 60.0, context_free: bool | None = None,
         progress=None, judge=None, canonical: bool = True) -> HuntResult:
    """Search for the simplest problem on which ``verifier`` (on trees of ``drafter``) is lossy.

    The canonical suite comes first (``canonical=False`` skips it), then up to ``max_examples`` random problems
    (derandomised hypothesis, so the search is deterministic). The search ends at the first canonical witness,
    when hypothesis has shrunk a random witness, after ``max_examples`` random problems, or at ``time_budget``
    seconds (a hard budget: it interrupts a rule stuck in a loop too); when time runs out while shrinking, the
    simplest witness found so far is returned. ``judge(problem, deadline) -> distance`` replaces the exact
    analysis as the measure of lossiness (a black-box test, say; it must be deterministic); a problem is a
    witness when the distance exceeds ``threshold``. ``progress(count)`` is called with the number of problems
    tried so far. A rule that fails (raises, returns a non-law) stops the search with its own error class.
    """
    check_compatible(verifier, drafter)
    start = time.monotonic()
    suite = canonical_problems(drafter.depth, max_vocab, context_free) if canonical else []
    search = _Search(verifier, drafter, suite, threshold=threshold, start=start, deadline=start + time_budget,
                     judge=judge, progress=progress)
    try:
        with budget.time_budget(search.deadline, hard=True, what="the witness search"):
            try:
                found = search.canonical_witness()
                if found is not None:
                    return found
                candidate = search.random_witness(max_examples, max_vocab, context_free)
            except NoSuchExample:
                return search.result(None, "max examples")
            except _RuleFailed:
                # the rule's own error class (a subclass of VerifierError) tells callers what went wrong
                raise type(search.failure)(f"hunt stopped after {search.tried} problems: {search.failure}") from None
            except (_OutOfTime, Flaky, budget.HardTimeout) as stopped:
                # Flaky: hypothesis saw the data generation change, as it does when drawing stops at the deadline
                if isinstance(stopped, Flaky) and time.monotonic() <= search.deadline:
                    raise
                return search.out_of_time()
            return search.result(search.witness_of(candidate, search.simplest[1]), "witness")
    except AnalysisTimeoutError:
        # the timer fired where hypothesis turned the interruption into an error of its own (an IndexError from
        # its bookkeeping, say), which the budget reports as running out of time: the search stopped at its budget
        return search.out_of_time()


def next_search(result: HuntResult, max_examples: int, time_budget: float) -> str:
    """What to run to search further after a search without a witness."""
    if result.stopped == "time budget":
        advice = f"raise --time-budget (it was {time_budget:g} s)"
        if not result.canonical_complete:
            advice += " so that at least the canonical suite is checked"
        return advice
    return f"raise --max-examples (it was {max_examples}) or --max-vocab"
