"""Path-level tree verifiers: Traversal Verification (without replacement and on i.i.d. children) and
greedy multi-path block verification (GBV), checked against block verification, hand-derived rational
values, a brute-force law of the selected path, and their broken variants (tests/support/broken_paths.py).
Losslessness on random problems and closed form == procedure are in test_registry_verifiers.py."""

from __future__ import annotations

import json
from collections import defaultdict
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given

from tests.support.broken_paths import BROKEN_PATH_VERIFIERS, CORRECT_TRAVERSAL, traversal_with_order
from tests.support.strategies import build_problem, problem_args
from verispec.cli import main
from verispec.simulator import (
    BranchingDrafter,
    ChainDrafter,
    ContextFreeProblem,
    RootIIDDrafter,
    analyze,
    load_problem,
    parse_tree,
    random_problem,
    sun_toy_problem,
)
from verispec.simulator.distributions import residual
from verispec.simulator.selection import greedy_path
from verispec.verifiers import get_verifier
from verispec.verifiers.gbv import path_skewed_drafts

BV, TRAVERSAL, TRAVERSAL_IID, GBV = (get_verifier(n) for n in ("bv", "traversal", "traversal-iid", "gbv"))
DOCS = Path(__file__).resolve().parents[2] / "docs" / "guides"


def _assert_same_output_law(first, second):
    for a, b in zip(first.output_law.by_length, second.output_law.by_length):
        np.testing.assert_allclose(np.asarray(a, dtype=float), np.asarray(b, dtype=float), atol=1e-12)


# ----------------------------------------------------------------------------------------------------
# Traversal reduces to block verification on a chain; to RRS without replacement at depth one.


@given(problem_args(vocab=(2, 4), depth=(1, 4)))
def test_traversal_is_block_verification_on_a_chain(args):
    # Weng et al. 2025, Sec. 4: on a single chain Traversal Verification coincides with block verification.
    problem = build_problem(args)
    length = args["depth"]
    block = analyze(problem, ChainDrafter(length), BV)
    for drafter in (ChainDrafter(length), BranchingDrafter((1,) * length, False)):
        _assert_same_output_law(analyze(problem, drafter, TRAVERSAL), block)
    _assert_same_output_law(analyze(problem, RootIIDDrafter(1, length), TRAVERSAL_IID), block)


def _rrs_without_replacement_law(p, q, children):
    """Output law of RRS without replacement (docs/guides/reference.md, "RRS without replacement"), written here."""
    law, rejected, current, remaining = np.zeros_like(p), 1.0, p.copy(), q.copy()
    for token in children:
        conditional = remaining / remaining.sum()
        accept = min(1.0, current[token] / conditional[token])
        law[token] += rejected * accept
        rejected *= 1 - accept
        current = residual(current, conditional)
        remaining[token] = 0.0
    return law + rejected * current


@pytest.mark.parametrize("width", [1, 2, 3])
def test_traversal_at_depth_one_is_rrs_without_replacement(width):
    problem = random_problem(4, 1, seed=11, divergence=1.0)
    for tree, _ in BranchingDrafter((width,), False).outcomes(problem):
        law = TRAVERSAL.emission_law(tree)
        first_tokens = law[0].copy()
        for child in tree.child_nodes[0]:
            first_tokens[tree.token[child]] += law[child].sum()
        np.testing.assert_allclose(first_tokens, _rrs_without_replacement_law(tree.p[0], tree.q[0],
                                                                               tree.child_tokens[0]), atol=1e-14)


def test_traversal_worked_example_on_sun_toy():
    # p = (1/3, 2/3), q = (2/3, 1/3) at every prefix; branch:2,1 drafts both root tokens (a first w.p. 2/3)
    # and one child under each. Leaf-to-root by hand (w = node weight):
    #  order (a, b): leaf under a: w_a = 1/2, its child c ~ q: c = a: w = 1/4; c = b: w = 1.
    #    c = b: accepted (a, b) surely: 2 tokens + bonus.
    #    c = a: accept w.p. 1/4 (2 + bonus); else a's update S = sum (p/2 - q)+ = 0 -> w_a = 0: delete a;
    #      root: p <- (0, 1), q <- (0, 1), w_root = 1; b: w_b = 1; b's child c' ~ q:
    #      c' = a: w = min(1 * (1/3)/(2/3), 1) = 1/2 -> accept (b, a) w.p. 1/2, else b's update
    #              S = (2/3 - 1/3) = 1/3, w_b = 1: emit at b (1 token + correction);
    #      c' = b: w = 1: (b, b) accepted.
    #  order (b, a): b first, w_b = 1, same subtree as above: E[tau] = 2 - (2/3)(1/2) = 5/3.
    #  E[tau | a first] = (1/3) 2 + (2/3) [(1/4) 2 + (3/4) (5/3)] = 2/3 + (2/3)(7/4) = 11/6.
    #  E[tau] = (2/3)(11/6) + (1/3)(5/3) = 11/9 + 5/9 = 16/9; block efficiency 25/9.
    result = analyze(sun_toy_problem(exact=True), parse_tree("branch:2,1"), TRAVERSAL)
    assert result.tv_distance == 0
    assert result.expected_accepted == Fraction(16, 9)


