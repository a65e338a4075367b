"""Datasets of the same roots labelled for different rules, joined side by side (verispec.selector.join; issue 56:
psbv and globalres labelled at the committed builds' roots in files of their own): a dataset cut by rule into two
files, rows shuffled, joins back to itself; the study reads the two files as it reads the whole; ``selector dataset
--traces-of`` labels a rule at another build's roots with the same sampled trees, never writing that build's traces;
and what cannot be joined is refused on one line."""

from __future__ import annotations

import numpy as np
import pytest

from verispec.selector.actions import ActionGrid
from verispec.selector.dataset_file import Dataset, DatasetError
from verispec.selector.join import FEATURE_RTOL, join_datasets

pytest.importorskip("torch")
pytest.importorskip("matplotlib")

from tests.selector.test_pair_selector_study import T07, pair_dataset

ARRAYS = ("efficiency", "stderr", "lower", "upper")


def _rules_only(data: Dataset, rules, rows=None) -> Dataset:
    """``data``'s columns of ``rules`` (a grid of those rules alone), its rows in the order ``rows``."""
    rows = np.arange(len(data)) if rows is None else np.asarray(rows)
    grid = ActionGrid(data.grid.ks, data.grid.l1s, data.grid.l2s, tuple(rules))
    columns = np.array([data.grid.index(action) for action in grid.actions])
    kept = {name: getattr(data, name)[rows] for name in ("features", "group", "setting", "context_length",
                                                         "label_method", "key")}
    labels = {name: getattr(data, name)[rows][:, columns] for name in ARRAYS}
    return Dataset(**kept, **labels, per_sample=data.per_sample[rows][:, :, columns],
                   metadata={**data.metadata, "grid": grid.as_dict(), "actions": grid.action_names()})


def _one_line(error) -> str:
    text = str(error.value)
    assert "\n" not in text and "Traceback" not in text
    return text


def test_a_dataset_cut_by_rule_joins_back_to_itself():
    whole = pair_dataset(T07, seed=4)
    shuffled = np.random.default_rng(0).permutation(len(whole))
    first = _rules_only(whole, ("specinfer",))
    second = _rules_only(whole, ("traversal", "traversal-iid"), rows=shuffled)
    joined = join_datasets([("a.npz", first), ("b.npz", second)])
    assert [a.name for a in joined.grid.actions] == [a.name for a in whole.grid.actions]
    for name in (*ARRAYS, "per_sample", "features"):
        np.testing.assert_array_equal(getattr(joined, name), getattr(whole, name))
    np.testing.assert_array_equal(joined.key, whole.key)
    assert [part["label"] for part in joined.metadata["joined"]] == ["a.npz", "b.npz"]
    assert join_datasets([("a.npz", whole)]) is whole


def test_the_study_reads_two_files_of_one_setting_as_the_whole():
    """The same split, training and intervals: the tables of the joined files are the whole file's, the setting's
    source naming both."""
    from verispec.selector.regimes import regime_models
    from verispec.selector.study import run_study

    whole = pair_dataset(T07, seed=5)
    parts = [("a.npz", _rules_only(whole, ("specinfer", "traversal"))),
             ("b.npz", _rules_only(whole, ("traversal-iid",), rows=np.arange(len(whole))[::-1]))]
    options = {"seed": 3, "epochs": 2, "test_fraction": 0.25, "resamples": 100}
    regimes = {"gpu-large": regime_models(None)["gpu-large"]}
    alone, joined = run_study([("w.npz", whole)], regimes, **options), run_study(parts, regimes, **options)
    assert joined["tables"] == alone["tables"]
    assert [record["dataset"] for record in joined["settings"].values()] == ["a.npz + b.npz"]


def test_what_cannot_be_joined_is_refused_on_one_line():
    whole = pair_dataset(T07, seed=6)
    first, second = _rules_only(whole, ("specinfer",)), _rules_only(whole, ("traversal",))
    cases = {
        "labelled in both": [("a", first), ("b", _rules_only(whole, ("specinfer", "traversal-iid")))],
        "the same roots": [("a", first), ("b", _rules_only(whole, ("traversal",), rows=np.arange(len(whole) - 1)))],
        "with samples": [("a", first), ("b", Dataset(**{n: getattr(second, n) for n in (
            *ARRAYS, "features", "group", "setting", "context_length", "label_method", "key")},
            per_sample=second.per_sample, metadata={**second.metadata, "samples": 99}))],
        "one tree grid": [("a", first), ("b", _rules_only(pair_dataset(T07, seed=6, ks=(1, 2, 3)), ("traversal",)))],
    }
    moved = _rules_only(whole, ("traversal",))
    moved.features[3, 0] += 10 * FEATURE_RTOL * max(1.0, abs(moved.features[3, 0]))
    cases["the feature"] = [("a", first), ("b", moved)]
    regrouped = _rules_only(whole, ("traversal",))
    regrouped.group[0] = "HumanEval/99"
    cases["the group"] = [("a", first), ("b", regrouped)]
    for expected, datasets in cases.items():
        with pytest.raises(DatasetError) as error:
            join_datasets(datasets)
        assert expected in _one_line(error), (expected, str(error.value))
    # within the tolerance: joined, the first file's features kept
    near = _rules_only(whole, ("traversal",))
    near.features[3, 0] += 0.1 * FEATURE_RTOL
    np.testing.assert_array_equal(join_datasets([("a", first), ("b", near)]).features, whole.features)


def test_the_command_labels_another_rule_at_a_builds_roots(tmp_path, capsys):
    """``selector dataset --traces-of BUILD --verifiers spectr`` on a tiny pair: BUILD's traces read, not written, no
    trace store of its own; joined with BUILD it equals one build of both rules (the same roots and sampled trees);
    without BUILD's traces, with --relabel or with --family: refused on one line (exit 2)."""
    pytest.importorskip("transformers")
    from tests.support.tiny_models import tiny_dataset_command
    from verispec.cli import main

    command = tiny_dataset_command(tmp_path, "--threads", "1")
    base, side, both = tmp_path / "base.npz", tmp_path / "side.npz", tmp_path / "both.npz"
    assert main(command + ["--out", str(base)]) == 0
    assert main([part if part != "specinfer" else "specinfer,spectr" for part in command] + ["--out", str(both)]) == 0
    traces = (tmp_path / "base.npz.traces.json").read_bytes()
    spectr = [part if part != "specinfer" else "spectr" for part in command]
    assert main(spectr + ["--out", str(side), "--traces-of", str(base)]) == 0
    assert (tmp_path / "base.npz.traces.json").read_bytes() == traces
    assert not (tmp_path / "side.npz.traces.json").exists()
    joined, once = join_datasets([("base", Dataset.load(base)), ("side", Dataset.load(side))]), Dataset.load(both)
    assert [a.name for a in joined.grid.actions] == [a.name for a in once.grid.actions]
    np.testing.assert_allclose(joined.per_sample, once.per_sample[_order(once, joined)], rtol=0, atol=1e-12)
    capsys.readouterr()
    for extra, expected in ((["--traces-of", str(tmp_path / "none.npz")], "does not exist"),
                            (["--traces-of", str(base), "--relabel", "spectr"], "without --relabel")):
        assert main(spectr + ["--out", str(tmp_path / "other.npz"), *extra]) == 2
        assert expected in capsys.readouterr().err.strip().splitlines()[-1]
    assert not (tmp_path / "other.npz").exists()


def _order(data: Dataset, like: Dataset) -> np.ndarray:
    where = {key: index for index, key in enumerate(data.key.tolist())}
    return np.array([where[key] for key in like.key.tolist()])
