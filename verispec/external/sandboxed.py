"""A function under check (``check-external FILE.py:FUNCTION``) that runs in its sandbox (``verispec.guard.sandbox``).

The worker's ``Runner`` calls it as it calls a function in the same process; ``SandboxedFunction`` carries each call
over, with what the worker's RNG capture would have done in the call (``verispec.external.rng``): while the worker's
``Capture`` is entered, the sandbox holds one of the same mode (left, with its check of the generators' states, when
the worker's is left), feeds each call from a ``Tape`` of the same uniforms, and sends back what the tape and the
capture recorded (``call_in_sandbox``), which the worker writes into its own tape and capture, so the
exact integration, the black-box test and their refusals read the same records. Arrays the function wrote into are
written back into the worker's arguments, so the probe's note on written arguments still sees them; the state the
function keeps across calls is fingerprinted in the sandbox (``raises.StateWatch``).
"""

from __future__ import annotations

import collections
import functools
import inspect
import os

import numpy as np

from verispec.external.exact import NotPiecewiseConstantError
from verispec.external.rng import (
    ACTIVE,
    MAX_KEYS,
    Capture,
    CaptureRefusal,
    GlobalRandomnessError,
    KeyRefusal,
    RowByRowRefusal,
    Signal,
    Tape,
    TorchEscape,
    UniformsExhausted,
)

#: Errors of the capture that cross as themselves (by name).
_CAPTURE_ERRORS = {kind.__name__: kind for kind in (CaptureRefusal, RowByRowRefusal, GlobalRandomnessError, KeyRefusal,
                                                     NotPiecewiseConstantError)}


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
    if options.get("close") is not None:
        return None, _close(options["close"], bool(options.get("check")))
    if options.get("rows") is not None:
        return None, {"rows": [_row_in_sandbox(function, row_args, options, values)
                               for row_args, values in zip(args, options["rows"])]}
    if options.get("state"):
        import os

        from verispec.external.raises import SANDBOX_PROCESS, StateWatch

        return {**StateWatch(function).take(), SANDBOX_PROCESS: os.getpid()}, None
    from verispec.external.calls import snapshot, written_positions

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


#: In the sandbox: the captures that stand for the worker's, by the worker's key (``SandboxedFunction._key``). One is
#: entered when its first call comes and left when the worker leaves its own (``close``): entering a capture takes the
#: generators' states (0.3 to 0.8 ms), which the worker's runner pays once a run of calls, not once a call.
_CAPTURES: dict[str, Capture] = {}


def _row_in_sandbox(function, args, options: dict, values) -> dict:
    """One row of a prefetch (``SandboxedFunction.prefetch``): the call as ``call_in_sandbox`` makes it, with the
    row's own tape; its result and records, and a 'ran' to the worker (each row is one call for --call-timeout)."""
    from verispec.guard.sandbox_process import failure, progress

    config = options.get("capture")
    if config is not None:
        config = {**config, "values": values, "expected": None}
    try:
        result, records = call_in_sandbox(function, args, {}, {"capture": config})
    except BaseException as raised:  # no capture to record it with: the row's failure
        result, records = None, {"error": {"kind": "raised", "failure": failure(raised)}}
    progress()
    return {"result": result, "records": records}


def _captured(function, args, kwargs, config: dict, records: dict):
    capture = _CAPTURES.get(config["key"])
    if capture is None:
        capture = Capture(config["name"], config["mode"], races=config["races"], torch_full=config["torch_full"],
                          keys=str(config.get("keys", "keyed")), max_keys=int(config.get("max_keys", MAX_KEYS)),
                          clock_offset=float(config.get("clock_offset", 0.0)))
        capture.__enter__()
        _CAPTURES[config["key"]] = capture
    capture.races = config["races"]
    capture.handed_seed = bool(config.get("handed_seed"))
    tape = None if config.get("values") is None else Tape(config["values"], config.get("expected"))
    counts = (dict(capture.counts), capture.races_read, capture.float32_draws, capture.caught_by_mode)
    error = None
    result = None
    try:
        capture.start(tape)
        try:
            result = function(*args, **kwargs)
        except BaseException:
            capture._generators = []  # as the worker's runner does after a raise: the call's generators unchecked
            raise
        finally:
            capture.start(None)
        capture.end_call()
    except BaseException as raised:
        error = _capture_error(raised)
    added = {"counts": {what: times - counts[0].get(what, 0) for what, times in capture.counts.items()
                        if times != counts[0].get(what, 0)},
             "races_read": capture.races_read - counts[1], "float32_draws": capture.float32_draws - counts[2],
             "caught_by_mode": capture.caught_by_mode - counts[3]}
    if any(added.values()):  # only what changed crosses (a row that draws nothing sends nothing of its capture)
        records["capture"] = added
    if tape is not None and (tape.cursor or tape.draws or tape.choices):
        records["tape"] = {"cursor": tape.cursor, "used": tape.used, "draws": [list(draw) for draw in tape.draws],
                           "choices": tape.choices, "keys": list(tape.keys),
                           "breaks": [[int(column), at] for column, at in tape.breaks.items()],
                           "complete": sorted(tape.complete)}
    if error is not None:
        records["error"] = error
    return result


