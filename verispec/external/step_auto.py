"""Auto mode of a check (a whole step, ``verispec.external.step``, or a given problem, ``verispec.external.check``)
within its time budget: exact mode gets a share of
the time left; where it does not finish, black-box mode runs until most of the rest is spent (a sample size set by
the clock, not by the outcomes) and its report says what those runs can detect. Issue 76, item 8: auto mode that
spent its whole budget in exact mode on a keyed step ended with nothing."""

from __future__ import annotations

import time

from verispec.guard import budget

#: Auto mode's share of the time left for exact mode; where exact mode does not finish in it, black-box mode takes
#: the rest, with as many runs as fit (its report says what they can detect).
AUTO_EXACT_SHARE = 0.5
#: Of the time left to black-box mode after exact mode ran out, the share its runs may take (the rest is the law's
#: tabulation and the report).
AUTO_BLACKBOX_SHARE = 0.8


class ExactOutOfTime(Exception):
    """Exact mode ran out of auto mode's share of the time budget (``exact_within``)."""

    def __init__(self, seconds: float, evaluations: int):
        super().__init__(f"exact mode ran past {seconds:.3g} s")
        self.seconds, self.evaluations = seconds, evaluations

    def fallback(self, runs: int) -> str:
        """The report's note on the black-box runs that replaced exact mode."""
        return (f"exact mode did not finish in {self.seconds:.3g} s ({AUTO_EXACT_SHARE:.0%} of the time left) after "
                f"{self.evaluations:,} calls, so black-box mode was used: {runs:,} runs fit the time left (the verdict "
                "says what they can detect)")


def exact_within(check, options: dict | None):
    """``check.exact_law`` under ``AUTO_EXACT_SHARE`` of the time left (``within_share``)."""
    return within_share(lambda: check.exact_law(options or {}), lambda: check.evaluations)


def within_share(run, evaluations):
    """``run()`` (an exact integration) under ``AUTO_EXACT_SHARE`` of the time left; ``ExactOutOfTime`` (with the
    calls ``evaluations()`` counted meanwhile) where it ran out and the outer budget still has time (an outer budget
    that ran out stays an ``AnalysisTimeoutError``)."""
    from verispec.errors import AnalysisTimeoutError

    left = budget.remaining()
    if left is None:
        return run()
    start, before = time.monotonic(), evaluations()
    try:
        with budget.time_budget(start + AUTO_EXACT_SHARE * left, what="exact mode"):
            return run()
    except AnalysisTimeoutError:
        if not budget.remaining():
            raise
        raise ExactOutOfTime(time.monotonic() - start, evaluations() - before) from None


#: The runs of the pilot that times a black-box test after exact mode ran out (``runs_by_clock``).
PILOT_RUNS = 200
#: The share of the time left after the pilot that the runs it sizes are planned to take: the pilot's rate is an
#: estimate, which a loaded box can halve, and the runs are not cut once started.
CLOCKED_SHARE = 0.5


def runs_by_clock(pilot, samples: int) -> int:
    """Where exact mode ran out of auto mode's share: the black-box runs planned to take ``CLOCKED_SHARE`` of the time
    left, at most ``samples`` (what the power asks for) and at least ``PILOT_RUNS``, timed by ``pilot(PILOT_RUNS)``
    (a test whose outcome is not used: the sample size is set by the clock, never by what the runs show), run twice
    and timed the second time (the first pays the test's setup: its trees, the target's table, first calls)."""
    pilot(PILOT_RUNS)
    start = time.monotonic()
    pilot(PILOT_RUNS)
    rate = PILOT_RUNS / max(time.monotonic() - start, 1e-6)  # runs a second
    left = budget.remaining()
    if left is None:
        return samples
    return int(min(samples, max(PILOT_RUNS, CLOCKED_SHARE * left * rate)))


def blackbox_runs(samples: int | None, target, detect_tv: float, alpha: float, power: float,
                  out_of_time: bool) -> tuple[int, float | None]:
    """(black-box runs, the ``time.monotonic()`` they stop at or None): ``samples`` as asked, else the runs the power
    asks for (``samples_for_power``, at most 2,000,000); where exact mode ran out of time (``out_of_time``), they
    stop at ``AUTO_BLACKBOX_SHARE`` of the time left, and the runs made are tested."""
    from verispec.external.blackbox import samples_for_power

    if samples is None:
        samples = min(2_000_000, samples_for_power(target, detect_tv, alpha, power))
    left = budget.remaining()
    if not out_of_time or left is None:
        return samples, None
    return samples, time.monotonic() + AUTO_BLACKBOX_SHARE * left


def runs_that_fit(problem, drafter, verifier, options) -> int:
    """A given problem's black-box runs after exact mode ran out: what the power asks for (or ``options.samples``),
    as many of them as fit the time left (``runs_by_clock``)."""
    import numpy as np

    from verispec.external.blackbox import MAX_SAMPLES, blackbox_test, samples_for_power
    from verispec.simulator.problems import target_law

    target = np.asarray(target_law(problem, drafter.depth + 1), dtype=np.float64)
    wanted = options.samples or min(MAX_SAMPLES, samples_for_power(target, options.detect_tv, options.alpha,
                                                                   options.power))
    return runs_by_clock(lambda runs: blackbox_test(problem, drafter, verifier, samples=runs, alpha=options.alpha,
                                                    seed=options.seed + 1, test=options.test), wanted)
