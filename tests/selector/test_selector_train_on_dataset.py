"""The library behind ``verispec selector train`` and ``evaluate``, called directly (issue 55):
``verispec.selector.train.train_on_dataset`` (the verifiers' sub-grid, the latency features, the split and record a
selector file carries, the held-out actions, its refusals word for word) and
``verispec.selector.evaluate.evaluate_held_out`` (one split for every selector, --compare's names)."""

from __future__ import annotations

import pytest

from verispec.cli import main
from verispec.errors import VerispecError

pytest.importorskip("torch")

from verispec.latency import LatencyModel
from verispec.selector.dataset_file import Dataset
from verispec.selector.evaluate import evaluate_held_out
from verispec.selector.train import train_on_dataset


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    path = tmp_path_factory.mktemp("train_on_dataset") / "d.npz"
    assert main(["selector", "dataset", "--family", "context-free", "--vocab", "2", "--seeds", "0-7", "--ks", "1-2",
                 "--l1s", "0-1", "--l2s", "0-1", "--verifiers", "specinfer,traversal-iid", "--backend", "serial",
                 "--out", str(path)]) == 0
    return Dataset.load(path)


def test_train_on_dataset_trains_on_the_verifiers_sub_grid(dataset):
    trained = train_on_dataset(dataset, dataset_name="d.npz", verifiers="traversal-iid", kind="lookup", epochs=1)
    assert trained.grid.verifiers == ("traversal-iid",)
    assert trained.grid.actions == tuple(action for action in dataset.grid.actions
                                         if action.verifier == "traversal-iid")
    assert trained.train_roots + trained.test_roots == len(dataset) and trained.test_roots > 0
    assert list(trained.summary) == ["kind", "verifiers", "actions", "train_roots", "test_roots", "latency", "seconds",
                                     "test_actions"]
    assert trained.summary["verifiers"] == ["traversal-iid"] and trained.summary["actions"] == len(trained.grid)
    assert set(trained.summary["test_actions"]) <= {action.name for action in trained.grid.actions}
    meta = trained.selector.metadata
    assert meta["dataset"] == "d.npz" and meta["test_fraction"] == 0.25 and meta["split_seed"] == 0
    assert trained.summary["latency"] == LatencyModel.from_dict(dataset.metadata["latency"]).as_dict()


def test_a_latency_model_replaces_the_recorded_one(dataset):
    latency = LatencyModel.from_ratio(5.0)
    assert latency != LatencyModel.from_dict(dataset.metadata["latency"])
    trained = train_on_dataset(dataset, dataset_name="d.npz", latency=latency, kind="lookup", epochs=1)
    assert trained.summary["latency"] == latency.as_dict()
    assert trained.grid.verifiers == dataset.grid.verifiers  # all of the dataset's by default


@pytest.mark.parametrize("options,message", [
    ({"test_fraction": 1.0}, "--test-fraction must lie in (0, 1), got 1"),
    ({"verifiers": "gbv"}, "--verifiers 'gbv': the dataset labels the verifiers specinfer, traversal-iid only"),
    ({"hidden": "all"}, "--hidden all: 'd.npz' holds the hidden states none (build it with 'selector dataset "
                        "--hidden')"),
    ({"projection": 16}, "--projection 16 sizes the hidden-state projections of the mlp selector: give --hidden too "
                         "(and --kind mlp), or leave --projection out"),
])
def test_train_on_dataset_refuses_as_the_command_does(dataset, options, message):
    with pytest.raises(VerispecError) as caught:
        train_on_dataset(dataset, dataset_name="d.npz", kind="lookup", epochs=1, **options)
    assert str(caught.value) == message


def test_evaluate_held_out_takes_one_split_and_two_names_to_compare(dataset):
    selectors = {name: train_on_dataset(dataset, dataset_name="d.npz", verifiers=name, kind="lookup").selector
                 for name in ("specinfer", "traversal-iid")}
    report = evaluate_held_out(dataset, selectors, compare="specinfer, traversal-iid", resamples=100)
    assert list(report["selectors"]) == ["specinfer", "traversal-iid"] and "comparison" in report
    assert report["roots"]["train"] + report["roots"]["test"] == len(dataset)
    with pytest.raises(VerispecError, match="--compare 'specinfer,nope': give two selector names among specinfer, "
                                            "traversal-iid"):
        evaluate_held_out(dataset, selectors, compare="specinfer,nope", resamples=100)
    other = train_on_dataset(dataset, dataset_name="d.npz", split_seed=1, kind="lookup").selector
    with pytest.raises(VerispecError, match="selector 'other' was trained on another split than 'specinfer'"):
        evaluate_held_out(dataset, {"specinfer": selectors["specinfer"], "other": other}, resamples=100)
