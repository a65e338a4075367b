"""Auto mode of a whole-step check (``verispec.external.step``) within its time budget: exact mode gets a share of
the time left; where it does not finish, black-box mode takes the rest with as many runs as fit, sized by the rate
exact mode called the step at (a lower bound on black-box mode's, which integrates nothing), and its report says
what those runs can detect. Issue 76, item 8: auto mode that spent its whole budget in exact mode on a keyed step
ended with nothing."""

from __future__ import annotations

import time

from verispec import budget

#: Auto mode's share of the time left for exact mode; where exact mode does not finish in it, black-box mode takes
#: the rest, with as many runs as fit (its report says what they can detect).
AUTO_EXACT_SHARE = 0.5
#: Of the time left to black-box mode after exact mode ran out, the share its runs are sized to (the rest is the
#: law's tabulation and the report).
AUTO_BLACKBOX_SHARE = 0.8
#: Runs that time black-box mode's calls before it is sized to the time left.
PILOT_RUNS = 256


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


def blackbox_runs(samples: int | None, target, detect_tv: float, alpha: float, power: float, out_of_time: bool,
                  time_runs) -> tuple[int, str]:
    """(black-box runs, what the note adds): ``samples`` as asked; else the runs the power asks for
    (``samples_for_power``, at most 2,000,000), cut, where exact mode ran out of time (``out_of_time``), to those
    that fit ``AUTO_BLACKBOX_SHARE`` of the time left at the rate ``time_runs(PILOT_RUNS)`` measures (seconds for
    that many runs; their outcomes are not used)."""
    from verispec.external.blackbox import samples_for_power

    if samples is not None:
        return samples, ""
    samples = min(2_000_000, samples_for_power(target, detect_tv, alpha, power))
    if not out_of_time or budget.remaining() is None:
        return samples, ""
    rate = PILOT_RUNS / max(time_runs(PILOT_RUNS), 1e-9)
    fit = max(1, int(AUTO_BLACKBOX_SHARE * (budget.remaining() or 0.0) * rate))
    if fit >= samples:
        return samples, ""
    return fit, f"; {fit:,} runs fit the time left (the verdict says what they can detect)"
