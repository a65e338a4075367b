"""Wall-clock decoding with the delay selector on prompts held out from its training, side by side with the same
verifier at its best static action and with plain sampling from the target, in one run on one machine.

    verispec selector dataset --pair qwen-coder --prompts humaneval:8 --prompts prose-small:8 --out qwen.npz ...
    verispec selector train --dataset qwen.npz --verifiers specinfer --out specinfer.pt
    verispec selector train --dataset qwen.npz --verifiers traversal-iid --out traversal-iid.pt
    python experiments/selector_decoding.py --pair qwen-coder --dataset qwen.npz \\
        --selector specinfer.pt --selector traversal-iid.pt --prompts humaneval:8 --prompts prose-small:8 \\
        --max-new-tokens 48 --threads 2 --output results/selector_decoding.json

The held-out prompts are the groups of the dataset the selectors did not train on (the split recorded in the
first selector; every selector must have been trained on the same split). ``--prompts`` must name the prompts the
dataset was traced from (the same specs as ``verispec selector dataset``), so each held-out group has its text.
For every held-out prompt and every sampling setting of the dataset, the methods are:

* ``plain``: plain sampling from the target (``sample_target``), one target forward per token;
* ``NAME static``: NAME's verifier on its best static action, chosen on the training roots of the setting under
  the selector's latency model (``verispec.selector.evaluate.best_static``: the largest sum E[tau+1] / sum T(a));
* ``NAME selector``: ``generate(..., selector=SelectorPolicy(selector))``: every block's action chosen from
  the block's features; the seconds spent choosing are part of the decoding time.

Each (method, prompt, setting) cell is one row of a ``ResultStore`` keyed on them, with the pair, token budget,
seed, device, dtype, threads and the selectors' file hashes as the file's parameters (an interrupted run
resumes; a file from other settings is refused). The load average is recorded with every row: torch under load
runs 50-100x slower, and a row timed under load says so. The summary gives per setting and method the tokens
per target call, tokens/s (total tokens over total decode seconds, prefill excluded), the ratio to plain and the
selector's ratio to its static action, each with a paired 95% interval from a bootstrap over the prompts (the
methods run interleaved on each prompt: plain, static, selector, with one seed scheme), the per-prompt ratios
(mean and range), and the selector's seconds per block.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import numpy as np
from tqdm import tqdm

from verispec.errors import VerispecError
from verispec.files.io import ResultStore
from verispec.study.script_files import run_script


def _file_hash(path: str) -> str:
    from verispec.files.provenance import sha256_file

    return sha256_file(path)[:16]  # read in chunks: a dataset is up to a GB


def held_out_plans(dataset_path: str, selector_paths: list[str], prompt_specs: list[str],
                   max_prompts: int | None = None) -> dict:
    """What a run decodes, before any model loads: ``{"dataset", "selectors" (name: Selector, by file stem),
    "samplings" (the dataset's settings), "groups" (the held-out prompts, sorted; with ``max_prompts`` that many,
    evenly spaced), "texts" (group: prompt text), "plans" (method: plan, in order: plain, then per selector NAME
    static and NAME selector)}``. VerispecError (one line) on a selector that does not fit the dataset, selectors
    trained on different splits, a held-out group without text, or a setting without a training root."""
    from verispec.selector.actions import action_times
    from verispec.selector.dataset_file import Dataset
    from verispec.selector.evaluate import best_static, selector_latency
    from verispec.selector.fits import check_dataset_fits
    from verispec.selector.prompt_sets import read_prompt_specs
    from verispec.selector.roots import sampling_text
    from verispec.selector.selector import Selector, SelectorPolicy
    from verispec.selector.split import held_out

    dataset = Dataset.load(dataset_path)
    selectors = {Path(path).stem: Selector.load(path) for path in selector_paths}
    for name, selector in selectors.items():  # grid, pair, settings, features: named before the split
        check_dataset_fits(selector, dataset, name=f"the selector {name!r}", source=f"the dataset {dataset_path!r}")
    splits = {name: held_out(dataset, selector) for name, selector in selectors.items()}
    train, test = next(iter(splits.values()))
    groups = sorted(set(test.group.tolist()))
    if any(sorted(set(t.group.tolist())) != groups for _, t in splits.values()):
        raise VerispecError("the selectors were trained on different splits; train them on one split")
    texts = dict(read_prompt_specs(prompt_specs))
    missing = [group for group in groups if group not in texts]
    if missing:
        raise VerispecError(f"--prompts has no text for the held-out groups {', '.join(missing[:3])}; give the "
                            "specs the dataset was traced from")
    if max_prompts and max_prompts < len(groups):  # spread over the sorted groups: code and prose
        groups = [groups[int(i)] for i in np.linspace(0, len(groups) - 1, max_prompts).round()]
    samplings = dataset.samplings
    if any(not (train.setting == index).any() for index in range(len(samplings))):
        raise VerispecError("a sampling setting of the dataset has no training root; build more roots")
    plans = {"plain": {"kind": "plain"}}
    for name, selector in selectors.items():
        latency = selector_latency(selector)  # an older file's unnamed sizes named as its one setting's
        allowed = [dataset.grid.index(action) for action in selector.grid.actions]
        # per setting, as 'verispec selector evaluate' does, each priced at the sizes its trees have there (a model
        # that carries several settings' sizes prices none unbound)
        statics = [dataset.grid.actions[best_static(
            train.efficiency[train.setting == index],
            action_times(dataset.grid, latency.for_setting(sampling_text(samplings[index]))), allowed)]
            for index in range(len(samplings))]
        plans[f"{name} static"] = {"kind": "static", "actions": statics}
        plans[f"{name} selector"] = {"kind": "selector", "policy": SelectorPolicy(selector)}
    return {"dataset": dataset, "selectors": selectors, "samplings": samplings, "groups": groups, "texts": texts,
            "plans": plans}


def check_pair(setup: dict, pair) -> None:
    """VerispecError unless every selector of ``setup`` fits ``pair`` (its tokenizer and hidden widths) at every
    sampling setting."""
    from verispec.models import Sampling
    from verispec.selector.fits import check_pair_fits

    for name, selector in setup["selectors"].items():
        for setting in setup["samplings"]:
            check_pair_fits(selector, pair, Sampling(setting["temperature"], setting["top_k"], setting["top_p"]),
                            name=f"the selector {name!r}")


def plan_parameters(setup: dict, dataset_path: str, selector_paths: list[str]) -> dict:
    """A result store's parameters for ``setup``: the dataset's and selectors' file hashes and the static actions."""
    return {"dataset": _file_hash(dataset_path),
            "selectors": {name: _file_hash(path) for name, path in zip(setup["selectors"], selector_paths)},
            "static": {name: [action.name for action in plan["actions"]] for name, plan in setup["plans"].items()
                       if plan["kind"] == "static"}}


