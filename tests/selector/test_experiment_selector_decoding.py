"""experiments/selector_decoding.py end to end on a tiny saved pair: a dataset traced from it, two selectors
trained on one split, then plain / static / selector decoding of the held-out prompts; the table has its rows,
the static action is the training set's best, and a second run resumes without decoding again."""

from __future__ import annotations

import json

import pytest

from tests.support.scripts import load_script
from tests.support.tiny_models import save_tiny_pair

pytest.importorskip("torch")
pytest.importorskip("transformers")


def test_selector_decoding_experiment_runs_and_resumes(tmp_path, monkeypatch):
    from verispec.cli import main

    target, draft = save_tiny_pair(tmp_path / "pair")
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("\n".join(f"the tiny pair's prompt number {i} goes here" for i in range(4)) + "\n")
    dataset = tmp_path / "d.npz"
    assert main(["selector", "dataset", "--target", target, "--draft", draft, "--prompts", str(prompts),
                 "--sampling", "temperature=1", "--every", "4", "--trace-tokens", "4", "--ks", "1-2", "--l1s", "0-1",
                 "--l2s", "0-1", "--verifiers", "specinfer,traversal-iid", "--samples", "2", "--out",
                 str(dataset), "--threads", "1"]) == 0
    for verifier in ("specinfer", "traversal-iid"):
        assert main(["selector", "train", "--dataset", str(dataset), "--verifiers", verifier, "--epochs", "5",
                     "--out", str(tmp_path / f"{verifier}.pt")]) == 0
    script = load_script("experiments/selector_decoding.py")
    output = tmp_path / "rows.json"
    arguments = ["--target", target, "--draft", draft, "--dataset", str(dataset), "--selector",
                 str(tmp_path / "specinfer.pt"), "--selector", str(tmp_path / "traversal-iid.pt"), "--prompts",
                 str(prompts), "--max-new-tokens", "6", "--threads", "1", "--output", str(output)]
    assert script.main(arguments) == 0
    rows = {row["key"]: row for row in json.loads(output.read_text())["rows"]}
    methods = ["plain", "specinfer static", "specinfer selector", "traversal-iid static", "traversal-iid selector"]
    held = {key.split("|")[1] for key in rows}
    assert len(held) == 1 and len(rows) == len(methods)  # 4 groups, a quarter held out
    # at most the budget; fewer where the tiny pair samples an end token
    assert all(1 <= rows[f"{method}|{next(iter(held))}|T=1"]["new_tokens"] <= 6 for method in methods)
    table = json.loads(output.with_suffix(".summary.json").read_text())
    assert [entry["method"] for entry in table] == methods
    selector_rows = [entry for entry in table if entry["method"].endswith("selector")]
    assert all("vs_static_per_prompt" in entry and entry["select_ms_per_block"] > 0 for entry in selector_rows)
    assert all(sum(rows[f"{m}|{next(iter(held))}|T=1"]["actions"].values()) ==
               rows[f"{m}|{next(iter(held))}|T=1"]["blocks"] for m in ("specinfer selector", "traversal-iid selector"))

    def refuse(*_args, **_kwargs):
        raise AssertionError("a finished cell was decoded again")

    monkeypatch.setattr(script, "decode_cell", refuse)
    assert script.main(arguments) == 0
    # the CPU's small-batch linears time other kernels: the store is keyed on them, so a rerun with them is refused
    monkeypatch.setenv("VERISPEC_SMALL_BATCH_LINEAR", "1")
    assert script.main(arguments) == 2
    parameters = json.loads(output.read_text())["parameters"]
    assert "small_batch_linear" not in parameters  # keyed only when on: files written without it resume unchanged
    title = script.markdown([], {**parameters, "small_batch_linear": True}).splitlines()[0]
    assert "(float32, small-batch linears, 1 threads)" in title


def test_prompts_that_miss_a_held_out_group_are_one_line(tmp_path, capsys):
    script = load_script("experiments/selector_decoding.py")
    assert script.main(["--dataset", str(tmp_path / "none.npz"), "--selector", "x.pt", "--prompts", "prose"]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_wall_clock_ratios_and_their_paired_intervals_by_hand():
    """The ratio of rates over prompts both methods ran (total tokens over total seconds, each), and its bootstrap
    interval over prompts: with two prompts the resamples are {1, 1}, {2, 2} and {1, 2}, ratios 2, 1 and 1.2."""
    script = load_script("experiments/selector_decoding.py")
    method = {"a": {"new_tokens": 10, "decode_s": 1.0}, "b": {"new_tokens": 20, "decode_s": 4.0}}
    base = {"a": {"new_tokens": 10, "decode_s": 2.0}, "b": {"new_tokens": 10, "decode_s": 2.0},
            "c": {"new_tokens": 5, "decode_s": 1.0}}  # c: the method did not run it, so it is left out
    assert abs(script.paired_rate_ratio(method, base) - (30 / 5) / (20 / 4)) < 1e-12
    low, high = script.paired_rate_interval(method, base, resamples=400, seed=1)
    assert (low, high) == (1.0, 2.0)
    assert script.paired_rate_interval({"a": method["a"]}, base) is None  # one prompt: no interval
