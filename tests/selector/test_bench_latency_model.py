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
    beyond = 0
    for entry in summary["rows"]:
        low, high = entry["block_ms_ci"]
        assert low <= entry["block_ms"] <= high
        ms = entry["models"]["latency"]["block_ms"]
        beyond += low / ms > 1.05 or high / ms < 0.95
    assert summary["models"]["latency"]["time"]["beyond_noise"] == beyond
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


def _with_rest(draft, target, blocks, per_block_ms, per_node_ms):
    """A row whose rest of a block is exactly per_block + per_node n over its blocks' target widths n."""
    row = _hand_row(draft, target, 0.0, blocks)
    rest_ms = per_block_ms * blocks + per_node_ms * sum(w for w, _ in target if w is not None)
    row["decode_s"] = row["draft_forward_s"] + row["target_forward_s"] + rest_ms / 1000
    return row


def test_the_model_fitted_to_decodings_forwards_reads_medians_by_width_and_a_rest_that_grows_with_the_tree():
    from verispec.latency import LatencyModel

    bench = load_script("benchmarks/bench_latency_model.py", "bench_latency_model_under_test")
    setting = "T=0.7 top-k=20 top-p=0.8"
    donor = LatencyModel(1.0, (1, 2), (3.0, 4.0), "ms").with_tree_sizes(setting, {"chain:1": [[1, 2, [1]]]}, "hand")
    # draft widths: 1 at 0.050, 0.052, 0.060 s (median 52 ms), 2 at 0.070 x 3, 3 only twice (too few: dropped);
    # target widths: 1 at 0.180 x 3, 3 at 0.300, 0.310, 0.400 (median 310 ms); the rest of a block 5 + 2 n ms
    rows = [_with_rest([[1, 0.050], [2, 0.070], [3, 0.5]], [[1, 0.180], [3, 0.300]], 2, 5.0, 2.0),
            _with_rest([[1, 0.052], [2, 0.070], [3, 0.5]], [[1, 0.180], [1, 0.180], [3, 0.310]], 3, 5.0, 2.0),
            _with_rest([[1, 0.060], [2, 0.070], [None, 9.0]], [[1, 0.180], [3, 0.400]], 2, 5.0, 2.0)]
    model = bench.fit_in_decoding(rows, donor, "tiny", "small-batch", 2, 3)
    assert model.draft_sizes == (1, 2) and model.draft_times == pytest.approx((52.0, 70.0), abs=1e-9)
    assert model.draft_step == pytest.approx(52.0, abs=1e-9)
    assert model.target_sizes == (1, 3)
    assert model.target_times == pytest.approx((180 + 5 + 2 * 1, 310 + 5 + 2 * 3), abs=1e-6)
    assert model.tree_sizes == donor.tree_sizes and model.source.startswith("measured on tiny (cpu, in decoding")
    # a block of chain:1 at the donor's sizes: one draft forward of 1 token and the target's of 2 nodes, interpolated
    assert model.for_setting(setting).block_time(1, 2, (1,)) == pytest.approx(52 + (187 + 321) / 2, abs=1e-6)
    # negative control: without one-token draft forwards there is no t_q to read
    with pytest.raises(bench.VerispecError, match="draft forwards of one token"):
        bench.fit_in_decoding([_hand_row([[2, 0.07]] * 3, [[1, 0.18]] * 3, 1.0, 3)], donor, "tiny", "torch", 1, 1)
    with pytest.raises(bench.VerispecError, match="carries its forwards"):
        bench.fit_in_decoding([{"decode_s": 1.0, "blocks": 1}], donor, "tiny", "torch", 1, 1)


