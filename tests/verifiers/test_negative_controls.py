"""The checker must catch broken verifiers: each trap variant in tests/support/broken.py is flagged lossy, and
`verispec hunt` finds a witness for it."""

from __future__ import annotations

import json
from fractions import Fraction

import numpy as np
import pytest

from tests.support.broken import (
    BROKEN_CHAIN_VERIFIERS,
    BROKEN_VARIANTS,
    all_broken_variants,
    specinfer_skipping_duplicates,
)
from tests.support.strategies import build_problem
from verispec.cli import main
from verispec.hunt import hunt
from verispec.simulator import ChainDrafter, ContextFreeProblem, analyze, parse_tree, sun_toy_problem
from verispec.simulator.chooser import enumerate_law
from verispec.verifiers import get_verifier


@pytest.mark.parametrize("name", sorted(BROKEN_VARIANTS))
def test_broken_variant_is_flagged_on_random_problems(name):
    # Independent drafts (divergence 1) over four tokens make every trap matter on generic problems;
    # a degenerate problem (e.g. one token carrying all residual mass) may hide one, so we ask that the
    # bias shows on some of five problems and is far above rounding there.
    verifier, drafter = BROKEN_VARIANTS[name]
    distances = [analyze(build_problem(dict(vocab_size=4, depth=drafter.depth, seed=seed, divergence=1.0,
                                            concentration=0.5)), drafter, verifier).tv_distance
                 for seed in range(1, 6)]
    assert max(distances) > 1e-3, distances


ALL_BROKEN = all_broken_variants()


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(ALL_BROKEN))
def test_hunt_finds_a_witness_within_a_minute(name):
    verifier, drafter = ALL_BROKEN[name]
    witness = hunt(verifier, drafter, time_budget=60).witness
    assert witness is not None and witness.seconds < 60
    assert witness.tv_distance > 1e-9


def test_hunt_witness_reproduces_through_the_cli(tmp_path, capsys):
    path = tmp_path / "witness.json"
    code = main(["hunt", "--verifier", "tests/support/broken.py:bv_first_failure", "--tree", "chain:2", "--output",
                 str(path)])
    assert code == 1 and "LOSSY: witness" in capsys.readouterr().err  # exit 1: lossy, as every check says
    code = main(["exact", "--problem", str(path), "--tree", "chain:2", "--verifier",
                 "tests/support/broken.py:bv_first_failure", "--json", "--exact"])
    data = json.loads(capsys.readouterr().out)
    assert code == 0 and data["lossless"] is False and Fraction(data["exact_values"]["tv_distance"]) > 0


def test_hunt_finds_nothing_for_a_lossless_rule(capsys):
    result = hunt(get_verifier("bv"), parse_tree("chain:2"), max_examples=150)
    assert result.witness is None and result.canonical_complete and result.random_tried >= 150
    assert all(check.distance is not None and check.distance < 1e-12 for check in result.canonical)
    # nothing found is not a proof: exit 3, inconclusive
    assert main(["hunt", "--verifier", "naive", "--tree", "chain:1", "--max-examples", "50"]) == 3
    assert "INCONCLUSIVE: no lossy problem" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["naive-correction-from-target", "bv-first-failure"])
def test_broken_chain_verifier_is_exactly_lossy_on_sun_toy(name):
    # (On the two-token toy the unweighted residual never bites: whenever w_1 < 1, S_1 = 0 and h_1 = 0.)
    result = analyze(sun_toy_problem(exact=True), ChainDrafter(2), BROKEN_CHAIN_VERIFIERS[name])
    assert result.tv_distance > 0 and not result.lossless


def test_bv_first_failure_worked_example():
    # Sun et al.'s toy (a = 0, b = 1; p = (1/3, 2/3), q = (2/3, 1/3)), L = 2, worked by hand:
    # x_1 = a: w_1 = 1/2, S_1 = sum (w_1 p - q)+ = 0, so h_1 = 0. Taking tau as the first failure stops at
    # tau = 0 and emits from norm((p - q)+) = (0, 1), i.e. b. x_1 = b: the first token is b anyway.
    # So the broken rule never emits a as the first token, while the target gives it 1/3.
    # (Correct BV takes the largest passing index: x = (a, b) has h_2 = w_2 = 1, so it emits a first.)
    problem = sun_toy_problem(exact=True)
    broken = analyze(problem, ChainDrafter(2), BROKEN_CHAIN_VERIFIERS["bv-first-failure"])
    assert broken.output_law.continued_with_target(problem)[0].sum() == 0
    correct = analyze(problem, ChainDrafter(2), get_verifier("bv"))
    assert correct.output_law.continued_with_target(problem)[0].sum() == Fraction(1, 3)


def test_specinfer_duplicate_trap_worked_example():
    # p = (1/10, 6/10, 3/10), q = (7/10, 1/10, 2/10), drafts (0, 0). By hand, correct RRS: accept 0 w.p.
    # p0/q0 = 1/7; else r_2 = norm((p - q)+) = (0, 5/6, 1/6); the repeated 0 is rejected surely
    # (r_2(0) = 0) and updates r_3 = norm((r_2 - q)+) = (0, 1, 0). Output law (1/7, 6/7, 0).
    # Skipping the duplicate emits from r_2: (1/7, 5/7, 1/7).
    p = np.array([Fraction(1, 10), Fraction(6, 10), Fraction(3, 10)], dtype=object)
    q = np.array([Fraction(7, 10), Fraction(1, 10), Fraction(2, 10)], dtype=object)
    correct = get_verifier("specinfer").solver.output_law(p, q, (0, 0))
    assert list(correct) == [Fraction(1, 7), Fraction(6, 7), 0]
    broken = enumerate_law(lambda chooser: specinfer_skipping_duplicates(p, q, (0, 0), chooser), exact=True)
    assert broken == {0: Fraction(1, 7), 1: Fraction(5, 7), 2: Fraction(1, 7)}
    problem = ContextFreeProblem(p, q, exact=True)
    verifier, drafter = BROKEN_VARIANTS["specinfer-skipping-duplicates"]
    assert analyze(problem, parse_tree("iid:2,1"), verifier).tv_distance > 0
    assert analyze(problem, parse_tree("iid:2,1"), get_verifier("specinfer")).tv_distance == 0
