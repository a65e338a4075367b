"""The position-measure algebra psbv stands on (``verispec.lp_analysis.position_measures``; the rule is
``verispec.verifiers.psbv``, docs/guides/rules_2025_26.md).

Every expected value is derived here, in rationals, from definitions the module does not use: a measure's value is
the binomial sum P(none of the K positions below a, some in [a, b)) per piece (``binomial_value``), Psi is the value
of the lowest mass x found by walking the pieces (``lowest_mass_value``), partitions are checked by the densities at
the midpoints of every elementary interval, and the selection law of the smallest position is enumerated over which
elementary interval each drafted path lands in (``enumerated_selection``).
"""

from __future__ import annotations

import itertools
import random
from fractions import Fraction
from math import comb, factorial

import pytest

from verispec.lp_analysis.position_measures import (
    PositionMeasure,
    convex_minorant_blocks,
    ordered_tiling,
    realise,
    selection_probabilities,
    sum_measures,
)


def binomial_value(pieces, draws: int) -> Fraction:
    """The integral of the density against the density K (1 - y)^(K - 1) of the smallest of K uniforms, per piece
    [a, b) as P(none below a, j >= 1 of them in [a, b), the rest above b)."""
    return sum((d * sum(comb(draws, j) * (b - a) ** j * (1 - b) ** (draws - j) for j in range(1, draws + 1))
                for a, b, d in pieces), Fraction(0))


def lowest_mass_value(pieces, mass, draws: int) -> Fraction:
    """Psi(mass): the binomial value of the lowest ``mass`` of the measure, the pieces walked from position 0 up."""
    taken = []
    for a, b, d in pieces:
        width = min(b - a, max(mass, 0) / d)
        if width > 0:
            taken.append((a, a + width, d))
        mass -= d * (b - a)
    return binomial_value(taken, draws)


def density_at(pieces, y) -> Fraction:
    return sum((d for a, b, d in pieces if a <= y < b), Fraction(0))


def midpoints(*measures):
    """A point inside every elementary interval of the measures' common breakpoints."""
    points = sorted({x for m in measures for a, b, _ in m.pieces for x in (a, b)} | {Fraction(0), Fraction(1)})
    return [(a + b) / 2 for a, b in zip(points, points[1:])]


def assert_partition(parts, whole):
    """The densities of ``parts`` add up to ``whole``'s at every point (piecewise constant: checked at midpoints)."""
    for y in midpoints(whole, *parts):
        assert sum(density_at(part.pieces, y) for part in parts) == density_at(whole.pieces, y)


def random_measure(rng: random.Random) -> PositionMeasure:
    """Pieces on a grid of twelfths, some left out (a gap), densities in (0, 1]."""
    points = sorted(rng.sample(range(13), rng.randint(2, 6)))
    pieces = [(Fraction(a, 12), Fraction(b, 12), Fraction(rng.randint(1, 4), 4)) for a, b in zip(points, points[1:])]
    kept = [piece for piece in pieces if rng.random() < 0.75] or pieces[:1]
    return PositionMeasure(tuple(kept))


def as_float(measure: PositionMeasure) -> PositionMeasure:
    return PositionMeasure(tuple((float(a), float(b), float(d)) for a, b, d in measure.pieces))


@pytest.mark.parametrize("draws", [1, 2, 3, 5])
def test_the_uniform_measure_has_value_one_and_psi_of_the_smallest_uniform(draws):
    root = PositionMeasure.uniform(Fraction(1))
    assert root.mass() == 1 and root.value(draws) == 1  # the smallest of K uniforms is somewhere in [0, 1]
    cuts = [Fraction(k, 7) for k in range(8)]
    assert root.values_below(cuts, draws) == [1 - (1 - x) ** draws for x in cuts]  # P(smallest < x)


@pytest.mark.parametrize("seed", range(8))
def test_a_measures_mass_value_and_psi_are_its_integrals(seed):
    rng = random.Random(seed)
    measure, draws = random_measure(rng), rng.randint(1, 4)
    assert measure.mass() == sum(d * (b - a) for a, b, d in measure.pieces)
    assert measure.value(draws) == binomial_value(measure.pieces, draws)
    cuts = sorted(Fraction(rng.randint(0, 24), 24) * measure.mass() for _ in range(5))
    psi = measure.values_below(cuts, draws)
    assert psi == [lowest_mass_value(measure.pieces, cut, draws) for cut in cuts]
    # concave in the mass: the smallest position's density K (1 - y)^(K - 1) does not increase with y
    grid = [measure.mass() * Fraction(k, 12) for k in range(13)]
    steps = [b - a for a, b in itertools.pairwise(measure.values_below(grid, draws))]
    assert all(later <= earlier for earlier, later in itertools.pairwise(steps))


