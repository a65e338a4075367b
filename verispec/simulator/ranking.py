"""Deterministic token rankings with one tie rule, decided the same way in float and in exact arithmetic.

Several rules rank tokens: SpecHub's hub (argmax q) and Hu et al.'s greedy drafts (top tokens of q), GBV's
strict order (p/q, then token id), DySpec's heap (largest estimated reach, then the oldest node), Khisti's
truncated LP (p - q1 q2). A drafter and the verifier that checks its drafts must rank identically (trap 8
of docs/guides/reference.md), and a float run must take the same decisions as the exact run of the same problem:
values that are equal as rationals (p/q = 1/20 / (3/20) and 3/20 / (9/20)) can differ in their last bits
in float64, and ordering by those bits would make float and exact mode draft or select different tokens.

The tie rule (``TIE_RTOL``): sort the values; two neighbours a, b in that order are TIED when
|a - b| <= TIE_RTOL * max(|a|, |b|) (for float32 and lower precisions, a few machine epsilons instead);
ties chain (a run of neighbours, each tied to the next, is one tie class); tokens of one class are ordered
by token id. The rule is applied to exact rationals and to floats alike, so both modes rank identically
unless a gap between two distinct values lies within float rounding of the threshold itself (about 1e-16
relative to a 1e-12 relative gap). Every function is batched over
leading axes and runs on any backend (numpy float64, Fraction objects, torch).
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from verispec import backend

#: Relative gap at or below which two ranked values count as tied (see the module docstring), for float64
#: and exact values. Float64 rounding of ratios and products of a few probabilities stays near 1e-15, far
#: below it; genuinely distinct probabilities of real models differ by far more.
TIE_RTOL = 1e-12

#: For lower-precision floats (torch float32, bfloat16, float16 in real decoding) the tie gap is this many
#: machine epsilons of the dtype, since their rounding alone exceeds TIE_RTOL.
TIE_EPSILONS = 8


def tie_tolerance(values) -> float:
    """The relative tie gap for an array of ``values``: TIE_RTOL for float64 and exact rationals, else
    TIE_EPSILONS machine epsilons of its dtype."""
    if backend.is_exact(values) or str(values.dtype).endswith("float64"):
        return TIE_RTOL
    if isinstance(values, np.ndarray):
        return TIE_EPSILONS * float(np.finfo(values.dtype).eps)
    import torch

    return TIE_EPSILONS * float(torch.finfo(values.dtype).eps)


def tie_classes(values):
    """class_of[..., t]: the tie class of each value, 0 for the smallest, increasing with the value
    (see the module docstring); values [..., V]."""
    order, classes = _ascending_classes(values)
    return backend.unpermute(classes, order)


def _ascending_classes(values):
    """(order, classes): an order sorting ``values`` [..., V] ascending (equal values in any order) and the tie
    class at each of its positions [..., V]: 0 first, non-decreasing, each class a run of neighbours. The classes
    do not depend on how equal values are ordered: the tie test reads only the values of neighbours."""
    xp = backend.namespace(values)
    order = backend.ascending_order(values)
    ordered = backend.take_along_last(values, order)
    low, high = ordered[..., :-1], ordered[..., 1:]
    scale = xp.maximum(high, -low)  # = max(|low|, |high|) as low <= high (NaN, sorted last, propagates in both)
    tied = (high == low) | (high - low <= tie_tolerance(values) * scale)
    classes = xp.zeros(order.shape, dtype=xp.int64, device=backend.device(order))
    classes[..., 1:] = backend.cumulative_sum(xp.astype(~tied, xp.int64))
    return order, classes


def order_with_ties(values, *, descending: bool, larger_id_first: bool = False, tier=None):
    """Token order [..., V] by ``values`` with the tie rule: ascending (or descending) by tie class, and
    within a class by token id (ascending, or descending when ``larger_id_first``). ``tier`` [..., V]
    (optional, integers >= 0) dominates everything: lower tiers come first.

    One sort of the values, then O(V) passes: the classes are runs of the ascending order, so ordering each run
    by id (only runs that are not already in id order are sorted), reversing the runs or the whole order and a
    stable partition by tier give the order of the key (tier, class, id) without sorting it."""
    xp = backend.namespace(values)
    if values.shape[-1] < 2:
        return backend.argsort(values)
    order, classes = _ascending_classes(values)
    order = _ids_ascending_in_classes(order, classes)
    if larger_id_first != descending:  # reversing the whole order below reverses each class as well
        order = _reversed_in_classes(order, classes)
    if descending:
        order = xp.flip(order, axis=-1)
    return order if tier is None else _by_tier(order, tier)


def _global_classes(classes):
    """Class ids [R * V] unique across the R = prod(leading) rows of ``classes`` [..., V] (row r's class c is
    r * V + c), in the flattened positions; non-decreasing where each row's classes are."""
    xp = backend.namespace(classes)
    size = classes.shape[-1]
    rows = xp.reshape(classes, (-1, size))
    offsets = backend.arange(rows.shape[0], rows)[:, None] * size
    return xp.reshape(rows + offsets, (-1,))


