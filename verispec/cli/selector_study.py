"""``verispec selector study``: the delay selector's study on a model pair's stored datasets, no model loaded: its
options, then ``verispec.selector.study.run_study`` (``verispec report --selector-dataset FILE`` runs the same study
as its section 9) and ``verispec.report.pair_section.write_study``.

    verispec selector study --dataset data/selector/qwen-t07-m64.npz --dataset data/selector/qwen-t1-r2.npz \\
                            --latency data/latency/latency-cpu-by-size.json --out study/

writes ``pair_selector.json`` (every number, and under ``record`` the command line, commit, date, machine and the
SHA-256 of every input: ``verispec.files.provenance.run_record``), ``pair_selector.md`` (one section of tables per
sampling
setting and latency regime, each table titled with the regime's full name) and ``pair_selector.png`` into DIR.
Each carries verispec's marker (``written_by``; the Markdown's first line; the PNG's text chunk): a file of these
names without it is refused before any work unless --overwrite, and one study writes DIR at a time
(``verispec.files.store_lock``).
"""

from __future__ import annotations

import time

from verispec.cli.options import add_projection_option, add_threads_option, integer_option, number_option
from verispec.guard.limits import STUDY_THREADS


def add_study_parser(steps) -> None:
    study = steps.add_parser("study", help="the selector study on a pair's stored datasets, in three latency regimes "
                                           "(tables, JSON, a figure; no model loaded)")
    study.add_argument("--dataset", action="append", required=True, metavar="FILE",
                       help="a dataset of the pair ('selector dataset --pair NAME'), one sampling setting or several; "
                            "repeatable (one pair, one tree grid; each setting in one dataset)")
    study.add_argument("--latency", default=None, metavar="FILE",
                       help="the pair's latency model on this CPU ('verispec latency --pair NAME --out FILE'): the "
                            "cpu regime (left out without it)")
    study.add_argument("--pair", default=None, metavar="NAME",
                       help="refuse datasets of any other pair (default: the first dataset's)")
    study.add_argument("--out", required=True, metavar="DIR", help="the folder of the study's three files")
    study.add_argument("--overwrite", action="store_true",
                       help="replace files in DIR of the study's names that verispec cannot show it wrote (by default "
                            "they are refused)")
    study.add_argument("--seed", type=integer_option(minimum=0, what="a non-negative integer"), default=0,
                       help="the split's, the selectors' and the bootstrap's seed (default 0)")
    study.add_argument("--epochs", type=integer_option(minimum=1, maximum=100_000, what="an integer in [1, 100000]"),
                       default=300, help="training epochs of the mlp and linear selectors (default 300)")
    study.add_argument("--test-fraction", type=number_option(minimum=0, strict=True, what="a number in (0, 1)"),
                       default=0.25, help="prompts held out (default 0.25; at least 64 from 256 prompts)")
    study.add_argument("--bootstrap", type=integer_option(minimum=100, maximum=100_000,
                                                          what="an integer in [100, 1e5]"),
                       default=2000, help="group-bootstrap resamples of the 95%% intervals (default 2000)")
    study.add_argument("--folds", type=integer_option(minimum=1, maximum=100, what="an integer in [1, 100]"),
                       default=1, metavar="K",
                       help="cross-fit over K folds of prompts: every prompt held out once, its roots' policies "
                            "fitted on the other folds (default 1: one split, --test-fraction held out)")
    add_threads_option(study, f"CPU threads for torch's training (default {STUDY_THREADS}: the study's networks are "
                              "too small to gain from more, and at every core a study on a shared box ran about 10x "
                              "slower; the outputs are the same)", default=STUDY_THREADS)
    add_projection_option(study, "with --hidden: each hidden state projected to WIDTH dimensions (default 128, the "
                                 "paper's; 'selector train --projection')")
    study.add_argument("--hidden", default=None, metavar="NAMES",
                       help="also train the paper's network reading these hidden states of the datasets "
                            "(comma-separated, or 'all' for every one they hold; 'selector dataset --hidden'): a "
                            "fourth policy of every rule, against the scalar network, and in the DDTE comparisons")


def run_study_command(args) -> int:
    from pathlib import Path

    from verispec.errors import VerispecError
    from verispec.files.store_lock import store_lock
    from verispec.selector.study import JSON_FILE, check_study_owned, load_inputs

    if not 0 < args.test_fraction < 1:
        raise VerispecError(f"--test-fraction must lie in (0, 1), got {args.test_fraction:g}")
    # before any file is read or selector trained: a file of the user's at one of the study's names is refused
    check_study_owned(args.out, overwrite=args.overwrite)
    datasets, regimes = load_inputs(args.dataset, args.latency, args.pair)
    hidden = None if args.hidden is None else "all" if args.hidden.strip() == "all" else \
        [name.strip() for name in args.hidden.split(",") if name.strip()]
    if args.projection is not None and hidden is None:
        raise VerispecError(f"--projection {args.projection} sizes the hidden states' projections: give --hidden "
                            "too, or leave --projection out")
    if hidden is not None:
        from verispec.selector.study import check_hidden, pair_settings

        if not hidden:
            raise VerispecError(f"--hidden {args.hidden!r}: name the hidden states (comma-separated) or 'all'")
        check_hidden(pair_settings(datasets, args.pair), hidden)  # before any training
    try:
        import torch  # noqa: F401
    except ImportError:
        raise VerispecError("the selector is a torch network: pip install 'torch==2.13.0' -e '.[torch]'") from None
    import shlex

    from verispec.files.provenance import run_record

    inputs = list(args.dataset) + ([args.latency] if args.latency else [])
    record = run_record(shlex.join(args.command_line), inputs, threads=args.threads)
    # one study into DIR at a time, from here (the inputs were refused first, leaving no folder behind): a second
    # is refused at once, naming the first (verispec.files.store_lock); two at once would each write the three files,
    # and DIR would end with a mix of both
    with store_lock(Path(args.out) / JSON_FILE, what="study's file"):
        check_study_owned(args.out, overwrite=args.overwrite)  # as the holder of the lock finds it
        return _write_study(args, datasets, regimes, hidden, record)


def _write_study(args, datasets, regimes, hidden, record: dict) -> int:
    """``run_study_command`` once its inputs are read and DIR is checked and locked."""
    from verispec.report.pair_section import write_study
    from verispec.selector.study import run_study

    start = time.perf_counter()
    result = run_study(datasets, regimes, seed=args.seed, epochs=args.epochs, test_fraction=args.test_fraction,
                       resamples=args.bootstrap, pair=args.pair, folds=args.folds, hidden=hidden,
                       projection=args.projection, threads=args.threads)
    result["record"] = {**record, "seconds": round(time.perf_counter() - start, 1)}
    write_study(result, args.out)
    print(f"wrote the selector study of {result['pair'] or 'the datasets'} into {args.out} "
          f"({len(result['settings'])} settings x "
          f"{len(result['regimes'])} regimes, {result['split']['held_out_prompts']} held-out prompts; "
          f"{time.perf_counter() - start:.1f} s)")
    return 0
