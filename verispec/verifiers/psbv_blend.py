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

With two children (or two groups of children) the lexicographic target lies between the two: the first's target
t_A = worth p(A) / p(block) is at most Psi(m_A) (the tiling's value; the minorant is below the points) and at least
worth m_A / M (the even share's; A has the larger ratios p / q). So one blend, lambda times the tiling plus
(1 - lambda) times the even share, child by child, reaches it exactly: lambda = (t_A - e_A) / (y_A - e_A). The
*bisection blend* applies that to halves: a block's children, in the order by p / q, are cut into a first and a
second half, the halves' targets are realised by the blend of the block's measure, and each half is cut again inside
its own measure, down to single children (``blend_block_exact``; a half whose target its measure cannot reach any
more, deeper down, takes the nearest lambda in [0, 1] and its children's targets are rescaled to the value it got).
Cost: log2(n) levels of O(n) arithmetic, one window value of the parent measure per cut (``blend_blocks_float``:
every block at once, level by level); each child's measure is the parent's times a step function with one step per
cut above it, so pieces grow by about log2(n) a depth, not by a decomposition's chain of steps.

Measured in rationals on 690 problems, iid and delayed trees at V = 3 to 8 (``experiments/psbv_realisation.py``,
docs/results/psbv-realisation.json): E[tau+1] x1.0012 psbv's exact split on average, least x0.9904, at least psbv's
on 602 (the exact split is optimal node by node, not over the tree); GBV, the tiling, x0.921, least x0.690. A
single blend of the whole block (one lambda, the L1-nearest) kept x0.991, least x0.939."""

from __future__ import annotations

import numpy as np

from verispec.lp_analysis.position_arrays import MeasureArrays
from verispec.lp_analysis.position_measures import PositionMeasure, sum_measures


def blend_share(target, tiled, even):
    """lambda in [0, 1] with lambda ``tiled`` + (1 - lambda) ``even`` = ``target`` (the first half's value under
    the tiling, under the even share, and its target), clipped where the target is out of reach; 1 where the two
    realisations agree. Fractions (exact) or float arrays (one entry per cut)."""
    if isinstance(tiled, np.ndarray):
        gap = tiled - even
        moving = gap != 0
        share = np.where(moving, (target - even) / np.where(moving, gap, 1.0), 1.0)
        return np.clip(share, 0.0, 1.0)
    if tiled == even:
        return tiled * 0 + 1
    return min(max((target - even) / (tiled - even), tiled * 0), tiled * 0 + 1)


def _combined(parts: list) -> PositionMeasure:
    parts = [part for part in parts if part.pieces]
    return parts[0] if len(parts) == 1 else sum_measures(parts)


def _rescaled(goal: dict, group: list, value, masses: dict) -> dict:
    """The targets of ``group`` scaled to add up to ``value`` (by mass where they are all 0)."""
    total = sum((goal[c] for c in group), value * 0)
    if total > 0:
        return {c: goal[c] * value / total for c in group}
    mass = sum((masses[c] for c in group), value * 0)
    return {c: value * masses[c] / mass for c in group}


def blend_block_exact(block: list, targets: dict, masses: dict, segment: PositionMeasure, paths: int) -> dict:
    """{child: measure} of one block of the minorant (children in the order by p / q, ``targets`` adding up to the
    segment's value) by the bisection blend, in rationals (or Python floats): the reference
    ``blend_blocks_float`` is held to."""
    out, stack = {}, [(list(block), dict(targets), segment)]
    while stack:
        group, goal, measure = stack.pop()
        if len(group) == 1:
            out[group[0]] = measure
            continue
        first, second = group[:len(group) // 2], group[len(group) // 2:]
        mass, worth = measure.mass(), measure.value(paths)
        low = sum((masses[c] for c in first), worth * 0)
        share = blend_share(sum((goal[c] for c in first), worth * 0), measure.values_below([low], paths)[0],
                            worth * low / mass)
        halves = (_combined([measure.window(0, low).scaled(share), measure.scaled((1 - share) * low / mass)]),
                  _combined([measure.window(low, mass - low).scaled(share),
                             measure.scaled((1 - share) * (mass - low) / mass)]))
        for half, half_measure in zip((second, first), halves[::-1]):
            stack.append((half, _rescaled(goal, half, half_measure.value(paths), masses), half_measure))
    return out


def _record_leaves(children: np.ndarray, single: np.ndarray, cuts: np.ndarray, pieces: np.ndarray,
                   steps: np.ndarray, values: np.ndarray, wanted_mask: np.ndarray, windows: dict) -> None:
    """The groups of one child (``single`` [G]; ``children`` [G] the first child of each group): its value, and for
    a child in ``wanted_mask`` its windows [(low, length, coefficient)] from the group's breakpoints and steps."""
    values[children[single]] = np.sum(steps[single] * pieces[single], axis=1)
    for row in np.flatnonzero(single & wanted_mask[children]):
        edges, coefficients = cuts[row], steps[row]
        windows[int(children[row])] = [
            (float(edges[i]), float(edges[i + 1] - edges[i]), float(coefficients[i]))
            for i in range(len(coefficients)) if coefficients[i] > 0 and edges[i + 1] > edges[i]]


def blend_blocks_float(arrays: MeasureArrays, order: np.ndarray, p: np.ndarray, masses: np.ndarray,
                       bottom: np.ndarray, starts: np.ndarray, stops: np.ndarray, lengths: np.ndarray,
                       values: np.ndarray, wanted_mask: np.ndarray, windows: dict) -> None:
    """``blend_block_exact`` in float for the blocks [starts[k], stops[k]) of ``order`` (two children or more each;
    segment k starts at cumulative mass bottom[starts[k]] of ``arrays``' measure and has mass lengths[k]), every
    block at once and one level of cuts at a time: fills ``values`` [V] for their children and, for the children in
    ``wanted_mask`` [V], ``windows[c]`` = [(low, length, coefficient)] (``MeasureArrays.build``).

    A group is a range [a, b) of ``order`` with its measure: the parent's times a step function, held as G rows of
    breakpoints (cumulative mass of the parent), the parent's value between them and the step's coefficient there
    (rows padded with empty pieces at their end). Its children's targets are alpha * p_c + beta * m_c (p's share
    scaled to the value the group got; by mass where p is 0 on the whole group)."""
    if len(starts) == 0:
        return
    cumulative_p = np.concatenate([[0.0], np.cumsum(p[order])])
    cumulative_m = np.concatenate([[0.0], np.cumsum(masses[order])])
    first, last = starts.astype(np.int64), stops.astype(np.int64)
    cuts = np.stack([bottom[first], bottom[first] + lengths], axis=1)       # [G, pieces + 1] breakpoints
    worth = arrays.window_values(bottom[first], lengths)
    pieces = worth[:, None]                                                   # [G, pieces] the parent's value
    steps = np.ones((len(first), 1))                                          # [G, pieces] the coefficient
    weight = cumulative_p[last] - cumulative_p[first]
    alpha = np.where(weight > 0, worth / np.where(weight > 0, weight, 1.0), 0.0)
    beta = np.where(weight > 0, 0.0, worth / lengths)
    while len(first):
        single = last - first == 1
        if single.any():  # leaves: one child, its group's measure
            _record_leaves(order[first], single, cuts, pieces, steps, values, wanted_mask, windows)
            keep = ~single
            first, last, cuts, pieces, steps, alpha, beta = (x[keep] for x in (first, last, cuts, pieces, steps,
                                                                                alpha, beta))
            if not len(first):
                break
        middle = (first + last) // 2
        widths = np.diff(cuts, axis=1)
        mass_so_far = np.cumsum(steps * widths, axis=1)                       # [G, pieces]
        group_mass, worth = mass_so_far[:, -1], np.sum(steps * pieces, axis=1)
        low = cumulative_m[middle] - cumulative_m[first]
        # the piece where the first half's lowest mass ends, and how far into it (in the parent's mass)
        at = np.minimum(np.sum(mass_so_far < low[:, None], axis=1), widths.shape[1] - 1)
        rows = np.arange(len(first))
        before = np.where(at > 0, mass_so_far[rows, np.maximum(at - 1, 0)], 0.0)
        into = np.clip((low - before) / np.where(steps[rows, at] > 0, steps[rows, at], 1.0), 0.0, widths[rows, at])
        split_value = arrays.window_values(cuts[rows, at], into)             # [G] the parent's value on the part
        below = np.arange(widths.shape[1])[None, :] < at[:, None]
        tiled = np.sum(np.where(below, steps * pieces, 0.0), axis=1) + steps[rows, at] * split_value
        target = alpha * (cumulative_p[middle] - cumulative_p[first]) + beta * low
        share = blend_share(target, tiled, worth * low / group_mass)
        # insert the cut into every row's breakpoints: piece `at` becomes two
        count = widths.shape[1]
        position = np.arange(count + 1)[None, :]
        source = np.where(position <= at[:, None], position, position - 1)   # [G, pieces + 1] old piece of new
        new_pieces = pieces[rows[:, None], source]
        new_pieces[rows, at] = split_value
        new_pieces[rows, at + 1] = np.maximum(pieces[rows, at] - split_value, 0.0)  # rounding: never below 0
        new_steps = steps[rows[:, None], source]
        new_cuts = np.concatenate([cuts[:, :1], cuts[rows[:, None], source + 1]], axis=1)
        new_cuts[rows, at + 1] = cuts[rows, at] + into
        lower = position <= at[:, None]                                       # pieces below the cut
        ratio = (low / group_mass)[:, None]
        kept = share[:, None]
        first_steps = new_steps * (kept * lower + (1 - kept) * ratio)
        second_steps = np.maximum(new_steps - first_steps, 0.0)
        first_value = np.sum(first_steps * new_pieces, axis=1)
        second_value = np.sum(second_steps * new_pieces, axis=1)
        halves = []
        for a, b, value, half_steps in ((first, middle, first_value, first_steps),
                                        (middle, last, second_value, second_steps)):
            goal = alpha * (cumulative_p[b] - cumulative_p[a]) + beta * (cumulative_m[b] - cumulative_m[a])
            scale = np.where(goal > 0, value / np.where(goal > 0, goal, 1.0), 0.0)
            by_mass = value / np.maximum(cumulative_m[b] - cumulative_m[a], np.finfo(float).tiny)
            halves.append((a, b, half_steps, np.where(goal > 0, alpha * scale, 0.0),
                           np.where(goal > 0, beta * scale, by_mass)))
        first = np.concatenate([halves[0][0], halves[1][0]])
        last = np.concatenate([halves[0][1], halves[1][1]])
        steps = np.concatenate([halves[0][2], halves[1][2]])
        alpha = np.concatenate([halves[0][3], halves[1][3]])
        beta = np.concatenate([halves[0][4], halves[1][4]])
        cuts, pieces = np.concatenate([new_cuts, new_cuts]), np.concatenate([new_pieces, new_pieces])


__all__ = ["blend_block_exact", "blend_blocks_float", "blend_share"]
