"""The H100 regime's t_p(n) curve against the measurements it was read from (data/latency/forward-h100-run*.json,
written by benchmarks/bench_forward.py on an H100; read here from their copies in tests/fixtures/latency/), and its
one-node times against the issue's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from verispec.selector.actions import Action, ActionGrid, action_times
from verispec.selector.regimes import H100_DRAFT_RATIOS, H100_TARGET_RATIOS, REGIME_TITLES, h100_latency

RUNS = sorted((Path(__file__).resolve().parents[1] / "fixtures" / "latency").glob("forward-h100-run*.json"))


def test_the_ratios_are_the_mean_of_the_measured_runs_rounded():
    assert len(RUNS) == 2
    runs = [json.loads(path.read_text())["models"]["target"]["graphs"] for path in RUNS]
    for size, ratio in H100_TARGET_RATIOS:
        measured = sum(run[str(size)] / run["1"] for run in runs) / len(runs)
        assert ratio == pytest.approx(measured, abs=5e-4)
    drafts = [json.loads(path.read_text())["models"]["draft"]["graphs"] for path in RUNS]
    for width, ratio in H100_DRAFT_RATIOS:
        measured = sum(run[str(width)] / run["1"] for run in drafts) / len(drafts)
        assert ratio == pytest.approx(measured, abs=5e-4)
    for path in RUNS:
        assert json.loads(path.read_text())["gpu"].startswith("NVIDIA H100")


def test_the_h100_model_keeps_the_issues_one_node_times_and_grows_with_the_tree():
    model = h100_latency()
    assert model.draft_step == 3.3 and model.target_time(1) == 5.4
    assert model.target_time(2) == pytest.approx(5.4 * 1.149, abs=1e-12)
    assert model.target_time(3) == pytest.approx(5.4 * (1.149 + 1.171) / 2, abs=1e-12)  # linear between sizes
    times = [model.target_time(n) for n in range(1, 600)]
    assert all(b >= a for a, b in zip(times, times[1:]))
    assert "measured" in REGIME_TITLES["h100"] and "assumed" not in REGIME_TITLES["h100"]


def test_the_h100_model_prices_a_delayed_trees_wide_draft_steps_at_their_measured_cost():
    """(L1 + 1) one-token draft steps, L2 - 1 steps of K tokens, one target forward of 1 + L1 + K L2 nodes,
    written out from the stated ratios (not from the model's interpolation)."""
    model = h100_latency()
    grid = ActionGrid(ks=(1, 2, 4), l1s=(0, 2), l2s=(0, 1, 3), verifiers=("specinfer",))
    ratio = dict(H100_DRAFT_RATIOS)
    table = dict(H100_TARGET_RATIOS)

    def target(nodes):  # the stated ratios, linear between the sizes 1, 2, 4, 8, 16
        low = max(size for size in table if size <= nodes)
        high = min(size for size in table if size >= nodes)
        return table[low] if low == high else table[low] + (table[high] - table[low]) * (nodes - low) / (high - low)

    for action, time in zip(grid.actions, action_times(grid, model)):
        if action.l2 == 0:
            draft = action.l1 * 3.3
        else:
            draft = (action.l1 + 1) * 3.3 + (action.l2 - 1) * 3.3 * ratio[action.k]
        assert time == pytest.approx(draft + 5.4 * target(action.nodes), abs=1e-12), action
    assert model.draft_time(3) == pytest.approx(3.3 * (1.137 + 1.163) / 2, abs=1e-12)
    assert Action("specinfer", 4, 0, 3).drafter().draft_widths == (1, 4, 4)
