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
see the usual typed error; code inside the block that must stop cleanly catches both. Once its timer has fired,
the block turns *any* exception leaving it into ``AnalysisTimeoutError``: the interruption may land where a
library turns it into an error of its own (a C extension's import fails with ImportError, a solver catches
it and raises its own), and that error says nothing true about the input. The timer never raises inside this
module's own bookkeeping (it fires again a moment later), and a ``HardTimeout`` raised inside a finaliser,
where Python can only print it, is dropped without a word (the timer fires again). Hard budgets need the main
thread of a Unix process; elsewhere (a worker thread, Windows) they fall back to ``check``, which
``hard_budget_available`` tells.

The command line adds a ``CommandGuard`` around each command, with two duties a timer in the main thread
cannot do alone. It limits every call into the user's own code (``--call-timeout``): the loader registers the
files of the code it loaded (``watch_user_code``) and marks loading itself (``user_call``), and a watchdog
thread looks at the main thread's stack (``sys._current_frames``) every ``1 / CALL_TICKS`` of the limit; the
outermost frame of a registered file is the call verispec made, and one that is still running ``limit``
seconds after it was first seen gets a ``CallTimeout`` (a ``BaseException``, raised in it through the same
``SIGALRM`` handler). A call costs nothing extra that way (a hard timer per call costs about 11 us, 22 s over
an enumeration of 2,000,000 choice traces), and a call is stopped between ``limit`` and ``limit * (1 + 2 /
CALL_TICKS)`` seconds after it started. Its second duty is the last resort: code that swallows every
interruption (``except BaseException: pass`` in a loop), replaces the ``SIGALRM`` handler or stops the timer,
or sits in a C call that releases the GIL and does not return would outlive any budget, so when a hard
budget's block is still running ``ESCALATE_SECONDS`` after its deadline, or a call ``ESCALATE_SECONDS`` after
it was first interrupted, the guard calls the command line's ``on_stuck``, which prints the INCONCLUSIVE line
and ends the process (exit 3).
One thing is beyond it: a single C call that holds the GIL and never looks at signals (``sum(range(10**12))``)
starves the watchdog thread as well, and only a signal from outside the process ends it.
"""

from __future__ import annotations

import contextvars
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable

from verispec.errors import AnalysisTimeoutError

_deadline: contextvars.ContextVar[float | None] = contextvars.ContextVar("verispec_deadline", default=None)

#: After a hard deadline fired, the timer fires again this often until its block is left.
REFIRE_SECONDS = 0.25
#: The longest delay the timer is set for at once (``setitimer`` overflows near 10^9.5 s); a later deadline is
#: reached by re-arming when it fires early.
LONGEST_TIMER = 86_400.0
#: How long the command line waits, past a hard deadline (or past the first interruption of a call that ran
#: over its limit), for the code to stop before it ends the process itself (``CommandGuard``): four refires.
ESCALATE_SECONDS = 4 * REFIRE_SECONDS
#: The call watchdog looks at the stack this many times per ``--call-timeout``.
CALL_TICKS = 20
#: The watchdog's longest sleep while it guards hard budgets only (their last resort comes this late at most).
GUARD_POLL_SECONDS = 0.1
#: The timer retries this soon when it fired inside this module's own bookkeeping.
RETRY_SECONDS = 0.005


class HardTimeout(BaseException):
    """Raised by the timer of a hard budget inside the running code (see the module docstring)."""


class CallTimeout(BaseException):
    """Raised inside a call into the user's code that ran past ``--call-timeout`` (see ``CommandGuard``).

    Not a ``HardTimeout``: code that stops cleanly at its own time budget (hunt, check-external) lets it pass,
    so the command says which call ran over and which option raises the limit."""

    def __init__(self, what: str, limit: float):
        super().__init__(f"{what} ran past --call-timeout {limit:g} s")
        self.what = what
        self.limit = limit


class CallTimeoutError(AnalysisTimeoutError):
    """A call into the user's code ran past ``--call-timeout``: the typed error the command line reports."""


class _HardEntry:
    """One active hard budget: its deadline, what it names, and whether its timer has fired."""

    __slots__ = ("deadline", "what", "fired")

    def __init__(self, deadline: float, what: str):
        self.deadline = deadline
        self.what = what
        self.fired = False


#: Active hard budgets, innermost last. Main thread only.
_hard: list[_HardEntry] = []
#: Holders of the SIGALRM handler (each hard budget, and a CommandGuard with a call limit).
_handler_users = 0
_previous_handler = None
_previous_unraisablehook = None
#: The active CommandGuard (one per process: the command line's).
_guard: CommandGuard | None = None