def decode_cell(pair, prompt: str, method: str, plan: dict, setting: int, sampling, max_new_tokens: int,
                seed: int) -> dict:
    """One timed generation: plain, a static action (the setting's), or a selector policy."""
    from verispec.models import generate, sample_target

    if method == "plain":
        generation = sample_target(pair, prompt, max_new_tokens, sampling, seed)
    elif plan["kind"] == "static":
        action = plan["actions"][setting]
        generation = generate(pair, prompt, action.tree, action.verifier, max_new_tokens, sampling, seed)
    else:
        generation = generate(pair, prompt, None, None, max_new_tokens, sampling, seed, selector=plan["policy"])
    summary = generation.summary()
    row = {key: summary[key] for key in ("new_tokens", "decode_s", "prefill_s", "target_calls", "draft_calls",
                                         "tokens_per_target_call", "blocks", "drafting_s", "target_s", "verify_s",
                                         "cache_s", "select_s")}
    actions = [block.action for block in generation.blocks if block.action is not None]
    row["actions"] = {str(action): actions.count(action) for action in sorted(set(actions))}  # grid index -> blocks
    return row


#: Bootstrap resamples of the prompts for the paired 95% intervals of the wall-clock ratios.
BOOTSTRAP = 2000


def paired_rate_ratio(rows: dict, base: dict, prompts=None) -> float | None:
    """(tokens / decode seconds of ``rows``) over the same of ``base``, summed over ``prompts`` (default: the
    prompts both hold; a prompt drawn twice by the bootstrap counts twice)."""
    prompts = [p for p in rows if p in base] if prompts is None else prompts
    if not prompts:
        return None
    rate = sum(rows[p]["new_tokens"] for p in prompts) / sum(rows[p]["decode_s"] for p in prompts)
    return rate / (sum(base[p]["new_tokens"] for p in prompts) / sum(base[p]["decode_s"] for p in prompts))


