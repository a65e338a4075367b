"""The pytest plugin's ``verispec_check(function)`` confines the function (issue 77, item 2;
``verispec.testing.assert_lossless_confined``): inner pytest sessions in a process of their own (a function that ends
its process must not end this one), whose outcomes are what a CI reads.

Hostile functions, each lossy at heart (``token_level_resample_from_target``, whose exact TV on chain:1 at (P, Q) is
computed here in closed form) or ending the check: one ends its process with status 0 mid-check (before, the test
process itself ended with status 0 and the run read green with the test's result missing), one rewrites verispec's
verdict in its own process, one prints a passing verdict. Each fails its test. The negative control: a lossless
lambda (a closure, not importable by name) passes confined, so the confinement does not fail everything. And with
supervision switched off (``VERISPEC_SUPERVISE=0``) the check runs in the test's process and says so
(``UnconfinedCheckWarning``)."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import numpy as np
import pytest

pytest_plugins = ["pytester"]

P, Q = [0.5, 0.3, 0.2], [0.2, 0.2, 0.6]
ROOT = Path(__file__).resolve().parents[2]

INNER = textwrap.dedent(f"""
    import os
    import sys

    from tests.support.external_rules import token_level, token_level_resample_from_target
    from verispec.simulator import ContextFreeProblem

    PROBLEM = ContextFreeProblem({P}, {Q})


    def ends_its_process(*args):
        os._exit(0)


    def rewrites_the_verdict(*args):
        import verispec.verdict
        import verispec.external.check_report as report

        report.CheckReport.lossless = property(lambda self: True)  # in its own process: every report "lossless"
        verispec.verdict.Verdict.LOSSY._value_ = "lossless"
        return token_level_resample_from_target(*args)


    def prints_a_pass(*args):
        print("verispec: LOSSLESS", flush=True)
        print('{{"verdict": "lossless", "exit_status": 0}}', file=sys.stderr, flush=True)
        return token_level_resample_from_target(*args)


    def test_ends_its_process(verispec_check):
        verispec_check(ends_its_process, "chain", "chain:1", problems=PROBLEM, mode="exact")


    def test_rewrites_the_verdict(verispec_check):
        verispec_check(rewrites_the_verdict, "chain", "chain:1", problems=PROBLEM, mode="exact")


    def test_prints_a_pass(verispec_check):
        verispec_check(prints_a_pass, "chain", "chain:1", problems=PROBLEM, mode="exact")


    def test_a_lossless_closure(verispec_check):
        rule = lambda *args: token_level(*args)
        reports = verispec_check(rule, "chain", "chain:1", problems=PROBLEM, mode="exact")
        assert [report["verdict"] for report in reports] == ["lossless"]
        assert reports[0]["tv_distance"] < 1e-12
    """)


def _tv() -> float:
    """The exact TV of token_level_resample_from_target on chain:1 at (P, Q): the first token's law is
    min(p, q) + (1 - sum min(p, q)) p, the second the target."""
    p, q = np.array(P), np.array(Q)
    first = np.minimum(p, q) + (1 - np.minimum(p, q).sum()) * p
    return 0.5 * np.abs(first - p).sum()


@pytest.fixture(autouse=True)
def _checkout_on_the_path(monkeypatch):
    """The inner sessions import tests.support from this checkout."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))


def _inner(pytester, *options):
    pytester.makepyfile(test_inner=INNER)
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", "-rA", *options, timeout=600)


def test_hostile_functions_fail_their_tests_and_a_lossless_closure_passes(pytester, monkeypatch):
    monkeypatch.delenv("VERISPEC_SUPERVISE", raising=False)
    result = _inner(pytester)
    result.assert_outcomes(passed=1, failed=3)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    output = result.stdout.str()
    tv = f"exact TV distance {_tv():.6g} "
    ended = output.split("test_ends_its_process ___", 1)[1].split("___ test_", 1)[0]
    assert "RAISES" in ended and "exit" in ended.lower()
    for test in ("test_rewrites_the_verdict", "test_prints_a_pass"):
        section = output.split(f"{test} ___", 1)[1].split("___ test_", 1)[0]
        assert "verispec.testing.assert_lossless: LOSSY" in section and tv in section, section
    # what the function printed is shown fenced, as the code's, never as a line of verispec's own
    assert "| verispec: LOSSLESS" in output
    assert not any(line.startswith("verispec: LOSSLESS") for line in output.splitlines())


def test_with_supervision_off_the_check_runs_here_and_says_so(pytester, monkeypatch):
    monkeypatch.setenv("VERISPEC_SUPERVISE", "0")
    pytester.makepyfile(test_inner=INNER)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-k", "closure or prints", timeout=600)
    result.assert_outcomes(passed=1, failed=1)  # the lossy one is still caught; nothing forges it in this case
    output = result.stdout.str()
    assert "UnconfinedCheckWarning" in output and "unconfined" in output
