"""A top-k sampling law's tie test, as ``Sampling`` runs it now against the test it replaced, side by side.

Whether more than k logits reach the k-th largest decides whether a top-k law may come from the k largest logits
alone (``Sampling._top_k_kept``). It was answered by comparing every logit of a row with the k-th largest and
counting ([rows, V] of work); it is now answered by one top-(k + 1) (the (k + 1)-th equal to the k-th). This times
the replaced test with its top-k against ``_top_k_kept`` itself (its test, top-k and the softmax of k scores), on
float32 logits of Qwen's vocabulary, interleaved, and the whole ``compact_probabilities`` (the labels' store of a
model's laws) beside them.

    python benchmarks/bench_top_k_law.py --threads 2
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from functools import partial


def before(logits, k: int) -> bool:
    """The replaced test: a [rows, V] comparison with the k-th largest and a count per row."""
    import torch

    top = torch.topk(logits, k, dim=-1)
    return bool(((logits >= top.values[..., -1:]).sum(-1) != k).any())


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--vocab", type=int, default=151_936)
    parser.add_argument("--top-k", type=int, default=20)
    parser.add_argument("--rows", default="1,8,64")
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args(argv)
    import torch

    from verispec.models.sampling import Sampling

    torch.set_num_threads(args.threads)
    sampling = Sampling(0.7, args.top_k, 0.8)
    generator = torch.Generator().manual_seed(0)
    for rows in (int(n) for n in args.rows.split(",")):
        logits = torch.randn(rows, args.vocab, generator=generator) * 3
        assert before(logits, args.top_k) == (sampling._top_k_kept(logits) is None)
        calls = {"before": partial(before, logits, args.top_k), "now": partial(sampling._top_k_kept, logits),
                 "compact_probabilities": partial(sampling.compact_probabilities, logits)}
        times: dict[str, list[float]] = {name: [] for name in calls}
        for repeat in range(args.repeats + 1):
            for name, call in calls.items():
                start = time.perf_counter()
                call()
                if repeat:
                    times[name].append(1000 * (time.perf_counter() - start))
        median = {name: statistics.median(values) for name, values in times.items()}
        print(f"{rows} rows x {args.vocab}: tie test and top-k before {median['before']:.2f} ms, _top_k_kept now "
              f"{median['now']:.2f} ms (x{median['now'] / median['before']:.2f}); compact_probabilities "
              f"{median['compact_probabilities']:.2f} ms (load {os.getloadavg()[0]:.2f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