def _capture_error(raised: BaseException) -> dict:
    """What the worker raises for ``raised`` (``_raise``): the capture's signals and refusals by kind, the function's
    own exception as its failure."""
    if isinstance(raised, Signal):
        return {"kind": "capture", "type": type(raised.error).__name__, "message": str(raised.error)}
    if isinstance(raised, UniformsExhausted):
        return {"kind": "exhausted", "needed": int(raised.needed)}
    if isinstance(raised, TorchEscape):
        return {"kind": "escape"}
    if isinstance(raised, tuple(_CAPTURE_ERRORS.values())):
        return {"kind": "capture", "type": type(raised).__name__, "message": str(raised), "plain": True}
    from verispec.guard.sandbox_process import failure

    return {"kind": "raised", "failure": failure(raised)}


def _close(key: str, check: bool) -> dict:
    """In the sandbox: leave the capture that stands for the worker's ``key``, checking the generators' states when
    the worker checks its own (``Capture.__exit__``); what the check found, for the worker to raise."""
    capture = _CAPTURES.pop(key, None)
    if capture is None:
        return {}
    try:
        if check:
            capture.__exit__(None, None, None)
        else:
            capture.__exit__(Exception, Exception(), None)
    except BaseException as raised:
        return {"error": _capture_error(raised)}
    return {}


def _plain(argument):
    return argument.detach().cpu().numpy() if hasattr(argument, "detach") else argument


class SandboxedFunction:
    """The function under check, called in its sandbox (see the module docstring)."""

    def __init__(self, box):
        info = box.description
        self._box = box
        self._open: set[str] = set()  # the worker's captures the sandbox holds one for
        self._prefetched: collections.deque = collections.deque()  # (argument ids, answer) in the order announced
        self.__name__ = info["name"]
        self.__qualname__ = info["name"]
        self._call_name = info["call"]
        if info["parameters"] is not None:
            self.__signature__ = inspect.Signature([
                inspect.Parameter(name, inspect._ParameterKind(kind),
                                  **({"default": None} if has_default else {}))
                for name, kind, has_default in info["parameters"]])

    def __call__(self, *args, **kwargs):
        if self._prefetched:
            expected, answer = self._prefetched.popleft()
            if not kwargs and expected == tuple(id(argument) for argument in args):
                return self._answered(args, answer["result"], answer["records"])
            self._prefetched.clear()  # called otherwise than announced: the rest is called as it comes
        capture, config = self._capture_config()
        result, records = self._box.call(0, None, _packed(args), {name: _pack(value) for name, value in kwargs.items()},
                                         {"capture": config}, what=self._call_name)
        return self._answered(args, result, records)

    def prefetch(self, rows: list, values: list) -> None:
        """Run the calls of ``rows`` (one argument tuple each, in the order the runner will make them) in the sandbox
        in one message, each with its own tape of ``values`` (None in explicit mode); each call the runner then
        makes with the same arguments is answered from what came back, its records written as a call's would be.
        A call of 0.3 ms a message is 14 times the 11 us of a row in one process (black-box mode calls row by row)."""
        capture, config = self._capture_config()
        _, records = self._box.call(0, None, tuple(_packed(row) for row in rows), {},
                                    {"capture": config, "rows": list(values)},
                                    what=self._call_name)
        answers = (records or {}).get("rows") if isinstance(records, dict) else None
        if not isinstance(answers, list) or len(answers) != len(rows) \
                or not all(isinstance(answer, dict) for answer in answers):
            return  # not as asked (the code wrote it): each row is then called on its own
        self._prefetched.extend((tuple(id(argument) for argument in row), answer) for row, answer in zip(rows, answers))

    def _capture_config(self):
        """The worker's active capture, and what the sandbox needs to stand for it (None without one)."""
        capture = ACTIVE[-1] if ACTIVE else None
        config = None
        if capture is not None:
            tape = capture.tape
            key = f"{os.getpid()}:{id(capture)}"
            if key not in self._open:  # the sandbox enters a capture for it, left when this one is left
                self._open.add(key)
                capture.closers.append(functools.partial(self._close, key))
            config = {"key": key, "name": capture.name, "mode": capture.mode, "races": capture.races,
                      "torch_full": capture.torch_full, "keys": capture.keys, "max_keys": capture.max_keys,
                      "clock_offset": capture.clock_offset, "handed_seed": capture.handed_seed,
                      "values": None if tape is None else tape.values,
                      "expected": None if tape is None or tape.expected is None else list(tape.expected)}
        return capture, config

    def _answered(self, args, result, records):
        """Write what a call recorded into the worker's arguments, capture and tape; raise what it raised."""
        capture = ACTIVE[-1] if ACTIVE else None
        records = records if isinstance(records, dict) else {}
        for index, value in (records.get("written") or {}).items():
            _write_back(args, index, value)
        if capture is not None:
            _apply(capture, records)
        error = records.get("error")
        if error is not None:
            _raise(error)
        return result

    def _close(self, key: str, check: bool) -> None:
        self._open.discard(key)
        _, records = self._box.call(0, None, (), {}, {"close": key, "check": check}, what=self._call_name)
        error = (records or {}).get("error") if isinstance(records, dict) else None
        if error is not None:
            _raise(error)

    def sandbox_state(self) -> dict:
        """The fingerprints of the state the function keeps across calls, taken in the sandbox."""
        value, _ = self._box.call(0, None, (), {}, {"state": True}, what=self._call_name)
        return value if isinstance(value, dict) else {}


