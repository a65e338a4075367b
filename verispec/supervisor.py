"""The code under check runs in a child process whose end verispec reports: an exit status means what it says.

A command that runs the user's own code (a rule ``--verifier FILE.py:NAME``, a class ``--restriction FILE.py:NAME``,
a checked function ``check-external FILE.py:NAME``) runs in a *worker*, a fork of the command's process taken
right after its options were read; the process the user started is the *supervisor*. The worker sends its exit
status to the supervisor over a pipe of its own once the command is done; the supervisor returns that status,
or, when none came, says why in one line and returns its own:

* The code ended the process - ``sys.exit``/``SystemExit`` with any code, ``os._exit``, ``os.abort``, a signal to
  its own process (``os.kill``, ``signal.raise_signal``, ``ctypes``' ``kill``), a crash in a C extension - or
  broke the report's pipe: ``RAISES`` (exit 4) with what it did, the file and line where it did it and what
  verispec was checking at the time (the problem and, where there is a traceback, the call's arguments).
  In the worker the exits of the ``os`` and ``signal`` modules, called from the code under check, raise
  ``UserCodeExit`` in its place (verispec's own calls pass), so the places that run the code report them with the
  problem and the inputs as they report a raise; what still ends the process (a signal sent by other means, a
  segmentation fault) is reported from the last thing the worker was doing (``note``) and from
  ``faulthandler``'s traceback.
* The code closed or replaced verispec's standard output or error (``sys.stdout``, file descriptors 1 and 2):
  what verispec printed may not have reached the user, so the command ends ``RAISES`` (exit 4) with the verdict
  the check itself reached, never 0.
* The worker did not end within the command's time budget and call limit (a C call that holds the GIL, which
  the in-process watchdog of ``verispec.budget`` cannot interrupt): it is ended, ``INCONCLUSIVE`` (exit 3).

Whatever ends the command, nothing the code under check started outlives it: the worker ends with ``os._exit``
once it has reported (threads, ``atexit`` handlers and a replaced ``sys.excepthook`` never hold it up), and the
supervisor, Linux's child subreaper meanwhile, ends every process descended from the worker before it returns.
The whole story, and why a process rather than intercepted exits alone (a signal, a crash, ``os.close(1)`` or a
thread that never ends cannot be intercepted inside one process), is in docs/guides/cli.md; the cost is one ``fork``.
Code that rewrites verispec's own objects in memory on purpose is beyond it (only an operating-system sandbox stops
that). Without ``os.fork``, or with ``VERISPEC_SUPERVISE=0`` (a debugger), the command runs in one process.
"""

from __future__ import annotations

import codecs
import io
import json
import mmap
import os
import selectors
import signal
import struct
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass

from verispec.errors import UserCodeExit
from verispec.processes import Reaper, crash_location, how_it_ended, kill_me_with_my_parent, parse_report, signal_name

#: The environment variable that turns supervision off ("0"): the command runs in one process.
SWITCH = "VERISPEC_SUPERVISE"
#: Exit statuses (``verispec.verdict``'s; this module runs before anything else of the command).
EXIT_INCONCLUSIVE = 3
EXIT_RAISES = 4
#: Bytes of the shared note (``note``): what the worker is doing, read by the supervisor if the worker dies.
NOTE_BYTES = 4096
#: Seconds the supervisor waits for a worker that reported its status to end, and for the pipes' last bytes once
#: it has ended, before it ends what is left itself.
GRACE_SECONDS = 2.0
#: Seconds past the command's own limits (--time-budget with its grace, and one --call-timeout) before the
#: supervisor ends a worker still running: the last resort for code that starves ``verispec.budget``'s watchdog.
OUTER_MARGIN_SECONDS = 15.0


@dataclass(frozen=True)
class Supervision:
    """What the supervisor needs to know of the command: what it checks (for messages), the longest it may run in
    seconds (None: no limit), and whether its output is one JSON object (a death is then reported as one too)."""

    command: str
    time_limit: float | None = None
    json_output: bool = False
    checking: str = ""


def available() -> bool:
    """Whether commands run supervised here: ``os.fork`` exists and ``VERISPEC_SUPERVISE`` is not "0"."""
    return hasattr(os, "fork") and os.environ.get(SWITCH, "1") != "0"


