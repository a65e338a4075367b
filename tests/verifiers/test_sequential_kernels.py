"""Closed-form node kernels of sequential-test solvers (``NodeSolver.sequential_tests``) against the kernels
enumerated from the solver's own batched law over every ordered draw list, and against acceptance
probabilities published with each rule."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from verispec import backend
from verispec.simulator import analyze, parse_tree, random_context_free_problem, random_problem
from verispec.simulator.distributions import residual
from verispec.simulator.dp import enumerated_node_kernels, node_kernels
from verispec.verifiers import REGISTRY, TopDownVerifier
from verispec.verifiers.specinfer import SpecInferSolver
from verispec.verifiers.spectr import kseq_acceptance, kseq_beta, kseq_rho

SEQUENTIAL = sorted(name for name, v in REGISTRY.items()
                    if v.node_solver is not None and v.node_solver.has_sequential_tests)


def _laws(size: int, rows: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows of (p, q) with zeros in both, a row with p == q, and a row whose q misses p's support."""
    rng = np.random.default_rng(seed)
    p, q = rng.dirichlet(np.full(size, 0.6), rows), rng.dirichlet(np.full(size, 0.6), rows)
    p[0, 0], q[1, -1] = 0.0, 0.0
    q[2] = p[2]
    p[3, : size // 2], q[3, size // 2:] = 0.0, 0.0
    return p / p.sum(1, keepdims=True), q / q.sum(1, keepdims=True)


def test_the_sequential_solvers_are_the_ones_stated():
    assert {"specinfer", "spectr", "nss", "naivetree"} <= set(SEQUENTIAL)


@pytest.mark.parametrize("name", SEQUENTIAL)
@pytest.mark.parametrize("size", [2, 3, 5])
@pytest.mark.parametrize("draws", [1, 2, 3, 4])
def test_closed_form_equals_enumeration_in_float(name, size, draws):
    solver = REGISTRY[name].node_solver
    p, q = _laws(size, 6, seed=100 * size + draws)
    for closed, enumerated in zip(node_kernels(solver, p, q, draws), enumerated_node_kernels(solver, p, q, draws)):
        np.testing.assert_allclose(closed.stop, enumerated.stop, rtol=0, atol=1e-12)
        np.testing.assert_allclose(closed.moves, enumerated.moves, rtol=0, atol=1e-12)
        assert abs(closed.stop.sum() + closed.moves.sum() - 1) < 1e-12


@pytest.mark.parametrize("name", SEQUENTIAL)
@pytest.mark.parametrize("draws", [1, 2, 3])
def test_closed_form_equals_enumeration_exactly(name, draws):
    solver = REGISTRY[name].node_solver
    floats = _laws(3, 4, seed=draws)
    # rationals with small denominators: exact arithmetic stays fast
    p, q = (np.array([[Fraction(round(float(x) * 64)) for x in row] for row in laws], dtype=object)
            for laws in floats)
    p, q = (laws / laws.sum(axis=1, keepdims=True) for laws in (p, q))
    for closed, enumerated in zip(node_kernels(solver, p, q, draws), enumerated_node_kernels(solver, p, q, draws)):
        assert closed.stop.dtype == object and (closed.stop == enumerated.stop).all()
        assert (closed.moves == enumerated.moves).all()


def _first_step_acceptance(name: str, p: np.ndarray, q: np.ndarray, draws: int) -> np.ndarray:
    """P(some draft is accepted at the node) as each paper states it."""
    if name == "nss":  # Miao et al. 2024, Sec. 4: sum_t p(t) (1 - (1 - q(t))^K)
        return (p * (1 - (1 - q) ** draws)).sum(1)
    if name == "naivetree":  # DDTE Sec. 2: the first draft's token-level test, Y ~ norm((p - q)+) may hit another
        first = np.minimum(p, q).sum(1)
        leftover = np.array([residual(row_p, row_q) for row_p, row_q in zip(p, q)])
        return first + (1 - first) * (leftover * (1 - (1 - q) ** (draws - 1))).sum(1)
    if name == "spectr":  # Sun et al. 2023, K-SEQ: 1 - (1 - beta(rho*))^K
        return kseq_acceptance(kseq_beta(p, q, kseq_rho(p, q, draws)), draws)
    # SpecInfer (Miao et al. 2024, Alg. 2): draft j is reached with prob prod_(i<j) (1 - alpha_i) and accepted
    # with alpha_j = sum_t min(q(t), r_j(t)), r_(j+1) = norm((r_j - q)+)
    reached, accepted, chain = np.ones(len(p)), np.zeros(len(p)), p
    for _ in range(draws):
        alpha = np.minimum(q, chain).sum(1)
        accepted += reached * alpha
        reached = reached * (1 - alpha)
        chain = residual(chain, q)
    return accepted


@pytest.mark.parametrize("name", SEQUENTIAL)
def test_acceptance_at_a_large_vocabulary_matches_the_published_formula(name):
    """At V = 2000 and 4 draws (1.6e13 draw lists: beyond enumeration) the kernel's move mass is each
    paper's acceptance probability, and every token is moved to with at most its p (the rules are lossless)."""
    solver = REGISTRY[name].node_solver
    p, q = _laws(2000, 4, seed=7)
    for row, kernel in enumerate(node_kernels(solver, p, q, 4)):
        moved = kernel.moves.sum()
        assert abs(moved - _first_step_acceptance(name, p[row:row + 1], q[row:row + 1], 4)[0]) < 1e-12
        np.testing.assert_allclose(kernel.stop + kernel.moves.sum(1), p[row], rtol=0, atol=1e-12)


def test_the_walk_dp_runs_where_draw_lists_are_beyond_enumeration():
    """iid:4,2 at V = 300 (8.1e9 draw lists at the root) runs by the closed form. On a context-free problem
    NSS's output is Y ~ p whatever was drafted, so with t drawn k ~ Binomial(4, q(t)) times,
    P(tau >= 2) = sum_t p(t) sum_(k >= 1) C(4, k) q(t)^k (1 - q(t))^(4 - k) A_k, A_k = sum_s p(s) (1 - (1 - q(s))^k);
    SpecInfer's P(tau >= 1) is its first-step acceptance."""
    from math import comb

    problem = random_context_free_problem(300, 11)
    p, q = problem.target(()), problem.draft(())
    accept = [float((p * (1 - (1 - q) ** k)).sum()) for k in range(5)]                 # A_0..A_4
    second = sum(float((p * comb(4, k) * q ** k * (1 - q) ** (4 - k)).sum()) * accept[k] for k in range(1, 5))
    nss = analyze(problem, parse_tree("iid:4,2"), REGISTRY["nss"], method="dp-metrics").tau_law
    assert abs((1 - nss[0]) - accept[4]) < 1e-12
    assert abs(nss[2] - second) < 1e-12
    specinfer = analyze(problem, parse_tree("iid:4,2"), REGISTRY["specinfer"], method="dp-metrics").tau_law
    assert abs((1 - specinfer[0]) - _first_step_acceptance("specinfer", p[None], q[None], 4)[0]) < 1e-12
    assert abs(sum(specinfer) - 1) < 1e-12


class NoResidualUpdate(SpecInferSolver):
    """A lossy SpecInfer (the residual is never updated: every draft is tested against p and the fallback is
    norm((p - q)+)), written consistently as a batched law and as sequential tests."""

    name = "no-residual-update"

    def output_laws(self, p, q, children):
        law = backend.zeros(p.shape, p)
        rejected = np.ones(len(p))
        for j in range(children.shape[1]):
            token = children[:, j]
            accept = np.minimum(1, p[np.arange(len(p)), token] / q[np.arange(len(p)), token])
            law[np.arange(len(p)), token] += rejected * accept
            rejected = rejected * (1 - accept)
        return law + rejected[:, None] * residual(p, q)

    def sequential_tests(self, p, q, draws):
        return [np.minimum(p, q)] * draws, residual(p, q)


class DuplicatesSkipped(SpecInferSolver):
    """Trap 1 of docs/guides/reference.md: a repeated draft is not tested again. Redefines only the batched law."""

    name = "duplicates-skipped"

    def output_laws(self, p, q, children):
        laws = []
        for row, drafted in enumerate(np.asarray(children).tolist()):
            distinct = np.array([list(dict.fromkeys(drafted))])
            laws.append(super().output_laws(p[row:row + 1], q[row:row + 1], distinct)[0])
        return np.stack(laws)


def test_a_lossy_sequential_rule_is_caught_through_its_closed_form():
    solver = NoResidualUpdate()
    assert solver.has_sequential_tests
    p, q = _laws(4, 6, seed=3)
    for closed, enumerated in zip(node_kernels(solver, p, q, 3), enumerated_node_kernels(solver, p, q, 3)):
        np.testing.assert_allclose(closed.moves, enumerated.moves, rtol=0, atol=1e-12)
    problem = random_context_free_problem(4, 5)
    result = analyze(problem, parse_tree("iid:3,1"), TopDownVerifier(solver), method="dp")
    assert result.tv_distance > 1e-3


def test_a_variant_that_redefines_the_law_does_not_inherit_the_closed_form():
    solver = DuplicatesSkipped()
    assert not solver.has_sequential_tests
    assert SpecInferSolver().has_sequential_tests
    problem = random_problem(3, 2, 0)  # a problem on which the trap shows (it does not on every one)
    result = analyze(problem, parse_tree("iid:3,1"), TopDownVerifier(solver), method="dp")
    assert result.tv_distance > 1e-3  # analysed by its own (lossy) law, not the parent's closed form


@pytest.mark.parametrize("name", SEQUENTIAL)
def test_tokens_outside_both_supports_take_no_part(name):
    """The certified walk hands the tests the union of the supports only (top-k / top-p laws): padding the
    vocabulary with tokens where p = q = 0 changes no move mass."""
    solver = REGISTRY[name].node_solver
    p, q = _laws(4, 6, seed=9)
    padded_p, padded_q = (np.concatenate([np.zeros((6, 3)), laws, np.zeros((6, 2))], axis=1) for laws in (p, q))
    for draws in (1, 3):
        for small, padded in zip(node_kernels(solver, p, q, draws), node_kernels(solver, padded_p, padded_q, draws)):
            np.testing.assert_allclose(padded.moves[3:7], small.moves, rtol=0, atol=1e-15)
            assert not padded.moves[:3].any() and not padded.moves[7:].any()
