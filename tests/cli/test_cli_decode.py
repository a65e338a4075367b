"""`verispec decode` and `verispec models` on tiny models saved with their tokenizer (no download)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.tiny_models import WORDS, save_tiny_pair
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
    from tests.support.tiny_models import tiny_tokenizer

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


def _decode_json(saved_pair, capsys, *extra):
    target, draft = saved_pair
    assert main(["decode", "--target", target, "--draft", draft, "--prompt", "a b c", "--max-new-tokens", "12",
                 "--seed", "3", "--json", *extra]) == 0
    return json.loads(capsys.readouterr().out)


def test_plain_decoding_is_one_option_away_and_chain0_is_the_same_run(saved_pair, capsys):
    """--plain samples from the target alone; --tree chain:0 runs no draft model and, drawing no node for a
    one-node tree, takes the same uniforms: the same tokens."""
    plain = _decode_json(saved_pair, capsys, "--plain")
    assert plain["mode"] == "plain" and plain["tree"] is None and plain["draft_calls"] == 0
    assert plain["target_calls"] == plain["new_tokens"] == len(plain["tokens"])
    chain0 = _decode_json(saved_pair, capsys, "--tree", "chain:0", "--verifier", "specinfer")
    assert chain0["tokens"] == plain["tokens"] and chain0["draft_calls"] == 0
    assert all(record["action"] is None and record["select_s"] == 0 for record in chain0["records"])


@pytest.fixture(scope="module")
def selector_file(saved_pair, tmp_path_factory):
    """A tiny linear selector trained (on random labels: what it chooses does not matter here) for the saved pair at
    temperature 1."""
    import numpy as np

    from verispec.latency import LatencyModel
    from verispec.models import Sampling
    from verispec.selector import SCALAR_FEATURES, ActionGrid, train_selector
    from verispec.selector.selector import sampling_dict

    target, draft = saved_pair
    grid = ActionGrid(ks=(1, 2), l1s=(0, 1), l2s=(0, 1))
    latency = LatencyModel.from_ratio(5.0)
    rng = np.random.default_rng(0)
    times = np.array([latency.block_time(action.depth, action.nodes) for action in grid.actions])
    selector = train_selector(rng.normal(size=(64, len(SCALAR_FEATURES))), 1 + rng.random((64, len(grid))), times,
                              grid, kind="linear", seed=0, epochs=3,
                              metadata={"pair": f"{target} + {draft}", "vocab_size": 16, "latency": latency.as_dict(),
                                        "samplings": [sampling_dict(Sampling(1.0))]})
    path = tmp_path_factory.mktemp("selector") / "selector.pt"
    selector.save(path)
    return str(path), len(grid)


def test_decode_with_a_selector_chooses_an_action_per_block(saved_pair, selector_file, capsys):
    path, actions = selector_file
    row = _decode_json(saved_pair, capsys, "--selector", path)
    assert row["mode"] == "selector" and row["selector"] == path and len(row["actions"]) == actions
    assert row["records"] and all(0 <= record["action"] < actions and record["select_s"] > 0
                                  for record in row["records"])
    assert row["select_s"] == pytest.approx(sum(record["select_s"] for record in row["records"]))


@pytest.mark.parametrize("extra,message", [
    (["--temperature", "0.5"], "does not fit: sampling T=0.5"),
    (["--top-k", "5"], "does not fit: sampling T=1 top-k=5"),
])
def test_a_selector_that_does_not_fit_is_refused(saved_pair, selector_file, capsys, extra, message):
    target, draft = saved_pair
    status = main(["decode", "--target", target, "--draft", draft, "--prompt", "a", "--selector", selector_file[0],
                   *extra])
    err = capsys.readouterr().err
    assert status == 2 and message in err and len(err.strip().splitlines()) == 1


def test_a_selector_for_another_pair_is_refused(saved_pair, selector_file, capsys, tmp_path):
    import shutil

    target, draft = saved_pair
    other = tmp_path / "other-target"
    shutil.copytree(target, other)  # the same weights under another name: not the pair it was trained for
    status = main(["decode", "--target", str(other), "--draft", draft, "--prompt", "a", "--selector",
                   selector_file[0]])
    err = capsys.readouterr().err
    assert status == 2 and "does not fit: pair" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("extra,message", [
    (["--plain", "--tree", "chain:2"], "--plain samples from the target alone; drop --tree"),
    (["--plain", "--selector", "s.pt"], "drop --selector"),
    (["--selector", "s.pt", "--tree", "chain:2", "--verifier", "naive"], "drop --tree and --verifier"),
    (["--tree", "chain:2"], "give --tree TREE and --verifier NAME, or --selector FILE, or --plain"),
    ([], "give --tree TREE and --verifier NAME"),
    (["--selector", "/no/such/selector.pt"], "no such file"),
])
def test_bad_decode_modes_are_one_line_errors(saved_pair, extra, message, capsys):
    target, draft = saved_pair
    status = main(["decode", "--target", target, "--draft", draft, "--prompt", "a b", *extra])
    err = capsys.readouterr().err
    assert status == 2 and message in err and len(err.strip().splitlines()) == 1


def test_a_rule_of_your_own_decodes_in_its_sandbox(saved_pair, capsys):
    """decode --verifier FILE.py:NAME runs the rule in its sandbox (verispec.guard.sandbox): the draft trees and the
    torch
    laws cross as messages. At temperature 0 every lossless rule emits the target's greedy continuation, so the README's
    procedure and the example whole-tree rule give the registered rule's text token for token."""
    examples = Path(__file__).resolve().parents[2] / "examples"
    target, draft = saved_pair
    texts = []
    for verifier in ("naive", f"{examples}/my_rules.py:my_rule", f"{examples}/my_whole_tree_rule.py:RULE"):
        assert main(["decode", "--target", target, "--draft", draft, "--tree", "chain:2", "--verifier", verifier,
                     "--temperature", "0", "--max-new-tokens", "8", "--prompt", "a b", "--seed", "1"]) == 0
        texts.append(capsys.readouterr().out)
    assert texts[0].strip() and texts[0] == texts[1] == texts[2]
