"""The supervisor's side of a supervised command (``verispec.guard.supervisor``): the loop that forwards the worker's
output, reads its report, takes the user's signals (and tells them from the code's), waits for the worker's end, and
turns all that into the command's status. Standard library only."""

from __future__ import annotations

import codecs
import json
import os
import selectors
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

from verispec.guard.processes import crash_location, descendants, how_it_ended, parse_report, signal_name

#: Exit statuses (``verispec.verdict``'s; this module runs before anything else of the command).
EXIT_INCONCLUSIVE = 3
EXIT_RAISES = 4
EXIT_INTERNAL = 70
#: Seconds the supervisor waits for a worker that reported its status to end, and for the pipes' last bytes once
#: it has ended, before it ends what is left itself.
GRACE_SECONDS = 2.0


@dataclass(frozen=True)
class Supervision:
    """What the supervisor needs to know of the command: what it checks (for messages), the longest it may run in
    seconds (None: no limit), and whether its output is one JSON object (a death is then reported as one too)."""

    command: str
    time_limit: float | None = None
    json_output: bool = False
    checking: str = ""



class Watch:
    """The supervisor's loop: forward the worker's output, read its report, wait for its end (or end it at the
    outer limit, or on an interrupt that it does not answer)."""

    def __init__(self, pid: int, report_fd: int, out_fd: int, err_fd: int, supervision: Supervision, *,
                 kill: Callable[[int, int], None], outer_margin: float):
        """``kill``: ``os.kill`` as the interpreter has it; ``outer_margin``: seconds past the command's limits
        before a worker still running is ended."""
        self.pid = pid
        self.kill, self.outer_margin = kill, outer_margin
        self.supervision = supervision
        self.report = b""
        self.wait_status: int | None = None
        self.ended_by_supervisor: str | None = None
        self.selector = selectors.DefaultSelector()
        self.decoders = {}
        for fd, target in ((report_fd, None), (out_fd, "stdout"), (err_fd, "stderr")):
            os.set_blocking(fd, False)
            self.selector.register(fd, selectors.EVENT_READ, target)
            self.decoders[fd] = codecs.getincrementaldecoder("utf-8")("replace")
        self.started = time.monotonic()
        self.interrupts: list[tuple[int, float]] = []  # the user's signals: (number, when)
        self.code_signals: list[tuple[int, int]] = []  # signals from the worker's tree: (number, sender)
        self.passed_on = 0
        self.reported_at: float | None = None

    def wait(self) -> None:
        limit = self.supervision.time_limit
        deadline = None if limit is None else self.started + limit + self.outer_margin
        previous = self._hold_signals()
        try:
            while self.wait_status is None:
                self._pump(0.05)
                self._take_signals()
                self._reap()
                now = time.monotonic()
                if self.report and self.reported_at is None:
                    self.reported_at = now
                if self.wait_status is not None:
                    break
                if self.reported_at is not None and now - self.reported_at > GRACE_SECONDS:
                    self._end("it reported its status but did not end")
                elif deadline is not None and now > deadline:
                    self._end(f"it ran {now - self.started:.0f} s, past the command's limits ({limit:g} s) and "
                              f"{self.outer_margin:g} s more")
                elif self.interrupts:
                    self._pass_interrupts()
        finally:
            self._release_signals(previous)

    def _hold_signals(self):
        """Ctrl-C, SIGTERM and SIGHUP are blocked here and taken by ``sigtimedwait``, which tells who sent each:
        the user's (the terminal, ``timeout``, a scheduler: any process outside the worker's tree) is passed on to
        the worker, which ends the command its own way (a build saves what it has), and makes the command's status
        the signal's (``_user_stop``); one sent by the worker or a process it started (the code under check) is
        not the user's and is ignored, with a note. The worker has a process group of its own, so a terminal's
        Ctrl-C reaches it once, through this process. None where signals cannot be taken so (not the main thread,
        no ``sigtimedwait``)."""
        if not hasattr(signal, "sigtimedwait") or not _is_main_thread():
            return None
        return signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)

    def _release_signals(self, previous) -> None:
        if previous is None:
            return
        self._take_signals()
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)

    def _take_signals(self) -> None:
        while True:
            try:
                info = signal.sigtimedwait(_STOP_SIGNALS, 0)
            except (InterruptedError, OSError):
                return
            if info is None:
                return
            sender = info.si_pid
            if sender and sender in ({self.pid} | descendants({self.pid})):
                if not self.code_signals:
                    write("stderr", f"verispec: note: the code under check sent {signal_name(info.si_signo)} to "
                                     "verispec's supervisor; ignored (only a signal from outside the check stops it)\n")
                self.code_signals.append((info.si_signo, sender))
                continue
            self.interrupts.append((info.si_signo, time.monotonic()))

    def _pass_interrupts(self) -> None:
        """Each interrupt is passed on as it comes; a worker that has not ended ``3 * GRACE_SECONDS`` after the first
        is ended."""
        while self.passed_on < len(self.interrupts):
            try:
                self.kill(self.pid, self.interrupts[self.passed_on][0])
            except ProcessLookupError:
                pass
            self.passed_on += 1
        if time.monotonic() - self.interrupts[0][1] > 3 * GRACE_SECONDS:
            self._end("it did not end after it was interrupted")

    def _end(self, why: str) -> None:
        self.ended_by_supervisor = why
        try:
            self.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        _, status = os.waitpid(self.pid, 0)
        self.wait_status = status

    def _reap(self) -> None:
        if self.wait_status is not None:
            return
        try:
            done, status = os.waitpid(self.pid, os.WNOHANG)
        except ChildProcessError:
            done, status = self.pid, 0
        if done == self.pid:
            self.wait_status = status

    def _pump(self, timeout: float) -> bool:
        """Forward what the worker wrote; whether anything came."""
        got = False
        try:
            events = self.selector.select(timeout)
        except InterruptedError:
            return False
        for key, _ in events:
            try:
                data = os.read(key.fd, 65536)
            except BlockingIOError:
                continue
            except OSError:
                data = b""
            if not data:
                self.selector.unregister(key.fd)
                continue
            got = True
            if key.data is None:
                self.report += data
            else:
                write(key.data, self.decoders[key.fd].decode(data))
        return got

    def drain(self) -> None:
        """The pipes' last bytes: until they close (every writer has ended) or ``GRACE_SECONDS`` pass."""
        end = time.monotonic() + GRACE_SECONDS
        while self.selector.get_map() and time.monotonic() < end:
            self._pump(0.05)
        for key in list(self.selector.get_map().values()):
            if key.data is not None:
                write(key.data, self.decoders[key.fd].decode(b"", final=True))
        self.selector.close()

    def verdict(self, doing: str, crash_file) -> int:
        """The command's status (see ``verispec.guard.supervisor``); ``doing``: the worker's last note."""
        report = parse_report(self.report, self.pid)
        stopped = self._user_stop(report)
        if stopped is not None:
            return stopped
        if report is not None:
            if report.get("died") is True and self.supervision.json_output:
                write("stdout", json.dumps({"verdict": "raises", "exit_status": int(report["status"]),
                                             "message": report.get("line")}) + "\n")
            if report.get("line"):
                write("stderr", report["line"] + "\n")
            return int(report["status"])
        return self._death(doing, crash_file)

    def _death(self, doing: str, crash_file) -> int:
        while_doing = f" while checking {doing}" if doing else ""
        if self.ended_by_supervisor is not None:
            line = (f"verispec: INCONCLUSIVE: the worker running {self.supervision.command} was ended by verispec "
                    f"because {self.ended_by_supervisor}{while_doing} (code that holds the interpreter's lock never "
                    "returns to verispec's watchdog); find the loop, or run again with a larger --time-budget")
            status, word = EXIT_INCONCLUSIVE, "inconclusive"
        else:
            how = how_it_ended(self.wait_status)
            where = crash_location(crash_file)
            line = (f"verispec: RAISES: the process running the code under check {how}{where}{while_doing}, "
                    "without verispec's verdict; the code must return, not end or crash the process")
            status, word = EXIT_RAISES, "raises"
        if self.supervision.json_output:
            write("stdout", json.dumps({"verdict": word, "exit_status": status, "message": line}) + "\n")
        write("stderr", line + "\n")
        return status


    def _user_stop(self, report) -> int | None:
        """The status of a command the user stopped (a signal from outside the check reached the supervisor before
        the worker's report): the worker's own status where it answered the signal itself (130 for Ctrl-C, a
        build's saved-and-stopped status: 128 or more), else 128 + the signal's number with one line, never a
        verdict on the code (the check did not end). None when the user did not stop it."""
        if not self.interrupts or (self.reported_at is not None and self.reported_at <= self.interrupts[0][1]):
            return None
        if report is not None and int(report["status"]) >= 128:
            if report.get("line"):
                write("stderr", report["line"] + "\n")
            return int(report["status"])
        number = self.interrupts[0][0]
        status = 128 + int(number)
        line = (f"verispec: interrupted: stopped by {signal_name(number)} before the check ended (a signal to "
                "verispec's own process); no verdict on the code under check")
        if self.supervision.json_output:
            write("stdout", json.dumps({"verdict": "stopped", "exit_status": status, "message": line}) + "\n")
        write("stderr", line + "\n")
        return status


#: The signals a user stops a command with; the supervisor takes them itself (``Watch._hold_signals``).
_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def write(name: str, text: str) -> None:
    if not text:
        return
    stream = getattr(sys, name)
    try:
        stream.write(text)
        stream.flush()
    except (OSError, ValueError):
        pass  # the user's own stream is closed or broken: nothing more can be shown


def _is_main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


__all__ = ["EXIT_INCONCLUSIVE", "EXIT_INTERNAL", "EXIT_RAISES", "GRACE_SECONDS", "Supervision", "Watch", "write"]
