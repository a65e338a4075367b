"""gbv on delayed trees (``delayed:K,L1,L2``, issue 56): the trunk is one path drawn from q, the greedy descent
selects among the K branches at its end exactly as from the root of ``iid:K,L2``, and block verification runs on
trunk + selected branch with q along the trunk and q_skew (relative to the trunk's end) below it
(verispec.verifiers.gbv).

* lossless exactly (rationals) on every delayed:K,L1,L2 with K <= 3, L1 <= 2, L2 <= 2 at V = 2 and a few at V = 3,
  with the three exact methods equal: the batched law tree by tree ('closed-form'), the sampling procedure
  enumerated over its choice traces ('enumerate', the independent oracle) and the selected-path sum ('rule-dp');
  the same in float at 1e-12;
* the ends of the family: delayed:K,0,L2 is gbv on iid:K,L2, delayed:1,L1,L2 block verification on chain:L1+L2;
* the sampling procedure against the exact law by the exact binomial test at false-failure rate 1e-6, and a broken
  twin (the greedy branch verified with q, the trunk's K ignored) caught by the same test;
* fast enumeration (one ordering of the exchangeable branches) agrees, and branch-iid:1,K,1 is delayed:K,1,2;
* q_skew along the selected path is the selected path's law (brute force over the draft outcomes);
* validity: the delayed draft law is accepted; trees gbv is not valid for are still refused on one line.
"""

from __future__ import annotations

from collections import Counter, defaultdict

import numpy as np
import pytest

from tests.verifiers.test_psbv_delayed import exact_problem
from verispec.errors import IncompatibleDraftError
from verispec.simulator import analyze, parse_tree, random_problem
from verispec.simulator.chooser import RandomChooser
from verispec.simulator.drafters import DraftLaw
from verispec.simulator.selection import greedy_path
from verispec.statistics import exact_binomial_test
from verispec.verifiers import REGISTRY
from verispec.verifiers.block import block_procedure_on_path
from verispec.verifiers.gbv import GreedyBlockVerifier, path_skewed_drafts

GBV = REGISTRY["gbv"]
METHODS = ("closed-form", "enumerate", "rule-dp")
DELAYED = [(k, l1, l2) for k in (1, 2, 3) for l1 in (0, 1, 2) for l2 in (0, 1, 2)]


def _laws(problem, spec: str, verifier=GBV) -> dict:
    return {method: analyze(problem, spec, verifier, method=method) for method in METHODS}


def _assert_exactly_lossless_and_equal(problem, spec: str) -> None:
    results = _laws(problem, spec)
    assert results["rule-dp"].method == "rule-dp"
    for method, result in results.items():
        assert result.tv_distance == 0, f"gbv on {spec} by {method}: TV {result.tv_distance}"
    oracle = results["enumerate"].output_law.by_length
    for method in ("closed-form", "rule-dp"):
        for a, b in zip(oracle, results[method].output_law.by_length):
            assert (a == b).all(), f"gbv on {spec}: {method} != the enumerated procedure"


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
    # fast enumeration visits one ordering of the K exchangeable branches (gbv declares order_free)
    results["fast-enumeration"] = analyze(problem, spec, GBV, method="fast-enumeration")
    for method, result in results.items():
        assert result.tv_distance < 1e-12, f"gbv on {spec} by {method}: TV {result.tv_distance}"
    oracle = results["enumerate"].output_law.by_length
    for method in ("closed-form", "rule-dp", "fast-enumeration"):
        for a, b in zip(oracle, results[method].output_law.by_length):
            assert np.max(np.abs(np.asarray(a, dtype=float) - np.asarray(b, dtype=float))) <= 1e-12, (spec, method)


@pytest.mark.parametrize("paths,tail", [(2, 1), (2, 2), (3, 2)])
def test_no_trunk_is_gbv_on_iid_paths(paths, tail):
    problem = exact_problem(3 if paths * tail <= 4 else 2, tail, 3)
    for method in METHODS:
        delayed = analyze(problem, f"delayed:{paths},0,{tail}", GBV, method=method)
        iid = analyze(problem, f"iid:{paths},{tail}", GBV, method=method)
        assert delayed.block_efficiency == iid.block_efficiency
        assert all((a == b).all() for a, b in zip(delayed.output_law.by_length, iid.output_law.by_length))


