"""The generic enumerator and the random chooser, on procedures whose laws are known by hand."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from verispec.errors import EnumerationTooLargeError, InvalidDistributionError
from verispec.simulator.chooser import RandomChooser, enumerate_law


def two_coins(chooser):
    return chooser.bernoulli(0.25), chooser.bernoulli(0.5)


def test_product_of_independent_choices():
    law = enumerate_law(two_coins)
    assert law == pytest.approx({(True, True): 0.125, (True, False): 0.125, (False, True): 0.375,
                                 (False, False): 0.375})


def test_outcomes_are_summed_over_traces():
    # number of heads in three fair flips: binomial(3, 1/2) = 1/8, 3/8, 3/8, 1/8
    law = enumerate_law(lambda c: sum(c.bernoulli(Fraction(1, 2)) for _ in range(3)), exact=True)
    assert law == {0: Fraction(1, 8), 1: Fraction(3, 8), 2: Fraction(3, 8), 3: Fraction(1, 8)}


def test_data_dependent_control_flow():
    # geometric number of failures before a success (p = 1/3), truncated at 4 tries
    def geometric(chooser):
        for tries in range(4):
            if chooser.bernoulli(Fraction(1, 3)):
                return tries
        return "none"

    law = enumerate_law(geometric, exact=True)
    expected = {k: Fraction(2, 3) ** k * Fraction(1, 3) for k in range(4)}
    expected["none"] = Fraction(2, 3) ** 4
    assert law == expected


def test_zero_probability_options_are_never_taken():
    def procedure(chooser):
        index = chooser.categorical([0.0, 0.5, 0.0, 0.5])
        assert index in (1, 3)
        return index

    assert enumerate_law(procedure) == {1: 0.5, 3: 0.5}
    assert enumerate_law(lambda c: c.bernoulli(1.0)) == {True: 1.0}
    assert enumerate_law(lambda c: c.bernoulli(0)) == {False: 1.0}


def test_too_many_traces():
    with pytest.raises(EnumerationTooLargeError):
        enumerate_law(lambda c: tuple(c.categorical([0.5, 0.5]) for _ in range(12)), max_traces=1000)


@pytest.mark.parametrize("probs,message", [
    ([0.5, 0.6], "sum"), ([1.5, -0.5], "negative"), ([float("nan"), 1.0], "NaN"), ([], "empty")])
def test_invalid_categorical(probs, message):
    with pytest.raises(InvalidDistributionError, match=message):
        enumerate_law(lambda c: c.categorical(probs))
    with pytest.raises(InvalidDistributionError, match=message):
        RandomChooser(np.random.default_rng(0)).categorical(probs)


@pytest.mark.parametrize("prob", [1.5, -0.1, float("nan"), Fraction(3, 2)])
def test_invalid_bernoulli(prob):
    with pytest.raises(InvalidDistributionError):
        enumerate_law(lambda c: c.bernoulli(prob))


def test_bernoulli_tolerates_float_rounding():
    assert enumerate_law(lambda c: c.bernoulli(1 + 1e-15)) == {True: 1.0}


def test_random_chooser_frequencies():
    # 200_000 draws of a 4-way categorical; each count is within 6 standard deviations of its mean
    # (two-sided normal tail 2e-9 per cell, so a false failure has probability below 1e-8).
    rng = np.random.default_rng(12345)
    chooser = RandomChooser(rng)
    probs = np.array([0.1, 0.0, 0.6, 0.3])
    draws = 200_000
    counts = np.bincount([chooser.categorical(probs) for _ in range(draws)], minlength=4)
    assert counts[1] == 0
    sigma = np.sqrt(draws * probs * (1 - probs))
    assert np.all(np.abs(counts - draws * probs) <= 6 * sigma + 1e-9), counts


def test_random_chooser_is_reproducible():
    a = [RandomChooser(np.random.default_rng(7)).categorical([0.2, 0.3, 0.5]) for _ in range(5)]
    b = [RandomChooser(np.random.default_rng(7)).categorical([0.2, 0.3, 0.5]) for _ in range(5)]
    assert a == b


def _full_vector_inverse_cdf(values: np.ndarray, uniform: float) -> int:
    """The inverse-CDF draw over the whole vector (the rule before laws were prepared over their support), written
    out here as the reference: the first index whose running sum exceeds uniform x total, stepping back off zeros."""
    cumulative = np.cumsum(values)
    index = min(int(np.searchsorted(cumulative, uniform * cumulative[-1], side="right")), len(values) - 1)
    while values[index] == 0:
        index -= 1
    return index


def test_a_prepared_law_draws_the_index_the_whole_vector_draws():
    """``PreparedCategorical`` searches the running sums of the support only; for every uniform (random ones, those
    exactly at each running sum, and the largest below 1) it picks the index the whole-vector inverse CDF picks,
    on sparse vectors with zeros first, last and between, and a dense one."""
    from verispec.simulator.chooser import PreparedCategorical

    rng = np.random.default_rng(5)
    vectors = []
    for size, kept in [(50, 3), (1000, 20), (7, 7), (151_936, 20)]:
        values = np.zeros(size)
        where = rng.choice(size, kept, replace=False)
        values[where] = rng.dirichlet(np.ones(kept))
        vectors.append(values)
    vectors.append(np.array([0.0, 0.0, 1.0]))
    for values in vectors:
        prepared = PreparedCategorical(values)
        cumulative = np.cumsum(values)
        uniforms = list(rng.random(2000)) + [float(c / cumulative[-1]) for c in np.unique(cumulative)
                                             if c < cumulative[-1]] + [0.0, float(np.nextafter(1.0, 0.0))]
        for uniform in uniforms:
            assert prepared.index(uniform) == _full_vector_inverse_cdf(values, uniform)
    # the chooser takes a prepared law and a plain one alike: the same draws from the same generator
    plain = RandomChooser(np.random.default_rng(3))
    prepared = RandomChooser(np.random.default_rng(3))
    law = PreparedCategorical(vectors[1])
    assert [plain.categorical(vectors[1]) for _ in range(300)] == [prepared.categorical(law) for _ in range(300)]
    with pytest.raises(InvalidDistributionError, match="sum to"):
        PreparedCategorical(np.zeros(4))


def test_a_prepared_compact_law_draws_what_the_whole_vector_draws():
    """``PreparedCategorical.from_compact`` (a law's support and values, no [V] vector) picks, for every uniform, the
    index the whole vector's inverse CDF picks: on supports given in ascending order, shuffled, with a zero value
    kept, and dense (support None); a support and values that do not pair up, an index named twice and a law
    that does not sum to 1 are refused on one line."""
    from verispec.simulator.chooser import PreparedCategorical

    rng = np.random.default_rng(11)
    for size, kept in [(50, 3), (1000, 20), (151_936, 20), (9, 9)]:
        values = np.zeros(size)
        where = np.sort(rng.choice(size, kept, replace=False))
        values[where] = rng.dirichlet(np.ones(kept))
        cumulative = np.cumsum(values)
        uniforms = list(rng.random(500)) + [float(c / cumulative[-1]) for c in np.unique(cumulative)
                                            if c < cumulative[-1]] + [0.0, float(np.nextafter(1.0, 0.0))]
        shuffled = rng.permutation(kept)
        with_zero = np.append(where, np.setdiff1d(np.arange(size), where)[:1])
        for law in (PreparedCategorical.from_compact(where, values[where]),
                    PreparedCategorical.from_compact(where[shuffled], values[where][shuffled]),
                    PreparedCategorical.from_compact(with_zero, values[with_zero]),
                    PreparedCategorical.from_compact(None, values)):
            whole = PreparedCategorical(values)
            assert np.array_equal(law.support, whole.support) and np.array_equal(law.cumulative, whole.cumulative)
            for uniform in uniforms[:50]:
                assert law.index(uniform) == _full_vector_inverse_cdf(values, uniform)
    for support, values, words in (([1, 2], [1.0], "one length"), ([3, 3], [0.5, 0.5], "index twice"),
                                   ([0, 4], [0.5, 0.25], "sum to")):
        with pytest.raises(InvalidDistributionError, match=words) as error:
            PreparedCategorical.from_compact(np.array(support), np.array(values))
        assert "\n" not in str(error.value)
