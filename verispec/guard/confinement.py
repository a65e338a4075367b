"""What the sandbox process may not do to the processes that reach and report the verdict (Linux).

The user's code runs in a process of its own (``verispec.guard.sandbox``), as the same user as verispec. Without more,
the
operating system would still let it reach the two processes above it, the *worker* (which reaches the verdict) and
the *supervisor* (which reports it): open their file descriptors through ``/proc/PID/fd`` (the report pipe among
them), write their memory through ``/proc/PID/mem`` or ``ptrace``, take a descriptor with ``pidfd_getfd``, or
signal them (stop the supervisor, end it, or pretend to be the user's Ctrl-C). Three measures close that:

* ``protect_this_process`` (in the supervisor and the worker): not dumpable, so their ``/proc/PID/fd`` and
  ``/proc/PID/mem`` and ``ptrace`` need ``CAP_SYS_PTRACE``;
* ``drop_capabilities`` (in the sandbox): that capability, and the few others that reach other processes or the
  machine (``CAP_SYS_ADMIN``, ``CAP_KILL``, ``CAP_SYS_RAWIO``, ``CAP_SYS_MODULE``, ``CAP_SETPCAP``), are dropped,
  with ``no_new_privs`` so no program it runs gets them back; a root user's code keeps its file permissions;
* ``forbid_reaching`` (in the sandbox): a seccomp filter answers ``EPERM`` to a signal sent to the protected
  processes or their groups (``kill``, ``tgkill``, ``rt_sigqueueinfo``, ``rt_tgsigqueueinfo``, ``pidfd_open``): the
  supervisor, the worker and every ancestor of the sandbox up to init (the shell or CI runner that started verispec
  among them), and ``kill(-1)`` (every process); to ``prlimit64`` on any process but the caller itself (a lowered
  open-file limit would blind the supervisor's reaper); and to ``tkill``, ``ptrace``, ``process_vm_readv``/``writev``,
  ``pidfd_getfd``, ``pidfd_send_signal`` and ``fcntl``'s ``F_SETOWN``/``F_SETOWN_EX``/``F_SETSIG`` (a signal on I/O)
  outright; every other system call passes. The code may still signal the processes it started; others of the same
  user outside that chain are out of its sight and reach only in the process-id namespace of its own that the
  sandbox makes first (``verispec.guard.namespace``; process ids wrap around too often, at 32,768 on some machines,
  to tell an older process by its number). The filter is inherited by everything the code starts.
* ``forbid_writing`` (in the sandbox): with Landlock, nothing may be written, created, removed or renamed outside a
  folder of the sandbox's own (its ``TMPDIR``) and ``/dev/null``, so the code cannot change the user's files or
  verispec's outputs either (a sweep's rows rewritten behind verispec's back, found by this project's hostile
  tester); inherited too.

Each step that the kernel refuses (another operating system, a container that forbids seccomp) is reported by the
return value, never raised: the sandbox still keeps the report channel out of the code's reach by closing it, and
the supervisor still tells the user's signals from the code's by the sender (``verispec.guard.supervisor``). Standard
library only.
"""

from __future__ import annotations

import ctypes
import os
import platform
import struct
import sys

_PR_SET_DUMPABLE = 4
_PR_SET_NO_NEW_PRIVS = 38
_PR_SET_SECCOMP = 22
_SECCOMP_MODE_FILTER = 2
_LINUX_CAPABILITY_VERSION_3 = 0x20080522
#: Capabilities the sandbox drops: SETPCAP 8, SYS_MODULE 16, SYS_RAWIO 17, SYS_PTRACE 19, SYS_ADMIN 21, KILL 5.
DROPPED_CAPABILITIES = (5, 8, 16, 17, 19, 21)

