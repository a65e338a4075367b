"""Files whose columns are a grid's actions record the action list (dataset version 2, selector format 2, row
stores), so a rule gaining reach (gbv on delayed trees) does not change what a file's columns mean; files written
before (version 1) are read under the draft-law classification of their time (``ActionGrid.under_format_1``).

The expected action lists are enumerated here from the rules' validity as documented, not from the code: a tree
(K, L1, L2) of the selector's grid is a chain when K = 1 or L2 = 0 (chain:0 when L1 = L2 = 0), K i.i.d. paths from
the root when L1 = 0 < L2 and K > 1, else a delayed tree with a trunk (K > 1, L1 > 0, L2 > 0). Before
TRUNK_IID_PATHS (format 1) a delayed tree declared i.i.d. children alone; the rules accept: specinfer, spectr,
khisti, naivetree, traversal-iid: i.i.d. children (every shape); traversal: children without replacement (chains
only: K i.i.d. draws are not drawn without replacement); gbv: i.i.d. paths from the root (chains and iid:K,L, not
delayed trees until it gained them); psbv likewise until it gained delayed trees.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from verispec.selector.actions import Action, ActionGrid, SelectorError, open_grid_store
from verispec.selector.dataset_file import DATASET_VERSION, Dataset, DatasetError

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = {"qwen-t07-m64.npz": 476, "qwen-t1-r2.npz": 396}

#: The shapes each rule accepted in format 1 (module docstring), and the rules that gained reach since.
FORMAT_1_SHAPES = {"specinfer": {"chain", "iid", "delayed"}, "spectr": {"chain", "iid", "delayed"},
                   "khisti": {"chain", "iid", "delayed"}, "naivetree": {"chain", "iid", "delayed"},
                   "traversal-iid": {"chain", "iid", "delayed"}, "traversal": {"chain"}, "gbv": {"chain", "iid"},
                   "psbv": {"chain", "iid"}}
NOW_SHAPES = {**FORMAT_1_SHAPES, "gbv": {"chain", "iid", "delayed"}, "psbv": {"chain", "iid", "delayed"}}


def shape(k: int, l1: int, l2: int) -> str:
    if k == 1 or l2 == 0:
        return "chain"
    return "iid" if l1 == 0 else "delayed"


def enumerate_actions(grid: dict, shapes: dict) -> list[str]:
    """The names of a grid's actions, verifier-major then K, L1, L2, each rule on the shapes ``shapes`` gives it."""
    return [f"{verifier} K={k} L1={l1} L2={l2}" for verifier in grid["verifiers"] for k in sorted(grid["ks"])
            for l1 in sorted(grid["l1s"]) for l2 in sorted(grid["l2s"]) if shape(k, l1, l2) in shapes[verifier]]


@pytest.mark.parametrize("name", sorted(COMMITTED))
def test_committed_version_1_datasets_keep_their_columns(name):
    """The committed datasets (version 1, no action list) load with exactly their column counts, their actions the
    format-1 enumeration; the grid their parameters derive now is larger (gbv on delayed trees), and a load that
    asks for that grid is refused on one line."""
    path = ROOT / "data" / "selector" / name
    data = Dataset.load(path)
    assert data.metadata["version"] == 1 and "actions" not in data.metadata
    assert data.efficiency.shape[1] == len(data.grid) == COMMITTED[name]
    assert data.grid.action_names() == enumerate_actions(data.metadata["grid"], FORMAT_1_SHAPES)
    now = ActionGrid.from_dict(data.metadata["grid"])
    assert now.action_names() == enumerate_actions(data.metadata["grid"], NOW_SHAPES)
    assert len(now) > COMMITTED[name] and now != data.grid and now.as_dict() == data.grid.as_dict()
    with pytest.raises(DatasetError) as refusal:
        Dataset.load(path, grid=now)
    assert "\n" not in str(refusal.value) and "actions recorded" in str(refusal.value)
    gbv = data.grid.restricted(("gbv",))  # a sub-grid keeps the file's actions
    assert gbv.action_names() == enumerate_actions({**data.metadata["grid"], "verifiers": ["gbv"]}, FORMAT_1_SHAPES)
    assert all(data.grid.index(action) >= 0 for action in gbv)


