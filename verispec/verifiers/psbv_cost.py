"""What psbv's exact position-selection sum costs in rationals, watched as it runs (``RationalCost``): the float
size check counts splits and steps, but a rational step costs what its numbers cost, and those grow with depth."""

from __future__ import annotations

import time
from fractions import Fraction

from verispec.errors import ProblemTooLargeError
from verispec.guard import budget
from verispec.guard.limits import MAX_RATIONAL_SECONDS
from verispec.lp_analysis.position_measures import PositionMeasure


def measure_bits(measure: PositionMeasure) -> int:
    """The longest numerator or denominator, in bits, of a rational measure's ends and densities."""
    return max((max(Fraction(x).numerator.bit_length(), Fraction(x).denominator.bit_length())
                for piece in measure.pieces for x in piece), default=1)


class RationalCost:
    """Refuses psbv's exact position-selection sum once its rational arithmetic is on course to pass
    ``MAX_RATIONAL_SECONDS`` (or the command's time budget, where that is longer), with a ProblemTooLargeError
    that says how far the numbers grew.

    The float size check counts splits and steps; in rationals a step's cost is that of its numbers, and those
    grow with depth: a split takes values (1 - a)^K - (1 - b)^K of its measure's ends and cuts the measure at the
    ratios of such values, so the children's ends and densities carry about K (V + 1) times the bits of their
    parent's (measured at V = 4 from the uniform root: 1, 20, 396, 8,284 bits at K = 4; 1, 12, 129, 1,232, 14,399
    at K = 3; 7 bits more a depth at K = 2). A split of 8,000-bit measures takes 0.1 to 11 s where one of
    400-bit measures takes 4 ms, so ``delayed:4,4,4`` at V = 4 passed the float check (about 350,000 steps) and
    ran for hours: 16,384 splits at its last depth, about 0.3 s each. How the time per split follows the bits
    varies too much between problems for a formula fixed in advance, so the cost is measured as the sum runs:
    before a depth, its first split is predicted from the previous depth's mean time per split, scaled by the
    growth of the bits (to the power 1.5, Karatsuba's multiplication) and of the pieces; during a depth, its
    remaining splits are projected from the mean of those done. Either past the limit refuses, so the sum stops
    within about one split of the moment its cost became known."""

    def __init__(self, spec: str, size: int):
        self.spec, self.size = spec, size
        self.start = time.monotonic()
        left = budget.remaining()
        self.limit = MAX_RATIONAL_SECONDS if left is None else max(MAX_RATIONAL_SECONDS, left)
        self.previous = None  # (mean seconds per split, bits, pieces) of the last depth with splits
        self.level = None

    def start_level(self, depth: int, measures: list) -> None:
        bits = max((measure_bits(m) for m in measures), default=1)
        pieces = max((len(m.pieces) for m in measures), default=1)
        self.level = {"depth": depth, "splits": len(measures), "bits": bits, "pieces": pieces, "done": 0,
                      "start": time.monotonic()}
        if self.previous is not None:
            mean, before_bits, before_pieces = self.previous
            first = mean * max(1.0, bits / before_bits) ** 1.5 * max(1.0, pieces / before_pieces)
            self._refuse_past(first, 1)

    def split_done(self) -> None:
        level = self.level
        level["done"] += 1
        spent = time.monotonic() - level["start"]
        # projected from the depth's mean once it means something; until then only the time spent counts
        per_split = spent / level["done"] if spent > MIN_PROJECTED_SECONDS else 0.0
        self._refuse_past(per_split, level["splits"] - level["done"])

    def end_level(self) -> None:
        level = self.level
        if level["splits"]:
            self.previous = ((time.monotonic() - level["start"]) / level["splits"], level["bits"], level["pieces"])

    def _refuse_past(self, per_split: float, splits: int) -> None:
        elapsed = time.monotonic() - self.start
        if elapsed + per_split * splits <= self.limit:
            return
        level = self.level
        growth = "" if self.previous is None else f", up from {self.previous[1]:,} a depth above"
        raise ProblemTooLargeError(
            f"psbv's position-selection sum in exact rationals on {self.spec} at V={self.size} would take about "
            f"{elapsed + per_split * splits:,.0f} s ({elapsed:.0f} s so far; {splits:,} splits left at depth "
            f"{level['depth']} below the branch point, about {per_split:.2g} s each: their measures' numbers have "
            f"up to {level['bits']:,} bits{growth}), above the limit of {self.limit:,.0f} s for rational "
            "arithmetic; run without --exact (float64), or use a shorter tree, fewer paths or a smaller vocabulary")


#: Seconds of a depth's splits before ``RationalCost`` projects the rest of the depth from their mean (the first
#: few splits of a depth differ most from its mean).
MIN_PROJECTED_SECONDS = 0.5


__all__ = ["MIN_PROJECTED_SECONDS", "RationalCost", "measure_bits"]
