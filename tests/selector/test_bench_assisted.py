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
from tests.support.tiny_selector import tiny_selector

pytest.importorskip("torch")
pytest.importorskip("transformers")


def _bench():
    return load_script("benchmarks/bench_assisted.py", "bench_assisted_under_test")


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A tiny pair, 8 prompts traced into a dataset and a specinfer selector trained on it (2 held out)."""
    return tiny_selector(tmp_path_factory.mktemp("assisted"), max_new_tokens=16)


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
        # the steady state, after the first block (ForwardClock.steady); no tokens where the tiny pair's end-of-text
        # token ended the generation in its first block
        assert 0 <= row["steady_tokens"] < row["new_tokens"] <= 16
        assert row["linears"] == "torch" and "load_average" in row
        assert math.isclose(row["wall_s"], row["decode_s"] + row["prefill_s"])
        # wall_s is each decoder's own timer (verispec's: its phases' sum), call_s the call timed from outside
        assert 0 < row["steady_s"] < row["call_s"] and row["wall_s"] <= row["call_s"]
        assert row["steady_blocks"] <= row["steady_tokens"]
        assert row["prefill_estimated"] == row["key"].startswith("hf-")
    # each prompt ran every method once, in the rotated order, all from one seed
    for position, prompt in enumerate(prompts):
        order = sorted(METHODS, key=lambda m: rows[f"{m}|{prompt}|T=1 top-k=5"]["position"])
        assert order == bench.method_order(METHODS, position)
        assert len({rows[f"{m}|{prompt}|T=1 top-k=5"]["seed"] for m in METHODS}) == 1

    table = json.loads(output.with_suffix(".summary.json").read_text())["rows"]  # with its written_by marker beside
    assert [entry["method"] for entry in table] == METHODS

    def rate(method, seconds="steady_s"):
        cells = [rows[f"{method}|{p}|T=1 top-k=5"] for p in prompts]
        tokens = "new_tokens" if seconds == "wall_s" else "steady_tokens"  # whole calls: all their tokens
        return sum(c[tokens] for c in cells) / sum(c[seconds] for c in cells)

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


# --- issue 66, item 1: transformers tuned on the training prompts, the best run on the held-out ones -------------

def test_the_default_grid_is_a_constant_draft_of_1_to_8_with_the_confidence_stop_off_and_at_its_default():
    bench = _bench()
    grid = bench.hf_grid(None)
    assert len(grid) == 8 * 2
    assert sorted({c["num_assistant_tokens"] for c in grid}) == list(range(1, 9))
    assert {c["num_assistant_tokens_schedule"] for c in grid} == {"constant"}
    assert {c["assistant_confidence_threshold"] for c in grid} == {0.0, "default"}
    assert len(bench.hf_grid(["num_assistant_tokens=2,4", "assistant_confidence_threshold=0"])) == 2
    assert bench.config_name(grid[0]) == "hf:k=1,schedule=constant,threshold=0"
    schedule = {"num_assistant_tokens": 20, "num_assistant_tokens_schedule": "constant",
                "assistant_confidence_threshold": 0.4}
    assert bench.resolved(grid[1], schedule)["assistant_confidence_threshold"] == 0.4


@pytest.mark.parametrize(("part", "message"), [
    ("num_draft_tokens=4", "unknown option 'num_draft_tokens'"),
    ("num_assistant_tokens", "'num_assistant_tokens': give OPTION=VALUES"),
    ("num_assistant_tokens=0", "'0' is not one of integers 1-64"),
    ("num_assistant_tokens_schedule=fast", "'fast' is not one of constant or heuristic"),
    ("assistant_confidence_threshold=1.5", "'1.5' is not one of numbers in [0, 1) or default")])
def test_a_grid_naming_an_unknown_option_or_value_is_refused_on_one_line(tmp_path, capsys, part, message):
    bench = _bench()
    with pytest.raises(bench.VerispecError, match=None) as error:
        bench.hf_grid([part])
    assert message in str(error.value) and "\n" not in str(error.value)
    assert bench.main(["--dataset", str(tmp_path / "d.npz"), "--selector", "s.pt", "--prompts", "p.txt",
                       "--output", str(tmp_path / "rows.json"), "--tune-prompts", "2", "--hf-grid", part]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and message in error
    assert not (tmp_path / "rows.json").exists()


def test_the_best_configuration_is_the_highest_total_rate_and_none_until_every_cell_ran():
    bench = _bench()
    rows = {"a|p|s": {"steady_tokens": 10, "steady_s": 1.0}, "a|q|s": {"steady_tokens": 10, "steady_s": 9.0},
            "b|p|s": {"steady_tokens": 10, "steady_s": 2.0}, "b|q|s": {"steady_tokens": 10, "steady_s": 2.0}}
    # a: 20 tokens in 10 s; b: 20 in 4 s (a has the faster first prompt, b the faster total)
    assert bench.best_config(rows, ["a", "b"], ["p", "q"], "s") == "b"
    assert bench.best_config(rows, ["a", "b"], ["p"], "s") == "a"
    assert bench.best_config(rows, ["a", "b", "c"], ["p", "q"], "s") is None


def test_tuning_runs_the_grid_on_training_prompts_and_the_best_on_the_held_out_ones(trained):
    bench = _bench()
    output = trained["folder"] / "tuned.json"
    arguments = [*trained["arguments"], "--output", str(output), "--tune-prompts", "2",
                 "--hf-grid", "num_assistant_tokens=1-2", "--hf-grid", "assistant_confidence_threshold=0",
                 "--skip", "plain"]
    assert bench.main(arguments) == 0
    stored = json.loads(output.read_text())
    rows = {row["key"]: row for row in stored["rows"]}
    configs = ["hf:k=1,schedule=constant,threshold=0", "hf:k=2,schedule=constant,threshold=0"]
    tuned = stored["parameters"]["tune_groups"]
    held = sorted({key.split("|")[1] for key in rows if key.startswith("hf-plain|")})
    assert len(tuned) == 2 and not set(tuned) & set(held)  # tuned on training prompts only
    rate = {c: sum(rows[f"{c}|{g}|T=1 top-k=5"]["steady_tokens"] for g in tuned)
            / sum(rows[f"{c}|{g}|T=1 top-k=5"]["steady_s"] for g in tuned) for c in configs}
    table = json.loads(output.with_suffix(".summary.json").read_text())
    assert table["hf_best"] == max(rate, key=rate.get)
    assert all(f"hf-best|{g}|T=1 top-k=5" in rows for g in held)
    assert [e["method"] for e in table["rows"]] == ["hf-plain", "hf-assisted", "hf-best", *METHODS[3:]]
    assert not any(key.startswith("plain|") for key in rows)
    assert all(math.isclose(e["vs_hf-best"], e["tokens_per_s"] / table["rows"][2]["tokens_per_s"])
               for e in table["rows"])
    assert sorted(e["config"] for e in table["tuning"]) == configs
    # the selector is what the benchmark is for: it cannot be left out
    assert bench.main([*arguments[:-1], "specinfer selector", "--output", str(output.with_name("x.json"))]) == 2


def test_run_hf_sets_the_assistants_options_for_one_call_and_restores_them(tmp_path):
    from verispec.models import Sampling, load_pair

    target, draft = save_tiny_pair(tmp_path / "pair")
    pair = load_pair(target, draft)
    bench = _bench()
    config = pair.draft.generation_config
    before = {name: getattr(config, name, None) for name in bench.real_decoding.ASSISTANT_OPTIONS}
    seen = {}
    original = pair.target.generate

    def spying(*args, **kwargs):
        seen.update({name: getattr(config, name) for name in before})
        return original(*args, **kwargs)

    pair.target.generate = spying
    bench.real_decoding.run_hf(pair, "a b c d", "hf-assisted", Sampling(1.0, 5, None), 4, 0,
                               assistant={"num_assistant_tokens": 3, "assistant_confidence_threshold": 0.0})
    assert seen["num_assistant_tokens"] == 3 and seen["assistant_confidence_threshold"] == 0.0
    assert {name: getattr(config, name, None) for name in before} == before
    with pytest.raises(bench.VerispecError, match="unknown assisted-generation option 'k'"):
        bench.real_decoding.run_hf(pair, "a b", "hf-assisted", Sampling(1.0, 5, None), 2, 0, assistant={"k": 3})
