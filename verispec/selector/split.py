"""Which prompts a selector is scored on: the held-out split of the pair study and the split a trained selector
recorded. Both split by prompt (a dataset's ``group``), never by root: the roots of one prompt share a trace, so a
prompt on both sides would score a selector on roots it has nearly seen.

The study's split (``study_split``) is one for every setting, regime and rule: the distinct prompts of all the
datasets, sorted, are shuffled by ``numpy.random.default_rng(seed)`` and the first ``held_out_count`` are held
out, in every setting they appear in. That is ``Dataset.split``'s rule, so one dataset of one setting splits as
``verispec selector train --test-fraction F --split-seed SEED`` does, with one change: at least ``MIN_HELD_OUT``
prompts are held out when there are ``FLOOR_PROMPTS`` or more.

Cross-fitting (``folds`` K >= 2, ``verispec selector study --folds K``): the same shuffled prompts are cut into K
folds of near-equal size (``numpy.array_split``), and every fold is held out once: its roots' static action and
selectors are fitted on the other K - 1 folds. Every prompt is then a held-out prompt, so an interval's
half-width is about sqrt(fraction) of one split's (half of it at fraction 0.25); the bootstrap resamples prompts
with the K fitted policies held fixed (their dependence through shared training folds is not resampled).

A trained selector's split (``held_out``) is the one it recorded (``selector train``'s test fraction and split
seed), checked against its training prompts and roots (``verispec.selector.fits``), so a selector is never scored
on roots it was trained on.
"""

from __future__ import annotations

import numpy as np

from verispec.errors import VerispecError, describe
from verispec.selector.dataset_file import DatasetError

#: Held-out prompts the split keeps at least, once the datasets hold ``FLOOR_PROMPTS`` prompts or more.
MIN_HELD_OUT = 64
FLOOR_PROMPTS = 256


def held_out_count(prompts: int, fraction: float) -> int:
    """Prompts held out of ``prompts``: round(fraction prompts), at least ``MIN_HELD_OUT`` when there are
    ``FLOOR_PROMPTS`` or more, and always at least 1 and at most prompts - 1."""
    count = int(round(fraction * prompts))
    if prompts >= FLOOR_PROMPTS:
        count = max(count, MIN_HELD_OUT)
    return min(prompts - 1, max(1, count))


def split_prompts(groups, fraction: float, seed: int) -> tuple[list[str], list[str]]:
    """(training prompts, held-out prompts), each sorted: the distinct ``groups`` sorted, shuffled by
    ``numpy.random.default_rng(seed)``, the first ``held_out_count`` held out (the module docstring's rule)."""
    distinct = np.unique(np.asarray(groups, dtype=str))  # sorted
    if len(distinct) < 2:
        raise DatasetError(f"a split by prompt needs at least two prompts; the datasets hold {len(distinct)}")
    order = np.random.default_rng(seed).permutation(len(distinct))
    held = set(distinct[order[:held_out_count(len(distinct), fraction)]].tolist())
    return sorted(set(distinct.tolist()) - held), sorted(held)


def fold_prompts(groups, folds: int, seed: int) -> list[list[str]]:
    """The distinct ``groups`` sorted, shuffled by ``numpy.random.default_rng(seed)`` (``split_prompts``'s
    order) and cut into ``folds`` near-equal folds (``numpy.array_split``), each sorted; a one-line
    ``DatasetError`` when there are fewer prompts than folds."""
    distinct = np.unique(np.asarray(groups, dtype=str))  # sorted
    if isinstance(folds, bool) or not isinstance(folds, (int, np.integer)) or folds < 2:
        raise VerispecError(f"cross-fitting needs at least 2 folds, got {describe(folds)}")
    if len(distinct) < folds:
        raise DatasetError(f"{folds} folds need at least {folds} prompts; the datasets hold {len(distinct)}: give "
                           "fewer folds")
    order = np.random.default_rng(seed).permutation(len(distinct))
    return [sorted(distinct[part].tolist()) for part in np.array_split(order, folds)]


def study_split(groups, *, folds: int, fraction: float, seed: int) -> tuple[list[list[str]], dict, str]:
    """(the held-out prompts of each fit: one list for one split, ``folds`` lists when cross-fitting; the split's
    record for the study's JSON; the remedy a refusal names) of the prompts ``groups`` (module docstring)."""
    if folds == 1:
        train_prompts, held = split_prompts(groups, fraction, seed)
        prompts = len(held) + len(train_prompts)
        record = {"rule": f"distinct prompts sorted, shuffled by numpy.random.default_rng({seed}), the first "
                          f"{len(held)} held out (round({fraction:g} x {prompts}), at least {MIN_HELD_OUT} from "
                          f"{FLOOR_PROMPTS} prompts)",
                  "prompts": prompts, "held_out_prompts": len(held), "held_out": held}
        return [held], record, "give another seed or held-out fraction"
    plan = fold_prompts(groups, folds, seed)
    prompts = sum(len(fold) for fold in plan)
    record = {"rule": f"cross-fitted: distinct prompts sorted, shuffled by numpy.random.default_rng({seed}), cut "
                      f"into {folds} folds of {min(map(len, plan))}-{max(map(len, plan))} prompts, each fold held out "
                      "once, its roots' policies fitted on the other folds",
              "prompts": prompts, "held_out_prompts": prompts, "held_out": sorted(sum(plan, [])), "folds": plan}
    return plan, record, "give fewer folds"


def held_out(dataset, selector, *, name: str = "the selector", source: str = "the dataset"):
    """(training roots, held-out roots) of ``dataset`` for a trained ``selector``: the split recorded in it,
    checked against its training groups and, when it recorded them, its training roots
    (``verispec.selector.fits``: a selector trained on another dataset, or another split, is refused)."""
    from verispec.selector.actions import SelectorError
    from verispec.selector.fits import DATASET_FIX, check_train_roots

    meta = selector.metadata
    if "test_fraction" not in meta or "train_groups" not in meta:
        raise SelectorError("the selector records no train/test split; train it with 'verispec selector train'")
    train, test = dataset.split(float(meta["test_fraction"]), int(meta["split_seed"]))
    if sorted(set(train.group.tolist())) != list(meta["train_groups"]):
        raise SelectorError(f"{name} was trained on other roots than the training split of {source} (other prompts "
                            f"or seeds; it was trained on {meta.get('dataset')!r}); {DATASET_FIX}")
    check_train_roots(selector, train, name=name, source=source)
    return train, test


__all__ = ["FLOOR_PROMPTS", "MIN_HELD_OUT", "fold_prompts", "held_out", "held_out_count", "split_prompts",
           "study_split"]
