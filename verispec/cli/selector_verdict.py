"""``verispec selector verdict``: which verifier, with its own selector, is best on a pair's stored datasets, by how
much, with intervals that cover the prompts and the training (``verispec.selector.verdict``); no model loaded.

    verispec selector verdict --dataset data/selector/qwen-t07-m64.npz \\
        --dataset data/selector/qwen-t07-m64-psbv.npz --dataset data/selector/qwen-t1-r2.npz \\
        --latency data/latency/latency-cpu-small-batch-t07-t1.json --replicates 9 --folds 5 --out docs/results/verdict

writes ``verdict.json`` (every number, and under ``record`` the command line, commit, date, machine and inputs'
SHA-256) and ``verdict.md`` into DIR. ``--verification-cost FILE`` (``experiments/verification_cost.py``) prices the
regime it was measured for with each rule's own verification per block: every table gains ``priced``, its rules'
selectors and best static actions refitted under the priced times, beside the forwards-only figures; a regime
without a file says "verification unpriced" and names no winner by price. The replicates wait in
``DIR/verdict.rows.json`` (resumable: a run stopped by --time-budget exits 3, and the same command continues).

The writers' rule (issue 64): a file in DIR of one of these names that verispec cannot show it wrote (the
``written_by`` marker in the JSON files, the marker line of the Markdown) is refused before any work unless
--overwrite, and one verdict writes DIR at a time (``verispec.files.store_lock`` on the row store: a second is refused
naming the first, instead of both exiting 0 with one run's fits lost).
"""

from __future__ import annotations

import time
from pathlib import Path

from verispec.cli.options import add_threads_option, add_time_budget_option, integer_option
from verispec.guard.limits import STUDY_THREADS

JSON_NAME, MARKDOWN_NAME, STORE_NAME = "verdict.json", "verdict.md", "verdict.rows.json"


def add_verdict_parser(steps) -> None:
    verdict = steps.add_parser("verdict", help="the best verifier with its own selector on a pair's stored datasets, "
                                               "over several training seeds and splits (JSON and tables; no model "
                                               "loaded)")
    verdict.add_argument("--dataset", action="append", required=True, metavar="FILE",
                         help="a dataset of the pair, repeatable; files of one setting with other rules at the same "
                              "roots are joined ('selector dataset --traces-of')")
    verdict.add_argument("--latency", default=None, metavar="FILE",
                         help="the pair's latency model on this CPU: the cpu regime (left out without it)")
    verdict.add_argument("--verification-cost", action="append", default=[], metavar="FILE",
                         help="each rule's verification ms per block on a regime's device "
                              "(experiments/verification_cost.py), repeatable, one file a regime: that regime is "
                              "priced beside its forwards-only figures; the others say 'verification unpriced'")
    verdict.add_argument("--pair", default=None, metavar="NAME", help="refuse datasets of any other pair")
    verdict.add_argument("--out", required=True, metavar="DIR", help="the folder of verdict.json and verdict.md")
    verdict.add_argument("--overwrite", action="store_true",
                         help="replace files in DIR of the verdict's names that verispec cannot show it wrote, and "
                              "start its fits over (by default such files are refused)")
    verdict.add_argument("--replicates", type=integer_option(minimum=2, maximum=1000, what="an integer in [2, 1000]"),
                         default=9, help="cross-fits with seeds SEED, SEED+1, ..: their own folds and training seeds "
                                         "(default 9)")
    verdict.add_argument("--folds", type=integer_option(minimum=2, maximum=100, what="an integer in [2, 100]"),
                         default=5, help="folds of prompts a replicate cross-fits over (default 5)")
    verdict.add_argument("--seed", type=integer_option(minimum=0, what="a non-negative integer"), default=0,
                         help="the first replicate's seed, and the bootstrap's (default 0)")
    verdict.add_argument("--epochs", type=integer_option(minimum=1, maximum=100_000, what="an integer in [1, 100000]"),
                         default=300, help="training epochs of the selectors (default 300)")
    verdict.add_argument("--bootstrap", type=integer_option(minimum=100, maximum=100_000,
                                                            what="an integer in [100, 1e5]"),
                         default=2000, help="crossed bootstrap resamples of the 95%% intervals (default 2000)")
    verdict.add_argument("--jobs", type=integer_option(minimum=1, maximum=64, what="an integer in [1, 64]"),
                         default=1, help="replicates fitted at once in their own processes (default 1)")
    verdict.add_argument("--progress", action="store_true", help="a progress bar on stderr even when it is not a "
                                                                 "terminal")
    add_threads_option(verdict, f"CPU threads for torch's training in each process (default {STUDY_THREADS})",
                       default=STUDY_THREADS)
    add_time_budget_option(verdict, "the replicates")


