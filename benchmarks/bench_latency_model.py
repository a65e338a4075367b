"""Is the latency model the selector trains under true to the machine? Every static action of the selector's grid
decoded on held-out prompts, its measured seconds a block and tokens/s against what each latency model predicts
(issue 66, item 3).

    VERISPEC_SMALL_BATCH_LINEAR=1 verispec latency --pair qwen-coder --threads 2 --repeats 9 \\
        --draft-sizes 1,2,3,4 --sizes 1,...,21,24,32 --out data/latency/latency-cpu-small-batch.json
    python benchmarks/bench_latency_model.py --pair qwen-coder --dataset data/selector/qwen-t07-m64.npz \\
        --selector data/selector/specinfer-cpu.pt --prompts humaneval --prompts prose --max-prompts 3 \\
        --max-new-tokens 32 --threads 2 --linears small-batch \\
        --latency data/latency/latency-cpu-small-batch.json --latency data/latency/latency-cpu-by-size.json \\
        --output results/bench_latency_model.json --result docs/results/bench/bench-latency-model.json

For every (setting, held-out prompt) cell every action of the selector's grid decodes the prompt, in an order rotated
by one place from one cell to the next (a drift in the load hits every action alike), from one seed. Each row keeps
the tokens, blocks and decode seconds (prefill excluded) and the two models' forward seconds
(``forward_clock.ForwardClock``: hooks on the models, so the decoder's own work is the rest). Every block drafts its
whole tree (``cut_drafts=False``; real decoding cuts the last blocks at the tokens left, which no latency model
prices).

Predictions, per action a and latency model m (``--latency``, repeatable; every one is judged against the same
measured rows): the block time T_m(a) = ``verispec.selector.actions.action_times`` (what ``selector train --latency``
prices), at the tree sizes m carries for that sampling setting of ``--dataset`` (``LatencyModel.for_setting``; a model
with sizes for other settings only is refused on one line), and tokens/s = E[tau+1](a) / T_m(a), E[tau+1](a) the
mean label of the held-out roots of that setting in ``--dataset`` (the selector's split).
Measured: seconds a block = decode seconds / blocks over the prompts, and
tokens/s = tokens / decode seconds with a 95% percentile bootstrap over prompts. The summary gives, per model, the
ratio measured / predicted of the block time for every action, how many actions lie within ``--tolerance`` (5%),
the largest miss, and the same for tokens/s (whose measurement also carries the draws' noise, hence its interval).

A latency model from another pair (its source names the pair it was measured on) is refused on one line; one
measured with other linear kernels than the run's (small-batch or torch's, named in its source) is checked all the
same, its kernels named beside it: that is how a model measured on torch's kernels shows what it mispredicts.

A model fitted to decoding's own forwards (``--fit-prompts N --fit-out FILE --fit-sizes FILE``): every action
also decodes N TRAINING prompts of the selector's split, their cells spread evenly among the held-out ones
(``cell_order``: the machine's speed drifts by several % over a run, and a model read from the same stretch of the
run as the rows it is judged on shares its level); ``fit_in_decoding`` reads t_q(w) and t_p(n) from those rows'
forwards (medians by width, plus the rest of a block, which grows with the tree's nodes), takes the tree sizes of
``--fit-sizes``, writes the model and judges it with the others on the held-out prompts, which it never saw.
``verispec latency`` times isolated forwards at one context length; this model reads the forwards decoding itself
ran (issue 66, item 3).

Every action's measured block time also gets a 95% percentile-bootstrap interval over the prompts; per model,
``beyond_noise`` counts the actions whose whole interval (over the prediction) lies outside the tolerance: a miss the
rows' own noise cannot explain. The rest of the misses are within what these rows can resolve.

Rows are a resumable ``ResultStore`` keyed on action, prompt and setting; ``--budget SECONDS`` stops
starting cells past it (rerun to go on).
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
import selector_decoding  # noqa: E402  experiments/selector_decoding.py: held-out prompts
from bench_assisted import LINEARS, load_run_pair, method_order, rate_interval  # noqa: E402
from forward_clock import ForwardClock  # noqa: E402
from measure import start_record, write_result, write_rows, write_table  # noqa: E402

from verispec.errors import VerispecError  # noqa: E402
from verispec.files.io import ResultStore  # noqa: E402

TOLERANCE = 0.05
#: Fewest forwards of one width the fitted model reads that width from (``fit_in_decoding``).
MIN_FORWARDS = 3


def check_latency_fits(latency, path: str, pair) -> None:
    """VerispecError (one line) unless ``latency`` was measured on ``pair`` (or names no pair)."""
    from verispec.latency import check_latency_pair

    check_latency_pair(latency, pair.name, f"--latency {path}")


def kernels_of(latency) -> str:
    """The linear kernels a measured model names in its source: small-batch, else torch's."""
    return "small-batch" if "small-batch linears" in latency.source else "torch"


