"""Certified intervals (verispec.simulator.certified): on problems small enough for the exact engine, the
interval always contains the exact E[tau + 1] and every P(tau >= d), is no wider than asked, and closes on the
exact value as epsilon goes to 0; on a live tiny pair as on tables."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from verispec import certify
from verispec.errors import ProblemTooLargeError, VerispecError
from verispec.simulator import (
    analyze,
    parse_tree,
    random_context_free_problem,
    random_markov_problem,
    random_problem,
)
from verispec.simulator.certified import ROUNDING
from verispec.verifiers import REGISTRY

#: Trees tried per verifier, the first valid one used: an i.i.d. shape (the walk) where the rule allows it.
TREES = ["delayed:2,1,2", "iid:2,2", "branch-iid:2,1", "chain:3", "branch:2,1", "hub-tree:2", "greedy-tree:2,2",
         "dyspec:3"]


def _tree_for(name: str) -> str:
    verifier = REGISTRY[name]
    return next(spec for spec in TREES if parse_tree(spec).draft_laws & verifier.valid_for)


CASES = [(name, _tree_for(name)) for name in sorted(REGISTRY)]


def _assert_contains(result, exact) -> None:
    slack = 10 * ROUNDING
    assert result.contains(float(exact.block_efficiency), slack), (result.lower, float(exact.block_efficiency),
                                                                    result.upper)
    for low, value, high in zip(result.acceptance_lower, exact.acceptance_by_depth, result.acceptance_upper):
        assert low - slack <= float(value) <= high + slack


@pytest.mark.parametrize("name,spec", CASES)
def test_interval_contains_the_exact_value_and_closes_on_it(name, spec):
    problem = random_problem(4, parse_tree(spec).depth, 11, divergence=0.6)
    # whole-tree enumeration of the rule's own law: independent of the closed-form kernels the walk may use
    exact = analyze(problem, spec, REGISTRY[name], method="closed-form")
    widths = []
    for epsilon in (0.3, 1e-2, 1e-4, 1e-9):
        result = certify(problem, spec, name, epsilon)
        _assert_contains(result, exact)
        assert result.reached and result.width <= epsilon
        widths.append(result.width)
    assert abs((result.lower + result.upper) / 2 - float(exact.block_efficiency)) < 1e-8
    assert widths == sorted(widths, reverse=True)


def test_the_walk_is_used_for_node_solvers_on_iid_trees_and_whole_trees_otherwise():
    problem = random_problem(4, 3, 2)
    assert certify(problem, "delayed:2,1,2", "specinfer", 1e-3).method == "certified walk (closed-form kernels)"
    assert certify(problem, "delayed:2,1,2", "khisti", 1e-3).method == "certified walk"  # no sequential tests
    assert certify(problem, "chain:3", "bv", 1e-3).method == "certified whole trees"
    assert certify(problem, "branch:2,1", "traversal", 1e-3).method == "certified whole trees"


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), size=st.integers(2, 5), divergence=st.sampled_from([0.1, 0.5, 1.0]),
       case=st.sampled_from([("specinfer", "delayed:2,1,2"), ("spectr", "iid:2,2"), ("nss", "iid:3,1"),
                             ("specinfer", "branch-iid:2,1"), ("bv", "chain:3"), ("traversal", "branch:2,1")]),
       epsilon=st.sampled_from([0.5, 1e-2, 1e-5]))
def test_interval_contains_the_exact_value_on_random_problems(seed, size, divergence, case, epsilon):
    name, spec = case
    problem = random_problem(size, parse_tree(spec).depth, seed, divergence=divergence, zero_fraction=0.2)
    try:
        parse_tree(spec).check_problem(problem)
    except VerispecError:
        return
    _assert_contains(certify(problem, spec, name, epsilon),
                     analyze(problem, spec, REGISTRY[name], method="closed-form"))


@pytest.mark.parametrize("make", [lambda: random_markov_problem(3, 4, divergence=0.7),
                                  lambda: random_context_free_problem(3, 5, divergence=0.7)],
                         ids=["markov", "context-free"])
@pytest.mark.parametrize("name,spec", [("specinfer", "delayed:2,1,2"), ("spectr", "iid:2,3"),
                                       ("khisti", "delayed:2,1,2")])
def test_problems_whose_prefixes_share_states_are_certified_too(make, name, spec):
    """On Markov and context-free problems children of different parents merge into one state (the walk keys
    states by problem.state); the closed-form walk leaves a merged child's below-floor parts in the slack."""
    problem = make()
    exact = analyze(problem, spec, REGISTRY[name], method="closed-form")
    for epsilon in (0.1, 1e-3, 1e-9):
        result = certify(problem, spec, name, epsilon)
        _assert_contains(result, exact)
        assert result.reached
    assert abs((result.lower + result.upper) / 2 - float(exact.block_efficiency)) < 1e-8


