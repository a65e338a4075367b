"""Global Resolution's passes over the vocabulary as compiled loops (``series.c``): the cluster series of
``verispec.lp_analysis.luce_integrals`` (each token's cluster and eps, the cluster moments sum q eps^k and the
evaluation sum_k eps^k B[c, k]) and the grid's carrying and Hermite interpolation of ``luce_solver``, one loop over
the tokens each where the numpy route makes one pass a term (11 terms in the final law: 11 bincounts and 11 gathers
over V = 151,936 tokens); and the chord steps' safeguarded Newton on the points (``newton_points``: two passes a
step where the numpy route makes about 30 calls on arrays of 1,000-2,300 points, numpy's own exponentials and
logarithms between the passes, so its SIMD results are kept).

Built like ``verispec.native``'s kernels (compiled on first use, digest-named in the cache, its bytes checked
against their record before they are loaded) but with ``SERIES_FLAGS``: no reassociation and no contraction into
fused multiply-adds, so each token's arithmetic is the numpy route's operation for operation and the sums accumulate
in token order as ``np.bincount`` does. The two routes then agree to the last bit (the self-check demands it on
seeded inputs before the library is used, and the tests hold both routes to it), and the solver's decisions
(Newton steps, chord rounds) are the same on either route. Each function returns None when the library is not
usable or the kernels are off in this thread (``verispec.native.kernels_off``): the caller takes its numpy route.
Also here: the node caches' key hash (``universal_digest``, NH), whose numpy route is SHA-256."""

from __future__ import annotations

import ctypes
import os
import threading
from pathlib import Path

import numpy as np

from verispec import native

SERIES_SOURCE = Path(__file__).with_name("series.c")
SERIES_FLAGS = ("-O3", "-march=native", "-fno-math-errno", "-ffp-contract=off", "-fPIC", "-shared")


def _bind(path: Path) -> dict:
    library = ctypes.CDLL(str(path))
    address, size, real = ctypes.c_void_p, ctypes.c_int64, ctypes.c_double
    functions = {
        "locate": ([address, size, real, size, size, address, address, address], library.verispec_series_locate),
        "moments": ([address, address, address, size, size, size, address], library.verispec_series_moments),
        "evaluate": ([address, size, address, address, size, address, address, address, real, real],
                     library.verispec_series_evaluate),
        "carry": ([address, address, address, size, address, size, real, address, address, address],
                  library.verispec_grid_carry),
        "hermite": ([address] * 7 + [size, address], library.verispec_hermite),
        "classes": ([address, address, address, size, real, size, real, real] + [address] * 6,
                    library.verispec_token_classes),
        "bins": ([address, address, address, size, size, address, address], library.verispec_bin_measure),
        "curve": ([address, size, address, address, address, size, real, real, real] + [address] * 4,
                  library.verispec_curve_terms),
        "newton": ([address] * 6 + [real, size, real] + [address] * 3, library.verispec_newton_step),
        "buckets": ([address, address, address, size, real, real, size, address, address, address],
                    library.verispec_scan_buckets),
        "light": ([address, size, address, size, address, address, address], library.verispec_light_tokens),
        "logit parts": ([address, size, real, real, address, address], library.verispec_logit_parts),
        "logit finish": ([address, size, real, real, address, address], library.verispec_logit_finish),
        "window sums": ([address] + [size] * 5 + [address] * 2, library.verispec_window_sums),
        "window coefficients": ([address] + [size] * 5 + [address] * 3, library.verispec_window_coefficients),
        "nh": ([address, size, address, address], library.verispec_nh_hash),
    }
    for argtypes, function in functions.values():
        function.argtypes, function.restype = argtypes, None
    library.verispec_newton_step.restype = library.verispec_light_tokens.restype = size
    return {name: function for name, (_, function) in functions.items()}


def _buffer(slot: str | None, count: int, dtype=np.float64) -> np.ndarray:
    """[count] of this thread's buffer named ``slot`` (grown as needed), or a new array when ``slot`` is None. On
    this kind of machine a fresh 1.2 MB array costs about 1.2 ms of page faults when it is first written, several
    times the kernel that fills it (a cluster locate at V = 151,936: 2.6 ms into new arrays, 0.2 ms into reused
    ones); a caller passes a slot only for an output that is dead before its next call with that slot."""
    if slot is None:
        return np.empty(count, dtype)
    arena = getattr(native._workspace, "series_arena", None)
    if arena is None:
        arena = native._workspace.series_arena = {}
    held = arena.get((slot, np.dtype(dtype).char))
    if held is None or len(held) < count:
        held = arena[(slot, np.dtype(dtype).char)] = np.empty(max(count, 1), dtype)
    return held[:count]


