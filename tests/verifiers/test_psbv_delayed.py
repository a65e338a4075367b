"""psbv on delayed trees (``delayed:K,L1,L2``, issue 56): the trunk is one path drawn from q, the K paths below its
end are selected by psbv's positions with the trunk's end as the root, and block verification runs on the whole
selected path with q along the trunk and the selection law g below it (verispec.verifiers.psbv).

* lossless exactly (rationals) on every delayed:K,L1,L2 with K <= 3, L1 <= 2, L2 <= 2 at V = 2 and a few at V = 3,
  with the three exact methods equal: the batched law tree by tree ('closed-form'), the sampling procedure
  enumerated over its choice traces ('enumerate', the independent oracle) and the position-selection sum
  ('rule-dp'); the same in float at 1e-12;
* the ends of the family: delayed:K,0,L2 is psbv on iid:K,L2, delayed:1,L1,L2 block verification on chain:L1+L2;
* the sampling procedure against the exact law by the exact binomial test at false-failure rate 1e-6, and a broken
  twin (a branch picked uniformly, verified with g) caught by the same test;
* fast enumeration (one ordering of the exchangeable branches) agrees, and branch-iid:1,K,1 is delayed:K,1,2;
* validity: the delayed draft law is declared and accepted; trees psbv is not valid for are still refused.
"""

from __future__ import annotations

import itertools
import random
from collections import Counter
from fractions import Fraction

import numpy as np
import pytest

from verispec.errors import IncompatibleDraftError
from verispec.simulator import TabularProblem, analyze, parse_tree, random_problem
from verispec.simulator.chooser import RandomChooser
from verispec.simulator.drafters import DraftLaw
from verispec.statistics import exact_binomial_test
from verispec.verifiers import REGISTRY
from verispec.verifiers.block import block_procedure_on_path
from verispec.verifiers.psbv import PositionSharingBlockVerifier, _leaf_copies, _path_nodes, _selected_drafts

PSBV = REGISTRY["psbv"]
METHODS = ("closed-form", "enumerate", "rule-dp")
DELAYED = [(k, l1, l2) for k in (1, 2, 3) for l1 in (0, 1, 2) for l2 in (0, 1, 2)]


def _conditional(rng: random.Random, size: int) -> list[Fraction]:
    weights = [rng.randint(0, 5) for _ in range(size)]
    if not any(weights):
        weights[rng.randrange(size)] = 1
    return [Fraction(w, sum(weights)) for w in weights]


def exact_problem(size: int, depth: int, seed: int) -> TabularProblem:
    """A context-dependent problem in rationals: an independent (p, q) pair per prefix, with zeros."""
    rng = random.Random(seed)
    target, draft = {}, {}
    for length in range(depth + 1):
        for prefix in itertools.product(range(size), repeat=length):
            target[prefix], draft[prefix] = _conditional(rng, size), _conditional(rng, size)
    return TabularProblem(size, target, draft, exact=True, horizon=depth)


def _laws(problem, spec: str, verifier=PSBV) -> dict:
    return {method: analyze(problem, spec, verifier, method=method) for method in METHODS}


def _assert_exactly_lossless_and_equal(problem, spec: str) -> None:
    results = _laws(problem, spec)
    assert results["rule-dp"].method == "rule-dp"
    for method, result in results.items():
        assert result.tv_distance == 0, f"psbv on {spec} by {method}: TV {result.tv_distance}"
        assert isinstance(result.block_efficiency, Fraction)
    oracle = results["enumerate"].output_law.by_length
    for method in ("closed-form", "rule-dp"):
        for a, b in zip(oracle, results[method].output_law.by_length):
            assert (a == b).all(), f"psbv on {spec}: {method} != the enumerated procedure"


@pytest.mark.parametrize("paths,trunk,tail", DELAYED)
def test_exactly_lossless_and_the_three_methods_agree_at_v2(paths, trunk, tail):
    depth = trunk + tail
    problem = exact_problem(2, max(depth, 1), 100 * paths + 10 * trunk + tail)
    _assert_exactly_lossless_and_equal(problem, f"delayed:{paths},{trunk},{tail}")


@pytest.mark.parametrize("spec", ["delayed:2,1,1", "delayed:3,1,1", "delayed:2,2,1", "delayed:2,1,2"])
def test_exactly_lossless_and_the_three_methods_agree_at_v3(spec):
    problem = exact_problem(3, parse_tree(spec).depth, 7)
    _assert_exactly_lossless_and_equal(problem, spec)


@pytest.mark.parametrize("spec,size", [("delayed:2,1,2", 3), ("delayed:3,2,1", 3), ("delayed:3,1,2", 2),
                                       ("delayed:2,2,2", 3)])
def test_in_float_the_three_methods_agree_to_1e12(spec, size):
    problem = random_problem(size, parse_tree(spec).depth, 11, divergence=0.8, concentration=0.5, zero_fraction=0.2)
    results = _laws(problem, spec)
    # fast enumeration visits one ordering of the K exchangeable branches (psbv declares order_free)
    results["fast-enumeration"] = analyze(problem, spec, PSBV, method="fast-enumeration")
    for method, result in results.items():
        assert result.tv_distance < 1e-12, f"psbv on {spec} by {method}: TV {result.tv_distance}"
    oracle = results["enumerate"].output_law.by_length
    for method in ("closed-form", "rule-dp", "fast-enumeration"):
        for a, b in zip(oracle, results[method].output_law.by_length):
            assert np.max(np.abs(np.asarray(a, dtype=float) - np.asarray(b, dtype=float))) <= 1e-12, (spec, method)