def decode_action(pair, prompt: str, action, sampling, max_new_tokens: int, seed: int) -> dict:
    """One timed generation of a static action, with the two models' forward seconds."""
    from verispec.models import generate

    with ForwardClock(pair) as clock:
        # whole trees in every block (no cut at the token budget): a latency model prices a whole block
        generation = generate(pair, prompt, action.tree, action.verifier, max_new_tokens, sampling, seed,
                              cut_drafts=False)
    summary = generation.summary()
    row = {key: summary[key] for key in ("new_tokens", "decode_s", "prefill_s", "blocks", "target_calls",
                                         "draft_calls", "drafting_s", "target_s", "verify_s", "cache_s")}
    # the blocks' forwards: each model's first call is the prefill (decode_s excludes it too)
    row.update(target_forward_s=clock.after_first("target"), draft_forward_s=clock.after_first("draft"),
               target_forwards=clock.forwards_after_first("target"), draft_forwards=clock.forwards_after_first("draft"))
    return row


def fit_in_decoding(rows: list[dict], donor, pair: str, linears: str, threads: int, prompts: int,
                    min_forwards: int = MIN_FORWARDS, device: str = "cpu"):
    """A latency model fitted to the forwards decoding ran (``rows``: ``decode_action``'s, on training prompts):
    t_q(w) the median time of the draft's forwards that fed w tokens, t_p(n) the median of the target's that fed n
    plus the rest of a block at n nodes (``rest_of_block``: sampling, verification and cache updates, which a block
    pays once and which grow with its tree), each width read where at least ``min_forwards`` forwards fed it (others
    interpolated), in ms; the tree sizes of ``donor`` (a model that carries them, e.g. experiments/tree_sizes.py's).
    Where ``verispec latency`` times isolated forwards at one context length, this reads the forwards decoding ran,
    at their contexts. VerispecError (one line) where no row carries forwards, or no draft forward fed one token."""
    from verispec.latency import LatencyModel

    timed = [row for row in rows if row.get("target_forwards")]
    if not timed:
        raise VerispecError("no decoded row carries its forwards' widths: decode the fitting prompts with this script")
    curves = {}
    for name in ("draft", "target"):
        by_width = {}
        for row in timed:
            for width, seconds in row[f"{name}_forwards"]:
                if width is not None:
                    by_width.setdefault(int(width), []).append(1000 * float(seconds))
        curves[name] = {w: float(np.median(t)) for w, t in sorted(by_width.items()) if len(t) >= min_forwards}
    if 1 not in curves["draft"] or not curves["target"]:
        raise VerispecError(f"fewer than {min_forwards} draft forwards of one token or target forwards of one width "
                            "in the fitting rows; decode more prompts (--fit-prompts)")
    per_block, per_node = rest_of_block(timed)
    source = (f"measured on {pair} ({device}, in decoding, {linears} linears, {threads} threads, {prompts} training "
              f"prompts, median of each width's forwards, the rest of a block {per_block:.2f} + {per_node:.2f} n ms "
              "in t_p(n))")
    target_times = tuple(t + per_block + per_node * n for n, t in curves["target"].items())
    model = LatencyModel(curves["draft"][1], tuple(curves["target"]), target_times, "ms", source,
                         tuple(curves["draft"]), tuple(curves["draft"].values()))
    for setting, trees, sizes_source in donor.tree_sizes:
        model = model.with_tree_sizes(setting, dict(trees), sizes_source)
    return model


