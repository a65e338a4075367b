"""Code under check in a process of its own: the process that reaches the verdict never runs it.

A supervised command (``verispec.guard.supervisor``) runs in a *worker* process and its supervisor reports the status
the
worker sends. Were the user's code to run in the worker, it could do whatever the worker can: write the report
itself, rewrite verispec's objects in memory, end the process as it pleases. So in a worker, each object the user
names (``FILE.py:NAME``) is loaded in a *sandbox*: a fork of the worker taken before the file is imported, which
keeps none of the worker's ways to the supervisor (the report pipe is closed, ``/proc`` and ``ptrace`` are closed to
it and its signals to the worker and supervisor are refused: ``verispec.guard.confinement``). The worker holds a proxy
and
every call of the user's code is a message:

* worker -> sandbox: ``pickle``d (the sandbox trusts the worker), a call's target, method and arguments. A verispec
  object the code is meant to call back (a ``Chooser``) is not copied: it crosses as a handle, and each of the code's
  calls on it comes back to the worker as a message, answered there (``CALLBACK_METHODS``).
* sandbox -> worker: ``verispec.guard.wire``, plain values read by a parser that cannot run code: the call's result, the
  exception it raised (its type's name, its text, the user's line), an exit it attempted, or a callback.

The worker waits for each answer as a call into the user's code (``budget.user_call``): ``--call-timeout`` and the
time budgets stop it as they stopped a call in the same process, and the sandbox, interrupted in the middle of the
code, is ended and started afresh for the next call. A sandbox that dies (``os._exit`` through libc, a signal, a
crash) ends the command ``RAISES`` with how it ended and where (``SandboxDied``); a message that is not in the
format does too. What the code prints goes to a pipe of the supervisor's own, shown fenced (``verispec.guard.output``),
never to the command's streams.

A process that did not start as a worker (the Python API, ``VERISPEC_SUPERVISE=0``) loads the object itself.
"""

from __future__ import annotations

import io
import os
import pickle
import select
import shutil
import signal
import socket
import sys
import tempfile
import time

from verispec.errors import SandboxDied, UnknownVerifierError, UserCodeExit
from verispec.guard import budget, confinement, sandbox_process, supervisor, wire
from verispec.guard.processes import (
    crash_location,
    how_it_ended,
)

#: The methods of a callback object (a Chooser) the code under check may call from the sandbox.
CALLBACK_METHODS = frozenset({"categorical", "bernoulli"})
#: The environment variable that turns the sandbox off ("0") in a supervised worker.
SWITCH = "VERISPEC_SANDBOX"

#: The most calls one message may stand for (a procedure's choice traces for one tree: the enumerator's own limit).
MAX_CALLS_PER_MESSAGE = 2_000_001


class SandboxedException(Exception):
    """An exception the code under check raised in the sandbox, re-raised in the worker under its type's name
    (a built-in type is re-raised as itself): ``sandbox_site`` is the user's line, ``file:line``."""

    sandbox_site = "?"


def enabled() -> bool:
    """Whether user code loaded in this process goes to a sandbox: in a supervised worker or a fork of it (a sweep's
    local pool), unless switched off; never in a sandbox itself."""
    return supervisor.in_worker_tree() and hasattr(os, "fork") and os.environ.get(SWITCH, "1") != "0"


# --- the worker's side --------------------------------------------------------------------------------------------

