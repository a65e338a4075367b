"""DDTree drafts and the speed-of-light bound, exactly (issue 67, items 2 and 6); writes docs/results/ddtree.json.

1. hipfire PR #483's claim that min(1, p/q) is biased on DDTree's trees: the smallest witness (V, B, L, in that
   order of size) by exhaustive search over context-free problems with probabilities in quarters, in rationals,
   for token-level verification of the first child (``naivetree``) and SpecInfer forced onto the tree, and their TV
   on random problems; naive sampling (``nss``) beside them.
2. The fixed-tree bound 1 + sum of p over the nodes against the multi-step LP on random problems.
3. Block verification on the product law (``ProductDrafts``: DFlash's chain, each position drawn from its
   marginal): its TV and E[tau + 1], against the chain of the autoregressive draft and the DDTree of the same nodes.
4. The speed-of-light term of arXiv 2512.11718 against the exact best tree of capacity P, i.i.d. targets.
"""

from __future__ import annotations

import copy
import itertools
import math
import shlex
import sys
import time
from fractions import Fraction as F
from pathlib import Path

DEFAULT_OUT = Path("docs/results/ddtree.json")
SPEED_LAWS = ([0.5, 0.3, 0.2], [0.25, 0.25, 0.25, 0.25], [0.7, 0.2, 0.1], [0.9, 0.05, 0.05], [0.6, 0.4])
CAPACITIES = (10, 100, 1000, 10000, 100000)


def forced(name):
    """The registered rule ``name`` claiming the deterministic draft law too: the wrong pairing, on purpose."""
    from verispec.simulator.drafters import DraftLaw
    from verispec.verifiers import get_verifier

    rule = copy.copy(get_verifier(name))
    rule.valid_for = frozenset(rule.valid_for) | {DraftLaw.DETERMINISTIC}
    return rule


def smallest_witness():
    """The first (V, B, L) in order of V + B + L, then V, B, with a quarter-grid problem on which min(1, p/q)
    (naivetree) has TV > 0 on ddtree:B,L; the largest TV there, its problem, and SpecInfer's and nss's TV on it."""
    from verispec.simulator import ContextFreeProblem
    from verispec.simulator.engine import analyze
    from verispec.verifiers import get_verifier

    naive, specinfer, nss = forced("naivetree"), forced("specinfer"), get_verifier("nss")
    for total in range(3, 9):
        for size, budget in itertools.product(range(1, total), repeat=2):
            length = total - size - budget
            if length < 1:
                continue
            grid = [law for law in itertools.product(range(5), repeat=size) if sum(law) == 4]
            best = None
            for p, q in itertools.product(grid, repeat=2):
                problem = ContextFreeProblem([F(x, 4) for x in p], [F(x, 4) for x in q], exact=True, horizon=length)
                tv = analyze(problem, f"ddtree:{budget},{length}", naive).tv_distance
                if tv > 0 and (best is None or tv > best[0]):
                    best = (tv, p, q, problem)
            if best is not None:
                tv, p, q, problem = best
                spec = f"ddtree:{budget},{length}"
                return {"vocab": size, "budget": budget, "length": length, "tree": spec,
                        "target": [f"{x}/4" for x in p], "draft": [f"{x}/4" for x in q], "tv_naivetree": str(tv),
                        "tv_specinfer": str(analyze(problem, spec, specinfer).tv_distance),
                        "tv_nss": str(analyze(problem, spec, nss).tv_distance),
                        "smaller_sizes_without_witness": "V = 1 only (one token: every rule is exact)"}
    return None


def random_bias(seeds):
    from verispec.simulator import random_problem
    from verispec.simulator.engine import analyze
    from verispec.verifiers import get_verifier

    rows = {}
    for name, rule in (("naivetree", forced("naivetree")), ("specinfer", forced("specinfer")),
                       ("nss", get_verifier("nss"))):
        tvs = [analyze(random_problem(3, 2, seed), "ddtree:4,2", rule).tv_distance for seed in range(seeds)]
        rows[name] = {"mean_tv": sum(tvs) / len(tvs), "max_tv": max(tvs), "min_tv": min(tvs)}
    return {"tree": "ddtree:4,2", "vocab": 3, "problems": seeds, "rules": rows}


