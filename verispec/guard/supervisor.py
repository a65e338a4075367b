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
  the in-process watchdog of ``verispec.guard.budget`` cannot interrupt): it is ended, ``INCONCLUSIVE`` (exit 3).

Whatever ends the command, nothing the code under check started outlives it: the worker ends with ``os._exit``
once it has reported (threads, ``atexit`` handlers and a replaced ``sys.excepthook`` never hold it up), and the
supervisor, Linux's child subreaper meanwhile, ends every process descended from the worker before it returns.
The whole story, and why a process rather than intercepted exits alone (a signal, a crash, ``os.close(1)`` or a
thread that never ends cannot be intercepted inside one process), is in docs/guides/cli.md; the cost is one ``fork``.
Code that rewrites verispec's own objects in memory on purpose is beyond it (only an operating-system sandbox stops
that). Without ``os.fork``, or with ``VERISPEC_SUPERVISE=0`` (a debugger), the command runs in one process.
"""

from __future__ import annotations

import io
import json
import mmap
import os
import shutil
import signal
import struct
import sys
import tempfile
import traceback
from collections.abc import Callable

from verispec.errors import SandboxDied, UserCodeExit
from verispec.guard import layers as guard_layers
from verispec.guard.processes import (
    Reaper,
    kill_me_with_my_parent,
    signal_name,
    trace_crashes_to,
)
from verispec.guard.watch import EXIT_INCONCLUSIVE, EXIT_INTERNAL, EXIT_RAISES, Supervision, Watch
from verispec.guard.watch import write as _write

#: The line after a traceback of verispec's own (status 70, never 1: that says LOSSY).
INTERNAL_LINE = ("verispec: internal error: the traceback above is a bug in verispec, not a verdict on the code under "
                 "check (status 70); please report it")
#: The environment variable that turns supervision off ("0"): the command runs in one process.
SWITCH = "VERISPEC_SUPERVISE"
#: Bytes of the shared note (``note``): what the worker is doing, read by the supervisor if the worker dies.
NOTE_BYTES = 4096
#: Seconds past the command's own limits (--time-budget with its grace, and one --call-timeout) before the
#: supervisor ends a worker still running: the last resort for code that starves ``verispec.guard.budget``'s watchdog.
OUTER_MARGIN_SECONDS = 15.0


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
    #: This process is a sandbox (``verispec.guard.sandbox``): it runs the user's code and reports nothing.
    sandbox: bool = False
    #: Called before the report is sent (``before_report``): a sandbox registers its own end there.
    before_report: list = []
    #: The supervisor's pid and the worker's (``protected_pids``).
    chain: tuple = ()
    #: A folder the supervisor made for the command and removes when it ends, whatever ended it (``scratch``).
    scratch: str | None = None
    #: The write end of the supervisor's pipe for the code's own output: a sandbox's stdout and stderr.
    code_fd: int | None = None
    #: The layers the supervisor's probe found (``verispec.guard.layers``), and those every sandbox set up itself.
    probed: dict = {}
    layers: dict | None = None
    #: Code of the user's ran in the worker itself (``ran_unconfined``): the verdict's JSON says it was not sandboxed.
    unconfined: str | None = None


def in_worker() -> bool:
    """Whether this process is a supervised command's worker (not a fork of it, nor its sandbox)."""
    return _Worker.pid is not None and _Worker.pid == os.getpid() and not _Worker.sandbox


def in_worker_tree() -> bool:
    """Whether this process is a supervised command's worker or a fork of it that verispec made (a local pool's
    process), and not a sandbox (``verispec.guard.sandbox``)."""
    return _Worker.pid is not None and not _Worker.sandbox


def become_sandbox() -> None:
    """In a fork of the worker that will run the user's code (``verispec.guard.sandbox``): no report channel, no shared
    note, and the code's exits of the ``os`` and ``signal`` modules raise ``UserCodeExit`` here as in the worker."""
    if _Worker.note is not None:
        try:
            _Worker.note.close()
        except (BufferError, ValueError):
            pass
    _Worker.note = None
    _Worker.report_fd = None
    _Worker.pid = os.getpid()
    _Worker.sandbox = True


def before_report(callback: Callable[[], None]) -> None:
    """Call ``callback`` in the worker once the command is done, before its status is reported (the sandboxes end
    there, so the supervisor finds none of them left running)."""
    if callback not in _Worker.before_report:
        _Worker.before_report.append(callback)


def code_output_fd() -> int | None:
    """In the worker and its forks: the pipe a sandbox makes its stdout and stderr (the supervisor shows what comes
    through it fenced, ``verispec.guard.output``); None elsewhere (the code then shares the process's streams)."""
    return _Worker.code_fd


