"""One rule for raises (issue 54, class 7): LOSSY whenever a loss is established - on the given problem too, where the
calls that did not raise may show it - with the raise listed; RAISES only when no loss was shown. Also: a raise does
not end a black-box test (the runs go on, and a one-sided test judges the others), exits from the checked code are
raises, and a raise that does not repeat or state that changes on every call is said.

Expected values are derived here by hand, on TOY (p = (1/3, 2/3), q = (2/3, 1/3), context-free) with one draft
(chain:1): the rule accepts draft x when u0 q(x) < p(x), and after a rejection draws from p (lossy) or from the
residual (p - q)+ = (0, 1/3) (Leviathan et al., lossless); the raising functions raise where u0 < 0.05. On the inputs
that do not raise, draft 0 (q = 2/3, p/q = 1/2) is accepted for u0 in [0.05, 1/2) - mass 2/3 * 0.45 = 0.3 - and
rejected for u0 in [1/2, 1) - mass 1/3; draft 1 (p/q = 2) is accepted for u0 in [0.05, 1) - mass 0.95/3. The first
token's law over the non-raising inputs is then
  lossy:    (0.3 + 1/3 * 1/3, 0.95/3 + 1/3 * 2/3) = (37/90, 97/180): excess over p = 37/90 - 1/3 = 7/90;
  lossless: (0.3, 0.95/3 + 1/3) = (0.3, 0.65): below p = (1/3, 2/3) everywhere, excess 0;
and the second token is drawn from p in every case, so the excess of the continued law is the first token's.
"""

from __future__ import annotations

import inspect
import sys

import numpy as np
import pytest

from tests.support import external_rules as rules
from verispec.cli import main
from verispec.errors import AnalysisTimeoutError, UserCodeExit
from verispec.external.adapter import ExternalVerifier
from verispec.external.blackbox import RAISING_ROWS, blackbox_test
from verispec.external.check import check_external
from verispec.external.raises import StateWatch
from verispec.external.runner import RaiseLog
from verispec.simulator.problems import ContextFreeProblem
from verispec.simulator.tree_specs import parse_tree
from verispec.verdict import EXIT_INCONCLUSIVE, EXIT_LOSSY, EXIT_RAISES, Verdict

TOY = ContextFreeProblem([1 / 3, 2 / 3], [2 / 3, 1 / 3])
TOY_OPTIONS = ["--target", "0.3333333333333333,0.6666666666666667", "--draft", "0.6666666666666667,0.3333333333333333"]
LOSSY_EXCESS = 7 / 90
RAISING_MASS = 0.05


def _line_of(function, text: str) -> str:
    lines, first = inspect.getsourcelines(function)
    index = next(number for number, line in enumerate(lines) if text in line)
    return f"{__name__.rsplit('.', 1)[-1]}.py:{first + index}"


def lossy_raising(draft_tokens, draft_probs, target_probs, uniforms):
    """Draws from p after a rejection (lossy), and raises where u0 < 0.05."""
    if np.any(uniforms[:, 0] < 0.05):
        raise ValueError("u0 below 0.05")
    return rules.token_level_resample_from_target(draft_tokens, draft_probs, target_probs, uniforms)


def lossless_raising(draft_tokens, draft_probs, target_probs, uniforms):
    """Leviathan et al.'s rule (lossless), raising where u0 < 0.05."""
    if np.any(uniforms[:, 0] < 0.05):
        raise ValueError("u0 below 0.05")
    return rules.token_level(draft_tokens, draft_probs, target_probs, uniforms)


def lossy_exiting(draft_tokens, draft_probs, target_probs, uniforms):
    """The lossy rule, ending the process with status 0 ('success') where u0 < 0.05."""
    if np.any(uniforms[:, 0] < 0.05):
        sys.exit(0)
    return rules.token_level_resample_from_target(draft_tokens, draft_probs, target_probs, uniforms)


def lossless_patched_exit(draft_tokens, draft_probs, target_probs, uniforms):
    """The lossless rule, where u0 < 0.05 calling what the supervised worker turns into UserCodeExit (os._exit)."""
    if np.any(uniforms[:, 0] < 0.05):
        raise UserCodeExit("os._exit(3)")
    return rules.token_level(draft_tokens, draft_probs, target_probs, uniforms)


FIRST = [True]


def raises_on_its_first_call(draft_tokens, draft_probs, target_probs, uniforms):
    """Lossless, raising on its first call only (a flag kept across calls)."""
    if FIRST[0]:
        FIRST[0] = False
        raise KeyError("the first call")
    return rules.token_level(draft_tokens, draft_probs, target_probs, uniforms)


COUNT = {"calls": 0}


def raises_on_its_500th_call(draft_tokens, draft_probs, target_probs, uniforms):
    """Lossless, raising on its 500th call only (a counter kept across calls); a check makes fewer calls."""
    COUNT["calls"] += 1
    if COUNT["calls"] == 500:
        raise RuntimeError("the 500th call")
    return rules.token_level(draft_tokens, draft_probs, target_probs, uniforms)


CACHE: dict = {}


