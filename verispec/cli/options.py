"""The command line's shared argument types and option groups, and the constants its parser needs (repeated
from their sources so that --help imports no numpy; tests/test_cli.py ties each to its source)."""

from __future__ import annotations

import argparse
import contextlib
import math
import time

from verispec import package_version
from verispec.cli.common import _registry
from verispec.errors import AnalysisTimeoutError, VerispecError

#: verispec.simulator.drafters.MAX_TREE_PARAMETER
MAX_TREE_PARAMETER = 10**6

#: verispec.simulator.engine.METHODS
METHODS = ("auto", "closed-form", "enumerate", "dp", "dp-metrics", "fast-enumeration", "rule-dp")

#: The forms of verispec.simulator.drafters.TREE_KINDS, in its order
TREE_FORMS = ("chain:L", "iid:K,L", "delayed:K,L1,L2", "branch:b1,b2,...", "branch-iid:b1,b2,...", "hub",
              "hub-tree:L", "greedy:K", "greedy-tree:K,L", "dyspec:N", "argmax-chain:L", "topk-chain:k,L")

DEFAULT_THRESHOLD = 1e-9  # verispec.hunt.DEFAULT_THRESHOLD, repeated so 'exact' does not import hypothesis

#: verispec.lp_analysis.multistep.RESTRICTIONS, repeated so the parser does not import scipy (a test ties them)
RESTRICTIONS = ("selected-path",)

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

#: Largest token count of a context the models see (decode --max-new-tokens, latency --context-length): Qwen2.5's
#: max_position_embeddings, the longest context of the pairs verispec installs. A static cache holds this many
#: slots per layer, allocated at once (--max-new-tokens 10^12 asked for a terabyte).
MAX_CONTEXT_TOKENS = 32_768

#: Largest tree size of 'latency --sizes' (verispec.models.decoding.MAX_DECODE_NODES, repeated so the parser stays
#: light; a test ties them): each size is one forward of that many new tokens, as a decoded block's tree.
MAX_DECODE_NODES = 4096

#: Largest --repeats of 'latency': each repeat is one timed forward per size; the median of a thousand is as
#: steady as a median gets.
MAX_LATENCY_REPEATS = 1000

#: Largest --threads: torch sets up per-thread state for every thread asked for at once (--threads 10^9 asked for
#: 88 GB); no machine verispec runs on has more cores than this.
MAX_THREADS = 1024

#: Largest --max-variables of 'bound': HiGHS indexes an LP's columns with 32-bit integers.
MAX_LP_VARIABLES = 2**31 - 1


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


#: --call-timeout of every command that runs code of the user's own (FILE.py:NAME): the longest one call into it
#: may take (loading the file, one call of the rule, class or function) before the command stops with status 3.
#: A watchdog thread looks at the running stack (verispec.budget.CommandGuard), so a call costs nothing extra.
DEFAULT_CALL_TIMEOUT = 60.0


def _add_call_timeout_option(parser) -> None:
    parser.add_argument("--call-timeout", type=_time_budget_option, default=DEFAULT_CALL_TIMEOUT, metavar="SECONDS",
                        help="seconds one call into your own code (FILE.py:NAME) may take: loading the file, and each "
                             "call of the rule, class or function in it (hard: a loop is stopped too); past it the "
                             f"command exits with status 3 (default {DEFAULT_CALL_TIMEOUT:g})")


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
    parser.add_argument("--threads", type=_integer_option(minimum=1, maximum=MAX_THREADS,
                                                          what=f"an integer from 1 to {MAX_THREADS}"), default=None,
                        help="CPU threads for torch (default: torch's choice)")


def _list_option(text: str, kind, what: str) -> tuple:
    values = []
    for part in text.split(","):
        try:
            values.append(kind(part.strip()))
        except ValueError:
            raise VerispecError(f"cannot read {part.strip()!r} in {text!r} as {what}; give a comma-separated list") \
                from None
    return tuple(values)


def _check_problem_output(path: str, option: str = "--output", *, overwrite: bool = False) -> None:
    """Refuse, before any work, a path where a problem file (a witness, a derived problem) cannot be written the way
    ``atomic_output`` writes it (a temporary file beside it, then a rename; missing parent folders are created),
    or an existing file there that is not a problem file, unless ``overwrite``: ``verispec.io.check_output``, the
    guard of every writer."""
    from verispec.io import check_output
    from verispec.simulator.problems import PROBLEM_FILE

    check_output(path, PROBLEM_FILE, what=option, overwrite=overwrite)


def _add_overwrite_option(parser, what: str) -> None:
    """--overwrite of a command that writes a file: replace an existing file that is not this tool's ``what``."""
    parser.add_argument("--overwrite", action="store_true",
                        help=f"replace an existing file that is not {what} (by default it is refused, untouched)")
