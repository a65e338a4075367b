"""Drafters: exact laws over trees against hand-derived probabilities, equivalences between tree kinds,
and agreement of sample() with outcomes()."""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from verispec.errors import InvalidTreeError, UnknownTreeError
from verispec.simulator import (
    BranchingDrafter,
    ChainDrafter,
    ContextFreeProblem,
    DelayedDrafter,
    DraftLaw,
    DraftTree,
    RootIIDDrafter,
    parse_tree,
    random_problem,
    shape_from_paths,
)
from verispec.simulator.trees import TreeBuilder, shape_paths


def _law(drafter, problem):
    return {tree.shape: probability for tree, probability in drafter.outcomes(problem)}


def _rational_problem():
    return ContextFreeProblem([Fraction(1, 2), Fraction(1, 3), Fraction(1, 6)],
                              [Fraction(1, 4), Fraction(1, 4), Fraction(1, 2)], exact=True)


@pytest.mark.parametrize("spec", ["chain:0", "chain:3", "iid:2,2", "iid:3,1", "delayed:2,1,1", "delayed:3,2,0",
                                  "branch:2,2", "branch:3,1", "branch-iid:2,2", "branch-iid:1,3"])
def test_outcomes_form_an_exact_law(spec):
    law = _law(parse_tree(spec), _rational_problem())
    assert sum(law.values()) == 1
    assert all(probability > 0 for probability in law.values())


def test_chain_probability_is_the_product_of_draft_conditionals():
    problem = random_problem(3, 3, 4)
    for tree, probability in ChainDrafter(3).outcomes(problem):
        path = tree.paths[-1]
        expected = np.prod([problem.draft(path[:i])[path[i]] for i in range(3)])
        assert probability == pytest.approx(expected, rel=1e-13)


def test_root_iid_paths_are_independent():
    # Each ordered list of K paths is one outcome, with probability the product of the path laws.
    problem = _rational_problem()
    law = _law(RootIIDDrafter(2, 2), problem)
    assert len(law) == 3 ** 4
    for path_a in itertools.product(range(3), repeat=2):
        for path_b in itertools.product(range(3), repeat=2):
            expected = np.prod([problem.q[t] for t in path_a + path_b])
            assert law[shape_from_paths([path_a, path_b])] == expected


def test_shared_prefixes_merge_into_one_node():
    tree = DraftTree.from_paths(_rational_problem(), [(0, 1), (0, 2), (1, 1)])
    assert tree.child_tokens[0] == (0, 0, 1)
    node_0 = tree.child(0, 0)
    assert tree.multiplicity[node_0] == 2 and tree.child_tokens[node_0] == (1, 2)
    assert tree.num_nodes == 1 + 2 + 3


def test_branch_without_replacement_probabilities():
    # Root draws two distinct tokens sequentially: P(a then b) = q(a) q(b) / (1 - q(a)).
    problem = _rational_problem()
    law = _law(BranchingDrafter((2,), replacement=False), problem)
    assert len(law) == 6
    for a, b in itertools.permutations(range(3), 2):
        assert law[((a, b), (), ())] == problem.q[a] * problem.q[b] / (1 - problem.q[a])


def test_branch_without_replacement_stops_when_support_runs_out():
    problem = ContextFreeProblem([0.5, 0.5, 0.0], [0.5, 0.5, 0.0])
    law = _law(BranchingDrafter((3,), replacement=False), problem)
    assert set(law) == {((0, 1), (), ()), ((1, 0), (), ())}


@given(st.integers(1, 3), st.integers(0, 3), st.integers(0, 2))
def test_equivalent_tree_kinds(branches, trunk, tail):
    problem = random_problem(2, trunk + tail + 1, 9)
    delayed = _law(DelayedDrafter(branches, trunk, tail), problem)
    if trunk == 0 and tail > 0:
        # iid:K,L is branch-iid:K,1,..,1 (equal draws share a node with m i.i.d. children)
        other = _law(BranchingDrafter((branches,) + (1,) * (tail - 1), replacement=True), problem)
        assert delayed.keys() == other.keys()
        assert all(delayed[k] == pytest.approx(other[k], rel=1e-13) for k in delayed)
    if branches == 1 or tail == 0:
        chain = _law(ChainDrafter(trunk + tail), problem)
        assert delayed.keys() == chain.keys()
        assert all(delayed[k] == pytest.approx(chain[k], rel=1e-13) for k in delayed)


def test_delayed_trunk_has_multiplicity_one():
    # Reference trap 7: trunk nodes have exactly one child, not K copies.
    for tree, _ in DelayedDrafter(3, 2, 1).outcomes(random_problem(2, 3, 1)):
        trunk_end = 0
        for _ in range(2):
            assert len(tree.child_tokens[trunk_end]) == 1
            trunk_end = tree.child_nodes[trunk_end][0]
        assert len(tree.child_tokens[trunk_end]) == 3