# --- the worker's side ------------------------------------------------------------------------------------------

class _Worker:
    """The worker's state: its pid, the shared note, the report pipe and the streams it owns."""

    pid: int | None = None
    note: mmap.mmap | None = None
    report_fd: int | None = None
    streams: tuple = ()
    stream_ids: tuple = ()
    user_files: set[str] = set()


def in_worker() -> bool:
    """Whether this process is a supervised command's worker (not a fork of it)."""
    return _Worker.pid is not None and _Worker.pid == os.getpid()


def note(text: str) -> None:
    """Record what the worker is checking now (a problem, a call): the supervisor names it if the process dies.
    Nothing outside a worker; cheap enough for once per problem."""
    shared = _Worker.note
    if shared is None or _Worker.pid != os.getpid():
        return
    data = " ".join(str(text).split()).encode("utf-8", "replace")[:NOTE_BYTES - 4]
    shared[:4 + len(data)] = struct.pack("<I", len(data)) + data


def _read_note(shared: mmap.mmap) -> str:
    (length,) = struct.unpack("<I", shared[:4])
    return shared[4:4 + min(length, NOTE_BYTES - 4)].decode("utf-8", "replace")


class _ForwardedStream(io.TextIOWrapper):
    """The worker's stdout or stderr: a pipe to the supervisor that answers ``isatty`` as the supervisor's own
    stream does, so that progress bars and colours behave as they would without the worker."""

    def __init__(self, fd: int, like, line_buffering: bool):
        super().__init__(io.FileIO(fd, "w", closefd=False), encoding="utf-8",
                         errors=getattr(like, "errors", None) or "backslashreplace", line_buffering=line_buffering,
                         write_through=True)
        try:
            self._tty = bool(like.isatty())
        except Exception:  # a closed or unusual stream: not a terminal
            self._tty = False

    def isatty(self) -> bool:
        return self._tty


def _real(name: str):
    """The ``os`` or ``signal`` function as the interpreter has it (before ``_intercept_exits``)."""
    return _ORIGINALS.get(name) or getattr(os if hasattr(os, name) else signal, name)


_ORIGINALS: dict[str, Callable] = {}
_OWN_FOLDER = os.path.dirname(os.path.abspath(__file__)) + os.sep


def _called_by_user_code() -> bool:
    """Whether the caller of the patched function (two frames up) is not verispec's own code, in the worker."""
    if not in_worker():
        return False
    caller = sys._getframe(2)
    return not os.path.abspath(caller.f_code.co_filename).startswith(_OWN_FOLDER)


def _own_process(pid: int) -> bool:
    return pid in (0, -1, os.getpid(), -os.getpgrp(), os.getppid(), -os.getpid())


def _intercept_exits() -> None:
    """In the worker: the ``os`` and ``signal`` functions that end the process raise ``UserCodeExit`` when the code
    under check calls them (see the module docstring); a signal 0 (a check that a process exists) and signals to
    other processes pass."""

    def exit_now(status=0):
        if _called_by_user_code():
            raise UserCodeExit(f"os._exit({status!r})")
        return _ORIGINALS["_exit"](status)

    def abort():
        if _called_by_user_code():
            raise UserCodeExit("os.abort()")
        return _ORIGINALS["abort"]()

    def kill(pid, sig):
        if sig != 0 and _own_process(pid) and _called_by_user_code():
            raise UserCodeExit(f"os.kill({pid}, {signal_name(sig)}) on verispec's own process")
        return _ORIGINALS["kill"](pid, sig)

    def killpg(pgid, sig):
        if sig != 0 and pgid in (0, os.getpgrp()) and _called_by_user_code():
            raise UserCodeExit(f"os.killpg({pgid}, {signal_name(sig)}) on verispec's own process group")
        return _ORIGINALS["killpg"](pgid, sig)

    def raise_signal(sig):
        if _called_by_user_code():
            raise UserCodeExit(f"signal.raise_signal({signal_name(sig)})")
        return _ORIGINALS["raise_signal"](sig)

    for module, name, replacement in ((os, "_exit", exit_now), (os, "abort", abort), (os, "kill", kill),
                                      (os, "killpg", killpg), (signal, "raise_signal", raise_signal)):
        if hasattr(module, name):
            _ORIGINALS[name] = getattr(module, name)
            setattr(module, name, replacement)