def hard_budget_available() -> bool:
    """Whether ``time_budget(..., hard=True)`` can interrupt code here (the main thread of a Unix process)."""
    return hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()


def remaining() -> float | None:
    """Seconds left before the current deadline (None without one; never negative)."""
    deadline = _deadline.get()
    return None if deadline is None else max(0.0, deadline - time.monotonic())


class time_budget:
    """Run the block under ``deadline`` (a ``time.monotonic()`` value; None keeps any outer deadline).

    ``hard``: also interrupt code that never calls ``check`` (see the module docstring); ``what`` names the
    work in the error message. A class rather than a generator, so that leaving the block runs this module's
    code only, where the timer never raises."""

    __slots__ = ("deadline", "hard", "what", "_token", "_entry")

    def __init__(self, deadline: float | None, *, hard: bool = False, what: str = "the computation"):
        self.deadline = deadline
        self.hard = hard
        self.what = what
        self._token = self._entry = None

    def __enter__(self) -> None:
        if self.deadline is None:
            return
        outer = _deadline.get()
        self._token = _deadline.set(self.deadline if outer is None else min(self.deadline, outer))
        if self.hard and hard_budget_available():
            try:
                self._entry = _push(self.deadline, self.what)
            except BaseException:
                _deadline.reset(self._token)
                raise

    def __exit__(self, kind, error, traceback) -> bool:
        if self.deadline is None:
            return False
        entry, self._entry = self._entry, None
        try:
            if entry is not None:
                _pop(entry)
        finally:
            _deadline.reset(self._token)
        if entry is None or kind is None:
            return False
        if issubclass(kind, HardTimeout):
            raise AnalysisTimeoutError(str(error)) from None
        if entry.fired and not issubclass(kind, (AnalysisTimeoutError, CallTimeout, KeyboardInterrupt, SystemExit,
                                                 GeneratorExit)):
            # the interruption landed where something turned it into an error of its own
            raise AnalysisTimeoutError(f"{self.what} ran past its time budget") from None
        return False


def check(what: str) -> None:
    """Raise ``AnalysisTimeoutError`` naming ``what`` if the current deadline has passed."""
    deadline = _deadline.get()
    if deadline is not None and time.monotonic() > deadline:
        raise AnalysisTimeoutError(f"{what} ran past its time budget")


def _push(deadline: float, what: str) -> _HardEntry:
    entry = _HardEntry(deadline, what)
    _install()
    _hard.append(entry)
    try:
        _arm()
    except BaseException:
        _pop(entry)
        raise
    if _guard is not None:
        _guard.start()
        _guard.wake()
    return entry


def _pop(entry: _HardEntry) -> None:
    """Take ``entry`` off the active budgets (nothing when its command's guard took it already) and re-arm the
    timer."""
    for index in range(len(_hard) - 1, -1, -1):
        if _hard[index] is entry:
            del _hard[index]
            _arm()
            _uninstall()
            return


def _install() -> None:
    """Hold the SIGALRM handler (and the finaliser hook), installing them for the first holder."""
    global _handler_users, _previous_handler, _previous_unraisablehook
    if _handler_users == 0:
        _previous_handler = signal.signal(signal.SIGALRM, _on_alarm)
        _previous_unraisablehook = sys.unraisablehook
        sys.unraisablehook = _unraisable
    _handler_users += 1


def _uninstall() -> None:
    """Release the handler; the last holder stops the timer and puts back what was there before."""
    global _handler_users, _previous_handler, _previous_unraisablehook
    _handler_users -= 1
    if _handler_users > 0:
        return
    _handler_users = 0
    signal.setitimer(signal.ITIMER_REAL, 0)
    signal.signal(signal.SIGALRM, _previous_handler if _previous_handler is not None else signal.SIG_DFL)
    if sys.unraisablehook is _unraisable:
        sys.unraisablehook = _previous_unraisablehook or sys.__unraisablehook__
    _previous_handler = _previous_unraisablehook = None


def _arm() -> None:
    """Set the timer for the earliest hard deadline (soon again if it has already fired); none: stop it."""
    if not _hard:
        signal.setitimer(signal.ITIMER_REAL, 0)
        return
    entry = min(_hard, key=lambda item: item.deadline)
    delay = REFIRE_SECONDS if entry.fired else entry.deadline - time.monotonic()
    signal.setitimer(signal.ITIMER_REAL, min(max(delay, 1e-4), LONGEST_TIMER))