@pytest.mark.parametrize("paths,tail", [(2, 1), (2, 2), (3, 2)])
def test_no_trunk_is_psbv_on_iid_paths(paths, tail):
    problem = exact_problem(3 if paths * tail <= 4 else 2, tail, 3)
    delayed = analyze(problem, f"delayed:{paths},0,{tail}", PSBV, method="closed-form")
    iid = analyze(problem, f"iid:{paths},{tail}", PSBV, method="closed-form")
    assert delayed.block_efficiency == iid.block_efficiency
    assert all((a == b).all() for a, b in zip(delayed.output_law.by_length, iid.output_law.by_length))


@pytest.mark.parametrize("trunk,tail", [(1, 1), (1, 2), (2, 1), (2, 2)])
def test_one_branch_is_block_verification_on_the_chain(trunk, tail):
    problem = exact_problem(3, trunk + tail, 5)
    block = analyze(problem, f"chain:{trunk + tail}", REGISTRY["bv"])
    for method in METHODS:
        delayed = analyze(problem, f"delayed:1,{trunk},{tail}", PSBV, method=method)
        assert delayed.block_efficiency == block.block_efficiency
        assert all((a == b).all() for a, b in zip(delayed.output_law.by_length, block.output_law.by_length))


def test_branch_iid_of_the_delayed_shape_is_the_delayed_tree():
    problem = exact_problem(2, 3, 9)
    delayed = analyze(problem, "delayed:3,1,2", PSBV)
    branching = analyze(problem, "branch-iid:1,3,1", PSBV)
    assert delayed.block_efficiency == branching.block_efficiency and branching.tv_distance == 0


class UniformBranchPSBV(PositionSharingBlockVerifier):
    """Broken on purpose: one of the drafted paths picked uniformly, then block verification with g as psbv."""

    name = "psbv-uniform-branch"

    def procedure(self, tree, chooser):
        if not tree.child_nodes[0]:
            return 0, chooser.categorical(tree.p[0])
        states = self._states(tree)
        drawn = [leaf for leaf, count in _leaf_copies(tree).items() for _ in range(count)]
        leaf = drawn[chooser.categorical([1.0 / len(drawn)] * len(drawn))]
        nodes = _path_nodes(tree, leaf)
        return block_procedure_on_path(tree, nodes, _selected_drafts(states, nodes), chooser)


SAMPLED_SPEC = "delayed:3,1,2"


def _sampled_problem():
    return random_problem(3, 3, 21, divergence=1.0, concentration=0.4)


def _sample_counts(verifier, samples: int, seed: int) -> Counter:
    problem, drafter = _sampled_problem(), parse_tree(SAMPLED_SPEC)
    rng = np.random.default_rng(seed)
    counts = Counter()
    for _ in range(samples):
        tree = drafter.sample(problem, rng)
        node, token = verifier.procedure(tree, RandomChooser(rng))
        counts[tuple(int(t) for t in tree.paths[node]) + (int(token),)] += 1
    return counts


def _exact_law() -> dict:
    law = analyze(_sampled_problem(), SAMPLED_SPEC, PSBV, method="rule-dp").output_law
    return dict(law.items())


def test_the_sampling_procedure_follows_the_law():
    fit = exact_binomial_test(_sample_counts(PSBV, 3000, 1), _exact_law(), alpha=1e-6)
    assert not fit.rejected, fit.describe()


def test_a_uniformly_selected_branch_is_lossy_and_caught_by_the_sampling_test():
    broken = UniformBranchPSBV()
    problem = _sampled_problem()
    assert analyze(problem, SAMPLED_SPEC, broken, method="enumerate").tv_distance > 0.02
    fit = exact_binomial_test(_sample_counts(broken, 3000, 1), _exact_law(), alpha=1e-6)
    assert fit.rejected, fit.describe()


def test_the_delayed_draft_law_is_declared_and_psbv_accepts_it():
    for spec in ("delayed:2,1,2", "delayed:3,2,1", "branch-iid:1,2,1"):
        assert DraftLaw.TRUNK_IID_PATHS in parse_tree(spec).draft_laws, spec
        assert parse_tree(spec).draft_laws & PSBV.valid_for, spec
    for spec in ("branch-iid:2,2", "branch-iid:1,2,2", "iid:2,2", "chain:2"):
        assert DraftLaw.TRUNK_IID_PATHS not in parse_tree(spec).draft_laws, spec


@pytest.mark.parametrize("spec", ["branch-iid:2,2", "branch-iid:2,1,2", "branch:2,1", "hub", "greedy:2"])
def test_trees_psbv_is_not_valid_for_are_refused_on_one_line(spec):
    problem = random_problem(2, parse_tree(spec).depth, 0)
    with pytest.raises(IncompatibleDraftError, match="psbv") as error:
        analyze(problem, spec, PSBV)
    assert "\n" not in str(error.value)