def _at(array) -> int | None:
    """The address of a C-contiguous array's first element: through ctypes' buffer protocol (0.25 us), numpy's
    ``ctypes.data`` (0.8 us, a few hundred calls a node) where that refuses (a read-only or empty array)."""
    if array is None:
        return None
    try:
        return ctypes.addressof(ctypes.c_char.from_buffer(array))
    except (TypeError, ValueError):
        return array.ctypes.data


def _doubles(array) -> np.ndarray:
    return np.ascontiguousarray(array, dtype=np.float64)


def _indices(array) -> np.ndarray:
    return np.ascontiguousarray(array, dtype=np.int64)


def _run_locate(library, u, scale, first, centres, slot=None):
    u = _doubles(u)
    index, eps = _buffer(slot and slot + ".index", len(u), np.int64), _buffer(slot and slot + ".eps", len(u))
    library["locate"](_at(u), len(u), scale, first, len(centres), _at(_doubles(centres)), _at(index), _at(eps))
    return index, np.expm1(eps, out=eps)  # numpy's expm1 (SIMD on some CPUs), as the numpy route takes it


def _run_moments(library, index, eps, mass, size, terms):
    index, eps, mass = _indices(index), _doubles(eps), _doubles(mass)
    moments = np.zeros((terms, size))
    library["moments"](_at(index), _at(eps), _at(mass), len(index), size, terms, _at(moments))
    return moments


def _run_evaluate(library, coefficients, index, eps, derivative, weight, factor, low, slot=None):
    coefficients, index, eps = _doubles(coefficients), _indices(index), _doubles(eps)
    value = _buffer(slot, len(index))
    slope = np.empty(len(index)) if derivative else None
    weight = None if weight is None else _doubles(weight)
    library["evaluate"](_at(coefficients), coefficients.shape[1], _at(index), _at(eps), len(index), _at(value),
                        _at(slope), _at(weight), float(factor), float(low))
    return (value, slope) if derivative else value


def _run_carry(library, y, mass, light, points, step, slot=None):
    y, mass, light, points = _doubles(y), _doubles(mass), _indices(light), _doubles(points)
    cell, theta = _buffer(slot and slot + ".cell", len(light), np.int64), _buffer(slot and slot + ".theta", len(light))
    moments = np.zeros((4, len(points)))
    library["carry"](_at(y), _at(mass), _at(light), len(light), _at(points), len(points), float(step), _at(cell),
                     _at(theta), _at(moments))
    return cell, theta, moments


def _run_hermite(library, cubic, square, slope, point_u, cell, theta, light, u):
    arrays = [_doubles(a) for a in (cubic, square, slope, point_u)] + [_indices(cell), _doubles(theta),
                                                                       _indices(light)]
    library["hermite"](*(_at(a) for a in arrays), len(arrays[-1]), _at(u))


def _run_classes(library, y, ratio, mass, tiny_below, ratio_top, heavy, slot=None):
    y, ratio, mass = _doubles(y), _doubles(ratio), _doubles(mass)
    lists = [_buffer(slot and f"{slot}.{part}", len(y), np.int64) for part in range(5)]
    counts = np.zeros(5, np.int64)
    library["classes"](_at(y), _at(ratio), _at(mass), len(y), float(tiny_below), ratio_top is not None,
                       float(ratio_top or 0.0), float(heavy), *(_at(row) for row in lists), _at(counts))
    return tuple(row[:count] for row, count in zip(lists, counts.tolist()))


def _run_bins(library, y, mass, target, bins):
    y, mass, target = _doubles(y), _doubles(mass), _doubles(target)
    bin_q, bin_p = np.zeros(bins), np.zeros(bins)
    library["bins"](_at(y), _at(mass), _at(target), len(y), bins, _at(bin_q), _at(bin_p))
    return bin_q, bin_p


