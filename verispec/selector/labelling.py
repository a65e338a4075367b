"""Labelling the delay selector's roots: one root (``label_root``), a group of a pair's roots together
(``label_roots``: their models' passes shared), and the same as tasks of a pool or cluster (``label_tasks`` for
synthetic roots, ``label_pair_tasks`` for a pair's groups, each worker loading the pair once). Building a dataset
from the rows (the row store, resuming, the ``.npz`` file) is ``verispec.selector.dataset``'s."""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Sequence

import numpy as np

from verispec.errors import ProblemTooLargeError, VerifierError
from verispec.files.io import pack_floats
from verispec.guard.memory import trim_heap
from verispec.selector.dataset_file import DatasetError
from verispec.selector.roots import Root, _derived_seed
from verispec.simulator.problems import Problem, ShiftedProblem

# --- one root -------------------------------------------------------------------------------------------------


def root_problem(root: Root, depth: int, pair=None, shared=None) -> tuple[Problem, Callable[[], tuple]]:
    """(the problem after the root's whole context, ``laws``) of one root, where ``laws()`` gives (p_prev, q_prev,
    q_root) [V] each; ``depth`` is the deepest tree to be labelled (the table depth of a random per-prefix
    problem). At a pair's root p_prev is computed with the target's first forward over the labels' combs (read
    ``laws()`` after labelling to save a forward), and ``shared`` (a ``SharedContext``) hands the problem the
    previous root's caches (their common context prefix is not fed again)."""
    if root.pair is not None:
        problems, _ = root_problems([root], depth, pair, shared)
        return problems[0]
    from verispec.study.cells import build_problem

    prefix = root.context
    base = build_problem(dict(root.problem), len(prefix) + depth)
    laws = (np.asarray(base.target(prefix[:-1]), dtype=np.float64), np.asarray(base.draft(prefix[:-1]),
            dtype=np.float64), np.asarray(base.draft(prefix), dtype=np.float64))
    return ShiftedProblem(base, prefix), lambda: laws


def root_problems(roots: Sequence[Root], depth: int, pair, shared=None):
    """``root_problem`` of several roots of ``pair`` at once: ([(problem, laws)], together), the problems those of
    one ``ProblemPack`` (their contexts side by side in one cache a model; ``shared`` prefills each context's
    tokens that the previous one's lacks), so that the model forwards asked for inside ``together()`` run as one
    pass for all of them. The draft is fed each root's last two context tokens in one pass (its combs grow from
    the root), and p_prev rides with the target's first pass."""
    from verispec.models.problem import ProblemPack

    for root in roots:
        if root.pair is None or pair is None or pair.name != root.pair:
            raise DatasetError(f"the root of group {root.group!r} comes from the pair {root.pair!r}; pass that pair "
                               f"(got {'none' if pair is None else repr(pair.name)})")
    pack = ProblemPack(pair, [list(root.context[:-1]) for root in roots], [root.sampling for root in roots],
                       shared=shared)
    with pack.together():
        for base, root in zip(pack.problems, roots):
            base.extend_drafts([(), (root.context[-1],)])  # the draft keeps both nodes: its combs grow from the root
            base.defer([()])
    return [_pair_root_problem(base, root.context[-1]) for base, root in zip(pack.problems, roots)], pack.together


def _pair_root_problem(base, last: int) -> tuple[Problem, Callable[[], tuple]]:
    return ShiftedProblem(base, (last,)), lambda: (np.asarray(base.target(())), np.asarray(base.draft(())),
                                                   np.asarray(base.draft((last,))))


def label_root(root: Root, grid, *, method: str, samples: int, seed: int, epsilon: float, latency,
               pair=None, shared=None) -> dict:
    """The row of one root: its features, its labels for every action of ``grid`` and how they were computed.
    The conditional estimator's seed is derived from ``seed`` and the root, so a root gets the same labels
    whichever other roots are built with it."""
    if root.pair is not None:
        return label_roots([root], grid, method=method, samples=samples, seed=seed, epsilon=epsilon, latency=latency,
                           pair=pair, shared=shared)[0]
    start = time.perf_counter()
    problem, laws = root_problem(root, grid.max_depth)
    return _row(root, laws, lambda: _labels(problem, root, grid, method, samples, seed, epsilon), latency, start)


