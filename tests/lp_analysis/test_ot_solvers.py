"""SpecTr K-SEQ, the exact OT solver and Khisti et al.'s two-step scheme: single-step acceptance against
closed forms derived here, reductions, the truncated scheme, and the K-SEQ traps as negative controls.

Independent derivations used below: rho* by scipy's brentq (the code bisects), alpha* by brute force over
every token subset (the code scans sorted prefixes or solves an LP).
"""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from scipy.optimize import brentq

from tests.support.broken_spectr import BROKEN_KSEQ_VERIFIERS, gap_at
from tests.support.strategies import build_problem, problem_args
from verispec.lp_analysis import iid_draft_law
from verispec.lp_analysis.importance import importance_weights
from verispec.simulator import ChainDrafter, ContextFreeProblem, RootIIDDrafter, analyze, parse_tree, random_problem
from verispec.verifiers import REGISTRY, TopDownVerifier, get_verifier
from verispec.verifiers.khisti import KhistiSolver
from verispec.verifiers.spectr import kseq_gap, kseq_rho


@st.composite
def node_problem(draw, vocab=(2, 4), drafts=(1, 3)):
    """(p, q, K) for one node: seeded Dirichlet p and q, q fully supported (it is drafted from)."""
    size = draw(st.integers(*vocab))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    concentration = draw(st.sampled_from([0.3, 1.0, 4.0]))
    p = rng.dirichlet(np.full(size, concentration))
    q = rng.dirichlet(np.full(size, concentration))
    if draw(st.booleans()):
        p[rng.integers(size)] = 0.0
        p /= p.sum()
    q = np.maximum(q, 1e-3)
    return p, q / q.sum(), draw(st.integers(*drafts))


def brute_force_alpha(p, q, num_drafts) -> float:
    """alpha* = 1 + min over every token subset T of p(T) - q(T)^K."""
    size = len(p)
    return 1 + min(p[list(subset)].sum() - q[list(subset)].sum() ** num_drafts
                   for count in range(size + 1) for subset in itertools.combinations(range(size), count))


def brentq_spectr_acceptance(p, q, num_drafts) -> float:
    """1 - (1 - beta(rho*))^K with rho* found by Brent's method on rho beta(rho) - p_acc(rho)."""
    def beta(rho):
        return np.minimum(q, p / rho).sum()

    def gap(rho):
        return rho * beta(rho) - (1 - (1 - beta(rho)) ** num_drafts)

    return 1 - (1 - beta(brentq_root(gap, num_drafts))) ** num_drafts


def brentq_root(gap, num_drafts) -> float:
    # K = 1: g(rho) = (rho - 1) beta(rho), root 1. Otherwise g(1) <= 0 <= g(K); an endpoint is the root
    # when g vanishes there (beta = 0 or 1 at rho = 1; g(K) = 0 only in degenerate cases).
    if num_drafts == 1 or gap(1.0) >= 0:
        return 1.0
    if gap(float(num_drafts)) <= 0:
        return float(num_drafts)
    return brentq(gap, 1.0, float(num_drafts), xtol=1e-15)


def single_step_acceptance(name, p, q, num_drafts) -> float:
    result = analyze(ContextFreeProblem(p, q), RootIIDDrafter(num_drafts, 1), get_verifier(name))
    assert result.tv_distance < 1e-12
    return float(result.acceptance_by_depth[0])


@settings(max_examples=25)
@given(node=node_problem())
def test_spectr_single_step_acceptance(node):
    p, q, num_drafts = node
    assert single_step_acceptance("spectr", p, q, num_drafts) == pytest.approx(
        brentq_spectr_acceptance(p, q, num_drafts), abs=1e-9)


@settings(max_examples=25)
@given(node=node_problem())
def test_otlp_single_step_acceptance_is_the_ot_optimum(node):
    p, q, num_drafts = node
    assert single_step_acceptance("otlp", p, q, num_drafts) == pytest.approx(
        brute_force_alpha(p, q, num_drafts), abs=1e-9)


@settings(max_examples=25)
@given(node=node_problem())
def test_khisti_single_step_acceptance_is_the_ot_optimum(node):
    p, q, num_drafts = node
    assert single_step_acceptance("khisti", p, q, num_drafts) == pytest.approx(
        brute_force_alpha(p, q, num_drafts), abs=1e-9)


