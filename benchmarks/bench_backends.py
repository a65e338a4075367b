"""Every verifier's one batched law on numpy float64, torch on the CPU and torch on CUDA, side by side.

Real decoding verifies one draft tree over the model's full vocabulary. For each verifier and a tree kind
it is valid for, random trees are drawn over a vocabulary of V tokens (target and draft conditionals are
softmaxes of seeded random logits per prefix, the draft a noisy copy of the target), and the verifier's
``emission_laws`` is timed on one tree at a time in each backend, after a warm-up; the laws are checked
equal across backends (1e-9 in float64). Rules whose node coupling is a max flow over the V^K ordered
draft tuples (otlp, khisti with K >= 2) are skipped at large V, where the engine refuses them anyway.

    python benchmarks/bench_backends.py --vocab 151936            # Qwen2.5's vocabulary
    python benchmarks/bench_backends.py --quick                    # V = 4096, fewer trees
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

from verispec.simulator import Problem, parse_tree
from verispec.verifiers import REGISTRY

#: benchmarks/measure.py imports as ``measure`` when this script is loaded as a module too (its tests)
if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))

#: Tree kinds in order of preference: the first one a verifier is valid for is used.
TREES = {"delayed": "delayed:4,2,2", "iid": "iid:4,3", "branch": "branch:3,2,1", "hub": "hub-tree:2",
         "greedy": "greedy-tree:3,2", "chain": "chain:6"}


class RandomLogitsProblem(Problem):
    """A context-dependent problem over a large vocabulary, computed on demand: for each prefix, target
    logits ~ N(0, 3^2) per token (seeded by the prefix) and draft logits = target logits + N(0, 1)."""

    exact = False
    horizon = None

    def __init__(self, vocab_size: int, seed: int):
        self.vocab_size = vocab_size
        self._seed = seed
        self._cache: dict = {}

    def _laws(self, prefix):
        if prefix not in self._cache:
            rng = np.random.default_rng([self._seed, len(prefix), *prefix])
            logits = 3.0 * rng.standard_normal(self.vocab_size)
            laws = []
            for noise in (0.0, 1.0):
                shifted = logits + noise * rng.standard_normal(self.vocab_size)
                weights = np.exp(shifted - shifted.max())
                laws.append(weights / weights.sum())
            self._cache[prefix] = laws
        return self._cache[prefix]

    def target(self, prefix):
        return self._laws(tuple(prefix))[0]

    def draft(self, prefix):
        return self._laws(tuple(prefix))[1]


def _timed(function, repeats: int, synchronize=None) -> float:
    function()  # warm-up (kernel compilation, caches)
    if synchronize:
        synchronize()
    start = time.perf_counter()
    for _ in range(repeats):
        function()
    if synchronize:
        synchronize()
    return (time.perf_counter() - start) / repeats


def main(argv=None) -> None:
    from measure import (  # benchmarks/measure.py
        ROWS,
        TABLE,
        add_overwrite_option,
        claim_outputs,
        write_rows,
        write_table,
    )
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocab", type=int, default=32768)
    parser.add_argument("--trees", type=int, default=3, help="random trees per verifier")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--output", default="results/bench_backends")
    add_overwrite_option(parser)
    args = parser.parse_args(argv)
    # before any work: a file there that is not this benchmark's own is refused (unless --overwrite), each
    # output locked for the run (benchmarks/measure.py: the writers' rule)
    claim_outputs(__file__, [("--output", args.output + ".md", TABLE), ("--output", args.output + ".json", ROWS)],
                  overwrite=args.overwrite)
    import torch

    torch.set_num_threads(args.threads)
    size = 4096 if args.quick else args.vocab
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    problem = RandomLogitsProblem(size, seed=0)
    rng = np.random.default_rng(0)
    rows = []
    for name, verifier in sorted(REGISTRY.items()):
        kind = next(kind for kind, spec in TREES.items() if parse_tree(spec).draft_laws & verifier.valid_for)
        drafter = parse_tree(TREES[kind])
        if name in ("otlp", "khisti") and size > 64:
            continue  # a max flow over V^K ordered tuples: refused at this V
        for _ in range(1 if args.quick else args.trees):
            batch = drafter.sample(problem, rng).as_batch()
            host = verifier.emission_laws(batch)
            row = {"verifier": name, "tree": drafter.spec, "V": size, "nodes": batch.num_nodes,
                   "numpy_ms": 1e3 * _timed(lambda v=verifier, b=batch: v.emission_laws(b), args.repeats)}
            for device in devices:
                moved = batch.to_torch(device, torch.float64)
                laws = verifier.emission_laws(moved)
                difference = float(np.abs(laws.cpu().numpy() - host).max())
                if difference > 1e-9:
                    raise AssertionError(f"{name} on {device}: laws differ by {difference:.3g}")
                sync = torch.cuda.synchronize if device == "cuda" else None
                row[f"torch_{device}_ms"] = 1e3 * _timed(lambda v=verifier, m=moved: v.emission_laws(m), args.repeats,
                                                         sync)
            rows.append(row)
            print(json.dumps(row), flush=True)
    load = os.getloadavg()[0]
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none"
    header = (f"V = {size}, float64, one tree per call; torch {torch.__version__}, {args.threads} CPU threads, "
              f"GPU {gpu}, load average {load:.2f}")
    columns = ["verifier", "tree", "nodes", "numpy_ms"] + [f"torch_{d}_ms" for d in devices]
    lines = [header, "", "| " + " | ".join(columns) + " | numpy / fastest torch |",
             "|" + "---|" * (len(columns) + 1)]
    for row in rows:
        fastest = min(row[f"torch_{d}_ms"] for d in devices)
        cells = [str(row[c]) if not c.endswith("_ms") else f"{row[c]:.2f}" for c in columns]
        lines.append("| " + " | ".join(cells) + f" | {row['numpy_ms'] / fastest:.1f} |")
    table = "\n".join(lines) + "\n"
    write_table(args.output + ".md", table)
    write_rows(args.output + ".json", {"header": header, "rows": rows})
    print(table)


if __name__ == "__main__":
    main()
