"""Position measures: the measure-on-[0, 1] algebra that psbv (position-sharing block verification, verispec's rule,
docs/guides/rules_2025_26.md; ``verispec.verifiers.psbv``) stands on. Glossary:

* *position measure* nu_u of a prefix u: a measure on [0, 1] with piecewise-constant density (``PositionMeasure``),
  of mass q(u), the draft probability of u. The root's is the uniform measure; the measures of u's children
  partition nu_u (their densities add up to nu_u's), so at every depth the measures of all prefixes partition [0, 1].
  A drafted path x gets a *position* drawn from nu_x / q(x); a path drawn from q then has a uniform position.
* *value* of nu_u for K i.i.d. paths: g(u) = integral of nu_u(y) K (1 - y)^(K - 1) dy, P(the path with the smallest
  of the K positions extends u); per piece density * ((1 - a)^K - (1 - b)^K) (``lp_analysis.order_statistics``).
* *Psi(x)*: the value of the lowest mass x of a measure (``PositionMeasure.values_below``), concave in x. Children
  of masses m_c sharing a segment reach exactly the values of the base polytope of the polymatroid C -> Psi(m(C)):
  its vertices are the *tilings* (children stacked from the bottom in some order, ``ordered_tiling``), and any
  point of it is realised by a convex combination of tilings (``realise``: Caratheodory's ray shooting, each step's
  minimum ratio by Dinkelbach's iteration over prefixes). The lexicographically optimal base with respect to weights
  (Fujishige 1980) cuts the children, in decreasing weight / mass, into the blocks of the greatest convex minorant
  of (cumulative weight, Psi(cumulative mass)) (``convex_minorant_blocks``).
* *float mode at large vocabularies* (``MeasureArrays``, ``realise_float``): the same decomposition vectorised
  over the children with numpy, from an explicit stack, building measures only for the children asked for; a
  step whose remaining weight in its block is below ``FLOAT_DEPTH_SLACK`` takes its tiling. Its results equal the
  reference's (``realise``) to rounding; rounding itself is amplified along the long chains of ray shooting
  (each face z = v + t (v - y)), so float measures deep in a large block carry relative errors well above 1e-16
  whichever implementation sums them (tests/verifiers/test_psbv_dense.py).
* *selection law*: P(the smallest of the drafted paths' positions is on leaf i), for leaves with any measures and
  any numbers of copies (``selection_probabilities``), an integral of piecewise polynomials, exact in rationals.

Numbers are floats or Fractions (exact mode) throughout; Fractions give every result exactly.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

import numpy as np

from verispec.errors import ProblemTooLargeError, VerifierError
from verispec.lp_analysis.order_statistics import smallest_of_uniforms_mass
from verispec.simulator.ranking import TIE_RTOL, order_with_ties

#: In float arithmetic, a tiling whose values are within this fraction of its segment's value of the targets is
#: taken as it is (exact arithmetic uses 0); also the slack of the decomposition's minimum-ratio search. Positions
#: near 1 carry about 1e-16 absolute, so a small segment there knows its values to far fewer digits: where the
#: search cannot settle, a float realisation keeps the tiling. Either way the rule stays lossless, because block
#: verification uses the values the measures realise, not the targets.
FLOAT_SLACK = 1e-9

#: In float arithmetic, a decomposition step whose remaining part carries a weight w in its block (the product of
#: the shares 1 / (1 + t) of the steps above it) takes its tiling as it is when w * (its largest gap) is within this
#: fraction of its segment's value: what it would still move is below float resolution, and ray shooting in a large
#: block peels about one child per step with w falling geometrically (about 1.7^-steps), so the steps stop after
#: tens instead of one per child. The segments where it stops are disjoint, so the block's values move by at most
#: this fraction of its value in all; the measures still partition the block's segment (a tiling does).
FLOAT_DEPTH_SLACK = 1e-15

#: Most iterations of the minimum-ratio search in one decomposition step (it converges in a few; a bound keeps a
#: float corner from looping).
MAX_RATIO_ITERATIONS = 200


@dataclass(frozen=True)
class PositionMeasure:
    """A measure on [0, 1] with piecewise-constant density: ``pieces`` = ((start, end, density), ...), sorted,
    disjoint, density > 0. Numbers are floats or Fractions (exact mode)."""

    pieces: tuple

    @staticmethod
    def uniform(one) -> PositionMeasure:
        """The root's measure: density 1 on [0, 1] (``one`` = 1 or Fraction(1) sets the number type)."""
        return PositionMeasure(((one * 0, one, one),))

    def mass(self):
        """The total mass, sum of density * width (q(u) for the measure of a prefix u)."""
        return sum((d * (b - a) for a, b, d in self.pieces), self.pieces[0][2] * 0) if self.pieces else 0

    def value(self, paths: int):
        """g: the integral of the density against K (1 - y)^(K - 1) (the module docstring)."""
        return sum((d * smallest_of_uniforms_mass(a, b, paths) for a, b, d in self.pieces),
                   self.pieces[0][2] * 0) if self.pieces else 0

    def scaled(self, factor) -> PositionMeasure:
        """The measure times ``factor`` (pieces whose density becomes 0 dropped)."""
        return PositionMeasure(tuple((a, b, d * factor) for a, b, d in self.pieces if d * factor > 0))

    def window(self, low, length) -> PositionMeasure:
        """The part of the measure of mass ``length`` that starts at cumulative mass ``low`` (from position 0 up).
        The mass still to take is carried down the pieces, so a window of tiny mass high in the measure keeps its
        digits (low + length would round it away)."""
        out, before, remaining = [], 0, length
        for a, b, d in self.pieces:
            if remaining <= 0:
                break
            piece = d * (b - a)
            skip = low - before if low > before else 0
            before = before + piece
            if skip >= piece:
                continue
            take = min(remaining, piece - skip)
            remaining = remaining - take
            start = a + skip / d
            stop = b if take >= piece - skip else min(start + take / d, b)
            if stop > start:
                out.append((start, stop, d))
        return PositionMeasure(tuple(out))

    def values_below(self, cuts, paths: int) -> list:
        """Psi at each of the nondecreasing cumulative masses ``cuts``: the value of the lowest mass cut."""
        results, index, value, before = [], 0, self.pieces[0][2] * 0 if self.pieces else 0, 0
        pieces = self.pieces
        for cut in cuts:
            while index < len(pieces):
                a, b, d = pieces[index]
                after = before + d * (b - a)
                if after > cut:
                    break
                value, before, index = value + d * smallest_of_uniforms_mass(a, b, paths), after, index + 1
            partial = value
            if index < len(pieces) and cut > before:
                a, b, d = pieces[index]
                partial = value + d * smallest_of_uniforms_mass(a, min(a + (cut - before) / d, b), paths)
            results.append(partial)
        return results


