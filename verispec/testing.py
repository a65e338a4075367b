"""Helpers for the test suites of projects whose verification code verispec checks.

One line in a project's own pytest suite::

    from verispec.testing import assert_lossless

    def test_our_rejection_sampler_is_lossless():
        assert_lossless(our_module.rejection_sample, "ragged", "chain:3")

``assert_lossless`` passes only on a LOSSLESS verdict (``verispec.verdict``): proven by the function's exact
law, or powered by a black-box test that states the TV it would have detected. LOSSY and INCONCLUSIVE both
fail, and so does RAISES (the function raised on a problem), with the evidence in the message: the witness
problem as JSON (ready for ``verispec check-external --problem``), the sequences the function over- and
under-produces there against the target (or the exception and the line it raised at), and what was tried.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable

from verispec.errors import VerispecError
from verispec.external.check import check_external
from verispec.external.check_report import CheckReport
from verispec.simulator.problems import Problem
from verispec.verdict import Verdict


class LosslessnessAssertionError(AssertionError):
    """An ``assert_lossless`` that did not pass; ``reports`` holds every check made."""

    def __init__(self, message: str, reports: list[CheckReport]):
        super().__init__(message)
        self.reports = reports


def assert_lossless(function, layout: str, tree: str, *, problems: Iterable[Problem | str] | None = None,
                    mode: str = "auto", time_budget: float = 60.0, **options) -> list[CheckReport]:
    """Fail unless ``function`` (a verification function in ``layout``, see ``verispec.external.layouts``) is
    LOSSLESS on trees ``tree``.

    Without ``problems`` the verdict is about the canonical suite (``verispec.hunt.canonical_problems``; a witness
    search with the time left may still find a lossy problem elsewhere). With ``problems`` (Problem objects or
    problem files) every one of them must be LOSSLESS. ``time_budget`` (seconds) holds for the whole call;
    ``options`` go to ``check_external`` (``samples``, ``detect_tv``, ``power``, ``alpha``, ``rng``,
    ``per_row``, ``arrays``, ``max_vocab``, ...). Returns the reports when it passes; raises
    ``LosslessnessAssertionError`` (an AssertionError) with the evidence otherwise.
    """
    start = time.monotonic()
    reports: list[CheckReport] = []
    if problems is None:
        reports.append(check_external(function, layout, tree, mode=mode, time_budget=time_budget,
                                      suite="canonical", **options))
    else:
        problems = list(problems)
        if not problems:
            raise VerispecError("assert_lossless got an empty list of problems; leave problems out to check the "
                                "canonical suite")
        for problem in problems:
            left = time_budget - (time.monotonic() - start)
            if left <= 0:
                break
            reports.append(check_external(function, layout, tree, problem=problem, mode=mode, time_budget=left,
                                          **options))
            if reports[-1].verdict is not Verdict.LOSSLESS:
                break
        if len(reports) < len(problems) and all(report.verdict is Verdict.LOSSLESS for report in reports):
            raise LosslessnessAssertionError(
                f"verispec.testing.assert_lossless: {len(reports)} of {len(problems)} problems were checked within "
                f"the time budget of {time_budget:g} s: INCONCLUSIVE; raise time_budget", reports)
    failed = [report for report in reports if report.verdict is not Verdict.LOSSLESS]
    if failed:
        raise LosslessnessAssertionError(_message(failed[0]), reports)
    return reports


def _message(report: CheckReport) -> str:
    lines = [f"verispec.testing.assert_lossless: {report.verdict.word}", report.describe()]
    if report.problem is not None and report.verdict in (Verdict.LOSSY, Verdict.RAISES):
        lines.append(f"  witness problem (save it and run verispec check-external ... --problem FILE): "
                     f"{json.dumps(report.problem)}")
    return "\n".join(lines)
