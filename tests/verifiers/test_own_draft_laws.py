"""Verifiers with their own draft laws (SpecHub, Hu et al.'s greedy drafts), RRS without replacement, and
DySpec's dynamic tree: acceptance against closed forms written here, drafter laws derived by hand,
invalid pairings, and trap 2's negative controls. (Losslessness and closed form == procedure on random
problems come from tests/verifiers/test_registry_verifiers.py.)"""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tests.support.broken_own_draft_laws import BROKEN_HUB_VERIFIERS, BROKEN_RRSW_VERIFIERS
from tests.support.strategies import build_problem, problem_args
from verispec.errors import IncompatibleDraftError, InvalidTreeError, UnknownTreeError
from verispec.simulator import (
    ChainDrafter,
    ContextFreeProblem,
    DraftLaw,
    DraftTree,
    DySpecDrafter,
    GreedyDrafter,
    HubDrafter,
    analyze,
    parse_tree,
    random_context_free_problem,
    random_problem,
)
from verispec.verifiers import REGISTRY
from verispec.verifiers.greedy import GreedySolver
from verispec.verifiers.rrsw import RRSWSolver
from verispec.verifiers.spechub import SpecHubSolver

F = Fraction


def _law(drafter, problem):
    return {tree.shape: probability for tree, probability in drafter.outcomes(problem)}


def _first_position_acceptance(problem, drafter, verifier):
    return analyze(problem, drafter, verifier).acceptance_by_depth[0]


# --- independent closed forms (written from docs/guides/reference.md, not from the code under test) ---------------

def _ranked(q):
    """Tokens with q > 0, q decreasing, ties by smaller id (the documented tie rule)."""
    return sorted((i for i in range(len(q)) if q[i] > 0), key=lambda i: (-q[i], i))


def spechub_acceptance(p, q):
    """p(a) + sum_{i != a} min(p(i), q(i) / (1 - q(a))), a = argmax q (smallest id on ties); the sum is
    empty when q(a) = 1. This is also the marginal upper bound sum_y min(p(y), P(y is drafted)) for ANY
    verifier of the hub law (a is always drafted, i with probability q(i) / (1 - q(a))), hence optimal.
    1 - q(a) is summed over the other tokens, as the drafter does: q = (1 - 1e-18, 1e-18) rounds q(a) to 1.0 in
    float, yet the second token is still drawn (a hypothesis example found the difference)."""
    a = _ranked(q)[0]
    rest = sum(q[i] for i in range(len(q)) if i != a)
    if rest == 0:
        return p[a]
    return p[a] + sum(min(p[i], q[i] / rest) for i in range(len(q)) if i != a)


def greedy_acceptance(p, q, k):
    """p(G) + sum_{i not in G} min(p(i), q(i) / (1 - q(G))), G = top k-1 tokens of q (whole support if
    smaller; then nothing else is drafted and the sum is empty)."""
    greedy = _ranked(q)[:k - 1]
    rest = sum(q[i] for i in range(len(q)) if i not in greedy)  # summed, not 1 - q(G) (see spechub_acceptance)
    accepted = sum(p[i] for i in greedy)
    if rest == 0:
        return accepted
    return accepted + sum(min(p[i], q[i] / rest) for i in range(len(q)) if i not in greedy)


def _rational_pair(draw, size):
    def vector():
        weights = draw(st.lists(st.integers(0, 6), min_size=size, max_size=size).filter(lambda w: sum(w) > 0))
        return [F(w, sum(weights)) for w in weights]
    return vector(), vector()


@st.composite
def rational_problems(draw, sizes=(2, 5)):
    """Context-free problems with small rational p and q, zeros and ties included."""
    size = draw(st.integers(*sizes))
    target, draft = _rational_pair(draw, size)
    return ContextFreeProblem(target, draft, exact=True)


# --- SpecHub --------------------------------------------------------------------------------------------

@settings(max_examples=30)
@given(problem=rational_problems())
def test_spechub_acceptance_is_the_closed_form_exactly(problem):
    result = analyze(problem, HubDrafter(1), REGISTRY["spechub"])
    assert result.tv_distance == 0
    assert result.acceptance_by_depth[0] == spechub_acceptance(problem.p, problem.q)


@example(args={"vocab_size": 2, "depth": 1, "seed": 249, "concentration": 0.2, "divergence": 1.0,
               "temperature": 0.5, "zero_fraction": 0.0})  # q = (1 - 9.8e-19, 9.8e-19): q(a) is 1.0 in float