def _on_alarm(signum, frame) -> None:
    if frame is not None and frame.f_globals is globals():
        # inside this module's own bookkeeping (entering or leaving a block): raising here could leave a timer
        # behind; try again in a moment
        if _hard:
            signal.setitimer(signal.ITIMER_REAL, RETRY_SECONDS)
        return
    guard = _guard
    if guard is not None and guard.pending is not None:
        call, stop = guard.pending
        guard.pending = None
        if _still_running(call, frame):  # else the call ended between the watchdog's look and this signal
            guard.interrupted = stop
            raise stop
    if not _hard:
        return
    entry = min(_hard, key=lambda item: item.deadline)
    if time.monotonic() < entry.deadline:
        _arm()
        return
    entry.fired = True
    _arm()
    raise HardTimeout(f"{entry.what} ran past its time budget")


def _still_running(call, frame) -> bool:
    """Whether ``call`` (a ``user_call`` marker or a frame) is still running in the main thread at ``frame``."""
    if isinstance(call, user_call):
        return _guard is not None and call in _guard.explicit
    while frame is not None:
        if frame is call:
            return True
        frame = frame.f_back
    return False


def _unraisable(unraisable) -> None:
    """Drop an interruption raised where Python can only print it (a finaliser, a weakref callback): the timer
    or the watchdog interrupts again. Everything else goes to the hook that was there before."""
    if isinstance(unraisable.exc_value, (HardTimeout, CallTimeout)):
        return
    (_previous_unraisablehook or sys.__unraisablehook__)(unraisable)


# --- the command line's guard: calls into the user's code, and the last resort ----------------------------------

class user_call:
    """Mark the block as a call into the user's code for ``--call-timeout`` (loading a user's module: the frames
    that run are the import system's and the module's, known only once it is loaded). Nothing outside a
    ``CommandGuard`` with a call limit."""

    __slots__ = ("what",)

    def __init__(self, what: str):
        self.what = what

    def __enter__(self) -> None:
        if _guard is not None:
            _guard.explicit.append(self)
            _guard.wake()

    def __exit__(self, kind, error, traceback) -> bool:
        if _guard is not None and self in _guard.explicit:
            _guard.explicit.remove(self)
        return False


def watch_user_code(filenames: Iterable[str]) -> None:
    """Count the frames of code compiled from these files (``co_filename``) as the user's, for ``--call-timeout``:
    the loader's list of what it loaded. Nothing outside a ``CommandGuard`` with a call limit."""
    if _guard is not None and _guard.limit is not None:
        _guard.files.update(filenames)
        _guard.wake()


def forget_guard() -> None:
    """In a fork that runs the user's code for its parent (``verispec.guard.sandbox``): the parent's guard and hard
    budgets
    are the parent's (their watchdog thread and timers did not cross the fork); the parent limits each call."""
    global _guard
    _guard = None
    _hard.clear()
    signal.setitimer(signal.ITIMER_REAL, 0)


def calls_limited() -> bool:
    """Whether a ``CommandGuard`` limits calls into the user's code here (so a caller need not set its own limit)."""
    return _guard is not None and _guard.limit is not None and _guard.active


