"""Global Resolution (``globalres``): its acceptance against alpha* derived here by brute force over token subsets
and by the sorted-prefix scan, its node against otlp's max-flow coupling, its two programs solved by Newton and by
cvxpy alike, exact rationals, and the grouped regime at a real vocabulary (lossless, acceptance reported)."""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np
import pytest

from verispec.lp_analysis.global_resolution import (
    MAX_MULTISETS,
    Multisets,
    multiset_count,
    optimal_set,
    resolve,
    solve_luce,
    solve_luce_cvxpy,
)
from verispec.lp_analysis.single_position import iid_ot_optimum
from verispec.simulator import ContextFreeProblem, analyze, parse_tree
from verispec.verifiers import REGISTRY
from verispec.verifiers.globalres import GlobalResolutionSolver


def brute_force_alpha(p, q, num_drafts) -> float:
    """alpha* = 1 + min over every token subset T of p(T) - q(T)^K (V <= 12 here)."""
    size = len(p)
    return 1 + min(p[list(subset)].sum() - q[list(subset)].sum() ** num_drafts
                   for count in range(size + 1) for subset in itertools.combinations(range(size), count))


def random_node(rng, size):
    p = rng.dirichlet(np.full(size, rng.choice([0.3, 1.0, 3.0])))
    q = rng.dirichlet(np.full(size, rng.choice([0.3, 1.0, 3.0])))
    if rng.random() < 0.3:
        p[rng.integers(size)] = 0.0
        p /= p.sum()
    if rng.random() < 0.2:
        q[rng.integers(size)] = 0.0
        q /= q.sum()
    return p, q


def largest_ungrouped(num_drafts: int) -> int:
    """The largest draft support whose multisets the programs enumerate token by token (no groups)."""
    size = 1
    while size < 64 and multiset_count(size + 1, num_drafts) <= MAX_MULTISETS:
        size += 1
    return size


def test_acceptance_is_alpha_star_on_200_random_nodes():
    """200 nodes with V up to 64 and K from 2 to 6 (V capped where the multisets would be grouped: K = 2 reaches
    64, K = 6 stops at 13): sum min(p, p_I) equals alpha* by the sorted-prefix scan to 1e-9, and by brute force
    over every subset where V <= 12."""
    rng = np.random.default_rng(20260)
    checked = 0
    for _ in range(200):
        num_drafts = int(rng.integers(2, 7))
        size = int(rng.integers(2, min(64, largest_ungrouped(num_drafts)) + 1))
        p, q = random_node(rng, size)
        resolution = resolve(p, q, num_drafts)
        assert not resolution.grouped
        accepted = np.minimum(p, resolution.intermediate).sum()
        assert accepted == pytest.approx(iid_ot_optimum(p, q, num_drafts).alpha, abs=1e-9), (size, num_drafts)
        if size <= 12:
            assert accepted == pytest.approx(brute_force_alpha(p, q, num_drafts), abs=1e-9)
            checked += 1
        # at the programs' solution step 2 never rejects: p_I <= p
        assert (resolution.intermediate <= p + 1e-9).all()
    assert checked > 50


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("num_drafts", [2, 3])
def test_the_node_accepts_what_otlps_max_flow_coupling_accepts(seed, num_drafts):
    """On iid:K,1 (one step) the block efficiency is 1 + the node's acceptance: globalres equals otlp (the OT LP's
    max-flow coupling) to 1e-9, and both are lossless."""
    p, q = random_node(np.random.default_rng(seed), 5)
    problem = ContextFreeProblem(p, np.where(q > 0, q, 0.0))
    tree = parse_tree(f"iid:{num_drafts},1")
    ours = analyze(problem, tree, REGISTRY["globalres"])
    flow = analyze(problem, tree, REGISTRY["otlp"])
    assert ours.tv_distance < 1e-12 and flow.tv_distance < 1e-12
    assert ours.block_efficiency == pytest.approx(flow.block_efficiency, abs=1e-9)


def test_outer_tuples_are_accepted_whole_and_inner_tokens_reach_p():
    """The two systems at the solution: the chosen law p_I is at most p everywhere, equals p on H* (inner tokens
    fully covered), and the outer tokens carry all of the outer tuples' mass 1 - q(H*)^K (never rejected)."""
    rng = np.random.default_rng(7)
    for _ in range(50):
        num_drafts = int(rng.integers(1, 5))
        p, q = random_node(rng, int(rng.integers(2, 9)))
        resolution = resolve(p, q, num_drafts)
        inner = np.zeros(len(p), dtype=bool)
        drafted = resolution.group >= 0
        inner[drafted] = resolution.inner[resolution.group[drafted]]
        assert (inner == optimal_set(p, q, num_drafts)).all()
        assert (resolution.intermediate <= p + 1e-11).all()
        np.testing.assert_allclose(resolution.intermediate[inner], p[inner], atol=1e-11)
        assert resolution.intermediate[~inner].sum() == pytest.approx(1 - q[inner].sum() ** num_drafts, abs=1e-11)


