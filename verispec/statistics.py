"""Goodness-of-fit tests of sampled outcomes against an exact law, with a guaranteed false-failure rate.

Used wherever verispec checks sampled output (real decoding against the target's exact law): the
decision must fail a correct sampler with probability at most ``alpha`` (1e-6 in the tests), whatever the
law and the sample size, and must catch a wrong one.

``exact_binomial_test`` decides with exact per-bin binomial tests and a Bonferroni correction. Outcomes are
grouped into bins (each outcome with expected count >= ``min_expected`` is its own bin; the rest share one
pooled bin). For every bin the count is Binomial(n, P(bin)) under the null, and the two-sided exact
binomial p-value is valid (P(p-value <= a) <= a for every a); rejecting when the smallest p-value is at
most alpha / (number of bins) therefore fails a correct sampler with probability at most alpha (union
bound), with no large-sample approximation. Pearson's chi-square p-value over the same bins is reported
beside it for reference (its tail at 1e-6 rests on the asymptotic chi-square law, so it does not decide).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass

from verispec.errors import VerispecError

#: Default false-failure rate of a decision on sampled output.
DEFAULT_ALPHA = 1e-6


@dataclass(frozen=True)
class FitResult:
    """The outcome of a goodness-of-fit test."""

    samples: int
    bins: int
    #: Smallest exact two-sided binomial p-value over the bins, times the number of bins (capped at 1).
    adjusted_p: float
    #: Pearson's chi-square statistic and its asymptotic p-value over the same bins (reference only).
    chi_square: float
    chi_square_p: float
    alpha: float
    #: The bin with the smallest p-value and its observed and expected counts.
    worst_bin: Hashable
    worst_observed: int
    worst_expected: float

    @property
    def rejected(self) -> bool:
        """True when the sample is incompatible with the law at false-failure rate ``alpha``."""
        return self.adjusted_p <= self.alpha

    def describe(self) -> str:
        return (f"{self.samples} samples in {self.bins} bins: Bonferroni-adjusted exact binomial p = "
                f"{self.adjusted_p:.3g} (reject at <= {self.alpha:g}), chi-square {self.chi_square:.1f} with "
                f"p = {self.chi_square_p:.3g}; worst bin {self.worst_bin!r}: {self.worst_observed} observed, "
                f"{self.worst_expected:.1f} expected")


def exact_binomial_test(counts: Mapping[Hashable, int], law: Mapping[Hashable, float], *,
                        alpha: float = DEFAULT_ALPHA, min_expected: float = 5.0) -> FitResult:
    """Test observed ``counts`` of outcomes against the exact ``law`` (outcome -> probability; outcomes absent
    from the law have probability 0). An outcome of probability 0 that was observed rejects at once
    (p-value 0). See the module docstring for the guarantee."""
    from scipy import stats

    if not 0 < alpha < 1:
        raise VerispecError(f"alpha must lie in (0, 1), got {alpha!r}")
    total = sum(float(v) for v in law.values())
    if abs(total - 1) > 1e-9 or any(float(v) < 0 for v in law.values()):
        raise VerispecError(f"the law must be non-negative and sum to 1, it sums to {total!r}")
    samples = int(sum(counts.values()))
    if samples < 1:
        raise VerispecError("no samples to test")
    impossible = [outcome for outcome, count in counts.items() if count > 0 and float(law.get(outcome, 0)) == 0]
    bins: dict[Hashable, tuple[int, float]] = {}
    pooled_count, pooled_probability = 0, 0.0
    for outcome, probability in law.items():
        probability = float(probability)
        if probability == 0:
            continue
        if probability * samples >= min_expected:
            bins[outcome] = (int(counts.get(outcome, 0)), probability)
        else:
            pooled_count += int(counts.get(outcome, 0))
            pooled_probability += probability
    if pooled_probability > 0:
        bins["(pooled rare outcomes)"] = (pooled_count, pooled_probability)
    if impossible:
        outcome = impossible[0]
        return FitResult(samples, len(bins), 0.0, float("inf"), 0.0, alpha, outcome, int(counts[outcome]), 0.0)
    p_values = {key: stats.binomtest(count, samples, min(probability, 1.0)).pvalue if probability < 1 else 1.0
                for key, (count, probability) in bins.items()}
    worst = min(p_values, key=p_values.get)
    observed = [count for count, _ in bins.values()]
    expected = [probability * samples for _, probability in bins.values()]
    chi_square = sum((o - e) ** 2 / e for o, e in zip(observed, expected))
    chi_square_p = float(stats.chi2.sf(chi_square, len(bins) - 1)) if len(bins) > 1 else 1.0
    adjusted = min(1.0, p_values[worst] * len(bins))
    return FitResult(samples, len(bins), float(adjusted), float(chi_square), chi_square_p, alpha, worst,
                     bins[worst][0], bins[worst][1] * samples)
