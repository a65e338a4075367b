"""What a whole-step check can see of a function that reads another position's row (``verispec.external.
step_context``): blind on a context-free problem, which the report says, and caught on its context twin at the
closed form. Speculative sampling of draft x ~ q verified against a law p' emits p' exactly (Leviathan et al.,
Theorem 1); a step that verifies draft 0 against the row of position 1 verifies it against p' = roll(p, 1) on the
twin, so its first token follows roll(p, 1) where the target's is p, and its second token is the target's at
position 1 whatever the first (the bonus row is read right, a rejection ends the block and the target continues):
the block's TV is TV(roll(p, 1), p)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.support import step_rules
from verispec.cli import main
from verispec.errors import VerispecError
from verispec.external.check import check_external
from verispec.external.step_context import BLIND_NOTE, RotatedByPosition, context_twin, offset_blind
from verispec.simulator.problems import ContextFreeProblem, MarkovProblem
from verispec.verdict import Verdict

pytest.importorskip("torch")

P, Q = np.array([0.5, 0.3, 0.2]), np.array([0.2, 0.2, 0.6])
PROBLEM = ContextFreeProblem(P, Q)


def _check(function, problem=PROBLEM, **options):
    return check_external(function, "step", "chain:1", problem=problem, rng="capture", sampling="temperature=1",
                          mode="exact", **options)


def test_which_problems_are_blind_to_an_offset():
    assert offset_blind(PROBLEM, 3)
    still = MarkovProblem(P, Q, np.stack([P] * 3), np.stack([Q] * 3))  # context-dependent in form only
    assert offset_blind(still, 3)
    moving = MarkovProblem(P, Q, np.stack([P, P, P[::-1]]), np.stack([Q] * 3))
    assert not offset_blind(moving, 1) and offset_blind(moving, 0)
    assert not offset_blind(RotatedByPosition(P, Q), 1)


def test_the_twin_keeps_the_root_and_rotates_one_place_a_position():
    twin = context_twin(PROBLEM)
    assert np.array_equal(twin.target(()), P) and np.array_equal(twin.draft(()), Q)
    assert np.array_equal(twin.target((2,)), [0.2, 0.5, 0.3]) and np.array_equal(twin.draft((0, 1)), [0.2, 0.6, 0.2])
    assert context_twin(ContextFreeProblem([0.25] * 4, [0.25] * 4)) is None  # no rotation moves a uniform law


def test_a_row_offset_is_lossless_and_said_blind_on_the_context_free_problem():
    report = _check(step_rules.step_row_offset)
    assert report.verdict is Verdict.LOSSLESS and report.offsets_visible is False
    assert BLIND_NOTE in report.note and report.to_json()["offsets_visible"] is False


def test_the_context_twin_catches_the_offset_at_its_closed_form_and_passes_the_correct_step():
    report = _check(step_rules.step_row_offset, context_twin=True)
    expected = 0.5 * np.abs(np.roll(P, 1) - P).sum()  # 0.3
    assert report.verdict is Verdict.LOSSY and abs(report.tv_distance - expected) < 1e-12
    assert report.problem_source == "context twin" and report.offsets_visible is True
    correct = _check(step_rules.step, context_twin=True)
    assert correct.verdict is Verdict.LOSSLESS and correct.offsets_visible is True and BLIND_NOTE not in correct.note


def test_a_context_dependent_problem_needs_no_twin():
    moving = MarkovProblem(P, Q, np.stack([np.roll(P, 1), np.roll(P, 2), np.roll(P, 1)]), np.stack([Q] * 3))
    report = _check(step_rules.step_row_offset, problem=moving)
    assert report.verdict is Verdict.LOSSY and report.offsets_visible is True and BLIND_NOTE not in report.note


def test_the_twin_from_the_command_line_and_refused_off_the_step_layouts(capsys):
    code = main(["check-external", "tests/support/step_rules.py:step_row_offset", "--layout", "step", "--tree",
                 "chain:1", "--rng", "capture", "--target", "0.5,0.3,0.2", "--draft", "0.2,0.2,0.6", "--mode", "exact",
                 "--context-twin", "--json"])
    found = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert code == 1 and found["verdict"] == "lossy" and found["offsets_visible"] is True
    with pytest.raises(VerispecError, match="--context-twin needs a whole-step layout"):
        check_external(lambda *args: None, "chain", "chain:1", problem=PROBLEM, context_twin=True)


def test_check_engine_hands_the_twin_to_its_step_checks_and_reports_what_they_saw(monkeypatch):
    """Without the engine: the adapter's step check run with ``context_twin`` asks check-external for the twin, and
    its row carries the report's ``offsets_visible``."""
    from verispec.engines import vllm as vllm_adapter
    from verispec.engines.check import run_check

    seen = {}

    def fake_check_external(function, layout, tree, **options):
        seen.update(options)
        return _check(step_rules.step_row_offset, **{key: options[key] for key in ("context_twin",) if key in options})

    monkeypatch.setattr("verispec.external.check.check_external", fake_check_external)
    step = next(check for check in vllm_adapter.checks() if check.name == "v1-seeded")
    common = dict(engine="vllm", tree=None, problem=PROBLEM, mode="exact", detect_tv=0.01, alpha=1e-6,
                  time_budget=60, load=lambda spec: step_rules.step_row_offset)
    row = run_check(vllm_adapter, step, context_twin=True, **common)
    assert seen["context_twin"] is True and row["verdict"] == "LOSSY" and row["offsets_visible"] is True
    seen.clear()
    row = run_check(vllm_adapter, step, **common)
    assert "context_twin" not in seen and row["verdict"] == "LOSSLESS" and row["offsets_visible"] is False
