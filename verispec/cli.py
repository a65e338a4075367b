"""The ``verispec`` command.

    verispec exact   --target P --draft Q --tree TREE --verifier NAME [--json]   one exact analysis
    verispec exact   --problem FILE --tree TREE --verifier NAME [--json]
    verispec compare [--problem NAME|FILE] [--depths 1,2,3]        the chain verifiers side by side
    verispec hunt    --verifier NAME --tree TREE [--output FILE]     simplest problem where a rule is lossy
    verispec optimum --target P --draft Q --k K [--without-replacement] [--json]   alpha*
    verispec bound   (--target P --draft Q | --problem FILE) --tree TREE [--restriction selected-path|FILE.py:NAME]
                     [--certify] [--json]
                                                                                 LP optimum and gaps
    verispec list                                                    verifiers and tree kinds
    verispec decode  (--pair NAME | --target MODEL --draft MODEL) (--prompt TEXT | --prompts FILE)
                     (--tree TREE --verifier NAME | --selector FILE | --plain) [--temperature T] [--top-p P]
                     [--top-k K] [--max-new-tokens N] [--seed S] [--device D] [--dtype D] [--json]
                                                      real speculative decoding (or plain sampling)
    verispec decode  ... --plain | --selector FILE                   plain sampling; a tree chosen per block
    verispec models  install NAME | list                             the real model pairs (qwen-coder)
    verispec selector dataset | train | evaluate                     the delay selector (verispec.selector.command)
    verispec predict (--pair NAME | --target MODEL --draft MODEL) (--context TEXT | --context-file FILE)
                     --tree TREE --verifier NAME [--epsilon E] [--temperature T] [--top-p P] [--top-k K] [--json]
    verispec predict --problem FILE --tree TREE --verifier NAME [--epsilon E] [--json]
                                                      certified interval on E[tau+1] (any vocabulary size)
    verispec derive  (--pair NAME | --target MODEL --draft MODEL) (--context TEXT | --context-file FILE)
                     --vocab V --depth L --output FILE [--temperature T] [--top-p P] [--top-k K]
                                                      a real context as a V-token problem file
    verispec check-external FILE.py:FUNCTION --layout LAYOUT --tree TREE [--target P --draft Q | --problem FILE]
                     [--mode auto|exact|blackbox] [--json]         check verification code written elsewhere
                                                      (exit 1 lossy, 0 lossless, 2 bad input)
    verispec --version                                               'verispec VERSION'

Bad input exits with status 2 and one line on stderr. '--fail-if-lossy' refuses (status 2) a method that
cannot check losslessness (dp-metrics), rather than guessing a verdict. exact, bound and predict take
'--time-budget SECONDS' (hard; 600 s by default for a rule of your own): past it they exit with status 3, and
so does predict when its interval is still wider than --epsilon.
"""

from __future__ import annotations

import argparse
import contextlib
import enum
import json
import math
import os
import sys
import time
from collections.abc import Mapping
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING

from verispec import package_version
from verispec.errors import AnalysisTimeoutError, InvalidProblemError, VerispecError
from verispec.io import atomic_write_text
from verispec.verdict import EXIT_BAD_INPUT, EXIT_INCONCLUSIVE, EXIT_LOSSY, Verdict

if TYPE_CHECKING:
    from verispec.simulator.problems import Problem

# The parser and --help import nothing heavier than the standard library (numpy, scipy and the verifiers cost
# 0.6 s of start-up): the names below load their module on first call, and the constants the parser needs are
# repeated here, tied to their sources by tests/test_cli.py.

#: verispec.simulator.drafters.MAX_TREE_PARAMETER
MAX_TREE_PARAMETER = 10**6
#: verispec.simulator.engine.METHODS
METHODS = ("auto", "closed-form", "enumerate", "dp", "dp-metrics", "fast-enumeration", "rule-dp")
#: The forms of verispec.simulator.drafters.TREE_KINDS, in its order
TREE_FORMS = ("chain:L", "iid:K,L", "delayed:K,L1,L2", "branch:b1,b2,...", "branch-iid:b1,b2,...", "hub",
              "hub-tree:L", "greedy:K", "greedy-tree:K,L", "dyspec:N", "argmax-chain:L", "topk-chain:k,L")


def _lazy(module: str, name: str):
    """A stand-in for ``module.name`` that imports the module at its first call."""

    def call(*args, **kwargs):
        import importlib

        return getattr(importlib.import_module(module), name)(*args, **kwargs)

    call.__name__ = name
    return call


parse_distribution = _lazy("verispec.simulator.distributions", "parse_distribution")
parse_tree = _lazy("verispec.simulator.drafters", "parse_tree")
analyze = _lazy("verispec.simulator.engine", "analyze")
check_compatible = _lazy("verispec.simulator.engine", "check_compatible")
choose_method = _lazy("verispec.simulator.engine", "choose_method")
ContextFreeProblem = _lazy("verispec.simulator.problems", "ContextFreeProblem")
load_problem = _lazy("verispec.simulator.problems", "load_problem")
random_problem = _lazy("verispec.simulator.problems", "random_problem")
sun_toy_problem = _lazy("verispec.simulator.problems", "sun_toy_problem")
get_verifier = _lazy("verispec.verifiers", "get_verifier")
split_names = _lazy("verispec.verifiers", "split_names")