def test_traversal_emission_law_is_fast_on_a_wide_tree():
    # The law is one post-order pass, not an enumeration of leaf decisions: 1 + 4 + 16 + 64 nodes.
    problem = random_problem(4, 3, seed=5, divergence=0.5)
    tree = BranchingDrafter((4, 4, 4), False).sample(problem, np.random.default_rng(0))
    law = TRAVERSAL.emission_law(tree)
    assert law.shape == (85, 4) and abs(law.sum() - 1) < 1e-12 and (law >= 0).all()


# ----------------------------------------------------------------------------------------------------
# Traversal on i.i.d. children (distinct children in order of first appearance) is exactly lossless.


@pytest.mark.parametrize("spec", ["iid:2,2", "iid:3,2", "delayed:2,1,1"])
def test_traversal_iid_is_exactly_lossless_in_rationals(spec):
    problem = load_problem(DOCS / "traversal_iid_problem.json", exact=True)
    assert analyze(problem, parse_tree(spec), TRAVERSAL_IID).tv_distance == 0


def test_traversal_iid_worked_example_on_sun_toy():
    # iid:2,1 on Sun's toy (a = 0, b = 1): draws (a, a) 4/9: w_a = 1/2; (a, b) 2/9: a w.p. 1/2, else the
    # root residual is (0, 1) = q(. | not a) so w_b = 1; (b, a) 2/9 and (b, b) 1/9: w_b = 1.
    # P(tau = 1) = (4/9)(1/2) + 2/9 + 2/9 + 1/9 = 7/9, so E[tau + 1] = 16/9 (SpecInfer gets the same here).
    result = analyze(sun_toy_problem(exact=True), RootIIDDrafter(2, 1), TRAVERSAL_IID)
    assert result.tv_distance == 0 and result.block_efficiency == Fraction(16, 9)


def test_cli_reproduces_the_traversal_iid_finding(capsys):
    code = main(["exact", "--problem", str(DOCS / "traversal_iid_problem.json"), "--tree", "iid:2,2",
                 "--verifier", "traversal-iid", "--exact", "--json"])
    data = json.loads(capsys.readouterr().out)
    assert code == 0 and data["exact_values"]["tv_distance"] == "0" and data["lossless"]


# ----------------------------------------------------------------------------------------------------
# GBV


@given(problem_args(vocab=(2, 4), depth=(1, 4)))
def test_gbv_with_one_path_is_block_verification(args):
    problem = build_problem(args)
    _assert_same_output_law(analyze(problem, RootIIDDrafter(1, args["depth"]), GBV),
                            analyze(problem, ChainDrafter(args["depth"]), BV))


@pytest.mark.parametrize("spec", ["iid:2,2", "iid:3,2", "iid:2,3", "delayed:2,1,1", "delayed:3,1,2", "delayed:2,2,1"])
def test_skewed_drafts_are_the_law_of_the_selected_path(spec):
    # Brute force: sum the probabilities of the draft trees by their greedy path; it must equal the product
    # of q_skew along that path (the claim that makes block verification on it lossless); on a delayed tree
    # that is q along the trunk, then q_skew relative to the trunk's end.
    problem = random_problem(2, 3, seed=4, divergence=0.7)
    selected = defaultdict(float)
    for tree, probability in parse_tree(spec).outcomes(problem):
        selected[tree.paths[greedy_path(tree)[-1]]] += probability
    for tree, _ in parse_tree(spec).outcomes(problem):
        nodes = greedy_path(tree)
        drafts = path_skewed_drafts(tree, nodes)
        product = np.prod([drafts[i][tree.token[nodes[i + 1]]] for i in range(len(nodes) - 1)])
        assert product == pytest.approx(selected[tree.paths[nodes[-1]]], abs=1e-14)
    assert sum(selected.values()) == pytest.approx(1.0, abs=1e-14)


def test_gbv_worked_example_on_sun_toy():
    # K = 2, L = 1 on Sun's toy: key p/q is 1/2 for a, 2 for b, so b is selected whenever drafted:
    # q_skew = (q(a)^2, 1 - q(a)^2) = (4/9, 5/9). Token-level rule against q_skew: accept a w.p.
    # (1/3)/(4/9) = 3/4, b w.p. 1: acceptance 1/3 + 5/9 = 8/9 = 1 + min_T [p(T) - q(T)^2] (T = {a}), the
    # optimum for two i.i.d. drafts (docs/guides/reference.md, "OT optimum"). E[tau + 1] = 17/9.
    result = analyze(sun_toy_problem(exact=True), RootIIDDrafter(2, 1), GBV)
    assert result.tv_distance == 0 and result.block_efficiency == Fraction(17, 9)