#: Per architecture: the audit arch value, and the numbers of the system calls the filter looks at.
_SYSCALLS = {
    "x86_64": (0xC000003E, {"kill": 62, "tkill": 200, "tgkill": 234, "rt_sigqueueinfo": 129,
                            "rt_tgsigqueueinfo": 297, "ptrace": 101, "process_vm_readv": 310,
                            "process_vm_writev": 311, "pidfd_open": 434, "pidfd_getfd": 438,
                            "pidfd_send_signal": 424, "fcntl": 72, "prlimit64": 302}),
    "aarch64": (0xC00000B7, {"kill": 129, "tkill": 130, "tgkill": 131, "rt_sigqueueinfo": 138,
                             "rt_tgsigqueueinfo": 240, "ptrace": 117, "process_vm_readv": 270,
                             "process_vm_writev": 271, "pidfd_open": 434, "pidfd_getfd": 438,
                             "pidfd_send_signal": 424, "fcntl": 25, "prlimit64": 261}),
}
#: System calls answered EPERM whatever their arguments.
_ALWAYS_REFUSED = ("tkill", "ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd", "pidfd_send_signal")
#: System calls answered EPERM when their first argument (a pid, a thread group, a negated group) is protected.
_REFUSED_FOR_PROTECTED = ("kill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo", "pidfd_open")
#: The most values (pids, groups, negated) the filter compares: each is an instruction, and a jump spans 255 at most.
MAX_PROTECTED_VALUES = 200
#: fcntl commands refused: F_SETOWN 8, F_SETSIG 10, F_SETOWN_EX 15.
_REFUSED_FCNTL = (8, 10, 15)
_EPERM = 1


