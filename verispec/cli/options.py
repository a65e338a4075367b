"""The command line's shared argument types and option groups (standard library only: every command's parser is
built from them at each start, --help included), and the readers of the groups whose meaning spans options
(--time-budget, the latency model)."""

from __future__ import annotations

import argparse
import contextlib
import math
import time

from verispec.errors import AnalysisTimeoutError, VerispecError
from verispec.guard.limits import BACKENDS, MAX_PROJECTION, MAX_RATIONAL_SECONDS, MAX_THREADS
from verispec.version import package_version


class Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line (``VerispecError``, exit status 2), with no usage block."""

    def error(self, message):
        raise VerispecError(message)


class Done(Exception):
    """Raised by an option that has finished the command (--version); carries the exit status."""

    def __init__(self, status: int):
        super().__init__(status)
        self.status = status


class VersionAction(argparse.Action):
    """--version: print 'verispec VERSION' and finish with status 0."""

    def __init__(self, option_strings, dest, **kwargs):
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        print(f"verispec {package_version()}")
        raise Done(0)


def number_option(*, minimum: float, strict: bool, what: str):
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


def integer_option(*, minimum: int, maximum: int | None = None, what: str):
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
#: interrupts the rule; verispec.guard.budget). One budget for the whole command rather than one per call of the
#: rule: a hard timer per call costs about 11 us, 22 s over an enumeration of 2,000,000 choice traces.
DEFAULT_USER_RULE_BUDGET = 600.0

#: Seconds of 'exact --exact' when no --time-budget is given (``verispec.guard.limits.MAX_RATIONAL_SECONDS``). The
#: engine
#: refuses up front what its least rational slowdown already puts past it
#: (``verispec.simulator.engine.check_rational_cost``), but how far the numbers grow is known only as they run, so
#: an exact run that passed every check (spectr on iid:50,2 at V = 4, 0.5 s in float) ends at this budget with
#: status 3 instead of running for hours.
DEFAULT_EXACT_BUDGET = MAX_RATIONAL_SECONDS

#: Largest --time-budget of exact, bound and predict: a year. The hard timer (setitimer) refuses delays past
#: about 10^9.5 s on this platform ("timestamp out of range"), which a budget of 1e12 reached as a traceback.
MAX_TIME_BUDGET = 365 * 24 * 3600.0


def _time_budget_option(text: str) -> float:
    seconds = number_option(minimum=0, strict=True, what="a positive number of seconds")(text)
    if seconds > MAX_TIME_BUDGET:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_TIME_BUDGET:.0f} seconds (a year), got {text!r}")
    return seconds


def add_time_budget_option(parser, what: str) -> None:
    """--time-budget of exact, bound and predict (read by ``command_budget``)."""
    parser.add_argument("--time-budget", type=_time_budget_option, default=None, metavar="SECONDS",
                        help=f"seconds {what} may take (wall clock, hard: a rule stuck in a loop is stopped too); "
                             "past it the command exits with status 3 (default: none; "
                             f"{DEFAULT_USER_RULE_BUDGET:g} for a rule of your own, FILE.py:NAME)")


#: --call-timeout of every command that runs code of the user's own (FILE.py:NAME): the longest one call into it
#: may take (loading the file, one call of the rule, class or function) before the command stops with status 3.
#: A watchdog thread looks at the running stack (verispec.guard.budget.CommandGuard), so a call costs nothing extra.
DEFAULT_CALL_TIMEOUT = 60.0


def add_call_timeout_option(parser) -> None:
    """--call-timeout of every command that runs code of the user's own (read by ``verispec.cli.main``)."""
    parser.add_argument("--call-timeout", type=_time_budget_option, default=DEFAULT_CALL_TIMEOUT, metavar="SECONDS",
                        help="seconds one call into your own code (FILE.py:NAME) may take: loading the file, and each "
                             "call of the rule, class or function in it (hard: a loop is stopped too); past it the "
                             f"command exits with status 3 (default {DEFAULT_CALL_TIMEOUT:g})")


#: The hard timer of --time-budget fires this fraction of the budget after the deadline that verispec's own loops
#: stop at: work that ends at the deadline with a partial answer (predict's interval so far) prints it and
#: leaves first, while code that never returns to verispec (a user's rule in a loop) is still stopped within
#: the 10% the budget promises.
HARD_BUDGET_GRACE = 0.05


def _is_registered(name: str) -> bool:
    """Whether ``name`` is one of verispec's rules (the registry's, a lossy-by-design one, one with parameters, or
    ``lv:<base>``) rather than a rule of the user's own, which gets a default budget."""
    from verispec.verifiers import is_registered

    return is_registered(name)