class Sandbox:
    """One user object (``FILE.py:NAME``) in its sandbox process, started on first use in each process that uses
    it (a sweep's forked workers start their own). ``loader(spec, what)`` loads it there
    (``verispec.user_code.load_attribute``); ``describe(target, register)`` runs in the sandbox after loading
    and returns what the worker needs to know of the object, as plain values; ``register(obj)`` gives another of
    its objects (a node solver held by a rule) an id that ``call`` accepts. ``call_hook(function, args, kwargs,
    options)`` runs each call in the sandbox when the worker passes ``options`` (check-external's RNG capture)."""

    def __init__(self, spec: str, what: str, describe, call_hook=None, loader=None):
        self.spec, self.what, self.describe, self.call_hook, self.loader = spec, what, describe, call_hook, loader
        self.pid: int | None = None
        self.owner: int | None = None
        self.description = None
        self.channel: socket.socket | None = None
        self.nonce = b""
        self.crash_file = None
        self.torch_device = None
        self.ignored = 0  # records on the channel that were not the sandbox's answer (the code wrote them)
        self.owner_at_fork: int | None = None
        self.private_dir: str | None = None

    def __getstate__(self):  # a copy in another process starts its own sandbox
        return {"spec": self.spec, "what": self.what, "describe": self.describe, "call_hook": self.call_hook,
                "loader": self.loader}

    def __setstate__(self, state):
        self.__init__(**state)

    def load(self):
        """Start the sandbox and load the object: its description. ``UnknownVerifierError`` when it cannot be
        loaded, as in one process."""
        self._ensure()
        return self.description

    def call(self, object_id: int, method: str | None, args: tuple, kwargs: dict, options=None, *, what: str):
        """Call object ``object_id`` (its ``method``, or the object itself) in the sandbox: its result, or what it
        raised. ``what`` names the call in a ``--call-timeout`` message. Returns (result, extra): ``extra`` is what
        the call hook added (None without one)."""
        self._ensure()
        handles: dict[int, object] = {}
        self.nonce = os.urandom(16)
        self._send(("call", self.nonce, object_id, method, args, kwargs, options), handles)
        return self._answer(handles, what)

    # the process

    def _ensure(self) -> None:
        if self.pid is not None and self.owner == os.getpid():
            return
        self.pid = None
        self._start()

    def _start(self) -> None:
        # one channel of records (SOCK_SEQPACKET): what the code writes into it itself are records of their own,
        # which fail the nonce check and are dropped, never mixed into the sandbox's answer
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        crash_file = tempfile.TemporaryFile()
        # the one folder it may write in: inside the command's scratch folder, which the supervisor removes
        self.private_dir = tempfile.mkdtemp(prefix="verispec-sandbox-", dir=supervisor.scratch())
        protected = supervisor.protected_pids()
        self.nonce = os.urandom(16)
        confinement.protect_this_process()
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # a closed stream: nothing to flush
                pass
        self.owner_at_fork = os.getpid()
        pid = os.fork()
        if pid == 0:
            try:
                ours.close()
                sandbox_process.serve(self, theirs, crash_file, protected)
            finally:
                os._exit(70)  # the real one: a sandbox never returns into the worker's code
        theirs.close()
        self.pid, self.owner, self.crash_file, self.channel = pid, os.getpid(), crash_file, ours
        _STARTED.append(self)
        supervisor.before_report(_end_all)
        layers = self._receive()  # what it set up before loading the code (verispec.guard.layers)
        if layers.get("kind") != "layers" or not isinstance(layers.get("value"), dict):
            self._broken("did not say which confinement layers it set up")
        supervisor.sandbox_layers(layers["value"])
        self.description, _ = self._answer({}, f"loading {self.spec.rpartition(':')[0]}")

    def _end(self) -> None:
        """End the sandbox (a call abandoned in the middle: a time limit, an interrupt); the next call starts one."""
        pid, self.pid = self.pid, None
        if self.channel is not None:
            self.channel.close()
            self.channel = None
        if pid is not None and self.owner == os.getpid():
            try:  # its whole process group first (it leads a session of its own): what it started goes with it,
                os.killpg(pid, signal.SIGKILL)  # found without /proc (the supervisor's reaper ends the rest)
            except OSError:
                pass
            try:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            except (OSError, ChildProcessError):
                pass
            if self.private_dir:
                shutil.rmtree(self.private_dir, ignore_errors=True)

    # messages

    def _send(self, message, handles: dict[int, object]) -> None:
        try:
            wire.send_records(self.channel, self.nonce, _dumps(message, handles))
        except OSError:
            self._died()

    def _answer(self, handles: dict[int, object], what: str):
        """Read the sandbox's messages until the call's answer, serving its callbacks, as one call into the user's
        code (``budget.user_call``); a ``ran`` message (one of many calls made in one message, ``progress``) starts
        the next call's limit."""
        pending: BaseException | None = None
        marker = budget.user_call(what)
        marker.__enter__()
        calls = 0
        try:
            while True:
                message = self._receive()
                kind = message.get("kind")
                if kind == "ran":
                    calls += 1
                    if calls > MAX_CALLS_PER_MESSAGE:
                        self._broken(f"reported more than {MAX_CALLS_PER_MESSAGE:,} calls in one")
                    marker.__exit__(None, None, None)
                    marker = budget.user_call(what)
                    marker.__enter__()
                    continue
                if kind != "callback":
                    break
                if pending is not None:
                    self._send(("abort",), handles)
                    continue
                try:
                    value = _serve_callback(message, handles)
                except BaseException as error:  # raised by verispec's own object: re-raised after the call
                    pending = error
                    self._send(("abort",), handles)
                    continue
                self._send(("reply", value), handles)
        except BaseException:
            self._end()
            raise
        finally:
            marker.__exit__(None, None, None)
        if pending is not None:
            raise pending
        return _outcome(message, self.spec)

    def _receive(self) -> dict:
        """The sandbox's next message: its records in order, with this call's nonce; any other record (the code
        under check wrote it) is dropped and counted."""
        parts, size = [], 0
        while True:
            record = self._record()
            header = wire.record_header(record)
            if header is None or header[1] != self.nonce or header[2] != len(parts):
                self._ignore()
                continue
            parts.append(record[wire.RECORD_HEADER.size:])
            size += len(parts[-1])
            if size > wire.MAX_MESSAGE_BYTES:
                self._broken(f"sent a message of over {wire.MAX_MESSAGE_BYTES} bytes")
            if header[3]:
                break
        try:
            message = wire.decode(b"".join(parts), torch_device=self.torch_device)
        except wire.WireError as error:
            self._broken(f"sent a message verispec cannot read ({error})")
        if not isinstance(message, dict) or not isinstance(message.get("kind"), str):
            self._broken("sent a message without its kind")
        return message

    def _record(self) -> bytes:
        while True:
            try:
                ready, _, _ = select.select([self.channel], [], [], 1.0)
            except InterruptedError:
                continue
            if not ready:
                continue
            try:
                record = self.channel.recv(wire.RECORD_HEADER.size + wire.RECORD_BYTES + 1)
            except InterruptedError:
                continue
            except OSError:
                record = b""
            if not record:
                self._died()
            return record

    def _ignore(self) -> None:
        if not self.ignored:
            sys.stderr.write("verispec: note: the code under check wrote into verispec's channel to its process; "
                             "what it wrote was dropped (only verispec's own answers are read)\n")
        self.ignored += 1

    def _broken(self, why: str):
        self._end()
        raise SandboxDied(f"verispec: RAISES: the process running the code under check {why}, which is not "
                          f"verispec's protocol, while checking {self._doing()}; the code must return, not write to "
                          "verispec's channels")

    def _died(self):
        """The channel closed: the sandbox ended (how, from its exit status), or the code closed its end and the
        sandbox goes on (ended here after a moment, and said so)."""
        pid, status = self.pid, None
        if pid is not None and self.owner == os.getpid():
            deadline = time.monotonic() + 1.0
            while status is None:
                try:
                    done, found = os.waitpid(pid, os.WNOHANG)
                except ChildProcessError:
                    break
                if done:
                    status = found
                elif time.monotonic() > deadline:
                    self._broken("closed its channel to verispec and went on")
                else:
                    time.sleep(0.01)
        self.pid = None
        if self.private_dir and self.owner == os.getpid():
            shutil.rmtree(self.private_dir, ignore_errors=True)
        if status is not None and os.WIFEXITED(status) and os.WEXITSTATUS(status) == sandbox_process.CHANNEL_LOST:
            raise SandboxDied(f"verispec: RAISES: the code under check closed or broke its channel to verispec while "
                              f"checking {self._doing()}, so its answer could not come back; the code must return, "
                              "not touch verispec's descriptors")
        where = crash_location(self.crash_file) if self.crash_file is not None else ""
        raise SandboxDied(f"verispec: RAISES: the process running the code under check {how_it_ended(status)}{where}"
                          f" while checking {self._doing()}, without verispec's verdict; the code must return, not "
                          "end or crash the process")

    def _doing(self) -> str:
        return supervisor.doing() or self.spec


