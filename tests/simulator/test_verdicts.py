"""Three-valued verdicts: LOSSLESS only when proven or powered, LOSSY with a witness, INCONCLUSIVE otherwise.

What exit 0 promises is tested from both sides: every way a check can fall short (too few runs, a search that
finds nothing, a budget spent before the suite is checked) must be INCONCLUSIVE, and each has a negative control
(the same check with the evidence it lacked reaches its verdict). The power statement of the black-box test is
checked against its closed form, and against a lossy rule whose exact TV the exact engine measures.
"""

from __future__ import annotations

import json
import math

import pytest

from tests.support import external_rules as rules
from tests.support.timing import timed
from verispec.cli import main
from verispec.errors import VerispecError
from verispec.external.adapter import ExternalVerifier
from verispec.external.blackbox import blackbox_test
from verispec.external.check import check_external
from verispec.hunt import build_problem, canonical_problems, hunt
from verispec.simulator.drafters import DraftLaw
from verispec.simulator.engine import analyze
from verispec.simulator.generators import random_problem
from verispec.simulator.problem_files import problem_from_json
from verispec.simulator.problems import ContextFreeProblem
from verispec.simulator.tree_specs import parse_tree
from verispec.testing import LosslessnessAssertionError, assert_lossless
from verispec.verdict import EXIT_INCONCLUSIVE, EXIT_LOSSLESS, EXIT_LOSSY, Verdict
from verispec.verifiers import ProcedureVerifier

#: CPU seconds of an idle core beyond a time budget (a budget holds to within 10% plus this, stretched by the load
#: measured around the check, ``tests.support.timing``): start-up and the last check's rounding.
ALLOWANCE = 0.5


# --------------------------------------------------------------------------------------------------
# The power statement


def test_the_detectable_tv_is_the_closed_form():
    """p = q = (1/2, 1/2), chain:1, N even: two draft trees of probability 1/2, N/2 runs each, weight 1/N; four
    sequences of target probability 1/4. So m = 1/2 * 4 * sqrt(1/N * 1/4) = 1/sqrt(N), S = N (1/N)^2 = 1/N and
    detectable = m + sqrt(S log(2/alpha) / 2) + sqrt(S log(1/(1-power)) / 2)."""
    n, alpha, power = 10_000, 1e-6, 0.99
    result = blackbox_test(ContextFreeProblem([0.5, 0.5], [0.5, 0.5]), parse_tree("chain:1"),
                           ExternalVerifier(rules.token_level, "chain"), samples=n, alpha=alpha, power=power)
    expected = (1 / math.sqrt(n) + math.sqrt(math.log(2 / alpha) / (2 * n))
                + math.sqrt(math.log(1 / (1 - power)) / (2 * n)))
    assert result.samples == n and result.detectable_tv == pytest.approx(expected, rel=1e-12)
    assert result.tv_threshold == pytest.approx(1 / math.sqrt(n) + math.sqrt(math.log(2 / alpha) / (2 * n)),
                                                rel=1e-12)
    assert "would have been detected with probability >= 0.99" in result.describe()


