"""psbv's blended split, ``psbv(blend=1)`` (``verispec.verifiers.psbv_blend``; issue 66, item 5): each block of the
minorant realised by bisection blends of tiling and even share. The rule must stay lossless because block
verification uses the law the blended measures realise; these tests check that exactly in rationals (the enumerated
sampling procedure against the target, and the batched law and the position-selection sum against the enumerated
procedure), with a broken twin (the blend's positions verified with the exact split's law) that the same check
reports lossy; the split itself against definitions (the children partition the parent, values are the integrals of
their measures, the first cut of a block reaches its target exactly); and the float split against the rational one,
with a perturbed float blend that the comparison catches."""

from __future__ import annotations

import itertools
import random
from fractions import Fraction

import numpy as np
import pytest

from tests.lp_analysis.test_position_measures import assert_partition, binomial_value, random_measure
from tests.verifiers.test_delayed_block_rules import exact_problem
from verispec.errors import ProblemTooLargeError, UnknownVerifierError
from verispec.lp_analysis.position_measures import PositionMeasure, ordered_tiling
from verispec.simulator import TabularProblem, analyze, parse_tree
from verispec.verifiers import REGISTRY, get_verifier, psbv, psbv_blend, psbv_split
from verispec.verifiers.psbv import PositionSharingBlockVerifier, _NodeState
from verispec.verifiers.psbv_blend import blend_block_exact, blend_share
from verispec.verifiers.psbv_split import split

METHODS = ("enumerate", "closed-form", "rule-dp")


def test_the_blend_share_reaches_a_target_between_the_two_realisations_and_clips_outside():
    tiled, even = Fraction(3, 4), Fraction(1, 4)
    for target in (Fraction(1, 4), Fraction(2, 5), Fraction(3, 4)):
        share = blend_share(target, tiled, even)
        assert share * tiled + (1 - share) * even == target
    assert blend_share(Fraction(9, 10), tiled, even) == 1 and blend_share(Fraction(1, 10), tiled, even) == 0
    assert blend_share(Fraction(1, 3), Fraction(1, 2), Fraction(1, 2)) == 1  # the two agree: the tiling
    floats = blend_share(np.asarray([0.4, 0.9, 0.1, 0.3]), np.asarray([0.75, 0.75, 0.75, 0.5]),
                         np.asarray([0.25, 0.25, 0.25, 0.5]))
    assert np.allclose(floats, [0.3, 1.0, 0.0, 1.0], rtol=0, atol=1e-15)


