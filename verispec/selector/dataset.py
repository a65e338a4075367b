"""Labelled roots for the delay selector: features at a block's root and E[tau + 1] of every action there.

The DDTE paper (Thomas et al. 2026, arXiv 2602.16994, Sec. 6 and Appendix E) trains its selector on roots taken
every 16 tokens of offline decoding traces, each labelled with its Eq. 3 estimate for every action. Here:

* A *root* (``Root``) is a context whose last token is the root of the next block: token ids of a model pair's
  trace (``trace_roots``: plain target sampling, ``verispec.models.sample_target``, a root every ``every``
  tokens), or a prefix of a seeded synthetic problem of the sweep families (``synthetic_roots``). Each root has
  a *group* (its prompt, or its problem's seed: the train/test split is by group, since the roots of one trace
  are not independent) and a sampling setting.
* Its *features* are the paper's scalars (``verispec.selector.features``) from p_prev and q_prev (the target's
  and draft's laws before the root token: after ``context[:-1]``) and q_root (the draft's law after the root).
* Its *labels* (``verispec.selector.labels``) are computed on the problem continued after the whole context
  (for a pair: a ``ModelProblem``; for a synthetic root: the problem shifted by its prefix).

``build_dataset`` runs through the study's executor and save loop (``verispec.study.executor``): every root's
row is kept in a ``ResultStore`` (``OUT.roots.json``) keyed on the root and recording every other parameter
(grid and its action list, method, samples, seed, epsilon, latency, features), so an interrupted or extended build
computes only the roots it lacks and never holds a root twice. Synthetic roots run serially, on local processes, or
on a Dask or Ray cluster, and so do a pair's roots, a group at a time, each worker loading the pair once (serially,
in this process, where the pair is loaded already). The dataset is one ``.npz`` file
(``verispec.selector.dataset_file``), written atomically.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from verispec.errors import ProblemTooLargeError, ResultStoreError, describe
from verispec.files.io import check_inside, check_output, check_output_file, unpack_floats
from verispec.guard import budget
from verispec.selector.actions import open_grid_store
from verispec.selector.dataset_file import DATASET_FILE, DATASET_FORMAT, DATASET_VERSION, Dataset, DatasetError
from verispec.selector.hidden_states import collect_hidden_states
from verispec.selector.labelling import (
    check_pair_workers,
    label_pair_tasks,
    label_roots,
    label_tasks,
    release_group_laws,
)
from verispec.selector.roots import (
    Root,
    _sampling_dict,
)

#: Label methods ``build_dataset`` accepts ("auto": exact for synthetic roots, falling back to conditional where
#: the exact engine refuses, and conditional for the roots of a pair).
BUILD_METHODS = ("auto", "exact", "certified", "conditional")

def check_dataset_output(out: str | Path, *, overwrite: bool = False, in_place: bool = False) -> Path:
    """The row store of the dataset ``out``, after refusing on one line, before any work, an output that cannot be
    written or that is not this tool's: a file without its row store (a rerun could not resume it) or one that
    is not a dataset verispec wrote (``DATASET_FILE``: no ``written_by`` marker), unless ``overwrite``; a link in
    place of the row store (a file the user did not name) is refused even then. ``in_place`` (``--relabel``: the
    command reads ``out`` and writes it back with some labels replaced, the user naming it as the file to
    change): a dataset of the format suffices, so that datasets written before the marker can be relabelled."""
    out = Path(out)
    store_file = store_path(out)
    check_inside(out.parent, store_file, "the dataset's row store")
    check_output_file(store_file, "the dataset's row store")
    if out.exists() and not store_file.exists() and not overwrite:
        raise DatasetError(f"{str(out)!r} exists without its row store {str(store_file)!r}, so a rerun cannot resume "
                           "it; pass overwrite (--overwrite) to replace it, or choose another output")
    kind = dataclasses.replace(DATASET_FILE, marked=DATASET_FILE.recognise) if in_place else DATASET_FILE
    check_output(out, kind, what="the dataset", overwrite=overwrite, error=DatasetError)
    return store_file


def trace_store_path(out: str | Path) -> Path:
    """Where ``verispec selector dataset`` keeps the finished traces of ``out``: ``OUT.traces.json``."""
    return Path(out).with_name(Path(out).name + ".traces.json")


def store_path(out: str | Path) -> Path:
    """Where ``build_dataset`` keeps the rows of ``out`` while it runs: ``OUT.roots.json``."""
    return Path(out).with_name(Path(out).name + ".roots.json")


def check_label_costs(roots: Sequence[Root], grid, method: str, *, pair=None, samples: int = 4,
                      note=None) -> set[tuple]:
    """Before the first root is labelled, what its labels cost at each kind of root (a synthetic family at its V,
    or a pair's vocabulary: ``ProblemShape``), by the engine's estimate of every action, summed
    (``label_estimates``), against what one root (a cell of the build) may take, ``MAX_CELL_SECONDS`` and
    ``MAX_CELL_BYTES`` (``verispec.study.cells``). Where it is out of reach, 'exact' and 'certified' are refused on one
    line naming the costliest action and the options to change, and 'auto' labels those roots conditional-exact
    at once (as it does where the engine refuses a tree) with a one-line ``note``: the default grid's deep chains
    at V = 3 ran for minutes and gigabytes a root before falling back, and certified labels of traversal on them
    for hours. Returns the kinds (family, V) or (pair, V) to label conditional-exact. At a pair's roots the model
    forwards are not counted, and certified labels not estimated (their search stops where the pair's mass is,
    which no bound before it tells); 'auto' labels a pair's roots conditional-exact in any case."""
    from verispec.selector.labels import label_estimates
    from verispec.simulator.engine import ProblemShape, readable_cost
    from verispec.study.cells import MAX_CELL_BYTES, MAX_CELL_SECONDS, family_shape

    if method not in ("exact", "auto", "certified"):
        return set()
    kind_of_labels = "certified" if method == "certified" else "exact"
    kinds = {}
    for root in roots:
        if root.pair is not None:
            if method == "exact":
                kinds.setdefault((root.pair, pair.vocab_size), ProblemShape(pair.vocab_size))
        else:
            family, vocab = root.problem["family"], int(root.problem["vocab"])
            kinds.setdefault((family, vocab), family_shape(family, vocab))
    conditional = set()
    for (name, vocab), shape in kinds.items():
        where = f"{kind_of_labels} labels of {name} roots at V={vocab}"
        options = ("use --method conditional (or auto), or smaller --ks, --l1s, --l2s"
                   + ("" if name in {root.pair for root in roots} else " or --vocab")
                   + (", or a larger --epsilon" if method == "certified" else ""))
        try:
            estimates = label_estimates(shape, grid, kind_of_labels)
        except ProblemTooLargeError as error:
            if method != "auto":
                raise DatasetError(f"{where} cannot be computed: {' '.join(str(error).split())}; {options}") from None
            conditional.add((name, vocab))
            if note is not None:
                note(f"{where} are out of the engine's reach ({' '.join(str(error).split())}); labelling them "
                     f"conditional-exact ({samples} sampled trees a root), as --method auto does")
            continue
        seconds = sum(estimate.seconds for _, estimate in estimates)
        memory = max(estimate.bytes for _, estimate in estimates)
        if seconds <= MAX_CELL_SECONDS and memory <= MAX_CELL_BYTES:
            continue
        action, estimate = max(estimates, key=lambda item: (item[1].bytes > MAX_CELL_BYTES, item[1].seconds))
        cost = (f"about {readable_cost(seconds, memory)} a root (the costliest action: "
                f"{action.verifier} on {action.tree}, {estimate.describe()}), above the {MAX_CELL_SECONDS:g} s and "
                f"{MAX_CELL_BYTES / 2**30:g} GiB a root of a build may take")
        if method != "auto":
            raise DatasetError(f"{where} are estimated at {cost}; {options}")
        conditional.add((name, vocab))
        if note is not None:
            note(f"{where} would take {cost}; labelling them conditional-exact ({samples} sampled trees a root), "
                 "as --method auto does where exact labels are out of reach")
    return conditional


def build_dataset(roots: Sequence[Root], grid, *, method: str = "auto", samples: int = 4, epsilon: float = 0.01,
                  out: str | Path, latency, pair=None, backend: str = "serial", jobs: int | None = None,
                  address=None, progress: bool = False, overwrite: bool = False, seed: int = 0,
                  hidden: bool = False, note=None, root_batch: int = 1) -> Dataset:
    """Label every root (``label_root``) for every action of ``grid`` and write the dataset to ``out``.

    Rows are kept in the row store ``OUT.roots.json`` (a ``ResultStore`` keyed on each root, recording every other
    parameter), saved every few seconds and on any interruption, so a rerun computes only the roots it lacks: each
    root appears once in the file whatever was interrupted (a root given twice is labelled once). ``out`` itself is
    rewritten atomically at the end, its roots in the order given. Roots run on ``backend`` ('serial', 'local' with
    ``jobs`` processes at most the cores, 'dask' at ``address`` or 'local:N', 'ray'): a pair's roots in this
    process on ``pair`` when serial, else a group a task on workers that each load the pair from ``pair.source``
    once (``label_pair_tasks``; refused first where this machine's free memory cannot hold a copy a worker:
    ``check_pair_workers``). An existing ``out`` without its row store is refused unless ``overwrite``,
    which starts over. ``latency`` prices the latency features. ``root_batch``: a pair's roots labelled together, in
    ``pair_root_groups``. ``hidden``: also keep each root's hidden states (``root_hidden``; a pair's roots only), in
    their own row store ``OUT.hidden.json`` (so a labelled build gains them without labelling again). Before the
    first root, exact labels out of a build's reach are refused ('exact') or labelled conditional-exact ('auto',
    with a one-line ``note``): ``check_label_costs``. The roots run through the study's executor and its one save
    loop (``verispec.study.executor``: ``execute``, ``save_as_they_arrive``). One writer per store: the build holds
    the store's lock (``verispec.files.store_lock``), and a second build of ``out`` is refused at start."""
    from verispec.files.store_lock import store_lock

    roots = list(roots)
    _check_build(roots, grid, method, samples, seed, epsilon, latency, pair, hidden, root_batch)
    root_batch = int(root_batch)
    out = Path(out)
    store_file = check_dataset_output(out, overwrite=overwrite)
    with store_lock(store_file):  # one writer of the store: a second build of ``out`` is refused before any root
        return _build_locked(roots, grid, method, samples, epsilon, out, store_file, latency, pair,
                             (backend, jobs, address), progress, overwrite, seed, hidden, note, root_batch)


def _build_locked(roots, grid, method, samples, epsilon, out, store_file, latency, pair, where, progress, overwrite,
                  seed, hidden, note, root_batch) -> Dataset:
    """``build_dataset`` once its outputs passed their checks and its row store is locked."""
    from verispec.selector.features import SCALAR_FEATURES
    from verispec.study.executor import execute, save_as_they_arrive
    from verispec.study.workers import worker_processes

    backend, jobs, address = where
    settings = {"method": method, "samples": int(samples), "seed": int(seed), "epsilon": float(epsilon),
                "latency": latency.as_dict()}
    parameters = {"kind": DATASET_FORMAT, **settings, "feature_names": list(SCALAR_FEATURES)}
    try:  # the rows' columns are the grid's actions: the store records them (``open_grid_store``)
        store = open_grid_store(store_file, parameters, grid, overwrite=overwrite)
    except ResultStoreError as error:
        raise DatasetError(f"{error} (or pass overwrite to start over)") from None

    keyed = dict((root.key(), root) for root in reversed(roots))  # the first of equal roots is kept, in order
    keys = list(dict.fromkeys(root.key() for root in roots))
    todo = [key for key in keys if not store.done(key)]
    # the costliest root, before the first one is labelled: 'exact' refused, 'auto' conditional where out of reach
    conditional = check_label_costs([keyed[key] for key in todo], grid, method, pair=pair, samples=int(samples),
                                    note=note)

    def method_of(root: Root) -> str:
        kind = (root.pair, pair.vocab_size) if root.pair is not None else (root.problem["family"],
                                                                            int(root.problem["vocab"]))
        return "conditional" if kind in conditional else method

    common = {name: value for name, value in settings.items() if name != "method"}
    tasks = [{"key": key, "root": keyed[key].as_dict(), "grid": grid.as_dict(), "actions": grid.action_names(),
              "method": method_of(keyed[key]), **common} for key in todo if keyed[key].kind == "synthetic"]
    groups = _pending_groups(pair_root_groups(keys, keyed, root_batch), store, lambda key: method_of(keyed[key]))
    pair_tasks = _pair_tasks(groups, keyed, grid, common, pair, backend, jobs, address)
    if tasks or pair_tasks:
        worker_processes(backend, jobs, address)  # refuses --address with a backend that runs here

    def batches():
        """The rows of the pair's roots (here when serial, else on the backend's workers), then the synthetic
        roots'."""
        if not pair_tasks:
            yield from _label_groups_here(groups, keyed, grid, settings, latency, pair)
        yield from execute(pair_tasks, backend, jobs, address, label_pair_tasks)
        yield from execute(tasks, backend, jobs, address, label_tasks)

    try:
        save_as_they_arrive(batches(), lambda row: row["key"], store.add_many, total=len(keys),
                            done=len(keys) - len(todo), desc="dataset roots", progress=progress)
    except ProblemTooLargeError as error:  # a rule's own limit at one root: the same build stops there again
        raise DatasetError(f"{' '.join(str(error).split())}; the {len(store.rows)} root(s) labelled before it are "
                           f"saved in {store_file.name}, but the same build stops here again: leave that rule out "
                           "of the grid's verifiers (--verifiers) or label a top-k sampling") from None
    states = collect_hidden_states(keys, keyed, pair, out, overwrite, progress) if hidden else None
    dataset = _dataset(keys, keyed, [store.rows[key] for key in keys], grid, settings, pair, states)
    dataset.save(out)
    return dataset


def _pair_tasks(groups, keyed: dict, grid, common: dict, pair, backend: str, jobs, address) -> list[dict]:
    """The tasks of a pair's pending ``groups`` on the backend's workers (none when serial: they label here), each
    worker loading the pair once (``label_pair_tasks``); refused first where the workers could not load it
    (``check_pair_workers``)."""
    if not groups or backend == "serial":
        return []
    threads = check_pair_workers(pair, backend, jobs, address)
    source = dataclasses.asdict(pair.source)
    return [{"keys": members, "roots": [keyed[key].as_dict() for key in members], "grid": grid.as_dict(),
             "actions": grid.action_names(), "method": name, **common, "pair": source, "threads": threads}
            for name, members in groups]


def _label_groups_here(groups, keyed: dict, grid, settings: dict, latency, pair):
    """The rows of a pair's pending ``groups`` labelled in this process, a group at a time (a group's rows saved
    together), the prompts' shared prefixes prefilled once (``SharedContext``)."""
    from verispec.models.problem import SharedContext

    shared = SharedContext(pair) if groups else None
    for name, members in groups:
        budget.check("the dataset build")  # --time-budget: the rows so far are saved, a rerun resumes
        try:
            rows = label_roots([keyed[key] for key in members], grid, method=name, samples=settings["samples"],
                               seed=settings["seed"], epsilon=settings["epsilon"], latency=latency, pair=pair,
                               shared=shared)
        except ProblemTooLargeError as error:
            first = keyed[members[0]]
            together = f", one of {len(members)} labelled together" if len(members) > 1 else ""
            raise ProblemTooLargeError(f"at a root of {first.group!r} ({len(first.context)} context tokens{together}): "
                                       f"{' '.join(str(error).split())}") from None
        yield [{"key": key, **row} for key, row in zip(members, rows)]
        release_group_laws(pair.vocab_size)


def _pending_groups(groups: list[list[str]], store, method_of: Callable[[str], str]) -> list[tuple[str, list[str]]]:
    """(method, keys) of the roots still to label, group by group of ``groups``, each group split by the method its
    roots take: what one ``label_roots`` call labels together."""
    pending = []
    for whole in groups:
        group = [key for key in whole if not store.done(key)]
        for name in dict.fromkeys(method_of(key) for key in group):
            pending.append((name, [key for key in group if method_of(key) == name]))
    return pending


def pair_root_groups(keys: list[str], keyed: dict, root_batch: int) -> list[list[str]]:
    """The keys of a build's pair roots in the groups ``build_dataset`` labels together (``label_roots``: each draft
    level of their combs one draft pass, the target once over all their combs), ordered by context so that roots
    sharing a prompt follow each other and the models' caches keep their common prefix. The groups are cut from
    every root of the build, not from those left to do, so a resumed build labels each root in the group an
    uninterrupted one would. Roots whose sampling filters (top-k, top-p below 1: sparse laws, small combs) go
    ``root_batch`` at a time; roots of unfiltered settings one at a time, since their laws are dense [V] float64
    (1.2 MB each at Qwen's vocabulary) and the rules over them, not the forwards, are their cost (on the Qwen pair
    at T = 1, 4 roots together peaked at 12.3 GB and 8 at 12.7 GB, against 11.6 GB for the models' load, for 7-15%
    less time a root)."""
    ordered = sorted((key for key in keys if keyed[key].kind == "model"), key=lambda key: keyed[key].context)
    groups = []
    for sparse in (True, False):
        chosen = [key for key in ordered if keyed[key].sampling.filters == sparse]
        size = int(root_batch) if sparse else 1
        groups += [chosen[first:first + size] for first in range(0, len(chosen), size)]
    return groups


def _check_build(roots: list[Root], grid, method: str, samples, seed, epsilon, latency, pair, hidden: bool,
                 root_batch=1) -> None:
    """Refuse on one line, before anything is built, arguments of ``build_dataset`` it cannot use."""
    if isinstance(root_batch, bool) or not isinstance(root_batch, (int, np.integer)) or not 1 <= root_batch <= 64:
        raise DatasetError(f"root_batch must be an integer from 1 to 64 (a pair's roots labelled together), got "
                           f"{root_batch!r}")
    from verispec.selector.actions import ActionGrid

    if not roots:
        raise DatasetError("the root set is empty; give at least one root (trace_roots or synthetic_roots)")
    for root in roots:
        if not isinstance(root, Root):
            raise DatasetError(f"a root is a verispec.selector.dataset.Root, got {type(root).__name__}")
    if not isinstance(grid, ActionGrid):
        raise DatasetError(f"grid must be an ActionGrid, got {type(grid).__name__}")
    if method in ("auto", "conditional"):
        from verispec.selector.combs import check_comb_size

        check_comb_size(grid)  # before any root is labelled
    if method not in BUILD_METHODS:
        raise DatasetError(f"unknown label method {method!r}; choose one of {', '.join(BUILD_METHODS)}")
    if isinstance(samples, bool) or not isinstance(samples, (int, np.integer)) or samples < 1:
        raise DatasetError(f"samples must be a positive integer, got {describe(samples)}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise DatasetError(f"seed must be a non-negative integer, got {describe(seed)}")
    if isinstance(epsilon, bool) or not isinstance(epsilon, (int, float)) or not 0 < epsilon < math.inf:
        raise DatasetError(f"epsilon must be a positive number, got {describe(epsilon)}")
    if not (hasattr(latency, "as_dict") and hasattr(latency, "target_time")):
        raise DatasetError(f"latency must be a verispec.latency.LatencyModel, got {type(latency).__name__}")
    pairs = sorted({root.pair for root in roots if root.pair is not None})
    if hidden and (not pairs or any(root.pair is None for root in roots)):
        raise DatasetError("hidden states come from a model pair; synthetic roots have none (leave hidden off)")
    if pairs and (pair is None or pairs != [pair.name]):
        raise DatasetError(f"the roots come from the pair(s) {', '.join(pairs)}; pass that one pair (got "
                           f"{'none' if pair is None else repr(pair.name)})")


def _dataset(keys: list[str], keyed: dict, rows: list[dict], grid, settings: dict, pair, states) -> Dataset:
    """The dataset of the stored ``rows`` of the roots ``keys`` (in that order), with the metadata of its build:
    ``settings`` (method, samples, seed, epsilon, latency), the pair's name and tokenizer, the sampling settings."""
    from verispec.selector.features import SCALAR_FEATURES
    from verispec.version import package_version

    samplings: list[dict] = []
    for key in keys:
        setting = _sampling_dict(keyed[key].sampling)
        if setting not in samplings:
            samplings.append(setting)
    from_pair = any(keyed[key].pair is not None for key in keys)
    vocab_sizes = sorted({pair.vocab_size} if from_pair else {int(keyed[key].problem["vocab"]) for key in keys})
    tokenizer = getattr(getattr(pair, "tokenizer", None), "name_or_path", None) if from_pair else None
    metadata = {"format": DATASET_FORMAT, "version": DATASET_VERSION, "grid": grid.as_dict(),
                "actions": grid.action_names(), "feature_names": list(SCALAR_FEATURES),
                "pair": pair.name if from_pair else None,
                "tokenizer": tokenizer, "vocab_size": vocab_sizes[0] if len(vocab_sizes) == 1 else None,
                "samplings": samplings, **settings, "verispec": package_version(), "roots": len(keys),
                "families": sorted({keyed[key].problem["family"] for key in keys if keyed[key].problem}),
                "label_seconds": float(sum(row.get("seconds", 0.0) for row in rows))}
    def arrays(name: str) -> list:
        return [unpack_floats(row[name]) for row in rows]

    return Dataset(features=[row["features"] for row in rows], efficiency=arrays("efficiency"),
                   stderr=arrays("stderr"), lower=arrays("lower"), upper=arrays("upper"),
                   group=[row["group"] for row in rows],
                   setting=[samplings.index(_sampling_dict(keyed[key].sampling)) for key in keys],
                   context_length=[row["context_length"] for row in rows],
                   label_method=[row["label_method"] for row in rows], key=keys, metadata=metadata,
                   per_sample=_per_sample(rows, len(grid)), hidden=states)


def _per_sample(rows: list[dict], actions: int) -> np.ndarray | None:
    """[N, S, A] of the rows' per-tree values (NaN where a root has fewer trees or exact labels); None when no
    root has two trees (nothing to cross-fit)."""
    values = [None if row.get("per_sample") is None else unpack_floats(row["per_sample"]) for row in rows]
    counts = [0 if value is None else len(value) for value in values]
    if max(counts) < 2:
        return None
    out = np.full((len(rows), max(counts), actions), np.nan)
    for index, value in enumerate(values):
        if counts[index]:
            out[index, :counts[index]] = value
    return out


__all__ = ["BUILD_METHODS", "build_dataset", "check_dataset_output", "check_label_costs", "pair_root_groups",
           "store_path", "trace_store_path"]
