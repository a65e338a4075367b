"""psbv's split of a node's position measure among its children (``verispec.verifiers.psbv``, whose docstring defines
the position measures, their values and the split): the lexicographically optimal base of the children's values
with respect to p, cut by the greatest convex minorant into blocks, each block realised by an exact decomposition
into tilings (``position_measures.realise``, or its float twin ``position_arrays.realise_float``) or by blends of
tiling and even share (``psbv_blend``); and the cache of splits by node that decoding and the exact engine share.

Cost: exact splits (rationals, ``split_exact``) are the reference, for small vocabularies. Float splits
(``split_float``) are vectorised with numpy and build measures only for the drafted children (the values of all
children are the same whichever are built); their cost is the decomposition of the minorant's long blocks, ray
shooting tens to hundreds of steps deep (``position_measures.FLOAT_DEPTH_SLACK``), each a few to tens of passes of
its minimum-ratio search, refused before it starts where it would pass ``MAX_DECOMPOSITION_STEPS``
(``check_decomposition_size``).
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict

import numpy as np

from verispec.errors import ProblemTooLargeError
from verispec.lp_analysis.position_arrays import (
    MAX_DECOMPOSITION_STEPS,
    MeasureArrays,
    _RealiseCost,
    convex_minorant_blocks_float,
    descending_order,
    realise_float,
)
from verispec.lp_analysis.position_measures import (
    PositionMeasure,
    convex_minorant_blocks,
    ordered_by_key,
    ordered_tiling,
    realise,
)
from verispec.verifiers.psbv_blend import blend_block_exact, blend_blocks_float


def split(measure: PositionMeasure, p: list, q: list, paths: int, exact: bool, wanted=None,
          blend: bool = False) -> tuple[list, dict]:
    """psbv's split of a node's position measure among its children (module docstring): (g(u c) for every token
    c, [V], 0 where q(c | u) = 0) and {c: nu_(u c)} for the children with q(c | u) > 0. ``p``, ``q``: the node's
    conditionals as lists of Python numbers (or float arrays). In float mode, ``wanted`` (an iterable of tokens)
    limits the measures built to those children (the drafted ones: no other measure is ever read); the values are
    the same whichever measures are asked for (``split_float``). ``blend``: each block of the minorant realised by
    bisection blends of tiling and even share (``psbv_blend``, O(n log n)) instead of the exact decomposition."""
    if not exact:
        return split_float(measure, p, q, paths, wanted, blend)
    return split_exact(measure, p, q, paths, exact, blend)


def split_exact(measure: PositionMeasure, p: list, q: list, paths: int, exact: bool,
                blend: bool = False) -> tuple[list, dict]:
    """``split`` by the reference: Python numbers, one ``realise`` (or blend) per block (exact, and float tests)."""
    if exact and sum(1 for x in q if x > 0) > MAX_EXACT_SPLIT_CHILDREN:
        raise ProblemTooLargeError(
            f"psbv: an exact split at V={len(q):,} has more than {MAX_EXACT_SPLIT_CHILDREN:,} children with "
            "q > 0; use float (exact=False) or a smaller vocabulary")
    zero = measure.value(paths) * 0
    total = measure.mass()
    masses = {c: total * q[c] for c in range(len(q)) if q[c] > 0}
    live = [c for c in masses if masses[c] > 0]  # float: a mass can round to 0 (never selected, below)
    keys = [p[c] / q[c] for c in live]
    order = [live[i] for i in ordered_by_key(keys, exact)]
    cumulative_mass, cumulative_weight = [], [zero]
    mass = zero
    for child in order:
        mass = mass + masses[child]
        cumulative_mass.append(mass)
        cumulative_weight.append(cumulative_weight[-1] + p[child])
    values, measures = [zero] * len(q), {}
    if paths == 1:  # every split has the values m_c: one path is block verification with q
        measures = ordered_tiling(measure, order, masses)
        for child, child_measure in measures.items():
            values[child] = child_measure.value(paths)
        return values, measures
    psi = [zero] + measure.values_below(cumulative_mass, paths)
    bottom = [zero] + cumulative_mass
    for start, stop in convex_minorant_blocks(cumulative_weight, psi, exact):
        block = order[start:stop]
        block_mass = sum((masses[c] for c in block), zero)
        segment = measure.window(bottom[start], block_mass if stop < len(order) else total)
        worth = psi[stop] - psi[start]
        weight = sum((p[c] for c in block), zero)
        targets = {c: worth * (p[c] / weight if weight > 0 else masses[c] / block_mass) for c in block}
        measures.update(blend_block_exact(block, targets, masses, segment, paths) if blend else
                        realise(targets, masses, segment, paths, exact))
    for child, child_measure in measures.items():
        values[child] = child_measure.value(paths)
    return values, measures


def split_float(measure: PositionMeasure, p, q, paths: int, wanted=None, blend: bool = False) -> tuple[list, dict]:
    """``split`` in float, vectorised over the children (numpy sorts and cumulative sums, the convex minorant by one
    stack pass, each block's decomposition by ``position_arrays.realise_float``): the same children's values as
    ``split_exact`` to rounding, and the measures of the children in ``wanted`` (all of them when None)."""
    p, q = np.asarray(p, dtype=np.float64), np.asarray(q, dtype=np.float64)
    size = len(q)
    arrays = MeasureArrays(measure, paths)
    total = float(arrays.cumulative_mass[-1])
    masses = total * q
    live = np.flatnonzero((q > 0) & (masses > 0))  # float: a mass can round to 0 (never selected)
    order = live[descending_order(p[live] / q[live])] if len(live) > 1 else live
    wanted_mask = np.zeros(size, dtype=bool)
    wanted_mask[order if wanted is None else np.asarray(list(wanted), dtype=np.int64)] = True
    values, windows = np.zeros(size), {}
    cumulative_mass = np.cumsum(masses[order])
    bottom = np.concatenate([[0.0], cumulative_mass])
    if paths == 1 or len(order) == 0:  # every split has the values m_c: the tiling in the order by p / q
        lengths = masses[order]
        values[order] = arrays.window_values(bottom[:-1], lengths)
        for k in np.flatnonzero(wanted_mask[order]):
            windows[int(order[k])] = [(float(bottom[k]), float(lengths[k]), 1.0)]
        return values.tolist(), {c: arrays.build(w) for c, w in windows.items()}
    weights = np.concatenate([[0.0], np.cumsum(p[order])])
    psi = np.concatenate([[0.0], arrays.window_values(0.0, cumulative_mass)])
    blocks = np.asarray(convex_minorant_blocks_float(weights, psi), dtype=np.int64).reshape(-1, 2)
    starts, stops = blocks[:, 0], blocks[:, 1]
    single = stops - starts == 1
    block_mass = masses[order[starts]]  # a block's mass summed over its children (below, for the longer blocks)
    for k in np.flatnonzero(~single):
        block_mass[k] = np.cumsum(masses[order[starts[k]:stops[k]]])[-1]
    lengths = np.where(stops < len(order), block_mass, total - bottom[starts])
    # blocks of one child: it takes the whole segment
    values[order[starts[single]]] = arrays.window_values(bottom[starts[single]], lengths[single])
    for k in np.flatnonzero(single & wanted_mask[order[starts]]):
        windows[int(order[starts[k]])] = [(float(bottom[starts[k]]), float(lengths[k]), 1.0)]
    if blend:
        multiple = np.flatnonzero(~single)
        blend_blocks_float(arrays, order, p, masses, bottom, starts[multiple], stops[multiple], lengths[multiple],
                           values, wanted_mask, windows)
        return values.tolist(), {c: arrays.build(w) for c, w in windows.items()}
    check_decomposition_size(stops - starts, size, paths)
    cost = _RealiseCost(MAX_DECOMPOSITION_STEPS, f"psbv: a float split at V={size:,} with K={paths} ran past "
                        f"{MAX_DECOMPOSITION_STEPS:,} steps of decomposition; use a top-k vocabulary or fewer paths")
    for k in np.flatnonzero(~single):
        block = order[starts[k]:stops[k]]
        worth = psi[stops[k]] - psi[starts[k]]
        weight = float(np.cumsum(p[block])[-1])
        share = p[block] / weight if weight > 0 else masses[block] / block_mass[k]
        realise_float(arrays, block, worth * share, masses[block], float(bottom[starts[k]]), float(lengths[k]),
                      values, wanted_mask, windows, cost)
    return values.tolist(), {c: arrays.build(w) for c, w in windows.items()}


def check_decomposition_size(block_sizes, size: int, paths: int) -> None:
    """Refuse, before any decomposition, a float split whose blocks would take more than
    ``MAX_DECOMPOSITION_STEPS`` child-steps: a block of n children takes about n * min(n, STEPS_PER_CHILD) (ray
    shooting peels about one child per step, each step a few passes of its minimum-ratio search over all of them,
    until the remaining weight falls below FLOAT_DEPTH_SLACK)."""
    sizes = np.asarray(block_sizes, dtype=np.float64)
    sizes = sizes[sizes > 1]
    predicted = float(np.sum(sizes * np.minimum(sizes, STEPS_PER_CHILD)))
    if predicted > MAX_DECOMPOSITION_STEPS:
        raise ProblemTooLargeError(
            f"psbv: a float split at V={size:,} with K={paths} would take about {predicted:,.0f} steps of "
            f"decomposition (its largest block of the convex minorant has {int(sizes.max()):,} children), above "
            f"the limit of {MAX_DECOMPOSITION_STEPS:,}; use a top-k vocabulary or fewer paths")


#: Child-steps per child that a block of many children takes at most, about (``check_decomposition_size``;
#: measured 200 to 1,600 on dense softmax pairs at V = 20,000 and 151,936, K = 2 to 4, and up to 1,300 at real
#: T = 1 nodes of the Qwen pair).
STEPS_PER_CHILD = 2000

#: Most exact (rational) children of one split: beyond it the rationals of a decomposition grow past any use.
MAX_EXACT_SPLIT_CHILDREN = 4096


#: Splits remembered across calls, keyed by (K, the path's tokens and conditionals): real decoding and the
#: exact engine meet the same nodes in many trees. Bounded, oldest first out.
SPLIT_CACHE_SIZE = 4096


class _SplitCache:
    """Splits by node key, each with the children whose measures it built (None: every child, exact mode). A request
    for children not built recomputes the split for the union (float splits build only what is asked for)."""

    def __init__(self, size: int):
        self.size, self.entries = size, OrderedDict()

    def get(self, key, drafted: frozenset, compute, complete: bool):
        entry = self.entries.get(key)
        wanted = drafted
        if entry is not None:
            built, result = entry
            if built is None or drafted <= built:
                self.entries.move_to_end(key)
                return result
            wanted = built | drafted
        result = compute(wanted)
        self.entries[key] = (None if complete else wanted, result)
        self.entries.move_to_end(key)
        if len(self.entries) > self.size:
            self.entries.popitem(last=False)
        return result


def _conditionals_key(p, q, exact: bool):
    """A node's (p, q) for the split cache's keys: the rationals themselves (small vocabularies), or a 128-bit digest
    of the float64 bytes (a tuple of V = 151,936 floats per node and ancestor would hold gigabytes in the cache)."""
    if exact:
        return tuple(p), tuple(q)
    digest = hashlib.blake2b(digest_size=16)
    digest.update(np.ascontiguousarray(p, dtype=np.float64).tobytes())
    digest.update(np.ascontiguousarray(q, dtype=np.float64).tobytes())
    return digest.digest()


def _numbers(row, exact: bool) -> list:
    return list(row) if exact else [float(x) for x in row]