def sum_measures(measures) -> PositionMeasure:
    """The sum of measures (densities added), merged into disjoint pieces by one sweep over the breakpoints."""
    events = {}
    for measure in measures:
        for a, b, d in measure.pieces:
            events[a] = events.get(a, 0) + d
            events[b] = events.get(b, 0) - d
    out, density, points = [], 0, sorted(events)
    for start, stop in zip(points, points[1:]):
        density = density + events[start]
        if density > 0 and stop > start:
            if out and out[-1][1] == start and out[-1][2] == density:
                out[-1] = (out[-1][0], stop, density)
            else:
                out.append((start, stop, density))
    return PositionMeasure(tuple(out))


def ordered_by_key(keys: list, exact: bool) -> list[int]:
    """Indices of ``keys`` by decreasing key, ties (verispec.simulator.ranking's rule) by increasing index."""
    if len(keys) < 2:
        return list(range(len(keys)))
    array = np.empty(len(keys), dtype=object) if exact else np.asarray(keys, dtype=np.float64)
    if exact:
        array[:] = keys
    return [int(i) for i in order_with_ties(array, descending=True)]


def ordered_tiling(segment: PositionMeasure, order: list, masses: dict) -> dict:
    """Each child in ``order`` takes the next ``masses[c]`` of the segment from the bottom: a vertex of the base."""
    out, start = {}, 0
    for child in order:
        out[child] = segment.window(start, masses[child])
        start = start + masses[child]
    return out