def test_the_rest_of_a_block_is_a_least_squares_line_in_the_trees_nodes():
    bench = load_script("benchmarks/bench_latency_model.py", "bench_latency_model_under_test")
    # exact data: 3 + 4 n ms recovered whatever the forwards
    rows = [_with_rest([[1, 0.06]], [[n, 0.2]] * blocks, blocks, 3.0, 4.0) for n, blocks in ((1, 5), (4, 2), (7, 3))]
    assert bench.rest_of_block(rows) == pytest.approx((3.0, 4.0), abs=1e-9)
    # noisy data: the least-squares solution of the normal equations, by Cramer's rule
    rests = (20.0, 25.0, 50.0)  # ms, rows of (blocks, widths) (2, 2), (1, 5), (3, 9)
    noisy = [_hand_row([], [[w // b, 0.1]] * b, 0.1 * b + r / 1000, b) for (b, w), r in zip(((2, 2), (1, 5), (3, 9)),
                                                                                              rests)]
    blocks, widths = (2, 1, 3), (2, 5, 9)
    sbb, sbw, sww = (sum(x * y for x, y in zip(u, v)) for u, v in ((blocks, blocks), (blocks, widths),
                                                                   (widths, widths)))
    sby, swy = sum(b * r for b, r in zip(blocks, rests)), sum(w * r for w, r in zip(widths, rests))
    det = sbb * sww - sbw * sbw
    expected = ((sby * sww - sbw * swy) / det, (sbb * swy - sbw * sby) / det)
    assert min(expected) > 0 and bench.rest_of_block(noisy) == pytest.approx(expected, rel=1e-9)
    # one mean width in every row: no slope to read, the mean rest a block
    flat = [_with_rest([], [[2, 0.1]] * b, b, 6.0, 1.0) for b in (1, 2, 4)]
    assert bench.rest_of_block(flat) == pytest.approx((8.0, 0.0), abs=1e-9)
    # a rest that falls with the tree is held at slope 0 (never a negative cost a node): a on blocks alone
    falling = [_hand_row([], [[1, 0.1]], 0.1 + 0.050, 1), _hand_row([], [[9, 0.1]], 0.1 + 0.010, 1)]
    assert bench.rest_of_block(falling) == pytest.approx((30.0, 0.0), abs=1e-9)
    # negative control: the constant rest of before (total rest over blocks) misprices both ends of the exact rows
    constant = sum(r["decode_s"] - r["draft_forward_s"] - r["target_forward_s"] for r in rows) * 1000 / 10
    assert abs(constant - (3 + 4 * 1)) > 5 and abs(constant - (3 + 4 * 7)) > 5


def test_the_fitting_prompts_are_spread_among_the_held_out_ones():
    bench = load_script("benchmarks/bench_latency_model.py", "bench_latency_model_under_test")
    held, fit = [f"h{i}" for i in range(8)], ["f0", "f1", "f2", "f3"]
    # held-out prompt i at (i + 1/2) / 8 of the run, fitting prompt j at (j + 1/2) / 4
    assert bench.cell_order(held, fit) == ["h0", "f0", "h1", "h2", "f1", "h3", "h4", "f2", "h5", "h6", "f3", "h7"]
    assert bench.cell_order(held, []) == held and bench.cell_order(["a", "b"], ["c"]) == ["a", "c", "b"]


def test_the_block_time_interval_is_a_bootstrap_over_prompts_and_judges_a_miss_beyond_it():
    bench = load_script("benchmarks/bench_latency_model.py", "bench_latency_model_under_test")
    rows = {"p0": {"decode_s": 1.0, "blocks": 10}, "p1": {"decode_s": 3.0, "blocks": 10}}
    low, high = bench.block_interval(rows)
    # the resamples take p0 twice (100 ms), each once (200) or p1 twice (300), each with probability 1/4, 1/2, 1/4
    assert (low, high) == (pytest.approx(100.0), pytest.approx(300.0))
    assert bench.block_interval({"p0": rows["p0"]}) is None
    assert not bench._beyond([100.0, 300.0], 250.0, 0.05)  # the band 237.5-262.5 meets the interval
    assert bench._beyond([100.0, 200.0], 250.0, 0.05) and bench._beyond([270.0, 300.0], 250.0, 0.05)
    assert not bench._beyond([100.0, 238.0], 250.0, 0.05)


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


def test_the_held_out_plans_price_each_setting_at_its_own_tree_sizes(setup, tmp_path):
    """A selector trained under a latency model with several settings' tree sizes (what the fitted model carries)
    gets its static action priced at the dataset's setting's sizes; unbound, such a model prices nothing."""
    from verispec.cli import main
    from verispec.latency import LatencyError, LatencyModel
    from verispec.selector.actions import action_times
    from verispec.selector.dataset_file import Dataset
    from verispec.selector.roots import sampling_text
    from verispec.selector.selector import Selector

    decoding = load_script("experiments/selector_decoding.py", "selector_decoding_under_test")
    dataset = Dataset.load(setup["dataset"])
    grid = Selector.load(setup["folder"] / "specinfer.pt").grid
    # the dataset's setting: every tree at its most nodes; another setting: every tree at one node a block
    own = {a.drafter().spec: [[1, a.drafter().max_nodes, list(a.drafter().draft_widths)]] for a in grid.actions}
    base = LatencyModel.load(setup["latency"]).with_tree_sizes(sampling_text(dataset.samplings[0]), own, "hand")
    other = {spec: [[1, 1 + len(sizes[0][2]), [1] * len(sizes[0][2])]] for spec, sizes in own.items()}
    both = base.with_tree_sizes("T=0.5 top-k=3 top-p=1", other, "hand")
    plans = {}
    for name, model in (("one", base), ("both", both)):
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(model.as_dict()))
        selector = tmp_path / f"{name}.pt"
        assert main(["selector", "train", "--dataset", str(setup["dataset"]), "--verifiers", "specinfer",
                     "--epochs", "2", "--latency", str(path), "--out", str(selector)]) == 0
        plans[name] = decoding.held_out_plans(str(setup["dataset"]), [str(selector)], [str(setup["prompts"])])
    assert [a.name for a in plans["both"]["plans"]["both static"]["actions"]] == \
        [a.name for a in plans["one"]["plans"]["one static"]["actions"]]
    # negative control: the two-setting model unbound names no setting's trees
    with pytest.raises(LatencyError, match="say which sampling setting"):
        action_times(dataset.grid, both)


def test_the_measured_model_carries_the_run_that_timed_it(setup):
    """Issue 78, item 3: the file names its command, its date and machine, and how long the timing took, so that a
    verdict can say whether verification was priced in the same run (verispec.selector.verification_cost)."""
    import os

    from verispec.latency import LatencyModel
    from verispec.selector.verification_cost import run_span

    data = json.loads(setup["latency"].read_text())
    measured = data["measured"]
    assert measured["command"].startswith("verispec latency --target ") and "--threads 1" in measured["command"]
    assert measured["machine"]["cores"] == os.cpu_count() and measured["machine"]["threads"] == 1
    assert measured["machine"]["device"] == "cpu" and measured["seconds"] >= 0
    assert LatencyModel.load(setup["latency"]).measured == measured
    span = run_span(measured)
    assert span["start"] == measured["date"] and span["start"] <= span["end"]
