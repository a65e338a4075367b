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
    verispec sweep   --trees T1;T2 --verifiers all [--families F] [--vocab V] [--seeds S] --out FILE.csv
                                                      exact analyses over a grid, one tidy row a cell, resumable
    verispec report  [--quick] --out DIR [--selector-dataset FILE]     the comparison study: tables, figures, data
    verispec latency --pair NAME --out FILE                          a pair's forward times on this machine
    verispec decode  (--pair NAME | --target MODEL --draft MODEL) (--prompt TEXT | --prompts FILE)
                     (--tree TREE --verifier NAME | --selector FILE | --plain) [--temperature T] [--top-p P]
                     [--top-k K] [--max-new-tokens N] [--seed S] [--device D] [--dtype D] [--json]
                                                      real speculative decoding (or plain sampling)
    verispec decode  ... --plain | --selector FILE                   plain sampling; a tree chosen per block
    verispec models  install NAME | list                             the real model pairs (qwen-coder)
    verispec selector dataset | train | evaluate | study | verdict   the delay selector (verispec.cli.selector)
    verispec predict (--pair NAME | --target MODEL --draft MODEL) (--context TEXT | --context-file FILE)
                     --tree TREE --verifier NAME [--epsilon E] [--temperature T] [--top-p P] [--top-k K] [--json]
    verispec predict --problem FILE --tree TREE --verifier NAME [--epsilon E] [--json]
                                                      certified interval on E[tau+1] (any vocabulary size)
    verispec derive  (--pair NAME | --target MODEL --draft MODEL) (--context TEXT | --context-file FILE)
                     --vocab V --depth L --output FILE [--temperature T] [--top-p P] [--top-k K]
                                                      a real context as a V-token problem file
    verispec check-external FILE.py:FUNCTION --layout LAYOUT --tree TREE [--target P --draft Q | --problem FILE]
                     [--mode auto|exact|blackbox] [--json]         check verification code written elsewhere
    verispec check-engine vllm|transformers|mlx-lm [--check NAMES] [--tree TREE] [--source FILE] [--json]
                                                      an installed engine's shipped sampler, unmodified, exactly
    verispec --version                                               'verispec VERSION'

Exit statuses: 0 done (for a check: lossless, proven or powered), 1 lossy (a witness), 2 bad input (one line on
stderr), 3 inconclusive (a search that found nothing, a time limit), 4 raises (code under check raised, exited or
crashed), 70 an error inside verispec itself (a bug: its traceback, never 1), 141 the reader of the output went
away (``| head``). '--fail-if-lossy' refuses (status 2) a method that
cannot check losslessness (dp-metrics), rather than guessing a verdict. exact, bound and predict take
'--time-budget SECONDS' (hard; 600 s by default for a rule of your own): past it they exit with status 3, and
so does predict when its interval is still wider than --epsilon. exact, hunt, bound, predict, decode and
check-external take '--call-timeout SECONDS' (60 s by default): the longest one call into your own code
(FILE.py:NAME) may take, loading the file included; past it they exit with status 3. Every time limit ends the
same way, wherever it lands: one INCONCLUSIVE line on stderr and status 3. A command that runs code of your own
runs it in a sandbox process beside a supervised worker (verispec.guard.supervisor, verispec.guard.sandbox): code that
exits or
crashes ends the command RAISES (status 4), never 0, it cannot reach the worker's verdict or the channel that
reports it, and nothing it started outlives the command. A SIGINT, SIGTERM or SIGHUP from outside is the user's
stop: status 128 + the signal's number, one line, no verdict.
"""

from __future__ import annotations

import sys

from verispec.cli.common import plain_json
from verispec.cli.options import Done
from verispec.cli.parser import COMMANDS, build_parser
from verispec.errors import AnalysisTimeoutError, VerispecError
from verispec.guard import budget
from verispec.verdict import EXIT_BAD_INPUT, EXIT_INCONCLUSIVE, EXIT_INTERNAL, Verdict

__all__ = ["UserStop", "entry_point", "main", "plain_json", "stop_on_signals", "user_code_specs"]


def main(argv: list[str] | None = None) -> int:
    """Run one command and return its exit status. A command that runs code of the user's own runs it in a
    supervised worker process (``verispec.guard.supervisor``): whatever that code does to the process, the status is
    verispec's own."""
    try:
        args = build_parser().parse_args(argv)
        # the command line as given, for the run records of result files (main([...]) from Python as much as a shell)
        args.command_line = ["verispec", *(sys.argv[1:] if argv is None else argv)]
    except Done as done:
        return done.status
    except VerispecError as error:  # the parser's own one line (verispec.cli.options.Parser)
        return _bad_input(error)
    from verispec.cli import confined
    from verispec.guard import supervisor

    try:
        confined.check_outputs(args)
        with confined.json_out_lock(args):  # one writer of --json-out at a time: a second run is refused
            specs = user_code_specs(args)
            if specs and supervisor.available():
                return supervisor.run_supervised(lambda: _run(args), _supervision(args, specs))
            if specs or getattr(args, "json_out", None) is not None:
                return confined.unsupervised(args, specs, lambda: _run(args))
            return _run(args)
    except VerispecError as error:  # refused before the command ran: the outputs' checks, the lock
        return _bad_input(error)


