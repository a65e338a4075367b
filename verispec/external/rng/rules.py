"""The rules of RNG capture, and what every captured primitive shares.

Each rule turns independent Uniform[0, 1) variables (numpy float64 in) into a draw with the primitive's own law
(numpy out), so the law of a function over a random tape is its law under a fresh random generator
(``docs/guides/check_external.md``, "Glossary of RNG capture", states the rule of each primitive and its precision).
Beside them: the captures entered (``ACTIVE``), the user's line of a draw (``site``, ``raise_site``), and
``Signal``, which carries verispec's refusal out of the function under check.
"""

from __future__ import annotations

import os
import random as _random
import sys
import traceback

import numpy as np

from verispec.errors import VerifierError, VerispecError
from verispec.external.tree_arrays import inverse_cdf

#: The smallest positive float: u = 0 is read as this where log(u) or Phi^-1(u) would be infinite.
TINY = float(np.nextafter(0.0, 1.0))
#: Bits of a float32 uniform drawn by torch's CPU generator and numpy's (k 2^-24, k = 0 .. 2^24 - 1).
FLOAT32_UNIFORM_BITS = 24

#: The captures entered, innermost last (a numpy Generator created inside a call draws from the innermost).
ACTIVE: list = []

#: The files of RNG capture itself, skipped when looking for the user's line of a draw (``site``).
_CAPTURE_FILES = tuple(os.path.join(os.path.dirname(os.path.abspath(__file__)), f"{name}.py")
                       for name in ("__init__", "rules", "numpy_draws", "torch_draws", "triton_races",
                                    "triton_random")) + (
    os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "keyed.py"),)


class CaptureRefusal(VerifierError):
    """A function's draws cannot be fed from the uniforms (no batch dimension, an uncaptured primitive)."""


class RowByRowRefusal(CaptureRefusal):
    """A batched call's draws cannot be fed row by row (no batch dimension, draws that depend on the batch, rows
    that read each other); calling the function one row at a time (``per_row``) can."""


class KeyRefusal(CaptureRefusal):
    """A keyed draw verispec cannot feed: a key it cannot read (the time, ``os.urandom``, ``torch.seed()``: it
    differs between two identical calls), or more keys in one call than the budget allows."""


class Signal(BaseException):
    """Carries a VerispecError out of the function (whose own ``except Exception`` must not swallow it)."""

    def __init__(self, error: VerispecError):
        super().__init__(str(error))
        self.error = error


def _libraries(*own: str) -> tuple[str, ...]:
    """Path prefixes of the code around a user's function: ``own`` (files or a folder of verispec), numpy, torch
    and ``random``."""
    return (os.path.dirname(np.__file__) + os.sep, *own, _random.__file__) + (
        (os.path.dirname(sys.modules["torch"].__file__) + os.sep,) if "torch" in sys.modules else ())


#: The prefixes ``site`` (and, under "raise", ``raise_site``) skips, by whether torch was loaded when they were
#: worked out.
_SKIPPED: dict = {}


def site() -> str:
    """file:line of the innermost frame outside RNG capture, torch, numpy and ``random`` (the user's draw)."""
    skipped = _SKIPPED.get("torch" in sys.modules)
    if skipped is None:  # asked at every captured draw: the prefixes are worked out once (with torch, and without)
        skipped = _SKIPPED["torch" in sys.modules] = _libraries(*_CAPTURE_FILES)
    frame = sys._getframe(1)
    while frame is not None:
        if not frame.f_code.co_filename.startswith(skipped):
            return f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno}"
        frame = frame.f_back
    return "?"


def raise_site(error: BaseException) -> str:
    """file:line where a user's function raised ``error``: the innermost frame of its traceback outside verispec,
    numpy, torch and ``random`` (for an error raised inside a library call - ``torch.multinomial`` on an all-zero
    law, or verispec's captured version of it - the user's line that made the call); '?' if there is none."""
    if hasattr(error, "sandbox_site"):  # raised in the sandbox (verispec.guard.sandbox), which found the line there
        return error.sandbox_site
    skipped = _SKIPPED.get(("raise", "torch" in sys.modules))
    if skipped is None:  # asked at every raise a black-box test goes on past: worked out once
        skipped = _SKIPPED[("raise", "torch" in sys.modules)] = _libraries(
            os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))) + os.sep)  # verispec/
    frames = [frame for frame, _ in traceback.walk_tb(error.__traceback__)]
    for frame in reversed(frames):
        if not frame.f_code.co_filename.startswith(skipped):
            return f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno}"
    return "?"


# ------------------------------------------------------------------------------------------------------------
# The rules (numpy float64 in, numpy out)


