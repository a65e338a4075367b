"""Layer Verification's "near-optimal with Global Resolution as the base" claim (Cha, Cho & Yun 2026, AdaptFM @ ICML
2026, OpenReview XrqcUo6B6L; verispec's reconstruction ``lv:<base>``, verispec/verifiers/layer.py), measured: the gap
of E[tau + 1] of lv:globalres, lv:specinfer and lv:naive (lv:rrsw on branch trees, whose children are drawn without
replacement) to the best any valid verifier can do, beside psbv and the base rules' top-down walks, on iid, delayed and
branch trees at small V.

    python experiments/layer_verification.py   # docs/results/layer-verification.json (about 30 s)
    python experiments/layer_verification.py --seeds 2 --out /tmp/lv.json   # a smaller run

Each cell (tree, V, divergence, seed) is a random context-dependent problem (``random_problem``, concentration 1);
the optimum is the selection LP on iid and delayed trees (``verispec.bounds.path_selection``, equal to the multi-step
LP) and the multi-step LP itself on branch trees (``verispec.bounds.multistep``); every rule's E[tau + 1] is the
exact engine's (float64), and a rule found lossy stops the run.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

#: (tree, vocabulary sizes): small enough that every LP solves in well under a second.
TREES = [("iid:2,2", (2, 3)), ("iid:3,2", (2, 3)), ("delayed:2,1,1", (2, 3)), ("delayed:2,1,2", (2, 3)),
         ("branch:2,2", (2, 3)), ("branch:2,1,1", (3,))]
DIVERGENCES = (0.2, 1.0)
LIFTED = ("lv:globalres", "lv:specinfer", "lv:naive", "lv:rrsw")
OTHERS = ("psbv", "globalres", "specinfer", "naivetree", "rrsw", "traversal")
DEFAULT_OUT = Path(__file__).resolve().parents[1] / "docs" / "results" / "layer-verification.json"


def rules_for(spec: str) -> list[str]:
    """The lifted rules and the comparison rules valid for ``spec``'s draft law."""
    from verispec.simulator import parse_tree
    from verispec.verifiers import get_verifier

    laws = parse_tree(spec).draft_laws
    return [name for name in LIFTED + OTHERS if laws & get_verifier(name).valid_for]


def optimum(problem, spec: str) -> float:
    """The best E[tau + 1] of any valid verifier on ``spec``'s trees."""
    from verispec.bounds.multistep import optimal_block_efficiency
    from verispec.bounds.path_selection import selection_optimum
    from verispec.simulator import parse_tree

    drafter = parse_tree(spec)
    if spec.startswith("branch"):
        return float(optimal_block_efficiency(problem, drafter).block_efficiency)
    return float(selection_optimum(problem, drafter).block_efficiency)


def cell(problem, spec: str) -> dict:
    """{rule: E[tau + 1]} and the optimum on one problem; RuntimeError when a rule is lossy."""
    from verispec.simulator import analyze, parse_tree
    from verispec.verifiers import get_verifier

    drafter, values = parse_tree(spec), {}
    for name in rules_for(spec):
        result = analyze(problem, drafter, get_verifier(name))
        if not result.lossless:
            raise RuntimeError(f"{name} is lossy on {spec}: TV {result.tv_distance}")
        values[name] = float(result.block_efficiency)
    return {"optimum": optimum(problem, spec), "rules": values}


def summary(rows: list[dict]) -> dict:
    """Per tree and rule: the mean E[tau + 1], the mean and largest gap to the optimum, and the share of cells where
    the rule is within 1e-9 of it (the optimum's solver tolerance)."""
    out = {}
    for spec, _ in TREES:
        cells = [row for row in rows if row["tree"] == spec]
        table = {}
        for name in cells[0]["rules"]:
            gaps = [row["optimum"] - row["rules"][name] for row in cells]
            table[name] = {"mean_block_efficiency": statistics.fmean(row["rules"][name] for row in cells),
                           "mean_gap": statistics.fmean(gaps), "max_gap": max(gaps),
                           "optimal_share": sum(gap < 1e-9 for gap in gaps) / len(gaps)}
        out[spec] = {"cells": len(cells), "mean_optimum": statistics.fmean(row["optimum"] for row in cells),
                     "rules": table}
    return out


def run(seeds: int, out: Path, progress: bool = True) -> dict:
    import shlex

    from verispec.files.io import atomic_write_json
    from verispec.files.provenance import run_record
    from verispec.simulator import parse_tree, random_problem

    record = run_record(shlex.join(["python", "experiments/layer_verification.py", *sys.argv[1:]]))
    start, rows = time.monotonic(), []
    for spec, sizes in TREES:
        depth = parse_tree(spec).depth
        for size in sizes:
            for divergence in DIVERGENCES:
                for seed in range(seeds):
                    problem = random_problem(size, depth, seed, divergence=divergence)
                    rows.append({"tree": spec, "V": size, "divergence": divergence, "seed": seed,
                                 **cell(problem, spec)})
        if progress:
            print(f"{spec}: {time.monotonic() - start:.0f} s", file=sys.stderr)
    seconds = time.monotonic() - start
    result = {"record": {**record, "seconds": round(seconds, 1)}, "seeds": seeds, "divergences": list(DIVERGENCES),
              "summary": summary(rows), "rows": rows}
    atomic_write_json(out, result)
    return result


def main(argv=None) -> int:
    from verispec.study.script_files import RunOutputs, ScriptParser, check_ranges, run_script

    parser = ScriptParser("layer_verification", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=20, help="problems per (tree, V, divergence) (default 20)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="the result file (JSON)")
    args = parser.parse_args(argv)

    def body(held) -> int:
        check_ranges([("--seeds", args.seeds, 1, 1000)])
        RunOutputs("--out", result=args.out).claim(held)  # before any work: writable, the run's own, locked
        run(args.seeds, args.out)
        print(args.out)
        return 0

    return run_script("layer_verification", body)


if __name__ == "__main__":
    sys.exit(main())
