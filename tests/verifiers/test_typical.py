"""Medusa's typical acceptance (lossy by design): its law against closed forms derived here, its law against its
own sampling procedure on every tree kind, float and exact mode taking the same decisions, the torch backend,
and its parameters and errors."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from tests.verifiers.test_registry_verifiers import TREE_SPECS
from verispec.errors import UnknownVerifierError
from verispec.simulator import ContextFreeProblem, analyze, parse_tree, random_problem
from verispec.verifiers import LOSSY_BY_DESIGN, REGISTRY, TypicalVerifier, get_verifier


def medusa_threshold(p, epsilon=0.09, alpha=0.3) -> float:
    """min(epsilon, alpha exp(-H)) with Medusa's smoothed entropy H = -sum p log(p + 1e-5), term by term."""
    entropy = -sum(v * math.log(v + 1e-5) for v in p)
    return min(epsilon, alpha * math.exp(-entropy))


def two_token_law(p, q, num_drafts, epsilon, alpha):
    """The law of the first two tokens of a context-free problem on iid:K,1 (K drafts x_i ~ q at the root, the
    block followed by target sampling), derived directly: the rule stops at the accepted child of largest p
    (ties: the first drafted), whose token is the first token, and emits the second from p restricted to
    p >= threshold and renormalised; with no child accepted, the root emits the first token from that filtered
    law and the target draws the second from p. [V, V]."""
    p, q = np.asarray(p, float), np.asarray(q, float)
    limit = medusa_threshold(p, epsilon, alpha)
    kept = np.where(p >= limit, p, 0.0)
    filtered = kept / kept.sum()
    passes = p > limit
    law = np.zeros(len(p))
    # P(no draft passes) = q(fail)^K; else the emitted first token is the passing draft of largest p
    order = sorted(range(len(p)), key=lambda v: -p[v])
    below = 1.0  # P(every draft lies outside the tokens ranked above v among the passing ones)
    fail = q[~passes].sum()
    for v in order:
        if not passes[v]:
            continue
        # every draft is in (tokens ranked below v among passing) + failing tokens, at least one equal to v
        rest = below - q[v]
        law[v] += below ** num_drafts - rest ** num_drafts
        below = rest
    return law[:, None] * filtered[None, :] + fail ** num_drafts * filtered[:, None] * p[None, :]


def test_typical_is_reached_by_name_and_kept_out_of_the_lossless_registry():
    assert "typical" in LOSSY_BY_DESIGN and "typical" not in REGISTRY
    verifier = get_verifier("typical")
    assert (verifier.epsilon, verifier.alpha) == (0.09, 0.3)  # Medusa's medusa_generate defaults
    custom = get_verifier("typical(epsilon=0.05,alpha=0.2)")
    assert (custom.epsilon, custom.alpha) == (0.05, 0.2) and custom.name == "typical(epsilon=0.05,alpha=0.2)"
    assert get_verifier("typical(alpha=0.5)").epsilon == 0.09


@pytest.mark.parametrize("name,match", [("typical(eps=0.1)", "epsilon= and alpha="),
                                        ("typical(epsilon=x)", "must be a number"),
                                        ("typical(epsilon=0)", r"in \(0, 1\]"),
                                        ("typical(alpha=1.5)", r"in \(0, 1\]"),
                                        ("typical(epsilon=0.1,epsilon=0.2)", "once each"),
                                        ("typical[0.1]", "unknown verifier")])
def test_bad_parameters_are_one_line_errors(name, match):
    with pytest.raises(UnknownVerifierError, match=match):
        get_verifier(name)


@pytest.mark.parametrize("p,q", [([0.5, 0.3, 0.2], [0.2, 0.3, 0.5]),
                                 ([0.85, 0.1, 0.05], [0.3, 0.3, 0.4]),
                                 ([0.4, 0.3, 0.2, 0.06, 0.04], [0.1, 0.1, 0.2, 0.3, 0.3])])
@pytest.mark.parametrize("num_drafts", [1, 2, 3])
@pytest.mark.parametrize("epsilon,alpha", [(0.09, 0.3), (0.3, 0.9), (0.05, 0.2)])
def test_first_token_law_and_tv_match_the_closed_form(p, q, num_drafts, epsilon, alpha):
    verifier = TypicalVerifier(epsilon, alpha)
    result = analyze(ContextFreeProblem(np.array(p), np.array(q)), parse_tree(f"iid:{num_drafts},1"), verifier)
    assert result.output_law is not None
    problem = ContextFreeProblem(np.array(p), np.array(q))
    expected = two_token_law(p, q, num_drafts, epsilon, alpha)  # [V, V]
    np.testing.assert_allclose(result.output_law.continued_with_target(problem), expected, atol=1e-12)
    target = np.outer(p, p)
    assert result.tv_distance == pytest.approx(0.5 * np.abs(expected - target).sum(), abs=1e-12)


