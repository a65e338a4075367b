"""Global Resolution's per-node fast paths (issue 66, item 5): a node of one row is computed on its drafted tokens
(``GlobalResolutionSolver.output_laws``), its rule cached by its support (``support_key``), and the integrals solved
over index arrays. Held to computations written here: the law of the chosen token by enumerating every ordered
K-tuple of drafts with the rule's own weights, alpha* by brute force over token subsets, the two-step output law
from its definition (Khisti et al., arXiv 2410.18234), and the node's law averaged over the tuples, which must be p.
Each check has a broken twin that it catches."""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pytest

from tests.verifiers.test_globalres import brute_force_alpha, sorted_prefix_alpha
from tests.verifiers.test_globalres_near_equal import pair_sum_law
from verispec.lp_analysis.luce_solver import GRID_POINTS
from verispec.verifiers.globalres import GlobalResolutionSolver


def tuple_law(weights, inner, q, num_drafts):
    """p_I by enumerating every ordered K-tuple of drafted tokens: draft position i weighs w(x_i); a tuple with a
    draft outside H* chooses among those drafts and never rejects, an inner tuple also rejects with weight 1."""
    law = np.zeros(len(q))
    for drafts in itertools.product(np.flatnonzero(q > 0), repeat=num_drafts):
        outer = [token for token in drafts if not inner[token]]
        pool, reject = (outer, 0.0) if outer else (list(drafts), 1.0)
        total = reject + sum(weights[token] for token in pool)
        for token in pool:
            law[token] += np.prod(q[list(drafts)]) * weights[token] / total
    return law


def chosen_law(weights, inner, drafts, size):
    """The law of Y' for one row of drafts, written out (the count-weighted Luce choice above)."""
    law = np.zeros(size)
    outer = [token for token in drafts if not inner[token]]
    pool, reject = (outer, 0.0) if outer else (list(drafts), 1.0)
    total = reject + sum(weights[token] for token in pool)
    for token in pool:
        law[token] += weights[token] / total
    return law


def two_step_law(p, intermediate, chosen):
    """Accept Y' with probability min(1, p / p_I), otherwise emit from norm((p - p_I)+)."""
    accept = np.minimum(1.0, np.divide(p, intermediate, out=np.ones_like(p), where=intermediate > 0))
    kept = chosen * accept
    leftover = np.maximum(p - intermediate, 0.0)
    return kept + (1 - kept.sum()) * leftover / max(leftover.sum(), 1e-300)


def small_node(rng, size=7):
    """p, q over ``size`` tokens with ties of p/q, zeros of p, zeros of q or a top-k support on q."""
    p = rng.dirichlet(np.ones(size))
    q = rng.dirichlet(np.ones(size))
    kind = rng.integers(4)
    if kind == 0:  # ties: three tokens share one ratio p/q
        q[:3] = p[:3] * 1.3
        q /= q.sum()
        p = np.r_[q[:3] / 1.3 * (1 - p[3:].sum()) / (q[:3] / 1.3).sum(), p[3:]]
    elif kind == 1:  # a token of p = 0 that the draft gives
        p[rng.integers(size)] = 0.0
    elif kind == 2:  # a token the draft never gives
        q[rng.integers(size)] = 0.0
    else:  # top-k 4 on q
        q[np.argsort(-q)[4:]] = 0.0
    return p / p.sum(), q / q.sum()


def node_errors(solver, p, q, num_drafts):
    """Largest deviations of the solver's node from the written-out computations: p_I from the tuple sums, the
    acceptance from alpha*, each row's output law from the two-step definition, and the tuple average from p."""
    resolution = solver.resolution(p, q, num_drafts)
    weights, inner, intermediate = resolution.weights, resolution.inner, resolution.intermediate
    exact = tuple_law(weights, inner, q, num_drafts)
    average, row_error = np.zeros(len(p)), 0.0
    for drafts in itertools.product(np.flatnonzero(q > 0), repeat=num_drafts):
        out = solver.output_laws(p[None, :], q[None, :], np.array([drafts]))[0]
        expected = two_step_law(p, exact, chosen_law(weights, inner, drafts, len(p)))
        row_error = max(row_error, float(np.abs(out - expected).max()))
        average += np.prod(q[list(drafts)]) * out
    return {"intermediate": float(np.abs(intermediate - exact).sum()),
            "acceptance": abs(float(np.minimum(p, intermediate).sum()) - brute_force_alpha(p, q, num_drafts)),
            "row": row_error, "lossless": float(np.abs(average - p).sum())}


