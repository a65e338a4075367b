"""The ``verispec`` parser: every command and option (standard library only; nothing a command runs is imported)."""

from __future__ import annotations

import argparse

from verispec.cli.common import BUILTIN_PROBLEMS
from verispec.cli.options import (
    DEFAULT_THRESHOLD,
    EXTERNAL_LAYOUTS,
    MAX_BLACKBOX_SAMPLES,
    MAX_CONTEXT_TOKENS,
    MAX_DECODE_NODES,
    MAX_HUNT_VOCAB,
    MAX_LATENCY_REPEATS,
    MAX_LP_VARIABLES,
    MAX_TREE_PARAMETER,
    METHODS,
    TREE_FORMS,
    _add_backend_options,
    _add_call_timeout_option,
    _add_context_options,
    _add_device_options,
    _add_overwrite_option,
    _add_pair_options,
    _add_sampling_options,
    _add_time_budget_option,
    _integer_option,
    _number_option,
    _Parser,
    _restriction_option,
    _VersionAction,
)


def _build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="verispec", description="Exact analysis of speculative-decoding verifiers.")
    parser.add_argument("--version", action=_VersionAction, help="print 'verispec VERSION' and exit")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    exact = commands.add_parser("exact", help="exact output law, losslessness and block efficiency")
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
    exact.add_argument("--tolerance", type=_number_option(minimum=0, strict=False, what="a finite number >= 0"),
                       default=None, help="TV distance below which 'lossless' holds (a finite number >= 0)")
    exact.add_argument("--fail-if-lossy", action="store_true", help="exit with status 1 when not lossless")
    _add_time_budget_option(exact, "the analysis")
    _add_call_timeout_option(exact)

    compare = commands.add_parser("compare", help="compare the chain verifiers exactly (the main job)")
    compare.add_argument("--problem", action="append", metavar="NAME|FILE",
                         help=f"built-in problem ({', '.join(BUILTIN_PROBLEMS)}) or JSON file; repeatable; "
                              "default: every built-in problem")
    compare.add_argument("--depths", default="1,2,3,4", help="chain lengths L to compare (default 1,2,3,4)")
    compare.add_argument("--tree", action="append", metavar="TREE",
                         help="compare every verifier valid for this tree instead of the chain verifiers on "
                              "chains (repeatable)")
    compare.add_argument("--exact", action="store_true", help="exact rational arithmetic where the problem allows")
    compare.add_argument("--json", action="store_true", help="print one JSON object per row")

    hunt = commands.add_parser("hunt", help="search for the simplest problem on which a verifier is lossy")
    hunt.add_argument("--verifier", required=True, help="verifier name, or FILE.py:NAME for your own rule")
    hunt.add_argument("--tree", required=True, help="draft tree, as for 'exact'")
    hunt.add_argument("--max-vocab", type=_integer_option(minimum=2, maximum=MAX_HUNT_VOCAB,
                                                         what=f"an integer from 2 to {MAX_HUNT_VOCAB}"),
                      default=3, help=f"largest vocabulary searched (default 3, at most {MAX_HUNT_VOCAB})")
    hunt.add_argument("--max-examples", type=_integer_option(minimum=1, what="an integer >= 1"), default=3000,
                      help="problems tried before giving up (default 3000)")
    hunt.add_argument("--time-budget",
                      type=_number_option(minimum=0, strict=True, what="a finite number of seconds > 0"),
                      default=60.0, help="seconds before giving up (default 60)")
    hunt.add_argument("--threshold", type=_number_option(minimum=0, strict=False, what="a finite number >= 0"),
                      default=DEFAULT_THRESHOLD, help="TV distance above which a problem is a witness (default 1e-9)")
    hunt.add_argument("--context-free", action="store_true", help="search context-free problems only")
    hunt.add_argument("--output", metavar="FILE",
                      help="write the witness problem here instead of stdout (JSON; FILE.npz: the binary form)")
    _add_overwrite_option(hunt, "a problem file")
    _add_call_timeout_option(hunt)

    check = commands.add_parser(
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
    check.add_argument("--samples", type=_integer_option(minimum=1, maximum=MAX_BLACKBOX_SAMPLES,
                                                         what=f"an integer in 1..{MAX_BLACKBOX_SAMPLES}"),
                       default=None, help="black-box runs of the function per test (default: as many as detect a TV "
                                          "of --detect-tv with probability --power)")
    check.add_argument("--detect-tv", type=_number_option(minimum=0, strict=True, what="a number in (0, 1]"),
                       default=0.01, help="a black-box LOSSLESS verdict needs a test that detects every TV of this "
                                          "size or more (default 0.01)")
    check.add_argument("--power", type=_number_option(minimum=0, strict=True, what="a number in (0, 1)"),
                       default=0.99, help="... with at least this probability (default 0.99)")
    check.add_argument("--alpha", type=_number_option(minimum=0, strict=True, what="a number in (0, 1)"),
                       default=1e-6, help="black-box false-failure rate (default 1e-6)")
    check.add_argument("--seed", type=_integer_option(minimum=0, what="an integer >= 0"), default=0,
                       help="seed of the black-box uniforms (default 0)")
    check.add_argument("--test", choices=("bernstein", "binomial"), default="bernstein",
                       help="black-box test: bernstein (stratified by draft tree, continuation integrated; default) "
                            "or binomial (sampled blocks and continuations, exact binomial tests)")
    check.add_argument("--max-vocab", type=_integer_option(minimum=2, maximum=MAX_HUNT_VOCAB,
                                                           what=f"an integer in 2..{MAX_HUNT_VOCAB}"),
                       default=3, help="largest vocabulary of the witness search (default 3)")
    check.add_argument("--max-examples", type=_integer_option(minimum=1, what="an integer >= 1"), default=300,
                       help="problems the witness search tries at most (default 300)")
    check.add_argument("--time-budget", type=_number_option(minimum=0, strict=True, what="a positive number"),
                       default=60.0, help="seconds the witness search may take (default 60)")
    check.add_argument("--context-free", action="store_true", help="search context-free problems only")
    check.add_argument("--suite", choices=("canonical",), default=None,
                       help="without a problem: give the verdict on the canonical suite (LOSSLESS when every one of "
                            "its problems is checked and lossless); without it a search that finds nothing is "
                            "INCONCLUSIVE")
    check.add_argument("--rng", choices=("explicit", "capture"), default="explicit",
                       help="explicit (default): the function takes the layout's uniforms; capture: its own draws "
                            "from torch's, numpy's and Python's global RNGs are fed from the checker's uniforms")
    check.add_argument("--per-row", action="store_true",
                       help="call the function one row (batch size 1) at a time, for functions of one sequence")
    _add_call_timeout_option(check)
    check.add_argument("--output", metavar="FILE", help="write the witness problem (JSON) here")
    _add_overwrite_option(check, "a problem file")
    check.add_argument("--json", action="store_true", help="print one JSON object")

    optimum = commands.add_parser("optimum", help="best single-position acceptance alpha* with K drafts")
    optimum.add_argument("--target", metavar="P", required=True, help="target probabilities")
    optimum.add_argument("--draft", metavar="Q", required=True, help="draft probabilities")
    optimum.add_argument("--k", type=_integer_option(minimum=1, maximum=MAX_TREE_PARAMETER,
                                                     what=f"an integer from 1 to {MAX_TREE_PARAMETER}"),
                         required=True, help="number of drafts K")
    optimum.add_argument("--without-replacement", action="store_true", help="drafts drawn without replacement")
    optimum.add_argument("--lp", action="store_true", help="also solve the OT linear program (a second derivation)")
    optimum.add_argument("--exact", action="store_true", help="exact rational arithmetic for the closed form")
    optimum.add_argument("--json", action="store_true", help="print one JSON object")

    bound = commands.add_parser("bound", help="best block efficiency of any valid verifier, and every gap")
    bound_source = bound.add_argument_group("problem (either --target/--draft or --problem)")
    bound_source.add_argument("--target", metavar="P")
    bound_source.add_argument("--draft", metavar="Q")
    bound_source.add_argument("--problem", metavar="FILE")
    bound.add_argument("--tree", required=True, help="draft tree, as for 'exact'")
    bound.add_argument("--max-variables", type=_integer_option(minimum=1, maximum=MAX_LP_VARIABLES,
                                                               what=f"an integer from 1 to {MAX_LP_VARIABLES}"),
                       default=None, help="largest LP accepted (a positive integer)")
    bound.add_argument("--restriction", type=_restriction_option, default=None, metavar="CLASS",
                       help="compare with the optimum of a restricted class of verifiers instead of every valid "
                            "verifier: selected-path (accept a prefix of GBV's greedily selected path), or "
                            "FILE.py:NAME, a function of the LP's variables returning cvxpy constraints "
                            "(docs/verifier_classes.md)")
    bound.add_argument("--solver", default=None, metavar="NAME",
                       help="cvxpy solver for a class FILE.py:NAME (default HIGHS, then CLARABEL)")
    bound.add_argument("--certify", action="store_true",
                       help="prove the optimum in exact rationals (a primal and a dual solution, checked exactly) "
                            "on the problem's own numbers: read exactly (fractions stay fractions)")
    _add_time_budget_option(bound, "the linear programs and the analyses")
    _add_call_timeout_option(bound)
    bound.add_argument("--json", action="store_true", help="print one JSON object")

    commands.add_parser("list", help="list verifiers (with their valid draft laws) and tree kinds")

    decode = commands.add_parser("decode", help="real speculative decoding with a (target, draft) pair of models")
    _add_pair_options(decode)
    prompts = decode.add_mutually_exclusive_group(required=True)
    prompts.add_argument("--prompt", metavar="TEXT", help="one prompt")
    prompts.add_argument("--prompts", metavar="FILE", help="prompts: a .jsonl file (a string or an object with "
                         "'prompt' per line) or a text file with one prompt per line")
    decode.add_argument("--tree", help="draft tree, as for 'exact' (e.g. delayed:4,2,2; chain:0 runs no draft model)")
    decode.add_argument("--verifier", help="verifier name (see 'verispec list'), or FILE.py:NAME")
    decode.add_argument("--selector", metavar="FILE", help="a trained selector ('verispec selector train'): it chooses "
                        "every block's tree and verifier (instead of --tree and --verifier)")
    decode.add_argument("--plain", action="store_true",
                        help="plain sampling from the target alone, one forward per token (the baseline)")
    _add_sampling_options(decode)
    decode.add_argument("--max-new-tokens", type=_integer_option(minimum=1, maximum=MAX_CONTEXT_TOKENS,
                                                                what=f"an integer from 1 to {MAX_CONTEXT_TOKENS}"),
                        default=64, help=f"tokens to generate per prompt (default 64, at most {MAX_CONTEXT_TOKENS})")
    decode.add_argument("--seed", type=_integer_option(minimum=0, what="an integer >= 0"), default=0,
                        help="seed of the generator every random decision comes from (default 0)")
    _add_device_options(decode)
    decode.add_argument("--static-cache", action="store_true",
                        help="keep both KV caches in a StaticCache allocated once (fixed addresses)")
    decode.add_argument("--graphs", action="store_true",
                        help="replay one CUDA graph per forward width over static caches (the fast path on a GPU; "
                             "implies --static-cache)")
    decode.add_argument("--json", action="store_true", help="print one JSON object per prompt")
    _add_call_timeout_option(decode)

    predict = commands.add_parser("predict", help="certified interval on E[tau+1] at a real context (or any problem)")
    _add_pair_options(predict, "source (--pair NAME, --target MODEL --draft MODEL, or --problem FILE)").add_argument(
        "--problem", metavar="FILE", help="a problem file instead of a model pair")
    _add_context_options(predict)
    predict.add_argument("--tree", required=True, help="draft tree, as for 'exact'")
    predict.add_argument("--verifier", required=True, help="verifier name (see 'verispec list')")
    predict.add_argument("--epsilon", type=_number_option(minimum=0, strict=True, what="a positive number"),
                         default=1e-3, help="largest width of the interval (default 1e-3)")
    _add_sampling_options(predict)
    predict.add_argument("--max-rows", type=_integer_option(minimum=1, what="a positive integer"), default=None,
                         help="most (node, draw tuple) rows the certified walk evaluates (default 2,000,000); when "
                              "they run out first, the interval certified so far is printed and the exit status is 3")
    _add_time_budget_option(predict, "the prediction (loading the models included)")
    _add_call_timeout_option(predict)
    _add_device_options(predict)
    predict.add_argument("--json", action="store_true", help="print one JSON object")

    derive = commands.add_parser("derive", help="a real context as a small-vocabulary problem file (top V-1 + other)")
    _add_pair_options(derive)
    _add_context_options(derive)
    derive.add_argument("--vocab", type=_integer_option(minimum=2, what="an integer >= 2"), required=True,
                        help="derived vocabulary: the top V-1 tokens at each prefix and one 'other' bucket")
    derive.add_argument("--depth", type=_integer_option(minimum=1, what="a positive integer"), required=True,
                        help="target conditionals to this depth (draft to depth - 1)")
    derive.add_argument("--output", required=True, metavar="FILE",
                        help="the problem file to write (atomically): JSON, or the binary form when FILE ends in .npz")
    _add_overwrite_option(derive, "a problem file")
    _add_sampling_options(derive)
    _add_device_options(derive)

    sweep = commands.add_parser("sweep", help="exact analyses over a grid of problems, trees, verifiers and methods")
    sweep.add_argument("--families", default="context-free",
                       help="comma-separated problem families: context-free, random (per prefix), markov, "
                            "file:PATH (default context-free)")
    sweep.add_argument("--vocab", default="3", help="comma-separated vocabulary sizes (default 3)")
    sweep.add_argument("--divergence", default="0.5", help="comma-separated draft divergences in [0, 1] (default 0.5)")
    sweep.add_argument("--temperature", default="1", help="comma-separated temperatures of both laws (default 1)")
    sweep.add_argument("--concentration", default="1", help="comma-separated Dirichlet concentrations (default 1)")
    sweep.add_argument("--seeds", default="0", help="seeds: a list (0,1,2) or ranges (0-9) (default 0)")
    sweep.add_argument("--trees", default="chain:2", help="';'-separated tree specifications (default chain:2)")
    sweep.add_argument("--verifiers", default="all",
                       help="comma-separated verifiers, or all (each paired with the trees it is valid for)")
    sweep.add_argument("--methods", default="auto", help="comma-separated methods (default auto)")
    sweep.add_argument("--gap", action="store_true", help="also solve the LP optimum and report the gap to it")
    sweep.add_argument("--cell-timeout", type=_number_option(minimum=0, strict=True, what="a positive number"),
                       default=None, help="seconds one cell may take before it is recorded as refused")
    sweep.add_argument("--out", default="results/sweep.csv", metavar="FILE",
                       help="tidy table, .csv or .parquet (default results/sweep.csv) of this grid's cells; every "
                            "row computed is kept in FILE.cells.json (rows of other grids too) and a rerun resumes")
    sweep.add_argument("--overwrite", action="store_true",
                       help="replace an existing FILE (and FILE.cells.json) that is not a sweep's, and start over; "
                            "and files in --save-problems DIR of the names it writes that are not problem files")
    sweep.add_argument("--save-problems", metavar="DIR", default=None,
                       help="also write every seeded problem of the grid to DIR in the binary .npz form (one file per "
                            "problem, named by its family and knobs), for 'verispec exact --problem'")
    _add_backend_options(sweep)
    price = sweep.add_argument_group("latency model of the throughput columns (default: --cost-ratio 4)")
    price.add_argument("--cost-ratio", type=_number_option(minimum=0, strict=True, what="a positive number"),
                       default=None, help="t_p / t_q: one target forward in draft steps")
    price.add_argument("--per-node", type=_number_option(minimum=0, strict=False, what="a number >= 0"),
                       default=0.0, help="each tree node beyond the first adds this fraction of t_p (default 0)")
    price.add_argument("--latency", metavar="FILE", default=None,
                       help="a latency model measured on a pair ('verispec latency --out FILE')")

    report = commands.add_parser("report", help="the comparison study: sweeps, tables, figures and findings")
    report.add_argument("--quick", action="store_true", help="the small study (a few minutes on 2 cores)")
    report.add_argument("--out", default="report", metavar="DIR",
                        help="report directory (default report/): new, empty, or a report's (a rerun resumes)")
    report.add_argument("--overwrite", action="store_true",
                        help="write into a DIR that holds other files, replacing the report's files and data")
    _add_backend_options(report)
    report.add_argument("--pair", default=None, metavar="NAME",
                        help="an installed pair: study 6 derives and certifies problems at real contexts")
    report.add_argument("--device", default="cpu", help="torch device of the pair (default cpu)")

    latency = commands.add_parser("latency", help="measure a pair's draft step and target forward times (JSON)")
    _add_pair_options(latency)
    latency.add_argument("--sizes", default="1,2,4,8,16,32",
                         help=f"tree sizes n at which t_p(n) is measured (each at most {MAX_DECODE_NODES})")
    latency.add_argument("--repeats", type=_integer_option(minimum=1, maximum=MAX_LATENCY_REPEATS,
                                                           what=f"an integer from 1 to {MAX_LATENCY_REPEATS}"),
                         default=5)
    latency.add_argument("--context-length", type=_integer_option(minimum=1, maximum=MAX_CONTEXT_TOKENS,
                                                                  what=f"an integer from 1 to {MAX_CONTEXT_TOKENS}"),
                         default=200, help="committed tokens before each timed forward (default 200)")
    latency.add_argument("--out", required=True, metavar="FILE", help="the latency model to write (atomically)")
    _add_overwrite_option(latency, "a latency model")
    _add_device_options(latency)

    models_command = commands.add_parser("models", help="install and list real model pairs")
    models_actions = models_command.add_subparsers(dest="action", required=True, parser_class=_Parser)
    install = models_actions.add_parser("install", help="download, join, check and convert a pair (resumable)")
    install.add_argument("name", help="pair name (see 'verispec models list')")
    install.add_argument("--cache", metavar="DIR", help="cache directory (default $VERISPEC_CACHE or "
                         "~/.cache/verispec)")
    install.add_argument("--keep-gguf", action="store_true", help="keep the joined GGUF files")
    listing = models_actions.add_parser("list", help="known pairs and whether they are installed")
    listing.add_argument("--cache", metavar="DIR", help="cache directory")
    from verispec.selector.command import add_parser as add_selector_parser

    add_selector_parser(commands, {"integer": _integer_option, "number": _number_option,
                                   "backend": _add_backend_options, "device": _add_device_options})
    return parser
