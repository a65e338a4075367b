"""A root's conditional-exact labels against their floor: the target's forwarded tokens times its time a token.

A root's labels (``verispec.selector.labels.conditional_exact_labels``) need the target's law at the internal
nodes of m sampled combs and the draft's law while they are drawn. The floor is what the target alone costs: the
comb's target-forwarded tokens times the target's time per token measured here, in the same run, at the batch
size the labels forward at (one tree-masked forward of that many tokens over the root's cached context). The
ratio label time / floor is what the draft, the verifiers and the bookkeeping add (the issue's goal: <= 1.5).
A second floor counts both models' forwards: the target's as above plus each draft pass over the combs timed at
its own size (the draft's levels run one after another, each level's tokens drawn from the laws of the one before,
so they cannot be one pass); label time over it is what the verifiers and the bookkeeping add.

``--root-batch B`` labels B roots together, as ``selector dataset --root-batch`` does (``label_roots``: one
``ProblemPack``, each draft level of all their combs one draft pass, the target once over all their combs). Its
floor is taken at the batch size the target then runs at: the group's target tokens in one forward (t_p of that
many tokens, so a larger batch has a lower floor a token). Each group also reports the floor its roots would have
one by one (each root's tokens at its own batch size), the reference of the earlier ratios.

For each group (roots from HumanEval's or, ``--prompts prose``, the prose set's prompts: their first ``--context``
tokens, or fewer if a prompt is shorter), in one
process: the labels of every action of the grid from ``--samples`` combs a root, timed without the contexts'
prefill (timed apart: a build prefills a prompt once for all its roots), with the tokens each model was fed; then
t_p(n), the median of ``--repeats`` target forwards of n chain tokens after the first root's context, at the
group's batch size and at each root's own.

    python benchmarks/bench_labels.py --pair qwen-coder --threads 2 --roots 8 --samples 16 --root-batch 8
    python benchmarks/bench_labels.py --tiny          # a tiny random pair: a smoke run anywhere
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

VERIFIERS = "specinfer,spectr,khisti,naivetree,traversal-iid,traversal,gbv"


def time_target_tokens(pair, context: list[int], count: int, repeats: int, model=None, *, flat: bool = False) -> float:
    """Median seconds of one forward of ``count`` chain tokens after ``context`` (cache kept), of the target or of
    ``model`` (the draft); ``flat``: the tokens side by side instead, each a child of the context's end (each attends
    to the context and itself: the least attention ``count`` tokens can cost, so the forward is its linear layers)."""
    from verispec.models.tree_forward import CachedModel

    model = CachedModel(pair.target if model is None else model)
    model.prefill(context)
    tokens = [(7 * i + 3) % min(1000, pair.vocab_size) for i in range(count)]
    parents = [-1] * count if flat else list(range(-1, count - 1))
    times = []
    for _ in range(repeats + 1):  # the first is a warm-up
        start = time.perf_counter()
        model.extend(tokens, parents)
        times.append(time.perf_counter() - start)
        model.discard()
    return statistics.median(times[1:])


def label_group(pair, contexts: list[list[int]], grid, samples: int, seed: int, sampling, repeats: int,
                dense: bool = False) -> dict:
    """Label one group of roots together (``label_roots``'s path) and measure its floors; ``dense``: the packed
    forwards' attention dense over every context (``CachedModel.packed(by_segment=False)``), as before 2026-11-26."""
    from verispec.models.problem import DEFAULT_NODES_PER_FORWARD, SharedContext
    from verispec.models.tree_forward import CachedModel
    from verispec.selector.labelling import root_problems
    from verispec.selector.labels import conditional_exact_labels_together
    from verispec.selector.roots import Root

    roots = [Root(tuple(context), "bench", sampling, pair=pair.name) for context in contexts]
    shared = SharedContext(pair)
    prefill, original = [0.0], shared.take

    def take(owner, tokens):  # the contexts' prefill, timed apart (its forwards too)
        start, before = time.perf_counter(), dict(in_passes)
        models = original(owner, tokens)
        prefill[0] += time.perf_counter() - start
        in_passes.update(before)
        return models

    shared.take = take
    draft_passes = []  # tokens of each draft pass over the combs (its levels run one after another)
    in_passes = {"target": 0.0, "draft": 0.0}  # seconds inside each model's passes, the prefill not counted
    extend = CachedModel.extend

    def counted(model, tokens, *args, **kwargs):
        if model.model is pair.draft and not kwargs.get("last_only"):
            draft_passes.append(len(tokens))
        start = time.perf_counter()
        logits = extend(model, tokens, *args, **kwargs)
        in_passes["draft" if model.model is pair.draft else "target"] += time.perf_counter() - start
        return logits

    CachedModel.extend = counted
    packed = CachedModel.__dict__["packed"]
    if dense:
        CachedModel.packed = classmethod(lambda cls, model, states: packed.__func__(cls, model, states,
                                                                                    by_segment=False))
    try:
        start, cpu = time.perf_counter(), time.process_time()
        problems, together = root_problems(roots, max(action.depth for action in grid.actions), pair, shared)
        labels = conditional_exact_labels_together([problem for problem, _ in problems], grid, samples=samples,
                                                   seeds=[seed + index for index in range(len(roots))],
                                                   together=together)
        seconds = time.perf_counter() - start - prefill[0]
        cpu_seconds = time.process_time() - cpu
    finally:
        CachedModel.extend = extend
        CachedModel.packed = packed
    bases = [problem.base for problem, _ in problems]
    own = [base.forwarded_tokens[0] for base in bases]
    target_tokens, draft_tokens = sum(own), sum(base.forwarded_tokens[1] for base in bases)
    limit = DEFAULT_NODES_PER_FORWARD * len(roots)  # a pack's pass holds up to 512 nodes a member
    width = max(1, min(limit, target_tokens))
    measured = {}
    for count in {width, *(max(1, min(DEFAULT_NODES_PER_FORWARD, n)) for n in own)}:
        measured[count] = time_target_tokens(pair, list(contexts[0][:-2]), count, repeats)
    floor = target_tokens * measured[width] / width
    flat_floor = target_tokens * time_target_tokens(pair, list(contexts[0][:-2]), width, repeats, flat=True) / width
    alone = sum(n * measured[max(1, min(DEFAULT_NODES_PER_FORWARD, n))] / max(1, min(DEFAULT_NODES_PER_FORWARD, n))
                for n in own)
    # the draft's floor: each of its passes at its own size (a level's tokens are drawn from the level before)
    drafted = {count: time_target_tokens(pair, list(contexts[0][:-2]), count, repeats, model=pair.draft)
               for count in set(draft_passes)}
    draft_floor = sum(drafted[count] for count in draft_passes)
    return {"roots": len(roots), "contexts": [len(context) for context in contexts], "seconds": seconds,
            "cpu_seconds": cpu_seconds, "prefill_seconds": prefill[0], "target_tokens": target_tokens,
            "draft_tokens": draft_tokens, "target_passes": max(base.passes[0] for base in bases),
            "draft_passes": max(base.passes[1] for base in bases), "batch": width,
            "ms_per_target_token": 1000 * measured[width] / width, "floor_seconds": floor,
            "ratio_to_floor": seconds / floor if floor else float("nan"), "flat_floor_seconds": flat_floor,
            "ratio_to_flat_floor": seconds / flat_floor if flat_floor else float("nan"), "dense_attention": dense,
            "floor_one_by_one_seconds": alone,
            "ratio_to_one_by_one_floor": seconds / alone if alone else float("nan"),
            "draft_pass_tokens": draft_passes, "draft_floor_seconds": draft_floor,
            "forwards_floor_seconds": floor + draft_floor, "ratio_to_forwards_floor": seconds / (floor + draft_floor),
            # where the labels' time went: inside the models' passes as they ran (packed, tree-masked), the rest
            "target_pass_seconds": in_passes["target"], "draft_pass_seconds": in_passes["draft"],
            "outside_passes_seconds": seconds - in_passes["target"] - in_passes["draft"],
            "mean_label": float(sum(label.efficiency.mean() for label in labels) / len(labels))}


def main(argv=None) -> int:
    from measure import ROWS, add_overwrite_option, claim_outputs, write_rows  # benchmarks/measure.py
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pair", default="qwen-coder")
    parser.add_argument("--tiny", action="store_true", help="a tiny random pair instead of an installed one")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--roots", type=int, default=3)
    parser.add_argument("--root-batch", type=int, default=1, help="roots labelled together (selector dataset's "
                                                                     "--root-batch)")
    parser.add_argument("--context", type=int, default=200, help="most context tokens a root keeps")
    parser.add_argument("--prompts", choices=("humaneval", "prose"), default="humaneval",
                        help="the roots' prompts: HumanEval's or the prose set's first ones")
    parser.add_argument("--samples", type=int, default=4, help="sampled combs a root (m)")
    parser.add_argument("--ks", default="1-4")
    parser.add_argument("--l1s", default="0-3")
    parser.add_argument("--l2s", default="0-4")
    parser.add_argument("--verifiers", default=VERIFIERS)
    parser.add_argument("--sampling", default="temperature=0.7,top_k=20,top_p=0.8")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", default=None, help="write the rows here (atomically)")
    parser.add_argument("--dense-attention", action="store_true",
                        help="the packed forwards' attention dense over every context, as before segmented attention "
                             "(to compare the two)")
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
    from verispec.selector.actions import ActionGrid, _parse_values
    from verispec.selector.roots import parse_setting

    torch.set_num_threads(args.threads)
    grid = ActionGrid(_parse_values(args.ks, "K"), _parse_values(args.l1s, "L1"), _parse_values(args.l2s, "L2"),
                      tuple(args.verifiers.split(",")))
    sampling = parse_setting(args.sampling)
    if args.tiny:
        pair = tiny_pair(0)
        contexts = [[1 + (5 * i + j) % 14 for j in range(12)] for i in range(args.roots)]
    else:
        from verispec.models.prompts import humaneval_prompts, prose_prompts

        pair = load_pair(args.pair)
        source = humaneval_prompts if args.prompts == "humaneval" else prose_prompts
        contexts = [pair.encode(text)[:args.context] for _, text in source(args.roots)]
    rows = []
    for first in range(0, len(contexts), args.root_batch):
        group = contexts[first:first + args.root_batch]
        row = label_group(pair, group, grid, args.samples, first, sampling, args.repeats, args.dense_attention)
        row["load_average"] = os.getloadavg()[0]
        rows.append(row)
        print(f"roots {first}-{first + len(group) - 1}: {row['seconds']:.2f} s, {row['seconds'] / len(group):.2f} s a "
              f"root ({row['cpu_seconds']:.1f} s CPU, prefill included; the contexts' prefill "
              f"{row['prefill_seconds']:.2f} s apart), "
              f"target {row['target_tokens']} tokens in {row['target_passes']} passes, draft {row['draft_tokens']} "
              f"in {row['draft_passes']}; {row['ms_per_target_token']:.1f} ms a target token at n = {row['batch']}: "
              f"floor {row['floor_seconds']:.2f} s, ratio {row['ratio_to_floor']:.2f} (its tokens side by side "
              f"{row['flat_floor_seconds']:.2f} s, ratio {row['ratio_to_flat_floor']:.2f}); one by one the floor is "
              f"{row['floor_one_by_one_seconds']:.2f} s, ratio {row['ratio_to_one_by_one_floor']:.2f}; the draft's "
              f"passes at their sizes {row['draft_floor_seconds']:.2f} s, both models' floor "
              f"{row['forwards_floor_seconds']:.2f} s, ratio {row['ratio_to_forwards_floor']:.2f}; inside the passes "
              f"as they ran: target {row['target_pass_seconds']:.2f} s, draft {row['draft_pass_seconds']:.2f} s, the "
              f"rest {row['outside_passes_seconds']:.2f} s (load {row['load_average']:.2f})")
    total = sum(row["seconds"] for row in rows)
    floor = sum(row["floor_seconds"] for row in rows)
    alone = sum(row["floor_one_by_one_seconds"] for row in rows)
    both = sum(row["forwards_floor_seconds"] for row in rows)
    flat = sum(row["flat_floor_seconds"] for row in rows)
    print(f"# {len(contexts)} roots, {args.root_batch} a group, {len(grid.actions)} actions, m = {args.samples}, "
          f"threads {args.threads}: {total:.1f} s ({total / len(contexts):.2f} s a root) against a floor of "
          f"{floor:.1f} s at the group's batch size: ratio {total / floor:.2f} ({flat:.1f} s with its tokens side "
          f"by side: {total / flat:.2f}); against the roots' floors one by "
          f"one ({alone:.1f} s): {total / alone:.2f}; against both models' forwards ({both:.1f} s: the target's at "
          f"the group's batch size, each draft pass at its own): {total / both:.2f}")
    if args.json:
        result = {"grid": grid.as_dict(), "samples": args.samples, "threads": args.threads, "prompts": args.prompts,
                  "root_batch": args.root_batch, "sampling": args.sampling, "rows": rows, "ratio": total / floor,
                  "ratio_to_flat_floor": total / flat, "dense_attention": args.dense_attention,
                  "ratio_to_one_by_one_floor": total / alone, "ratio_to_forwards_floor": total / both,
                  "seconds_a_root": total / len(contexts)}
        write_rows(args.json, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
