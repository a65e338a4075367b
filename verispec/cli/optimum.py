"""``verispec optimum``: the best single-position acceptance alpha* with K drafts (optimal transport)."""

from __future__ import annotations

from verispec.cli.common import print_json
from verispec.cli.options import integer_option
from verispec.errors import InvalidProblemError
from verispec.guard.limits import MAX_TREE_PARAMETER


def add_parser(subparsers) -> None:
    optimum = subparsers.add_parser("optimum", help="best single-position acceptance alpha* with K drafts")
    optimum.add_argument("--target", metavar="P", required=True, help="target probabilities")
    optimum.add_argument("--draft", metavar="Q", required=True, help="draft probabilities")
    optimum.add_argument("--k", type=integer_option(minimum=1, maximum=MAX_TREE_PARAMETER,
                                                    what=f"an integer from 1 to {MAX_TREE_PARAMETER}"),
                         required=True, help="number of drafts K")
    optimum.add_argument("--without-replacement", action="store_true", help="drafts drawn without replacement")
    optimum.add_argument("--lp", action="store_true", help="also solve the OT linear program (a second derivation)")
    optimum.add_argument("--exact", action="store_true", help="exact rational arithmetic for the closed form")
    optimum.add_argument("--json", action="store_true", help="print one JSON object")


def run(args) -> int:
    from verispec.lp_analysis.single_position import iid_ot_optimum, without_replacement_ot_optimum
    from verispec.simulator.distributions import parse_distribution

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
        print_json(data)
    else:
        for key, value in data.items():
            print(f"{key:<20} {value}")
    return 0
