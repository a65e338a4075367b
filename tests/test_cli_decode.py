"""`verispec decode` and `verispec models` on tiny models saved with their tokenizer (no download)."""

from __future__ import annotations

import json

import pytest

from tests.tiny_models import WORDS, save_tiny_pair
from verispec.cli import main

pytest.importorskip("torch")
pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def saved_pair(tmp_path_factory):
    return save_tiny_pair(tmp_path_factory.mktemp("tiny-pair"))


def _decode(saved_pair, *extra):
    target, draft = saved_pair
    return main(["decode", "--target", target, "--draft", draft, "--tree", "delayed:2,1,2", "--verifier", "specinfer",
                 *extra])


def test_decode_prints_the_continuation_and_a_summary(saved_pair, capsys):
    assert _decode(saved_pair, "--prompt", "a b c", "--max-new-tokens", "8", "--seed", "4") == 0
    out, err = capsys.readouterr()
    assert set(out.strip().replace("<eos>", "")) <= set("".join(WORDS))
    assert "tokens per target call" in err and "specinfer on delayed:2,1,2" in err


def test_decode_json_per_prompt_from_a_jsonl_file(saved_pair, capsys, tmp_path):
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(json.dumps({"prompt": "a b c"}) + "\n" + json.dumps("d e") + "\n")
    assert _decode(saved_pair, "--prompts", str(prompts), "--max-new-tokens", "6", "--json", "--temperature", "0.7",
                   "--top-k", "6", "--top-p", "0.95", "--dtype", "float64") == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [row["prompt"] for row in rows] == ["a b c", "d e"]
    for row in rows:
        assert row["verifier"] == "specinfer" and row["tree"] == "delayed:2,1,2" and row["dtype"] == "float64"
        assert (row["temperature"], row["top_k"], row["top_p"]) == (0.7, 6, 0.95)
        assert 1 <= row["new_tokens"] <= 6 and len(row["records"]) == row["blocks"] == row["target_calls"]
        assert row["tokens_per_target_call"] == row["new_tokens"] / row["target_calls"]
        assert sum(record["emitted"] for record in row["records"]) == row["new_tokens"]


def test_greedy_decode_is_the_same_for_every_verifier(saved_pair, capsys):
    texts = set()
    for tree, verifier, extra in (("chain:3", "naive", []), ("iid:2,2", "gbv", []), ("branch:2,2", "traversal", []),
                                  ("delayed:2,1,2", "specinfer", ["--static-cache"])):
        target, draft = saved_pair
        assert main(["decode", "--target", target, "--draft", draft, "--prompt", "a b c", "--tree", tree,
                     "--verifier", verifier, "--temperature", "0", "--max-new-tokens", "10", "--json", *extra]) == 0
        texts.add(json.loads(capsys.readouterr().out)["text"])
    assert len(texts) == 1


@pytest.mark.parametrize("arguments,message", [
    (["--target", "/no/such/model", "--draft", "/no/such/draft"], "directory '/no/such/model' does not exist"),
    (["--target", "nobody/no-such-model", "--draft", "nobody/no-such-model"], "cannot load the target model"),
    (["--pair", "no-such-pair"], "unknown model pair 'no-such-pair'"),
    ([], "give the models"),
])
def test_unloadable_models_are_one_line_errors(arguments, message, capsys):
    status = main(["decode", *arguments, "--prompt", "a", "--tree", "chain:2", "--verifier", "naive"])
    err = capsys.readouterr().err
    assert status == 2 and message in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("extra,message", [
    (["--tree", "dyspec:3", "--verifier", "specinfer"], "valid only for draft laws"),
    (["--tree", "chain:2", "--verifier", "naive", "--device", "cuda:7"], "cuda"),
    (["--tree", "chain:2", "--verifier", "naive", "--dtype", "float8"], "dtype 'float8' is unknown"),
    (["--tree", "chain:2", "--verifier", "naive", "--top-p", "1.5"], "top-p must lie in (0, 1]"),
])
def test_bad_decode_options_are_one_line_errors(saved_pair, extra, message, capsys):
    target, draft = saved_pair
    status = main(["decode", "--target", target, "--draft", draft, "--prompt", "a b", *extra])
    err = capsys.readouterr().err
    assert status == 2 and message in err and len(err.strip().splitlines()) == 1


def test_a_draft_with_another_tokenizer_is_refused(saved_pair, tmp_path, capsys):
    from tests.tiny_models import tiny_tokenizer

    target, draft = saved_pair
    other = tmp_path / "other-draft"
    import shutil

    shutil.copytree(draft, other)
    tokenizer = tiny_tokenizer(eos=False)
    tokenizer.save_pretrained(other)
    status = main(["decode", "--target", target, "--draft", str(other), "--prompt", "a", "--tree", "chain:2",
                   "--verifier", "naive"])
    err = capsys.readouterr().err
    assert status == 2 and "tokenizers" in err and len(err.strip().splitlines()) == 1


def test_models_list_names_the_pair(capsys, tmp_path):
    assert main(["models", "list", "--cache", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "qwen-coder" in out and "not installed (verispec models install qwen-coder)" in out
