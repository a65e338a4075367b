"""The i.i.d. multi-path optimum against every rule for i.i.d. paths: how far each registered rule valid
for ``iid:K,L`` stays below the best valid verifier, by K, L, V and the draft's divergence.

    python experiments/multipath_gap.py                 # the table of docs/results/multipath_gap.md (about 40 s)
    python experiments/multipath_gap.py --seeds 2 --out /tmp/gap   # a smaller run

For each cell (K, L, V, divergence, seed): a random context-dependent problem (``random_problem``, concentration 1),
the optimum of every valid verifier from the selection LP (``verispec.bounds.path_selection``, equal to the
multi-step LP), and every registry rule's exact E[tau + 1] (the exact engine, float64). iid:3,3 at V = 4 is left
out: its selection LP has 1.4e5 variables and takes about 100 s a problem here. Writes ``<out>.md`` (means by K, L,
V and divergence; psbv's share of the gap that the best other rule leaves, median over the seeds; and the issue's
example), ``<out>.json`` (the same numbers, with the run's record: command, commit, date, machine; the result file
the README and docs/findings/multipath_optimum.md are generated from) and, with ``--csv``, ``<out>.csv`` (one row per
cell and rule).
"""

from __future__ import annotations

import argparse
import csv
import io
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

TREES = [(2, 2), (3, 2), (2, 3), (3, 3)]
VOCABS = [2, 3, 4]
DIVERGENCES = [0.2, 1.0]
SKIPPED = {(3, 3, 4)}  # (K, L, V) whose selection LP is too slow for this script
DEFAULT_OUT = Path(__file__).resolve().parents[1] / "docs" / "results" / "multipath_gap"


def valid_rules(spec: str) -> list[str]:
    from verispec.simulator import parse_tree
    from verispec.verifiers import REGISTRY

    drafter = parse_tree(spec)
    return sorted(name for name, rule in REGISTRY.items() if drafter.draft_laws & rule.valid_for)


def cell_rows(problem, spec: str, labels: dict) -> list[dict]:
    """One row per valid rule on one problem: its E[tau + 1], the optimum, the gap."""
    from verispec.bounds.path_selection import selection_optimum
    from verispec.simulator import analyze, parse_tree
    from verispec.verifiers import get_verifier

    drafter = parse_tree(spec)
    optimum = selection_optimum(problem, drafter).block_efficiency
    rows = []
    for name in valid_rules(spec):
        result = analyze(problem, drafter, get_verifier(name))
        if not result.lossless:
            raise RuntimeError(f"{name} is lossy on {spec} ({labels}): TV {result.tv_distance}")
        efficiency = float(result.block_efficiency)
        rows.append({**labels, "tree": spec, "rule": name, "block_efficiency": efficiency, "optimum": optimum,
                     "gap": optimum - efficiency})
    return rows


def gap_closed(rows: list[dict]) -> float | None:
    """psbv's share of the gap the best other rule leaves on one cell (None when that gap is below 1e-9)."""
    best_other = max(row["block_efficiency"] for row in rows if row["rule"] != "psbv")
    optimum = rows[0]["optimum"]
    psbv = next(row["block_efficiency"] for row in rows if row["rule"] == "psbv")
    return None if optimum - best_other < 1e-9 else (psbv - best_other) / (optimum - best_other)


