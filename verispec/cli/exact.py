"""``verispec exact`` and ``verispec compare``: exact analyses from the command line."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

from verispec.cli.common import (
    BUILTIN_PROBLEMS,
    _engine_limit,
    _format,
    _output_law_size,
    _print_json,
    _problem_from_args,
    _registry,
    _shown,
    analyze,
    choose_method,
    get_verifier,
    load_problem,
    parse_tree,
)
from verispec.cli.options import _command_budget
from verispec.errors import VerispecError
from verispec.verdict import Verdict

if TYPE_CHECKING:
    from verispec.simulator.problems import Problem


def _run_exact(args) -> int:
    with _command_budget(args, "the exact analysis"):
        return _exact(args)


def _exact(args) -> int:
    problem = _problem_from_args(args)
    drafter = parse_tree(args.tree)
    verifier = get_verifier(args.verifier)
    drafter.check_problem(problem)
    method = choose_method(problem, drafter, verifier, args.method)
    if args.fail_if_lossy and method == "dp-metrics":
        if args.method == "auto":
            entries, memory = _output_law_size(problem, drafter)
            raise VerispecError(
                f"--fail-if-lossy cannot be checked: --method auto chose dp-metrics because the output law would "
                f"have {entries} entries (more than {_engine_limit():,}), and dp-metrics keeps only the law of tau, "
                f"not the output law; use a smaller tree, or --method dp if you have the memory ({memory})")
        raise VerispecError("--fail-if-lossy cannot be checked with --method dp-metrics, which keeps only the law of "
                            "tau, not the output law; use --method dp or --method auto")
    result = analyze(problem, drafter, verifier, method=args.method, tolerance=args.tolerance,
                     progress=sys.stderr.isatty())
    if args.json:
        _print_json(result.to_json())
    else:
        rows = [
            ("verifier", result.verifier), ("tree", result.tree), ("method", result.note or result.method),
            ("block efficiency E[tau+1]", _format(result.block_efficiency)),
            ("expected accepted E[tau]", _format(result.expected_accepted)),
            ("TV distance to target",
             "not computed (this method keeps only the law of tau)" if result.tv_distance is None
             else _format(result.tv_distance)),
            ("lossless", f"not checked: method {result.method} keeps only the law of tau, not the output law "
                         "(use a smaller tree or --method dp to check it)" if result.lossless is None
             else f"{result.lossless} (tolerance {result.tolerance:g})"),
            ("law of tau", " ".join(_format(v) for v in result.tau_law)),
            ("P(tau >= d), d=1..L", " ".join(_format(v) for v in result.acceptance_by_depth)),
            ("draft outcomes", "-" if result.num_draft_outcomes is None else str(result.num_draft_outcomes)),
        ]
        if result.exact:
            rows.insert(4, ("exact E[tau+1]", str(result.block_efficiency)))
        width = max(len(name) for name, _ in rows)
        for name, value in rows:
            print(f"{name:<{width}}  {value}")
    if args.fail_if_lossy:
        if result.lossless is None:  # choose_method said otherwise; never turn 'unknown' into a verdict
            raise VerispecError(f"--fail-if-lossy cannot be checked: method {result.method} gave no output law")
        verdict = Verdict.LOSSLESS if result.lossless else Verdict.LOSSY
        print(f"verispec: {verdict.word}: the exact output law of '{result.verifier}' on {result.tree} is "
              f"{'within' if result.lossless else 'farther than'} {result.tolerance:g} of the target's (TV "
              f"{float(result.tv_distance):.3g})", file=sys.stderr)
        return verdict.exit_status
    return 0


def _compare_problems(args) -> list[tuple[str, Problem]]:
    names = args.problem or list(BUILTIN_PROBLEMS)
    problems = []
    for name in names:
        if name in BUILTIN_PROBLEMS:
            problems.append((name, BUILTIN_PROBLEMS[name][1](args.exact)))
        elif Path(name).suffix == ".json" or Path(name).exists():
            problems.append((name, load_problem(name, exact=args.exact)))
        else:
            raise VerispecError(f"unknown problem {name!r}; built-in problems: {', '.join(BUILTIN_PROBLEMS)}, "
                                "or a JSON file")
    return problems


def _run_compare(args) -> int:
    try:
        depths = [int(d) for d in args.depths.split(",")]
    except ValueError:
        raise VerispecError(f"--depths must be comma-separated integers, got {args.depths!r}") from None
    from verispec.simulator.drafters import ChainDrafter, DraftLaw

    if args.tree:
        pairs = [(drafter, [v for v in _registry().values() if drafter.draft_laws & v.valid_for])
                 for drafter in map(parse_tree, args.tree)]
    else:
        chain_verifiers = [v for v in _registry().values() if DraftLaw.SINGLE_PATH in v.valid_for]
        pairs = [(ChainDrafter(depth), chain_verifiers) for depth in depths]
    header = ("problem", "tree", "verifier", "E[tau+1]", "E[tau]", "TV distance", "lossless")
    rows = []
    problems = _compare_problems(args)
    for name, problem in problems:
        for drafter, _ in pairs:
            try:
                drafter.check_problem(problem)
            except VerispecError as error:
                raise type(error)(f"problem {name!r}: {error}") from None
    for name, problem in problems:
        for drafter, verifiers in pairs:
            for verifier in verifiers:
                result = analyze(problem, drafter, verifier)
                if args.json:
                    _print_json({"problem": name, **result.to_json()})
                rows.append((name, drafter.spec, verifier.name, _shown(result.block_efficiency, result.exact),
                             _shown(result.expected_accepted, result.exact),
                             "-" if result.tv_distance is None else f"{float(result.tv_distance):.1e}",
                             "?" if result.lossless is None else "yes" if result.lossless else "NO"))
    if not args.json:
        widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]
        for row in [header, tuple("-" * w for w in widths), *rows]:
            print("  ".join(f"{cell:<{w}}" for cell, w in zip(row, widths)).rstrip())
    return 0