class CommandGuard:
    """The command line's guard around one command (see the module docstring): ``call_limit`` seconds for each
    call into the user's code (None: no limit), and ``on_stuck(message, option)``, called from the watchdog
    thread when code does not stop ``ESCALATE_SECONDS`` after it was interrupted (it must end the process).

    Leaving the guard stops the watchdog and every timer, and turns a ``CallTimeout`` (or any exception, once a
    call has been interrupted: it may have been turned into something else) into ``CallTimeoutError``."""

    def __init__(self, call_limit: float | None, on_stuck: Callable[[str, str], None] | None = None):
        self.limit = call_limit
        self.on_stuck = on_stuck
        self.files: set[str] = set()
        self.explicit: list[user_call] = []
        self.pending: tuple | None = None  # (the call, its CallTimeout) for the SIGALRM handler to raise
        self.interrupted: CallTimeout | None = None  # the last CallTimeout raised in the main thread
        self.active = False
        self._main = threading.main_thread().ident
        self._wake = threading.Event()
        self._stop = False
        self._thread: threading.Thread | None = None
        self._handler = False
        self._outer: list[_HardEntry] = []
        self._call = None  # the call the watchdog saw last: a frame or a user_call
        self._since = 0.0
        self._first_interrupt: float | None = None
        self._last_interrupt = 0.0

    def __enter__(self) -> CommandGuard:
        global _guard
        if _guard is not None or not hard_budget_available():
            return self  # one guard per process (the outermost), and only where signals reach the code
        _guard = self
        self.active = True
        self._outer = list(_hard)
        if self.limit is not None:
            _install()
            self._handler = True
            self.start()
        return self

    def __exit__(self, kind, error, traceback) -> bool:
        global _guard
        if not self.active:
            return False
        self.active = False
        self._stop = True
        self._wake.set()
        self.pending = None
        _guard = None
        if self._thread is not None:
            self._thread.join(1.0)
        for entry in [entry for entry in _hard if entry not in self._outer]:
            _pop(entry)  # left behind by a block in a suspended generator: its timer goes with the command
        if self._handler:
            _uninstall()
        self._call = None
        interrupted = self.interrupted
        if kind is not None and issubclass(kind, CallTimeout):
            raise CallTimeoutError(str(error)) from None
        if interrupted is not None and kind is not None and not issubclass(kind, (AnalysisTimeoutError,
                                                                                  KeyboardInterrupt, SystemExit)):
            raise CallTimeoutError(str(interrupted)) from None
        return False

    def wake(self) -> None:
        self._wake.set()

    def start(self) -> None:
        """Start the watchdog thread, once: with the guard when it limits calls, else at the first hard budget."""
        if self._thread is None and self.active:
            self._thread = threading.Thread(target=self._watch, name="verispec-guard", daemon=True)
            self._thread.start()

    # the watchdog thread

    def _watch(self) -> None:
        while not self._stop:
            self._wake.wait(self._interval())
            self._wake.clear()
            if self._stop:
                return
            try:
                self._check_budgets()
                self._check_call()
            except Exception:  # the watchdog must never take the command down with an error of its own
                continue

    def _interval(self) -> float | None:
        waits = []
        if _hard:
            waits.append(GUARD_POLL_SECONDS)
        if self.limit is not None and (self.files or self.explicit):
            waits.append(min(self.limit / CALL_TICKS, REFIRE_SECONDS if self._first_interrupt else self.limit))
        return min(waits) if waits else None  # nothing to watch: wait until woken

    def _check_budgets(self) -> None:
        now = time.monotonic()
        for entry in list(_hard):
            if now > entry.deadline + ESCALATE_SECONDS:
                self._stuck(f"{entry.what} ran past its time budget and went on after it was interrupted",
                            "--time-budget")

    def _check_call(self) -> None:
        if self.limit is None:
            return
        now = time.monotonic()
        call, what = self._current_call()
        if call is None or call is not self._call:
            self._call, self._since, self._first_interrupt, self.pending = call, now, None, None
            return
        if now - self._since < self.limit:
            return
        if self._first_interrupt is not None:
            if now - self._first_interrupt > ESCALATE_SECONDS:
                self._stuck(f"{what} ran past --call-timeout {self.limit:g} s and went on after it was interrupted",
                            "--call-timeout")
            if now - self._last_interrupt < REFIRE_SECONDS:
                return
        else:
            self._first_interrupt = now
        self._last_interrupt = now
        self.pending = (call, CallTimeout(what, self.limit))
        signal.pthread_kill(self._main, signal.SIGALRM)

    def _current_call(self):
        """The call into the user's code that the main thread is in (the outermost), and its description."""
        if self.explicit:
            marker = self.explicit[0]
            return marker, marker.what
        if not self.files:
            return None, ""
        frame = sys._current_frames().get(self._main)
        outermost = None
        while frame is not None:
            if frame.f_code.co_filename in self.files:
                outermost = frame
            frame = frame.f_back
        if outermost is None:
            return None, ""
        code = outermost.f_code
        if code.co_name == "<module>":
            return outermost, f"loading {code.co_filename}"
        return outermost, f"the call of {code.co_qualname} ({code.co_filename}, line {code.co_firstlineno})"

    def _stuck(self, message: str, option: str) -> None:
        if self.on_stuck is not None and not self._stop:
            self.on_stuck(message, option)


def end_process(line: str, status: int) -> None:
    """Write ``line`` on stderr and end the process with ``status`` at once (the guard's last resort: the main
    thread is stuck in code that will not stop). What the command printed so far is flushed first, from a helper
    thread given half a second, so a stream whose lock the stuck thread holds cannot hold the exit up."""

    def flush() -> None:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # a closed or broken stream: nothing more can be written to it
                pass

    flusher = threading.Thread(target=flush, daemon=True)
    flusher.start()
    flusher.join(0.5)
    from verispec.guard import supervisor

    if supervisor.in_worker():  # the supervisor prints the line (the code may have closed this process's stderr)
        supervisor.report_and_end(status, line)
    try:
        os.write(2, (line + "\n").encode("utf-8", "replace"))
    finally:
        os._exit(status)
