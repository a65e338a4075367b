"""Time budgets: work started with a deadline stops at it, wherever it happens to be.

``analyze(..., deadline=...)`` (and ``hunt``'s time budget) set the deadline for the duration of the call;
every loop that can run long (choice traces, draft trees, tree groups, DP depths and kernel chunks) calls
``check`` and raises ``AnalysisTimeoutError`` once it has passed. The deadline is a ``time.monotonic()``
value held in a context variable, so nested calls and threads each see their own.

``check`` only helps where verispec's own loops run. Code that never returns to them - a user's rule or an
external function stuck in a loop or asleep - is stopped by a *hard* budget (``time_budget(..., hard=True)``):
a ``SIGALRM`` timer that raises ``HardTimeout`` in the main thread at the deadline, inside whatever Python code
is running (a C call finishes first). ``HardTimeout`` is a ``BaseException``, as ``KeyboardInterrupt`` is, so a
rule's own ``except Exception`` does not swallow it; should the code swallow it anyway, the timer fires again
every ``REFIRE_SECONDS``. The budgeted block turns it into ``AnalysisTimeoutError`` as it is left, so callers
see the usual typed error; code inside the block that must stop cleanly catches both. Hard budgets need the
main thread of a Unix process; elsewhere (a worker thread, Windows) they fall back to ``check``, which
``hard_budget_available`` tells.
"""

from __future__ import annotations

import contextvars
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from verispec.errors import AnalysisTimeoutError

_deadline: contextvars.ContextVar[float | None] = contextvars.ContextVar("verispec_deadline", default=None)

#: After a hard deadline fired, the timer fires again this often until its block is left.
REFIRE_SECONDS = 0.25
#: The longest delay the timer is set for at once (``setitimer`` overflows near 10^9.5 s); a later deadline is
#: reached by re-arming when it fires early.
LONGEST_TIMER = 86_400.0

#: Active hard budgets, innermost last: [deadline, what, fired]. Main thread only.
_hard: list[list] = []
_previous_handler = None


class HardTimeout(BaseException):
    """Raised by the timer of a hard budget inside the running code (see the module docstring)."""


def hard_budget_available() -> bool:
    """Whether ``time_budget(..., hard=True)`` can interrupt code here (the main thread of a Unix process)."""
    return hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()


def remaining() -> float | None:
    """Seconds left before the current deadline (None without one; never negative)."""
    deadline = _deadline.get()
    return None if deadline is None else max(0.0, deadline - time.monotonic())


@contextmanager
def time_budget(deadline: float | None, *, hard: bool = False, what: str = "the computation") -> Iterator[None]:
    """Run the block under ``deadline`` (a ``time.monotonic()`` value; None keeps any outer deadline).

    ``hard``: also interrupt code that never calls ``check`` (see the module docstring); ``what`` names the
    work in the error message."""
    if deadline is None:
        yield
        return
    outer = _deadline.get()
    token = _deadline.set(deadline if outer is None else min(deadline, outer))
    armed = hard and hard_budget_available()
    if armed:
        _push(deadline, what)
    try:
        yield
    except HardTimeout as stopped:
        if not armed:
            raise
        raise AnalysisTimeoutError(str(stopped)) from None
    finally:
        if armed:
            _pop()
        _deadline.reset(token)


def check(what: str) -> None:
    """Raise ``AnalysisTimeoutError`` naming ``what`` if the current deadline has passed."""
    deadline = _deadline.get()
    if deadline is not None and time.monotonic() > deadline:
        raise AnalysisTimeoutError(f"{what} ran past its time budget")


def _push(deadline: float, what: str) -> None:
    global _previous_handler
    if not _hard:
        _previous_handler = signal.signal(signal.SIGALRM, _on_alarm)
    _hard.append([deadline, what, False])
    try:
        _arm()
    except BaseException:
        _pop()
        raise


def _pop() -> None:
    global _previous_handler
    signal.setitimer(signal.ITIMER_REAL, 0)
    _hard.pop()
    if _hard:
        _arm()
    else:
        signal.signal(signal.SIGALRM, _previous_handler if _previous_handler is not None else signal.SIG_DFL)
        _previous_handler = None


def _arm() -> None:
    """Set the timer for the earliest hard deadline (soon again if it has already fired)."""
    entry = min(_hard, key=lambda item: item[0])
    delay = REFIRE_SECONDS if entry[2] else entry[0] - time.monotonic()
    signal.setitimer(signal.ITIMER_REAL, min(max(delay, 1e-4), LONGEST_TIMER))


def _on_alarm(signum, frame) -> None:
    if not _hard:
        return
    entry = min(_hard, key=lambda item: item[0])
    if time.monotonic() < entry[0]:
        _arm()
        return
    entry[2] = True
    _arm()
    raise HardTimeout(f"{entry[1]} ran past its time budget")
