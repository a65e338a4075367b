"""Size and solve time of the multi-step LP (verispec.bounds.multistep) for growing (V, K, L).

For each (tree, V, restriction) in the grid it builds and solves the LP of ``optimal_block_efficiency`` on
a seeded random problem and records the draft outcomes, variables, equality constraints, nonzeros of the
constraint matrix, the wall time (enumerating the draft outcomes included) and the optimum. A grid point
above the variable limit or the nonzero limit is recorded with the counts ``ProblemTooLargeError``
reported, one whose draft outcomes cannot even be enumerated likewise. Rows are saved after each point,
so an interrupted run resumes; --fresh starts over (replacing the file only once a row exists, and only a
row store this script wrote: a file of the user's at --output is refused, never deleted).

    python experiments/lp_sizes.py                        # results/lp_sizes.json + .md
    python experiments/lp_sizes.py --quick                # a small grid
    python experiments/lp_sizes.py --max-variables 600000 # a larger limit
"""

from __future__ import annotations

import itertools
import re
import time
from pathlib import Path

from tqdm import tqdm

from verispec.bounds.multistep import DEFAULT_MAX_NONZEROS, optimal_block_efficiency
from verispec.errors import EnumerationTooLargeError, ProblemTooLargeError
from verispec.files.io import ResultStore
from verispec.lp_analysis.solve import DEFAULT_MAX_VARIABLES
from verispec.simulator import parse_tree, random_problem
from verispec.study.script_files import RunOutputs, check_ranges, run_script


def grid(quick: bool):
    """(tree spec, V, restriction) triples, smallest first within each tree family."""
    sizes = (2, 3) if quick else (2, 3, 4)
    trees = ([f"iid:{k},{length}" for k, length in itertools.product((1, 2), (1, 2))] if quick else
             [f"iid:{k},{length}" for k, length in itertools.product((1, 2, 3), (1, 2, 3))]
             + [f"chain:{length}" for length in (4, 5, 6)] + ["hub", "greedy:3", "delayed:2,1,1"])
    for spec, size in itertools.product(trees, sizes):
        yield spec, size, None
        if spec.startswith("iid:") and not spec.startswith("iid:1,"):
            yield spec, size, "selected-path"


def _number(found) -> int | None:
    return int(found.group(1).replace(",", "")) if found else None


def measure(spec: str, size: int, restriction: str | None, limit: int, max_nonzeros: int) -> dict:
    drafter = parse_tree(spec)
    problem = random_problem(size, drafter.depth, 0, divergence=0.7)
    row = {"tree": spec, "V": size, "restriction": restriction or "none"}
    start = time.perf_counter()
    try:
        optimum = optimal_block_efficiency(problem, drafter, limit=limit, restriction=restriction,
                                           max_nonzeros=max_nonzeros)
    except ProblemTooLargeError as error:
        # "... about N variables ..." or "... about M nonzero coefficients (N variables) ..."
        nonzeros = re.search(r"about ([\d,]+) nonzero", str(error))
        variables = re.search(r"([\d,]+) variables", str(error))
        return {**row, "status": "too many nonzeros" if nonzeros else "too many variables",
                "variables": _number(variables), "nonzeros": _number(nonzeros), "seconds": time.perf_counter() - start}
    except EnumerationTooLargeError:
        return {**row, "status": "outcomes not enumerable", "seconds": time.perf_counter() - start}
    return {**row, "status": "ok", "outcomes": optimum.num_draft_outcomes, "variables": optimum.num_variables,
            "constraints": optimum.num_constraints, "nonzeros": optimum.num_nonzeros,
            "seconds": time.perf_counter() - start, "block_efficiency": optimum.block_efficiency}


def table(rows) -> str:
    lines = ["| tree | V | class | draft outcomes | variables | constraints | nonzeros | seconds | E[tau+1] |",
             "|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        if row["status"] == "ok":
            lines.append(f"| {row['tree']} | {row['V']} | {row['restriction']} | {row['outcomes']:,} | "
                         f"{row['variables']:,} | {row['constraints']:,} | {row['nonzeros']:,} | "
                         f"{row['seconds']:.3f} | {row['block_efficiency']:.6f} |")
        else:
            variables, nonzeros = (f"{row[k]:,}" if row.get(k) else "-" for k in ("variables", "nonzeros"))
            lines.append(f"| {row['tree']} | {row['V']} | {row['restriction']} | - | {variables} | - | {nonzeros} | "
                         f"{row['seconds']:.3f} | {row['status']} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    from verispec.study.script_files import ScriptParser

    parser = ScriptParser("lp_sizes", description=__doc__.splitlines()[0])
    parser.add_argument("--output", default="results/lp_sizes.json")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--fresh", action="store_true", help="start over: the rows in --output are not reused")
    parser.add_argument("--max-variables", type=int, default=DEFAULT_MAX_VARIABLES)
    parser.add_argument("--max-nonzeros", type=int, default=DEFAULT_MAX_NONZEROS)
    args = parser.parse_args(argv)
    return run_script("lp_sizes", lambda held: _run(args, held))


def _run(args, held) -> int:
    """Check the limits and the outputs before any work, then measure the grid points not yet in the store."""
    from verispec.guard.limits import MAX_LP_VARIABLES

    check_ranges([("--max-variables", args.max_variables, 1, MAX_LP_VARIABLES),
                  ("--max-nonzeros", args.max_nonzeros, 1, None)])
    path = Path(args.output)
    outputs = RunOutputs("--output", store=path, tables=[path.with_suffix(".md")])
    outputs.claim(held)  # writable, room on the disk, the run's own files (a user's is never deleted), locked
    # the LP limits are part of each row's key; the problem is fixed in measure(). --fresh: the store's rows are
    # not read, and the first row replaces the file (atomically: an interrupted fresh run keeps the old one)
    store = ResultStore(path, parameters={"benchmark": "lp_sizes", "problem": "random_problem", "seed": 0,
                                          "divergence": 0.7}, overwrite=args.fresh)
    for spec, size, restriction in tqdm(list(grid(args.quick)), desc="configurations"):
        key = f"{spec}|V={size}|{restriction or 'none'}|limits={args.max_variables},{args.max_nonzeros}"
        if not store.done(key):
            store.add(key, measure(spec, size, restriction, args.max_variables, args.max_nonzeros))
    text = (f"Multi-step LP, limits: {args.max_variables:,} variables, {args.max_nonzeros:,} nonzeros\n\n"
            + table(store.rows.values()))
    outputs.write_text(store, path.with_suffix(".md"), text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