def user_code_specs(args) -> list[str]:
    """The code of the user's own a command will run: ``FILE.py:NAME`` or ``package.module:NAME`` given as a rule
    (``--verifier``, ``--verifiers``), a class (``--restriction``) or a checked function (check-external's
    argument); registered rules, with or without parameters, are not."""
    if getattr(args, "command", None) == "check-engine":  # the adapter's functions, which call the engine's code
        from verispec.cli.check_engine import checks_to_run

        try:
            return sorted({check.function for check in checks_to_run(args)[1]})
        except VerispecError:
            return []  # refused on one line when the command runs
    found = []
    for name in ("verifier", "function", "restriction", "verifiers"):
        value = getattr(args, name, None)
        if not isinstance(value, str) or ":" not in value:
            continue
        from verispec.verifiers import is_registered, split_names

        for spec in (split_names(value) if name == "verifiers" else (value,)):
            if ":" in spec and not is_registered(spec) and spec != "selected-path":
                found.append(spec)
    return found


def _supervision(args, specs: list[str]):
    """The supervisor's view of the command: what it checks, its longest run (its --time-budget, the default for a
    rule of your own when it has none, with the hard budget's grace and one --call-timeout), its output form."""
    from verispec.cli.options import DEFAULT_USER_RULE_BUDGET, HARD_BUDGET_GRACE
    from verispec.guard import supervisor

    seconds = getattr(args, "time_budget", None)
    if seconds is None and getattr(args, "command", None) in ("exact", "bound", "predict", "hunt"):
        seconds = DEFAULT_USER_RULE_BUDGET
    limit = None
    if seconds is not None:
        limit = seconds * (1 + HARD_BUDGET_GRACE) + (getattr(args, "call_timeout", None) or 0)
        if getattr(args, "command", None) == "check-engine":  # --time-budget is each check's
            from verispec.cli.check_engine import checks_to_run

            limit *= len(checks_to_run(args)[1])
    return supervisor.Supervision(command=f"verispec {args.command} with {', '.join(specs)}", time_limit=limit,
                                  json_output=bool(getattr(args, "json", False)), checking=_checking(args),
                                  json_out=getattr(args, "json_out", None), json_out_marker=_marker(args),
                                  code_output=getattr(args, "code_output", None),
                                  require=bool(getattr(args, "require_confinement", False)))


def _marker(args) -> dict | None:
    """The ``written_by`` marker of the command's ``--json-out`` file (None without one)."""
    if getattr(args, "json_out", None) is None:
        return None
    from verispec.files.provenance import JSON_OUT, written_by

    return written_by(JSON_OUT, args.command)


def _checking(args) -> str:
    """What a command checks, in the words of its options (the supervisor's first note: ``--tree iid:2,2 on
    --problem p.json``); a command that goes through several problems notes each as it comes to it."""
    tree = getattr(args, "tree", None)
    if getattr(args, "problem", None):
        source = f"--problem {args.problem}"
    elif isinstance(getattr(args, "target", None), str) and isinstance(getattr(args, "draft", None), str):
        source = f"--target {args.target} --draft {args.draft}"
    else:
        source = ""
    return " on ".join(part for part in (f"--tree {tree}" if tree else "", source) if part)


def _run(args) -> int:
    try:
        with budget.CommandGuard(getattr(args, "call_timeout", None), on_stuck=_stop_stuck_command):
            return COMMANDS[args.command].run(args)
    except Done as done:
        return done.status
    except (AnalysisTimeoutError, budget.HardTimeout, budget.CallTimeout) as error:
        # no answer within --time-budget or --call-timeout: not bad input. A HardTimeout or CallTimeout gets here
        # when its block was left without turning it into the typed error (a budget inside a generator)
        return _inconclusive(error)
    except VerispecError as error:
        return _bad_input(error)
    except KeyboardInterrupt as error:  # Ctrl-C; a build's SIGTERM too (verispec.study.workers.BuildInterrupted)
        print(f"verispec: {' '.join(str(error).split()) or 'interrupted'}", file=sys.stderr)
        return getattr(error, "exit_status", 130)
    except Exception as error:
        # A user's rule (--verifier FILE.py:NAME) may fail in any way: that is bad input, on one line. Anything else
        # is a bug in verispec and keeps its traceback (status 70, entry_point): an exception is the rule's when it
        # came from its sandbox (verispec.guard.sandbox) or passed through a frame of code that is not verispec's
        user_rule = getattr(args, "verifier", None) or getattr(args, "function", None)
        from verispec.verifiers import is_registered

        if user_rule is None or is_registered(str(user_rule)) or not _raised_by_user_code(error):
            raise
        message = f"{type(error).__name__}: {error}"
        print(one_line(f"verispec: error: the rule {user_rule} raised {message}"), file=sys.stderr)
        return EXIT_BAD_INPUT


