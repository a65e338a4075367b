"""psbv at dense vocabularies (``verispec.verifiers.psbv_split.split_float``, ``position_arrays.realise_float``): the
vectorised float split, which builds measures only for the children asked for, is the same split as the reference
(``split_exact``, one ``realise`` per block), and the iterative ``realise`` is the recursive one it replaced.

Expected values come from elsewhere: the recursive ``realise`` as it was before it was made iterative (copied below,
``recursive_realise``), exact rationals through ``split_exact`` (converted to float once at the end), the piecewise
densities at the midpoints of every elementary interval, and, for whole trees, psbv's rule-dp law (the full split,
every child's measure) against the closed form and enumeration (tree_states: the drafted children's measures only).
"""

from __future__ import annotations

import random
import sys
import time
from fractions import Fraction

import numpy as np
import pytest

from tests.lp_analysis.test_position_measures import binomial_value
from verispec.errors import ProblemTooLargeError
from verispec.lp_analysis.position_measures import (
    FLOAT_DEPTH_SLACK,
    FLOAT_SLACK,
    MAX_RATIO_ITERATIONS,
    PositionMeasure,
    ordered_by_key,
    ordered_tiling,
    realise,
    sum_measures,
)
from verispec.simulator import analyze, parse_tree, random_problem
from verispec.verifiers import REGISTRY
from verispec.verifiers.psbv_split import split_exact, split_float

PSBV = REGISTRY["psbv"]


def recursive_realise(targets, masses, segment, paths, exact, weight=1):
    """``realise`` as a recursion (before the explicit stack), with the float depth slack."""
    children = list(targets)
    if len(children) == 1:
        return {children[0]: segment}
    zero = segment.value(paths) * 0
    order = [children[i] for i in ordered_by_key([targets[c] / masses[c] for c in children], exact)]
    tiling = ordered_tiling(segment, order, masses)
    gap = {c: targets[c] - tiling[c].value(paths) for c in children}
    slack = 0 if exact else FLOAT_SLACK * max(abs(segment.value(paths)), 1e-300)
    largest = max(abs(value) for value in gap.values())
    if largest <= slack or (not exact and weight * largest <= FLOAT_DEPTH_SLACK * abs(segment.value(paths))):
        return tiling
    first = max(children, key=lambda c: gap[c])
    tight, ratio = [first], (segment.values_below([masses[first]], paths)[0] - targets[first]) / gap[first]
    for _ in range(MAX_RATIO_ITERATIONS):
        ratio = max(ratio, zero)
        shifted = [children[i]
                   for i in ordered_by_key([(targets[c] + ratio * gap[c]) / masses[c] for c in children], exact)]
        cuts, mass = [], 0
        for child in shifted[:-1]:
            mass = mass + masses[child]
            cuts.append(mass)
        psi = segment.values_below(cuts, paths)
        best, best_k, value, difference = None, None, zero, zero
        for k, child in enumerate(shifted[:-1]):
            value, difference = value + targets[child], difference + gap[child]
            excess = psi[k] - value - ratio * difference
            if best is None or excess < best:
                best, best_k = excess, k
        if best >= -slack:
            break
        tight = shifted[:best_k + 1]
        ratio = (psi[best_k] - sum((targets[c] for c in tight), zero)) / sum((gap[c] for c in tight), zero)
    else:
        assert not exact
        return tiling
    ratio = max(ratio, zero)
    face = {c: targets[c] + ratio * gap[c] for c in children}
    low_mass = sum((masses[c] for c in tight), zero)
    rest = [c for c in children if c not in tight]
    share = 1 / (1 + ratio)
    part = recursive_realise({c: face[c] for c in tight}, masses, segment.window(0, low_mass), paths, exact,
                             weight * share)
    part.update(recursive_realise({c: face[c] for c in rest}, masses, segment.window(low_mass, segment.mass()),
                                  paths, exact, weight * share))
    return {c: sum_measures([part[c].scaled(share), tiling[c].scaled(1 - share)]) for c in children}