def realise(targets: dict, masses: dict, segment: PositionMeasure, paths: int, exact: bool) -> dict:
    """Child measures that partition ``segment``, of masses ``masses`` and values ``targets`` (a point of the base
    polytope of C -> Psi(m(C))): a convex combination of tilings, found by Caratheodory's ray shooting.

    y = the tiling in the order of targets[c] / masses[c]; if y's values are the targets, done. Else the ray from y
    through the targets leaves the polytope at z = v + t (v - y), t = min over sets C with d(C) > 0 of
    (Psi(m(C)) - v(C)) / d(C), d = v - y; for concave Psi of a modular mass, min_C Psi(m(C)) - w(C) is attained at a
    prefix of the order by w / m, so the minimum ratio comes from Dinkelbach's iteration over such prefixes. z lies on
    the face where its tight set C takes the lowest m(C) of the segment: z is realised in turn on the two
    sub-segments, and v = z / (1 + t) + y t / (1 + t).

    The steps run from an explicit stack (a block of n children takes up to n - 1 of them): each child's measure is
    the sum of its tilings, each weighted by the product of the shares 1 / (1 + t) above it times its own
    t / (1 + t), and of its last segment. ``realise_float`` is the same in numpy, for float splits at large
    vocabularies."""
    parts = {c: [] for c in targets}  # child -> [(measure, coefficient)]
    stack = [(list(targets), dict(targets), segment, segment.value(paths) * 0 + 1)]
    while stack:
        children, face, part, weight = stack.pop()
        step = _ray_step(children, face, masses, part, paths, exact, weight)
        if step is None:  # one child: the whole segment
            parts[children[0]].append((part, weight))
            continue
        tiling, share, tight, rest, low_mass, face = step
        for child in children:
            parts[child].append((tiling[child], weight * (1 - share)))
        if share == 0:  # the tiling realises the targets (to the float slack)
            continue
        stack.append((rest, {c: face[c] for c in rest}, part.window(low_mass, part.mass()), weight * share))
        stack.append((tight, {c: face[c] for c in tight}, part.window(0, low_mass), weight * share))
    return {c: sum_measures([m.scaled(w) for m, w in parts[c] if w > 0]) if len(parts[c]) > 1 else
            parts[c][0][0].scaled(parts[c][0][1]) if parts[c][0][1] != 1 else parts[c][0][0] for c in targets}


def _ray_step(children: list, targets: dict, masses: dict, segment: PositionMeasure, paths: int, exact: bool,
              weight):
    """One step of ``realise``: None for one child; else (the tiling, share = 1 / (1 + t), the tight set, the rest,
    the tight set's mass, the face z), share 0 where the tiling is taken as it is."""
    if len(children) == 1:
        return None
    zero = segment.value(paths) * 0
    order = [children[i] for i in ordered_by_key([targets[c] / masses[c] for c in children], exact)]
    tiling = ordered_tiling(segment, order, masses)
    gap = {c: targets[c] - tiling[c].value(paths) for c in children}
    slack = 0 if exact else FLOAT_SLACK * max(abs(segment.value(paths)), 1e-300)
    largest = max(abs(value) for value in gap.values())
    if largest <= slack or (not exact and weight * largest <= FLOAT_DEPTH_SLACK * abs(segment.value(paths))):
        return tiling, zero, None, None, None, None
    first = max(children, key=lambda c: gap[c])
    tight, ratio = [first], (segment.values_below([masses[first]], paths)[0] - targets[first]) / gap[first]
    seen, cycled = set(), False
    for _ in range(MAX_RATIO_ITERATIONS):
        ratio = max(ratio, zero)
        if ratio in seen:  # each iteration is a function of the ratio: a repeat cycles without end (float noise)
            cycled = True
            break
        seen.add(ratio)
        shifted = [children[i]
                   for i in ordered_by_key([(targets[c] + ratio * gap[c]) / masses[c] for c in children], exact)]
        cuts, mass = [], 0
        for child in shifted[:-1]:
            mass = mass + masses[child]
            cuts.append(mass)
        psi = segment.values_below(cuts, paths)
        best, best_k, value, difference = None, None, zero, zero
        for k, child in enumerate(shifted[:-1]):
            value, difference = value + targets[child], difference + gap[child]
            excess = psi[k] - value - ratio * difference
            if best is None or excess < best:
                best, best_k = excess, k
        if best >= -slack:
            break
        prefix = shifted[:best_k + 1]
        tight = prefix
        ratio = (psi[best_k] - sum((targets[c] for c in prefix), zero)) / sum((gap[c] for c in prefix), zero)
    else:
        cycled = True
    if cycled:
        if not exact:  # rounding noise of a small segment near position 1 (FLOAT_SLACK)
            return tiling, zero, None, None, None, None
        raise VerifierError("psbv: the decomposition's minimum-ratio search did not converge")
    ratio = max(ratio, zero)
    face = {c: targets[c] + ratio * gap[c] for c in children}
    low_mass = sum((masses[c] for c in tight), zero)
    tight_set = set(tight)
    rest = [c for c in children if c not in tight_set]
    return tiling, 1 / (1 + ratio), tight, rest, low_mass, face


