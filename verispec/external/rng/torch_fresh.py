"""Uniforms torch drew that the code overwrites before reading them: their tape columns are not used.

vLLM's V1 rejection sampler draws the acceptance uniforms of the whole batch from torch's global generator
(``torch.rand``), then draws each seeded request's slice again from that request's own generator
(``uniform_probs[start:end].uniform_(generator=...)``). The global draw's values in those slices are never read, so
the run cannot change with them, and exact integration need not scan the lines along their uniforms (``exact``:
lines along a uniform the run did not use are skipped). Scanned, each is some 18 evaluations a box for nothing: a
third of the lines of vLLM's seeded step at one draft.

RNG capture follows a tensor that ``torch.rand`` (or ``rand_like``) returned in a call of one row (``track``), as it
follows exponential noise (``rng.torch_draws``): the address of each element, with its tape column. Following puts a
look-up on every torch operation of the call (a ``TorchFunctionMode``), which made torch-heavy rules up to twice as
slow, so a tensor is followed only where the call already follows exponential noise (vLLM's samplers, whose
recovery races it); elsewhere its uniforms stay used, as before. A view of it taken by
indexing (``Tensor.__getitem__``, ``select``) is followed too. ``uniform_`` through such a view (or on the tensor
itself) while nothing has read the tensor marks the columns of the elements it replaces unused (``overwritten``).
Any other use of the tensor or of a view of it, whatever it is (arithmetic, a copy, its memory handed to a Triton
kernel, ``numpy()``), is a read (``note_use``): from then on nothing more is marked, since the values read may have
decided the run. A tensor written into (``out=``) is not followed. The tensor's memory is verispec's own (made from
the fed uniforms in that draw), so no one reads it except through it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from verispec.external.rng import triton_races as rng_triton


@dataclass
class FreshUniforms:
    """A tensor of fed uniforms no one has read yet: tape column by element address."""

    tensor: object
    columns: dict
    state: str = "fresh"  # fresh -> read


@dataclass
class FreshView:
    """A view of a ``FreshUniforms`` tensor taken by indexing."""

    tensor: object
    base: FreshUniforms


def track(capture, tensor, columns: np.ndarray) -> None:
    """Follow ``tensor``, which a draw just filled with the uniforms of tape ``columns`` (its shape), in a call of
    one row under exact integration (``capture.races``)."""
    tape = capture.tape
    if not capture.races or tape is None or tape.rows != 1 or tensor.device.type != "cpu" or tensor._base is not None:
        return
    if not capture.tracked:  # following puts a look-up on every torch operation of the call: only where it already
        return  # follows exponential noise (vLLM's samplers), never for a call whose only draws are uniforms
    where = rng_triton.addresses(tensor).reshape(-1).tolist()
    capture.tracked[id(tensor)] = FreshUniforms(tensor, dict(zip(where, np.asarray(columns).reshape(-1).tolist())))


def is_fresh(entry) -> bool:
    return isinstance(entry, (FreshUniforms, FreshView))


def view(capture, func, args, kwargs, involved) -> object | None:
    """The view ``func`` (an indexing view) takes of a still unread tensor, followed; None where it is no such view."""
    entry = involved[0] if len(involved) == 1 else None
    if not isinstance(entry, FreshUniforms) or entry.state != "fresh" or not args or args[0] is not entry.tensor:
        return None
    result = func(*args, **kwargs)
    capture.tracked[id(result)] = FreshView(result, entry)
    return result


def note_use(involved) -> None:
    """A use of followed uniforms other than an indexing view or a refill: they are read."""
    for entry in involved:
        if isinstance(entry, FreshUniforms):
            entry.state = "read"
        elif isinstance(entry, FreshView):
            entry.base.state = "read"


def overwritten(capture, tensor) -> bool:
    """``uniform_`` is about to write every element of ``tensor``: True where it is a followed tensor or view (the
    write is then no read of it), and where nothing has read it yet, the columns its elements held are unused from
    now on (a column another draw read by its key stays used)."""
    entry = capture.tracked.get(id(tensor))
    if not is_fresh(entry) or entry.tensor is not tensor:
        return False
    base = entry if isinstance(entry, FreshUniforms) else entry.base
    if base.state == "fresh" and capture.tape is not None:
        replaced = np.asarray([base.columns.pop(address) for address in rng_triton.addresses(tensor).reshape(-1)
                               .tolist() if address in base.columns], dtype=np.int64)
        capture.tape.used[replaced[capture.tape.reads[replaced] == 1]] = False
    return True


__all__ = ["FreshUniforms", "FreshView", "is_fresh", "note_use", "overwritten", "track", "view"]
