"""What psbv's cheap realisations of a split keep of its efficiency (issue 66, item 5): E[tau+1] of
``psbv(blend=1)`` (each block of the minorant realised by one blend of its tiling and its even share,
``verispec.verifiers.psbv_blend``) and of GBV (the tiling in the order by p / q at every node, a vertex of the same
polytope; psbv's vertex is GBV wherever no two ratios tie) against psbv's exact split (the lexicographically optimal
base, realised by the decomposition into tilings), in rationals.

    python experiments/psbv_realisation.py   # docs/results/psbv-realisation.json (about a minute)

For each psbv tree kind (``iid:K,L`` and ``delayed:K,L1,L2``), vocabulary V and draft divergence d, ``--seeds``
random context-dependent problems in rationals: at every prefix p from integer weights 0..6 (zeros, and ties between
ratios p / q), q = (1 - d) p + d r with r an independent draw of the same kind (d = 1: an independent draft). Each
rule's E[tau+1] comes from the exact engine's position-selection sum (GBV's selected-path sum), in Fractions, and the
blend's law is checked lossless there (TV = 0 exactly); a problem whose rationals a rule refuses (its own limit,
``psbv_cost.RationalCost``) is counted and left out. Writes the result file (``--out``, JSON with the run's
``record``): per cell and overall, the mean and the least ratio of the blend's and GBV's E[tau+1] to psbv's, and how
often the blend is at least psbv; prints one line a cell.
"""

from __future__ import annotations

import itertools
import random
import statistics
import sys
import time
from fractions import Fraction
from pathlib import Path

#: (tree, vocabulary sizes): both psbv tree kinds, the larger V where rationals stay within seconds a problem.
CELLS = [("iid:2,2", (3, 4, 6, 8)), ("iid:3,2", (3, 4, 5)), ("iid:4,2", (3, 4)), ("iid:2,3", (3, 4)),
         ("iid:3,3", (3,)), ("delayed:2,1,1", (3, 4, 6, 8)), ("delayed:3,1,1", (3, 4, 6)), ("delayed:2,1,2", (3, 4)),
         ("delayed:3,2,1", (3,)), ("delayed:2,2,2", (3,))]
DIVERGENCES = (Fraction(1, 5), Fraction(1, 2), Fraction(1))
RULES = ("psbv", "psbv(blend=1)", "gbv")
DEFAULT_OUT = Path(__file__).resolve().parents[1] / "docs" / "results" / "psbv-realisation.json"
#: Most --seeds (the default 10 takes about a minute).
MAX_SEEDS = 1000


def _weights(rng: random.Random, size: int) -> list[Fraction]:
    weights = [rng.randint(0, 6) for _ in range(size)]
    if not any(weights):
        weights[rng.randrange(size)] = 1
    return [Fraction(w, sum(weights)) for w in weights]


def rational_problem(size: int, depth: int, divergence: Fraction, seed: int):
    """A context-dependent problem in Fractions: p from integer weights at every prefix, q = (1 - d) p + d r."""
    from verispec.simulator import TabularProblem

    rng = random.Random(seed)
    target, draft = {}, {}
    for length in range(depth + 1):
        for prefix in itertools.product(range(size), repeat=length):
            p, r = _weights(rng, size), _weights(rng, size)
            target[prefix], draft[prefix] = p, [(1 - divergence) * a + divergence * b for a, b in zip(p, r)]
    return TabularProblem(size, target, draft, exact=True, horizon=depth)


