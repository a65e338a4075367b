"""Races read through Triton's interpreter: exponential noise that torch drew and a Triton kernel races.

Engines draw the noise of an exponential race with torch and race it inside a kernel: vLLM's V1 rejection sampler
fills ``q`` [num_reqs, V] by ``exponential_`` (each seeded request's row again from its own generator), hands
``inv_q = q.reciprocal()`` to ``sample_recovered_tokens_kernel`` and takes ``argmax(prob * inv_q)`` there
(``tl.max(..., return_indices=True)``). Under ``TRITON_INTERPRET=1`` the kernel runs on the CPU in numpy, reading
the tensors' memory by address, so the torch-level race rule (``rng.torch_draws``) never sees the product or the argmax.

This module follows the noise by memory instead. Every element ``exponential_`` writes is remembered by address
with its tape column and uniform (``remember``; a refill of a row through a view replaces its elements, which is
how a seeded request's row comes from its own generator). ``reciprocal`` of remembered noise remembers its result
as inverse noise (``invert``). While a capture is entered, the interpreter's loads are wrapped (``install``): a
load that reads remembered memory returns a ``_Traced`` array, which follows the kernel's arithmetic:

    1/E loaded -> w * (1/E) (or w / E) a score -> where(mask, score, -inf) -> argmax: the race

and the argmax is read as one inverse-CDF draw from w over the slice, by the first element's uniform, as
``rng.torch_draws.FeedMode.race`` does: the law of ``argmax_i w_i / E_i`` with E_i i.i.d. exponential is w / sum(w)
(``docs/guides/check_external.md``, "Glossary of RNG capture"), and the other elements' uniforms are left unused.
The maximum's value may only be compared with -inf (the kernel's first block); any other use of a traced array, a
second race on the same noise, or a weight that is negative or not finite leaves the race real, and exact mode
refuses it (a continuous use) instead of guessing.
"""

from __future__ import annotations

import math
import sys

import numpy as np

from verispec.external.rng import rules
from verispec.external.tree_arrays import inverse_cdf

#: The most noise elements remembered by address in one call (exact mode's vocabularies are small).
MAX_REMEMBERED = 1 << 16


class _Element:
    """One remembered element of noise: its tape column, its uniform, E (``"noise"``) or 1/E (``"inverse"``),
    and whether a race has read it."""

    __slots__ = ("column", "uniform", "kind", "raced", "read", "race")

    def __init__(self, column: int, uniform: float, kind: str):
        self.column, self.uniform, self.kind, self.raced, self.read = column, uniform, kind, False, False
        self.race = None  # the _RaceRecord of the race that read it


class _RaceRecord:
    """A race read from a row of noise: its columns in slice order, its weights and its winner (a position)."""

    __slots__ = ("columns", "weights", "winner", "reads")

    def __init__(self, columns: tuple, weights: np.ndarray, winner: int):
        self.columns, self.weights, self.winner, self.reads = columns, weights, winner, 1


def addresses(tensor) -> np.ndarray:
    """The byte address of every element of a CPU ``tensor``, in its shape (read past the capture's own torch
    function mode: verispec reading where the noise lies is no use of it)."""
    import torch

    with torch._C.DisableTorchFunction():
        shape = tuple(tensor.shape)
        strides, base, size = tensor.stride(), int(tensor.data_ptr()), int(tensor.element_size())
        contiguous = tensor.is_contiguous()
    if contiguous:  # the common case (a fresh row of noise): element k at base + k * size
        return base + np.arange(math.prod(shape), dtype=np.int64).reshape(shape) * size
    offsets = np.zeros(shape, dtype=np.int64)
    for axis, stride in enumerate(strides):
        index = np.arange(shape[axis], dtype=np.int64).reshape([-1 if k == axis else 1 for k in range(len(shape))])
        offsets = offsets + index * int(stride)
    return base + offsets * size


