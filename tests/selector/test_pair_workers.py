"""A model pair's roots labelled through the sweep's engines (verispec.selector.labelling.label_pair_tasks): worker
processes that each load the pair from where the build loaded it (``ModelPair.source``) give the rows of a serial
build, a build resumed on workers labels only the missing roots and keeps the stored ones untouched, and the
builds workers could not run are refused in one line before any worker starts: a pair built in memory, and more
copies of the pair than this machine's free memory holds."""

from __future__ import annotations

import json

import numpy as np
import pytest

from verispec.latency import LatencyModel
from verispec.models.sampling import Sampling
from verispec.selector.actions import ActionGrid
from verispec.selector.dataset import build_dataset, store_path
from verispec.selector.dataset_file import Dataset, DatasetError
from verispec.selector.roots import trace_roots

pytest.importorskip("torch")
pytest.importorskip("transformers")

GRID = ActionGrid((1, 2), (0, 1), (0, 1), ("specinfer", "traversal-iid"))
LATENCY = LatencyModel.from_ratio(20.0)
# a filtered setting (its roots go several to a group) and an unfiltered one (one root a group)
SAMPLINGS = [Sampling(0.8, top_k=3), Sampling(1.0)]
PROMPTS = [("a", "a b c d"), ("b", "e f g"), ("c", "h i j k l")]


@pytest.fixture(scope="module")
def saved_pair(tmp_path_factory):
    import torch

    from tests.support.tiny_models import save_tiny_pair
    from verispec.models import load_pair

    torch.set_num_threads(1)
    folder = tmp_path_factory.mktemp("pair-workers")
    target, draft = save_tiny_pair(folder / "pair")
    pair = load_pair(target, draft, dtype="float64")
    roots = trace_roots(pair, PROMPTS, SAMPLINGS, every=2, max_new_tokens=4, seed=3)
    return pair, roots


@pytest.fixture(scope="module")
def serial_build(saved_pair, tmp_path_factory):
    """The serial build of every root, the reference each engine's rows are compared with (built once)."""
    pair, roots = saved_pair
    return _build(pair, roots, tmp_path_factory.mktemp("serial") / "serial.npz")


def _build(pair, roots, out, **options):
    return build_dataset(roots, GRID, method="conditional", samples=2, seed=5, out=out, latency=LATENCY, pair=pair,
                         root_batch=2, **options)


def test_loading_records_where_the_pair_came_from(saved_pair):
    pair, _ = saved_pair
    assert pair.source is not None and pair.source.draft is not None and pair.source.dtype == "float64"
    again = pair.source.load()
    assert again.name == pair.name and again.vocab_size == pair.vocab_size and again.source == pair.source
    expected = sum(parameter.numel() * 8 for model in (pair.target, pair.draft) for parameter in model.parameters())
    assert pair.weight_bytes >= expected  # float64 parameters, and any buffers besides


def test_local_workers_give_the_serial_rows(saved_pair, serial_build, tmp_path, monkeypatch):
    """The same rows, and none of them labelled in the build's own process (each call of ``label_roots`` writes its
    process id; forked workers inherit the recorder, a worker started afresh writes nothing)."""
    import os

    import verispec.selector.labelling as labelling

    pair, roots = saved_pair
    assert len(roots) >= 8 and {root.sampling.filters for root in roots} == {True, False}
    serial = serial_build
    calls, original = tmp_path / "calls.txt", labelling.label_roots

    def recorded(*args, **kwargs):
        with open(calls, "a") as record:
            record.write(f"{os.getpid()}\n")
        return original(*args, **kwargs)

    import verispec.selector.dataset as dataset

    for module in (labelling, dataset):  # the build's own name for it, and the workers'
        monkeypatch.setattr(module, "label_roots", recorded)
    workers = _build(pair, roots, tmp_path / "workers.npz", backend="local", jobs=2)
    assert str(os.getpid()) not in (calls.read_text().split() if calls.exists() else [])
    assert workers.key.tolist() == serial.key.tolist() == list(dict.fromkeys(root.key() for root in roots))
    for name in ("efficiency", "stderr", "features"):
        np.testing.assert_allclose(getattr(workers, name), getattr(serial, name), rtol=0, atol=1e-12)
    np.testing.assert_allclose(workers.per_sample, serial.per_sample, rtol=0, atol=1e-12)


def test_a_ray_cluster_gives_the_serial_rows(saved_pair, serial_build, tmp_path, ray_cluster):
    """The session's local Ray (``ray_cluster``): its workers load the pair themselves and give the serial rows (of
    four roots, one filtered: each worker loads the pair, and a root's row does not depend on the roots labelled
    with it, as for Dask below)."""
    pair, roots = saved_pair
    chosen = roots[:3] + [next(root for root in roots if root.sampling.filters != roots[0].sampling.filters)]
    keys = list(dict.fromkeys(root.key() for root in chosen))
    rows = [serial_build.key.tolist().index(key) for key in keys]
    clustered = _build(pair, chosen, tmp_path / "ray.npz", backend="ray")
    assert clustered.key.tolist() == keys
    np.testing.assert_allclose(clustered.efficiency, serial_build.efficiency[rows], rtol=0, atol=1e-12)


