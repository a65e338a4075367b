"""The multi-step LP on a single path: the single-path form (verispec.bounds.chain_lp, one variable per
output prefix) against the full LP over every draft outcome (form="full"), side by side in one run.

For chain:L at V = 3 (a seeded random context-dependent problem) it times ``optimal_block_efficiency`` in both
forms (the optimal verifier's table included), checks they agree to 1e-9, and reports the ratio; past
``--full-up-to`` only the single-path form runs (the full LP of chain:8 took 73 s). CPU seconds (process time,
one thread) and the load average are recorded with each row.

    python benchmarks/bench_chain_lp.py                 # results/bench_chain_lp.json + .md
    python benchmarks/bench_chain_lp.py --lengths 4,5,6 --full-up-to 6
    python benchmarks/bench_chain_lp.py --lengths 8 --full-up-to 8 --result docs/results/bench/bench_chain_lp.json

``--result FILE`` writes the rows of this run's lengths with the run's record (``measure.write_result``): ``now`` the
single-path form's seconds, ``before`` the full LP's (None past ``--full-up-to``), ``ratio`` before / now; a row
resumed from the store (measured by an earlier run) is marked ``"resumed": true``.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

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

from verispec.bounds.multistep import optimal_block_efficiency
from verispec.simulator import parse_tree, random_problem


def timed(problem, drafter, form: str, limit: int) -> tuple[float, float, int]:
    start = time.process_time()
    optimum = optimal_block_efficiency(problem, drafter, form=form, limit=limit)
    return time.process_time() - start, optimum.block_efficiency, optimum.num_variables


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", default="results/bench_chain_lp.json")
    parser.add_argument("--lengths", default="4,5,6,7,8,9,10")
    parser.add_argument("--full-up-to", type=int, default=7)
    parser.add_argument("--vocab", type=int, default=3)
    parser.add_argument("--max-variables", type=int, default=400_000)
    parser.add_argument("--fresh", action="store_true",
                        help="discard saved rows (of a store verispec wrote) and start over")
    add_overwrite_option(parser)
    parser.add_argument("--result", help="also write this run's rows and its record here (JSON)")
    args = parser.parse_args(argv)
    path = Path(args.output)
    claim_outputs(__file__, [("--output", path, STORE), ("--output (its table)", path.with_suffix(".md"), TABLE)],
                  overwrite=args.overwrite)  # before any work, and before --fresh discards anything
    started = start_record(__file__, argv, result=args.result) if args.result else None
    store = open_store(__file__, path, {"benchmark": "bench_chain_lp", "problem": "random_problem", "seed": 0,
                                        "divergence": 0.7, "vocab": args.vocab, "limit": args.max_variables},
                       fresh=args.fresh or args.overwrite)
    lengths, resumed = [int(x) for x in args.lengths.split(",")], set()
    for length in tqdm(lengths, desc="lengths"):
        key = f"chain:{length}|full={length <= args.full_up_to}"
        if store.done(key):
            resumed.add(key)
            continue
        problem = random_problem(args.vocab, length, 0, divergence=0.7)
        drafter = parse_tree(f"chain:{length}")
        single_seconds, single_value, single_variables = timed(problem, drafter, "auto", args.max_variables)
        row = {"tree": drafter.spec, "V": args.vocab, "single_seconds": single_seconds, "single_variables":
               single_variables, "block_efficiency": single_value, "load": os.getloadavg()[0]}
        if length <= args.full_up_to:
            full_seconds, full_value, full_variables = timed(problem, drafter, "full", args.max_variables)
            assert abs(full_value - single_value) <= 1e-9, (full_value, single_value)
            row.update(full_seconds=full_seconds, full_variables=full_variables, ratio=full_seconds / single_seconds)
        store.add(key, row)
    rows = []
    for row in store.rows.values():
        full = ([f"{row['full_variables']:,}", f"{row['full_seconds']:.2f}", f"x{row['ratio']:.0f}"] if "ratio" in row
                else ["-", "-", "-"])
        rows.append([row["tree"], f"{row['single_variables']:,}", f"{row['single_seconds']:.2f}", *full,
                     f"{row['block_efficiency']:.6f}", f"{row['load']:.2f}"])
    publish_table(path.with_suffix(".md"),
                  f"Multi-step LP on chain:L at V = {args.vocab}: CPU seconds, single-path form against the full LP "
                  "(same run, one thread)",
                  ["tree", "single-path variables", "seconds", "full LP variables", "seconds", "full / single",
                   "E[tau+1]", "load"], rows)
    if started:
        keys = [f"chain:{length}|full={length <= args.full_up_to}" for length in lengths]
        write_result(args.result, started, result_values(store, keys, resumed, args.vocab))


def result_values(store, keys: list[str], resumed: set, vocab: int) -> dict:
    """The result file's values: one row per length of this run, the single-path form (now) against the full LP
    (before)."""
    rows = []
    for key in keys:
        row = store.rows[key]
        rows.append(comparison(row["single_seconds"], row.get("full_seconds"), tree=row["tree"], V=row["V"],
                               single_variables=row["single_variables"], full_variables=row.get("full_variables"),
                               block_efficiency=row["block_efficiency"], load=row["load"], resumed=key in resumed))
    return {"benchmark": "bench_chain_lp", "unit": "s CPU (process time, one call)",
            "now": "optimal_block_efficiency, the single-path form (verispec.bounds.chain_lp; form='auto')",
            "before": "the full LP over every draft outcome (form='full'), same run; None past --full-up-to",
            "problem": f"random_problem({vocab}, L, 0, divergence=0.7)", "rows": rows}

if __name__ == "__main__":
    main()
