"""One call of code under check, and what a call can find: ``call_function`` (the call timeout, the code's own errors
as ``FunctionRaised`` on one line), the errors of a function whose output is not a function of its inputs, and the
seeds and clock shift the probes hand (``runner.Runner.probe``, ``step.StepCheck.probe``)."""

from __future__ import annotations

import time

import numpy as np

from verispec.errors import AnalysisTimeoutError, UserCodeExit, VerifierError, VerispecError
from verispec.external.rng.rules import raise_site
from verispec.guard import budget

#: The seeds handed to a probe's calls (plus the call's index): the first also in every later run, the second to
#: see that the keys follow the seed (``Runner._seed_free_keys``).
PROBE_SEEDS = (1_000_003, 7_000_919)
#: Seconds the clocks are moved forward for the probe's second identical call (``Runner.probe``): a day and a bit, so
#: that a key read from the time at any resolution (seconds included) differs between the two calls.
CLOCK_SHIFT = 90_061.5


class NondeterministicError(VerifierError):
    """The function's output is not a function of its arguments and uniforms (two identical calls differ)."""


class FunctionRaised(VerifierError):
    """The function under check raised inside a call: a finding about the function on that problem, not bad input
    to verispec (``check_external`` reports it as a witness, verdict RAISES). ``exception`` (its type's name),
    ``detail`` (its message's first line) and ``line`` (file:line, ``rng.rules.raise_site``); for a call on one tree,
    ``draft_paths`` (the tree's root-to-leaf token paths) and ``uniforms`` (what the call was handed and fed)."""

    def __init__(self, message: str, *, exception: str = "", detail: str = "", line: str = "?"):
        super().__init__(message)
        self.exception, self.detail, self.line = exception, detail, line
        self.draft_paths: list[list[int]] | None = None
        self.uniforms: list[float] | None = None
        #: Position of the raising call among the rows of a run (set while it propagates; None: a batched call).
        self.row: int | None = None
        self.drawn = 0
        #: Whether the call raised again when made once more at once on the same inputs (None: not tried). False
        #: says the raise depends on the call history (state kept across calls) or on randomness verispec does not
        #: feed, so the inputs listed may not reproduce it.
        self.repeats: bool | None = None

    def to_json(self) -> dict:
        return {"exception": self.exception, "message": self.detail, "line": self.line,
                "draft_paths": self.draft_paths, "uniforms": self.uniforms, "repeats": self.repeats}


def call_function(function, name: str, limit: float | None, arguments: tuple):
    """One call of ``function`` (a user's code, named ``name``) on ``arguments``: its own errors as
    ``FunctionRaised`` on one line (sys.exit and the supervised worker's intercepted exits included), the call
    timeout ``limit`` (seconds, None: none) enforced as a VerifierError."""
    start = time.monotonic()

    def too_slow() -> VerifierError:
        return VerifierError(f"one call of external function {name} ran past its call timeout of {limit:g} s (a loop "
                             "that does not end, or a call too slow to integrate): raise --call-timeout, or find the "
                             "loop")

    try:
        if limit is None:
            return function(*arguments)
        try:
            with budget.time_budget(start + limit, hard=True, what=f"one call of external function {name}"):
                result = function(*arguments)
        except AnalysisTimeoutError:
            if time.monotonic() - start >= limit:
                raise too_slow() from None
            raise
        if time.monotonic() - start > limit:  # where no hard budget can interrupt (not the main thread)
            raise too_slow()
        return result
    except VerispecError:
        raise
    except (Exception, SystemExit, UserCodeExit) as error:  # the function failed on this input: a finding
        # SystemExit (sys.exit) and UserCodeExit (os._exit and the like, in the supervised worker) included:
        # code that tries to end verispec's process has failed on this input exactly as one that raised
        text = (f"sys.exit({error.code!r})" if isinstance(error, SystemExit) else
                error.what if isinstance(error, UserCodeExit) else str(error))
        detail = text.splitlines()[0] if text else ""
        line = raise_site(error)
        raise FunctionRaised(f"external function {name} raised {type(error).__name__}: {detail} (at {line})",
                             exception=type(error).__name__, detail=detail, line=line) from None


def snapshot(arguments) -> list:
    """Copies of the array arguments (None for the others), to tell later which ones a call wrote into."""
    copies = []
    for argument in arguments:
        if hasattr(argument, "clone"):
            copies.append(argument.clone())
        elif isinstance(argument, np.ndarray):
            copies.append(argument.copy())
        else:
            copies.append(None)
    return copies


def written_positions(arguments, before: list) -> set[int]:
    """Positions of the array arguments whose contents differ from ``before`` (NaN equal to NaN)."""
    changed = set()
    for index, (argument, copy) in enumerate(zip(arguments, before)):
        if copy is None:
            continue
        now = argument.detach().cpu().numpy() if hasattr(argument, "detach") else argument
        then = copy.detach().cpu().numpy() if hasattr(copy, "detach") else copy
        if now.shape != then.shape or not np.array_equal(now, then, equal_nan=now.dtype.kind == "f"):
            changed.add(index)
    return changed
