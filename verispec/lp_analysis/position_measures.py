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
import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from verispec.errors import VerifierError
from verispec.lp_analysis.order_statistics import smallest_of_uniforms_mass
from verispec.simulator.ranking import TIE_RTOL, order_with_ties

#: In float arithmetic, a tiling whose values are within this fraction of its segment's value of the targets is
#: taken as it is (exact arithmetic uses 0). Positions near 1 carry about 1e-16 absolute, so a small segment there
#: knows its values to far fewer digits: where the minimum-ratio search cannot settle, a float realisation keeps the
#: tiling. Either way the rule stays lossless, because block verification uses the values the measures realise, not
#: the targets.
FLOAT_SLACK = 1e-9

#: In float arithmetic, the minimum-ratio search (Dinkelbach's iteration) stops where no prefix falls below the
#: current ratio by more than this fraction of the segment's value, or where the ratio stops decreasing (rounding).
#: Not FLOAT_SLACK: a ratio that overshoots the minimum by 1e-9 of the segment leaves the face z outside the
#: polytope by as much; children whose face is near 0 (a tail token at the top of the segment) then go negative,
#: and every later step of the block finds a tight single child at t = 0 and peels it, one child per step at no
#: decay. At real T = 1 roots of the Qwen pair (V = 151,936, K = 2) that took 350 to 530 million child-steps
#: (20 s) and left the values 1e-9 (L1) off the targets; stopped here, 30 to 45 million and 1e-13.
FLOAT_RATIO_SLACK = 1e-13

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
    """Indices of ``keys`` by decreasing key, ties (verispec.simulator.ranking's rule) by increasing index. Floats
    are sorted in Python (a few keys: numpy's per-call cost would dominate), the tie rule itself taken only where
    two neighbours are within its tolerance but unequal (equal keys already keep their index order: the sort is
    stable)."""
    if len(keys) < 2:
        return list(range(len(keys)))
    if not exact:
        order = sorted(range(len(keys)), key=lambda i: -keys[i])
        for i, j in zip(order, order[1:]):
            high, low = keys[i], keys[j]
            if high != low and high - low <= TIE_RTOL * max(abs(high), abs(low)):
                return [int(k) for k in order_with_ties(np.asarray(keys, dtype=np.float64), descending=True)]
        return order
    array = np.empty(len(keys), dtype=object)
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
    t / (1 + t), and of its last segment (``realise_steps``). ``realise_float`` is the same in numpy, for float splits
    at large vocabularies."""
    parts = {c: [] for c in targets}  # child -> [(measure, coefficient)]
    realise_steps(targets, masses, segment, paths, exact, lambda child, part, w: parts[child].append((part, w)))
    return {c: sum_measures([m.scaled(w) for m, w in parts[c] if w > 0]) if len(parts[c]) > 1 else
            parts[c][0][0].scaled(parts[c][0][1]) if parts[c][0][1] != 1 else parts[c][0][0] for c in targets}


def realise_steps(targets: dict, masses: dict, segment, paths: int, exact: bool, emit, weight=None,
                  cost=None) -> None:
    """``realise``'s ray shooting, handing each child's parts to ``emit(child, part, coefficient)``: its tilings'
    windows and its last segment. ``segment`` is anything with ``value(paths)``, ``values_below(cuts, paths)``,
    ``window(low, length)`` and ``mass()``: a ``PositionMeasure``, or a window of a float measure's arrays
    (``position_arrays``, whose few-children blocks run here). ``weight``: the block's own coefficient (1 when
    None); ``cost``: counts the child-steps (``position_arrays._RealiseCost``)."""
    stack = [(list(targets), dict(targets), segment, segment.value(paths) * 0 + 1 if weight is None else weight)]
    while stack:
        children, face, part, weight = stack.pop()
        step = _ray_step(children, face, masses, part, paths, exact, weight, cost)
        if step is None:  # one child: the whole segment
            emit(children[0], part, weight)
            continue
        tiling, share, tight, rest, low_mass, face = step
        for child in children:
            emit(child, tiling[child], weight * (1 - share))
        if share == 0:  # the tiling realises the targets (to the float slack)
            continue
        stack.append((rest, {c: face[c] for c in rest}, part.window(low_mass, part.mass()), weight * share))
        stack.append((tight, {c: face[c] for c in tight}, part.window(0, low_mass), weight * share))


def balanced_face(face, masses, segment_value: float):
    """A float face moved to add up to its segment's value, the difference shared in proportion to mass (every
    ratio face / mass moves by the same amount: the order, hence the tiling, stays). Exact faces add up already;
    a float one is off by rounding, and each step's z = v + t (v - y) multiplies what its sub-steps inherit of
    that by 1 + t (about 2), so along a block's long chain of steps the faces, unbalanced, drifted outside the
    polytope (real T = 1 roots of the Qwen pair: a sum off by 36 times the segment's value, then one child peeled
    per step at t = 0 for the rest of the block). Lists of Python floats (the reference, which also runs the float
    path's few-children blocks) or float arrays (``realise_float``), either returned in kind."""
    if isinstance(face, np.ndarray):
        return face + (segment_value - float(np.sum(face))) / float(np.sum(masses)) * masses
    total = 0.0
    for value in face:
        total += value
    mass_total = 0.0
    for mass in masses:
        mass_total += mass
    shift = (segment_value - total) / mass_total
    return [value + shift * mass for value, mass in zip(face, masses)]


def _ray_step(children: list, targets: dict, masses: dict, segment, paths: int, exact: bool, weight, cost=None):
    """One step of ``realise``: None for one child; else (the tiling, share = 1 / (1 + t), the tight set, the rest,
    the tight set's mass, the face z), share 0 where the tiling is taken as it is."""
    if len(children) == 1:
        return None
    if cost is not None:
        cost.add(len(children))
    zero = segment.value(paths) * 0
    if not exact:
        balanced = balanced_face([targets[c] for c in children], [masses[c] for c in children],
                                 segment.value(paths))
        targets = dict(zip(children, balanced))
    order = [children[i] for i in ordered_by_key([targets[c] / masses[c] for c in children], exact)]
    tiling = ordered_tiling(segment, order, masses)
    gap = {c: targets[c] - tiling[c].value(paths) for c in children}
    slack = 0 if exact else FLOAT_SLACK * max(abs(segment.value(paths)), 1e-300)
    largest = max(abs(value) for value in gap.values())
    if largest <= slack or (not exact and weight * largest <= FLOAT_DEPTH_SLACK * abs(segment.value(paths))):
        return tiling, zero, None, None, None, None
    search_slack = 0 if exact else FLOAT_RATIO_SLACK * max(abs(segment.value(paths)), 1e-300)
    first = max(children, key=lambda c: gap[c])
    tight, ratio = [first], (segment.values_below([masses[first]], paths)[0] - targets[first]) / gap[first]
    ratio, cycled = max(ratio, zero), False
    for _ in range(MAX_RATIO_ITERATIONS):
        shifted = [children[i]
                   for i in ordered_by_key([(targets[c] + ratio * gap[c]) / masses[c] for c in children], exact)]
        if cost is not None:
            cost.add(len(children))
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
        if best >= -search_slack:
            break
        prefix = shifted[:best_k + 1]
        lower = max((psi[best_k] - sum((targets[c] for c in prefix), zero)) / sum((gap[c] for c in prefix), zero),
                    zero)
        if not lower < ratio:  # exact: the ratio falls at every iteration; float: rounding stopped it, settled
            break
        tight, ratio = prefix, lower
    else:
        cycled = True
    if cycled:
        if not exact:  # rounding noise of a small segment near position 1 (FLOAT_SLACK)
            return tiling, zero, None, None, None, None
        raise VerifierError("psbv: the decomposition's minimum-ratio search did not converge")
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
    probabilities of a position above the interval's start (polynomials in s, integrated exactly).

    Each factor is written S_j (1 - t) + E_j t, t = s / h, with E_j = S_j - f_j h >= 0 the survival at the
    interval's end, and the product kept in that basis (Bernstein's, ``_linear_product_integral``): every
    coefficient is a sum of products of non-negative numbers, so floats lose no digits to cancellation. Expanded in
    powers of s instead, the coefficients of (S - f s)^(K - 1) alternate in sign and grow as binomials (C(49, 24)
    ~ 6e13 at K = 50): float laws of delayed:50,1,1 trees summed to 1.04 where the rationals give 1."""
    masses = [m.mass() for m in measures]
    zero = masses[0] * 0
    totals = [zero] * len(measures)
    survival = [mass / mass if mass > 0 else zero + 1 for mass in masses]  # an empty measure never lands
    for start, stop, densities in elementary_intervals(measures):
        width = stop - start
        rates = [d / mass if mass > 0 else zero for d, mass in zip(densities, masses)]
        # survival at the interval's end; rounding can take a float one below its true value 0
        ends = [s - r * width for s, r in zip(survival, rates)]
        ends = [e if e > 0 else zero for e in ends]
        for i in range(len(measures)):
            if rates[i] == 0:
                continue
            counts = [count - (1 if j == i else 0) for j, count in enumerate(copies)]
            integral = _linear_product_integral(survival, ends, counts, zero)
            totals[i] = totals[i] + width * copies[i] * rates[i] * integral
        survival = ends
    return totals


def _linear_product_integral(lows: list, highs: list, counts: list[int], zero):
    """The integral over t in [0, 1] of prod_j (lows_j (1 - t) + highs_j t)^(counts_j), for lows and highs >= 0.

    Floats keep the product in Bernstein's form sum_b d_b C(n, b) (1 - t)^(n - b) t^b: a factor takes d to
    d'_b = ((n + 1 - b) d_b low + b d_(b-1) high) / (n + 1), a mean of non-negative terms (nothing cancels, nothing
    leaves the float range at any n), and the integral is the mean of the d_b. Rationals keep
    sum_b c_b (1 - t)^(n - b) t^b, brought to one denominator and multiplied as integers (Fractions would reduce
    every product by a gcd of growing numbers), and integrate each term to b! (n - b)! / (n + 1)!, divided once."""
    factors = [(low, high) for low, high, count in zip(lows, highs, counts) for _ in range(count)]
    degree = len(factors)
    if isinstance(zero, float):
        bernstein = [1.0]
        for n, (low, high) in enumerate(factors):
            bernstein = [((n + 1 - b) * (bernstein[b] * low if b <= n else 0.0)
                          + b * (bernstein[b - 1] * high if b >= 1 else 0.0)) / (n + 1) for b in range(n + 2)]
        return math.fsum(bernstein) / (degree + 1)
    scale = math.lcm(*(Fraction(x).denominator for pair in factors for x in pair)) if factors else 1
    coefficients = [1]
    for low, high in factors:
        coefficients = _times_linear(coefficients, int(low * scale), int(high * scale), 0)
    total = sum(c * math.factorial(b) * math.factorial(degree - b) for b, c in enumerate(coefficients))
    return zero + Fraction(total, math.factorial(degree + 1) * scale ** degree)


def _times_linear(coefficients: list, low, high, zero) -> list:
    """The product of sum_b c_b (1 - t)^(n - b) t^b and low (1 - t) + high t, in the same basis (degree n + 1)."""
    return [(coefficients[b] * low if b < len(coefficients) else zero)
            + (coefficients[b - 1] * high if b >= 1 else zero) for b in range(len(coefficients) + 1)]
