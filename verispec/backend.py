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
import sys
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
    """``full(shape, 0, like)``; in float, the backend's zeros (numpy's come from the OS already zeroed: no pass
    over a large law that is mostly left zero)."""
    if is_exact(like):
        return full(shape, 0, like)
    return namespace(like).zeros(shape, dtype=like.dtype, device=device(like))


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
    # one column at a time: a [N, m, size] one-hot would take m times the memory of the result
    total = xp.astype(one_hot(tokens[..., 0], size), xp.int64)
    for column in range(1, tokens.shape[-1]):
        total = total + xp.astype(one_hot(tokens[..., column], size), xp.int64)
    return total


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


def argsort(values, *, stable: bool = True) -> Array:
    """Ascending order along the last axis (numpy, Fraction objects and torch alike)."""
    if isinstance(values, np.ndarray):
        return np.argsort(values, axis=-1, kind="stable" if stable else None)
    xp = namespace(values)
    return xp.argsort(values, axis=-1, stable=stable)


#: From this many values a row, numpy works row by row: a row's gathers and scatters then stay in the cache
#: (flattened fancy indexing over several 150k-token rows is three times slower), and ``ascending_order``
#: radix-sorts float64 (below it a comparison sort is as fast: a counting sort pays for its buckets every row).
LARGE_ROW = 2048


def _large_numpy_rows(*arrays) -> bool:
    """True when every array is a numpy array of rows of at least ``LARGE_ROW`` values, leading shapes equal."""
    return (all(type(array) is np.ndarray and array.ndim for array in arrays)
            and arrays[0].shape[-1] >= LARGE_ROW and len({array.shape[:-1] for array in arrays}) == 1)


def _rows(array: np.ndarray) -> np.ndarray:
    """``array`` [..., V] as rows [R, V] (a view where possible)."""
    return array.reshape(-1, array.shape[-1])


def take_along_last(values, index) -> Array:
    """values[..., index[..., i]]: ``take_along_axis`` on the last axis (same leading shape)."""
    if _large_numpy_rows(values, index):
        out = np.empty(index.shape, dtype=values.dtype)
        for row, (source, taken) in enumerate(zip(_rows(values), _rows(index))):
            np.take(source, taken, out=_rows(out)[row])
        return out
    return namespace(values).take_along_axis(values, index, axis=-1)


def unpermute(values, order) -> Array:
    """out[..., order[..., i]] = values[..., i] for a permutation ``order`` along the last axis (``values`` of its
    shape, or one row [V] for every row): undoes ``take_along_last(out, order)``. A scatter, O(V), where gathering
    by ``argsort(order)`` is O(V log V)."""
    if isinstance(values, np.ndarray):
        out = np.empty(order.shape, dtype=values.dtype)
        if _large_numpy_rows(order):
            sources = [values] * len(_rows(order)) if values.ndim == 1 else _rows(values)
            for row, (source, position) in enumerate(zip(sources, _rows(order))):
                _rows(out)[row][position] = source
        else:
            np.put_along_axis(out, order, values, axis=-1)
        return out
    return values.new_empty(order.shape).scatter_(-1, order, values.expand(order.shape))


def inverse_permutation(order) -> Array:
    """rank[..., t] = the position of t in ``order`` [..., V], a permutation along the last axis (equal to
    ``argsort(order)``, by a scatter)."""
    return unpermute(arange(order.shape[-1], order), order)


def ascending_order(values) -> Array:
    """An order that sorts ``values`` ascending along the last axis; equal values (0.0 and -0.0 included) come in
    an unspecified order, the caller's to break. numpy float64 rows of ``LARGE_ROW`` or more values without NaN
    are radix-sorted on their bits (``radix_order``, O(V)); everything else gets the stable ``argsort``."""
    if _large_numpy_rows(values) and values.dtype == np.float64 and not np.isnan(values).any():
        out = np.empty(values.shape, dtype=np.int64)
        for row, source in enumerate(_rows(values)):
            _rows(out)[row] = radix_order(source)
        return out
    return argsort(values)


def radix_order(values: np.ndarray) -> np.ndarray:
    """The stable ascending order of float64 ``values`` [V] without NaN, by a least-significant-digit radix sort:
    the IEEE bits read as unsigned integers, which are in the values' order once negatives' bits are inverted and
    the sign bit is set on the others (-0.0 then sorts just before 0.0), four stable passes of 16 bits each
    (numpy's stable sort of 16-bit keys is a counting sort). Four O(V) passes instead of one O(V log V)
    comparison sort: about half the time of numpy's default argsort and a third of its stable one at V = 151,936
    (benchmarks/bench_gbv_large_vocab.py)."""
    key = np.ascontiguousarray(values).view(np.uint64)                     # [V]
    if np.signbit(values).any():
        key = np.where(key >> np.uint64(63) == 1, ~key, key | np.uint64(1 << 63))
    digits = key.view(np.uint16).reshape(-1, 4)                            # [V, 4] in memory order
    order = None
    for column in (range(4) if sys.byteorder == "little" else range(3, -1, -1)):  # least significant first
        digit = np.ascontiguousarray(digits[:, column])  # a gather from the strided column is slower
        digit = digit if order is None else digit[order]
        step = np.argsort(digit, kind="stable")
        order = step if order is None else order[step]
    return order


def cumulative_sum(values) -> Array:
    if isinstance(values, np.ndarray):
        return np.cumsum(values, axis=-1)
    xp = namespace(values)
    return xp.cumulative_sum(values, axis=-1)


def unique_rows(keys) -> tuple[Array, Array]:
    """(first, inverse) for the distinct rows of an integer array [N, k]: ``keys[first]`` are the distinct
    rows and ``keys[first][inverse]`` is ``keys``."""
    if isinstance(keys, np.ndarray):
        if len(keys) == 1:
            return np.zeros(1, dtype=np.int64), np.zeros(1, dtype=np.int64)
        one_column = keys.shape[1] == 1  # a plain unique: much faster than by rows
        _, first, inverse = np.unique(keys[:, 0] if one_column else keys, axis=None if one_column else 0,
                                      return_index=True, return_inverse=True)
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
