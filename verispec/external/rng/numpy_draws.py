"""RNG capture of numpy's and Python's generators: their primitives as replacements that draw from a capture.

``numpy_functions(capture)`` and ``random_functions(capture)`` map each attribute of ``numpy.random`` and
``random`` that ``rng.Capture`` replaces to a function with the library's signature, its checks and its errors,
whose draws come from ``capture`` (an entered ``rng.Capture``) by the rules of ``rng.rules``.
``CapturedGenerator`` is what ``default_rng()`` gives inside a call: a numpy Generator whose usual methods draw
from the innermost capture entered.
"""

from __future__ import annotations

import math
import operator

import numpy as np

from verispec.external.rng import rules


def _size_shape(size) -> tuple:
    if size is None:
        return ()
    if isinstance(size, (int, np.integer)):
        return (int(size),)
    return tuple(int(s) for s in size)


def _scalar_or_array(values: np.ndarray, size):
    return values.item() if size is None and values.ndim == 0 else values


def numpy_functions(capture) -> dict:
    """``numpy.random``'s attributes that ``capture`` replaces -> their replacements."""
    original_default_rng = np.random.default_rng

    def take(what, size):
        return capture.draw(f"numpy.random.{what}", _size_shape(size))[0]

    def random_sample(size=None):
        return _scalar_or_array(take("random", size), size)

    def rand(*dims):
        return _scalar_or_array(take("rand", dims), None if not dims else dims)

    def uniform(low=0.0, high=1.0, size=None):
        shape = size if size is not None else np.broadcast_shapes(np.shape(low), np.shape(high))
        return _scalar_or_array(np.asarray(rules.uniform(take("uniform", shape), np.asarray(low, float),
                                                         np.asarray(high, float))), size)

    def choice(a, size=None, replace=True, p=None):
        return _numpy_choice(capture, "numpy.random.choice", a, size, replace, p, legacy=True)

    def randint(low, high=None, size=None, dtype=int):
        low, high = (0, low) if high is None else (low, high)
        values = capture.chose(rules.integers(take("randint", size), int(low), int(high)),
                                integers=int(high) - int(low)).astype(dtype)
        return _scalar_or_array(values, size)

    def exponential(scale=1.0, size=None):
        shape = size if size is not None else np.shape(scale)
        return _scalar_or_array(np.asarray(rules.exponential(take("exponential", shape)) * _scale(scale)), size)

    def standard_exponential(size=None):
        return _scalar_or_array(rules.exponential(take("standard_exponential", size)), size)

    def normal(loc=0.0, scale=1.0, size=None):
        shape = size if size is not None else np.broadcast_shapes(np.shape(loc), np.shape(scale))
        return _scalar_or_array(np.asarray(rules.normal(take("normal", shape), loc, _scale(scale))), size)

    def standard_normal(size=None):
        return _scalar_or_array(np.asarray(rules.normal(take("standard_normal", size))), size)

    def randn(*dims):
        return _scalar_or_array(np.asarray(rules.normal(take("randn", dims))), None if not dims else dims)

    def default_rng(seed=None):
        # seeded inside the call, a generator reads the stream of its seed as a key ("Keys" in the glossary);
        # a Generator handed in (default_rng(generator)) is returned as numpy returns it
        if seed is None:
            return capture.generator()
        if isinstance(seed, (np.random.Generator, np.random.BitGenerator)) or capture.tape is None:
            return original_default_rng(seed)  # (verispec's own generators, made between the calls)
        return capture.seeded_generator(seed)

    return {"random": random_sample, "random_sample": random_sample, "ranf": random_sample,
            "sample": random_sample, "rand": rand, "uniform": uniform, "choice": choice, "randint": randint,
            "exponential": exponential, "standard_exponential": standard_exponential, "normal": normal,
            "standard_normal": standard_normal, "randn": randn, "default_rng": default_rng,
            "seed": capture.seeding("numpy.random.seed", "numpy")}


def _scale(scale):
    """A numpy ``scale`` argument as float64, refused as numpy refuses it (ValueError)."""
    scale = np.asarray(scale, dtype=np.float64)
    if np.any(scale < 0):
        raise ValueError("scale < 0")
    return scale