def _raised_by_user_code(error: BaseException) -> bool:
    import os
    import traceback

    from verispec.guard.processes import LIBRARY_FOLDERS

    if hasattr(error, "sandbox_site"):
        return True
    return any(not os.path.abspath(frame.f_code.co_filename).startswith(LIBRARY_FOLDERS)
               for frame, _ in traceback.walk_tb(error.__traceback__))


def _bad_input(error: VerispecError) -> int:
    print(one_line(f"verispec: error: {error}"), file=sys.stderr)
    return EXIT_BAD_INPUT


#: The longest error line the command prints: a value echoed back (a 100,000-character rule name) is cut in its
#: middle, so that the line stays one readable line and keeps its end, where the fix is named.
MAX_ERROR_LINE = 2000


def one_line(text: str, limit: int = MAX_ERROR_LINE) -> str:
    """``text`` on one line (whitespace runs made one space), its middle left out past ``limit`` characters."""
    line = " ".join(str(text).split())
    if len(line) <= limit:
        return line
    head, tail = limit * 3 // 4, limit // 4
    return f"{line[:head]} ... [{len(line) - head - tail:,} characters left out] ... {line[-tail:]}"


def _inconclusive(error: BaseException) -> int:
    """The one INCONCLUSIVE line of a time limit that ran out, naming the option that raises it."""
    option = "--call-timeout" if isinstance(error, (budget.CallTimeoutError, budget.CallTimeout)) else "--time-budget"
    print(f"verispec: {Verdict.INCONCLUSIVE.word}: {_time_limit_line(str(error), option)}", file=sys.stderr)
    return EXIT_INCONCLUSIVE


def _time_limit_line(message: str, option: str) -> str:
    message = " ".join(message.split())
    if f"a larger {option}" in message:  # the message gives the advice already
        return message
    advice = ", or find the loop" if option == "--call-timeout" else ""
    return f"{message}; run again with a larger {option}{advice}"


def _stop_stuck_command(message: str, option: str) -> None:
    """The guard's last resort (verispec.guard.budget.CommandGuard): code that did not stop when its time limit
    interrupted it. The same INCONCLUSIVE line, and the process ends with status 3 at once."""
    budget.end_process(f"verispec: {Verdict.INCONCLUSIVE.word}: {_time_limit_line(message, option)}",
                       EXIT_INCONCLUSIVE)


class UserStop(KeyboardInterrupt):
    """SIGTERM or SIGHUP sent to a command that runs no build of its own (a build saves first:
    ``verispec.study.workers.BuildInterrupted``): the command unwinds and exits 128 + the signal's number with one
    line, never a verdict (``_run``)."""

    def __init__(self, signum: int):
        import signal

        self.exit_status = 128 + signum
        super().__init__(f"interrupted: stopped by {signal.Signals(signum).name} (a signal to verispec's own "
                         "process); no verdict")


def stop_on_signals() -> None:
    """SIGTERM and SIGHUP raise ``UserStop`` in the main thread (the entry points' first step), so a stop in the middle
    of a command is one line and 128 + N, not the signal's silent default."""
    import signal

    def stop(signum, frame):
        raise UserStop(signum)

    for number in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(number, stop)


def entry_point() -> None:
    stop_on_signals()
    try:
        sys.exit(main())
    except KeyboardInterrupt as error:  # a stop before the command's own handling began (options, imports)
        import signal

        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C does not cut the line into a traceback
        print(f"verispec: {str(error) or 'interrupted'}", file=sys.stderr)
        sys.exit(getattr(error, "exit_status", 130))
    except BrokenPipeError:  # the reader went away (``verispec compare | head``): end quietly with the status a
        import os  # shell gives a process its pipe's reader left (128 + SIGPIPE), never 1 (lossy)

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error when Python flushes
        sys.exit(141)
    except Exception:  # a bug in verispec: its traceback, and a status that no verdict has (Python's own is 1, LOSSY)
        import traceback

        from verispec.guard.supervisor import INTERNAL_LINE

        traceback.print_exc()
        print(INTERNAL_LINE, file=sys.stderr)
        sys.exit(EXIT_INTERNAL)
