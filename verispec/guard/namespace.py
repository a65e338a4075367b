"""The code under check in a process-id namespace of its own (Linux): it sees, signals and traces no process but its
own, and whatever it leaves running ends with the namespace.

The seccomp filter (``verispec.guard.confinement.forbid_reaching``) refuses the code's signals to verispec's
processes and to the sandbox's ancestors by their numbers. Another process of the same user outside that chain (an
editor, a second verispec, a CI runner's other jobs) is still reachable by its number, and ``/proc`` lists every
process with its command line. A process-id namespace takes them out of view: a process number there names a process
of the namespace only, and the namespace's own ``/proc`` lists those alone. An unprivileged process may make one
together with a user namespace (Linux 3.8 on); a kernel or container may forbid that (``user.max_user_namespaces``
at 0, AppArmor's ``apparmor_restrict_unprivileged_userns``, Docker's default seccomp profile), and the layer is then
reported missing (``verispec.guard.layers``).

``own_process_namespace`` splits the sandbox process in three:

* the *keeper* (the process the worker forked, still in the worker's namespace) makes the namespaces, starts the
  init, and waits for it; it ends as the code's process ended (its exit status, or its signal), so the worker reads
  that end as before;
* the namespace's *init* (process 1 there) starts the code's process, reaps whatever is orphaned in the namespace,
  and when the code's process ends, tells the keeper how and ends: the kernel then kills every process left in the
  namespace, however it hid (a session of its own, a double fork, a lowered limit). It ends too when the keeper
  does (the keeper holds the only write end of a pipe the init watches);
* the *code's process* (process 2), which returns from the call with the namespace's own ``/proc`` mounted and goes
  on to confine itself and load the code.

The user namespace maps the user to itself: files keep their owner, and the capabilities it grants inside count
only for the namespaces it owns (the sandbox drops them anyway). Standard library only.
"""

from __future__ import annotations

import ctypes
import faulthandler
import os
import select
import signal

from verispec.guard.confinement import linux_libc
from verispec.guard.processes import kill_me_with_my_parent

_CLONE_NEWNS, _CLONE_NEWUSER, _CLONE_NEWPID = 0x00020000, 0x10000000, 0x20000000
_MS_NOSUID, _MS_NODEV, _MS_NOEXEC, _MS_REC, _MS_PRIVATE = 2, 4, 8, 0x4000, 1 << 18
#: Seconds between two reaping rounds of the namespace's init (an orphan stays a zombie at most this long).
REAP_SECONDS = 0.5
#: Seconds between two looks at the code's process where the kernel has no process descriptors (before Linux 5.3):
#: its end reaches the worker at most this much later.
CODE_POLL_SECONDS = 0.02
#: The keeper's exit status where the code's process could not be started (the namespace's init died at once).
NO_CODE_PROCESS = 70


def own_process_namespace() -> bool:
    """Move the code's process into a process-id namespace of its own, with its own ``/proc`` (module docstring).
    Returns in the code's process: True where the namespace and its ``/proc`` hold; False where the kernel refused
    (this process then goes on as before, in the worker's namespace), or where the namespace holds but its ``/proc``
    could not be mounted (the host's ``/proc`` still lists other processes). The keeper never returns."""
    libc = linux_libc()
    if libc is None:
        return False
    uid, gid = os.getuid(), os.getgid()
    if libc.unshare(_CLONE_NEWUSER | _CLONE_NEWPID | _CLONE_NEWNS) != 0:
        return False
    for path, text in (("/proc/self/uid_map", f"{uid} {uid} 1"), ("/proc/self/setgroups", "deny"),
                       ("/proc/self/gid_map", f"{gid} {gid} 1")):
        try:  # the user keeps its own ids inside (unmapped, it would read as the overflow user)
            with open(path, "w") as file:
                file.write(text)
        except OSError:
            pass
    watch_end, alive_end = os.pipe()  # the init reads watch_end; the keeper alone holds alive_end
    status_end, told_end = os.pipe()  # the init tells the keeper how the code's process ended
    init = os.fork()
    if init == 0:
        os.close(alive_end)
        os.close(status_end)
        code = _start_code_process(watch_end, told_end)
        if code == 0:
            return _own_proc(libc)
        _init(code, watch_end, told_end)
    os.close(watch_end)
    os.close(told_end)
    _keep(init, alive_end, status_end)