def rational_conditional(rng: random.Random, size: int, zeros: bool) -> list[Fraction]:
    weights = [rng.randint(0 if zeros else 1, 9) for _ in range(size)]
    if not any(weights):
        weights[rng.randrange(size)] = 1
    return [Fraction(w, sum(weights)) for w in weights]


def softmax_pair(rng: np.random.Generator, size: int) -> tuple[np.ndarray, np.ndarray]:
    """Dense p, q: a softmax of Gaussian logits, q's logits p's plus N(0, 1) (every token has q > 0)."""
    logits = 2 * rng.normal(size=size)
    p, q = np.exp(logits), np.exp(logits + rng.normal(size=size))
    return p / p.sum(), q / q.sum()


def as_float(measure: PositionMeasure) -> PositionMeasure:
    return PositionMeasure(tuple((float(a), float(b), float(d)) for a, b, d in measure.pieces))


def mass_below(pieces, y: float) -> float:
    return sum(float(d) * (min(float(b), y) - float(a)) for a, b, d in pieces if float(a) < y)


def assert_same_measure(actual: PositionMeasure, expected: PositionMeasure, tolerance: float) -> None:
    """Equal cumulative masses (the measure of [0, y]) at every breakpoint of either, to ``tolerance``: robust to
    breakpoints that rounding moves by an ulp, unlike densities at points."""
    points = sorted({float(x) for m in (actual, expected) for a, b, _ in m.pieces for x in (a, b)})
    for y in points:
        assert abs(mass_below(actual.pieces, y) - mass_below(expected.pieces, y)) <= tolerance, y


def test_the_iterative_realise_is_the_recursive_one_exactly():
    """Random rational splits two levels deep (K = 2..4, V = 2..9): the same pieces, exactly."""
    for seed in range(30):
        rng = random.Random(seed)
        size, paths = rng.randint(2, 9), rng.randint(2, 4)
        measure = PositionMeasure.uniform(Fraction(1))
        for _ in range(2):
            p, q = rational_conditional(rng, size, True), rational_conditional(rng, size, True)
            values, measures = split_exact(measure, p, q, paths, True)
            import verispec.verifiers.psbv_split as split_module
            try:
                split_module.realise = recursive_realise
                expected_values, expected = split_exact(measure, p, q, paths, True)
            finally:
                split_module.realise = realise
            assert values == expected_values
            assert {c: m.pieces for c, m in measures.items()} == {c: m.pieces for c, m in expected.items()}
            measure = measures[max(measures, key=lambda c: measures[c].mass())]


def test_realise_keeps_its_stack_off_the_interpreter():
    """A block whose ray shooting peels one child per step goes deeper than the interpreter's recursion limit
    allows a recursion to: the iterative realise does not recurse."""
    rng = np.random.default_rng(3)
    p, q = softmax_pair(rng, 400)
    limit = sys.getrecursionlimit()
    depth = 0
    frame = sys._getframe()
    while frame is not None:
        depth, frame = depth + 1, frame.f_back
    sys.setrecursionlimit(depth + 60)
    try:
        values, measures = split_exact(PositionMeasure.uniform(1.0), p.tolist(), q.tolist(), 4, False)
    finally:
        sys.setrecursionlimit(limit)
    assert sum(values) == pytest.approx(1.0, abs=1e-12)
    with pytest.raises(RecursionError):
        sys.setrecursionlimit(depth + 60)
        try:
            split_with_recursion(PositionMeasure.uniform(1.0), p.tolist(), q.tolist(), 4)
        finally:
            sys.setrecursionlimit(limit)


def split_with_recursion(measure, p, q, paths):
    import verispec.verifiers.psbv_split as split_module
    try:
        split_module.realise = recursive_realise
        return split_exact(measure, p, q, paths, False)
    finally:
        split_module.realise = realise


