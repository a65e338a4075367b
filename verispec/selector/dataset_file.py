"""The selector's dataset file: labelled roots as arrays (``Dataset``), saved as one ``.npz`` file and read back
with every check (``Dataset.load``). ``verispec.selector.dataset`` builds it.

The file (``Dataset.save``, written atomically) holds:

    metadata        0-d unicode array: JSON of {"format", "version", "grid", "actions", "feature_names", "pair",
                    "tokenizer", "vocab_size", "samplings", "method", "samples", "seed", "epsilon", "latency",
                    "verispec", "roots"}
    features        [N, F] float64     (F = len(feature_names))
    efficiency      [N, A] float64     E[tau + 1] per root and action (A = len(actions))
    stderr          [N, A] float64     standard error (0 for exact and certified labels; NaN for one sample)
    lower, upper    [N, A] float64     (see ``verispec.selector.labels.LabelSet``)
    group           [N] unicode        prompt or problem of the root (split by group)
    setting         [N] int64          index into metadata["samplings"]
    context_length  [N] int64          tokens of the context, root included
    label_method    [N] unicode        how each root was labelled ("exact", "certified", "conditional")
    key             [N] unicode        the root's store key (its JSON description)
    per_sample      [N, S, A] float64  optional: the conditional estimator's value of each of its S sampled trees
                                       (NaN rows for exact and certified roots); what lets an evaluation choose
                                       an action on some trees and score it on the others (the cross-fitted
                                       oracle), since the best of noisy labels, scored on themselves, is biased
                                       upward
    hidden.NAME     [N, d] float32     optional (``build_dataset(hidden=True)``, a pair's roots): the last layer's
                                       hidden states at the root, named as decoding's ``BlockContext.hidden``:
                                       target_prev (the target at the token before the root), draft_prev and
                                       draft_root (the draft there and at the root)

The label columns are the actions ``metadata["actions"]`` names (``Action.name``, in the grid's order), recorded
since version 2: the grid's parameters (``metadata["grid"]``) alone do not fix them, since which (verifier, tree)
pairs a grid holds follows each rule's validity, and a rule gaining reach (gbv on delayed trees) would give the
same parameters more actions. A version-1 file records the parameters alone; its columns are the actions its
writer derived, the grid's under the draft-law classification of that time (``ActionGrid.under_format_1``). Both
versions are read; version 2 is written.
"""

from __future__ import annotations

import json
import os
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from verispec.errors import VerispecError, describe
from verispec.files.io import OutputKind, atomic_output, check_output_file, check_zip_sizes

#: The ``format`` recorded in a dataset file's metadata, and its version.
DATASET_FORMAT = "verispec selector dataset"
DATASET_VERSION = 2

#: The versions ``Dataset.load`` reads: 1 (no action list: ``ActionGrid.under_format_1``) and 2.
READ_VERSIONS = (1, 2)

#: The arrays of a dataset file, with their ranks.
ARRAYS = {"features": 2, "efficiency": 2, "stderr": 2, "lower": 2, "upper": 2, "group": 1, "setting": 1,
          "context_length": 1, "label_method": 1, "key": 1}

#: Most bytes a dataset file's arrays may take uncompressed, checked from the archive before anything is read:
#: the paper's scale (10^4 roots, 324 actions: four label arrays and per-tree labels) with Qwen's hidden states
#: takes some 0.4 GB.
MAX_DATASET_BYTES = 2 << 30


class DatasetError(VerispecError):
    """A dataset that cannot be built, read or used as asked (one line; the CLI exits with status 2)."""