def _outputs(out: Path, overwrite: bool) -> None:
    """Refuse on one line, before any work, a folder that cannot take the verdict's files, a link at one of their
    names, and, unless ``overwrite``, a file there that verispec cannot show it wrote (its marker): the verdict
    would replace a file of the user's (issue 64)."""
    from verispec.files.io import (
        MARKDOWN_OUTPUT,
        ROW_STORE_OUTPUT,
        OutputKind,
        check_inside,
        check_output,
        check_output_dir,
        json_format,
        marked_json,
    )
    from verispec.files.store_lock import lock_path
    from verispec.selector.verdict import VERDICT_FORMAT, VERDICT_KIND

    check_output_dir(out, "--out")
    check_inside(out, lock_path(out / STORE_NAME), "--out")
    kinds = {JSON_NAME: OutputKind("verispec selector verdict (JSON)", marked_json(VERDICT_KIND),
                                   json_format(VERDICT_FORMAT), JSON_NAME),
             MARKDOWN_NAME: MARKDOWN_OUTPUT, STORE_NAME: ROW_STORE_OUTPUT}
    for name, kind in kinds.items():
        check_inside(out, out / name, "--out")
        check_output(out / name, kind, what="--out", overwrite=overwrite)


def _fit(task, regimes, folds: int, epochs: int, groups, threads: int, costs=None) -> tuple[str, dict]:
    """One rule's fit in one replicate (a worker process's task), torch pinned to ``threads``; a priced regime's
    (``verispec.selector.verdict.priced_regime``) with its verification ms from ``costs``."""
    from verispec.selector.study import study_threads
    from verispec.selector.verdict import fit_rule, regime_prices

    key, setting, regime, verifier, seed = task
    base, verification = regime_prices(setting, regime, costs or {})
    with study_threads(threads):
        return key, fit_rule(setting, base, regimes[base], verifier, seed=seed, folds=folds, epochs=epochs,
                             groups=groups, verification=verification)


def run_verdict_command(args) -> int:
    import shlex

    from verispec.errors import VerispecError
    from verispec.files.provenance import run_record
    from verispec.files.store_lock import store_lock
    from verispec.selector.study import load_inputs, pair_settings
    from verispec.selector.verdict import check_verdict_numbers

    out = Path(args.out)
    check_verdict_numbers(args.replicates, args.folds)
    _outputs(out, args.overwrite)  # before any file is read or selector trained
    datasets, regimes = load_inputs(args.dataset, args.latency, args.pair)
    settings = pair_settings(datasets, args.pair)
    from verispec.selector.verification_cost import regime_costs

    costs = regime_costs(args.verification_cost, settings, regimes)  # a file missing an action: one line, exit 2
    try:
        import torch  # noqa: F401
    except ImportError:
        raise VerispecError("the selector is a torch network: pip install 'torch==2.13.0' -e '.[torch]'") from None
    inputs = list(args.dataset) + ([args.latency] if args.latency else []) + list(args.verification_cost)
    record = run_record(shlex.join(args.command_line), inputs, threads=args.threads)
    # one verdict into DIR at a time, from here (the inputs were refused first, leaving no folder behind): a second
    # is refused at once, naming the first (verispec.files.store_lock); two at once each rewrote the row store from
    # their own fits, and one run's fits were lost
    with store_lock(out / STORE_NAME):
        _outputs(out, args.overwrite)  # as the holder of the lock finds it
        return _fit_and_write(args, out, settings, regimes, record, costs)