def remember(capture, tensor, uniforms: np.ndarray, columns: np.ndarray) -> None:
    """Remember the elements ``exponential_`` just wrote into ``tensor`` (uniforms and columns in its shape)."""
    memory = capture.noise_memory
    if tensor.device.type != "cpu":
        return
    where = addresses(tensor)  # its shape is the tensor's, read past the torch mode (at every exponential_)
    if len(memory) + where.size > MAX_REMEMBERED:
        return
    uniforms, columns = np.asarray(uniforms, dtype=np.float64), np.asarray(columns, dtype=np.int64)
    uniforms = uniforms if uniforms.shape == where.shape else np.broadcast_to(uniforms, where.shape)
    columns = columns if columns.shape == where.shape else np.broadcast_to(columns, where.shape)
    tape = capture.tape
    for address, column, uniform in zip(where.reshape(-1).tolist(), columns.reshape(-1).tolist(),
                                        uniforms.reshape(-1).tolist()):
        before = memory.get(address)
        if (before is not None and before.kind == "noise" and not before.raced and not before.read
                and tape is not None and tape.reads[before.column] == 1):
            tape.used[before.column] = False  # overwritten unread (a seeded row drawn again): it decides nothing
        memory[address] = _Element(column, uniform, "noise")


def lookup(capture, tensor):
    """(uniforms, columns) of remembered noise ``tensor`` as it is now (refills included), or None where an
    element is not remembered noise."""
    memory = capture.noise_memory
    if not memory or tensor.device.type != "cpu":
        return None
    found = [memory.get(address) for address in addresses(tensor).reshape(-1).tolist()]
    if any(element is None or element.kind != "noise" or element.raced for element in found):
        return None
    shape = tuple(tensor.shape)
    return (np.array([element.uniform for element in found], dtype=np.float64).reshape(shape),
            np.array([element.column for element in found], dtype=np.int64).reshape(shape))


def invert(capture, noise_tensor, result) -> bool:
    """Remember ``result`` = 1 / ``noise_tensor`` elementwise as inverse noise; False where ``noise_tensor`` is not
    all remembered noise or ``result`` is not of its shape."""
    if tuple(result.shape) != tuple(noise_tensor.shape) or result.device.type != "cpu":
        return False
    current = lookup(capture, noise_tensor)
    if current is None:
        return False
    uniforms, columns = current
    memory = capture.noise_memory
    for address, column, uniform in zip(addresses(result).reshape(-1).tolist(), columns.reshape(-1).tolist(),
                                        uniforms.reshape(-1).tolist()):
        memory[address] = _Element(column, uniform, "inverse")
    return True


def forget(capture, tensor) -> None:
    """Forget ``tensor``'s elements: a use the race rule does not read. Where a kernel's race already read one of
    them, the noise is read again, which no race rule can integrate: refused (``rules.Signal``)."""
    memory = capture.noise_memory
    if memory and tensor.device.type == "cpu":
        for address in addresses(tensor).reshape(-1).tolist():
            element = memory.pop(address, None)
            if element is not None and element.raced:
                _impure(_Trace(capture, np.array([element], dtype=object), "impure"))


# -- the kernel side


class _Trace:
    """What a traced array holds: ``elements`` (the remembered element per entry, None where the entry is not
    noise), ``kind`` ("inverse", "noise", "score" w / E, or "maximum" the race's maximum), ``weights`` (w of a
    score, float64; -inf where the entry was masked to -inf) and the capture."""

    def __init__(self, capture, elements: np.ndarray | None, kind: str, weights: np.ndarray | None = None, *,
                 key: tuple | None = None, offsets: np.ndarray | None = None):
        self.capture, self.elements, self.kind, self.weights = capture, elements, kind, weights
        #: Keyed lanes (``tl.rand`` in a block): the key and each lane's offset; their values are placeholders
        #: until a race reads them (``_keyed_race``), so any other use is refused.
        self.key, self.offsets = key, offsets

    @property
    def lazy(self) -> bool:
        return self.key is not None