# ----------------------------------------------------------------------------------------------------
# Negative controls: traps 4 and 6, and Traversal on i.i.d. children in token-id order.


@pytest.mark.parametrize("name", ["traversal-update-one-minus-q", "traversal-no-recompute",
                                  "traversal-emit-original-p", "traversal-iid-token-order"])
def test_broken_traversal_is_flagged_on_random_problems(name):
    verifier, spec = BROKEN_PATH_VERIFIERS[name]
    # Independent drafts (divergence 1) make every mistake bite: rejections are frequent, so deletions,
    # updates and residual emissions carry real mass. Biases seen are 1e-2 .. 4e-1.
    distances = [analyze(random_problem(3, 3, seed, divergence=1.0), parse_tree(spec), verifier).tv_distance
                 for seed in range(1, 6)]
    assert all(distance > 1e-3 for distance in distances), distances


@pytest.mark.parametrize("spec", ["branch:2,2", "branch:3,1", "iid:2,2", "delayed:2,1,1"])
def test_broken_module_reference_traversal_is_lossless(spec):
    # The switches of tests/broken_paths.traversal are the only difference from a lossless rule.
    for seed in range(1, 4):
        result = analyze(random_problem(3, 3, seed, divergence=1.0), parse_tree(spec), CORRECT_TRAVERSAL)
        assert result.tv_distance < 1e-12
    _assert_same_output_law(analyze(random_problem(3, 3, 1, divergence=1.0), parse_tree("branch:2,2"),
                                    CORRECT_TRAVERSAL),
                            analyze(random_problem(3, 3, 1, divergence=1.0), parse_tree("branch:2,2"), TRAVERSAL))


@pytest.mark.parametrize("rule", ["first-appearance", "latest-last-appearance"])
@pytest.mark.parametrize("spec", ["iid:3,1", "iid:3,2", "iid:4,1"])
def test_child_orders_that_read_the_draws_in_a_fixed_order_are_lossless(rule, spec):
    # Reading K i.i.d. draws in any fixed order of their positions leaves them i.i.d., so the first-
    # appearance argument of docs/guides/traversal_iid.md applies; read backwards it is "latest last appearance
    # first". Exactly lossless in rationals.
    problem = load_problem(DOCS / "traversal_iid_problem.json", exact=True)
    for candidate in (problem, sun_toy_problem(exact=True)):
        assert analyze(candidate, parse_tree(spec), traversal_with_order(rule)).tv_distance == 0


@pytest.mark.parametrize("rule,excess_of_a", [("reversed", Fraction(-1, 27)),
                                              ("earliest-last-appearance", Fraction(-1, 27)),
                                              ("most-frequent", Fraction(1, 27)),
                                              ("least-frequent", Fraction(-2, 27))])
def test_other_child_orders_are_lossy_from_three_paths(rule, excess_of_a):
    # Sun's toy (p = (1/3, 2/3), q = (2/3, 1/3)), iid:3,1, worked by hand. Whatever the order, a tried first
    # is accepted w.p. w_a = 1/2, and otherwise b is emitted (the residual after a is (0, 1) and w_b = 1);
    # b tried first is accepted. So P(first token = a) = P(a tried first) / 2, and the law of the second
    # token given the first is p in every case: TV = |P(a tried first) / 2 - 1/3|.
    #   reversed / earliest last appearance: a is tried first iff (a, a, a) or it is the token that appears
    #     last for the first time / whose last draw comes first: 8/27 + (1/3)(8/9) = 16/27, so 8/27 vs 9/27;
    #   most frequent: the majority token, P(at least two a) = 20/27, so 10/27;
    #   least frequent: the minority token (or the only one), 8/27 + 3 (2/3)(1/3)^2 = 14/27, so 7/27.
    result = analyze(sun_toy_problem(exact=True), parse_tree("iid:3,1"), traversal_with_order(rule))
    first_token = result.output_law.continued_with_target(sun_toy_problem(exact=True)).sum(axis=1)
    assert first_token[0] - Fraction(1, 3) == excess_of_a
    assert result.tv_distance == abs(excess_of_a)


def test_with_two_paths_every_order_of_the_draws_is_lossless():
    # K = 2: reversed, earliest/latest last appearance and most/least frequent first all coincide with one
    # of the two fixed reading orders of the draws (the docs' claim for K = 2); token id does not.
    for rule in ("reversed", "earliest-last-appearance", "most-frequent", "least-frequent"):
        for spec in ("iid:2,1", "iid:2,2"):
            assert analyze(sun_toy_problem(exact=True), parse_tree(spec), traversal_with_order(rule)).tv_distance == 0