@given(args=problem_args(vocab=(2, 5), depth=(1, 1)))
def test_spechub_acceptance_on_random_problems(args):
    problem = build_problem(args)
    p, q = problem.target(()), problem.draft(())
    assert _first_position_acceptance(problem, HubDrafter(1), REGISTRY["spechub"]) == pytest.approx(
        spechub_acceptance(p, q), abs=1e-12)


def test_hub_pair_probabilities_by_hand():
    # q = (1/5, 1/2, 3/10): hub a = 1. Pair (i, a) has probability q(i); pair (a, i) has q(a) q(i) / (1 - q(a)).
    problem = ContextFreeProblem([F(1, 3)] * 3, [F(1, 5), F(1, 2), F(3, 10)], exact=True)
    law = _law(HubDrafter(1), problem)
    assert law == {((0, 1), (), ()): F(1, 5), ((2, 1), (), ()): F(3, 10),
                   ((1, 0), (), ()): F(1, 2) * F(1, 5) / F(1, 2), ((1, 2), (), ()): F(1, 2) * F(3, 10) / F(1, 2)}
    assert sum(law.values()) == 1


def test_hub_ties_go_to_the_smallest_token_id():
    # q(0) = q(2) = 2/5 is the maximum: the hub is 0, so every pair contains 0 and none is (1, 2) or (2, 1).
    problem = ContextFreeProblem([F(1, 3)] * 3, [F(2, 5), F(1, 5), F(2, 5)], exact=True)
    law = _law(HubDrafter(1), problem)
    assert all(0 in shape[0] for shape in law)
    assert law[((2, 0), (), ())] == F(2, 5) and law[((0, 2), (), ())] == F(2, 5) * F(2, 5) / F(3, 5)


def test_hub_tie_broken_differently_by_the_verifier_is_flagged_lossy():
    # Trap 8: with q(0) = q(2) the drafter's hub is 0; a verifier that takes 2 plans for another draft law.
    broken = BROKEN_HUB_VERIFIERS["spechub-hub-by-largest-id"]
    tie = ContextFreeProblem([F(1, 2), F(1, 3), F(1, 6)], [F(2, 5), F(1, 5), F(2, 5)], exact=True)
    assert analyze(tie, HubDrafter(1), broken).tv_distance > F(1, 100)
    no_tie = ContextFreeProblem([F(1, 2), F(1, 3), F(1, 6)], [F(1, 2), F(1, 5), F(3, 10)], exact=True)
    assert analyze(no_tie, HubDrafter(1), broken).tv_distance == 0  # the same rule when the hub is unique


def test_hub_with_all_draft_mass_on_the_hub_drafts_one_token():
    problem = ContextFreeProblem([F(1, 2), F(1, 4), F(1, 4)], [0, 1, 0], exact=True)
    assert _law(HubDrafter(1), problem) == {((1,), ()): 1}
    result = analyze(problem, HubDrafter(1), REGISTRY["spechub"])
    assert result.tv_distance == 0 and result.acceptance_by_depth[0] == F(1, 4)


def test_hub_tree_gives_every_node_its_own_hub_pair():
    problem = random_problem(3, 2, 7)
    for tree, _ in HubDrafter(2).outcomes(problem):
        assert tree.max_depth == 2
        for node in range(tree.num_nodes):
            if tree.depth[node] < 2:
                q = problem.draft(tree.paths[node])
                hub = _ranked(q)[0]
                children = tree.child_tokens[node]
                assert len(children) == 2 and (children[0] == hub) != (children[1] == hub)
            else:
                assert tree.is_leaf(node)


def test_spechub_and_greedy_two_agree_on_acceptance():
    # Unordered, the hub pair is {a, X} with X ~ q(. | != a): the same as Hu et al.'s greedy draft with K = 2.
    # The two rules are different procedures (and see different child orders) but both are optimal there.
    for seed in range(5):
        problem = random_context_free_problem(4, seed, divergence=0.8)
        assert _first_position_acceptance(problem, HubDrafter(1), REGISTRY["spechub"]) == pytest.approx(
            _first_position_acceptance(problem, GreedyDrafter(2), REGISTRY["greedy"]), abs=1e-12)


# --- Greedy drafts ---------------------------------------------------------------------------------------

