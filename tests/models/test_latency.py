"""The latency model (DDTE's T(a) = sum t_q + t_p(tree size)) and the throughput it gives to sweeps."""

from __future__ import annotations

import json

import pytest

from verispec.cli import main
from verispec.latency import LatencyError, LatencyModel
from verispec.simulator import parse_tree
from verispec.study.grid import SweepGrid
from verispec.study.sweep import run_sweep
from verispec.study.tables import read_table


@pytest.mark.parametrize("spec,depth,nodes", [("chain:3", 3, 4), ("iid:2,3", 3, 7), ("delayed:4,3,5", 8, 24),
                                              ("branch:2,2", 2, 7)])
def test_a_block_costs_one_draft_step_per_depth_and_one_target_forward(spec, depth, nodes):
    drafter = parse_tree(spec)
    assert (drafter.depth, drafter.max_nodes) == (depth, nodes)
    assert LatencyModel.from_ratio(4.0).drafter_time(drafter) == depth + 4
    # each node beyond the first adds 10% of t_p
    assert LatencyModel.from_ratio(4.0, 0.1).drafter_time(drafter) == pytest.approx(depth + 4 * (1 + 0.1 * (nodes - 1)))
    assert LatencyModel.from_ratio(4.0).throughput(3.0, drafter) == pytest.approx(3.0 / (depth + 4))
    assert LatencyModel.from_ratio(4.0).plain_throughput() == 0.25


def test_measured_target_times_are_interpolated_and_extrapolated_linearly():
    model = LatencyModel(2.0, (1, 4, 16), (10.0, 16.0, 40.0), "ms")
    assert [model.target_time(n) for n in (1, 2, 4, 8, 16, 32)] == [10.0, 12.0, 16.0, 24.0, 40.0, 72.0]
    flat_then_down = LatencyModel(1.0, (1, 2), (5.0, 4.0))
    assert flat_then_down.target_time(100) == 4.0  # never below the smallest time measured
    assert LatencyModel.from_dict(json.loads(json.dumps(model.as_dict()))) == model


@pytest.mark.parametrize("spec,widths", [("chain:3", (1, 1, 1)), ("iid:2,3", (1, 2, 2)),
                                         ("delayed:4,3,5", (1, 1, 1, 1, 4, 4, 4, 4)), ("delayed:3,2,0", (1, 1)),
                                         ("branch:2,3", (1, 2)), ("branch-iid:2,3,1", (1, 2, 6)),
                                         ("hub-tree:3", (1, 2, 4)), ("greedy-tree:3,2", (1, 3)),
                                         ("dyspec:4", (1, 1, 1, 1)), ("chain:0", ())])
def test_a_drafter_states_how_many_tokens_each_draft_forward_feeds(spec, widths):
    """Forward j feeds the nodes at depth j (the leaves never): a trunk feeds one, K paths K (written out by hand
    from each drafter's definition)."""
    assert parse_tree(spec).draft_widths == widths


def test_a_model_measured_at_several_draft_widths_prices_each_forward_at_its_width():
    model = LatencyModel(1.0, (1,), (4.0,), "ms", draft_sizes=(1, 2, 4), draft_times=(1.0, 1.8, 2.5))
    assert [model.draft_time(w) for w in (1, 2, 3, 4, 8)] == pytest.approx([1.0, 1.8, 2.15, 2.5, 3.9], abs=1e-12)
    # delayed:4,3,5: four forwards of one token (the root and the trunk), then four of the K = 4 paths
    assert model.drafter_time(parse_tree("delayed:4,3,5")) == pytest.approx(4 * 1.0 + 4 * 2.5 + 4.0, abs=1e-12)
    assert model.drafter_time(parse_tree("iid:2,3")) == pytest.approx(1.0 + 2 * 1.8 + 4.0, abs=1e-12)
    assert model.block_time(3, 1) == 7.0  # no widths: Eq. 11
    assert LatencyModel.from_dict(json.loads(json.dumps(model.as_dict()))) == model
    # a file written before widths were measured is Eq. 11: every forward costs t_q
    flat = LatencyModel.from_dict({"draft_step": 2.0, "target_sizes": [1], "target_times": [5.0]})
    assert flat.flat_draft and flat.drafter_time(parse_tree("delayed:4,3,5")) == 8 * 2.0 + 5.0
    assert "draft_sizes" not in flat.as_dict() and not model.flat_draft


