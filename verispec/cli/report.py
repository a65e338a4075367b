"""``verispec report``: the comparison study (sweeps, tables, figures and findings) in one directory."""

from __future__ import annotations

import sys
import time

from verispec.cli.common import note_capped_jobs
from verispec.cli.options import add_backend_options, integer_option


def add_parser(subparsers) -> None:
    report = subparsers.add_parser("report", help="the comparison study: sweeps, tables, figures and findings")
    report.add_argument("--quick", action="store_true", help="the small study (a few minutes on 2 cores)")
    report.add_argument("--out", default="report", metavar="DIR",
                        help="report directory (default report/): new, empty, or a report's (a rerun resumes)")
    report.add_argument("--overwrite", action="store_true",
                        help="write into a DIR that holds other files, replacing the report's files and data")
    add_backend_options(report)
    report.add_argument("--pair", default=None, metavar="NAME",
                        help="an installed pair: study 6 derives and certifies problems at real contexts")
    report.add_argument("--device", default="cpu", help="torch device of the pair (default cpu)")
    report.add_argument("--selector-dataset", action="append", default=None, metavar="FILE",
                        help="a stored selector dataset of the pair ('verispec selector dataset --pair NAME'); "
                             "repeatable: section 9, the delay selector on the pair in three latency regimes, from the "
                             "datasets alone (no model loaded: with it, a --pair that is not installed skips study 6 "
                             "instead of refusing the report)")
    report.add_argument("--latency", default=None, metavar="FILE",
                        help="with --selector-dataset: the pair's latency model on this CPU ('verispec latency --out "
                             "FILE'), section 9's cpu regime")
    report.add_argument("--selector-folds", type=integer_option(minimum=1, maximum=100, what="an integer in [1, 100]"),
                        default=1, metavar="K",
                        help="with --selector-dataset: cross-fit section 9 over K folds of prompts, every prompt held "
                             "out once (default 1: one split, a quarter of the prompts held out)")


def run(args) -> int:
    from verispec.report import build_report
    from verispec.study.workers import interrupt_on_signals

    start = time.perf_counter()
    with interrupt_on_signals():  # SIGTERM and Ctrl-C end the report and its workers, its store saved
        path = build_report(args.out, quick=args.quick, backend=args.backend, jobs=args.jobs, address=args.address,
                            progress=sys.stderr.isatty(), pair=args.pair, device=args.device,
                            overwrite=args.overwrite, note=note_capped_jobs,
                            selector_datasets=args.selector_dataset or (), selector_latency=args.latency,
                            selector_folds=args.selector_folds)
    print(f"wrote {path} ({time.perf_counter() - start:.1f} s)")
    return 0
