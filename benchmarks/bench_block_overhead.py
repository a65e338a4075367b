"""Per block of speculative decoding, what verification, the cache update and the delay selector cost against the
block's target step (issue 56, item 6: on a GPU, goal at most 10% of a target step).

    python benchmarks/bench_block_overhead.py --configs benchmarks/configs/qwen2.5-coder-1.5b.json,\\
        benchmarks/configs/qwen2.5-coder-0.5b.json --device cuda --graphs --result results/block-overhead.json
    python benchmarks/bench_block_overhead.py --tiny --tokens 24      # a tiny random pair: a smoke run anywhere
    python benchmarks/bench_block_overhead.py --pair qwen-coder --threads 2 --tokens 32   # the installed pair

Each method decodes ``--tokens`` new tokens (end tokens ignored) after a prompt of ``--prompt-length`` token ids
drawn from a seeded generator, under each ``--sampling``: the static actions ``--static VERIFIER@TREE`` (default
SpecInfer on a chain, on i.i.d. paths and on a delayed tree, and Global Resolution on i.i.d. paths, the rule that
wins at T = 1) and the delay selector ``--selector FILE`` (default SpecInfer's, ``data/selector/specinfer-cpu.pt``;
``none`` skips it). The decoder times every block by phase (``verispec.models.generation.BlockRecord``): drafting,
the target's forward over the tree (``target_s``, the target step), verification (``verify_s``: the rule's law and
its draws), the cache update (``cache_s``: both models' KV caches cut to the accepted path) and the selector
(``select_s``). Per method, over the blocks after the first (which pays one-time costs): the median of each phase in
milliseconds and the overhead, (verify_s + cache_s + select_s) / target_s per block, its median and the ratio of
the sums. With ``--configs`` both models are built from the config files with random weights
(``bench_forward.config_pair``): the forwards have the real shapes, the text means nothing, and the trees are full
size whatever the acceptance. ``--graphs`` runs both models through CUDA graphs over static caches (``generate(...,
graphs=True)``), as a GPU deployment would. ``--result FILE`` writes the rows with the run's record
(``measure.write_result``); the load average is printed before and after.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

#: benchmarks/measure.py imports as ``measure`` when this script is loaded as a module too (its tests)
if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))

ROOT = Path(__file__).resolve().parent.parent
#: (verifier, tree) of the default static actions.
DEFAULT_STATIC = ("specinfer@chain:4", "specinfer@iid:2,3", "specinfer@delayed:4,1,2", "globalres@iid:2,2")
DEFAULT_SAMPLINGS = ("temperature=1", "temperature=0.7,top_k=20,top_p=0.8")
DEFAULT_SELECTOR = ROOT / "data" / "selector" / "specinfer-cpu.pt"
#: The issue's goal: verification, cache update and selector within this share of a target step.
GOAL = 0.10


def block_row(method: str, sampling: str, generation) -> dict:
    """The medians (ms) of every phase over a decode's blocks after the first, and the overhead."""
    blocks = generation.blocks[1:] or generation.blocks
    phases = ("drafting_s", "target_s", "verify_s", "cache_s", "select_s")
    row = {"method": method, "sampling": sampling, "blocks": len(blocks),
           "tokens_per_block": statistics.fmean(block.emitted for block in blocks),
           **{f"{name[:-2]}_ms": 1e3 * statistics.median(getattr(block, name) for block in blocks)
              for name in phases}}
    shares = [(block.verify_s + block.cache_s + block.select_s) / block.target_s for block in blocks
              if block.target_s > 0]
    row["overhead_median"] = statistics.median(shares) if shares else None
    target = sum(block.target_s for block in blocks)
    row["overhead_of_sums"] = (sum(block.verify_s + block.cache_s + block.select_s for block in blocks) / target
                               if target > 0 else None)
    return row


def parse_static(text: str) -> tuple[str, str]:
    verifier, separator, tree = text.partition("@")
    if not separator or not verifier or not tree:
        raise SystemExit(f"bench_block_overhead: --static takes VERIFIER@TREE (e.g. specinfer@chain:4), got {text!r}")
    return verifier, tree


