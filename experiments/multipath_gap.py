"""The i.i.d. multi-path optimum against every rule for i.i.d. paths: how far each registered rule valid
for ``iid:K,L`` stays below the best valid verifier, by K, L, V and the draft's divergence; and the same on delayed
trees ``delayed:K,L1,L2`` (a trunk of L1 tokens, then K i.i.d. branches of L2 tokens), where the optimum is still
select-then-verify (``verispec.bounds.path_selection``).

    python experiments/multipath_gap.py   # docs/results/multipath_gap.md (about 100 s: 35 s iid, 60 s delayed trees)
    python experiments/multipath_gap.py --seeds 2 --out /tmp/gap   # a smaller run

For each cell (K, L, V, divergence, seed), and (K, L1, L2, V, divergence, seed) on delayed trees: a random
context-dependent problem (``random_problem``, concentration 1, of depth L or L1 + L2), the optimum of every valid
verifier from the selection LP (``verispec.bounds.path_selection``, equal to the multi-step LP; on delayed trees one
selection per trunk and multiset of branches, tests/bounds/test_selection_delayed.py), and the exact E[tau + 1] of
every registry rule valid for the tree (the exact engine, float64). iid:3,3 at V = 4 is left
out: its selection LP has 1.4e5 variables and takes about 100 s a problem here. Writes ``<out>.md`` (means by K, L,
V and divergence; psbv's share of the gap that the best other rule leaves, median over the seeds; the issue's
example; then the delayed trees' table), ``<out>.json`` (the same numbers, the delayed trees' under ``delayed``,
with the run's record: command, commit, date, machine; the result file the README and
docs/findings/multipath_optimum.md are generated from) and, with ``--csv``, ``<out>.csv`` (one row per
cell and rule).
"""

from __future__ import annotations

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
#: (K, L1, L2) of the delayed trees, each at every V of DELAYED_VOCABS (their selection LPs: at most 1.1e4 variables)
DELAYED_TREES = [(2, 1, 1), (3, 2, 1), (2, 1, 2), (3, 1, 2), (2, 2, 2), (2, 1, 3)]
DELAYED_VOCABS = [2, 3, 4]
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


def cell_key(row: dict) -> tuple:
    """The cell (tree, V, divergence, seed) a row belongs to."""
    return row["tree"], row["V"], row["divergence"], row["seed"]


def psbv_at_least_best_other(cell: list[dict]) -> bool:
    """psbv's E[tau + 1] is at least the best other rule's on one cell (to 1e-12)."""
    return (next(r["block_efficiency"] for r in cell if r["rule"] == "psbv")
            >= max(r["block_efficiency"] for r in cell if r["rule"] != "psbv") - 1e-12)


def gap_closed(rows: list[dict]) -> float | None:
    """psbv's share of the gap the best other rule leaves on one cell (None when that gap is below 1e-9)."""
    best_other = max(row["block_efficiency"] for row in rows if row["rule"] != "psbv")
    optimum = rows[0]["optimum"]
    psbv = next(row["block_efficiency"] for row in rows if row["rule"] == "psbv")
    return None if optimum - best_other < 1e-9 else (psbv - best_other) / (optimum - best_other)


def _cells(rows: list[dict]) -> dict:
    cells = defaultdict(list)
    for row in rows:
        cells[cell_key(row)].append(row)
    return cells


def _overall(cells: dict) -> tuple[int, list[float], int]:
    """Over the cells: where psbv is at least the best other rule, its shares of the gap that rule leaves (cells
    where that gap is at least 1e-9), where it reaches the optimum (1e-9)."""
    best = sum(1 for cell in cells.values() if psbv_at_least_best_other(cell))
    shares = [value for value in (gap_closed(cell) for cell in cells.values()) if value is not None]
    at_optimum = sum(1 for cell in cells.values()
                     if cell[0]["optimum"] - next(r["block_efficiency"] for r in cell if r["rule"] == "psbv") < 1e-9)
    return best, shares, at_optimum


