"""The sandbox process's side (``verispec.guard.sandbox``): confine itself, load the user's object, answer the worker's
calls until the worker ends. What it sends is ``verispec.guard.wire``'s plain values; what the code under check does
here
reaches only this process (module docstring of ``verispec.guard.sandbox``)."""

from __future__ import annotations

import io
import os
import pickle
import socket
import sys
import tempfile
import time
import traceback

from verispec.errors import UnknownVerifierError, UserCodeExit
from verispec.guard import budget, confinement, namespace, supervisor, wire
from verispec.guard.processes import (
    LIBRARY_FOLDERS,
    SANDBOX_NAME,
    kill_me_with_my_parent,
    name_this_process,
    trace_crashes_to,
)

#: The exit status of a sandbox whose channel the code closed or broke (it cannot answer any more).
CHANNEL_LOST = 71
#: The environment variable naming folders (separated by ':') the code under check may write in, beside its own.
WRITABLE = "VERISPEC_SANDBOX_WRITABLE"
#: Seconds between two of ``progress``'s messages at most.
PROGRESS_SECONDS = 0.005


class _Callback:
    """In the sandbox: a verispec object the code may call back (a Chooser), reached through the worker."""

    def __init__(self, channel: _Channel, handle: int):
        self._channel, self._handle = channel, handle

    def categorical(self, probs):
        return self._channel.callback(self._handle, "categorical", [probs])

    def bernoulli(self, prob):
        return self._channel.callback(self._handle, "bernoulli", [prob])


class _Serving:
    """In the sandbox: the channel to the worker, and when ``progress`` last spoke on it."""

    channel = None
    said = 0.0


def progress() -> None:
    """In the sandbox, between the calls of the user's code that one message makes (a procedure's choice traces, the
    rows of a prefetch): tell the worker calls ended, so that ``--call-timeout`` limits each call, not their sum. Said
    at most every ``PROGRESS_SECONDS`` (a message each 10-microsecond call would cost 20 times the calls): a call is
    then stopped at most that much later than at its limit. Nothing outside a sandbox."""
    channel = _Serving.channel
    if channel is not None:
        now = time.monotonic()
        if now - _Serving.said >= PROGRESS_SECONDS:
            _Serving.said = now
            channel.send({"kind": "ran"})


class _Aborted(BaseException):
    """Raised in the code under check when the worker's object raised on its callback: the code unwinds, and the
    worker raises the object's own exception."""


class _Channel:
    def __init__(self, channel: socket.socket, nonce: bytes):
        self.channel, self.nonce = channel, nonce
        self.aborted = False

    def send(self, message: dict) -> None:
        wire.send_records(self.channel, self.nonce, wire.encode(message)[8:])

    def receive(self):
        parts = []
        while True:
            record = self.channel.recv(wire.RECORD_HEADER.size + wire.RECORD_BYTES + 1)
            if not record:
                os._exit(0)  # the worker ended: nothing is left to do
            header = wire.record_header(record)
            if header is None:
                continue
            parts.append(record[wire.RECORD_HEADER.size:])
            if header[3]:
                break
        unpickler = pickle.Unpickler(io.BytesIO(b"".join(parts)))
        unpickler.persistent_load = lambda key: _Callback(self, key[1])
        return unpickler.load()

    def callback(self, handle: int, method: str, args: list):
        if self.aborted:
            raise _Aborted()
        self.send({"kind": "callback", "handle": handle, "method": method, "args": args})
        answer = self.receive()
        if answer[0] == "abort":
            self.aborted = True
            raise _Aborted()
        return answer[1]


