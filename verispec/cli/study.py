"""``verispec sweep`` and ``verispec report``: grids of exact analyses and the comparison study."""

from __future__ import annotations

import sys
import time

from verispec.cli.common import _latency_model, _note_capped_jobs, split_names
from verispec.cli.options import _list_option


def _run_report(args) -> int:
    from verispec.report import build_report
    from verispec.sweep import interrupt_on_signals

    start = time.perf_counter()
    with interrupt_on_signals():  # SIGTERM and Ctrl-C end the report and its workers, its store saved
        path = build_report(args.out, quick=args.quick, backend=args.backend, jobs=args.jobs, address=args.address,
                            progress=sys.stderr.isatty(), pair=args.pair, device=args.device,
                            overwrite=args.overwrite, note=_note_capped_jobs)
    print(f"wrote {path} ({time.perf_counter() - start:.1f} s)")
    return 0


def _run_sweep(args) -> int:
    from verispec.sweep import SweepGrid, interrupt_on_signals, parse_seeds, run_sweep, write_problems

    grid = SweepGrid(
        families=tuple(part.strip() for part in args.families.split(",") if part.strip()),
        vocab_sizes=_list_option(args.vocab, int, "a vocabulary size"),
        divergences=_list_option(args.divergence, float, "a divergence"),
        temperatures=_list_option(args.temperature, float, "a temperature"),
        concentrations=_list_option(args.concentration, float, "a concentration"),
        seeds=parse_seeds(args.seeds),
        trees=tuple(part.strip() for part in args.trees.split(";") if part.strip()),
        verifiers=split_names(args.verifiers),
        methods=tuple(part.strip() for part in args.methods.split(",") if part.strip()),
        gap=args.gap, cell_timeout=args.cell_timeout, latency=_latency_model(args))
    start = time.perf_counter()
    # the problems are the sweep's inputs: written (or refused, before any cell runs) first
    written = None if args.save_problems is None else write_problems(grid, args.save_problems,
                                                                     overwrite=args.overwrite)
    with interrupt_on_signals():  # SIGTERM and Ctrl-C end the sweep and its workers, its store saved
        rows = run_sweep(grid, args.out, backend=args.backend, jobs=args.jobs, address=args.address,
                         progress=sys.stderr.isatty(), overwrite=args.overwrite, note=_note_capped_jobs)
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
