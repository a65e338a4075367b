"""`verispec predict`: a certified interval from a problem file or at a context of a model pair."""

from __future__ import annotations

import json

import pytest

from verispec.cli import main
from verispec.simulator import analyze, load_problem
from verispec.verifiers import REGISTRY

EXAMPLE = "examples/problem.json"


def test_predict_on_a_problem_file_contains_the_exact_value(capsys):
    assert main(["predict", "--problem", EXAMPLE, "--tree", "iid:2,1", "--verifier", "spectr", "--epsilon", "1e-3",
                 "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    exact = float(analyze(load_problem(EXAMPLE), "iid:2,1", REGISTRY["spectr"]).block_efficiency)
    assert result["lower"] - 1e-11 <= exact <= result["upper"] + 1e-11 and result["width"] <= 1e-3
    assert result["reached"] and result["method"] == "certified walk (closed-form kernels)"
    for key in ("acceptance_lower", "acceptance_upper", "prefixes_expanded", "rows_evaluated", "forward_passes",
                "seconds", "rounds"):
        assert key in result


def test_predict_prints_the_interval_by_depth(capsys):
    assert main(["predict", "--problem", EXAMPLE, "--tree", "chain:2", "--verifier", "bv", "--epsilon", "0.01"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("E[tau+1] of bv on chain:2: [") and "P(tau >= 2) in [" in out
    assert "certified whole trees" in out


@pytest.mark.parametrize("arguments,message", [
    ([], "give one source"),
    (["--problem", EXAMPLE, "--context", "x"], "--context belongs with a model pair"),
    (["--problem", EXAMPLE, "--epsilon", "0"], "--epsilon"),
    (["--target", "somewhere"], "give both --target MODEL and --draft MODEL"),
    (["--pair", "qwen-coder"], "give the context"),
])
def test_bad_input_is_one_line_exit_2(arguments, message, capsys):
    status = main(["predict", "--tree", "chain:2", "--verifier", "specinfer", *arguments])
    err = capsys.readouterr().err
    assert status == 2 and message in err and len(err.strip().splitlines()) == 1


def test_predict_at_a_context_of_a_model_pair(tmp_path, capsys):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from tests.support.tiny_models import WORDS, save_tiny_pair

    target, draft = save_tiny_pair(tmp_path, 1)
    context = " ".join(WORDS[3:7])
    assert main(["predict", "--target", str(target), "--draft", str(draft), "--context", context, "--tree",
                 "delayed:2,1,1", "--verifier", "specinfer", "--epsilon", "1e-4", "--top-p", "0.95", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["width"] <= 1e-4 and result["forward_passes"] >= 1 and result["context_tokens"] == 4
    assert result["top_p"] == 0.95
