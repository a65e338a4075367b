"""The delay selector's cost per block at Qwen's vocabulary, side by side in one run: the scalar features of a
block's root (``verispec.selector.features``, the float32 kernel) against the same six law features in float64
(the previous kernel's arithmetic: one log per law, dot products, a support test per KL), and the network's
forward (the paper's MLP over the 324 actions of ``PAPER_GRID``) without and with hidden states (Qwen2.5 1.5B's
1,536 and 0.5B's 896 dimensions, projected to 128 and layer-normed).

    OMP_NUM_THREADS=1 python benchmarks/bench_selector_features.py --threads 1
    python benchmarks/bench_selector_features.py --quick          # fewer repeats

The laws are softmaxes of Gaussian logits (scale 3, float64 as the decoder's ``Sampling.probabilities`` gives
them), dense (temperature 1) or top-k filtered (k = 20, Qwen's recommended setting); medians of ``--repeats``
calls after a warm-up, in microseconds, with the load average before and after (torch under load is slower).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np

#: benchmarks/measure.py imports as ``measure`` when this script is loaded as a module too (its tests)
if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))

VOCAB = 151_936
HIDDEN_DIMS = {"target_prev": 1536, "draft_root": 896}


def float64_law_features(p, q, r) -> list[float]:
    """The six law features in float64 numpy (the previous kernel's arithmetic), from float64 [V] laws."""
    logs = [np.log(np.maximum(law, 1e-300)) for law in (p, q, r)]
    plp, qlq, rlr, plq, qlp = p @ logs[0], q @ logs[1], r @ logs[2], p @ logs[1], q @ logs[0]
    kl_pq = 30.0 if ((p > 0) & (q == 0)).any() else plp - plq
    kl_qp = 30.0 if ((q > 0) & (p == 0)).any() else qlq - qlp
    return [-plp, -qlq, -rlr, kl_pq, kl_qp, float(np.abs(p - q).sum())]


def main(argv=None) -> int:
    from measure import ROWS, add_overwrite_option, claim_outputs, write_rows  # benchmarks/measure.py
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument("--repeats", type=int, default=300)
    parser.add_argument("--quick", action="store_true", help="30 repeats")
    parser.add_argument("--json", help="also write the rows here")
    add_overwrite_option(parser)
    args = parser.parse_args(argv)
    # before any work: a file there that is not this benchmark's own is refused (unless --overwrite), each
    # output locked for the run (benchmarks/measure.py: the writers' rule)
    claim_outputs(__file__, [("--json", args.json, ROWS)],
                  overwrite=args.overwrite)
    import torch
    from measure import median_us  # benchmarks/measure.py

    from verispec.latency import LatencyModel
    from verispec.models.sampling import Sampling
    from verispec.selector import PAPER_GRID, SCALAR_FEATURES, scalar_features
    from verispec.selector.network import SelectorNetwork
    from verispec.selector.selector import Selector

    torch.set_num_threads(args.threads)
    repeats = 30 if args.quick else args.repeats
    load_before = os.getloadavg()[0]
    generator = torch.Generator().manual_seed(0)
    latency = LatencyModel.from_ratio(20)
    rows = []
    for label, top_k in (("dense (T=1)", None), ("top-k 20", 20)):
        laws = []
        for _ in range(3):
            logits = torch.randn(VOCAB, generator=generator, dtype=torch.float64) * 3
            laws.append(Sampling(1.0, top_k).probabilities(logits))  # [V] float64, as in decoding
        arrays = [law.numpy() for law in laws]
        float64 = median_us(lambda arrays=arrays: float64_law_features(*arrays), repeats)
        kernel = median_us(lambda laws=laws, top_k=top_k: scalar_features(*laws, context_length=100,
                                                                                 sampling=Sampling(1.0, top_k),
                                                    latency=latency), repeats)
        got = scalar_features(*laws, context_length=100, sampling=Sampling(1.0, top_k), latency=latency)[:6]
        error = float(np.max(np.abs(got - np.array(float64_law_features(*arrays)))))
        rows.append({"laws": label, "float64_us": float64, "float32_kernel_us": kernel, "ratio": float64 / kernel,
                     "max_abs_difference": error})
    features = np.zeros((1, len(SCALAR_FEATURES)))
    forwards = {}
    for name, dims in (("no hidden states", {}), ("with hidden states", HIDDEN_DIMS)):
        network = SelectorNetwork(len(SCALAR_FEATURES), len(PAPER_GRID), list(dims.values()),
                                  generator=torch.Generator().manual_seed(1))
        selector = Selector(network, PAPER_GRID, kind="mlp", hidden_names=tuple(dims))
        hidden = {key: torch.randn(size, generator=generator) for key, size in dims.items()} or None
        forwards[name] = median_us(lambda selector=selector, hidden=hidden: selector.choose(features[0], hidden),
                                    repeats)
    load_after = os.getloadavg()[0]
    print(f"V = {VOCAB:,}, {args.threads} torch thread(s), medians of {repeats} calls; load average "
          f"{load_before:.2f} before, {load_after:.2f} after")
    print(f"{'laws':14s} {'float64 (us)':>13s} {'float32 kernel (us)':>20s} {'ratio':>6s} {'max |diff|':>11s}")
    for row in rows:
        print(f"{row['laws']:14s} {row['float64_us']:13.0f} {row['float32_kernel_us']:20.0f} {row['ratio']:6.2f} "
              f"{row['max_abs_difference']:11.2e}")
    for name, value in forwards.items():
        print(f"network forward and argmax over {len(PAPER_GRID)} actions, {name}: {value:.0f} us")
    if args.json:
        write_rows(args.json, {"vocab": VOCAB, "threads": args.threads, "repeats": repeats,
                               "load_average": [load_before, load_after], "features": rows, "forward_us": forwards})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