def _engine_limit() -> int:
    from verispec.simulator.engine import MAX_LAW_ENTRIES

    return MAX_LAW_ENTRIES


def _registry() -> dict:
    from verispec.verifiers import REGISTRY

    return REGISTRY

DEFAULT_THRESHOLD = 1e-9  # verispec.hunt.DEFAULT_THRESHOLD, repeated so 'exact' does not import hypothesis
#: verispec.lp_analysis.multistep.RESTRICTIONS, repeated so the parser does not import scipy (a test ties them)
RESTRICTIONS = ("selected-path",)

#: Built-in problems for ``compare``: name -> (description, factory(exact) -> Problem).
BUILTIN_PROBLEMS = {
    "sun-toy": ("Sun et al. 2024 toy: p=(1/3,2/3), q=(2/3,1/3), context-free",
                lambda exact: sun_toy_problem(exact=exact)),
    "random": ("seeded context-dependent Dirichlet problem, V=4, depth 4, divergence 0.5, seed 0",
               lambda exact: random_problem(4, 4, 0)),
}


#: Layouts of 'check-external' (verispec.external.layouts.LAYOUTS, repeated so the parser stays light; a test
#: ties them).
EXTERNAL_LAYOUTS = ("chain", "padded", "ragged", "tree-parent", "tree-sibling", "transformers", "gpt-fast")

#: Largest --samples of 'check-external' (verispec.external.blackbox.MAX_SAMPLES, repeated so the parser stays light; a
#: test ties them).
MAX_BLACKBOX_SAMPLES = 20_000_000

#: Largest --context-file read: the pairs verispec installs take at most 32,768 tokens of context (Qwen2.5's
#: max_position_embeddings), about 128 KiB of text at 4 bytes a token; 4 MiB leaves room for any tokenizer.
MAX_CONTEXT_FILE_BYTES = 4 << 20
#: Largest --prompts file read: 16 prompts of the longest context, or thousands of ordinary ones.
MAX_PROMPTS_FILE_BYTES = 64 << 20

#: Largest --max-vocab of 'hunt': context-dependent candidates have V^(L+1) conditionals each, and every
#: candidate is analysed exactly.
MAX_HUNT_VOCAB = 10


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, no usage block
        raise VerispecError(message)


class _Done(Exception):
    """Raised by an option that has finished the command (--version); carries the exit status."""

    def __init__(self, status: int):
        super().__init__(status)
        self.status = status


class _VersionAction(argparse.Action):
    def __init__(self, option_strings, dest, **kwargs):
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        print(f"verispec {package_version()}")
        raise _Done(0)


def _number_option(*, minimum: float, strict: bool, what: str):
    """An argparse type: a finite float >= minimum (> minimum when ``strict``)."""

    def convert(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not math.isfinite(value) or value < minimum or (strict and value == minimum):
            raise argparse.ArgumentTypeError(f"must be {what}, got {text!r}")
        return value

    return convert


def _restriction_option(text: str) -> str:
    """An argparse type: a built-in class of the multi-step LP or FILE.py:NAME."""
    if text in RESTRICTIONS or ":" in text:
        return text
    shown = text if len(text) <= 30 else f"{text[:20]}..."
    raise argparse.ArgumentTypeError(f"must be one of {', '.join(RESTRICTIONS)} or FILE.py:NAME (a class of your own), "
                                     f"got {shown!r}")


def _integer_option(*, minimum: int, maximum: int | None = None, what: str):
    """An argparse type: an integer in [minimum, maximum]."""

    def convert(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or value < minimum or (maximum is not None and value > maximum):
            shown = text if len(text) <= 30 else f"{text[:20]}..."
            raise argparse.ArgumentTypeError(f"must be {what}, got {shown!r}")
        return value

    return convert


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
    check.add_argument("--call-timeout", type=_number_option(minimum=0, strict=True, what="a positive number"),
                       default=None, help="seconds one call of the function may take")
    check.add_argument("--output", metavar="FILE", help="write the witness problem (JSON) here")
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
    bound.add_argument("--max-variables", type=_integer_option(minimum=1, what="a positive integer"), default=None,
                       help="largest LP accepted (a positive integer)")
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
    decode.add_argument("--max-new-tokens", type=_integer_option(minimum=1, what="a positive integer"),
                        default=64, help="tokens to generate per prompt (default 64)")
    decode.add_argument("--seed", type=_integer_option(minimum=0, what="an integer >= 0"), default=0,
                        help="seed of the generator every random decision comes from (default 0)")
    _add_device_options(decode)
    decode.add_argument("--static-cache", action="store_true",
                        help="keep both KV caches in a StaticCache allocated once (fixed addresses)")
    decode.add_argument("--graphs", action="store_true",
                        help="replay one CUDA graph per forward width over static caches (the fast path on a GPU; "
                             "implies --static-cache)")
    decode.add_argument("--json", action="store_true", help="print one JSON object per prompt")

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
                       help="replace an existing FILE (and FILE.cells.json) that is not a sweep's, and start over")
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
    latency.add_argument("--sizes", default="1,2,4,8,16,32", help="tree sizes n at which t_p(n) is measured")
    latency.add_argument("--repeats", type=_integer_option(minimum=1, what="a positive integer"), default=5)
    latency.add_argument("--context-length", type=_integer_option(minimum=1, what="a positive integer"), default=200,
                         help="committed tokens before each timed forward (default 200)")
    latency.add_argument("--out", required=True, metavar="FILE", help="the latency model to write (atomically)")
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


#: --time-budget of exact, bound and predict when a rule of the user's own (--verifier FILE.py:NAME) runs and no
#: budget is given: such a rule may loop without ever returning to verispec, and the budget is hard (a timer
#: interrupts the rule; verispec.budget). One budget for the whole command rather than one per call of the
#: rule: a hard timer per call costs about 11 us, 22 s over an enumeration of 2,000,000 choice traces.
DEFAULT_USER_RULE_BUDGET = 600.0


#: Largest --time-budget of exact, bound and predict: a year. The hard timer (setitimer) refuses delays past
#: about 10^9.5 s on this platform ("timestamp out of range"), which a budget of 1e12 reached as a traceback.
MAX_TIME_BUDGET = 365 * 24 * 3600.0


def _time_budget_option(text: str) -> float:
    seconds = _number_option(minimum=0, strict=True, what="a positive number of seconds")(text)
    if seconds > MAX_TIME_BUDGET:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_TIME_BUDGET:.0f} seconds (a year), got {text!r}")
    return seconds