#: numpy's tolerance on the total of ``choice``'s ``p``.
_CHOICE_ATOL = math.sqrt(np.finfo(np.float64).eps)


def _numpy_choice(capture, what: str, a, size, replace, p, legacy: bool, generator=None):
    """``choice`` with numpy's own checks and errors (ValueError; ``legacy``: ``np.random.choice``, whose ``a``
    must be 1-D, else ``Generator.choice``, which draws along axis 0), its draws by the categorical rule."""
    shape = _size_shape(size)
    draws = math.prod(shape)
    population = np.asarray(a)
    if population.ndim == 0:
        try:
            size_of_a = operator.index(population.item())
        except TypeError:
            raise ValueError("a must be 1-dimensional or an integer") from None
        if size_of_a <= 0 and draws:
            raise ValueError("a must be a positive integer unless no samples are taken")
        population = np.arange(size_of_a)
    elif population.ndim != 1 and legacy:
        raise ValueError("a must be 1-dimensional")
    elif len(population) == 0 and draws:
        raise ValueError("a cannot be empty unless no samples are taken")
    count = len(population)
    if p is None:
        weights = np.full(count, 1.0)
    else:
        tolerance = _CHOICE_ATOL
        if isinstance(p, np.ndarray) and np.issubdtype(p.dtype, np.floating):
            tolerance = max(tolerance, math.sqrt(np.finfo(p.dtype).eps))
        weights = np.asarray(p, dtype=np.float64)
        if weights.ndim != 1:
            raise ValueError("p must be 1-dimensional")
        if weights.shape != (count,):
            raise ValueError("a and p must have same size")
        total = math.fsum(weights)
        if math.isnan(total):
            raise ValueError("probabilities contain NaN")
        if np.any(weights < 0):
            raise ValueError("probabilities are not non-negative")
        if not abs(total - 1.0) <= tolerance:
            raise ValueError("probabilities do not sum to 1")
    if not replace:
        if draws > count:
            raise ValueError("Cannot take a larger sample than population when 'replace=False'")
        if np.count_nonzero(weights > 0) < draws:
            raise ValueError("Fewer non-zero entries in p than size")
        if shape and capture.tape is not None and capture.tape.rows > 1:
            capture.refuse(f"{what}(replace=False) over a batch")  # a batch of draws from one population
    u = capture.draw(what, shape, generator)[0].reshape(1, -1)
    index = capture.chose(rules.categorical(weights[None, :], u, bool(replace)))
    chosen = population[index.reshape(shape)]
    return chosen if size is not None else chosen.item() if chosen.ndim == 0 else chosen


class CapturedGenerator(np.random.Generator):
    """A numpy Generator created inside a captured call: its usual methods draw from the active capture."""

    def _capture(self):
        return rules.ACTIVE[-1] if rules.ACTIVE else None

    def _take(self, what, size):
        return self._capture().draw(f"numpy.Generator.{what}", _size_shape(size), self)[0]

    def random(self, size=None, dtype=np.float64, out=None):
        if self._capture() is None:
            return super().random(size, dtype, out)
        values = self._take("random", size)
        if np.dtype(dtype) == np.float32:
            values = rules.on_grid(values, np.float32)
            self._capture().float32_draws += 1
        else:
            values = values.astype(dtype)
        if out is not None:
            out[...] = values
            return out
        return _scalar_or_array(values, size)

    def uniform(self, low=0.0, high=1.0, size=None):
        if self._capture() is None:
            return super().uniform(low, high, size)
        shape = size if size is not None else np.broadcast_shapes(np.shape(low), np.shape(high))
        values = np.asarray(rules.uniform(self._take("uniform", shape), np.asarray(low, float),
                                          np.asarray(high, float)))
        return _scalar_or_array(values, size)

    def choice(self, a, size=None, replace=True, p=None, axis=0, shuffle=True):
        capture = self._capture()
        if capture is None:
            return super().choice(a, size, replace, p, axis, shuffle)
        if axis != 0:
            capture.refuse("Generator.choice(axis != 0)")
        if not replace and not shuffle:  # numpy's own order of the chosen set, which the rule does not follow
            capture.refuse("Generator.choice(replace=False, shuffle=False)")
        return _numpy_choice(capture, "numpy.Generator.choice", a, size, replace, p, legacy=False,
                             generator=self)

    def integers(self, low, high=None, size=None, dtype=np.int64, endpoint=False):
        if self._capture() is None:
            return super().integers(low, high, size, dtype, endpoint)
        low, high = (0, low) if high is None else (low, high)
        high = int(high) + (1 if endpoint else 0)
        drawn = self._capture().chose(rules.integers(self._take("integers", size), int(low), high),
                                      integers=high - int(low))
        return _scalar_or_array(drawn.astype(dtype), size)

    def exponential(self, scale=1.0, size=None):
        if self._capture() is None:
            return super().exponential(scale, size)
        shape = size if size is not None else np.shape(scale)
        return _scalar_or_array(np.asarray(rules.exponential(self._take("exponential", shape)) * _scale(scale)), size)

    def standard_exponential(self, size=None, dtype=np.float64, method="zig", out=None):
        if self._capture() is None:
            return super().standard_exponential(size, dtype, method, out)
        return _scalar_or_array(rules.exponential(self._take("standard_exponential", size)).astype(dtype), size)

    def normal(self, loc=0.0, scale=1.0, size=None):
        if self._capture() is None:
            return super().normal(loc, scale, size)
        shape = size if size is not None else np.broadcast_shapes(np.shape(loc), np.shape(scale))
        return _scalar_or_array(np.asarray(rules.normal(self._take("normal", shape), loc, _scale(scale))), size)

    def standard_normal(self, size=None, dtype=np.float64, out=None):
        if self._capture() is None:
            return super().standard_normal(size, dtype, out)
        return _scalar_or_array(np.asarray(rules.normal(self._take("standard_normal", size))).astype(dtype), size)


