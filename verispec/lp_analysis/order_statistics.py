"""The extremes of K i.i.d. draws: the probability that the largest (or the smallest) of K i.i.d. uniform positions
on [0, 1] lies in a given interval, written without cancellation.

Both multi-path rules select one of K i.i.d. draft paths by an extreme of K i.i.d. draws:

* GBV (Thomas & Pal 2026, arXiv 2602.16961) takes the lexicographic maximum. Laid out on [0, 1] in rank order, a
  path u is the interval [A, A + x) (x = q(u), A = the draft mass of the paths ranked below u), and it is selected
  when the largest of K uniforms falls in it: (A + x)^K - A^K (``largest_of_uniforms_mass``); its skewed draft
  q_skew is a quotient of two such masses (``power_difference_quotient``).
* psbv (verispec's rule, docs/guides/rules_2025_26.md) takes the smallest position: the smallest of K uniforms has
  density K (1 - y)^(K - 1), so it falls in [a, b) with probability (1 - a)^K - (1 - b)^K
  (``smallest_of_uniforms_mass``, the value of a piece of a position measure, ``lp_analysis.position_measures``).

The numbers are floats, Fractions or arrays of either (numpy or torch, through the arithmetic operators only).
"""

from __future__ import annotations


def power_difference_quotient(high, low, power: int):
    """(high^K - low^K) / (high - low) = sum_{j<K} high^j low^(K-1-j) for K = ``power`` >= 1, a sum of non-negative
    terms (for 0 <= low <= high) summed in that order; the factors x^0 = 1 and x^1 = x are exact, so they are not
    computed. Multiplied by high - low, known to full precision where high and low are not, it is the difference
    without cancellation (a width of 1e-12 next to a low of 1 would lose half its digits to high^K - low^K)."""
    def raised(values, exponent: int):
        return values if exponent == 1 else values ** exponent

    total = None
    for j in range(power):
        if j == 0:
            term = raised(low, power - 1)
        elif j == power - 1:
            term = raised(high, j)
        else:
            term = raised(high, j) * raised(low, power - 1 - j)
        total = term if total is None else total + term
    return total


def largest_of_uniforms_mass(low, width, draws: int):
    """P(the largest of K = ``draws`` i.i.d. uniforms on [0, 1] lies in [low, low + width)) = (low + width)^K - low^K:
    all K are below low + width, minus all K below low (GBV's selection probability, with low = A and width = x)."""
    return width * power_difference_quotient(low + width, low, draws)


def smallest_of_uniforms_mass(low, high, draws: int):
    """P(the smallest of K = ``draws`` i.i.d. uniforms on [0, 1] lies in [low, high)) = (1 - low)^K - (1 - high)^K,
    the integral of its density K (1 - y)^(K - 1) over [low, high): all K above low, minus all K above high."""
    return (high - low) * power_difference_quotient(1 - low, 1 - high, draws)