class _PerturbedIntermediate(GlobalResolutionSolver):
    """A broken twin: the rule's p_I off by one part in 10^6 on its most likely token (its weights unchanged)."""

    def resolution(self, p, q, num_drafts):
        rule = super().resolution(p, q, num_drafts)
        intermediate = rule.intermediate.copy()
        intermediate[np.argmax(intermediate)] *= 1 + 1e-6
        return dataclasses.replace(rule, intermediate=intermediate)

    rule = resolution


@pytest.mark.parametrize("method", ["auto", "integrals"])
def test_a_node_of_one_row_is_its_two_step_law_and_lossless(method):
    """12 small nodes (V = 7, K = 2 and 3) with ties, zeros and top-k supports, solved over the multisets (auto)
    or by the integrals: p_I is the law of the rule's weights (1e-12 in L1), the acceptance alpha* (1e-9), every
    row's output law the two-step law (1e-12) and their average p (1e-12). The broken twin fails all but the
    acceptance by more than 1e-8."""
    rng = np.random.default_rng(66)
    for index in range(12):
        p, q = small_node(rng)
        num_drafts = 3 if index % 4 == 0 else 2
        errors = node_errors(GlobalResolutionSolver(method=method), p, q, num_drafts)
        assert errors["intermediate"] < 1e-12 and errors["row"] < 1e-12 and errors["lossless"] < 1e-12, errors
        assert errors["acceptance"] < 1e-9, errors
        broken = node_errors(_PerturbedIntermediate(method=method), p, q, num_drafts)
        assert min(broken["intermediate"], broken["row"], broken["lossless"]) > 1e-8, broken


def test_the_grid_path_gives_the_exact_law_of_its_weights():
    """V = 2,500 and K = 2, a Zipf-like target with a tempered, noisy draft (as bench_globalres's), so that more
    than ``GRID_POINTS`` tokens are solved on the grid and the heaviest at points of their own: p_I equals the sum
    over every pair of drafts with the rule's weights (1e-12 in L1), the acceptance alpha* by the sorted-prefix
    scan (1e-9), and the node's one-row law the two-step law. Negative control: the pair sum with one weight moved
    by one part in 10^6 is 1e-8 away."""
    rng = np.random.default_rng(5)
    logits = -1.1 * np.log(rng.permutation(2_500) + 1.0)
    p, q = np.exp(logits), np.exp(0.8 * logits + 0.5 * rng.standard_normal(2_500))
    p, q = p / p.sum(), q / q.sum()
    solver = GlobalResolutionSolver(method="integrals")
    resolution = solver.resolution(p, q, 2)
    assert resolution.inner.sum() > GRID_POINTS
    exact = pair_sum_law(q, resolution.weights, resolution.inner)
    assert np.abs(resolution.intermediate - exact).sum() < 1e-12
    assert float(np.minimum(p, resolution.intermediate).sum()) == pytest.approx(sorted_prefix_alpha(p, q, 2), abs=1e-9)
    drafts = np.array([int(np.argmax(q)), int(np.argmin(np.where(q > 0, q, 1.0)))])
    out = solver.output_laws(p[None, :], q[None, :], drafts[None, :])[0]
    assert np.abs(out - two_step_law(p, resolution.intermediate, chosen_law(resolution.weights, resolution.inner,
                                                                            drafts, len(p)))).max() < 1e-15
    moved = resolution.weights.copy()
    moved[np.argmax(q)] *= 1 + 1e-6
    assert np.abs(resolution.intermediate - pair_sum_law(q, moved, resolution.inner)).sum() > 1e-8


def test_the_cache_keys_a_node_by_its_drafted_tokens():
    """The rule depends on p and q only where q > 0: a node whose p differs elsewhere reuses the cached rule, which
    equals a fresh solve of that node; one ulp of p on a drafted token is a new node (the control)."""
    rng = np.random.default_rng(3)
    p, q = rng.dirichlet(np.ones(40)), rng.dirichlet(np.ones(40))
    q[np.argsort(-q)[20:]] = 0.0
    q /= q.sum()
    solver = GlobalResolutionSolver()
    rule = solver.resolution(p, q, 4)
    elsewhere = p.copy()
    outside = np.flatnonzero(q == 0)
    elsewhere[outside] = rng.permutation(elsewhere[outside])
    assert solver.resolution(elsewhere, q, 4) is rule
    fresh = GlobalResolutionSolver().resolution(elsewhere, q, 4)
    for field in ("drafted", "inner", "weights", "intermediate"):
        np.testing.assert_array_equal(getattr(fresh, field), getattr(rule, field))
    nudged = p.copy()
    nudged[np.argmax(q)] = np.nextafter(nudged[np.argmax(q)], 1.0)
    assert solver.resolution(nudged, q, 4) is not rule
