"""``verispec selector dataset | train | evaluate | study | verdict``: one command per step of the delay selector
(``verispec.selector``), each reproducible from its seed.

    verispec selector dataset --family context-free --vocab 3 --seeds 0-59 --out data.npz          synthetic roots
    verispec selector dataset --pair qwen-coder --prompts humaneval:8 --prompts prose-small \\
                              --sampling temperature=1 --sampling temperature=0.7,top_k=20,top_p=0.8 --out d.npz
    verispec selector train --dataset d.npz --verifiers specinfer --out specinfer.pt [--kind mlp|linear|lookup]
    verispec selector evaluate --dataset d.npz --selector specinfer.pt --selector traversal.pt [--json]
    verispec selector study --dataset d.npz [--dataset d2.npz] [--latency cpu.json] --out DIR   (no model loaded;
                            verispec.cli.selector_study)
    verispec selector verdict --dataset d.npz [--dataset d2.npz] --replicates 9 --folds 5 --out DIR   (no model;
                              verispec.cli.selector_verdict)

Each step parses its options and calls the library (``verispec.selector``: the prompt sets in ``prompt_sets``,
sampling settings in ``roots.parse_setting``, training on a dataset in ``train.train_on_dataset``, the held-out
evaluation of one split's selectors in ``evaluate.evaluate_held_out``), importing torch and the models only when
it runs.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from verispec.cli.common import print_json
from verispec.cli.options import (
    Parser,
    add_backend_options,
    add_device_options,
    add_latency_options,
    add_projection_option,
    add_time_budget_option,
    command_budget,
    integer_option,
    latency_model,
    number_option,
)
from verispec.cli.pair import load_pair
from verispec.cli.selector_study import add_study_parser, run_study_command
from verispec.cli.selector_verdict import add_verdict_parser, run_verdict_command
from verispec.errors import ResultStoreError, VerispecError
from verispec.guard.memory import peak_rss_bytes

#: Qwen2.5's recommended sampling (its generation_config: temperature 0.7, top-k 20, top-p 0.8) and plain
#: sampling at temperature 1: the default settings of a dataset built on a pair.
DEFAULT_SAMPLINGS = ("temperature=1", "temperature=0.7,top_k=20,top_p=0.8")

#: t_p / t_q of a dataset's labels when no latency model is given: the DDTE paper's large-model regime.
DATASET_COST_RATIO = 20.0


def add_parser(subparsers) -> None:
    selector = subparsers.add_parser("selector", help="the delay selector: dataset, train, evaluate, study")
    steps = selector.add_subparsers(dest="step", required=True, parser_class=Parser)
    _add_dataset_parser(steps)
    _add_train_parser(steps)
    _add_evaluate_parser(steps)
    add_study_parser(steps)
    add_verdict_parser(steps)


def _add_dataset_parser(steps) -> None:
    dataset = steps.add_parser("dataset", help="label roots with E[tau+1] of every action (exact where possible)")
    source = dataset.add_argument_group("roots: a synthetic family, or traces of a model pair")
    source.add_argument("--family", choices=("context-free", "markov", "random"), default=None,
                        help="synthetic problem family (one root per seed)")
    source.add_argument("--vocab", type=integer_option(minimum=2, maximum=64, what="an integer in [2, 64]"), default=3,
                        help="vocabulary size of the synthetic family (default 3)")
    source.add_argument("--seeds", default="0-39", help="seeds of the synthetic roots, e.g. 0-39 or 1,5,9")
    source.add_argument("--divergences", default="0.1,0.3,1.0",
                        help="draft divergences of the synthetic family, cycled over the seeds (default 0.1,0.3,1.0)")
    source.add_argument("--temperatures", default="1",
                        help="temperatures of the synthetic family, one sampling setting each (default 1)")
    source.add_argument("--pair", default=None, help="an installed pair (e.g. qwen-coder): roots from its traces")
    source.add_argument("--target", default=None, help="target model directory (with --draft)")
    source.add_argument("--draft", default=None, help="draft model directory (with --target)")
    source.add_argument("--prompts", action="append", default=None, metavar="SPEC",
                        help="humaneval (all 164 HumanEval prompts) or humaneval:N (the first N); prose (about "
                             "150 English prose prompts from Python's own documentation; the set depends on the "
                             "Python version) or prose:N; prose-small or prose-small:N (verispec's 12 hand-written "
                             "prose prompts); or FILE (one prompt per line); repeatable")
    source.add_argument("--sampling", action="append", default=None, metavar="SETTING",
                        help="a sampling setting, e.g. temperature=0.7,top_k=20,top_p=0.8; repeatable (default: "
                             + " and ".join(DEFAULT_SAMPLINGS) + ")")
    source.add_argument("--every", type=integer_option(minimum=1, what="a positive integer"), default=16,
                        help="a root every N tokens of a trace (default 16, the paper's)")
    source.add_argument("--first-root", type=integer_option(minimum=0, maximum=4096, what="an integer in [0, 4096]"),
                        default=0, metavar="N", help="the first root after N sampled tokens, then every --every "
                                                     "(default 0: at the prompt's end; at most --trace-tokens)")
    source.add_argument("--trace-tokens", type=integer_option(minimum=1, maximum=4096, what="an integer in [1, 4096]"),
                        default=64, help="tokens sampled from the target per prompt and setting (default 64)")
    source.add_argument("--trace-batch", type=integer_option(minimum=1, maximum=256, what="an integer in [1, 256]"),
                        default=8, metavar="N", help="traces decoded together, one target forward per token for "
                                                     "all N, each from its own seed (default 8)")
    _add_grid_options(dataset)
    add_time_budget_option(dataset, "the build (traces and labels)")
    dataset.add_argument("--progress", action="store_true",
                         help="progress bars on stderr even when it is not a terminal (a build run in the background)")
    labels = dataset.add_argument_group("labels")
    labels.add_argument("--method", choices=("auto", "exact", "certified", "conditional"), default="auto",
                        help="exact (small problems), certified (verispec.certify) or conditional-exact (sampled "
                             "trees, exact given each); auto: exact for synthetic roots, conditional for a pair")
    labels.add_argument("--samples", type=integer_option(minimum=1, maximum=4096, what="an integer in [1, 4096]"),
                        default=4, help="sampled draft trees per root for conditional-exact labels (default 4, the "
                                        "paper's)")
    labels.add_argument("--epsilon", type=number_option(minimum=0, strict=True, what="a positive number"), default=0.01,
                        help="largest width of a certified label's interval (default 0.01)")
    labels.add_argument("--root-batch", type=integer_option(minimum=1, maximum=64, what="an integer in [1, 64]"),
                        default=8, metavar="N",
                        help="a pair's roots labelled together (default 8): each draft level of their combs is one "
                             "draft pass and the target runs once over all their combs; 1 labels them one by one. "
                             "Roots of a setting without top-k or top-p (dense laws) go one at a time")
    add_latency_options(dataset, "T(a)", f"--cost-ratio {DATASET_COST_RATIO:g}")
    dataset.add_argument("--seed", type=integer_option(minimum=0, what="a non-negative integer"), default=0)
    dataset.add_argument("--out", required=True, metavar="FILE", help="the dataset to write (resumable)")
    dataset.add_argument("--overwrite", action="store_true", help="start over, replacing FILE and its row store")
    dataset.add_argument("--hidden", action="store_true",
                         help="also keep each root's last-layer hidden states (target_prev, draft_prev, draft_root; "
                              "a pair's roots only), for 'selector train --hidden'")
    dataset.add_argument("--relabel", default=None, metavar="VERIFIERS",
                         help="label only these verifiers' actions again (comma-separated) at every root of the "
                              "finished dataset FILE and replace them in FILE and its row store, every other label "
                              "kept: give the command that built FILE plus this option (resumable: its rows wait in "
                              "FILE.relabel.npz.roots.json; --overwrite restarts the relabel, never FILE's build)")
    dataset.add_argument("--traces-of", default=None, metavar="DATASET",
                         help="with --pair: the roots of another build of the pair, its traces read from "
                              "DATASET.traces.json (never sampled or written; every trace this command names must "
                              "be there): new rules labelled at the same roots, with the same combs, into a new FILE "
                              "beside DATASET (join them with 'selector study --dataset DATASET --dataset FILE')")
    # a pair's roots label in this process by default (the pair loaded once); on workers, each loads its own copy
    add_backend_options(dataset, default=None, default_help="local for synthetic roots; for a pair's roots serial "
                        "(the pair loaded once, here), or local with --jobs (each worker loads its own copy)")
    add_device_options(dataset)


def _add_grid_options(parser) -> None:
    grid = parser.add_argument_group("actions: delayed trees (K, L1, L2), the paper's grid by default")
    grid.add_argument("--ks", default="1-4", help="K values (default 1-4)")
    grid.add_argument("--l1s", default="0-8", help="L1 values (default 0-8)")
    grid.add_argument("--l2s", default="0-8", help="L2 values (default 0-8)")
    grid.add_argument("--verifiers", default="specinfer",
                      help="verifiers, each paired with the trees it is valid for (default specinfer)")


def _add_train_parser(steps) -> None:
    train = steps.add_parser("train", help="train a selector on a dataset's training roots")
    train.add_argument("--dataset", required=True, metavar="FILE")
    train.add_argument("--out", required=True, metavar="FILE", help="the selector file to write")
    train.add_argument("--overwrite", action="store_true",
                       help="replace an existing FILE that is not a selector (by default it is refused, untouched)")
    train.add_argument("--kind", choices=("mlp", "linear", "lookup"), default="mlp",
                       help="the paper's network (mlp), or a baseline: linear model, lookup on one feature")
    train.add_argument("--verifiers", default=None,
                       help="the verifiers whose actions it chooses among (default: all of the dataset's)")
    train.add_argument("--test-fraction", type=number_option(minimum=0, strict=True, what="a number in (0, 1)"),
                       default=0.25, help="groups (prompts, seeds) held out for evaluation (default 0.25)")
    train.add_argument("--split-seed", type=integer_option(minimum=0, what="a non-negative integer"), default=0)
    train.add_argument("--epochs", type=integer_option(minimum=1, maximum=100_000, what="an integer in [1, 100000]"),
                       default=300)
    train.add_argument("--penalty", type=number_option(minimum=0, strict=False, what="a number >= 0"), default=1.0,
                       help="lambda of the regression penalty (the paper's Eq. 12)")
    train.add_argument("--alpha", type=number_option(minimum=0, strict=True, what="a number in (0, 1]"), default=0.1,
                       help="the worst fraction of roots the penalty averages over (default 0.1)")
    train.add_argument("--seed", type=integer_option(minimum=0, what="a non-negative integer"), default=0)
    train.add_argument("--device", default="cpu", help="torch device for training (cpu, cuda)")
    train.add_argument("--hidden", default=None, metavar="NAMES",
                       help="the network also reads these hidden states of the dataset (comma-separated, e.g. "
                            "target_prev,draft_root; 'all' for every one it holds), each projected to --projection "
                            "dimensions and layer-normed (mlp only)")
    add_projection_option(train, "width of each hidden-state projection (default 128, the paper's; with --hidden "
                                 "only): a narrower one reads fewer weights a block in decoding "
                                 "(docs/guides/selector.md)")
    add_latency_options(train, "T(a)", "the dataset's")
    train.add_argument("--json", action="store_true")


def _add_evaluate_parser(steps) -> None:
    evaluate = steps.add_parser("evaluate", help="static, selector and oracle on the held-out roots")
    evaluate.add_argument("--dataset", required=True, metavar="FILE")
    evaluate.add_argument("--selector", action="append", required=True, metavar="FILE",
                          help="a selector file (repeatable; named by its file name)")
    evaluate.add_argument("--compare", default=None, metavar="A,B",
                          help="selector A against B's verifier at its best static action and with selector B")
    evaluate.add_argument("--bootstrap", type=integer_option(minimum=100, maximum=100_000,
                                                             what="an integer in [100, 1e5]"),
                          default=2000, help="group-bootstrap resamples of the 95%% intervals (default 2000)")
    evaluate.add_argument("--seed", type=integer_option(minimum=0, what="a non-negative integer"), default=0)
    evaluate.add_argument("--json", action="store_true")


def run(args) -> int:
    step = {"dataset": _run_dataset, "train": _run_train, "evaluate": _run_evaluate,
            "study": run_study_command, "verdict": run_verdict_command}[args.step]
    if args.step != "dataset":
        return step(args)
    from verispec.study.workers import interrupt_on_signals

    with interrupt_on_signals():  # SIGTERM and Ctrl-C end the build and its workers, its row stores saved
        return step(args)


def _run_dataset(args) -> int:
    """The build within its --time-budget: past it, the finished traces and roots are saved and the command exits 3
    (the same command resumes)."""
    from verispec.errors import AnalysisTimeoutError
    from verispec.guard import budget

    try:
        with command_budget(args, "the dataset build"):
            return _build(args)
    except (AnalysisTimeoutError, budget.HardTimeout) as error:  # the hard timer fires inside a forward
        stage, _, limit = " ".join(str(error).split()).partition(" ran past its time budget")
        where = "" if stage == "the dataset build" else f", in {stage}"
        raise AnalysisTimeoutError(f"the dataset build ran past its time budget{limit}{where}; every finished trace "
                                   "and root is saved: run the same command again to continue") from None


def _build(args) -> int:
    from verispec.selector.dataset import check_dataset_output

    progress = sys.stderr.isatty() or args.progress
    relabel = args.relabel is not None
    if getattr(args, "traces_of", None) is not None and (relabel or args.family is not None):
        raise VerispecError("--traces-of reads the roots of another build of a pair: give it with --pair (or "
                            "--target and --draft), not --family, and without --relabel (a relabel reads FILE's own "
                            "traces)")
    # before a pair is loaded or a root; a relabel changes the FILE it names in place (one without the marker too)
    check_dataset_output(args.out, overwrite=args.overwrite and not relabel, in_place=relabel)
    from verispec.files.store_lock import store_lock
    from verispec.selector.dataset import store_path

    # one writer of OUT's row store (and its traces) for the whole command: a second build of OUT is refused here
    with store_lock(store_path(args.out)):
        return _build_locked(args, relabel, progress)


def _build_locked(args, relabel: bool, progress: bool) -> int:
    """``_build`` once OUT's row store is locked (``verispec.files.store_lock``)."""
    from verispec.selector.actions import ActionGrid
    from verispec.selector.dataset import build_dataset
    from verispec.selector.roots import synthetic_roots
    from verispec.study.grid import parse_seeds

    grid = ActionGrid.parse(ks=args.ks, l1s=args.l1s, l2s=args.l2s, verifiers=args.verifiers)
    if relabel:  # before a pair is loaded: what to relabel, and that FILE is a finished build to relabel
        from verispec.selector.relabel import check_relabel

        check_relabel(args.out, args.relabel, grid)
    if args.method in ("auto", "conditional"):
        from verispec.selector.combs import check_comb_size

        check_comb_size(grid)  # before a pair is loaded or a trace sampled
    latency = latency_model(args, DATASET_COST_RATIO)
    start = time.perf_counter()
    from_pair = args.pair is not None or args.target is not None or args.draft is not None
    if from_pair == (args.family is not None):
        raise VerispecError("give the roots: --family F (synthetic) or --pair NAME (traces of a model pair), one "
                            "of them")
    if args.backend is None:  # a pair's roots label here unless --jobs asks for workers
        args.backend = "serial" if from_pair and args.jobs is None else "local"
    from verispec.study.workers import worker_processes

    worker_processes(args.backend, args.jobs, args.address)  # --address with a backend that runs here: refused
    pair = None
    if args.family is not None:
        divergences = [_float(part, "--divergences") for part in args.divergences.split(",") if part.strip()]
        temperatures = [_float(part, "--temperatures") for part in args.temperatures.split(",") if part.strip()]
        if not divergences or not temperatures:
            raise VerispecError("--divergences and --temperatures need at least one value each")
        seeds = parse_seeds(args.seeds)
        roots = [root for temperature in temperatures
                 for root in synthetic_roots(args.family, args.vocab, seeds, divergence=divergences,
                                             temperature=temperature)]
    else:
        roots, pair = _pair_roots(args, relabel, progress)
    common = {"method": args.method, "samples": args.samples, "epsilon": args.epsilon, "out": args.out,
              "latency": latency, "pair": pair, "backend": args.backend, "jobs": args.jobs, "address": args.address,
              "progress": progress, "overwrite": args.overwrite, "seed": args.seed,
              "note": lambda text: _stderr(f"verispec: note: {text}"), "root_batch": args.root_batch}
    if relabel:  # FILE's hidden states are kept: they do not depend on the rules
        from verispec.selector.relabel import relabel_dataset

        dataset = relabel_dataset(roots, grid, args.relabel, **common)
        record = dataset.metadata["relabelled"][-1]
        print(f"relabelled {', '.join(record['verifiers'])} in {args.out}: {record['actions']} actions at "
              f"{len(dataset)} roots, every other label kept ({_elapsed(start)}; peak memory "
              f"{peak_rss_bytes() / 1e9:.1f} GB)")
        return 0
    dataset = build_dataset(roots, grid, hidden=args.hidden, **common)
    methods = sorted(set(dataset.label_method.tolist()))
    print(f"wrote {args.out}: {len(dataset)} roots in {len(set(dataset.group.tolist()))} groups, {len(grid)} "
          f"actions, labels {'/'.join(methods)} ({_elapsed(start)}; peak memory {peak_rss_bytes() / 1e9:.1f} GB)")
    return 0


