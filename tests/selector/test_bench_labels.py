"""``benchmarks/bench_labels.py --tiny``: a group of roots labelled on a tiny random pair, its floors measured, and the
labels' time split into the models' passes as they ran and the rest (the split is the labels' own: prefill apart,
the floors' forwards after it)."""

from __future__ import annotations

import json

import pytest

from tests.support.scripts import load_script


def test_a_tiny_group_is_timed_with_its_floors_and_its_passes(tmp_path, capsys):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    bench = load_script("benchmarks/bench_labels.py", "bench_labels_under_test")
    out = tmp_path / "labels.json"
    assert bench.main(["--tiny", "--roots", "2", "--root-batch", "2", "--samples", "2", "--ks", "1,2", "--l1s", "0,1",
                       "--l2s", "0,2", "--repeats", "1", "--threads", "1", "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    (row,) = result["rows"]
    assert row["roots"] == 2 and row["target_tokens"] > 0 and row["draft_passes"] == 3  # depth 1 + 2 of the grid
    assert 0 < row["target_pass_seconds"] and 0 < row["draft_pass_seconds"]
    assert row["target_pass_seconds"] + row["draft_pass_seconds"] + row["outside_passes_seconds"] == \
        pytest.approx(row["seconds"], abs=1e-9)
    assert row["outside_passes_seconds"] > 0 and row["prefill_seconds"] > 0
    assert "inside the passes as they ran" in capsys.readouterr().out