@pytest.mark.slow
def test_sample_matches_outcomes():
    # 40_000 samples of iid:2,2 over V = 2 (16 trees); every count within 6 standard deviations
    # (normal tail 2e-9 per cell; a false failure has probability below 1e-7).
    problem = random_problem(2, 2, 21)
    drafter = RootIIDDrafter(2, 2)
    law = _law(drafter, problem)
    rng = np.random.default_rng(2024)
    draws = 40_000
    counts = {}
    for _ in range(draws):
        shape = drafter.sample(problem, rng).shape
        counts[shape] = counts.get(shape, 0) + 1
    assert set(counts) <= set(law)
    for shape, probability in law.items():
        sigma = np.sqrt(draws * probability * (1 - probability))
        assert abs(counts.get(shape, 0) - draws * probability) <= 6 * sigma, shape


def test_draft_laws_declared():
    assert DraftLaw.SINGLE_PATH in parse_tree("delayed:1,2,2").draft_laws
    assert parse_tree("delayed:2,1,1").draft_laws == {DraftLaw.IID_CHILDREN, DraftLaw.TRUNK_IID_PATHS}
    assert parse_tree("branch-iid:2,2").draft_laws == {DraftLaw.IID_CHILDREN}
    assert DraftLaw.ROOT_IID_PATHS in parse_tree("iid:3,2").draft_laws
    assert parse_tree("branch:2,2").draft_laws == {DraftLaw.WITHOUT_REPLACEMENT}
    assert parse_tree("iid:2,3") == RootIIDDrafter(2, 3) == parse_tree("delayed:2,0,3")
    for spec in ["chain:2", "iid:2,3", "delayed:2,1,1", "branch:2,1", "branch-iid:1,2"]:
        assert parse_tree(parse_tree(spec).spec) == parse_tree(spec)


@pytest.mark.parametrize("spec,message", [
    ("chain", "missing its parameters"), ("tree:2", "unknown tree kind"), ("iid:2", "takes 2"),
    ("chain:x", "integers"), ("iid:0,2", "at least 1"), ("chain:-1", "at least 0"), ("branch:2,0", "at least 1"),
    ("delayed:1,2", "takes 3")])
def test_bad_tree_specs(spec, message):
    with pytest.raises(UnknownTreeError, match=message):
        parse_tree(spec)


def test_hand_built_tree_validation():
    problem = ContextFreeProblem([0.5, 0.5, 0.0], [0.5, 0.0, 0.5])
    with pytest.raises(InvalidTreeError, match="q = 0"):
        DraftTree.from_paths(problem, [(1,)])
    with pytest.raises(InvalidTreeError, match="outside the vocabulary"):
        DraftTree.from_paths(problem, [(3,)])
    with pytest.raises(InvalidTreeError, match="single draft path"):
        DraftTree.from_paths(problem, [(0,), (2,)]).chain_nodes()


def _cut_shape(shape, depth: int):
    """A shape with every node deeper than ``depth`` left out (each kept node's draws kept, duplicates included),
    rebuilt draw by draw: written here, apart from the drafters' ``cut``."""
    paths, builder, nodes = shape_paths(shape), TreeBuilder(), {(): 0}
    for node, children in enumerate(shape):
        if len(paths[node]) < depth:
            for token in children:
                nodes[paths[node] + (int(token),)] = builder.add_child(nodes[paths[node]], int(token))
    return builder.shape()


@pytest.mark.parametrize("spec", ["chain:3", "argmax-chain:3", "topk-chain:2,3", "iid:2,2", "delayed:2,1,2",
                                  "delayed:3,2,1"])
def test_a_cut_drafter_draws_the_full_drafters_trees_cut(spec):
    """``Drafter.cut(d)`` (real decoding's last blocks): its law over trees, in rationals, equals the full drafter's
    law pushed through cutting each tree at depth d; a wrong cut (one branch fewer) is told apart."""
    from collections import defaultdict

    problem = _rational_problem()
    drafter = parse_tree(spec)
    for depth in range(drafter.depth + 1):
        pushed = defaultdict(Fraction)
        for shape, probability in _law(drafter, problem).items():
            pushed[_cut_shape(shape, depth)] += probability
        cut = drafter.cut(depth)
        assert cut.depth == depth and type(cut) is type(drafter)
        assert _law(cut, problem) == dict(pushed), (spec, depth, cut.spec)
    assert drafter.cut(drafter.depth + 2) is drafter
    wrong = DelayedDrafter(1, 1, 1)  # delayed:2,1,2 cut at 2 is delayed:2,1,1, not one path
    pushed = defaultdict(Fraction)
    for shape, probability in _law(parse_tree("delayed:2,1,2"), _rational_problem()).items():
        pushed[_cut_shape(shape, 2)] += probability
    assert _law(wrong, _rational_problem()) != dict(pushed)


def test_drafters_without_a_cut_say_so():
    for spec in ("branch:2,2", "hub-tree:2", "greedy-tree:3,2", "dyspec:4"):
        drafter = parse_tree(spec)
        assert drafter.cut(drafter.depth - 1) is None and drafter.cut(drafter.depth) is drafter
