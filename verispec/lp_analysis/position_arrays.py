"""psbv's position measures in float mode at large vocabularies (``verispec.lp_analysis.position_measures`` holds
the exact algebra and its docstring): the same decomposition as ``position_measures.realise``, vectorised over the
children with numpy and driven by an explicit stack (its depth never depends on the number of children), with the
children's measures built only for the children asked for; a block of at most ``SMALL_TASK`` children runs the
reference's own steps (``position_measures.realise_steps``) on windows of the arrays. Exact mode keeps ``realise``
(Fractions); the tests hold the two equal in float to 1e-12 (tests/verifiers/test_psbv_dense.py)."""

from __future__ import annotations

import bisect

import numpy as np

from verispec.errors import ProblemTooLargeError
from verispec.lp_analysis.order_statistics import smallest_of_uniforms_mass
from verispec.lp_analysis.position_measures import (
    FLOAT_DEPTH_SLACK,
    FLOAT_RATIO_SLACK,
    FLOAT_SLACK,
    MAX_RATIO_ITERATIONS,
    PositionMeasure,
    balanced_face,
    convex_minorant_blocks,
    realise_steps,
    sum_measures,
)
from verispec.simulator.ranking import TIE_RTOL, order_with_ties

#: Below this many windows (or children in a decomposition step), plain Python floats beat numpy's per-call cost.
SMALL_TASK = 16

def descending_order(keys: np.ndarray) -> np.ndarray:
    """``order_with_ties(keys, descending=True)`` (the tie rule of verispec.simulator.ranking: decreasing key, keys
    within TIE_RTOL of a neighbour ordered by increasing index) for float keys, by one unstable sort of -keys: kept
    where no two neighbours are tied; exact ties alone are put in index order by a lexicographic sort; near ties
    (within TIE_RTOL but unequal) go to the tie rule itself."""
    order = np.argsort(-keys)
    ordered = keys[order]
    high, low = ordered[:-1], ordered[1:]
    tied = high - low <= TIE_RTOL * np.maximum(np.abs(high), np.abs(low))
    if not tied.any():
        return order
    if (tied & (high != low)).any():
        return order_with_ties(keys, descending=True)
    return np.lexsort((np.arange(len(keys)), -keys))


def _uniforms_mass(low: np.ndarray, high: np.ndarray, draws: int) -> np.ndarray:
    """``smallest_of_uniforms_mass`` on float arrays, the powers by products: (high - low) times the sum over
    j < K of (1 - low)^j (1 - high)^(K - 1 - j), summed in the same order."""
    above, below = 1 - low, 1 - high
    powers_above, powers_below = [None, above], [None, below]
    for _ in range(2, draws):
        powers_above.append(powers_above[-1] * above)
        powers_below.append(powers_below[-1] * below)
    total = powers_below[draws - 1] if draws > 1 else np.ones_like(low)
    for j in range(1, draws):
        term = powers_above[j] if j == draws - 1 else powers_above[j] * powers_below[draws - 1 - j]
        total = total + term
    return (high - low) * total


