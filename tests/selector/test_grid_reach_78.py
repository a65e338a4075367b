"""Issue 78, item 2: where the optimum lies beyond a grid (``verispec.selector.reach``), on hand-made labels whose
oracle is found by hand, with a broken twin that is caught; and ``experiments/grid_reach.py`` on a tiny pair's labels
(a wider grid's oracle never does worse than a grid inside it)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from verispec.selector.actions import ActionGrid, SelectorError
from verispec.selector.reach import Candidate, grid_reach

GRID = ActionGrid((1, 2), (0, 1), (0, 1, 2), ("specinfer",))
SMALL = Candidate("small", (1, 2), (0, 1), (0, 1))
PROBE = Candidate("probe", (1, 2), (0, 1), (0, 1, 2))


def _labels_and_times():
    """Two roots with the same labels E = 1 + 0.9 (L1 + L2) - 0.05 (K - 1) and DDTE's modelled times
    T = 20 + L1 + L2 (t_p = 20 t_q, the tree's size free): E / T grows with depth and falls with K, so the best action
    is K = 1 at the deepest tree a grid offers."""
    depth = np.array([a.l1 + a.l2 for a in GRID.actions], dtype=float)
    paths = np.array([a.k for a in GRID.actions], dtype=float)
    efficiency = np.tile(1 + 0.9 * depth - 0.05 * (paths - 1), (2, 1))
    return efficiency, 20 + depth


def _check(reach):
    small, probe = reach["specinfer"]["small"], reach["specinfer"]["probe"]
    # inside K 1-2, L1 0-1, L2 0-1 the best is K = 1, L1 = 1, L2 = 1: on the L1 and L2 edges, not on K's
    assert small["chosen"] == [{"k": 1, "l1": 1, "l2": 1, "share": 1.0}]
    assert small["edge"] == {"k": 0.0, "l1": 1.0, "l2": 1.0, "any": 1.0, "choices": 2}
    assert small["throughput"] == pytest.approx(2.8 / 22, abs=1e-12)
    # the probe's best, L2 = 2: (1 + 2.7) / 23 against (1 + 1.8) / 22
    assert small["probe_gain"] == pytest.approx((3.7 / 23) / (2.8 / 22), abs=1e-12)
    assert probe["chosen"] == [{"k": 1, "l1": 1, "l2": 2, "share": 1.0}] and probe["probe_gain"] == 1.0
    assert small["in_sample_gain"] == pytest.approx(small["probe_gain"], abs=1e-12)  # no halves: one oracle


def test_the_oracle_on_a_grid_inside_the_probe_sits_on_its_edge_and_the_probe_gains():
    efficiency, times = _labels_and_times()
    _check(grid_reach(efficiency, GRID, times, [SMALL, PROBE]))


def test_negative_control_a_reach_that_ignores_the_candidate_is_caught(monkeypatch):
    """The broken twin takes every action of the rule whatever the candidate offers (the probe's optimum read as the
    small grid's): the check above fails."""
    from verispec.selector import reach

    efficiency, times = _labels_and_times()
    monkeypatch.setattr(reach, "candidate_actions", lambda grid, verifier, candidate: [
        index for index, action in enumerate(grid.actions) if action.verifier == verifier])
    with pytest.raises(AssertionError):
        _check(reach.grid_reach(efficiency, GRID, times, [SMALL, PROBE]))


def test_the_oracle_spends_time_where_it_pays_across_roots():
    """Two roots whose per-root best E / T differ: the oracle of the total rate (Dinkelbach) is checked against every
    choice pair, enumerated."""
    depth = np.array([a.l1 + a.l2 for a in GRID.actions], dtype=float)
    efficiency = np.stack([1 + 0.9 * depth, 1 + 0.2 * depth + 0.3 * np.array([a.k for a in GRID.actions])])
    times = 20 + depth + 3.0 * np.array([a.k * a.l2 for a in GRID.actions])  # wide trees cost more here
    allowed = range(len(GRID.actions))
    best = max((efficiency[0, i] + efficiency[1, j]) / (times[i] + times[j]) for i in allowed for j in allowed)
    reach = grid_reach(efficiency, GRID, times, [PROBE])
    assert reach["specinfer"]["probe"]["throughput"] == pytest.approx(best, abs=1e-12)


def test_the_cross_fitted_oracle_chooses_on_one_half_and_scores_on_the_other():
    """Halves that disagree (noise): the cross-fitted throughput of a candidate is, by hand, the mean of choosing on
    one half and scoring on the other; its choices are both halves'; the in-sample gain stays beside it."""
    efficiency, times = _labels_and_times()
    first, second = efficiency.copy(), efficiency.copy()
    deep = GRID.index(GRID.actions[0].__class__("specinfer", 2, 1, 2))
    first[:, deep] += 5.0  # one half sees a lucky K = 2 deep tree, the other a poor one
    second[:, deep] -= 1.0
    mean = (first + second) / 2
    reach = grid_reach(mean, GRID, times, [SMALL, PROBE], halves=np.stack([first, second]))["specinfer"]
    best = GRID.index(GRID.actions[0].__class__("specinfer", 1, 1, 2))
    # on the probe: half 0 chooses the lucky tree, scored on half 1; half 1 chooses K = 1, L2 = 2, scored on half 0
    tokens = (second[:, deep].sum() + first[:, best].sum()) / 2
    spent = (times[deep] * 2 + times[best] * 2) / 2
    assert reach["probe"]["throughput"] == pytest.approx(tokens / spent, abs=1e-12)
    assert reach["probe"]["chosen"] == [{"k": 1, "l1": 1, "l2": 2, "share": 0.5}, {"k": 2, "l1": 1, "l2": 2,
                                                                                   "share": 0.5}]
    assert reach["small"]["throughput"] == pytest.approx(2.8 / 22, abs=1e-12)  # no noise inside the small grid
    assert reach["small"]["probe_gain"] == pytest.approx(tokens / spent / (2.8 / 22), abs=1e-12)
    assert reach["small"]["in_sample_gain"] == pytest.approx(mean[0, deep] / times[deep] / (2.8 / 22), abs=1e-12)


def test_bad_input_is_refused_on_one_line():
    efficiency, times = _labels_and_times()
    with pytest.raises(SelectorError, match="does not label"):
        grid_reach(efficiency, GRID, times, [Candidate("wide", (1, 2, 3), (0,), (0,))])
    with pytest.raises(SelectorError, match=r"labels \[N, A\]"):
        grid_reach(efficiency[:, :3], GRID, times, [SMALL])
    with pytest.raises(SelectorError, match="finite"):
        grid_reach(np.full_like(efficiency, np.nan), GRID, times, [SMALL])
    with pytest.raises(SelectorError, match="halves"):
        grid_reach(efficiency, GRID, times, [SMALL], halves=np.stack([efficiency]))


def test_grid_reach_reads_label_costs_labels(tmp_path):
    """label_cost.py on a tiny pair's dataset keeps every action's label a root (and over each half of its combs);
    grid_reach.py reports each regime's oracle on the dataset's grid and on the probe around it, and the probe's
    in-sample oracle never does worse (it holds the grid)."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from tests.support.scripts import load_script
    from tests.support.tiny_models import tiny_dataset_command
    from verispec.cli import main
    from verispec.latency import LatencyModel
    from verispec.selector.dataset_file import Dataset

    dataset = tmp_path / "d.npz"
    command = tiny_dataset_command(tmp_path, "--verifiers", "specinfer", "--root-batch", "1", "--threads", "1",
                                   "--out", str(dataset))
    assert main(command) == 0
    target, draft = command[command.index("--target") + 1], command[command.index("--draft") + 1]
    built = Dataset.load(dataset).metadata["grid"]
    probe = {axis: [*built[axis], max(built[axis]) + 1] for axis in ("ks", "l1s", "l2s")}
    labels = tmp_path / "probe.json"
    assert load_script("experiments/label_cost.py").main([
        "--dataset", str(dataset), "--target", target, "--draft", draft, "--verifiers", "specinfer",
        "--roots", "2", "--samples", "2", "--threads", "1", "--out", str(labels),
        *(item for axis in ("ks", "l1s", "l2s") for item in (f"--{axis}", ",".join(map(str, probe[axis]))))]) == 0
    latency = tmp_path / "cpu.json"
    latency.write_text(json.dumps(LatencyModel(1.0, (1, 8), (3.0, 5.0), "ms", "hand-made").as_dict()))
    out = tmp_path / "reach.json"
    assert load_script("experiments/grid_reach.py").main(["--labels", str(labels), "--latency", str(latency),
                                                            "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    (setting,) = result["settings"].values()
    assert setting["roots"] == 2 and setting["candidates"]["probe"] == probe
    assert set(setting["regimes"]) == {"gpu-large", "cpu", "h100"}
    for regime in setting["regimes"].values():
        dataset_grid, probe_grid = regime["specinfer"]["dataset"], regime["specinfer"]["probe"]
        # cross-fitted, the probe's gain is an unbiased estimate and may fall below 1 by noise; in-sample it cannot
        assert dataset_grid["probe_gain"] > 0 and probe_grid["probe_gain"] == 1.0
        assert sum(where["share"] for where in dataset_grid["chosen"]) == pytest.approx(1.0, abs=1e-12)
        assert dataset_grid["in_sample_gain"] >= 1 - 1e-12  # the in-sample oracle on a wider grid never does worse
    assert setting["crossfit"] is True  # two combs a root: halves of one
    # the same setting's labels given twice: refused on one line (the second would replace the first), nothing written
    twice = tmp_path / "twice.json"
    assert load_script("experiments/grid_reach.py").main(["--labels", str(labels), "--labels", str(labels),
                                                            "--latency", str(latency), "--out", str(twice)]) == 2
    assert not twice.exists()


def test_grid_reach_refuses_a_bad_labels_file_on_one_line(tmp_path, capsys):
    """Not JSON, a result without its rows' labels or without a key, labels of the wrong width, a missing file: one
    line and exit 2 each, nothing written (a setting given twice: the tiny pair's test above)."""
    from tests.support.scripts import assert_one_line_refusals, load_script
    from verispec.files.io import pack_floats
    from verispec.latency import LatencyModel

    latency = tmp_path / "cpu.json"
    latency.write_text(json.dumps(LatencyModel(1.0, (1, 8), (3.0, 5.0), "ms", "hand-made").as_dict()))
    base = {"record": {}, "dataset": "d.npz", "grid": GRID.as_dict(), "action_names": [a.name for a in GRID.actions],
            "samplings": ["T=1"], "samples": 2, "seconds_per_root": 1.0, "dataset_roots": 4, "projected_hours": 0.1,
            "threads": 1}
    files = {"text": "not json", "norows": json.dumps({**base, "rows": [{"refused": None}]}),
             "nokey": json.dumps({key: value for key, value in base.items() if key != "grid"}),
             "narrow": json.dumps({**base, "rows": [{"refused": None, "efficiency": pack_floats([1.0, 2.0])}]})}
    for name, text in files.items():
        (tmp_path / f"{name}.json").write_text(text)
    out = tmp_path / "reach.json"
    cases = [(["--labels", str(tmp_path / "text.json")], "is not JSON"),
             (["--labels", str(tmp_path / "norows.json")], "holds no labelled root"),
             (["--labels", str(tmp_path / "nokey.json")], "holds no 'grid'"),
             (["--labels", str(tmp_path / "narrow.json")], "not one a grid action"),
             (["--labels", str(tmp_path / "missing.json")], "does not exist")]
    assert_one_line_refusals(load_script("experiments/grid_reach.py").main,
                             ["--latency", str(latency), "--out", str(out)], cases, "grid_reach: error:", capsys)
    assert not out.exists()