@pytest.mark.parametrize("seed", range(3))
def test_newton_and_cvxpy_solve_the_same_program(seed):
    """The inner program of a node, solved by the damped Newton method and by cvxpy (Clarabel): the chosen
    marginals agree to 1e-6 and Newton's meet the targets to 1e-11."""
    pytest.importorskip("cvxpy")
    rng = np.random.default_rng(seed)
    p, q = random_node(rng, 6)
    q = np.maximum(q, 0.02)
    q /= q.sum()
    inner = optimal_set(p, q, 3)
    sets = Multisets.of(q, 3)
    rows = ~(sets.members & ~inner[None, :]).any(axis=1)
    columns = inner & (p > 0)
    if columns.sum() < 2:
        pytest.skip("H* too small at this seed")
    members, probability, target = sets.members[np.ix_(rows, columns)], sets.probability[rows], p[columns]

    def marginals(exponents):
        weights = members * np.exp(exponents)[None, :]
        return probability @ (weights / (1 + weights.sum(axis=1))[:, None])

    newton = marginals(solve_luce(members, probability, target, 1.0))
    conic = marginals(solve_luce_cvxpy(members, probability, target, 1.0))
    np.testing.assert_allclose(newton, target, atol=1e-11)
    np.testing.assert_allclose(conic, newton, atol=1e-6)


def test_exact_rationals_are_exactly_lossless_and_accept_alpha_star():
    p = np.array([Fraction(1, 2), Fraction(1, 3), Fraction(1, 6), Fraction(0)], dtype=object)
    q = np.array([Fraction(1, 5), Fraction(1, 5), Fraction(1, 2), Fraction(1, 10)], dtype=object)
    for num_drafts in (2, 3):
        result = analyze(ContextFreeProblem(p, q, exact=True), parse_tree(f"iid:{num_drafts},1"),
                         REGISTRY["globalres"])
        assert result.tv_distance == 0 and isinstance(result.block_efficiency, Fraction)
        alpha = iid_ot_optimum(p, q, num_drafts).alpha
        assert abs(float(result.block_efficiency - 1 - alpha)) < 1e-12


@pytest.mark.slow  # 10 s at V = 151,936; the fast loop checks the same law at small vocabularies
def test_grouped_node_at_qwens_vocabulary_keeps_the_target_law():
    """V = 151,936 with q on 30 tokens, at most 400 multisets: the support is grouped by p / q, the node's output
    law summed over every pair of drafts equals p to 1e-12, and the acceptance is at most alpha*."""
    rng = np.random.default_rng(5)
    size = 151_936
    p, q = np.zeros(size), np.zeros(size)
    drafted = rng.choice(size, 30, replace=False)
    q[drafted] = rng.dirichlet(np.full(30, 0.3))
    p[drafted[:24]] = rng.dirichlet(np.full(24, 0.3)) * 0.9
    p[rng.choice(size, 10, replace=False)] += 0.01
    p /= p.sum()
    solver = GlobalResolutionSolver(max_multisets=400)
    resolution = solver.resolution(p, q, 2)
    assert resolution.grouped
    children = np.array(list(itertools.product(drafted, repeat=2)))      # [900, 2]
    weights = q[children].prod(axis=1)
    law = np.zeros(size)
    for block in np.array_split(np.arange(len(children)), 15):
        rows = children[block]
        law += weights[block] @ solver.output_laws(np.tile(p, (len(rows), 1)), np.tile(q, (len(rows), 1)), rows)
    np.testing.assert_allclose(law, p, atol=1e-12)
    accepted = np.minimum(p, resolution.intermediate).sum()
    assert 0 < accepted <= iid_ot_optimum(p, q, 2).alpha + 1e-12


def test_node_caches_evict_by_the_bytes_of_their_arrays():
    """A node rule at a real vocabulary holds [V] laws: the per-solver cache evicts by bytes as well as entries,
    and its keys are digests (equal (p, q, K) share an entry, a one-ulp change does not)."""
    from verispec.verifiers.node_cache import NodeCache, node_key

    cache = NodeCache(size=100, max_bytes=3 * 8_000)
    for index in range(10):
        cache.put(index, np.zeros(1_000))  # 8,000 bytes each
    assert len(cache._entries) == 3 and cache._bytes == 24_000 and 9 in cache and 6 not in cache
    p = np.array([0.5, 0.5])
    assert node_key(p, p, 2) == node_key(p.copy(), p.copy(), 2)
    assert node_key(p, p, 2) != node_key(np.nextafter(p, 1), p, 2) != node_key(p, p, 3)


def test_a_drafted_token_of_zero_target_mass_is_in_h_star_whatever_the_rounding():
    """p = (0, 1, 0), q = (1, 1e-11, 2e-25): token 2 has p = 0 and q > 0, so adding it to any H lowers
    p(H) - q(H)^K and the exact H* holds it, although q(H) + 2e-25 rounds to q(H) in floats. Every pair of
    drafts then has something to pick or rejects (no NaN), and the node is lossless: its output law, summed over
    the pairs of drafts, is p."""
    p, q = np.array([0.0, 1.0, 0.0]), np.array([1.0, 1.13e-11, 2.12e-25])
    q = q / q.sum()
    solver = GlobalResolutionSolver()
    assert solver.resolution(p, q, 2).inner[2]
    children = np.array(list(itertools.product(range(3), repeat=2)))
    laws = solver.output_laws(np.tile(p, (9, 1)), np.tile(q, (9, 1)), children)
    assert np.isfinite(laws).all()
    np.testing.assert_allclose(q[children].prod(axis=1) @ laws, p, atol=1e-12)
