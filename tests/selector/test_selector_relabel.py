"""Relabelling some rules of a finished dataset (verispec.selector.relabel, ``selector dataset --relabel``): the
named rules' columns come out equal to a fresh build's whatever they held, every other column (and the features,
the per-tree values, the row store) is left as it was, a killed relabel resumes without labelling a root twice
(killed in its build, or between writing the file and its store), and what it cannot use is refused on one line
before any root is labelled: a verifier outside the grid, no finished dataset, a command with other parameters, a
file that disagrees with its row store, another K/L1/L2."""

from __future__ import annotations

import json

import numpy as np
import pytest

from verispec.files.io import ResultStore, pack_floats, unpack_floats
from verispec.latency import LatencyModel
from verispec.selector.actions import ActionGrid
from verispec.selector.dataset import build_dataset, store_path
from verispec.selector.dataset_file import Dataset, DatasetError
from verispec.selector.relabel import LABEL_ARRAYS, merge_labels, relabel_dataset, relabel_path
from verispec.selector.roots import synthetic_roots

GRID = ActionGrid((1, 2), (0, 1), (0, 1, 2), ("specinfer", "traversal-iid"))
LATENCY = LatencyModel.from_ratio(20.0)
OPTIONS = {"method": "conditional", "samples": 3, "seed": 7, "latency": LATENCY}
SHIFT = 0.25  # what the tampered columns are moved by: labels a rule's older code might have given


def _roots():
    return synthetic_roots("markov", 3, range(5), divergence=[0.1, 0.9])


def _columns(name: str) -> np.ndarray:
    return np.array([index for index, action in enumerate(GRID.actions) if action.verifier == name])


def _tamper(out, columns=None):
    """Move the ``columns`` (every one by default) of every label array by SHIFT in the file and its row store
    alike."""
    data = Dataset.load(out)
    columns = np.arange(len(data.grid)) if columns is None else columns
    for name in LABEL_ARRAYS:
        getattr(data, name)[..., columns] += SHIFT
    data.save(out)
    stored = json.loads(store_path(out).read_text())
    store = ResultStore(store_path(out), parameters=stored["parameters"])
    rows = {}
    for row in store.rows.values():
        row = dict(row)
        for name in LABEL_ARRAYS:
            values = unpack_floats(row[name])
            values[..., columns] += SHIFT
            row[name] = pack_floats(values)
        rows[row.pop("key")] = row
    store.add_many(rows)


def _counting(monkeypatch, stop_at=None) -> list:
    import verispec.selector.labelling as module  # where the build looks label_root up

    original, calls = module.label_root, []

    def counted(root, *args, **kwargs):
        calls.append(root.key())
        if len(calls) == stop_at:
            raise KeyboardInterrupt
        return original(root, *args, **kwargs)

    monkeypatch.setattr(module, "label_root", counted)
    return calls


def _store_arrays(out, name: str) -> np.ndarray:
    rows = json.loads(store_path(out).read_text())["rows"]
    return np.stack([unpack_floats(row[name]) for row in rows])


def _fresh_and_tampered(folder):
    """(roots, a fresh build, the path of a second build of theirs with every column tampered)."""
    roots = _roots()
    fresh = build_dataset(roots, GRID, out=folder / "fresh.npz", **OPTIONS)
    out = folder / "data.npz"
    build_dataset(roots, GRID, out=out, **OPTIONS)
    _tamper(out)
    return roots, fresh, out


def test_relabel_replaces_only_the_named_rules_columns(tmp_path, monkeypatch):
    roots, fresh, out = _fresh_and_tampered(tmp_path)
    calls = _counting(monkeypatch)
    merged = relabel_dataset(roots, GRID, "traversal-iid", out=out, **OPTIONS)
    assert sorted(calls) == sorted(root.key() for root in roots)  # every root labelled once
    again = Dataset.load(out, grid=GRID)
    redone, kept = _columns("traversal-iid"), _columns("specinfer")
    for data in (merged, again):
        for name in LABEL_ARRAYS:
            np.testing.assert_array_equal(getattr(data, name)[..., redone], getattr(fresh, name)[..., redone])
            np.testing.assert_allclose(getattr(data, name)[..., kept], getattr(fresh, name)[..., kept] + SHIFT,
                                       rtol=0, atol=1e-12)
        np.testing.assert_array_equal(data.features, fresh.features)
        assert data.metadata["relabelled"][-1]["verifiers"] == ["traversal-iid"]
        assert data.metadata["relabelled"][-1]["actions"] == len(redone)
    for name in LABEL_ARRAYS:  # the row store says what the file says
        np.testing.assert_array_equal(_store_arrays(out, name), getattr(again, name))
    assert not relabel_path(out).exists() and not store_path(relabel_path(out)).exists()