def paired_rate_interval(rows: dict, base: dict, *, resamples: int = BOOTSTRAP, seed: int = 0) -> list | None:
    """The 95% interval of ``paired_rate_ratio`` from a bootstrap over the prompts both hold (the methods ran
    interleaved on each prompt, so the pairs share the machine's state); None below two prompts."""
    prompts = sorted(p for p in rows if p in base)
    if len(prompts) < 2:
        return None
    rng = np.random.default_rng(seed)
    draws = [paired_rate_ratio(rows, base, [prompts[i] for i in rng.integers(0, len(prompts), len(prompts))])
             for _ in range(resamples)]
    return [float(np.quantile(draws, 0.025)), float(np.quantile(draws, 0.975))]


def summarize(rows: dict, methods: list[str], settings: list[str]) -> list[dict]:
    table = []
    for setting in settings:
        cells = {method: {key.split("|")[1]: row for key, row in rows.items()
                          if key.split("|")[0] == method and key.split("|")[2] == setting} for method in methods}
        plain = cells.get("plain") or {}
        plain_rate = (sum(r["new_tokens"] for r in plain.values()) / sum(r["decode_s"] for r in plain.values())
                      if plain else None)
        for method in methods:
            done = cells[method]
            if not done:
                continue
            tokens = sum(row["new_tokens"] for row in done.values())
            seconds = sum(row["decode_s"] for row in done.values())
            calls = sum(row["target_calls"] for row in done.values())
            entry = {"setting": setting, "method": method, "prompts": len(done), "tokens": tokens,
                     "tokens_per_s": tokens / seconds, "tokens_per_target_call": tokens / calls,
                     "load_average_max": max(row["load_average"] for row in done.values())}
            if plain_rate:
                entry["vs_plain"] = entry["tokens_per_s"] / plain_rate
                entry["vs_plain_ci"] = paired_rate_interval(done, plain)
            if method.endswith(" selector"):
                static = cells.get(method.removesuffix(" selector") + " static") or {}
                entry["vs_static"], entry["vs_static_ci"] = paired_rate_ratio(done, static), \
                    paired_rate_interval(done, static)
                paired = [(row["new_tokens"] / row["decode_s"]) / (static[p]["new_tokens"] / static[p]["decode_s"])
                          for p, row in done.items() if p in static]
                if paired:
                    entry["vs_static_per_prompt"] = {"mean": float(np.mean(paired)), "min": float(np.min(paired)),
                                                     "max": float(np.max(paired)), "prompts": len(paired)}
                blocks = sum(row["blocks"] for row in done.values())
                entry["select_ms_per_block"] = 1e3 * sum(row["select_s"] for row in done.values()) / max(blocks, 1)
            table.append(entry)
    return table


def markdown(table: list[dict], parameters: dict) -> str:
    lines = [f"# Selector decoding: {parameters['pair']} on {parameters['device']} ({parameters['dtype']}, "
             f"{'small-batch linears, ' if parameters.get('small_batch_linear') else ''}"
             f"{parameters['threads']} threads), {parameters['max_new_tokens']} new tokens, held-out prompts", "",
             "| setting | method | prompts | tokens/target call | tokens/s | vs plain [95%] | selector / static [95%] "
             "| selector / static per prompt (mean, range) | choosing, ms/block | max load |",
             "|---|---|---|---|---|---|---|---|---|---|"]

    def ratio(value, interval) -> str:
        if value is None:
            return "-"
        return f"{value:.3f}" + (f" [{interval[0]:.3f}, {interval[1]:.3f}]" if interval else "")

    for e in table:
        paired = e.get("vs_static_per_prompt")
        paired_text = f"{paired['mean']:.3f} ({paired['min']:.3f}-{paired['max']:.3f})" if paired else "-"
        choose = f"{e['select_ms_per_block']:.2f}" if "select_ms_per_block" in e else "-"
        lines.append(f"| {e['setting']} | {e['method']} | {e['prompts']} | {e['tokens_per_target_call']:.2f} | "
                     f"{e['tokens_per_s']:.3f} | {ratio(e.get('vs_plain'), e.get('vs_plain_ci'))} | "
                     f"{ratio(e.get('vs_static'), e.get('vs_static_ci'))} | {paired_text} | {choose} | "
                     f"{e['load_average_max']:.1f} |")
    return "\n".join(lines) + "\n"