@contextlib.contextmanager
def command_budget(args, what: str):
    """The command's --time-budget around the block (the default for a user's rule when none is given):
    verispec's loops stop at the deadline (``budget.check``), and a hard timer (verispec.guard.budget) interrupts any
    other code ``HARD_BUDGET_GRACE`` of the budget later. Past it, AnalysisTimeoutError names the budget
    (exit 3)."""
    seconds, note = getattr(args, "time_budget", None), ""
    rule = getattr(args, "verifier", None)
    if seconds is None and rule is not None and not _is_registered(rule):
        seconds, note = DEFAULT_USER_RULE_BUDGET, ", the default for a rule of your own"
    if seconds is None and getattr(args, "command", None) == "exact" and getattr(args, "exact", False):
        seconds, note = DEFAULT_EXACT_BUDGET, ", the default for --exact"
    if seconds is None:
        yield
        return
    from verispec.guard import budget

    start = time.monotonic()
    try:
        with budget.time_budget(start + seconds * (1 + HARD_BUDGET_GRACE), hard=True, what=what), \
                budget.time_budget(start + seconds):
            yield
    except AnalysisTimeoutError as error:
        raise AnalysisTimeoutError(f"{error} (--time-budget {seconds:g} s{note})") from None


def add_pair_options(parser, title: str = "models (--pair NAME, or --target MODEL --draft MODEL)"):
    """--pair, or --target and --draft: the model pair of decode, predict, derive and latency."""
    group = parser.add_argument_group(title)
    group.add_argument("--pair", metavar="NAME", help="an installed pair (verispec models install qwen-coder)")
    group.add_argument("--target", metavar="MODEL", help="target model: a local directory or a cached model id")
    group.add_argument("--draft", metavar="MODEL", help="draft model sharing the target's tokenizer")
    return group


def add_context_options(parser) -> None:
    """--context or --context-file: the text a block starts after (predict, derive)."""
    contexts = parser.add_mutually_exclusive_group()
    contexts.add_argument("--context", metavar="TEXT", help="the text the block starts after (with a model pair)")
    contexts.add_argument("--context-file", metavar="FILE", help="read the context from a file")


def add_sampling_options(parser) -> None:
    """One sampling law for target and draft alike (verispec.models.Sampling)."""
    parser.add_argument("--temperature", type=number_option(minimum=0, strict=False, what="a finite number >= 0"),
                        default=1.0, help="sampling temperature for target and draft alike (0: greedy; default 1)")
    parser.add_argument("--top-p", type=number_option(minimum=0, strict=True, what="a number in (0, 1]"),
                        default=None, help="nucleus sampling, applied to target and draft alike")
    parser.add_argument("--top-k", type=integer_option(minimum=1, what="a positive integer"), default=None,
                        help="top-k sampling, applied to target and draft alike")


def add_backend_options(parser, *, default: str | None = "local", default_help: str | None = None) -> None:
    """--backend, --jobs, --address: how sweep, report and selector dataset run their cells. ``default``: the
    backend without --backend (None: the command decides, as ``default_help`` says)."""
    parser.add_argument("--backend", default=default, choices=BACKENDS,
                        help="serial, local processes (default), or a dask / ray cluster (--address)"
                        if default_help is None else
                        f"serial, local processes, or a dask / ray cluster (--address); default: {default_help}")
    parser.add_argument("--jobs", type=integer_option(minimum=1, what="a positive integer"), default=None,
                        help="local processes (default and at most: the cores this process may use)")
    parser.add_argument("--address", default=None,
                        help="the cluster's scheduler address (dask: tcp://host:8786, or local:N for N worker "
                             "processes started here, by default and at most the cores)")


def add_device_options(parser) -> None:
    """--device, --dtype, --threads: where and how a model pair runs."""
    parser.add_argument("--device", default="cpu", help="torch device: cpu (default), cuda, cuda:1, ...")
    parser.add_argument("--dtype", default="auto", help="model weights: auto (float32 on cpu, bfloat16 on a GPU), "
                        "float32, float64, bfloat16, float16")
    add_threads_option(parser, "CPU threads for torch (default: torch's choice)")


def add_threads_option(parser, help: str, default: int | None = None) -> None:
    """--threads N: torch's CPU threads, 1 to MAX_THREADS (default ``default``; None: torch's choice)."""
    parser.add_argument("--threads", type=integer_option(minimum=1, maximum=MAX_THREADS,
                                                         what=f"an integer from 1 to {MAX_THREADS}"), default=default,
                        help=help)


