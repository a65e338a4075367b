"""``verispec sweep``: exact analyses over a grid of problems, trees, verifiers and methods, as a tidy table."""

from __future__ import annotations

import sys
import time

from verispec.cli.common import note_capped_jobs
from verispec.cli.options import (
    add_backend_options,
    add_latency_options,
    latency_model,
    list_option,
    number_option,
)
from verispec.guard.limits import DEFAULT_COST_RATIO


def add_parser(subparsers) -> None:
    sweep = subparsers.add_parser("sweep", help="exact analyses over a grid of problems, trees, verifiers and methods")
    sweep.add_argument("--families", default="context-free",
                       help="comma-separated problem families: context-free, random (per prefix), markov, "
                            "file:PATH (default context-free)")
    sweep.add_argument("--vocab", default="3", help="comma-separated vocabulary sizes (default 3)")
    sweep.add_argument("--divergence", default="0.5", help="comma-separated draft divergences in [0, 1] (default 0.5)")
    sweep.add_argument("--temperature", default="1", help="comma-separated temperatures of both laws (default 1)")
    sweep.add_argument("--concentration", default="1", help="comma-separated Dirichlet concentrations (default 1)")
    sweep.add_argument("--seeds", default="0", help="seeds: a list (0,1,2) or ranges (0-9) (default 0)")
    sweep.add_argument("--trees", default="chain:2", help="';'-separated tree specifications (default chain:2)")
    sweep.add_argument("--verifiers", default="all",
                       help="comma-separated verifiers, or all (each paired with the trees it is valid for)")
    sweep.add_argument("--methods", default="auto", help="comma-separated methods (default auto)")
    sweep.add_argument("--gap", action="store_true", help="also solve the LP optimum and report the gap to it")
    sweep.add_argument("--cell-timeout", type=number_option(minimum=0, strict=True, what="a positive number"),
                       default=None, help="seconds one cell may take before it is recorded as refused")
    sweep.add_argument("--out", default="results/sweep.csv", metavar="FILE",
                       help="tidy table, .csv or .parquet (default results/sweep.csv) of this grid's cells; every "
                            "row computed is kept in FILE.cells.json (rows of other grids too) and a rerun resumes")
    sweep.add_argument("--overwrite", action="store_true",
                       help="replace an existing FILE (and FILE.cells.json) that is not a sweep's, and start over; "
                            "and files in --save-problems DIR of the names it writes that are not problem files")
    sweep.add_argument("--save-problems", metavar="DIR", default=None,
                       help="also write every seeded problem of the grid to DIR in the binary .npz form (one file per "
                            "problem, named by its family and knobs), for 'verispec exact --problem'")
    add_backend_options(sweep)
    add_latency_options(sweep, "of the throughput columns", f"--cost-ratio {DEFAULT_COST_RATIO:g}")


def run(args) -> int:
    from verispec.study.cells import write_problems
    from verispec.study.grid import SweepGrid, parse_seeds
    from verispec.study.sweep import run_sweep
    from verispec.study.workers import interrupt_on_signals
    from verispec.verifiers import split_names

    grid = SweepGrid(
        families=tuple(part.strip() for part in args.families.split(",") if part.strip()),
        vocab_sizes=list_option(args.vocab, int, "a vocabulary size"),
        divergences=list_option(args.divergence, float, "a divergence"),
        temperatures=list_option(args.temperature, float, "a temperature"),
        concentrations=list_option(args.concentration, float, "a concentration"),
        seeds=parse_seeds(args.seeds),
        trees=tuple(part.strip() for part in args.trees.split(";") if part.strip()),
        verifiers=split_names(args.verifiers),
        methods=tuple(part.strip() for part in args.methods.split(",") if part.strip()),
        gap=args.gap, cell_timeout=args.cell_timeout, latency=latency_model(args, DEFAULT_COST_RATIO))
    start = time.perf_counter()
    # the problems are the sweep's inputs: written (or refused, before any cell runs) first
    written = None if args.save_problems is None else write_problems(grid, args.save_problems,
                                                                     overwrite=args.overwrite)
    with interrupt_on_signals():  # SIGTERM and Ctrl-C end the sweep and its workers, its store saved
        rows = run_sweep(grid, args.out, backend=args.backend, jobs=args.jobs, address=args.address,
                         progress=sys.stderr.isatty(), overwrite=args.overwrite, note=note_capped_jobs)
    refused = [row for row in rows if row["status"] != "ok"]
    # the table holds this grid's cells only: rows of earlier grids are said to stay in the store
    elsewhere = f"; {rows.elsewhere} rows of other grids kept in {args.out}.cells.json only, not in the table" \
        if rows.elsewhere else ""
    print(f"{len(rows)} cells in {args.out} ({len(refused)} refused; {rows.computed} computed now, {rows.reused} "
          f"from the row store; {rows.skipped} cells left out, their verifier invalid for the tree's draft "
          f"law{elsewhere}), {time.perf_counter() - start:.1f} s")
    for row in refused[:5]:
        print(f"  refused: {row['family']} V={row['vocab']} seed={row['seed']} {row['tree']} {row['verifier']}: "
              f"{row['reason']}")
    if written is not None:
        print(f"{len(written)} problems written to {args.save_problems} (.npz; 'verispec exact --problem FILE')")
    return 0