@settings(max_examples=25)
@given(node=node_problem(vocab=(2, 6), drafts=(1, 3)))
# found by CI: outcomes of Q(x) ~ 1e-9 kept weight on a token with p = 0 within HiGHS's dual tolerance (the
# optimum fell 6e-9 short); the polish step moves such weight where p_I falls short of p
@example(node=(np.array([0.71574883, 0.0, 0.28425117]), np.array([0.00099887, 0.00099887, 0.99800226]), 3))
def test_weight_lp_optimum_equals_ot_optimum(node):
    # Khisti et al., Thm. 1: max over weights of sum min(p, p_I) is the OT optimum.
    p, q, num_drafts = node
    solved = importance_weights(p, iid_draft_law(q, num_drafts))
    assert solved.optimum == pytest.approx(brute_force_alpha(p, q, num_drafts), abs=1e-9)
    np.testing.assert_allclose(solved.weights.sum(axis=1), 1.0, atol=1e-15)
    for outcome, row in zip(solved.outcomes, solved.weights):
        assert set(np.flatnonzero(row)) <= set(outcome)  # Y' is always one of the drafts


@settings(max_examples=20)
@given(args=problem_args(vocab=(2, 4), depth=(3, 3)))
def test_spectr_on_a_chain_is_the_naive_rule(args):
    problem = build_problem(args)
    for spec in ("chain:3", "iid:1,3"):
        spectr = analyze(problem, parse_tree(spec), get_verifier("spectr")).output_law
        naive = analyze(problem, ChainDrafter(3), get_verifier("naive")).output_law
        for ours, theirs in zip(spectr.by_length, naive.by_length):
            np.testing.assert_allclose(ours, theirs, atol=1e-12, rtol=0)


@settings(max_examples=40)
@given(node=node_problem(vocab=(2, 6), drafts=(2, 5)))
def test_spectr_rho_is_the_root_from_above(node):
    p, q, num_drafts = node
    rho = kseq_rho(p, q, num_drafts)
    assert 1 <= rho <= num_drafts
    assert kseq_gap(p, q, rho, num_drafts) >= 0  # the losslessness condition, as computed

    def gap(r):
        beta = np.minimum(q, p / r).sum()
        return r * beta - (1 - (1 - beta) ** num_drafts)

    assert rho == pytest.approx(brentq_root(gap, num_drafts), abs=1e-12)


def test_spectr_exact_rho_satisfies_the_condition_exactly():
    p = np.array([Fraction(1, 2), Fraction(1, 3), Fraction(1, 6)], dtype=object)
    q = np.array([Fraction(1, 5), Fraction(1, 5), Fraction(3, 5)], dtype=object)
    for num_drafts in (2, 3, 4):
        rho = kseq_rho(p, q, num_drafts)
        assert isinstance(rho, Fraction) and kseq_gap(p, q, rho, num_drafts) >= 0
        assert float(rho) == pytest.approx(kseq_rho(p.astype(float), q.astype(float), num_drafts), abs=1e-12)


# ---------------------------------------------------------------------------------------------------
# Khisti et al.'s truncated (deployed) scheme

TRUNCATED = {s: TopDownVerifier(KhistiSolver(exact_limit=0, truncation=s, name=f"khisti-s{s}")) for s in (1, 2, 4)}


@settings(max_examples=10)
@given(args=problem_args(vocab=(3, 4), depth=(2, 2)), spec=st.sampled_from(["iid:3,1", "iid:2,2", "delayed:2,1,1"]),
       truncation=st.sampled_from([1, 2]))
def test_truncated_khisti_is_lossless_and_its_procedure_matches(args, spec, truncation):
    problem, drafter, verifier = build_problem(args), parse_tree(spec), TRUNCATED[truncation]
    assert analyze(problem, drafter, verifier).tv_distance < 1e-12
    for tree, _ in drafter.outcomes(problem):
        np.testing.assert_allclose(verifier.emission_law(tree), verifier.enumerated_emission_law(tree), atol=1e-12)


@settings(max_examples=15)
@given(node=node_problem(vocab=(2, 4), drafts=(2, 2)))
def test_untruncated_pairwise_lp_reaches_the_ot_optimum_for_two_drafts(node):
    # With s >= V every pair has a free weight, which is the full weight LP for K = 2.
    p, q, _ = node
    result = analyze(ContextFreeProblem(p, q), RootIIDDrafter(2, 1), TRUNCATED[4])
    assert float(result.acceptance_by_depth[0]) == pytest.approx(brute_force_alpha(p, q, 2), abs=1e-9)


