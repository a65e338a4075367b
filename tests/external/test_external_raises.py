"""A checked function that raises is a finding, not bad input (issue 31, class 10).

An exception inside the function on a problem ends in the RAISES verdict (exit 4) with the problem, the exception,
the line that raised it and, for a call on one tree, the tree and the uniforms; a search records it and goes on
looking for a lossy witness (LOSSY, the raise listed beside it, if it finds one). What verispec can refuse before
running the function on a problem - a signature that cannot take the layout's arguments - stays bad input (exit 2).
Expected lines are read from this file's source; expected witnesses from the canonical suite's own listing.
"""

from __future__ import annotations

import inspect
import json

import numpy as np
import pytest

from tests.support import external_rules as rules
from verispec.cli import main
from verispec.errors import VerifierError, VerispecError
from verispec.external.adapter import ExternalVerifier
from verispec.external.check import check_external
from verispec.external.runner import FunctionRaised
from verispec.hunt import canonical_problems
from verispec.simulator.engine import analyze
from verispec.simulator.problems import ContextFreeProblem
from verispec.testing import LosslessnessAssertionError, assert_lossless
from verispec.verdict import EXIT_RAISES, Verdict

TIES = ContextFreeProblem([0.5, 0.5], [0.5, 0.5])
TOY = ContextFreeProblem([1 / 3, 2 / 3], [2 / 3, 1 / 3])
CALLS: list[int] = []


def _line_of(function, text: str) -> str:
    """'file:line' of the line of ``function``'s source holding ``text``."""
    lines, first = inspect.getsourcelines(function)
    index = next(number for number, line in enumerate(lines) if text in line)
    return f"test_external_raises.py:{first + index}"


def empty_residual_raises(draft_tokens, draft_probs, target_probs, uniforms):
    """Leviathan et al.'s rule (lossless), which first normalises the residual (p - q)+ of every position, as code
    that draws a correction eagerly does, and so raises where it is all zero (p = q)."""
    residual = np.maximum(target_probs[:, :-1] - draft_probs, 0.0)
    total = residual.sum(axis=-1)
    if np.any(total == 0):
        raise ValueError("the residual is all zero")
    return rules.token_level(draft_tokens, draft_probs, target_probs, uniforms)


def empty_residual_raises_resampling(draft_tokens, draft_probs, target_probs, uniforms):
    """The same check before the lossy rule that resamples from p."""
    if np.any(np.maximum(target_probs[:, :-1] - draft_probs, 0.0).sum(axis=-1) == 0):
        raise ValueError("the residual is all zero")
    return rules.token_level_resample_from_target(draft_tokens, draft_probs, target_probs, uniforms)


def raises_below_a_quarter(draft_tokens, draft_probs, target_probs, uniforms):
    """Raises when the first uniform is below 1/4 (a guard that fails on part of the uniforms)."""
    if np.any(uniforms[:, 0] < 0.25):
        raise ZeroDivisionError("first uniform below 1/4")
    return rules.token_level(draft_tokens, draft_probs, target_probs, uniforms)


def counted(draft_tokens, draft_probs, target_probs, uniforms):
    CALLS.append(len(draft_tokens))
    return rules.token_level(draft_tokens, draft_probs, target_probs, uniforms)


def test_a_raise_on_the_given_problem_is_the_raises_verdict_with_its_line():
    report = check_external(empty_residual_raises, "chain", "chain:2", problem=TIES)
    assert report.verdict is Verdict.RAISES and report.exit_status == EXIT_RAISES and report.lossless is False
    raised = report.raised
    assert raised["exception"] == "ValueError" and raised["message"] == "the residual is all zero"
    assert raised["line"] == _line_of(empty_residual_raises, 'raise ValueError("the residual')
    assert report.problem == raised["problem"] and report.problem_source == "given"
    assert "raised ValueError" in report.describe() and json.loads(json.dumps(report.to_json()))["raised"]


def test_the_witness_tree_and_uniforms_reproduce_the_raise():
    """In a batched call the raising tree is found by calling its rows alone; the reported uniforms are that tree's,
    and they are where the function raises (first uniform below 1/4)."""
    report = check_external(raises_below_a_quarter, "chain", "chain:1", problem=TOY)
    raised = report.raised
    assert report.verdict is Verdict.RAISES and raised["draft_paths"] in ([[0]], [[1]])
    assert len(raised["uniforms"]) == 2 and raised["uniforms"][0] < 0.25


