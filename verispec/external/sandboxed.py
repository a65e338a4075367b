"""A function under check (``check-external FILE.py:FUNCTION``) that runs in its sandbox (``verispec.sandbox``).

The worker's ``Runner`` calls it as it calls a function in the same process; ``SandboxedFunction`` carries each call
over, with what the worker's RNG capture would have done in the call (``verispec.external.rng``): the sandbox enters
a ``Capture`` of the same mode around the call, feeds it from a ``Tape`` of the same uniforms, and sends back what the
tape and the capture recorded (``call_in_sandbox``), which the worker writes into its own tape and capture, so the
exact integration, the black-box test and their refusals read the same records. Arrays the function wrote into are
written back into the worker's arguments, so the probe's note on written arguments still sees them; the state the
function keeps across calls is fingerprinted in the sandbox (``raises.StateWatch``).
"""

from __future__ import annotations

import inspect

import numpy as np

from verispec.external.rng import (
    ACTIVE,
    Capture,
    CaptureRefusal,
    GlobalRandomnessError,
    RowByRowRefusal,
    Signal,
    Tape,
    TorchEscape,
    UniformsExhausted,
)

#: Errors of the capture that cross as themselves (by name).
_CAPTURE_ERRORS = {kind.__name__: kind for kind in (CaptureRefusal, RowByRowRefusal, GlobalRandomnessError)}


def describe(target, register) -> dict:
    """In the sandbox: the loaded function's name, signature and how ``--call-timeout`` names its calls."""
    from verispec.verifiers.sandboxed import _call_name

    info = {"callable": callable(target), "type": type(target).__name__,
            "name": getattr(target, "__name__", type(target).__name__), "call": _call_name(target), "parameters": None}
    try:
        info["parameters"] = [[parameter.name, int(parameter.kind), parameter.default is not inspect.Parameter.empty]
                              for parameter in inspect.signature(target).parameters.values()]
    except (TypeError, ValueError):  # no readable signature (a builtin): its calls will tell
        pass
    return info


def call_in_sandbox(function, args, kwargs, options):
    """In the sandbox: one call of the function under the capture ``options`` describes; (result, records)."""
    if options.get("state"):
        import os

        from verispec.external.raises import SANDBOX_PROCESS, StateWatch

        return {**StateWatch(function).take(), SANDBOX_PROCESS: os.getpid()}, None
    from verispec.external.runner import snapshot, written_positions

    before = snapshot(args)
    records: dict = {}
    config = options.get("capture")
    if config is None:
        result = function(*args, **kwargs)
    else:
        result = _captured(function, args, kwargs, config, records)
    written = {index: _plain(args[index]) for index in sorted(written_positions(args, before))}
    if written:
        records["written"] = written
    return result, records


def _captured(function, args, kwargs, config: dict, records: dict):
    capture = Capture(config["name"], config["mode"], races=config["races"], torch_full=config["torch_full"])
    tape = None if config.get("values") is None else Tape(config["values"], config.get("expected"))
    error = None
    result = None
    try:
        with capture:
            capture.start(tape)
            try:
                result = function(*args, **kwargs)
            finally:
                capture.start(None)
            capture.end_call()
    except Signal as signal:
        error = {"kind": "capture", "type": type(signal.error).__name__, "message": str(signal.error)}
    except UniformsExhausted as exhausted:
        error = {"kind": "exhausted", "needed": int(exhausted.needed)}
    except TorchEscape:
        error = {"kind": "escape"}
    except tuple(_CAPTURE_ERRORS.values()) as refused:
        error = {"kind": "capture", "type": type(refused).__name__, "message": str(refused), "plain": True}
    except BaseException as raised:  # the function's own exception: sent with what the tape held when it raised
        from verispec.sandbox_process import failure

        error = {"kind": "raised", "failure": failure(raised)}
    records["capture"] = {"counts": dict(capture.counts), "races_read": capture.races_read,
                          "float32_draws": capture.float32_draws, "caught_by_mode": capture.caught_by_mode}
    if tape is not None:
        records["tape"] = {"cursor": tape.cursor, "used": tape.used, "draws": [list(draw) for draw in tape.draws],
                           "choices": tape.choices}
    if error is not None:
        records["error"] = error
    return result


