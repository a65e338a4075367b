"""Old vs new exact engine, side by side: whole-tree enumeration (the oracle) against the walk DP.

For each (verifier, V, K, L1, L2) in the grid it times both methods in one run, checks that they agree
(block efficiency to 1e-12, and the output laws where both exist), reports the speed-up ratio and the
new path's peak memory (tracemalloc), and writes a table. Rows are saved after each configuration, so an
interrupted run resumes where it stopped; --fresh starts over.

    python benchmarks/bench_engine.py                   # default grid, results/bench_engine.json + .md
    python benchmarks/bench_engine.py --quick           # a small grid
"""

from __future__ import annotations

import itertools

from measure import peak_memory_of_analysis, run_arguments, timed_analysis, write_table  # benchmarks/measure.py
from tqdm import tqdm

from verispec.simulator import DelayedDrafter, random_problem
from verispec.verifiers import REGISTRY

#: Whole-tree enumeration is skipped above this many draft trees (it would take minutes).
MAX_ORACLE_TREES = 60_000


def grid(quick: bool):
    solvers = [name for name, v in sorted(REGISTRY.items()) if v.node_solver is not None]
    shapes = [(3, 3, 0, 3), (3, 2, 1, 2), (4, 4, 0, 4), (4, 4, 2, 2), (4, 4, 4, 0), (4, 2, 1, 3)]
    if quick:
        shapes = [(3, 2, 0, 2), (3, 3, 1, 2)]
    for name, (size, branches, trunk, tail) in itertools.product(solvers, shapes):
        yield name, size, branches, trunk, tail


def main(argv=None) -> None:
    args, path, store = run_arguments(__doc__.splitlines()[0], "results/bench_engine.json", argv, script=__file__,
                                      parameters={"problem": "random_problem", "seed": 0, "divergence": 0.7,
                                                  "methods": ["dp", "closed-form"]})
    for name, size, branches, trunk, tail in tqdm(list(grid(args.quick)), desc="configurations"):
        key = f"{name}|V={size}|delayed:{branches},{trunk},{tail}"
        if store.done(key):
            continue
        verifier, drafter = REGISTRY[name], DelayedDrafter(branches, trunk, tail)
        if not drafter.draft_laws & verifier.valid_for:
            continue
        problem = random_problem(size, trunk + tail, 0, divergence=0.7)
        new, new_seconds = timed_analysis(problem, drafter, verifier, method="dp")
        peak = peak_memory_of_analysis(problem, drafter, verifier, method="dp")
        trees = size ** (trunk + branches * tail)
        row = {"verifier": name, "V": size, "tree": drafter.spec, "draft_trees": trees,
               "new_seconds": new_seconds, "new_peak_bytes": peak, "tv_distance": float(new.tv_distance),
               "block_efficiency": float(new.block_efficiency)}
        if trees <= MAX_ORACLE_TREES:
            old, old_seconds = timed_analysis(problem, drafter, verifier, method="closed-form")
            difference = abs(float(old.block_efficiency) - float(new.block_efficiency))
            if difference > 1e-12:
                raise AssertionError(f"{key}: DP and enumeration disagree by {difference:.3g}")
            row.update(old_seconds=old_seconds, speedup=old_seconds / new_seconds)
        store.add(key, row)
    lines = ["| verifier | V | tree | draft trees | enumeration s | DP s | speed-up | DP peak MB | TV |",
             "|---|---|---|---|---|---|---|---|---|"]
    for row in store.rows.values():
        old = f"{row['old_seconds']:.3f}" if "old_seconds" in row else "skipped"
        ratio = f"{row['speedup']:.0f}x" if "speedup" in row else "-"
        lines.append(f"| {row['verifier']} | {row['V']} | {row['tree']} | {row['draft_trees']:.3g} | {old} | "
                     f"{row['new_seconds']:.3f} | {ratio} | {row['new_peak_bytes'] / 2**20:.1f} | "
                     f"{row['tv_distance']:.1e} |")
    table = "\n".join(lines) + "\n"
    write_table(path.with_suffix(".md"), table)
    print(table)


if __name__ == "__main__":
    main()
