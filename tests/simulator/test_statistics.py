"""verispec.statistics: the exact binomial goodness-of-fit test with a Bonferroni correction."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest

from verispec.errors import VerispecError
from verispec.statistics import exact_binomial_test


def test_the_p_value_is_the_exact_binomial_tail_times_the_bins():
    # Fair coin, 60 heads in 100: the two-sided exact p-value is 2 P(X >= 60), summed here by hand; both bins
    # have it, and the Bonferroni factor is 2.
    tail = sum(math.comb(100, k) for k in range(60, 101)) / 2**100
    result = exact_binomial_test({"H": 60, "T": 40}, {"H": 0.5, "T": 0.5}, alpha=0.01)
    assert result.bins == 2 and not result.rejected
    assert result.adjusted_p == pytest.approx(2 * (2 * tail), rel=1e-9)
    assert result.chi_square == pytest.approx((60 - 50) ** 2 / 50 + (40 - 50) ** 2 / 50)


def test_rare_outcomes_share_one_bin_and_impossible_ones_reject_at_once():
    law = {0: 0.9, 1: 0.06, 2: 0.03, 3: 0.01, 4: 0.0}
    result = exact_binomial_test({0: 90, 1: 6, 2: 3, 3: 1}, law)  # 100 samples: 2 and 3 expect < 5: pooled
    assert result.bins == 3 and not result.rejected
    impossible = exact_binomial_test({0: 99, 4: 1}, law)
    assert impossible.rejected and impossible.adjusted_p == 0 and impossible.worst_bin == 4


def test_the_false_failure_rate_holds_on_correct_samples():
    """400 seeded samples of size 300 from the law itself, tested at alpha = 0.05: the exact test with the
    Bonferroni correction is conservative, so it rejects at most 5% of them (here: far fewer)."""
    law = dict(enumerate([0.4, 0.25, 0.15, 0.1, 0.05, 0.03, 0.02]))
    rng = np.random.default_rng(11)
    rejections = sum(exact_binomial_test(Counter(rng.choice(7, size=300, p=list(law.values())).tolist()), law,
                                         alpha=0.05).rejected for _ in range(400))
    assert rejections <= 20


def test_a_wrong_sampler_is_caught_at_one_in_a_million():
    law = dict(enumerate([0.4, 0.3, 0.2, 0.1]))
    wrong = [0.3, 0.35, 0.25, 0.1]  # total variation 0.1
    counts = Counter(np.random.default_rng(5).choice(4, size=3000, p=wrong).tolist())
    result = exact_binomial_test(counts, law, alpha=1e-6)
    assert result.rejected, result.describe()


@pytest.mark.parametrize("counts,law,message", [
    ({0: 1}, {0: 0.5, 1: 0.4}, "sum to 1"),
    ({0: 1}, {0: 1.5, 1: -0.5}, "non-negative"),
    ({}, {0: 1.0}, "no samples"),
])
def test_bad_input_is_a_one_line_error(counts, law, message):
    with pytest.raises(VerispecError, match=message):
        exact_binomial_test(counts, law)


def test_alpha_must_be_a_probability():
    with pytest.raises(VerispecError, match="alpha"):
        exact_binomial_test({0: 1}, {0: 1.0}, alpha=0)
