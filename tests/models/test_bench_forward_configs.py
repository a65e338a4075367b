"""``benchmarks/bench_forward.py --configs``: a pair built from config files with random weights (how the H100's
t_p(n) for the Qwen pair's shapes was measured without its weights), and its refusals; the committed configs hold
the published Qwen2.5-Coder 1.5B / 0.5B shapes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.scripts import load_script

ROOT = Path(__file__).resolve().parents[2]
TINY = {"model_type": "qwen2", "vocab_size": 40, "hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1,
        "num_attention_heads": 2, "num_key_value_heads": 1, "max_position_embeddings": 64,
        "tie_word_embeddings": False}


def test_a_config_built_pair_is_timed_in_every_cache_mode(tmp_path, capsys):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    bench = load_script("benchmarks/bench_forward.py", "bench_forward_under_test")
    config = tmp_path / "tiny.json"
    config.write_text(json.dumps(TINY))
    out = tmp_path / "forward.json"
    assert bench.main(["--configs", f"{config},{config}", "--widths", "1,2", "--repeats", "1", "--context", "6",
                       "--dtype", "float64", "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    for role in ("target", "draft"):
        table = result["models"][role]
        assert table["max_relative_difference"] < 1e-12  # the three modes' logits agree in float64
        assert all(table[mode][str(width)] > 0 for mode in ("dynamic", "static", "graphs") for width in (1, 2))
    assert "config-built" in bench.config_pair(f"{config},{config}", "cpu", "auto").name


def test_bad_configs_are_refused_on_one_line(tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    bench = load_script("benchmarks/bench_forward.py", "bench_forward_under_test")
    not_a_model = tmp_path / "bad.json"
    not_a_model.write_text('{"a": 1}')
    for configs, words in ((str(not_a_model), "TARGET.json,DRAFT.json"), (f"{tmp_path}/none.json,x", "cannot build"),
                           (f"{not_a_model},{not_a_model}", "cannot build")):
        with pytest.raises(SystemExit) as caught:
            bench.config_pair(configs, "cpu", "auto")
        assert words in str(caught.value) and "\n" not in str(caught.value)
    with pytest.raises(SystemExit) as caught:
        bench.config_pair(f"{not_a_model},{not_a_model}", "cpu", "float8")
    assert "dtype 'float8' is unknown" in str(caught.value)


def test_the_committed_configs_hold_the_qwen_pairs_published_shapes():
    shapes = {"qwen2.5-coder-1.5b": (1536, 8960, 28, 12, 2), "qwen2.5-coder-0.5b": (896, 4864, 24, 14, 2)}
    for name, shape in shapes.items():
        config = json.loads((ROOT / "benchmarks" / "configs" / f"{name}.json").read_text())
        assert config["model_type"] == "qwen2" and config["vocab_size"] == 151_936
        assert (config["hidden_size"], config["intermediate_size"], config["num_hidden_layers"],
                config["num_attention_heads"], config["num_key_value_heads"]) == shape
