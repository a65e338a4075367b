"""Reading problem files: CPU seconds of ``load_problem`` (float mode) on the JSON and .npz files of a seeded
random problem, numbers per second, and, with ``--baseline DIR`` (another checkout of verispec, e.g. a git
worktree of an older commit), the same measurement of that checkout's code on the same files, side by side.

Each reading runs in a fresh process (one thread; the median of ``--repeats`` readings after one warm-up), so the
two checkouts never share an import. The load average is recorded with the table.

    python benchmarks/bench_problem_files.py                          # V = 4, depth 8 (delayed:4,4,4's table)
    python benchmarks/bench_problem_files.py --baseline /tmp/old      # and the old code, same run
    python benchmarks/bench_problem_files.py --baseline /tmp/old --result docs/results/bench/bench_problem_files.json

``--result FILE`` also writes the rows with the run's record (``measure.write_result``): ``now`` this checkout's
median seconds, ``before`` the baseline's (None without ``--baseline``), ``ratio`` before / now, the file's size and
SHA-256, and the baseline's commit as ``before_commit``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

#: benchmarks/measure.py imports as ``measure`` when this script is loaded as a module too (its tests)
if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))

MEASURE = """
import json, statistics, sys, time

try:
    from verispec.simulator.problem_files import load_problem
except ImportError:  # a checkout before the problem files left problems.py
    from verispec.simulator.problems import load_problem
path, repeats = sys.argv[1], int(sys.argv[2])
load_problem(path)
times = []
for _ in range(repeats):
    start = time.process_time()
    load_problem(path)
    times.append(time.process_time() - start)
print(json.dumps(statistics.median(times)))
"""


def measure(checkout: Path, path: Path, repeats: int) -> float:
    environment = {**os.environ, "PYTHONPATH": str(checkout), "OMP_NUM_THREADS": "1"}
    output = subprocess.run([sys.executable, "-c", MEASURE, str(path), str(repeats)], env=environment, check=True,
                            capture_output=True, text=True, cwd=checkout).stdout
    return json.loads(output.strip().splitlines()[-1])


def main(argv=None) -> None:
    from measure import RESULT, TABLE, add_overwrite_option, claim_outputs  # benchmarks/measure.py
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocab", type=int, default=4)
    parser.add_argument("--depth", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--baseline", type=Path, help="another checkout of verispec, measured on the same files")
    parser.add_argument("--output", default="results/bench_problem_files.md")
    parser.add_argument("--result", help="also write the rows and the run's record here (JSON)")
    add_overwrite_option(parser)
    args = parser.parse_args(argv)
    # before any work: a file there that is not this benchmark's own is refused (unless --overwrite), each
    # output locked for the run (benchmarks/measure.py: the writers' rule)
    claim_outputs(__file__, [("--output", args.output, TABLE), ("--result", args.result, RESULT)],
                  overwrite=args.overwrite)
    from measure import checkout_commit, comparison, publish_table, start_record, write_result  # benchmarks/measure.py

    started = start_record(__file__, argv, threads=1, result=args.result) if args.result else None

    from verispec.files.provenance import sha256_file
    from verispec.simulator.generators import random_problem
    from verispec.simulator.problem_files import problem_to_json, problem_to_npz

    here = Path(__file__).resolve().parents[1]
    problem = random_problem(args.vocab, args.depth, 0)
    numbers = args.vocab * sum(args.vocab ** length for length in range(args.depth + 1)) \
        + args.vocab * sum(args.vocab ** length for length in range(args.depth))
    with tempfile.TemporaryDirectory() as folder:
        files = {"JSON": Path(folder) / "problem.json", ".npz": Path(folder) / "problem.npz"}
        files["JSON"].write_text(json.dumps(problem_to_json(problem, args.depth)))
        problem_to_npz(problem, args.depth, files[".npz"])
        rows, measured = [], []
        for form, path in files.items():
            seconds = measure(here, path, args.repeats)
            row = [form, f"{path.stat().st_size / 2**20:.1f} MiB", f"{seconds:.3f}", f"{numbers / seconds / 1e6:.2f}"]
            old = None
            if args.baseline:
                old = measure(args.baseline.resolve(), path, args.repeats)
                row += [f"{old:.3f}", f"x{old / seconds:.2f}"]
            rows.append(row)
            measured.append(comparison(seconds, old, form=form, numbers=numbers, bytes=path.stat().st_size,
                                       sha256=sha256_file(path), numbers_per_s=numbers / seconds))
    columns = ["form", "size", "seconds", "M numbers/s"] + (["baseline seconds", "speed-up"] if args.baseline else [])
    publish_table(args.output, f"load_problem, float mode: random_problem({args.vocab}, {args.depth}, 0), {numbers:,} "
                  f"numbers; CPU s, median of {args.repeats}, one thread, load {os.getloadavg()[0]:.2f} (at the end)",
                  columns, rows)
    if started:
        write_result(args.result, started, {
            "benchmark": "bench_problem_files", "unit": f"s CPU (load_problem, float mode), median of {args.repeats}",
            "now": "this checkout", "before": "the --baseline checkout on the same files, same run",
            "before_commit": checkout_commit(args.baseline) if args.baseline else None,
            "problem": f"random_problem({args.vocab}, {args.depth}, 0)", "repeats": args.repeats,
            "load_at_end": round(os.getloadavg()[0], 2), "rows": measured})

if __name__ == "__main__":
    main()
