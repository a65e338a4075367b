"""Whether a trained selector fits the data it is used with: a labelled dataset (``verispec selector evaluate``,
``verispec.selector.evaluate.evaluate``) or a model pair at a sampling setting (``verispec decode --selector``).

Why: a selector's logits are only meaningful on inputs like those it was trained on. Evaluated on a dataset of
another action grid, pair, sampling setting or feature set, it still "answers with numbers" -- numbers of
nothing (issue 54). Every use is therefore checked against what the selector recorded when it was trained, and
a mismatch is one ``SelectorError`` line that names both sides (the data's and the selector's) and the fix.

What a selector file records (every version of ``verispec selector train``): in ``metadata`` the dataset's pair,
tokenizer, vocabulary size, sampling settings, latency model, file name and training split (test_fraction,
split_seed, train_groups); in the file itself its action grid (the dataset's trees K, L1, L2 and the verifiers
it chooses among), its scalar feature names, the hidden-state names it reads and their widths (the network's
``hidden_dims``). From issue 54 on ``selector train`` also records ``train_digest`` (sha256 of the training
roots' keys and scalar features, ``train_digest``), ``dataset_grid`` (the dataset's whole grid, provenance only)
and ``dataset_verispec`` (the verispec that built the dataset).

Old files stay loadable and are checked on everything they carry: the grid, pair, tokenizer, vocabulary,
sampling settings, features and hidden-state widths are in every file. Only the digest (which catches a dataset
rebuilt with the same groups but other roots, e.g. other draft divergences, or features computed by another
verispec) is missing from them; it is checked where recorded, and an old file evaluated on a rebuilt dataset is
caught by the grid, pair, sampling, feature and training-group checks only (docs/guides/selector.md).

Keys a selector built in process (``train_selector(metadata=...)``, e.g. ``verispec report``'s) does not record
are not compared, except the pair: no recorded pair means synthetic problems.
"""

from __future__ import annotations

import hashlib

import numpy as np

from verispec.selector.actions import SelectorError
from verispec.selector.roots import sampling_text

#: Printed after every refusal of a dataset: the two ways out.
DATASET_FIX = "evaluate it on the dataset it was trained on, or train a selector on this dataset ('verispec " \
              "selector train --dataset ...')"


def train_digest(dataset) -> str:
    """sha256 of a dataset's roots, in key order: each root's key and its scalar features (float64 bytes). What
    ``selector train`` records of its training split and ``selector evaluate`` checks against the dataset's
    training split: same groups, but another build (other divergences, another feature extractor) differs here.
    Labels are left out, so a relabelled dataset ('selector dataset --relabel') keeps its digest."""
    keys = np.asarray(dataset.key, dtype=str)
    features = np.ascontiguousarray(np.asarray(dataset.features, dtype=np.float64))  # [N, F]
    digest = hashlib.sha256(f"{features.shape[1]} features\n".encode())
    for row in np.argsort(keys, kind="stable"):
        digest.update(keys[row].encode())
        digest.update(b"\0")
        digest.update(features[row].tobytes())
    return digest.hexdigest()


def _samplings(settings) -> list[dict]:
    """Sampling settings as ``sampling_dict`` writes them: compared exactly, shown with ``sampling_text``."""
    from verispec.selector.selector import sampling_dict

    return [sampling_dict(setting) for setting in settings or []]


def _source(pair) -> str:
    return repr(pair) if pair else "synthetic problems"


def check_dataset_fits(selector, dataset, *, name: str = "the selector", source: str = "the dataset") -> None:
    """Refuse on one line a dataset the selector was not trained for: another pair (or synthetic problems for a
    pair's selector), tokenizer, vocabulary size, set of sampling settings, tree grid (K, L1, L2) or verifiers
    outside the dataset's, other scalar features, or hidden states it lacks or holds at another width. ``name`` and
    ``source`` (the selector's and the dataset's file names) go into the message."""
    meta, data = selector.metadata, dataset.metadata

    def refuse(what: str, given: str, trained: str, fix: str = DATASET_FIX):
        raise SelectorError(f"the selector does not fit: {source} holds {what} {given}, but {name} was trained "
                            f"on {trained}; {fix}")

    if (data.get("pair") or None) != (meta.get("pair") or None):
        refuse("roots of", _source(data.get("pair")), _source(meta.get("pair")))
    for key, what in (("tokenizer", "the tokenizer"), ("vocab_size", "the vocabulary size")):
        if key in meta and meta[key] != data.get(key):
            refuse(what, repr(data.get(key)), f"{what} {meta[key]!r}")
    if "samplings" in meta:
        given, trained = _samplings(dataset.samplings), _samplings(meta["samplings"])
        if sorted(map(repr, given)) != sorted(map(repr, trained)):
            refuse("roots at sampling", "; ".join(map(sampling_text, given)) or "(none)",
                   f"sampling {'; '.join(map(sampling_text, trained)) or '(none recorded)'}")
    check_grid_fits(selector, dataset.grid, name=name, source=source)
    check_features_fit(selector, dataset, name=name, source=source)