def rest_of_block(rows: list[dict]) -> tuple[float, float]:
    """(a, b) in ms: the rest of a block (decode seconds less both models' forwards) modelled as a + b n at n tree
    nodes, by non-negative least squares over the rows (row r: rest_r = a blocks_r + b (sum of its target forwards'
    widths)). The rest grows with the tree (verification, cache updates: on the CPU pair about 3 ms at one node and
    25 at eight), so one constant over every action mispriced the cheapest and the largest blocks. Where every row's
    blocks have the same mean width the slope cannot be told apart: b = 0 and a the mean rest a block."""
    from scipy.optimize import nnls

    design = np.array([[row["blocks"], sum(w for w, _ in row["target_forwards"] if w is not None)] for row in rows],
                      dtype=np.float64)  # [rows, 2]
    rest = np.array([1000 * (row["decode_s"] - row["target_forward_s"] - row["draft_forward_s"]) for row in rows])
    if np.linalg.matrix_rank(design) < 2:
        return float(rest.sum() / design[:, 0].sum()), 0.0
    (per_block, per_node), _ = nnls(design, rest)
    return float(per_block), float(per_node)


def summarize(rows: dict, actions, settings: list[str], labels: dict, models: dict, tolerance: float,
              groups=None) -> dict:
    """Per setting and action: measured block seconds, forward seconds and tokens/s (its interval) over the prompts
    every action ran (of ``groups``, when given: the held-out ones, not those a model was fitted on), with each
    model's predictions (``models``: name -> per setting of ``settings``, action name -> block ms) and ratios; per
    model, the counts within ``tolerance``."""
    table, verdicts = [], {name: {"time": [], "rate": []} for name in models}
    for index, setting in enumerate(settings):
        cells = {a.name: {key.split("|")[1]: row for key, row in rows.items()
                          if key.split("|")[0] == a.name and key.split("|")[2] == setting
                          and (groups is None or key.split("|")[1] in groups)} for a in actions}
        complete = sorted(set.intersection(*(set(cells[a.name]) for a in actions)))
        if not complete:
            continue
        for a in actions:
            done = {p: cells[a.name][p] for p in complete}
            blocks = sum(r["blocks"] for r in done.values())
            seconds = sum(r["decode_s"] for r in done.values())
            forwards = sum(r["target_forward_s"] + r["draft_forward_s"] for r in done.values())
            tokens = sum(r["new_tokens"] for r in done.values())
            entry = {"setting": setting, "action": a.name, "prompts": len(done), "blocks": blocks, "tokens": tokens,
                     "block_ms": 1000 * seconds / blocks, "forward_ms": 1000 * forwards / blocks,
                     "overhead": 1 - forwards / seconds, "tokens_per_block": tokens / blocks,
                     "label_tokens_per_block": labels[index][a.name], "tokens_per_s": tokens / seconds,
                     "tokens_per_s_ci": rate_interval(done), "block_ms_ci": block_interval(done), "models": {}}
            for name, times in models.items():
                predicted_ms = float(times[index][a.name])
                rate = labels[index][a.name] / predicted_ms * 1000
                entry["models"][name] = {"block_ms": predicted_ms, "time_ratio": entry["block_ms"] / predicted_ms,
                                         "tokens_per_s": rate, "rate_ratio": entry["tokens_per_s"] / rate}
                verdicts[name]["time"].append(entry["block_ms"] / predicted_ms)
                verdicts[name]["rate"].append(entry["tokens_per_s"] / rate)
                verdicts[name].setdefault("beyond", []).append(
                    entry["block_ms_ci"] is not None and _beyond(entry["block_ms_ci"], predicted_ms, tolerance))
            table.append(entry)
    overall = {}
    for name, ratios in verdicts.items():
        overall[name] = {}
        beyond = ratios.pop("beyond", [])
        for kind, values in ratios.items():
            values = np.asarray(values)
            # the shape alone: each ratio over the median one (a run's level moves a few % from run to run)
            scaled = values / np.median(values) if len(values) else values
            overall[name][kind] = None if not len(values) else {
                "actions": len(values), "within": int((abs(values - 1) <= tolerance).sum()),
                "worst": float(values[np.argmax(abs(values - 1))]), "median": float(np.median(values)),
                "within_scaled": int((abs(scaled - 1) <= tolerance).sum()), "sd_log": float(np.std(np.log(values)))}
        if overall[name]["time"] is not None:
            overall[name]["time"]["beyond_noise"] = int(sum(beyond))
    return {"rows": table, "models": overall, "tolerance": tolerance, "noise": measuring_noise(table, actions)}


