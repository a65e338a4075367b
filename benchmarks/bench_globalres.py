"""Global Resolution's cost per tree node against the vocabulary size V and the number of drafts K, beside
SpecInfer's node law measured in the same run (both as the exact engine and real decoding call them: the node's
output law for one row of K drafted children, float64 numpy).

    OMP_NUM_THREADS=1 python benchmarks/bench_globalres.py
    python benchmarks/bench_globalres.py --quick          # V up to 16,384, fewer repeats

The laws are softmaxes of Gaussian logits (scale 2.5; the draft's logits are the target's plus Gaussian noise
of scale 1), dense over the whole vocabulary (temperature 1, no top-k), and with q filtered to its top 20
(Qwen's recommended top-k). Each node is new (the solver's per-node cache is cleared), so a call pays for
the step-1 rule's programs; medians of ``--repeats`` calls, in milliseconds, with the load average before and
after. The acceptance of the rule (sum min(p, p_I)) is printed beside alpha*, the OT optimum (below it only where
the support was grouped), and beside SpecInfer's acceptance at the same node (closed form).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import numpy as np


def laws(vocab: int, seed: int, top_k: int | None):
    rng = np.random.default_rng(seed)
    logits = rng.standard_normal(vocab) * 2.5
    draft = logits + rng.standard_normal(vocab)
    p = np.exp(logits - logits.max())
    q = np.exp(draft - draft.max())
    if top_k is not None:
        q[np.argsort(-q)[top_k:]] = 0.0
    return p / p.sum(), q / q.sum()


def specinfer_acceptance(p, q, num_drafts: int) -> float:
    """SpecInfer's node acceptance in closed form: its residual after a rejection, norm((r - q)+), does not depend
    on which draft was rejected, so P(all K rejected) = prod_i (1 - sum min(r_i, q)) with r_0 = p."""
    residual, rejected = p, 1.0
    for _ in range(num_drafts):
        accepted = np.minimum(residual, q).sum()
        rejected *= 1 - accepted
        left = np.maximum(residual - q, 0.0)
        if left.sum() <= 0:
            break
        residual = left / left.sum()
    return 1 - rejected


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="V up to 16,384 and 3 repeats")
    parser.add_argument("--json", help="also write the rows here")
    args = parser.parse_args(argv)
    from verispec.lp_analysis.single_position import iid_ot_optimum
    from verispec.verifiers.globalres import GlobalResolutionSolver
    from verispec.verifiers.specinfer import SpecInferSolver

    vocabularies = (64, 1024, 16_384) if args.quick else (64, 1024, 16_384, 151_936)
    repeats = 3 if args.quick else args.repeats
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    rows = []
    for vocab in vocabularies:
        for top_k in (None, 20):
            for num_drafts in (2, 4, 6, 8):
                timings = {"globalres": [], "specinfer": []}
                accepted = alpha = baseline = 0.0
                for repeat in range(repeats + 1):  # the first call warms caches of shapes, not of nodes
                    p, q = laws(vocab, repeat, top_k)
                    children = np.random.default_rng(repeat).choice(vocab, num_drafts, p=q)[None, :]
                    for name, solver in (("globalres", GlobalResolutionSolver()), ("specinfer", SpecInferSolver())):
                        start = time.perf_counter()
                        solver.output_laws(p[None, :], q[None, :], children)
                        elapsed = time.perf_counter() - start
                        if repeat:
                            timings[name].append(elapsed)
                        if name == "globalres" and repeat:
                            accepted += np.minimum(p, solver.resolution(p, q, num_drafts).intermediate).sum()
                            alpha += iid_ot_optimum(p, q, num_drafts).alpha
                            baseline += specinfer_acceptance(p, q, num_drafts)
                row = {"V": vocab, "top_k": top_k, "K": num_drafts,
                       "globalres_ms": statistics.median(timings["globalres"]) * 1e3,
                       "specinfer_ms": statistics.median(timings["specinfer"]) * 1e3,
                       "acceptance": accepted / repeats, "alpha_star": alpha / repeats,
                       "specinfer_acceptance": baseline / repeats}
                row["ratio"] = row["globalres_ms"] / row["specinfer_ms"]
                rows.append(row)
                print(f"V={vocab:>7} top_k={str(top_k):>4} K={num_drafts}: globalres {row['globalres_ms']:8.2f} ms, "
                      f"specinfer {row['specinfer_ms']:7.2f} ms (x{row['ratio']:.1f}); acceptance "
                      f"{row['acceptance']:.4f}, alpha* {row['alpha_star']:.4f}, specinfer "
                      f"{row['specinfer_acceptance']:.4f}", flush=True)
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(rows, handle, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