def random_functions(capture) -> dict:
    """``random``'s attributes that ``capture`` replaces -> their replacements."""
    def one(what):
        return float(capture.draw(f"random.{what}", ())[0])

    def random():
        return one("random")

    def uniform(a, b):
        return a + (b - a) * one("uniform")

    def choices(population, weights=None, *, cum_weights=None, k=1):
        count = len(population)
        if cum_weights is not None:
            cumulative = np.asarray(cum_weights, dtype=np.float64)
            weights_array = np.diff(np.concatenate([[0.0], cumulative]))
        else:
            weights_array = np.full(count, 1.0) if weights is None else np.asarray(weights, dtype=np.float64)
        if weights_array.shape != (count,):
            raise ValueError("The number of weights does not match the population")
        total = float(np.sum(weights_array))
        if total <= 0.0:  # CPython's checks, in its order
            raise ValueError("Total of weights must be greater than zero")
        if not math.isfinite(total):
            raise ValueError("Total of weights must be finite")
        if weights_array.min() < 0:  # CPython bisects cumulative weights that are not monotone: no categorical law
            capture.refuse("random.choices with a negative weight")
        u = capture.draw("random.choices", (k,))[0].reshape(1, -1)
        return [population[int(i)] for i in capture.chose(rules.categorical(weights_array[None, :], u, True))[0]]

    def choice(seq):
        if not len(seq):
            raise IndexError("Cannot choose from an empty sequence")
        return seq[int(capture.chose(rules.integers(np.asarray(one("choice")), 0, len(seq)), integers=len(seq)))]

    def randrange(start, stop=None, step=1):
        start, stop = (0, start) if stop is None else (start, stop)
        count = len(range(start, stop, step))
        if count <= 0:
            raise ValueError(f"empty range in randrange({start}, {stop}, {step})")
        return start + step * int(capture.chose(rules.integers(np.asarray(one("randrange")), 0, count), integers=count))

    def randint(a, b):
        return a + int(capture.chose(rules.integers(np.asarray(one("randint")), 0, b - a + 1), integers=b - a + 1))

    def expovariate(lambd=1.0):
        return float(rules.exponential(np.asarray(one("expovariate")), lambd))

    def gauss(mu=0.0, sigma=1.0):
        return float(rules.normal(np.asarray(one("gauss")), mu, sigma))

    return {"random": random, "uniform": uniform, "choices": choices, "choice": choice, "randrange": randrange,
            "randint": randint, "expovariate": expovariate, "gauss": gauss, "normalvariate": gauss,
            "seed": capture.seeding("random.seed", "random")}