def _add_time_budget_option(parser, what: str) -> None:
    parser.add_argument("--time-budget", type=_time_budget_option, default=None, metavar="SECONDS",
                        help=f"seconds {what} may take (wall clock, hard: a rule stuck in a loop is stopped too); "
                             "past it the command exits with status 3 (default: none; "
                             f"{DEFAULT_USER_RULE_BUDGET:g} for a rule of your own, FILE.py:NAME)")


#: The hard timer of --time-budget fires this fraction of the budget after the deadline that verispec's own loops
#: stop at: work that ends at the deadline with a partial answer (predict's interval so far) prints it and
#: leaves first, while code that never returns to verispec (a user's rule in a loop) is still stopped within
#: the 10% the budget promises.
HARD_BUDGET_GRACE = 0.05


@contextlib.contextmanager
def _command_budget(args, what: str):
    """The command's --time-budget around the block (the default for a user's rule when none is given):
    verispec's loops stop at the deadline (``budget.check``), and a hard timer (verispec.budget) interrupts any
    other code ``HARD_BUDGET_GRACE`` of the budget later. Past it, AnalysisTimeoutError names the budget
    (exit 3)."""
    seconds, note = getattr(args, "time_budget", None), ""
    rule = getattr(args, "verifier", None)
    if seconds is None and rule is not None and rule not in _registry():
        seconds, note = DEFAULT_USER_RULE_BUDGET, ", the default for a rule of your own"
    if seconds is None:
        yield
        return
    from verispec import budget

    start = time.monotonic()
    try:
        with budget.time_budget(start + seconds * (1 + HARD_BUDGET_GRACE), hard=True, what=what), \
                budget.time_budget(start + seconds):
            yield
    except AnalysisTimeoutError as error:
        raise AnalysisTimeoutError(f"{error} (--time-budget {seconds:g} s{note})") from None


def _add_pair_options(parser, title: str = "models (--pair NAME, or --target MODEL --draft MODEL)"):
    """--pair, or --target and --draft: the model pair of decode, predict and derive."""
    group = parser.add_argument_group(title)
    group.add_argument("--pair", metavar="NAME", help="an installed pair (verispec models install qwen-coder)")
    group.add_argument("--target", metavar="MODEL", help="target model: a local directory or a cached model id")
    group.add_argument("--draft", metavar="MODEL", help="draft model sharing the target's tokenizer")
    return group


def _add_context_options(parser) -> None:
    contexts = parser.add_mutually_exclusive_group()
    contexts.add_argument("--context", metavar="TEXT", help="the text the block starts after (with a model pair)")
    contexts.add_argument("--context-file", metavar="FILE", help="read the context from a file")


def _add_sampling_options(parser) -> None:
    """One sampling law for target and draft alike (verispec.models.Sampling)."""
    parser.add_argument("--temperature", type=_number_option(minimum=0, strict=False, what="a finite number >= 0"),
                        default=1.0, help="sampling temperature for target and draft alike (0: greedy; default 1)")
    parser.add_argument("--top-p", type=_number_option(minimum=0, strict=True, what="a number in (0, 1]"),
                        default=None, help="nucleus sampling, applied to target and draft alike")
    parser.add_argument("--top-k", type=_integer_option(minimum=1, what="a positive integer"), default=None,
                        help="top-k sampling, applied to target and draft alike")


def _add_backend_options(parser) -> None:
    """--backend, --jobs, --address: how sweep and report run their cells (verispec.sweep.run_sweep)."""
    parser.add_argument("--backend", default="local", choices=["serial", "local", "dask", "ray"],
                        help="serial, local processes (default), or a dask / ray cluster (--address)")
    parser.add_argument("--jobs", type=_integer_option(minimum=1, what="a positive integer"), default=None,
                        help="local processes (default and at most: the cores this process may use)")
    parser.add_argument("--address", default=None,
                        help="the cluster's scheduler address (dask: tcp://host:8786, or local:N for N worker "
                             "processes started here, by default and at most the cores)")