def _small_dataset(grid: ActionGrid, version: int = DATASET_VERSION) -> Dataset:
    """Two roots labelled for ``grid`` (made-up finite labels), its metadata as a build of ``version`` writes it."""
    from verispec.selector.features import SCALAR_FEATURES

    count, width = 2, len(grid)
    metadata = {"format": "verispec selector dataset", "version": version, "grid": grid.as_dict(),
                "feature_names": list(SCALAR_FEATURES), "samplings": [{"temperature": 1.0}]}
    if version >= 2:
        metadata["actions"] = grid.action_names()
    labels = np.linspace(1.0, 2.0, count * width).reshape(count, width)
    return Dataset(features=np.zeros((count, len(SCALAR_FEATURES))), efficiency=labels, stderr=labels * 0,
                   lower=labels, upper=labels, group=["a", "b"], setting=[0, 0], context_length=[3, 4],
                   label_method=["exact"] * count, key=["r0", "r1"], metadata=metadata)


#: K 1-2, L1 0-1, L2 0-1 with specinfer and gbv: one delayed tree (delayed:2,1,1), gbv's since TRUNK_IID_PATHS.
GBV_GRID = ActionGrid((1, 2), (0, 1), (0, 1), ("specinfer", "gbv"))


def test_version_2_round_trip_records_the_action_list(tmp_path):
    grid = GBV_GRID.under_format_1()  # a list other than the parameters' derivation now
    assert len(grid) == 15 and len(GBV_GRID) == 16 and "gbv K=2 L1=1 L2=1" not in grid.action_names()
    _small_dataset(grid).save(tmp_path / "d.npz")
    loaded = Dataset.load(tmp_path / "d.npz", grid=grid)
    assert loaded.metadata["version"] == 2 and loaded.metadata["actions"] == grid.action_names()
    assert loaded.grid == grid and loaded.grid != GBV_GRID
    with pytest.raises(DatasetError, match="actions recorded"):
        Dataset.load(tmp_path / "d.npz", grid=GBV_GRID)


def test_version_1_file_reads_the_format_1_actions(tmp_path):
    """A version-1 file of the grid holds 15 columns (gbv not on delayed:2,1,1); one with the 16 columns the
    parameters derive now is refused on one line."""
    _small_dataset(GBV_GRID.under_format_1(), version=1).save(tmp_path / "v1.npz")
    assert Dataset.load(tmp_path / "v1.npz").grid.action_names() == enumerate_actions(GBV_GRID.as_dict(),
                                                                                       FORMAT_1_SHAPES)
    with pytest.raises(DatasetError) as refusal:
        _small_dataset(GBV_GRID, version=1)
    assert "16 columns for the 15 actions" in str(refusal.value) and "\n" not in str(refusal.value)


@pytest.mark.parametrize("actions, message", [
    (None, "records none"),
    ("specinfer K=1 L1=0 L2=0", "not a list of action names"),
    (["specinfer K=1 L1=0 L2=0", "bogus"], "not an action name"),
    (["specinfer K=3 L1=0 L2=0"], "is not in the grid"),
    (["khisti K=1 L1=0 L2=0"], "is not in the grid"),
    (["specinfer K=1 L1=0 L2=1", "specinfer K=1 L1=0 L2=0"], "not in the grid's order"),
    (["specinfer K=1 L1=0 L2=0", "specinfer K=1 L1=0 L2=0"], "names an action twice"),
    ([], "is empty"),
])
def test_bad_recorded_lists_are_refused_on_one_line(actions, message):
    data = _small_dataset(ActionGrid((1, 2), (0, 1), (0, 1), ("specinfer",)))
    metadata = {**data.metadata}
    metadata.pop("actions")
    if actions is not None:
        metadata["actions"] = actions
    with pytest.raises(DatasetError) as refusal:
        data.metadata = metadata
        data.grid  # noqa: B018 - read the grid
    assert message in str(refusal.value) and "\n" not in str(refusal.value)