def watch_user_files(filenames) -> None:
    """Count frames of code compiled from these files as the user's (``verispec.user_code`` registers what it
    loads): a fork made with one of them on the stack is the user's (``_after_fork_in_a_copy``)."""
    _Worker.user_files.update(name for name in filenames if name)


def _after_fork_in_a_copy() -> None:
    """A fork of the worker: it cannot report a status (the supervisor ends it with the command, if it has not
    ended). One the code under check made (its code on the stack of the fork) may go on running verispec's code, so
    its output goes nowhere; verispec's own forks (a sweep's worker processes) keep theirs."""
    if _Worker.pid is None or _Worker.pid == os.getpid():
        return
    if _Worker.report_fd is not None:
        try:
            os.close(_Worker.report_fd)
        except OSError:
            pass
    _Worker.report_fd = None
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename not in _Worker.user_files:
        frame = frame.f_back
    if frame is None:
        return
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 1)
        os.dup2(null, 2)
        os.close(null)
    except OSError:
        pass


def _fd_identity(fd: int):
    try:
        stat = os.fstat(fd)
    except OSError:
        return None
    return stat.st_dev, stat.st_ino


def _tampering() -> str | None:
    """What the code under check did to the worker's output (None: nothing): a replaced or closed ``sys.stdout``
    or ``sys.stderr``, or file descriptor 1 or 2 closed or pointed elsewhere."""
    for index, (name, fd) in enumerate((("stdout", 1), ("stderr", 2))):
        current = getattr(sys, name)
        if current is not _Worker.streams[index]:
            return f"replaced sys.{name} (with {type(current).__name__})"
        if current.closed:
            return f"closed sys.{name}"
        identity = _fd_identity(fd)
        if identity != _Worker.stream_ids[index]:
            return f"{'closed' if identity is None else 'redirected'} file descriptor {fd} (standard {name[3:]})"
    return None


def _user_frame(trace) -> tuple[str, int, str, dict[str, str]] | None:
    """The innermost frame of ``trace`` in code that is not verispec's (the user's line that did it)."""
    found = None
    for frame, line in traceback.walk_tb(trace):
        if not os.path.abspath(frame.f_code.co_filename).startswith(_OWN_FOLDER):
            found = (frame, line)
    if found is None:
        return None
    frame, line = found
    return frame.f_code.co_filename, line, frame.f_code.co_name, _arguments(frame)


def _arguments(frame) -> dict[str, str]:
    """The arguments of a frame's call as short texts (the inputs the user's code was called with)."""
    code = frame.f_code
    names = code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]
    shown = {}
    for name in names:
        value = frame.f_locals.get(name)
        try:
            text = repr(value)
        except Exception:  # a repr of the user's object may fail in any way
            text = "<no repr>"
        if text.startswith("<") and " object at 0x" in text:
            text = f"<{type(value).__name__}>"
        shown[name] = text if len(text) <= 200 else text[:197] + "..."
    return shown


def exit_finding(error: BaseException) -> str:
    """One line for an exit of the code under check (``SystemExit`` or ``UserCodeExit``) caught as it left the
    code: what it did, where, with which arguments, and what was being checked."""
    what = error.what if isinstance(error, UserCodeExit) else f"raised SystemExit({error.code!r})"
    if isinstance(error, UserCodeExit):
        what = f"called {what}"
    frame = _user_frame(error.__traceback__)
    where = ""
    if frame is not None:
        filename, line, name, arguments = frame
        shown = ", ".join(f"{key}={value}" for key, value in arguments.items())
        where = f" at {os.path.basename(filename)}, line {line}, in {name}({shown})"
    doing = _read_note(_Worker.note) if _Worker.note is not None else ""
    return f"the code under check {what}{where}{f' while checking {doing}' if doing else ''}"


def _send(status: int, line: str | None) -> None:
    fd = _Worker.report_fd
    if fd is None:
        return
    data = json.dumps({"pid": os.getpid(), "status": int(status), "line": line}).encode() + b"\n"
    try:
        os.write(fd, data)
    except OSError:
        pass  # the supervisor then reports the worker's end as a death