@pytest.mark.parametrize("make,message", [
    (lambda: LatencyModel(1.0, (1,), (2.0,), draft_sizes=(2, 4), draft_times=(1.0, 2.0)), "start at width 1"),
    (lambda: LatencyModel(1.0, (1,), (2.0,), draft_sizes=(1, 2), draft_times=(1.5, 2.0)), "start at width 1"),
    (lambda: LatencyModel(1.0, (1,), (2.0,), draft_sizes=(1, 2), draft_times=(1.0,)), "t_q\\(w\\) needs one time"),
    (lambda: LatencyModel(1.0, (1,), (2.0,), draft_sizes=(1, 2)), "t_q\\(w\\) needs one time"),  # no silent flat
    (lambda: LatencyModel(1.0, (1,), (2.0,), draft_sizes=(1, 1), draft_times=(1.0, 1.0)), "draft widths"),
    (lambda: LatencyModel(1.0, (1,), (2.0,), draft_sizes=(1, 2), draft_times=(1.0, -1.0)), "t_q\\(w\\)"),
    (lambda: LatencyModel.from_dict({"draft_step": 1, "target_sizes": [1], "target_times": [2],
                                     "draft_sizes": [1, 2]}), "not a latency model"),
    (lambda: LatencyModel.from_ratio(2).draft_time(0), "at least one token"),
    (lambda: LatencyModel.from_ratio(2).block_time(3, 4, (1, 2)), "needs 3 widths"),
])
def test_bad_draft_widths_are_refused(make, message):
    with pytest.raises(LatencyError, match=message):
        make()


@pytest.mark.parametrize("make,message", [
    (lambda: LatencyModel.from_ratio(0), "cost ratio"),
    (lambda: LatencyModel.from_ratio(2, -1), "per-node"),
    (lambda: LatencyModel(1.0, (4, 2), (1.0, 2.0)), "increasing"),
    (lambda: LatencyModel(1.0, (1, 2), (1.0,)), "t_p needs one time per tree size"),
    (lambda: LatencyModel(float("nan"), (1,), (1.0,)), "draft step"),
    (lambda: LatencyModel.from_dict({"draft_step": 1}), "not a latency model"),
    (lambda: LatencyModel.from_ratio(2).target_time(0), "at least one node"),
])
def test_bad_latency_models_are_refused(make, message):
    with pytest.raises(LatencyError, match=message):
        make()


def test_sweep_rows_carry_throughput_and_are_keyed_on_the_latency_model(tmp_path):
    base = dict(families=("markov",), vocab_sizes=(3,), trees=("chain:3", "iid:2,3"), verifiers=("specinfer",))
    output = tmp_path / "t.csv"
    cheap = run_sweep(SweepGrid(**base), output, backend="serial", progress=False)
    for row in cheap:
        assert row["throughput"] == pytest.approx(row["block_efficiency"] / (3 + 4), abs=1e-12)
        assert row["speedup"] == pytest.approx(4 * row["throughput"], abs=1e-12)
    measured = LatencyModel(1.0, (1, 4, 8), (2.0, 2.5, 3.0), "ms")
    priced = run_sweep(SweepGrid(**base, latency=measured), output, backend="serial", progress=False)
    # other latency, other cells: nothing reused; the store keeps both sweeps, the table shows this one
    assert len(json.loads(output.with_name(output.name + ".cells.json").read_text())["rows"]) == 4
    assert len(read_table(output)) == 2
    by_tree = {row["tree"]: row for row in priced}
    assert by_tree["chain:3"]["block_time"] == 3 + 2.5 and by_tree["iid:2,3"]["block_time"] == 3 + 2.875


def test_the_command_line_prices_by_ratio_or_by_a_measured_file(tmp_path, capsys):
    path = tmp_path / "latency.json"
    path.write_text(json.dumps(LatencyModel(1.0, (1, 8), (3.0, 3.0), "ms").as_dict()))
    for options, time_ in [(["--cost-ratio", "2"], 5.0), (["--latency", str(path)], 6.0)]:
        output = tmp_path / f"{time_}.csv"
        assert main(["sweep", "--trees", "chain:3", "--verifiers", "naive", "--backend", "serial", "--out",
                     str(output), *options]) == 0
        (row,) = read_table(output)
        assert row["block_time"] == time_
    assert main(["sweep", "--cost-ratio", "2", "--latency", str(path), "--out", str(tmp_path / "x.csv")]) == 2
    assert "not both" in capsys.readouterr().err


def test_latency_is_measured_on_a_pair(tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from tests.support.tiny_models import tiny_pair
    from verispec.models.latency import measure_latency

    model = measure_latency(tiny_pair(0), context_length=8, sizes=(1, 4), repeats=2, draft_sizes=(3, 2))
    assert model.unit == "ms" and model.target_sizes == (1, 4) and model.draft_step > 0
    assert all(time_ > 0 for time_ in model.target_times)
    assert model.draft_sizes == (1, 2, 3) and model.draft_times[0] == model.draft_step