def markdown(rows: list[dict], example: list[dict], seconds: float, record: dict | None = None) -> str:
    cells = defaultdict(list)
    for row in rows:
        cells[(row["K"], row["L"], row["V"], row["divergence"], row["seed"])].append(row)
    groups = defaultdict(list)
    for key, members in cells.items():
        groups[key[:4]].append(members)
    rules = sorted({row["rule"] for row in rows})
    out = io.StringIO()
    out.write("# The i.i.d. multi-path optimum against every rule for i.i.d. paths\n\n")
    out.write("Written by `python experiments/multipath_gap.py` (docs/guides/rules_2025_26.md). Each row: random "
              "context-dependent problems (`random_problem`, one per seed), the optimum of every valid verifier "
              "(selection LP = multi-step LP), and each rule's mean gap to it (E[tau+1] below the optimum, exact "
              "engine). `psbv closes`: the median over seeds of psbv's share of the gap the best other rule leaves "
              "(1 = the optimum; cells where that gap is below 1e-9 are not counted); `psbv best`: seeds where psbv "
              "is at least the best other rule (to 1e-12). iid:3,3 at V = 4 is left out (its LP takes about 100 s "
              f"a problem here). {len(cells)} problems, {seconds:.0f} s.\n\n")
    if record is not None:
        from verispec.provenance import describe_record

        out.write(f"Made by {describe_record(record)}.\n\n")
    header = ["K", "L", "V", "divergence", "optimum"] + [f"{rule} gap" for rule in rules] + ["psbv closes", "psbv best"]
    out.write("| " + " | ".join(header) + " |\n|" + "---|" * len(header) + "\n")
    for key in sorted(groups):
        members = groups[key]
        mean = {rule: statistics.fmean(row["gap"] for cell in members for row in cell if row["rule"] == rule)
                for rule in rules}
        optimum = statistics.fmean(cell[0]["optimum"] for cell in members)
        closed = [value for value in (gap_closed(cell) for cell in members) if value is not None]
        best = sum(1 for cell in members
                   if next(r["block_efficiency"] for r in cell if r["rule"] == "psbv")
                   >= max(r["block_efficiency"] for r in cell if r["rule"] != "psbv") - 1e-12)
        out.write("| " + " | ".join([str(key[0]), str(key[1]), str(key[2]), f"{key[3]:g}", f"{optimum:.4f}"]
                                    + [f"{mean[rule]:.4f}" for rule in rules]
                                    + [f"{statistics.median(closed):.2f}" if closed else "-",
                                       f"{best}/{len(members)}"]) + " |\n")
    shares = [value for value in (gap_closed(cell) for cell in cells.values()) if value is not None]
    at_optimum = sum(1 for cell in cells.values()
                     if cell[0]["optimum"] - next(r["block_efficiency"] for r in cell if r["rule"] == "psbv") < 1e-9)
    out.write(f"\nOver all {len(cells)} problems psbv closes {statistics.fmean(shares):.0%} of the gap the best other "
              f"rule leaves (mean; median {statistics.median(shares):.0%}, lowest {min(shares):.2f}, over the "
              f"{len(shares)} problems where that gap is at least 1e-9), and reaches the optimum (1e-9) on "
              f"{at_optimum}.\n")
    out.write("\nThe issue's example (`iid:3,2`, p = (0.5, 0.3, 0.2), q = (0.2, 0.6, 0.2) at every prefix):\n\n")
    out.write("| rule | E[tau+1] | gap to the optimum |\n|---|---|---|\n")
    out.write(f"| optimum (every valid verifier) | {example[0]['optimum']:.6f} | 0 |\n")
    for row in sorted(example, key=lambda r: -r["block_efficiency"]):
        out.write(f"| {row['rule']} | {row['block_efficiency']:.6f} | {row['gap']:.6f} |\n")
    return out.getvalue()


