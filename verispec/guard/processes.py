"""The processes a supervised command leaves (``verispec.guard.supervisor``): this process as the reaper of the worker's
orphans for the command's duration, and the ending of every process descended from the worker, found through
Linux's /proc (elsewhere only the worker itself is known). Standard library only."""

from __future__ import annotations

import ctypes
import json
import os
import signal
import sys
import sysconfig
import time
from collections.abc import Callable

#: Linux prctl options: be the reaper of orphaned descendants, and read that setting back.
_PR_SET_CHILD_SUBREAPER = 36
_PR_GET_CHILD_SUBREAPER = 37
#: The name a sandbox process gives itself (``verispec.guard.sandbox``): the reaper ends it without counting it among
#: the processes the code under check left running (it is verispec's own).
SANDBOX_NAME = "vs-sandbox"
#: Linux prctl option: the signal a process gets when the thread that created it ends.
_PR_SET_PDEATHSIG = 1
#: verispec's, the standard library's and installed packages' folders: a frame there is not the user's line.
LIBRARY_FOLDERS = (os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep,  # verispec/, not guard/
                   *{os.path.abspath(sysconfig.get_paths()[key]) + os.sep
                     for key in ("stdlib", "platstdlib", "purelib", "platlib")})


class Reaper:
    """This process as the reaper of the worker's orphans for the command's duration (Linux), and the ending of
    every process descended from the worker."""

    def __init__(self, kill: Callable[[int, int], None], write: Callable[[str, str], None]):
        """``kill``: ``os.kill`` as the interpreter has it; ``write(stream_name, text)``: how to tell the user."""
        self.kill, self.write = kill, write
        self.libc = None
        self.previous = None
        self.before = _children(os.getpid())
        if not sys.platform.startswith("linux"):
            return
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            value = ctypes.c_int(0)
            if libc.prctl(_PR_GET_CHILD_SUBREAPER, ctypes.byref(value), 0, 0, 0) == 0 and \
                    libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0:
                self.libc, self.previous = libc, value.value
        except (OSError, AttributeError):
            pass

    def end_descendants(self, worker: int) -> int:
        """End (SIGKILL) every process descended from the worker, or orphaned to this process since it started;
        reap those that are this process's children. Returns how many were ended."""
        ended: set[int] = set()
        for _ in range(50):  # a process that forks as fast as it is ended is bounded too
            roots = {worker} | (_children(os.getpid()) - self.before)
            found = descendants(roots) - {os.getpid()}
            alive = {pid for pid in found if not _is_zombie(pid)}
            for pid in alive:
                try:
                    self.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            ended |= {pid for pid in alive - {worker} if _name(pid) != SANDBOX_NAME}
            for pid in found | {worker}:
                if _parent(pid) == os.getpid() and pid not in self.before:
                    try:
                        os.waitpid(pid, 0 if pid in alive or _is_zombie(pid) else os.WNOHANG)
                    except ChildProcessError:
                        pass
            if not alive:
                break
            time.sleep(0.01)
        if ended:
            self.write("stderr", f"verispec: note: ended {len(ended)} process{'es' if len(ended) > 1 else ''} that "
                             "the code under check had started and left running\n")
        return len(ended)

    def close(self) -> None:
        if self.libc is not None and not self.previous:
            self.libc.prctl(_PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
        self.libc = None


def _stat_fields(pid: int) -> list[str] | None:
    """/proc/PID/stat's fields after the command name (state first), or None for a process that is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as file:
            text = file.read().decode("utf-8", "replace")
    except OSError:
        return None
    return text.rpartition(")")[2].split()


def _name(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm", "rb") as file:
            return file.read().decode("utf-8", "replace").strip()
    except OSError:
        return ""


def name_this_process(name: str) -> None:
    """Set this process's name as /proc/PID/comm shows it (Linux; elsewhere nothing)."""
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(15, ctypes.c_char_p(name.encode()[:15]), 0, 0, 0)
        except (OSError, AttributeError):
            pass


def _parent(pid: int) -> int | None:
    fields = _stat_fields(pid)
    return int(fields[1]) if fields else None


def _is_zombie(pid: int) -> bool:
    fields = _stat_fields(pid)
    return fields is None or fields[0] in ("Z", "X")


def _children(pid: int) -> set[int]:
    return {child for child, parent in _parents().items() if parent == pid}


def _parents() -> dict[int, int]:
    """Every process's parent (Linux /proc; empty elsewhere)."""
    found = {}
    try:
        names = os.listdir("/proc")
    except OSError:  # out of descriptors (the code lowered this process's limit, where seccomp is missing): raise
        _restore_open_files()  # the soft limit to the hard one and look again
        try:
            names = os.listdir("/proc")
        except OSError:
            return found
    for name in names:
        if name.isdigit():
            parent = _parent(int(name))
            if parent is not None:
                found[int(name)] = parent
    return found


def _restore_open_files() -> None:
    """This process's open-file soft limit set to its hard limit (the one a process may restore on its own)."""
    try:
        import resource

        _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ImportError, OSError, ValueError):
        pass