def _ids_ascending_in_classes(order, classes):
    """``order`` [..., V] with the tokens of each class (a run of ``classes`` [..., V], non-decreasing) in
    ascending id. A stable sort leaves equal values in id order, so only classes that hold unequal values (near
    ties) or come from an unstable sort can be out of order; only those are sorted."""
    xp = backend.namespace(order)
    size = order.shape[-1]
    misordered = (classes[..., 1:] == classes[..., :-1]) & (order[..., 1:] < order[..., :-1])  # [..., V - 1]
    if not bool(xp.any(misordered)):
        return order
    flat_classes = _global_classes(classes)                                                  # [R * V]
    starts = xp.reshape(flat_classes, (-1, size))[:, 1:][xp.reshape(misordered, (-1, size - 1))]
    marked = xp.zeros(flat_classes.shape, dtype=xp.bool, device=backend.device(order))
    marked[starts] = True                                                                    # classes to sort
    positions = xp.nonzero(marked[flat_classes])[0]  # ascending: their runs, in class order
    flat = xp.reshape(order, (-1,))
    tokens = flat[positions]
    by_class_and_id = backend.argsort(flat_classes[positions] * size + tokens)
    flat[positions] = tokens[by_class_and_id]
    return xp.reshape(flat, order.shape)


def _reversed_in_classes(order, classes):
    """``order`` [..., V] with the tokens of each class (a run of ``classes`` [..., V]) in reverse order; O(V)."""
    xp = backend.namespace(order)
    flat_classes = _global_classes(classes)                                                  # [R * V]
    count = flat_classes.shape[0]
    first = xp.concat([xp.ones((1,), dtype=xp.bool, device=backend.device(order)),
                       flat_classes[1:] != flat_classes[:-1]])                               # a run starts here
    starts = xp.nonzero(first)[0]                                                            # [runs]
    ends = xp.concat([starts[1:], backend.index_array([count], starts)])
    run = backend.cumulative_sum(xp.astype(first, xp.int64)) - 1                             # [R * V]
    source = (starts + ends - 1)[run] - backend.arange(count, run)  # position i of [s, e) takes s + e - 1 - i
    return xp.reshape(xp.reshape(order, (-1,))[source], order.shape)


def _by_tier(order, tier):
    """``order`` [..., V] stably partitioned by ``tier`` [..., V] (integers >= 0, lower first)."""
    xp = backend.namespace(order)
    if bool(xp.all(tier == tier[..., :1])):
        return order
    ranked = backend.take_along_last(tier, order)
    if isinstance(ranked, np.ndarray) and 0 <= int(ranked.min()) and int(ranked.max()) < 1 << 15:
        ranked = ranked.astype(np.int16)  # numpy's stable sort of 16-bit keys is a counting sort: O(V)
    return backend.take_along_last(order, backend.argsort(ranked))


def ranks_from_order(order):
    """rank[..., t] = position of token t in ``order`` (the inverse permutation)."""
    return backend.inverse_permutation(order)


def ranked_support(q) -> list[int]:
    """Tokens with q > 0, by q decreasing, ties (the tie rule) by the smaller token id first."""
    order = np.asarray(backend.to_numpy(order_with_ties(q, descending=True)))
    values = np.asarray(backend.to_numpy(q))
    return [int(t) for t in order[values[order] > 0]]  # vectorised: real vocabularies have 150k tokens


#: Above this many tokens, ``top_tokens`` ranks only a candidate set instead of sorting the whole vocabulary.
PARTIAL_RANKING_SIZE = 4096


def _top_candidates(values: np.ndarray, count: int) -> np.ndarray:
    """Token ids, ascending, that hold the ``count`` best tokens of a float64 vector under the tie rule: the
    ``count`` largest values, then every value within the tie gap below the smallest kept, repeated until no
    excluded value is tied to a kept one. An excluded value is then below every kept value by more than the
    tie gap, so it is in a lower tie class than all of them, and the order among the kept tokens is the order
    of the whole vocabulary."""
    kept = np.argpartition(-values, count - 1)[:count]
    floor = float(values[kept].min())
    while True:
        bound = floor - TIE_RTOL * abs(floor) * 2  # a tie gap relative to the larger value, with margin
        chosen = np.flatnonzero(values >= bound)
        lowest = float(values[chosen].min())
        if lowest >= floor:
            return chosen
        floor = lowest


def top_tokens(q, count: int) -> tuple[int, ...]:
    """The ``count`` highest-ranked tokens of q (fewer when q's support is smaller), best first."""
    if (isinstance(q, np.ndarray) and q.dtype == np.float64 and q.ndim == 1 and len(q) > PARTIAL_RANKING_SIZE
            and 0 < count < len(q) // 2):
        # a real vocabulary: rank a candidate set, not 150k tokens (same tie rule, same result)
        candidates = _top_candidates(q, count)
        return tuple(int(candidates[t]) for t in ranked_support(q[candidates])[:count])
    return tuple(ranked_support(q)[:count])


def hub_token(q) -> int:
    """SpecHub's hub a = argmax q; among tied maxima the smallest token id."""
    return top_tokens(q, 1)[0]


def top_token_batch(q, count: int):
    """The ``count`` best tokens of every row of q [N, V] by ``ranked_support``'s rule: [N, count] int,
    -1 where a row's support is smaller."""
    xp = backend.namespace(q)
    order = order_with_ties(q, descending=True)[..., :count]
    drafted = xp.take_along_axis(q, order, axis=-1) > 0
    return xp.where(drafted, order, -1)


def without_tokens(q, tokens):
    """q with ``tokens`` zeroed, NOT renormalised (a new array; the input is never modified)."""
    rest = q.copy()
    for token in tokens:
        rest[token] = 0 * rest[token]
    return rest


def best_index_with_ties(values: list) -> int:
    """The index of the largest of ``values`` under the tie rule, the smallest index among tied maxima (a
    Python list of floats or of Fractions; DySpec's heap order with indices in creation order)."""
    exact = any(isinstance(v, Fraction) for v in values)
    array = np.array(values, dtype=object if exact else np.float64)
    return int(order_with_ties(array, descending=True)[0])
