"""Probability vectors: parsing, validation and the few operations every rule is built from.

Two number systems are supported throughout the simulator:

* float64 numpy arrays (the default), and
* exact rationals: numpy arrays of dtype ``object`` holding ``fractions.Fraction`` (``exact=True``).

Every rule in verispec uses only +, -, *, /, min and max, so the same code runs in both systems and the
exact mode returns exact answers (losslessness is then ``tv_distance == 0`` with no tolerance).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from decimal import Decimal, InvalidOperation
from fractions import Fraction

import numpy as np

from verispec import backend
from verispec.errors import InvalidDistributionError, describe

#: Largest |sum - 1| accepted for a float64 input distribution. Inputs within it are renormalised so the
#: simulator's own arithmetic starts from vectors that sum to one to the last bit available.
SUM_TOLERANCE = 1e-8


#: Largest decimal exponent accepted in a probability such as '1e-300' (beyond it the exact rational would
#: have a denominator of more than this many digits; write such a value as 0 or as a fraction).
MAX_EXPONENT = 10_000


def parse_number(text: str | float | int | Fraction | Decimal, *, exact: bool) -> float | Fraction:
    """Parse '0.25', '1/3' or a number into a float (or a Fraction when ``exact``).

    A ``Decimal`` (a JSON number read as written) converts exactly. Decimal exponents beyond
    ``MAX_EXPONENT`` are refused rather than expanded into huge integers."""
    if isinstance(text, (Fraction, int)) and not isinstance(text, bool):
        value = Fraction(text)
    elif isinstance(text, float):
        if math.isnan(text) or math.isinf(text):
            raise InvalidDistributionError(f"probability {describe(text)} is not a finite number")
        value = Fraction(text)
    elif isinstance(text, Decimal):
        if not text.is_finite():
            raise InvalidDistributionError(f"probability {text} is not a finite number")
        _check_exponent(text, str(text))
        value = Fraction(text)
    elif isinstance(text, str):
        stripped = text.strip()
        if stripped.lower() in {"nan", "+nan", "-nan"}:
            raise InvalidDistributionError(f"probability {text!r} is NaN")
        if "e" in stripped.lower():
            try:
                _check_exponent(Decimal(stripped), repr(text))
            except InvalidOperation:
                pass  # not a decimal; Fraction below decides
        try:
            value = Fraction(stripped)
        except (ValueError, ZeroDivisionError):
            raise InvalidDistributionError(f"cannot read {text!r} as a probability") from None
    else:
        raise InvalidDistributionError(f"cannot read {describe(text)} as a probability")
    if exact:
        return value
    try:
        return float(value)
    except OverflowError:
        raise InvalidDistributionError(f"probability {describe(text)} is not a finite float64 number") from None


def _check_exponent(value: Decimal, shown: str) -> None:
    if value.is_finite() and value != 0 and abs(value.as_tuple().exponent) > MAX_EXPONENT:
        raise InvalidDistributionError(
            f"probability {shown} has a decimal exponent beyond {MAX_EXPONENT}; write it as 0 or as a fraction")


def parse_distribution(text: str, *, exact: bool = False, name: str = "distribution") -> np.ndarray:
    """Parse a comma-separated list such as '1/3,2/3' into a validated probability vector."""
    parts = [part for part in text.split(",")]
    if any(part.strip() == "" for part in parts):
        raise InvalidDistributionError(f"{name}: empty entry in {text!r}")
    try:
        values = [parse_number(part, exact=exact) for part in parts]
    except InvalidDistributionError as error:
        raise InvalidDistributionError(f"{name}: {error}") from None
    return as_distribution(values, exact=exact, name=name)


def as_distribution(
    values: Sequence | np.ndarray,
    *,
    exact: bool = False,
    name: str = "distribution",
    size: int | None = None,
) -> np.ndarray:
    """Validate ``values`` as a probability vector and return it as a read-only array.

    Raises ``InvalidDistributionError`` naming the problem: wrong shape or length, NaN or infinite
    entries, negative entries, or a sum that is not one (exactly in exact mode; within
    ``SUM_TOLERANCE`` in float mode, where the vector is then renormalised).
    """
    raw = np.asarray(values, dtype=object if exact else None)
    if raw.ndim != 1:
        raise InvalidDistributionError(f"{name}: expected a 1-d vector, got shape {raw.shape}")
    if size is not None and raw.shape[0] != size:
        raise InvalidDistributionError(f"{name}: expected {size} probabilities, got {raw.shape[0]}")
    if raw.shape[0] == 0:
        raise InvalidDistributionError(f"{name}: empty vector")
    if exact:
        try:
            vector = np.array([Fraction(v) if not isinstance(v, float) else _fraction_of_float(v, name)
                               for v in raw], dtype=object)
        except InvalidDistributionError:
            raise
        except (TypeError, ValueError, OverflowError):
            raise InvalidDistributionError(f"{name}: entries must be numbers, got {describe(list(raw))}") from None
        negative = [i for i, v in enumerate(vector) if v < 0]
        if negative:
            index = negative[0]
            raise InvalidDistributionError(f"{name}: negative probability at index {index} ({describe(vector[index])})")
        total = sum(vector, Fraction(0))
        if total != 1:
            raise InvalidDistributionError(f"{name}: probabilities sum to {describe(total)}, not 1 "
                                           "(exact mode: give fractions that sum to exactly 1)")
    else:
        try:
            vector = np.array(raw, dtype=np.float64)
        except (TypeError, ValueError):
            raise InvalidDistributionError(f"{name}: entries must be numbers, got {describe(raw.tolist())}") from None
        if np.isnan(vector).any():
            raise InvalidDistributionError(f"{name}: NaN at index {int(np.flatnonzero(np.isnan(vector))[0])}")
        if not np.isfinite(vector).all():
            index = int(np.flatnonzero(~np.isfinite(vector))[0])
            raise InvalidDistributionError(f"{name}: infinite value at index {index}")
        if (vector < 0).any():
            index = int(np.flatnonzero(vector < 0)[0])
            raise InvalidDistributionError(f"{name}: negative probability at index {index} ({describe(vector[index])})")
        with np.errstate(over="ignore"):  # entries near 1e308 sum to inf: the line below says so, no warning
            total = float(vector.sum())
        if abs(total - 1.0) > SUM_TOLERANCE:
            raise InvalidDistributionError(
                f"{name}: probabilities sum to {describe(total)}, not 1 (tolerance {SUM_TOLERANCE:g}); "
                "normalise the input")
        vector = float_rows(vector[None, :])[0]
    vector.setflags(write=False)
    return vector


def float_rows(matrix: np.ndarray) -> np.ndarray | None:
    """The float rule of ``as_distribution`` on every row of a [n, V] float64 matrix at once: finite, non-negative,
    each row's sum within SUM_TOLERANCE of one, then divided by it; None when any row fails (``as_distribution``
    then names the failure). Problem files check their tables with it in bulk."""
    if matrix.size and not (np.isfinite(matrix).all() and (matrix >= 0).all()):
        return None
    with np.errstate(over="ignore"):  # a row near 1e308 sums to inf: as_distribution names it, no warning
        totals = matrix.sum(axis=1)
    if (np.abs(totals - 1.0) > SUM_TOLERANCE).any():
        return None
    return matrix / totals[:, None]


def _fraction_of_float(value: float, name: str) -> Fraction:
    if math.isnan(value) or math.isinf(value):
        raise InvalidDistributionError(f"{name}: {describe(value)} is not a finite number")
    return Fraction(value).limit_denominator(10**12)


def positive_part(values):
    """(x)+ = max(x, 0), elementwise, on any backend."""
    return backend.positive_part(values)


def normalize(values):
    """norm(v) = v / sum(v) over the last axis, for non-negative v; a zero vector stays zero (that branch has
    probability zero)."""
    mass = backend.total(values, keepdims=True)
    return values / backend.where(mass != 0, mass, backend.one(values))


def weighted_residual(weight, p, q):
    """norm((w p - q)+): the correction law of token-level verification (w = 1; Leviathan et al. 2023,
    Alg. 1), of block verification at tau and of Traversal's deletion update (w = the path weight).

    Batched: p and q are [..., V] on any backend, ``weight`` a scalar or an array [...]. In float arithmetic
    the positive part can round to all zeros while the branch that uses it still has positive
    (rounding-level) probability, e.g. q = (8e-19, 1.0), p = (0, 1), or w = 1 with p and q equal to within
    1e-31. Its exact-arithmetic support then lies among the tokens with w p >= q, which carry it in
    proportion to w p; if even that is empty, p itself. An all-zero law would lose that branch's mass. Exact
    (Fraction) arithmetic never takes the fallback.
    """
    scaled = p if isinstance(weight, int) and weight == 1 else backend.per_row(weight, p) * p
    leftover = backend.positive_part(scaled - q)
    mass = backend.total(leftover, keepdims=True)
    if not backend.is_exact(p):
        empty = mass == 0
        if bool(backend.namespace(empty).any(empty)):  # rare: only rows that rounding emptied change
            leftover = backend.where(empty, backend.where(scaled >= q, scaled, 0.0), leftover)
            still_empty = backend.total(leftover, keepdims=True) == 0
            leftover = backend.where(still_empty, p, leftover)
            mass = backend.total(leftover, keepdims=True)
    return leftover / backend.where(mass != 0, mass, backend.one(leftover))


def residual(p, q):
    """norm((p - q)+), the token-level correction law (``weighted_residual`` with w = 1)."""
    return weighted_residual(1, p, q)


def stop_probability(weight, p, q):
    """S / (S + 1 - w) with S = sum (w p - q)+ over the last axis; 1 when the denominator vanishes. Block
    verification's h_i (Sun et al. 2024) and Traversal's updated parent weight (Weng et al. 2025) are this
    quantity. Batched as ``weighted_residual``: p, q [..., V], weight scalar or [...] -> [...]."""
    mass = backend.total(backend.positive_part(backend.per_row(weight, p) * p - q))
    denominator = mass + (1 - weight)  # parenthesised: w = 1 must give exactly 1, not 1 - 1e-16
    return backend.divide(mass, denominator, where_zero=backend.one(p))


def ratio_min_one(p_value, q_value):
    """min(1, p/q) for one drafted token (q > 0 is guaranteed by the draft tree)."""
    ratio = p_value / q_value
    return ratio if ratio < 1 else ratio * 0 + 1
