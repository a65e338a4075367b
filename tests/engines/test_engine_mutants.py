"""experiments/engine_mutants.py's bookkeeping, without downloading a release: the Wilson interval (against scipy's),
how each judge's answer is read (verispec's rows, pytest's exit status and JUnit report), the shares with mutants
argued equivalent left out, the overlay that never writes the cached release, and cosmic-ray's mutants of a small
file where the tool is installed."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest
from scipy.stats import binomtest

from tests.support.scripts import fake_verispec_command, load_script

script = load_script("experiments/engine_mutants.py", "engine_mutants_test")


def _has_coverage() -> bool:
    import importlib.util

    return importlib.util.find_spec("coverage") is not None


@pytest.mark.parametrize(("killed", "total"), [(0, 10), (7, 10), (57, 60), (60, 60), (1, 1)])
def test_wilson_interval_is_scipys(killed, total):
    interval = binomtest(killed, total).proportion_ci(confidence_level=0.95, method="wilson")
    low, high = script.wilson(killed, total)
    assert abs(low - interval.low) < 1e-4 and abs(high - interval.high) < 1e-4
    assert script.wilson(0, 0) is None


def _answer(monkeypatch, stdout: str, status: int, stderr: str = ""):
    fake_verispec_command(monkeypatch, stdout, status, stderr)  # the verdict read from --json-out, as the script does


def _row(check, verdict, as_expected=False):
    return {"check": check, "verdict": verdict, "as_expected": as_expected, "mode": "exact", "tv_distance": None,
            "note": None}


@pytest.mark.parametrize(("rows", "status", "outcome", "by"), [
    ([_row("v1-greedy", "LOSSLESS", True), _row("v1-min-p", "LOSSY", True)], 0, "survived", None),
    ([_row("v1-greedy", "LOSSLESS", True), _row("v1-seeded", "LOSSY")], 1, "killed", "v1-seeded: LOSSY"),
    ([_row("v1-greedy", "RAISES")], 4, "killed", "v1-greedy: RAISES"),
    ([_row("v1-greedy", "UNRUNNABLE")], 2, "killed", "v1-greedy: UNRUNNABLE"),
    ([_row("v1-greedy", "LOSSLESS", True), _row("v1-seeded", "INCONCLUSIVE")], 3, "timeout",
     "verispec: the check ran past its budget"),
    ([], 3, "timeout", "verispec: the check ran past its budget"),  # a call's timeout: one line, no rows
])
def test_verispecs_answer_is_read_from_its_rows(monkeypatch, tmp_path, rows, status, outcome, by):
    _answer(monkeypatch, json.dumps({"checks": rows}) if rows else "", status,
            "" if status == 0 else "verispec: the check ran past its budget")
    judged = script.verispec_judge(tmp_path, ["v1-greedy", "v1-seeded"], 60)
    assert (judged["outcome"], judged["by"], judged["exit_status"]) == (outcome, by, status)


def test_a_mutant_refused_before_any_check_is_killed_with_the_reason(monkeypatch, tmp_path):
    _answer(monkeypatch, "", 2, "verispec: vllm.v1.sample.rejection_sampler does not import: SyntaxError (line 9)")
    judged = script.verispec_judge(tmp_path, ["v1-greedy"], 60)
    assert judged["outcome"] == "killed" and "does not import" in judged["by"]


def _pytest_answer(monkeypatch, status: int, cases: str, last: str):
    def run(argv, **kwargs):
        junit = next(arg.split("=", 1)[1] for arg in argv if arg.startswith("--junitxml="))
        Path(junit).write_text(f'<?xml version="1.0"?><testsuites><testsuite>{cases}</testsuite></testsuites>')
        return SimpleNamespace(returncode=status, stdout=f"...\n{last}\n", stderr="")
    monkeypatch.setattr(script.subprocess, "run", run)


def test_engine_tests_answer_is_read_from_pytest(monkeypatch, tmp_path):
    passed = '<testcase classname="tests.v1.sample.test_rejection_sampler" name="test_perfect_match"/>'
    failed = ('<testcase classname="tests.v1.sample.test_rejection_sampler" name="test_top_k[1]">'
              '<failure message="AssertionError: tokens differ&#10;more">trace</failure></testcase>')
    _pytest_answer(monkeypatch, 1, passed + failed, "1 failed, 1 passed")
    judged = script.engine_tests_judge(tmp_path, tmp_path, "t.py", [], 60)
    assert judged["outcome"] == "killed"
    assert judged["by"] == "tests/v1/sample/test_rejection_sampler.py::test_top_k[1]: AssertionError: tokens differ"
    assert [case["outcome"] for case in judged["cases"]] == ["passed", "failed"]
    _pytest_answer(monkeypatch, 0, passed, "1 passed")
    assert script.engine_tests_judge(tmp_path, tmp_path, "t.py", [], 60)["outcome"] == "survived"

    def timeout(argv, **kwargs):
        raise subprocess.TimeoutExpired(argv, 60)
    monkeypatch.setattr(script.subprocess, "run", timeout)
    assert script.engine_tests_judge(tmp_path, tmp_path, "t.py", [], 60)["outcome"] == "timeout"


def _judged(key, verispec, tests):
    return {"key": key, "verispec": {"outcome": verispec, "seconds": 10.0},
            "engine_tests": {"outcome": tests, "seconds": 20.0}}


def test_shares_leave_out_the_mutants_argued_equivalent_and_flag_a_killed_one():
    rows = [_judged("a#0", "killed", "killed"), _judged("b#0", "killed", "survived"),
            _judged("c#0", "survived", "survived"), _judged("d#0", "timeout", "killed"),
            _judged("e#0", "survived", "survived"), _judged("f#0", "killed", "survived")]
    summary = script.summarize(rows, {"e#0": {"argument": "dead code"}, "f#0": {"argument": "wrong"}})
    assert summary["mutants"] == 4 and summary["equivalent"] == 2 and summary["equivalent_but_killed"] == ["f#0"]
    assert (summary["verispec"]["killed"], summary["verispec"]["timeout"], summary["verispec"]["share"]) == (2, 1, 0.5)
    assert (summary["engine_tests"]["killed"], summary["engine_tests"]["share"]) == (2, 0.5)
    assert (summary["killed_by_both"], summary["verispec_only"], summary["engine_tests_only"], summary["neither"]) == \
        (1, 1, 1, 1)


def test_the_overlay_never_writes_the_cached_release(tmp_path, monkeypatch):
    folder = tmp_path / "vllm-9.9.9"
    sampler = folder / script.SAMPLER
    sampler.parent.mkdir(parents=True)
    sampler.write_text("ORIGINAL = 1\n")
    (sampler.parent / "other.py").write_text("OTHER = 1\n")
    (folder / "COMPLETE").write_text("{}\n")
    tree = script.overlay(folder, tmp_path / "cache", "9.9.9")
    script.install(tree, "MUTANT = 1\n")
    assert sampler.read_text() == "ORIGINAL = 1\n" and (tree / script.SAMPLER).read_text() == "MUTANT = 1\n"
    assert os.stat(tree / script.SAMPLER).st_ino != os.stat(sampler).st_ino
    assert os.stat(tree / script.SAMPLER).st_nlink == 1
    assert os.stat(sampler.parent / "other.py").st_ino == os.stat(tree / "vllm/v1/sample/other.py").st_ino


@pytest.mark.skipif(shutil.which("cosmic-ray", path=str(Path(script.sys.executable).parent)) is None,
                    reason="cosmic-ray is not installed (pip install 'cosmic-ray==8.7.0')")
def test_cosmic_rays_mutants_of_a_small_file(tmp_path):
    source = tmp_path / "small.py"
    source.write_text("def f(x):\n    return x + 1 if x < 2 else 0\n")
    mutants = script.list_mutants(source)
    # x + 1: the binary operator replaced by each of the others; x < 2: each other comparison; 1, 2, 0 numbers
    assert {m["line"] for m in mutants} == {2} and all(m["definition"] == "f" for m in mutants)
    operators = {m["operator"].split("/")[-1] for m in mutants}
    assert "ReplaceBinaryOperator_Add_Sub" in operators and "ReplaceComparisonOperator_Lt_Gt" in operators
    sub = next(m for m in mutants if m["operator"].endswith("ReplaceBinaryOperator_Add_Sub"))
    text, change = script.mutant_text(source, sub)
    assert change == {"line": 2, "before": "return x + 1 if x < 2 else 0", "after": "return x - 1 if x < 2 else 0"}
    assert source.read_text() == "def f(x):\n    return x + 1 if x < 2 else 0\n"


def test_mutants_inside_deferred_annotations_are_set_aside_by_argument():
    """With ``from __future__ import annotations`` an annotation is a string never evaluated: a mutant of the ``|``
    in ``x: int | None`` changes nothing; in the body, or in a file that does not defer them, it does."""
    deferred = ("from __future__ import annotations\n\n\n"
                "def f(x: int | None, *, y: str | None = None) -> int | None:\n"
                "    z: int | None = 3 | 4\n    return z\n")
    spans = script.annotation_spans(deferred)
    assert script.in_annotation({"line": 4, "column": 13}, spans)  # x: int | None
    assert script.in_annotation({"line": 4, "column": 32}, spans)  # y: str | None
    assert script.in_annotation({"line": 4, "column": 56}, spans)  # -> int | None
    assert script.in_annotation({"line": 5, "column": 11}, spans)  # z: int | None
    assert not script.in_annotation({"line": 5, "column": 22}, spans)  # 3 | 4, evaluated
    assert script.annotation_spans(deferred.replace("from __future__ import annotations\n", "")) == []


SOURCE = '''import torch


@decorate
def f(x, device=None):
    y = x + 1
    if device is not None and device.type == "cpu":
        raise NotImplementedError("no")
    return (y -
            2)
'''


def test_the_mutated_statement_spans_its_innermost_statement():
    assert script.reach_module.statement_span(SOURCE, 6) == (6, 6)  # y = x + 1
    assert script.reach_module.statement_span(SOURCE, 7) == (7, 8)  # the if header: its whole statement
    assert script.reach_module.statement_span(SOURCE, 10) == (9, 10)  # a continuation line of a return
    # a decorator's line: held by no statement, the whole file
    assert script.reach_module.statement_span(SOURCE, 4) == (1, 10)


def test_a_judge_that_never_runs_the_statement_is_not_run_and_its_seconds_are_not_counted():
    rows = [{"key": "a", "verispec": {"outcome": "killed", "seconds": 10.0},
             "engine_tests": {"outcome": "survived", "seconds": None, "not_executed": "lines 7-8"}},
            {"key": "b", "verispec": {"outcome": "survived", "seconds": 30.0},
             "engine_tests": {"outcome": "killed", "seconds": 100.0}}]
    summary = script.summarize(rows, {})
    assert summary["engine_tests"]["not_executed"] == 1 and summary["engine_tests"]["seconds_total"] == 100.0
    assert summary["verispec"]["seconds_total"] == 40.0 and summary["verispec"]["not_executed"] == 0
    assert summary["engine_tests"]["killed"] == 1 and summary["engine_tests"]["survived"] == 1


REACH = {"order": ["t::a", "t::b[1]", "t::c"],
         "lines": {"1": [""], "6": ["t::c", "t::a"], "8": ["t::b[1]"], "9": ["t::a", "t::b[1]", "t::c"]}}


def test_a_judge_runs_the_parts_that_reach_the_statement_in_its_own_order():
    reaching = script.reach_module.parts_reaching
    assert reaching(REACH, (6, 6)) == ["t::a", "t::c"]  # the judge's order, not the contexts' order
    assert reaching(REACH, (7, 8)) == ["t::b[1]"]
    assert reaching(REACH, (2, 5)) == []  # no part runs it: not run, survived
    assert reaching(REACH, (1, 10)) is None  # a line run outside every part (an import): every part
    assert reaching(None, (7, 8)) is None  # nothing measured (--no-coverage): every part
    assert reaching({**REACH, "lines": {"8": ["t::gone"]}}, (8, 8)) is None  # a context that is no part: every part
    assert script.reach_module.executed_lines(REACH) == {1, 6, 8, 9}


def test_a_pending_judge_leaves_its_mutant_out_of_both_shares():
    rows = [_judged("a#0", "killed", "killed"), _judged("b#0", "pending", "killed"), _judged("c#0", "survived",
                                                                                             "pending")]
    summary = script.summarize(rows, {"c#0": {"argument": "dead code"}})
    assert (summary["mutants"], summary["pending"], summary["equivalent"]) == (1, 2, 0)
    assert summary["verispec"]["killed"] == 1 and summary["engine_tests"]["killed"] == 1
    # a broken twin that counted a pending verdict as a survivor would report 1 kill of 2
    assert summary["verispec"]["share"] == 1.0


def test_parts_are_kept_compactly_in_the_result_file_and_read_back_unchanged():
    reach = {"order": ["t::a", "t::b[1]"], "lines": {"3": ["", "t::a"], "5": ["setup", "t::b[1]", "t::a"]}}
    stored = script.compact_parts(reach, "k1")
    assert stored["key"] == "k1" and stored["lines"] == {"3": [-2, 0], "5": [-1, 0, 1]}
    back = script.expand_parts(json.loads(json.dumps(stored)))
    assert back["order"] == reach["order"]
    assert {line: sorted(contexts) for line, contexts in back["lines"].items()} == \
        {line: sorted(contexts) for line, contexts in reach["lines"].items()}


def test_the_tests_baseline_key_ignores_verispecs_settings_and_verispecs_does_not():
    settings = {"release": "0.33.0", "file_sha256": "f", "tests": "t.py", "tests_sha256": "s", "test_timeout": 9.0,
                "checks": ["v1-greedy"], "checker_sha256": "c1"}
    changed = {**settings, "checks": ["v1-greedy", "v1-seeded"], "checker_sha256": "c2"}
    assert script.judge_keys(settings)["engine_tests"] == script.judge_keys(changed)["engine_tests"]
    assert script.judge_keys(settings)["verispec"] != script.judge_keys(changed)["verispec"]
    assert script.judge_keys(settings)["engine_tests"] != script.judge_keys({**settings, "file_sha256": "g"})[
        "engine_tests"]


SETUP = {"order": ["c1", "c2", "c3"], "lines": {"5": ["setup"], "6": ["setup", "c3", "c2"], "7": ["c1"]}}


def test_a_statement_of_the_one_time_setup_runs_every_part_only_where_its_effect_lasts():
    reaching, lasting = script.reach_module.parts_reaching, script.reach_module.persistent
    assert reaching(SETUP, (6, 6), persistent=False) == ["c2", "c3"]  # a method the warm-up calls, and c2, c3 do
    assert reaching(SETUP, (5, 5), persistent=False) == ["c1"]  # the warm-up alone: a failing setup fails any part
    assert reaching(SETUP, (5, 6), persistent=True) is None  # a constructor's or module-level statement: every part
    assert reaching(SETUP, (7, 7), persistent=False) == ["c1"]
    text = "X = 1\n\n\nclass S:\n    def __init__(self):\n        self.a = 1\n\n    def f(self):\n        return 2\n"
    assert lasting(text, (1, 1)) and lasting(text, (6, 6)) and not lasting(text, (9, 9))


MODULE = '''LIMIT = 3


class Box:
    def __init__(self):
        self.size = 0


def grow(box, n):
    if n > LIMIT:
        return -1
    box.size += n
    return box.size
'''

TESTS = '''import pytest
import module


@pytest.fixture
def box():
    return module.Box()


def test_small(box):
    assert module.grow(box, 2) == 2


def test_large(box):
    assert module.grow(box, 5) == -1


@pytest.mark.parametrize("n", [0, 9])
def test_without_box(n):
    assert n >= 0
'''


@pytest.mark.skipif(not _has_coverage(), reason="coverage.py is not installed "
                    "(pip install 'coverage==7.6.10'): the experiment's own dependency, not the suite's")
def test_each_test_item_gets_its_own_lines_and_a_fixtures_lines_count_for_its_test(tmp_path):
    (tmp_path / "module.py").write_text(MODULE)
    (tmp_path / "test_module.py").write_text(TESTS)
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "PYTHONDONTWRITEBYTECODE": "1"}
    reach = script.reach_module.engine_tests_reach(tmp_path / "module.py", tmp_path, "test_module.py",
                                                   ["test_module.py::test_without_box[9]"], 120, env)
    assert reach["order"] == ["test_module.py::test_small", "test_module.py::test_large",
                              "test_module.py::test_without_box[0]"]
    lines = {int(line): set(contexts) for line, contexts in reach["lines"].items()}
    assert lines[1] == {""} and lines[9] == {""}  # module level: outside every test
    assert lines[6] == {"test_module.py::test_small", "test_module.py::test_large"}  # the fixture's constructor
    assert lines[11] == {"test_module.py::test_large"} and lines[12] == {"test_module.py::test_small"}
    span = script.reach_module.statement_span(MODULE, 11)
    assert script.reach_module.parts_reaching(reach, span) == ["test_module.py::test_large"]


def test_a_pending_row_of_an_earlier_file_is_never_taken_as_a_verdict():
    """A merge run that wrote one judge's rows as pending: a later run must judge them, not read them back (a run
    that took them so reported 27 mutants pending for good)."""
    rows = [{"key": "a#0", "verispec": {"outcome": "killed", "key": "v1"},
             "engine_tests": {"outcome": "pending", "key": "t1"}},
            {"key": "b#0", "verispec": {"outcome": "pending", "key": "v2"},
             "engine_tests": {"outcome": "survived", "key": "t2"}}]
    earlier = script.earlier_verdicts({"rows": rows})
    assert set(earlier) == {"v1", "t2"}
    assert script.earlier_verdicts(None) == {} and script.earlier_verdicts({"rows": []}) == {}