@settings(max_examples=30)
@given(problem=rational_problems(), branches=st.integers(1, 4))
def test_greedy_acceptance_is_the_closed_form_exactly(problem, branches):
    result = analyze(problem, GreedyDrafter(branches), REGISTRY["greedy"])
    assert result.tv_distance == 0
    assert result.acceptance_by_depth[0] == greedy_acceptance(problem.p, problem.q, branches)


def test_greedy_draft_probabilities_by_hand():
    # q = (1/10, 2/5, 1/5, 3/10), K = 3: G = (1, 3); X ~ q on {0, 2} / (1 - 7/10).
    problem = ContextFreeProblem([F(1, 4)] * 4, [F(1, 10), F(2, 5), F(1, 5), F(3, 10)], exact=True)
    assert _law(GreedyDrafter(3), problem) == {((1, 3, 0), (), (), ()): F(1, 3), ((1, 3, 2), (), (), ()): F(2, 3)}


def test_greedy_ties_go_to_the_smallest_token_id():
    problem = ContextFreeProblem([F(1, 4)] * 4, [F(1, 4)] * 4, exact=True)
    assert set(_law(GreedyDrafter(3), problem)) == {((0, 1, t), (), (), ()) for t in (2, 3)}


@pytest.mark.parametrize("draft,branches,expected_children", [
    ([F(1, 2), F(1, 2), 0, 0], 3, (0, 1)),           # support smaller than K: G = support, no X
    ([F(1, 2), F(1, 2), 0, 0], 5, (0, 1)),
    ([F(1, 2), F(1, 3), F(1, 6), 0], 3, (0, 1, 2)),  # support exactly K: X is the last token, q~(X) = 1
    ([0, 0, 1, 0], 2, (2,)),                           # q(G) = 1 with K = 2
])
def test_greedy_degenerate_supports(draft, branches, expected_children):
    target = [F(1, 10), F(2, 10), F(3, 10), F(4, 10)]
    problem = ContextFreeProblem(target, draft, exact=True)
    assert _law(GreedyDrafter(branches), problem) == {(expected_children,) + ((),) * len(expected_children): 1}
    result = analyze(problem, GreedyDrafter(branches), REGISTRY["greedy"])
    assert result.tv_distance == 0
    assert result.acceptance_by_depth[0] == sum(target[t] for t in expected_children)


def test_greedy_with_one_draft_is_the_naive_rule():
    problem = random_problem(3, 3, 11)
    for tree, _ in ChainDrafter(3).outcomes(problem):
        np.testing.assert_allclose(REGISTRY["greedy"].emission_law(tree), REGISTRY["naive"].emission_law(tree),
                                   atol=1e-15)


# --- RRS without replacement -------------------------------------------------------------------------------

def test_rrsw_on_a_chain_equals_naive_exactly():
    problem = ContextFreeProblem([F(1, 2), F(1, 3), F(1, 6)], [F(1, 5), F(1, 5), F(3, 5)], exact=True)
    for tree, _ in ChainDrafter(3).outcomes(problem):
        assert (REGISTRY["rrsw"].emission_law(tree) == REGISTRY["naive"].emission_law(tree)).all()


def test_rrsw_two_children_worked_by_hand():
    # p = (1/2, 1/2, 0), q = (1/4, 1/4, 1/2), children (2, 0) drawn in that order.
    # x_1 = 2: accept w.p. min(1, 0 / (1/2)) = 0; r_2 = norm((p - q)+) = (1/2, 1/2, 0); q_2 = (1/2, 1/2, 0).
    # x_2 = 0: accept w.p. min(1, (1/2) / (1/2)) = 1. So the output is 0 with probability one.
    p = np.array([F(1, 2), F(1, 2), F(0)], dtype=object)
    q = np.array([F(1, 4), F(1, 4), F(1, 2)], dtype=object)
    assert list(RRSWSolver().output_law(p, q, (2, 0))) == [1, 0, 0]
    # children (0, 2): x_1 = 0 accepted w.p. min(1, (1/2)/(1/4)) = 1.
    assert list(RRSWSolver().output_law(p, q, (0, 2))) == [1, 0, 0]
    # children (0, 1) with p = (1/8, 1/8, 3/4): x_1 = 0 accepted w.p. 1/2; r_2 = (0, 0, 1) (norm of
    # (-1/8, -1/8, 1/4)+); q_2 = (0, 1/3, 2/3); x_2 = 1 accepted w.p. 0; Y ~ r_3 = norm((r_2 - q_2)+) = (0, 0, 1).
    p = np.array([F(1, 8), F(1, 8), F(3, 4)], dtype=object)
    assert list(RRSWSolver().output_law(p, q, (0, 1))) == [F(1, 2), 0, F(1, 2)]


