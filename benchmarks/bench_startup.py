"""Start-up of the ``verispec`` command: whole-process CPU seconds (user + system, median of ``--repeats``) of
``--help``, ``list`` and a small ``exact``, for this checkout and, with ``--baseline DIR`` (another checkout, e.g. a
git worktree of an older commit), for that one side by side, in the same run.

Both with Python's bytecode cache (the ordinary case: ``__pycache__`` written at the first run) and without it for
verispec's own modules (a copy of the package without ``__pycache__``, run with ``PYTHONDONTWRITEBYTECODE=1``: every
verispec module compiled at every start, as where the cache cannot be written). The load average is recorded with
the table.

    python benchmarks/bench_startup.py --baseline /tmp/old
    python benchmarks/bench_startup.py --baseline /tmp/old --result docs/results/bench/bench_startup.json

``--result FILE`` also writes the rows with the run's record (``measure.write_result``): ``now`` this checkout's
median seconds, ``before`` the baseline's (None without ``--baseline``), ``ratio`` before / now, and the baseline's
commit as ``before_commit``.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

#: benchmarks/measure.py imports as ``measure`` when this script is loaded as a module too (its tests)
if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))

COMMANDS = {
    "--help": ["--help"],
    "list": ["list"],
    "small exact": ["exact", "--target", "0.5,0.3,0.2", "--draft", "0.2,0.6,0.2", "--tree", "chain:2", "--verifier",
                    "bv"],
}


def cpu_seconds(source: Path, argv: list[str], cached: bool) -> float:
    """User + system CPU seconds of one ``python -m verispec ARGV`` run with ``source`` (the folder holding the
    ``verispec`` package) first on the path."""
    environment = {**os.environ, "PYTHONPATH": str(source), "OMP_NUM_THREADS": "1"}
    environment.pop("PYTHONDONTWRITEBYTECODE", None)
    if not cached:
        environment["PYTHONDONTWRITEBYTECODE"] = "1"
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, "-m", "verispec", *argv], env=environment, cwd=source, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def median_seconds(checkout: Path, argv: list[str], cached: bool, repeats: int) -> float:
    if cached:
        cpu_seconds(checkout, argv, cached)  # warm-up: writes the bytecode cache
        return statistics.median(cpu_seconds(checkout, argv, cached) for _ in range(repeats))
    with tempfile.TemporaryDirectory() as folder:  # the package without its bytecode cache
        shutil.copytree(checkout / "verispec", Path(folder) / "verispec",
                        ignore=shutil.ignore_patterns("__pycache__"))
        return statistics.median(cpu_seconds(Path(folder), argv, cached) for _ in range(repeats))


def main(argv=None) -> None:
    from measure import RESULT, TABLE, add_overwrite_option, claim_outputs  # benchmarks/measure.py
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", type=Path, help="another checkout of verispec, measured in the same run")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--output", default="results/bench_startup.md")
    parser.add_argument("--result", help="also write the rows and the run's record here (JSON)")
    add_overwrite_option(parser)
    args = parser.parse_args(argv)
    # before any work: a file there that is not this benchmark's own is refused (unless --overwrite), each
    # output locked for the run (benchmarks/measure.py: the writers' rule)
    claim_outputs(__file__, [("--output", args.output, TABLE), ("--result", args.result, RESULT)],
                  overwrite=args.overwrite)
    from measure import checkout_commit, comparison, publish_table, start_record, write_result  # benchmarks/measure.py

    started = start_record(__file__, argv, threads=1, result=args.result) if args.result else None
    here = Path(__file__).resolve().parents[1]
    rows, measured = [], []
    for cached in (True, False):
        for name, command in COMMANDS.items():
            seconds = median_seconds(here, command, cached, args.repeats)
            row, old = [name, "yes" if cached else "no", f"{seconds:.2f}"], None
            if args.baseline:
                old = median_seconds(args.baseline.resolve(), command, cached, args.repeats)
                row += [f"{old:.2f}", f"x{old / seconds:.1f}"]
            rows.append(row)
            measured.append(comparison(seconds, old, command=name, argv=["verispec", *command],
                                       bytecode_cache=cached))
    columns = ["command", "bytecode cache", "seconds"] + (["baseline seconds", "ratio"] if args.baseline else [])
    publish_table(args.output, f"Whole-process CPU seconds (user + system), median of {args.repeats}, one thread, "
                  f"load {os.getloadavg()[0]:.2f} (at the end)", columns, rows)
    if started:
        write_result(args.result, started, {
            "benchmark": "bench_startup", "unit": f"s CPU (user + system, whole process), median of {args.repeats}",
            "now": "this checkout", "before": "the --baseline checkout, same run",
            "before_commit": checkout_commit(args.baseline) if args.baseline else None, "repeats": args.repeats,
            "load_at_end": round(os.getloadavg()[0], 2), "rows": measured})

if __name__ == "__main__":
    main()