def caches_its_tables(draft_tokens, draft_probs, target_probs, uniforms):
    """Lossless, filling a cache keyed by the batch's shape (state that settles: the same call adds nothing)."""
    CACHE.setdefault(draft_tokens.shape, len(CACHE))
    return rules.token_level(draft_tokens, draft_probs, target_probs, uniforms)


# --- the rule on a given problem ---------------------------------------------------------------------------------


def test_a_lossy_function_that_raises_is_lossy_on_the_given_problem_with_the_raise_beside_it():
    """Before: RAISES (the integration stopped at the first raise). The excess is 7/90 (module docstring)."""
    report = check_external(lossy_raising, "chain", "chain:1", problem=TOY)
    assert report.verdict is Verdict.LOSSY and report.exit_status == EXIT_LOSSY and report.mode == "exact"
    assert report.tv_distance == pytest.approx(LOSSY_EXCESS, abs=1e-9) and report.tv_lower_bound
    assert report.raised["exception"] == "ValueError" and report.raised["uniforms"][0] < 0.05
    assert report.raised["line"] == _line_of(lossy_raising, 'raise ValueError("u0')
    assert report.raised["problem"] == report.problem and report.raised["repeats"] is True
    assert f"probability {RAISING_MASS:.3g}" in report.note and "at least" in report.describe()
    assert [entry["sequence"][0] for entry in report.discrepancies["overproduced"]] == [0, 0]
    assert report.discrepancies["underproduced"] == []


def test_a_lossless_function_that_raises_stays_raises():
    """Control: what the raising inputs leave out is missing, not a loss (excess 0), so no LOSSY is claimed."""
    report = check_external(lossless_raising, "chain", "chain:1", problem=TOY)
    assert report.verdict is Verdict.RAISES and report.exit_status == EXIT_RAISES
    assert "show no loss" in report.note and report.tv_distance is None


def test_black_box_goes_on_past_raises_and_tests_the_others_one_sided():
    """Before: RAISES at the first raise. The lossy one is rejected (excess 7/90 against a detectable TV of 0.037 at
    1e-6 with 20,000 runs; each call that raises is halved down to its raising rows, so the runs' cost grows with
    them); the lossless one, which raises as often, is not (the one-sided test's false-failure rate is 1e-6)."""
    runs = 20_000
    lossy = check_external(lossy_raising, "chain", "chain:1", problem=TOY, mode="blackbox", samples=runs)
    assert lossy.verdict is Verdict.LOSSY and lossy.blackbox.rejected and lossy.raised["exception"] == "ValueError"
    assert lossy.blackbox.detectable_tv < LOSSY_EXCESS  # the excess is one the runs can show
    raised = lossy.blackbox.raised_runs
    assert abs(raised - RAISING_MASS * runs) < 6 * np.sqrt(runs * RAISING_MASS)  # the raising runs, counted
    assert lossy.tv_estimate == pytest.approx(LOSSY_EXCESS, abs=0.02)
    lossless = check_external(lossless_raising, "chain", "chain:1", problem=TOY, mode="blackbox", samples=runs)
    assert lossless.verdict is Verdict.RAISES and not lossless.blackbox.rejected and lossless.blackbox.raised_runs
    assert lossless.blackbox.to_json()["raised_runs"] == lossless.blackbox.raised_runs


def _cut_at(call: int, rule):
    """``rule`` raising where u0 < 0.05, per row, whose call number ``call`` raises AnalysisTimeoutError as the budget
    does when it runs out (deterministic, unlike a clock)."""
    calls = [0]

    def function(draft_tokens, draft_probs, target_probs, uniforms):
        calls[0] += 1
        if calls[0] == call:
            raise AnalysisTimeoutError("the time budget, simulated")
        if np.any(uniforms[:, 0] < 0.05):
            raise ValueError("u0 below 0.05")
        return rule(draft_tokens, draft_probs, target_probs, uniforms)
    return function


def always_draft_zero(draft_tokens, draft_probs, target_probs, uniforms):
    """Rejects every draft and emits token 0: the first token's law is (1, 0) against p = (1/3, 2/3)."""
    out = np.full((len(draft_tokens), 2), -1, dtype=np.int64)
    out[:, 0] = 0
    return out


