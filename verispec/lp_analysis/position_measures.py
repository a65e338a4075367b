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
* *selection law*: P(the smallest of the drafted paths' positions is on leaf i), for leaves with any measures and
  any numbers of copies (``selection_probabilities``), an integral of piecewise polynomials, exact in rationals.

Numbers are floats or Fractions (exact mode) throughout; Fractions give every result exactly.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from verispec.errors import VerifierError
from verispec.lp_analysis.order_statistics import smallest_of_uniforms_mass
from verispec.simulator.ranking import order_with_ties

#: In float arithmetic, a tiling whose values are within this fraction of its segment's value of the targets is
#: taken as it is (exact arithmetic uses 0); also the slack of the decomposition's minimum-ratio search. Positions
#: near 1 carry about 1e-16 absolute, so a small segment there knows its values to far fewer digits: where the
#: search cannot settle, a float realisation keeps the tiling. Either way the rule stays lossless, because block
#: verification uses the values the measures realise, not the targets.
FLOAT_SLACK = 1e-9

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
    the face where its tight set C takes the lowest m(C) of the segment: z is realised recursively on the two
    sub-segments, and v = z / (1 + t) + y t / (1 + t)."""
    children = list(targets)
    if len(children) == 1:
        return {children[0]: segment}
    zero = segment.value(paths) * 0
    order = [children[i] for i in ordered_by_key([targets[c] / masses[c] for c in children], exact)]
    tiling = ordered_tiling(segment, order, masses)
    gap = {c: targets[c] - tiling[c].value(paths) for c in children}
    slack = 0 if exact else FLOAT_SLACK * max(abs(segment.value(paths)), 1e-300)
    if max(abs(value) for value in gap.values()) <= slack:
        return tiling
    first = max(children, key=lambda c: gap[c])
    tight, ratio = [first], (segment.values_below([masses[first]], paths)[0] - targets[first]) / gap[first]
    for _ in range(MAX_RATIO_ITERATIONS):
        ratio = max(ratio, zero)
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
        if not exact:  # rounding noise of a small segment near position 1 (FLOAT_SLACK)
            return tiling
        raise VerifierError("psbv: the decomposition's minimum-ratio search did not converge")
    ratio = max(ratio, zero)
    face = {c: targets[c] + ratio * gap[c] for c in children}
    low_mass = sum((masses[c] for c in tight), zero)
    rest = [c for c in children if c not in tight]
    part = realise({c: face[c] for c in tight}, masses, segment.window(0, low_mass), paths, exact)
    part.update(realise({c: face[c] for c in rest}, masses, segment.window(low_mass, segment.mass()), paths, exact))
    share = 1 / (1 + ratio)
    return {c: sum_measures([part[c].scaled(share), tiling[c].scaled(1 - share)]) for c in children}


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
    intervals = []
    for start, stop in zip(points, points[1:]):
        densities = []
        for m in measures:
            d = 0
            for a, b, density in m.pieces:
                if a <= start and stop <= b:
                    d = density
                    break
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
