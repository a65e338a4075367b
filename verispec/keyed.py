"""Keyed (counter-based) uniforms for re-creations of kernel code: ``rand(seed, offsets)``.

Engines' sampling kernels do not draw from a generator with a position in a stream; they compute each random
number from a key. Triton's ``tl.rand(seed, offsets)`` (the Philox counter-based generator of Salmon et al.,
"Parallel random numbers: as easy as 1, 2, 3", SC 2011) returns, for every element, the uniform at
(seed, offset): the same (seed, offset) gives the same number wherever and however often it is computed, and
different offsets independent ones. vLLM's and SGLang's rejection and Gumbel-sampling kernels key their noise
this way, by a request's seed and a token's position, so two kernels that use the same (seed, position) read
the very same numbers: the reuse behind vLLM #47386 (draft noise and recovery noise under one key).

Code written against ``rand`` runs anywhere: outside verispec it returns a counter-based uniform (a SplitMix64
hash of (seed, offset), 53 bits). Under ``verispec check-external --rng capture``, for a function handed its
request's seed (a ``seed`` parameter), each (seed, offset) is one of the uniforms verispec integrates (exact mode)
or draws (black-box mode), the same one wherever the call asks for that key ("Keys" in the glossary of
``docs/guides/check_external.md``), so a reuse of one key by two uses is modelled as the reuse it is. A function
handed no seed gets the counter-based numbers themselves: its keys are constants or read from its inputs, the same
on every call.
"""

from __future__ import annotations

import numpy as np

from verispec.errors import VerispecError

__all__ = ["rand"]



def rand(seed, offsets, *, dtype=None):
    """The uniforms in [0, 1) at (``seed``, each of ``offsets``): Triton's ``tl.rand(seed, offsets)`` contract.

    ``seed``: an integer (or a 0-d tensor / array), or an integer array broadcastable with ``offsets`` (one key
    per element, as a kernel launched per request reads its request's seed). ``offsets``: an integer, an integer
    numpy array or an integer torch tensor. Returns the offsets' kind and shape: a numpy float64 array, or a torch
    tensor of ``dtype`` (default float64) on the offsets' device (float32 values are rounded down to a multiple
    of 2^-24, as a float32 generator draws them)."""
    torch_kind = hasattr(offsets, "detach")
    device = offsets.device if torch_kind else None
    where = np.asarray(offsets.detach().cpu().numpy() if torch_kind else offsets)
    if where.dtype.kind not in "iu":
        raise VerispecError(f"verispec.keyed.rand takes integer offsets, got dtype {where.dtype}: pass the "
                            "element's counter (a position, an index), as tl.rand(seed, offsets) does")
    seeds = np.asarray(seed.detach().cpu().numpy() if hasattr(seed, "detach") else seed)
    if seeds.dtype.kind not in "iub":
        raise VerispecError(f"verispec.keyed.rand takes an integer seed, got {seed!r}: derive it from the "
                            "request's seed")
    try:
        seeds, where = np.broadcast_arrays(seeds.astype(np.int64), where.astype(np.int64))
    except ValueError:
        raise VerispecError(f"verispec.keyed.rand: seeds of shape {list(seeds.shape)} do not broadcast with "
                            f"offsets of shape {list(where.shape)}") from None
    values = _fed(seeds, where)
    if values is None:
        values = _splitmix_uniforms(seeds, where)
    if not torch_kind:
        return values
    import torch

    dtype = dtype or torch.float64
    if dtype == torch.float32:
        values = np.floor(values * 2.0 ** 24) * 2.0 ** -24
    return torch.from_numpy(np.ascontiguousarray(values)).to(dtype=dtype, device=device)


def _fed(seeds: np.ndarray, offsets: np.ndarray) -> np.ndarray | None:
    """The uniforms from the active capture (``verispec.external.rng``), one key per distinct seed; None outside."""
    from verispec.external.rng.rules import ACTIVE

    if not ACTIVE:
        return None
    capture = ACTIVE[-1]
    if capture.mode == "capture" and not capture.handed_seed:  # a seed not handed by verispec: a constant, or
        return None  # read from the inputs, the same on every call; the counter-based numbers are its true law
    values = np.empty(offsets.shape, dtype=np.float64)
    flat_seeds, flat_offsets, flat_values = seeds.reshape(-1), offsets.reshape(-1), values.reshape(-1)
    for seed in dict.fromkeys(flat_seeds.tolist()):
        chosen = np.flatnonzero(flat_seeds == seed)
        flat_values[chosen] = capture.keyed_draw("verispec.keyed.rand", ("philox", int(seed)),
                                                 flat_offsets[chosen])[0]
    return values


def _splitmix_uniforms(seeds: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """A counter-based uniform per (seed, offset): the SplitMix64 finaliser (Steele, Lea and Flood, OOPSLA 2014)
    of the seed, plus the offset's step, finalised again; its top 53 bits over 2^53."""
    golden = np.uint64(0x9E3779B97F4A7C15)
    with np.errstate(over="ignore"):
        state = _mix(seeds.astype(np.uint64) * golden + golden)
        state = _mix(state + (offsets.astype(np.uint64) + np.uint64(1)) * golden)
    return (state >> np.uint64(11)).astype(np.float64) * 2.0 ** -53


def _mix(state: np.ndarray) -> np.ndarray:
    state = (state ^ (state >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    state = (state ^ (state >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return state ^ (state >> np.uint64(31))
