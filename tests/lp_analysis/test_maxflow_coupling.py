"""The max-flow coupling against the OT linear program and the closed form alpha*."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from verispec.lp_analysis.draft_laws import iid_draft_law, without_replacement_draft_law
from verispec.lp_analysis.importance import flow_weights, importance_weights
from verispec.lp_analysis.maxflow import maxflow_coupling
from verispec.lp_analysis.ot import ot_coupling
from verispec.lp_analysis.single_position import iid_ot_optimum, without_replacement_ot_optimum


@st.composite
def laws(draw, max_size=6):
    size = draw(st.integers(2, max_size))
    weights = [draw(st.lists(st.integers(0, 9), min_size=size, max_size=size)) for _ in range(2)]
    for w in weights:
        if sum(w) == 0:
            w[0] = 1
    p, q = (np.array([Fraction(x, sum(w)) for x in w], dtype=object) for w in weights)
    return p, q, draw(st.integers(1, 4 if size <= 4 else 3))


@given(laws(), st.booleans())
@settings(max_examples=40)
def test_exact_coupling_is_optimal_with_exact_marginals(data, replacement):
    p, q, k = data
    law = without_replacement_draft_law(q, k) if replacement else iid_draft_law(q, k)
    coupling = maxflow_coupling(p, law)
    assert list(coupling.coupling.sum(axis=0)) == list(p)
    assert list(coupling.coupling.sum(axis=1)) == [law[x] for x in coupling.outcomes]
    assert (coupling.coupling >= 0).all()
    expected = (without_replacement_ot_optimum(p, q, k) if replacement else iid_ot_optimum(p, q, k)).alpha
    assert coupling.optimum == expected  # exactly, in rationals


@given(st.integers(0, 10**6), st.integers(2, 6), st.integers(1, 3))
@settings(max_examples=30)
def test_float_coupling_matches_the_linear_program(seed, size, k):
    rng = np.random.default_rng(seed)
    p, q = rng.dirichlet(np.full(size, 0.7)), rng.dirichlet(np.full(size, 0.7))
    law = iid_draft_law(q, k)
    flow, lp = maxflow_coupling(p, law), ot_coupling(p, law)
    assert flow.optimum == pytest.approx(lp.optimum, abs=1e-9)
    # Marginals to rounding: sums of up to V^K terms after a few hundred flow updates stay near 1e-15,
    # three orders below the engine's 1e-12 losslessness tolerance.
    np.testing.assert_allclose(flow.coupling.sum(axis=0), p, rtol=0, atol=1e-14)
    np.testing.assert_allclose(flow.coupling.sum(axis=1), flow.probabilities, rtol=0, atol=1e-14)


@given(laws(max_size=5))
@settings(max_examples=30)
def test_flow_weights_are_exactly_optimal(data):
    # Khisti et al.'s step-1 weights from the flow: sum min(p, p_I) = alpha*, exactly; rows sum to one on the
    # drafted tokens; and the weight LP (float) reaches the same value.
    p, q, k = data
    law = iid_draft_law(q, k)
    weights = flow_weights(p, law)
    assert weights.optimum == iid_ot_optimum(p, q, k).alpha
    for outcome, row in zip(weights.outcomes, weights.weights):
        assert sum(row) == 1 and all(row[t] == 0 for t in range(len(p)) if t not in outcome)
    lp = importance_weights(p.astype(float), iid_draft_law(q.astype(float), k))
    assert lp.optimum == pytest.approx(float(weights.optimum), abs=1e-9)