def report_and_end(status: int, line: str | None = None) -> None:
    """Send the command's status (and a line for the supervisor to print) and end the worker at once: for the
    in-process watchdog's last resort (``verispec.budget.end_process``), which must not wait for the main thread."""
    _send(status, line)
    _ORIGINALS.get("_exit", os._exit)(status)


def _work(run: Callable[[], int]) -> None:
    """The worker's life: run the command, check its output streams, report, end."""
    line = None
    try:
        status = run()
    except (SystemExit, UserCodeExit) as error:
        status = EXIT_RAISES
        line = f"verispec: RAISES: {exit_finding(error)}; the code must return, not end verispec's process"
    except BaseException as error:  # verispec's own failure: its traceback, as without the worker
        try:
            traceback.print_exception(error)
        except BaseException:  # pragma: no cover - the stream is gone (the tampering check below says so)
            pass
        status = 1
    tampered = _tampering()
    if tampered is not None:
        from verispec.verdict import Verdict

        reached = {verdict.exit_status: verdict.word for verdict in Verdict}.get(status, f"with status {status}")
        line = (f"verispec: RAISES: the code under check {tampered}; what verispec printed may not have reached you "
                f"(the check itself ended {reached}), so the command fails")
        status = EXIT_RAISES
    for stream in _Worker.streams:
        try:
            stream.flush()
        except Exception:  # a stream the code closed: the supervisor prints the line itself
            pass
    _send(status, line)
    _ORIGINALS.get("_exit", os._exit)(status)


def _die_with(parent: int) -> None:
    """End the worker when the supervisor ends, however it ends (Linux: the kernel's parent-death signal)."""
    kill_me_with_my_parent()
    if os.getppid() != parent:  # it ended before the signal was asked for
        _ORIGINALS.get("_exit", os._exit)(EXIT_INCONCLUSIVE)


def _start_worker(report_fd: int, out_fd: int, err_fd: int, shared: mmap.mmap, crash_file, parent: int) -> None:
    """Set the worker up, in the child right after the fork."""
    import faulthandler

    _Worker.pid = os.getpid()
    os.setpgid(0, 0)  # signals to the user's group reach the supervisor, which passes them on once
    _die_with(parent)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)  # a background process group must not read the terminal (it would be stopped)
    os.close(null)
    _Worker.note = shared
    _Worker.report_fd = report_fd
    outer_out, outer_err = sys.stdout, sys.stderr
    os.dup2(out_fd, 1)
    os.dup2(err_fd, 2)
    os.close(out_fd)
    os.close(err_fd)
    sys.stdout = _ForwardedStream(1, outer_out, line_buffering=True)
    sys.stderr = _ForwardedStream(2, outer_err, line_buffering=True)
    _Worker.streams = (sys.stdout, sys.stderr)
    _Worker.stream_ids = (_fd_identity(1), _fd_identity(2))
    faulthandler.enable(file=crash_file, all_threads=False)
    os.register_at_fork(after_in_child=_after_fork_in_a_copy)
    _intercept_exits()


# --- the supervisor's side --------------------------------------------------------------------------------------

def run_supervised(run: Callable[[], int], supervision: Supervision) -> int:
    """Run ``run`` (the command; it returns its exit status) in a worker and return the status it reported, or the
    supervisor's own when it reported none (see the module docstring). The worker's output is forwarded to this
    process's ``sys.stdout`` and ``sys.stderr`` as it comes."""
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    report_read, report_write = os.pipe()
    out_read, out_write = os.pipe()
    err_read, err_write = os.pipe()
    shared = mmap.mmap(-1, NOTE_BYTES)
    crash_file = tempfile.TemporaryFile()
    reaper = Reaper(_real("kill"), _write)
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:  # the worker: never returns into the caller, whatever happens
        try:
            for fd in (report_read, out_read, err_read):
                os.close(fd)
            _start_worker(report_write, out_write, err_write, shared, crash_file, parent)
            note(supervision.checking)
            _work(run)
        finally:
            _ORIGINALS.get("_exit", os._exit)(EXIT_RAISES)
    for fd in (report_write, out_write, err_write):
        os.close(fd)
    try:
        os.setpgid(pid, pid)  # as the worker does itself: whichever runs first
    except OSError:
        pass
    try:
        watch = _Watch(pid, report_read, out_read, err_read, supervision)
        watch.wait()
        reaper.end_descendants(pid)
        watch.drain()
        return watch.verdict(shared, crash_file)
    finally:
        reaper.close()
        for fd in (report_read, out_read, err_read):
            try:
                os.close(fd)
            except OSError:
                pass
        shared.close()
        crash_file.close()


