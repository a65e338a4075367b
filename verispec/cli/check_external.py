"""``verispec check-external``: check verification code written elsewhere."""

from __future__ import annotations

import json
import sys

from verispec.cli.common import plain_json, problem_from_args
from verispec.cli.options import (
    add_call_timeout_option,
    add_overwrite_option,
    integer_option,
    number_option,
    witness_output,
)
from verispec.errors import VerispecError
from verispec.guard.limits import EXTERNAL_LAYOUTS, KEY_MODES, MAX_BLACKBOX_SAMPLES, MAX_HUNT_VOCAB, MAX_KEYS


def add_parser(subparsers) -> None:
    check = subparsers.add_parser(
        "check-external", help="check a verification function written elsewhere, in a production layout")
    check.add_argument("function", metavar="FILE.py:FUNCTION", help="the function (or package.module:FUNCTION)")
    check.add_argument("--layout", required=True, choices=EXTERNAL_LAYOUTS,
                       help="how the function takes its arguments (see verispec.external.layouts): chain "
                            "f(draft_tokens, draft_probs, target_probs, uniforms); padded (transformers' "
                            "_speculative_sampling shape); ragged (vLLM's rejection sampler); tree-parent; "
                            "tree-sibling")
    check.add_argument("--tree", required=True, help="draft tree, as for 'exact'; also argmax-chain:L (greedy "
                                                     "drafts) and topk-chain:k,L (drafts from top-k filtered q)")
    source = check.add_argument_group("problem (--target/--draft or --problem; without one, a witness is searched)")
    source.add_argument("--target", metavar="P", help="comma-separated target probabilities (context-free)")
    source.add_argument("--draft", metavar="Q", help="comma-separated draft probabilities (context-free)")
    source.add_argument("--problem", metavar="FILE", help="JSON problem file with per-prefix conditionals")
    check.add_argument("--mode", choices=("auto", "exact", "blackbox"), default="auto",
                       help="exact: integrate over the uniforms (threshold rules); blackbox: stratified sampling "
                            "with a Bernstein test; auto (default): exact where the rule allows, else blackbox")
    check.add_argument("--arrays", choices=("numpy", "torch"), default="numpy",
                       help="array kind handed to the function (default numpy; torch: float64 tensors on --device)")
    check.add_argument("--device", default="cpu", help="torch device of the arguments with --arrays torch "
                                                       "(default cpu; e.g. cuda)")
    check.add_argument("--samples", type=integer_option(minimum=1, maximum=MAX_BLACKBOX_SAMPLES,
                                                         what=f"an integer in 1..{MAX_BLACKBOX_SAMPLES}"),
                       default=None, help="black-box runs of the function per test (default: as many as detect a TV "
                                          "of --detect-tv with probability --power)")
    check.add_argument("--detect-tv", type=number_option(minimum=0, strict=True, what="a number in (0, 1]"),
                       default=0.01, help="a black-box LOSSLESS verdict needs a test that detects every TV of this "
                                          "size or more (default 0.01)")
    check.add_argument("--power", type=number_option(minimum=0, strict=True, what="a number in (0, 1)"),
                       default=0.99, help="... with at least this probability (default 0.99)")
    check.add_argument("--alpha", type=number_option(minimum=0, strict=True, what="a number in (0, 1)"),
                       default=1e-6, help="black-box false-failure rate (default 1e-6)")
    check.add_argument("--seed", type=integer_option(minimum=0, what="an integer >= 0"), default=0,
                       help="seed of the black-box uniforms (default 0)")
    check.add_argument("--test", choices=("bernstein", "binomial"), default="bernstein",
                       help="black-box test: bernstein (stratified by draft tree, continuation integrated; default) "
                            "or binomial (sampled blocks and continuations, exact binomial tests)")
    check.add_argument("--max-vocab", type=integer_option(minimum=2, maximum=MAX_HUNT_VOCAB,
                                                           what=f"an integer in 2..{MAX_HUNT_VOCAB}"),
                       default=3, help="largest vocabulary of the witness search (default 3)")
    check.add_argument("--max-examples", type=integer_option(minimum=1, what="an integer >= 1"), default=300,
                       help="problems the witness search tries at most (default 300)")
    check.add_argument("--time-budget", type=number_option(minimum=0, strict=True, what="a positive number"),
                       default=60.0, help="seconds the witness search may take (default 60)")
    check.add_argument("--context-free", action="store_true", help="search context-free problems only")
    check.add_argument("--suite", choices=("canonical",), default=None,
                       help="without a problem: give the verdict on the canonical suite (LOSSLESS when every one of "
                            "its problems is checked and lossless); without it a search that finds nothing is "
                            "INCONCLUSIVE")
    check.add_argument("--rng", choices=("explicit", "capture"), default="explicit",
                       help="explicit (default): the function takes the layout's uniforms; capture: its own draws "
                            "from torch's, numpy's and Python's global RNGs are fed from the checker's uniforms")
    _add_step_options(check)
    check.add_argument("--keys", choices=KEY_MODES, default="keyed",
                       help="with --rng capture: keyed (default): draws from a generator seeded inside the call "
                            "(torch.Generator.manual_seed, torch.manual_seed, default_rng(seed), np.random.seed, "
                            "random.seed) or from verispec.keyed.rand(seed, offsets) read the uniforms of their key, "
                            "the same key the same numbers; fresh: every draw fresh (the old model, which misses a "
                            "key reused by two draws)")
    check.add_argument("--max-keys", type=integer_option(minimum=1, maximum=10**6,
                                                         what="an integer in [1, 1000000]"), default=MAX_KEYS,
                       help=f"the most keys one call may draw from (default {MAX_KEYS}); past it the check is refused")
    check.add_argument("--per-row", action="store_true",
                       help="call the function one row (batch size 1) at a time, for functions of one sequence")
    add_call_timeout_option(check)
    check.add_argument("--output", metavar="FILE", help="write the witness problem (JSON) here")
    add_overwrite_option(check, "a problem file")
    check.add_argument("--json", action="store_true", help="print one JSON object")