@dataclass(eq=False)
class Dataset:
    """Labelled roots (arrays as in the module docstring) and the metadata of their build."""

    features: np.ndarray
    efficiency: np.ndarray
    stderr: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    group: np.ndarray
    setting: np.ndarray
    context_length: np.ndarray
    label_method: np.ndarray
    key: np.ndarray
    metadata: dict
    per_sample: np.ndarray | None = None
    hidden: dict[str, np.ndarray] | None = None

    def __post_init__(self):
        for name in ("features", "efficiency", "stderr", "lower", "upper"):
            setattr(self, name, np.asarray(getattr(self, name), dtype=np.float64))
        for name in ("setting", "context_length"):
            setattr(self, name, np.asarray(getattr(self, name), dtype=np.int64))
        for name in ("group", "label_method", "key"):
            setattr(self, name, np.asarray(getattr(self, name), dtype=str))
        count = len(self.key)
        if count == 0:
            raise DatasetError("the dataset is empty (no root); build it from at least one root")
        for name, rank in ARRAYS.items():
            array = getattr(self, name)
            if array.ndim != rank or array.shape[0] != count:
                raise DatasetError(f"dataset array {name!r} has shape {array.shape}; expected {rank} dimension(s) "
                                   f"with {count} rows")
        actions, names = len(self.grid), self.metadata.get("feature_names") or []
        if self.features.shape[1] != len(names):
            raise DatasetError(f"the dataset has {self.features.shape[1]} feature columns for {len(names)} feature "
                               "names")
        for name in ("efficiency", "stderr", "lower", "upper"):
            if getattr(self, name).shape[1] != actions:
                raise DatasetError(f"dataset array {name!r} has {getattr(self, name).shape[1]} columns for the "
                                   f"{actions} actions of its grid")
        bad = ~np.isfinite(self.features).all(axis=1)
        if bad.any():
            row = int(np.flatnonzero(bad)[0])
            raise DatasetError(f"the dataset holds NaN or infinite features (root {row} of group "
                               f"{self.group[row]!r}; an all-masked top-k row gives NaN)")
        if not np.isfinite(self.efficiency).all():
            raise DatasetError("the dataset holds NaN or infinite labels")
        if self.hidden is not None:
            self.hidden = {str(name): np.asarray(block, dtype=np.float32) for name, block in self.hidden.items()}
            for name, block in self.hidden.items():
                if block.ndim != 2 or block.shape[0] != count:
                    raise DatasetError(f"dataset hidden states {name!r} have shape {block.shape}; expected "
                                       f"[{count}, d]")
                if not np.isfinite(block).all():
                    raise DatasetError(f"dataset hidden states {name!r} hold NaN or infinite values")
        if self.per_sample is not None:
            self.per_sample = np.asarray(self.per_sample, dtype=np.float64)
            if self.per_sample.ndim != 3 or self.per_sample.shape[0] != count or self.per_sample.shape[2] != actions:
                raise DatasetError(f"dataset array 'per_sample' has shape {self.per_sample.shape}; expected [{count}, "
                                   f"S, {actions}]")
        if len(set(self.key.tolist())) != count:
            raise DatasetError("the dataset holds a root twice")
        samplings = self.metadata.get("samplings") or []
        if ((self.setting < 0) | (self.setting >= len(samplings))).any():
            raise DatasetError(f"a root's setting index is outside the {len(samplings)} sampling settings")

    def __len__(self) -> int:
        return len(self.key)

    @property
    def grid(self):
        """The action grid of the labels (``ActionGrid``), its actions those of the label columns: the recorded list
        (``metadata["actions"]``), or a version-1 file's (``grid_of_metadata``). Read once per metadata."""
        record = (self.metadata.get("version"), self.metadata.get("grid"), self.metadata.get("actions"))
        cached = self.__dict__.get("_grid")
        if cached is None or cached[0] != record:
            cached = (record, grid_of_metadata(self.metadata))
            self.__dict__["_grid"] = cached
        return cached[1]

    @property
    def feature_names(self) -> tuple[str, ...]:
        return tuple(self.metadata["feature_names"])

    @property
    def samplings(self) -> list[dict]:
        return list(self.metadata.get("samplings") or [])

    def subset(self, rows) -> Dataset:
        """The roots selected by ``rows`` (a boolean mask or indices), with the same metadata (root count
        updated)."""
        rows = np.asarray(rows)
        arrays = {name: getattr(self, name)[rows] for name in ARRAYS}
        per_sample = None if self.per_sample is None else self.per_sample[rows]
        hidden = None if self.hidden is None else {name: block[rows] for name, block in self.hidden.items()}
        return Dataset(**arrays, metadata={**self.metadata, "roots": int(len(arrays["key"]))}, per_sample=per_sample,
                       hidden=hidden)

    def split(self, test_fraction: float = 0.25, seed: int = 0) -> tuple[Dataset, Dataset]:
        """(train, test): whole groups (prompts, problems) go to one side, the groups shuffled with
        ``numpy.random.default_rng(seed)``; the test side gets round(test_fraction G) groups, at least one and at
        most G - 1 (G the groups)."""
        if isinstance(test_fraction, bool) or not isinstance(test_fraction, (int, float)) or \
                not 0 < test_fraction < 1:
            raise DatasetError(f"test_fraction must lie in (0, 1), got {describe(test_fraction)}")
        groups = np.unique(self.group)
        if len(groups) < 2:
            raise DatasetError(f"a split by group needs at least two groups; the dataset has {len(groups)} "
                               f"({describe(groups.tolist()[:3])})")
        order = np.random.default_rng(seed).permutation(len(groups))
        count = min(len(groups) - 1, max(1, int(round(test_fraction * len(groups)))))
        held = np.isin(self.group, groups[order[:count]])
        return self.subset(~held), self.subset(held)

    def save(self, path: str | Path, *, command: str = "selector dataset") -> None:
        """Write the dataset to ``path`` (.npz, zip-deflated: labels of 620 roots x 476 actions x 16 trees fit in
        about 5 MB instead of 52) atomically, with the ``written_by`` marker of ``verispec COMMAND`` (the member
        that lets a rerun replace it: ``verispec.files.provenance``; ``load`` ignores it)."""
        from verispec.files.provenance import DATASET, MARKER_KEY, npz_member, written_by

        arrays = {name: getattr(self, name) for name in ARRAYS}
        if self.per_sample is not None:
            arrays["per_sample"] = self.per_sample
        for name, block in (self.hidden or {}).items():
            arrays[f"hidden.{name}"] = block
        check_output_file(path, "the dataset", example="dataset.npz")
        with atomic_output(path) as temporary, open(temporary, "wb") as stream:
            np.savez_compressed(stream, metadata=np.array(json.dumps(self.metadata, sort_keys=True)), **arrays,
                                **{MARKER_KEY: npz_member(written_by(DATASET, command))})

    @classmethod
    def load(cls, path: str | Path, grid=None) -> Dataset:
        """Read a dataset file; refuse on one line (``DatasetError``) a missing, truncated or foreign file, an
        empty dataset, NaN features, and, given ``grid``, a dataset labelled for another action grid."""
        shown = repr(str(path))
        if os.path.exists(path):  # a FIFO would block its reader in open() for ever, a device never end
            from verispec.study.script_files import check_input

            check_input(path, "the dataset", DatasetError)
        try:
            check_zip_sizes(path, limit=MAX_DATASET_BYTES, what=f"the dataset {shown}", error=DatasetError)
            loaded = np.load(path, allow_pickle=False)
            if not isinstance(loaded, np.lib.npyio.NpzFile):
                raise DatasetError(f"{shown} is not a verispec selector dataset (a single array, not an .npz archive)")
            with loaded as data:
                names = set(data.files)
                missing = sorted(({"metadata"} | set(ARRAYS)) - names)
                if missing:
                    raise DatasetError(f"{shown} is not a verispec selector dataset (no {', '.join(missing)})")
                metadata = json.loads(str(data["metadata"]))
                arrays = {name: data[name] for name in ARRAYS}
                if "per_sample" in names:
                    arrays["per_sample"] = data["per_sample"]
                hidden = {name.removeprefix("hidden."): data[name] for name in sorted(names)
                          if name.startswith("hidden.")}
                if hidden:
                    arrays["hidden"] = hidden
        except DatasetError:
            raise
        except FileNotFoundError:
            raise DatasetError(f"dataset file {shown} does not exist") from None
        except (zipfile.BadZipFile, EOFError, OSError, ValueError, KeyError, zipfile.LargeZipFile) as error:
            raise DatasetError(f"cannot read the dataset {shown}: the file is truncated or not a verispec dataset "
                               f"({type(error).__name__})") from None
        if not isinstance(metadata, dict) or metadata.get("format") != DATASET_FORMAT:
            raise DatasetError(f"{shown} is not a verispec selector dataset (its metadata names no "
                               f"{DATASET_FORMAT!r} format)")
        if metadata.get("version") not in READ_VERSIONS:
            raise DatasetError(f"{shown} is a dataset of format version {metadata.get('version')!r}; this verispec "
                               f"reads versions {', '.join(map(str, READ_VERSIONS))}")
        try:
            dataset = cls(**arrays, metadata=metadata)
        except DatasetError as error:
            raise DatasetError(f"dataset {shown}: {error}") from None
        if grid is not None and grid != dataset.grid:
            held = dataset.grid
            detail = "" if held.as_dict() != grid.as_dict() else \
                f" ({len(held)} actions recorded, {len(grid)} in the grid given)"
            raise DatasetError(f"dataset {shown} was labelled for the action grid {held.describe()}, not "
                               f"{grid.describe()}{detail}; build a dataset for this grid")
        return dataset


