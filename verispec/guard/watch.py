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

from verispec.guard import layers as guard_layers
from verispec.guard.output import CodeOutput, atomic_write, json_out_document, with_confinement
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
    #: --json-out FILE: the JSON lines written there too, atomically, once the code's processes are ended, with
    #: ``json_out_marker`` (``verispec.files.provenance.written_by``, made by the caller).
    json_out: str | None = None
    json_out_marker: dict | None = None
    #: --code-output FILE: the code's own output kept there rather than shown on stderr.
    code_output: str | None = None
    #: --require-confinement: refuse (exit 2) where a layer is missing (``verispec.guard.layers``).
    require: bool = False
    #: whether the JSON goes to stdout too (False: the ``json_out`` file only; the pytest plugin reads it there)
    json_on_stdout: bool = True



class Watch:
    """The supervisor's loop: forward the worker's output, read its report, wait for its end (or end it at the
    outer limit, or on an interrupt that it does not answer)."""

    def __init__(self, pid: int, report_fd: int, out_fd: int, err_fd: int, supervision: Supervision, *,
                 kill: Callable[[int, int], None], outer_margin: float, code_fd: int | None = None,
                 probed: dict | None = None):
        """``kill``: ``os.kill`` as the interpreter has it; ``outer_margin``: seconds past the command's limits
        before a worker still running is ended; ``code_fd``: the pipe of the code's own output
        (``verispec.guard.output``); ``probed``: the layers found before the worker started."""
        self.pid = pid
        self.kill, self.outer_margin = kill, outer_margin
        self.supervision = supervision
        self.probed = dict(probed or {})
        self.report = b""
        self.wait_status: int | None = None
        self.ended_by_supervisor: str | None = None
        self.selector = selectors.DefaultSelector()
        self.decoders = {}
        self.json_mode = supervision.json_output or supervision.json_out is not None
        self.held_stdout: list[str] = []  # JSON mode: the worker's stdout, written once the code's processes ended
        self.last_line = ""  # the worker's last whole line on stderr, said again after the code's last line
        self.stderr_tail = ""
        self.code = CodeOutput(write, supervision.code_output)
        streams = [(report_fd, None), (out_fd, "stdout"), (err_fd, "stderr")]
        if code_fd is not None:
            streams.append((code_fd, "code"))
        for fd, target in streams:
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
            elif key.data == "code":
                self.code.take(data)
            else:
                self._forward(key.data, self.decoders[key.fd].decode(data))
        return got

    def _forward(self, name: str, text: str) -> None:
        """The worker's own output: stdout held in JSON mode, stderr shown as it comes (its last line noted)."""
        if not text:
            return
        if name == "stdout" and self.json_mode:
            self.held_stdout.append(text)
            return
        write(name, text)
        if name == "stderr":
            self.stderr_tail = (self.stderr_tail + text)[-4096:]
            whole = self.stderr_tail.rpartition("\n")[0].rpartition("\n")[2]
            if whole:
                self.last_line = whole
            self.code.verispec_spoke()

    def drain(self) -> None:
        """The pipes' last bytes: until they close (every writer has ended) or ``GRACE_SECONDS`` pass."""
        end = time.monotonic() + GRACE_SECONDS
        while self.selector.get_map() and time.monotonic() < end:
            self._pump(0.05)
        for key in list(self.selector.get_map().values()):
            if key.data in ("stdout", "stderr"):
                self._forward(key.data, self.decoders[key.fd].decode(b"", final=True))
        self.selector.close()
        self.code.finish()

    def verdict(self, doing: str, crash_file) -> int:
        """The command's status (see ``verispec.guard.supervisor``); ``doing``: the worker's last note. Written after
        every process of the code has ended: the held JSON (with the run's ``confinement``), the ``--json-out``
        file, then the status's line; the last line on stderr is verispec's."""
        report = parse_report(self.report, self.pid)
        status, line, death = self._status(report, doing, crash_file)
        layers = dict(self.probed)
        if report is not None and isinstance(report.get("layers"), dict):
            layers = {name: held and bool(report["layers"].get(name, held)) for name, held in layers.items()}
        switches = guard_layers.switched_off()
        unconfined = report.get("unconfined") if report is not None else None
        record = guard_layers.record(layers, supervised=True, sandboxed=not switches and not unconfined)
        if unconfined:
            record["unconfined"] = unconfined
        if status == 0 and (switches or guard_layers.forgeable(layers)):
            why = (f"{' and '.join(name + '=0' for name in switches)} ran it in verispec's own process" if switches
                   else f"confinement layer(s) {', '.join(guard_layers.forgeable(layers))} could not be set up")
            status, line = EXIT_INCONCLUSIVE, (
                f"verispec: INCONCLUSIVE: the check itself passed, but the code under check could have forged that "
                f"({why}), so the command does not exit 0; run with every layer for a verdict you can trust")
        record["exit_status"] = status
        self._write_json(death, record)
        if unconfined and status == 0:
            write("stderr", f"verispec: note: {unconfined} ran unconfined, in verispec's worker itself: it could reach "
                            "your files and verispec's output, so what this command printed about it is the code's "
                            "to forge\n")
        if line:
            write("stderr", line + "\n")
        elif self.code.spoke_last and self.last_line:
            write("stderr", self.last_line + "\n")  # the code wrote last: verispec's last line again, below it
        return status

    def _status(self, report, doing: str, crash_file) -> tuple[int, str | None, dict | None]:
        """(status, the line to print, the JSON object of a death) from the report, or from how the worker ended."""
        stopped = self._user_stop(report)
        if stopped is not None:
            return stopped
        if report is None:
            return self._death(doing, crash_file)
        death = None
        if report.get("died") is True:
            death = {"verdict": "raises", "exit_status": int(report["status"]), "message": report.get("line")}
        return int(report["status"]), report.get("line") or None, death

    def _write_json(self, death: dict | None, record: dict) -> None:
        """The held JSON lines with ``confinement`` added, to stdout and the ``--json-out`` file."""
        if not self.json_mode:
            return
        text = "".join(self.held_stdout)
        if death is not None:
            text += json.dumps(death) + "\n"
        text = with_confinement(text, record)
        if self.supervision.json_on_stdout or self.supervision.json_out is None:
            write("stdout", text)
        if self.supervision.json_out is not None:
            try:
                atomic_write(self.supervision.json_out,
                             json_out_document(text, self.supervision.json_out_marker or {}).encode())
            except OSError as error:
                where = "the JSON is on stdout" if self.supervision.json_on_stdout else "no verdict was written"
                write("stderr", f"verispec: warning: could not write --json-out {self.supervision.json_out!r} "
                                f"({error}); {where}\n")

    def _death(self, doing: str, crash_file) -> tuple[int, str, dict]:
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
        return status, line, {"verdict": word, "exit_status": status, "message": line}

    def _user_stop(self, report) -> tuple[int, str | None, dict | None] | None:
        """The status of a command the user stopped (a signal from outside the check reached the supervisor before
        the worker's report): the worker's own status where it answered the signal itself (130 for Ctrl-C, a
        build's saved-and-stopped status: 128 or more), else 128 + the signal's number with one line, never a
        verdict on the code (the check did not end). None when the user did not stop it."""
        if not self.interrupts or (self.reported_at is not None and self.reported_at <= self.interrupts[0][1]):
            return None
        if report is not None and int(report["status"]) >= 128:
            return int(report["status"]), report.get("line") or None, None
        number = self.interrupts[0][0]
        status = 128 + int(number)
        line = (f"verispec: interrupted: stopped by {signal_name(number)} before the check ended (a signal to "
                "verispec's own process); no verdict on the code under check")
        return status, line, {"verdict": "stopped", "exit_status": status, "message": line}


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
