"""``verispec optimum`` and ``verispec bound``: the LP bounds on any valid verifier."""

from __future__ import annotations

from verispec.cli.common import _print_json, _problem_from_args, _registry, parse_distribution, parse_tree
from verispec.cli.options import RESTRICTIONS, _command_budget
from verispec.errors import InvalidProblemError, VerispecError


def _run_optimum(args) -> int:
    from verispec.lp_analysis.single_position import iid_ot_optimum, without_replacement_ot_optimum

    p = parse_distribution(args.target, exact=args.exact, name="--target")
    q = parse_distribution(args.draft, exact=args.exact, name="--draft")
    if len(p) != len(q):
        raise InvalidProblemError(f"--target has {len(p)} probabilities but --draft has {len(q)}")
    solve = without_replacement_ot_optimum if args.without_replacement else iid_ot_optimum
    optimum = solve(p, q, args.k)
    data = {"alpha_star": float(optimum.alpha), "minimiser": sorted(optimum.minimiser), "k": args.k,
            "without_replacement": args.without_replacement}
    if args.exact:
        data["alpha_star_exact"] = str(optimum.alpha)
    if args.lp:
        from verispec.lp_analysis.draft_laws import iid_draft_law, without_replacement_draft_law
        from verispec.lp_analysis.ot import ot_coupling

        law = (without_replacement_draft_law if args.without_replacement else iid_draft_law)(q, args.k)
        data["lp_alpha_star"] = float(ot_coupling(p, law).optimum)
    if args.json:
        _print_json(data)
    else:
        for key, value in data.items():
            print(f"{key:<20} {value}")
    return 0


def _run_bound(args) -> int:
    with _command_budget(args, "the bound"):
        return _bound(args)


def _bound(args) -> int:
    from verispec.lp_analysis.gaps import gap_report
    from verispec.lp_analysis.solve import DEFAULT_MAX_VARIABLES

    args.exact = args.certify
    problem = _problem_from_args(args)
    drafter = parse_tree(args.tree)
    drafter.check_problem(problem)
    limit = args.max_variables or DEFAULT_MAX_VARIABLES
    if args.restriction is not None and args.restriction not in RESTRICTIONS:
        return _bound_user_class(args, problem, drafter, limit)
    if args.solver is not None:
        raise VerispecError("--solver chooses the cvxpy solver of a class FILE.py:NAME; the built-in classes are "
                            "solved by HiGHS through scipy: drop --solver or give --restriction FILE.py:NAME")
    report = gap_report(problem, drafter, _registry().values(), limit=limit, restriction=args.restriction,
                        certify=args.certify)
    if args.json:
        _print_json(report.to_json())
    else:
        print(report.table())
    return 0


def _bound_user_class(args, problem, drafter, limit: int) -> int:
    """``bound --restriction FILE.py:NAME``: the user's class through cvxpy (verispec.lp_analysis.classes)."""
    from verispec.lp_analysis.classes import optimize_class
    from verispec.verifiers import load_attribute

    if args.certify:
        raise VerispecError("--certify proves the built-in LPs (every valid verifier, selected-path); a class "
                            "FILE.py:NAME is checked by running its optimal verifier through the exact engine instead: "
                            "drop --certify")
    constraints = load_attribute(args.restriction, "verifier class")
    if not callable(constraints):
        raise VerispecError(f"{args.restriction} is a {type(constraints).__name__}, not a function; a class is a "
                            "function of the LP's variables returning a list of cvxpy constraints")
    result = optimize_class(problem, drafter, constraints, name=args.restriction, solver=args.solver,
                            verifiers=_registry().values(), limit=limit)
    if args.json:
        _print_json(result.to_json())
    else:
        print(result.table())
    return 0