def descendants(roots: set[int]) -> set[int]:
    """The processes descended from ``roots`` (the roots included, where they exist), found through /proc."""
    parents = _parents()
    found = set(roots) & set(parents)
    grew = True
    while grew:
        more = {pid for pid, parent in parents.items() if parent in found} - found
        found |= more
        grew = bool(more)
    return found


def kill_me_with_my_parent() -> None:
    """Ask the kernel for SIGKILL when this process's parent ends, however it ends (Linux; elsewhere nothing): a
    worker process must not compute on as an orphan. The caller checks that its parent is still the one it had, in
    case it ended before the request."""
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        except (OSError, AttributeError):
            pass


def signal_name(sig) -> str:
    try:
        return signal.Signals(sig).name
    except (ValueError, TypeError):
        return str(sig)


def parse_report(data: bytes, pid: int) -> dict | None:
    """The worker's report (the last line sent by the worker's own pid), or None."""
    found = None
    for line in data.splitlines():
        try:
            report = json.loads(line)
        except ValueError:
            continue
        if isinstance(report, dict) and report.get("pid") == pid and isinstance(report.get("status"), int):
            found = report
    return found


def how_it_ended(status: int | None) -> str:
    if status is None:
        return "ended"
    if os.WIFSIGNALED(status):
        return f"was killed by signal {signal_name(os.WTERMSIG(status))}"
    return f"exited with status {os.WEXITSTATUS(status)}"


def trace_crashes_to(crash_file) -> None:
    """faulthandler's traceback of a fatal signal (the current thread's) into ``crash_file``, which
    ``crash_location`` reads. Disabled first: enabling an enabled faulthandler only changes its file, so a
    fatal-signal handler a library installed since (torch's, vLLM's) would run instead and the file stay empty."""
    import faulthandler

    faulthandler.disable()
    faulthandler.enable(file=crash_file, all_threads=False)


def crash_location(crash_file) -> str:
    """' at FILE, line N, in NAME' from faulthandler's traceback (most recent call first): the first frame that is
    not verispec's or the interpreter's own; '' without one."""
    try:
        crash_file.seek(0)
        text = crash_file.read(65536).decode("utf-8", "replace")
    except (OSError, ValueError):
        return ""
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("File "):
            continue
        path, _, rest = line[len('File "'):].partition('"')
        if path.startswith("<") or os.path.abspath(path).startswith(LIBRARY_FOLDERS):
            continue
        lineno, _, name = rest.replace(", line ", "").strip().partition(" in ")
        return f" at {os.path.basename(path)}, line {lineno}, in {name}"
    return ""


__all__ = ["LIBRARY_FOLDERS", "SANDBOX_NAME", "Reaper", "crash_location", "descendants", "how_it_ended",
           "kill_me_with_my_parent", "name_this_process", "parse_report", "signal_name", "trace_crashes_to"]