def check_grid_fits(selector, grid, *, name: str = "the selector", source: str = "the dataset") -> None:
    """The selector's actions must be the dataset's: the same trees (K, L1, L2), its verifiers among the dataset's
    (a dataset may label more verifiers: their labels are not read)."""
    outside = [action.name for action in selector.grid.actions if action not in grid.actions]
    trees = (grid.ks, grid.l1s, grid.l2s) != (selector.grid.ks, selector.grid.l1s, selector.grid.l2s)
    if outside or trees:
        detail = f"its action {outside[0]} ({len(outside)} in all) is not in the dataset's grid; " if outside else ""
        raise SelectorError(f"the selector does not fit: {detail}{source} labels the action grid {grid.describe()}, "
                            f"but {name} was trained on {selector.grid.describe()}; {DATASET_FIX}")


def check_features_fit(selector, dataset, *, name: str = "the selector", source: str = "the dataset") -> None:
    """The dataset's scalar features must be the ones the selector reads, in its order, and it must hold every
    hidden state the selector reads at the width the selector's projection takes."""
    given, read = tuple(dataset.feature_names), tuple(selector.feature_names)
    if given != read:
        where = next((i for i, (a, b) in enumerate(zip(given, read)) if a != b), min(len(given), len(read)))
        shown = [given[where] if where < len(given) else "(none)", read[where] if where < len(read) else "(none)"]
        raise SelectorError(f"the selector does not fit: {source} holds {len(given)} scalar features and {name} "
                            f"reads {len(read)}, but feature {where} is {shown[0]!r} in the dataset, {shown[1]!r} in "
                            "the selector (another verispec's features); build the dataset with this verispec "
                            "('verispec selector dataset') and train the selector on it")
    held = dataset.hidden or {}
    widths = selector.model.config.get("hidden_dims", ())
    for hidden, width in zip(selector.hidden_names, widths):
        if hidden not in held:
            holds = f"the hidden states {', '.join(sorted(held))}" if held else "no hidden states"
            raise SelectorError(f"the selector does not fit: {source} holds {holds}, but {name} reads {hidden!r}; "
                                "build the dataset "
                                "with 'verispec selector dataset --hidden', or use a selector trained without "
                                "--hidden")
        if held[hidden].shape[1] != width:
            raise SelectorError(f"the selector does not fit: {source} holds the hidden state {hidden!r} "
                                f"{held[hidden].shape[1]} wide, but {name} was trained on it {width} wide (another "
                                f"model); {DATASET_FIX}")


def check_train_roots(selector, train, *, name: str = "the selector", source: str = "the dataset") -> None:
    """The dataset's training split must hold the roots the selector was trained on, when it recorded them
    (``train_digest``; files of 'selector train' before issue 54 did not, and are let through here)."""
    recorded = selector.metadata.get("train_digest")
    if recorded is not None and recorded != train_digest(train):
        raise SelectorError(f"the selector does not fit: the training split of {source} holds other roots or "
                            f"features than {name} was trained on (its dataset {selector.metadata.get('dataset')!r}; "
                            "same prompts or seeds, another build: other draft divergences, or another verispec's "
                            f"features); {DATASET_FIX}")


def check_pair_fits(selector, pair, sampling, *, name: str = "the selector") -> None:
    """Refuse on one line a model pair or sampling setting the selector was not trained for (``decode
    --selector``): another pair, vocabulary, tokenizer or sampling (``Selector.check_fits``), and hidden states of
    another width than the pair's models give (the selector projects target_prev from the target's, draft_prev
    and draft_root from the draft's last layer)."""
    selector.check_fits(pair=pair.name, vocab_size=pair.vocab_size, sampling=sampling)
    tokenizer = getattr(getattr(pair, "tokenizer", None), "name_or_path", None)
    trained = selector.metadata.get("tokenizer")
    if trained is not None and tokenizer is not None and trained != tokenizer:
        raise SelectorError(f"the selector does not fit: the pair {pair.name!r} has the tokenizer {tokenizer!r}, "
                            f"but {name} was trained with {trained!r}; use a selector trained for this pair")
    models = {"target_prev": pair.target, "draft_prev": pair.draft, "draft_root": pair.draft}
    for hidden, width in zip(selector.hidden_names, selector.model.config.get("hidden_dims", ())):
        model = models.get(hidden)
        size = getattr(getattr(model, "config", None), "hidden_size", None)
        if size is not None and int(size) != int(width):
            raise SelectorError(f"the selector does not fit: the pair {pair.name!r} gives the hidden state "
                                f"{hidden!r} {size} wide, but {name} was trained on it {width} wide; use a "
                                "selector trained for this pair")


def training_record(dataset, train) -> dict:
    """What a selector records of its dataset beyond pair, sampling and split, for the checks at every later use
    (this module's): the training roots' digest, the dataset's whole grid and its builder's version."""
    return {"train_digest": train_digest(train), "dataset_grid": dataset.metadata.get("grid"),
            "dataset_verispec": dataset.metadata.get("verispec")}


__all__ = ["DATASET_FIX", "check_dataset_fits", "check_features_fit", "check_grid_fits", "check_pair_fits",
           "check_train_roots", "train_digest", "training_record"]