def sandbox_layers(found: dict) -> None:
    """In the worker: the layers a sandbox set up itself (its first message). A layer the supervisor's probe found but
    the sandbox could not set up gets its line here; the report names what every sandbox held."""
    found = {name: bool(found.get(name, False)) for name in guard_layers.LAYERS if name != "not_dumpable"}
    before = _Worker.layers if _Worker.layers is not None else dict(_Worker.probed)
    for name, held in found.items():
        if not held and before.get(name, False):
            _write("stderr", guard_layers.missing_line(name) + "\n")
    _Worker.layers = {**before, **{name: before.get(name, False) and held for name, held in found.items()}}


def ran_unconfined(what: str) -> None:
    """In the worker: code of the user's runs here, not in a sandbox (``bound --restriction``, whose class returns
    objects that cannot leave a sandbox). The run's ``confinement`` says it was not sandboxed, and a command that
    ends 0 says so in a line (``verispec.guard.watch``; an error stays one line)."""
    if in_worker() and _Worker.unconfined is None:
        _Worker.unconfined = what


def scratch() -> str | None:
    """The command's scratch folder (in the worker and its forks; None elsewhere): what is made in it (a sandbox's
    own folder) is removed with it when the command ends, a worker killed at a limit included."""
    return _Worker.scratch


def protected_pids() -> list[int]:
    """The processes the code under check must not reach: the supervisor, the worker, and this process and its
    parent (a fork of the worker that starts a sandbox of its own: a sweep's local executor)."""
    return sorted({*_Worker.chain, os.getpid(), os.getppid()})


def doing() -> str:
    """What the worker noted it is checking now ('' outside a worker)."""
    return _read_note(_Worker.note) if _Worker.note is not None and in_worker() else ""


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
_OWN_FOLDER = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep  # verispec/, not guard/


def _called_by_user_code() -> bool:
    """Whether the caller of the patched function (two frames up) is not verispec's own code, in the worker or its
    sandbox."""
    if _Worker.pid is None or _Worker.pid != os.getpid():
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
    code: what it did, where, with which arguments, and what was being checked. An exit in the sandbox comes with
    what it did and where, found there (``sandbox_finding``); the worker adds what it was checking."""
    found = getattr(error, "sandbox_finding", None)
    if not found:
        what = error.what if isinstance(error, UserCodeExit) else f"raised SystemExit({error.code!r})"
        if isinstance(error, UserCodeExit):
            what = f"called {what}"
        frame = _user_frame(error.__traceback__)
        where = ""
        if frame is not None:
            filename, line, name, arguments = frame
            shown = ", ".join(f"{key}={value}" for key, value in arguments.items())
            where = f" at {os.path.basename(filename)}, line {line}, in {name}({shown})"
        found = f"the code under check {what}{where}"
    doing = _read_note(_Worker.note) if _Worker.note is not None else ""
    return f"{found}{f' while checking {doing}' if doing else ''}"


def _send(status: int, line: str | None, died: bool = False) -> None:
    """The report: the status, a line for the supervisor to print, and whether the code's process died (the
    supervisor then prints one JSON object for a command with JSON output, as for the worker's own death)."""
    fd = _Worker.report_fd
    if fd is None:
        return
    data = json.dumps({"pid": os.getpid(), "status": int(status), "line": line, "died": died,
                       "layers": _Worker.layers, "unconfined": _Worker.unconfined}).encode() + b"\n"
    try:
        os.write(fd, data)
    except OSError:
        pass  # the supervisor then reports the worker's end as a death


def report_and_end(status: int, line: str | None = None) -> None:
    """Send the command's status (and a line for the supervisor to print) and end the worker at once: for the
    in-process watchdog's last resort (``verispec.guard.budget.end_process``), which must not wait for the main
    thread."""
    _send(status, line)
    _ORIGINALS.get("_exit", os._exit)(status)


def _work(run: Callable[[], int]) -> None:
    """The worker's life: run the command, check its output streams, report, end."""
    line = None
    died = False
    try:
        status = run()
    except (SystemExit, UserCodeExit) as error:
        status = EXIT_RAISES
        line = f"verispec: RAISES: {exit_finding(error)}; the code must return, not end verispec's process"
    except SandboxDied as error:  # the sandbox running the code ended or broke the protocol (verispec.guard.sandbox)
        status = EXIT_RAISES
        line = error.line
        died = True
    except BaseException as error:  # verispec's own failure: its traceback and status 70, as without the worker
        try:
            traceback.print_exception(error)
        except BaseException:  # pragma: no cover - the stream is gone (the tampering check below says so)
            pass
        status = EXIT_INTERNAL
        line = INTERNAL_LINE
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
    for callback in _Worker.before_report:
        try:
            callback()
        except BaseException:  # ending what is left must not keep the status from the supervisor
            pass
    _send(status, line, died)
    _ORIGINALS.get("_exit", os._exit)(status)


