"""Whole-tree rules, exact: the rules' own methods ('rule-dp': GBV's selected-path sum, Traversal's post-order
DP) against today's whole-tree enumeration ('fast-enumeration'), side by side in one run.

For each (verifier, tree, V) it times the analysis (CPU seconds, one thread, the load average recorded with
every row) on a seeded random context-dependent problem, checks losslessness, and, where enumeration is
feasible (up to ``--enumerate-up-to`` ordered draft trees), times it too, checks the two output laws agree to
1e-12 and reports the ratio. Rows are saved as they finish; an interrupted run resumes (``--fresh`` starts over).

    python benchmarks/bench_rule_dp.py                  # results/bench_rule_dp.json + .md
    python benchmarks/bench_rule_dp.py --quick
    python benchmarks/bench_rule_dp.py --case traversal-iid delayed:4,3,3 4 --case gbv iid:4,3 4 \
        --result docs/results/bench/bench_rule_dp.json     # chosen cases; a result file with the run's record

``--result FILE`` writes the rows of this run's cases (``measure.write_result``: the run's record, then ``rows``:
``now`` the rule-dp seconds, ``before`` the enumeration's, None where enumeration is not attempted, ``ratio``
before / now); a row resumed from the store (measured by an earlier run) is marked ``"resumed": true``.
"""

from __future__ import annotations

import argparse
import math
import os
import time
from pathlib import Path

import numpy as np
from measure import (  # benchmarks/measure.py
    STORE,
    TABLE,
    add_overwrite_option,
    claim_outputs,
    comparison,
    open_store,
    publish_table,
    start_record,
    write_result,
)
from tqdm import tqdm

from verispec.simulator import analyze, parse_tree, random_problem
from verispec.verifiers import get_verifier

#: (verifier, tree, V): issue 23's goals (traversal-iid delayed:4,3,3 < 10 s and delayed:4,4,4 < 60 s at V = 4;
#: gbv iid:4,4 < 10 s, iid:4,6 < 60 s), the largest trees enumeration still does, and a few beyond.
GRID = [
    ("traversal-iid", "delayed:4,2,2", 4),
    ("traversal-iid", "delayed:4,3,3", 4),
    ("traversal-iid", "delayed:4,4,4", 4),
    ("traversal-iid", "iid:4,6", 4),
    ("traversal-iid", "delayed:4,2,2", 8),
    ("traversal", "branch:3,2", 4),
    ("traversal", "branch:4,4,4", 4),
    ("traversal", "branch:3,3,3,3", 4),
    ("traversal", "branch:2,2,2,2,2,2", 4),
    ("gbv", "iid:4,3", 4),
    ("gbv", "iid:4,4", 4),
    ("gbv", "iid:4,6", 4),
    ("gbv", "iid:4,8", 4),
    ("gbv", "iid:4,6", 8),
]
QUICK = [("traversal-iid", "delayed:2,2,2", 4), ("traversal", "branch:3,2", 3), ("gbv", "iid:3,3", 4)]