def test_the_first_cut_of_a_block_is_exact_and_the_children_partition_it():
    # the first half of a block (the larger ratios p / q) has its target between the even share and the tiling, so
    # the first cut reaches it exactly; checked on the segment and targets of psbv's exact split (one block)
    rng = random.Random(2)
    for _ in range(20):
        size, paths = rng.randint(2, 6), rng.randint(2, 4)
        segment = random_measure(rng)
        masses = {c: segment.mass() * w for c, w in enumerate(random_conditional(rng, size)) if w > 0}
        block = list(masses)
        tiled = ordered_tiling(segment, block, masses)
        mix = Fraction(rng.randint(0, 8), 8)  # a point of the base polytope: a blend of the tiling and the even share
        targets = {c: mix * tiled[c].value(paths) + (1 - mix) * segment.value(paths) * masses[c] / segment.mass()
                   for c in block}
        measures = blend_block_exact(block, targets, masses, segment, paths)
        assert_partition(list(measures.values()), segment)
        half = block[:len(block) // 2]
        assert sum(measures[c].value(paths) for c in half) == sum(targets[c] for c in half)
        assert all(measures[c].mass() == masses[c] for c in block)


def random_conditional(rng: random.Random, size: int) -> list[Fraction]:
    weights = [rng.randint(0, 4) for _ in range(size)]  # zeros and ties between ratios p / q
    if not any(weights):
        weights[rng.randrange(size)] = 1
    return [Fraction(w, sum(weights)) for w in weights]


@pytest.mark.parametrize("paths", [1, 2, 3])
@pytest.mark.parametrize("seed", range(3))
def test_the_children_partition_their_parent_and_their_values_are_their_integrals(paths, seed):
    rng, size = random.Random(seed), 4
    measures = [PositionMeasure.uniform(Fraction(1))]
    for _ in range(2):  # a root, then a child's measure (pieces of two densities), then one of its children
        p, q = random_conditional(rng, size), random_conditional(rng, size)
        values, children = split(measures[-1], p, q, paths, exact=True, blend=True)
        assert set(children) == {c for c in range(size) if q[c] > 0}
        assert_partition(list(children.values()), measures[-1])
        for token, measure in children.items():
            assert measure.mass() == measures[-1].mass() * q[token]
            assert values[token] == binomial_value(measure.pieces, paths)
        measures.append(children[max(children, key=lambda c: q[c])])


@pytest.mark.parametrize("spec", ["iid:2,2", "iid:3,2", "delayed:2,1,1", "delayed:3,1,2"])
def test_on_two_tokens_the_blend_is_the_exact_split(spec):
    # two children of a block span a segment of the base polytope whose ends are the tiling and the reverse tiling,
    # and the target lies between the tiling and the even share (the chord is below the points, above the even
    # share): the blend reaches it, so psbv(blend=1) has psbv's law
    problem = exact_problem(2, parse_tree(spec).depth, 3)
    blend = analyze(problem, spec, get_verifier("psbv(blend=1)"), method="rule-dp").output_law.by_length
    exact = analyze(problem, spec, REGISTRY["psbv"], method="rule-dp").output_law.by_length
    assert all((a == b).all() for a, b in zip(blend, exact))


def test_negative_control_on_three_tokens_the_blend_is_not_the_exact_split():
    problem = exact_problem(3, 2, 5)  # (on one path, L = 1, the two agree wherever this was tried)
    blend = analyze(problem, "iid:3,2", get_verifier("psbv(blend=1)"), method="rule-dp").block_efficiency
    exact = analyze(problem, "iid:3,2", REGISTRY["psbv"], method="rule-dp").block_efficiency
    assert blend != exact


def test_where_the_draft_is_the_target_the_blend_accepts_every_draft():
    # p = q at every prefix: one block whose targets are the even share, so the selected path's law is q = p and
    # block verification accepts all L drafts: E[tau+1] = L + 1 (GBV, the tiling, falls short)
    rng = random.Random(4)
    law = {u: [Fraction(w, 10) for w in (5, 3, 2)] for length in range(3)
           for u in itertools.product(range(3), repeat=length)}
    law = {u: random_conditional(rng, 3) if u else row for u, row in law.items()}
    problem = TabularProblem(3, law, law, exact=True, horizon=2)
    assert analyze(problem, "iid:3,2", get_verifier("psbv(blend=1)"), method="rule-dp").block_efficiency == 3
    assert analyze(problem, "iid:3,2", REGISTRY["gbv"], method="rule-dp").block_efficiency < 3


def assert_exactly_lossless(problem, spec: str, verifier, methods=METHODS) -> None:
    results = {method: analyze(problem, spec, verifier, method=method) for method in methods}
    for method, result in results.items():
        assert result.tv_distance == 0, f"{verifier.name} on {spec} by {method}: TV {result.tv_distance}"
    oracle = results["enumerate"].output_law.by_length  # the sampling procedure, enumerated
    for method in methods[1:]:
        assert all((a == b).all() for a, b in zip(oracle, results[method].output_law.by_length)), method


@pytest.mark.parametrize("spec,size,seed", [("iid:2,2", 3, 1), ("iid:3,1", 4, 2), ("iid:2,3", 2, 3),
                                            ("delayed:2,1,1", 3, 4), ("delayed:3,1,1", 3, 5),
                                            ("delayed:2,1,2", 3, 6), ("iid:2,1", 5, 7)])
def test_exactly_lossless_and_the_procedure_is_the_law(spec, size, seed):
    assert_exactly_lossless(exact_problem(size, parse_tree(spec).depth, seed), spec, get_verifier("psbv(blend=1)"))


class ExactLawOnBlendedPositions(PositionSharingBlockVerifier):
    """Broken twin: selects by the blended split's positions but verifies with the exact split's law (values)."""

    name = "psbv-twin"

    def __init__(self):
        super().__init__()
        self._exact_cache = psbv_split._SplitCache(psbv_split.SPLIT_CACHE_SIZE)

    def _states(self, tree, wanted=None):
        start = psbv.branch_point(tree)
        paths = len(tree.child_tokens[start])
        blended = psbv.tree_states(tree, paths, self._cache, start, None, True)
        exact = psbv.tree_states(tree, paths, self._exact_cache, start, None, False)
        return {node: _NodeState(blended[node].measure, exact[node].value, exact[node].child_values)
                for node in blended}


def test_broken_twin_the_other_realisations_law_is_caught():
    problem = exact_problem(3, 2, 11)  # where the two realisations differ
    blended = get_verifier("psbv(blend=1)")
    assert analyze(problem, "iid:2,2", blended, method="rule-dp").block_efficiency != \
        analyze(problem, "iid:2,2", REGISTRY["psbv"], method="rule-dp").block_efficiency
    assert_exactly_lossless(problem, "iid:2,2", blended)
    twin = ExactLawOnBlendedPositions()
    with pytest.raises(AssertionError, match="TV"):
        assert_exactly_lossless(problem, "iid:2,2", twin, ("enumerate", "closed-form"))
    assert analyze(problem, "iid:2,2", twin, method="closed-form").tv_distance > Fraction(1, 100)


@pytest.mark.parametrize("paths", [1, 2, 3])
@pytest.mark.parametrize("seed", range(3))
def test_the_float_split_is_the_rational_one_to_1e12(paths, seed):
    rng, size = random.Random(10 + seed), 7
    measure = PositionMeasure.uniform(Fraction(1))
    for _ in range(2):
        p, q = random_conditional(rng, size), random_conditional(rng, size)
        values, children = split(measure, p, q, paths, exact=True, blend=True)
        float_measure = PositionMeasure(tuple(tuple(float(x) for x in piece) for piece in measure.pieces))
        float_values, float_children = split(float_measure, [float(x) for x in p], [float(x) for x in q], paths,
                                             exact=False, blend=True)
        assert np.allclose(float_values, [float(v) for v in values], rtol=0, atol=1e-12)
        for token, child in children.items():
            ours = float_children[token]
            assert ours.mass() == pytest.approx(float(child.mass()), abs=1e-12)
            grid = np.linspace(0.0005, 0.9995, 1000)
            assert np.allclose([sum(d for a, b, d in ours.pieces if a <= y < b) for y in grid],
                               [float(sum(d for a, b, d in child.pieces if a <= y < b)) for y in grid], atol=1e-9)
        measure = children[max(children, key=lambda c: q[c])]


def test_negative_control_a_perturbed_float_blend_is_caught(monkeypatch):
    real = psbv_blend.blend_share
    monkeypatch.setattr(psbv_blend, "blend_share",
                        lambda target, tiled, even: real(target, tiled, even) * 0.9 if isinstance(tiled, np.ndarray)
                        else real(target, tiled, even))
    rng = random.Random(11)
    p, q = random_conditional(rng, 7), random_conditional(rng, 7)
    rational = split(PositionMeasure.uniform(Fraction(1)), p, q, 2, True, blend=True)[0]
    floats = split(PositionMeasure.uniform(1.0), [float(x) for x in p], [float(x) for x in q], 2, False, blend=True)[0]
    assert np.max(np.abs(np.asarray(floats) - np.asarray(rational, dtype=np.float64))) > 1e-4


def test_the_blend_runs_no_decomposition(monkeypatch):
    rng = np.random.default_rng(0)
    size = 3000
    logits = rng.standard_normal(size) * 2
    p = np.exp(logits) / np.exp(logits).sum()
    q = np.exp(logits + rng.standard_normal(size) * 0.5)
    q /= q.sum()
    monkeypatch.setattr(psbv_split, "MAX_DECOMPOSITION_STEPS", 10)
    with pytest.raises(ProblemTooLargeError, match="steps of decomposition"):  # negative control: the exact split
        split(PositionMeasure.uniform(1.0), p, q, 3, exact=False, wanted=[0])
    values, children = split(PositionMeasure.uniform(1.0), p, q, 3, exact=False, wanted=[0, 1], blend=True)
    assert sum(values) == pytest.approx(1.0, abs=1e-12) and set(children) == {0, 1}
    assert all(v >= 0 for v in values)


def test_the_blend_is_named_as_a_parameter_and_anything_else_refused():
    blended = get_verifier("psbv(blend=1)")
    assert (blended.name, blended.blend, blended.rule_dp.blend) == ("psbv(blend=1)", 1, True)
    assert get_verifier("psbv(blend=0)").name == "psbv" and REGISTRY["psbv"].blend == 0
    for text in ("psbv(blend=0.5)", "psbv(blend=2)", "psbv(mix=1)"):
        with pytest.raises(UnknownVerifierError, match="blend") as refused:
            get_verifier(text)
        assert "\n" not in str(refused.value)
