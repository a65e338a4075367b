"""The walk DP before and after batching it, side by side in one run.

"Before" is the package at a git revision (default f8362bd, the per-state DP: about 0.8 ms of Python per
(prefix, multiplicity) state), unpacked with ``git archive`` into a temporary folder; "after" is this
checkout. Each workload runs in a fresh Python process per side (same interpreter, same machine, one after
the other), only the ``analyze`` call is timed, and the two block efficiencies must agree to 1e-12.

    python benchmarks/bench_dp.py                 # the issue's two workloads and khisti, about 8 minutes
    python benchmarks/bench_dp.py --quick         # smaller versions, about 20 seconds
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: benchmarks/measure.py imports as ``measure`` when this script is loaded as a module too (its tests)
if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))

#: name -> (problem expression, tree, verifier, method): the issue's workloads, then quick versions.
WORKLOADS = {
    "specinfer delayed:4,4,4, random context-dependent V=4": (
        "random_problem(4, 8, 0)", "delayed:4,4,4", "specinfer", "dp"),
    "specinfer iid:4,16, Markov V=16 (law of tau)": (
        "random_markov_problem(16, 0)", "iid:4,16", "specinfer", "dp-metrics"),
    "khisti delayed:4,2,4, random context-dependent V=4": ("random_problem(4, 6, 0)", "delayed:4,2,4", "khisti", "dp"),
}
QUICK = {
    "specinfer delayed:3,2,3, random context-dependent V=4": (
        "random_problem(4, 5, 0)", "delayed:3,2,3", "specinfer", "dp"),
    "specinfer iid:3,8, Markov V=8 (law of tau)": ("random_markov_problem(8, 0)", "iid:3,8", "specinfer", "dp-metrics"),
    "spectr iid:3,3, random context-dependent V=3": ("random_problem(3, 3, 2)", "iid:3,3", "spectr", "dp"),
}

SCRIPT = """
import json, sys, time
from verispec.simulator import analyze, parse_tree, random_markov_problem, random_problem
from verispec.verifiers import get_verifier

problem = {problem}
drafter, verifier = parse_tree({tree!r}), get_verifier({verifier!r})
start = time.perf_counter()
result = analyze(problem, drafter, verifier, method={method!r})
seconds = time.perf_counter() - start
print(json.dumps({{"seconds": seconds, "block_efficiency": float(result.block_efficiency),
                  "states": result.extras.get("dp_states")}}))
"""


def _run(source: Path, workload) -> dict:
    problem, tree, verifier, method = workload
    code = SCRIPT.format(problem=problem, tree=tree, verifier=verifier, method=method)
    env = {**os.environ, "PYTHONPATH": str(source)}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=source,
                          check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{source}: {done.stderr.strip().splitlines()[-1]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv=None) -> None:
    from measure import (  # benchmarks/measure.py
        ROWS,
        TABLE,
        add_overwrite_option,
        claim_outputs,
        write_rows,
        write_table,
    )
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", default="f8362bd", help="git revision of the 'before' package")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--output", default="results/bench_dp")
    add_overwrite_option(parser)
    args = parser.parse_args(argv)
    # before any work: a file there that is not this benchmark's own is refused (unless --overwrite), each
    # output locked for the run (benchmarks/measure.py: the writers' rule)
    claim_outputs(__file__, [("--output", args.output + ".md", TABLE), ("--output", args.output + ".json", ROWS)],
                  overwrite=args.overwrite)
    workloads = QUICK if args.quick else WORKLOADS
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        archive = Path(folder) / "before.tar"
        subprocess.run(["git", "archive", "--format=tar", "-o", str(archive), args.before, "verispec"], cwd=ROOT,
                       check=True)
        with tarfile.open(archive) as tar:
            tar.extractall(folder, filter="data")
        for name, workload in workloads.items():
            before = _run(Path(folder), workload)
            after = _run(ROOT, workload)
            gap = abs(before["block_efficiency"] - after["block_efficiency"])
            if gap > 1e-12:
                raise AssertionError(f"{name}: before and after differ by {gap:.3g}")
            rows.append({"workload": name, "states": after["states"], "before_seconds": before["seconds"],
                         "after_seconds": after["seconds"], "ratio": before["seconds"] / after["seconds"],
                         "block_efficiency": after["block_efficiency"]})
            print(json.dumps(rows[-1]), flush=True)
    load = os.getloadavg()[0]
    lines = [f"walk DP, revision {args.before} (before) against this checkout (after); {os.cpu_count()} CPUs, "
             f"load average {load:.2f} at the end", "",
             "| workload | DP states | before s | after s | before / after | E[tau+1] |", "|---|---|---|---|---|---|"]
    lines += [f"| {r['workload']} | {r['states']} | {r['before_seconds']:.2f} | {r['after_seconds']:.2f} | "
              f"{r['ratio']:.1f} | {r['block_efficiency']:.10f} |" for r in rows]
    table = "\n".join(lines) + "\n"
    write_table(args.output + ".md", table)
    write_rows(args.output + ".json", {"rows": rows})
    print(table)


if __name__ == "__main__":
    main()