def cell_ratios(spec: str, size: int, divergence: Fraction, seeds: int) -> dict:
    """E[tau+1] of each rule on ``seeds`` problems, and the blend's and GBV's ratios to psbv's."""
    from verispec.errors import ProblemTooLargeError
    from verispec.simulator import analyze, parse_tree
    from verispec.verifiers import get_verifier

    depth = parse_tree(spec).depth
    rows, refused = [], 0
    for seed in range(seeds):
        problem = rational_problem(size, depth, divergence, 1000 * size + seed)
        try:
            results = {name: analyze(problem, spec, get_verifier(name), method="rule-dp") for name in RULES}
        except ProblemTooLargeError:  # a rule's rationals past its limit (psbv_cost.RationalCost): counted, left out
            refused += 1
            continue
        if results["psbv(blend=1)"].tv_distance != 0:
            raise AssertionError(f"psbv(blend=1) lossy on {spec} at V={size}, seed {seed}")
        rows.append({name: result.block_efficiency for name, result in results.items()})
    blend = [row["psbv(blend=1)"] / row["psbv"] for row in rows]
    vertex = [row["gbv"] / row["psbv"] for row in rows]
    if not rows:
        return {"tree": spec, "V": size, "divergence": str(divergence), "problems": 0, "refused": refused,
                "_blend": [], "_gbv": []}
    return {"tree": spec, "V": size, "divergence": str(divergence), "problems": len(rows), "refused": refused,
            "psbv": statistics.fmean(float(row["psbv"]) for row in rows),
            "blend_mean_ratio": float(sum(blend) / len(blend)), "blend_min_ratio": float(min(blend)),
            "gbv_mean_ratio": float(sum(vertex) / len(vertex)), "gbv_min_ratio": float(min(vertex)),
            "blend_at_least_psbv": sum(ratio >= 1 for ratio in blend), "_blend": blend, "_gbv": vertex}


def run(seeds: int, out: Path) -> dict:
    import shlex

    from verispec.files.io import atomic_write_json
    from verispec.files.provenance import run_record

    record = run_record(shlex.join(["python", "experiments/psbv_realisation.py", *sys.argv[1:]]))
    start = time.monotonic()
    cells, blend, vertex = [], [], []
    for spec, sizes in CELLS:
        for size in sizes:
            for divergence in DIVERGENCES:
                cell = cell_ratios(spec, size, divergence, seeds)
                blend += cell.pop("_blend")
                vertex += cell.pop("_gbv")
                cells.append(cell)
                if not cell["problems"]:
                    continue
                print(f"{spec} V={size} d={divergence}: blend x{cell['blend_mean_ratio']:.4f} (least "
                      f"{cell['blend_min_ratio']:.4f}), gbv x{cell['gbv_mean_ratio']:.4f} "
                      f"({time.monotonic() - start:.0f} s)", file=sys.stderr)
    result = {"record": {**record, "seconds": round(time.monotonic() - start, 1)}, "seeds": seeds,
              "rules": list(RULES), "problems": len(blend),
              "blend_mean_ratio": float(sum(blend) / len(blend)), "blend_min_ratio": float(min(blend)),
              "gbv_mean_ratio": float(sum(vertex) / len(vertex)), "gbv_min_ratio": float(min(vertex)),
              "blend_at_least_psbv": sum(ratio >= 1 for ratio in blend),
              "refused": sum(cell["refused"] for cell in cells), "cells": cells}
    atomic_write_json(out, result)
    return result


def main(argv=None) -> int:
    from verispec.study.script_files import ScriptParser

    parser = ScriptParser("psbv_realisation", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=10, help="problems per (tree, V, divergence) (default 10)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="the result file (JSON)")
    args = parser.parse_args(argv)
    from verispec.study.script_files import RunOutputs, check_ranges, run_script

    def body(held) -> int:
        check_ranges([("--seeds", args.seeds, 1, MAX_SEEDS)])
        RunOutputs("--out", result=args.out).claim(held)  # before any work: writable, the run's own, locked
        result = run(args.seeds, args.out)
        print(f"{args.out}: psbv(blend=1) x{result['blend_mean_ratio']:.4f} psbv's E[tau+1] on average (least "
              f"{result['blend_min_ratio']:.4f}), gbv x{result['gbv_mean_ratio']:.4f} (least "
              f"{result['gbv_min_ratio']:.4f}), over {result['problems']} problems")
        return 0

    return run_script("psbv_realisation", body)


if __name__ == "__main__":
    sys.exit(main())