def _add_device_options(parser) -> None:
    parser.add_argument("--device", default="cpu", help="torch device: cpu (default), cuda, cuda:1, ...")
    parser.add_argument("--dtype", default="auto", help="model weights: auto (float32 on cpu, bfloat16 on a GPU), "
                        "float32, float64, bfloat16, float16")
    parser.add_argument("--threads", type=_integer_option(minimum=1, what="a positive integer"), default=None,
                        help="CPU threads for torch (default: torch's choice)")


def _problem_from_args(args) -> Problem:
    problem = _base_problem_from_args(args)
    if getattr(args, "drafts", None) is not None:
        from verispec.simulator.deterministic import DeterministicDrafts

        return DeterministicDrafts(problem, args.drafts)
    return problem


def _base_problem_from_args(args) -> Problem:
    if args.problem is not None:
        if args.target is not None or args.draft is not None:
            raise VerispecError("give either --problem or --target/--draft, not both")
        return load_problem(args.problem, exact=args.exact)
    if args.target is None or args.draft is None:
        raise VerispecError("give a problem: --target P --draft Q, or --problem FILE")
    p = parse_distribution(args.target, exact=args.exact, name="--target")
    q = parse_distribution(args.draft, exact=args.exact, name="--draft")
    if len(p) != len(q):
        raise InvalidProblemError(f"--target has {len(p)} probabilities but --draft has {len(q)}")
    return ContextFreeProblem(p, q, exact=args.exact)


def _format(value) -> str:
    return f"{float(value):.12g}"


def plain_json(value):
    """``value`` with every number a plain Python int or float (numpy scalars and arrays converted,
    fractions as strings), mappings as dicts with string keys and sequences as lists, so that ``--json``
    output holds only str, int, float, bool, None, list and dict."""
    if value is None or type(value) in (bool, str, int, float):
        return value
    if isinstance(value, enum.Enum):
        return plain_json(value.value)
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, str):
        return str(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, Fraction):
        return str(value)
    if isinstance(value, Mapping):
        return {str(plain_json(key)): plain_json(item) for key, item in value.items()}
    if isinstance(value, (set, frozenset)):
        return sorted(plain_json(item) for item in value)
    if isinstance(value, (list, tuple)):
        return [plain_json(item) for item in value]
    if hasattr(value, "tolist"):  # numpy scalars and arrays
        return plain_json(value.tolist())
    raise TypeError(f"cannot write {type(value).__name__} as JSON")


def _print_json(data) -> None:
    print(json.dumps(plain_json(data)))


def _output_law_size(problem: Problem, drafter) -> tuple[str, str]:
    """(entries of the output law at length L+1, memory of the whole law in float64), in words."""
    size, depth = problem.vocab_size, drafter.depth
    if depth > 40:
        return f"{size}^{depth + 1}", "the output law alone would need far more memory than any machine has"
    entries = sum(size ** length for length in range(1, depth + 2))  # outputs of every length 1..L+1
    return f"{size ** (depth + 1):,}", f"the output law alone takes about {entries * 8 / 2**20:,.0f} MiB"


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


def _shown(value, exact: bool) -> str:
    return str(value) if exact else f"{float(value):.6f}"


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


def _check_output_path(path: str, option: str = "--output") -> None:
    """Refuse, before any work, an output path that cannot be written the way ``atomic_write_text`` writes
    it (a temporary file beside it, then a rename; missing parent folders are created): the check is
    ``verispec.io.check_output_file``, shared with sweep and report."""
    from verispec.io import check_output_file

    check_output_file(path, option, example="witness.json")


def _run_hunt(args) -> int:
    from verispec.hunt import hunt  # imports hypothesis; only this command needs it

    drafter = parse_tree(args.tree)
    verifier = get_verifier(args.verifier)
    if args.output:
        _check_output_path(args.output)
    largest = ContextFreeProblem([1] + [0] * (args.max_vocab - 1), [1] + [0] * (args.max_vocab - 1))
    try:
        drafter.check_problem(largest)
    except VerispecError as error:
        raise type(error)(f"{error} (hunt searches vocabularies up to --max-vocab {args.max_vocab})") from None
    from tqdm import tqdm

    def progress(count: int) -> None:
        bar.update(count - bar.n)

    with tqdm(desc="problems tried", unit=" problems", disable=not sys.stderr.isatty(), leave=False) as bar:
        result = hunt(verifier, drafter, max_vocab=args.max_vocab, max_examples=args.max_examples,
                      threshold=args.threshold, time_budget=args.time_budget,
                      context_free=True if args.context_free else None, progress=progress)
    witness = result.witness
    if witness is None:
        from verispec.hunt import next_search

        print(f"verispec: {Verdict.INCONCLUSIVE.word}: no lossy problem found for '{verifier.name}' on {drafter.spec} "
              f"(vocabularies up to {args.max_vocab}, threshold {args.threshold:g}); tried {result.describe()}; a "
              f"search proves nothing: to search further, {next_search(result, args.max_examples, args.time_budget)}",
              file=sys.stderr)
        return EXIT_INCONCLUSIVE
    problem_json = plain_json(witness.problem_json)
    text = json.dumps(problem_json)
    if args.output:
        try:
            if args.output.endswith(".npz"):  # the binary form; the witness's rationals as integer pairs
                from verispec.simulator.problems import problem_from_json, problem_to_npz

                problem_to_npz(problem_from_json(problem_json, exact=True), drafter.depth, args.output,
                               metadata={"description": f"hunt witness for {args.verifier} on {drafter.spec}"})
            else:
                atomic_write_text(args.output, text + "\n")
        except OSError as error:
            print(text)
            raise VerispecError(f"cannot write --output {args.output!r} ({error.strerror or error}); the witness "
                                "was printed on stdout instead") from None
    else:
        print(text)
    kind = "context-free" if witness.context_free else "context-dependent"
    where = args.output or "FILE"
    label = f" (the canonical problem '{witness.label}')" if witness.label else ""
    print(f"verispec: {Verdict.LOSSY.word}: witness V={witness.vocab_size} {kind}{label}, TV distance "
          f"{witness.tv_distance:.6g} after {witness.examples_tried} problems ({witness.seconds:.1f} s); reproduce "
          f"with: verispec exact --problem {where} --tree {drafter.spec} --verifier {args.verifier}", file=sys.stderr)
    return EXIT_LOSSY


