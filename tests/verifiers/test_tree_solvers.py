"""Top-down tree verifiers: single-step acceptance against the closed forms (DDTE, arXiv 2602.16994,
App. C; reference), reductions on a chain, and losslessness on delayed trees at every (K, L1, L2)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.strategies import build_problem, problem_args
from verispec.simulator import ContextFreeProblem, DelayedDrafter, DraftLaw, analyze, parse_tree, random_problem
from verispec.verifiers import REGISTRY, ProcedureSolver, TopDownVerifier, get_verifier


def _acceptance_nss(p, q, k):
    return float(np.sum(p * (1 - (1 - q) ** k)))


def _acceptance_naivetree(p, q, k):
    # x_1 accepted w.p. sum min(p, q); otherwise Y ~ norm((p - q)+) lands on one of x_2..x_K.
    return float(np.minimum(p, q).sum() + np.sum(np.maximum(p - q, 0) * (1 - (1 - q) ** (k - 1))))


def _acceptance_specinfer(p, q, k):
    # 1 - prod_j (1 - sum min(r_j, q)), r_1 = p, r_{j+1} = norm((r_j - q)+) (Miao et al. 2024)
    rejected, r = 1.0, p
    for _ in range(k):
        rejected *= 1 - np.minimum(r, q).sum()
        leftover = np.maximum(r - q, 0)
        r = leftover / leftover.sum() if leftover.sum() > 0 else leftover
    return 1 - rejected


CLOSED_FORMS = {"nss": _acceptance_nss, "naivetree": _acceptance_naivetree, "specinfer": _acceptance_specinfer}


@pytest.mark.parametrize("name", sorted(CLOSED_FORMS))
@given(size=st.integers(2, 5), k=st.integers(1, 4), seed=st.integers(0, 10**6),
       divergence=st.sampled_from([0.3, 0.7, 1.0]), zero_fraction=st.sampled_from([0.0, 0.3]))
@settings(max_examples=25)
def test_single_step_acceptance_closed_form(name, size, k, seed, divergence, zero_fraction):
    if size ** k > 700:
        k = 2
    problem = build_problem(dict(vocab_size=size, depth=1, seed=seed, divergence=divergence,
                                 zero_fraction=zero_fraction))
    result = analyze(problem, parse_tree(f"iid:{k},1"), get_verifier(name))
    expected = CLOSED_FORMS[name](problem.target(()), problem.draft(()), k)
    assert result.acceptance_by_depth[0] == pytest.approx(expected, abs=1e-12)
    assert result.tv_distance < 1e-12


@pytest.mark.parametrize("name", ["specinfer", "naivetree"])
@given(args=problem_args(vocab=(2, 4), depth=(1, 3)))
@settings(max_examples=20)
def test_reduces_to_token_level_on_a_chain(name, args):
    problem = build_problem(args)
    chain = parse_tree(f"chain:{args['depth']}")
    laws = [analyze(problem, chain, get_verifier(v)).output_law.by_length for v in (name, "naive")]
    for a, b in zip(*laws):
        np.testing.assert_allclose(a, b, atol=1e-12)


IID_VERIFIERS = sorted(name for name, v in REGISTRY.items() if DraftLaw.IID_CHILDREN in v.valid_for)


@pytest.mark.parametrize("name", IID_VERIFIERS)
@given(size=st.integers(2, 4), k=st.integers(1, 3), trunk=st.integers(0, 2), tail=st.integers(0, 2),
       seed=st.integers(0, 10**6), divergence=st.sampled_from([0.2, 0.6, 1.0]))
@settings(max_examples=20)
def test_lossless_on_delayed_trees(name, size, k, trunk, tail, seed, divergence):
    while size ** (trunk + k * tail) > 1500:  # keep whole-tree enumeration small
        tail -= 1
    problem = random_problem(size, trunk + tail, seed, divergence=divergence)
    result = analyze(problem, DelayedDrafter(k, trunk, tail), get_verifier(name))
    assert result.tv_distance < 1e-12


def test_delayed_with_one_branch_is_token_level():
    # On a delayed tree the trunk is a single path: with K = 1 every OT walk is token-level verification,
    # so specinfer on delayed:1,L1,L2 equals naive on chain:L1+L2.
    problem = random_problem(3, 3, 5, divergence=0.8)
    delayed = analyze(problem, parse_tree("delayed:1,2,1"), get_verifier("specinfer"))
    chain = analyze(problem, parse_tree("chain:3"), get_verifier("naive"))
    assert delayed.block_efficiency == pytest.approx(chain.block_efficiency, abs=1e-12)


def test_procedure_solver_prototype():
    # A researcher's node-local rule in a few lines: NSS written as a procedure.
    verifier = TopDownVerifier(ProcedureSolver("my-nss", lambda p, q, children, chooser: chooser.categorical(p)))
    problem = ContextFreeProblem([0.2, 0.3, 0.5], [0.5, 0.3, 0.2])
    mine = analyze(problem, parse_tree("iid:2,2"), verifier)
    reference = analyze(problem, parse_tree("iid:2,2"), get_verifier("nss"))
    assert mine.lossless and mine.block_efficiency == pytest.approx(reference.block_efficiency, abs=1e-12)
