"""The same algorithm in both: verispec's ``decode --tree chain:K --verifier naive`` against transformers' assisted
generation with a constant K-token draft and no confidence stop, on the same pair, prompts, sampling, seed, threads
and kernels, with each block's time taken apart (issue 66, item 2).

    python benchmarks/bench_same_algorithm.py --pair qwen-coder --prompts humaneval --prompts prose \\
        --max-prompts 8 --ks 1,2,4,6 --max-new-tokens 64 --threads 2 --linears small-batch \\
        --output results/bench_same_algorithm.json --result docs/results/bench/bench-same-algorithm.json

Both run token-level verification (Leviathan et al. 2023, Alg. 1) of a chain of K drafts each block: transformers'
``generate(assistant_model=draft, do_sample=True)`` with ``num_assistant_tokens=K``, schedule ``constant`` and
``assistant_confidence_threshold=0`` (``real_decoding.run_hf``), verispec's ``verispec.models.generate`` with
``chain:K`` and ``naive``. Every prompt runs every (method, K) back to back in an order rotated by one place from one
prompt to the next, from one seed per prompt; one untimed short generation per method first.

Per block, for both: the two models' forward seconds (``forward_clock.ForwardClock``: hooks on the models, the same
clock for both codes), and the rest (sampling, verification, cache bookkeeping, choosing the draft length: the
decoder's own work) = decode seconds - forwards. verispec's records split its block further (drafting, target,
verification, cache update, selection: ``Generation.summary``). Prefill and the first block are excluded, alike for
both (``ForwardClock.steady``): every time, count and rate is of the steady state, from the end of the first block's
target forward to the generation's end. transformers feeds the prompt in its first target forward, verispec prefills
it apart; the earlier cut, transformers' time less an estimate of verispec's prefill, credited transformers with most
of its first block (about one target forward a prompt); that figure stays in the rows (``decode_s``) and the summary
(``tokens_per_s_prefill_estimated``) for comparison.

Reported per K: tokens/s of each (95% percentile bootstrap over prompts), the paired ratio verispec / transformers with
its interval, tokens per block, and ms a block with its forwards and the rest (share of a block), and the paired ratio
of blocks a second (``block_rate_ratio``: the tokens/s ratio at equal tokens a block; both run the same rule, so the
tokens a block have one law, and this ratio is free of the two runs' different draws). The goals: the ratio at least
1.0 at every K, verispec's rest under 5% of a block. Rows are a resumable ``ResultStore``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np
from tqdm import tqdm

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1] / "experiments")]
import real_decoding  # noqa: E402  experiments/real_decoding.py: transformers' decoders
import selector_decoding  # noqa: E402  experiments/selector_decoding.py: paired ratios
from bench_assisted import LINEARS, WARMUP_PROMPT, linears_of, method_order, prefill_seconds, rate_interval  # noqa
from forward_clock import ForwardClock, steady_rows  # noqa: E402
from measure import start_record, write_result, write_rows, write_table  # noqa: E402

from verispec.errors import VerispecError  # noqa: E402
from verispec.files.io import ResultStore  # noqa: E402

#: The overhead goal: the decoder's own work at most this share of a block.
OVERHEAD_GOAL = 0.05


def run(pair, prompt: str, method: str, k: int, sampling, max_new_tokens: int, seed: int, *,
        warmup: bool = False) -> dict:
    """One timed generation: ``verispec`` (chain:K, naive) or ``hf`` (constant K, threshold 0), with its steady state
    (``ForwardClock.steady``: after the first block, the cut both decoders share; none for a ``warmup``)."""
    from verispec.models import generate

    length = len(pair.encode(prompt))
    if method == "hf":
        prefill = prefill_seconds(pair, prompt, with_draft=True)
        config = {"num_assistant_tokens": k, "num_assistant_tokens_schedule": "constant",
                  "assistant_confidence_threshold": 0.0}
        with ForwardClock(pair) as clock:
            row = real_decoding.run_hf(pair, prompt, "hf-assisted", sampling, max_new_tokens, seed, assistant=config)
            end = time.perf_counter()
        forwards = clock.seconds["target"] + clock.seconds["draft"] - prefill
        return {"new_tokens": row["new_tokens"], "decode_s": row["decode_s"] - prefill, "prefill_s": prefill,
                "blocks": clock.calls["target"], "forward_s": forwards, "target_forward_s": clock.seconds["target"],
                "draft_forward_s": clock.seconds["draft"], "draft_calls": clock.calls["draft"],
                **({} if warmup else clock.steady(length, row["new_tokens"], end))}
    with ForwardClock(pair) as clock:
        generation = generate(pair, prompt, f"chain:{k}", "naive", max_new_tokens, sampling, seed)
        end = time.perf_counter()
    summary = generation.summary()
    row = {key: summary[key] for key in ("new_tokens", "decode_s", "prefill_s", "blocks", "drafting_s", "target_s",
                                         "verify_s", "cache_s", "select_s", "draft_calls")}
    row.update(forward_s=clock.after_first("target") + clock.after_first("draft"),
               target_forward_s=clock.after_first("target"), draft_forward_s=clock.after_first("draft"),
               **({} if warmup else clock.steady(length, summary["new_tokens"], end)))
    return row


def blocks_per_second(rows: dict) -> dict:
    """Rows as the rate functions read them, counting blocks instead of tokens (steady state)."""
    return {p: {"new_tokens": row["steady_blocks"], "decode_s": row["steady_s"]} for p, row in rows.items()}


def summarize(rows: dict, ks: list[int]) -> list[dict]:
    table = []
    for k in ks:
        cells = {m: {key.split("|")[2]: row for key, row in rows.items() if key.split("|")[:2] == [m, str(k)]}
                 for m in ("verispec", "hf")}
        complete = sorted(set(cells["verispec"]) & set(cells["hf"]))
        if not complete:
            continue
        entry = {"k": k, "prompts": len(complete)}
        for method in ("verispec", "hf"):
            done = {p: cells[method][p] for p in complete}
            seconds = sum(r["steady_s"] for r in done.values())
            blocks = sum(r["steady_blocks"] for r in done.values())
            forwards = sum(r["steady_forward_s"] for r in done.values())
            tokens = sum(r["steady_tokens"] for r in done.values())
            entry[method] = {"tokens_per_s": tokens / seconds, "tokens_per_s_ci": rate_interval(steady_rows(done)),
                             "blocks": blocks, "tokens_per_block": tokens / blocks,
                             "block_ms": 1000 * seconds / blocks, "forward_ms": 1000 * forwards / blocks,
                             "rest_share": 1 - forwards / seconds,
                             "tokens_per_s_prefill_estimated": (sum(r["new_tokens"] for r in done.values())
                                                                / sum(r["decode_s"] for r in done.values())),
                             "load_average_max": max(r["load_average"] for r in done.values())}
            if method == "verispec":
                entry[method]["phases_ms"] = {name: 1000 * sum(r[name] for r in done.values()) / blocks
                                              for name in ("drafting_s", "target_s", "verify_s", "cache_s",
                                                           "select_s")}
        base = steady_rows({p: cells["hf"][p] for p in complete})
        mine = steady_rows({p: cells["verispec"][p] for p in complete})
        entry["ratio"] = selector_decoding.paired_rate_ratio(mine, base)
        entry["ratio_ci"] = selector_decoding.paired_rate_interval(mine, base)
        entry["ratio_goal_met"] = entry["ratio"] >= 1.0
        # blocks a second, verispec's over transformers': the tokens/s ratio at equal tokens a block. Both run the
        # same rule, whose tokens a block have one law; the tokens/s ratio also carries the two runs' different draws
        mine_blocks = blocks_per_second({p: cells["verispec"][p] for p in complete})
        base_blocks = blocks_per_second({p: cells["hf"][p] for p in complete})
        entry["block_rate_ratio"] = selector_decoding.paired_rate_ratio(mine_blocks, base_blocks)
        entry["block_rate_ratio_ci"] = selector_decoding.paired_rate_interval(mine_blocks, base_blocks)
        entry["overhead_goal_met"] = entry["verispec"]["rest_share"] < OVERHEAD_GOAL
        table.append(entry)
    return table


def markdown(table: list[dict], parameters: dict) -> str:
    lines = [f"# The same algorithm: verispec chain:K naive against transformers' constant K, {parameters['pair']} on "
             f"{parameters['device']} ({parameters['linears']} linears, {parameters['threads']} threads), "
             f"{parameters['max_new_tokens']} new tokens a prompt, {parameters['sampling']}", "",
             "| K | prompts | verispec tokens/s [95%] | transformers tokens/s [95%] | verispec / transformers [95%] | "
             "tokens/block (v, t) | ms/block (v, t) | forwards ms/block (v, t) | rest of a block (v, t) | "
             "verispec phases ms/block (draft, target, verify, cache, select) | max load |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]

    def rate(e):
        ci = e["tokens_per_s_ci"]
        return f"{e['tokens_per_s']:.2f}" + (f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else "")

    for e in table:
        v, t, ci = e["verispec"], e["hf"], e["ratio_ci"]
        phases = ", ".join(f"{x:.1f}" for x in v["phases_ms"].values())
        lines.append(f"| {e['k']} | {e['prompts']} | {rate(v)} | {rate(t)} | x{e['ratio']:.3f}"
                     + (f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "")
                     + f" | {v['tokens_per_block']:.2f}, {t['tokens_per_block']:.2f} | {v['block_ms']:.0f}, "
                       f"{t['block_ms']:.0f} | {v['forward_ms']:.0f}, {t['forward_ms']:.0f} | "
                       f"{v['rest_share']:.1%}, {t['rest_share']:.1%} | {phases} | "
                       f"{max(v['load_average_max'], t['load_average_max']):.1f} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    from measure import parse_decoding_run  # benchmarks/measure.py
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pair", default="qwen-coder")
    parser.add_argument("--prompts", action="append", required=True, help="prompt specs (humaneval[:N], prose[:N])")
    parser.add_argument("--max-prompts", type=int, default=8, help="this many, evenly spaced over the specs' prompts")
    parser.add_argument("--ks", default="1,2,4,6", help="draft lengths K (comma-separated)")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--sampling", default="temperature=0.7,top_k=20,top_p=0.8",
                        help="the sampling of both models (verispec's Sampling.parse text)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--linears", default="torch", help="torch (default) or small-batch, for both models")
    parser.add_argument("--warmup", type=int, default=2)
    args, output = parse_decoding_run(parser, argv, __file__, "results/bench_same_algorithm.json")
    try:
        from verispec.models import Sampling, load_pair
        from verispec.models.cpu_linear import store_key
        from verispec.selector.prompt_sets import read_prompt_specs

        if args.linears not in LINEARS:
            raise VerispecError(f"--linears {args.linears!r}: choose torch or small-batch")
        try:
            ks = sorted({int(k) for k in args.ks.split(",")})
        except ValueError:
            raise VerispecError(f"--ks {args.ks!r}: give positive integers, comma-separated") from None
        if min(ks) < 1 or max(ks) > 32 or args.max_prompts < 1 or args.max_new_tokens < 1:
            raise VerispecError("--ks must lie in 1-32, --max-prompts and --max-new-tokens be positive")
        sampling = Sampling.parse(args.sampling)
        import torch
        import transformers

        transformers.utils.logging.set_verbosity_error()
        if args.threads:
            torch.set_num_threads(args.threads)
        started = (start_record("bench_same_algorithm.py", argv, [], threads=torch.get_num_threads(),
                                result=args.result) if args.result else None)
        texts = dict(read_prompt_specs(args.prompts))
        names = sorted(texts)
        names = [names[int(i)] for i in np.linspace(0, len(names) - 1, min(args.max_prompts, len(names))).round()]
        pair = load_pair(args.pair, small_batch_linear=args.linears == "small-batch")
        parameters = {"pair": pair.name, "max_new_tokens": args.max_new_tokens, "seed": args.seed, "ks": ks,
                      "device": str(pair.device), "threads": torch.get_num_threads(), "linears": linears_of(pair),
                      "sampling": sampling.describe(), "prompts": names, "transformers": transformers.__version__,
                      "torch": torch.__version__, "window": "steady (after the first block)", **store_key(pair)}
        store = ResultStore(args.output, parameters=parameters, overwrite=args.overwrite)
    except VerispecError as error:
        print(f"bench_same_algorithm: error: {error}", file=sys.stderr)
        return 2
    methods = [(m, k) for k in ks for m in ("verispec", "hf")]
    if args.warmup:
        for method, k in methods:
            run(pair, WARMUP_PROMPT, method, k, sampling, args.warmup, args.seed, warmup=True)
    for position, name in enumerate(tqdm(names, desc="prompts")):
        seed = args.seed + position
        for method, k in method_order(methods, position):
            key = f"{method}|{k}|{name}"
            if store.done(key):
                continue
            try:
                row = run(pair, texts[name], method, k, sampling, args.max_new_tokens, seed)
            except VerispecError as error:
                print(f"bench_same_algorithm: error: {name}, {method} K={k}: {error}", file=sys.stderr)
                return 2
            row.update(load_average=os.getloadavg()[0], seed=seed, started=time.time())
            store.add(key, row)
    table = summarize(dict(store.rows), ks)
    text = markdown(table, parameters)
    write_table(output.with_suffix(".md"), text)
    write_rows(output.with_suffix(".summary.json"), {"rows": table})
    print(text)
    if started:
        rows = [{"k": e["k"], "now": 1 / e["verispec"]["tokens_per_s"], "before": 1 / e["hf"]["tokens_per_s"],
                 **{key: value for key, value in e.items() if key != "k"}} for e in table]
        for row in rows:
            row["ratio"] = row.pop("ratio")
        write_result(args.result, started, {"benchmark": "bench_same_algorithm", "unit": "s per token (prefill "
                                            "excluded)", "baseline": "transformers", "parameters": parameters,
                                            "rows": rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