class MeasureArrays:
    """A float measure as arrays: the pieces' starts, ends, densities, their cumulative masses and values (K =
    ``paths``), for windows of many (low, length) at once with ``PositionMeasure.window``'s arithmetic."""

    def __init__(self, measure: PositionMeasure, paths: int):
        pieces = np.asarray(measure.pieces, dtype=np.float64).reshape(-1, 3)
        self.measure, self.paths = measure, paths
        self.starts, self.ends, self.densities = pieces[:, 0], pieces[:, 1], pieces[:, 2]
        self.masses = self.densities * (self.ends - self.starts)
        self.cumulative_mass = np.concatenate([[0.0], np.cumsum(self.masses)])
        values = self.densities * smallest_of_uniforms_mass(self.starts, self.ends, paths) if len(pieces) else \
            np.zeros(0)
        self.cumulative_value = np.concatenate([[0.0], np.cumsum(values)])
        self._lists = None

    def _partial(self, index, skip, take):
        """The value of mass ``take`` of piece ``index`` from mass ``skip`` into it (``window``'s positions)."""
        d = self.densities[index]
        available = self.masses[index] - skip
        start = self.starts[index] + skip / d
        stop = np.where(take >= available, self.ends[index], np.minimum(start + take / d, self.ends[index]))
        return np.where(stop > start, d * _uniforms_mass(start, np.maximum(stop, start), self.paths), 0.0)

    def window_values(self, low, length) -> np.ndarray:
        """The value of ``self.measure.window(low, length)`` for arrays ``low``, ``length`` (broadcast)."""
        low, length = np.broadcast_arrays(np.asarray(low, dtype=np.float64), np.asarray(length, dtype=np.float64))
        if low.size <= SMALL_TASK:
            return np.asarray([self.window_value(a, b) for a, b in zip(low.tolist(), length.tolist())]).reshape(
                low.shape)
        count = len(self.masses)
        out = np.zeros(low.shape)
        if count == 0 or low.size == 0:
            return out
        first = np.searchsorted(self.cumulative_mass[1:], low, side="right")
        live = (first < count) & (length > 0)
        first_c = np.minimum(first, count - 1)
        skip = np.maximum(low - self.cumulative_mass[first_c], 0.0)
        take = np.minimum(length, self.masses[first_c] - skip)
        out = np.where(live, self._partial(first_c, skip, np.maximum(take, 0.0)), 0.0)
        remaining = np.where(live, length - take, 0.0)
        more = remaining > 0
        if more.any():
            beyond = self.cumulative_mass[first_c + 1] + remaining  # where the window ends, in cumulative mass
            last = np.maximum(np.searchsorted(self.cumulative_mass[1:], beyond, side="right"), first_c + 1)
            full = self.cumulative_value[np.minimum(last, count)] - self.cumulative_value[first_c + 1]
            rest = remaining - (self.cumulative_mass[np.minimum(last, count)] - self.cumulative_mass[first_c + 1])
            last_c = np.minimum(last, count - 1)
            tail = np.where((last < count) & (rest > 0), self._partial(last_c, 0.0, np.maximum(rest, 0.0)), 0.0)
            out = np.where(more, out + full + tail, out)
        return out

    def prefix_values(self, low: float, cuts: np.ndarray) -> np.ndarray:
        """``window_values(low, cuts)`` for one ``low`` and cuts >= 0: Psi of the segment from ``low`` at each cut,
        with the first piece's arithmetic done once."""
        count = len(self.masses)
        first = bisect.bisect_right(self._python()[0], low, 1) - 1
        out = np.zeros(len(cuts))
        if first >= count:
            return out
        d, end = self.densities[first], self.ends[first]
        skip = max(low - self.cumulative_mass[first], 0.0)
        available = self.masses[first] - skip
        start = self.starts[first] + skip / d
        whole = cuts >= available
        stop = np.where(whole, end, np.minimum(start + cuts / d, end))
        out = np.where(stop > start, d * _uniforms_mass(start, np.maximum(stop, start), self.paths), 0.0)
        out[cuts <= 0] = 0.0
        beyond = np.flatnonzero(cuts > available)
        if len(beyond):
            remaining = cuts[beyond] - available
            position = self.cumulative_mass[first + 1] + remaining
            last = np.maximum(np.searchsorted(self.cumulative_mass[1:], position, side="right"), first + 1)
            bounded = np.minimum(last, count)
            full = self.cumulative_value[bounded] - self.cumulative_value[first + 1]
            rest = remaining - (self.cumulative_mass[bounded] - self.cumulative_mass[first + 1])
            inside = np.flatnonzero((last < count) & (rest > 0))  # a part of piece `last`, from its start
            if len(inside):
                piece = last[inside]
                d, begin = self.densities[piece], self.starts[piece]
                stop = np.minimum(begin + rest[inside] / d, self.ends[piece])
                full[inside] += np.where(stop > begin, d * _uniforms_mass(begin, np.maximum(stop, begin),
                                                                          self.paths), 0.0)
            out[beyond] += full
        return out

    def _python(self) -> tuple:
        if self._lists is None:
            self._lists = (self.cumulative_mass.tolist(), self.cumulative_value.tolist(), self.masses.tolist(),
                           self.starts.tolist(), self.ends.tolist(), self.densities.tolist())
        return self._lists

    def window_value(self, low: float, length: float) -> float:
        """``window_values`` for one window, in Python floats (the same steps, without numpy's per-call cost)."""
        cumulative_mass, cumulative_value, masses, starts, ends, densities = self._python()
        count = len(masses)
        first = bisect.bisect_right(cumulative_mass, low, 1) - 1
        if first >= count or not length > 0:
            return 0.0

        def partial(index, skip, take):
            d = densities[index]
            start = starts[index] + skip / d
            stop = ends[index] if take >= masses[index] - skip else min(start + take / d, ends[index])
            return d * smallest_of_uniforms_mass(start, stop, self.paths) if stop > start else 0.0

        skip = max(low - cumulative_mass[first], 0.0)
        take = min(length, masses[first] - skip)
        out = partial(first, skip, max(take, 0.0))
        remaining = length - take
        if remaining > 0:
            beyond = cumulative_mass[first + 1] + remaining
            last = max(bisect.bisect_right(cumulative_mass, beyond, 1) - 1, first + 1)
            end = min(last, count)
            out += cumulative_value[end] - cumulative_value[first + 1]
            rest = remaining - (cumulative_mass[end] - cumulative_mass[first + 1])
            if last < count and rest > 0:
                out += partial(last, 0.0, rest)
        return out

    def build(self, windows) -> PositionMeasure:
        """The measure sum of coefficient * window(low, length) over ``windows`` = [(low, length, coefficient)]."""
        return sum_measures([self.measure.window(low, length).scaled(coefficient)
                             for low, length, coefficient in windows if coefficient > 0 and length > 0])


