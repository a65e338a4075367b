"""Choosers: write a verifier or drafter once as a plain sampling procedure, get its exact law for free.

A *procedure* is an ordinary Python function that makes every random decision through a ``Chooser``:

    def my_rule(tree, chooser):
        if chooser.bernoulli(accept_probability):
            ...
        token = chooser.categorical(correction_law)

``RandomChooser`` draws the decisions from an explicit ``numpy.random.Generator`` (real sampling);
``enumerate_law`` runs the procedure once for every sequence of decisions with positive probability
(its *choice traces*) and sums the probability of each returned outcome. This is the exhaustive check a
researcher gets for a new rule without deriving its law by hand, and the independent second derivation
that every shipped closed-form law is tested against.

The procedure must be deterministic given its decisions (no other source of randomness, no state that
survives between calls): the enumerator replays it from the start for every trace.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from fractions import Fraction
from typing import Protocol

import numpy as np

from verispec.errors import EnumerationTooLargeError, InvalidDistributionError, VerifierError, describe
from verispec.guard import budget

#: Tolerance on the sum of a categorical law handed to a chooser in float mode.
CHOICE_SUM_TOLERANCE = 1e-9

#: Default ceiling on the number of choice traces ``enumerate_law`` explores.
DEFAULT_MAX_TRACES = 2_000_000


class Chooser(Protocol):
    """The two random primitives a procedure may use."""

    def categorical(self, probs: Sequence | np.ndarray) -> int:
        """Return index i with probability probs[i]."""

    def bernoulli(self, prob) -> bool:
        """Return True with probability ``prob``."""


def _check_categorical(probs):
    """The probabilities, checked: a list, or for a float64 vector the array itself (checked without a
    per-token Python loop: real vocabularies have 150k tokens)."""
    if isinstance(probs, np.ndarray) and probs.dtype == np.float64 and probs.ndim == 1:
        values = probs
        bad = np.flatnonzero(~(values >= 0))  # NaN or negative
        first_bad = int(bad[0]) if bad.size else None
        total = float(values.sum())
    else:
        values = list(probs)
        first_bad = next((i for i, value in enumerate(values) if value != value or value < 0), None)
        total = sum(values[1:], values[0]) if values and first_bad is None else 0
    if len(values) == 0:
        raise InvalidDistributionError("categorical: empty probability vector")
    if first_bad is not None:
        value = values[first_bad]
        if value != value:
            raise InvalidDistributionError(f"categorical: NaN probability at index {first_bad}")
        raise InvalidDistributionError(f"categorical: negative probability {describe(value)} at index {first_bad}")
    if isinstance(total, Fraction) or isinstance(total, int):
        if total != 1:
            raise InvalidDistributionError(f"categorical: probabilities sum to {total}, not 1")
    elif abs(float(total) - 1.0) > CHOICE_SUM_TOLERANCE:
        raise InvalidDistributionError(f"categorical: probabilities sum to {describe(float(total))}, not 1")
    return values


def _check_bernoulli(prob):
    if prob != prob:
        raise InvalidDistributionError("bernoulli: probability is NaN")
    if prob < 0 or prob > 1:
        if isinstance(prob, (Fraction, int)) or prob < -CHOICE_SUM_TOLERANCE or prob > 1 + CHOICE_SUM_TOLERANCE:
            raise InvalidDistributionError(f"bernoulli: probability {describe(prob)} is outside [0, 1]")
        prob = min(max(prob, 0.0), 1.0)  # float rounding just outside [0, 1]
    return prob


class PreparedCategorical:
    """A probability vector checked once and made ready for many draws by ``RandomChooser.categorical``'s inverse
    CDF: the running sum over its support only. Adding a zero changes no float, so the running sums at the support
    are those over the whole vector, and a uniform picks the same index either way (a law of a few tokens at
    V = 151,936 then costs one pass to prepare and a search of a few entries a draw, where a draw was a pass)."""

    def __init__(self, probs):
        values = np.asarray(_check_categorical(probs), dtype=np.float64)
        self.support = np.flatnonzero(values)                                        # [n] indices of mass > 0
        self.cumulative = np.cumsum(values[self.support])                            # [n] running sums

    @classmethod
    def from_compact(cls, support, values) -> PreparedCategorical:
        """The same object as ``PreparedCategorical(expand_law((support, values), V))`` for a ``CompactLaw`` (the
        support's indices and their values; support None: ``values`` is the whole vector), built from the few
        entries without the [V] vector: the running sums are taken over the same nonzero entries in the same
        (ascending index) order, so every draw picks the same index."""
        if support is None:
            return cls(np.asarray(values, dtype=np.float64))
        support, values = np.asarray(support, dtype=np.int64), np.asarray(values, dtype=np.float64)
        if support.ndim != 1 or support.shape != values.shape:
            raise InvalidDistributionError(f"categorical: a compact law's support {support.shape} and values "
                                           f"{values.shape} must be two vectors of one length")
        if support.size > 1 and (np.diff(support) <= 0).any():  # ascending, as the dense vector's running sums go
            order = np.argsort(support, kind="stable")
            support, values = support[order], values[order]
            if (np.diff(support) == 0).any():
                raise InvalidDistributionError("categorical: a compact law names an index twice")
        _check_categorical(values)
        law = cls.__new__(cls)
        kept = np.flatnonzero(values)
        law.support = support[kept]                                                  # [n] indices of mass > 0
        law.cumulative = np.cumsum(values[kept])                                     # [n] running sums
        return law

    def index(self, uniform: float) -> int:
        """The index drawn by ``uniform`` in [0, 1): the first whose running sum exceeds uniform x total (never a
        zero-probability index, even where rounding puts the product at the total)."""
        position = int(np.searchsorted(self.cumulative, uniform * self.cumulative[-1], side="right"))
        return int(self.support[min(position, len(self.support) - 1)])


class RandomChooser:
    """Draw decisions from an explicit generator; nothing reads global random state.

    ``max_choices`` (e.g. ``MAX_CHOICES_PER_TRACE``, as real decoding sets for a rule it runs as a procedure)
    bounds the decisions one chooser hands out: past it, a VerifierError naming ``name`` says the procedure does
    not stop, where it would otherwise loop forever."""

    def __init__(self, rng: np.random.Generator, *, max_choices: int | None = None, name: str = "procedure"):
        self.rng = rng
        self.max_choices = max_choices
        self.name = name
        self.choices = 0

    def _count(self) -> None:
        self.choices += 1
        if self.max_choices is not None and self.choices > self.max_choices:
            raise VerifierError(_too_many_choices(self.name, self.max_choices))

    def categorical(self, probs) -> int:
        """An index drawn with probability probs[i] by inverse CDF from one uniform (``probs`` may be a
        ``PreparedCategorical``, for a law drawn from many times)."""
        self._count()
        law = probs if isinstance(probs, PreparedCategorical) else PreparedCategorical(probs)
        return law.index(self.rng.random())

    def bernoulli(self, prob) -> bool:
        self._count()
        return bool(self.rng.random() < float(_check_bernoulli(prob)))


#: In float mode a branch whose probability is below this is rounding noise of a branch that has
#: probability zero in exact arithmetic; if a procedure then asks for a categorical of an all-zero law
#: (an empty residual), the enumerator drops that trace instead of failing.
NEGLIGIBLE_BRANCH = 1e-12


class NegligibleBranch(Exception):
    """Raised inside a replay to abandon a trace of negligible probability (never reaches a caller)."""


#: Most random decisions one run of a procedure may make; more means it loops (e.g. a rejection loop
#: that never accepts), and the enumerator reports it instead of running forever.
MAX_CHOICES_PER_TRACE = 100_000


def _too_many_choices(name: str, limit: int) -> str:
    return (f"'{name}' made more than {limit} random decisions in one run; a procedure must stop after finitely "
            "many choices (does a loop never accept?)")


class _ReplayChooser:
    """Replays a fixed prefix of decisions, then takes the first option at every new decision point and
    records the untaken options so the enumerator can visit them later (depth-first over traces)."""

    def __init__(self, prefix: list[int], one, name: str = "procedure", max_traces: int = DEFAULT_MAX_TRACES):
        self.name = name
        self.max_traces = max_traces
        self.prefix = prefix
        self.position = 0
        self.weight = one
        self.trace: list[int] = []
        self.alternatives: list[tuple[int, list[int]]] = []  # (position, untaken choices)
        self._options: list[list[tuple[int, object]]] = []

    def _decide(self, options: list[tuple[int, object]]) -> int:
        # options: (choice, probability) pairs with probability > 0, in a fixed order
        if self.position >= MAX_CHOICES_PER_TRACE:  # the rule's fault, not the problem's size
            raise VerifierError(_too_many_choices(self.name, MAX_CHOICES_PER_TRACE))
        if self.position < len(self.prefix):
            choice = self.prefix[self.position]
        else:
            choice = options[0][0]
            if len(options) > 1:
                self.alternatives.append((self.position, [c for c, _ in options[1:]]))
        probability = dict(options)[choice]
        self.weight = self.weight * probability
        self.trace.append(choice)
        self.position += 1
        return choice

    def categorical(self, probs) -> int:
        values = list(probs)
        if values and not isinstance(self.weight, Fraction) and self.weight < NEGLIGIBLE_BRANCH \
                and all(v == 0 for v in values):
            raise NegligibleBranch
        values = _check_categorical(values)
        if len(values) > self.max_traces:  # sized first: one trace per outcome, before a list of them is made
            outcomes = int(np.count_nonzero(np.asarray(values, dtype=object) > 0))
            if outcomes > self.max_traces:
                raise EnumerationTooLargeError(
                    f"'{self.name}' drew from a categorical of {outcomes:,} outcomes; exact enumeration takes a choice "
                    f"trace for each, more than its limit of {self.max_traces:,}: check the rule on a smaller "
                    "vocabulary, or have it draw from a smaller law")
        return self._decide([(i, v) for i, v in enumerate(values) if v > 0])

    def bernoulli(self, prob) -> bool:
        prob = _check_bernoulli(prob)
        options = [(1, prob), (0, 1 - prob)]
        return bool(self._decide([(c, v) for c, v in options if v > 0]))


def enumerate_law(
    procedure: Callable[[Chooser], Hashable],
    *,
    exact: bool = False,
    max_traces: int = DEFAULT_MAX_TRACES,
    name: str = "procedure",
) -> dict[Hashable, float | Fraction]:
    """Exact law of ``procedure(chooser)``: {outcome: probability}, summed over every choice trace.

    Zero-probability options are never taken, so a procedure may index a residual that is empty only on
    branches of probability zero. ``exact`` starts products at Fraction(1) (use with Fraction inputs).
    Raises ``EnumerationTooLargeError`` past ``max_traces`` traces or when one run makes more than
    ``MAX_CHOICES_PER_TRACE`` decisions (``name`` names the procedure in the message), and
    ``AnalysisTimeoutError`` past the current time budget (verispec.guard.budget).
    """
    one = Fraction(1) if exact else 1.0
    law: dict[Hashable, float | Fraction] = {}
    pending: list[list[int]] = [[]]
    traces = 0
    while pending:
        prefix = pending.pop()
        budget.check(f"enumerating the choice traces of '{name}'")
        chooser = _ReplayChooser(prefix, one, name, max_traces)
        try:
            outcome = procedure(chooser)
        except NegligibleBranch:
            outcome = NegligibleBranch
        if chooser.position < len(prefix):
            raise VerifierError(f"'{name}' made fewer decisions on replay: it is not deterministic given its "
                                "choices (does it use another source of randomness or keep state between calls?)")
        traces += 1
        if traces > max_traces:
            raise EnumerationTooLargeError(
                f"more than {max_traces} choice traces; use a smaller problem or a faster method")
        if outcome is not NegligibleBranch:
            law[outcome] = law.get(outcome, 0 * one) + chooser.weight
        for position, untaken in reversed(chooser.alternatives):
            for choice in reversed(untaken):
                pending.append(chooser.trace[:position] + [choice])
    return law