class _Watch:
    """The supervisor's loop: forward the worker's output, read its report, wait for its end (or end it at the
    outer limit, or on an interrupt that it does not answer)."""

    def __init__(self, pid: int, report_fd: int, out_fd: int, err_fd: int, supervision: Supervision):
        self.pid = pid
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
        self.interrupts: list[tuple[int, float]] = []
        self.passed_on = 0

    def wait(self) -> None:
        limit = self.supervision.time_limit
        deadline = None if limit is None else self.started + limit + OUTER_MARGIN_SECONDS
        reported_at = None
        previous = self._hold_signals()
        try:
            while self.wait_status is None:
                self._pump(0.05)
                self._reap()
                now = time.monotonic()
                if self.report and reported_at is None:
                    reported_at = now
                if self.wait_status is not None:
                    break
                if reported_at is not None and now - reported_at > GRACE_SECONDS:
                    self._end("it reported its status but did not end")
                elif deadline is not None and now > deadline:
                    self._end(f"it ran {now - self.started:.0f} s, past the command's limits ({limit:g} s) and "
                              f"{OUTER_MARGIN_SECONDS:g} s more")
                elif self.interrupts:
                    self._pass_interrupts()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _hold_signals(self) -> dict:
        """Ctrl-C, SIGTERM and SIGHUP are passed on to the worker, which ends the command its own way (a build saves
        what it has); this process only waits for it. The worker has a process group of its own, so a terminal's
        Ctrl-C reaches it once, through this process."""
        previous = {}
        if sys.platform.startswith("win") or not _is_main_thread():
            return previous
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            previous[sig] = signal.signal(sig, lambda number, frame: self.interrupts.append((number,
                                                                                            time.monotonic())))
        return previous

    def _pass_interrupts(self) -> None:
        """Each interrupt is passed on as it comes; a worker that has not ended ``3 * GRACE_SECONDS`` after the first
        is ended."""
        while self.passed_on < len(self.interrupts):
            try:
                _real("kill")(self.pid, self.interrupts[self.passed_on][0])
            except ProcessLookupError:
                pass
            self.passed_on += 1
        if time.monotonic() - self.interrupts[0][1] > 3 * GRACE_SECONDS:
            self._end("it did not end after it was interrupted")

    def _end(self, why: str) -> None:
        self.ended_by_supervisor = why
        try:
            _real("kill")(self.pid, signal.SIGKILL)
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
                _write(key.data, self.decoders[key.fd].decode(data))
        return got

    def drain(self) -> None:
        """The pipes' last bytes: until they close (every writer has ended) or ``GRACE_SECONDS`` pass."""
        end = time.monotonic() + GRACE_SECONDS
        while self.selector.get_map() and time.monotonic() < end:
            self._pump(0.05)
        for key in list(self.selector.get_map().values()):
            if key.data is not None:
                _write(key.data, self.decoders[key.fd].decode(b"", final=True))
        self.selector.close()

    def verdict(self, shared: mmap.mmap, crash_file) -> int:
        report = parse_report(self.report, self.pid)
        if report is not None:
            if report.get("line"):
                _write("stderr", report["line"] + "\n")
            return int(report["status"])
        return self._death(shared, crash_file, report)

    def _death(self, shared: mmap.mmap, crash_file, report) -> int:
        doing = _read_note(shared)
        while_doing = f" while checking {doing}" if doing else ""
        if self.ended_by_supervisor is not None and self.interrupts:
            _write("stderr", "verispec: interrupted\n")
            return 130
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
            _write("stdout", json.dumps({"verdict": word, "exit_status": status, "message": line}) + "\n")
        _write("stderr", line + "\n")
        return status


def _write(name: str, text: str) -> None:
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


__all__ = ["SWITCH", "Supervision", "available", "exit_finding", "in_worker", "note", "report_and_end",
           "run_supervised", "watch_user_files"]
