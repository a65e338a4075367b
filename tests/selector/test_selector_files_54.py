"""Issue 54, class 5: a selector file against data it was not trained for (``verispec.selector.fits``).

'selector evaluate' of a selector on a dataset of another action grid, sampling setting, vocabulary, feature set
or build of the same seeds, and 'decode --selector' on a pair of another tokenizer or hidden-state width, must be
one line (exit status 2) naming both sides and the fix. Every refusal has its negative control: with the check
taken out (monkeypatched to nothing), the same input answers with numbers (exit 0): the old behaviour the test
catches. The expectations are the datasets' own metadata (grids, settings) and a digest recomputed here by
property (row order and labels do not move it; one ulp of one feature does), not the checker's output.
"""

from __future__ import annotations

import dataclasses
import json
from types import SimpleNamespace

import numpy as np
import pytest

from verispec.cli import main
from verispec.errors import VerispecError

pytest.importorskip("torch")

from verispec.selector import fits
from verispec.selector.dataset_file import Dataset
from verispec.selector.selector import Selector

SYNTHETIC = ["selector", "dataset", "--family", "context-free", "--vocab", "2", "--seeds", "0-15", "--l1s", "0-1",
             "--l2s", "0-1", "--verifiers", "specinfer,traversal-iid", "--backend", "serial"]


def _dataset(folder, name: str, *extra: str):
    path = folder / name
    argv = [*SYNTHETIC, *extra]
    if "--ks" not in extra:
        argv += ["--ks", "1-2"]
    assert main([*argv, "--out", str(path)]) == 0
    return path


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """The selector's own dataset (K 1-2, T=1, V=2, seeds 0-15), its selector, and hostile datasets of the same
    seeds: another grid, temperature, vocabulary, build (draft divergences) and feature names."""
    folder = tmp_path_factory.mktemp("files54")
    own = _dataset(folder, "d.npz")
    assert main(["selector", "train", "--dataset", str(own), "--verifiers", "specinfer", "--epochs", "5",
                 "--out", str(folder / "s.pt")]) == 0
    paths = {"own": own, "selector": folder / "s.pt",
             "grid": _dataset(folder, "k3.npz", "--ks", "1-3"),
             "temperature": _dataset(folder, "t07.npz", "--temperatures", "0.7"),
             "settings": _dataset(folder, "t1t07.npz", "--temperatures", "1,0.7"),
             "divergence": _dataset(folder, "div.npz", "--divergences", "0.2,0.5,0.9"),
             "vocab": _dataset(folder, "v3.npz", "--ks", "1-2", "--vocab", "3")}
    swapped = folder / "feat.npz"  # another feature extractor: two columns' names swapped, shapes unchanged
    with np.load(own) as data:
        arrays = {name: data[name] for name in data.files}
    metadata = json.loads(str(arrays.pop("metadata")))
    names = metadata["feature_names"]
    first, second = names.index("kl_p_q_prev"), names.index("kl_q_p_prev")
    names[first], names[second] = names[second], names[first]
    np.savez_compressed(swapped, metadata=np.array(json.dumps(metadata, sort_keys=True)), **arrays)
    paths["features"] = swapped
    return paths


def _evaluate(dataset, selector, capsys) -> tuple[int, str, str]:
    capsys.readouterr()
    status = main(["selector", "evaluate", "--dataset", str(dataset), "--selector", str(selector), "--json",
                   "--bootstrap", "100"])
    out, err = capsys.readouterr()
    return status, out, err.strip()


def _answers_with_numbers(out: str) -> None:
    report = json.loads(out)
    table = next(iter(report["selectors"].values()))["settings"]["all"]
    assert np.isfinite(table["selector"]["throughput"]) and table["selector"]["throughput"] > 0


def _grid_text(path) -> str:
    return Dataset.load(path).grid.describe()


def _settings_text(path) -> str:
    from verispec.selector.roots import sampling_text

    return "; ".join(sampling_text(setting) for setting in Dataset.load(path).samplings)