@settings(max_examples=15)
@given(node=node_problem(vocab=(3, 4), drafts=(2, 3)))
def test_truncated_scheme_never_beats_the_ot_optimum(node):
    p, q, num_drafts = node
    result = analyze(ContextFreeProblem(p, q), RootIIDDrafter(num_drafts, 1), TRUNCATED[1])
    assert result.tv_distance < 1e-12
    assert float(result.acceptance_by_depth[0]) <= brute_force_alpha(p, q, num_drafts) + 1e-12


# ---------------------------------------------------------------------------------------------------
# Trap 5: K-SEQ negative controls

TRAP_PROBLEMS = [(np.array([0.5, 0.3, 0.2]), np.array([0.2, 0.3, 0.5])),
                 (np.array([0.6, 0.1, 0.1, 0.2]), np.array([0.25, 0.25, 0.25, 0.25]))]


@pytest.mark.parametrize("name", sorted(BROKEN_KSEQ_VERIFIERS))
@pytest.mark.parametrize("spec", ["iid:2,1", "iid:3,1", "delayed:2,1,1"])
@pytest.mark.parametrize("which", range(len(TRAP_PROBLEMS)))
def test_broken_kseq_is_flagged(name, spec, which):
    p, q = TRAP_PROBLEMS[which]
    problem = ContextFreeProblem(p, q)
    assert analyze(problem, parse_tree(spec), REGISTRY["spectr"]).tv_distance < 1e-12
    broken = analyze(problem, parse_tree(spec), BROKEN_KSEQ_VERIFIERS[name])
    assert broken.tv_distance > 1e-4 and not broken.lossless, broken.tv_distance


@pytest.mark.parametrize("which", range(len(TRAP_PROBLEMS)))
def test_trap_problems_violate_the_rho_condition(which):
    # The two rho variants are lossy because p_acc(rho) > rho beta(rho) on these problems (K = 2).
    p, q = TRAP_PROBLEMS[which]
    root = kseq_rho(p, q, 2)
    assert root > 1
    assert gap_at(p, q, 1.0, 2) < -1e-3 and gap_at(p, q, (1 + root) / 2, 2) < -1e-6


@pytest.mark.parametrize("truncation", [1, 2])
def test_truncated_khisti_is_exactly_lossless_in_rationals(truncation):
    problem = ContextFreeProblem([Fraction(1, 2), Fraction(1, 3), Fraction(1, 6)],
                                 [Fraction(1, 5), Fraction(1, 5), Fraction(3, 5)], exact=True)
    for spec in ("iid:3,1", "delayed:2,1,1"):
        result = analyze(problem, parse_tree(spec), TRUNCATED[truncation])
        assert result.tv_distance == 0 and isinstance(result.block_efficiency, Fraction)


def test_node_optimal_couplings_can_differ_in_depth():
    # Two couplings that are both optimal at every node (the max flow that otlp uses, and the LP optimum
    # HiGHS returns) accept alike at the root but move the walk to different children, so their block
    # efficiencies differ at depth 2, while both stay lossless (README, "Ties").
    from verispec.lp_analysis.ot import ot_coupling
    from verispec.verifiers.otlp import OTLPSolver

    class LPCoupling(OTLPSolver):
        name = "otlp-lp"

        def coupling(self, p, q, num_drafts):
            return ot_coupling(p, iid_draft_law(q, num_drafts))

    problem, drafter = random_problem(3, 2, 37), parse_tree("iid:3,2")
    flow = analyze(problem, drafter, get_verifier("otlp"))
    lp = analyze(problem, drafter, TopDownVerifier(LPCoupling()))
    assert flow.tv_distance < 1e-12 and lp.tv_distance < 1e-12
    root = analyze(problem, parse_tree("iid:3,1"), get_verifier("otlp")).acceptance_by_depth[0]
    assert root == pytest.approx(analyze(problem, parse_tree("iid:3,1"), TopDownVerifier(LPCoupling()))
                                 .acceptance_by_depth[0], abs=1e-9)
    assert abs(flow.block_efficiency - lp.block_efficiency) > 1e-2


# ---------------------------------------------------------------------------------------------------
# Khisti solved on the laws' support (filtered laws at a real vocabulary)

