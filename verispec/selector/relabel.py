"""Some rules' labels of a finished dataset computed again and put in place, every other rule's kept.

When a rule's code changes after a build (khisti's zero-mass tokens, 2026-11-26: its labels had depended on the
vocabulary its batch was cut to), only that rule's actions need labelling again; the roots, their sampled combs
and every other rule's labels stand. ``relabel_dataset`` labels the named rules' actions at every root of the
finished dataset ``OUT`` (``build_dataset`` on the grid cut to those rules: the same roots, the same seeds, so the
same combs; its rows kept in the side store ``OUT.relabel.npz.roots.json`` while it runs, so a killed relabel
resumes, never labelling a root twice), then replaces those actions' columns in ``OUT`` and in its row store
(``merge_labels``), both written atomically, and removes the side files. The dataset's own parameters (grid,
method, samples, seed, epsilon, latency, features) must be those the command gives; its hidden states are kept.
The columns are the dataset's recorded actions, not those the command's grid derives now: a version-1 dataset
(``verispec.selector.dataset_file``) keeps its columns, and its merge records them (version 2).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np

from verispec.errors import ResultStoreError
from verispec.files.io import ResultStore, pack_floats, unpack_floats
from verispec.selector.actions import open_grid_store
from verispec.selector.dataset import build_dataset, check_dataset_output, store_path
from verispec.selector.dataset_file import DATASET_VERSION, Dataset, DatasetError
from verispec.selector.join import row_order

#: The arrays of a row (and of a dataset) that hold one value an action, action on the last axis.
LABEL_ARRAYS = ("efficiency", "stderr", "lower", "upper", "per_sample")


def relabel_path(out: str | Path) -> Path:
    """The side dataset of a relabel of ``out`` while it runs: ``OUT.relabel.npz`` (its rows in
    ``OUT.relabel.npz.roots.json``)."""
    return Path(out).with_name(Path(out).name + ".relabel.npz")


def relabel_dataset(roots, grid, verifiers, *, out: str | Path, latency, method: str = "auto", samples: int = 4,
                    epsilon: float = 0.01, seed: int = 0, pair=None, backend: str = "serial", jobs=None,
                    address=None, progress: bool = False, overwrite: bool = False, note=None,
                    root_batch: int = 1) -> Dataset:
    """Label ``verifiers``' actions of ``grid`` again at every root of the finished dataset ``out`` and replace them
    there and in its row store; returns the dataset as written. ``roots`` and every other argument are those of
    the build of ``out`` (``build_dataset``), which is refused on one line (``DatasetError``) where they differ
    from what ``out`` records, where ``out`` is not finished (no file, no row store, a root of ``roots`` not in
    it), or where a verifier is not one of the grid's. ``overwrite`` starts the relabel's side build over; ``out``
    itself is only ever rewritten with its other columns unchanged."""
    out = Path(out)
    names = check_relabel(out, verifiers, grid)
    base = Dataset.load(out)
    if base.grid.as_dict() != grid.as_dict():
        raise DatasetError(f"dataset {str(out)!r} was labelled for the action grid {base.grid.describe()}, not "
                           f"{grid.describe()}; relabel with the command that built it")
    grid = base.grid  # the recorded columns, whatever the rules' validity derives from the parameters now
    base_store = _finished_store(out, roots, grid, method, samples, seed, epsilon, latency)
    part_grid = grid.restricted(names)
    side = relabel_path(out)
    part = build_dataset(roots, part_grid, method=method, samples=samples, epsilon=epsilon, out=side,
                         latency=latency, pair=pair, backend=backend, jobs=jobs, address=address,
                         progress=progress, overwrite=overwrite, seed=seed, note=note, root_batch=root_batch)
    merged, columns = merge_labels(base, part), _part_columns(base, part)
    _check_rows_match(base, base_store, kept=np.setdiff1d(np.arange(len(grid)), columns))
    merged.save(out)  # first the file, then the store: a relabel killed between them redoes the same merge
    base_store.add_many(_merged_rows(base_store.rows, part, columns))
    for path in (side, store_path(side)):
        path.unlink(missing_ok=True)
    return merged


def merge_labels(base: Dataset, part: Dataset) -> Dataset:
    """``base`` with the columns of ``part``'s actions (every label array, per-tree values included) taken from
    ``part``, every other column, the features and the hidden states kept; ``metadata['relabelled']`` records
    what was replaced (once, where the same merge is done again), and the merge is written as the current version
    with ``base``'s action list recorded (a version-1 base keeps its columns: ``Dataset.grid``). Refused on one line
    where the two datasets do not hold the same roots labelled the same way (keys, label methods, samplings, sampled
    trees a root) or where an action of ``part`` is not one of ``base``'s grid."""
    columns = _part_columns(base, part)
    if sorted(base.key.tolist()) != sorted(part.key.tolist()):
        missing = sorted(set(base.key.tolist()) ^ set(part.key.tolist()))
        raise DatasetError(f"the relabelled roots are not the dataset's: {len(missing)} root(s) in one and not the "
                           f"other (first {missing[0][:80]!r}); relabel with the command that built the dataset")
    order = row_order(part.key, base.key)  # part's row of each base row
    for name in ("label_method", "group", "context_length"):
        if not np.array_equal(getattr(base, name), getattr(part, name)[order]):
            raise DatasetError(f"the relabelled roots differ from the dataset's in their {name.replace('_', ' ')}; "
                               "relabel with the command that built the dataset")
    for name in ("method", "samples", "seed", "epsilon", "latency", "samplings", "pair", "feature_names"):
        if base.metadata.get(name) != part.metadata.get(name):
            raise DatasetError(f"the relabelled labels were built with {name} {part.metadata.get(name)!r}, the "
                               f"dataset with {base.metadata.get(name)!r}; relabel with the command that built it")
    arrays = {}
    for name in LABEL_ARRAYS:
        whole, new = getattr(base, name), getattr(part, name)
        if (whole is None) != (new is None) or (whole is not None and whole.shape[1:-1] != new.shape[1:-1]):
            raise DatasetError(f"the relabelled {name} has shape {None if new is None else new.shape}, the "
                               f"dataset's {None if whole is None else whole.shape}; relabel with the same samples")
        if whole is not None:
            whole = whole.copy()
            whole[..., columns] = new[order]
        arrays[name] = whole
    digest = hashlib.sha256(np.ascontiguousarray(part.efficiency[order]).tobytes()).hexdigest()[:16]
    record = {"verifiers": list(part.grid.verifiers), "actions": len(columns), "labels_sha256": digest,
              "label_seconds": part.metadata.get("label_seconds"), "verispec": part.metadata.get("verispec")}
    records = list(base.metadata.get("relabelled", []))
    if not records or records[-1] != record:  # the same merge done again (a relabel killed after the file) once
        records.append(record)
    metadata = {**base.metadata, "version": DATASET_VERSION, "actions": base.grid.action_names(),
                "relabelled": records}
    kept = {name: getattr(base, name) for name in ("features", "group", "setting", "context_length", "label_method",
                                                   "key")}
    return Dataset(**kept, **arrays, metadata=metadata, hidden=base.hidden)