@pytest.mark.parametrize("paths", [1, 2, 3, 4])
@pytest.mark.parametrize("seed", range(5))
def test_the_float_split_is_the_exact_split_in_float(paths, seed):
    """Rational conditionals (zeros and ties included): split_float's values and measures equal split_exact's in
    rationals, converted to float, to 1e-12, at the root and one level down."""
    rng = random.Random(100 * paths + seed)
    size = rng.randint(2, 12)
    exact_measure = PositionMeasure.uniform(Fraction(1))
    for _ in range(2):
        p, q = rational_conditional(rng, size, True), rational_conditional(rng, size, True)
        values, measures = split_exact(exact_measure, p, q, paths, True)
        approximate, approximate_measures = split_float(as_float(exact_measure), [float(x) for x in p],
                                                        [float(x) for x in q], paths)
        assert approximate == pytest.approx([float(v) for v in values], abs=1e-12)
        assert set(approximate_measures) == set(measures)
        for token, measure in measures.items():
            assert_same_measure(approximate_measures[token], as_float(measure), 1e-12)
            assert binomial_value(measure.pieces, paths) == values[token]
        exact_measure = measures[max(measures, key=lambda c: measures[c].mass())]


@pytest.mark.parametrize("size,paths", [(30, 2), (60, 3), (80, 4)])
def test_the_float_split_is_the_reference_float_split(size, paths):
    """Dense softmax conditionals: split_float equals split_exact run in float (the block by block reference), at
    the root and two levels down: the values to 1e-12, every measure's cumulative mass to 1e-9 of the parent's mass.
    Not 1e-12 for the measures: ray shooting peels about one child per step in a long block, each step's face
    z = v + t (v - y) amplifies rounding, so summing in another order (numpy's cumulative sums, windows taken from
    the node's measure rather than from the block's) moves the deep steps' shares; their weight is the product of
    the shares above, so the measures move by about 1e-12 absolute where a child's mass is 1e-6."""
    rng = np.random.default_rng(size + paths)
    measure = PositionMeasure.uniform(1.0)
    for _ in range(3):
        p, q = softmax_pair(rng, size)
        values, measures = split_exact(measure, p.tolist(), q.tolist(), paths, False)
        fast_values, fast_measures = split_float(measure, p, q, paths)
        assert fast_values == pytest.approx(values, abs=1e-12)
        assert set(fast_measures) == set(measures)
        for token, child in measures.items():
            assert_same_measure(fast_measures[token], child, 1e-9 * measure.mass())
        drafted = rng.choice(size, size=paths, p=q)
        measure = measures[int(drafted[0])]


@pytest.mark.parametrize("paths", [2, 3, 4])
def test_a_dense_float_split_is_the_rational_split_of_its_numbers(paths):
    """Dense softmax conditionals at V = 40, their floats read exactly as rationals: split_float's values and
    measures equal split_exact's in rationals to 1e-12 (the values to 1e-15)."""
    rng = np.random.default_rng(40 + paths)
    p, q = softmax_pair(rng, 40)
    exact_p, exact_q = [Fraction(x) for x in p], [Fraction(x) for x in q]
    exact_p, exact_q = [x / sum(exact_p) for x in exact_p], [x / sum(exact_q) for x in exact_q]
    values, measures = split_exact(PositionMeasure.uniform(Fraction(1)), exact_p, exact_q, paths, True)
    fast_values, fast_measures = split_float(PositionMeasure.uniform(1.0), np.asarray(exact_p, dtype=float),
                                             np.asarray(exact_q, dtype=float), paths)
    assert fast_values == pytest.approx([float(v) for v in values], abs=1e-15)
    for token, measure in measures.items():
        assert_same_measure(fast_measures[token], measure, 1e-12)


@pytest.mark.parametrize("paths", [2, 4])
def test_the_measures_asked_for_do_not_change_the_values_or_each_other(paths):
    rng = np.random.default_rng(paths)
    p, q = softmax_pair(rng, 300)
    parent = split_float(PositionMeasure.uniform(1.0), *softmax_pair(rng, 300), paths)[1]
    measure = parent[max(parent, key=lambda c: parent[c].mass())]
    values, measures = split_float(measure, p, q, paths)
    drafted = [int(c) for c in rng.choice(300, size=paths, p=q)]
    some_values, some = split_float(measure, p, q, paths, drafted)
    assert some_values == values  # the same numbers, not just close
    assert set(some) == set(drafted)
    for token in drafted:
        assert some[token].pieces == measures[token].pieces