def _run_check_external(args) -> int:
    from verispec.external.adapter import load_function
    from verispec.external.check import check_external

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
        problem = _problem_from_args(args)
    if args.output:
        _check_output_path(args.output)
    from tqdm import tqdm

    options = {name: value for name, value in (("rng", args.rng), ("per_row", args.per_row),
                                               ("call_timeout", args.call_timeout))
               if value not in (None, False, "explicit")}
    with tqdm(desc="problems tried", unit=" problems", disable=problem is not None or not sys.stderr.isatty(),
              leave=False) as bar:
        report = check_external(function, args.layout, args.tree, problem=problem, mode=args.mode,
                                arrays=args.arrays, device=args.device, name=args.function, samples=args.samples,
                                detect_tv=args.detect_tv, power=args.power, alpha=args.alpha, test=args.test,
                                seed=args.seed, max_vocab=args.max_vocab, max_examples=args.max_examples,
                                time_budget=args.time_budget, context_free=True if args.context_free else None,
                                suite=args.suite, progress=lambda count: bar.update(count - bar.n), **options)
    found = report.problem is not None and report.problem_source == "search"  # a witness, or a candidate
    if args.output and found:
        atomic_write_text(args.output, json.dumps(report.problem) + "\n")
    if args.json:
        print(json.dumps(plain_json(report.to_json())))
    else:
        print(report.describe())
        if found and report.verdict is not Verdict.LOSSLESS:
            where = args.output or "FILE (see --output)"
            print(f"  {'witness' if report.verdict is Verdict.LOSSY else 'candidate'}: {json.dumps(report.problem)}")
            print(f"  reproduce: verispec check-external {args.function} --layout {args.layout} --tree {args.tree} "
                  f"--problem {where} --mode {report.mode}")
    return report.exit_status


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


def _run_list(args) -> int:
    from verispec.verifiers import LOSSY_BY_DESIGN, REGISTRY

    print("verifiers:")
    for name, verifier in sorted(REGISTRY.items()):
        laws = ", ".join(sorted(law.value for law in verifier.valid_for))
        print(f"  {name:<12} valid for: {laws}")
    print("lossy by design (named explicitly, never in 'all'):")
    for name, verifier in sorted(LOSSY_BY_DESIGN.items()):
        print(f"  {name:<12} runs on every tree; typical(epsilon=E,alpha=A) sets its parameters "
              f"(default {verifier.epsilon:g}, {verifier.alpha:g}: Medusa's)")
    print("tree kinds:")
    for form in TREE_FORMS:
        print(f"  {form}")
    print("layouts of check-external:")
    print(f"  {', '.join(EXTERNAL_LAYOUTS)}")
    return 0


def _read_prompts(args) -> list[str]:
    if args.prompt is not None:
        return [args.prompt]
    from verispec.io import read_user_file

    path = Path(args.prompts)
    text = read_user_file(path, limit=MAX_PROMPTS_FILE_BYTES, what="--prompts",
                          why=f"{MAX_PROMPTS_FILE_BYTES // MAX_CONTEXT_FILE_BYTES} prompts as long as the longest "
                              "context")
    prompts = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        if path.suffix == ".jsonl":
            try:
                item = json.loads(line)
            except json.JSONDecodeError as error:
                raise VerispecError(f"{args.prompts} line {number} is not JSON: {error}") from None
            except RecursionError:
                raise VerispecError(f"{args.prompts} line {number} nests JSON too deeply to hold a prompt") from None
            item = item.get("prompt") if isinstance(item, dict) else item
            if not isinstance(item, str):
                raise VerispecError(f"{args.prompts} line {number} holds no prompt string (a JSON string, or an "
                                    "object with 'prompt')")
            prompts.append(item)
        else:
            prompts.append(line)
    if not prompts:
        raise VerispecError(f"--prompts {args.prompts!r} holds no prompt")
    return prompts


def _check_pair_args(args) -> None:
    """One-line errors for a missing or doubled model pair, before anything is loaded."""
    if args.pair is not None and (args.target is not None or args.draft is not None):
        raise VerispecError("give either --pair NAME or --target MODEL --draft MODEL, not both")
    if args.pair is None and args.target is None and args.draft is None:
        raise VerispecError("give the models: --pair NAME (e.g. qwen-coder), or --target MODEL --draft MODEL")
    if args.pair is None and (args.target is None or args.draft is None):
        raise VerispecError("give both --target MODEL and --draft MODEL (or --pair NAME)")