def _run_curve(library, coefficients, index, eps, weight, factor, span):
    coefficients, index, eps, weight = _doubles(coefficients), _indices(index), _doubles(eps), _doubles(weight)
    value, slope, chosen, rest = (np.empty(len(index)) for _ in range(4))
    library["curve"](_at(coefficients), coefficients.shape[1], _at(index), _at(eps), _at(weight), len(index),
                     float(factor), float(span), float(span * 1e-300), _at(value), _at(slope), _at(chosen), _at(rest))
    return value, slope, chosen, rest


def _run_newton(library, coefficients, points, u, low, high, scale, first, centres, factor, span, tolerance, steps):
    """The loop of ``newton_points``: per step one locate, numpy's expm1, exp and two logs, and two fused passes."""
    coefficients, points, centres = _doubles(coefficients), _doubles(points), _doubles(centres)
    count, terms, size = len(u), coefficients.shape[1], len(centres)
    index = np.empty(count, np.int64)
    eps, weight, value, slope, chosen, rest, log_rest = (np.empty(count) for _ in range(7))
    locate, curve, step = library["locate"], library["curve"], library["newton"]
    at = {name: _at(array) for name, array in (("u", u), ("low", low), ("high", high), ("index", index),
                                                 ("eps", eps), ("weight", weight), ("value", value),
                                                 ("slope", slope), ("chosen", chosen), ("rest", rest),
                                                 ("log_rest", log_rest), ("points", points))}
    factor, span, floor = float(factor), float(span), float(span * 1e-300)
    for _ in range(steps):
        locate(at["u"], count, scale, first, size, _at(centres), at["index"], at["eps"])
        np.expm1(eps, out=eps)
        np.exp(u, out=weight)
        curve(_at(coefficients), terms, at["index"], at["eps"], at["weight"], count, factor, span, floor,
              at["value"], at["slope"], at["chosen"], at["rest"])
        np.log(chosen, out=chosen)
        np.log(rest, out=log_rest)
        if step(at["points"], at["chosen"], at["log_rest"], at["value"], at["slope"], at["rest"], span, count,
                float(tolerance), at["u"], at["low"], at["high"]):
            break
    return u


def _check_newton(library, rng) -> dict:
    """The Newton step's two passes against the numpy route's expressions on seeded points (NaN and ties kept)."""
    count, size = 200, 30
    coefficients, index = rng.standard_normal((size, 6)), rng.integers(0, size, count)
    eps, weight = rng.uniform(-0.04, 0.04, count), rng.uniform(0.0, 3.0, count)
    value, slope, chosen, rest = _run_curve(library, coefficients, index, eps, weight, 3, 2.5)
    wanted_value, wanted_slope = coefficients[index, 5], np.zeros(count)
    for k in range(4, -1, -1):
        wanted_slope = wanted_slope * eps + wanted_value
        wanted_value = wanted_value * eps + coefficients[index, k]
    wanted_chosen = 3 * weight * wanted_value
    checks = {"curve value": (value, wanted_value), "curve slope": (slope, wanted_slope * (eps + 1)),
              "curve chosen": (chosen, wanted_chosen),
              "curve rest": (rest, np.maximum(2.5 - wanted_chosen, 2.5 * 1e-300))}
    with np.errstate(divide="ignore", invalid="ignore"):
        log_chosen, log_rest = np.log(np.abs(chosen)), np.log(rest)
    log_chosen[:3] = np.nan
    points, u = rng.uniform(-2.0, 2.0, count), rng.uniform(-3.0, 3.0, count)
    low, high = np.minimum(u, rng.uniform(-3.0, 3.0, count)), np.maximum(u, rng.uniform(-3.0, 3.0, count))
    low[5], high[6] = np.nan, u[6]
    current, rate = log_chosen - log_rest, (1 + slope / value) * 2.5 / rest
    above = current > points
    wanted_high = np.where(above, np.minimum(high, u), high)
    wanted_low = np.where(above, low, np.maximum(low, u))
    target = u - (current - points) / rate
    target = np.where((target < wanted_low) | (target > wanted_high), 0.5 * (wanted_low + wanted_high), target)
    done = library["newton"](_at(points), _at(log_chosen), _at(log_rest), _at(value), _at(slope), _at(rest), 2.5,
                             count, 1e-12, _at(u), _at(low), _at(high))
    checks.update({"Newton step": (np.array([u, low, high]), np.array([target, wanted_low, wanted_high])),
                   "Newton stop": (np.array([done]), np.array([0]))})
    return checks