@pytest.mark.parametrize("spec,size", [("iid:2,2", 4), ("iid:3,2", 3),
                                       pytest.param("iid:4,2", 3, marks=pytest.mark.slow),
                                       ("delayed:2,1,2", 3), ("delayed:3,1,2", 3), ("delayed:4,2,1", 2)])
def test_trees_with_the_drafted_measures_only_agree_with_the_full_splits(spec, size):
    """In float, closed form and enumeration (tree_states: split_float with the drafted children's measures) agree
    with rule-dp (every child's measure) to 1e-12, and each is lossless."""
    problem = random_problem(size, parse_tree(spec).depth, 5, divergence=0.8, concentration=0.5, zero_fraction=0.2)
    results = {method: analyze(problem, spec, PSBV, method=method) for method in ("closed-form", "enumerate",
                                                                                  "rule-dp")}
    for method, result in results.items():
        assert result.tv_distance < 1e-12, (spec, method)
    reference = results["rule-dp"].output_law.by_length
    for method in ("closed-form", "enumerate"):
        for a, b in zip(reference, results[method].output_law.by_length):
            assert np.max(np.abs(np.asarray(a, dtype=float) - np.asarray(b, dtype=float))) <= 1e-12, (spec, method)


def _check_split(measure: PositionMeasure, p, q, paths: int, values, measures) -> None:
    """The children's values add up to the parent's, and each built measure has mass q(u) q(c | u) and value g."""
    assert sum(values) == pytest.approx(measure.value(paths), rel=1e-9)
    for token, child in measures.items():
        assert child.mass() == pytest.approx(measure.mass() * q[token], rel=1e-9)
        assert child.value(paths) == pytest.approx(values[token], rel=1e-9, abs=1e-300)


def test_a_dense_split_at_v_20000_is_fast():
    rng = np.random.default_rng(0)
    p, q = softmax_pair(rng, 20_000)
    drafted = [int(c) for c in rng.choice(20_000, size=2, p=q)]
    start = time.perf_counter()
    values, measures = split_float(PositionMeasure.uniform(1.0), p, q, 2, drafted)
    assert time.perf_counter() - start < 20  # about 1 s on one core
    _check_split(PositionMeasure.uniform(1.0), p, q, 2, values, measures)


@pytest.mark.slow
def test_a_split_at_qwens_vocabulary_finishes_without_recursion():
    """V = 151,936 dense, K = 2: the split finishes (a few seconds on one core; before, realise's recursion went
    past the interpreter's limit), its values add up and the drafted children's measures have their masses."""
    rng = np.random.default_rng(1)
    size = 151_936
    p, q = softmax_pair(rng, size)
    drafted = [int(c) for c in rng.choice(size, size=2, p=q)]
    values, measures = split_float(PositionMeasure.uniform(1.0), p, q, 2, drafted)
    _check_split(PositionMeasure.uniform(1.0), p, q, 2, values, measures)


def test_a_split_too_large_is_refused_before_its_decomposition_on_one_line(monkeypatch):
    """Under a lower limit, V = 151,936 with K = 4 (one block of most of the vocabulary) is refused after the sort
    and the convex minorant, before any decomposition; and a split that runs past the limit despite the forecast
    stops with the same typed error."""
    import verispec.verifiers.psbv_split as split_module

    rng = np.random.default_rng(1)
    size = 151_936
    p, q = softmax_pair(rng, size)
    monkeypatch.setattr(split_module, "MAX_DECOMPOSITION_STEPS", 10_000_000)
    start = time.perf_counter()
    with pytest.raises(ProblemTooLargeError) as refused:
        split_float(PositionMeasure.uniform(1.0), p, q, 4, [0])
    assert time.perf_counter() - start < 10  # a sort and a minorant: well under a second on one core
    message = str(refused.value)
    assert "\n" not in message and "151,936" in message and "top-k" in message
    p, q = softmax_pair(rng, 2000)
    monkeypatch.setattr(split_module, "MAX_DECOMPOSITION_STEPS", 100_000)
    monkeypatch.setattr(split_module, "STEPS_PER_CHILD", 0)  # the forecast lets it start
    with pytest.raises(ProblemTooLargeError, match="ran past"):
        split_float(PositionMeasure.uniform(1.0), p, q, 4, [0])