#: The sandboxes this process started (ended before the worker reports: ``supervisor.before_report``).
_STARTED: list[Sandbox] = []


def _end_all() -> None:
    for box in _STARTED:
        box._end()
    _STARTED.clear()


def _dumps(message, handles: dict[int, object]) -> bytes:
    """``message`` pickled, each callback object (a verispec object with ``categorical`` and ``bernoulli``: a
    Chooser) replaced by a handle registered in ``handles``."""
    buffer = io.BytesIO()
    pickler = pickle.Pickler(buffer, protocol=pickle.HIGHEST_PROTOCOL)

    def persistent_id(obj):
        if _is_callback(obj):
            handle = id(obj)
            handles[handle] = obj
            return ("callback", handle)
        return None

    pickler.persistent_id = persistent_id
    pickler.dump(message)
    return buffer.getvalue()


def _is_callback(obj) -> bool:
    """Whether ``obj`` is a verispec object the code calls back (a Chooser): decided once per type, as pickling
    asks for every object of a message (some 90 a call of check-external)."""
    kind = type(obj)
    known = _CALLBACK_TYPES.get(kind)
    if known is None:
        known = _CALLBACK_TYPES[kind] = (kind is not type and kind.__module__.startswith("verispec.")
                                         and all(callable(getattr(kind, name, None)) for name in CALLBACK_METHODS))
    return known


