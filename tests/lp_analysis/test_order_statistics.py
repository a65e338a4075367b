"""The extremes of K i.i.d. uniforms (``verispec.lp_analysis.order_statistics``), shared by GBV (the largest, Thomas &
Pal 2026, arXiv 2602.16961) and psbv (the smallest, docs/guides/rules_2025_26.md).

Expected values come from elsewhere than the code's power-difference form: counting the K-tuples of a grid of n
equal cells (the smallest of K uniforms lies in [i/n, j/n) exactly when the smallest of their cells, i.i.d. uniform
on range(n), is in i..j-1), the binomial expansion, and exact rational arithmetic on the float inputs.
"""

from __future__ import annotations

import itertools
import random
from fractions import Fraction
from math import comb

import numpy as np
import pytest

from verispec.lp_analysis.order_statistics import (
    largest_of_uniforms_mass,
    power_difference_quotient,
    smallest_of_uniforms_mass,
)


@pytest.mark.parametrize("draws", [1, 2, 3, 4])
@pytest.mark.parametrize("cells", [3, 5])
def test_the_extremes_match_an_enumeration_of_grid_draws(draws, cells):
    tuples = list(itertools.product(range(cells), repeat=draws))  # each K-tuple of cells has probability n^-K
    for low, high in itertools.combinations(range(cells + 1), 2):
        smallest = Fraction(sum(low <= min(t) < high for t in tuples), len(tuples))
        largest = Fraction(sum(low <= max(t) < high for t in tuples), len(tuples))
        start, stop = Fraction(low, cells), Fraction(high, cells)
        assert smallest_of_uniforms_mass(start, stop, draws) == smallest
        assert largest_of_uniforms_mass(start, stop - start, draws) == largest


@pytest.mark.parametrize("seed", range(5))
def test_the_extremes_sum_to_one_over_any_partition_and_are_binomial_sums(seed):
    rng = random.Random(seed)
    draws = rng.randint(1, 6)
    points = [Fraction(0)] + sorted({Fraction(rng.randint(1, 59), 60) for _ in range(6)}) + [Fraction(1)]
    smallest = [smallest_of_uniforms_mass(a, b, draws) for a, b in zip(points, points[1:])]
    largest = [largest_of_uniforms_mass(a, b - a, draws) for a, b in zip(points, points[1:])]
    assert sum(smallest) == 1 and sum(largest) == 1
    for (a, b), mass in zip(zip(points, points[1:]), smallest):
        # none of the K below a, at least one of them in [a, b): choose the j draws in [a, b), the rest above b
        assert mass == sum(comb(draws, j) * (b - a) ** j * (1 - b) ** (draws - j) for j in range(1, draws + 1))


@pytest.mark.parametrize("power", [1, 2, 3, 5])
def test_the_quotient_is_the_power_difference_over_the_width(power):
    rng = random.Random(power)
    for _ in range(20):
        low, high = sorted(Fraction(rng.randint(0, 40), rng.randint(1, 40)) for _ in range(2))
        quotient = power_difference_quotient(high, low, power)
        if high > low:
            assert quotient == (high ** power - low ** power) / (high - low)
        else:  # the limit: the derivative K x^(K-1)
            assert quotient == power * high ** (power - 1)


@pytest.mark.parametrize("draws", [2, 3, 8])
def test_a_thin_interval_keeps_its_digits_where_the_plain_difference_loses_them(draws):
    # an interval of width 1e-13 next to 0.75: (b^K - a^K) in float carries an error of about 1e-16 absolute,
    # a part in a thousand of the answer; the helpers stay within a few ulps (exact: rationals of the float inputs)
    low, width = 0.75, 1e-13
    high = low + width
    exact_largest = (Fraction(low) + Fraction(width)) ** draws - Fraction(low) ** draws
    exact_smallest = (1 - Fraction(low)) ** draws - (1 - Fraction(high)) ** draws
    plain = high ** draws - low ** draws
    assert abs(Fraction(plain) / exact_largest - 1) > 1e-6  # the premise: the plain form cancels
    assert abs(Fraction(largest_of_uniforms_mass(low, width, draws)) / exact_largest - 1) < 1e-14
    assert abs(Fraction(smallest_of_uniforms_mass(low, high, draws)) / exact_smallest - 1) < 1e-14


def test_arrays_are_taken_elementwise():
    # GBV calls the helpers on [N, V] arrays, psbv on Python numbers: the same numbers either way
    rng = np.random.default_rng(0)
    low = rng.uniform(0, 0.5, size=(4, 3))                                    # [N, V]
    width = rng.uniform(0, 0.5, size=(4, 3))                                  # [N, V]
    for draws in (1, 2, 4):
        largest = largest_of_uniforms_mass(low, width, draws)                 # [N, V]
        smallest = smallest_of_uniforms_mass(low, low + width, draws)         # [N, V]
        assert largest.shape == smallest.shape == (4, 3)
        for index in np.ndindex(low.shape):
            a, w = float(low[index]), float(width[index])
            assert largest[index] == pytest.approx((a + w) ** draws - a ** draws, rel=1e-12, abs=1e-15)
            assert smallest[index] == pytest.approx((1 - a) ** draws - (1 - a - w) ** draws, rel=1e-12, abs=1e-15)