def _sparse_node(seed: int, size: int, p_support: int, q_support: int):
    """p and q on random supports of a V-token vocabulary, overlapping in part, with q above p on some tokens
    (negative ranks p - q q, so tokens outside both supports compete for the truncated scheme's top slots)."""
    rng = np.random.default_rng(seed)
    p, q = np.zeros(size), np.zeros(size)
    p_tokens = rng.choice(size, p_support, replace=False)
    q_tokens = np.concatenate([p_tokens[: q_support // 2], rng.choice(size, q_support - q_support // 2)])
    p[p_tokens] = rng.dirichlet(np.full(p_support, 0.5))
    np.add.at(q, q_tokens, rng.dirichlet(np.full(len(q_tokens), 0.5)))
    return p, q


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("num_drafts,truncation,exact_limit", [(2, 1, 0), (2, 2, 0), (3, 4, 0), (2, 5, 20_000)])
def test_khisti_on_the_support_takes_the_full_size_rules_decisions(seed, num_drafts, truncation, exact_limit):
    """The truncated tournament solved on the union of the supports (plus the outside tokens that can take a
    top-s slot) gives the same step-1 law, row for row, as the tournament solved at full size. The optimal
    weights come from a maximum flow, whose optimal solutions are not unique (README, "Ties"): there the two
    reach the same optimum sum min(p, p_I), the OT acceptance alpha*."""
    from verispec.verifiers.khisti import SupportSelection, exact_selection, tournament_selection

    p, q = _sparse_node(seed, 40, 6, 5)
    solver = KhistiSolver(exact_limit=exact_limit, truncation=truncation)
    selection = solver.selection(p, q, num_drafts)
    assert isinstance(selection, SupportSelection) and len(selection.tokens) < 40
    full = (exact_selection(p, q, num_drafts) if exact_limit else
            tournament_selection(p, q, num_drafts, truncation))
    drafted = np.flatnonzero(q)
    children = np.array(list(itertools.product(drafted, repeat=num_drafts)))
    if exact_limit:
        accepted = np.minimum(p, selection.intermediate).sum()
        assert accepted == pytest.approx(np.minimum(p, full.intermediate).sum(), abs=1e-12)
        union = np.flatnonzero((p > 0) | (q > 0))
        assert accepted == pytest.approx(brute_force_alpha(p[union], q[union], num_drafts), abs=1e-12)
        laws = selection.laws(children)  # [R, V] each row a law on the row's drafts
        np.testing.assert_allclose(laws.sum(axis=1), 1.0, atol=1e-12)
        np.testing.assert_allclose(q[children].prod(axis=1) @ laws, selection.intermediate, atol=1e-12)
    else:
        np.testing.assert_allclose(selection.laws(children), full.laws(children), atol=1e-12)
        np.testing.assert_allclose(selection.intermediate, full.intermediate, atol=1e-12)


def test_khisti_on_the_support_is_exact_in_rationals():
    p = np.array([Fraction(0)] * 7 + [Fraction(1, 2), Fraction(1, 3), Fraction(1, 6)], dtype=object)
    q = np.array([Fraction(0)] * 6 + [Fraction(1, 5), Fraction(0), Fraction(1, 5), Fraction(3, 5)], dtype=object)
    problem = ContextFreeProblem(p, q, exact=True)
    for spec in ("iid:3,1", "delayed:2,1,1"):
        result = analyze(problem, parse_tree(spec), TRUNCATED[1])
        assert result.tv_distance == 0 and isinstance(result.block_efficiency, Fraction)


def test_khisti_runs_at_qwens_vocabulary_on_filtered_laws_and_keeps_the_target_law():
    """V = 151,936 with top-k style laws (10 and 8 tokens): the node's output law, summed over every ordered
    pair of drafts, equals p to 1e-12, and the sampling twin emits only tokens of p's support."""
    from verispec.simulator.chooser import RandomChooser

    size = 151_936
    p, q = _sparse_node(3, size, 10, 8)
    solver = KhistiSolver()
    drafted = np.flatnonzero(q)
    children = np.array(list(itertools.product(drafted, repeat=2)))  # [64, 2]
    weights = q[children].prod(axis=1)                                 # [64]
    laws = solver.output_laws(np.tile(p, (len(children), 1)), np.tile(q, (len(children), 1)), children)
    np.testing.assert_allclose(weights @ laws, p, atol=1e-12)
    chooser = RandomChooser(np.random.default_rng(0))
    for row in children[:16]:
        assert p[solver.sample(p, q, tuple(int(t) for t in row), chooser)] > 0
