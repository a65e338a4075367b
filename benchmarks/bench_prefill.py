"""A prompt's prefill with the output layer on every position against on the last one only
(``CachedModel.extend(..., last_only=True)``, what ``prefill`` does), side by side in one run.

A prefill needs only the logits after the prompt's last token; computing all of them costs the output layer on n
positions (at V = 151,936 and hidden size 1,536 about 0.47 GFLOP a position) and an [n, V] float32 buffer. Each
repeat runs both ways on the same prompt, alternating which goes first, from an empty cache.

    python benchmarks/bench_prefill.py --pair qwen-coder --threads 2 --lengths 100,400 --repeats 3
    python benchmarks/bench_prefill.py --tiny          # a tiny random model: a smoke run anywhere
"""

from __future__ import annotations

import argparse
import os
import statistics
import time


def time_prefill(model, tokens: list[int], last_only: bool) -> float:
    from verispec.models.tree_forward import CachedModel

    cached = CachedModel(model)
    start = time.perf_counter()
    cached.extend(tokens, list(range(-1, len(tokens) - 1)), last_only=last_only)
    return time.perf_counter() - start


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pair", default="qwen-coder")
    parser.add_argument("--tiny", action="store_true", help="a tiny random model instead of an installed pair")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--lengths", default="100,400", help="prompt lengths in tokens, comma-separated")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    if args.tiny:
        from verispec.models.tiny import tiny_pair

        model = tiny_pair(seed=0).target
    else:
        from verispec.models import load_pair

        model = load_pair(args.pair).target
    vocab = int(model.config.vocab_size)
    for length in (int(part) for part in args.lengths.split(",")):
        tokens = [(17 * i + 5) % min(vocab, 5000) for i in range(length)]
        time_prefill(model, tokens[:8], True)  # warm-up
        times = {True: [], False: []}
        for repeat in range(args.repeats):
            for last_only in ((True, False) if repeat % 2 == 0 else (False, True)):
                times[last_only].append(time_prefill(model, tokens, last_only))
        every, last = statistics.median(times[False]), statistics.median(times[True])
        print(f"prefill of {length} tokens: every position {every:.3f} s, last only {last:.3f} s: x{every / last:.2f} "
              f"(median of {args.repeats}; {args.threads} threads; load {os.getloadavg()[0]:.2f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