def test_a_test_the_budget_cuts_past_a_raise_judges_the_runs_made():
    """Before: the budget's end past a raise was RAISES whatever the runs had shown. After a raise the runs go on in
    calls of RAISING_ROWS rows in random order; the budget ending at call 8,000 leaves 3 * 2,048 of the 10,000 runs
    made (the first raise comes in the first call of 10,000 rows, which is run again), and the runs not made count as
    raised: the first token 0 is estimated about 0.61 against p = 1/3, rejected by the maximum test alone. Control:
    the lossless rule cut the same way is not rejected (what is missing is not a loss)."""
    lossy_log, lossless_log = RaiseLog(), RaiseLog()
    lossy = blackbox_test(TOY, parse_tree("chain:1"), ExternalVerifier(_cut_at(8_000, always_draft_zero), "chain",
                                                                       per_row=True), samples=10_000, raises=lossy_log)
    assert lossy.cut_short and lossy.rejected and lossy.samples == 3 * RAISING_ROWS and lossy_log.cut
    assert lossy.raised_runs == pytest.approx(RAISING_MASS * lossy.samples, abs=6 * np.sqrt(lossy.samples * 0.05))
    assert "time budget ended the test" in lossy.describe()
    lossless = blackbox_test(TOY, parse_tree("chain:1"), ExternalVerifier(_cut_at(8_000, rules.token_level),
                                                                          "chain", per_row=True), samples=10_000,
                             raises=lossless_log)
    assert lossless.cut_short and not lossless.rejected
    with pytest.raises(AnalysisTimeoutError):  # without a raise before it, the budget's end is the end
        blackbox_test(TOY, parse_tree("chain:1"), ExternalVerifier(_cut_at(1, rules.token_level), "chain",
                                                                   per_row=True), samples=10_000, raises=RaiseLog())


def test_a_search_finds_the_loss_on_a_problem_the_function_raises_on():
    """Before: RAISES (every problem raised, and a raising problem counted as not lossy)."""
    report = check_external(lossy_raising, "chain", "chain:1", max_vocab=2, max_examples=5, time_budget=30)
    assert report.verdict is Verdict.LOSSY and report.problem_source == "search" and report.tv_lower_bound
    assert report.raised is not None and report.tv_distance > 1e-3


# --- exits are raises ----------------------------------------------------------------------------------------


def test_sys_exit_in_the_checked_code_is_a_raise_not_the_end_of_the_check(capsys):
    """Before: SystemExit(0) left check_external, and the command ended with status 0."""
    report = check_external(lossy_exiting, "chain", "chain:1", problem=TOY)
    assert report.verdict is Verdict.LOSSY and report.raised["exception"] == "SystemExit"
    assert report.raised["message"] == "sys.exit(0)" and report.raised["line"] == _line_of(lossy_exiting, "sys.exit(0)")
    code = main(["check-external", f"{__file__}:lossy_exiting", "--layout", "chain", "--tree", "chain:1",
                 *TOY_OPTIONS])
    assert code == EXIT_LOSSY and "raised SystemExit" in capsys.readouterr().out


def test_a_patched_exit_is_a_raise():
    report = check_external(lossless_patched_exit, "chain", "chain:1", problem=TOY)
    assert report.verdict is Verdict.RAISES and report.raised["exception"] == "UserCodeExit"
    assert report.raised["message"] == "os._exit(3)"


# --- history -------------------------------------------------------------------------------------------------


def test_a_raise_that_does_not_repeat_is_said():
    """The first call (the probe's) raises; the same call made again does not: the raise depends on the history."""
    FIRST[0] = True
    report = check_external(raises_on_its_first_call, "chain", "chain:1", problem=TOY)
    assert report.verdict is Verdict.RAISES and report.raised["repeats"] is False
    assert "did not repeat" in report.note and "stayed the same on identical calls" in report.note


def test_state_that_changes_on_every_call_makes_lossless_inconclusive(capsys):
    """Before: LOSSLESS (the check makes fewer than 500 calls). The counter changes on every call: INCONCLUSIVE."""
    COUNT["calls"] = 0
    report = check_external(raises_on_its_500th_call, "chain", "chain:1", problem=TOY)
    assert report.verdict is Verdict.INCONCLUSIVE and report.tv_distance < 1e-9 and 0 < COUNT["calls"] < 500
    assert "global COUNT" in report.tried and "keeps state across calls" in report.tried
    COUNT["calls"] = 0
    code = main(["check-external", f"{__file__}:raises_on_its_500th_call", "--layout", "chain", "--tree", "chain:1",
                 *TOY_OPTIONS])
    assert code == EXIT_INCONCLUSIVE and "INCONCLUSIVE" in capsys.readouterr().out


def test_state_that_settles_is_a_note_and_a_pure_function_gets_none():
    """Controls: a cache filled once keeps LOSSLESS (with a note); the lossless rule itself gets no note at all."""
    CACHE.clear()
    cached = check_external(caches_its_tables, "chain", "chain:1", problem=TOY)
    assert cached.verdict is Verdict.LOSSLESS and "global CACHE" in cached.note and "stayed the same" in cached.note
    pure = check_external(rules.token_level, "chain", "chain:1", problem=TOY)
    assert pure.verdict is Verdict.LOSSLESS and "state" not in pure.note


def test_the_state_watch_sees_globals_closures_defaults_and_instances_but_not_generators():
    def counter():
        count = [0]

        def step():
            count[0] += 1
        return step

    class Counter:
        def __init__(self):
            self.calls = 0

        def __call__(self):
            self.calls += 1

    def default(memory=[]):  # noqa: B006 - the state under test
        memory.append(1)

    generator = np.random.default_rng(0)

    def draws():
        return generator.random()

    for function, name in ((counter(), "closure count"), (Counter(), "self"), (default, "defaults")):
        watch = StateWatch(function)
        function()
        assert watch.changed() == [name]
    watch = StateWatch(draws)
    draws()
    assert watch.changed() == []