@pytest.mark.slow
def test_a_dask_local_cluster_gives_the_serial_rows(saved_pair, serial_build, tmp_path):
    """Against the serial build's rows of the same roots: a root's row does not depend on the roots labelled with
    it (a build resumed from other roots gives the serial rows, test_a_build_resumed_on_workers_...)."""
    pytest.importorskip("distributed")
    pair, roots = saved_pair
    keys = list(dict.fromkeys(root.key() for root in roots[:4]))
    rows = [serial_build.key.tolist().index(key) for key in keys]
    clustered = _build(pair, roots[:4], tmp_path / "dask.npz", backend="dask", address="local:1")
    assert clustered.key.tolist() == keys
    np.testing.assert_allclose(clustered.efficiency, serial_build.efficiency[rows], rtol=0, atol=1e-12)


def test_a_build_resumed_on_workers_labels_only_the_missing_roots(saved_pair, serial_build, tmp_path):
    pair, roots = saved_pair
    out = tmp_path / "resumed.npz"
    _build(pair, roots[:3], out)
    before = {row["key"]: row for row in json.loads(store_path(out).read_text())["rows"]}
    resumed = _build(pair, roots + roots[:1], out, backend="local", jobs=2)  # a root given twice is kept once
    after = json.loads(store_path(out).read_text())["rows"]
    assert len(after) == len({row["key"] for row in after}) == len(roots)
    for row in after:
        if row["key"] in before:  # left as stored: not labelled again (its time would differ)
            assert row == before[row["key"]]
    once = serial_build
    assert resumed.key.tolist() == once.key.tolist()
    np.testing.assert_allclose(resumed.efficiency, once.efficiency, rtol=0, atol=1e-12)
    assert Dataset.load(out).key.tolist() == once.key.tolist()


def test_a_pair_built_in_memory_is_refused_on_workers(saved_pair, tmp_path):
    import dataclasses

    pair, roots = saved_pair
    in_memory = dataclasses.replace(pair, source=None)
    with pytest.raises(DatasetError, match="built in memory") as error:
        _build(in_memory, roots, tmp_path / "x.npz", backend="local", jobs=2)
    assert "\n" not in str(error.value) and "serial" in str(error.value)
    assert not store_path(tmp_path / "x.npz").exists() or not json.loads(
        store_path(tmp_path / "x.npz").read_text())["rows"]


def test_workers_beyond_free_memory_are_refused_before_any_starts(saved_pair, tmp_path, monkeypatch):
    import verispec.guard.memory

    pair, roots = saved_pair
    each = pair.weight_bytes * 1.25
    monkeypatch.setattr(verispec.guard.memory, "available_memory_bytes", lambda: int(1.5 * each))
    with pytest.raises(DatasetError, match="give --jobs 1 or --backend serial") as error:
        _build(pair, roots, tmp_path / "x.npz", backend="local", jobs=2)
    assert "\n" not in str(error.value) and pair.name in str(error.value)
    monkeypatch.setattr(verispec.guard.memory, "available_memory_bytes", lambda: int(0.5 * each))
    with pytest.raises(DatasetError, match="give --backend serial"):
        _build(pair, roots, tmp_path / "x.npz", backend="local", jobs=1)
    monkeypatch.setattr(verispec.guard.memory, "available_memory_bytes", lambda: None)  # unknown: no refusal
    assert len(_build(pair, roots[:2], tmp_path / "fits.npz", backend="local", jobs=1)) == 2


def test_the_command_labels_a_pair_on_local_workers(tmp_path, capsys, monkeypatch):
    """``selector dataset --backend local --jobs 2`` with --target/--draft: exit 0 and the rows of ``--backend
    serial``; --jobs alone asks for local workers and --address alone is refused (it names no cluster backend);
    without either a pair's roots label in the command's own process (each copy of the pair costs its memory), and
    workers beyond the free memory are refused in one line (exit 2) before any trace is decoded."""
    import verispec.guard.memory
    from tests.support.tiny_models import tiny_dataset_command
    from verispec.cli import main
    from verispec.selector import dataset, labelling

    command = tiny_dataset_command(tmp_path, "--threads", "2", "--dtype", "float64")
    assert main(command + ["--out", str(tmp_path / "serial.npz"), "--backend", "serial"]) == 0
    assert main(command + ["--out", str(tmp_path / "local.npz"), "--backend", "local", "--jobs", "2"]) == 0
    serial, local = Dataset.load(tmp_path / "serial.npz"), Dataset.load(tmp_path / "local.npz")
    assert local.key.tolist() == serial.key.tolist()
    np.testing.assert_allclose(local.efficiency, serial.efficiency, rtol=0, atol=1e-12)
    np.testing.assert_allclose(local.per_sample, serial.per_sample, rtol=0, atol=1e-12)

    assert main(command + ["--out", str(tmp_path / "jobs.npz"), "--jobs", "2"]) == 0  # --jobs alone: local workers
    np.testing.assert_allclose(Dataset.load(tmp_path / "jobs.npz").efficiency, serial.efficiency, rtol=0, atol=1e-12)
    capsys.readouterr()
    assert main(command + ["--out", str(tmp_path / "address.npz"), "--address", "local:2"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--address" in err and "--backend dask or ray" in err, err

    started = []
    for module in (labelling, dataset):  # the workers' function, by either name
        monkeypatch.setattr(module, "label_pair_tasks", lambda tasks: started.append(tasks) or [])
    assert main(command + ["--out", str(tmp_path / "default.npz")]) == 0
    assert not started and np.array_equal(Dataset.load(tmp_path / "default.npz").efficiency, serial.efficiency)

    monkeypatch.setattr(verispec.guard.memory, "available_memory_bytes", lambda: 1)
    capsys.readouterr()
    assert main(command + ["--out", str(tmp_path / "refused.npz"), "--backend", "local", "--jobs", "2"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--backend serial" in err, err
    assert not (tmp_path / "refused.npz.traces.json").exists()
