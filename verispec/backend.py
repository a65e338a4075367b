"""One thin array backend: the few operations verification rules are written with.

Every rule in verispec is written once, batched over leading axes, against this module and the Python
array API (``array-api-compat``, which speaks for numpy and torch alike). The same code then runs on

* numpy float64 arrays (the exact engine's default),
* numpy arrays of dtype ``object`` holding ``fractions.Fraction`` (exact mode: every rule uses only
  +, -, *, /, min, max and comparisons, so the answers are exact rationals), and
* torch tensors of any floating dtype on any device (real decoding).

Integer arrays (tokens, node ids) are int64 numpy arrays or int64 tensors on the rule's device. Nothing
here draws random numbers, and no function modifies its arguments.
"""

from __future__ import annotations

import functools
from fractions import Fraction
from typing import Any

import array_api_compat
import numpy as np

#: An array of any supported backend: numpy (float64 or Fraction objects) or torch.
Array = Any


@functools.cache
def _numpy_namespace():
    """numpy's array-API namespace: numpy itself from numpy 2.1 on (it implements the standard, 2023.12 or later);
    array-api-compat's wrapper for older numpy. The wrapper copies every numpy attribute when it is first imported,
    which loads numpy.f2py and numpy.testing: 0.1 s of every command's start-up, for nothing on numpy >= 2.1."""
    if getattr(np, "__array_api_version__", "0") >= "2023.12":
        return np
    return array_api_compat.array_namespace(np.zeros(0))


def namespace(*arrays):
    """The array-API namespace of ``arrays`` (numpy's also serves object arrays of Fractions)."""
    if all(type(array) is np.ndarray for array in arrays):  # the common case, without the general lookup
        return _numpy_namespace()
    return array_api_compat.array_namespace(*arrays)


def is_exact(array) -> bool:
    """True for numpy object arrays (exact rationals)."""
    return type(array) is np.ndarray and array.dtype == object


def device(array):
    return array_api_compat.device(array)


def zero(like):
    """0 in the number system of ``like`` (a Python scalar; broadcasts against any backend)."""
    return Fraction(0) if is_exact(like) else 0.0


def one(like):
    """1 in the number system of ``like``."""
    return Fraction(1) if is_exact(like) else 1.0


def full(shape, value, like) -> Array:
    """An array of ``shape`` filled with ``value``, with the dtype and device of ``like``."""
    if is_exact(like):
        out = np.empty(shape, dtype=object)
        out.fill(Fraction(value))
        return out
    xp = namespace(like)
    return xp.full(shape, value, dtype=like.dtype, device=device(like))


def zeros(shape, like) -> Array:
    return full(shape, 0, like)


def ones(shape, like) -> Array:
    return full(shape, 1, like)


def asarray(values, like) -> Array:
    """Host values (a list or numpy array) as an array of the backend, dtype and device of ``like``."""
    if is_exact(like):
        out = np.empty(np.shape(values), dtype=object)
        out[...] = values
        return out
    if isinstance(like, np.ndarray):
        return np.asarray(values, dtype=like.dtype)
    xp = namespace(like)
    return xp.asarray(np.asarray(values, dtype=np.float64), dtype=like.dtype, device=device(like))


def index_array(values, like) -> Array:
    """Host integers as an int64 index array on the device of ``like``."""
    if isinstance(like, np.ndarray):
        return np.asarray(values, dtype=np.int64)
    xp = namespace(like)
    return xp.asarray(np.asarray(values, dtype=np.int64), device=device(like))


def to_numpy(array) -> np.ndarray:
    """A host copy: float64 (object for exact arrays, int64 for integer arrays)."""
    if isinstance(array, np.ndarray):
        return array
    host = array.detach().cpu()
    if host.dtype.is_floating_point:
        return host.double().numpy()
    return host.numpy()


def arange(count: int, like) -> Array:
    """0..count-1 as an int64 index array on the device of ``like``."""
    if isinstance(like, np.ndarray):
        return np.arange(count)
    xp = namespace(like)
    return xp.arange(count, device=device(like))