def convex_minorant_blocks(weights: list, values: list, exact: bool) -> list[tuple[int, int]]:
    """Blocks [start, stop) of the greatest convex minorant of the points (W_k, Psi_k), k = 0..n (W cumulative
    weights, Psi the values at the cumulative masses), by the pool-adjacent rule: slopes must increase."""
    hull = [0]
    for k in range(1, len(values)):
        while len(hull) >= 2:
            i, j = hull[-2], hull[-1]
            rise_before, rise_after = values[j] - values[i], values[k] - values[j]
            if rise_before * (weights[k] - weights[j]) < rise_after * (weights[j] - weights[i]):
                break
            hull.pop()
        hull.append(k)
    return list(zip(hull, hull[1:]))


def elementary_intervals(measures: list[PositionMeasure]) -> list:
    """The common refinement of the measures' breakpoints: sorted (start, stop) with each measure's density there."""
    points = sorted({x for m in measures for a, b, _ in m.pieces for x in (a, b)})
    starts = [[a for a, _, _ in m.pieces] for m in measures]
    intervals = []
    for start, stop in zip(points, points[1:]):
        densities = []
        for m, lows in zip(measures, starts):
            d = 0
            index = bisect.bisect_right(lows, start) - 1  # the only piece that can hold [start, stop]: sorted, disjoint
            if index >= 0:
                a, b, density = m.pieces[index]
                if a <= start and stop <= b:
                    d = density
            densities.append(d)
        intervals.append((start, stop, densities))
    return intervals


def selection_probabilities(measures: list[PositionMeasure], copies: list[int]):
    """P(the path with the smallest position ends at leaf i) for leaves with position measures ``measures`` and
    ``copies`` drafted paths each: sum over elementary intervals of the integral, over s in [0, h], of
    k_i f_i (S_i - f_i s)^(k_i - 1) prod_(j != i) (S_j - f_j s)^(k_j), f the normalised densities and S the
    probabilities of a position above the interval's start (polynomials in s, integrated exactly)."""
    masses = [m.mass() for m in measures]
    zero = masses[0] * 0
    totals = [zero] * len(measures)
    survival = [mass / mass if mass > 0 else zero + 1 for mass in masses]  # an empty measure never lands
    for start, stop, densities in elementary_intervals(measures):
        width = stop - start
        rates = [d / mass if mass > 0 else zero for d, mass in zip(densities, masses)]
        for i in range(len(measures)):
            if rates[i] == 0:
                continue
            poly = [copies[i] * rates[i]]  # coefficients in s
            for j in range(len(measures)):
                for _ in range(copies[j] - (1 if j == i else 0)):
                    factor = (survival[j], -rates[j])
                    poly = [(poly[n] if n < len(poly) else zero) * factor[0]
                            + (poly[n - 1] * factor[1] if n >= 1 else zero) for n in range(len(poly) + 1)]
            totals[i] = totals[i] + sum((c * width ** (n + 1) / (n + 1) for n, c in enumerate(poly)), zero)
        survival = [s - r * width for s, r in zip(survival, rates)]
    return totals


