"""The exact engine's definitions: losslessness by extension with the target, metrics, error reporting.
Expected values are derived by hand for rules simple enough to solve on paper."""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np
import pytest

from verispec.errors import IncompatibleDraftError, InvalidProblemError, VerifierError, VerispecError
from verispec.simulator import (
    ChainDrafter,
    ContextFreeProblem,
    DraftLaw,
    Verifier,
    analyze,
    parse_tree,
    random_problem,
    target_law,
)
from verispec.verifiers import ProcedureVerifier, get_verifier

CHAIN = {DraftLaw.SINGLE_PATH}


def always_token_zero(tree, chooser):
    return 0, 0


def accept_everything(tree, chooser):
    node = tree.chain_nodes()[-1]
    return node, chooser.categorical(tree.p[node])


def test_emitting_a_fixed_token_has_tv_one_minus_its_probability():
    # Emitting token 0 then continuing with p gives first token 0 surely, so TV = 1 - p(0).
    problem = random_problem(3, 2, 5)
    result = analyze(problem, ChainDrafter(2), ProcedureVerifier("zero", always_token_zero, CHAIN))
    assert result.tv_distance == pytest.approx(1 - problem.target(())[0], abs=1e-14)
    assert result.block_efficiency == 1 and not result.lossless


def test_accepting_every_draft_has_the_tv_of_the_draft_law():
    # Accept all L drafts then emit the bonus: the first L tokens follow q, so TV = TV(q^L, p^L).
    p, q = np.array([0.2, 0.5, 0.3]), np.array([0.4, 0.4, 0.2])
    problem = ContextFreeProblem(p, q)
    result = analyze(problem, ChainDrafter(2), ProcedureVerifier("all", accept_everything, CHAIN))
    expected = 0.5 * np.abs(np.outer(q, q) - np.outer(p, p)).sum()
    assert result.tv_distance == pytest.approx(expected, abs=1e-14)
    assert result.tau_law == pytest.approx([0, 0, 1])


def test_target_law_is_the_product_of_conditionals():
    problem = random_problem(2, 2, 8)
    law = target_law(problem, 3)
    for x in itertools.product(range(2), repeat=3):
        expected = problem.target(())[x[0]] * problem.target(x[:1])[x[1]] * problem.target(x[:2])[x[2]]
        assert law[x] == pytest.approx(expected, rel=1e-14)
    assert law.sum() == pytest.approx(1, abs=1e-14)


def test_metrics_are_consistent():
    result = analyze(random_problem(3, 3, 2), ChainDrafter(3), get_verifier("bv"))
    assert sum(result.tau_law) == pytest.approx(1, abs=1e-13)
    assert result.block_efficiency == pytest.approx(1 + sum(result.acceptance_by_depth), abs=1e-13)
    assert result.expected_accepted == pytest.approx(result.block_efficiency - 1, abs=1e-13)
    reach = [1, *result.acceptance_by_depth]
    assert result.conditional_acceptance == pytest.approx([reach[d] / reach[d - 1] for d in range(1, 4)])
    total = sum(probability for _, probability in result.output_law.items())
    assert total == pytest.approx(1, abs=1e-13)
    data = result.to_json()
    for key in ("block_efficiency", "tv_distance", "lossless", "tau_law"):
        assert key in data


def test_exact_mode_metrics_are_fractions():
    problem = ContextFreeProblem([Fraction(1, 3), Fraction(2, 3)], [Fraction(2, 3), Fraction(1, 3)], exact=True)
    result = analyze(problem, ChainDrafter(1), get_verifier("naive"))
    # one position: accept with probability sum min(p, q) = 2/3
    assert result.tau_law == [Fraction(1, 3), Fraction(2, 3)]
    assert result.to_json()["exact_values"]["block_efficiency"] == "5/3"


def test_broken_emission_law_is_reported():
    class HalfLaw(Verifier):
        name = "half"
        valid_for = frozenset(CHAIN)

        def emission_laws(self, batch):
            law = np.zeros((batch.num_rows, batch.num_nodes, batch.vocab_size))
            law[:, 0, 0] = 0.5
            return law

        def procedure(self, tree, chooser):
            return 0, 0

    for method in ("closed-form", "fast-enumeration"):
        with pytest.raises(VerifierError, match="not a probability law"):
            analyze(random_problem(2, 1, 0), ChainDrafter(1), HalfLaw(), method=method)


def test_the_engine_takes_verifiers_not_lookalikes():
    class LooksLikeAVerifier:
        name = "lookalike"
        valid_for = frozenset(CHAIN)

    with pytest.raises(VerispecError, match="Verifier"):
        analyze(random_problem(2, 1, 0), ChainDrafter(1), LooksLikeAVerifier())


def test_incompatible_and_too_short():
    with pytest.raises(IncompatibleDraftError, match="naive"):
        analyze(random_problem(2, 2, 0), parse_tree("iid:2,2"), get_verifier("naive"))
    with pytest.raises(InvalidProblemError, match="depth"):
        analyze(random_problem(2, 2, 0), ChainDrafter(3), get_verifier("naive"))
    with pytest.raises(ValueError, match="method"):
        analyze(random_problem(2, 2, 0), ChainDrafter(2), get_verifier("naive"), method="fast")


def test_a_law_with_negative_entries_is_refused_on_every_backend():
    """Rows that sum to one through a negative entry are not laws: numpy, exact and torch alike."""
    from verispec.simulator.laws import check_emission_laws

    batch = parse_tree("chain:1").sample(random_problem(2, 1, 0), np.random.default_rng(0)).as_batch()
    law = np.zeros((1, batch.num_nodes, 2))
    law[0, 0] = [1.5, -0.5]
    with pytest.raises(VerifierError, match=r"min -0.5"):
        check_emission_laws("signed", batch, law)
    with pytest.raises(VerifierError, match=r"min -0.5"):
        check_emission_laws("signed", batch, np.vectorize(Fraction, otypes=[object])(law))
    torch = pytest.importorskip("torch")
    with pytest.raises(VerifierError, match=r"min -0.5"):
        check_emission_laws("signed", batch, torch.tensor(law))
    law[0, 0] = [0.25, 0.75]
    check_emission_laws("fine", batch, torch.tensor(law))