def grid_of_metadata(metadata: dict):
    """The ``ActionGrid`` of a dataset's label columns from its metadata: the grid's parameters holding the recorded
    action list (version 2), or, in a version-1 file, the actions its parameters meant then
    (``ActionGrid.under_format_1``). A one-line DatasetError where they cannot be read or do not fit."""
    from verispec.selector.actions import ActionGrid, SelectorError

    try:
        grid = ActionGrid.from_dict(metadata.get("grid"))
        if metadata.get("version") == 1:
            return grid.under_format_1()
        actions = metadata.get("actions")
        if actions is None:
            raise SelectorError(f"a dataset of version {metadata.get('version')!r} records its action list "
                                "(metadata 'actions'), and this one records none")
        if not isinstance(actions, list):
            raise SelectorError(f"the recorded action list is not a list of action names: {describe(actions)}")
        return grid.with_actions(actions)
    except SelectorError as error:
        raise DatasetError(f"the dataset's grid cannot be read: {error}") from None


def is_dataset_file(path: str | Path) -> bool:
    """Whether ``path`` holds a selector dataset ('verispec selector dataset' wrote it): its metadata's format."""
    try:
        check_zip_sizes(path, limit=MAX_DATASET_BYTES, what="the dataset", error=DatasetError)
        with np.load(path, allow_pickle=False) as data:
            return json.loads(str(data["metadata"])).get("format") == DATASET_FORMAT
    except Exception:  # numpy and zipfile raise many kinds on a file that is not a dataset
        return False


def dataset_file_marked(path: str | Path) -> bool:
    """Whether ``path`` carries the ``written_by`` marker of a selector dataset verispec wrote
    (``verispec.files.provenance``): what 'verispec selector dataset' may replace without --overwrite."""
    from verispec.files.io import npz_marker
    from verispec.files.provenance import DATASET, is_marked

    return is_marked(npz_marker(path, MAX_DATASET_BYTES), DATASET)


#: What 'verispec selector dataset --out' writes (``verispec.files.io.check_output``).
DATASET_FILE = OutputKind("verispec selector dataset", dataset_file_marked, is_dataset_file, "dataset.npz")


__all__ = ["ARRAYS", "DATASET_FILE", "DATASET_FORMAT", "DATASET_VERSION", "MAX_DATASET_BYTES", "READ_VERSIONS",
           "Dataset", "DatasetError", "grid_of_metadata", "is_dataset_file"]