def _gap_table(out: io.StringIO, rows: list[dict], delayed: bool) -> None:
    """The table of mean gaps by tree, V and divergence, and the line over all its problems."""
    cells = _cells(rows)
    groups = defaultdict(list)
    for members in cells.values():
        first = members[0]
        groups[(first["K"], first["L1"], first["L"], first["V"], first["divergence"])].append(members)
    rules = sorted({row["rule"] for row in rows})
    shape = ["K", "L1", "L2"] if delayed else ["K", "L"]
    header = shape + ["V", "divergence", "optimum"] + [f"{rule} gap" for rule in rules] + ["psbv closes", "psbv best"]
    out.write("| " + " | ".join(header) + " |\n|" + "---|" * len(header) + "\n")
    for key in sorted(groups):
        members = groups[key]
        mean = {rule: statistics.fmean(row["gap"] for cell in members for row in cell if row["rule"] == rule)
                for rule in rules}
        optimum = statistics.fmean(cell[0]["optimum"] for cell in members)
        closed = [value for value in (gap_closed(cell) for cell in members) if value is not None]
        best = sum(1 for cell in members if psbv_at_least_best_other(cell))
        labels = [str(key[0]), str(key[1]), str(key[2])] if delayed else [str(key[0]), str(key[2])]
        out.write("| " + " | ".join(labels + [str(key[3]), f"{key[4]:g}", f"{optimum:.4f}"]
                                    + [f"{mean[rule]:.4f}" for rule in rules]
                                    + [f"{statistics.median(closed):.2f}" if closed else "-",
                                       f"{best}/{len(members)}"]) + " |\n")
    best, shares, at_optimum = _overall(cells)
    if shares:
        out.write(f"\nOver all {len(cells)} problems psbv closes {statistics.fmean(shares):.0%} of the gap the best "
                  f"other rule leaves (mean; median {statistics.median(shares):.0%}, lowest {min(shares):.2f}, over "
                  f"the {len(shares)} problems where that gap is at least 1e-9), is at least the best other rule on "
                  f"{best} and reaches the optimum (1e-9) on {at_optimum}.\n")
    else:
        out.write(f"\nOn all {len(cells)} problems the best other rule is within 1e-9 of the optimum; psbv reaches "
                  f"it (1e-9) on {at_optimum}.\n")


def markdown(rows: list[dict], example: list[dict], seconds: float, record: dict | None = None) -> str:
    iid = [row for row in rows if row["L1"] == 0]
    delayed = [row for row in rows if row["L1"] > 0]
    out = io.StringIO()
    out.write("# The i.i.d. multi-path optimum against every rule for i.i.d. paths\n\n")
    out.write("Written by `python experiments/multipath_gap.py` (docs/guides/rules_2025_26.md). Each row: random "
              "context-dependent problems (`random_problem`, one per seed), the optimum of every valid verifier "
              "(selection LP = multi-step LP), and each rule's mean gap to it (E[tau+1] below the optimum, exact "
              "engine). `psbv closes`: the median over seeds of psbv's share of the gap the best other rule leaves "
              "(1 = the optimum; cells where that gap is below 1e-9 are not counted); `psbv best`: seeds where psbv "
              "is at least the best other rule (to 1e-12). iid:3,3 at V = 4 is left out (its LP takes about 100 s "
              f"a problem here). {len(_cells(iid))} problems on i.i.d. paths, {len(_cells(delayed))} on delayed "
              f"trees, {seconds:.0f} s.\n\n")
    if record is not None:
        from verispec.files.provenance import describe_record

        out.write(f"Made by {describe_record(record)}.\n\n")
    _gap_table(out, iid, delayed=False)
    out.write("\nThe issue's example (`iid:3,2`, p = (0.5, 0.3, 0.2), q = (0.2, 0.6, 0.2) at every prefix):\n\n")
    out.write("| rule | E[tau+1] | gap to the optimum |\n|---|---|---|\n")
    out.write(f"| optimum (every valid verifier) | {example[0]['optimum']:.6f} | 0 |\n")
    for row in sorted(example, key=lambda r: -r["block_efficiency"]):
        out.write(f"| {row['rule']} | {row['block_efficiency']:.6f} | {row['gap']:.6f} |\n")
    if delayed:
        out.write("\n## Delayed trees\n\n`delayed:K,L1,L2`: a trunk of L1 tokens drawn from q, then K i.i.d. "
                  "branches of L2 tokens from its end. The optimum of every valid verifier is still select-then-"
                  "verify, one selection per trunk and multiset of branches (`verispec.bounds.path_selection`, equal "
                  "to the multi-step LP in tests/bounds/test_selection_delayed.py); the rules are every registered "
                  "rule valid for the tree, the same problems' generator at depth L1 + L2.\n\n")
        _gap_table(out, delayed, delayed=True)
    return out.getvalue()


def _numbers(rows: list[dict]) -> dict:
    cells = _cells(rows)
    best, shares, at_optimum = _overall(cells)
    rules = sorted({row["rule"] for row in rows})
    return {"problems": len(cells), "psbv_at_least_best_other": best, "psbv_at_optimum": at_optimum,
            "psbv_share_closed_mean": statistics.fmean(shares) if shares else None,
            "psbv_share_closed_median": statistics.median(shares) if shares else None,
            "mean_gap": {rule: statistics.fmean(r["gap"] for r in rows if r["rule"] == rule) for rule in rules}}