#: Hand-picked exact problem on which every trap-2 variant is biased (p and q reversed on four tokens).
TRAP_PROBLEM = ContextFreeProblem([F(1, 10), F(2, 10), F(3, 10), F(4, 10)],
                                  [F(4, 10), F(3, 10), F(2, 10), F(1, 10)], exact=True)


@pytest.mark.parametrize("name", sorted(BROKEN_RRSW_VERIFIERS))
@pytest.mark.parametrize("spec", ["branch:2", "branch:3"])
def test_trap_2_variants_are_flagged_lossy(name, spec):
    drafter = parse_tree(spec)
    broken = analyze(TRAP_PROBLEM, drafter, BROKEN_RRSW_VERIFIERS[name])
    assert broken.tv_distance > F(1, 100) and not broken.lossless
    assert analyze(TRAP_PROBLEM, drafter, REGISTRY["rrsw"]).tv_distance == 0


@pytest.mark.parametrize("name", sorted(BROKEN_RRSW_VERIFIERS))
def test_trap_2_variants_are_flagged_on_random_problems(name):
    distances = (analyze(build_problem(dict(vocab_size=4, depth=2, seed=seed, divergence=1.0)),
                         parse_tree("branch:3,1"), BROKEN_RRSW_VERIFIERS[name]).tv_distance for seed in range(1, 6))
    assert any(distance > 1e-3 for distance in distances), f"{name} was not flagged on any of 5 problems"


# --- DySpec ------------------------------------------------------------------------------------------------

def test_dyspec_two_nodes_by_hand():
    # q = (3/4, 1/4) at every prefix. Root draws t (value q(t); root keeps 1 - q(t)).
    # t = 0: child 3/4 > root 1/4, so the child is expanded next: chain (0, u), u ~ q.
    # t = 1: root 3/4 > child 1/4: the root draws again without replacement: its second child is 0.
    problem = ContextFreeProblem([F(1, 2), F(1, 2)], [F(3, 4), F(1, 4)], exact=True)
    assert _law(DySpecDrafter(2), problem) == {
        ((0,), (0,), ()): F(9, 16), ((0,), (1,), ()): F(3, 16), ((1, 0), (), ()): F(1, 4)}


def test_dyspec_ties_expand_the_older_node():
    # q = (1/2, 1/2): after the first draw child and root both have value 1/2; the root (created first)
    # is expanded, so dyspec:2 is two root children, never a chain.
    problem = ContextFreeProblem([F(1, 2), F(1, 2)], [F(1, 2), F(1, 2)], exact=True)
    assert _law(DySpecDrafter(2), problem) == {((0, 1), (), ()): F(1, 2), ((1, 0), (), ()): F(1, 2)}


def test_dyspec_can_grow_a_path_as_deep_as_its_budget():
    # q = (9/10, 1/10): the path 0, 0, 0 always has the largest value (0.9, 0.81) -> probability (9/10)^3.
    problem = ContextFreeProblem([F(1, 2), F(1, 2)], [F(9, 10), F(1, 10)], exact=True)
    law = _law(DySpecDrafter(3), problem)
    assert law[((0,), (0,), (0,), ())] == F(9, 10) ** 3
    assert DySpecDrafter(3).depth == 3