@pytest.mark.parametrize("detect_tv", [0.05, 0.02])
def test_runs_chosen_for_a_detect_tv_reach_it(detect_tv):
    problem = random_problem(3, 2, 4)
    result = blackbox_test(problem, parse_tree("chain:2"), ExternalVerifier(rules.token_level, "chain"),
                           detect_tv=detect_tv)
    assert result.detectable_tv <= detect_tv and not result.rejected
    # and not wastefully many: a quarter of the runs would not have reached it
    fewer = blackbox_test(problem, parse_tree("chain:2"), ExternalVerifier(rules.token_level, "chain"),
                          samples=result.samples // 4)
    assert fewer.detectable_tv > detect_tv


def test_a_lossy_rule_at_the_detectable_tv_is_caught():
    """The power claim itself: a rule whose exact TV (measured by the exact engine, not by the test) is at least
    the test's detectable TV is rejected. Stated at power 1 - 1e-7, so this test fails wrongly with probability
    at most 1e-7; the same rule with a tenth of the leak (TV far below the detectable one) is the contrast."""
    problem = ContextFreeProblem([0.5, 0.3, 0.2], [0.2, 0.2, 0.6])
    drafter = parse_tree("chain:2")
    power = 1 - 1e-7
    probe = blackbox_test(problem, drafter, ExternalVerifier(rules.token_level, "chain"), samples=100_000,
                          power=power)
    for leak in (0.02, 0.05, 0.1, 0.2, 0.4):
        verifier = ExternalVerifier(rules.leaky_token_level(leak), "chain")
        tv = analyze(problem, drafter, verifier).tv_distance
        if tv >= probe.detectable_tv:
            break
    else:
        pytest.fail("no leak reaches the detectable TV")
    assert tv >= probe.detectable_tv
    for seed in range(3):
        result = blackbox_test(problem, drafter, verifier, samples=100_000, power=power, seed=seed)
        assert result.rejected, result.describe()


# --------------------------------------------------------------------------------------------------
# Verdicts of check_external


def test_too_few_runs_are_inconclusive_not_lossless(capsys, tmp_path):
    """The issue's case: a rule that accepts every draft, black-box with --samples 5, was LOSSLESS with exit 0."""
    source = tmp_path / "accept.py"
    source.write_text("from tests.support.external_rules import accept_all\n")
    argv = ["check-external", f"{source}:accept_all", "--layout", "chain", "--tree", "chain:1", "--target",
            "0.5,0.5", "--draft", "0.9,0.1", "--mode", "blackbox", "--json"]
    assert main([*argv, "--samples", "5"]) == EXIT_INCONCLUSIVE
    data = json.loads(capsys.readouterr().out)
    assert data["verdict"] == "inconclusive" and data["lossless"] is None and data["tv_distance"] is None
    assert data["tv_estimate"] > 0 and data["power"]["detectable_tv"] > 1 and "--samples" in data["next"]
    # the control: with the runs the power calls for, the same rule is lossy (its exact TV is TV(p, q) = 0.4)
    assert main(argv) == EXIT_LOSSY
    data = json.loads(capsys.readouterr().out)
    assert data["verdict"] == "lossy" and data["tv_estimate"] == pytest.approx(0.4, abs=0.02)
    over = {tuple(entry["sequence"]) for entry in data["discrepancies"]["overproduced"]}
    assert over <= {(0, 0), (0, 1)}  # q(0) p(y) = 0.45 > p(0) p(y) = 0.25: the first token 0 is overproduced


def test_exact_verdicts_on_a_given_problem_and_their_evidence():
    problem = ContextFreeProblem([1 / 3, 2 / 3], [2 / 3, 1 / 3])
    fine = check_external(rules.token_level, "chain", "chain:1", problem=problem)
    assert fine.verdict is Verdict.LOSSLESS and fine.exit_status == EXIT_LOSSLESS and fine.discrepancies is None
    bad = check_external(rules.accept_all, "chain", "chain:1", problem=problem)
    assert bad.verdict is Verdict.LOSSY and bad.exit_status == EXIT_LOSSY
    # accept_all emits (x, y) with q(x) p(y); the target's is p(x) p(y): TV = TV(p, q) = 1/3
    assert bad.tv_distance == pytest.approx(1 / 3, abs=1e-12)
    over = {tuple(entry["sequence"]): entry for entry in bad.discrepancies["overproduced"]}
    under = {tuple(entry["sequence"]): entry for entry in bad.discrepancies["underproduced"]}
    assert set(over) == {(0, 0), (0, 1)} and set(under) == {(1, 0), (1, 1)}
    assert over[(0, 1)]["rule"] == pytest.approx(2 / 3 * 2 / 3) and over[(0, 1)]["target"] == pytest.approx(2 / 9)


def test_a_search_that_finds_nothing_is_inconclusive_and_says_what_to_run():
    report = check_external(rules.token_level, "chain", "chain:1", max_examples=10)
    assert report.verdict is Verdict.INCONCLUSIVE and report.exit_status == EXIT_INCONCLUSIVE
    assert "canonical problems" in report.tried and "--suite canonical" in report.next_step
    data = report.to_json()
    assert data["verdict"] == "inconclusive" and data["canonical"]["checked"] == data["canonical"]["total"]


def test_a_budget_spent_before_the_suite_is_checked_is_inconclusive():
    """A slow function (0.2 s a call): the budget ends inside the canonical suite. Even asked for the suite's
    verdict, the check says INCONCLUSIVE, keeps its budget, and names the fix; given time, the control passes."""
    slow = rules.slowed(rules.token_level, 0.2)
    report, watch = timed(check_external, slow, "chain", "chain:1", suite="canonical", time_budget=3)
    assert report.verdict is Verdict.INCONCLUSIVE and "--time-budget" in report.next_step
    assert report.canonical_checked < report.canonical_total
    assert watch.within(3 * 1.1, ALLOWANCE), watch


def test_a_function_that_never_returns_is_stopped_by_the_budget():
    """A function asleep for a minute, on a given problem (it had no limit there): stopped at the budget."""
    sleeper = rules.slowed(rules.token_level, 60)
    report, watch = timed(check_external, sleeper, "chain", "chain:1", problem=random_problem(2, 1, 0), time_budget=2)
    assert report.verdict is Verdict.INCONCLUSIVE and "time budget" in report.tried
    # a budget not kept sleeps the minute out: over the bound even at the largest stretch believed (2.2 + 0.5 x 50)
    assert watch.within(2 * 1.1, ALLOWANCE), watch


def test_a_witness_found_before_the_budget_ends_is_still_lossy():
    slow = rules.slowed(rules.token_level_resample_from_target, 0.01)
    report = check_external(slow, "chain", "chain:1", time_budget=20)
    assert report.verdict is Verdict.LOSSY and report.witness_label  # found within the canonical suite


# --------------------------------------------------------------------------------------------------
# The canonical suite comes first


def test_canonical_problems_are_valid_distinct_and_respect_the_options():
    for depth in (1, 2, 3):
        for max_vocab in (2, 3, 5):
            suite = canonical_problems(depth, max_vocab)
            labels = [member.label for member in suite]
            assert len(labels) == len(set(labels)) > 0
            for member in suite:
                problem = build_problem(member.candidate, exact=True)
                problem.require_depth(depth)
                assert 2 <= problem.vocab_size <= min(max_vocab, 3)
                for prefix in [(), *[(t,) for t in range(problem.vocab_size)]][: depth + 1]:
                    assert sum(problem.target(prefix)) == 1
    free = canonical_problems(2, 3, context_free=True)
    assert free and all(member.context_free for member in free)
    assert len(free) < len(canonical_problems(2, 3))


def test_the_search_tries_the_canonical_suite_before_random_problems():
    seen = []
    result = hunt(ExternalVerifier(rules.token_level, "chain"), parse_tree("chain:1"), max_examples=5,
                  progress=seen.append)
    assert result.witness is None and result.canonical_complete
    assert [check.label for check in result.canonical] == [m.label for m in canonical_problems(1, 3)]
    assert seen == list(range(1, result.examples_tried + 1)) and result.random_tried >= 5
    skipping = hunt(ExternalVerifier(rules.token_level, "chain"), parse_tree("chain:1"), max_examples=5,
                    canonical=False)
    assert skipping.canonical == () and skipping.canonical_total == 0


def test_a_looping_rule_cannot_outlast_the_search_budget():
    """A rule that loops without making a choice never returns to verispec's loops: the hard budget stops it."""

    def rule(tree, chooser):
        while True:
            pass

    spinning = ProcedureVerifier("spinning", rule, frozenset({DraftLaw.SINGLE_PATH}))
    result, watch = timed(hunt, spinning, parse_tree("chain:1"), time_budget=1.0)
    # stopped inside the first canonical problem: nothing was checked, and nothing is claimed
    assert result.witness is None and result.stopped == "time budget" and result.examples_tried == 0
    assert watch.within(1.1 * 1.0, ALLOWANCE), watch


# --------------------------------------------------------------------------------------------------
# Exit statuses of the commands


def test_check_external_exit_statuses(capsys):
    base = ["check-external", "tests/support/external_rules.py:token_level", "--layout", "chain", "--tree", "chain:1"]
    assert main([*base, "--max-examples", "5"]) == EXIT_INCONCLUSIVE
    assert "INCONCLUSIVE" in capsys.readouterr().out
    assert main([*base, "--max-examples", "5", "--suite", "canonical"]) == EXIT_LOSSLESS
    assert "LOSSLESS" in capsys.readouterr().out
    assert main([*base, "--target", "0.5,0.5", "--draft", "0.9,0.1"]) == EXIT_LOSSLESS
    capsys.readouterr()
    lossy = ["check-external", "tests/support/external_rules.py:accept_all", "--layout", "chain", "--tree", "chain:1"]
    assert main(lossy) == EXIT_LOSSY
    assert "LOSSY" in capsys.readouterr().out
    assert main([*lossy, "--suite", "canonical", "--target", "0.5,0.5", "--draft", "0.5,0.5"]) == 2
    assert "not both" in capsys.readouterr().err


def test_exact_fail_if_lossy_says_its_verdict(capsys):
    base = ["exact", "--target", "1/3,2/3", "--draft", "2/3,1/3", "--tree", "chain:2", "--fail-if-lossy"]
    assert main([*base, "--verifier", "bv"]) == EXIT_LOSSLESS
    assert "LOSSLESS" in capsys.readouterr().err
    assert main([*base, "--verifier", "tests/support/broken.py:bv_first_failure"]) == EXIT_LOSSY
    assert "LOSSY" in capsys.readouterr().err


# --------------------------------------------------------------------------------------------------
# assert_lossless, for other projects' test suites


def test_assert_lossless_passes_a_correct_function():
    reports = assert_lossless(rules.token_level, "chain", "chain:2", max_examples=10)
    assert len(reports) == 1 and reports[0].verdict is Verdict.LOSSLESS
    reports = assert_lossless(rules.token_level, "chain", "chain:2",
                              problems=[random_problem(3, 2, 0), ContextFreeProblem([0.5, 0.5], [1.0, 0.0])])
    assert [report.verdict for report in reports] == [Verdict.LOSSLESS, Verdict.LOSSLESS]


def test_assert_lossless_fails_a_lossy_function_with_the_witness():
    with pytest.raises(LosslessnessAssertionError) as caught:
        assert_lossless(rules.token_level_resample_from_target, "chain", "chain:2")
    message = str(caught.value)
    assert "LOSSY" in message and "witness problem" in message and "overproduced" in message
    assert "underproduced" in message
    # the message's witness reproduces: the function is lossy on it, the correct one is not
    witness = problem_from_json(json.loads(message.split("FILE): ", 1)[1].splitlines()[0]))
    again = check_external(rules.token_level_resample_from_target, "chain", "chain:2", problem=witness)
    assert again.verdict is Verdict.LOSSY and isinstance(caught.value, AssertionError)
    assert check_external(rules.token_level, "chain", "chain:2", problem=witness).verdict is Verdict.LOSSLESS


def test_assert_lossless_fails_when_it_cannot_decide():
    # a correct function, tested with too few runs to state any power: not a pass
    with pytest.raises(LosslessnessAssertionError, match="INCONCLUSIVE"):
        assert_lossless(rules.token_level, "chain", "chain:1", problems=[random_problem(2, 1, 0)], mode="blackbox",
                        samples=20)
    # and a budget that ends before the canonical suite is checked
    with pytest.raises(LosslessnessAssertionError, match="INCONCLUSIVE"):
        assert_lossless(rules.slowed(rules.token_level, 0.2), "chain", "chain:1", time_budget=1.5)
    with pytest.raises(VerispecError, match="empty list"):
        assert_lossless(rules.token_level, "chain", "chain:1", problems=[])