def test_a_killed_relabel_resumes_without_labelling_a_root_twice(tmp_path, monkeypatch):
    import verispec.selector.relabel as module

    roots, fresh, out = _fresh_and_tampered(tmp_path)
    calls = _counting(monkeypatch, stop_at=3)
    with pytest.raises(KeyboardInterrupt):
        relabel_dataset(roots, GRID, ["specinfer"], out=out, **OPTIONS)
    assert len(json.loads(store_path(relabel_path(out)).read_text())["rows"]) == 2
    np.testing.assert_allclose(Dataset.load(out).efficiency, fresh.efficiency + SHIFT, rtol=0, atol=1e-12)
    # killed again between writing the file and its row store: the file merged, the store not yet
    original = module._merged_rows
    monkeypatch.setattr(module, "_merged_rows", lambda *args: (_ for _ in ()).throw(KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):
        relabel_dataset(roots, GRID, ["specinfer"], out=out, **OPTIONS)
    assert calls[3:] == [root.key() for root in roots[2:]]  # the rest, each once
    monkeypatch.setattr(module, "_merged_rows", original)
    relabel_dataset(roots, GRID, ["specinfer"], out=out, **OPTIONS)
    assert len(calls) == 3 + 3  # the side build was finished: only the merge ran
    again, redone = Dataset.load(out), _columns("specinfer")
    np.testing.assert_array_equal(again.efficiency[:, redone], fresh.efficiency[:, redone])
    np.testing.assert_allclose(again.efficiency[:, _columns("traversal-iid")],
                               fresh.efficiency[:, _columns("traversal-iid")] + SHIFT, rtol=0, atol=1e-12)
    np.testing.assert_array_equal(_store_arrays(out, "efficiency"), again.efficiency)
    assert len(again.metadata["relabelled"]) == 1  # the interrupted merge left no record


def _one_line(error) -> str:
    text = str(error.value)
    assert "\n" not in text
    return text


def test_what_a_relabel_cannot_use_is_refused_on_one_line(tmp_path, monkeypatch):
    roots = _roots()
    out = tmp_path / "data.npz"
    with pytest.raises(DatasetError) as error:
        relabel_dataset(roots, GRID, "specinfer", out=out, **OPTIONS)
    assert "does not exist" in _one_line(error) and "without --relabel" in str(error.value)
    build_dataset(roots, GRID, out=out, **OPTIONS)
    calls = _counting(monkeypatch)
    for verifiers, words in (("gbv", "not a verifier of the dataset's grid"), ("", "at least one verifier"),
                             ("specinfer,specinfer", "named twice")):
        with pytest.raises(DatasetError) as error:
            relabel_dataset(roots, GRID, verifiers, out=out, **OPTIONS)
        assert words in _one_line(error)
    with pytest.raises(DatasetError) as error:
        relabel_dataset(roots, GRID, "specinfer", out=out, **{**OPTIONS, "samples": 4})
    assert "samples: 3 in the file, 4 now" in _one_line(error)
    with pytest.raises(DatasetError) as error:
        relabel_dataset(roots + synthetic_roots("markov", 3, [9]), GRID, "specinfer", out=out, **OPTIONS)
    assert "finish the build first" in _one_line(error)
    assert calls == []  # nothing labelled before those refusals
    data = Dataset.load(out)
    data.efficiency[0, _columns("traversal-iid")[0]] += 1.0  # a file that is not its store's, in a kept column
    data.save(out)
    with pytest.raises(DatasetError) as error:
        relabel_dataset(roots, GRID, "specinfer", out=out, **OPTIONS)
    assert "disagree at root 0" in _one_line(error)
    other = build_dataset(roots, ActionGrid((1,), (0, 1), (0, 1, 2), ("specinfer",)), out=tmp_path / "k1.npz",
                          **OPTIONS)
    with pytest.raises(DatasetError) as error:
        merge_labels(Dataset.load(out), other)
    assert "K, L1 and L2" in _one_line(error)


def test_the_command_relabels_a_pairs_dataset_and_keeps_its_traces(tmp_path, capsys):
    """``selector dataset ... --relabel spectr`` on a tiny saved pair: the same command that built the file plus the
    option; spectr's labels come out as a fresh build's (the same combs: bit for bit), nothing is traced again
    (even with --overwrite, which restarts only the relabel), and a verifier outside the grid or a file that was
    never built is refused on one line (exit 2) before the pair is loaded."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from tests.support.tiny_models import tiny_dataset_command
    from verispec.cli import main

    command = tiny_dataset_command(tmp_path, "--threads", "1", "--verifiers", "specinfer,spectr")
    out, fresh = tmp_path / "data.npz", tmp_path / "fresh.npz"
    assert main(command + ["--out", str(fresh)]) == 0
    assert main(command + ["--out", str(out), "--relabel", "spectr"]) == 2
    assert "does not exist" in capsys.readouterr().err.strip().splitlines()[-1]
    assert main(command + ["--out", str(out)]) == 0
    grid = Dataset.load(out).grid
    redone = np.array([index for index, action in enumerate(grid.actions) if action.verifier == "spectr"])
    _tamper(out, redone)
    traces = (tmp_path / "data.npz.traces.json").read_text()
    capsys.readouterr()
    assert main(command + ["--out", str(out), "--relabel", "spectr", "--overwrite"]) == 0
    printed = capsys.readouterr().out
    assert f"relabelled spectr in {out}: {len(redone)} actions" in printed
    assert (tmp_path / "data.npz.traces.json").read_text() == traces
    again, once = Dataset.load(out), Dataset.load(fresh)
    np.testing.assert_array_equal(again.efficiency, once.efficiency)
    np.testing.assert_array_equal(again.per_sample, once.per_sample)
    assert main(command + ["--out", str(out), "--relabel", "khisti"]) == 2
    assert "not a verifier of the dataset's grid" in capsys.readouterr().err.strip().splitlines()[-1]
    more = tmp_path / "wider" / "prompts.txt"  # one prompt FILE was not built from: refused before it is traced
    more.parent.mkdir()
    more.write_text("a b c d\ne f g\nh i j\n")
    widened = [more if part == str(tmp_path / "prompts.txt") else part for part in command]
    assert main([str(part) for part in widened] + ["--out", str(out), "--relabel", "spectr"]) == 2
    assert "1 of the command's 3 traces are not in the dataset's trace store" in \
        capsys.readouterr().err.strip().splitlines()[-1]
    assert (tmp_path / "data.npz.traces.json").read_text() == traces



#: A grid whose derived actions changed after version 1: gbv gained delayed:2,1,1 (TRUNK_IID_PATHS).
GBV_GRID = ActionGrid((1, 2), (0, 1), (0, 1), ("specinfer", "gbv"))


def _as_version_1(out) -> None:
    """Rewrite a finished build of ``GBV_GRID.under_format_1()`` as verispec wrote it before action lists were
    recorded: version 1 with the grid's parameters alone, in the file and in its row store's parameters."""
    data = Dataset.load(out)
    data.metadata = {key: value for key, value in data.metadata.items() if key != "actions"} | {"version": 1}
    data.save(out)
    stored = json.loads(store_path(out).read_text())
    stored["parameters"].pop("actions")
    store_path(out).write_text(json.dumps(stored))


def test_a_version_1_dataset_keeps_its_columns_through_a_relabel(tmp_path):
    """A version-1 dataset labels gbv on the chains and iid trees only (15 columns, where the parameters derive 16
    now). A relabel of gbv given the parameters (the command's grid, 16 actions) relabels its 7 gbv columns, keeps
    the 15, records them (version 2) and leaves the row store in step; a build resumed on that store with the 16
    actions is refused on one line."""
    then = GBV_GRID.under_format_1()
    assert (len(then), len(GBV_GRID)) == (15, 16)
    roots = _roots()
    fresh = build_dataset(roots, then, out=tmp_path / "fresh.npz", **OPTIONS)
    out = tmp_path / "data.npz"
    build_dataset(roots, then, out=out, **OPTIONS)
    _as_version_1(out)
    gbv = np.array([index for index, action in enumerate(then.actions) if action.verifier == "gbv"])
    _tamper(out, gbv)
    assert len(Dataset.load(out).grid) == 15
    merged = relabel_dataset(roots, command_grid(GBV_GRID), ["gbv"], out=out, **OPTIONS)
    again = Dataset.load(out)
    for data in (merged, again):
        assert data.metadata["version"] == 2 and data.metadata["actions"] == then.action_names()
        assert data.grid == then
        for name in LABEL_ARRAYS:
            np.testing.assert_array_equal(getattr(data, name), getattr(fresh, name))
        assert data.metadata["relabelled"][-1]["actions"] == len(gbv) == 7
    np.testing.assert_array_equal(_store_arrays(out, "efficiency"), again.efficiency)
    with pytest.raises(DatasetError) as refusal:
        build_dataset(roots, GBV_GRID, out=out, **OPTIONS)
    assert "actions: (absent) in the file" in _one_line(refusal)


def command_grid(grid: ActionGrid) -> ActionGrid:
    """The grid a command builds from its --ks, --l1s, --l2s and --verifiers: the parameters, actions derived now."""
    return ActionGrid.parse(",".join(map(str, grid.ks)), ",".join(map(str, grid.l1s)), ",".join(map(str, grid.l2s)),
                            ",".join(grid.verifiers))