def _load_pair(args):
    """The pair and the sampling law of the options (offline only; --threads applied first)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing may reach a model hub at run time
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    try:
        import torch
        import transformers

        from verispec.models import Sampling, load_pair
    except ImportError as error:
        raise VerispecError(f"a model pair needs torch and transformers ({error}): pip install 'torch==2.13.0' "
                            "-e '.[torch,models]'") from None
    transformers.utils.logging.disable_progress_bar()  # one bar: ours
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    pair = load_pair(args.pair, device=args.device, dtype=args.dtype) if args.pair is not None else \
        load_pair(args.target, args.draft, device=args.device, dtype=args.dtype)
    return pair, Sampling(args.temperature, args.top_k, args.top_p)


def _decode_mode(args) -> str:
    """'plain', 'selector' or 'tree', with one-line errors for options that do not go together."""
    static = [name for name, value in (("--tree", args.tree), ("--verifier", args.verifier)) if value is not None]
    if args.plain:
        given = static + (["--selector"] if args.selector is not None else [])
        if given:
            raise VerispecError(f"--plain samples from the target alone; drop {' and '.join(given)}")
        return "plain"
    if args.selector is not None:
        if static:
            raise VerispecError(f"--selector chooses every block's tree and verifier; drop {' and '.join(static)}")
        return "selector"
    if args.tree is None or args.verifier is None:
        raise VerispecError("give --tree TREE and --verifier NAME, or --selector FILE, or --plain")
    return "tree"


def _run_decode(args) -> int:
    _check_pair_args(args)
    mode = _decode_mode(args)
    drafter = verifier = policy = None
    if mode == "tree":
        drafter = parse_tree(args.tree)
        verifier = get_verifier(args.verifier)
        check_compatible(verifier, drafter)
    prompts = _read_prompts(args)
    if mode == "tree":
        from verispec.models.decoding import check_decode_tree

        check_decode_tree(drafter)  # the node limit before any model is loaded; the vocabulary's once it is
    selector = None
    if mode == "selector":
        from verispec.selector import Selector, SelectorPolicy  # only here: models never import the selector

        selector = Selector.load(args.selector)  # before the pair: a bad file costs no model load
    pair, sampling = _load_pair(args)
    if selector is not None:
        selector.check_fits(pair=pair.name, vocab_size=pair.vocab_size, sampling=sampling)
        policy = SelectorPolicy(selector)
    from tqdm import tqdm

    from verispec.models import generate, sample_target

    what = {"plain": "plain sampling", "tree": f"{getattr(verifier, 'name', '')} on {getattr(drafter, 'spec', '')}",
            "selector": f"selector {args.selector}"}[mode]
    with tqdm(total=args.max_new_tokens * len(prompts), desc="tokens", unit=" tok", disable=not sys.stderr.isatty(),
              leave=False) as bar:
        for index, prompt in enumerate(prompts):
            options = {"static_cache": args.static_cache, "graphs": args.graphs, "progress": bar}
            if mode == "plain":
                generation = sample_target(pair, prompt, args.max_new_tokens, sampling, args.seed + index, **options)
            else:
                generation = generate(pair, prompt, drafter, verifier, args.max_new_tokens, sampling,
                                      args.seed + index, selector=policy, **options)
            summary = generation.summary()
            if args.json:
                row = {"prompt": prompt, "pair": pair.name, "mode": mode,
                       "tree": drafter.spec if drafter is not None else None,
                       "verifier": verifier.name if verifier is not None else None}
                if policy is not None:
                    row["selector"] = args.selector
                    row["actions"] = [f"{tree} {name}" for tree, name in policy.actions()]
                print(json.dumps({**row, "device": str(pair.device),
                                  "dtype": str(pair.target.dtype).removeprefix("torch."),
                                  "temperature": args.temperature, "top_k": args.top_k, "top_p": args.top_p,
                                  "seed": args.seed + index, **summary}))
            else:
                print(generation.text)
                rate = f"{summary['tokens_per_s']:.2f}" if summary["tokens_per_s"] else "n/a"
                print(f"# {summary['new_tokens']} tokens in {summary['blocks']} blocks: "
                      f"{summary['tokens_per_target_call']:.3f} tokens per target call, {rate} tokens/s "
                      f"({what}, {pair.device})", file=sys.stderr)
    return 0


def _run_models(args) -> int:
    from verispec.models.install import PAIRS, install_pair, installed_pair

    if args.action == "install":
        result = install_pair(args.name, cache=args.cache, progress=True, keep_gguf=args.keep_gguf)
        print(f"installed {args.name}: target {result['target_dir']}, draft {result['draft_dir']}")
        return 0
    for name, pair in sorted(PAIRS.items()):
        try:
            target_dir, _ = installed_pair(name, args.cache)
            state = f"installed in {target_dir.parent}"
        except VerispecError:
            state = f"not installed (verispec models install {name})"
        print(f"{name}: {pair.description}; {state}")
    return 0


def _model_problem(args, horizon: int):
    """The ModelProblem of --pair or --target/--draft at --context or --context-file, and its settings."""
    _check_pair_args(args)
    if args.context is None and args.context_file is None:
        raise VerispecError("give the context the block starts after: --context TEXT or --context-file FILE")
    context = args.context
    if args.context_file is not None:
        from verispec.io import read_user_file

        context = read_user_file(args.context_file, limit=MAX_CONTEXT_FILE_BYTES, what="--context-file",
                                 why="the models take 32,768 tokens at most, about 128 KiB of text")
    pair, sampling = _load_pair(args)
    from verispec.models.problem import ModelProblem

    problem = ModelProblem(pair, context, sampling, horizon=horizon)
    settings = {"pair": pair.name, "context": context, "context_tokens": len(problem.context),
                "device": str(pair.device), "dtype": str(pair.target.dtype).removeprefix("torch."),
                "temperature": args.temperature, "top_k": args.top_k, "top_p": args.top_p}
    return problem, settings


def _run_derive(args) -> int:
    from verispec.models.derive import check_derive_size, derive_problem, write_derived

    check_derive_size(args.vocab, args.depth)  # before the models are loaded
    problem, settings = _model_problem(args, args.depth)
    if args.vocab > problem.vocab_size:
        raise VerispecError(f"--vocab {args.vocab} exceeds the pair's vocabulary of {problem.vocab_size} tokens")
    table, provenance = derive_problem(problem, args.vocab, args.depth, progress=sys.stderr.isatty())
    description = (f"Derived by verispec derive from {settings['pair']} after a context of "
                   f"{settings['context_tokens']} tokens: at each prefix the top {args.vocab - 1} tokens by p + q "
                   f"and an 'other' bucket (token {args.vocab - 1}) holding the rest of each law; after the "
                   "bucket, the conditionals of its likeliest token.")
    write_derived(args.output, table, args.depth, provenance, description,
                  {**settings, "vocab": args.vocab, "depth": args.depth, "forward_passes": problem.forward_passes})
    worst = max(max(entry["other_target"], entry["other_draft"]) for entry in provenance.values())
    print(f"wrote {args.output}: V = {args.vocab}, depth {args.depth}, {len(provenance)} prefixes, "
          f"{problem.forward_passes} forward passes of each model; largest 'other' mass {worst:.3g}")
    return 0


def _run_predict(args) -> int:
    with _command_budget(args, "the prediction"):
        return _predict(args)


def _predict(args) -> int:
    from verispec.simulator.certified import DEFAULT_MAX_ROWS, certify

    drafter = parse_tree(args.tree)
    verifier = get_verifier(args.verifier)
    check_compatible(verifier, drafter)
    sources = [args.pair is not None, args.target is not None or args.draft is not None, args.problem is not None]
    if sum(sources) != 1:
        raise VerispecError("give one source: --pair NAME, --target MODEL --draft MODEL, or --problem FILE")
    if args.problem is not None:
        if args.context is not None or args.context_file is not None:
            raise VerispecError("--context belongs with a model pair; a problem file holds its own conditionals")
        problem = load_problem(args.problem)
        source = {"problem": args.problem}
    else:
        problem, source = _model_problem(args, drafter.depth)
    # under --time-budget (set by _run_predict) the walk returns the interval of its last complete round
    result = certify(problem, drafter, verifier, args.epsilon, max_rows=args.max_rows or DEFAULT_MAX_ROWS,
                     progress=sys.stderr.isatty())
    status = 0 if result.reached else EXIT_INCONCLUSIVE  # the interval is as narrow as asked, or not (yet)
    if args.json:
        print(json.dumps({**source, **result.as_dict()}))
        return status
    print(f"E[tau+1] of {verifier.name} on {drafter.spec}: [{result.lower:.6f}, {result.upper:.6f}] "
          f"(width {result.width:.2e}, epsilon {args.epsilon:g}{'' if result.reached else ', NOT reached'})")
    for depth, (low, high) in enumerate(zip(result.acceptance_lower, result.acceptance_upper), start=1):
        print(f"  P(tau >= {depth}) in [{low:.6f}, {high:.6f}]")
    passes = "" if result.forward_passes is None else f", {result.forward_passes} forward passes of each model"
    print(f"# {result.method}: {result.prefixes_expanded} prefixes expanded, {result.rows_evaluated} rows "
          f"evaluated{passes}, {result.seconds:.1f} s")
    if result.note:
        print(f"# {result.note}", file=sys.stderr)
    return status


def _list_option(text: str, kind, what: str) -> tuple:
    values = []
    for part in text.split(","):
        try:
            values.append(kind(part.strip()))
        except ValueError:
            raise VerispecError(f"cannot read {part.strip()!r} in {text!r} as {what}; give a comma-separated list") \
                from None
    return tuple(values)


def _latency_model(args):
    from verispec.latency import LatencyModel
    from verispec.sweep import DEFAULT_LATENCY

    if args.latency is not None:
        if args.cost_ratio is not None:
            raise VerispecError("give either --latency FILE or --cost-ratio, not both")
        return LatencyModel.load(args.latency)
    if args.cost_ratio is None:
        return DEFAULT_LATENCY if args.per_node == 0 else LatencyModel.from_ratio(4.0, args.per_node)
    return LatencyModel.from_ratio(args.cost_ratio, args.per_node)


def _run_latency(args) -> int:
    from verispec.io import atomic_write_json
    from verispec.models.latency import measure_latency

    _check_pair_args(args)
    sizes = _list_option(args.sizes, int, "a tree size")
    args.temperature, args.top_k, args.top_p = 1.0, None, None  # no sampling here
    pair, _ = _load_pair(args)
    model = measure_latency(pair, context_length=args.context_length, sizes=sizes, repeats=args.repeats)
    atomic_write_json(args.out, {**model.as_dict(), "load_average": os.getloadavg()[0]})
    print(f"t_q = {model.draft_step:.3f} ms; t_p(n) = " + ", ".join(
        f"{n}: {time_:.3f}" for n, time_ in zip(model.target_sizes, model.target_times))
        + f" ms; {model.source}; wrote {args.out}")
    return 0


def _note_capped_jobs(note: str) -> None:
    """The one line on stderr when --jobs, or the N of --address local:N, asks for more processes than there are
    cores: sweep and report cap it (``verispec.sweep.worker_processes``) and call this once their outputs have
    passed their checks, so a refusal stays one line."""
    print(f"verispec: note: {note}", file=sys.stderr)


def _run_report(args) -> int:
    from verispec.report import build_report

    start = time.perf_counter()
    path = build_report(args.out, quick=args.quick, backend=args.backend, jobs=args.jobs, address=args.address,
                        progress=sys.stderr.isatty(), pair=args.pair, device=args.device, overwrite=args.overwrite,
                        note=_note_capped_jobs)
    print(f"wrote {path} ({time.perf_counter() - start:.1f} s)")
    return 0


def _run_sweep(args) -> int:
    from verispec.sweep import SweepGrid, parse_seeds, run_sweep, write_problems

    grid = SweepGrid(
        families=tuple(part.strip() for part in args.families.split(",") if part.strip()),
        vocab_sizes=_list_option(args.vocab, int, "a vocabulary size"),
        divergences=_list_option(args.divergence, float, "a divergence"),
        temperatures=_list_option(args.temperature, float, "a temperature"),
        concentrations=_list_option(args.concentration, float, "a concentration"),
        seeds=parse_seeds(args.seeds),
        trees=tuple(part.strip() for part in args.trees.split(";") if part.strip()),
        verifiers=split_names(args.verifiers),
        methods=tuple(part.strip() for part in args.methods.split(",") if part.strip()),
        gap=args.gap, cell_timeout=args.cell_timeout, latency=_latency_model(args))
    start = time.perf_counter()
    # the problems are the sweep's inputs: written (or refused, before any cell runs) first
    written = None if args.save_problems is None else write_problems(grid, args.save_problems)
    rows = run_sweep(grid, args.out, backend=args.backend, jobs=args.jobs, address=args.address,
                     progress=sys.stderr.isatty(), overwrite=args.overwrite, note=_note_capped_jobs)
    refused = [row for row in rows if row["status"] != "ok"]
    # the table holds this grid's cells only: rows of earlier grids are said to stay in the store
    elsewhere = f"; {rows.elsewhere} rows of other grids kept in {args.out}.cells.json only, not in the table" \
        if rows.elsewhere else ""
    print(f"{len(rows)} cells in {args.out} ({len(refused)} refused; {rows.computed} computed now, {rows.reused} "
          f"from the row store; {rows.skipped} cells left out, their verifier invalid for the tree's draft "
          f"law{elsewhere}), {time.perf_counter() - start:.1f} s")
    for row in refused[:5]:
        print(f"  refused: {row['family']} V={row['vocab']} seed={row['seed']} {row['tree']} {row['verifier']}: "
              f"{row['reason']}")
    if written is not None:
        print(f"{len(written)} problems written to {args.save_problems} (.npz; 'verispec exact --problem FILE')")
    return 0


def _run_selector(args) -> int:
    from verispec.selector.command import run

    return run(args, _load_pair)


def main(argv: list[str] | None = None) -> int:
    args = None
    try:
        args = _build_parser().parse_args(argv)
        return {"exact": _run_exact, "compare": _run_compare, "hunt": _run_hunt,
                "check-external": _run_check_external,
                "optimum": _run_optimum, "bound": _run_bound, "list": _run_list, "decode": _run_decode,
                "models": _run_models, "predict": _run_predict,
                "derive": _run_derive, "sweep": _run_sweep, "latency": _run_latency,
                "report": _run_report, "selector": _run_selector}[args.command](args)
    except _Done as done:
        return done.status
    except AnalysisTimeoutError as error:  # no answer within --time-budget: not bad input
        message = " ".join(str(error).split())
        print(f"verispec: {Verdict.INCONCLUSIVE.word}: {message}; run again with a larger --time-budget",
              file=sys.stderr)
        return EXIT_INCONCLUSIVE
    except VerispecError as error:
        message = " ".join(str(error).split())
        print(f"verispec: error: {message}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("verispec: interrupted", file=sys.stderr)
        return 130
    except Exception as error:
        # A user's rule (--verifier FILE.py:NAME) may fail in any way: that is bad input, on one line.
        # Anything else is a bug in verispec and keeps its traceback.
        user_rule = getattr(args, "verifier", None) or getattr(args, "function", None)
        if user_rule is None or user_rule in _registry() or str(user_rule).startswith("typical"):
            raise
        message = " ".join(f"{type(error).__name__}: {error}".split())
        print(f"verispec: error: the rule {user_rule} raised {message}", file=sys.stderr)
        return EXIT_BAD_INPUT


def entry_point() -> None:
    sys.exit(main())