def take(rows, index) -> Array:
    """rows[..., index[...]]: the entry of each row at its own index; rows [..., V], index [...] -> [...]."""
    if rows.ndim == 2:
        return rows[arange(rows.shape[0], index), index]
    xp = namespace(rows)
    return xp.take_along_axis(rows, index[..., None], axis=-1)[..., 0]


def one_hot(index, size: int) -> Array:
    """Boolean [..., size] marking index[...] (an entry of -1 marks nothing)."""
    return index[..., None] == arange(size, index)


def membership(tokens, size: int) -> Array:
    """Boolean [N, size]: which tokens occur in each row of ``tokens`` [N, m] (-1 entries ignored)."""
    xp = namespace(tokens)
    marks = one_hot(tokens, size)  # [N, m, size]
    return xp.any(marks, axis=-2)


def counts(tokens, size: int) -> Array:
    """Integer [N, size]: how often each token occurs in each row of ``tokens`` [N, m]."""
    xp = namespace(tokens)
    return xp.sum(xp.astype(one_hot(tokens, size), xp.int64), axis=-2)


def _is_array(value) -> bool:
    if isinstance(value, (int, float, Fraction, np.generic, bool)):
        return False
    return isinstance(value, np.ndarray) or array_api_compat.is_array_api_obj(value)


def where(condition, chosen, otherwise) -> Array:
    """``chosen`` where ``condition`` holds, else ``otherwise``; Python scalars broadcast, and with no array
    at all (a scalar rule on one token) it is a plain conditional."""
    if type(condition) is np.ndarray:
        return np.where(condition, chosen, otherwise)
    arrays = [a for a in (condition, chosen, otherwise) if _is_array(a)]
    if not arrays:
        return chosen if condition else otherwise
    return namespace(*arrays).where(condition, chosen, otherwise)


def positive_part(values) -> Array:
    """(x)+ = max(x, 0), elementwise."""
    if type(values) is np.ndarray:
        return np.maximum(values, zero(values))
    xp = namespace(values)
    return xp.maximum(values, zero(values))


def minimum_one(values) -> Array:
    """min(x, 1), elementwise."""
    if type(values) is np.ndarray:
        return np.minimum(values, one(values))
    xp = namespace(values)
    return xp.minimum(values, one(values))


def total(values, *, keepdims: bool = False) -> Array:
    """Sum over the last (token) axis."""
    if type(values) is np.ndarray:
        return values.sum(axis=-1, keepdims=keepdims)
    xp = namespace(values)
    return xp.sum(values, axis=-1, keepdims=keepdims)


def per_row(values, rows) -> Array:
    """``values`` [...] broadcast against ``rows`` [..., V] (a scalar passes through)."""
    if isinstance(values, (int, float, Fraction)) or getattr(values, "ndim", 0) == 0:
        return values
    return values[..., None]


def divide(numerator, denominator, *, where_zero) -> Array:
    """numerator / denominator elementwise, and ``where_zero`` where the denominator is 0 (no warning,
    no NaN: that branch has probability zero)."""
    safe = where(denominator != 0, denominator, one(denominator))
    return where(denominator != 0, numerator / safe, where_zero)


def stack(arrays, axis: int) -> Array:
    xp = namespace(*arrays)
    return xp.stack(list(arrays), axis=axis)


def add_to_tokens(accumulator, index, values) -> Array:
    """accumulator[r, index[r]] += values[r] for every row r, IN PLACE on an array the caller created for
    this purpose (a law being built), and returned; O(N) instead of a one-hot pass over [N, V]."""
    if type(accumulator) is np.ndarray and accumulator.flags.c_contiguous:  # flat indexing: faster
        flat = accumulator.reshape(-1)
        flat[np.arange(accumulator.shape[0]) * accumulator.shape[1] + index] += values
        return accumulator
    rows = arange(accumulator.shape[0], index)
    accumulator[rows, index] += values
    return accumulator