def summary(rows: list[dict], example: list[dict]) -> dict:
    """The numbers the findings cite: over every problem, where psbv is at least the best other rule (to 1e-12),
    its share of the gap the best other rule leaves, where it reaches the optimum; each rule's mean gap; the
    issue's example."""
    cells = defaultdict(list)
    for row in rows:
        cells[(row["K"], row["L"], row["V"], row["divergence"], row["seed"])].append(row)
    best = sum(1 for cell in cells.values()
               if next(r["block_efficiency"] for r in cell if r["rule"] == "psbv")
               >= max(r["block_efficiency"] for r in cell if r["rule"] != "psbv") - 1e-12)
    shares = [value for value in (gap_closed(cell) for cell in cells.values()) if value is not None]
    at_optimum = sum(1 for cell in cells.values()
                     if cell[0]["optimum"] - next(r["block_efficiency"] for r in cell if r["rule"] == "psbv") < 1e-9)
    rules = sorted({row["rule"] for row in rows})
    return {"problems": len(cells), "psbv_at_least_best_other": best, "psbv_at_optimum": at_optimum,
            "psbv_share_closed_mean": statistics.fmean(shares), "psbv_share_closed_median": statistics.median(shares),
            "mean_gap": {rule: statistics.fmean(r["gap"] for r in rows if r["rule"] == rule) for rule in rules},
            "example": {"tree": "iid:3,2", "p": [0.5, 0.3, 0.2], "q": [0.2, 0.6, 0.2],
                        "optimum": example[0]["optimum"],
                        "rules": {row["rule"]: {"block_efficiency": row["block_efficiency"], "gap": row["gap"]}
                                  for row in example}}}


def run(seeds: int, out: Path, progress: bool = True, write_csv: bool = False) -> list[dict]:
    import shlex

    from verispec.io import atomic_write_json, atomic_write_text
    from verispec.provenance import run_record
    from verispec.simulator import ContextFreeProblem, random_problem

    record = run_record(shlex.join(["python", "experiments/multipath_gap.py", *sys.argv[1:]]))
    start = time.monotonic()
    rows = []
    for paths, length in TREES:
        for size in VOCABS:
            if (paths, length, size) in SKIPPED:
                continue
            for divergence in DIVERGENCES:
                for seed in range(seeds):
                    problem = random_problem(size, length, seed, divergence=divergence)
                    labels = {"K": paths, "L": length, "V": size, "divergence": divergence, "seed": seed}
                    rows.extend(cell_rows(problem, f"iid:{paths},{length}", labels))
                if progress:
                    print(f"iid:{paths},{length} V={size} divergence {divergence}: {time.monotonic() - start:.0f} s",
                          file=sys.stderr)
    example = cell_rows(ContextFreeProblem([0.5, 0.3, 0.2], [0.2, 0.6, 0.2]), "iid:3,2",
                        {"K": 3, "L": 2, "V": 3, "divergence": "issue", "seed": 0})
    out.parent.mkdir(parents=True, exist_ok=True)
    if write_csv:
        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows({key: f"{value:.9f}" if isinstance(value, float) else value for key, value in row.items()}
                         for row in rows + example)
        atomic_write_text(out.with_suffix(".csv"), buffer.getvalue())
    seconds = time.monotonic() - start
    atomic_write_text(out.with_suffix(".md"), markdown(rows, example, seconds, record))
    atomic_write_json(out.with_suffix(".json"), {"record": {**record, "seconds": round(seconds, 1)},
                                                 "seeds": seeds, **summary(rows, example)})
    return rows


def refused_outputs(out: Path) -> str | None:
    """Why this run may not write ``out``.{json,md,csv} (None: it may): each is replaced only where ``out``.json is
    a result file (``verispec.provenance.check_result_output``), the run that wrote the others beside it."""
    from verispec.errors import VerispecError
    from verispec.provenance import check_result_output

    try:
        check_result_output(out.with_suffix(".json"))
    except VerispecError as error:
        return str(error)
    if not out.with_suffix(".json").exists():
        for other in (out.with_suffix(".md"), out.with_suffix(".csv")):
            if other.exists() or other.is_symlink():
                return (f"{str(other)!r} exists without its result file {out.with_suffix('.json').name}: choose "
                        "another --out")
    return None


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=20, help="problems per (K, L, V, divergence) (default 20)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output path without suffix")
    parser.add_argument("--csv", action="store_true", help="also write every row to <out>.csv")
    args = parser.parse_args(argv)
    if args.seeds < 1:
        parser.error(f"--seeds must be at least 1, got {args.seeds}")
    refusal = refused_outputs(args.out)
    if refusal:
        parser.error(refusal)
    run(args.seeds, args.out, write_csv=args.csv)
    print(args.out.with_suffix(".md"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
