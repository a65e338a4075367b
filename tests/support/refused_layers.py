"""Run a command as on a kernel that refuses some of the guard's layers (``verispec.guard.layers``), for the tests of
issue 77 item 3: ``python refused_layers.py LAYER[,LAYER...] -- COMMAND ...`` installs a seccomp filter of its own,
inherited by the command and everything it starts, that answers as such a kernel would:

* ``landlock``: ``landlock_create_ruleset`` fails with ENOSYS (a kernel before Linux 5.13);
* ``seccomp``: ``prctl(PR_SET_SECCOMP)`` and ``seccomp()`` fail with EINVAL (a container that forbids filters);
* ``capabilities``: ``capset`` fails with EPERM;
* ``not_dumpable``: ``prctl(PR_SET_DUMPABLE)`` fails with EPERM;
* ``pid_namespace``: ``unshare`` fails with EPERM (a container whose profile forbids namespaces).

Written apart from ``verispec.guard.confinement`` (its own numbers and program), so that it checks that module rather
than repeating it. Linux on x86_64 or aarch64 only.
"""

from __future__ import annotations

import ctypes
import os
import platform
import struct
import sys

_ENOSYS, _EPERM, _EINVAL = 38, 1, 22
#: Per architecture: audit value, and the numbers of prctl, seccomp, capset, landlock_create_ruleset, unshare.
_ARCH = {"x86_64": (0xC000003E, 157, 317, 126, 444, 272), "aarch64": (0xC00000B7, 167, 277, 91, 444, 97)}
_PR_SET_DUMPABLE, _PR_SET_SECCOMP, _PR_SET_NO_NEW_PRIVS = 4, 22, 38


def rules(layers: set[str], numbers) -> list[tuple[int, int | None, int]]:
    """(system call, first argument or None for any, errno) for each refused layer."""
    _, prctl, seccomp, capset, landlock, unshare = numbers
    table = {"landlock": [(landlock, None, _ENOSYS)],
             "seccomp": [(prctl, _PR_SET_SECCOMP, _EINVAL), (seccomp, None, _EINVAL)],
             "capabilities": [(capset, None, _EPERM)],
             "not_dumpable": [(prctl, _PR_SET_DUMPABLE, _EPERM)],
             "pid_namespace": [(unshare, None, _EPERM)]}
    unknown = layers - set(table)
    if unknown:
        raise SystemExit(f"refused_layers: unknown layer(s) {sorted(unknown)}; choose from {sorted(table)}")
    return [rule for name in sorted(layers) for rule in table[name]]


def program(arch: int, refused: list[tuple[int, int | None, int]]) -> bytes:
    """A classic BPF program: each rule as 'if nr == N (and arg0 == A) return ERRNO', else allow."""
    load, equal, give = 0x20, 0x15, 0x06
    allow = 0x7FFF0000
    code = [(load, 0, 0, 4), (equal, 1, 0, arch), (give, 0, 0, allow), (load, 0, 0, 0)]
    for number, argument, errno in refused:
        answer = 0x00050000 | errno
        if argument is None:
            code += [(equal, 0, 1, number), (give, 0, 0, answer)]
        else:  # nr == N: load arg0, compare, answer; reload nr for the next rule either way
            code += [(equal, 0, 4, number), (load, 0, 0, 16), (equal, 0, 1, argument), (give, 0, 0, answer),
                     (load, 0, 0, 0)]
    code.append((give, 0, 0, allow))
    return b"".join(struct.pack("<HBBI", op, true, false, value) for op, true, false, value in code)


def install(layers: set[str]) -> None:
    arch, *numbers = _ARCH[platform.machine()]
    blob = program(arch, rules(layers, (arch, *numbers)))
    buffer = ctypes.create_string_buffer(blob)
    fprog = ctypes.create_string_buffer(struct.pack("<HxxxxxxQ", len(blob) // 8, ctypes.addressof(buffer)))
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 or \
            libc.prctl(_PR_SET_SECCOMP, 2, ctypes.c_void_p(ctypes.addressof(fprog)), 0, 0) != 0:
        raise SystemExit(f"refused_layers: the filter could not be installed (errno {ctypes.get_errno()})")


def main(argv: list[str]) -> None:
    if "--" not in argv or argv.index("--") != 1:
        raise SystemExit("usage: refused_layers.py LAYER[,LAYER...] -- COMMAND ...")
    install({name for name in argv[0].split(",") if name})
    command = argv[2:]
    os.execvp(command[0], command)


if __name__ == "__main__":
    main(sys.argv[1:])
