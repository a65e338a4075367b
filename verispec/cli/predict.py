"""``verispec predict``: a certified interval on E[tau+1] at a real context of a model pair, or on any problem."""

from __future__ import annotations

import json
import sys

from verispec.cli.options import (
    add_call_timeout_option,
    add_context_options,
    add_device_options,
    add_pair_options,
    add_sampling_options,
    add_time_budget_option,
    command_budget,
    integer_option,
    number_option,
)
from verispec.cli.pair import model_problem
from verispec.errors import VerispecError


def add_parser(subparsers) -> None:
    predict = subparsers.add_parser("predict", help="certified interval on E[tau+1] at a real context (or any problem)")
    add_pair_options(predict, "source (--pair NAME, --target MODEL --draft MODEL, or --problem FILE)").add_argument(
        "--problem", metavar="FILE", help="a problem file instead of a model pair")
    add_context_options(predict)
    predict.add_argument("--tree", required=True, help="draft tree, as for 'exact'")
    predict.add_argument("--verifier", required=True, help="verifier name (see 'verispec list')")
    predict.add_argument("--epsilon", type=number_option(minimum=0, strict=True, what="a positive number"),
                         default=1e-3, help="largest width of the interval (default 1e-3)")
    add_sampling_options(predict)
    predict.add_argument("--max-rows", type=integer_option(minimum=1, what="a positive integer"), default=None,
                         help="most (node, draw tuple) rows the certified walk evaluates (default 2,000,000); when "
                              "they run out first, the interval certified so far is printed and the exit status is 3")
    add_time_budget_option(predict, "the prediction (loading the models included)")
    add_call_timeout_option(predict)
    add_device_options(predict)
    predict.add_argument("--json", action="store_true", help="print one JSON object")


def run(args) -> int:
    with command_budget(args, "the prediction"):
        return _predict(args)


def _predict(args) -> int:
    from verispec.simulator import load_problem, parse_tree
    from verispec.simulator.certified import DEFAULT_MAX_ROWS, certify
    from verispec.simulator.engine import check_compatible
    from verispec.verdict import EXIT_INCONCLUSIVE
    from verispec.verifiers import get_verifier

    drafter = parse_tree(args.tree)
    verifier = get_verifier(args.verifier)
    check_compatible(verifier, drafter)
    sources = [args.pair is not None, args.target is not None or args.draft is not None, args.problem is not None]
    if sum(sources) != 1:
        raise VerispecError("give one source: --pair NAME, --target MODEL --draft MODEL, or --problem FILE")
    if args.problem is not None:
        if args.context is not None or args.context_file is not None:
            raise VerispecError("--context belongs with a model pair; a problem file holds its own conditionals")
        problem = load_problem(args.problem)
        source = {"problem": args.problem}
    else:
        problem, source = model_problem(args, drafter.depth)
    # under --time-budget (set by run) the walk returns the interval of its last complete round
    result = certify(problem, drafter, verifier, args.epsilon, max_rows=args.max_rows or DEFAULT_MAX_ROWS,
                     progress=sys.stderr.isatty())
    status = 0 if result.reached else EXIT_INCONCLUSIVE  # the interval is as narrow as asked, or not (yet)
    if args.json:
        print(json.dumps({**source, **result.as_dict()}))
        return status
    print(f"E[tau+1] of {verifier.name} on {drafter.spec}: [{result.lower:.6f}, {result.upper:.6f}] "
          f"(width {result.width:.2e}, epsilon {args.epsilon:g}{'' if result.reached else ', NOT reached'})")
    for depth, (low, high) in enumerate(zip(result.acceptance_lower, result.acceptance_upper), start=1):
        print(f"  P(tau >= {depth}) in [{low:.6f}, {high:.6f}]")
    passes = "" if result.forward_passes is None else f", {result.forward_passes} forward passes of each model"
    print(f"# {result.method}: {result.prefixes_expanded} prefixes expanded, {result.rows_evaluated} rows "
          f"evaluated{passes}, {result.seconds:.1f} s")
    if result.note:
        print(f"# {result.note}", file=sys.stderr)
    return status
