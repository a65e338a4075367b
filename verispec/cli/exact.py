"""``verispec exact``: one exact analysis of a verifier on a draft tree and a problem."""

from __future__ import annotations

import sys

from verispec.cli.common import print_json, problem_from_args
from verispec.cli.options import (
    add_call_timeout_option,
    add_time_budget_option,
    command_budget,
    number_option,
)
from verispec.errors import VerispecError
from verispec.guard.limits import METHODS, TREE_FORMS


def add_parser(subparsers) -> None:
    exact = subparsers.add_parser("exact", help="exact output law, losslessness and block efficiency")
    source = exact.add_argument_group("problem (either --target/--draft or --problem)")
    source.add_argument("--target", metavar="P", help="comma-separated target probabilities, e.g. 1/3,2/3")
    source.add_argument("--draft", metavar="Q", help="comma-separated draft probabilities (context-free)")
    source.add_argument("--problem", metavar="FILE", help="JSON problem file with per-prefix conditionals")
    exact.add_argument("--tree", required=True, help="draft tree: " + ", ".join(TREE_FORMS))
    exact.add_argument("--verifier", required=True, help="verifier name (see 'verispec list')")
    exact.add_argument("--drafts", metavar="RULE", default=None,
                       help="deterministic drafts handed their own law: argmax (point mass at q's mode, as EAGLE or "
                            "a greedy assistant with q = 1), ngram:N (prompt lookup within the block, else argmax), "
                            "top:K (uniform over q's top K, for branch:K trees)")
    exact.add_argument("--json", action="store_true", help="print one JSON object")
    exact.add_argument("--exact", action="store_true", help="exact rational arithmetic (Fractions); tolerance 0")
    exact.add_argument("--method", choices=METHODS, default="auto",
                       help="auto (fastest exact method), closed-form (per-tree laws), enumerate (sampling procedure), "
                            "dp / dp-metrics (walk DP), fast-enumeration (batched whole-tree enumeration), "
                            "rule-dp (gbv's and traversal's own exact methods)")
    exact.add_argument("--tolerance", type=number_option(minimum=0, strict=False, what="a finite number >= 0"),
                       default=None, help="TV distance below which 'lossless' holds (a finite number >= 0)")
    exact.add_argument("--fail-if-lossy", action="store_true", help="exit with status 1 when not lossless")
    add_time_budget_option(exact, "the analysis")
    add_call_timeout_option(exact)


def run(args) -> int:
    with command_budget(args, "the exact analysis"):
        return _exact(args)


def _exact(args) -> int:
    from verispec.simulator import parse_tree
    from verispec.simulator.engine import analyze, choose_method
    from verispec.verdict import Verdict
    from verispec.verifiers import get_verifier

    problem = problem_from_args(args)
    drafter = parse_tree(args.tree)
    verifier = get_verifier(args.verifier)
    drafter.check_problem(problem)
    method = choose_method(problem, drafter, verifier, args.method)
    if args.fail_if_lossy and method == "dp-metrics":
        _refuse_fail_if_lossy(args, problem, drafter)
    result = analyze(problem, drafter, verifier, method=args.method, tolerance=args.tolerance,
                     progress=sys.stderr.isatty())
    if args.json:
        print_json(result.to_json())
    else:
        _print_result(result)
    if args.fail_if_lossy:
        if result.lossless is None:  # choose_method said otherwise; never turn 'unknown' into a verdict
            raise VerispecError(f"--fail-if-lossy cannot be checked: method {result.method} gave no output law")
        verdict = Verdict.LOSSLESS if result.lossless else Verdict.LOSSY
        print(f"verispec: {verdict.word}: the exact output law of '{result.verifier}' on {result.tree} is "
              f"{'within' if result.lossless else 'farther than'} {result.tolerance:g} of the target's (TV "
              f"{float(result.tv_distance):.3g})", file=sys.stderr)
        return verdict.exit_status
    return 0


def _refuse_fail_if_lossy(args, problem, drafter) -> None:
    """--fail-if-lossy with dp-metrics, which keeps only the law of tau: refused rather than guessed."""
    if args.method == "auto":
        from verispec.simulator.engine import MAX_LAW_ENTRIES

        entries, memory = _output_law_size(problem, drafter)
        raise VerispecError(
            f"--fail-if-lossy cannot be checked: --method auto chose dp-metrics because the output law would "
            f"have {entries} entries (more than {MAX_LAW_ENTRIES:,}), and dp-metrics keeps only the law of tau, "
            f"not the output law; use a smaller tree, or --method dp if you have the memory ({memory})")
    raise VerispecError("--fail-if-lossy cannot be checked with --method dp-metrics, which keeps only the law of "
                        "tau, not the output law; use --method dp or --method auto")


def _output_law_size(problem, drafter) -> tuple[str, str]:
    """(entries of the output law at length L+1, memory of the whole law in float64), in words."""
    size, depth = problem.vocab_size, drafter.depth
    if depth > 40:
        return f"{size}^{depth + 1}", "the output law alone would need far more memory than any machine has"
    entries = sum(size ** length for length in range(1, depth + 2))  # outputs of every length 1..L+1
    return f"{size ** (depth + 1):,}", f"the output law alone takes about {entries * 8 / 2**20:,.0f} MiB"


def _format(value) -> str:
    return f"{float(value):.12g}"


def _exact_text(value) -> str:
    """An exact value for the table: 'p/q' while each part has at most MAX_EXACT_DIGITS digits (as before), else its
    size and where it is whole (--json writes it in full)."""
    from verispec.simulator.engine import rational_text

    text = rational_text(value)
    numerator, _, denominator = text.partition("/")
    if max(len(numerator), len(denominator)) <= MAX_EXACT_DIGITS:
        return text
    return (f"a rational of {len(numerator):,} digits over {len(denominator or '1'):,} (--json gives it whole; "
            f"{_format(value)})")


#: Most digits of a numerator or denominator the table prints (Python's own default limit for writing an int).
MAX_EXACT_DIGITS = 4300


def _print_result(result) -> None:
    """The analysis as one aligned 'name  value' row per quantity."""
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
        rows.insert(4, ("exact E[tau+1]", _exact_text(result.block_efficiency)))
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        print(f"{name:<{width}}  {value}")
