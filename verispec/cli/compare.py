"""``verispec compare``: the chain verifiers (or every verifier valid for a tree) side by side, exactly."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from verispec.cli.common import print_json, registry
from verispec.errors import VerispecError

if TYPE_CHECKING:
    from verispec.simulator.problems import Problem


def _sun_toy(exact: bool):
    from verispec.simulator import sun_toy_problem

    return sun_toy_problem(exact=exact)


def _random(exact: bool):
    from verispec.simulator import random_problem

    return random_problem(4, 4, 0)


#: Built-in problems: name -> (description, factory(exact) -> Problem).
BUILTIN_PROBLEMS = {
    "sun-toy": ("Sun et al. 2024 toy: p=(1/3,2/3), q=(2/3,1/3), context-free", _sun_toy),
    "random": ("seeded context-dependent Dirichlet problem, V=4, depth 4, divergence 0.5, seed 0", _random),
}


def add_parser(subparsers) -> None:
    compare = subparsers.add_parser("compare", help="compare the chain verifiers exactly (the main job)")
    compare.add_argument("--problem", action="append", metavar="NAME|FILE",
                         help=f"built-in problem ({', '.join(BUILTIN_PROBLEMS)}) or JSON file; repeatable; "
                              "default: every built-in problem")
    compare.add_argument("--depths", default="1,2,3,4", help="chain lengths L to compare (default 1,2,3,4)")
    compare.add_argument("--tree", action="append", metavar="TREE",
                         help="compare every verifier valid for this tree instead of the chain verifiers on "
                              "chains (repeatable)")
    compare.add_argument("--exact", action="store_true", help="exact rational arithmetic where the problem allows")
    compare.add_argument("--json", action="store_true", help="print one JSON object per row")


def _compare_problems(args) -> list[tuple[str, Problem]]:
    from verispec.simulator import load_problem

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


def _shown(value, exact: bool) -> str:
    return str(value) if exact else f"{float(value):.6f}"


def run(args) -> int:
    try:
        depths = [int(d) for d in args.depths.split(",")]
    except ValueError:
        raise VerispecError(f"--depths must be comma-separated integers, got {args.depths!r}") from None
    from verispec.simulator import ChainDrafter, DraftLaw, analyze, parse_tree

    if args.tree:
        pairs = [(drafter, [v for v in registry().values() if drafter.draft_laws & v.valid_for])
                 for drafter in map(parse_tree, args.tree)]
    else:
        chain_verifiers = [v for v in registry().values() if DraftLaw.SINGLE_PATH in v.valid_for]
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
                    print_json({"problem": name, **result.to_json()})
                rows.append((name, drafter.spec, verifier.name, _shown(result.block_efficiency, result.exact),
                             _shown(result.expected_accepted, result.exact),
                             "-" if result.tv_distance is None else f"{float(result.tv_distance):.1e}",
                             "?" if result.lossless is None else "yes" if result.lossless else "NO"))
    if not args.json:
        widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]
        for row in [header, tuple("-" * w for w in widths), *rows]:
            print("  ".join(f"{cell:<{w}}" for cell, w in zip(row, widths)).rstrip())
    return 0
