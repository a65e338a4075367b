"""Auto mode of a whole-step check (``verispec.external.step``) within its time budget: exact mode gets a share of
the time left; where it does not finish, black-box mode runs until most of the rest is spent (a sample size set by
the clock, not by the outcomes) and its report says what those runs can detect. Issue 76, item 8: auto mode that
spent its whole budget in exact mode on a keyed step ended with nothing."""

from __future__ import annotations

import time

from verispec import budget

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


def exact_within(check, options: dict | None):
    """``check.exact_law`` under ``AUTO_EXACT_SHARE`` of the time left; ``ExactOutOfTime`` where it ran out and the
    outer budget still has time (an outer budget that ran out stays an ``AnalysisTimeoutError``)."""
    from verispec.errors import AnalysisTimeoutError

    left = budget.remaining()
    if left is None:
        return check.exact_law(options or {})
    start, before = time.monotonic(), check.evaluations
    try:
        with budget.time_budget(start + AUTO_EXACT_SHARE * left, what="exact mode"):
            return check.exact_law(options or {})
    except AnalysisTimeoutError:
        if not budget.remaining():
            raise
        raise ExactOutOfTime(time.monotonic() - start, check.evaluations - before) from None


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