def block_interval(rows: dict, resamples: int = selector_decoding.BOOTSTRAP, seed: int = 0) -> list | None:
    """The 95% percentile-bootstrap interval over prompts of the measured ms a block (total decode seconds / total
    blocks); None below two prompts."""
    prompts = sorted(rows)
    if len(prompts) < 2:
        return None
    seconds = np.array([rows[p]["decode_s"] for p in prompts])
    blocks = np.array([rows[p]["blocks"] for p in prompts], dtype=np.float64)
    picks = np.random.default_rng(seed).integers(0, len(prompts), (resamples, len(prompts)))  # [resamples, prompts]
    draws = 1000 * seconds[picks].sum(axis=1) / blocks[picks].sum(axis=1)
    return [float(np.quantile(draws, 0.025)), float(np.quantile(draws, 0.975))]


def _beyond(interval: list, predicted_ms: float, tolerance: float) -> bool:
    """Whether the whole measured interval lies outside predicted x [1 - tolerance, 1 + tolerance]."""
    low, high = interval[0] / predicted_ms, interval[1] / predicted_ms
    return low > 1 + tolerance or high < 1 - tolerance


def cell_order(groups: list[str], fit_groups: list[str]) -> list[str]:
    """The held-out and fitting prompts in the order a run decodes them: the fitting ones spread evenly among the
    held-out ones (each at the middle of its share of the run), so a model read from them sees the same stretch of
    the machine's drifting speed as the rows it is judged on."""
    place = {group: (i + 0.5) / len(groups) for i, group in enumerate(groups)}
    place.update({group: (j + 0.5) / len(fit_groups) - 1e-9 for j, group in enumerate(fit_groups)})
    return sorted(place, key=place.get)


def drawn_tree(action) -> str:
    """The tree an action's blocks draw: a chain of L1 + L2 drafts whenever K = 1 or L2 = 0, whatever the other
    numbers (its K paths of L2 = 0 tokens are no paths), else its delayed tree."""
    return f"chain:{action.l1 + action.l2}" if action.k == 1 or action.l2 == 0 else action.tree


def measuring_noise(table: list[dict], actions) -> dict:
    """How far one workload's measured block time moves within the run: the actions of a setting that draw the same
    tree (``drawn_tree``) decode the same tokens on the same prompts from one seed, so their block times differ only
    by the measurement. Per tree: its actions and spread (largest / smallest block time - 1); ``sd_log``: the pooled
    standard deviation of log block time within those trees (what no latency model can predict; a model whose
    residual sd_log is near it is as good as these rows can show)."""
    by_name = {a.name: a for a in actions}
    trees = {}
    for entry in table:
        trees.setdefault((entry["setting"], drawn_tree(by_name[entry["action"]])), []).append(entry["block_ms"])
    shared = {key: times for key, times in trees.items() if len(times) > 1}
    residuals = [value for times in shared.values() for value in np.log(times) - np.log(times).mean()]
    freedom = len(residuals) - len(shared)
    return {"trees": {f"{setting}|{tree}": {"actions": len(times), "spread": max(times) / min(times) - 1}
                      for (setting, tree), times in shared.items()},
            "sd_log": float(np.sqrt(np.sum(np.square(residuals)) / freedom)) if freedom > 0 else None}


