"""A root's conditional-exact labels against their floor: the target's forwarded tokens times its time a token.

A root's labels (``verispec.selector.labels.conditional_exact_labels``) need the target's law at the internal
nodes of m sampled combs and the draft's law while they are drawn. The floor is what the target alone costs: the
comb's target-forwarded tokens times the target's time per token measured here, in the same run, at the batch
size the labels forward at (one tree-masked forward of that many tokens over the root's cached context). The
ratio label time / floor is what the draft, the verifiers and the bookkeeping add (the issue's goal: <= 1.5).

For each root (a HumanEval prompt's first ``--context`` tokens, or fewer if the prompt is shorter), in one process,
its context already in the models' caches (a build prefills a prompt once for all its roots: ``SharedContext``):
  1. t_p(n): median of ``--repeats`` target forwards of n chain tokens after the root's context (n = the comb's
     target tokens, at most the forward's chunk of 512), so ms a token at that batch size;
  2. the labels of every action of the grid from ``--samples`` combs, timed, with the tokens each model was fed.

    python benchmarks/bench_labels.py --pair qwen-coder --threads 2 --roots 3 --samples 4
    python benchmarks/bench_labels.py --tiny          # a tiny random pair: a smoke run anywhere
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

from verispec.io import atomic_write_text

VERIFIERS = "specinfer,spectr,khisti,naivetree,traversal-iid,traversal,gbv"


def time_target_tokens(pair, context: list[int], count: int, repeats: int) -> float:
    """Median seconds of one target forward of ``count`` chain tokens after ``context`` (cache kept)."""
    from verispec.models.tree_forward import CachedModel

    model = CachedModel(pair.target)
    model.prefill(context)
    tokens = [(7 * i + 3) % min(1000, pair.vocab_size) for i in range(count)]
    times = []
    for _ in range(repeats + 1):  # the first is a warm-up
        start = time.perf_counter()
        model.extend(tokens, list(range(-1, count - 1)))
        times.append(time.perf_counter() - start)
        model.discard()
    return statistics.median(times[1:])


def label_one_root(pair, context: list[int], grid, samples: int, seed: int, sampling, repeats: int) -> dict:
    from verispec.models.problem import DEFAULT_NODES_PER_FORWARD, SharedContext
    from verispec.selector.dataset import Root, root_problem
    from verispec.selector.labels import conditional_exact_labels

    root = Root(tuple(context), "bench", sampling, pair=pair.name)
    shared = SharedContext(pair)
    start = time.perf_counter()
    shared.take(None, list(context[:-2]))  # the root's context, cached as a build caches it (timed apart)
    prefill = time.perf_counter() - start
    start = time.perf_counter()
    cpu = time.process_time()
    problem, _ = root_problem(root, max(action.depth for action in grid.actions), pair, shared)
    labels = conditional_exact_labels(problem, grid, samples=samples, seed=seed)
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu
    base = problem.base
    target_tokens, draft_tokens = base.forwarded_tokens
    width = max(1, min(DEFAULT_NODES_PER_FORWARD, target_tokens))
    per_token = time_target_tokens(pair, list(context[:-2]), width, repeats) / width
    floor = target_tokens * per_token
    return {"context": len(context), "seconds": seconds, "cpu_seconds": cpu_seconds, "prefill_seconds": prefill,
            "target_tokens": target_tokens, "draft_tokens": draft_tokens, "target_passes": base.passes[0],
            "draft_passes": base.passes[1], "batch": width, "ms_per_target_token": 1000 * per_token,
            "floor_seconds": floor, "ratio_to_floor": seconds / floor if floor else float("nan"),
            "mean_label": float(labels.efficiency.mean())}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pair", default="qwen-coder")
    parser.add_argument("--tiny", action="store_true", help="a tiny random pair instead of an installed one")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--roots", type=int, default=3)
    parser.add_argument("--context", type=int, default=200, help="most context tokens a root keeps")
    parser.add_argument("--samples", type=int, default=4, help="sampled combs a root (m)")
    parser.add_argument("--ks", default="1-4")
    parser.add_argument("--l1s", default="0-3")
    parser.add_argument("--l2s", default="0-4")
    parser.add_argument("--verifiers", default=VERIFIERS)
    parser.add_argument("--sampling", default="temperature=0.7,top_k=20,top_p=0.8")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", default=None, help="write the rows here (atomically)")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch

    from verispec.cli.selector import parse_setting
    from verispec.models import load_pair
    from verispec.models.tiny import tiny_pair
    from verispec.selector.actions import ActionGrid, _parse_values

    torch.set_num_threads(args.threads)
    grid = ActionGrid(_parse_values(args.ks, "K"), _parse_values(args.l1s, "L1"), _parse_values(args.l2s, "L2"),
                      tuple(args.verifiers.split(",")))
    sampling = parse_setting(args.sampling)
    if args.tiny:
        pair = tiny_pair(0)
        contexts = [[1 + (5 * i + j) % 14 for j in range(12)] for i in range(args.roots)]
    else:
        from verispec.models.prompts import humaneval_prompts

        pair = load_pair(args.pair)
        contexts = [pair.encode(text)[:args.context] for _, text in humaneval_prompts(args.roots)]
    rows = []
    for index, context in enumerate(contexts):
        row = label_one_root(pair, context, grid, args.samples, index, sampling, args.repeats)
        row["load_average"] = os.getloadavg()[0]
        rows.append(row)
        print(f"root {index}: {row['seconds']:.2f} s ({row['cpu_seconds']:.1f} s CPU; its context's prefill "
              f"{row['prefill_seconds']:.2f} s apart), target {row['target_tokens']} "
              f"tokens in {row['target_passes']} passes, draft {row['draft_tokens']} in {row['draft_passes']}; "
              f"{row['ms_per_target_token']:.1f} ms a target token at n = {row['batch']}: floor "
              f"{row['floor_seconds']:.2f} s, ratio {row['ratio_to_floor']:.2f} (load {row['load_average']:.2f})")
    total = sum(row["seconds"] for row in rows)
    floor = sum(row["floor_seconds"] for row in rows)
    print(f"# {len(rows)} roots, {len(grid.actions)} actions, m = {args.samples}, threads {args.threads}: "
          f"{total:.1f} s against a floor of {floor:.1f} s: ratio {total / floor:.2f}")
    if args.json:
        result = {"grid": grid.as_dict(), "samples": args.samples, "threads": args.threads,
                  "sampling": args.sampling, "rows": rows, "ratio": total / floor}
        atomic_write_text(args.json, json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