def add_held_out_arguments(parser: argparse.ArgumentParser, *, max_new_tokens: int) -> None:
    """The options of a decoding run over a dataset's held-out prompts (this script, benchmarks/bench_assisted.py)."""
    parser.add_argument("--pair", default="qwen-coder", help="installed pair (default qwen-coder)")
    parser.add_argument("--target", help="target model directory (with --draft, instead of --pair)")
    parser.add_argument("--draft", help="draft model directory")
    parser.add_argument("--dataset", required=True, help="the dataset the selectors were trained on")
    parser.add_argument("--selector", action="append", required=True, help="a selector file (repeatable)")
    parser.add_argument("--prompts", action="append", required=True,
                        help="the dataset's prompt specs (humaneval[:N], prose[:N], prose-small[:N], FILE); repeatable")
    parser.add_argument("--max-prompts", type=int, default=None,
                        help="at most this many held-out prompts, evenly spaced over the sorted held-out groups "
                             "(so code and prose prompts both come in)")
    parser.add_argument("--max-new-tokens", type=int, default=max_new_tokens)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")


def main(argv=None) -> int:
    from verispec.study.script_files import ScriptParser

    parser = ScriptParser("selector_decoding", description=__doc__.splitlines()[0])
    add_held_out_arguments(parser, max_new_tokens=48)
    parser.add_argument("--output", default="results/selector_decoding.json")
    args = parser.parse_args(argv)
    return run_script("selector_decoding", lambda held: _run(args, held))


def check_held_out_options(args) -> None:
    """The numbers of ``add_held_out_arguments`` in their ranges and its input files regular files, before any work
    (a selector or dataset that is a FIFO would block its reader for ever)."""
    from verispec.guard.limits import MAX_CONTEXT_TOKENS, MAX_THREADS
    from verispec.study.script_files import check_input, check_ranges

    check_ranges([("--max-prompts", args.max_prompts, 1, None),
                  ("--max-new-tokens", args.max_new_tokens, 1, MAX_CONTEXT_TOKENS),
                  ("--seed", args.seed, 0, 2**31 - 1), ("--threads", args.threads, 1, MAX_THREADS)])
    check_input(args.dataset, "the dataset")
    for path in args.selector:
        check_input(path, "the selector")


def _run(args, held) -> int:
    """Check every number, input and output before any work (writable, room on the disk, the run's own files, one
    run at a time), then decode the cells not yet in the store."""
    from verispec.study.script_files import RunOutputs

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    check_held_out_options(args)
    output = Path(args.output)
    outputs = RunOutputs("--output", store=output, tables=[output.with_suffix(".md"),
                                                           output.with_suffix(".summary.json")])
    outputs.claim(held)
    import torch

    from verispec.models import Sampling, load_pair
    from verispec.models.cpu_linear import store_key

    if args.threads:
        torch.set_num_threads(args.threads)
    setup = held_out_plans(args.dataset, args.selector, args.prompts, args.max_prompts)
    pair = (load_pair(args.target, args.draft, device=args.device, dtype=args.dtype) if args.target
            else load_pair(args.pair, device=args.device, dtype=args.dtype))
    check_pair(setup, pair)
    parameters = {"pair": pair.name, "max_new_tokens": args.max_new_tokens, "seed": args.seed,
                  "device": str(pair.device), "dtype": str(pair.target.dtype).removeprefix("torch."),
                  "threads": torch.get_num_threads(), **plan_parameters(setup, args.dataset, args.selector)}
    parameters.update(store_key(pair))  # the CPU linear path's version when on: other kernels, other times
    store = ResultStore(output, parameters=parameters)
    from verispec.selector.roots import sampling_text

    samplings, groups, texts, plans = setup["samplings"], setup["groups"], setup["texts"], setup["plans"]
    settings = [sampling_text(sampling) for sampling in samplings]
    cells = [(method, group, index) for index in range(len(samplings)) for group in groups for method in plans]
    for method, group, index in tqdm(cells, desc="cells"):
        key = f"{method}|{group}|{settings[index]}"
        if store.done(key):
            continue
        sampling = Sampling(samplings[index]["temperature"], samplings[index]["top_k"], samplings[index]["top_p"])
        seed = args.seed + 1000 * index + groups.index(group)  # every method of a cell draws from the same seed
        row = decode_cell(pair, texts[group], method, plans[method], index, sampling, args.max_new_tokens, seed)
        row["load_average"] = os.getloadavg()[0]
        store.add(key, row)
    table = summarize(dict(store.rows), list(plans), settings)
    text = markdown(table, parameters)
    outputs.write_text(store, output.with_suffix(".md"), text)
    outputs.write_text(store, output.with_suffix(".summary.json"), json.dumps(table, indent=1) + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
