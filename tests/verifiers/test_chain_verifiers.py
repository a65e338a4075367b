"""Token-level (naive) and block verification on single draft paths, checked against published values
and closed forms derived here independently of the verifiers' code."""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.support.strategies import build_problem, problem_args
from verispec.simulator import ChainDrafter, ContextFreeProblem, analyze, sun_toy_problem
from verispec.verifiers import get_verifier

NAIVE, BV = get_verifier("naive"), get_verifier("bv")


@pytest.mark.parametrize("exact", [True, False])
def test_sun_toy_published_values(exact):
    # Sun et al. 2024 (arXiv 2403.10444), Sec. 2: E[tau] = 10/9 token-level, 11/9 block, L = 2.
    problem = sun_toy_problem(exact=exact)
    naive = analyze(problem, ChainDrafter(2), NAIVE)
    block = analyze(problem, ChainDrafter(2), BV)
    if exact:
        assert naive.expected_accepted == Fraction(10, 9)
        assert block.expected_accepted == Fraction(11, 9)
        assert naive.tv_distance == 0 and block.tv_distance == 0
    else:
        assert naive.expected_accepted == pytest.approx(10 / 9, abs=1e-12)
        assert block.expected_accepted == pytest.approx(11 / 9, abs=1e-12)
        assert naive.tv_distance < 1e-12 and block.tv_distance < 1e-12
    assert naive.lossless and block.lossless


def _naive_expected_accepted_closed_form(problem, length):
    """E[tau] = sum_{d=1..L} sum_{x_1..x_d} prod_i min(p, q)(x_i | x_<i): the d-th draft is reached and
    accepted iff every earlier one was, each with probability min(1, p/q) given the draw from q."""
    total = 0
    for depth in range(1, length + 1):
        for prefix in itertools.product(range(problem.vocab_size), repeat=depth):
            term = 1
            for i, token in enumerate(prefix):
                term *= min(problem.target(prefix[:i])[token], problem.draft(prefix[:i])[token])
            total += term
    return total


@given(problem_args(), st.data())
def test_naive_matches_independent_closed_form(args, data):
    problem = build_problem(args)
    length = data.draw(st.integers(1, args["depth"]))
    result = analyze(problem, ChainDrafter(length), NAIVE)
    assert result.expected_accepted == pytest.approx(_naive_expected_accepted_closed_form(problem, length), abs=1e-12)


@given(st.lists(st.integers(0, 6), min_size=2, max_size=4), st.lists(st.integers(1, 6), min_size=4, max_size=4),
       st.integers(0, 4))
def test_naive_geometric_law_exact(p_weights, q_weights, length):
    # Context-free problem: the acceptance per position is alpha = sum min(p, q) (Leviathan et al. 2023,
    # Thm. 3.8), so E[tau + 1] = (1 - alpha^(L+1)) / (1 - alpha); exact in rationals.
    size = len(p_weights)
    if sum(p_weights) == 0:
        p_weights[0] = 1
    p = [Fraction(w, sum(p_weights)) for w in p_weights]
    q = [Fraction(w, sum(q_weights[:size])) for w in q_weights[:size]]
    problem = ContextFreeProblem(p, q, exact=True)
    alpha = sum(min(a, b) for a, b in zip(p, q))
    expected = Fraction(length + 1) if alpha == 1 else (1 - alpha ** (length + 1)) / (1 - alpha)
    result = analyze(problem, ChainDrafter(length), NAIVE)
    assert result.block_efficiency == expected
    assert result.tv_distance == 0
    block = analyze(problem, ChainDrafter(length), BV)
    assert block.tv_distance == 0
    assert block.block_efficiency >= result.block_efficiency


@given(problem_args(vocab=(2, 4), depth=(1, 4)))
def test_block_verification_dominates_token_level(args):
    problem = build_problem(args)
    drafter = ChainDrafter(args["depth"])
    naive, block = analyze(problem, drafter, NAIVE), analyze(problem, drafter, BV)
    assert naive.tv_distance < 1e-12 and block.tv_distance < 1e-12
    assert block.block_efficiency >= naive.block_efficiency - 1e-12
    # acceptance of the first position is the same for both: sum min(p, q) at the root
    alpha = np.minimum(problem.target(()), problem.draft(())).sum()
    assert naive.acceptance_by_depth[0] == pytest.approx(alpha, abs=1e-12)
    assert block.acceptance_by_depth[0] == pytest.approx(alpha, abs=1e-12)


def test_block_verification_single_draft_is_token_level():
    # For L = 1 block verification is the token-level rule (Sun et al. 2024, Sec. 3): equal output laws.
    problem = build_problem(dict(vocab_size=4, depth=1, seed=7))
    naive = analyze(problem, ChainDrafter(1), NAIVE).output_law
    block = analyze(problem, ChainDrafter(1), BV).output_law
    for a, b in zip(naive.by_length, block.by_length):
        np.testing.assert_allclose(a, b, atol=1e-15)


def test_identical_draft_accepts_everything():
    # q = p: every draft is accepted, tau = L with probability one, under both rules.
    problem = build_problem(dict(vocab_size=3, depth=3, seed=3, divergence=0.0))
    for verifier in (NAIVE, BV):
        result = analyze(problem, ChainDrafter(3), verifier)
        assert result.tau_law[-1] == pytest.approx(1.0, abs=1e-12)
        assert result.block_efficiency == pytest.approx(4.0, abs=1e-12)