# ----------------------------------------------------------------------------------------------------------------
# Float mode at large vocabularies: the same decomposition as ``realise``, vectorised over the children with numpy
# and driven by an explicit stack (its depth never depends on the number of children), with the children's
# measures built only for the children asked for. Exact mode keeps ``realise`` (Fractions); the tests hold the two
# equal in float to 1e-12 (tests/verifiers/test_psbv_dense.py).


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
        order = descending_order(face / mass)
        ordered_mass = mass[order]
        offsets = np.concatenate([[0.0], np.cumsum(ordered_mass)[:-1]])
        lengths = np.minimum(ordered_mass, np.maximum(length - offsets, 0.0))
        tiling = np.empty(n)
        tiling[order] = arrays.window_values(low + offsets, lengths)
        tile_lows, tile_lengths = np.empty(n), np.empty(n)
        tile_lows[order], tile_lengths[order] = low + offsets, lengths
        gap = face - tiling
        segment_value = arrays.window_value(low, length)
        slack = FLOAT_SLACK * max(abs(segment_value), 1e-300)
        largest = np.max(np.abs(gap))
        if largest <= slack or coefficient * largest <= FLOAT_DEPTH_SLACK * abs(segment_value):
            emit(ids, tile_lows, tile_lengths, tiling, coefficient)
            continue
        first = int(np.argmax(gap))
        tight = np.asarray([first])
        ratio = (arrays.window_value(low, min(mass[first], length)) - face[first]) / gap[first]
        seen, cycled = set(), False
        for _ in range(MAX_RATIO_ITERATIONS):
            ratio = max(ratio, 0.0)
            if ratio in seen:  # a repeat cycles without end (``_ray_step``)
                cycled = True
                break
            seen.add(ratio)
            shifted = descending_order((face + ratio * gap) / mass)
            cuts = np.cumsum(mass[shifted][:-1])
            psi = arrays.prefix_values(low, np.minimum(cuts, length))
            face_sums, gap_sums = np.cumsum(face[shifted][:-1]), np.cumsum(gap[shifted][:-1])
            excess = psi - face_sums - ratio * gap_sums
            best_k = int(np.argmin(excess))
            if cost is not None:
                cost.add(n)
            if excess[best_k] >= -slack:
                break
            tight = shifted[:best_k + 1]
            ratio = float(psi[best_k] - face_sums[best_k]) / float(gap_sums[best_k])
        else:
            cycled = True
        if cycled:  # rounding noise of a small segment near position 1 (FLOAT_SLACK): the tiling, as realise keeps it
            emit(ids, tile_lows, tile_lengths, tiling, coefficient)
            continue
        ratio = max(ratio, 0.0)
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
#: about a minute at 5 million steps a second (V = 151,936, K = 4 at a root: 100 million, 20 s on one core).
#: psbv refuses a split predicted above it before starting, and stops one that runs past it (``_RealiseCost``).
MAX_DECOMPOSITION_STEPS = 300_000_000


def convex_minorant_blocks_float(weights: np.ndarray, values: np.ndarray) -> list[tuple[int, int]]:
    """``convex_minorant_blocks`` on float arrays (the same pool-adjacent rule, on Python floats)."""
    return convex_minorant_blocks(np.asarray(weights, dtype=np.float64).tolist(),
                                  np.asarray(values, dtype=np.float64).tolist(), False)


def _realise_small(arrays: MeasureArrays, ids: list, face: list, mass: list, low: float, length: float,
                   coefficient: float, values: np.ndarray, wanted: np.ndarray, windows: dict,
                   cost: _RealiseCost | None) -> None:
    """``realise_float``'s steps for a few children, all in Python floats and lists (the same arithmetic)."""
    stack = [(ids, face, mass, low, length, coefficient)]
    while stack:
        ids, face, mass, low, length, coefficient = stack.pop()
        if len(ids) == 1:
            child = ids[0]
            values[child] += coefficient * arrays.window_value(low, length)
            if wanted[child]:
                windows.setdefault(child, []).append((low, length, coefficient))
            continue
        if cost is not None:
            cost.add(len(ids))
        tile_lows, tile_lengths, tiling, share, tight, rest, low_mass, face = _small_step(
            arrays, face, mass, low, length, coefficient, cost)
        weight = coefficient * (1 - share)
        for i, child in enumerate(ids):
            values[child] += weight * tiling[i]
            if wanted[child]:
                windows.setdefault(child, []).append((tile_lows[i], tile_lengths[i], weight))
        if share == 0:
            continue
        share = coefficient * share
        stack.append(([ids[i] for i in rest], [face[i] for i in rest], [mass[i] for i in rest], low + low_mass,
                      length - low_mass, share))
        stack.append(([ids[i] for i in tight], [face[i] for i in tight], [mass[i] for i in tight], low, low_mass,
                      share))


