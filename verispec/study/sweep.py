"""Sweeps: exact analyses over a grid of problems, draft trees, verifiers and methods, one tidy row per cell.

``run_sweep`` runs the cells of a ``SweepGrid`` (``verispec.study.grid``; each cell is ``run_cell`` of
``verispec.study.cells``) through the one executor (``verispec.study.executor``: serially, on local processes, a
Dask or a Ray cluster) and keeps them in a ``ResultStore`` keyed on every parameter of the cell: an interrupted or
extended sweep computes only the cells it has not finished, and several sweeps may share one store (the report's
studies do), so that no cell is computed twice. The tidy table (``verispec.study.tables``) holds the cells of the
grid just run, in grid order, and is rewritten atomically as rows arrive; rows of other grids stay in the store
only (``SweepRows.elsewhere`` counts them).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from pathlib import Path

from verispec.files.io import ResultStore, check_inside, check_output_file
from verispec.files.store_lock import store_lock
from verispec.guard.limits import BACKENDS
from verispec.study.cells import check_cell_costs, run_cells
from verispec.study.confined_cells import needs_confinement, run_cells_confined
from verispec.study.executor import execute, save_as_they_arrive
from verispec.study.grid import SweepError, SweepGrid, cell_key
from verispec.study.tables import check_sweep_output, check_sweep_table, output_format, store_path, write_table
from verispec.study.workers import worker_processes


class SweepRows(list):
    """The rows of a sweep's grid in grid order (a list), with what the run did: ``skipped`` cells left out
    because the (verifier, tree) pair is invalid for the verifier's draft law, ``computed`` cells run now,
    ``reused`` rows read back from the store, and ``elsewhere`` rows of the store that are not cells of this grid
    (earlier grids, or other sweeps sharing the store): kept in the store, not in the table. ``keys``: the
    store's key of each row (``cell_key``), in the same order."""

    keys: list[str]
    skipped: int = 0
    computed: int = 0
    reused: int = 0
    elsewhere: int = 0


def run_sweep(grid: SweepGrid, output: str | Path, *, backend: str = "local", jobs: int | None = None,
              address=None, progress: bool = True, overwrite: bool = False, store: ResultStore | None = None,
              note: Callable[[str], None] | None = None, within: str | Path | None = None) -> SweepRows:
    """Run every cell of ``grid`` not yet in the row store and return the grid's rows in grid order.

    ``output`` ends in .csv or .parquet and holds the cells of ``grid`` only, rewritten on every run; the rows
    are kept in a ``ResultStore``, by default ``<output>.cells.json``, or ``store`` (one opened by
    ``open_sweep_store``, which several sweeps may share), so that a later run with this or another grid
    resumes: rows of other grids stay in the store, not in the table (``SweepRows.elsewhere`` counts them).
    ``backend``: 'serial', 'local' (``jobs`` processes, default and at most the cores here), 'dask' (``address``
    of a scheduler, 'local:N' for N worker processes here, at most the cores, or a ``distributed.Client``) or
    'ray' (``address`` of a cluster, or None for a local one). An existing output that is not a sweep's is
    refused before any cell runs (``check_sweep_output``); ``overwrite`` replaces it and starts over (with
    ``store``, the table only: the store was opened with its own). ``note`` is called with a one-line note
    when the processes asked for are capped at the cores, once the outputs have passed their checks and before
    any cell runs. ``within``: the output folder the table must stay in (a report's: a link is refused).

    One writer per store: without ``store``, the run holds the lock of ``<output>.cells.json``
    (``verispec.files.store_lock``) from before the store is read to the end, and a second sweep of the same store is
    refused at start; with ``store``, its opener holds it (``Report``)."""
    output = Path(output)
    if backend not in BACKENDS:
        raise SweepError(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    if backend in ("dask",) and address is None:
        raise SweepError("--backend dask needs --address (a scheduler such as tcp://host:8786, or local:N for a "
                         "cluster of N worker processes started here)")
    if jobs is not None and (isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1):
        raise SweepError(f"jobs must be a positive integer, got {jobs!r}")
    _, capped = worker_processes(backend, jobs, address)  # refuses a malformed 'local:N' before any check
    cells, skipped = grid.cells()
    if not cells:
        raise SweepError("the grid has no cell: no verifier given is valid for any tree given")
    with contextlib.ExitStack() as stack:
        if store is None:
            output_format(output)  # a wrong suffix, an unwritable path: refused before the lock file is made
            check_output_file(output, "output", example="sweep.csv")
            check_inside(output.parent, store_path(output), "the row store")
            check_output_file(store_path(output), "the row store")
            stack.enter_context(store_lock(store_path(output)))
            store, table_format = check_sweep_output(output, overwrite=overwrite)
        else:
            table_format = check_sweep_table(output, store, overwrite=overwrite)
        return _run(grid, output, store, table_format, cells, skipped, (backend, jobs, address), progress,
                    (capped, note), within)


def _run(grid: SweepGrid, output: Path, store: ResultStore, table_format: str, cells: list, skipped: int,
         where: tuple, progress: bool, capped_note: tuple, within) -> SweepRows:
    """``run_sweep`` once its outputs passed their checks (and its store is locked)."""
    backend, jobs, address = where
    capped, note = capped_note
    if capped and note is not None:
        note(capped)
    # a row holds its cell's parameters and the results; a file's cell has one parameter more (file_sha256)
    parameters = set().union(*cells)
    keys = [cell_key(cell) for cell in cells]
    todo = [cell for cell, key in zip(cells, keys) if not store.done(key)]
    check_cell_costs(todo)  # the largest cell, before the first one runs

    def key_of(row: dict) -> str:
        return cell_key({name: value for name, value in row.items() if name in parameters})

    run_chunk = run_cells
    if backend in ("dask", "ray") and needs_confinement(todo):  # nobody's fork: the rule must not load there
        run_chunk = run_cells_confined
    save_as_they_arrive(execute(todo, backend, jobs, address, run_chunk), key_of,
                        lambda rows: _save(store, rows, output, keys, table_format, within), total=len(cells),
                        done=len(cells) - len(todo), desc="sweep cells", progress=progress)
    result = SweepRows(_stored(store.rows[key]) for key in keys)
    result.keys = keys
    result.skipped, result.computed, result.reused = skipped, len(todo), len(cells) - len(todo)
    result.elsewhere = len(store.rows) - len(set(keys))
    return result


def _stored(row: dict) -> dict:
    return {name: value for name, value in row.items() if name != "key"}


def _save(store: ResultStore, rows: dict, output: Path, keys: Sequence[str], table_format: str, within) -> None:
    """The new ``rows`` into the store, with the digest of the table about to be written, then the table."""
    merged = {**store.rows, **{key: {"key": key, **row} for key, row in rows.items()}}
    finished = [_stored(merged[key]) for key in keys if key in merged]
    write_table(finished, output, table_format, store=store, new_rows=rows, within=within)


__all__ = ["SweepRows", "run_sweep"]
