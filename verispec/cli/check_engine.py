"""``verispec check-engine NAME``: an engine's shipped verification code, unmodified, checked exactly on the CPU.

The adapter of ``verispec.engines`` states the installed release's entry points as checks; each runs through
``check_external`` (the engine's code in check-external's sandbox), or, for greedy decoding, against the target's
argmax on every draft list, or, for seeds, by replaying seeded requests (the library call
``verispec.engines.check.run_engine_checks``, which the pytest plugin runs too). The exit status is the worst
finding: 1 a check LOSSY that should hold the law or a seeded request IRREPRODUCIBLE, 4 one that raised, 2 one whose
kernel the interpreter cannot run (or an engine that cannot be checked at all), 3 one inconclusive, 0 every check as
a correct release gets it (a LOSSY that the engine documents counts as expected and is listed with its TV).
"""

from __future__ import annotations

import json

from verispec.cli.common import plain_json
from verispec.cli.options import add_call_timeout_option, number_option
from verispec.engines import source_refusal
from verispec.errors import VerispecError
from verispec.guard.limits import DEFAULT_CHECK_BUDGET


def add_parser(subparsers) -> None:
    check = subparsers.add_parser(
        "check-engine", help="check an installed engine's shipped verification code, unmodified, exactly")
    check.add_argument("engine", help="the engine (mlx-lm, transformers, vllm)")
    check.add_argument("--check", metavar="NAMES", default=None,
                       help="comma-separated checks to run (default all; --list prints them)")
    check.add_argument("--list", action="store_true", help="print the installed release's checks and exit")
    check.add_argument("--tree", default=None, help="the draft tree of every law check (default each check's, "
                                                      "chain:1)")
    check.add_argument("--target", metavar="P", default=None,
                       help="comma-separated target probabilities of every check (default each check's, "
                            "0.5,0.3,0.2)")
    check.add_argument("--draft", metavar="Q", default=None,
                       help="comma-separated draft probabilities of every check (default each check's, 0.2,0.2,0.6)")
    check.add_argument("--mode", choices=("auto", "exact", "blackbox"), default="exact",
                       help="exact (default): integrate over every draw; blackbox: a powered test; auto: exact "
                            "where the code allows, else blackbox")
    check.add_argument("--detect-tv", type=number_option(minimum=0, strict=True, what="a number in (0, 1]"),
                       default=0.01, help="black-box mode: the TV a LOSSLESS verdict must detect (default 0.01)")
    check.add_argument("--alpha", type=number_option(minimum=0, strict=True, what="a number in (0, 1)"),
                       default=1e-6, help="black-box false-failure rate (default 1e-6)")
    check.add_argument("--time-budget", type=number_option(minimum=0, strict=True, what="a positive number"),
                       default=DEFAULT_CHECK_BUDGET, help=f"seconds each check may take (default "
                                                          f"{DEFAULT_CHECK_BUDGET:g})")
    check.add_argument("--any-release", action="store_true",
                       help="check a release outside the adapter's list (its entry points are still verified; a "
                            "moved one is refused)")
    check.add_argument("--source", metavar="FILE", default=None,
                       help="check FILE in place of the engine's sampler module (a mutant of the shipped file); the "
                            "installed files are not changed")
    check.add_argument("--fail-fast", action="store_true",
                       help="stop after the first check that does not pass (its row is the last one printed)")
    check.add_argument("--context-twin", action="store_true",
                       help="the step checks on a context-free problem also check its context twin, where code that "
                            "reads another position's row is seen (check-external's --context-twin)")
    check.add_argument("--neighbours", choices=("greedy", "sampled"), default="greedy",
                       help="the batch checks (step-ragged: v1-mixed): greedy fillers (default) or neighbours that "
                            "sample with their own settings and seeds, the requests' joint law checked")
    add_call_timeout_option(check)
    check.add_argument("--json", action="store_true", help="print one JSON object")


def checks_to_run(args):
    """(the adapter, its checks selected by --check); EngineError or VerispecError on one line."""
    from verispec.engines.check import select_checks

    return select_checks(args.engine, args.check or None)


def run(args) -> int:
    from verispec.engines.check import row_line, run_engine_checks

    engine, checks = checks_to_run(args)
    release = engine.check_release(any_release=args.any_release)
    if args.list:
        for check in checks:
            print(f"{check.name:20} {check.entry}: {check.description} (expect {check.expect})")
        return 0
    refusal = None if args.source is None else source_refusal(args.engine, engine, args.source, "--source")
    if refusal:
        raise VerispecError(refusal)
    result = run_engine_checks(args.engine, [check.name for check in checks], tree=args.tree,
                               problem=_problem(args), mode=args.mode, detect_tv=args.detect_tv, alpha=args.alpha,
                               time_budget=args.time_budget, source=args.source, any_release=args.any_release,
                               fail_fast=args.fail_fast, context_twin=args.context_twin,
                               neighbours=args.neighbours)
    if args.json:
        print(json.dumps(plain_json(result)))
    else:
        print(f"{args.engine} {release}" + (f" with {args.source} as {engine.SAMPLER_MODULE}" if args.source else ""))
        for row in result["checks"]:
            print(row_line(row))
    return result["exit_status"]


def _problem(args):
    """The context-free problem of --target/--draft for every check, or None (each check's own)."""
    from verispec.cli.common import problem_from_args

    if args.target is None and args.draft is None:
        return None
    if args.target is None or args.draft is None:
        raise VerispecError("give both --target and --draft, or neither (each check's own problem)")
    args.problem, args.exact = None, False
    return problem_from_args(args)


def _status(rows) -> int:
    """The worst finding of the rows (``verispec.engines.check.exit_status``)."""
    from verispec.engines.check import exit_status

    return exit_status(rows)