def _fit_and_write(args, out: Path, settings, regimes, record: dict, costs: dict) -> int:
    """The verdict's fits (those its row store lacks) and its files, with DIR's row store locked."""
    from verispec.cli.options import command_budget
    from verispec.errors import AnalysisTimeoutError, ResultStoreError, VerispecError
    from verispec.files.io import ResultStore, atomic_write_json, atomic_write_text
    from verispec.files.provenance import MARKER_KEY, markdown_marker, sha256_bytes, written_by
    from verispec.selector.verdict import KIND as SELECTOR_KIND
    from verispec.selector.verdict import (
        VERDICT_FORMAT,
        VERDICT_KIND,
        priced_entry,
        priced_sentence,
        verdict_sentence,
        verdict_table,
        verdict_tasks,
    )

    out.mkdir(parents=True, exist_ok=True)
    import numpy as np

    groups = np.concatenate([setting.data.group for setting in settings])  # the split's prompts, every setting's
    parameters = {"folds": args.folds, "epochs": args.epochs, "kind": SELECTOR_KIND,
                  "regimes": {name: model.as_dict() for name, model in regimes.items()},
                  "prompts_sha256": sha256_bytes("\n".join(sorted(set(groups.tolist()))).encode())}
    try:
        store = ResultStore(out / STORE_NAME, parameters=parameters, overwrite=args.overwrite, within=out)
    except ResultStoreError as error:  # a store of other regimes, folds or prompts
        raise VerispecError(f"{' '.join(str(error).split())} (the fits in {out / STORE_NAME} were made with other "
                            "folds, epochs, latency or prompts; give another --out or remove that store)") from None
    seeds = [args.seed + index for index in range(args.replicates)]
    tasks = verdict_tasks(settings, regimes, seeds, costs)
    start = time.perf_counter()
    try:
        with command_budget(args, "the verdict"):
            _fit_missing(store, tasks, regimes, groups, args, costs)
    except AnalysisTimeoutError:
        done = sum(store.done(task[0]) for task in tasks)
        raise AnalysisTimeoutError(f"the verdict ran past its time budget with {done} of {len(tasks)} fits (a rule "
                                   "in a replicate) saved; run the same command again to continue") from None
    fits = {task[0]: store.rows[task[0]]["choices"] for task in tasks}
    tables = []
    for setting in settings:
        for name, latency in regimes.items():
            table = verdict_table(setting, name, latency, fits, seeds, resamples=args.bootstrap, seed=args.seed)
            table["priced"] = priced_entry(setting, name, latency, fits, seeds, table, costs.get(name),
                                           resamples=args.bootstrap, seed=args.seed)
            tables.append(table)
    result = {"format": VERDICT_FORMAT, "pair": settings[0].data.metadata.get("pair"), "replicates": len(seeds),
              "seeds": seeds, "folds": args.folds, "epochs": args.epochs,
              "bootstrap": {"resamples": args.bootstrap, "seed": args.seed, "level": 0.95,
                            "over": "prompts and replicates (crossed)"},
              "regimes": {name: model.as_dict() for name, model in regimes.items()},
              "settings": {setting.name: {"dataset": setting.source, "rules": list(setting.data.grid.verifiers),
                                          "prompts": int(len(set(setting.data.group.tolist()))),
                                          "roots": len(setting.data)} for setting in settings},
              "tables": tables, "sentence": verdict_sentence(tables),
              "verification_cost": {name: cost.describe() for name, cost in costs.items()},
              "priced_sentence": priced_sentence(tables),
              "record": {**record, "seconds": round(time.perf_counter() - start, 1)},
              MARKER_KEY: written_by(VERDICT_KIND, "selector verdict")}
    atomic_write_json(out / JSON_NAME, result, within=out)
    atomic_write_text(out / MARKDOWN_NAME, f"{markdown_marker('selector verdict')}\n{verdict_markdown(result)}",
                      within=out)
    print(f"wrote the verdict of {result['pair'] or 'the datasets'} into {out} ({len(seeds)} replicates x "
          f"{args.folds} folds; {time.perf_counter() - start:.1f} s)")
    return 0


