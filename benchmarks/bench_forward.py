"""Forward-pass latency of a pair's target and draft by number of new tokens, side by side: a growing dynamic
KV cache, a static cache, and CUDA-graph replays over a static cache (``CachedModel(..., graphs=True)``).

This is what speculative decoding's speed turns on: t_q (one draft step) against t_p(n) (one target forward
scoring n tree nodes). For each model, mode and width n, a context of ``--context`` tokens is committed, then n
new tokens in a chain are fed (``CachedModel.extend``) and dropped (``discard``), ``--repeats`` times after a
warm-up; the median milliseconds per forward are reported, and each mode's ratio to the dynamic cache. The
three modes' logits are checked equal first (bf16/float32 tolerance: they run different kernels).

    python benchmarks/bench_forward.py --pair qwen-coder --device cuda --json results/forward_cuda.json
    python benchmarks/bench_forward.py --tiny                   # tiny random pair: a smoke run anywhere
    python benchmarks/bench_forward.py --configs benchmarks/configs/qwen2.5-coder-1.5b.json,\
        benchmarks/configs/qwen2.5-coder-0.5b.json --device cuda  # the pair's shapes, random weights

``--configs`` builds both models from their config files with random weights (N(0, 0.02^2), the configs'
initializer range): a forward's time depends on the shapes, not the weights, so a GPU machine that cannot hold
the installed weights still times the real pair's architecture.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from verispec.models.latency import cached_model, time_forwards

#: benchmarks/measure.py imports as ``measure`` when this script is loaded as a module too (its tests)
if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))

WIDTHS = (1, 2, 4, 8, 16, 32, 64)
MODES = ("dynamic", "static", "graphs")


def check_modes_agree(model, context: list[int]) -> float:
    """Largest difference of the three modes' logits on one small tree, relative to the logits' scale."""
    import torch

    outputs = []
    for mode in MODES:
        cached = cached_model(model, mode, len(context) + 16)
        cached.prefill(context)
        outputs.append(cached.extend([5, 6, 7, 8, 9], [-1, 0, 0, 2, 2]).float())
    scale = outputs[0].abs().max().item()
    return max(torch.max((other - outputs[0]).abs()).item() for other in outputs[1:]) / scale


def config_pair(configs: str, device: str, dtype: str):
    """A ModelPair of two models built from config files (``TARGET.json,DRAFT.json``), random weights, seeded."""
    import torch
    import transformers

    from verispec.errors import VerispecError
    from verispec.models.pair import ModelPair, resolve_device, resolve_dtype

    paths = configs.split(",")
    if len(paths) != 2:
        raise SystemExit(f"--configs takes TARGET.json,DRAFT.json, got {configs!r}")
    try:
        device = resolve_device(device)
        dtype = resolve_dtype(dtype, device)  # the --dtype names load_pair takes ("auto": bfloat16 on a GPU)
    except VerispecError as error:
        raise SystemExit(f"--configs: {error}") from None
    models = []
    for seed, path in enumerate(paths):
        torch.manual_seed(seed)
        try:
            with open(path) as handle:
                config = transformers.AutoConfig.for_model(**json.load(handle))
        except (OSError, ValueError, KeyError, TypeError) as error:  # unreadable, not JSON, no (known) model_type
            raise SystemExit(f"--configs: cannot build a model from {path!r}: {error}; give a transformers "
                             "config.json (benchmarks/configs/ holds the Qwen pair's)") from None
        with torch.device(device):
            models.append(transformers.AutoModelForCausalLM.from_config(config).to(dtype).eval())
    return ModelPair(models[0], models[1], None, name=f"config-built {paths[0]} / {paths[1]}")


def main(argv=None) -> int:
    from measure import ROWS, add_overwrite_option, claim_outputs, write_rows  # benchmarks/measure.py
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pair", default="qwen-coder")
    parser.add_argument("--target", help="target model directory (with --draft, instead of --pair)")
    parser.add_argument("--draft", help="draft model directory")
    parser.add_argument("--tiny", action="store_true", help="a tiny random pair instead of an installed one")
    parser.add_argument("--configs", help="TARGET.json,DRAFT.json: models built from these configs, random weights")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--context", type=int, default=200, help="committed tokens before each forward")
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--widths", default=",".join(map(str, WIDTHS)))
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--quick", action="store_true", help="3 repeats at widths 1 and 8")
    parser.add_argument("--json", default=None, help="write the table here (atomically)")
    add_overwrite_option(parser)
    args = parser.parse_args(argv)
    # before any work: a file there that is not this benchmark's own is refused (unless --overwrite), each
    # output locked for the run (benchmarks/measure.py: the writers' rule)
    claim_outputs(__file__, [("--json", args.json, ROWS)],
                  overwrite=args.overwrite)
    if args.quick:
        args.repeats, args.widths = 3, "1,8"
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch

    from verispec.models import load_pair
    from verispec.models.tiny import tiny_pair

    if args.configs:
        pair = config_pair(args.configs, args.device, args.dtype)
    elif args.tiny:
        pair = tiny_pair(0, device=args.device)
    elif args.target:
        pair = load_pair(args.target, args.draft, device=args.device, dtype=args.dtype)
    else:
        pair = load_pair(args.pair, device=args.device, dtype=args.dtype)
    widths = [int(w) for w in args.widths.split(",")]
    modes = [m for m in args.modes.split(",") if m]
    vocab = pair.target.config.vocab_size
    context = [(13 * i + 1) % min(vocab, 1000) for i in range(args.context)]
    result = {"device": str(pair.device), "dtype": str(pair.target.dtype).removeprefix("torch."),
              "context": args.context, "repeats": args.repeats, "threads": torch.get_num_threads(),
              "load_average": os.getloadavg()[0], "models": {}}
    if pair.device.type == "cuda":
        result["gpu"] = torch.cuda.get_device_name(pair.device)
    for role, model in (("target", pair.target), ("draft", pair.draft)):
        if len(modes) == len(MODES):
            result["models"].setdefault(role, {})["max_relative_difference"] = check_modes_agree(model, context)
        for mode in modes:
            result["models"].setdefault(role, {})[mode] = time_forwards(model, mode, context, widths, args.repeats)
    print(f"# forward ms (median of {args.repeats}) after {args.context} tokens; {result['device']} "
          f"{result['dtype']}, load {result['load_average']:.2f}")
    print("model  | mode    | " + " | ".join(f"n={w:<3d}" for w in widths) + " | vs dynamic at n=1")
    for role, table in result["models"].items():
        for mode in modes:
            ratio = table["dynamic"][widths[0]] / table[mode][widths[0]] if "dynamic" in table else float("nan")
            print(f"{role:6s} | {mode:7s} | " + " | ".join(f"{table[mode][w]:6.2f}" for w in widths)
                  + f" | {ratio:.2f}x")
        if "max_relative_difference" in table:
            print(f"{role:6s} | modes agree to {table['max_relative_difference']:.2e} (relative)")
    if args.json:
        write_rows(args.json, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
