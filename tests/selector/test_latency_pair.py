"""A latency model from another pair is refused on one line (issue 66): its times are another pair's forwards, so a
selector trained under it, or a check of it against this pair's decoding, would price nothing real. ``verispec
latency`` names the pair it measured in the model's source ("measured on NAME (...)"); a model that names none (made
by hand, or by ratio) is taken as given."""

from __future__ import annotations

import json

import pytest

from verispec.latency import LatencyError, LatencyModel, check_latency_pair, measured_pair

pytest.importorskip("torch")


def _model(source: str) -> LatencyModel:
    return LatencyModel(60.0, (1, 4), (170.0, 240.0), "ms", source)


def test_the_pair_is_read_from_the_source_verispec_latency_writes():
    assert measured_pair(_model("measured on qwen-coder (cpu, dynamic cache, context 200, median of 9)")) == \
        "qwen-coder"
    assert measured_pair(_model("by hand")) is None
    assert measured_pair(LatencyModel.from_ratio(20.0)) is None


def test_another_pairs_model_is_refused_on_one_line_and_the_same_pairs_taken():
    model = _model("measured on llama-pair (cpu, dynamic cache, context 200, median of 9)")
    with pytest.raises(LatencyError) as error:
        check_latency_pair(model, "qwen-coder", "--latency lat.json")
    message = str(error.value)
    assert "\n" not in message and "'llama-pair'" in message and "'qwen-coder'" in message
    assert "verispec latency --pair qwen-coder" in message
    check_latency_pair(model, "llama-pair", "--latency lat.json")  # negative control: the same pair passes
    check_latency_pair(_model("by hand"), "qwen-coder", "--latency lat.json")


def test_selector_train_refuses_a_latency_model_of_another_pair(tmp_path, capsys):
    from tests.selector.test_pair_selector_study import T1, pair_dataset
    from verispec.cli import main

    dataset = tmp_path / "d.npz"
    pair_dataset(T1, seed=2).save(dataset)  # the pair 'tiny'
    other, same = tmp_path / "other.json", tmp_path / "same.json"
    for path, pair in ((other, "qwen-coder"), (same, "tiny")):
        path.write_text(json.dumps(_model(f"measured on {pair} (cpu, dynamic cache, context 200, median of 9)")
                                   .as_dict()))
    out = tmp_path / "s.pt"
    assert main(["selector", "train", "--dataset", str(dataset), "--epochs", "1", "--latency", str(other),
                 "--out", str(out)]) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and "measured on the pair 'qwen-coder', not 'tiny'" in error[0] and not out.exists()
    assert main(["selector", "train", "--dataset", str(dataset), "--epochs", "1", "--latency", str(same),
                 "--out", str(out)]) == 0
