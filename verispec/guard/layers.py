"""Which of the guard's layers hold for a command, said on stderr when one does not, named in every verdict's JSON,
and required on request (``--require-confinement``, ``VERISPEC_REQUIRE_CONFINEMENT=1``).

The layers (``verispec.guard.confinement``, ``verispec.guard.namespace``) are what keeps the code under check from
the verdict: the supervisor and worker not dumpable, the sandbox's dangerous capabilities dropped, its seccomp filter,
Landlock's write rule, and the code's own process-id namespace. A kernel may refuse any of them (Landlock before
Linux 5.13, a container that forbids seccomp or namespaces). The supervisor
``probe``s them once, in a throwaway child, before the command's worker starts: what the kernel refuses there it
refuses to the sandboxes too, and the code under check cannot touch that answer (it has not run yet). Each sandbox
reports what it set up itself as well, before it loads the code (``verispec.guard.sandbox_process``).

A verdict the code could have forged is never exit 0 (``forgeable``): with the sandbox or the supervisor switched off,
the code runs in verispec's own process; without the non-dumpable flag it can reach the worker (its memory, its report
pipe); and a root user's code that kept ``CAP_SYS_PTRACE`` can too. Seccomp keeps the code's signals and limits off
verispec's processes and the user's shell, and Landlock keeps its writes off the user's files and verispec's outputs:
without either the verdict stands, and the line says what the code could do. Standard library only.
"""

from __future__ import annotations

import os
import select
import tempfile

from verispec.guard import confinement, namespace

#: The layers, in the order they are shown, with what a missing one leaves in the code's reach.
LAYERS = {
    "not_dumpable": "the code could read and write the worker's memory and report pipe through /proc",
    "capabilities": "a root user's code keeps CAP_SYS_PTRACE and CAP_KILL and can reach verispec's processes",
    "seccomp": "the code could signal, trace or limit verispec's processes and the shell that started them",
    "landlock": "the code could write the user's files and verispec's outputs (a sweep's rows, a result file)",
    "pid_namespace": "the code could list every process in /proc and signal this user's processes outside verispec's "
                     "own chain (an editor, another job), and a process it hid in a session of its own outlives the "
                     "sandbox until the supervisor's reaper finds it",
}
#: The environment variable that requires every layer ("1"), as ``--require-confinement`` does.
REQUIRE_SWITCH = "VERISPEC_REQUIRE_CONFINEMENT"
#: Seconds the probe's child may take (it makes four system calls).
PROBE_SECONDS = 10.0


def probe() -> dict[str, bool]:
    """Each layer: whether this kernel grants it here. Makes this process not dumpable (the supervisor's own layer)
    and tries the sandbox's four in a child that does nothing else."""
    layers = {"not_dumpable": confinement.protect_this_process()}
    tried = ("pid_namespace", "capabilities", "seccomp", "landlock")
    if not hasattr(os, "fork"):
        return {**layers, **dict.fromkeys(tried, False)}
    read_end, write_end = os.pipe()
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:  # the child: try each layer, in the sandbox's order, say which held, end at once
        try:
            os.close(read_end)
            granted = (namespace.own_process_namespace(), confinement.drop_capabilities(),
                       confinement.forbid_reaching([parent]),
                       confinement.forbid_writing([tempfile.gettempdir()], ["/dev/null"]))
            os.write(write_end, bytes(int(value) for value in granted))
        finally:
            os._exit(0)
    os.close(write_end)
    try:
        ready, _, _ = select.select([read_end], [], [], PROBE_SECONDS)
        answer = os.read(read_end, len(tried)) if ready else b""
    finally:
        os.close(read_end)
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass
    granted = [bool(value) for value in answer] if len(answer) == len(tried) else [False] * len(tried)
    return {**layers, **dict(zip(tried, granted))}


def switched_off() -> list[str]:
    """The environment's switches that turn protection off (``VERISPEC_SUPERVISE=0``, ``VERISPEC_SANDBOX=0``)."""
    return [name for name in ("VERISPEC_SUPERVISE", "VERISPEC_SANDBOX") if os.environ.get(name, "1") == "0"]


def required(option: bool = False) -> bool:
    """Whether every layer is required: ``--require-confinement`` or ``VERISPEC_REQUIRE_CONFINEMENT=1``."""
    return bool(option) or os.environ.get(REQUIRE_SWITCH, "0") not in ("", "0")


def missing(layers: dict[str, bool]) -> list[str]:
    """The layers that did not hold, in ``LAYERS``' order."""
    return [name for name in LAYERS if not layers.get(name, False)]


def missing_line(name: str) -> str:
    """The one line for a layer that could not be set up."""
    return (f"verispec: warning: confinement layer '{name}' could not be set up on this machine, so {LAYERS[name]}; "
            f"--require-confinement (or {REQUIRE_SWITCH}=1) refuses to run without it")


def off_line(switches: list[str]) -> str:
    """The one line for protection switched off by the environment."""
    names = " and ".join(f"{name}=0" for name in switches)
    return (f"verispec: warning: protection is off ({names}): the code under check runs in verispec's own process and "
            "could forge its verdict and output, so no check ends with exit 0 (a LOSSLESS verdict exits 3); unset "
            f"{'them' if len(switches) > 1 else 'it'} for a verdict you can trust")


def refusal_line(reasons: list[str]) -> str:
    """The one line of ``--require-confinement`` refusing a command (exit 2)."""
    return (f"verispec: error: --require-confinement: {'; '.join(reasons)}; run where the kernel grants every layer "
            f"(Linux 5.13 or later, seccomp and user namespaces allowed), or drop --require-confinement and "
            f"{REQUIRE_SWITCH}")


def forgeable(layers: dict[str, bool]) -> list[str]:
    """The missing layers through which the code under check could have forged the worker's report (an exit 0 is
    then not given): the non-dumpable flag (without it, ``/proc/PID/fd``, ``/proc/PID/mem``, ``ptrace`` and
    ``pidfd_getfd`` reach the worker as the same user), and for a root user the dropped ``CAP_SYS_PTRACE``, which
    passes that flag. Without seccomp alone the code may signal verispec's processes (a stop, or a death reported as
    RAISES), never write their report."""
    guarding = ["not_dumpable"] + (["capabilities"] if hasattr(os, "geteuid") and os.geteuid() == 0 else [])
    return [name for name in guarding if not layers.get(name, False)]


def record(layers: dict[str, bool], *, supervised: bool, sandboxed: bool) -> dict:
    """The ``confinement`` object of a verdict's JSON: how the code under check ran, and which layers held."""
    return {"supervised": supervised, "sandboxed": sandboxed, "layers": {name: bool(layers.get(name, False))
                                                                         for name in LAYERS},
            "missing": missing(layers) if sandboxed else list(LAYERS)}


__all__ = ["LAYERS", "PROBE_SECONDS", "REQUIRE_SWITCH", "forgeable", "missing", "missing_line", "off_line", "probe",
           "record", "refusal_line", "required", "switched_off"]
