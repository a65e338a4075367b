"""Counterexample search: the smallest problem on which a verifier is lossy.

Problems are drawn as small integer weights (probabilities w / sum(w), exact rationals), first
context-free and then context-dependent, with hypothesis doing the search and the shrinking: a failing
problem is shrunk towards fewer tokens, a context-free law and small weights, so the witness is as simple
as the search can make it. Each candidate is evaluated exactly by the engine (float64); a problem counts
as a witness when its TV distance exceeds ``threshold`` (default 1e-9, far above rounding).

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
from verispec.simulator.drafters import Drafter
from verispec.simulator.engine import analyze, check_compatible
from verispec.simulator.problems import ContextFreeProblem, TabularProblem, problem_to_json

DEFAULT_THRESHOLD = 1e-9


@dataclass(frozen=True)
class Witness:
    problem_json: dict
    tv_distance: float
    vocab_size: int
    context_free: bool
    examples_tried: int
    seconds: float


def _probabilities(weights: list[int]) -> list[Fraction]:
    total = sum(weights)
    return [Fraction(w, total) for w in weights]


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


def hunt(verifier, drafter: Drafter, *, max_vocab: int = 3, max_examples: int = 3000,
         threshold: float = DEFAULT_THRESHOLD, time_budget: float = 60.0, context_free: bool | None = None,
         progress=None, judge=None) -> Witness | None:
    """Search for the simplest problem on which ``verifier`` (on trees of ``drafter``) is lossy.

    The search is deterministic (derandomised hypothesis). Returns None when no witness is found within
    ``max_examples`` problems or ``time_budget`` seconds; when time runs out while shrinking, the simplest
    witness found so far is returned. ``judge(problem, deadline) -> distance`` replaces the exact analysis as
    the measure of lossiness (a black-box test, say; it must be deterministic); a problem is a witness when the
    distance exceeds ``threshold``.
    """
    def distance(problem, deadline=None) -> float:
        if judge is not None:
            return float(judge(problem, deadline))
        return float(analyze(problem, drafter, verifier, deadline=deadline).tv_distance)

    check_compatible(verifier, drafter)
    start = time.monotonic()
    deadline = start + time_budget
    tried = 0
    simplest = None
    failure: list[VerifierError] = []

    def lossy(candidate) -> bool:
        nonlocal tried, simplest
        if time.monotonic() > deadline:
            raise _OutOfTime
        tried += 1
        if progress is not None:
            progress(tried)
        try:
            found = distance(build_problem(candidate), deadline) > threshold
        except AnalysisTimeoutError:  # the budget holds inside one analysis too
            raise _OutOfTime from None
        except VerifierError as error:  # the rule failed (raised, returned nonsense, looped): not a verdict
            failure.append(error)
            raise _RuleFailed from None
        except VerispecError:  # a candidate the tree cannot be analysed on (e.g. too large): not a witness
            return False
        if found:
            simplest = candidate  # hypothesis only reports candidates simpler than the last witness
        return bool(found)

    config = settings(max_examples=max_examples, deadline=None, database=None, derandomize=True,
                      suppress_health_check=list(HealthCheck), phases=[Phase.generate, Phase.shrink])
    strategy = candidate_problems(drafter.depth, max_vocab, context_free=context_free, deadline=deadline)
    try:
        candidate = find(strategy, lossy, settings=config)
    except NoSuchExample:
        return None
    except _RuleFailed:
        # the rule's own error class (a subclass of VerifierError) tells callers what went wrong
        raise type(failure[0])(f"hunt stopped after {tried} problems: {failure[0]}") from None
    except (_OutOfTime, Flaky) as stopped:
        # Flaky: hypothesis saw the data generation change, as it does when drawing stops at the deadline
        if isinstance(stopped, Flaky) and time.monotonic() <= deadline:
            raise
        if simplest is None:
            return None
        candidate = simplest
    tv_distance = distance(build_problem(candidate))
    exact_problem = build_problem(candidate, exact=True)
    return Witness(problem_json=problem_to_json(exact_problem, drafter.depth), tv_distance=tv_distance,
                   vocab_size=candidate[0], context_free=candidate[1], examples_tried=tried,
                   seconds=time.monotonic() - start)
