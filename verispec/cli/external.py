"""``verispec check-external``: check verification code written elsewhere."""

from __future__ import annotations

import json
import sys

from verispec.cli.common import _problem_from_args, plain_json
from verispec.cli.options import _check_problem_output
from verispec.errors import VerispecError
from verispec.io import atomic_write_text
from verispec.verdict import Verdict


def _run_check_external(args) -> int:
    from verispec.external.adapter import load_function
    from verispec.external.check import check_external

    if not args.alpha < 1:
        raise VerispecError(f"--alpha must lie in (0, 1), got {args.alpha!r}")
    if not args.power < 1:
        raise VerispecError(f"--power must lie in (0, 1), got {args.power!r}")
    if not args.detect_tv <= 1:
        raise VerispecError(f"--detect-tv must lie in (0, 1], got {args.detect_tv!r}")
    function = load_function(args.function)
    problem = None
    if args.problem is not None or args.target is not None or args.draft is not None:
        args.exact = False
        problem = _problem_from_args(args)
    if args.output:
        _check_problem_output(args.output, overwrite=args.overwrite)
    from tqdm import tqdm

    # --call-timeout is the command's guard's (verispec.budget.CommandGuard), as for every command running your code
    options = {name: value for name, value in (("rng", args.rng), ("per_row", args.per_row))
               if value not in (None, False, "explicit")}
    with tqdm(desc="problems tried", unit=" problems", disable=problem is not None or not sys.stderr.isatty(),
              leave=False) as bar:
        report = check_external(function, args.layout, args.tree, problem=problem, mode=args.mode,
                                arrays=args.arrays, device=args.device, name=args.function, samples=args.samples,
                                detect_tv=args.detect_tv, power=args.power, alpha=args.alpha, test=args.test,
                                seed=args.seed, max_vocab=args.max_vocab, max_examples=args.max_examples,
                                time_budget=args.time_budget, context_free=True if args.context_free else None,
                                suite=args.suite, progress=lambda count: bar.update(count - bar.n), **options)
    found = report.problem is not None and report.problem_source == "search"  # a witness, or a candidate
    if args.output and found:
        atomic_write_text(args.output, json.dumps(report.problem) + "\n")
    if args.json:
        print(json.dumps(plain_json(report.to_json())))
    else:
        print(report.describe())
        if found and report.verdict is not Verdict.LOSSLESS:
            where = args.output or "FILE (see --output)"
            print(f"  {'candidate' if report.verdict is Verdict.INCONCLUSIVE else 'witness'}: "
                  f"{json.dumps(report.problem)}")
            options = "".join(f" {option}" for option, given in (
                (f"--arrays {args.arrays}", args.arrays != "numpy"), (f"--rng {args.rng}", args.rng == "capture"),
                ("--per-row", args.per_row)) if given)
            print(f"  reproduce: verispec check-external {args.function} --layout {args.layout} --tree {args.tree}"
                  f"{options} --problem {where} --mode {report.mode}")
    return report.exit_status