@pytest.mark.parametrize("seed", range(8))
def test_consecutive_windows_partition_the_measure(seed):
    rng = random.Random(seed)
    measure = random_measure(rng)
    total = measure.mass()
    cuts = sorted(Fraction(rng.randint(0, 30), 30) * total for _ in range(rng.randint(1, 4)))
    bounds = [Fraction(0), *cuts, total]
    windows = [measure.window(low, high - low) for low, high in itertools.pairwise(bounds)]
    assert [w.mass() for w in windows] == [high - low for low, high in itertools.pairwise(bounds)]
    assert_partition(windows, measure)
    assert_partition([sum_measures(windows)], measure)
    for lower, upper in itertools.pairwise(w for w in windows if w.pieces):  # stacked from position 0 up
        assert lower.pieces[-1][1] <= upper.pieces[0][0]


@pytest.mark.parametrize("draws", [1, 2, 3])
def test_a_tiling_of_the_uniform_measure_gives_each_child_its_interval(draws):
    masses = {0: Fraction(1, 2), 1: Fraction(1, 5), 2: Fraction(3, 10)}
    for order in itertools.permutations(masses):
        tiling = ordered_tiling(PositionMeasure.uniform(Fraction(1)), list(order), masses)
        assert_partition(list(tiling.values()), PositionMeasure.uniform(Fraction(1)))
        start = Fraction(0)
        for child in order:  # child takes [start, start + m): value (1 - start)^K - (1 - start - m)^K
            stop = start + masses[child]
            assert tiling[child].pieces == ((start, stop, 1),)
            assert tiling[child].value(draws) == (1 - start) ** draws - (1 - stop) ** draws
            start = stop


def _realisable_targets(segment, masses, draws, rng):
    """A random convex combination of the values of all the tilings (the vertices of the base polytope), each
    tiling's values from ``lowest_mass_value`` differences."""
    weights = [Fraction(rng.randint(0, 5)) for _ in range(factorial(len(masses)))]
    if not any(weights):
        weights[0] = Fraction(1)
    targets = dict.fromkeys(masses, Fraction(0))
    for weight, order in zip(weights, itertools.permutations(masses)):
        below = Fraction(0)
        for child in order:
            value = (lowest_mass_value(segment.pieces, below + masses[child], draws)
                     - lowest_mass_value(segment.pieces, below, draws))
            targets[child] += weight / sum(weights) * value
            below += masses[child]
    return targets


@pytest.mark.parametrize("seed", range(10))
def test_realise_partitions_the_segment_with_the_target_values(seed):
    rng = random.Random(seed)
    segment, draws = (PositionMeasure.uniform(Fraction(1)) if seed % 3 == 0 else random_measure(rng)), rng.randint(2, 3)
    cuts = sorted(rng.sample(range(1, 12), rng.randint(1, 3)))
    shares = [Fraction(b - a, 12) for a, b in itertools.pairwise([0, *cuts, 12])]
    masses = {child: share * segment.mass() for child, share in enumerate(shares)}
    targets = _realisable_targets(segment, masses, draws, rng)
    children = realise(targets, masses, segment, draws, exact=True)
    assert_partition(list(children.values()), segment)
    for child, measure in children.items():
        assert measure.mass() == masses[child]
        assert binomial_value(measure.pieces, draws) == targets[child]
    # float arithmetic on the same numbers realises the same values to 1e-12
    approximate = realise({c: float(v) for c, v in targets.items()}, {c: float(m) for c, m in masses.items()},
                          as_float(segment), draws, exact=False)
    for child, measure in approximate.items():
        assert measure.mass() == pytest.approx(float(masses[child]), abs=1e-12)
        assert measure.value(draws) == pytest.approx(float(targets[child]), abs=1e-12)