def timed(problem, drafter, verifier, method: str):
    start = time.process_time()
    result = analyze(problem, drafter, verifier, method=method)
    return time.process_time() - start, result


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", default="results/bench_rule_dp.json")
    parser.add_argument("--enumerate-up-to", type=float, default=2e7,
                        help="time whole-tree enumeration too up to this many ordered draft trees")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--fresh", action="store_true",
                        help="discard saved rows (of a store verispec wrote) and start over")
    add_overwrite_option(parser)
    parser.add_argument("--case", nargs=3, action="append", metavar=("VERIFIER", "TREE", "V"),
                        help="run this case instead of the grid (repeatable)")
    parser.add_argument("--result", help="also write this run's rows and its record here (JSON)")
    args = parser.parse_args(argv)
    path = Path(args.output)
    claim_outputs(__file__, [("--output", path, STORE), ("--output (its table)", path.with_suffix(".md"), TABLE)],
                  overwrite=args.overwrite)  # before any work, and before --fresh discards anything
    started = start_record(__file__, argv, result=args.result) if args.result else None
    store = open_store(__file__, path, {"benchmark": "bench_rule_dp", "problem": "random_problem", "seed": 0,
                                        "divergence": 0.7, "enumerate_up_to": args.enumerate_up_to},
                       fresh=args.fresh or args.overwrite)
    cases = [(name, spec, int(size)) for name, spec, size in args.case] if args.case else QUICK if args.quick else GRID
    resumed = set()
    for name, spec, size in tqdm(cases, desc="cases"):
        key = f"{name}|{spec}|{size}"
        if store.done(key):
            resumed.add(key)
            continue
        drafter, verifier = parse_tree(spec), get_verifier(name)
        problem = random_problem(size, drafter.depth, 0, divergence=0.7)
        seconds, result = timed(problem, drafter, verifier, "rule-dp")
        trees = drafter.log_num_outcomes(size) / math.log(10)
        row = {"verifier": name, "tree": spec, "V": size, "log10_trees": trees, "seconds": seconds,
               "block_efficiency": float(result.block_efficiency), "tv": float(result.tv_distance),
               "lossless": result.lossless, "details": {k: v for k, v in result.extras.items() if k != "rule_dp"},
               "load": os.getloadavg()[0]}
        if trees <= math.log10(args.enumerate_up_to):
            old_seconds, old = timed(problem, drafter, verifier, "fast-enumeration")
            difference = max(float(np.max(np.abs(a - b))) for a, b in zip(result.output_law.by_length,
                                                                           old.output_law.by_length))
            assert difference <= 1e-12, (key, difference)
            row.update(enumeration_seconds=old_seconds, ratio=old_seconds / seconds, difference=difference)
        store.add(key, row)
    rows = []
    for row in store.rows.values():
        details = row["details"]
        size = (f"{details['dp_states']:,} states" if "dp_states" in details
                else f"{details.get('selected_paths', 0):,} paths")
        old = ([f"{row['enumeration_seconds']:.2f}", f"x{row['ratio']:,.0f}", f"{row['difference']:.1e}"]
               if "ratio" in row else ["-", "-", "-"])
        rows.append([row["verifier"], row["tree"], row["V"], f"10^{row['log10_trees']:.1f}", f"{row['seconds']:.2f}",
                     size, *old, f"{row['block_efficiency']:.6f}", f"{row['tv']:.1e}", f"{row['load']:.2f}"])
    publish_table(path.with_suffix(".md"),
                  "Whole-tree rules exact: 'rule-dp' against whole-tree enumeration ('fast-enumeration'), CPU "
                  "seconds, one thread, same run; random context-dependent problems (seed 0, divergence 0.7)",
                  ["verifier", "tree", "V", "draft trees", "rule-dp s", "states / paths", "enumeration s", "ratio",
                   "max law difference", "E[tau+1]", "TV", "load"], rows)
    if started:
        write_result(args.result, started, result_values(store, cases, resumed, args.enumerate_up_to))


def result_values(store, cases, resumed: set, enumerate_up_to: float) -> dict:
    """The result file's values: one row per case of this run, rule-dp (now) against enumeration (before)."""
    rows = []
    for name, spec, size in cases:
        key = f"{name}|{spec}|{size}"
        row = store.rows[key]
        rows.append(comparison(row["seconds"], row.get("enumeration_seconds"), verifier=name, tree=spec, V=size,
                               log10_trees=row["log10_trees"], block_efficiency=row["block_efficiency"],
                               tv=row["tv"], lossless=row["lossless"], difference=row.get("difference"),
                               load=row["load"], resumed=key in resumed))
    return {"benchmark": "bench_rule_dp", "unit": "s CPU (process time, one call)",
            "now": "method 'rule-dp' (the rule's own DP)",
            "before": f"whole-tree enumeration ('fast-enumeration'), same run, attempted up to {enumerate_up_to:g} "
                      "ordered draft trees (None beyond)",
            "problem": "random_problem(V, depth, 0, divergence=0.7)", "rows": rows}

if __name__ == "__main__":
    main()