class _Traced(np.ndarray):
    """A numpy array read from remembered noise memory by a Triton kernel under the interpreter, followed through
    the race's arithmetic (module docstring). Every other use computes on the plain values and marks the noise
    impure: exact mode's integration then meets the continuous use and refuses it."""

    def __array_finalize__(self, obj):
        self._trace = getattr(obj, "_trace", None)
        if self._trace is not None and getattr(obj, "shape", None) != self.shape:
            _impure(self._trace)  # a slice or reshape: followed no further
            self._trace = None

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        plain = [np.asarray(x) if isinstance(x, _Traced) else x for x in inputs]
        traces = [x._trace for x in inputs if isinstance(x, _Traced) and x._trace is not None]
        for name in ("out",):
            if name in kwargs:
                kwargs[name] = tuple(np.asarray(x) if isinstance(x, _Traced) else x for x in kwargs[name])
        result = getattr(ufunc, method)(*plain, **kwargs)
        if method == "__call__" and len(traces) == 1 and traces[0].lazy and not kwargs.get("out"):
            followed = _gumbel_step(traces[0], ufunc, inputs, plain, result)
            if followed is not None:
                return followed
        if method != "__call__" or len(traces) != 1 or len(inputs) != 2:
            for trace in traces:
                _impure(trace)
            return result
        trace = traces[0]
        traced_first = isinstance(inputs[0], _Traced) and inputs[0]._trace is trace
        other = plain[1] if traced_first else plain[0]
        if trace.kind == "inverse" and ufunc is np.multiply or (trace.kind == "noise" and ufunc is np.divide
                                                                  and not traced_first):
            weights = np.broadcast_to(np.asarray(other, dtype=np.float64), np.shape(result)).copy()
            return _traced(result, _Trace(trace.capture, np.broadcast_to(trace.elements, np.shape(result)),
                                          "score", weights))
        if trace.kind == "maximum" and ufunc in (np.greater, np.less) and np.all(np.asarray(other) == -np.inf):
            return result  # the first block's maximum against -inf: true wherever one entry was not masked
        _impure(trace)
        return result

    def __array_function__(self, func, types, args, kwargs):
        plain_args = tuple(np.asarray(x) if isinstance(x, _Traced) else x for x in args)
        traces = [x._trace for x in args if isinstance(x, _Traced) and x._trace is not None]
        if func is np.where and len(args) == 3 and len(traces) == 1 and isinstance(args[1], _Traced):
            trace = args[1]._trace
            condition, masked = np.asarray(args[0], dtype=bool), np.asarray(args[2])
            if trace.kind in ("score", "gscore") and np.all(
                    masked[~np.broadcast_to(condition, masked.shape)] == -np.inf if masked.shape
                    else masked == -np.inf):
                result = func(*plain_args, **kwargs)
                weights = np.where(np.broadcast_to(condition, np.shape(result)), trace.weights, -np.inf)
                return _traced(result, _Trace(trace.capture, trace.elements, trace.kind, weights, key=trace.key,
                                              offsets=trace.offsets))
        if func in (np.nanargmax, np.argmax) and len(traces) == 1 and isinstance(args[0], _Traced):
            race = _keyed_race if traces[0].lazy else _race
            drawn = race(args[0], kwargs.get("axis", args[1] if len(args) > 1 else None),
                         bool(kwargs.get("keepdims", False)))
            if drawn is not None:
                return drawn
        if func in (np.nanmax, np.max, np.amax) and len(traces) == 1 and traces[0].lazy \
                and traces[0].kind == "gscore" and isinstance(args[0], _Traced):
            # the race's maximum: its value is a placeholder's, so it is +inf. vLLM stores it per vocabulary block and
            # takes the argmax over blocks (in torch, or in a kernel by nanargmax, which a NaN would break); with one
            # block that argmax is the block, whatever the value
            return np.full(np.shape(func(*plain_args, **kwargs)), np.inf, dtype=np.asarray(args[0]).dtype)
        if func in (np.nanmax, np.max, np.amax) and len(traces) == 1 and isinstance(args[0], _Traced) \
                and traces[0].kind == "score":
            result = func(*plain_args, **kwargs)
            return _traced(np.asarray(result), _Trace(traces[0].capture, np.empty(np.shape(result), dtype=object),
                                                      "maximum"))
        for trace in traces:
            _impure(trace)
        return func(*plain_args, **kwargs)


def _traced(values, trace: _Trace) -> _Traced:
    array = np.asarray(values).view(_Traced)
    array._trace = trace
    return array