#: Types seen by ``_is_callback``, and whether they are callbacks.
_CALLBACK_TYPES: dict[type, bool] = {}


def _serve_callback(message: dict, handles: dict[int, object]):
    """One call of the code on a callback object, in the worker: checked, then answered by verispec's object."""
    handle, method, args = message.get("handle"), message.get("method"), message.get("args")
    if handle not in handles or method not in CALLBACK_METHODS or not isinstance(args, list):
        raise SandboxDied("verispec: RAISES: the process running the code under check called back an object or "
                          f"method verispec did not hand it ({str(method)[:40]!r}); the code must return, not write "
                          "to verispec's channels")
    return getattr(handles[handle], method)(*args)


def _outcome(message: dict, spec: str):
    """The result of a call, or its exception raised here (see the module docstring)."""
    kind = message["kind"]
    if kind == "return":
        return message.get("value"), message.get("extra")
    if kind == "refused":
        raise UnknownVerifierError(str(message.get("message", ""))[:2000])
    if kind == "raise":
        raise _exception(message)
    if kind == "exit":
        finding = str(message.get("finding", ""))[:2000]
        if message.get("how") == "SystemExit":
            error = SystemExit(message.get("code") if isinstance(message.get("code"), (int, str, type(None))) else 1)
        else:
            error = UserCodeExit(str(message.get("what", "exit"))[:500])
        error.sandbox_finding = finding
        error.sandbox_site = str(message.get("site", "?"))[:500]
        raise error
    raise SandboxDied(f"verispec: RAISES: the process running the code under check sent a message of kind "
                      f"{kind[:40]!r} while checking {spec}, which is not verispec's protocol; the code must return, "
                      "not write to verispec's channels")


def raise_failure(message) -> None:
    """Raise, in the worker, the exception or exit that ``failure`` described in the sandbox (a call hook's
    records carry one where the call must first report what it recorded)."""
    if not isinstance(message, dict) or message.get("kind") not in ("raise", "exit"):
        raise SandboxDied("verispec: RAISES: the process running the code under check sent a failure verispec cannot "
                          "read; the code must return, not write to verispec's channels")
    _outcome(message, "")


def _exception(message: dict) -> BaseException:
    """The exception a ``raise`` message describes: a built-in exception as itself, anything else (verispec's own
    error classes included: the code may raise them too, and one taken for verispec's own would steer the check, an
    ``AnalysisTimeoutError`` to INCONCLUSIVE) as a ``SandboxedException`` subclass of the same name."""
    import builtins

    name = str(message.get("type", "Exception"))
    name = "".join(c for c in name if c.isalnum() or c == "_")[:100] or "Exception"
    text = str(message.get("message", ""))[:20_000]
    builtin = getattr(builtins, name, None)
    if isinstance(builtin, type) and issubclass(builtin, Exception) and builtin.__module__ == "builtins":
        try:
            error = builtin(text)
        except Exception:  # a built-in whose constructor wants other arguments (UnicodeDecodeError)
            error = _named(name)(text)
    else:
        error = _named(name)(text)
    error.sandbox_site = str(message.get("site", "?"))[:500]
    return error


_NAMED: dict[str, type] = {}


def _named(name: str) -> type:
    if name not in _NAMED:
        _NAMED[name] = type(name, (SandboxedException,), {"__module__": "verispec.guard.sandbox"})
    return _NAMED[name]


# --- the sandbox's side -------------------------------------------------------------------------------------------

__all__ = ["CALLBACK_METHODS", "SWITCH", "Sandbox", "SandboxedException", "enabled", "raise_failure"]