def _part_columns(base: Dataset, part: Dataset) -> np.ndarray:
    """The columns of ``base``'s grid that ``part``'s actions are, in ``part``'s order."""
    grid, part_grid = base.grid, part.grid
    if (grid.ks, grid.l1s, grid.l2s) != (part_grid.ks, part_grid.l1s, part_grid.l2s):
        raise DatasetError(f"the relabelled grid {part_grid.describe()} does not have the dataset's K, L1 and L2 "
                           f"({grid.describe()}), so its sampled trees differ; relabel with the same --ks, --l1s, "
                           "--l2s")
    outside = [action.name for action in part_grid.actions if action not in set(grid.actions)]
    if outside:
        raise DatasetError(f"the relabelled action {outside[0]} is not in the dataset's grid {grid.describe()}")
    return np.array([grid.index(action) for action in part_grid.actions], dtype=np.int64)


def _checked_verifiers(verifiers, grid) -> tuple[str, ...]:
    """The verifiers to relabel, refused on one line where none is given, one is named twice or one is not a
    verifier of ``grid``."""
    names = tuple(verifiers) if not isinstance(verifiers, str) else tuple(
        name.strip() for name in verifiers.split(",") if name.strip())
    if not names:
        raise DatasetError("name at least one verifier to relabel (--relabel khisti, or a comma-separated list)")
    if len(set(names)) != len(names):
        raise DatasetError(f"a verifier to relabel is named twice in {', '.join(names)}")
    outside = [name for name in names if name not in grid.verifiers]
    if outside:
        raise DatasetError(f"--relabel {outside[0]!r} is not a verifier of the dataset's grid "
                           f"({', '.join(grid.verifiers)}); relabel one of those")
    return names