def _plain(argument):
    return argument.detach().cpu().numpy() if hasattr(argument, "detach") else argument


class SandboxedFunction:
    """The function under check, called in its sandbox (see the module docstring)."""

    def __init__(self, box):
        info = box.description
        self._box = box
        self.__name__ = info["name"]
        self.__qualname__ = info["name"]
        self._call_name = info["call"]
        if info["parameters"] is not None:
            self.__signature__ = inspect.Signature([
                inspect.Parameter(name, inspect._ParameterKind(kind),
                                  **({"default": None} if has_default else {}))
                for name, kind, has_default in info["parameters"]])

    def __call__(self, *args, **kwargs):
        capture = ACTIVE[-1] if ACTIVE else None
        config = None
        if capture is not None:
            tape = capture.tape
            config = {"name": capture.name, "mode": capture.mode, "races": capture.races,
                      "torch_full": capture.torch_full,
                      "values": None if tape is None else tape.values,
                      "expected": None if tape is None or tape.expected is None else list(tape.expected)}
        result, records = self._box.call(0, None, args, kwargs, {"capture": config}, what=self._call_name)
        records = records if isinstance(records, dict) else {}
        for index, value in (records.get("written") or {}).items():
            _write_back(args, index, value)
        if capture is not None:
            _apply(capture, records)
        error = records.get("error")
        if error is not None:
            _raise(error)
        return result

    def sandbox_state(self) -> dict:
        """The fingerprints of the state the function keeps across calls, taken in the sandbox."""
        value, _ = self._box.call(0, None, (), {}, {"state": True}, what=self._call_name)
        return value if isinstance(value, dict) else {}


def _write_back(args, index, value) -> None:
    if not (isinstance(index, int) and 0 <= index < len(args) and isinstance(value, np.ndarray)):
        return
    target = args[index]
    if isinstance(target, np.ndarray) and target.shape == value.shape:
        np.copyto(target, value, casting="unsafe")
    elif hasattr(target, "copy_") and tuple(target.shape) == value.shape:
        import torch

        target.copy_(torch.from_numpy(value))


def _apply(capture: Capture, records: dict) -> None:
    """Write what the sandbox's capture and tape recorded into the worker's."""
    counts = records.get("capture") or {}
    for what, times in (counts.get("counts") or {}).items():
        capture.counts[str(what)] = capture.counts.get(str(what), 0) + int(times)
    for name in ("races_read", "float32_draws", "caught_by_mode"):
        setattr(capture, name, getattr(capture, name) + int(counts.get(name, 0) or 0))
    tape, state = capture.tape, records.get("tape")
    if tape is None or not isinstance(state, dict):
        return
    used = np.asarray(state["used"], dtype=bool)
    if used.shape == tape.used.shape:
        tape.used[:] = used
    tape.cursor = int(state["cursor"])
    tape.draws.extend((str(what), int(count)) for what, count in state["draws"])
    tape.choices.extend(np.asarray(choice, dtype=np.int64) for choice in state["choices"])


def _raise(error: dict):
    from verispec.external.rng import CaptureRefusal
    from verispec.sandbox import raise_failure

    kind = error.get("kind")
    if kind == "exhausted":
        raise UniformsExhausted(int(error["needed"]))
    if kind == "escape":
        raise TorchEscape()
    if kind == "capture":
        refused = _CAPTURE_ERRORS.get(str(error.get("type")), CaptureRefusal)(str(error.get("message", ""))[:5000])
        if error.get("plain"):
            raise refused
        raise Signal(refused)
    if kind == "raised":
        raise_failure(error.get("failure"))


__all__ = ["SandboxedFunction", "call_in_sandbox", "describe"]
