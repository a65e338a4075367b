"""psbv's exact position-selection sum watches what its rationals cost (issue 64: ``exact --exact`` with psbv on
``delayed:4,4,4`` at V = 4 passed every size check, which counts float steps, and ran past 560 s).

The watch (``psbv_cost.RationalCost``) runs on time; here the time is a fake clock that each split advances by a cost
of its own input, bits^1.5 x pieces milliseconds (the growth of rational multiplication), so the cases are
deterministic and fast whatever the machine's load. The expected numbers come from running the sum without the
watch: its whole cost on the fake clock and its costliest split.
"""

from __future__ import annotations

from fractions import Fraction
from types import SimpleNamespace

import pytest

from verispec.errors import ProblemTooLargeError
from verispec.simulator.problems import ContextFreeProblem
from verispec.simulator.tree_specs import parse_tree
from verispec.verifiers import psbv, psbv_cost

PROBLEM = ContextFreeProblem([Fraction(k, 10) for k in (1, 2, 3, 4)], [Fraction(k, 10) for k in (4, 3, 2, 1)],
                             exact=True)


class FakeClock:
    """time.monotonic for psbv: each split adds bits^1.5 x pieces milliseconds of its input measure."""

    def __init__(self):
        self.now, self.costs = 0.0, []

    def split(self, real_split):
        def timed(measure, p, q, paths, exact, wanted=None, blend=False):
            cost = 1e-3 * psbv_cost.measure_bits(measure) ** 1.5 * len(measure.pieces)
            self.now += cost
            self.costs.append(cost)
            return real_split(measure, p, q, paths, exact, wanted, blend)
        return timed


@pytest.fixture
def clock(monkeypatch):
    fake = FakeClock()
    monkeypatch.setattr(psbv_cost, "time", SimpleNamespace(monotonic=lambda: fake.now))
    monkeypatch.setattr(psbv, "split", fake.split(psbv.split))
    return fake


def whole_cost(clock, monkeypatch, spec: str) -> tuple[float, float]:
    """The sum's cost on the fake clock with no limit in reach, and its costliest split."""
    monkeypatch.setattr(psbv_cost, "MAX_RATIONAL_SECONDS", 1e9)
    clock.now, clock.costs = 0.0, []
    psbv.PositionSelectionSum().output_law(PROBLEM, parse_tree(spec))
    return clock.now, max(clock.costs)


@pytest.mark.parametrize("spec", ["iid:3,3", "iid:4,3"])
def test_a_sum_whose_rationals_pass_the_limit_is_refused_within_one_split_of_it(spec, clock, monkeypatch):
    total, largest = whole_cost(clock, monkeypatch, spec)
    limit = total / 3
    monkeypatch.setattr(psbv_cost, "MAX_RATIONAL_SECONDS", limit)
    clock.now = 0.0
    with pytest.raises(ProblemTooLargeError, match="exact rationals on .* above the limit of") as refused:
        psbv.PositionSelectionSum().output_law(PROBLEM, parse_tree(spec))
    assert clock.now <= limit + largest  # stopped by the limit, not at the end
    assert "bits" in str(refused.value) and "\n" not in str(refused.value)


@pytest.mark.parametrize("spec", ["iid:3,3", "iid:4,3"])
def test_a_sum_within_the_limit_runs_to_the_end(spec, clock, monkeypatch):
    total, _ = whole_cost(clock, monkeypatch, spec)
    monkeypatch.setattr(psbv_cost, "MAX_RATIONAL_SECONDS", 2 * total)
    clock.now = 0.0
    law = psbv.PositionSelectionSum().output_law(PROBLEM, parse_tree(spec))
    assert sum(sum(block.ravel()) for block in law.emitted) == 1  # a probability law, exactly


def test_negative_control_without_the_watch_the_sum_runs_past_the_limit(clock, monkeypatch):
    # the sum as it was: no watch over its rationals, so nothing stops it before its end
    total, _ = whole_cost(clock, monkeypatch, "iid:3,3")
    monkeypatch.setattr(psbv_cost, "MAX_RATIONAL_SECONDS", total / 3)
    monkeypatch.setattr(psbv, "_RationalCost", _Unwatched)
    clock.now = 0.0
    psbv.PositionSelectionSum().output_law(PROBLEM, parse_tree("iid:3,3"))
    assert clock.now == pytest.approx(total) and clock.now > total / 3


class _Unwatched:
    def __init__(self, *args):
        pass

    def start_level(self, *args):
        pass

    def split_done(self):
        pass

    def end_level(self):
        pass


def test_float_sums_are_not_watched(monkeypatch):
    # the watch is for rationals only: a float sum never builds one
    monkeypatch.setattr(psbv, "_RationalCost", None)
    problem = ContextFreeProblem([0.1, 0.2, 0.3, 0.4], [0.4, 0.3, 0.2, 0.1])
    law = psbv.PositionSelectionSum().output_law(problem, parse_tree("iid:3,4"))
    assert abs(sum(float(block.sum()) for block in law.emitted) - 1) <= 1e-12
