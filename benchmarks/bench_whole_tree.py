"""Old vs new whole-tree enumeration, side by side: 'closed-form' (the oracle) against 'fast-enumeration'.

For each (verifier, tree, V) in the grid it times both engine methods in one run on the same random
problem, checks that their output laws agree to 1e-12, reports the speed-up ratio and the new path's peak
memory (tracemalloc, measured in a separate run so it does not slow the timed one), and writes a table.
Rows are saved after each configuration, so an interrupted run resumes where it stopped; --fresh starts
over. The oracle is skipped above MAX_ORACLE_TREES ordered draft trees (it would take minutes).

    python benchmarks/bench_whole_tree.py            # default grid, results/bench_whole_tree.json + .md
    python benchmarks/bench_whole_tree.py --quick    # small versions, under a minute
"""

from __future__ import annotations

import math

import numpy as np
from measure import peak_memory_of_analysis, run_arguments, timed_analysis, write_table  # benchmarks/measure.py

from verispec.simulator import parse_tree, random_problem
from verispec.verifiers import REGISTRY

#: Whole-tree enumeration (the oracle) is skipped above this many ordered draft trees.
MAX_ORACLE_TREES = 300_000

#: The issue's targets ("Scale the exact engine", item 2): exact in under 30 s each.
TARGETS = [("gbv", "iid:3,3", 3), ("traversal", "branch:2,2,2", 3)]

#: --quick: small versions (each oracle a few thousand trees), well under a minute in all.
QUICK = [("bv", "chain:4", 3), ("gbv", "iid:3,2", 3), ("traversal", "branch:2,2", 3), ("rrsw", "branch:2,1,1", 3)]

GRID = [
    ("bv", "chain:4", 4),
    ("naive", "chain:4", 4),
    ("traversal", "branch:2,2", 3),
    ("traversal", "branch:3,2", 4),
    ("rrsw", "branch:2,2,2", 3),
    ("traversal-iid", "iid:3,2", 3),
    ("traversal-iid", "iid:3,3", 3),
    ("gbv", "iid:2,3", 3),
    ("gbv", "iid:3,3", 4),
    ("gbv", "iid:4,3", 3),
]


def ordered_trees(spec: str, size: int) -> int:
    """Number of ordered draws (before merging identical trees) of the structured drafters in the grid."""
    kind, _, params = spec.partition(":")
    values = [int(v) for v in params.split(",")]
    if kind == "chain":
        return size ** values[0]
    if kind == "iid":
        return size ** (values[0] * values[1])
    if kind == "branch":  # ordered draws without replacement, every node with full support
        count, nodes = 1, 1
        for branching in values:
            count *= math.perm(size, branching) ** nodes
            nodes *= branching
        return count
    raise ValueError(spec)


def main(argv=None) -> None:
    args, path, store = run_arguments(__doc__.splitlines()[0], "results/bench_whole_tree.json", argv, script=__file__,
                                      parameters={"problem": "random_problem", "seed": 0, "divergence": 0.7,
                                                  "methods": ["fast-enumeration", "closed-form"]})
    for name, spec, size in (QUICK if args.quick else TARGETS + GRID):
        key = f"{name}|V={size}|{spec}"
        if store.done(key):
            continue
        verifier, drafter = REGISTRY[name], parse_tree(spec)
        problem = random_problem(size, drafter.depth, 0, divergence=0.7)
        new, new_seconds = timed_analysis(problem, drafter, verifier, method="fast-enumeration")
        peak = peak_memory_of_analysis(problem, drafter, verifier, method="fast-enumeration")
        trees = ordered_trees(spec, size)
        row = {"verifier": name, "V": size, "tree": spec, "ordered_trees": trees, "rows": new.num_draft_outcomes,
               "multiset_paths": new.extras["multiset_paths"], "new_seconds": new_seconds, "new_peak_bytes": peak,
               "tv_distance": float(new.tv_distance), "block_efficiency": float(new.block_efficiency)}
        if trees <= MAX_ORACLE_TREES:
            old, old_seconds = timed_analysis(problem, drafter, verifier, method="closed-form")
            difference = max(float(np.abs(a - b).max())
                             for a, b in zip(new.output_law.by_length, old.output_law.by_length, strict=True))
            if difference > 1e-12:
                raise AssertionError(f"{key}: fast enumeration and closed form disagree by {difference:.3g}")
            row.update(old_seconds=old_seconds, speedup=old_seconds / new_seconds, max_law_difference=difference)
        store.add(key, row)
        print(f"{key}: new {new_seconds:.3f} s" + (f", old {row['old_seconds']:.3f} s, {row['speedup']:.0f}x"
                                                   if "old_seconds" in row else ", oracle skipped"), flush=True)
    lines = ["| verifier | V | tree | ordered trees | rows | closed-form s | fast s | speed-up | fast peak MB | "
             "max law diff | TV |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in store.rows.values():
        old = f"{row['old_seconds']:.2f}" if "old_seconds" in row else "skipped"
        ratio = f"{row['speedup']:.0f}x" if "speedup" in row else "-"
        diff = f"{row['max_law_difference']:.1e}" if "max_law_difference" in row else "-"
        rows = f"{row['rows']}" + (" (multisets)" if row["multiset_paths"] else "")
        lines.append(f"| {row['verifier']} | {row['V']} | {row['tree']} | {row['ordered_trees']:.3g} | {rows} | "
                     f"{old} | {row['new_seconds']:.3f} | {ratio} | {row['new_peak_bytes'] / 2**20:.1f} | {diff} | "
                     f"{row['tv_distance']:.1e} |")
    table = "\n".join(lines) + "\n"
    write_table(path.with_suffix(".md"), table)
    print(table)


if __name__ == "__main__":
    main()