def _impure(trace: _Trace) -> None:
    """A use the race rule does not read: the noise is a plain continuous input from now on (exact mode's
    integration sees its uses and refuses them), and a race already read from it is read again. Keyed lanes
    (placeholders until a race reads them) refuse any such use."""
    if trace.lazy:
        from verispec.external.exact import NotPiecewiseConstantError

        raise rules.Signal(NotPiecewiseConstantError(
            f"exact mode cannot integrate {trace.capture.name}: the uniforms tl.rand drew in a block of "
            f"{np.size(trace.offsets)} lanes at {rules.site()} are used otherwise than in a Gumbel-max race "
            "(argmax of logits - log(-log u)), which verispec reads as one categorical draw: use --mode blackbox"))
    for element in trace.elements.reshape(-1):
        if element is None:
            continue
        if element.raced:
            from verispec.external.exact import NotPiecewiseConstantError

            raise rules.Signal(NotPiecewiseConstantError(
                f"exact mode cannot integrate {trace.capture.name}: the exponential noise a Triton kernel raced at "
                f"{rules.site()} is read again, so its race cannot be read as one categorical draw: use --mode "
                "blackbox"))
        element.kind = "impure"
        if trace.capture.tape is not None and trace.capture.tape.raced[element.column]:
            element.raced = True
    trace.kind = "impure"


def _race(score: _Traced, axis, keepdims: bool):
    """argmax of a traced score along ``axis`` as one inverse-CDF draw per slice from its weights; None (the
    argmax computed as it is) where the rule does not hold."""
    trace = score._trace
    if trace.kind != "score" or score.ndim == 0:
        return None
    capture = trace.capture
    axis = 0 if axis is None and score.ndim == 1 else axis
    if axis is None:
        return None
    axis = int(axis) % score.ndim
    weights = np.moveaxis(trace.weights, axis, -1)
    elements = np.moveaxis(np.asarray(trace.elements, dtype=object), axis, -1)
    flat_weights = weights.reshape(-1, weights.shape[-1])
    flat_elements = elements.reshape(-1, elements.shape[-1])
    flat_scores = np.moveaxis(np.asarray(score), axis, -1).reshape(flat_weights.shape)
    tape = capture.tape
    tokens = np.empty(len(flat_weights), dtype=np.int64)
    for row, (row_weights, row_elements) in enumerate(zip(flat_weights, flat_elements)):
        live = _racing_lanes(row_weights, row_elements, flat_scores[row])
        noise = [element for element, alive in zip(row_elements, live if live is not None else ()) if alive]
        # a score is w * (1/E) over inverse noise, or w / E over the noise itself (vLLM's recovery kernel to 0.16)
        kinds = {None if element is None else element.kind for element in noise}
        if (live is None or not noise or kinds not in ({"inverse"}, {"noise"})
                or np.any(row_weights[live] < 0) or not np.all(np.isfinite(row_weights[live]))):
            return None
        columns = np.array([element.column for element in noise], dtype=np.int64)
        positive = np.where(live, np.maximum(row_weights, 0.0), 0.0)[live]  # [n] the live entries' weights
        positions = np.flatnonzero(live)
        if any(element.raced for element in noise):  # the same row raced again (vLLM races one row per position)
            record = noise[0].race
            if (record is None or record.reads != 1 or record.columns != tuple(columns.tolist())
                    or any(element.race is not record for element in noise)):
                _impure(_Trace(capture, np.array(noise, dtype=object), "score"))  # raises: read otherwise
            law = second_race_law(record.weights, record.winner, positive)
            if law is None:
                _impure(_Trace(capture, np.array(noise, dtype=object), "score"))
            record.reads = 2
            if positive.sum() > 0 and len(columns) > 1:  # a uniform the first race left unused
                tape.used[columns[1]] = True
                tokens[row] = positions[inverse_cdf(law[None, :], np.array([noise[1].uniform]))[0]]
                capture.know_categorical(columns[1:2], law[None, :])  # its token is all the kernel learns of it
            else:
                tokens[row] = positions[int(np.argmax(law))]
            continue
        if np.any(tape.raced[columns]):
            _impure(_Trace(capture, np.array(noise, dtype=object), "score"))  # raises: a race read again
        if len(set(columns.tolist())) != len(columns) or np.any(tape.reads[columns] > 1):
            return None  # one uniform in two entries, or read by a key elsewhere: not an i.i.d. race
        if positive.sum() > 0:
            winner = int(inverse_cdf(positive[None, :], np.array([noise[0].uniform]))[0])
            # the winner is all the kernel learns of the first uniform (any other use of the noise is refused, a
            # second race reads it through the winner): its breakpoints are the law's, and all of them
            capture.know_categorical(columns[:1], positive[None, :])
        else:  # every score is 0: argmax is the first entry not masked to -inf, whatever the noise
            winner = None
        tokens[row] = positions[winner] if winner is not None else np.flatnonzero(row_weights != -np.inf)[0]
        winner = 0 if winner is None else winner
        tape.used[columns[1:]] = False
        tape.raced[columns] = True
        record = _RaceRecord(tuple(columns.tolist()), positive, winner)
        for element in noise:
            element.raced = True
            element.race = record
    capture.races_read += int(len(tokens))
    capture.chose(tokens)
    shape = weights.shape[:-1]
    drawn = tokens.reshape(shape)
    if keepdims:
        drawn = np.expand_dims(drawn, axis)
    return drawn if shape or keepdims else drawn[()]