def scatter_rows(values, index, size: int) -> Array:
    """Place ``values`` [N, V] at node ``index`` [N] of a zero array [N, size, V]."""
    marks = one_hot(index, size)  # [N, size]
    return where(marks[..., None], values[:, None, :], zero(values))


def argsort(values, *, stable: bool = True) -> Array:
    """Ascending order along the last axis (numpy, Fraction objects and torch alike)."""
    if isinstance(values, np.ndarray):
        return np.argsort(values, axis=-1, kind="stable" if stable else None)
    xp = namespace(values)
    return xp.argsort(values, axis=-1, stable=stable)


def cumulative_sum(values) -> Array:
    if isinstance(values, np.ndarray):
        return np.cumsum(values, axis=-1)
    xp = namespace(values)
    return xp.cumulative_sum(values, axis=-1)


def unique_rows(keys) -> tuple[Array, Array]:
    """(first, inverse) for the distinct rows of an integer array [N, k]: ``keys[first]`` are the distinct
    rows and ``keys[first][inverse]`` is ``keys``."""
    if isinstance(keys, np.ndarray):
        _, first, inverse = np.unique(keys, axis=0, return_index=True, return_inverse=True)
        return first, inverse.reshape(-1)
    import torch

    distinct, inverse = torch.unique(keys, dim=0, return_inverse=True)
    first = torch.full((len(distinct),), len(keys), dtype=torch.int64, device=keys.device)
    first = first.scatter_reduce(0, inverse, torch.arange(len(keys), device=keys.device), reduce="amin")
    return first, inverse


def unique_value_rows(*arrays) -> tuple[list[int], list[int]]:
    """(first, inverse) over the rows of one or more arrays [N, ...] taken together, compared by value
    (float bits, Fractions or tensor values): the rows ``first`` are distinct and row r equals row
    ``first[inverse[r]]``. Host lists; rules use it to solve a node-local problem once per distinct node."""
    host = [to_numpy(array).reshape(len(array), -1) for array in arrays]
    if any(array.dtype == object for array in host):
        keys = [tuple(value for array in host for value in array[row]) for row in range(len(host[0]))]
    else:
        joined = np.ascontiguousarray(np.concatenate([array.astype(np.float64) for array in host], axis=1))
        keys = [row.tobytes() for row in joined]
    index: dict = {}
    first, inverse = [], []
    for row, key in enumerate(keys):
        position = index.get(key)
        if position is None:
            position = index[key] = len(first)
            first.append(row)
        inverse.append(position)
    return first, inverse


def rows_by_group(inverse, count: int) -> list[np.ndarray]:
    """For group labels ``inverse`` [N] in 0..count-1 (host integers), the rows of each group, in order."""
    inverse = np.asarray(inverse)
    order = np.argsort(inverse, kind="stable")
    bounds = np.searchsorted(inverse[order], np.arange(count + 1))
    return [order[bounds[g]:bounds[g + 1]] for g in range(count)]


def runs(*arrays) -> tuple[Array, Array]:
    """(first, inverse) for runs of consecutive equal rows of one or more arrays [N, ...] taken together:
    ``first`` [U] holds the first row of each run and row r equals row ``first[inverse[r]]``. A cheap,
    vectorised way for a rule to compute a node-local quantity once per node when rows arrive grouped by
    node (as the walk DP and fast enumeration hand them over); equal rows that are not adjacent simply
    count as separate runs."""
    count = arrays[0].shape[0]
    changed = [True] + [False] * (count - 1) if count else []
    changed = index_array(changed, arrays[0]) != 0
    for array in arrays:
        if count > 1:
            flat = array.reshape(count, -1)
            different = flat[1:] != flat[:-1]
            different = different.any(axis=1) if isinstance(different, np.ndarray) else different.any(dim=1)
            changed = changed | namespace(changed).concat([changed[:1], different], axis=0)
    xp = namespace(changed)
    first = xp.nonzero(changed)[0]
    inverse = cumulative_sum(xp.astype(changed, xp.int64)) - 1
    return first, inverse