def main(argv=None) -> int:
    from measure import RESULT, add_overwrite_option, claim_outputs  # benchmarks/measure.py
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--configs", help="TARGET.json,DRAFT.json: models built from these configs, random weights")
    source.add_argument("--pair", help="an installed pair (verispec models install)")
    source.add_argument("--tiny", action="store_true", help="the tiny random pair at Qwen's vocabulary (default)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    parser.add_argument("--tokens", type=int, default=64, help="new tokens a decode (default 64)")
    parser.add_argument("--prompt-length", type=int, default=128, help="prompt token ids (default 128)")
    parser.add_argument("--sampling", action="append", help=f"repeatable (default: {', '.join(DEFAULT_SAMPLINGS)})")
    parser.add_argument("--static", action="append", help="VERIFIER@TREE, repeatable (default: "
                        f"{', '.join(DEFAULT_STATIC)})")
    parser.add_argument("--selector", default=str(DEFAULT_SELECTOR), help="a selector file, or 'none'")
    parser.add_argument("--graphs", action="store_true", help="CUDA graphs over static caches (a GPU)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--result", help="also write the rows and the run's record here (JSON)")
    add_overwrite_option(parser)
    args = parser.parse_args(argv)
    # before any work: a file there that is not this benchmark's own is refused (unless --overwrite), each
    # output locked for the run (benchmarks/measure.py: the writers' rule)
    claim_outputs(__file__, [("--result", args.result, RESULT)],
                  overwrite=args.overwrite)
    if args.tokens < 2 or args.prompt_length < 1 or args.threads < 1:
        raise SystemExit("bench_block_overhead: --tokens must be at least 2, --prompt-length and --threads at least 1")
    statics = [parse_static(text) for text in (args.static or DEFAULT_STATIC)]
    for variable in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ.setdefault(variable, str(args.threads))
    from measure import start_record, write_result  # benchmarks/measure.py

    inputs = [] if args.selector == "none" else [args.selector]
    started = start_record(__file__, argv, inputs, threads=args.threads, result=args.result) if args.result else None
    import warnings

    import numpy as np
    import torch

    warnings.filterwarnings("ignore", category=FutureWarning)  # transformers' notice on past_key_values
    from verispec.errors import VerispecError
    from verispec.models.decoding import generate
    from verispec.selector.roots import parse_setting

    torch.set_num_threads(args.threads)
    try:
        samplings = [parse_setting(text) for text in (args.sampling or DEFAULT_SAMPLINGS)]
        pair = load(args)
        policy = None
        if args.selector != "none":
            from verispec.selector.selector import Selector, SelectorPolicy

            policy = SelectorPolicy(Selector.load(args.selector))
    except VerispecError as error:
        raise SystemExit(f"bench_block_overhead: {' '.join(str(error).split())}") from None
    prompt = np.random.default_rng(args.seed).integers(0, pair.vocab_size, args.prompt_length).tolist()
    load_before = os.getloadavg()
    rows = []
    for text, sampling in zip(args.sampling or DEFAULT_SAMPLINGS, samplings):
        methods = [(f"{verifier} {tree}", dict(drafter=tree, verifier=verifier)) for verifier, tree in statics]
        if policy is not None:
            methods.append(("selector", dict(drafter=None, verifier=None, selector=policy)))
        for name, chosen in methods:
            began = time.perf_counter()
            try:
                generation = generate(pair, prompt, max_new_tokens=args.tokens, sampling=sampling, seed=args.seed,
                                      stop_at_eos=False, static_cache=args.graphs, graphs=args.graphs, **chosen)
            except VerispecError as error:
                raise SystemExit(f"bench_block_overhead: {name}, {text}: {' '.join(str(error).split())}") from None
            rows.append({**block_row(name, text, generation), "wall_s": time.perf_counter() - began})
    load_after = os.getloadavg()
    dtype = str(pair.target.dtype).removeprefix("torch.")
    print(f"{pair.name}, V = {pair.vocab_size:,}, {args.device}, {dtype}, {args.threads} torch thread(s), "
          f"{args.tokens} tokens a decode after {args.prompt_length}; load average {load_before[0]:.2f} before, "
          f"{load_after[0]:.2f} after")
    print(f"{'sampling':34s} {'method':26s} {'blocks':>6s} {'target':>8s} {'verify':>8s} {'cache':>7s} "
          f"{'select':>7s}  {'overhead (median, of sums)':>26s}  ms")
    for row in rows:
        print(f"{row['sampling']:34s} {row['method']:26s} {row['blocks']:6d} {row['target_ms']:8.2f} "
              f"{row['verify_ms']:8.2f} {row['cache_ms']:7.2f} {row['select_ms']:7.2f}  "
              f"{row['overhead_median']:12.1%} {row['overhead_of_sums']:12.1%}")
    print(f"goal: at most {GOAL:.0%} of a target step")
    if started:
        write_result(args.result, started, {"benchmark": "bench_block_overhead", "unit": "ms", "goal": GOAL,
                                            "pair": pair.name, "vocab": pair.vocab_size, "device": args.device,
                                            "dtype": dtype,
                                            "graphs": args.graphs, "tokens": args.tokens,
                                            "load_average": [load_before, load_after], "rows": rows})
    return 0


def load(args):
    """The pair: built from configs (random weights), an installed one, or the tiny one at Qwen's vocabulary."""
    if args.configs:
        from bench_forward import config_pair  # benchmarks/bench_forward.py

        return config_pair(args.configs, args.device, args.dtype)
    if args.pair:
        from verispec.models.pair import load_pair

        return load_pair(args.pair, device=args.device, dtype=args.dtype)
    from verispec.models.tiny import tiny_pair

    pair = tiny_pair(vocab=151_936, device=args.device)
    pair.target.float(), pair.draft.float()  # float32 logits, as Qwen's on a CPU (the tiny pair is float64)
    return pair


if __name__ == "__main__":
    raise SystemExit(main())