#: The most a clamp may raise a uniform and the draw still count as one (``tl.maximum(u, 4.66e-10)``: vLLM keeps
#: log(u) finite; the law moves by at most this much per lane, far below the engines' thresholds).
MAX_CLAMP = 1e-9

#: The steps of a Gumbel draw from keyed uniforms u: (kind, ufunc, where the traced operand stands) -> next kind.
#: -log(-log(u)) (float64) or -log(-log1p(-u)) (float32), with negation written as ``negative`` or ``0 - x``.
_GUMBEL_STEPS = {
    ("u", "negative"): "neg_u", ("u", "log"): "minus_e",
    ("neg_u", "log1p"): "minus_e",
    ("minus_e", "negative"): "e",
    ("e", "log"): "log_e",
    ("log_e", "negative"): "gumbel",
}


def _gumbel_step(trace: _Trace, ufunc, inputs, plain, result):
    """The next kind of keyed lanes through one step of a Gumbel draw (``_GUMBEL_STEPS``), or of its score
    ``logits + G``; None where the step is not one of them (the caller then refuses the use)."""
    traced_first = isinstance(inputs[0], _Traced) and inputs[0]._trace is trace
    other = (plain[1] if traced_first else plain[0]) if len(inputs) == 2 else None
    name = ufunc.__name__
    if len(inputs) == 2 and name == "subtract" and not traced_first and np.all(np.asarray(other) == 0):
        name = "negative"  # 0 - x
    elif len(inputs) == 2 and name in ("maximum", "fmax") and trace.kind == "u" and np.all(np.asarray(other) >= 0) \
            and np.all(np.asarray(other) <= MAX_CLAMP):
        return _traced(result, trace)  # max(u, tiny): the same uniform
    elif len(inputs) == 2 and name == "add" and trace.kind == "gumbel":
        weights = np.broadcast_to(np.asarray(other, dtype=np.float64), np.shape(result)).copy()
        return _traced(result, _Trace(trace.capture, None, "gscore", weights, key=trace.key, offsets=trace.offsets))
    elif len(inputs) != 1:
        return None
    kind = _GUMBEL_STEPS.get((trace.kind, name))
    if kind is None:
        return None
    return _traced(result, _Trace(trace.capture, None, kind, key=trace.key, offsets=trace.offsets))


def _keyed_race(score: _Traced, axis, keepdims: bool):
    """argmax of a Gumbel score ``logits + G`` over keyed lanes, read as one categorical draw from softmax(logits)
    (the Gumbel-max law), by the first live lane's uniform; the same key raced a second time is read from
    ``second_race_law`` given the first race's winner (argmax(l + G) = argmax(e^l / E) with E = exp(-G)
    exponential: the exponential race of the same noise). Refused (``_impure``) where the rule does not hold."""
    trace = score._trace
    if trace.kind != "gscore" or score.ndim != 1 or axis not in (None, 0, -1):
        _impure(trace)
    capture = trace.capture
    logits = np.asarray(trace.weights, dtype=np.float64)
    live = logits != -np.inf
    if not np.any(live) or not np.all(np.isfinite(logits[live])):
        _impure(trace)
    positions = np.flatnonzero(live)
    weights = np.exp(logits[live] - logits[live].max())  # [n] the live lanes' weights
    offsets = np.asarray(trace.offsets)
    values, columns = capture.keyed_lanes(trace.key, offsets[live])
    tape = capture.tape
    label = repr(trace.key)
    keyed = capture.keys != "fresh" and capture.handed_seed  # else every draw is fresh: races are independent
    previous = capture.keyed_races.get(label) if keyed else None
    if previous is not None:
        token = _second_keyed_race(capture, previous, offsets, positions, columns, weights)
    else:
        if len(set(columns.tolist())) != len(columns) or np.any(tape.reads[columns] > 1):
            _impure(trace)  # one uniform in two lanes, or read elsewhere by its key: not an i.i.d. race
        winner = int(inverse_cdf(weights[None, :], np.array([values[0]]))[0])
        capture.know_categorical(columns[:1], weights[None, :])  # as in ``_race`` (a second read by key undoes it)
        token = positions[winner]
        tape.used[columns[1:]] = False
        tape.raced[columns] = True
        if keyed:
            capture.keyed_races[label] = (_RaceRecord(tuple(columns.tolist()), weights, winner),
                                          tuple(offsets[live].tolist()))
    capture.races_read += 1
    capture.chose(np.array([token]))
    drawn = np.array(token, dtype=np.int64)
    return drawn.reshape(1) if keepdims else drawn[()]