def test_its_own_dataset_and_a_renamed_copy_answer(files, capsys, tmp_path):
    status, out, _ = _evaluate(files["own"], files["selector"], capsys)
    assert status == 0
    _answers_with_numbers(out)
    renamed = tmp_path / "renamed.npz"  # a file name is not what the selector fits
    renamed.write_bytes(files["own"].read_bytes())
    status, again, _ = _evaluate(renamed, files["selector"], capsys)
    assert status == 0 and json.loads(again) == json.loads(out)


@pytest.mark.parametrize("case", ["grid", "temperature", "settings", "features"])
def test_a_dataset_of_other_grid_sampling_or_features_is_refused(files, capsys, monkeypatch, case):
    """Named both sides: the dataset's grid or settings (read from its file here) and the selector's (from its own
    dataset), the file names, and the fix. Control: without the check it answered with numbers."""
    sides = {"grid": (_grid_text(files["grid"]), _grid_text(files["own"]).replace("traversal-iid", "").rstrip(",")),
             "temperature": (_settings_text(files["temperature"]), "sampling " + _settings_text(files["own"])),
             "settings": (_settings_text(files["settings"]), "sampling " + _settings_text(files["own"])),
             "features": ("'kl_q_p_prev' in the dataset", "'kl_p_q_prev' in the selector")}[case]
    assert sides[0] != sides[1]
    status, out, err = _evaluate(files[case], files["selector"], capsys)
    assert status == 2 and len(err.splitlines()) == 1, err
    assert all(side in err for side in sides), err
    assert files[case].name in err and files["selector"].name in err and ("train" in err or "build" in err), err
    monkeypatch.setattr(fits, "check_dataset_fits", lambda *args, **kwargs: None)  # the old evaluate
    monkeypatch.setattr(fits, "check_train_roots", lambda *args, **kwargs: None)
    status, out, _ = _evaluate(files[case], files["selector"], capsys)
    assert status == 0
    _answers_with_numbers(out)


def test_another_vocabulary_is_named(files, capsys, monkeypatch):
    status, _, err = _evaluate(files["vocab"], files["selector"], capsys)
    assert status == 2 and "vocabulary size 3" in err and "vocabulary size 2" in err and len(err.splitlines()) == 1
    monkeypatch.setattr(fits, "check_dataset_fits", lambda *args, **kwargs: None)
    status, _, err = _evaluate(files["vocab"], files["selector"], capsys)  # the old message: names neither side
    assert status == 2 and "other roots" in err and "vocabulary" not in err


def test_the_same_seeds_built_otherwise_are_refused_by_the_training_digest(files, capsys, monkeypatch):
    """Other draft divergences: the same groups, grid, settings and features, other roots. Only the digest of the
    training roots tells them apart; without it (the old evaluate) they answered."""
    own, other = Dataset.load(files["own"]), Dataset.load(files["divergence"])
    assert sorted(set(own.group.tolist())) == sorted(set(other.group.tolist())) and own.grid == other.grid
    status, _, err = _evaluate(files["divergence"], files["selector"], capsys)
    assert status == 2 and "training split" in err and "div.npz" in err and "d.npz'" in err, err
    monkeypatch.setattr(fits, "check_train_roots", lambda *args, **kwargs: None)
    status, out, _ = _evaluate(files["divergence"], files["selector"], capsys)
    assert status == 0
    _answers_with_numbers(out)


def test_train_records_the_digest_of_its_training_split(files):
    selector, dataset = Selector.load(files["selector"]), Dataset.load(files["own"])
    train, _ = dataset.split(selector.metadata["test_fraction"], selector.metadata["split_seed"])
    assert selector.metadata["train_digest"] == fits.train_digest(train)
    assert selector.metadata["dataset_grid"] == dataset.metadata["grid"]
    assert selector.metadata["dataset_verispec"] == dataset.metadata["verispec"]


