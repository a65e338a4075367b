"""experiments/typical_derived.py on the tiny pair: it runs, resumes, keeps the lossless rules lossless and shows
typical acceptance's TV."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

SCRIPT = Path(__file__).resolve().parents[2] / "experiments" / "typical_derived.py"


def _load():
    spec = importlib.util.spec_from_file_location("typical_derived", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_experiment_runs_and_resumes(tmp_path, capsys):
    module = _load()
    output = tmp_path / "typical.json"
    argv = ["--tiny", "--humaneval", "1", "--prose", "0", "--output", str(output), "--threads", "1"]
    assert module.main(argv) == 0
    entries = json.loads(output.read_text())["rows"]  # the store's rows: one entry per (sampling, context)
    rows = [row for entry in entries for row in entry["rows"]]
    # two sampling laws x one context x two trees x five settings
    assert len(rows) == 2 * 1 * 2 * 5
    assert max(row["lossless_tv"] for row in rows) < 1e-12
    assert max(row["tv"] for row in rows) > 1e-3  # lossy by design, and visibly so on the tiny pair
    assert (output.with_suffix(".md")).read_text().count("typical(") == 2 * 2 * 5
    before = output.read_text()
    capsys.readouterr()
    assert module.main(argv) == 0  # everything is stored: nothing is recomputed
    assert json.loads(output.read_text())["rows"] == json.loads(before)["rows"]