def markdown(summary: dict, parameters: dict) -> str:
    names = list(parameters["latency"])
    lines = [f"# Latency models against decoding: {parameters['pair']} on {parameters['device']} "
             f"({parameters['linears']} linears, {parameters['threads']} threads), every static action, "
             f"{parameters['max_new_tokens']} new tokens a prompt", "",
             "measured / predicted, per model: " + "; ".join(
                 f"{name}: block time within {summary['tolerance']:.0%} on {m['time']['within']} of "
                 f"{m['time']['actions']} actions (median x{m['time']['median']:.3f}, worst x{m['time']['worst']:.3f}),"
                 f" tokens/s on {m['rate']['within']} (median x{m['rate']['median']:.3f}, worst "
                 f"x{m['rate']['worst']:.3f}); over its median ratio (the run's level) block time within on "
                 f"{m['time']['within_scaled']}, sd of log(measured / predicted) {m['time']['sd_log']:.4f}; "
                 f"outside {summary['tolerance']:.0%} beyond the rows' interval on {m['time']['beyond_noise']}"
                 for name, m in summary["models"].items() if m["time"]), "",
             "the rows' own noise (actions that draw the same tree, identical work): pooled sd of log block time "
             + (f"{summary['noise']['sd_log']:.4f}" if summary["noise"]["sd_log"] is not None else "-") + "; "
             + ", ".join(f"{key.split('|')[1]} x{e['actions']} spread {e['spread']:.1%}"
                         for key, e in summary["noise"]["trees"].items()), "",
             "| setting | action | blocks | tokens/block (labels) | block ms [95%] | forwards share | tokens/s [95%] | "
             + " | ".join(f"{n}: block ms (x meas.) | {n}: tokens/s (x meas.)" for n in names) + " |",
             "|---|---|---|---|---|---|---|" + "---|---|" * len(names)]
    for e in summary["rows"]:
        ci = e["tokens_per_s_ci"]
        cells = [f"{e['models'][n]['block_ms']:.0f} (x{e['models'][n]['time_ratio']:.3f}) | "
                 f"{e['models'][n]['tokens_per_s']:.2f} (x{e['models'][n]['rate_ratio']:.3f})" for n in names]
        block = e.get("block_ms_ci")
        lines.append(f"| {e['setting']} | {e['action']} | {e['blocks']} | {e['tokens_per_block']:.2f} "
                     f"({e['label_tokens_per_block']:.2f}) | {e['block_ms']:.0f}"
                     + (f" [{block[0]:.0f}, {block[1]:.0f}]" if block else "") + f" | {1 - e['overhead']:.3f} | "
                     f"{e['tokens_per_s']:.2f}" + (f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else "") + " | "
                     + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    from measure import parse_decoding_run  # benchmarks/measure.py
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    selector_decoding.add_held_out_arguments(parser, max_new_tokens=32)
    parser.add_argument("--latency", action="append", required=True, help="a latency model to check (repeatable)")
    parser.add_argument("--linears", default="torch", help="torch (default) or small-batch, for both models")
    parser.add_argument("--tolerance", type=float, default=TOLERANCE, help="the agreement asked for (default 0.05)")
    parser.add_argument("--budget", type=float, default=None, help="seconds: start no cell past them")
    parser.add_argument("--fit-prompts", type=int, default=0,
                        help="decode every action on this many TRAINING prompts too and fit a latency model to their "
                             "forwards (fit_in_decoding), judged with the others on the held-out prompts")
    parser.add_argument("--fit-out", help="the fitted latency model's file (with --fit-prompts)")
    parser.add_argument("--fit-sizes", help="a latency model whose tree sizes the fitted model carries")
    args, output = parse_decoding_run(parser, argv, __file__, "results/bench_latency_model.json")
    try:
        if args.linears not in LINEARS:
            raise VerispecError(f"--linears {args.linears!r}: choose torch or small-batch")
        if not 0 < args.tolerance < 1 or args.max_new_tokens < 1 or (args.budget is not None and args.budget <= 0):
            raise VerispecError("--tolerance must lie in (0, 1), --max-new-tokens and --budget be positive")
        if args.fit_prompts < 0 or bool(args.fit_prompts) != bool(args.fit_out) or bool(args.fit_out) != bool(
                args.fit_sizes):
            raise VerispecError("a fit needs --fit-prompts N (N > 0), --fit-out FILE and --fit-sizes FILE together")
        import torch

        from verispec.latency import LatencyModel
        from verispec.models.cpu_linear import store_key
        from verispec.selector.actions import action_times

        if args.threads:
            torch.set_num_threads(args.threads)
        latencies = {Path(path).stem: LatencyModel.load(path) for path in args.latency}
        donor = LatencyModel.load(args.fit_sizes) if args.fit_sizes else None
        if donor is not None and not donor.sized_settings:
            raise VerispecError(f"--fit-sizes {args.fit_sizes} carries no tree sizes; give a model "
                                "experiments/tree_sizes.py wrote")
        if args.fit_out:
            from verispec.files.io import check_output
            from verispec.latency import LATENCY_FILE

            check_output(args.fit_out, LATENCY_FILE, what="--fit-out", overwrite=args.overwrite)
        started = (start_record("bench_latency_model.py", argv, [args.dataset, *args.selector, *args.latency],
                                threads=torch.get_num_threads(), result=args.result) if args.result else None)
        setup = selector_decoding.held_out_plans(args.dataset, args.selector, args.prompts, args.max_prompts)
        pair = load_run_pair(args)
        for latency, path in [*zip(latencies.values(), args.latency), *([(donor, args.fit_sizes)] if donor else [])]:
            check_latency_fits(latency, path, pair)
        from bench_assisted import training_groups

        fit_groups = training_groups(setup, args.fit_prompts) if args.fit_prompts else []
        selector_decoding.check_pair(setup, pair)
        dataset, selector = setup["dataset"], next(iter(setup["selectors"].values()))
        actions = list(selector.grid.actions)
        from verispec.selector.roots import sampling_text

        # per setting of the dataset, each model at the sizes its trees have there (refused where it has none)
        models = {name: [dict(zip((a.name for a in actions),
                                  action_times(selector.grid, latency.for_setting(sampling_text(s)))))
                         for s in setup["samplings"]] for name, latency in latencies.items()}
        from verispec.selector.split import held_out

        _, test = held_out(dataset, selector)
        labels = [{a.name: float(test.efficiency[test.setting == index][:, dataset.grid.index(a)].mean())
                   for a in actions} for index in range(len(setup["samplings"]))]
        parameters = {"pair": pair.name, "max_new_tokens": args.max_new_tokens, "seed": args.seed,
                      "device": str(pair.device), "threads": torch.get_num_threads(), "linears": args.linears,
                      "torch": torch.__version__, "actions": [a.name for a in actions],
                      "latency": {name: latency.source for name, latency in latencies.items()},
                      "latency_kernels": {name: kernels_of(latency) for name, latency in latencies.items()},
                      **selector_decoding.plan_parameters(setup, args.dataset, args.selector)}
        parameters.update(store_key(pair))
        if fit_groups:
            parameters.update(fit_groups=fit_groups, fit_sizes=args.fit_sizes, fit_out=args.fit_out)
        # the rows do not depend on the models judged against them: another --latency rejudges the same rows
        store = ResultStore(args.output, parameters={k: v for k, v in parameters.items() if k not in
                                                     ("latency", "latency_kernels", "fit_groups", "fit_sizes",
                                                      "fit_out")},
                            overwrite=args.overwrite)
    except VerispecError as error:
        print(f"bench_latency_model: error: {error}", file=sys.stderr)
        return 2
    from verispec.models import Sampling
    from verispec.selector.roots import sampling_text

    samplings, groups, texts = setup["samplings"], setup["groups"], setup["texts"]
    settings = [sampling_text(s) for s in samplings]
    by_name = {a.name: a for a in actions}
    # the fitting prompts spread among the held-out ones (a training prompt is never a held-out one: keys by group
    # do not clash)
    cells = [(index, group) for index in range(len(samplings)) for group in cell_order(groups, fit_groups)]
    begin, spent = time.perf_counter(), []
    for position, (index, group) in enumerate(tqdm(cells, desc="prompts")):
        keys = {name: f"{name}|{group}|{settings[index]}" for name in by_name}
        if all(store.done(key) for key in keys.values()):
            continue
        elapsed = time.perf_counter() - begin
        if args.budget is not None and spent and elapsed + float(np.mean(spent)) > args.budget:
            print(f"bench_latency_model: the budget of {args.budget:g} s is spent; rerun to go on", file=sys.stderr)
            break
        s = samplings[index]
        sampling = Sampling(s["temperature"], s["top_k"], s["top_p"])
        # the held-out prompts keep their seeds whether a fit runs or not; the fitting prompts get others
        seed = args.seed + 1000 * index + (groups.index(group) if group in groups else 500 + fit_groups.index(group))
        for name in method_order(list(by_name), position):
            if store.done(keys[name]):
                continue
            row = decode_action(pair, texts[group], by_name[name], sampling, args.max_new_tokens, seed)
            row.update(load_average=os.getloadavg()[0], seed=seed)
            store.add(keys[name], row)
        spent.append(time.perf_counter() - begin - elapsed)
    if fit_groups:
        fitted = _fit(dict(store.rows), fit_groups, len(samplings), donor, pair, args, parameters, argv)
        if fitted is None:
            return 3
        latencies[Path(args.fit_out).stem] = fitted
        models[Path(args.fit_out).stem] = [dict(zip((a.name for a in actions), action_times(
            selector.grid, fitted.for_setting(sampling_text(s))))) for s in samplings]
        parameters["latency"][Path(args.fit_out).stem] = fitted.source
        parameters["latency_kernels"][Path(args.fit_out).stem] = args.linears
    summary = summarize(dict(store.rows), actions, settings, labels, models, args.tolerance, groups)
    text = markdown(summary, parameters)
    write_table(output.with_suffix(".md"), text)
    write_rows(output.with_suffix(".summary.json"), summary)
    print(text.split("\n\n")[1] if "\n\n" in text else text)
    if started:
        loads = [row["load_average"] for row in store.rows.values()]
        write_result(args.result, started, {"benchmark": "bench_latency_model", "unit": "ms per block",
                                            "parameters": parameters, "load_average_max": max(loads, default=None),
                                            **summary})
    return 0


def _fit(rows: dict, fit_groups: list[str], settings: int, donor, pair, args, parameters: dict, argv):
    """The model fitted to the training prompts' rows, written to ``--fit-out`` (atomically, with its record);
    None, with a line on stderr, until every action ran every fitting prompt (rerun to go on)."""
    from verispec.files.io import atomic_write_json
    from verispec.files.provenance import LATENCY, MARKER_KEY, run_record, written_by

    fitting = [row for key, row in rows.items() if key.split("|")[1] in fit_groups]
    if len(fitting) < len(parameters["actions"]) * len(fit_groups) * settings:
        print("bench_latency_model: the fitting prompts have not all run (the budget); rerun to go on",
              file=sys.stderr)
        return None
    model = fit_in_decoding(fitting, donor, pair.name, args.linears, parameters["threads"], len(fit_groups),
                            device=str(pair.device))
    import shlex

    record = run_record(shlex.join(["python", "benchmarks/bench_latency_model.py",
                                    *(sys.argv[1:] if argv is None else argv)]),
                        [args.dataset, *args.selector, args.fit_sizes], threads=parameters["threads"])
    atomic_write_json(Path(args.fit_out), {**model.as_dict(), "record": record,
                                           MARKER_KEY: written_by(LATENCY, "latency")})
    print(f"bench_latency_model: wrote {args.fit_out}: {model.source}")
    return model


if __name__ == "__main__":
    raise SystemExit(main())
