"""The CPU's small-batch linear path (``verispec.models.cpu_linear``) against torch's ``linear``, side by side.

Two measurements in one process, each the median of ``--repeats`` runs with the two paths interleaved (off, on,
off, on, ...) so that load drifts hit both alike:

1. the pair's largest layers alone (the output layer, an MLP up and down projection of each model) at 1..8 rows;
2. a whole forward of each model of n chained tokens after a committed context (``CachedModel.extend``, what a
   decoding step and ``verispec latency`` time), the path given to and taken from the same loaded models, with the
   largest logit difference between the two paths.

Ratios are on / off (below 1: the path is faster). The load average is printed with each row.

    python benchmarks/bench_cpu_linear.py --pair qwen-coder --threads 2 --json out.json
    python benchmarks/bench_cpu_linear.py --tiny          # a tiny random pair: a smoke run anywhere
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from functools import partial
from pathlib import Path

#: benchmarks/measure.py imports as ``measure`` when this script is loaded as a module too (its tests)
if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))


def _median_pair(first, second, repeats: int, setups=(None, None)) -> tuple[float, float]:
    """Median milliseconds of ``first()`` and ``second()``, run alternately ``repeats`` times after one warm-up
    each; ``setups``: a call run (untimed) before each of them."""
    times: tuple[list, list] = ([], [])
    for repeat in range(repeats + 1):
        for index, (call, setup) in enumerate(zip((first, second), setups)):
            if setup is not None:
                setup()
            start = time.perf_counter()
            call()
            if repeat:
                times[index].append(1000 * (time.perf_counter() - start))
    return statistics.median(times[0]), statistics.median(times[1])


def layer_rows(pair, rows, repeats: int) -> list[dict]:
    """The largest linear layers of both models at each row count, torch's ``linear`` against the path."""
    import torch

    from verispec.models.cpu_linear import small_batch_linear

    result = []
    for role, model in (("target", pair.target), ("draft", pair.draft)):
        layers = [module for module in model.modules() if isinstance(module, torch.nn.Linear)]
        chosen = {}
        for module in layers:  # one layer a distinct weight shape, the largest three
            chosen.setdefault(tuple(module.weight.shape), module)
        for shape, module in sorted(chosen.items(), key=lambda item: -item[0][0] * item[0][1])[:3]:
            for count in rows:
                inputs = torch.randn(count, shape[1], dtype=module.weight.dtype)
                with torch.no_grad():
                    off, on = _median_pair(partial(torch.nn.functional.linear, inputs, module.weight, module.bias),
                                           partial(small_batch_linear, module, inputs), repeats)
                result.append({"model": role, "shape": list(shape), "rows": count, "torch_ms": off, "path_ms": on,
                               "ratio": on / off, "load_average": os.getloadavg()[0]})
                print(f"{role} layer {shape[0]}x{shape[1]}, {count} rows: torch {off:.2f} ms, path {on:.2f} ms, "
                      f"x{on / off:.2f} (load {result[-1]['load_average']:.2f})", flush=True)
    return result


def _forward(cached, tokens, parents, on: bool, logits: dict) -> None:
    """One timed forward, its logits kept in ``logits`` under ``on`` (whether the path was switched on)."""
    logits[on] = cached.extend(tokens, parents)
    cached.discard()


def forward_rows(pair, sizes, repeats: int, context_length: int, padded: bool = True) -> list[dict]:
    """Whole forwards of n chained tokens after a committed context, the path off and on the same models;
    ``padded`` False: the path with 9-15 rows taken as they come (``cpu_linear.product_rows`` before the padding, one
    row still as two), to show what the padding gains."""
    from verispec.models import cpu_linear
    from verispec.models.cpu_linear import use_small_batch_linears, use_torch_linears
    from verispec.models.tree_forward import CachedModel

    if not padded:
        shapes = cpu_linear.product_rows
        cpu_linear.product_rows = lambda rows: 2 if rows == 1 else rows
        try:
            return [{**row, "padded": False} for row in forward_rows(pair, sizes, repeats, context_length)]
        finally:
            cpu_linear.product_rows = shapes

    vocab = min(pair.vocab_size, 1000)
    context = [(13 * i + 1) % vocab for i in range(context_length)]
    result = []
    for role, model in (("target", pair.target), ("draft", pair.draft)):
        cached = CachedModel(model)
        cached.prefill(context)
        for count in sizes:
            tokens, parents = [(7 * i + 3) % vocab for i in range(count)], list(range(-1, count - 1))
            logits = {}
            try:
                # the path is switched on the loaded model before each forward, outside the timed call
                off, on = _median_pair(partial(_forward, cached, tokens, parents, False, logits),
                                       partial(_forward, cached, tokens, parents, True, logits), repeats,
                                       (partial(use_torch_linears, model), partial(use_small_batch_linears, model)))
            finally:
                use_torch_linears(model)
            difference = float((logits[True] - logits[False]).abs().max())
            result.append({"model": role, "tokens": count, "torch_ms": off, "path_ms": on, "ratio": on / off,
                           "max_logit_difference": difference, "load_average": os.getloadavg()[0]})
            variant = "path" if cpu_linear.product_rows(9) == 16 else "path unpadded"
            print(f"{role} forward of {count} tokens: torch {off:.1f} ms, {variant} {on:.1f} ms, x{on / off:.2f}, "
                  f"max |logit difference| {difference:.1e} (load {result[-1]['load_average']:.2f})", flush=True)
    return result


def main(argv=None) -> int:
    from measure import ROWS, add_overwrite_option, claim_outputs, write_rows  # benchmarks/measure.py
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pair", default="qwen-coder")
    parser.add_argument("--tiny", action="store_true", help="a tiny random pair instead of an installed one")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rows", default="1,2,3,4,5,8,12,16,17", help="row counts of the layer products")
    parser.add_argument("--sizes", default="1,2,3,4,5,8,12,13,16,24", help="tokens of the whole forwards")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--context", type=int, default=200, help="committed tokens before each forward")
    parser.add_argument("--json", default=None, help="write the rows here (atomically)")
    parser.add_argument("--unpadded", action="store_true",
                        help="also the whole forwards with 9-15 rows taken as they come, not padded to 16")
    add_overwrite_option(parser)
    args = parser.parse_args(argv)
    # before any work: a file there that is not this benchmark's own is refused (unless --overwrite), each
    # output locked for the run (benchmarks/measure.py: the writers' rule)
    claim_outputs(__file__, [("--json", args.json, ROWS)],
                  overwrite=args.overwrite)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch

    from verispec.models import load_pair
    from verispec.models.tiny import tiny_pair

    torch.set_num_threads(args.threads)
    pair = tiny_pair(0) if args.tiny else load_pair(args.pair, small_batch_linear=False)
    rows = [int(n) for n in args.rows.split(",")]
    sizes = [int(n) for n in args.sizes.split(",")]
    layers = layer_rows(pair, rows, args.repeats)
    forwards = forward_rows(pair, sizes, args.repeats, args.context if not args.tiny else 8)
    if args.unpadded:
        forwards += forward_rows(pair, sizes, args.repeats, args.context if not args.tiny else 8, padded=False)
    if args.json:
        result = {"pair": pair.name, "threads": args.threads, "repeats": args.repeats, "torch": torch.__version__,
                  "layers": layers, "forwards": forwards}
        write_rows(args.json, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