def _fit_missing(store, tasks, regimes, groups, args, costs) -> None:
    """Fit the tasks (a rule in a replicate) the store lacks, ``args.jobs`` at a time, each saved as it ends."""
    import sys

    from tqdm import tqdm

    missing = [task for task in tasks if not store.done(task[0])]
    show = args.progress or sys.stderr.isatty()
    with tqdm(total=len(tasks), initial=len(tasks) - len(missing), desc="verdict fits", unit="fit",
              disable=not show) as bar:
        if args.jobs == 1 or len(missing) < 2:
            for task in missing:
                key, choices = _fit(task, regimes, args.folds, args.epochs, groups, args.threads, costs)
                store.add(key, {"choices": choices})
                bar.update()
            return
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor, as_completed

        with ProcessPoolExecutor(max_workers=min(args.jobs, len(missing)),
                                 mp_context=multiprocessing.get_context("spawn")) as pool:
            futures = [pool.submit(_fit, task, regimes, args.folds, args.epochs, groups, args.threads, costs)
                       for task in missing]
            for future in as_completed(futures):
                key, choices = future.result()
                store.add(key, {"choices": choices})
                bar.update()


def _cell(entry) -> str:
    from verispec.report.common import with_interval

    text = f"x{with_interval(entry['ratio'], entry['ratio_ci'])}"
    low, high = entry["replicate_range"]
    return text + f" (seeds {low:.3f}-{high:.3f})"


def verdict_markdown(result: dict) -> str:
    """The verdict's tables: the best rule and its ratios, DDTE's comparisons restated, every rule's throughput."""
    from verispec.selector.verdict import REFERENCES, TARGET_HALF_WIDTH

    lines = [f"# Which verifier, with its own selector, on {result['pair']}", "",
             f"{result['replicates']} replicates (seeds {result['seeds'][0]}-{result['seeds'][-1]}), each a "
             f"{result['folds']}-fold cross-fit by prompt with its own training seeds; estimates are means over "
             "replicates, 95% intervals a crossed bootstrap over prompts and replicates "
             f"({result['bootstrap']['resamples']} resamples), with the range of the one-replicate values. Throughput "
             "ratios, sum E[tau+1] / sum T over the roots (DDTE Sec. 5).", "", result["sentence"], "",
             "## The best verifier against the references", "",
             "| Setting | Regime | Best (own selector) | " + " | ".join(f"vs {name}" for name in REFERENCES) + " |",
             "|---|---|---|" + "---|" * len(REFERENCES)]
    for table in result["tables"]:
        cells = [_cell(table["versus"][name]) if name in table["versus"] else
                 ("(is it)" if name == table["best"] else "(not labelled)") for name in REFERENCES]
        lines.append(f"| {table['setting']} | {table['regime']} | {table['best']} | " + " | ".join(cells) + " |")
    lines += ["", "## DDTE's comparisons: SpecInfer with a selector against the rivals", "",
              "| Setting | Regime | Rival | Rival's policy | Ratio | Half-width | Prompts for "
              f"{TARGET_HALF_WIDTH:.1%} |", "|---|---|---|---|---|---|---|"]
    for table in result["tables"]:
        for row in table["ddte"]:
            need = row["prompts_for_target"]
            lines.append(f"| {table['setting']} | {table['regime']} | {row['rival']} | {row['rival_policy']} | "
                         f"{_cell(row)} | {row['half_width']:.2%} | {'met' if need is None else need} |")
    lines += ["", "## Every rule", "", "| Setting | Regime | Rule | Selector throughput | Best static | Selector / "
              "static | Oracle (labels) | Oracle (cross-fitted) |", "|---|---|---|---|---|---|---|---|"]
    for table in result["tables"]:
        for name, rule in table["rules"].items():
            crossfit = rule["oracle_crossfit"]
            lines.append(
                f"| {table['setting']} | {table['regime']} | {name} | "
                f"{rule['selector']['throughput']:.4g} [{rule['selector']['throughput_ci'][0]:.4g}, "
                f"{rule['selector']['throughput_ci'][1]:.4g}] | {rule['static']['throughput']:.4g} | "
                f"{_cell(rule['selector_over_static'])} | {rule['oracle']['throughput']:.4g} | "
                f"{'-' if crossfit is None else format(crossfit['throughput'], '.4g')} |")
    lines += _priced_markdown(result)
    record = result["record"]
    lines += ["", f"Made by `{record['command']}` at {record['commit']} on {record['date']} "
              f"({record['machine']['cores']} cores, {record['machine']['threads']} torch thread(s), load "
              f"{record['machine']['load']}; {record['seconds']} s).", ""]
    return "\n".join(lines)


