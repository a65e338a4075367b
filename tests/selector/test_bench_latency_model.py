"""benchmarks/bench_latency_model.py and bench_same_algorithm.py on a tiny saved pair (seconds; issue 66, items 2 and
3): every static action decoded and judged against each latency model, the same algorithm in verispec and in
transformers, block times taken apart by the forward clock. The summaries recompute from the rows; a latency model
of another pair is refused on one line. No timing is asserted."""

from __future__ import annotations

import json
import math
import statistics

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
    ratios = [e["models"]["latency"]["time_ratio"] for e in summary["rows"]]
    within = sum(abs(r - 1) <= 0.05 for r in ratios)
    assert summary["models"]["latency"]["time"]["within"] == within
    level = statistics.median(ratios)  # the run's level
    assert summary["models"]["latency"]["time"]["within_scaled"] == sum(abs(r / level - 1) <= 0.05 for r in ratios)
    mean_log = sum(math.log(r) for r in ratios) / len(ratios)
    assert math.isclose(summary["models"]["latency"]["time"]["sd_log"],
                        math.sqrt(sum((math.log(r) - mean_log) ** 2 for r in ratios) / len(ratios)))


def test_the_measuring_noise_is_the_spread_of_actions_that_draw_the_same_tree():
    from verispec.selector.actions import Action

    bench = load_script("benchmarks/bench_latency_model.py", "bench_latency_model_under_test")
    actions = [Action("specinfer", 1, 0, 2), Action("specinfer", 3, 2, 0), Action("specinfer", 2, 1, 1),
               Action("specinfer", 1, 1, 1), Action("specinfer", 4, 0, 0)]
    # chain:2 three times (K = 1 or L2 = 0), delayed:2,1,1 alone, chain:0 alone
    assert [bench.drawn_tree(a) for a in actions] == ["chain:2", "chain:2", "delayed:2,1,1", "chain:2", "chain:0"]
    table = [{"setting": "s", "action": a.name, "block_ms": ms} for a, ms in zip(actions, (100.0, 110.0, 500.0,
                                                                                           121.0, 50.0))]
    noise = bench.measuring_noise(table, actions)
    assert noise["trees"] == {"s|chain:2": {"actions": 3, "spread": pytest.approx(0.21)}}
    logs = [math.log(100), math.log(110), math.log(121)]  # equally spaced: the middle one is the mean
    assert noise["sd_log"] == pytest.approx(math.sqrt(2 * math.log(1.1) ** 2 / 2), rel=1e-12)
    assert sum(logs) / 3 == pytest.approx(math.log(110))
    # negative control: no tree drawn twice, no noise to read
    assert bench.measuring_noise(table[2:3] + table[4:], actions)["sd_log"] is None


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


def _hand_row(draft, target, decode_s, blocks):
    return {"draft_forwards": draft, "target_forwards": target, "decode_s": decode_s, "blocks": blocks,
            "draft_forward_s": sum(s for _, s in draft), "target_forward_s": sum(s for _, s in target)}


