"""The checker must catch broken verifiers: each trap variant in tests/broken.py is flagged lossy."""

from __future__ import annotations

from fractions import Fraction

import pytest

from tests.broken import BROKEN_CHAIN_VERIFIERS
from tests.conftest import build_problem
from verispec.simulator import ChainDrafter, analyze, sun_toy_problem
from verispec.verifiers import get_verifier


@pytest.mark.parametrize("name", sorted(BROKEN_CHAIN_VERIFIERS))
def test_broken_chain_verifier_is_flagged_on_random_problems(name):
    verifier = BROKEN_CHAIN_VERIFIERS[name]
    # An independent draft (divergence 1) and L = 3 make every trap matter: the unweighted residual only
    # bites when tau lands on a position with w_tau < 1 and S_tau > 0, which close drafts rarely reach.
    distances = [analyze(build_problem(dict(vocab_size=3, depth=3, seed=seed, divergence=1.0)), ChainDrafter(3),
                         verifier).tv_distance for seed in range(1, 6)]
    assert all(distance > 1e-4 for distance in distances), distances  # a real bias, far above rounding


# On the two-token toy the unweighted residual never bites (whenever w_1 < 1, S_1 = 0 and h_1 = 0), so it
# is checked on the random problems above only.
@pytest.mark.parametrize("name", ["naive-correction-from-target", "bv-first-failure"])
def test_broken_chain_verifier_is_exactly_lossy_on_sun_toy(name):
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
