"""experiments/selector_label_quality.py end to end on a tiny saved pair: certified and conditional labels at two
traced roots, the label-quality summary (the conditional means sit inside their 95% intervals around the
certified values about as often as they should), and a resumed run that computes nothing."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.support.scripts import load_script
from tests.support.tiny_models import save_tiny_pair

pytest.importorskip("torch")
pytest.importorskip("transformers")


def test_label_quality_experiment_runs_and_resumes(tmp_path, monkeypatch, capsys):
    from verispec.cli import main

    target, draft = save_tiny_pair(tmp_path / "pair")
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("a first prompt for the tiny pair\nand a second one\n")
    dataset = tmp_path / "d.npz"
    assert main(["selector", "dataset", "--target", target, "--draft", draft, "--prompts", str(prompts),
                 "--sampling", "temperature=1,top_k=3", "--every", "4", "--trace-tokens", "4", "--ks", "1-2",
                 "--l1s", "0-1", "--l2s", "0-1", "--verifiers", "specinfer", "--samples", "2", "--out", str(dataset),
                 "--threads", "1"]) == 0
    script = load_script("experiments/selector_label_quality.py")
    output = tmp_path / "quality.json"
    arguments = ["--target", target, "--draft", draft, "--dataset", str(dataset), "--roots", "2", "--samples", "16",
                 "--ks", "1,2", "--l1s", "0,1", "--l2s", "0,1", "--epsilon", "0.001", "--threads", "1", "--output",
                 str(output)]
    assert script.main(arguments) == 0
    summary = json.loads(output.with_suffix(".summary.json").read_text())
    assert summary["roots"] == 2 and summary["actions"] == 8
    assert summary["max_certified_width"] <= 0.001 + 1e-12
    assert [entry["trees"] for entry in summary["ranking"]] == [1, 2, 4, 8, 16]
    # 2 roots x 8 actions; chain:0 and chain:1 have no noise (stderr 0) and are excluded; the rest should land in
    # their 95% intervals most of the time (a biased estimator would not)
    assert summary["z_within_95"] >= 0.6
    assert abs(summary["bias"]) < 0.2

    assert set(summary["ranking_by_regime"]) == {"gpu-large", "h100"}  # no --latency FILE: no cpu regime
    assert summary["ranking_by_regime"]["gpu-large"] == summary["ranking"]
    # the dataset's own sampled trees (2 a root) instead of new ones: the conditional labels are the dataset's
    from verispec.selector.dataset_file import Dataset

    reused = tmp_path / "reused.json"
    assert script.main(arguments[:-1] + [str(reused), "--reuse-dataset-trees"]) == 0
    stored = Dataset.load(dataset)
    rows = json.loads(reused.read_text())["rows"]
    for row in rows:
        index = stored.key.tolist().index(row["key"])
        assert np.abs(np.array(row["conditional"]["efficiency"]) - stored.efficiency[index]).max() < 1e-12
    assert [entry["trees"] for entry in json.loads(reused.with_suffix(".summary.json").read_text())["ranking"]] \
        == [1, 2]
    # a build's row store (what a build stopped at its --time-budget has) serves as well, with the same roots
    from_store = tmp_path / "from_store.json"
    arguments_store = [str(dataset) + ".roots.json" if item == str(dataset) else item for item in arguments[:-1]]
    assert script.main(arguments_store + [str(from_store), "--reuse-dataset-trees"]) == 0
    again = {row["key"]: row for row in json.loads(from_store.read_text())["rows"]}
    for row in rows:
        assert again[row["key"]]["conditional"] == row["conditional"]
        assert again[row["key"]]["certified"] == row["certified"]

    def refuse(*_args, **_kwargs):
        raise AssertionError("a finished root was labelled again")

    monkeypatch.setattr("verispec.selector.labels.certified_labels", refuse)
    monkeypatch.setattr("verispec.selector.labels.conditional_exact_labels", refuse)
    assert script.main(arguments) == 0
    monkeypatch.undo()

    # certify out of budget at every root: the roots are listed as skipped and the run says nothing was measured
    from verispec.errors import AnalysisTimeoutError

    def timeout(*_args, **_kwargs):
        raise AnalysisTimeoutError("the certified walk ran past its time budget")

    monkeypatch.setattr("verispec.selector.labels.certified_labels", timeout)
    assert script.main(arguments[:-1] + [str(tmp_path / "none.json")]) == 3
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "certify gave no interval at any of the 2 roots" in err and "--deadline" in err


def test_a_synthetic_dataset_is_refused_in_one_line(tmp_path, capsys):
    from verispec.cli import main

    dataset = tmp_path / "s.npz"
    assert main(["selector", "dataset", "--family", "context-free", "--vocab", "2", "--seeds", "0-1", "--ks", "1",
                 "--l1s", "0", "--l2s", "0-1", "--verifiers", "specinfer", "--backend", "serial", "--out",
                 str(dataset)]) == 0
    script = load_script("experiments/selector_label_quality.py")
    assert script.main(["--dataset", str(dataset), "--output", str(tmp_path / "q.json")]) == 2
    assert "synthetic roots" in capsys.readouterr().err