def test_it_is_lossy_where_it_accepts_what_p_would_not_emit():
    """At p = (0.5, 0.3, 0.2) every token passes Medusa's threshold 0.09 (and the bonus filter keeps all of p), so
    the one draft from q is always accepted: the first token has law q, and the TV is TV(p, q) = 0.3."""
    result = analyze(ContextFreeProblem(np.array([0.5, 0.3, 0.2]), np.array([0.2, 0.3, 0.5])),
                     parse_tree("chain:1"), get_verifier("typical"))
    assert result.tv_distance == pytest.approx(0.3, abs=1e-12) and not result.lossless


@pytest.mark.parametrize("spec", TREE_SPECS)
def test_law_equals_its_procedure_on_every_tree_kind(spec):
    problem = random_problem(3, 3, seed=11, concentration=0.5)
    drafter = parse_tree(spec)
    for name in ("typical", "typical(epsilon=0.3,alpha=0.9)"):
        verifier = get_verifier(name)
        for tree, _ in drafter.outcomes(problem):
            np.testing.assert_allclose(verifier.emission_law(tree), verifier.enumerated_emission_law(tree),
                                       atol=1e-12, err_msg=f"{name} on {spec}")


def test_ties_go_to_the_likelier_path_then_to_the_first_node():
    """Two accepted children at depth 1 with p 0.3 and 0.5: the rule stops at the 0.5 child; with equal p it
    stops at the first drafted child."""
    from verispec.simulator.trees import DraftTree

    p = np.array([0.5, 0.3, 0.2])
    problem = ContextFreeProblem(p, np.array([1 / 3] * 3))
    verifier = get_verifier("typical")
    tree = next(tree for tree, _ in parse_tree("branch:2").outcomes(problem) if tree.token[1:].tolist() == [1, 0])
    assert isinstance(tree, DraftTree)
    assert verifier.stopping_nodes(tree.as_batch()).tolist() == [2]  # the child with token 0 (p = 0.5)
    tied = ContextFreeProblem(np.array([0.4, 0.4, 0.2]), np.array([1 / 3] * 3))
    tree = next(tree for tree, _ in parse_tree("branch:2").outcomes(tied) if tree.token[1:].tolist() == [1, 0])
    assert verifier.stopping_nodes(tree.as_batch()).tolist() == [1]


def test_exact_mode_takes_the_float_decisions():
    p = [Fraction(1, 2), Fraction(1, 3), Fraction(1, 6)]
    q = [Fraction(1, 5), Fraction(1, 5), Fraction(3, 5)]
    for name in ("typical", "typical(epsilon=0.2,alpha=0.5)"):
        for spec in ("chain:2", "iid:2,1", "delayed:2,1,1"):
            exact = analyze(ContextFreeProblem(p, q, exact=True), parse_tree(spec), get_verifier(name))
            floats = analyze(ContextFreeProblem(np.array(p, float), np.array(q, float)), parse_tree(spec),
                             get_verifier(name))
            assert isinstance(exact.block_efficiency, Fraction)
            assert float(exact.tv_distance) == pytest.approx(floats.tv_distance, abs=1e-12)
            assert float(exact.block_efficiency) == pytest.approx(floats.block_efficiency, abs=1e-12)


def test_torch_backend_gives_the_numpy_law():
    torch = pytest.importorskip("torch")
    from verispec.simulator import TreeBatch

    problem = random_problem(4, 2, seed=3, concentration=0.4)
    verifier = get_verifier("typical")
    trees = [tree for tree, _ in parse_tree("iid:2,2").outcomes(problem)]
    for batch, _ in TreeBatch.of_trees(trees):
        host = verifier.emission_laws(batch)
        moved = batch.to_torch(torch.device("cpu"), torch.float64) if hasattr(batch, "to_torch") else None
        if moved is None:
            pytest.skip("TreeBatch has no torch conversion")
        np.testing.assert_allclose(verifier.emission_laws(moved).numpy(), host, atol=1e-12)