def _second_keyed_race(capture, previous, offsets: np.ndarray, positions: np.ndarray, columns: np.ndarray,
                       weights: np.ndarray) -> int:
    """The winner (a position in the block) of a second race on a key already raced, from ``second_race_law``
    over the union of both races' lanes (a lane one race does not see has weight 0 there: its noise is not
    constrained by that race), by a uniform no race has read. Refused beyond a second race."""
    record, raced_offsets = previous
    if record.reads != 1:
        _refuse_reread(capture)
    live_offsets = offsets[positions].tolist()
    lanes = list(raced_offsets) + [offset for offset in live_offsets if offset not in raced_offsets]
    first = np.concatenate([record.weights, np.zeros(len(lanes) - len(raced_offsets))])
    second = np.zeros(len(lanes))
    for offset, weight in zip(live_offsets, weights):
        second[lanes.index(offset)] = weight
    law = second_race_law(first, record.winner, second)
    if law is None:
        _refuse_reread(capture)
    record.reads = 2
    tape = capture.tape
    fresh = [int(column) for column, offset in zip(columns, live_offsets) if offset not in raced_offsets]
    spare = record.columns[1] if len(record.columns) > 1 else (fresh[0] if fresh else None)
    tape.used[fresh] = False
    tape.raced[fresh] = True
    if spare is None:  # one lane in all: the law is a point mass
        chosen = int(np.argmax(law))
    else:
        tape.used[spare] = True
        chosen = int(inverse_cdf(law[None, :], np.array([tape.values[0, spare]]))[0])
        capture.know_categorical([spare], law[None, :])
    if second[chosen] <= 0:
        _refuse_reread(capture)
    return int(positions[live_offsets.index(lanes[chosen])])


def _refuse_reread(capture) -> None:
    from verispec.external.exact import NotPiecewiseConstantError

    raise rules.Signal(NotPiecewiseConstantError(
        f"exact mode cannot integrate {capture.name}: keyed noise a Triton kernel raced is raced again at "
        f"{rules.site()} otherwise than as a second race over the same lanes (a third race, or other lanes), "
        "which verispec cannot read as one categorical draw: use --mode blackbox"))


def _racing_lanes(row_weights: np.ndarray, row_elements: np.ndarray, row_scores: np.ndarray) -> np.ndarray | None:
    """The lanes of a row that race: those not masked to -inf, less the lanes holding no noise whose weight and
    score are exactly 0 (a load masked to ``other=0``: ``0 * 0``, as vLLM's recovery kernel masks the vocabulary's
    tail before 0.21). Such a lane never beats a positive score, and where every score is 0 the argmax is the
    first lane, whatever the noise. None where a lane without noise could win (the rule does not hold)."""
    live = row_weights != -np.inf
    fixed = live & np.array([element is None for element in row_elements], dtype=bool)
    if np.any(fixed):
        if np.any(row_weights[fixed] != 0) or np.any(row_scores[fixed] != 0):
            return None
        live = live & ~fixed
    return live