def test_black_box_mode_reports_a_raise_too():
    """The runs go on past the raises in small calls until the budget ends them (27 s of the default budget here);
    a short budget ends the test sooner, with the same verdict: the runs made show no loss."""
    report = check_external(raises_below_a_quarter, "chain", "chain:1", problem=TOY, mode="blackbox", time_budget=4)
    assert report.verdict is Verdict.RAISES and report.mode == "blackbox"


def test_a_search_records_the_raise_and_goes_on():
    """The function is lossless, and raises exactly on the problems with p = q at a drafted position: the first of
    them in the canonical suite is its witness, and the search goes on past it."""
    suite = canonical_problems(1, 2)
    first = next(index for index, member in enumerate(suite) if member.candidate[2] == member.candidate[3])
    report = check_external(empty_residual_raises, "chain", "chain:1", max_vocab=2, max_examples=5,
                            time_budget=30)
    assert report.verdict is Verdict.RAISES and report.exit_status == EXIT_RAISES
    assert report.witness_label == suite[first].label and report.problem_source == "search"
    assert report.problems_tried > first + 1


def test_a_search_that_finds_both_kinds_is_lossy_and_lists_the_raise():
    report = check_external(empty_residual_raises_resampling, "chain", "chain:1", max_examples=5, time_budget=30)
    assert report.verdict is Verdict.LOSSY and report.tv_distance > 1e-3
    assert report.raised is not None and report.raised["problem"] != report.problem
    assert "it raised on the problem" in report.describe()


def test_command_line_exit_status_json_and_witness_file(tmp_path, capsys):
    spec = f"{__file__}:empty_residual_raises"
    witness = tmp_path / "witness.json"
    assert main(["check-external", spec, "--layout", "chain", "--tree", "chain:1", "--max-examples", "3",
                 "--max-vocab", "2", "--time-budget", "20", "--output", str(witness), "--json"]) == EXIT_RAISES
    data = json.loads(capsys.readouterr().out)
    assert data["verdict"] == "raises" and data["lossless"] is False and data["raised"]["exception"] == "ValueError"
    assert data["problem"] == _without_marker(json.loads(witness.read_text()))
    assert main(["check-external", spec, "--layout", "chain", "--tree", "chain:1", "--problem", str(witness)]) == 4
    assert "RAISES" in capsys.readouterr().out


def test_assert_lossless_fails_on_a_raise_with_the_exception_in_its_message():
    with pytest.raises(LosslessnessAssertionError, match="RAISES") as failure:
        assert_lossless(empty_residual_raises, "chain", "chain:1", problems=[TIES])
    assert "raised ValueError" in str(failure.value)


def test_a_signature_that_cannot_take_the_layouts_arguments_is_bad_input_before_any_call(capsys):
    CALLS.clear()
    with pytest.raises(VerispecError, match="cannot take the 7 arguments the ragged layout") as error:
        check_external(counted, "ragged", "chain:1", problem=TOY)
    assert not isinstance(error.value, VerifierError) and CALLS == []
    with pytest.raises(VerispecError, match="leave out --rng capture"):
        ExternalVerifier(counted, "chain", rng="capture")
    with pytest.raises(VerispecError, match="check it with --rng capture"):
        ExternalVerifier(lambda draft_tokens, draft_probs, target_probs: draft_tokens, "chain")
    code = main(["check-external", f"{__file__}:counted", "--layout", "ragged", "--tree", "chain:1",
                 "--target", "0.5,0.5", "--draft", "0.5,0.5"])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and "cannot take" in err and CALLS == []


def test_a_malformed_output_stays_an_error_of_the_contract():
    """The boundary: returning something the layout cannot read is not a raise (it is no outcome at all)."""
    with pytest.raises(VerifierError, match="shape") as error:
        analyze(TIES, "chain:2", ExternalVerifier(lambda *args: np.zeros((1, 1), dtype=np.int64), "chain"))
    assert not isinstance(error.value, FunctionRaised)


def _without_marker(problem: dict) -> dict:
    """The witness file's problem without the ``written_by`` marker the writer adds (the report's copy has none)."""
    assert problem.pop("written_by")["tool"] == "verispec"
    return problem