def _priced_markdown(result: dict) -> list[str]:
    """The priced verdict's section: per (setting, regime) the best rule once each rule's own verification is added
    to its block time, beside the forwards-only best, or "verification unpriced"; per rule of a priced regime its
    forwards-only selector's throughput, the same choices priced, the refitted selector priced and its verification
    per block. Files of verdicts made before pricing (no ``priced`` key) get no section."""
    from verispec.selector.verdict import REFERENCES, UNPRICED

    tables = [table for table in result["tables"] if "priced" in table]
    if not tables:
        return []
    costs = result.get("verification_cost", {})
    runs = {table["regime"]: table["priced"]["run"]["words"] for table in tables if "run" in table["priced"]}
    measured = "; ".join(f"{regime}: {cost['device']} ({cost['file']}" +
                         (f"; {runs[regime]})" if regime in runs else ")")
                         for regime, cost in costs.items()) or "none"
    lines = ["", "## The verifier's own work priced", "",
             "Each rule's verification per block (its law over the drawn tree and the draws, as real decoding runs "
             "them; median ms) measured on the regime's device, added to every action's block time; each rule's "
             "selector and best static action refitted under those times. Measured: " + measured + ". A regime "
             f"whose device was not measured: {UNPRICED}, no winner named by it.", "", result["priced_sentence"], "",
             "| Setting | Regime | Best, forwards only | Best, priced | " +
             " | ".join(f"vs {name} (priced)" for name in REFERENCES) + " |",
             "|---|---|---|---|" + "---|" * len(REFERENCES)]
    for table in tables:
        priced = table["priced"]
        if priced["best"] is None:
            cells = [UNPRICED] + ["-"] * len(REFERENCES)
        else:
            cells = [priced["best"]] + [_cell(priced["versus"][name]) if name in priced["versus"] else
                                        ("(is it)" if name == priced["best"] else "(not labelled)")
                                        for name in REFERENCES]
        lines.append(f"| {table['setting']} | {table['regime']} | {table['best']} | " + " | ".join(cells) + " |")
    lines += ["", "| Setting | Regime | Rule | Forwards-only selector | Its choices, priced | Selector refitted, "
              "priced | Best static, priced | Verification ms / block |", "|---|---|---|---|---|---|---|---|"]
    for table in tables:
        priced = table["priced"]
        if priced["best"] is None:
            continue
        for name, rule in priced["rules"].items():
            lines.append(f"| {table['setting']} | {table['regime']} | {name} | "
                         f"{rule['forwards_only']['selector']:.4g} | {rule['forwards_only']['selector_priced']:.4g} | "
                         f"{rule['selector']['throughput']:.4g} [{rule['selector']['throughput_ci'][0]:.4g}, "
                         f"{rule['selector']['throughput_ci'][1]:.4g}] | {rule['static']['throughput']:.4g} | "
                         f"{rule['verification_ms_per_block']:.3g} |")
        for name in priced["unpriceable"]:
            lines.append(f"| {table['setting']} | {table['regime']} | {name} | "
                         f"{table['rules'][name]['selector']['throughput']:.4g} | unpriceable (a cell stopped by its "
                         "budget) | - | - | - |")
    return lines