def test_the_model_fitted_to_decodings_forwards_reads_medians_by_width_and_the_rest_of_a_block():
    from verispec.latency import LatencyModel

    bench = load_script("benchmarks/bench_latency_model.py", "bench_latency_model_under_test")
    setting = "T=0.7 top-k=20 top-p=0.8"
    donor = LatencyModel(1.0, (1, 2), (3.0, 4.0), "ms").with_tree_sizes(setting, {"chain:1": [[1, 2, [1]]]}, "hand")
    # draft widths: 1 at 0.050, 0.052, 0.060 s (median 52 ms), 2 at 0.070 x 3, 3 only twice (too few: dropped);
    # target widths: 1 at 0.180 x 3, 3 at 0.300, 0.310, 0.400 (median 310 ms)
    rows = [_hand_row([[1, 0.050], [2, 0.070], [3, 0.5]], [[1, 0.180], [3, 0.300]], 3.0, 2),
            _hand_row([[1, 0.052], [2, 0.070], [3, 0.5]], [[1, 0.180], [3, 0.310]], 3.0, 2),
            _hand_row([[1, 0.060], [2, 0.070], [None, 9.0]], [[1, 0.180], [3, 0.400]], 12.0, 4)]
    model = bench.fit_in_decoding(rows, donor, "tiny", "small-batch", 2, 3)
    forwards = sum(r["draft_forward_s"] + r["target_forward_s"] for r in rows)
    rest = 1000 * (3.0 + 3.0 + 12.0 - forwards) / 8  # the rest of a block, over the 8 blocks
    assert model.draft_sizes == (1, 2) and model.draft_times == pytest.approx((52.0, 70.0), abs=1e-9)
    assert model.draft_step == pytest.approx(52.0, abs=1e-9)
    assert model.target_sizes == (1, 3) and model.target_times == pytest.approx((180 + rest, 310 + rest), abs=1e-9)
    assert model.tree_sizes == donor.tree_sizes and model.source.startswith("measured on tiny (cpu, in decoding")
    # a block of chain:1 at the donor's sizes: one draft forward of 1 token and the target's of 2 nodes, interpolated
    assert model.for_setting(setting).block_time(1, 2, (1,)) == pytest.approx(52 + (180 + 310) / 2 + rest)
    # negative control: without one-token draft forwards there is no t_q to read
    with pytest.raises(bench.VerispecError, match="draft forwards of one token"):
        bench.fit_in_decoding([_hand_row([[2, 0.07]] * 3, [[1, 0.18]] * 3, 1.0, 3)], donor, "tiny", "torch", 1, 1)
    with pytest.raises(bench.VerispecError, match="carries its forwards"):
        bench.fit_in_decoding([{"decode_s": 1.0, "blocks": 1}], donor, "tiny", "torch", 1, 1)


def test_a_model_fitted_on_training_prompts_is_judged_on_the_held_out_ones_only(setup, tmp_path):
    import numpy as np

    from verispec.latency import LatencyModel
    from verispec.selector.dataset_file import Dataset
    from verispec.selector.roots import sampling_text
    from verispec.selector.selector import Selector
    from verispec.selector.split import held_out

    bench = load_script("benchmarks/bench_latency_model.py", "bench_latency_model_under_test")
    dataset, selector = Dataset.load(setup["dataset"]), Selector.load(setup["folder"] / "specinfer.pt")
    train, test = held_out(dataset, selector)
    donor_path = tmp_path / "donor.json"
    drafter = selector.grid.actions[-1].drafter()  # sizes for one tree, at its most nodes: the others price alike
    sizes = {drafter.spec: [[1, drafter.max_nodes, list(drafter.draft_widths)]]}
    donor = LatencyModel.load(setup["latency"]).with_tree_sizes(sampling_text(dataset.samplings[0]), sizes, "hand")
    donor_path.write_text(json.dumps(donor.as_dict()))
    output, fitted = tmp_path / "rows.json", tmp_path / "fitted.json"
    arguments = [*setup["arguments"], "--latency", str(setup["latency"]), "--output", str(output),
                 "--fit-prompts", "1", "--fit-out", str(fitted), "--fit-sizes", str(donor_path)]
    assert bench.main(arguments) == 0
    by_group = {}
    for row in json.loads(output.read_text())["rows"]:
        by_group.setdefault(row["key"].split("|")[1], []).append(row)
    training = [g for g in by_group if g in set(train.group.tolist())]
    held = [g for g in by_group if g in set(test.group.tolist())]
    assert len(training) == 1 and len(held) >= 2 and len(by_group) == len(training) + len(held)
    summary = json.loads(output.with_suffix(".summary.json").read_text())
    # judged on the held-out prompts only, beside the measured model
    assert all(e["prompts"] == len(held) for e in summary["rows"])
    assert summary["models"]["fitted"]["time"]["actions"] == len(summary["rows"])
    assert summary["models"]["latency"]["time"]["actions"] == len(summary["rows"])
    # its t_q(1): the median of the training prompt's one-token draft forwards, read from the rows again
    model = LatencyModel.load(fitted)
    ones = [s for row in by_group[training[0]] for w, s in row["draft_forwards"] if w == 1]
    assert model.draft_step == pytest.approx(1000 * float(np.median(ones)), rel=1e-12)
    assert "in decoding" in model.source and model.tree_sizes == donor.tree_sizes
    # a fit without its sizes is refused on one line before any decoding
    assert bench.main([*setup["arguments"], "--latency", str(setup["latency"]), "--output", str(tmp_path / "o.json"),
                       "--fit-prompts", "1", "--fit-out", str(tmp_path / "f.json")]) == 2
