"""``verispec check-engine NAME``: an engine's shipped verification code, unmodified, checked exactly on the CPU.

The adapter of ``verispec.engines`` states the installed release's entry points as checks; each runs through
``check_external`` (the engine's code in check-external's sandbox), or, for greedy decoding, against the target's
argmax on every draft list. The exit status is the worst finding: 1 a check LOSSY that should hold the law, 4 one
that raised, 2 one whose kernel the interpreter cannot run (or an engine that cannot be checked at all), 3 one
inconclusive, 0 every check as a correct release gets it (a LOSSY that the engine documents counts as expected and
is listed with its TV).
"""

from __future__ import annotations

import json
import os
import time

from verispec.cli.common import plain_json
from verispec.cli.options import add_call_timeout_option, number_option
from verispec.errors import VerispecError
from verispec.verdict import EXIT_BAD_INPUT, EXIT_INCONCLUSIVE, Verdict

#: Default seconds each check may take (exact mode on vLLM's V1 step at V = 3 takes about 80 s on 2 cores).
DEFAULT_CHECK_BUDGET = 600.0
#: The exception Triton's interpreter raises for a kernel it cannot run.
INTERPRETER_ERROR = "InterpreterError"


def add_parser(subparsers) -> None:
    check = subparsers.add_parser(
        "check-engine", help="check an installed engine's shipped verification code, unmodified, exactly")
    check.add_argument("engine", help="the engine (vllm)")
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
    check.add_argument("--source", metavar="FILE", default=None,
                       help="check FILE in place of the engine's sampler module (a mutant of the shipped file); the "
                            "installed files are not changed")
    add_call_timeout_option(check)
    check.add_argument("--json", action="store_true", help="print one JSON object")


def checks_to_run(args):
    """(the adapter, its checks selected by --check); EngineError or VerispecError on one line."""
    from verispec.engines import adapter

    engine = adapter(args.engine)
    checks = engine.checks()
    if args.check:
        names = [name.strip() for name in args.check.split(",") if name.strip()]
        known = {check.name for check in checks}
        unknown = [name for name in names if name not in known]
        if unknown or not names:
            raise VerispecError(f"unknown check {', '.join(unknown) or repr(args.check)} of {args.engine}: choose "
                                f"from {', '.join(sorted(known))}")
        checks = [check for check in checks if check.name in names]
    return engine, checks


def run(args) -> int:
    engine, checks = checks_to_run(args)
    release = engine.check_release()
    if args.list:
        for check in checks:
            print(f"{check.name:16} {check.entry}: {check.description} (expect {check.expect})")
        return 0
    if args.source is not None:
        if not os.path.isfile(args.source):
            raise VerispecError(f"--source {args.source!r} is not a file: give the path of a copy of "
                                f"{engine.SAMPLER_MODULE.replace('.', '/')}.py")
        os.environ[engine.SOURCE_VARIABLE] = os.path.abspath(args.source)
    rows = []
    for check in checks:
        rows.append(_run_check(engine, check, args))
    status = _status(rows)
    result = {"engine": args.engine, "release": release, "source": args.source, "exit_status": status,
              "checks": rows}
    if args.json:
        print(json.dumps(plain_json(result)))
    else:
        print(f"{args.engine} {release}" + (f" with {args.source} as {engine.SAMPLER_MODULE}" if args.source else ""))
        for row in rows:
            print(_line(row))
    return status


def _run_check(engine, check, args) -> dict:
    from verispec.engines.greedy import greedy_check
    from verispec.external.adapter import load_function

    tree = args.tree or check.tree
    start = time.monotonic()
    problem = _problem(args, check)
    row = {"check": check.name, "entry": check.entry, "description": check.description, "function": check.function,
           "layout": check.layout, "tree": tree, "sampling": "greedy" if check.exhaustive else check.sampling,
           "target": [float(x) for x in problem.target(())], "draft": [float(x) for x in problem.draft(())],
           "expected": check.expect, "why": check.why or None, "threshold": engine.THRESHOLD}
    function = load_function(check.function)
    if check.exhaustive:
        row.update(greedy_check(function, tree, problem))
    else:
        from verispec.external.check import check_external

        report = check_external(function, check.layout, tree, problem=problem, mode=args.mode,
                                name=f"{args.engine}:{check.name}", detect_tv=args.detect_tv, alpha=args.alpha,
                                time_budget=args.time_budget, sampling=check.sampling, rng="capture",
                                threshold=engine.THRESHOLD)
        found = report.to_json()
        row.update(verdict=report.verdict.word, mode=report.mode, tv_distance=report.tv_distance,
                   tv_estimate=report.tv_estimate, power=found.get("power"), discrepancies=report.discrepancies,
                   evaluations=report.evaluations, note=report.note, raised=report.raised)
        if report.verdict is Verdict.RAISES and (report.raised or {}).get("exception") == INTERPRETER_ERROR:
            row["verdict"] = "UNRUNNABLE"
            row["note"] = (f"Triton's interpreter cannot run a kernel on this route "
                           f"({(report.raised or {}).get('message', '')}); nothing was checked")
    row["seconds"] = round(time.monotonic() - start, 3)
    row["as_expected"] = row["verdict"] == check.expect.upper() or (check.expect == "lossy"
                                                                    and row["verdict"] == "LOSSLESS")
    return row


def _problem(args, check):
    """The context-free problem of a check: --target/--draft where given, else the check's own."""
    from verispec.cli.common import problem_from_args
    from verispec.simulator import ContextFreeProblem

    if args.target is None and args.draft is None:
        return ContextFreeProblem(list(check.target), list(check.draft))
    if args.target is None or args.draft is None:
        raise VerispecError("give both --target and --draft, or neither (each check's own problem)")
    args.problem, args.exact = None, False
    return problem_from_args(args)


def _status(rows) -> int:
    verdicts = [(row["verdict"], row["as_expected"]) for row in rows]
    if any(verdict == "LOSSY" and not expected for verdict, expected in verdicts):
        return Verdict.LOSSY.exit_status
    if any(verdict == "RAISES" for verdict, _ in verdicts):
        return Verdict.RAISES.exit_status
    if any(verdict == "UNRUNNABLE" for verdict, _ in verdicts):
        return EXIT_BAD_INPUT
    if any(verdict == "INCONCLUSIVE" for verdict, _ in verdicts):
        return EXIT_INCONCLUSIVE
    return 0


def _line(row: dict) -> str:
    verdict = row["verdict"] + ("" if row["as_expected"] else f" (expected {row['expected'].upper()})")
    if row.get("tv_distance") is not None:
        measure = f"exact TV {row['tv_distance']:.3g} (lossy above {row['threshold']:g})"
    elif row.get("tv_estimate") is not None:
        power = row.get("power") or {}
        measure = f"TV estimate {row['tv_estimate']:.3g}; {power.get('statement', '')}"
    else:
        measure = ""
    text = f"  {row['check']:16} {verdict:12} {row.get('mode', '')}, {row['tree']}, {row['sampling']}: {measure}"
    text += f" ({row['seconds']:.1f} s)"
    if row.get("why") and row["verdict"] == "LOSSY":
        text += f"\n      documented: {row['why']}"
    if row["verdict"] not in ("LOSSLESS",) and row.get("note"):
        text += f"\n      {row['note']}"
    return text