def label_roots(roots: Sequence[Root], grid, *, method: str, samples: int, seed: int, epsilon: float, latency, pair,
                shared=None) -> list[dict]:
    """The rows of several roots of ``pair`` (``label_root`` each), labelled together: their problems one
    ``ProblemPack``, and conditional labels drawn level by level in lockstep, so each draft level of all their combs
    is one draft pass and the target runs once over all their combs (``conditional_exact_labels_together``). Each
    root draws from its own derived seed: its labels are those it gets alone, up to the rounding of the larger
    passes. A row's ``seconds`` is the group's time shared equally, ``batch`` the group's size."""
    from verispec.selector.labels import conditional_exact_labels_together

    roots = list(roots)
    start = time.perf_counter()
    problems, together = root_problems(roots, grid.max_depth, pair, shared)
    wanted = [_wanted_method(root, method) for root in roots]
    if all(name == "conditional" for name in wanted):
        try:
            labels = conditional_exact_labels_together(
                [problem for problem, _ in problems], grid, samples=samples,
                seeds=[_derived_seed("labels", int(seed), root.key()) for root in roots], together=together)
        except VerifierError:  # NaN laws (a filter with no mass left) break a rule first: the features name them
            for root, (_, laws) in zip(roots, problems):
                _features(root, laws, latency)
            raise
        computed = dict(zip((root.key() for root in roots), labels))
    else:
        computed = {}
    def labelled(root: Root, problem):
        if root.key() in computed:
            return computed[root.key()]
        return _labels(problem, root, grid, method, samples, seed, epsilon)

    rows = [_row(root, laws, lambda root=root, problem=problem: labelled(root, problem), latency, start)
            for root, (problem, laws) in zip(roots, problems)]
    seconds = time.perf_counter() - start
    for row in rows:
        row["seconds"], row["batch"] = seconds / len(rows), len(rows)
    return rows


def _features(root: Root, laws, latency) -> np.ndarray:
    from verispec.selector.actions import SelectorError
    from verispec.selector.features import scalar_features

    try:
        return scalar_features(*laws(), context_length=len(root.context), sampling=root.sampling, latency=latency)
    except SelectorError as error:
        raise DatasetError(f"root of group {root.group!r} at context length {len(root.context)}: {error}") from None


def _row(root: Root, laws, labelled: Callable, latency, start: float) -> dict:
    """A root's row from its labels (``labelled()``) and its features (read after the labels: a pair's p_prev came
    with their first target forward)."""
    try:
        labels = labelled()
    except VerifierError:  # NaN laws (a filter with no mass left) break a rule first: the features name them
        _features(root, laws, latency)
        raise
    row = _features(root, laws, latency).tolist()
    if not np.isfinite(labels.efficiency).all():
        raise DatasetError(f"root of group {root.group!r}: a label is not finite (NaN laws at the root?)")
    # arrays packed (every bit kept): a root of 7 rules' grid holds 476 actions x (4 + m) values
    return {"features": row, **{name: pack_floats(getattr(labels, name)) for name in
                                ("efficiency", "stderr", "lower", "upper")},
            "label_method": labels.method, "context_length": len(root.context), "group": root.group,
            "per_sample": None if labels.per_sample is None else pack_floats(labels.per_sample),
            "seconds": time.perf_counter() - start}


def _wanted_method(root: Root, method: str) -> str:
    """The method a root's labels are first tried with ('auto': exact for a synthetic root, else conditional)."""
    if method == "auto":
        return "exact" if root.kind == "synthetic" else "conditional"
    return method


def _labels(problem, root: Root, grid, method: str, samples: int, seed: int, epsilon: float):
    """The root's labels by ``method`` ('auto': exact for a synthetic root where the engine takes it, else
    conditional-exact)."""
    from verispec.selector.labels import certified_labels, conditional_exact_labels, exact_labels

    wanted = _wanted_method(root, method)
    labels = None
    if wanted == "exact":
        try:
            labels = exact_labels(problem, grid)
        except ProblemTooLargeError:
            if method != "auto":
                raise
            wanted = "conditional"
    if wanted == "certified":
        labels = certified_labels(problem, grid, epsilon)
    if wanted == "conditional":
        labels = conditional_exact_labels(problem, grid, samples=samples,
                                          seed=_derived_seed("labels", int(seed), root.key()))
    return labels


def _label_task(task: dict) -> dict:
    """One root of a worker (plain data in, plain data out: it travels to processes and clusters)."""
    from verispec.latency import LatencyModel
    from verispec.selector.actions import ActionGrid

    grid = ActionGrid.from_dict(task["grid"], task["actions"])  # the build's actions, not a re-derivation
    row = label_root(Root.from_dict(task["root"]), grid, method=task["method"], samples=task["samples"],
                     seed=task["seed"], epsilon=task["epsilon"], latency=LatencyModel.from_dict(task["latency"]))
    return {"key": task["key"], **row}


def label_tasks(tasks: list[dict]) -> list[dict]:
    """The rows of a chunk of roots, in order (one task of a pool or cluster)."""
    return [_label_task(task) for task in tasks]


#: The smallest vocabulary whose labelled groups are followed by a full collection (``release_group_laws``).
COLLECT_FROM_VOCAB = 1024


