"""The one executor of builds of many cells, and the one loop that saves their rows as they arrive.

``execute`` runs tasks through an existing engine, never a home-made pool: serially in this process,
``concurrent.futures.ProcessPoolExecutor`` on local cores, a Dask cluster (``distributed.Client``; 'local:N'
starts one here) or a Ray cluster, never starting more processes here than there are cores
(``verispec.study.workers.worker_processes``). ``save_as_they_arrive`` consumes its batches and saves the rows
every ``SAVE_EVERY`` seconds and whenever the build ends, interrupted or not, so that a rerun resumes from every
finished row. A sweep's cells (``verispec.study.sweep.run_sweep``, and through it the report's studies) and a
selector dataset's roots (``verispec.selector.dataset.build_dataset``) both run through these two.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Callable, Generator

from verispec.guard.limits import BACKENDS
from verispec.study.clusters import dask_client, ray_session
from verispec.study.grid import SweepError
from verispec.study.workers import local_workers, stop_pool, watch_parent

#: Seconds between saves of the rows while they arrive (and after the last); at least ``SAVE_SHARE`` times the
#: last save took, so that rewriting a large store (the report's studies share one) takes at most about
#: 1/SAVE_SHARE of the time.
SAVE_EVERY = 2.0
SAVE_SHARE = 10

#: Tasks handed to each worker of a pool or cluster: cells are milliseconds each, so they travel in chunks
#: (a task per cell spends more on scheduling than on the cell), yet enough chunks to balance the load.
TASKS_PER_WORKER = 8


def _chunks(cells: list[dict], workers: int) -> list[list[dict]]:
    """Contiguous chunks (neighbouring cells share problems and LP optima), TASKS_PER_WORKER per worker."""
    count = max(1, min(len(cells), workers * TASKS_PER_WORKER))
    size = -(-len(cells) // count)
    return [cells[start:start + size] for start in range(0, len(cells), size)]


def execute(tasks: list, backend: str, jobs: int | None, address, run_chunk: Callable[[list], list[dict]]
            ) -> Generator[list[dict], None, None]:
    """Results of ``tasks`` in batches, as the batches finish, in any order: ``run_chunk`` (a module-level
    function, so that it travels to processes and clusters) maps a chunk of tasks to their rows, serially in
    this process, on a pool of local processes capped at the cores, on a Dask cluster or on Ray: a sweep's cells
    (``verispec.study.cells.run_cells``), a selector dataset's roots (``verispec.selector.labelling.label_tasks``,
    ``label_pair_tasks``).

    A generator: close it (``contextlib.closing``) when the loop over it ends early. Ended by an exception (a
    ``BuildInterrupted`` from SIGTERM or Ctrl-C included) or closed, it stops the work it started: a local pool's
    workers are ended, their running tasks too (``stop_pool``), a Dask client's futures and Ray's tasks are
    cancelled, and a cluster started here (Dask's local:N, a local Ray) is shut down with its processes. Local
    workers also end on their own when this process dies (``watch_parent``)."""
    if not tasks:
        return
    if backend == "serial":
        for task in tasks:
            yield run_chunk([task])
    elif backend == "local":
        from concurrent.futures import ProcessPoolExecutor, as_completed

        workers, _ = local_workers(jobs)
        pool = ProcessPoolExecutor(max_workers=workers, initializer=watch_parent, initargs=(os.getpid(),))
        try:
            for future in as_completed([pool.submit(run_chunk, chunk) for chunk in _chunks(tasks, workers)]):
                yield future.result()
        except BaseException:
            stop_pool(pool)
            raise
        pool.shutdown()
    elif backend == "dask":
        try:
            from distributed import as_completed
        except ImportError:
            raise SweepError("--backend dask needs dask's scheduler: pip install 'dask[distributed]'") from None
        with dask_client(address) as client:
            workers = max(1, len(client.scheduler_info().get("workers", {})))
            futures = client.map(run_chunk, _chunks(tasks, workers), pure=False)
            try:
                for future in as_completed(futures):
                    yield future.result()
            except BaseException:
                client.cancel(futures)
                raise
    elif backend == "ray":
        with ray_session(address):
            import ray

            remote = ray.remote(run_chunk)
            workers = max(1, int(ray.cluster_resources().get("CPU", 1)))
            pending = [remote.remote(chunk) for chunk in _chunks(tasks, workers)]
            try:
                while pending:
                    finished, pending = ray.wait(pending, num_returns=1)
                    yield ray.get(finished[0])
            except BaseException:
                for reference in pending:
                    ray.cancel(reference, force=True)
                raise
    else:
        raise SweepError(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")


def save_as_they_arrive(batches: Generator[list[dict], None, None], key: Callable[[dict], str],
                        save: Callable[[dict[str, dict]], None], *, total: int, done: int, desc: str,
                        progress: bool) -> None:
    """Consume ``batches`` of rows (``execute``'s, say) as they arrive and hand ``save`` the rows that arrived
    since its last call, by ``key(row)``: every ``SAVE_EVERY`` seconds (or ``SAVE_SHARE`` times as long as the last
    save took, if longer), once after the last batch, and, when the loop ends by an exception (a
    ``BuildInterrupted`` from SIGTERM or Ctrl-C included), once more after ``batches`` is closed (its workers
    stopped) with what arrived, before the exception goes on. A store keyed on ``key`` thus holds each finished
    row once: a rerun that computes only the keys it lacks neither duplicates nor drops a row, whether the build
    was interrupted (every arrived row saved) or killed outright (the rows since the last save computed again).
    ``total`` and ``done``: the rows of the build and those already in the store, for the progress bar."""
    from tqdm import tqdm

    pending: dict[str, dict] = {}
    last, interval = time.monotonic(), SAVE_EVERY
    try:
        with tqdm(total=total, initial=done, desc=desc, disable=not progress, file=sys.stderr) as bar, \
                contextlib.closing(batches):
            for rows in batches:
                for row in rows:
                    pending[key(row)] = row
                bar.update(len(rows))
                if time.monotonic() - last >= interval:
                    began = time.monotonic()
                    save(pending)
                    pending, last = {}, time.monotonic()
                    interval = max(SAVE_EVERY, SAVE_SHARE * (last - began))
    except BaseException:  # interrupted (SIGTERM, Ctrl-C) or failed: the rows that arrived are kept, to resume
        if pending:
            save(pending)
        raise
    save(pending)


__all__ = ["execute", "save_as_they_arrive"]
