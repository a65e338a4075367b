"""The walk dynamic program against the whole-tree enumeration oracle, and the state-keyed metrics mode
against the context-keyed one."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from verispec.errors import IncompatibleDraftError
from verispec.simulator import (
    BranchingDrafter,
    DelayedDrafter,
    analyze,
    parse_tree,
    random_context_free_problem,
    random_markov_problem,
    random_problem,
)
from verispec.simulator.engine import choose_method
from verispec.verifiers import REGISTRY, get_verifier

SOLVER_VERIFIERS = sorted(name for name, v in REGISTRY.items() if v.node_solver is not None)


@st.composite
def iid_drafters(draw, max_draws=7):
    kind = draw(st.sampled_from(["delayed", "branch-iid"]))
    if kind == "delayed":
        drafter = DelayedDrafter(draw(st.integers(1, 3)), draw(st.integers(0, 2)), draw(st.integers(0, 2)))
    else:
        drafter = BranchingDrafter(tuple(draw(st.lists(st.integers(1, 2), min_size=1, max_size=3))), True)
    draws = 0
    reach = 1
    for factor in drafter.iid_branching:
        reach *= factor
        draws += reach
    if draws > max_draws:
        drafter = DelayedDrafter(2, 1, 1)
    return drafter


@pytest.mark.parametrize("name", SOLVER_VERIFIERS)
@given(drafter=iid_drafters(), size=st.integers(2, 3), seed=st.integers(0, 10**6),
       divergence=st.sampled_from([0.3, 0.8, 1.0]), zero_fraction=st.sampled_from([0.0, 0.3]))
@settings(max_examples=15)
def test_dp_equals_whole_tree_enumeration(name, drafter, size, seed, divergence, zero_fraction):
    verifier = get_verifier(name)
    if not drafter.draft_laws & verifier.valid_for:
        return
    problem = random_problem(size, drafter.depth, seed, divergence=divergence, zero_fraction=zero_fraction)
    oracle = analyze(problem, drafter, verifier, method="closed-form")
    fast = analyze(problem, drafter, verifier, method="dp")
    for a, b in zip(oracle.output_law.by_length, fast.output_law.by_length):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-12)
    assert fast.tv_distance < 1e-12


@pytest.mark.parametrize("make", [lambda s: random_context_free_problem(3, s), lambda s: random_markov_problem(3, s)])
@pytest.mark.parametrize("spec", ["iid:3,2", "delayed:2,2,2", "branch-iid:2,1,2"])
def test_state_keyed_metrics_equal_context_keyed(make, spec):
    problem = make(11)
    drafter = parse_tree(spec)
    for name in ("specinfer", "naivetree", "nss"):
        full = analyze(problem, drafter, get_verifier(name), method="dp")
        metrics = analyze(problem, drafter, get_verifier(name), method="dp-metrics")
        assert metrics.tv_distance is None and metrics.lossless is None and metrics.output_law is None
        np.testing.assert_allclose(np.array(metrics.tau_law, dtype=float), np.array(full.tau_law, dtype=float),
                                   rtol=0, atol=1e-13)
        assert full.extras["dp_states"] > metrics.extras["dp_states"]


def test_method_choice():
    problem = random_problem(2, 2, 0)
    assert choose_method(problem, parse_tree("iid:2,2"), get_verifier("specinfer")) == "dp"
    assert choose_method(problem, parse_tree("chain:2"), get_verifier("bv")) == "fast-enumeration"
    assert choose_method(problem, parse_tree("branch:2,1"), get_verifier("naivetree")) == "fast-enumeration"
    with pytest.raises(IncompatibleDraftError, match="i.i.d.-structured"):
        analyze(problem, parse_tree("chain:2"), get_verifier("bv"), method="dp")


def test_exact_rational_dp():
    from fractions import Fraction

    from verispec.simulator import ContextFreeProblem

    problem = ContextFreeProblem([Fraction(1, 2), Fraction(1, 3), Fraction(1, 6)],
                                 [Fraction(1, 5), Fraction(1, 5), Fraction(3, 5)], exact=True)
    for name in ("specinfer", "naivetree"):
        oracle = analyze(problem, parse_tree("iid:2,2"), get_verifier(name), method="closed-form")
        fast = analyze(problem, parse_tree("iid:2,2"), get_verifier(name), method="dp")
        assert fast.tv_distance == 0 and fast.block_efficiency == oracle.block_efficiency


def test_subclass_that_redraws_loses_the_dp_claim():
    # The DP trusts iid_branching; a drafter that changes draw() without restating it must not inherit it.
    from tests.support.broken import KCopiesTrunkDrafter

    assert DelayedDrafter(2, 1, 1).iid_branching == (1, 2)
    broken = KCopiesTrunkDrafter(2, 1, 1)
    assert broken.iid_branching is None
    assert choose_method(random_problem(2, 2, 0), broken, get_verifier("specinfer")) == "closed-form"


@pytest.mark.slow
def test_deep_markov_metrics_against_the_oracle():
    # A delayed tree of depth 5 on an order-1 Markov problem: state-keyed DP == whole-tree enumeration.
    problem = random_markov_problem(3, 5, divergence=0.8)
    drafter = DelayedDrafter(2, 3, 2)
    for name in ("specinfer", "spectr"):
        oracle = analyze(problem, drafter, get_verifier(name), method="closed-form")
        metrics = analyze(problem, drafter, get_verifier(name), method="dp-metrics")
        np.testing.assert_allclose(np.array(metrics.tau_law, dtype=float), np.array(oracle.tau_law, dtype=float),
                                   rtol=0, atol=1e-12)


def test_verifier_subclass_that_changes_its_law_loses_the_fast_forms():
    # The walk DP replaces a walk's law by the solver's kernels; a subclass that redefines emission_laws
    # must be analysed through its own law, or the parent's rule would be reported instead.
    from verispec.verifiers import TopDownVerifier
    from verispec.verifiers.block import BlockVerifier
    from verispec.verifiers.gbv import GreedyBlockVerifier
    from verispec.verifiers.specinfer import SpecInferSolver

    class RootOnlyWalk(TopDownVerifier):
        """Emits y ~ p at the root, ignoring the drafts (lossless, efficiency 1)."""

        def emission_laws(self, batch):
            law = np.zeros((batch.num_rows, batch.num_nodes, batch.vocab_size))
            law[:, 0] = batch.p[:, 0]
            return law

    class Variant(GreedyBlockVerifier):  # order free, but a redefined law must restate it

        def emission_laws(self, batch):
            return super().emission_laws(batch)

    problem = random_problem(2, 2, 3)
    walk = RootOnlyWalk(SpecInferSolver())
    assert walk.node_solver is None and not Variant().order_free
    assert choose_method(problem, parse_tree("iid:2,2"), walk) == "fast-enumeration"
    for method in ("fast-enumeration", "closed-form"):
        result = analyze(problem, parse_tree("iid:2,2"), walk, method=method)
        assert result.block_efficiency == pytest.approx(1.0, abs=1e-15)
    with pytest.raises(IncompatibleDraftError, match="dp"):
        analyze(problem, parse_tree("iid:2,2"), walk, method="dp")
    assert choose_method(problem, parse_tree("iid:2,2"), Variant()) == "fast-enumeration"
    assert GreedyBlockVerifier().order_free
    # The per-tree law is the one-row case of the batched law: a subclass may not define a second copy.
    with pytest.raises(TypeError, match="emission_laws"):
        type("PerTree", (BlockVerifier,), {"emission_law": lambda self, tree: None})