def check_relabel(out: str | Path, verifiers, grid) -> tuple[str, ...]:
    """The verifiers to relabel in ``out`` (a sequence of names, or comma-separated text), refused on one line
    (``DatasetError``) before anything is loaded where they are not the grid's or ``out`` is not a finished
    dataset with its row store."""
    names = _checked_verifiers(verifiers, grid)
    out = Path(out)
    check_dataset_output(out, in_place=True)  # a file without its row store, or not a dataset: refused
    if not out.exists():
        raise DatasetError(f"--relabel replaces labels of a finished dataset, and {str(out)!r} does not exist "
                           "(or its build has not finished); build it first with the same command without --relabel")
    return names


def _finished_store(out: Path, roots, grid, method, samples, seed, epsilon, latency) -> ResultStore:
    """The row store of the finished dataset ``out``, opened with the parameters the command gives (every one but
    the verispec version that built it), refused on one line where ``out`` is not finished or was built with
    other parameters."""
    from verispec.selector.dataset_file import DATASET_FORMAT
    from verispec.selector.features import SCALAR_FEATURES

    try:
        stored = json.loads(store_path(out).read_text()).get("parameters") or {}
    except (OSError, ValueError, AttributeError) as error:
        raise DatasetError(f"cannot read the row store of {str(out)!r} ({error})") from None
    parameters = {"kind": DATASET_FORMAT, "method": method, "samples": int(samples),
                  "seed": int(seed), "epsilon": float(epsilon), "latency": latency.as_dict(),
                  "feature_names": list(SCALAR_FEATURES), "verispec": stored.get("verispec")}
    try:  # a store of format 1 (no action list) opens where its columns are the grid's (``open_grid_store``)
        store = open_grid_store(store_path(out), parameters, grid)
    except ResultStoreError as error:
        raise DatasetError(f"{' '.join(str(error).split())} (relabel with the command that built it)") from None
    missing = [root.key() for root in roots if not store.done(root.key())]
    if missing:
        raise DatasetError(f"{len(set(missing))} root(s) of this command are not in {str(out)!r} (first "
                           f"{missing[0][:80]!r}); finish the build first with the same command without --relabel")
    return store


def _check_rows_match(base: Dataset, store: ResultStore, kept: np.ndarray) -> None:
    """Refuse a dataset file whose labels of the ``kept`` actions are not its row store's (a file from another
    build beside this store): merging into both would leave them disagreeing. (The relabelled columns may differ:
    a relabel killed between writing the file and the store has put them in the file alone.)"""
    for row, key in enumerate(base.key.tolist()):
        stored = store.rows.get(key)
        if stored is None or not np.array_equal(unpack_floats(stored["efficiency"])[kept], base.efficiency[row, kept]):
            raise DatasetError(f"the dataset file and its row store disagree at root {row} ({key[:80]!r}); rebuild "
                               "the file from its store (the same command without --relabel) before relabelling")


def _merged_rows(rows: dict, part: Dataset, columns: np.ndarray) -> dict:
    """The row store's rows of ``part``'s roots with ``part``'s label columns put in place at ``columns``."""
    replaced = {}
    for index, key in enumerate(part.key.tolist()):
        row = dict(rows[key])
        row.pop("key", None)
        for name in LABEL_ARRAYS:
            if row.get(name) is None:
                continue
            values = unpack_floats(row[name]).copy()
            new = getattr(part, name)[index]
            if name == "per_sample":
                new = new[:values.shape[0]]  # the dataset pads roots with fewer trees with NaN rows
            values[..., columns] = new
            row[name] = pack_floats(values)
        replaced[key] = row
    return replaced


__all__ = ["LABEL_ARRAYS", "check_relabel", "merge_labels", "relabel_dataset", "relabel_path"]