def test_an_exact_split_of_too_many_children_is_refused():
    q = [Fraction(1, 5000)] * 5000
    with pytest.raises(ProblemTooLargeError, match="exact split at V=5,000"):
        split_exact(PositionMeasure.uniform(Fraction(1)), q, q, 2, True)


def test_the_descending_order_follows_the_tie_rule():
    """Exact ties and near ties (within TIE_RTOL) in index order, against order_with_ties."""
    from verispec.lp_analysis.position_arrays import descending_order
    from verispec.simulator.ranking import order_with_ties

    rng = np.random.default_rng(0)
    for size in (2, 5, 50, 5000, 20000):
        keys = rng.random(size)
        exact_ties = np.round(keys * 7) / 7
        near_ties = exact_ties * (1 + 1e-14 * rng.random(size))
        for values in (keys, exact_ties, near_ties, np.zeros(size)):
            assert descending_order(values).tolist() == order_with_ties(values, descending=True).tolist()


def test_a_batch_splits_a_shared_node_once_and_gives_each_tree_its_own_law(monkeypatch):
    """Trees of one batch at the same root (other drafted children): emission_laws splits the root once, for every
    drafted child of every tree, and each tree's law is the one it gets alone from a fresh verifier (the values do
    not depend on which measures are built): exactly equal arrays."""
    import verispec.verifiers.psbv as psbv_module
    from verispec.simulator.problems import ContextFreeProblem
    from verispec.simulator.trees import DraftTree, TreeBatch

    rng = np.random.default_rng(7)
    size, paths, rows = 300, 3, 4
    p, q = softmax_pair(rng, size)
    problem = ContextFreeProblem(p, q)
    trees = []
    for _ in range(rows):  # distinct tokens: every tree has the shape of iid:3,2 without merges
        first, second = rng.choice(size, paths, replace=False), rng.choice(size, paths, replace=False)
        trees.append(DraftTree.from_paths(problem, [[int(a), int(b)] for a, b in zip(first, second)]))
    single = [tree.as_batch() for tree in trees]
    batch = TreeBatch(vocab_size=size, parent=single[0].parent, depth=single[0].depth,
                      child_lists=single[0].child_lists,
                      tokens=np.concatenate([b.tokens for b in single]), p=np.concatenate([b.p for b in single]),
                      q=np.concatenate([b.q for b in single]),
                      contexts=np.concatenate([b.contexts for b in single]))
    calls = []
    import verispec.verifiers.psbv_split as split_module

    real_split_float = split_module.split_float

    def counting(measure, *args):
        calls.append(len(measure.pieces))
        return real_split_float(measure, *args)

    monkeypatch.setattr(split_module, "split_float", counting)
    laws = np.asarray(psbv_module.PositionSharingBlockVerifier().emission_laws(batch))
    assert len(calls) == 1 + rows * paths  # the root once, then each tree's K children
    alone = [np.asarray(psbv_module.PositionSharingBlockVerifier().emission_laws(b))[0] for b in single]
    assert len(calls) == 1 + rows * paths + rows * (1 + paths)
    for row in range(rows):
        assert np.array_equal(laws[row], alone[row])
        assert laws[row].sum() == pytest.approx(1.0, abs=1e-12)


def lexicographic_base_at_the_root(p: np.ndarray, q: np.ndarray, paths: int) -> np.ndarray:
    """psbv's values at the root, from the definition (module docstring of verispec.verifiers.psbv), independently of
    the code: children in decreasing p / q (continuous random data has no ties), Psi(x) = 1 - (1 - x)^K for the
    uniform measure, the greatest convex minorant of (cumulative p, Psi(cumulative q)) by a plain lower hull, and
    inside each of its blocks the block's rise of Psi shared in proportion to p."""
    order = np.argsort(-(p / q))
    weights = np.concatenate([[0.0], np.cumsum(p[order])])
    psi = 1 - (1 - np.minimum(np.concatenate([[0.0], np.cumsum(q[order])]), 1.0)) ** paths
    hull = [0]
    for k in range(1, len(weights)):
        while len(hull) >= 2 and (psi[hull[-1]] - psi[hull[-2]]) * (weights[k] - weights[hull[-1]]) >= \
                (psi[k] - psi[hull[-1]]) * (weights[hull[-1]] - weights[hull[-2]]):
            hull.pop()
        hull.append(k)
    values = np.zeros(len(p))
    for start, stop in zip(hull, hull[1:]):
        block = order[start:stop]
        values[block] = (psi[stop] - psi[start]) * p[block] / p[block].sum()
    return values