def summary(rows: list[dict], example: list[dict]) -> dict:
    """The numbers the findings cite: over every problem on i.i.d. paths, where psbv is at least the best other rule
    (to 1e-12), its share of the gap the best other rule leaves, where it reaches the optimum; each rule's mean gap;
    the issue's example; and under ``delayed`` the same numbers on the delayed trees (with their specs)."""
    iid = [row for row in rows if row["L1"] == 0]
    delayed = [row for row in rows if row["L1"] > 0]
    numbers = {**_numbers(iid),
               "example": {"tree": "iid:3,2", "p": [0.5, 0.3, 0.2], "q": [0.2, 0.6, 0.2],
                           "optimum": example[0]["optimum"],
                           "rules": {row["rule"]: {"block_efficiency": row["block_efficiency"], "gap": row["gap"]}
                                     for row in example}}}
    if delayed:
        numbers["delayed"] = {"trees": sorted({row["tree"] for row in delayed}), **_numbers(delayed)}
    return numbers


def run(seeds: int, out: Path, progress: bool = True, write_csv: bool = False) -> list[dict]:
    """Every cell's rows (iid trees, then delayed trees; ``L`` is the branch length, ``L1`` the trunk's, 0 on
    iid:K,L), the tables and the result file written to ``out``.{md,json} (and .csv)."""
    import shlex

    from verispec.files.io import atomic_write_json, atomic_write_text
    from verispec.files.provenance import run_record
    from verispec.simulator import ContextFreeProblem, random_problem

    record = run_record(shlex.join(["python", "experiments/multipath_gap.py", *sys.argv[1:]]))
    start = time.monotonic()
    rows = []
    cells = [(paths, 0, length, size) for paths, length in TREES for size in VOCABS
             if (paths, length, size) not in SKIPPED]
    cells += [(paths, trunk, tail, size) for paths, trunk, tail in DELAYED_TREES for size in DELAYED_VOCABS]
    for paths, trunk, length, size in cells:
        spec = f"delayed:{paths},{trunk},{length}" if trunk else f"iid:{paths},{length}"
        for divergence in DIVERGENCES:
            for seed in range(seeds):
                problem = random_problem(size, trunk + length, seed, divergence=divergence)
                labels = {"K": paths, "L1": trunk, "L": length, "V": size, "divergence": divergence, "seed": seed}
                rows.extend(cell_rows(problem, spec, labels))
            if progress:
                print(f"{spec} V={size} divergence {divergence}: {time.monotonic() - start:.0f} s", file=sys.stderr)
    example = cell_rows(ContextFreeProblem([0.5, 0.3, 0.2], [0.2, 0.6, 0.2]), "iid:3,2",
                        {"K": 3, "L1": 0, "L": 2, "V": 3, "divergence": "issue", "seed": 0})
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


#: Most --seeds: the default 20 takes about 100 s; 10,000 would take a day, and every row is held in memory.
MAX_SEEDS = 10_000


def outputs(out: Path, write_csv: bool):
    """The files this run writes (``verispec.study.script_files.RunOutputs``): ``out``.json, the result file, and beside
    it ``out``.md (and .csv), each replaced only where ``out``.json is a result file (``check_result_output``), the
    run that wrote them."""
    from verispec.study.script_files import RunOutputs

    tables = [out.with_suffix(".md")] + ([out.with_suffix(".csv")] if write_csv else [])
    return RunOutputs("--out", result=out.with_suffix(".json"), tables=tables)


def main(argv=None) -> int:
    from verispec.study.script_files import ScriptParser

    parser = ScriptParser("multipath_gap", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=20, help="problems per (K, L, V, divergence) (default 20)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output path without suffix")
    parser.add_argument("--csv", action="store_true", help="also write every row to <out>.csv")
    args = parser.parse_args(argv)
    from verispec.study.script_files import check_ranges, run_script

    def body(held) -> int:
        check_ranges([("--seeds", args.seeds, 1, MAX_SEEDS)])
        outputs(args.out, args.csv).claim(held)  # before any work: writable, room on the disk, the run's own, locked
        run(args.seeds, args.out, write_csv=args.csv)
        print(args.out.with_suffix(".md"))
        return 0

    return run_script("multipath_gap", body)


if __name__ == "__main__":
    sys.exit(main())
