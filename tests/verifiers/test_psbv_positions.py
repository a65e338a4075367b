"""psbv's splits (``verispec.verifiers.psbv_split.split``) keep the position lemma the rule stands on
(docs/guides/rules_2025_26.md): at every node the children's measures partition the parent's, so a path drawn from
q has a uniform position, and the smallest of K such positions lands on a path x with probability g(x), the value of
its measure. Checked exactly in rationals on random conditionals, with expected values from the definitions
(``tests/lp_analysis/test_position_measures.py``'s binomial integral and midpoint densities), and in float to 1e-12.
"""

from __future__ import annotations

import itertools
import random
from fractions import Fraction

import pytest

from tests.lp_analysis.test_position_measures import assert_partition, binomial_value, density_at
from verispec.lp_analysis.position_measures import PositionMeasure, selection_probabilities
from verispec.verifiers.psbv_split import split


def random_conditional(rng: random.Random, size: int, zeros: bool) -> list[Fraction]:
    weights = [rng.randint(0 if zeros else 1, 6) for _ in range(size)]
    if not any(weights):
        weights[rng.randrange(size)] = 1
    return [Fraction(w, sum(weights)) for w in weights]


def split_tree(size: int, depth: int, paths: int, seed: int):
    """Every prefix's (p, q), position measure and value, splitting top down from the uniform root measure."""
    rng = random.Random(seed)
    conditionals = {u: (random_conditional(rng, size, True), random_conditional(rng, size, True))
                    for length in range(depth) for u in itertools.product(range(size), repeat=length)}
    measures, values, splits = {(): PositionMeasure.uniform(Fraction(1))}, {(): Fraction(1)}, {}
    for length in range(depth):
        for u in itertools.product(range(size), repeat=length):
            if u in measures:
                p, q = conditionals[u]
                splits[u] = split(measures[u], p, q, paths, exact=True)
                child_values, child_measures = splits[u]
                for token, measure in child_measures.items():
                    measures[u + (token,)], values[u + (token,)] = measure, child_values[token]
    return conditionals, measures, values, splits


@pytest.mark.parametrize("paths", [1, 2, 3])
@pytest.mark.parametrize("seed", range(4))
def test_the_children_partition_their_parents_measure_and_value(paths, seed):
    conditionals, measures, values, splits = split_tree(3, 2, paths, seed)
    for u, (child_values, child_measures) in splits.items():
        q = conditionals[u][1]
        assert set(child_measures) == {c for c in range(3) if q[c] > 0}
        assert all(child_values[c] == 0 for c in range(3) if q[c] == 0)
        assert_partition(list(child_measures.values()), measures[u])
        for token, measure in child_measures.items():
            assert measure.mass() == measures[u].mass() * q[token]  # q(u c) = q(u) q(c | u)
            assert child_values[token] == binomial_value(measure.pieces, paths)
        assert sum(child_values) == binomial_value(measures[u].pieces, paths) == values[u]


@pytest.mark.parametrize("paths", [1, 2, 3])
@pytest.mark.parametrize("seed", range(3))
def test_a_path_drawn_from_q_has_a_uniform_position(paths, seed):
    # P(position in [a, b)) = sum over paths x of q(x) * nu_x([a, b)) / q(x), integrated exactly piece by piece
    _, measures, _, _ = split_tree(3, 3, paths, seed)
    leaves = [measure for u, measure in measures.items() if len(u) == 3]
    rng = random.Random(seed)
    for _ in range(10):
        a, b = sorted(Fraction(rng.randint(0, 97), 97) for _ in range(2))
        inside = sum(d * max(Fraction(0), min(stop, b) - max(start, a)) for m in leaves for start, stop, d in m.pieces)
        assert inside == b - a
    for y in [Fraction(k, 31) for k in range(31)]:  # given its position y, the path is x with probability nu_x(y)
        assert sum(density_at(m.pieces, y) for m in leaves) == 1


@pytest.mark.parametrize("paths", [2, 3])
def test_the_smallest_of_k_drafted_positions_selects_each_path_with_its_value(paths):
    # summed over the (V^L)^K draft outcomes of K i.i.d. paths drawn from q, the selection law of the smallest
    # position gives each path x exactly g(x) = binomial_value(nu_x): the lemma behind psbv's rule DP
    size, depth = 2, 2
    conditionals, measures, _, _ = split_tree(size, depth, paths, seed=7)
    full = [u for u in itertools.product(range(size), repeat=depth) if u in measures]

    def draft_probability(x):
        return Fraction(1) if not x else draft_probability(x[:-1]) * conditionals[x[:-1]][1][x[-1]]

    selected = dict.fromkeys(full, Fraction(0))
    for outcome in itertools.product(full, repeat=paths):
        probability = Fraction(1)
        for x in outcome:
            probability *= draft_probability(x)
        leaves = sorted(set(outcome))
        chosen = selection_probabilities([measures[x] for x in leaves], [outcome.count(x) for x in leaves])
        for x, chance in zip(leaves, chosen):
            selected[x] += probability * chance
    assert selected == {x: binomial_value(measures[x].pieces, paths) for x in full}


@pytest.mark.parametrize("seed", range(6))
def test_float_splits_agree_with_exact_ones(seed):
    rng = random.Random(seed)
    size, paths = rng.randint(2, 5), rng.randint(1, 4)
    p, q = random_conditional(rng, size, True), random_conditional(rng, size, True)
    values, measures = split(PositionMeasure.uniform(Fraction(1)), p, q, paths, exact=True)
    approximate, approximate_measures = split(PositionMeasure.uniform(1.0), [float(x) for x in p],
                                              [float(x) for x in q], paths, exact=False)
    assert approximate == pytest.approx([float(v) for v in values], abs=1e-12)
    assert set(approximate_measures) == set(measures)
    for token, measure in measures.items():
        assert approximate_measures[token].mass() == pytest.approx(float(measure.mass()), abs=1e-12)