def zipf_pair(rng: np.random.Generator, size: int) -> tuple[np.ndarray, np.ndarray]:
    """A language model's shape: logits falling as 1.1 log(rank) plus N(0, 1), in random token order; q's logits p's
    plus N(0, 1). Long heavy-tailed blocks, where the decomposition runs hundreds of steps deep."""
    logits = -1.1 * np.log(np.arange(1, size + 1)) + rng.normal(size=size)
    logits = logits[rng.permutation(size)] - logits.max()
    p, q = np.exp(logits), np.exp(logits + rng.normal(size=size))
    return p / p.sum(), q / q.sum()


@pytest.mark.parametrize("paths", [2, 4])
@pytest.mark.parametrize("seed", range(3))
def test_a_float_split_realises_the_lexicographic_base_to_1e_12(paths, seed):
    """The values a float split's measures realise are psbv's values (the lexicographically optimal base, above) to
    1e-12 in L1 at V = 5,000. With the minimum-ratio search stopped at FLOAT_SLACK (1e-9 of the segment's value, as
    it was) they missed by 4e-12 to 1.7e-10: each step's face landed outside the polytope by the overshoot, and the
    error compounded down the block."""
    p, q = zipf_pair(np.random.default_rng(seed), 5000)
    values, _ = split_float(PositionMeasure.uniform(1.0), p, q, paths, [int(np.argmax(q))])
    assert np.abs(np.asarray(values) - lexicographic_base_at_the_root(p, q, paths)).sum() <= 1e-12


@pytest.mark.parametrize("seed", range(3))
def test_a_face_off_its_segments_value_by_rounding_costs_no_more_steps(seed):
    """realise_float on one segment (the uniform measure, K = 2, V = 5,000 Zipf-shaped masses) with a feasible
    point (the mean of two opposite tilings), then the same point moved off the segment's value by 1e-13 and 1e-11
    (what rounding leaves a face deep in a block): the same values to 1e-12 in L1 and no more than twice the
    child-steps. Without balancing, each step's z = v + t (v - y) doubled the offset its sub-steps inherit and the
    steps grew up to 130-fold here (at a real T = 1 root of the Qwen pair, the sum drifted to 36 times the
    segment's value and the split ran for minutes)."""
    from verispec.lp_analysis.position_arrays import MeasureArrays, _RealiseCost, realise_float

    size = 5000
    p, q = zipf_pair(np.random.default_rng(seed), size)
    arrays = MeasureArrays(PositionMeasure.uniform(1.0), 2)

    def tiling(order):  # each child's window of the uniform measure, stacked in this order: (1 - a)^2 - (1 - b)^2
        bottoms = np.concatenate([[0.0], np.cumsum(q[order])[:-1]])
        tops = np.minimum(bottoms + q[order], 1.0)
        values = np.empty(size)
        values[order] = (1 - bottoms) ** 2 - (1 - tops) ** 2
        return values

    point = 0.5 * tiling(np.argsort(-p / q)) + 0.5 * tiling(np.argsort(p / q))
    runs = []
    for offset in (0.0, 1e-13, 1e-11):
        values, cost = np.zeros(size), _RealiseCost(10**10, "")
        realise_float(arrays, np.arange(size), point + offset * q, q.copy(), 0.0, 1.0, values,
                      np.zeros(size, dtype=bool), {}, cost)
        runs.append((values, cost.steps))
    for values, steps in runs[1:]:
        assert np.abs(values - runs[0][0]).sum() <= 1e-12
        assert steps <= 2 * runs[0][1]
