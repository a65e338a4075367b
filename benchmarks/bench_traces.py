"""CPU seconds a traced token (the selector dataset's traces): plain target sampling of the same prompts and seeds
one prompt at a time (``sample_target``: one forward per token per prompt) against batches of 1, 4, 8 and 16
prompts (``verispec.models.batched.sample_target_batch``: one forward per token for the whole batch), side by side
in one run.

    python benchmarks/bench_traces.py --pair qwen-coder --threads 4 --prompts 16 --tokens 32
    python benchmarks/bench_traces.py                          # a tiny random pair: a smoke run anywhere

Each method decodes every prompt (``--prompts``: the first N of ``verispec.models.prompts.prose_prompts`` with a
named pair; token-id prompts of seeded random lengths 8-64 with the tiny pair) for ``--tokens`` tokens, each from
its own seed, without stopping at end tokens (so every method draws the same number of tokens; ``--stop-at-eos``
to stop as the dataset's traces do). Measured: the process's CPU time (``time.process_time``: every thread, so
about threads x wall when torch keeps them busy) and the wall time, per token drawn; ``--repeats`` rounds, each
running the methods in a rotated order, and the median of the rounds. The traces' tokens are compared with the
one-prompt ones (equal in float64; in float32/bf16 a batched forward rounds differently and a trace may part
ways at a near tie). The load average is recorded with the table (torch under load is slower).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

#: benchmarks/measure.py imports as ``measure`` when this script is loaded as a module too (its tests)
if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))

BATCHES = (1, 4, 8, 16)


def bench_prompts(pair, count: int, seed: int) -> list:
    """Text prompts of a pair with a tokenizer (the prose set), else token-id lists of random lengths in 8-64."""
    if pair.tokenizer is not None:
        from verispec.models.prompts import prose_prompts

        return [text for _, text in prose_prompts(count)]
    rng = np.random.default_rng(seed)
    return [[int(token) for token in rng.integers(1, pair.vocab_size, size=int(rng.integers(8, 65)))]
            for _ in range(count)]


def run_method(pair, method: str, prompts: list, tokens: int, sampling, seeds: list[int], stop: bool):
    """(CPU seconds, wall seconds, the traces' new tokens) of one method over all prompts."""
    from verispec.models import sample_target
    from verispec.models.batched import sample_target_batch

    cpu, wall = time.process_time(), time.perf_counter()
    if method == "one at a time":
        generations = [sample_target(pair, prompt, tokens, sampling, seed, stop_at_eos=stop)
                       for prompt, seed in zip(prompts, seeds)]
    else:
        generations = sample_target_batch(pair, prompts, tokens, sampling, seeds, stop_at_eos=stop,
                                          batch_size=int(method.removeprefix("batch ")))
    return time.process_time() - cpu, time.perf_counter() - wall, [generation.tokens for generation in generations]


def load(args):
    """The pair of the options: an installed one (``--pair``), or the tiny random one."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from verispec.models import load_pair
    from verispec.models.tiny import tiny_pair

    if args.pair is None:
        return tiny_pair(0, device=args.device, vocab=args.tiny_vocab)
    return load_pair(args.pair, device=args.device, dtype=args.dtype)


def main(argv=None) -> int:
    from measure import ROWS, TABLE, add_overwrite_option, claim_outputs, write_rows  # benchmarks/measure.py
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pair", default=None, help="an installed pair, e.g. qwen-coder (default: a tiny random one)")
    parser.add_argument("--tiny-vocab", type=int, default=16, help="the tiny pair's vocabulary (151936: Qwen's)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument("--prompts", type=int, default=16, help="prompts (traces) per method (default 16)")
    parser.add_argument("--tokens", type=int, default=32, help="tokens sampled per trace (default 32)")
    parser.add_argument("--batches", default=",".join(map(str, BATCHES)), help="batch sizes (default 1,4,8,16)")
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--top-k", type=int, default=None)
    parser.add_argument("--stop-at-eos", action="store_true", help="stop a trace at an end token")
    parser.add_argument("--repeats", type=int, default=1, help="rounds of every method; the median is reported")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", default="results/bench_traces.md", help="the markdown table (written atomically)")
    parser.add_argument("--json", default=None, help="also write the rows here")
    add_overwrite_option(parser)
    args = parser.parse_args(argv)
    # before any work: a file there that is not this benchmark's own is refused (unless --overwrite), each
    # output locked for the run (benchmarks/measure.py: the writers' rule)
    claim_outputs(__file__, [("--output", args.output, TABLE), ("--json", args.json, ROWS)],
                  overwrite=args.overwrite)
    import torch
    from measure import publish_table  # benchmarks/measure.py

    from verispec.models import Sampling

    torch.set_num_threads(args.threads)
    pair = load(args)
    sampling = Sampling(args.temperature, args.top_k)
    prompts = bench_prompts(pair, args.prompts, args.seed)
    seeds = [args.seed + index for index in range(len(prompts))]
    methods = ["one at a time"] + [f"batch {size}" for size in args.batches.split(",") if size.strip()]
    run_method(pair, methods[-1], prompts[:2], 2, sampling, seeds[:2], False)  # warm-up: first-call costs
    load_before = os.getloadavg()
    times = {method: [] for method in methods}
    traces = {}
    for round_index in range(args.repeats):
        for method in methods[round_index % len(methods):] + methods[:round_index % len(methods)]:
            cpu, wall, traces[method] = run_method(pair, method, prompts, args.tokens, sampling, seeds,
                                                   args.stop_at_eos)
            times[method].append((cpu, wall))
    load_after = os.getloadavg()
    rows = []
    for method in methods:
        count = sum(len(trace) for trace in traces[method])
        cpu = statistics.median(cpu for cpu, _ in times[method])
        wall = statistics.median(wall for _, wall in times[method])
        equal = sum(mine == theirs for mine, theirs in zip(traces[method], traces["one at a time"]))
        rows.append({"method": method, "tokens": count, "cpu_s": cpu, "wall_s": wall, "cpu_ms_per_token":
                     1e3 * cpu / count, "wall_ms_per_token": 1e3 * wall / count, "equal_traces": equal})
    base = rows[0]["cpu_ms_per_token"]
    table = [[row["method"], row["tokens"], f"{row['cpu_s']:.2f}", f"{row['cpu_ms_per_token']:.2f}",
              f"{row['wall_s']:.2f}", f"{row['wall_ms_per_token']:.2f}", f"x{base / row['cpu_ms_per_token']:.2f}",
              f"{row['equal_traces']}/{len(prompts)}"] for row in rows]
    caption = (f"Traced tokens: {pair.name} on {pair.device} ({str(pair.target.dtype).removeprefix('torch.')}), "
               f"{args.threads} torch thread(s), {len(prompts)} prompts x {args.tokens} tokens, "
               f"T={args.temperature:g}{f' top-k={args.top_k}' if args.top_k else ''}, median of {args.repeats} "
               f"round(s); load average {load_before[0]:.2f} before, {load_after[0]:.2f} after")
    publish_table(args.output, caption, ["method", "tokens", "CPU s", "CPU ms/token", "wall s", "wall ms/token",
                                         "CPU vs one at a time", "traces equal to one at a time"], table)
    if args.json:
        write_rows(args.json, {"pair": pair.name, "device": str(pair.device), "threads": args.threads,
                               "prompts": len(prompts), "tokens": args.tokens, "repeats": args.repeats,
                               "load_average": [load_before, load_after], "rows": rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