def linux_libc():
    """The C library with errno kept (Linux), or None elsewhere: the system calls the guard's layers make."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None


def protect_this_process() -> bool:
    """Make this process not dumpable (see the module docstring); whether the kernel agreed."""
    libc = linux_libc()
    return libc is not None and libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0) == 0


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def drop_capabilities() -> bool:
    """Drop ``DROPPED_CAPABILITIES`` from this process (and set ``no_new_privs``); whether the kernel agreed."""
    libc = linux_libc()
    if libc is None:
        return False
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        return False
    header, data = _CapHeader(_LINUX_CAPABILITY_VERSION_3, 0), (_CapData * 2)()
    if libc.capget(ctypes.byref(header), data) != 0:
        return False
    for capability in DROPPED_CAPABILITIES:
        mask = ~(1 << (capability % 32)) & 0xFFFFFFFF
        word = data[capability // 32]
        word.effective &= mask
        word.permitted &= mask
        word.inheritable &= mask
    return libc.capset(ctypes.byref(header), data) == 0


def _filter(arch: int, numbers: dict[str, int], protected: list[int]) -> bytes:
    """The seccomp program (classic BPF) of ``forbid_reaching``: instructions with labels as jump targets, then
    each label resolved to its forward offset."""
    load, equal, greater_equal, give = 0x20, 0x15, 0x35, 0x06
    allow, refuse = 0x7FFF0000, 0x00050000 | _EPERM
    program: list[list] = []  # [code, true target, false target, value]; a target is a label or None (next)
    labels: dict[str, int] = {}

    def add(code, value, true=None, false=None):
        program.append([code, true, false, value & 0xFFFFFFFF])

    def label(name):
        labels[name] = len(program)

    add(load, 4)                                          # the architecture
    add(equal, arch, false="allow")                       # another ABI: nothing is known of its numbers
    add(load, 0)                                          # the system call's number
    add(greater_equal, 0x40000000, true="refuse")         # x32 calls on x86_64: none is needed
    for name in _ALWAYS_REFUSED:
        add(equal, numbers[name], true="refuse")
    for name in _REFUSED_FOR_PROTECTED:
        add(equal, numbers[name], true="check pid")
    add(equal, numbers["prlimit64"], true="check self")
    add(equal, numbers["fcntl"], false="allow")
    add(load, 16 + 8)                                     # fcntl's command: args[1], low word
    for command in _REFUSED_FCNTL:
        add(equal, command, true="refuse")
    add(give, allow)
    label("check pid")
    add(load, 16)                                         # args[0], low word (pid_t is 32 bits)
    for value in protected:
        add(equal, value, true="refuse")
    add(give, allow)
    label("check self")
    add(load, 16)                                         # prlimit64's pid: 0, the caller itself, alone passes
    add(equal, 0, true="allow", false="refuse")
    label("allow")
    add(give, allow)
    label("refuse")
    add(give, refuse)
    out = []
    for position, (code, true, false, value) in enumerate(program):
        offsets = [0 if target is None else labels[target] - position - 1 for target in (true, false)]
        if not all(0 <= offset < 256 for offset in offsets):
            raise AssertionError("a seccomp jump out of range")
        out.append(struct.pack("<HBBI", code, offsets[0], offsets[1], value))
    return b"".join(out)


def forbid_reaching(protected_pids: list[int]) -> bool:
    """Install the seccomp filter of the module docstring in this process, protecting ``protected_pids`` and every
    ancestor of this process (their process groups, negated, and -1 are protected too; the nearest first, up to
    ``MAX_PROTECTED_VALUES``); whether the kernel agreed."""
    libc = linux_libc()
    machine = platform.machine()
    if libc is None or machine not in _SYSCALLS:
        return False
    arch, numbers = _SYSCALLS[machine]
    values = [0xFFFFFFFF]
    for pid in [*protected_pids, *_ancestors()]:
        values += [value & 0xFFFFFFFF for value in _negated_too(pid) if value & 0xFFFFFFFF not in values]
    program = _filter(arch, numbers, values[:MAX_PROTECTED_VALUES])
    count = len(program) // 8
    buffer = ctypes.create_string_buffer(program)
    fprog = struct.pack("<HxxxxxxQ", count, ctypes.addressof(buffer))
    fprog_buffer = ctypes.create_string_buffer(fprog)
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        return False
    return libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.c_void_p(ctypes.addressof(fprog_buffer)), 0,
                      0) == 0


#: Landlock (Linux 5.13+): the file system rights this process gives up outside the folders it keeps (write, make,
#: remove, rename in or out, truncate); reading and running files stay allowed.
_LANDLOCK_WRITE_RIGHTS = {1: (1 << 1) | (1 << 4) | (1 << 5) | (1 << 6) | (1 << 7) | (1 << 8) | (1 << 9) | (1 << 10)
                          | (1 << 11) | (1 << 12), 2: 1 << 13, 3: 1 << 14}
#: The rights a rule on a single file may name: write and (ABI 3) truncate.
_LANDLOCK_FILE_RIGHTS = {1: 1 << 1, 3: 1 << 14}
_LANDLOCK_CREATE_RULESET, _LANDLOCK_ADD_RULE, _LANDLOCK_RESTRICT_SELF = 444, 445, 446


def forbid_writing(folders: list[str], files: list[str]) -> bool:
    """Give up, with Landlock, the right to write, create, remove or rename anything but beneath ``folders`` and the
    ``files`` themselves (``/dev/null``): the code under check then cannot change the user's files or verispec's
    outputs (a sweep's rows, a result file) behind verispec's back. Reading stays allowed. Whether the kernel agreed
    (Landlock absent: nothing changes, and the caller says so)."""
    libc = linux_libc()
    if libc is None:
        return False
    syscall = libc.syscall
    syscall.restype = ctypes.c_long
    abi = syscall(_LANDLOCK_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(1))
    if abi < 1:
        return False
    handled = sum(rights for version, rights in _LANDLOCK_WRITE_RIGHTS.items() if abi >= version)
    file_rights = sum(rights for version, rights in _LANDLOCK_FILE_RIGHTS.items() if abi >= version)
    attr = ctypes.create_string_buffer(struct.pack("<Q", handled))
    ruleset = syscall(_LANDLOCK_CREATE_RULESET, attr, ctypes.c_size_t(8), ctypes.c_uint32(0))
    if ruleset < 0:
        return False
    try:
        for path, rights in [(folder, handled) for folder in folders] + [(file, file_rights) for file in files]:
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue
            try:
                rule = ctypes.create_string_buffer(struct.pack("<Qi", rights, fd))
                if syscall(_LANDLOCK_ADD_RULE, ctypes.c_int(ruleset), ctypes.c_int(1), rule, ctypes.c_uint32(0)) < 0:
                    return False
            finally:
                os.close(fd)
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            return False
        return syscall(_LANDLOCK_RESTRICT_SELF, ctypes.c_int(ruleset), ctypes.c_uint32(0)) == 0
    finally:
        os.close(ruleset)


def _ancestors() -> list[int]:
    """This process's ancestors, its parent first, up to init (Linux /proc; none elsewhere)."""
    found, pid = [], os.getpid()
    while pid > 1 and len(found) < 64:
        try:
            with open(f"/proc/{pid}/stat", "rb") as file:
                pid = int(file.read().rpartition(b")")[2].split()[1])
        except (OSError, ValueError, IndexError):
            break
        if pid > 0:
            found.append(pid)
    return found


def _negated_too(pid: int) -> list[int]:
    values = [pid, -pid]
    try:
        group = os.getpgid(pid)
        values += [group, -group]
    except OSError:
        pass
    return values


__all__ = ["DROPPED_CAPABILITIES", "MAX_PROTECTED_VALUES", "drop_capabilities", "forbid_reaching", "forbid_writing",
           "linux_libc", "protect_this_process"]
