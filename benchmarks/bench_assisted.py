"""transformers' own speculative decoding against verispec's, in one run on one machine (issue 56, item 5):
``generate`` plain and with ``assistant_model`` (its default schedule), verispec's plain sampling, each selector's
best static action and the delay selector, on the same pair, prompts, sampling, token budget, threads and kernels.

    verispec selector train --dataset data/selector/qwen-t07-m64.npz --verifiers specinfer \\
        --latency data/latency/latency-cpu-in-run.json --out specinfer-cpu.pt
    python benchmarks/bench_assisted.py --pair qwen-coder --dataset data/selector/qwen-t07-m64.npz \\
        --selector specinfer-cpu.pt --prompts humaneval --prompts prose --max-prompts 8 \\
        --max-new-tokens 64 --threads 2 --linears small-batch --budget 3600 \\
        --output results/bench_assisted.json --result docs/results/bench/bench-assisted.json

The held-out prompts, the static actions and the selectors are ``experiments/selector_decoding.py``'s
(``held_out_plans``: the groups of ``--dataset`` the selectors did not train on, ``--prompts`` naming the specs the
dataset was traced from; every sampling setting of the dataset); transformers' decoders are
``experiments/real_decoding.py``'s (``run_hf``: ``generate(do_sample=True)`` with the setting's temperature, top-k
and top-p and no repetition penalty, and with ``assistant_model=pair.draft``, whose schedule is transformers'
default, recorded in the file: ``num_assistant_tokens``, its schedule and the confidence threshold, which adapts
only where scikit-learn is installed). Methods:

* ``hf-plain``, ``hf-assisted``: transformers' ``generate`` without and with the draft as assistant;
* ``plain``: verispec's plain sampling from the target; ``NAME static``: NAME's verifier on its best static
  action; ``NAME selector``: the delay selector choosing every block's action (its choosing time counted).

Interleaving: every (setting, prompt) runs every method back to back, in an order rotated by one place from one
prompt to the next, so a drift in the machine's load hits every method and no method always runs first. Every
method of a prompt draws from one seed. Before the first timed cell each method runs once untimed on a short fixed
prompt (``--warmup`` tokens, default 2; 0: none), so that no method's first call (lazy imports, allocations) is
timed. Kernels: ``--linears small-batch`` gives both models'
``nn.Linear`` layers ``verispec.models.cpu_linear``'s path at load, on the module instances themselves, so
transformers' ``generate`` (target and assistant) runs through the same kernels as verispec's decoders; ``torch``
(the default) leaves torch's for all. Each row records the kernels the models had when it ran.

Times: tokens/s is the tokens over the seconds of the steady state, summed over the prompts: for every method alike,
decoding after its first block (``forward_clock.ForwardClock.steady``: from the end of the first target forward
that reaches the prompt's last token to the end of the call; its tokens, the call's less the first block's).
verispec prefills the prompt but its last token apart; transformers feeds the whole prompt in the same forward as
the first block's drafts; no subtraction of a prefill treats both alike, while the steady state does. (The earlier
cut, transformers' call less an estimate of verispec's prefill timed just before it, credited transformers with
most of its first block, about one target forward a prompt; the rows keep it as ``decode_s``.) The
ratios with prefill included (each call's wall time) are given too. Intervals: 95%, percentile bootstrap over the
prompts (2,000 resamples; ``selector_decoding.paired_rate_interval``), paired for the ratios to ``hf-assisted`` and
``hf-plain`` (the same resampled prompts in numerator and denominator). Only prompts every method has run are
summarized.

Rows are a ``ResultStore`` (``--output``) keyed on method, prompt and setting, its parameters the pair, budget,
seed, threads, kernels, transformers' version and schedule and the selectors' hashes (an interrupted run resumes;
a file from other settings is refused). ``--budget SECONDS`` starts no prompt once the seconds spent so far plus
the mean seconds of a prompt this run would pass it (rerun to go on). ``--result FILE`` writes the summary with the
run's record (``measure.write_result``): one row per (setting, method) with ``now`` its seconds per token,
``before`` hf-assisted's and ``ratio`` before / now (the speed-up over hf-assisted), and its intervals.
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
import selector_decoding  # noqa: E402  experiments/selector_decoding.py: held-out prompts, plans, paired ratios
from forward_clock import steady_rows  # noqa: E402  benchmarks/forward_clock.py
from measure import start_record, write_result, write_rows, write_table  # noqa: E402  benchmarks/measure.py

from verispec.errors import VerispecError  # noqa: E402
from verispec.files.io import ResultStore  # noqa: E402

#: transformers' decoders this benchmark runs, and the baseline every ratio is taken against.
HF_METHODS = ("hf-plain", "hf-assisted")
BASELINE = "hf-assisted"
LINEARS = ("torch", "small-batch")
#: The untimed warm-up's prompt.
WARMUP_PROMPT = "def add(a, b):\n    return"
#: transformers' assisted generation at the configuration tuned on the training prompts (``--tune-prompts``).
BEST = "hf-best"
#: The grid a user would tune transformers over (issue 66): a constant draft length of 1-8 tokens, with the
#: confidence stop off (threshold 0) and at transformers' default threshold.
DEFAULT_GRID = (("num_assistant_tokens", "1-8"), ("num_assistant_tokens_schedule", "constant"),
                ("assistant_confidence_threshold", "0,default"))
SCHEDULES = ("constant", "heuristic", "heuristic_transient")
SHORT = {"num_assistant_tokens": "k", "num_assistant_tokens_schedule": "schedule",
         "assistant_confidence_threshold": "threshold"}


def _grid_values(option: str, text: str) -> list:
    """The values of one ``--hf-grid OPTION=VALUES`` part: integers and ranges (a-b) for the draft length, names for
    the schedule, numbers in [0, 1) or ``default`` (transformers' own) for the threshold."""
    values = []
    for part in text.split(","):
        part = part.strip()
        try:
            if option == "num_assistant_tokens":
                low, _, high = part.partition("-")
                values += list(range(int(low), int(high or low) + 1))
                if not values or min(values) < 1 or max(values) > 64:
                    raise ValueError
            elif option == "num_assistant_tokens_schedule":
                if part not in SCHEDULES:
                    raise ValueError
                values.append(part)
            else:
                values.append("default" if part == "default" else float(part))
                if values[-1] != "default" and not 0 <= values[-1] < 1:
                    raise ValueError
        except ValueError:
            what = {"num_assistant_tokens": "integers 1-64 or ranges a-b",
                    "num_assistant_tokens_schedule": " or ".join(SCHEDULES)}.get(option,
                                                                               "numbers in [0, 1) or default")
            raise VerispecError(f"--hf-grid {option}={text!r}: {part!r} is not one of {what}") from None
    return list(dict.fromkeys(values))


def hf_grid(parts: list[str] | None) -> list[dict]:
    """The transformers configurations of ``--hf-grid OPTION=VALUES`` parts (every combination; an option left out
    takes ``DEFAULT_GRID``'s values); an unknown option or value is refused on one line."""
    import itertools

    import real_decoding  # experiments/real_decoding.py: the options transformers reads

    given = {}
    for part in parts or []:
        option, sep, text = part.partition("=")
        option = option.strip()
        if not sep:
            raise VerispecError(f"--hf-grid {part!r}: give OPTION=VALUES, e.g. num_assistant_tokens=1-8")
        if option not in real_decoding.ASSISTANT_OPTIONS:
            raise VerispecError(f"--hf-grid {part!r}: unknown option {option!r}; give OPTION=VALUES with OPTION one "
                                f"of {', '.join(real_decoding.ASSISTANT_OPTIONS)}")
        if option in given:
            raise VerispecError(f"--hf-grid names {option} twice; give its values once, comma-separated")
        given[option] = _grid_values(option, text)
    options = {option: given.get(option) or _grid_values(option, text) for option, text in DEFAULT_GRID}
    return [dict(zip(options, values)) for values in itertools.product(*options.values())]


def config_name(config: dict) -> str:
    """A configuration's method name, e.g. ``hf:k=4,schedule=constant,threshold=0``."""
    return "hf:" + ",".join(f"{SHORT[option]}={value:g}" if isinstance(value, float) else f"{SHORT[option]}={value}"
                            for option, value in config.items())


def resolved(config: dict, schedule: dict) -> dict:
    """``config`` with ``default`` replaced by transformers' own value (``assistant_schedule``)."""
    return {option: schedule[option] if value == "default" else value for option, value in config.items()}


def best_config(rows: dict, names: list[str], groups: list[str], setting: str) -> str | None:
    """The configuration of the highest tokens/s (total tokens over total seconds, steady state) over the
    training ``groups`` at ``setting``; None until every configuration has run every one of them."""
    rates = {}
    for name in names:
        cells = [rows.get(f"{name}|{group}|{setting}") for group in groups]
        if None in cells:
            return None
        rates[name] = sum(c["steady_tokens"] for c in cells) / sum(c["steady_s"] for c in cells)
    return max(rates, key=rates.get)


def method_order(methods: list[str], position: int) -> list[str]:
    """The order the methods run in on the ``position``-th (setting, prompt): ``methods`` rotated left by
    ``position`` places."""
    shift = position % len(methods)
    return methods[shift:] + methods[:shift]


def schedule(methods: list[str], groups: list[str], settings: int) -> list[tuple[int, str, list[str]]]:
    """(setting index, prompt, methods in their order) for every setting and prompt, in the order they run."""
    cells = [(index, group) for index in range(settings) for group in groups]
    return [(index, group, method_order(methods, position)) for position, (index, group) in enumerate(cells)]


def linears_of(pair) -> str:
    """The kernels both models' linear layers take: "small-batch" (verispec.models.cpu_linear's path), else
    "torch"; "mixed" when the two models differ."""
    from verispec.models.cpu_linear import uses_small_batch_linears

    kinds = {"small-batch" if uses_small_batch_linears(model) else "torch" for model in (pair.target, pair.draft)}
    return kinds.pop() if len(kinds) == 1 else "mixed"


def load_run_pair(args):
    """The pair of a held-out run's options (``--target``/``--draft`` or ``--pair``, ``--device``, ``--dtype``) with
    ``--linears`` kernels for both models; VerispecError (one line) if they did not take them."""
    from verispec.models import load_pair

    small = args.linears == "small-batch"
    pair = (load_pair(args.target, args.draft, device=args.device, dtype=args.dtype, small_batch_linear=small)
            if args.target else
            load_pair(args.pair, device=args.device, dtype=args.dtype, small_batch_linear=small))
    if linears_of(pair) != args.linears:
        raise VerispecError(f"the pair loaded with {linears_of(pair)} linears, not {args.linears}")
    return pair


def prefill_seconds(pair, prompt: str, with_draft: bool) -> float:
    """Seconds of the forwards verispec's prefill runs for ``prompt`` (the target's, and the draft's when
    ``with_draft``, over the prompt but its last token, into fresh KV caches)."""
    from verispec.models.generation import synchronize
    from verispec.models.tree_forward import CachedModel

    tokens = pair.encode(prompt)
    models = [CachedModel(pair.target)] + ([CachedModel(pair.draft)] if with_draft else [])
    start = time.perf_counter()
    if len(tokens) > 1:
        for model in models:
            model.prefill(tokens[:-1])
    synchronize(pair.device)
    return time.perf_counter() - start


def run_method(pair, prompt: str, method: str, plan: dict | None, setting: int, sampling, max_new_tokens: int,
               seed: int, *, warmup: bool = False) -> dict:
    """One timed generation of ``method``: a row with ``new_tokens``, ``decode_s`` (the earlier cut: prefill excluded,
    transformers' estimated), ``prefill_s``, ``wall_s`` (both) and, but for a ``warmup``, its steady state
    (``ForwardClock.steady``: ``steady_tokens``, ``steady_s``, ...; after the first block, the cut every decoder
    shares), which every rate of this benchmark but the prefill-included one reads (``steady_rows``)."""
    from forward_clock import ForwardClock  # benchmarks/forward_clock.py

    length = len(pair.encode(prompt))
    hf = method in HF_METHODS or method == BEST or method.startswith("hf:")
    assisted = method != "hf-plain"
    prefill = prefill_seconds(pair, prompt, with_draft=assisted) if hf else None  # before the clock: not decoding's
    with ForwardClock(pair) as clock:
        begin = time.perf_counter()
        if hf:
            row = real_decoding.run_hf(pair, prompt, "hf-assisted" if assisted else method, sampling, max_new_tokens,
                                       seed, assistant=plan)
        else:
            row = selector_decoding.decode_cell(pair, prompt, method, plan, setting, sampling, max_new_tokens, seed)
        end = time.perf_counter()
    row["call_s"] = end - begin  # the whole call timed from outside: the steady state lies inside it
    if hf:
        row.pop("text", None)
        row.update(wall_s=row["decode_s"], prefill_s=prefill, decode_s=row["decode_s"] - prefill,
                   prefill_estimated=True)
    else:
        row.update(wall_s=row["decode_s"] + row["prefill_s"], prefill_estimated=False)
    if not warmup:
        row.update(clock.steady(length, row["new_tokens"], end))
    return row


def _rate(rows: dict, prompts: list[str], seconds: str = "decode_s") -> float:
    return sum(rows[p]["new_tokens"] for p in prompts) / sum(rows[p][seconds] for p in prompts)


def rate_interval(rows: dict, resamples: int = selector_decoding.BOOTSTRAP, seed: int = 0) -> list | None:
    """The 95% percentile-bootstrap interval over prompts of total tokens / total decode seconds; None below two."""
    prompts = sorted(rows)
    if len(prompts) < 2:
        return None
    rng = np.random.default_rng(seed)
    draws = [_rate(rows, [prompts[i] for i in rng.integers(0, len(prompts), len(prompts))])
             for _ in range(resamples)]
    return [float(np.quantile(draws, 0.025)), float(np.quantile(draws, 0.975))]


def _with_prefill(rows: dict) -> dict:
    return {p: {"new_tokens": row["new_tokens"], "decode_s": row["wall_s"]} for p, row in rows.items()}


def summarize(rows: dict, methods: list[str], settings: list[str]) -> list[dict]:
    """Per setting and method, over the prompts of that setting every method ran: prompts, tokens, tokens/s and its
    interval, tokens per target call (verispec's methods), the ratios to hf-assisted and hf-plain with their paired
    intervals, at the steady state and (``*_with_prefill``) over whole calls, prefill included, and the largest load
    average of its rows."""
    ratio, interval = selector_decoding.paired_rate_ratio, selector_decoding.paired_rate_interval
    table = []
    for setting in settings:
        cells = {method: {key.split("|")[1]: row for key, row in rows.items()
                          if key.split("|")[0] == method and key.split("|")[2] == setting} for method in methods}
        complete = sorted(set.intersection(*(set(cells[m]) for m in methods)))
        if not complete:
            continue
        cells = {method: {p: cells[method][p] for p in complete} for method in methods}
        for method in methods:
            done, steady = cells[method], steady_rows(cells[method])
            calls = [row["target_calls"] for row in done.values()]
            entry = {"setting": setting, "method": method, "prompts": len(done),
                     "tokens": sum(row["new_tokens"] for row in done.values()),
                     "tokens_per_s": _rate(steady, complete), "tokens_per_s_ci": rate_interval(steady),
                     "tokens_per_s_with_prefill": _rate(_with_prefill(done), complete),
                     "tokens_per_target_call": (None if None in calls else
                                                sum(row["new_tokens"] for row in done.values()) / sum(calls)),
                     "linears": sorted({row["linears"] for row in done.values()}),
                     "load_average_max": max(row["load_average"] for row in done.values())}
            for base in (BASELINE, "hf-plain", BEST):
                if base not in cells:
                    continue
                entry[f"vs_{base}"] = ratio(steady, steady_rows(cells[base]))
                entry[f"vs_{base}_ci"] = interval(steady, steady_rows(cells[base]))
                entry[f"vs_{base}_with_prefill"] = ratio(_with_prefill(done), _with_prefill(cells[base]))
                entry[f"vs_{base}_with_prefill_ci"] = interval(_with_prefill(done), _with_prefill(cells[base]))
            table.append(entry)
    return table


def markdown(table: list[dict], parameters: dict, tuning: list[dict] | None = None) -> str:
    def ratio(value, bounds) -> str:
        return "-" if value is None else f"{value:.3f}" + (f" [{bounds[0]:.3f}, {bounds[1]:.3f}]" if bounds else "")

    assistant = parameters["hf_assistant"]
    threshold = "adapted" if assistant["adaptive_threshold"] else "fixed"
    best = parameters.get("hf_best")
    lines = [f"# transformers' assisted generation against verispec: {parameters['pair']} on {parameters['device']} "
             f"({parameters['dtype']}, {parameters['linears']} linears for every method, {parameters['threads']} "
             f"threads), {parameters['max_new_tokens']} new tokens, held-out prompts", "",
             f"transformers {parameters['transformers']}, hf-assisted is its default: "
             f"{assistant['num_assistant_tokens']}"
             f" tokens, schedule {assistant['num_assistant_tokens_schedule']}, confidence threshold "
             f"{assistant['assistant_confidence_threshold']} ({threshold})"
             + (f"; hf-best is {best}, the fastest of {len(parameters['hf_grid'])} configurations on "
                f"{len(parameters['tune_groups'])} training prompts" if best else "") + ". "
             "tokens/s: total tokens over total seconds after each call's first block (prefill and first block "
             "excluded alike, see the script); 95% intervals: percentile bootstrap over prompts, paired for "
             "ratios.", "",
             "| setting | method | prompts | tokens/target call | tokens/s [95%] | vs hf-assisted [95%] | "
             "vs hf-assisted, prefill incl. [95%] | vs hf-plain [95%] | vs hf-best [95%] | max load |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for e in table:
        per_call = "-" if e["tokens_per_target_call"] is None else f"{e['tokens_per_target_call']:.2f}"
        lines.append(f"| {e['setting']} | {e['method']} | {e['prompts']} | {per_call} | "
                     f"{ratio(e['tokens_per_s'], e['tokens_per_s_ci'])} | "
                     f"{ratio(e['vs_hf-assisted'], e['vs_hf-assisted_ci'])} | "
                     f"{ratio(e['vs_hf-assisted_with_prefill'], e['vs_hf-assisted_with_prefill_ci'])} | "
                     f"{ratio(e['vs_hf-plain'], e['vs_hf-plain_ci'])} | "
                     f"{ratio(e.get('vs_hf-best'), e.get('vs_hf-best_ci'))} | {e['load_average_max']:.1f} |")
    if tuning:
        lines += ["", "Tuning on the training prompts (steady state, after the first block):", "",
                  "| setting | configuration | prompts | tokens/s [95%] | max load |", "|---|---|---|---|---|"]
        lines += [f"| {e['setting']} | {e['config']}{' (best)' if e['config'] == best else ''} | {e['prompts']} | "
                  f"{ratio(e['tokens_per_s'], e['tokens_per_s_ci'])} | {e['load_average_max']:.1f} |" for e in tuning]
    return "\n".join(lines) + "\n"


def assistant_schedule(pair) -> dict:
    """transformers' assisted-generation schedule for this draft: its generation config over transformers'
    defaults, as ``AssistedCandidateGenerator`` reads it, and whether the threshold adapts (scikit-learn)."""
    import copy
    import importlib.util

    config = copy.deepcopy(pair.draft.generation_config)
    config.update(**config._get_default_generation_params(), defaults_only=True)
    return {"num_assistant_tokens": config.num_assistant_tokens,
            "num_assistant_tokens_schedule": config.num_assistant_tokens_schedule,
            "assistant_confidence_threshold": config.assistant_confidence_threshold,
            "adaptive_threshold": importlib.util.find_spec("sklearn") is not None}


def main(argv=None) -> int:
    from measure import parse_decoding_run  # benchmarks/measure.py
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    selector_decoding.add_held_out_arguments(parser, max_new_tokens=64)
    parser.add_argument("--linears", default="torch",
                        help="the linear kernels of both models for EVERY method: torch (default) or small-batch "
                             "(verispec.models.cpu_linear's path, CPU only)")
    parser.add_argument("--warmup", type=int, default=2,
                        help="tokens of one untimed generation per method on a short prompt before the first cell")
    parser.add_argument("--tune-prompts", type=int, default=0,
                        help="tune transformers' assisted generation over --hf-grid on this many TRAINING prompts of "
                             "the dataset (the selectors' split; evenly spaced) and run the best as hf-best on the "
                             "held-out ones (default 0: no tuning)")
    parser.add_argument("--hf-grid", action="append", default=None, metavar="OPTION=VALUES",
                        help="a tuned option and its values, repeatable: num_assistant_tokens=1-8, "
                             "num_assistant_tokens_schedule=constant, assistant_confidence_threshold=0,default "
                             "(those are the defaults of the options left out)")
    parser.add_argument("--skip", action="append", default=[], metavar="METHOD",
                        help="leave out a method (plain, NAME static; repeatable); transformers' decoders and the "
                             "selectors always run")
    parser.add_argument("--budget", type=float, default=None,
                        help="seconds: start no prompt that would end past them (rerun to go on)")
    args, output = parse_decoding_run(parser, argv, __file__, "results/bench_assisted.json")
    try:
        if args.linears not in LINEARS:
            raise VerispecError(f"--linears {args.linears!r}: choose torch or small-batch")
        if args.linears == "small-batch" and args.device != "cpu":
            raise VerispecError(f"--linears small-batch is a CPU path; --device is {args.device!r}")
        if args.max_new_tokens < 1 or (args.threads is not None and args.threads < 1) or args.warmup < 0:
            raise VerispecError("--max-new-tokens and --threads must be positive, --warmup at least 0")
        if args.budget is not None and not args.budget > 0:
            raise VerispecError(f"--budget {args.budget:g}: give positive seconds")
        if args.tune_prompts < 0:
            raise VerispecError(f"--tune-prompts {args.tune_prompts}: give 0 (no tuning) or a positive count")
        if args.hf_grid and not args.tune_prompts:
            raise VerispecError("--hf-grid is tuned on training prompts; give --tune-prompts N as well")
        grid = hf_grid(args.hf_grid) if args.tune_prompts else []
        import torch
        import transformers

        from verispec.models.cpu_linear import store_key

        transformers.utils.logging.set_verbosity_error()
        transformers.utils.logging.disable_progress_bar()
        if args.threads:
            torch.set_num_threads(args.threads)
        started = (start_record("bench_assisted.py", argv, [args.dataset, *args.selector],
                                threads=torch.get_num_threads(), result=args.result) if args.result else None)
        setup = selector_decoding.held_out_plans(args.dataset, args.selector, args.prompts, args.max_prompts)
        pair = load_run_pair(args)
        selector_decoding.check_pair(setup, pair)
        skippable = [m for m, plan in setup["plans"].items() if plan["kind"] != "selector"]
        for method in args.skip:
            if method not in skippable:
                raise VerispecError(f"--skip {method!r}: choose among {', '.join(skippable)}")
        schedule_now = assistant_schedule(pair)
        configs = {config_name(config): resolved(config, schedule_now) for config in grid}
        tune_groups = training_groups(setup, args.tune_prompts) if grid else []
        parameters = {"pair": pair.name, "max_new_tokens": args.max_new_tokens, "seed": args.seed,
                      "device": str(pair.device), "dtype": str(pair.target.dtype).removeprefix("torch."),
                      "threads": torch.get_num_threads(), "linears": args.linears,
                      "transformers": transformers.__version__, "torch": torch.__version__,
                      "hf_assistant": schedule_now, "window": "steady (after the first block)",
                      **({"hf_grid": configs, "tune_groups": tune_groups} if grid else {}),
                      **({"skipped": sorted(args.skip)} if args.skip else {}),
                      **selector_decoding.plan_parameters(setup, args.dataset, args.selector)}
        parameters.update(store_key(pair))
        store = ResultStore(args.output, parameters=parameters, overwrite=args.overwrite)
    except VerispecError as error:
        print(f"bench_assisted: error: {error}", file=sys.stderr)
        return 2
    try:
        return _run(store, pair, setup, configs, tune_groups, args, parameters, output, started)
    except VerispecError as error:
        print(f"bench_assisted: error: {error}", file=sys.stderr)
        return 2


def _run(store, pair, setup, configs, tune_groups, args, parameters, output, started) -> int:
    """The tuning (``configs`` on ``tune_groups``), then every method on the held-out prompts, then the tables."""
    from verispec.selector.roots import sampling_text

    samplings, groups, texts, plans = setup["samplings"], setup["groups"], setup["texts"], dict(setup["plans"])
    settings = [sampling_text(sampling) for sampling in samplings]
    begin, warm = time.perf_counter(), not args.warmup
    if configs:  # the tuning: every configuration on every training prompt, interleaved as the held-out run is
        plans.update(configs)
        tuned = run_cells(store, pair, schedule(list(configs), tune_groups, len(samplings)), plans, texts, samplings,
                          settings, tune_groups, args, begin, warm, "training prompts")
        if not tuned:  # the budget ended the tuning: no best configuration yet (rerun to go on)
            return 0
        warm = True
        best = {setting: best_config(dict(store.rows), list(configs), tune_groups, setting) for setting in settings}
        if len(set(best.values())) > 1:  # one hf-best method across settings would mix configurations
            print("bench_assisted: the best configuration differs between settings; run one setting at a time",
                  file=sys.stderr)
            return 2
        plans[BEST] = configs[next(iter(best.values()))]
        parameters = {**parameters, "hf_best": next(iter(best.values()))}  # the store keeps its own
    methods = [*HF_METHODS, *([BEST] if configs else []), *(m for m in setup["plans"] if m not in args.skip)]
    cells = schedule(methods, groups, len(samplings))
    run_cells(store, pair, cells, plans, texts, samplings, settings, groups, args, begin, warm, "held-out prompts")
    table = summarize(dict(store.rows), methods, settings)
    tuning = tuning_table(dict(store.rows), list(configs), tune_groups, settings) if configs else []
    text = markdown(table, parameters, tuning)
    write_table(output.with_suffix(".md"), text)
    write_rows(output.with_suffix(".summary.json"), {"rows": table, "tuning": tuning,
                                                     "hf_best": parameters.get("hf_best")})
    print(text)
    if started:
        rows = [{"setting": e["setting"], "method": e["method"], "prompts": e["prompts"],
                 "now": 1 / e["tokens_per_s"],
                 "before": 1 / next(b["tokens_per_s"] for b in table
                                    if b["setting"] == e["setting"] and b["method"] == BASELINE),
                 "ratio": e[f"vs_{BASELINE}"], **{k: v for k, v in e.items() if k not in ("setting", "method")}}
                for e in table]
        write_result(args.result, started, {"benchmark": "bench_assisted",
                                            "unit": "s per token (steady state: after the first block)",
                                            "baseline": BASELINE, "parameters": parameters, "rows": rows,
                                            "tuning": tuning})
    return 0


def training_groups(setup: dict, count: int) -> list[str]:
    """``count`` training prompts of the selectors' split (every one with ``count`` at least their number), evenly
    spaced over the sorted groups as the held-out ones are; refused on one line where a group has no text."""
    from verispec.selector.split import held_out

    train, _ = held_out(setup["dataset"], next(iter(setup["selectors"].values())))
    groups = sorted(set(train.group.tolist()))
    if count < len(groups):
        groups = [groups[int(i)] for i in np.linspace(0, len(groups) - 1, count).round()]
    missing = [group for group in groups if group not in setup["texts"]]
    if missing:
        raise VerispecError(f"--prompts has no text for the training groups {', '.join(missing[:3])}")
    return groups


def tuning_table(rows: dict, names: list[str], groups: list[str], settings: list[str]) -> list[dict]:
    """Per setting and configuration: tokens/s over the training prompts (steady state) and its interval."""
    table = []
    for setting in settings:
        for name in names:
            done = {g: rows[f"{name}|{g}|{setting}"] for g in groups if f"{name}|{g}|{setting}" in rows}
            if len(done) == len(groups):
                table.append({"setting": setting, "config": name, "prompts": len(done),
                              "tokens_per_s": _rate(steady_rows(done), list(done)),
                              "tokens_per_s_ci": rate_interval(steady_rows(done)),
                              "load_average_max": max(row["load_average"] for row in done.values())})
    return table


def run_cells(store, pair, cells, plans, texts, samplings, settings, groups, args, begin, warm, what):
    """Run every (setting, prompt, methods in order) of ``cells`` not in ``store``: True, or False when ``--budget``
    stops the run first (rerun to go on)."""
    from verispec.models import Sampling

    spent = []
    for index, group, order in tqdm(cells, desc=what):
        keys = {method: f"{method}|{group}|{settings[index]}" for method in order}
        if all(store.done(key) for key in keys.values()):
            continue
        elapsed = time.perf_counter() - begin
        if args.budget is not None and spent and elapsed + float(np.mean(spent)) > args.budget:
            print(f"bench_assisted: the budget of {args.budget:g} s is spent ({elapsed:.0f} s); rerun to go on",
                  file=sys.stderr)
            return False
        sampling = Sampling(samplings[index]["temperature"], samplings[index]["top_k"], samplings[index]["top_p"])
        if not warm:  # first calls are not decoding: one untimed short generation per method
            for method in order:
                run_method(pair, WARMUP_PROMPT, method, plans.get(method), index, sampling, args.warmup, args.seed,
                           warmup=True)
            warm = True
        seed = args.seed + 1000 * index + groups.index(group)  # every method of a prompt draws from this seed
        for position, method in enumerate(order):
            if store.done(keys[method]):
                continue
            try:
                row = run_method(pair, texts[group], method, plans.get(method), index, sampling,
                                 args.max_new_tokens, seed)
            except VerispecError as error:  # no steady state: too few new tokens for a second block
                raise VerispecError(f"{group}, {method}: {error}") from None
            row.update(load_average=os.getloadavg()[0], linears=linears_of(pair), position=position, seed=seed)
            store.add(keys[method], row)
        spent.append(time.perf_counter() - begin - elapsed)
    return True


if __name__ == "__main__":
    raise SystemExit(main())
