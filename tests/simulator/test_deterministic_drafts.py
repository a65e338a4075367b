"""Deterministic (point-mass) drafts handed their own law: which rules stay lossless (all that are valid for the
drafts' law, identified exactly), the acceptance derived by hand, what they give up against sampled drafts, the
n-gram rule, and the trap of handing the unfiltered q instead (argmax-chain)."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from verispec.errors import InvalidProblemError
from verispec.simulator import ContextFreeProblem, analyze, parse_tree, random_problem
from verispec.simulator.deterministic import DeterministicDrafts
from verispec.verifiers import REGISTRY


def _valid(spec):
    drafter = parse_tree(spec)
    return [name for name, verifier in sorted(REGISTRY.items()) if drafter.draft_laws & verifier.valid_for]


@pytest.mark.parametrize("length", [1, 2, 3])
def test_argmax_path_handed_a_point_mass_accepts_p_of_the_mode_at_every_rule(length):
    """Context-free p, q: every draft is x* = argmax q, accepted with probability p(x*) whatever the valid rule
    (with q = 1 every rule's test is p(x*) / 1), so E[tau + 1] = sum_(d <= L) p(x*)^d, and the law stays p."""
    p, q = np.array([0.5, 0.3, 0.2]), np.array([0.2, 0.3, 0.5])
    problem = DeterministicDrafts(ContextFreeProblem(p, q), "argmax")
    expected = sum(0.2 ** depth for depth in range(length + 1))  # x* = 2, p(x*) = 0.2
    names = _valid(f"chain:{length}")
    assert len(names) == 15
    for name in names:
        result = analyze(problem, parse_tree(f"chain:{length}"), REGISTRY[name])
        assert result.tv_distance < 1e-12, name
        assert result.block_efficiency == pytest.approx(expected, abs=1e-12), name


def test_top_k_siblings_stay_lossless_for_every_rule_valid_without_replacement():
    """top:2 with branch:2,1 (the top two tokens of q at every node, in a uniformly random order): every rule
    valid for draws without replacement is lossless on context-dependent problems, and nss accepts at the root
    with probability p(top two) exactly (derived by hand: Y ~ p is accepted iff it is a candidate)."""
    base = random_problem(4, 2, seed=3, concentration=0.5)
    problem = DeterministicDrafts(base, "top:2")
    names = _valid("branch:2,1")
    assert set(names) == {"naivetree", "nss", "rrsw", "traversal"}
    for name in names:
        assert analyze(problem, parse_tree("branch:2,1"), REGISTRY[name]).tv_distance < 1e-12, name
    q, p = base.draft(()), base.target(())
    top = np.argsort(-q, kind="stable")[:2]
    nss = analyze(problem, parse_tree("branch:2"), REGISTRY["nss"])
    assert nss.acceptance_by_depth[0] == pytest.approx(p[top].sum(), abs=1e-12)


def test_deterministic_drafts_give_up_acceptance_against_sampled_drafts():
    """On 20 random problems the best valid rule with sampled drafts (q itself) beats the argmax path handed
    q = 1 at the same tree size on average (chain:3), while both stay lossless."""
    gaps = []
    for seed in range(20):
        base = random_problem(4, 3, seed=seed, divergence=0.3)
        point = analyze(DeterministicDrafts(base, "argmax"), parse_tree("chain:3"), REGISTRY["bv"])
        sampled = analyze(base, parse_tree("chain:3"), REGISTRY["bv"])
        assert point.tv_distance < 1e-12 and sampled.tv_distance < 1e-12
        gaps.append(sampled.block_efficiency - point.block_efficiency)
    assert np.mean(gaps) > 0.5 and min(gaps) > 0


def test_ngram_rule_continues_the_most_recent_match_and_falls_back_to_the_mode():
    p = np.array([0.25, 0.25, 0.25, 0.25])
    q = np.array([0.1, 0.2, 0.3, 0.4])
    problem = DeterministicDrafts(ContextFreeProblem(p, q), "ngram:2", context=(0, 1, 2, 0, 1))
    assert problem.continuation(()) == 2       # (0, 1) occurred before, followed by 2
    assert problem.continuation((2,)) == 0     # (1, 2) occurred before, followed by 0
    assert problem.continuation((3,)) is None  # (1, 3) never did
    assert np.argmax(problem.draft((3,))) == 3  # the mode of q
    # the drafted path is 2, 0, 1 (each continuation in turn); uniform p accepts each with 1/4
    result = analyze(problem, parse_tree("chain:3"), REGISTRY["naive"])
    assert result.tv_distance < 1e-12
    assert result.block_efficiency == pytest.approx(1 + 0.25 + 0.25 ** 2 + 0.25 ** 3, abs=1e-12)


def test_exact_mode_is_exactly_lossless():
    p = [Fraction(1, 2), Fraction(1, 3), Fraction(1, 6)]
    q = [Fraction(1, 5), Fraction(1, 5), Fraction(3, 5)]
    problem = DeterministicDrafts(ContextFreeProblem(p, q, exact=True), "argmax")
    result = analyze(problem, parse_tree("chain:2"), REGISTRY["naive"])
    assert result.tv_distance == 0 and result.block_efficiency == 1 + Fraction(1, 6) + Fraction(1, 36)


def test_handing_the_unfiltered_q_with_greedy_drafts_is_caught():
    """The negative control: argmax drafts handed the full q (what an engine does when it passes the draft
    model's probabilities of a greedy draft) are lossy for the token-level rule."""
    problem = ContextFreeProblem(np.array([0.5, 0.3, 0.2]), np.array([0.2, 0.3, 0.5]))
    from verispec.verifiers import TopDownVerifier
    from verispec.verifiers.nss import NaiveSamplingSolver

    assert analyze(problem, parse_tree("argmax-chain:1"), TopDownVerifier(NaiveSamplingSolver())).tv_distance < 1e-12
    from verispec.simulator.drafters import DraftLaw
    from verispec.verifiers.naive import NaiveVerifier

    class Unguarded(NaiveVerifier):  # the token-level rule with its validity check taken off
        name = "naive-unguarded"
        valid_for = frozenset(DraftLaw)

    assert analyze(problem, parse_tree("argmax-chain:1"), Unguarded()).tv_distance > 0.1


@pytest.mark.parametrize("rule", ["top", "top:0", "ngram:x", "greedy", "argmax:2"])
def test_bad_rules_are_one_line_errors(rule):
    with pytest.raises(InvalidProblemError, match="unknown deterministic draft rule"):
        DeterministicDrafts(ContextFreeProblem(np.array([0.5, 0.5]), np.array([0.5, 0.5])), rule)


def test_the_exact_command_takes_deterministic_drafts(capsys):
    from verispec.cli import main

    assert main(["exact", "--target", "1/2,1/3,1/6", "--draft", "1/5,1/5,3/5", "--tree", "chain:2", "--verifier",
                 "naive", "--drafts", "argmax", "--exact", "--json"]) == 0
    import json

    out = json.loads(capsys.readouterr().out)
    assert out["exact_values"]["tv_distance"] == "0"
    assert Fraction(out["exact_values"]["block_efficiency"]) == 1 + Fraction(1, 6) + Fraction(1, 36)
    assert main(["exact", "--target", "0.5,0.5", "--draft", "0.5,0.5", "--tree", "chain:1", "--verifier", "naive",
                 "--drafts", "top:x"]) == 2
    assert "unknown deterministic draft rule 'top:x'" in capsys.readouterr().err