def _die_with(parent: int) -> None:
    """End the worker when the supervisor ends, however it ends (Linux: the kernel's parent-death signal)."""
    kill_me_with_my_parent()
    if os.getppid() != parent:  # it ended before the signal was asked for
        _ORIGINALS.get("_exit", os._exit)(EXIT_INCONCLUSIVE)


def _start_worker(report_fd: int, out_fd: int, err_fd: int, shared: mmap.mmap, crash_file, parent: int,
                  scratch_folder: str) -> None:
    """Set the worker up, in the child right after the fork."""
    _Worker.pid = os.getpid()
    _Worker.scratch = scratch_folder
    _Worker.chain = (parent, os.getpid())
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
    trace_crashes_to(crash_file)
    os.register_at_fork(after_in_child=_after_fork_in_a_copy)
    _intercept_exits()


# --- the supervisor's side --------------------------------------------------------------------------------------

def run_supervised(run: Callable[[], int], supervision: Supervision) -> int:
    """Run ``run`` (the command; it returns its exit status) in a worker and return the status it reported, or the
    supervisor's own when it reported none (see the module docstring). The worker's output is forwarded to this
    process's ``sys.stdout`` and ``sys.stderr`` as it comes."""
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    probed = guard_layers.probe()  # and this process made not dumpable: no /proc/PID/fd, /proc/PID/mem or ptrace
    refused = _layers_said(probed, supervision)
    if refused is not None:
        return refused
    report_read, report_write = os.pipe()
    out_read, out_write = os.pipe()
    err_read, err_write = os.pipe()
    code_read, code_write = os.pipe()
    shared = mmap.mmap(-1, NOTE_BYTES)
    crash_file = tempfile.TemporaryFile()
    scratch_folder = tempfile.mkdtemp(prefix="verispec-run-")
    reaper = Reaper(_real("kill"), _write)
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:  # the worker: never returns into the caller, whatever happens
        try:
            for fd in (report_read, out_read, err_read, code_read):
                os.close(fd)
            _Worker.code_fd, _Worker.probed = code_write, probed
            _start_worker(report_write, out_write, err_write, shared, crash_file, parent, scratch_folder)
            note(supervision.checking)
            _work(run)
        finally:
            _ORIGINALS.get("_exit", os._exit)(EXIT_RAISES)
    for fd in (report_write, out_write, err_write, code_write):
        os.close(fd)
    try:
        os.setpgid(pid, pid)  # as the worker does itself: whichever runs first
    except OSError:
        pass
    try:
        watch = Watch(pid, report_read, out_read, err_read, supervision, kill=_real("kill"),
                      outer_margin=OUTER_MARGIN_SECONDS, code_fd=code_read, probed=probed)
        watch.wait()
        reaper.end_descendants(pid)
        watch.drain()
        return watch.verdict(_read_note(shared), crash_file)
    finally:
        reaper.close()
        for fd in (report_read, out_read, err_read, code_read):
            try:
                os.close(fd)
            except OSError:
                pass
        shared.close()
        crash_file.close()
        shutil.rmtree(scratch_folder, ignore_errors=True)


def _layers_said(probed: dict, supervision: Supervision) -> int | None:
    """One line on stderr for each layer this machine refuses and for the sandbox switched off; exit 2 (refused)
    where every layer is required (``verispec.guard.layers``), None to go on."""
    switches = guard_layers.switched_off()
    reasons = [f"{name}=0 is set" for name in switches]
    reasons += [f"layer '{name}' could not be set up" for name in guard_layers.missing(probed)]
    if reasons and guard_layers.required(supervision.require):
        _write("stderr", guard_layers.refusal_line(reasons) + "\n")
        return 2
    for name in guard_layers.missing(probed):
        _write("stderr", guard_layers.missing_line(name) + "\n")
    if switches:
        _write("stderr", guard_layers.off_line(switches) + "\n")
    return None


__all__ = ["INTERNAL_LINE", "SWITCH", "Supervision", "available", "become_sandbox", "before_report", "code_output_fd",
           "exit_finding", "in_worker", "in_worker_tree", "note", "protected_pids", "report_and_end", "run_supervised",
           "ran_unconfined", "sandbox_layers", "scratch", "watch_user_files"]