def _start_code_process(watch_end: int, told_end: int) -> int:
    """In the init: fork the code's process (process 2), which keeps none of the namespace's pipes; 0 in it."""
    try:
        code = os.fork()
    except OSError:
        os._exit(NO_CODE_PROCESS)
    if code == 0:
        os.close(watch_end)
        os.close(told_end)
        kill_me_with_my_parent()  # the init's end ends it in any case (the kernel kills a namespace with its init)
    return code


def _own_proc(libc) -> bool:
    """Mount the namespace's own ``/proc`` over the worker's (in a mount namespace of its own, made private first so
    that nothing mounted here reaches the worker's)."""
    mount = libc.mount
    mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_void_p]
    if mount(None, b"/", None, _MS_REC | _MS_PRIVATE, None) != 0:
        return False
    return mount(b"proc", b"/proc", b"proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC, None) == 0


def _init(code: int, watch_end: int, told_end: int) -> None:
    """Process 1 of the namespace: the parent of the code's process, and the reaper of every process orphaned in the
    namespace (the kernel reparents those to it, never to a reaper outside). When the code's process ends, its
    status goes to the keeper; when that or the keeper's end (EOF on ``watch_end``: the keeper holds the pipe's only
    write end) comes, the init ends, and the kernel kills every process left in the namespace. Every process of the
    namespace is the init's descendant, so the init reaps them all as it ends, and no process outside (the keeper, a
    reaper of verispec's) ever waits on one of them. No handler of the worker's is kept: signals from inside the
    namespace then do nothing to it (the kernel delivers to a namespace's init only the signals it handles)."""
    try:
        faulthandler.disable()
        for number in signal.valid_signals():
            try:
                signal.signal(number, signal.SIG_DFL)
            except (OSError, ValueError, RuntimeError):  # SIGKILL, SIGSTOP, or not the main thread
                pass
        _close_all_but(watch_end, told_end)  # none of the worker's descriptors (the code's channel) is held
        try:
            ended = [os.pidfd_open(code)]  # readable when the code's process ends (Linux 5.3)
        except (AttributeError, OSError):
            ended = []
        while True:
            ready, _, _ = select.select([watch_end, *ended], [], [], REAP_SECONDS if ended else CODE_POLL_SECONDS)
            status = _reap_all(code)
            if status is not None:
                os.write(told_end, status.to_bytes(4, "little"))
                break
            if watch_end in ready:
                break
    finally:
        os._exit(0)


def _reap_all(code: int) -> int | None:
    """Reap every ended child of the init; the code process's wait status where it is among them."""
    found = None
    try:
        while True:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            if pid == code:
                found = status
    except ChildProcessError:
        pass
    return found


def _keep(init: int, alive_end: int, status_end: int) -> None:
    """The keeper: hold nothing of the code's (its channel, its output pipe), read how the code's process ended,
    wait for the init (and so for the namespace's end), and end as the code's process did."""
    try:
        _close_all_but(alive_end, status_end)
        told = b""
        while len(told) < 4:
            part = os.read(status_end, 4 - len(told))
            if not part:  # the init ended without telling: the namespace was ended from outside
                break
            told += part
        try:
            os.waitpid(init, 0)
        except ChildProcessError:
            pass
        status = int.from_bytes(told, "little") if len(told) == 4 else NO_CODE_PROCESS << 8
        if os.WIFSIGNALED(status):
            _die_by(os.WTERMSIG(status))
        os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else NO_CODE_PROCESS)
    finally:
        os._exit(NO_CODE_PROCESS)


def _close_all_but(*kept: int) -> None:
    """Close every descriptor of this process but ``kept``."""
    try:
        limit = os.sysconf("SC_OPEN_MAX")
    except (OSError, ValueError):
        limit = 1024
    start = 0
    for fd in sorted(kept):
        os.closerange(start, fd)
        start = fd + 1
    os.closerange(start, limit)


def _die_by(number: int) -> None:
    """End this process by signal ``number`` as the code's process ended, without a core file or a traceback of
    the keeper's own."""
    faulthandler.disable()
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    except (ImportError, OSError, ValueError):
        pass
    try:
        signal.signal(number, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {number})
    except (OSError, ValueError, RuntimeError):
        pass
    os.kill(os.getpid(), number)


__all__ = ["CODE_POLL_SECONDS", "NO_CODE_PROCESS", "REAP_SECONDS", "own_process_namespace"]
