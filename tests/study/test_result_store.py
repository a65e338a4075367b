"""Result stores key on every parameter: a run never resumes from rows computed for another setting."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.support.scripts import load_script
from verispec import package_version
from verispec.errors import ResultStoreError
from verispec.files.io import ResultStore
from verispec.simulator import random_markov_problem

ROOT = Path(__file__).resolve().parents[2]


def _script(relative: str, name: str):
    return load_script(relative, name)


def test_store_records_parameters_and_resumes_only_the_same_run(tmp_path):
    path = tmp_path / "rows.json"
    store = ResultStore(path, parameters={"verifier": "bv", "divergence": 0.5, "shape": (1, 2)})
    store.add("a", {"value": 1})
    data = json.loads(path.read_text())
    assert data["parameters"] == {"verifier": "bv", "divergence": 0.5, "shape": [1, 2], "verispec": package_version()}
    again = ResultStore(path, parameters={"verifier": "bv", "divergence": 0.5, "shape": (1, 2)})
    assert again.done("a") and again.rows["a"]["value"] == 1
    with pytest.raises(ResultStoreError) as caught:
        ResultStore(path, parameters={"verifier": "bv", "divergence": 1.0, "shape": (1, 2)})
    assert "divergence: 0.5 in the file, 1.0 now" in str(caught.value) and "verifier" not in str(caught.value)
    with pytest.raises(ResultStoreError, match="seed: \\(absent\\) in the file, 3 now"):
        ResultStore(path, parameters={"verifier": "bv", "divergence": 0.5, "shape": (1, 2), "seed": 3})
    with pytest.raises(ResultStoreError, match="verispec: .* in the file, \"0.0.0-other\" now"):
        ResultStore(path, parameters={"verifier": "bv", "divergence": 0.5, "shape": (1, 2), "verispec": "0.0.0-other"})


def test_store_refuses_unlabelled_and_unreadable_files(tmp_path):
    old = tmp_path / "old.json"
    old.write_text(json.dumps({"rows": [{"key": "a", "value": 1}]}))  # the format before parameters
    with pytest.raises(ResultStoreError, match="no recorded parameters"):
        ResultStore(old, parameters={"seed": 0})
    assert ResultStore(old).done("a")  # a caller that records nothing reads it as before
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    with pytest.raises(ResultStoreError, match="cannot read the result file"):
        ResultStore(broken, parameters={"seed": 0})
    broken.write_text("[1, 2]")
    with pytest.raises(ResultStoreError, match="not a result file"):
        ResultStore(broken)


def _one_position_efficiency(divergence: float) -> float:
    # K = 1, L1 = 0, L2 = 1 is one draft token at the root: E[tau + 1] = 1 + sum_x min(p(x), q(x))
    problem = random_markov_problem(3, 0, divergence=divergence)
    return 1 + float(np.minimum(problem.target_initial, problem.draft_initial).sum())


GRID = ["--max-k", "1", "--max-trunk", "0", "--max-tail", "1"]


def test_delay_sweep_runs_with_another_divergence_do_not_mix(tmp_path, capsys, monkeypatch):
    sweep = _script("experiments/delay_sweep.py", "delay_sweep_under_test")
    output = tmp_path / "sweep.json"
    sweep.main([*GRID, "--divergence", "0.5", "--output", str(output)])
    capsys.readouterr()
    rows = {row["key"]: row for row in json.loads(output.read_text())["rows"]}
    assert rows["1,0,1"]["block_efficiency"] == pytest.approx(_one_position_efficiency(0.5), abs=1e-12)
    assert sweep.main([*GRID, "--divergence", "1.0", "--output", str(output)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "divergence: 0.5 in the file, 1.0 now" in err[0]
    assert {row["key"]: row for row in json.loads(output.read_text())["rows"]} == rows  # untouched
    # the default file names differ by divergence, so both runs have their own file and their own numbers
    monkeypatch.chdir(tmp_path)
    for divergence in ("0.5", "1"):
        sweep.main([*GRID, "--divergence", divergence])
    for divergence in (0.5, 1.0):
        data = json.loads((tmp_path / f"results/delay_sweep_specinfer_V3_s0_d{divergence:g}.json").read_text())
        assert data["parameters"]["divergence"] == divergence
        row = next(row for row in data["rows"] if row["key"] == "1,0,1")
        assert row["block_efficiency"] == pytest.approx(_one_position_efficiency(divergence), abs=1e-12)
    assert _one_position_efficiency(0.5) != pytest.approx(_one_position_efficiency(1.0), abs=1e-6)


def test_benchmark_stores_record_their_parameters(tmp_path, monkeypatch, capsys):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    sys.modules.pop("measure", None)
    measure = _script("benchmarks/measure.py", "measure")
    output = str(tmp_path / "bench.json")
    _, _, store = measure.run_arguments("d", output, [], parameters={"divergence": 0.7})
    store.add("row", {"seconds": 1.0})
    assert json.loads(Path(output).read_text())["parameters"]["benchmark"] == "bench"
    with pytest.raises(SystemExit) as refused:  # one line, status 2, as the commands refuse (issue 64)
        measure.run_arguments("d", output, [], parameters={"divergence": 0.5})
    assert refused.value.code == 2 and "divergence: 0.7 in the file, 0.5 now" in capsys.readouterr().err
    _, _, fresh = measure.run_arguments("d", output, ["--fresh"], parameters={"divergence": 0.5})
    assert not fresh.rows


def test_delay_sweep_names_the_best_configuration_by_throughput(tmp_path, capsys):
    """E[tau+1] <= depth + 1, so with a nearly free target forward (t_p / t_q = 1e-3) tokens per unit time
    E / (depth + 1e-3) is largest at depth 0, (L1, L2) = (0, 0); with a target forward worth 1e9 draft steps
    the price is the same for every tree and the best is the largest E[tau+1]."""
    sweep = _script("experiments/delay_sweep.py", "delay_sweep_under_test")
    grid = ["--max-k", "2", "--max-trunk", "2", "--max-tail", "2", "--output", str(tmp_path / "d.json")]
    for ratio in ("1e-3", "1e9"):
        sweep.main([*grid, "--cost-ratio", ratio])
        rows = [line.split("|")[1:-1] for line in capsys.readouterr().out.splitlines() if line.startswith("| 1 ")
                or line.startswith("| 2 ")]
        for _, best, _, efficiency, largest in rows:
            if ratio == "1e-3":
                assert best.strip() == "(0, 0)" and float(efficiency) == 1.0
            else:
                assert largest.strip() == f"{float(efficiency):.6f} at {best.strip()}"
