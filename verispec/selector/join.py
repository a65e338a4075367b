"""Datasets of the same roots labelled for different rules, side by side (``join_datasets``).

A rule added after a build (psbv and globalres after the Qwen builds, issue 56) is labelled at the same roots in a
file of its own (``verispec selector dataset --traces-of BUILD``: the build's traces, so its roots; the same seed,
so the same sampled trees a root, DDTE Eq. 3). The study then reads both files for one sampling setting, and this
joins them: one dataset whose actions are the first's followed by the others', every label array side by side,
the rows in the first's order. The committed builds are never rewritten for it.

What must agree, or the join is refused on one line (``DatasetError``): the root keys (the same set), each root's
group, context length and label method; how the labels were made (method, samples a root, seed, epsilon, latency
model, pair, tokenizer, vocabulary, sampling settings, feature names); the tree grid (K, L1, L2). The rules must
be disjoint (a rule in two files would leave two labels an action). The features are the first file's: the
others' are the same quantities from the same model passes up to the rounding of float32 forwards run in other
batch compositions, checked to ``FEATURE_RTOL`` (a different root or model moves them by far more).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from verispec.selector.dataset_file import DATASET_VERSION, Dataset, DatasetError

#: Metadata that says how the labels were made: equal in every file of a join.
LABELLING_KEYS = ("method", "samples", "seed", "epsilon", "latency", "pair", "tokenizer", "vocab_size", "samplings",
                  "feature_names")

#: The arrays with one column an action, action on the last axis.
ACTION_ARRAYS = ("efficiency", "stderr", "lower", "upper", "per_sample")

#: Relative (and, below 1, absolute) tolerance of the features of a root in two files of a join: the float32
#: forwards of the same model at the same context in another batch give features equal to about 1e-5 (measured on
#: Qwen2.5-Coder at T = 0.7, packs of 2 and 8 roots); a different context differs in its entropies by O(0.1).
FEATURE_RTOL = 1e-3


def join_datasets(datasets: Sequence[tuple[str, Dataset]]) -> Dataset:
    """One dataset of the roots that every one of ``datasets`` ((label, Dataset) pairs, at least one) holds, with
    the actions of all of them (the first's, then each next one's), or a one-line ``DatasetError`` (module
    docstring). One dataset is returned unchanged."""
    if not datasets:
        raise DatasetError("give at least one dataset to join")
    (first_label, first), rest = datasets[0], list(datasets[1:])
    if not rest:
        return first
    names = [action.name for action in first.grid.actions]
    verifiers = list(first.grid.verifiers)
    arrays = {name: [getattr(first, name)] for name in ACTION_ARRAYS}
    for label, data in rest:
        _check_joinable(first_label, first, label, data)
        shared = sorted(set(verifiers) & set(data.grid.verifiers))
        if shared:
            raise DatasetError(f"the rule {shared[0]!r} is labelled in both {first_label!r} and {label!r}; give each "
                               "rule in one dataset")
        order = row_order(data.key, first.key)
        _check_same_roots(first_label, first, label, data, order)
        for name in ACTION_ARRAYS:
            arrays[name].append(None if getattr(data, name) is None else getattr(data, name)[order])
        names += [action.name for action in data.grid.actions]
        verifiers += list(data.grid.verifiers)
    joined = {name: (None if any(part is None for part in parts) else np.concatenate(parts, axis=-1))
              for name, parts in arrays.items()}
    if joined["per_sample"] is None and any(part is not None for part in arrays["per_sample"]):
        raise DatasetError("only some of the joined datasets hold per-tree labels (per_sample); build each with "
                           "conditional labels")
    grid = {**first.metadata["grid"], "verifiers": verifiers}
    sources = [{"label": label, "verifiers": list(data.grid.verifiers), "actions": len(data.grid)}
               for label, data in datasets]
    metadata = {**first.metadata, "version": DATASET_VERSION, "grid": grid, "actions": names, "joined": sources}
    kept = {name: getattr(first, name) for name in ("features", "group", "setting", "context_length",
                                                    "label_method", "key")}
    dataset = Dataset(**kept, **joined, metadata=metadata, hidden=first.hidden)
    if [action.name for action in dataset.grid.actions] != names:
        raise DatasetError(f"the joined actions of {', '.join(label for label, _ in datasets)} are not those of the "
                           f"grid {dataset.grid.describe()} in its order; join datasets of one tree grid")
    return dataset


def _check_joinable(first_label: str, first: Dataset, label: str, data: Dataset) -> None:
    """Refuse ``data`` where its labels were made otherwise than ``first``'s or its tree grid differs."""
    for key in LABELLING_KEYS:
        if data.metadata.get(key) != first.metadata.get(key):
            raise DatasetError(f"dataset {label!r} was labelled with {key} {data.metadata.get(key)!r}, {first_label!r} "
                               f"with {first.metadata.get(key)!r}; join datasets built by the same command but "
                               "--verifiers (selector dataset --traces-of)")
    ours, theirs = first.grid, data.grid
    if (ours.ks, ours.l1s, ours.l2s) != (theirs.ks, theirs.l1s, theirs.l2s):
        raise DatasetError(f"dataset {label!r} labels the trees of {theirs.describe()}, {first_label!r} those of "
                           f"{ours.describe()}; join datasets of one tree grid (K, L1, L2)")


def row_order(keys: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """The positions in ``keys`` of each of ``wanted``; refused where the two are not the same set of keys."""
    where = {key: index for index, key in enumerate(keys.tolist())}
    missing = [key for key in wanted.tolist() if key not in where]
    if missing or len(keys) != len(wanted):
        extra = sorted(set(keys.tolist()) - set(wanted.tolist()))
        first = (missing or extra)[0]
        raise DatasetError(f"the datasets do not hold the same roots: {len(missing)} root(s) only in the first and "
                           f"{len(extra)} only in the other (first {first[:80]!r}); label the other rules at the "
                           "first's roots (selector dataset --traces-of FIRST)")
    return np.array([where[key] for key in wanted.tolist()], dtype=np.int64)


def _check_same_roots(first_label: str, first: Dataset, label: str, data: Dataset, order: np.ndarray) -> None:
    """Refuse ``data`` (rows put in ``first``'s order by ``order``) where a root's group, setting, context length
    or label method differs, or its features are not the same up to ``FEATURE_RTOL``."""
    for name in ("group", "setting", "context_length", "label_method"):
        ours, theirs = getattr(first, name), getattr(data, name)[order]
        if not np.array_equal(ours, theirs):
            row = int(np.flatnonzero(ours != theirs)[0])
            raise DatasetError(f"dataset {label!r} gives root {row} of {first_label!r} the {name.replace('_', ' ')} "
                               f"{theirs[row]!r}, not {ours[row]!r}; join datasets of the same roots")
    ours, theirs = first.features, data.features[order]
    scale = np.maximum(np.abs(ours), 1.0)
    gap = np.abs(ours - theirs) / scale                                                  # [N, F]
    if (gap > FEATURE_RTOL).any():
        row, column = (int(index[0]) for index in np.nonzero(gap > FEATURE_RTOL))
        raise DatasetError(f"dataset {label!r} gives root {row} of {first_label!r} the feature "
                           f"{first.feature_names[column]} = {theirs[row, column]:.6g}, not {ours[row, column]:.6g} "
                           f"(relative tolerance {FEATURE_RTOL:g}); join datasets of the same roots and models")
