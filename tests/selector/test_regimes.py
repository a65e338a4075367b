"""The H100 regime's t_p(n) curve against the measurements it was read from (data/latency/forward-h100-run*.json,
written by benchmarks/bench_forward.py on an H100), and its one-node times against the issue's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from verispec.selector.regimes import H100_TARGET_RATIOS, REGIME_TITLES, h100_latency

RUNS = sorted((Path(__file__).resolve().parents[2] / "data" / "latency").glob("forward-h100-run*.json"))


def test_the_ratios_are_the_mean_of_the_measured_runs_rounded():
    assert len(RUNS) == 2
    runs = [json.loads(path.read_text())["models"]["target"]["graphs"] for path in RUNS]
    for size, ratio in H100_TARGET_RATIOS:
        measured = sum(run[str(size)] / run["1"] for run in runs) / len(runs)
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