@pytest.mark.parametrize("budget,size", [(2, 3), (3, 3), (4, 3), (5, 2)])
def test_dyspec_outcomes_form_an_exact_law_of_budget_sized_trees(budget, size):
    weights = [F(k + 1, size * (size + 1) // 2) for k in range(size)]
    problem = ContextFreeProblem(weights[::-1], weights, exact=True)
    law = _law(DySpecDrafter(budget), problem)
    assert sum(law.values()) == 1
    for shape in law:
        assert sum(len(children) for children in shape) == budget
        assert all(len(set(children)) == len(children) for children in shape)  # without replacement


@settings(max_examples=10)
@given(seed=st.integers(0, 2**32 - 1), budget=st.integers(3, 5), divergence=st.sampled_from([0.3, 1.0]))
def test_without_replacement_verifiers_are_lossless_on_deeper_dyspec_trees(seed, budget, divergence):
    # The number of children a DySpec node gets depends on tokens drawn elsewhere; recursive rejection
    # sampling without replacement stays lossless because accepting x_j never looks at later children.
    problem = random_problem(3 if budget < 5 else 2, budget, seed, divergence=divergence, concentration=0.5)
    for name in ("rrsw", "naivetree", "traversal"):
        assert analyze(problem, DySpecDrafter(budget), REGISTRY[name]).tv_distance < 1e-12


def test_dyspec_declares_the_without_replacement_law():
    assert DySpecDrafter(3).draft_laws == {DraftLaw.WITHOUT_REPLACEMENT}
    assert DraftLaw.WITHOUT_REPLACEMENT in DySpecDrafter(1).draft_laws  # one node is a chain


# --- Specifications and invalid pairings -------------------------------------------------------------------

@pytest.mark.parametrize("spec", ["hub", "hub-tree:2", "greedy:3", "greedy-tree:2,2", "dyspec:4"])
def test_specs_round_trip(spec):
    assert parse_tree(spec).spec == spec


@pytest.mark.parametrize("spec,message", [("hub:2", "takes no parameters"), ("greedy", "missing its parameters"),
                                          ("greedy:0", "at least 1"), ("dyspec:1,2", "1 parameter"),
                                          ("hub-tree:x", "integers")])
def test_bad_specs_are_rejected(spec, message):
    with pytest.raises(UnknownTreeError, match=message):
        parse_tree(spec)


@pytest.mark.parametrize("verifier,spec", [
    ("specinfer", "hub"), ("rrsw", "hub"), ("greedy", "hub"), ("naivetree", "greedy:2"), ("spechub", "greedy:2"),
    ("spechub", "branch:2"), ("spechub", "chain:2"), ("rrsw", "greedy:3"), ("greedy", "dyspec:3"),
    ("rrsw", "iid:2,1"), ("spechub", "dyspec:2")])
def test_invalid_pairings_raise(verifier, spec):
    with pytest.raises(IncompatibleDraftError, match=verifier):
        analyze(random_problem(3, 3, 0), parse_tree(spec), REGISTRY[verifier])


def test_solvers_reject_child_lists_outside_their_law():
    problem = ContextFreeProblem([F(1, 3)] * 3, [F(1, 2), F(1, 3), F(1, 6)], exact=True)
    p, q = problem.p, problem.q
    with pytest.raises(InvalidTreeError, match="hub pair"):
        SpecHubSolver().output_law(p, q, (1, 2))      # neither is the hub 0
    with pytest.raises(InvalidTreeError, match="hub pair"):
        SpecHubSolver().output_law(p, q, (0, 0))
    with pytest.raises(InvalidTreeError, match="greedy"):
        GreedySolver().output_law(p, q, (1, 0))       # G must be the top token 0
    with pytest.raises(InvalidTreeError, match="without replacement"):
        RRSWSolver().output_law(p, q, (1, 1))
    tree = DraftTree.from_shape(problem, ((1, 2), (), ()))
    with pytest.raises(InvalidTreeError):
        REGISTRY["spechub"].emission_law(tree)


def test_new_laws_exclude_chains_from_hub_only():
    chain = ChainDrafter(2)
    assert DraftLaw.HUB not in chain.draft_laws and DraftLaw.GREEDY in chain.draft_laws


def test_every_outcome_of_the_new_drafters_sums_to_one():
    problem = ContextFreeProblem([F(1, 2), F(1, 3), F(1, 6)], [F(1, 4), F(1, 4), F(1, 2)], exact=True)
    for spec in ["hub", "hub-tree:2", "greedy:2", "greedy:3", "greedy-tree:2,2", "dyspec:3"]:
        law = _law(parse_tree(spec), problem)
        assert sum(law.values()) == 1 and all(value > 0 for value in law.values()), spec


@pytest.mark.parametrize("spec", ["hub", "greedy:2", "dyspec:2"])
def test_sample_draws_trees_the_law_allows(spec):
    problem = random_problem(3, 2, 5)
    drafter = parse_tree(spec)
    support = {tree.shape for tree, _ in drafter.outcomes(problem)}
    rng = np.random.default_rng(0)
    assert all(drafter.sample(problem, rng).shape in support for _ in range(30))


def test_hub_pairs_are_exactly_the_ordered_pairs_holding_the_hub():
    pairs = {(i, j) for i, j in itertools.permutations(range(3), 2) if 0 in (i, j)}
    problem = ContextFreeProblem([F(1, 3)] * 3, [F(1, 2), F(1, 4), F(1, 4)], exact=True)
    assert {shape[0] for shape in _law(HubDrafter(1), problem)} == pairs