@pytest.mark.parametrize("trunk,tail", [(1, 1), (1, 2), (2, 1), (2, 2)])
def test_one_branch_is_block_verification_on_the_chain(trunk, tail):
    problem = exact_problem(3, trunk + tail, 5)
    block = analyze(problem, f"chain:{trunk + tail}", REGISTRY["bv"])
    for method in METHODS:
        delayed = analyze(problem, f"delayed:1,{trunk},{tail}", GBV, method=method)
        assert delayed.block_efficiency == block.block_efficiency
        assert all((a == b).all() for a, b in zip(delayed.output_law.by_length, block.output_law.by_length))


def test_branch_iid_of_the_delayed_shape_is_the_delayed_tree():
    problem = exact_problem(2, 3, 9)
    delayed = analyze(problem, "delayed:3,1,2", GBV)
    branching = analyze(problem, "branch-iid:1,3,1", GBV)
    assert delayed.block_efficiency == branching.block_efficiency and branching.tv_distance == 0


@pytest.mark.parametrize("spec", ["delayed:2,1,1", "delayed:3,1,2", "delayed:2,2,1"])
def test_the_selected_path_has_the_law_of_q_then_q_skew(spec):
    """Brute force: the draft probability of the trees by their greedy path equals the product, along that path, of
    the conditionals gbv verifies it with (q on the trunk, q_skew below): the claim that makes it lossless."""
    problem = random_problem(2, parse_tree(spec).depth, seed=4, divergence=0.7)
    selected = defaultdict(float)
    for tree, probability in parse_tree(spec).outcomes(problem):
        selected[tree.paths[greedy_path(tree)[-1]]] += probability
    for tree, _ in parse_tree(spec).outcomes(problem):
        nodes = greedy_path(tree)
        drafts = path_skewed_drafts(tree, nodes)
        product = np.prod([drafts[i][tree.token[nodes[i + 1]]] for i in range(len(nodes) - 1)])
        assert product == pytest.approx(selected[tree.paths[nodes[-1]]], abs=1e-14)
    assert sum(selected.values()) == pytest.approx(1.0, abs=1e-14)


class QAlongPathGBV(GreedyBlockVerifier):
    """Broken on purpose: the greedy path verified with q all along (the K of the trunk's end ignored, as gbv with K
    read at the root would do on a delayed tree)."""

    name = "gbv-q-along-path"

    def procedure(self, tree, chooser):
        nodes = greedy_path(tree)
        return block_procedure_on_path(tree, nodes, [tree.q[n] for n in nodes[:-1]], chooser)


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
    law = analyze(_sampled_problem(), SAMPLED_SPEC, GBV, method="rule-dp").output_law
    return dict(law.items())


def test_the_sampling_procedure_follows_the_law():
    fit = exact_binomial_test(_sample_counts(GBV, 3000, 1), _exact_law(), alpha=1e-6)
    assert not fit.rejected, fit.describe()


def test_the_greedy_branch_verified_with_q_is_lossy_and_caught_by_the_sampling_test():
    broken = QAlongPathGBV()
    problem = _sampled_problem()
    assert analyze(problem, SAMPLED_SPEC, broken, method="enumerate").tv_distance > 0.02
    fit = exact_binomial_test(_sample_counts(broken, 3000, 1), _exact_law(), alpha=1e-6)
    assert fit.rejected, fit.describe()


def test_gbv_accepts_the_delayed_draft_law():
    assert DraftLaw.TRUNK_IID_PATHS in GBV.valid_for
    for spec in ("delayed:2,1,2", "delayed:3,2,1", "branch-iid:1,2,1"):
        assert parse_tree(spec).draft_laws & GBV.valid_for, spec
        assert GBV.rule_dp.applies(parse_tree(spec)), spec
    for spec in ("branch-iid:2,2", "branch-iid:1,2,2"):
        assert not GBV.rule_dp.applies(parse_tree(spec)), spec


@pytest.mark.parametrize("spec", ["branch-iid:2,2", "branch-iid:2,1,2", "branch:2,1", "hub", "greedy:2"])
def test_trees_gbv_is_not_valid_for_are_refused_on_one_line(spec):
    problem = random_problem(2, parse_tree(spec).depth, 0)
    with pytest.raises(IncompatibleDraftError, match="gbv") as error:
        analyze(problem, spec, GBV)
    assert "\n" not in str(error.value)