class _Tensor:
    """A CPU tensor on its way to the sandbox, pickled as its numpy array and rebuilt there with ``torch.from_numpy``
    (``_unpacked``): torch's own pickling of a small tensor takes about 100 microseconds each way, its array's 6,
    and a row-by-row check sends a few tensors a call (transformers' layout: 3, 4,842 calls at chain:2, 2.5 s of
    its 8). The sandbox then holds what the worker's in-process runner hands the function, a tensor on numpy's
    memory (``Runner._convert``). Only the worker's own pickle carries it (the worker is trusted); what the sandbox
    sends back is ``verispec.guard.wire``'s, as before."""

    __slots__ = ("array",)

    def __init__(self, array):
        self.array = array

    def __reduce__(self):
        return _unpacked, (self.array,)


def _unpacked(array):
    import torch

    return torch.from_numpy(array)


#: torch dtypes whose tensors cross as numpy arrays (``_Tensor``): those numpy holds as they are.
_NUMPY_DTYPES = ("float64", "float32", "float16", "int64", "int32", "int16", "int8", "uint8", "bool", "complex64",
                 "complex128")


def _pack(value):
    """``value`` as it crosses to the sandbox: a plain CPU tensor (no grad, contiguous, a dtype numpy has, not a
    subclass) as a ``_Tensor``, a tuple or list of values element by element; anything else as itself (torch's
    pickling then keeps what a ``_Tensor`` would not: a subclass, grad, strides, a device)."""
    if type(value) in (tuple, list):
        return type(value)(_pack(item) for item in value)
    if type(value).__name__ != "Tensor" or type(value).__module__ != "torch":
        return value
    if (value.device.type != "cpu" or value.requires_grad or value.layout is not _strided() or value.is_conj()
            or value.is_neg() or not value.is_contiguous() or str(value.dtype).removeprefix("torch.")
            not in _NUMPY_DTYPES):
        return value
    return _Tensor(value.numpy())


def _packed(args: tuple) -> tuple:
    return tuple(_pack(argument) for argument in args)


def _strided():
    import torch

    return torch.strided


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
    tape.keys.extend(str(key) for key in state.get("keys") or ())
    for column, at in state.get("breaks") or ():  # the points exact integration scans (an integer draw's)
        tape.breaks[int(column)] = np.asarray(at, dtype=np.float64)
    # the columns whose points are all of their breakpoints, as the sandbox's tape found them (as ``used`` above is)
    tape.complete.update(int(column) for column in state.get("complete") or () if int(column) in tape.breaks)


def _raise(error: dict):
    from verispec.external.rng import CaptureRefusal
    from verispec.guard.sandbox import raise_failure

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
