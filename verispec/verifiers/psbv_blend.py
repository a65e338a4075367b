"""psbv's blended split (``psbv(blend=1)``): a realisation of a node's split in O(n log n), for full vocabularies
(issue 66, item 5: psbv at T = 1, where the exact decomposition takes seconds a node at V = 151,936).

Why any realisation will do: psbv selects the path with the smallest of K positions and runs block verification
with the law g that the children's measures realise; the selected path has that law whatever the measures are, as
long as they partition their parent's (``verispec.verifiers.psbv``, the positions' lemma). The lexicographically
optimal base only buys efficiency. Two realisations of a block of the convex minorant are nearly free:

* the *tiling* in the order by p / q, each child a window of the block's segment: a vertex of the base polytope.
  Taken at every node (one block) it is GBV's selection, the lexicographic maximum of the paths under the p / q
  order (Thomas & Pal 2026, arXiv 2602.16961; equal E[tau+1] in rationals wherever no two ratios tie), which is
  what psbv improves on: it gives the first children of a block more than their share of p;
* the *even share*, each child c the fraction m_c / M of the segment at every position (M the block's mass): values
  proportional to q, short of p's share on the same children.

The blend takes, in each block of the minorant, lambda times the tiling plus (1 - lambda) times the even share,
child by child (densities still add up to the segment's), with lambda in [0, 1] the one that brings the values
nearest the lexicographic targets t_c = worth p_c / P in L1. With y the tiling's values and e the even share's, that
is the weighted median of (t_c - e_c) / (y_c - e_c) with weights |y_c - e_c| (``blend_share``); since the values
of a block add up to its worth, sum_c min(g_c, t_c) = worth - L1 / 2, so lambda is also the best blend at the
block's own acceptance level. Cost: the sort and the minorant psbv already does, one window value per child and a
median per block; each child's measure is one window and a scaled copy of its block's segment, so pieces grow by
about two a depth, not by a decomposition's chain of steps.

Measured in rationals at V = 2 to 6 (``experiments/psbv_realisation.py``, docs/results/psbv-realisation.json):
E[tau+1] of the blend against psbv's exact split, and of the tiling (GBV)."""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from verispec.lp_analysis.position_arrays import MeasureArrays
from verispec.lp_analysis.position_measures import PositionMeasure, ordered_tiling, sum_measures


def blend_share(tiled, even, targets):
    """lambda in [0, 1] minimising sum_c |lambda y_c + (1 - lambda) e_c - t_c| (y = ``tiled``, e = ``even``, t =
    ``targets``, one block): the lower weighted median of (t_c - e_c) / (y_c - e_c), weights |y_c - e_c|, clipped;
    1 (the tiling, fewer pieces) where the two realisations agree. Lists of Fractions (exact) or float arrays."""
    if isinstance(tiled, np.ndarray):
        gap = tiled - even
        moving = gap != 0
        if not moving.any():
            return 1.0
        points = (targets[moving] - even[moving]) / gap[moving]
        order = np.argsort(points, kind="stable")
        weights = np.abs(gap[moving])[order]
        cumulative = np.cumsum(weights)
        index = min(int(np.searchsorted(cumulative, cumulative[-1] / 2, side="left")), len(order) - 1)
        return float(min(max(points[order[index]], 0.0), 1.0))
    points = sorted(((t - e) / (y - e), abs(y - e)) for y, e, t in zip(tiled, even, targets) if y != e)
    if not points:
        return Fraction(1)
    half, running = sum(weight for _, weight in points) / 2, 0
    for point, weight in points:
        running += weight
        if running >= half:
            return min(max(point, Fraction(0)), Fraction(1))
    return min(max(points[-1][0], Fraction(0)), Fraction(1))


def blend_block_exact(block: list, targets: dict, masses: dict, segment: PositionMeasure, paths: int) -> dict:
    """{child: measure} of one block of the minorant in rationals (or Python floats): the blend of the tiling of
    ``segment`` in the block's order and its even share, lambda from ``blend_share``."""
    if len(block) == 1:
        return {block[0]: segment}
    block_mass = sum((masses[c] for c in block), segment.value(paths) * 0)
    worth = segment.value(paths)
    tiling = ordered_tiling(segment, block, masses)
    tiled = [tiling[c].value(paths) for c in block]
    even = [worth * masses[c] / block_mass for c in block]
    share = blend_share(tiled, even, [targets[c] for c in block])
    out = {}
    for c in block:
        parts = [part for part in (tiling[c].scaled(share), segment.scaled((1 - share) * masses[c] / block_mass))
                 if part.pieces]
        out[c] = parts[0] if len(parts) == 1 else sum_measures(parts)
    return out


def blend_blocks_float(arrays: MeasureArrays, order: np.ndarray, p: np.ndarray, masses: np.ndarray,
                       bottom: np.ndarray, starts: np.ndarray, stops: np.ndarray, lengths: np.ndarray,
                       block_mass: np.ndarray, values: np.ndarray, wanted_mask: np.ndarray, windows: dict) -> None:
    """``blend_block_exact`` in float for the blocks [starts[k], stops[k]) of ``order`` (each of two children or
    more; segment k starts at cumulative mass bottom[starts[k]] and has mass lengths[k]): fills ``values`` [V] for
    their children and, for the children in ``wanted_mask`` [V], ``windows[c]`` = [(low, length, coefficient)]
    (``MeasureArrays.build``: the tiling's window times lambda and the segment times (1 - lambda) m_c / M)."""
    if len(starts) == 0:
        return
    worth = arrays.window_values(bottom[starts], lengths)  # [blocks] each segment's value
    positions = np.concatenate([np.arange(a, b) for a, b in zip(starts.tolist(), stops.tolist())])
    blocks = np.repeat(np.arange(len(starts)), stops - starts)  # [children of the blocks] each one's block
    children = order[positions]
    tiled = arrays.window_values(bottom[positions], masses[children])
    even = worth[blocks] * masses[children] / block_mass[blocks]
    weight = np.bincount(blocks, weights=p[children], minlength=len(starts))
    targets = np.where(weight[blocks] > 0, worth[blocks] * p[children] / np.where(weight > 0, weight, 1)[blocks],
                       even)
    edges = np.concatenate([[0], np.cumsum(stops - starts)])
    shares = np.asarray([blend_share(tiled[a:b], even[a:b], targets[a:b]) for a, b in zip(edges[:-1], edges[1:])])
    values[children] = shares[blocks] * tiled + (1 - shares[blocks]) * even
    for k in np.flatnonzero(wanted_mask[children]):
        block, child = int(blocks[k]), int(children[k])
        share = float(shares[block])
        windows[child] = [(float(bottom[positions[k]]), float(masses[child]), share),
                          (float(bottom[starts[block]]), float(lengths[block]),
                           (1 - share) * float(masses[child]) / float(block_mass[block]))]


__all__ = ["blend_block_exact", "blend_blocks_float", "blend_share"]
