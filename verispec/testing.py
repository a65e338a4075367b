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


def assert_lossless_confined(function, layout: str, tree: str, *, problems: Iterable[Problem | str] | None = None,
                             mode: str = "auto", time_budget: float = 60.0, **options) -> list[dict]:
    """``assert_lossless`` with ``function`` confined as ``verispec check-external FILE.py:NAME`` confines it (issue
    77, item 2; the pytest plugin's ``verispec_check``): the check runs in a supervised worker forked from this
    process (``verispec.guard.supervisor``), the function in a sandbox forked from the worker
    (``verispec.guard.sandbox``), reached by every call as a message; it is the object given, inherited through the
    forks, so a lambda or a closure is checked as it is. Whatever the function does (exits, signals, hangs, prints,
    rewrites objects in its own process, writes files), the verdict is the worker's, read from a file the supervisor
    writes once every process of the code has ended; what it prints goes to stderr behind ``| ``.

    Returns the reports as ``check-external --json`` writes them (plain dicts: the check ran in another process) when
    LOSSLESS; raises ``LosslessnessAssertionError`` with the evidence otherwise (its ``reports`` the same dicts, and
    ``confinement`` the layers that held), and VerispecError on bad input. Where supervision is off
    (``VERISPEC_SUPERVISE=0``, no ``os.fork``) or this process is itself supervised, the check runs here, as
    ``assert_lossless``, and a ``UnconfinedCheckWarning`` says so."""
    from verispec.guard import supervisor

    if not callable(function):
        raise VerispecError(f"verispec_check needs a function, got {type(function).__name__}")
    if not supervisor.available() or supervisor.in_worker_tree():
        import warnings

        warnings.warn(UnconfinedCheckWarning(
            "verispec: the function was checked in the test's own process, unconfined (supervision is off: "
            "VERISPEC_SUPERVISE=0, no os.fork, or a supervised process already); what it does can reach the verdict"),
            stacklevel=2)
        try:
            return [_plain_report(report) for report in assert_lossless(
                function, layout, tree, problems=problems, mode=mode, time_budget=time_budget, **options)]
        except LosslessnessAssertionError as error:
            raise LosslessnessAssertionError(str(error), [_plain_report(r) for r in error.reports]) from None
    return _confined(function, layout, tree, problems, mode, time_budget, options)


class UnconfinedCheckWarning(UserWarning):
    """``assert_lossless_confined`` ran the check in the caller's process (supervision is off)."""


def _plain_report(report) -> dict:
    from verispec.files.io import plain_json

    return plain_json(report.to_json())


def _confined(function, layout, tree, problems, mode, time_budget, options) -> list[dict]:
    """The check in a supervised worker; its answer from the supervisor's file (never from the worker's streams)."""
    import functools
    import os
    import tempfile

    from verispec.files.provenance import JSON_OUT, written_by
    from verispec.guard import supervisor

    name = getattr(function, "__qualname__", None) or type(function).__name__
    work = functools.partial(_check_in_worker, function, name, layout, tree, problems, mode, time_budget, options)
    with tempfile.TemporaryDirectory(prefix="verispec-check-") as folder:
        out = os.path.join(folder, "verdict.json")
        status = supervisor.run_supervised(work, supervisor.Supervision(
            command=f"verispec_check of {name}", time_limit=time_budget * CONFINED_BUDGET_GRACE + CONFINED_START_S,
            json_out=out, json_out_marker=written_by(JSON_OUT, "verispec_check"), checking=name,
            json_on_stdout=False))
        try:
            with open(out, encoding="utf-8") as file:
                document = json.load(file)
        except (OSError, ValueError):
            document = {}
    confinement = document.get("confinement")
    if "refused" in document:
        raise VerispecError(document["refused"])
    reports = document.get("reports")
    if status == 0 and document.get("exit_status") == 0 and isinstance(reports, list):
        return reports
    message = document.get("message")
    if message is None and document.get("exit_status") == Verdict.INCONCLUSIVE.exit_status and reports:
        message = (f"verispec_check: INCONCLUSIVE: the check of {name} found it LOSSLESS, but a confinement layer is "
                   f"missing, so the function could have forged that (confinement: {json.dumps(confinement)})")
    elif message is None:
        message = (f"verispec_check: the check of {name} ended with status {status} and no verdict (the "
                   "supervisor's line is on stderr)")
    error = LosslessnessAssertionError(message, reports if isinstance(reports, list) else [])
    error.confinement = confinement
    raise error


#: The supervisor's limit on a confined check: its time budget times this, plus the fork and the sandbox's start.
CONFINED_BUDGET_GRACE = 1.25
CONFINED_START_S = 30.0


def _check_in_worker(function, name, layout, tree, problems, mode, time_budget, options) -> int:
    """In the worker: the function in a sandbox, ``assert_lossless`` on it, one JSON line for the supervisor (the
    verdict's exit status, the failure's message, the reports)."""
    import functools

    from verispec.external import sandboxed
    from verispec.guard import sandbox

    try:
        checked = function  # VERISPEC_SANDBOX=0: in the worker, which the supervisor then says (no exit 0)
        if sandbox.enabled():
            box = sandbox.Sandbox(name, "function", sandboxed.describe, sandboxed.call_in_sandbox,
                                  loader=functools.partial(_inherited, function))
            box.load()
            checked = sandboxed.SandboxedFunction(box)
        reports = assert_lossless(checked, layout, tree, problems=problems, mode=mode, time_budget=time_budget,
                                  **options)
        answer = {"exit_status": 0, "message": None, "reports": [_plain_report(r) for r in reports]}
    except LosslessnessAssertionError as error:
        failed = [report for report in error.reports if report.verdict is not Verdict.LOSSLESS]
        answer = {"exit_status": failed[0].exit_status if failed else Verdict.INCONCLUSIVE.exit_status,
                  "message": str(error), "reports": [_plain_report(r) for r in error.reports]}
    except VerispecError as error:
        answer = {"exit_status": 2, "refused": " ".join(str(error).split())}
    print(json.dumps(answer))
    return answer["exit_status"]


def _inherited(function, spec: str, what: str):
    """The sandbox's loader: the function itself, which the sandbox has from the fork (nothing is imported)."""
    return function