def _pair_roots(args, relabel: bool, progress: bool):
    """(roots, pair): the pair loaded, its traces sampled (or read from FILE's trace store, which a relabel never
    starts over), a root every --every tokens."""
    from verispec.files.io import ResultStore
    from verispec.selector.dataset import trace_store_path
    from verispec.selector.prompt_sets import read_prompt_specs
    from verispec.selector.roots import parse_setting, trace_roots

    if args.first_root > args.trace_tokens:
        raise VerispecError(f"--first-root {args.first_root} is past the traces' end (--trace-tokens "
                            f"{args.trace_tokens}); give --first-root at most {args.trace_tokens}")
    prompts = read_prompt_specs(args.prompts)
    samplings = [parse_setting(text) for text in (args.sampling or DEFAULT_SAMPLINGS)]
    args.temperature, args.top_k, args.top_p = 1.0, None, None  # settings come from --sampling
    pair, _ = load_pair(args)
    if args.backend != "serial":  # workers that could not load the pair are refused before any trace
        from verispec.selector.labelling import check_pair_workers

        check_pair_workers(pair, args.backend, args.jobs, args.address)
    from verispec.models.prompts import prompt_set_digest

    _stderr(f"verispec: tracing {len(prompts)} prompts (texts sha256 {prompt_set_digest(prompts)[:12]}) x "
            f"{len(samplings)} settings, {args.trace_tokens} tokens each ({pair.name} on {pair.device})")
    recorded = {"pair": pair.name, "seed": args.seed, "dtype": str(pair.target.dtype)}  # traces depend on all
    traces_of = getattr(args, "traces_of", None)
    if traces_of is not None:
        traces = _read_only_traces(traces_of, recorded)
    else:
        try:
            traces = ResultStore(trace_store_path(args.out), parameters=recorded,
                                 overwrite=args.overwrite and not relabel)  # a relabel keeps FILE's traces
        except ResultStoreError as error:
            raise VerispecError(f"{error} (or pass --overwrite to start over)") from None
    roots = trace_roots(pair, prompts, samplings, every=args.every, max_new_tokens=args.trace_tokens,
                        seed=args.seed, store=traces, batch_size=args.trace_batch, progress=progress,
                        first_root=args.first_root, stored_only=relabel or traces_of is not None)
    return roots, pair