def _run_buckets(library, log_ratio, p, q, low, scale, count):
    log_ratio, p, q = _doubles(log_ratio), _doubles(p), _doubles(q)
    bucket, mass_q, mass_p = np.empty(len(log_ratio), np.int64), np.zeros(count), np.zeros(count)
    library["buckets"](_at(log_ratio), _at(p), _at(q), len(log_ratio), float(low), float(scale), count, _at(bucket),
                       _at(mass_q), _at(mass_p))
    return bucket, mass_q, mass_p


def _run_light(library, solved, heavy, y, slot=None):
    solved, heavy, y = _indices(solved), _indices(heavy), _doubles(y)
    light, extent = _buffer(slot, len(solved), np.int64), np.empty(2)
    count = library["light"](_at(solved), len(solved), _at(heavy), len(heavy), _at(y), _at(light), _at(extent))
    return light[:count], float(extent[0]), float(extent[1])


def _check_scan(library, rng) -> dict:
    """The H* scan's buckets and the grid's light tokens against numpy on seeded inputs (a NaN logit kept)."""
    log_ratio, p, q = rng.uniform(-9.0, 4.0, 500), rng.random(500), rng.random(500)
    low, count = float(log_ratio.min()), 64
    scale = count / (float(log_ratio.max()) - low)
    scaled = np.subtract(log_ratio, low)
    scaled *= scale
    bucket = np.minimum(scaled.astype(np.int64), count - 1)
    got = _run_buckets(library, log_ratio, p, q, low, scale, count)
    solved = np.flatnonzero(rng.random(500) > 0.3)
    heavy = np.sort(rng.choice(solved, 40, replace=False))
    light = np.setdiff1d(solved, heavy)
    found, bottom, top = _run_light(library, solved, heavy, log_ratio)
    extent = [float(log_ratio.take(light).min()), float(log_ratio.take(light).max()), np.nan, np.nan]
    log_ratio[light[7]] = np.nan
    _, nan_bottom, nan_top = _run_light(library, solved, heavy, log_ratio)
    return {"scan buckets": (got[0], bucket), "scan masses": (np.array(got[1:]), np.array(
                [np.bincount(bucket, q, minlength=count), np.bincount(bucket, p, minlength=count)])),
            "light tokens": (found, light),
            "light extent": (np.array([bottom, top, nan_bottom, nan_top]), np.array(extent))}


def _run_logit(library, ratio, low, high, slot=None):
    ratio = _doubles(ratio)
    value, rest = np.empty(len(ratio)), _buffer(slot, len(ratio))
    library["logit parts"](_at(ratio), len(ratio), float(low), float(high), _at(value), _at(rest))
    with np.errstate(divide="ignore", invalid="ignore"):  # numpy's logs (its SIMD results), -inf and NaN kept
        np.log(value, out=value)
        np.log(rest, out=rest)
    library["logit finish"](_at(ratio), len(ratio), float(low), float(high), _at(value), _at(rest))
    return value


def _check_logit(library, rng) -> dict:
    """The logit against the numpy route's expressions, ratios at and beyond both ends and a NaN included."""
    ratio = np.concatenate([rng.uniform(-0.5, 2.5, 300), [0.25, 2.0, np.nan, -np.inf, np.inf]])
    with np.errstate(divide="ignore", invalid="ignore"):
        wanted = np.log(ratio - 0.25) - np.log(2.0 - ratio)
    wanted[ratio >= 2.0] = np.inf
    wanted[ratio <= 0.25] = -np.inf
    return {"logit": (_run_logit(library, ratio, 0.25, 2.0), wanted)}