def uniform(u, low=0.0, high=1.0):
    return low + (high - low) * u


def exponential(u, rate=1.0):
    return -np.log(np.maximum(u, TINY)) / rate


def normal(u, mean=0.0, std=1.0):
    from scipy.special import ndtri

    return mean + std * ndtri(np.maximum(u, TINY))


def integers(u, low, high):
    """low + floor(u (high - low)), the uniform categorical on low..high-1 by inverse CDF."""
    if high <= low:  # what the libraries refuse too
        raise ValueError(f"empty range of integers [{low}, {high})")
    return low + np.minimum(np.floor(u * (high - low)), high - low - 1).astype(np.int64)


#: The most values of an integer draw whose breakpoints exact integration is handed (``integer_breaks``): more
#: would make each scanned line longer than the bisections it saves.
MAX_KNOWN_BREAKS = 256


def integer_breaks(count: int) -> np.ndarray | None:
    """Where ``integers(u, low, low + count)`` changes value: for k = 1 .. count - 1, the least float64 u with
    floor(u count) >= k (k / count, moved by the float rounding of u count) -> [count - 1] float64, or None for
    more than ``MAX_KNOWN_BREAKS`` values. Exact integration scans these points and the floats just below them, so
    a change there is found without bisection (a point off by rounding only costs a short bisection)."""
    if not 1 < count <= MAX_KNOWN_BREAKS:
        return None
    k = np.arange(1, count, dtype=np.float64)
    u = k / count
    for _ in range(4):  # up while floor(u count) < k, then down while the float below still reaches k
        u = np.where(np.floor(u * count) < k, np.nextafter(u, 1.0), u)
    for _ in range(4):
        below = np.nextafter(u, 0.0)
        u = np.where(np.floor(below * count) >= k, below, u)
    return u


def categorical(weights: np.ndarray, u: np.ndarray, replacement: bool) -> np.ndarray:
    """Draws from the rows of ``weights`` [R, V] with ``u`` [R, n]: by inverse CDF, one u per draw; without
    replacement each draw from the weights left. -> [R, n] int64."""
    rows, draws = u.shape
    if draws == 1:
        return inverse_cdf(weights, u[:, 0])[:, None]
    if replacement:
        return inverse_cdf(np.repeat(weights, draws, axis=0), u.reshape(-1)).reshape(rows, draws)
    left = weights.copy()
    out = np.empty((rows, draws), dtype=np.int64)
    for index in range(draws):
        out[:, index] = inverse_cdf(left, u[:, index])
        left[np.arange(rows), out[:, index]] = 0.0
    return out


def check_weights(weights: np.ndarray, draws: int, replacement: bool, what: str) -> None:
    """Refuse what ``torch.multinomial`` refuses, with its kind of error (the RuntimeError the function sees)."""
    totals = weights.sum(axis=-1)
    if not (np.isfinite(totals).all() and weights.min() >= 0):  # a NaN fails both, an inf the first
        raise RuntimeError(f"{what}: probability tensor contains either inf, nan or element < 0")
    if totals.min() <= 0:
        raise RuntimeError(f"{what}: invalid multinomial distribution (sum of probabilities <= 0)")
    # one draw needs one positive weight, which a positive total of weights >= 0 has: counted only for more
    if not replacement and draws > 1 and np.any((weights > 0).sum(axis=-1) < draws):
        raise RuntimeError(f"{what}: invalid multinomial distribution (with replacement=False, not enough "
                           "non-negative category to sample)")


def on_grid(values: np.ndarray, dtype) -> np.ndarray:
    """float64 uniforms u in [0, 1) as the float32 uniforms torch's CPU generator and numpy's ``random(dtype=
    float32)`` draw: floor(u 2^24) 2^-24, each of the 2^24 values with probability 2^-24 when u is uniform, which
    is those generators' own law (so exact mode integrates the code's law under them exactly: a threshold on such
    a draw has its breakpoint at a multiple of 2^-24, and its mass is one)."""
    scale = float(2 ** FLOAT32_UNIFORM_BITS)
    return np.array(np.floor(np.asarray(values, dtype=np.float64) * scale) / scale, dtype=dtype)  # a copy, any shape


def round_down(values: np.ndarray, dtype) -> np.ndarray:
    """``values`` (float64, >= 0) in a narrower float type, rounded down rather than to nearest."""
    values = np.asarray(values, dtype=np.float64)
    rounded = values.astype(dtype)
    above = rounded.astype(np.float64) > values
    rounded[above] = np.nextafter(rounded[above], dtype(-np.inf))
    return np.ascontiguousarray(rounded)