def test_the_digest_reads_keys_and_features_only():
    """Row order and labels (a relabel) leave it; one ulp of one feature, or a key, move it."""
    rng = np.random.default_rng(0)
    rows = 6
    base = SimpleNamespace(key=np.array([f"root{i}" for i in range(rows)]), features=rng.normal(size=(rows, 4)))
    digest = fits.train_digest(base)
    order = rng.permutation(rows)
    assert fits.train_digest(SimpleNamespace(key=base.key[order], features=base.features[order])) == digest
    nudged = base.features.copy()
    nudged[3, 2] = np.nextafter(nudged[3, 2], np.inf)
    assert fits.train_digest(SimpleNamespace(key=base.key, features=nudged)) != digest
    renamed = base.key.copy()
    renamed[0] = "root9"
    assert fits.train_digest(SimpleNamespace(key=renamed, features=base.features)) != digest


def test_an_old_file_is_checked_on_what_it_carries(files, capsys, tmp_path):
    """A selector of 'selector train' before issue 54 (no train_digest): its own dataset answers, another grid is
    refused; a rebuild of its seeds is let through (it recorded nothing to tell; docs/guides/selector.md)."""
    selector = Selector.load(files["selector"])
    for key in ("train_digest", "dataset_grid", "dataset_verispec"):
        selector.metadata.pop(key)
    old = tmp_path / "old.pt"
    selector.save(old)
    assert _evaluate(files["own"], old, capsys)[0] == 0
    status, _, err = _evaluate(files["grid"], old, capsys)
    assert status == 2 and "K 1-3" in err and "old.pt" in err
    assert _evaluate(files["divergence"], old, capsys)[0] == 0


def _hidden_selector(dataset, widths: dict, **metadata):
    """An mlp selector (2 epochs, random hidden states) on ``dataset``'s specinfer actions reading hidden states of
    ``widths``, recording ``metadata`` over the dataset's pair, vocabulary and settings."""
    from verispec.latency import LatencyModel
    from verispec.selector import ActionGrid, action_times, train_selector

    grid = dataset.grid
    sub = ActionGrid(grid.ks, grid.l1s, grid.l2s, ("specinfer",))
    columns = [grid.index(action) for action in sub.actions]
    latency = LatencyModel.from_ratio(20.0)
    rng = np.random.default_rng(1)
    hidden = {name: rng.normal(size=(len(dataset), width)) for name, width in widths.items()}
    record = {"pair": dataset.metadata["pair"], "vocab_size": dataset.metadata["vocab_size"],
              "samplings": dataset.samplings, "latency": latency.as_dict(), **metadata}
    return train_selector(dataset.features, dataset.efficiency[:, columns], action_times(sub, latency), sub,
                          hidden=hidden, epochs=2, projection=4, metadata=record)


def test_hidden_states_missing_or_of_another_width_are_named(files):
    dataset = Dataset.load(files["own"])
    selector = _hidden_selector(dataset, {"target_prev": 8})
    fitting = dataclasses.replace(dataset, hidden={"target_prev": np.zeros((len(dataset), 8))})
    fits.check_dataset_fits(selector, fitting)  # positive control: the width it was trained on
    narrow = dataclasses.replace(dataset, hidden={"target_prev": np.zeros((len(dataset), 5))})
    for data, needles in ((narrow, ("5 wide", "8 wide", "'target_prev'")),
                          (dataset, ("no hidden states", "'target_prev'", "--hidden"))):
        with pytest.raises(VerispecError) as error:
            fits.check_dataset_fits(selector, data, name="the selector 'h.pt'", source="the dataset 'x.npz'")
        text = str(error.value)
        assert "\n" not in text and all(needle in text for needle in needles) and "'h.pt'" in text, text


def _pair(tokenizer="tok", target=8, draft=4):
    config = SimpleNamespace
    return SimpleNamespace(name="p", vocab_size=16, tokenizer=SimpleNamespace(name_or_path=tokenizer),
                           target=SimpleNamespace(config=config(hidden_size=target)),
                           draft=SimpleNamespace(config=config(hidden_size=draft)))