def _check_classes(library, rng) -> dict:
    """The token classes and the binned measure against numpy on seeded logits with infinities and ties."""
    y = rng.uniform(-80.0, 80.0, 300)
    y[rng.integers(0, 300, 30)] = np.inf
    y[rng.integers(0, 300, 30)] = -np.inf
    ratio, mass = rng.integers(0, 5, 300) / 4, rng.random(300) * 1e-4
    tiny = y < -50.0
    high = np.isposinf(y) | (ratio == ratio.max())
    low = np.isneginf(y) & ~tiny
    solved = ~(tiny | high | low)
    expected = [np.flatnonzero(mask) for mask in (tiny, high, low, solved, solved & (mass >= 5e-5))]
    got = _run_classes(library, y, ratio, mass, -50.0, float(ratio.max()), 5e-5)
    clipped = np.clip(y, -60.0, 60.0)
    bottom, top = float(clipped.min()), float(clipped.max())
    clipped -= bottom
    clipped *= 48 / (top - bottom)
    bin_of = np.minimum(clipped.astype(np.int64), 47)
    binned = _run_bins(library, y, mass, mass * ratio, 48)
    return {"token classes": (np.concatenate(got), np.concatenate(expected)),
            "binned measure": (np.array(binned), np.array([np.bincount(bin_of, mass, minlength=48),
                                                           np.bincount(bin_of, mass * ratio, minlength=48)]))}


def _run_window_sums(library, phases, moments, nodes, refine):
    terms, size = moments.shape
    moments, out = _doubles(moments), np.empty(nodes)
    library["window sums"](_at(phases), phases.shape[2], terms, size, nodes, refine, _at(moments), _at(out))
    return out


def _run_window_coefficients(library, sequence, vector, terms, size, refine):
    vector = _doubles(vector)
    out, work = np.empty((size, terms)), _buffer("window", terms * 128)
    library["window coefficients"](_at(sequence), sequence.shape[1], terms, size, len(vector), refine, _at(vector),
                                   _at(work), _at(out))
    return out