def _read_only_traces(dataset, recorded: dict):
    """The trace store of another build (``--traces-of DATASET``), opened with this command's parameters and never
    written: refused on one line where it is missing or was sampled with another pair, seed or dtype."""
    from verispec.files.io import ResultStore
    from verispec.selector.dataset import trace_store_path

    path = trace_store_path(dataset)
    if not path.is_file():
        raise VerispecError(f"--traces-of {str(dataset)!r}: its trace store {str(path)!r} does not exist; name a "
                            "dataset built with --pair (its FILE.traces.json beside it)")
    try:
        store = ResultStore(path, parameters=recorded)
    except ResultStoreError as error:
        raise VerispecError(f"--traces-of {str(dataset)!r}: {' '.join(str(error).split())}; give the --pair, "
                            "--seed and --dtype of its build") from None
    return store  # never written: every trace is there (stored_only), so none is decoded or added


def _float(text: str, option: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise VerispecError(f"{option}: cannot read {text.strip()!r} as a number; give a comma-separated list") \
            from None


def _run_train(args) -> int:
    from verispec.files.io import check_output
    from verispec.selector.dataset_file import Dataset
    from verispec.selector.selector import SELECTOR_FILE
    from verispec.selector.train import recorded_latency, train_on_dataset
    from verispec.study.script_files import check_free_space

    check_output(args.out, SELECTOR_FILE, what="--out", overwrite=args.overwrite)  # before any work
    check_free_space([args.out], "--out")  # a full disk, found before the training rather than at the save
    from verispec.files.store_lock import store_lock

    with store_lock(args.out, what="--out"):  # one writer at a time: a second run is refused
        dataset = Dataset.load(args.dataset)
        recorded = recorded_latency(dataset, args.dataset)  # None: train_on_dataset refuses unless a model is given
        latency = latency_model(args, recorded) if recorded is not None or args.latency is not None or \
            args.cost_ratio is not None else None
        if args.latency is not None and dataset.metadata.get("pair"):  # another pair's forwards price nothing here
            from verispec.latency import check_latency_pair

            check_latency_pair(latency, str(dataset.metadata["pair"]), f"--latency {args.latency}")
        start = time.perf_counter()
        trained = train_on_dataset(
            dataset, dataset_name=args.dataset, verifiers=args.verifiers, latency=latency, kind=args.kind,
            test_fraction=args.test_fraction, split_seed=args.split_seed, hidden=args.hidden,
            projection=args.projection, seed=args.seed, epochs=args.epochs, device=args.device, penalty=args.penalty,
            alpha=args.alpha)
        trained.selector.save(args.out)
        if args.json:  # "seconds" in its place, counting the save as well
            print_json({"out": args.out, **trained.summary, "seconds": time.perf_counter() - start})
        else:
            print(f"wrote {args.out}: {args.kind} selector over {len(trained.grid)} actions "
                  f"({', '.join(trained.grid.verifiers)}), trained on {trained.train_roots} roots "
                  f"({trained.test_roots} held out), {_elapsed(start)}")
        return 0


def _run_evaluate(args) -> int:
    from verispec.selector.dataset_file import Dataset
    from verispec.selector.evaluate import evaluate_held_out
    from verispec.selector.fits import check_dataset_fits
    from verispec.selector.selector import Selector

    dataset = Dataset.load(args.dataset)
    selectors, sources = {}, {}
    for path in args.selector:
        name = Path(path).stem
        if name in selectors:
            raise VerispecError(f"two selectors named {name!r}; give files of different names")
        selectors[name], sources[name] = Selector.load(path), f"the selector {str(path)!r}"
        # grid, pair, sampling and features before the split: each mismatch named, not 'other roots'
        check_dataset_fits(selectors[name], dataset, name=sources[name], source=f"the dataset {args.dataset!r}")
    report = evaluate_held_out(dataset, selectors, sources=sources, source=f"the dataset {args.dataset!r}",
                               compare=args.compare, resamples=args.bootstrap, seed=args.seed)
    if args.json:
        print_json(report)
        return 0
    print(f"held-out roots: {report['roots']['test']} in {report['groups']['test']} groups (trained on "
          f"{report['roots']['train']}); 95% intervals: group bootstrap, {args.bootstrap} resamples")
    for name, entry in report["selectors"].items():
        print(f"\n{name} ({entry['kind']}, {', '.join(entry['verifiers'])}; {entry['latency']['source'] or 'measured'}"
              f", throughput in {entry['throughput_unit']})")
        for setting, table in entry["settings"].items():
            print(f"  {setting}:")
            for policy in ("static", "selector", "oracle", "oracle_crossfit"):
                if policy not in table:
                    continue
                row = table[policy]
                extra = f" [{row['action']}]" if policy == "static" else \
                    " (in-sample: biased upward)" if row.get("biased_upward") else \
                    " (chosen on half the trees, scored on the rest)" if policy == "oracle_crossfit" else ""
                shown = "oracle-cf" if policy == "oracle_crossfit" else policy
                print(f"    {shown:9s} tokens/call {row['tokens_per_target_call']:.3f} "
                      f"[{row['tokens_per_target_call_ci'][0]:.3f}, {row['tokens_per_target_call_ci'][1]:.3f}]  "
                      f"throughput {row['throughput']:.4f} [{row['throughput_ci'][0]:.4f}, "
                      f"{row['throughput_ci'][1]:.4f}]  x{row['ratio_to_static']:.3f} of static{extra}")
            print(f"    selector: gain over static {table['selector']['gain_over_static']:+.2%}, regret to oracle "
                  f"{table['selector']['regret_to_oracle']:.2%}, agrees with the oracle at "
                  f"{table['selector']['agrees_with_oracle']:.0%} of roots"
                  + (f", regret to the cross-fitted oracle {table['selector']['regret_to_crossfit_oracle']:.2%}"
                     if "regret_to_crossfit_oracle" in table["selector"] else ""))
    for label, value in report.get("comparison", {}).items():
        if label != "latency":
            print(f"{label}: x{value['ratio']:.3f} [{value['ratio_ci'][0]:.3f}, {value['ratio_ci'][1]:.3f}]")
    return 0


def _elapsed(start: float) -> str:
    return f"{time.perf_counter() - start:.1f} s"


def _stderr(text: str) -> None:
    print(text, file=sys.stderr)