def serve(sandbox, channel_socket: socket.socket, crash_file, protected: list[int]) -> None:
    """The sandbox's life: confine itself, load the object, then answer calls until the worker ends."""
    parent = os.getppid()
    kill_me_with_my_parent()
    if os.getppid() != parent or parent != sandbox.owner_at_fork:
        return
    os.setsid()  # a session of its own: the code cannot join the worker's process group and signal it as 0
    name_this_process(SANDBOX_NAME)
    code_output = supervisor.code_output_fd()
    if code_output is not None:  # its stdout and stderr: the supervisor's pipe for the code's output, never the
        for stream in (sys.stdout, sys.stderr):  # command's streams (verispec.guard.output)
            try:
                stream.flush()
            except Exception:  # a closed stream: nothing to flush
                pass
        os.dup2(code_output, 1)
        os.dup2(code_output, 2)
    keep = {0, 1, 2, channel_socket.fileno(), crash_file.fileno()}
    for fd in _open_fds():
        if fd not in keep:
            try:
                os.close(fd)
            except OSError:
                pass
    own_namespace = namespace.own_process_namespace()  # from here on the code's process (verispec.guard.namespace)
    supervisor.become_sandbox()
    trace_crashes_to(crash_file)
    held = {"pid_namespace": own_namespace, "capabilities": confinement.drop_capabilities(),
            "seccomp": confinement.forbid_reaching(protected)}
    os.environ["TMPDIR"] = tempfile.tempdir = sandbox.private_dir  # caches and temporary files go there
    writable = [sandbox.private_dir, "/dev/shm", *filter(None, os.environ.get(WRITABLE, "").split(":"))]
    held["landlock"] = confinement.forbid_writing(writable, ["/dev/null"])
    budget.forget_guard()
    channel = _Channel(channel_socket, sandbox.nonce)
    _Serving.channel = channel
    channel.send({"kind": "layers", "value": held})  # before the code is loaded: it cannot change what is said
    objects: dict[int, object] = {}

    def register(obj) -> int:
        objects[len(objects)] = obj
        return len(objects) - 1

    try:
        target = sandbox.loader(sandbox.spec, sandbox.what)
        register(target)
        description = sandbox.describe(target, register) if sandbox.describe is not None else None
        channel.send({"kind": "return", "value": description})
    except UnknownVerifierError as error:
        channel.send({"kind": "refused", "message": str(error)})
        return
    except BaseException as error:
        channel.send(failure(error))
        return
    while True:
        try:
            message = channel.receive()
        except OSError:
            os._exit(CHANNEL_LOST)
        if message[0] != "call":
            continue
        _, channel.nonce, object_id, method, args, kwargs, options = message
        channel.aborted = False
        try:
            target = objects[object_id]
            function = target if method is None else getattr(target, method)
            if options is not None and sandbox.call_hook is not None:
                value, extra = sandbox.call_hook(function, args, kwargs, options)
            else:
                value, extra = function(*args, **kwargs), None
            reply = {"kind": "return", "value": value, "extra": extra}
        except _Aborted:
            reply = {"kind": "return", "value": None, "extra": None}
        except BaseException as error:
            reply = failure(error)
        if channel.aborted:
            reply = {"kind": "return", "value": None, "extra": None}
        try:
            channel.send(reply)
        except OSError:  # the code closed or broke the channel: the worker tells the user so from this status
            os._exit(CHANNEL_LOST)


def _open_fds() -> list[int]:
    try:
        return [int(name) for name in os.listdir("/proc/self/fd")]
    except OSError:
        return list(range(3, 256))


def failure(error: BaseException) -> dict:
    """The message for an exception or an exit of the code under check (in the sandbox)."""
    site = _site(error)
    if isinstance(error, (SystemExit, UserCodeExit)):
        message = {"kind": "exit", "how": type(error).__name__, "finding": supervisor.exit_finding(error),
                   "site": site}
        if isinstance(error, SystemExit):
            message["code"] = error.code if isinstance(error.code, (int, str, type(None))) else repr(error.code)
        else:
            message["what"] = error.what
        return message
    try:
        text = str(error)
    except Exception:  # the code's own __str__ may fail in any way
        text = f"<{type(error).__name__}>"
    return {"kind": "raise", "type": type(error).__name__, "message": text, "site": site}


def _site(error: BaseException) -> str:
    """file:line of the innermost frame of ``error``'s traceback outside verispec, the standard library and installed
    packages: the user's line; '?' without one."""
    found = "?"
    for frame, line in traceback.walk_tb(error.__traceback__):
        if not os.path.abspath(frame.f_code.co_filename).startswith(LIBRARY_FOLDERS):
            found = f"{os.path.basename(frame.f_code.co_filename)}:{line}"
    return found


__all__ = ["CHANNEL_LOST", "failure", "progress", "serve"]