@pytest.mark.parametrize("seed", range(10))
def test_the_convex_minorant_blocks_are_the_greatest_convex_minorant(seed):
    # a convex piecewise-linear function through some of the points, under all of them, is their greatest convex
    # minorant: it is convex, and at its vertices it equals the points, above which no convex minorant goes
    rng = random.Random(seed)
    weights = [Fraction(0)]
    for _ in range(rng.randint(1, 7)):
        weights.append(weights[-1] + Fraction(rng.randint(0, 4), 4))
    values = [Fraction(rng.randint(-6, 6), 3) for _ in weights]
    blocks = convex_minorant_blocks(weights, values, exact=True)
    vertices = [blocks[0][0]] + [stop for _, stop in blocks]
    assert vertices[0] == 0 and vertices[-1] == len(values) - 1
    assert all(start < stop and start == previous for (start, stop), previous in zip(blocks, vertices))
    for i, j in blocks:
        for k in range(i, j + 1):  # every point on or above the chord of its block
            chord = (values[j] - values[i]) * (weights[k] - weights[i])
            assert (values[k] - values[i]) * (weights[j] - weights[i]) >= chord
    rises = [(values[j] - values[i], weights[j] - weights[i]) for i, j in blocks]
    for (rise, run), (next_rise, next_run) in itertools.pairwise(rises):  # slopes increase strictly
        assert rise * next_run < next_rise * run


def enumerated_selection(measures, copies):
    """P(the smallest position is one of leaf i's paths), by enumerating which elementary interval each drafted
    path's position lands in: in the lowest interval any path lands in, each of the m that landed there is the
    smallest with probability 1/m (positions i.i.d. uniform on the interval, the densities being constant there)."""
    points = sorted({x for m in measures for a, b, _ in m.pieces for x in (a, b)})
    intervals = list(itertools.pairwise(points))
    drawn = [leaf for leaf, count in enumerate(copies) for _ in range(count)]
    totals = [Fraction(0)] * len(measures)
    for landing in itertools.product(range(len(intervals)), repeat=len(drawn)):
        probability = Fraction(1)
        for leaf, index in zip(drawn, landing):
            a, b = intervals[index]
            probability *= density_at(measures[leaf].pieces, (a + b) / 2) * (b - a) / measures[leaf].mass()
        if probability:
            lowest = [leaf for leaf, index in zip(drawn, landing) if index == min(landing)]
            for leaf in lowest:
                totals[leaf] += probability / len(lowest)
    return totals


@pytest.mark.parametrize("seed", range(8))
def test_the_selection_law_matches_an_enumeration_of_landings(seed):
    rng = random.Random(seed)
    leaves = rng.randint(1, 3)
    measures = [random_measure(rng) for _ in range(leaves)]
    copies = [rng.randint(1, 2) for _ in range(leaves)][:leaves]
    while sum(copies) > 3:
        copies[copies.index(max(copies))] -= 1
    chosen = selection_probabilities(measures, copies)
    assert chosen == enumerated_selection(measures, copies)
    assert sum(chosen) == 1
    approximate = selection_probabilities([as_float(m) for m in measures], copies)
    assert approximate == pytest.approx([float(x) for x in chosen], abs=1e-12)


@pytest.mark.parametrize("draws", [1, 2, 3])
def test_paths_drawn_from_q_select_each_child_with_its_value(draws):
    # the positions' lemma at the root: children of masses q(c) share the uniform measure, the K drafted paths are
    # drawn from q, so their positions are i.i.d. uniform and P(the smallest position is on child c) is the value
    # of nu_c: summed over the multinomial draft outcomes, the selection law gives exactly binomial_value(nu_c)
    q = [Fraction(1, 2), Fraction(1, 3), Fraction(1, 6)]
    masses = dict(enumerate(q))
    root = PositionMeasure.uniform(Fraction(1))
    rng = random.Random(draws)
    for children in (ordered_tiling(root, [2, 0, 1], masses),
                     realise(_realisable_targets(root, masses, draws, rng), masses, root, draws, exact=True)):
        selected = [Fraction(0)] * len(q)
        for outcome in itertools.product(range(len(q)), repeat=draws):
            probability = Fraction(1)
            for token in outcome:
                probability *= q[token]
            leaves = sorted(set(outcome))
            chosen = selection_probabilities([children[c] for c in leaves], [outcome.count(c) for c in leaves])
            for leaf, chance in zip(leaves, chosen):
                selected[leaf] += probability * chance
        assert selected == [binomial_value(children[c].pieces, draws) for c in range(len(q))]