def _add_step_options(check) -> None:
    """The options of the whole-step layouts (``verispec.external.step``)."""
    check.add_argument("--sampling", metavar="SPEC", default=None,
                       help="with a whole-step layout (step, step-ragged, step-tree): the sampling the code is asked "
                            "for, 'temperature=T,top_k=K,top_p=P,min_p=M' (every part optional); the code gets raw "
                            "logits and these settings, and its output is checked against the target after them")
    check.add_argument("--context-twin", action="store_true",
                       help="with a whole-step layout on a context-free problem (where a function reading another "
                            "position's row reads the same numbers): also check the problem's context-dependent twin "
                            "(verispec.external.step_context), which shows such an offset; the worse verdict stands")
    check.add_argument("--neighbours", choices=("greedy", "sampled"), default="greedy",
                       help="with the step-ragged layout: greedy (default) fillers beside the checked request, or "
                            "neighbours that sample with settings and seeds of their own, the three requests' joint "
                            "law checked against the product of their targets (damage across requests shows)")
    from verispec.guard.limits import DEFAULT_PENALTIES

    check.add_argument("--penalties", metavar="SPEC", default=None,
                       help="with the step-penalties layout: 'repetition=R,frequency=F,presence=A' (every part "
                            f"optional; default {DEFAULT_PENALTIES}), applied as vLLM does over the prompt and the "
                            "request's earlier output (verispec.models.penalties)")


def run(args) -> int:
    with witness_output(args):  # one writer of --output at a time
        return _run(args)


def _run(args) -> int:
    from verispec.external.adapter import load_function
    from verispec.external.check import check_external
    from verispec.files.io import atomic_write_text
    from verispec.verdict import Verdict

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
        problem = problem_from_args(args)
    from tqdm import tqdm

    # --call-timeout is the command's guard's (verispec.guard.budget.CommandGuard), as for every command running your
    # code
    options = {name: value for name, value in (("rng", args.rng), ("per_row", args.per_row), ("keys", args.keys),
                                               ("max_keys", args.max_keys), ("context_twin", args.context_twin),
                                               ("neighbours", args.neighbours), ("penalties", args.penalties))
               if value not in (None, False, "explicit", "keyed", "greedy", MAX_KEYS)}
    with tqdm(desc="problems tried", unit=" problems", disable=problem is not None or not sys.stderr.isatty(),
              leave=False) as bar:
        report = check_external(function, args.layout, args.tree, problem=problem, mode=args.mode,
                                arrays=args.arrays, device=args.device, name=args.function, samples=args.samples,
                                detect_tv=args.detect_tv, power=args.power, alpha=args.alpha, test=args.test,
                                seed=args.seed, max_vocab=args.max_vocab, max_examples=args.max_examples,
                                time_budget=args.time_budget, context_free=True if args.context_free else None,
                                suite=args.suite, progress=lambda count: bar.update(count - bar.n),
                                sampling=args.sampling, **options)
    found = report.problem is not None and report.problem_source == "search"  # a witness, or a candidate
    if args.output and found:  # with its marker, so that a rerun may replace it (verispec.files.provenance)
        from verispec.files.provenance import MARKER_KEY, PROBLEM, written_by

        atomic_write_text(args.output, json.dumps({**report.problem, MARKER_KEY: written_by(PROBLEM, "check-external")})
                          + "\n")
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
                ("--per-row", args.per_row), (f"--keys {args.keys}", args.keys != "keyed")) if given)
            print(f"  reproduce: verispec check-external {args.function} --layout {args.layout} --tree {args.tree}"
                  f"{options} --problem {where} --mode {report.mode}")
    return report.exit_status