def test_decode_refuses_another_tokenizer_or_hidden_width(files):
    """The pair check of 'decode --selector'. Control: the check decode made before (``Selector.check_fits`` of
    pair name, vocabulary and sampling) let the other tokenizer and the other widths through."""
    from verispec.models.sampling import Sampling

    dataset = dataclasses.replace(Dataset.load(files["own"]))
    dataset.metadata = {**dataset.metadata, "pair": "p", "vocab_size": 16}
    selector = _hidden_selector(dataset, {"target_prev": 8, "draft_root": 4}, tokenizer="tok")
    at = Sampling(1.0)
    fits.check_pair_fits(selector, _pair(), at)  # the pair it was trained for
    cases = [(_pair(tokenizer="other"), at, ("'other'", "'tok'")),
             (_pair(target=16), at, ("'target_prev' 16 wide", "8 wide")),
             (_pair(draft=6), at, ("'draft_root' 6 wide", "4 wide")),
             (_pair(), Sampling(1.0, 5, None), ("top-k=5", "T=1")),
             (_pair(), Sampling(1.0, None, 0.9), ("top-p=0.9", "T=1")),
             (_pair(), Sampling(0.7), ("T=0.7", "T=1"))]
    for pair, sampling, needles in cases:
        with pytest.raises(VerispecError) as error:
            fits.check_pair_fits(selector, pair, sampling, name="the selector 'h.pt'")
        text = str(error.value)
        assert "\n" not in text and all(needle in text for needle in needles), text
    for pair, sampling, _ in cases[:3]:  # the old check: no refusal
        selector.check_fits(pair=pair.name, vocab_size=pair.vocab_size, sampling=sampling)


def test_decode_command_refuses_a_selector_of_another_hidden_width(tmp_path, capsys):
    """End to end on a tiny saved pair (hidden size 32): a selector for that pair whose target_prev projection
    reads 8 values is refused before any token, in one line naming 32 and 8."""
    pytest.importorskip("transformers")
    from tests.support.tiny_models import save_tiny_pair

    target, draft = save_tiny_pair(tmp_path / "pair")
    dataset = dataclasses.replace(Dataset.load(_dataset(tmp_path, "d.npz")))
    dataset.metadata = {**dataset.metadata, "pair": f"{target} + {draft}", "vocab_size": 16}
    path = tmp_path / "h.pt"
    _hidden_selector(dataset, {"target_prev": 8}).save(path)
    capsys.readouterr()
    status = main(["decode", "--target", target, "--draft", draft, "--prompt", "a b", "--max-new-tokens", "4",
                   "--selector", str(path)])
    err = capsys.readouterr().err.strip()
    assert status == 2 and len(err.splitlines()) == 1 and "32 wide" in err and "8 wide" in err, err


def test_the_study_refuses_one_pair_name_over_other_models(files):
    """'selector study': datasets named for one pair but of another tokenizer (its --target reused for other
    models) are refused naming both; the same tokenizer is let through (control)."""
    from verispec.selector.dataset_file import DatasetError
    from verispec.selector.study import pair_settings

    base = Dataset.load(files["own"])
    first = dataclasses.replace(base)
    first.metadata = {**base.metadata, "pair": "p", "tokenizer": "tok-a"}
    second = dataclasses.replace(Dataset.load(files["temperature"]))
    second.metadata = {**second.metadata, "pair": "p", "tokenizer": "tok-a"}
    assert len(pair_settings([("a.npz", first), ("b.npz", second)])) == 2
    second.metadata = {**second.metadata, "tokenizer": "tok-b"}
    with pytest.raises(DatasetError) as error:
        pair_settings([("a.npz", first), ("b.npz", second)])
    assert "'tok-b'" in str(error.value) and "'tok-a'" in str(error.value) and "\n" not in str(error.value)