def add_projection_option(parser, help: str) -> None:
    """--projection WIDTH: the selector network's hidden-state projection width, 1 to MAX_PROJECTION (default None:
    the paper's 128)."""
    parser.add_argument("--projection", type=integer_option(minimum=1, maximum=MAX_PROJECTION,
                                                            what=f"an integer in [1, {MAX_PROJECTION}]"),
                        default=None, metavar="WIDTH", help=help)


def add_latency_options(parser, what: str, default: str) -> None:
    """--cost-ratio, --per-node and --latency: the latency model T = depth t_q + t_p(nodes) that prices a block
    (verispec.latency), for every command that reports or optimises throughput; read by ``latency_model``.
    ``default``: the model used when none is given, in words."""
    price = parser.add_argument_group(f"latency model {what} (default: {default})")
    price.add_argument("--cost-ratio", type=number_option(minimum=0, strict=True, what="a positive number"),
                       default=None, help="t_p / t_q: one target forward in draft steps")
    price.add_argument("--per-node", type=number_option(minimum=0, strict=False, what="a number >= 0"),
                       default=0.0, help="with a cost ratio (--cost-ratio, or the default one): each tree node beyond "
                                         "the first adds this fraction of t_p (default 0)")
    price.add_argument("--latency", metavar="FILE", default=None,
                       help="a latency model measured on a pair ('verispec latency --out FILE'), instead of a "
                            "cost ratio")


def latency_model(args, default):
    """The latency model of ``add_latency_options``: --latency FILE, else the cost ratio --cost-ratio with
    --per-node (``LatencyModel.from_ratio``), else ``default``: the command's cost ratio (a number, which
    --per-node applies to as well) or its model (a ``LatencyModel``, which --per-node cannot change)."""
    from verispec.latency import LatencyModel

    if args.latency is not None:
        if args.cost_ratio is not None:
            raise VerispecError("give either --latency FILE or --cost-ratio, not both")
        if args.per_node:
            raise VerispecError("--per-node goes with --cost-ratio; a --latency FILE holds its own time per tree size")
        return LatencyModel.load(args.latency)
    if args.cost_ratio is not None:
        return LatencyModel.from_ratio(args.cost_ratio, args.per_node)
    if not isinstance(default, LatencyModel):
        return LatencyModel.from_ratio(default, args.per_node)
    if args.per_node:
        raise VerispecError("--per-node goes with --cost-ratio")
    return default


def list_option(text: str, kind, what: str) -> tuple:
    """The values of a comma-separated option, each read by ``kind``; one line naming the one that is not."""
    values = []
    for part in text.split(","):
        try:
            values.append(kind(part.strip()))
        except ValueError:
            raise VerispecError(f"cannot read {part.strip()!r} in {text!r} as {what}; give a comma-separated list") \
                from None
    return tuple(values)


def check_problem_output(path: str, option: str = "--output", *, overwrite: bool = False) -> None:
    """Refuse, before any work, a path where a problem file (a witness, a derived problem) cannot be written the way
    ``atomic_output`` writes it (a temporary file beside it, then a rename; missing parent folders are created),
    or an existing file there that verispec cannot show it wrote (no ``written_by`` marker of a problem file: a
    hand-written problem file is refused too), unless ``overwrite``: ``verispec.files.io.check_output``, the guard of
    every writer."""
    from verispec.files.io import check_output
    from verispec.simulator.problem_files import PROBLEM_FILE

    check_output(path, PROBLEM_FILE, what=option, overwrite=overwrite)


def add_overwrite_option(parser, what: str) -> None:
    """--overwrite of a command that writes a file: replace an existing file that is not this tool's ``what``."""
    parser.add_argument("--overwrite", action="store_true",
                        help=f"replace an existing file that is not {what} verispec wrote (one without its "
                             "written_by marker, even a hand-written one of the same format; by default it is "
                             "refused, untouched)")


@contextlib.contextmanager
def witness_output(args):
    """For the block: ``--output`` (where given) checked by the writers' rule (``check_problem_output``) and for
    room, then its lock held (``verispec.files.store_lock``), so that a second search into the same file is refused at
    start and each reproduce line names a file that holds its own witness (``check-external``, ``hunt``)."""
    if not args.output:
        yield
        return
    check_problem_output(args.output, overwrite=args.overwrite)
    from verispec.files.store_lock import store_lock
    from verispec.study.script_files import SMALL_FILE_ROOM, check_free_space

    check_free_space([args.output], "--output", SMALL_FILE_ROOM)  # a full disk, before the search, not after it
    with store_lock(args.output, what="--output"):
        yield
