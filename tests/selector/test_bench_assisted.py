"""benchmarks/bench_assisted.py on a tiny saved pair (seconds): transformers' plain and assisted generation,
verispec's plain sampling, a selector's best static action and the selector, interleaved per held-out prompt in a
rotated order; the summary's ratios recompute from the rows, a rerun resumes, a bad option is one line, and the
small-batch linear path reaches transformers' target and assistant alike. No timing is asserted."""

from __future__ import annotations

import json
import math

import pytest

from tests.support.scripts import load_script
from tests.support.tiny_models import save_tiny_pair

pytest.importorskip("torch")
pytest.importorskip("transformers")


def _bench():
    return load_script("benchmarks/bench_assisted.py", "bench_assisted_under_test")


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A tiny pair, 8 prompts traced into a dataset and a specinfer selector trained on it (2 held out)."""
    from verispec.cli import main

    folder = tmp_path_factory.mktemp("assisted")
    target, draft = save_tiny_pair(folder / "pair")
    prompts = folder / "prompts.txt"
    prompts.write_text("\n".join(f"the tiny pair's prompt number {i} goes here" for i in range(8)) + "\n")
    dataset = folder / "d.npz"
    assert main(["selector", "dataset", "--target", target, "--draft", draft, "--prompts", str(prompts),
                 "--sampling", "temperature=1,top_k=5", "--every", "4", "--trace-tokens", "4", "--ks", "1-2",
                 "--l1s", "0-1", "--l2s", "0-1", "--verifiers", "specinfer", "--samples", "2", "--out", str(dataset),
                 "--threads", "1"]) == 0
    assert main(["selector", "train", "--dataset", str(dataset), "--verifiers", "specinfer", "--epochs", "5",
                 "--out", str(folder / "specinfer.pt")]) == 0
    return {"folder": folder, "arguments": ["--target", target, "--draft", draft, "--dataset", str(dataset),
                                            "--selector", str(folder / "specinfer.pt"), "--prompts", str(prompts),
                                            "--max-new-tokens", "6", "--threads", "1"]}


METHODS = ["hf-plain", "hf-assisted", "plain", "specinfer static", "specinfer selector"]


def test_the_benchmark_runs_end_to_end_resumes_and_its_ratios_recompute_from_the_rows(trained, monkeypatch):
    bench = _bench()
    output, result = trained["folder"] / "rows.json", trained["folder"] / "result.json"
    arguments = [*trained["arguments"], "--output", str(output), "--result", str(result)]
    assert bench.main(arguments) == 0
    stored = json.loads(output.read_text())
    rows = {row["key"]: row for row in stored["rows"]}
    prompts = sorted({key.split("|")[1] for key in rows})
    assert len(prompts) >= 2 and len(rows) == len(METHODS) * len(prompts)
    assert stored["parameters"]["linears"] == "torch" and stored["parameters"]["threads"] == 1
    assert stored["parameters"]["hf_assistant"]["num_assistant_tokens"] >= 1
    for row in rows.values():
        assert 1 <= row["new_tokens"] <= 6 and row["linears"] == "torch" and "load_average" in row
        assert math.isclose(row["wall_s"], row["decode_s"] + row["prefill_s"])
        assert row["prefill_estimated"] == row["key"].startswith("hf-")
    # each prompt ran every method once, in the rotated order, all from one seed
    for position, prompt in enumerate(prompts):
        order = sorted(METHODS, key=lambda m: rows[f"{m}|{prompt}|T=1 top-k=5"]["position"])
        assert order == bench.method_order(METHODS, position)
        assert len({rows[f"{m}|{prompt}|T=1 top-k=5"]["seed"] for m in METHODS}) == 1

    table = json.loads(output.with_suffix(".summary.json").read_text())["rows"]  # with its written_by marker beside
    assert [entry["method"] for entry in table] == METHODS

    def rate(method, seconds="decode_s"):
        cells = [rows[f"{method}|{p}|T=1 top-k=5"] for p in prompts]
        return sum(c["new_tokens"] for c in cells) / sum(c[seconds] for c in cells)

    for entry in table:
        method = entry["method"]
        assert math.isclose(entry["tokens_per_s"], rate(method))
        assert math.isclose(entry["vs_hf-assisted"], rate(method) / rate("hf-assisted"))
        assert math.isclose(entry["vs_hf-plain"], rate(method) / rate("hf-plain"))
        assert math.isclose(entry["vs_hf-assisted_with_prefill"],
                            rate(method, "wall_s") / rate("hf-assisted", "wall_s"))
        low, high = entry["vs_hf-assisted_ci"]
        assert low <= high and entry["tokens_per_s_ci"][0] <= entry["tokens_per_s_ci"][1]
        assert (entry["tokens_per_target_call"] is None) == method.startswith("hf-")
    assert table[1]["vs_hf-assisted"] == 1.0
    written = json.loads(result.read_text())
    assert written["record"]["command"].startswith("python benchmarks/bench_assisted.py")
    assert written["record"]["machine"]["threads"] == 1
    for row, entry in zip(written["rows"], table):
        assert math.isclose(row["ratio"], row["before"] / row["now"])
        assert math.isclose(row["ratio"], entry["vs_hf-assisted"])
    assert "| specinfer selector |" in output.with_suffix(".md").read_text()

    def refuse(*_args, **_kwargs):
        raise AssertionError("a finished cell was decoded again")

    monkeypatch.setattr(bench, "run_method", refuse)
    assert bench.main(arguments) == 0  # every cell is in the file
    # other kernels, other times: the same file is refused with the small-batch path on
    assert bench.main([*arguments, "--linears", "small-batch"]) == 2


def test_interleaving_rotates_by_one_place_a_prompt():
    bench = _bench()
    methods = ["a", "b", "c"]
    cells = bench.schedule(methods, ["p", "q", "r", "s"], 2)
    assert [(index, group) for index, group, _ in cells] == [(i, g) for i in range(2) for g in "pqrs"]
    assert [order for _, _, order in cells[:4]] == [["a", "b", "c"], ["b", "c", "a"], ["c", "a", "b"], ["a", "b", "c"]]
    assert all(sorted(order) == methods for _, _, order in cells)
    firsts = [order[0] for _, _, order in cells[:3]]
    assert sorted(firsts) == methods  # over len(methods) prompts every method runs first once


@pytest.mark.parametrize(("option", "message"), [
    (["--linears", "fast"], "--linears 'fast': choose torch or small-batch"),
    (["--budget", "0"], "--budget 0: give positive seconds"),
    (["--max-new-tokens", "0"], "--max-new-tokens and --threads must be positive"),
    (["--warmup", "-1"], "--warmup at least 0")])
def test_a_bad_option_is_refused_on_one_line(tmp_path, capsys, option, message):
    bench = _bench()
    assert bench.main(["--dataset", str(tmp_path / "d.npz"), "--selector", "s.pt", "--prompts", "p.txt",
                       "--output", str(tmp_path / "rows.json"), *option]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and message in error
    assert not (tmp_path / "rows.json").exists()


def test_the_small_batch_path_runs_inside_transformers_target_and_assistant(tmp_path, monkeypatch):
    """``--linears small-batch`` patches the module instances at load, so transformers' generate (the target and
    its assistant) multiplies through the same kernels as verispec's decoders."""
    import torch

    from verispec.models import Sampling, cpu_linear, load_pair

    called = set()
    original = cpu_linear.small_batch_linear

    def counting(module, inputs):
        called.add(id(module))
        return original(module, inputs)

    monkeypatch.setattr(cpu_linear, "small_batch_linear", counting)
    target, draft = save_tiny_pair(tmp_path / "pair")
    pair = load_pair(target, draft, small_batch_linear=True)
    bench = _bench()
    assert bench.linears_of(pair) == "small-batch"
    row = bench.real_decoding.run_hf(pair, "a b c d", "hf-assisted", Sampling(1.0, 5, None), 4, 0)  # generate alone
    assert row["new_tokens"] >= 1
    for model in (pair.target, pair.draft):
        layers = {id(m) for m in model.modules() if isinstance(m, torch.nn.Linear)}
        assert layers & called, "a model of transformers' assisted generation bypassed the small-batch path"


def test_a_spent_budget_stops_between_prompts_and_a_rerun_goes_on(trained, capsys):
    bench = _bench()
    output = trained["folder"] / "budget.json"
    arguments = [*trained["arguments"], "--output", str(output)]
    assert bench.main([*arguments, "--budget", "1e-6"]) == 0  # the first prompt runs whole, then the budget is spent
    assert len(json.loads(output.read_text())["rows"]) == len(METHODS)
    assert "budget of 1e-06 s is spent" in capsys.readouterr().err
    assert bench.main(arguments) == 0
    assert len(json.loads(output.read_text())["rows"]) == 2 * len(METHODS)
