"""Exact block efficiency over the whole delayed-tree action space of the DDTE paper.

For one problem and one top-down verifier, evaluate E[tau + 1] exactly for every (K, L1, L2) with K in 1..4,
L1 in 0..8, L2 in 0..8 (324 configurations, trees up to depth 16), using the walk DP keyed on problem
states ('dp-metrics') with one node-kernel cache shared by all configurations. Writes a JSON table and a
markdown summary, resumable. The best configuration per K is the one of most tokens per unit time under a
latency model (``verispec.latency``: T = (L1 + L2) t_q + t_p(1 + L1 + K L2); ``--cost-ratio`` t_p / t_q,
``--per-node``, or ``--latency FILE`` measured on a pair), with its E[tau+1] beside it and the configuration
of largest E[tau+1] for contrast (without a price that is always a deepest tree).

    python experiments/delay_sweep.py                          # specinfer, Markov problem, V = 3, seed 0
    python experiments/delay_sweep.py --verifier otlp --vocab 4 --seed 3

The result file records the run's parameters (verifier, problem, V, seed, divergence, method, verispec
version); resuming into a file written with other parameters is refused.
"""

from __future__ import annotations

import time
from pathlib import Path

from tqdm import tqdm

from verispec.files.io import ResultStore
from verispec.latency import LatencyModel
from verispec.simulator import DelayedDrafter, analyze, random_markov_problem
from verispec.study.script_files import run_script
from verispec.verifiers import get_verifier

#: Largest K, L1 and L2 of the sweep (--max-k, --max-trunk, --max-tail): the DDTE paper's space is K 1..4, L1 and L2
#: 0..8 (trees up to depth 16); each configuration is an exact analysis, and the list of them is built at once.
MAX_K, MAX_LENGTH = 16, 16


def main(argv=None) -> int:
    from verispec.study.script_files import ScriptParser

    parser = ScriptParser("delay_sweep", description=__doc__.splitlines()[0])
    parser.add_argument("--verifier", default="specinfer")
    parser.add_argument("--vocab", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--divergence", type=float, default=0.5)
    parser.add_argument("--max-k", type=int, default=4)
    parser.add_argument("--max-trunk", type=int, default=8)
    parser.add_argument("--max-tail", type=int, default=8)
    parser.add_argument("--cost-ratio", type=float, default=4.0, help="t_p / t_q (default 4)")
    parser.add_argument("--per-node", type=float, default=0.0, help="t_p grows by this fraction per tree node")
    parser.add_argument("--latency", default=None, help="a latency model file (verispec latency --out FILE)")
    parser.add_argument("--output", default=None,
                        help="default results/delay_sweep_<verifier>_V<v>_s<seed>_d<divergence>.json")
    args = parser.parse_args(argv)
    return run_script("delay_sweep", lambda held: _run(args, held))


def _run(args, held) -> int:
    """Check every option and output before any work, then analyse the configurations not yet in the store."""
    from verispec.study.script_files import Above, RunOutputs, check_input, check_ranges

    check_ranges([("--vocab", args.vocab, 2, None), ("--seed", args.seed, 0, 2**63 - 1),
                  ("--divergence", args.divergence, 0, None), ("--max-k", args.max_k, 1, MAX_K),
                  ("--max-trunk", args.max_trunk, 0, MAX_LENGTH), ("--max-tail", args.max_tail, 0, MAX_LENGTH),
                  ("--cost-ratio", args.cost_ratio, Above(0), None), ("--per-node", args.per_node, 0, None)])
    output = Path(args.output or f"results/delay_sweep_{args.verifier}_V{args.vocab}_s{args.seed}"
                                 f"_d{args.divergence:g}.json")
    outputs = RunOutputs("--output", store=output, tables=[output.with_suffix(".md")])
    outputs.claim(held)  # writable, room on the disk, the run's own files, one run at a time
    if args.latency:
        check_input(args.latency, "the latency model")
    latency = (LatencyModel.load(args.latency) if args.latency
               else LatencyModel.from_ratio(args.cost_ratio, args.per_node))
    problem = random_markov_problem(args.vocab, args.seed, divergence=args.divergence)
    verifier = get_verifier(args.verifier)
    # Everything a row depends on besides its (K, L1, L2) key; a file from another setting is refused.
    store = ResultStore(output, parameters={
        "verifier": args.verifier, "problem": "random_markov_problem", "vocab": args.vocab, "seed": args.seed,
        "divergence": args.divergence, "method": "dp-metrics"})
    cache: dict = {}
    configurations = [(k, l1, l2) for k in range(1, args.max_k + 1) for l1 in range(args.max_trunk + 1)
                      for l2 in range(args.max_tail + 1)]
    start = time.perf_counter()
    for k, trunk, tail in tqdm(configurations, desc="configurations"):
        key = f"{k},{trunk},{tail}"
        if store.done(key):
            continue
        result = analyze(problem, DelayedDrafter(k, trunk, tail), verifier, method="dp-metrics", kernel_cache=cache)
        store.add(key, {"K": k, "L1": trunk, "L2": tail, "block_efficiency": float(result.block_efficiency),
                        "tau_law": [float(v) for v in result.tau_law]})
    seconds = time.perf_counter() - start
    best, deepest = {}, {}
    for row in store.rows.values():
        row = {**row, "throughput": latency.throughput(row["block_efficiency"],
                                                       DelayedDrafter(row["K"], row["L1"], row["L2"]))}
        if row["K"] not in best or row["throughput"] > best[row["K"]]["throughput"]:
            best[row["K"]] = row
        if row["K"] not in deepest or row["block_efficiency"] > deepest[row["K"]]["block_efficiency"]:
            deepest[row["K"]] = row
    lines = [f"verifier {args.verifier}, Markov problem V={args.vocab} seed={args.seed} divergence={args.divergence}; "
             f"{len(store.rows)} configurations, this run {seconds:.1f} s; latency: {latency.source or latency.unit}, "
             f"plain decoding {latency.plain_throughput():.4f} tokens per {latency.unit}", "",
             f"| K | best (L1, L2) by throughput | tokens per {latency.unit} | its E[tau+1] | largest E[tau+1] at "
             "(L1, L2) |", "|---|---|---|---|---|"]
    lines += [f"| {k} | ({row['L1']}, {row['L2']}) | {row['throughput']:.4f} | {row['block_efficiency']:.6f} | "
              f"{deepest[k]['block_efficiency']:.6f} at ({deepest[k]['L1']}, {deepest[k]['L2']}) |"
              for k, row in sorted(best.items())]
    table = "\n".join(lines) + "\n"
    outputs.write_text(store, output.with_suffix(".md"), table)
    print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