def release_group_laws(vocab_size: int) -> None:
    """After a pair's group of roots is labelled: a root's model problem holds its laws (up to 2 GiB a root at Qwen's
    vocabulary) in reference cycles that only a full collection frees, and big arrays do not trigger one (a 96-root
    Qwen build grew to 24 GB and was killed without it), so collect and give the freed heap back (2-3 GB a root).
    Below ``COLLECT_FROM_VOCAB`` the laws are kilobytes, which the collector's own passes free in time, while a full
    collection walks every live object (about 0.1 s a group in a test process)."""
    if vocab_size >= COLLECT_FROM_VOCAB:
        gc.collect()
        trim_heap()


#: The pair a worker process has loaded for pair tasks ({"source", "pair", "shared"}): loaded on its first task and
#: kept for the next ones (a Qwen pair is 9.6 GB of float32 weights and 20 s to load), one pair at a time.
_WORKER_PAIR: dict = {}


def _worker_pair(source: dict, threads: int | None):
    """(the pair of ``source`` (a ``PairSource`` as a dict), its ``SharedContext``), loaded once in this process."""
    import os

    import torch

    from verispec.models.pair import PairSource
    from verispec.models.problem import SharedContext

    wanted = PairSource(**source)
    if _WORKER_PAIR.get("source") != wanted:
        _WORKER_PAIR.clear()
        gc.collect()
        os.environ.setdefault("HF_HUB_OFFLINE", "1")  # a worker, like the command, never reaches a model hub
        if threads is not None:
            torch.set_num_threads(int(threads))
        pair = wanted.load()
        _WORKER_PAIR.update(source=wanted, pair=pair, shared=SharedContext(pair))
    return _WORKER_PAIR["pair"], _WORKER_PAIR["shared"]


def label_pair_tasks(tasks: list[dict]) -> list[dict]:
    """The rows of a chunk of pair tasks (one task of a pool or cluster): each task a group of a pair's roots that
    ``label_roots`` labels together, in this worker's copy of the pair (``_worker_pair``). Plain data in and out,
    as ``label_tasks``; the same groups, seeds and methods as the build's own process would use, so the rows are
    those of a serial build (up to the rounding of another thread count)."""
    from verispec.latency import LatencyModel
    from verispec.selector.actions import ActionGrid

    rows = []
    for task in tasks:
        pair, shared = _worker_pair(task["pair"], task["threads"])
        roots = [Root.from_dict(root) for root in task["roots"]]
        grid = ActionGrid.from_dict(task["grid"], task["actions"])  # the build's actions, not a re-derivation
        labelled = label_roots(roots, grid, method=task["method"], samples=task["samples"], seed=task["seed"],
                               epsilon=task["epsilon"], latency=LatencyModel.from_dict(task["latency"]), pair=pair,
                               shared=shared)
        rows += [{"key": key, **row} for key, row in zip(task["keys"], labelled)]
        release_group_laws(pair.vocab_size)  # as the build's own process does after a group
    return rows


#: A worker's memory beyond its copy of the pair's weights while it labels, as a share of them (a Qwen root group
#: peaked at 11.8 GB against 9.6 GB of weights).
PAIR_WORKER_OVERHEAD = 0.25


def check_pair_workers(pair, backend: str, jobs: int | None, address) -> int | None:
    """Refuse on one line, before any worker starts, a build whose pair roots would run on workers that cannot
    load the pair: a pair built in memory (no ``source``), or more workers on this machine than its free memory
    holds copies of the pair (each worker process loads its own: ``PAIR_WORKER_OVERHEAD`` more while labelling).
    Returns the torch threads each local worker gets (this process's threads shared among them), None for a
    cluster's workers (their own default)."""
    import torch

    from verispec.guard.memory import available_memory_bytes
    from verispec.study.workers import available_cores, is_local_cluster, worker_processes

    if getattr(pair, "source", None) is None:
        raise DatasetError(f"the pair {pair.name!r} was built in memory, so worker processes cannot load it; label "
                           "its roots with backend 'serial' (in this process), or load it with load_pair")
    workers, _ = worker_processes(backend, jobs, address)
    here = backend == "local" or (backend == "dask" and is_local_cluster(address)) or \
        (backend == "ray" and address is None)
    if here:
        workers = workers or available_cores()
        each = pair.weight_bytes * (1 + PAIR_WORKER_OVERHEAD)
        free = available_memory_bytes()
        if free is not None and workers * each > free:
            fits = int(free // each)
            fix = f"give --jobs {fits} or --backend serial" if fits >= 1 and backend == "local" else \
                "give --backend serial"
            raise DatasetError(f"{workers} worker processes here would each load the pair {pair.name!r} "
                               f"({pair.weight_bytes / 1e9:.1f} GB of weights, about {each / 1e9:.1f} GB while "
                               f"labelling), {workers * each / 1e9:.1f} GB in all, but {free / 1e9:.1f} GB is free; "
                               f"{fix} (the pair already loaded labels in this process)")
    return max(1, torch.get_num_threads() // workers) if backend == "local" else None


__all__ = ["PAIR_WORKER_OVERHEAD", "check_pair_workers", "label_pair_tasks", "label_root", "label_roots",
           "label_tasks", "root_problem", "root_problems"]
