"""benchmarks/bench_latency_model.py and bench_same_algorithm.py on a tiny saved pair (seconds; issue 66, items 2 and
3): every static action decoded and judged against each latency model, the same algorithm in verispec and in
transformers, block times taken apart by the forward clock. The summaries recompute from the rows; a latency model
of another pair is refused on one line. No timing is asserted."""

from __future__ import annotations

import json
import math

import pytest

from tests.support.scripts import load_script
from tests.support.tiny_selector import tiny_selector

pytest.importorskip("torch")
pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """The tiny pair's selector (``tests.support.tiny_selector``) and a latency model measured on that pair."""
    from verispec.cli import main

    made = tiny_selector(tmp_path_factory.mktemp("latency_model"), max_new_tokens=4)
    latency = made["folder"] / "latency.json"
    assert main(["latency", "--target", made["target"], "--draft", made["draft"], "--sizes", "1,2,3,4,5,6",
                 "--draft-sizes", "1,2", "--repeats", "1", "--context-length", "8", "--threads", "1",
                 "--out", str(latency)]) == 0
    return {**made, "latency": latency}


def test_every_action_is_judged_against_each_model_and_the_summary_recomputes(setup):
    from verispec.latency import LatencyModel
    from verispec.selector.actions import action_times
    from verispec.selector.selector import Selector

    bench = load_script("benchmarks/bench_latency_model.py", "bench_latency_model_under_test")
    output = setup["folder"] / "rows.json"
    assert bench.main([*setup["arguments"], "--latency", str(setup["latency"]), "--output", str(output)]) == 0
    rows = {row["key"]: row for row in json.loads(output.read_text())["rows"]}
    summary = json.loads(output.with_suffix(".summary.json").read_text())
    selector = Selector.load(setup["folder"] / "specinfer.pt")
    predicted = action_times(selector.grid, LatencyModel.load(setup["latency"]))
    names = [a.name for a in selector.grid.actions]
    assert [e["action"] for e in summary["rows"]] == names
    for entry, ms in zip(summary["rows"], predicted):
        cells = [row for key, row in rows.items() if key.split("|")[0] == entry["action"]]
        assert len(cells) == entry["prompts"] >= 2
        seconds, blocks = sum(c["decode_s"] for c in cells), sum(c["blocks"] for c in cells)
        forwards = sum(c["target_forward_s"] + c["draft_forward_s"] for c in cells)
        assert math.isclose(entry["block_ms"], 1000 * seconds / blocks)
        assert math.isclose(entry["overhead"], 1 - forwards / seconds)
        assert 0 < forwards < seconds  # the prefill's forwards are not the blocks'
        model = entry["models"]["latency"]
        assert math.isclose(model["block_ms"], ms) and math.isclose(model["time_ratio"], entry["block_ms"] / ms)
        assert math.isclose(model["rate_ratio"], entry["tokens_per_s"] / (entry["label_tokens_per_block"] / ms * 1e3))
    within = sum(abs(e["models"]["latency"]["time_ratio"] - 1) <= 0.05 for e in summary["rows"])
    assert summary["models"]["latency"]["time"]["within"] == within


def test_a_latency_model_of_another_pair_is_refused_before_any_decoding(setup, tmp_path, capsys):
    bench = load_script("benchmarks/bench_latency_model.py", "bench_latency_model_under_test")
    other = tmp_path / "other.json"
    data = json.loads(setup["latency"].read_text())
    data["source"] = "measured on qwen-coder (cpu, dynamic cache, context 200, median of 9)"
    other.write_text(json.dumps(data))
    output = tmp_path / "rows.json"
    assert bench.main([*setup["arguments"], "--latency", str(other), "--output", str(output)]) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and "measured on the pair 'qwen-coder'" in error[0] and not output.exists()


def test_the_same_algorithm_takes_each_block_apart_for_both_codes(setup, tmp_path, monkeypatch):
    bench = load_script("benchmarks/bench_same_algorithm.py", "bench_same_algorithm_under_test")
    import verispec.models.pair as pair_module

    loaded = pair_module.load_pair
    monkeypatch.setattr("verispec.models.load_pair",
                        lambda name, **kw: loaded(setup["target"], setup["draft"], **kw))
    output = tmp_path / "rows.json"
    assert bench.main(["--prompts", str(setup["prompts"]), "--max-prompts", "2", "--ks", "1,2",
                       "--max-new-tokens", "5", "--threads", "1", "--warmup", "0", "--output", str(output)]) == 0
    rows = {row["key"]: row for row in json.loads(output.read_text())["rows"]}
    assert len(rows) == 2 * 2 * 2
    table = json.loads(output.with_suffix(".summary.json").read_text())["rows"]
    assert [e["k"] for e in table] == [1, 2]
    for entry in table:
        for method in ("verispec", "hf"):
            cells = [r for key, r in rows.items() if key.startswith(f"{method}|{entry['k']}|")]
            # every figure is of the steady state, after each generation's first block (ForwardClock.steady)
            seconds = sum(c["steady_s"] for c in cells)
            assert math.isclose(entry[method]["tokens_per_s"], sum(c["steady_tokens"] for c in cells) / seconds)
            assert math.isclose(entry[method]["rest_share"], 1 - sum(c["steady_forward_s"] for c in cells) / seconds)
            assert entry[method]["blocks"] == sum(c["steady_blocks"] for c in cells)
            assert all(c["steady_tokens"] < c["new_tokens"] and c["steady_blocks"] < c["blocks"] for c in cells)
        assert math.isclose(entry["ratio"], entry["verispec"]["tokens_per_s"] / entry["hf"]["tokens_per_s"])
        # blocks a second, verispec's over transformers': their ms a block the other way round
        assert math.isclose(entry["block_rate_ratio"], entry["hf"]["block_ms"] / entry["verispec"]["block_ms"])
        low, high = entry["block_rate_ratio_ci"]
        assert low <= entry["block_rate_ratio"] <= high
        assert entry["verispec"]["blocks"] >= 1 and entry["hf"]["blocks"] >= 1
        mine = [r for key, r in rows.items() if key.startswith(f"verispec|{entry['k']}|")]
        # a chain of K drafts: K draft forwards a block at most (the first block's first is the prefill's model)
        assert all(c["draft_calls"] <= entry["k"] * c["blocks"] for c in mine)