class _RealiseCost:
    """The work of one float decomposition, counted in child-steps (one child through one step of the search), so
    that a decomposition that would run for minutes stops with a typed error (``MAX_DECOMPOSITION_STEPS``)."""

    def __init__(self, limit: int, what: str):
        self.limit, self.what, self.steps = limit, what, 0

    def add(self, steps: int) -> None:
        self.steps += steps
        if self.steps > self.limit:
            raise ProblemTooLargeError(self.what)


def _minimum_ratio(arrays: MeasureArrays, face: np.ndarray, mass: np.ndarray, gap: np.ndarray, low: float,
                   length: float, slack: float, cost: _RealiseCost | None):
    """(the tight set [k], the ratio t) of one ray-shooting step of ``realise_float`` by Dinkelbach's iteration over
    prefixes of the order by (face + t gap) / mass (``realise``'s docstring), to ``slack`` (FLOAT_RATIO_SLACK of the
    segment's value) or until rounding stops the ratio from falling, or None where it does not settle in
    MAX_RATIO_ITERATIONS (float noise: the caller keeps the tiling)."""
    n = len(face)
    first = int(np.argmax(gap))
    tight = np.asarray([first])
    ratio = max((arrays.window_value(low, min(mass[first], length)) - face[first]) / gap[first], 0.0)
    for _ in range(MAX_RATIO_ITERATIONS):
        shifted = descending_order((face + ratio * gap) / mass)
        cuts = np.cumsum(mass[shifted][:-1])
        psi = arrays.prefix_values(low, np.minimum(cuts, length))
        face_sums, gap_sums = np.cumsum(face[shifted][:-1]), np.cumsum(gap[shifted][:-1])
        excess = psi - face_sums - ratio * gap_sums
        best_k = int(np.argmin(excess))
        if cost is not None:
            cost.add(n)
        if excess[best_k] >= -slack:
            return tight, ratio
        lower = max(float(psi[best_k] - face_sums[best_k]) / float(gap_sums[best_k]), 0.0)
        if not lower < ratio:  # rounding stopped the fall (``_ray_step``)
            return tight, ratio
        tight, ratio = shifted[:best_k + 1], lower
    return None


def realise_float(arrays: MeasureArrays, ids: np.ndarray, targets: np.ndarray, masses: np.ndarray, low: float,
                  length: float, values: np.ndarray, wanted: np.ndarray, windows: dict,
                  cost: _RealiseCost | None = None) -> None:
    """``realise`` in float on the segment ``arrays.measure.window(low, length)`` for the children ``ids`` (in the
    order ``realise`` receives them) of targets ``targets`` and masses ``masses``: adds each child's value to
    ``values[id]`` and, for the ids where the boolean array ``wanted`` is true, appends its windows (low, length,
    coefficient) to ``windows[id]`` (``MeasureArrays.build`` makes its measure). The same steps as ``realise`` (its
    docstring), one step of the ray shooting per stack entry, vectorised over the step's children; the values are
    those of the windows, whichever children are wanted."""
    stack = [(np.asarray(ids), np.asarray(targets, dtype=np.float64), np.asarray(masses, dtype=np.float64),
              float(low), float(length), 1.0)]

    def emit(child_ids, child_lows, child_lengths, child_values, coefficient):
        values[child_ids] += coefficient * child_values  # the ids of one step are distinct
        for position in np.flatnonzero(wanted[child_ids]):
            windows.setdefault(int(child_ids[position]), []).append(
                (float(child_lows[position]), float(child_lengths[position]), coefficient))

    while stack:
        ids, face, mass, low, length, coefficient = stack.pop()
        n = len(ids)
        if cost is not None:
            cost.add(n)
        if n == 1:
            child = int(ids[0])
            values[child] += coefficient * arrays.window_value(low, length)
            if wanted[child]:
                windows.setdefault(child, []).append((low, length, coefficient))
            continue
        if n <= SMALL_TASK:  # the same steps in Python floats
            _realise_small(arrays, ids.tolist(), face.tolist(), mass.tolist(), low, length, coefficient, values,
                           wanted, windows, cost)
            continue
        segment_value = arrays.window_value(low, length)
        face = balanced_face(face, mass, segment_value)
        order = descending_order(face / mass)
        ordered_mass = mass[order]
        offsets = np.concatenate([[0.0], np.cumsum(ordered_mass)[:-1]])
        lengths = np.minimum(ordered_mass, np.maximum(length - offsets, 0.0))
        tiling = np.empty(n)
        tiling[order] = arrays.window_values(low + offsets, lengths)
        tile_lows, tile_lengths = np.empty(n), np.empty(n)
        tile_lows[order], tile_lengths[order] = low + offsets, lengths
        gap = face - tiling
        slack = FLOAT_SLACK * max(abs(segment_value), 1e-300)
        largest = np.max(np.abs(gap))
        if largest <= slack or coefficient * largest <= FLOAT_DEPTH_SLACK * abs(segment_value):
            emit(ids, tile_lows, tile_lengths, tiling, coefficient)
            continue
        found = _minimum_ratio(arrays, face, mass, gap, low, length,
                               FLOAT_RATIO_SLACK * max(abs(segment_value), 1e-300), cost)
        if found is None:  # rounding noise of a small segment near position 1 (FLOAT_SLACK): keep the tiling
            emit(ids, tile_lows, tile_lengths, tiling, coefficient)
            continue
        tight, ratio = found
        face = face + ratio * gap
        share = 1 / (1 + ratio)
        emit(ids, tile_lows, tile_lengths, tiling, coefficient * (1 - share))
        low_mass = float(np.cumsum(mass[tight])[-1])
        rest = np.ones(n, dtype=bool)
        rest[tight] = False
        rest = np.flatnonzero(rest)
        stack.append((ids[rest], face[rest], mass[rest], low + low_mass, length - low_mass, coefficient * share))
        stack.append((ids[tight], face[tight], mass[tight], low, low_mass, coefficient * share))