def second_race_law(first: np.ndarray, winner: int, second: np.ndarray) -> np.ndarray | None:
    """The law of ``argmax_i second_i / E_i`` given ``argmax_i first_i / E_i = winner``, for E i.i.d. exponential
    (the same noise raced twice, as vLLM's V1 sampler races each request's one noise row at every draft position).
    ``first``, ``second``: weights [n] >= 0. None where the law cannot be read (the first race was not a race).

    With r = first / first[winner] (a = winner), P(a wins race 1) = first[a] / sum(first) and
    * for b = a, with s = second / second[a]: P(a, a) = 1 / (1 + sum_{i != a} max(r_i, s_i)) (E_i >= E_a max(r_i, s_i));
    * for b != a, with s = second / second[b] and t = E_b / E_a, the races ask t in [r_b, 1 / s_a] and
      E_i >= E_a max(r_i, s_i t) for the others, so P(a, b) = int dt / (1 + t + sum_{i != a, b} max(r_i, s_i t))^2,
      a rational integrand piecewise in t between the breakpoints r_i / s_i, each piece 1 / (beta (alpha + beta t)).
    The conditional law P(a, b) / P(a) must sum to 1 (to 1e-9), else None."""
    n = len(first)
    if first.sum() <= 0 or first[winner] <= 0:
        return None
    if second.sum() <= 0:  # every score 0: the first entry, whatever the noise
        law = np.zeros(n)
        law[0] = 1.0
        return law
    r = first / first[winner]
    joint = np.zeros(n)
    for b in range(n):
        if second[b] <= 0:
            continue
        s = second / second[b]
        others = [i for i in range(n) if i not in (winner, b)]
        if b == winner:
            joint[b] = 1.0 / (1.0 + sum(max(r[i], s[i]) for i in others))
            continue
        low, high = r[b], (np.inf if s[winner] == 0 else 1.0 / s[winner])
        if not low < high:
            continue
        breaks = sorted({r[i] / s[i] for i in others if s[i] > 0 and low < r[i] / s[i] < high})
        points = [low, *breaks, high]
        for start, end in zip(points[:-1], points[1:]):
            middle = start + 1.0 if end == np.inf else (start + end) / 2
            rising = [i for i in others if s[i] * middle > r[i]]
            alpha = 1.0 + sum(r[i] for i in others if i not in rising)
            beta = 1.0 + sum(s[i] for i in rising)
            joint[b] += 1.0 / (beta * (alpha + beta * start)) - (
                0.0 if end == np.inf else 1.0 / (beta * (alpha + beta * end)))
    law = joint * (first.sum() / first[winner])
    if abs(law.sum() - 1.0) > 1e-9:
        return None
    return law / law.sum()


def install(capture) -> None:
    """Wrap the Triton interpreter's loads for ``capture``'s race rule (restored when it is left), where the
    interpreter is loaded (``rng.triton_random`` feeds Triton's random functions)."""
    interpreter = sys.modules.get("triton.runtime.interpreter")
    builder = getattr(interpreter, "InterpreterBuilder", None)
    if builder is None or not hasattr(builder, "create_masked_load"):
        return
    if not capture.races:
        return
    original = builder.create_masked_load

    def create_masked_load(self, ptrs, mask, other, *args, **kwargs):
        loaded = original(self, ptrs, mask, other, *args, **kwargs)
        memory = capture.noise_memory
        if not memory or capture.tape is None:
            return loaded
        where = np.asarray(ptrs.data).astype(np.int64, copy=False)
        low, high = min(memory), max(memory)  # one range test before any per-element look-up
        live = np.broadcast_to(np.asarray(mask.data, dtype=bool), where.shape) & (where >= low) & (where <= high)
        elements = np.empty(where.shape, dtype=object)
        hit = False
        for index in zip(*np.nonzero(live)):
            element = memory.get(int(where[index]))
            if element is not None:
                element.read = True
                capture.tape.read_past(element.column)  # past the torch mode: a race's token is not all it learns
                elements[index] = element
                hit = True
        if not hit:
            return loaded
        kinds = {element.kind for element in elements.reshape(-1) if element is not None}
        if kinds - {"inverse", "noise"} or len(kinds) != 1 or (kinds != {"inverse"} and any(
                element is not None and element.raced for element in elements.reshape(-1))):
            trace = _Trace(capture, elements, "impure")
            _impure(trace)
            return loaded
        loaded.data = _traced(loaded.data, _Trace(capture, elements, kinds.pop()))
        return loaded

    capture._patch(builder, "create_masked_load", create_masked_load)


def _refuse_draw(capture, what: str) -> None:
    raise rules.Signal(rules.CaptureRefusal(
        f"external function {capture.name} draws with {what} inside a Triton kernel at {rules.site()}, which "
        "verispec does not feed (it feeds tl.rand, tl.randint and the engines' generators their adapters register, one "
        "key a call)"))