def bound_against_lp(seeds):
    from verispec.bounds.fixed_tree import fixed_tree_bound
    from verispec.bounds.multistep import optimal_block_efficiency
    from verispec.simulator import parse_tree, random_problem
    from verispec.simulator.engine import analyze
    from verispec.verifiers import get_verifier

    rows = []
    for spec, size in (("ddtree:5,2", 3), ("ddtree:8,3", 3)):
        gaps, nss_gaps = [], []
        for seed in range(seeds):
            problem, drafter = random_problem(size, drafter_depth(spec), seed), parse_tree(spec)
            bound = fixed_tree_bound(drafter.outcomes(problem)[0][0])
            gaps.append(abs(optimal_block_efficiency(problem, drafter).block_efficiency - bound))
            nss_gaps.append(abs(analyze(problem, drafter, get_verifier("nss")).block_efficiency - bound))
        rows.append({"tree": spec, "vocab": size, "problems": seeds, "max_abs_lp_minus_bound": max(gaps),
                     "max_abs_nss_minus_bound": max(nss_gaps)})
    return rows


def drafter_depth(spec):
    from verispec.simulator import parse_tree

    return parse_tree(spec).depth


def product_law(seeds, size=3, length=3):
    from verispec.bounds.fixed_tree import best_tree_paths
    from verispec.simulator import random_problem
    from verispec.simulator.ddtree import ProductDrafts
    from verispec.simulator.engine import analyze
    from verispec.verifiers import get_verifier

    bv, nss = get_verifier("bv"), get_verifier("nss")
    sums = {"bv_product_chain": 0.0, "bv_autoregressive_chain": 0.0, f"nss_ddtree_{length}": 0.0,
            f"best_tree_{length}": 0.0, "nss_ddtree_8": 0.0}
    worst_tv = 0.0
    for seed in range(seeds):
        base = random_problem(size, length, seed, divergence=0.5)
        product = ProductDrafts(base, length)
        result = analyze(product, f"chain:{length}", bv)
        worst_tv = max(worst_tv, result.tv_distance)
        sums["bv_product_chain"] += result.block_efficiency
        sums["bv_autoregressive_chain"] += analyze(base, f"chain:{length}", bv).block_efficiency
        sums[f"nss_ddtree_{length}"] += analyze(base, f"ddtree:{length},{length}", nss).block_efficiency
        sums[f"best_tree_{length}"] += best_tree_paths(base, length)[1]
        sums["nss_ddtree_8"] += analyze(base, f"ddtree:8,{length}", nss).block_efficiency
    return {"vocab": size, "length": length, "problems": seeds, "divergence": 0.5,
            "max_tv_bv_on_product_chain": worst_tv,
            "mean_block_efficiency": {key: value / seeds for key, value in sums.items()}}


def speed_of_light():
    from verispec.bounds.fixed_tree import best_tree_paths, log_moments, speed_of_light_term
    from verispec.simulator import ContextFreeProblem

    rows = []
    for law in SPEED_LAWS:
        problem = ContextFreeProblem(law, law)
        mu, mu_2 = log_moments(law)
        for capacity in CAPACITIES:
            value = float(best_tree_paths(problem, capacity)[1])
            expected_x = value - 1  # E[tau]: the drafted tokens accepted
            term = speed_of_light_term(mu, mu_2, capacity)
            rows.append({"target": law, "capacity": capacity, "mu": mu, "mu_2": mu_2, "best_tree_E_tau": expected_x,
                         "term_nats": term, "term_bits": speed_of_light_term(mu, mu_2, capacity, base=2),
                         "log_P_over_mu": math.log(capacity) / mu, "term_minus_best": term - expected_x,
                         "best_over_term": expected_x / term})
    return rows


def main(argv=None) -> int:
    from verispec.study.script_files import ScriptParser, run_script

    parser = ScriptParser("ddtree", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=20, help="random problems a check (default 20)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"the result file (default {DEFAULT_OUT})")
    args = parser.parse_args(argv)
    return run_script("ddtree", lambda held: _run(args, argv, held))


def _run(args, argv, held) -> int:
    from verispec.files.io import atomic_write_json
    from verispec.files.provenance import run_record
    from verispec.study.script_files import RunOutputs, check_ranges

    check_ranges([("--seeds", args.seeds, 1, 200)])
    RunOutputs("--out", result=args.out).claim(held)
    record = run_record(shlex.join(["python", "experiments/ddtree.py", *(argv or sys.argv[1:])]), [])
    start = time.monotonic()
    result = {"witness": smallest_witness(), "random_bias": random_bias(args.seeds),
              "fixed_tree_bound_vs_lp": bound_against_lp(args.seeds), "product_law": product_law(args.seeds),
              "speed_of_light": speed_of_light()}
    atomic_write_json(args.out, {"record": {**record, "seconds": round(time.monotonic() - start, 1)}, **result})
    print(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