def window_phases(sequence: np.ndarray, refine: int) -> np.ndarray:
    """[terms, refine, stride] with [k, j, i] = sequence[k, refine i + j] (zeros past its end): ``window_sums``'s
    layout, in which a cluster's entries at consecutive nodes are contiguous."""
    terms, span = sequence.shape
    padded = np.zeros((terms, -(-span // refine) * refine))
    padded[:, :span] = sequence
    return np.ascontiguousarray(padded.reshape(terms, -1, refine).transpose(0, 2, 1))


def reference_window_sums(tables: np.ndarray, moments: np.ndarray) -> np.ndarray:
    """The numpy route of ``window_sums`` on the tables [T, terms_all, C]: the products [terms C, T] summed over
    their leading axis, row after row (np.add.reduce on a C-contiguous array), in the kernel's order."""
    terms, size = moments.shape
    products = np.ascontiguousarray(tables[:, :terms].reshape(len(tables), terms * size).T)  # [terms C, T]
    products *= moments.reshape(-1, 1)
    return np.add.reduce(products, axis=0)


def reference_window_coefficients(tables: np.ndarray, vector: np.ndarray, terms: int) -> np.ndarray:
    """The numpy route of ``window_coefficients``: vector[l] tables[l] ([T, terms, C]) summed over l in order,
    as [C, terms]."""
    products = tables[:, :terms] * vector[:, None, None]
    return np.ascontiguousarray(np.add.reduce(products, axis=0).T)


def _check_windows(library, rng) -> dict:
    """The window sums and coefficients against their numpy route on the copied windows (moments and vector entries
    of 0 included)."""
    terms, size, nodes, refine = 5, 37, 23, 4
    sequence = rng.standard_normal((7, refine * (nodes - 1) + size))  # two rows more than the terms used
    tables = np.lib.stride_tricks.sliding_window_view(sequence, size, axis=1)[:, ::refine][:, :nodes]
    tables = np.ascontiguousarray(tables.transpose(1, 0, 2))  # [T, 7, C]
    moments, vector = rng.standard_normal((terms, size)), rng.standard_normal(nodes)
    moments[:, :3] = moments[:, -5:] = 0.0  # clusters without mass at both ends
    vector[4] = 0.0
    return {"window sums": (_run_window_sums(library, window_phases(sequence, refine), moments, nodes, refine),
                            reference_window_sums(tables, moments)),
            "window coefficients": (_run_window_coefficients(library, sequence, vector, terms, size, refine),
                                    reference_window_coefficients(tables, vector, terms))}


_NH_LOCK = threading.Lock()
_NH_KEY: list[np.ndarray] = []  # this process's NH key (uint32), grown to the longest message, prefix kept


def _nh_key(words: int) -> np.ndarray:
    """This process's random NH key, at least ``words`` + 6 long (grown keeping its prefix, so a message hashes the
    same every time)."""
    with _NH_LOCK:
        key = _NH_KEY[0] if _NH_KEY else np.zeros(0, np.uint32)
        if len(key) < words + 6:
            grown = np.frombuffer(os.urandom(4 * (words + 6 - len(key))), dtype=np.uint32)
            key = np.concatenate([key, grown])
            _NH_KEY[:] = [key]
        return key


def _run_nh(library, arrays, key=None) -> bytes:
    pieces = [np.ascontiguousarray(array).view(np.uint32) for array in arrays]  # float64: two words an entry
    key = _nh_key(sum(len(piece) for piece in pieces)) if key is None else key
    sums, offset = np.zeros(4, np.uint64), 0
    for piece in pieces:
        library["nh"](_at(piece), len(piece), _at(key[offset:]), _at(sums))
        offset += len(piece)
    return sums.tobytes()


def reference_nh(words: np.ndarray, key: np.ndarray) -> np.ndarray:
    """NH's four Toeplitz-shifted sums [4] uint64 of 32-bit ``words`` (even length) under ``key`` in numpy: the
    pairs' ((m + k) mod 2^32) products summed mod 2^64 (numpy's uint64 sums wrap)."""
    first, second = words[0::2].astype(np.uint64), words[1::2].astype(np.uint64)
    count = len(words)
    return np.array([np.sum(((first + key[2 * j: 2 * j + count: 2]) & 0xFFFFFFFF)
                            * ((second + key[2 * j + 1: 2 * j + 1 + count: 2]) & 0xFFFFFFFF), dtype=np.uint64)
                     for j in range(4)], dtype=np.uint64)


def _check_nh(library, rng) -> dict:
    """NH against numpy's on a message given in two pieces (extreme words included)."""
    words = rng.integers(0, 2 ** 32, 2 * 301, dtype=np.uint64).astype(np.uint32)
    words[:4] = [0, 2 ** 32 - 1, 2 ** 32 - 1, 2 ** 32 - 1]
    key = rng.integers(0, 2 ** 32, len(words) + 6, dtype=np.uint64).astype(np.uint32)
    got = _run_nh(library, [words[:200].view(np.float64), words[200:].view(np.float64)], key)
    return {"NH hash": (np.frombuffer(got, np.uint64), reference_nh(words, key))}


def _self_check(library: dict) -> None:
    """Every kernel against its numpy twin on seeded inputs (ties of cluster, clipped ends, zero masses), to the
    last bit; an OSError names the first disagreement."""
    rng = np.random.default_rng(7)
    u = np.concatenate([rng.uniform(-3.0, 2.0, 600), [-50.0, 50.0, 0.03125, -0.09375]])
    mass = rng.random(len(u)) * (rng.random(len(u)) > 0.1)
    first, size, scale = -50, 85, 16.0
    centres = (first + np.arange(size)) / scale
    index = np.clip(np.rint(u * scale).astype(np.int64) - first, 0, size - 1)
    eps = np.expm1(u - centres.take(index))
    moments = np.empty((5, size))
    power = mass.copy()
    for k in range(5):
        moments[k] = np.bincount(index, power, minlength=size)
        power *= eps
    got_index, got_eps = _run_locate(library, u, scale, first, centres)
    got = _run_moments(library, index, eps, mass, size, 5)
    coefficients = rng.standard_normal((size, 5))
    value, slope = coefficients[index, 4], np.zeros(len(u))
    for k in range(3, -1, -1):
        slope = slope * eps + value
        value = value * eps + coefficients[index, k]
    slope = slope * (eps + 1)
    weight = rng.random(len(u))
    found = _run_evaluate(library, coefficients, index, eps, True, None, 1.0, 0.0)
    scaled = _run_evaluate(library, coefficients, index, eps, False, weight, 3, 0.25)
    checks = {"cluster index": (got_index, index), "eps": (got_eps, eps), "moments": (got, moments),
              "value": (found[0], value), "slope": (found[1], slope),
              "scaled value": (scaled, value * weight * 3 + 0.25)}
    points = -2.0 + 0.1 * np.arange(40)
    light = np.flatnonzero(rng.random(len(u)) > 0.3)
    y = rng.uniform(-1.95, 1.75, len(u))
    cell = np.clip(((y.take(light) - points[0]) / 0.1).astype(np.int64), 1, 37)
    theta = (y.take(light) - points.take(cell)) / 0.1
    carried = [np.bincount(cell, mass.take(light) * power, minlength=40) for power in (1.0, theta, theta * theta,
                                                                                       theta * theta * theta)]
    carried[0] = np.bincount(cell, mass.take(light), minlength=40)
    got_cell, got_theta, got_carried = _run_carry(library, y, mass, light, points, 0.1)
    parts = [rng.standard_normal(40) for _ in range(4)]
    interpolated = np.zeros(len(u))
    _run_hermite(library, *parts, cell, theta, light, interpolated)
    expected = np.zeros(len(u))
    expected[light] = ((parts[0][cell] * theta + parts[1][cell]) * theta + parts[2][cell]) * theta + parts[3][cell]
    checks.update({"grid cell": (got_cell, cell), "theta": (got_theta, theta), "carried": (got_carried,
                                                                                           np.array(carried)),
                   "Hermite": (interpolated, expected)})
    checks.update(_check_classes(library, rng))
    checks.update(_check_newton(library, rng))
    checks.update(_check_scan(library, rng))
    checks.update(_check_logit(library, rng))
    checks.update(_check_windows(library, rng))
    checks.update(_check_nh(library, rng))
    for name, (got_values, wanted) in checks.items():
        if not np.array_equal(got_values, wanted, equal_nan=True):
            got_values = np.asarray(got_values, float)
            with np.errstate(invalid="ignore"):  # infinities on both sides
                gap = (f"largest gap {float(np.abs(got_values - wanted).max())!r}"
                       if got_values.shape == wanted.shape else f"shape {got_values.shape}, not {wanted.shape}")
            raise OSError(f"the series kernel's {name} differs from numpy's ({gap})")


def library() -> dict | None:
    """The bound series kernels, or None (not usable: ``status``; or off in this thread: ``kernels_off``)."""
    if getattr(native._workspace, "off", False):
        return None
    return native._library("series", SERIES_SOURCE, SERIES_FLAGS, _bind, _self_check)


def status() -> str:
    """Which route Global Resolution's token passes take in this process, and why."""
    native._library("series", SERIES_SOURCE, SERIES_FLAGS, _bind, _self_check)
    return str(native._loaded["series_status"])


def locate(u, scale: float, first: int, centres, slot: str | None = None):
    """(cluster index [n] int64, eps [n]) of log weights ``u`` [n] (in this thread's buffers ``slot`` when given),
    or None on the numpy route."""
    found = library()
    return None if found is None else _run_locate(found, u, scale, first, centres, slot)


def moments(index, eps, mass, size: int, terms: int):
    """The cluster moments sum mass eps^k [terms, C] of located tokens (``locate``), or None on the numpy route."""
    found = library()
    return None if found is None else _run_moments(found, index, eps, mass, size, terms)


def evaluate(coefficients, index, eps, derivative: bool = False, weight=None, factor: float = 1.0, low: float = 0.0,
             slot: str | None = None):
    """sum_k eps^k B[index, k] (B = ``coefficients`` [C, terms]) and its slope in log w when asked; with ``weight``
    low + factor weight value (in this thread's buffer ``slot`` when given); None on the numpy route."""
    found = library()
    return None if found is None else _run_evaluate(found, coefficients, index, eps, derivative, weight, factor, low,
                                                    slot)


def grid_carry(y, mass, light, points, step: float, slot: str | None = None):
    """(cell [light], theta [light], the cell moments sum q theta^j [4, P]) of tokens ``light`` on the grid
    ``points`` [P] (cell and theta in this thread's buffers ``slot`` when given); None on the numpy route."""
    found = library()
    return None if found is None else _run_carry(found, y, mass, light, points, step, slot)


def hermite(cubic, square, slope, point_u, cell, theta, light, u: np.ndarray) -> bool:
    """u[light] = the cubic of each light token's cell at its theta (``u`` float64, written in place); False on the
    numpy route."""
    found = library()
    if found is None:
        return False
    _run_hermite(found, cubic, square, slope, point_u, cell, theta, light, u)
    return True


def newton_points(coefficients, points, u, low, high, scale: float, first: int, centres, factor: float, span: float,
                  tolerance: float, steps: int):
    """``luce_solver._ChordSteps.invert``'s safeguarded Newton on the points' log weights: ``u`` [P] (float64,
    solved in place and returned) and the brackets ``low``, ``high`` [P] (narrowed in place), at most ``steps``
    steps, each the numpy route's arithmetic (numpy's own exponentials and logarithms; y and dy/du from the
    series ``coefficients`` [C, terms] at clusters of width 1 / ``scale`` from ``first``, Phi - lo = ``factor`` w J,
    ``span`` = hi - lo); None on the numpy route."""
    found = library()
    return None if found is None else _run_newton(found, coefficients, points, u, low, high, scale, first, centres,
                                                  factor, span, tolerance, steps)


def scan_buckets(log_ratio, p, q, low: float, scale: float, count: int):
    """(bucket [n] int64, q mass [count], p mass [count]) of ``global_resolution.optimal_split``'s buckets of
    ``log_ratio`` [n] (min(trunc((log_ratio - low) scale), count - 1)); None on the numpy route."""
    found = library()
    return None if found is None else _run_buckets(found, log_ratio, p, q, low, scale, count)


def light_tokens(solved, heavy, y, slot: str | None = None):
    """(the ``solved`` tokens [n] without the ``heavy`` ones [m] (both increasing, heavy among solved), in this
    thread's buffer ``slot`` when given; the least and the largest ``y`` among them) for ``luce_solver``'s grid;
    None on the numpy route."""
    found = library()
    return None if found is None else _run_light(found, solved, heavy, y, slot)


def logit(ratio, low: float, high: float, slot: str | None = None):
    """y = log((r - lo) / (hi - r)) [n] of the ratios (a new array), +inf where r >= hi and -inf where r <= lo, from
    two compiled passes around numpy's logs (its scratch [n] in this thread's buffer ``slot`` when given); None on
    the numpy route."""
    found = library()
    return None if found is None else _run_logit(found, ratio, low, high, slot)


def window_sums(phases, moments, nodes: int, refine: int):
    """sum over (k, c) of moments[k, c] sequence[k, refine l + c] at each node l [nodes] (``luce_integrals.Expansion
    .sums`` from its sequence's ``window_phases`` without the copied tables; moments [terms, C]), or None on the
    numpy route (``reference_window_sums``)."""
    found = library()
    return None if found is None else _run_window_sums(found, phases, moments, nodes, refine)


def window_coefficients(sequence, vector, terms: int, size: int, refine: int):
    """B [size, terms] with B[c, k] = sum_l vector[l] sequence[k, refine l + c] (``Expansion.coefficients`` from its
    sequence, ``vector`` [nodes]), or None on the numpy route (``reference_window_coefficients``)."""
    found = library()
    return None if found is None else _run_window_coefficients(found, sequence, vector, terms, size, refine)


def universal_digest(*arrays: np.ndarray) -> bytes | None:
    """32 bytes of NH (``series.c``: UMAC's universal hash, four Toeplitz-shifted instances under this process's
    random key) over float64 ``arrays`` taken as one message: two different messages of equal length share a digest
    with probability at most 2^-128 over the key (inputs that do not depend on the key, as a model's laws do not),
    at memory speed (0.2 ms for p and q at V = 151,936 where SHA-256 takes 1.2 ms); None on the numpy route."""
    found = library()
    return None if found is None else _run_nh(found, [np.ascontiguousarray(a, dtype=np.float64) for a in arrays])


def scratch(slot: str, count: int, dtype=np.float64) -> np.ndarray:
    """[count] of this thread's buffer ``slot`` (on either route): for a [V] temporary that is dead before the next
    use of that slot (see ``_buffer``)."""
    return _buffer(slot, count, dtype)


def token_classes(y, ratio, mass, tiny_below: float, ratio_top: float | None, heavy: float, slot: str | None = None):
    """Index arrays (tiny, capped high, capped low, solved, heavy candidates) of ``luce_solver._place_tokens``'s
    classes from one pass (``ratio_top``: the outer system's largest ratio, held at weight 1; None in the inner
    one; in this thread's buffers ``slot`` when given); None on the numpy route."""
    found = library()
    return None if found is None else _run_classes(found, y, ratio, mass, tiny_below, ratio_top, heavy, slot)


def bin_measure(y, mass, target, bins: int):
    """The q and p mass [bins] of ``luce_solver._solve_binned``'s bins of the clipped logits ``y``; None on the
    numpy route."""
    found = library()
    return None if found is None else _run_bins(found, y, mass, target, bins)