def _small_descending(keys: list) -> list:
    """``descending_order`` of a few Python floats."""
    order = sorted(range(len(keys)), key=lambda i: -keys[i])
    for i, j in zip(order, order[1:]):
        high, low = keys[i], keys[j]
        if high != low and high - low <= TIE_RTOL * max(abs(high), abs(low)):
            return order_with_ties(np.asarray(keys), descending=True).tolist()
    return order


def _small_step(arrays: MeasureArrays, face: list, mass: list, low: float, length: float, coefficient: float,
                cost: _RealiseCost | None):
    """One step of ``realise_float`` for a few children, in Python floats: (the tiling's windows' lows, lengths
    and values, share = 1 / (1 + t) or 0 where the tiling is taken as it is, the tight set's and the rest's
    positions, the tight set's mass, the face z)."""
    n = len(face)
    order = _small_descending([f / m for f, m in zip(face, mass)])
    tile_lows, tile_lengths, tiling = [0.0] * n, [0.0] * n, [0.0] * n
    offset = 0.0
    for i in order:
        tile_lows[i], tile_lengths[i] = low + offset, min(mass[i], max(length - offset, 0.0))
        tiling[i] = arrays.window_value(tile_lows[i], tile_lengths[i])
        offset += mass[i]
    gap = [f - y for f, y in zip(face, tiling)]
    segment_value = arrays.window_value(low, length)
    slack = FLOAT_SLACK * max(abs(segment_value), 1e-300)
    largest = max(abs(g) for g in gap)
    if largest <= slack or coefficient * largest <= FLOAT_DEPTH_SLACK * abs(segment_value):
        return tile_lows, tile_lengths, tiling, 0.0, None, None, None, None
    first = max(range(n), key=lambda i: gap[i])
    tight = [first]
    ratio = (arrays.window_value(low, min(mass[first], length)) - face[first]) / gap[first]
    seen, cycled = set(), False
    for _ in range(MAX_RATIO_ITERATIONS):
        ratio = max(ratio, 0.0)
        if ratio in seen:  # a repeat cycles without end (``_ray_step``)
            cycled = True
            break
        seen.add(ratio)
        shifted = _small_descending([(f + ratio * g) / m for f, g, m in zip(face, gap, mass)])
        if cost is not None:
            cost.add(n)
        best, best_k, cut, value, difference = None, None, 0.0, 0.0, 0.0
        psi_best = None
        for k, i in enumerate(shifted[:-1]):
            cut, value, difference = cut + mass[i], value + face[i], difference + gap[i]
            psi = arrays.window_value(low, min(cut, length))
            excess = psi - value - ratio * difference
            if best is None or excess < best:
                best, best_k, psi_best, best_value, best_difference = excess, k, psi, value, difference
        if best >= -slack:
            break
        tight = shifted[:best_k + 1]
        ratio = (psi_best - best_value) / best_difference
    else:
        cycled = True
    if cycled:  # rounding noise of a small segment near position 1 (FLOAT_SLACK)
        return tile_lows, tile_lengths, tiling, 0.0, None, None, None, None
    ratio = max(ratio, 0.0)
    face = [f + ratio * g for f, g in zip(face, gap)]
    low_mass = 0.0
    for i in tight:
        low_mass += mass[i]
    tight_set = set(tight)
    return tile_lows, tile_lengths, tiling, 1 / (1 + ratio), tight, [i for i in range(n) if i not in tight_set], \
        low_mass, face