#: Most child-steps (one child through one pass of a decomposition step) of the float decompositions of one split:
#: a minute or two on one core (15 million steps a second where the parent's measure is uniform, 10 where it has
#: tens of pieces). Real T = 1 nodes of the Qwen pair (V = 151,936, K = 2 to 4) take 5 to 200 million at the
#: branch point (0.4 to 14 s); deeper, a block whose every step found t near 0.03 (its weight falls 3% a step)
#: and peeled a few children ran past the limit (over a thousand steps of 127,000 children). psbv refuses a split
#: predicted above it before starting, and stops one that runs past it (``_RealiseCost``).
MAX_DECOMPOSITION_STEPS = 1_000_000_000


def convex_minorant_blocks_float(weights: np.ndarray, values: np.ndarray) -> list[tuple[int, int]]:
    """``convex_minorant_blocks`` on float arrays (the same pool-adjacent rule, on Python floats)."""
    return convex_minorant_blocks(np.asarray(weights, dtype=np.float64).tolist(),
                                  np.asarray(values, dtype=np.float64).tolist(), False)


class _Window:
    """The window of mass ``length`` from cumulative mass ``low`` of a float measure held as ``MeasureArrays``: the
    segment interface ``position_measures.realise_steps`` reads (``value``, ``values_below``, ``window``,
    ``mass``), without building a measure."""

    __slots__ = ("arrays", "low", "length", "_value")

    def __init__(self, arrays: MeasureArrays, low: float, length: float):
        self.arrays, self.low, self.length, self._value = arrays, low, length, None

    def value(self, paths: int) -> float:
        if self._value is None:
            self._value = self.arrays.window_value(self.low, self.length)
        return self._value

    def values_below(self, cuts, paths: int) -> list:
        return [self.arrays.window_value(self.low, min(cut, self.length)) for cut in cuts]

    def window(self, start: float, mass: float) -> _Window:
        return _Window(self.arrays, self.low + start, min(mass, max(self.length - start, 0.0)))

    def mass(self) -> float:
        return self.length


def _realise_small(arrays: MeasureArrays, ids: list, face: list, mass: list, low: float, length: float,
                   coefficient: float, values: np.ndarray, wanted: np.ndarray, windows: dict,
                   cost: _RealiseCost | None) -> None:
    """``realise_float``'s steps for a few children: the reference's ray shooting (``realise_steps``) in Python
    floats on windows of ``arrays``, each part's value added to ``values`` and, for wanted children, its window to
    ``windows``."""
    def emit(child, part: _Window, weight: float) -> None:
        values[child] += weight * part.value(arrays.paths)
        if wanted[child]:
            windows.setdefault(child, []).append((part.low, part.length, weight))

    realise_steps(dict(zip(ids, face)), dict(zip(ids, mass)), _Window(arrays, low, length), arrays.paths, False,
                  emit, weight=coefficient, cost=cost)