def test_a_budget_that_runs_out_after_a_round_returns_that_round_flagged():
    problem = random_problem(5, 4, 3, divergence=0.5)
    exact = analyze(problem, "delayed:3,1,3", REGISTRY["specinfer"])
    result = certify(problem, "delayed:3,1,3", "specinfer", 1e-12, max_rows=1000)
    assert not result.reached and "stopped at width" in result.note and result.width > 1e-12
    _assert_contains(result, exact)


def test_a_budget_too_small_for_one_round_is_refused():
    problem = random_problem(5, 4, 3, divergence=0.5)
    with pytest.raises(ProblemTooLargeError, match="rows"):
        certify(problem, "delayed:3,1,3", "specinfer", 1e-3, max_rows=2)
    with pytest.raises(ProblemTooLargeError, match="draft trees"):
        certify(problem, "chain:4", "bv", 1e-9, max_outcomes=3)


@pytest.mark.parametrize("epsilon", [0, -1, float("nan"), float("inf"), "0.1", True])
def test_bad_epsilon_is_a_one_line_error(epsilon):
    with pytest.raises(VerispecError, match="epsilon must be a positive number"):
        certify(random_problem(3, 2, 0), "chain:2", "specinfer", epsilon)


def test_incompatible_tree_is_refused():
    from verispec.errors import IncompatibleDraftError

    with pytest.raises(IncompatibleDraftError):
        certify(random_problem(3, 2, 0), "branch:2,1", "specinfer", 0.1)


# --- on a live (tiny) model pair ----------------------------------------------------------------------------------

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")


@pytest.mark.parametrize("name,spec,batched", [("specinfer", "delayed:2,1,2", True), ("spectr", "iid:2,2", True),
                                               ("bv", "chain:3", True), ("traversal", "branch:2,1", True),
                                               ("naive", "chain:1", False)])
def test_on_a_live_pair_the_interval_contains_the_engines_exact_value(pair_seed2, name, spec, batched):
    """``batched``: every prefix's laws are computed first, depth by depth, in batched forwards (ModelProblem.prefetch:
    some ten forwards instead of one per prefix, 4,369 of them under chain:3 at V = 16, 50 s of this test alone); the
    batched laws are the uncached forwards' (tests/models/test_model_problem.py::
    test_conditionals_equal_uncached_forwards_and_come_in_batches). naive on chain:1 keeps the lazy path, a forward
    whenever the engine first reads a prefix."""
    from verispec.models import Sampling
    from verispec.models.problem import ModelProblem

    problem = ModelProblem(pair_seed2, [4, 1, 7], Sampling(1.0, top_p=0.97), horizon=parse_tree(spec).depth)
    if batched:
        problem.prefetch(parse_tree(spec).depth)
    exact = analyze(problem, spec, REGISTRY[name])
    for epsilon in (0.05, 1e-6):
        result = certify(problem, spec, name, epsilon)
        _assert_contains(result, exact)
        assert result.width <= epsilon and result.forward_passes == problem.forward_passes
