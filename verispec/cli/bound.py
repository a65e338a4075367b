"""``verispec bound``: the best block efficiency of any valid verifier (the multi-step LP), and every gap to it."""

from __future__ import annotations

import argparse

from verispec.cli.common import print_json, problem_from_args, registry
from verispec.cli.options import (
    add_call_timeout_option,
    add_time_budget_option,
    command_budget,
    integer_option,
)
from verispec.errors import VerispecError
from verispec.guard.limits import MAX_LP_VARIABLES, RESTRICTIONS


def _restriction_option(text: str) -> str:
    """An argparse type: a built-in class of the multi-step LP or FILE.py:NAME."""
    if text in RESTRICTIONS or ":" in text:
        return text
    shown = text if len(text) <= 30 else f"{text[:20]}..."
    raise argparse.ArgumentTypeError(f"must be one of {', '.join(RESTRICTIONS)} or FILE.py:NAME (a class of your own), "
                                     f"got {shown!r}")


def add_parser(subparsers) -> None:
    bound = subparsers.add_parser("bound", help="best block efficiency of any valid verifier, and every gap")
    bound_source = bound.add_argument_group("problem (either --target/--draft or --problem)")
    bound_source.add_argument("--target", metavar="P")
    bound_source.add_argument("--draft", metavar="Q")
    bound_source.add_argument("--problem", metavar="FILE")
    bound.add_argument("--tree", required=True, help="draft tree, as for 'exact'")
    bound.add_argument("--max-variables", type=integer_option(minimum=1, maximum=MAX_LP_VARIABLES,
                                                              what=f"an integer from 1 to {MAX_LP_VARIABLES}"),
                       default=None, help="largest LP accepted (a positive integer)")
    bound.add_argument("--restriction", type=_restriction_option, default=None, metavar="CLASS",
                       help="compare with the optimum of a restricted class of verifiers instead of every valid "
                            "verifier: selected-path (accept a prefix of GBV's greedily selected path), or "
                            "FILE.py:NAME, a function of the LP's variables returning cvxpy constraints "
                            "(docs/guides/verifier_classes.md)")
    bound.add_argument("--solver", default=None, metavar="NAME",
                       help="cvxpy solver for a class FILE.py:NAME (default HIGHS, then CLARABEL)")
    bound.add_argument("--certify", action="store_true",
                       help="prove the optimum in exact rationals (a primal and a dual solution, checked exactly) "
                            "on the problem's own numbers: read exactly (fractions stay fractions)")
    add_time_budget_option(bound, "the linear programs and the analyses")
    add_call_timeout_option(bound)
    bound.add_argument("--json", action="store_true", help="print one JSON object")


def run(args) -> int:
    with command_budget(args, "the bound"):
        return _bound(args)


def _bound(args) -> int:
    from verispec.bounds.gaps import gap_report
    from verispec.lp_analysis.solve import DEFAULT_MAX_VARIABLES
    from verispec.simulator import parse_tree

    args.exact = args.certify
    problem = problem_from_args(args)
    drafter = parse_tree(args.tree)
    drafter.check_problem(problem)
    limit = args.max_variables or DEFAULT_MAX_VARIABLES
    if args.restriction is not None and args.restriction not in RESTRICTIONS:
        return _bound_user_class(args, problem, drafter, limit)
    if args.solver is not None:
        raise VerispecError("--solver chooses the cvxpy solver of a class FILE.py:NAME; the built-in classes are "
                            "solved by HiGHS through scipy: drop --solver or give --restriction FILE.py:NAME")
    report = gap_report(problem, drafter, registry().values(), limit=limit, restriction=args.restriction,
                        certify=args.certify)
    if args.json:
        print_json(report.to_json())
    else:
        print(report.table())
    return 0


def _bound_user_class(args, problem, drafter, limit: int) -> int:
    """``bound --restriction FILE.py:NAME``: the user's class through cvxpy (verispec.bounds.classes); without the
    ``lp`` extra, refused in one line before the class is loaded."""
    from verispec.bounds.classes import optimize_class, require_cvxpy
    from verispec.user_code import load_attribute

    require_cvxpy()

    if args.certify:
        raise VerispecError("--certify proves the built-in LPs (every valid verifier, selected-path); a class "
                            "FILE.py:NAME is checked by running its optimal verifier through the exact engine instead: "
                            "drop --certify")
    from verispec.guard import supervisor

    supervisor.ran_unconfined(f"--restriction {args.restriction} (a class returns cvxpy objects, which cannot leave "
                              "a sandbox)")
    constraints = load_attribute(args.restriction, "verifier class")
    if not callable(constraints):
        raise VerispecError(f"{args.restriction} is a {type(constraints).__name__}, not a function; a class is a "
                            "function of the LP's variables returning a list of cvxpy constraints")
    result = optimize_class(problem, drafter, constraints, name=args.restriction, solver=args.solver,
                            verifiers=registry().values(), limit=limit)
    if args.json:
        print_json(result.to_json())
    else:
        print(result.table())
    return 0