def test_a_listed_action_the_engine_refuses_is_refused():
    """traversal (children without replacement) on K i.i.d. paths: no rule would verify that column."""
    grid = ActionGrid((1, 2), (0,), (0, 1), ("traversal",))
    with pytest.raises(SelectorError, match="is not valid") as refusal:
        grid.with_actions(["traversal K=2 L1=0 L2=1"])
    assert "\n" not in str(refusal.value)
    assert grid.with_actions(["traversal K=1 L1=0 L2=1"]).action_names() == ["traversal K=1 L1=0 L2=1"]


def test_action_names_read_back():
    for action in GBV_GRID:
        assert Action.from_name(action.name) == action
    with pytest.raises(SelectorError, match="not an action name"):
        Action.from_name("gbv K=2 L1=1")


def test_grid_equality_and_sub_grids():
    """Equal parameters and equal actions make equal grids (listed or derived alike); a sub-grid of a listed grid
    keeps its list, of a derived one derives."""
    now, then = GBV_GRID, GBV_GRID.under_format_1()
    assert now == GBV_GRID.with_actions(GBV_GRID.action_names()) and hash(now) == hash(then) and now != then
    assert ActionGrid((1, 2), (0, 1), (0, 1), ("specinfer",)) == then.restricted(("specinfer",))
    assert len(then.restricted(("gbv",))) == 7 and len(now.restricted(("gbv",))) == 8
    with pytest.raises(SelectorError, match="has no verifier"):
        then.restricted(("traversal",))


def test_a_row_store_of_format_1_opens_where_its_columns_are_the_grids(tmp_path):
    """A store whose parameters record the grid alone (before lists were recorded) holds the format-1 actions: it
    opens for the grid listed so, and is refused for the grid the parameters derive now (gbv on delayed:2,1,1)."""
    from verispec.errors import ResultStoreError
    from verispec.files.io import ResultStore

    path = tmp_path / "rows.json"
    ResultStore(path, parameters={"seed": 1, "grid": GBV_GRID.as_dict()}).add("r", {"value": 1})
    assert open_grid_store(path, {"seed": 1}, GBV_GRID.under_format_1()).done("r")
    with pytest.raises(ResultStoreError) as refusal:
        open_grid_store(path, {"seed": 1}, GBV_GRID)
    assert "actions: (absent) in the file" in str(refusal.value) and "(16 items)" in str(refusal.value)
    fresh = open_grid_store(tmp_path / "new.json", {"seed": 1}, GBV_GRID)
    fresh.add("r", {"value": 1})
    stored = json.loads((tmp_path / "new.json").read_text())["parameters"]
    assert stored["actions"] == GBV_GRID.action_names() and stored["grid"] == GBV_GRID.as_dict()


def test_selector_files_record_their_actions(tmp_path):
    """A selector trained on a listed grid reads back with that list (format 2); a format-1 file (no list) with
    the format-1 actions of its parameters."""
    import torch

    from verispec.selector.selector import Selector
    from verispec.selector.train import train_selector

    grid = GBV_GRID.under_format_1()
    rng = np.random.default_rng(0)
    selector = train_selector(rng.random((8, 1)), 1 + rng.random((8, len(grid))), np.ones(len(grid)), grid,
                              kind="lookup", feature_names=("x",), lookup_feature="x", bins=2, seed=0)
    selector.save(tmp_path / "s.pt")
    assert Selector.load(tmp_path / "s.pt").grid == grid
    state = selector.state()
    state.pop("actions")
    torch.save({**state, "format_version": 1}, tmp_path / "old.pt")
    assert Selector.load(tmp_path / "old.pt").grid == grid


def test_an_unknown_version_is_refused_on_one_line(tmp_path):
    data = _small_dataset(GBV_GRID)
    data.metadata = {**data.metadata, "version": 3}
    data.save(tmp_path / "v3.npz")
    with pytest.raises(DatasetError) as refusal:
        Dataset.load(tmp_path / "v3.npz")
    assert "reads versions 1, 2" in str(refusal.value) and "\n" not in str(refusal.value)