def test_traversal_iid_token_order_worked_example():
    # Sun's toy, iid:2,1, children in token-id order (a before b) instead of order of first appearance.
    # Draws (a, a) 4/9: w_a = 1/2 -> first token a w.p. 1/2, else the residual (0, 1): b.
    # Draws {a, b} 4/9 (either order): a is tried first, w_a = 1/2; on rejection w_b = 1 -> b.
    # Draws (b, b) 1/9: b. So P(first token a) = (4/9)(1/2) + (4/9)(1/2) = 4/9, not p(a) = 1/3: TV 1/9.
    # (First-appearance order tries b first after (b, a), giving a w.p. (4/9)(1/2) + (2/9)(1/2) = 1/3.)
    verifier, _ = BROKEN_PATH_VERIFIERS["traversal-iid-token-order"]
    problem = load_problem(DOCS / "traversal_iid_sun_toy.json")  # the witness file of docs/guides/traversal_iid.md
    result = analyze(problem, RootIIDDrafter(2, 1), verifier)
    first = result.output_law.continued_with_target(problem).sum(axis=1)
    np.testing.assert_allclose(first, [4 / 9, 5 / 9], atol=1e-15)
    assert result.tv_distance == pytest.approx(1 / 9, abs=1e-15)


# Two tokens with p > q tie at min(1, p/q) = 1: token 0 is first in the child list after draws (0, 1),
# token 1 is the CDF's maximum. p = (9/20, 9/20, 1/10), q = (1/5, 3/10, 1/2).
TIE_PROBLEM = {"p": [Fraction(9, 20), Fraction(9, 20), Fraction(1, 10)],
               "q": [Fraction(1, 5), Fraction(3, 10), Fraction(1, 2)]}


@pytest.mark.parametrize("spec", ["iid:2,1", "iid:2,2"])
def test_gbv_tied_ranking_is_flagged(spec):
    verifier, _ = BROKEN_PATH_VERIFIERS["gbv-tied-ranking"]
    floats = ContextFreeProblem([float(v) for v in TIE_PROBLEM["p"]], [float(v) for v in TIE_PROBLEM["q"]])
    assert analyze(floats, parse_tree(spec), verifier).tv_distance > 1e-2
    # the shipped GBV, with the strict order (p/q, token id) in both places, is exactly lossless there
    exact = ContextFreeProblem(TIE_PROBLEM["p"], TIE_PROBLEM["q"], exact=True)
    assert analyze(exact, parse_tree(spec), GBV).tv_distance == 0


def test_gbv_tied_ranking_worked_example():
    # iid:2,1 on TIE_PROBLEM. The CDF order (min(1, p/q), id) is 2 < 0 < 1, so q_skew = law of the max of
    # two draws: q_skew(2) = 1/4, q_skew(0) = (7/10)^2 - 1/4 = 6/25, q_skew(1) = 1 - 49/100 = 51/100.
    # The descent picks the FIRST child with score 1, so after draws (0, 1) it selects 0, not 1:
    # P(select 0) = q0^2 + 2 q0 q2 + q0 q1 = 1/25 + 1/5 + 3/50 = 3/10 and
    # P(select 1) = q1^2 + 2 q1 q2 + q1 q0 = 9/100 + 3/10 + 3/50 = 45/100. Token-level rule against q_skew:
    # P(emit 0 as accepted) = (3/10) min(1, (9/20)/(6/25)) = 3/10; P(accept 1) = (45/100) min(1, (9/20)/(51/100))
    # = (45/100)(45/51); token 2 is accepted w.p. (1/4)(2/5) = 1/10. The rejected mass goes to the residual
    # (p - q_skew)+ = (21/100, 0, 0) / (21/100): all on token 0. So P(first = 0) = 3/10 + 1 - 3/10 - 45*45/5100
    # - 1/10 = 1 - 2025/5100 - 1/10 = 0.50294..., against p(0) = 9/20: a bias of 0.0529.
    verifier, _ = BROKEN_PATH_VERIFIERS["gbv-tied-ranking"]
    floats = ContextFreeProblem([float(v) for v in TIE_PROBLEM["p"]], [float(v) for v in TIE_PROBLEM["q"]])
    result = analyze(floats, RootIIDDrafter(2, 1), verifier)
    first = result.output_law.continued_with_target(floats).sum(axis=1)
    assert first[0] == pytest.approx(1 - 2025 / 5100 - 1 / 10, abs=1e-14)
    assert result.tv_distance == pytest.approx(first[0] - 9 / 20, abs=1e-14)

