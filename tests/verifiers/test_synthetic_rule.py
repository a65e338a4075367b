"""``synthetic``, vLLM's synthetic acceptance (``verispec.verifiers.synthetic``): its law against an enumeration written
here in rationals (every draft path, each position's set coin spelled out again), with a broken twin that reads the
rates as conditional; the batched law against the enumerated procedure; the rates' conversion against vLLM's
definition; the names and refusals."""

from __future__ import annotations

import itertools
from fractions import Fraction as F

import numpy as np
import pytest

from tests.verifiers.test_lossy_rules import exact_problem, residual
from verispec.errors import UnknownVerifierError
from verispec.simulator import analyze, parse_tree, random_problem
from verispec.verifiers import LOSSY_BY_DESIGN, REGISTRY, get_verifier
from verispec.verifiers.synthetic import conditional_rates

RATES = (F(3, 4), F(3, 8))  # a1, a2: the conditional rates are 3/4 and 1/2


def enumerated(problem, rates, conditional_given: bool) -> dict:
    """The block law of synthetic acceptance on chain:2 by enumeration: every draft path (x1, x2), the first coin
    c1 = a1, the second c2 = a2 / a1 (``conditional_given``: the broken twin, c2 = a2), a rejection at position i
    emitting from norm((p - q)+) at the draft's parent, both accepted: the bonus from p at the leaf."""
    c1, c2 = rates[0], rates[1] if conditional_given else rates[1] / rates[0]
    law: dict[tuple, F] = {}
    size = problem.vocab_size
    for x1, x2 in itertools.product(range(size), repeat=2):
        path = problem.draft(())[x1] * problem.draft((x1,))[x2]
        if path == 0:
            continue
        for mass, prefix in (((1 - c1), ()), (c1 * (1 - c2), (x1,))):
            for y, share in enumerate(residual(problem.target(prefix), problem.draft(prefix))):
                law[prefix + (y,)] = law.get(prefix + (y,), F(0)) + path * mass * share
        for y, share in enumerate(problem.target((x1, x2))):
            law[(x1, x2, y)] = law.get((x1, x2, y), F(0)) + path * c1 * c2 * share
    return {sequence: mass for sequence, mass in law.items() if mass != 0}


@pytest.mark.parametrize("seed", range(8))
def test_the_law_equals_its_enumeration_in_rationals_and_the_broken_twin_does_not(seed):
    problem = exact_problem(3, 3, seed=seed)  # a context-dependent problem, some entries zero
    rule = get_verifier(f"synthetic(a1={float(RATES[0])},a2={float(RATES[1])})")
    law = {sequence: mass for sequence, mass in
           analyze(problem, parse_tree("chain:2"), rule, need_output_law=True).output_law.items()}
    assert all(isinstance(mass, F) for mass in law.values())
    assert law == enumerated(problem, RATES, conditional_given=False)
    assert sum(law.values()) == 1
    assert law != enumerated(problem, RATES, conditional_given=True)


def test_the_batched_law_equals_the_enumerated_procedure():
    rule = get_verifier("synthetic(a1=0.9,a2=0.3,a3=0.3,a4=0.1)")
    for seed in range(4):
        problem = random_problem(3, 3, seed=seed, concentration=0.5, divergence=0.8)
        for tree, _ in list(parse_tree("chain:3").outcomes(problem))[:30]:
            np.testing.assert_allclose(np.asarray(rule.emission_law(tree), float),
                                       np.asarray(rule.enumerated_emission_law(tree), float), atol=1e-12)


def test_the_rates_are_vllms_conditional_rates():
    # vLLM's unconditional_to_conditional_rates: c_i = a_i / a_(i-1), 0 where a_(i-1) = 0; a coin u < c accepts with
    # probability min(1, c)
    assert conditional_rates([0.8, 0.4, 0.0, 0.5]) == [0.8, 0.5, 0.0, 0.0]
    assert conditional_rates([0.5, 0.75]) == [0.5, 1.0]
    # a3, a4 at their defaults (0.4, 0.2): c3 = min(1, 0.4 / 0.25), c4 = 0.2 / 0.4; past the fourth, 0
    assert get_verifier("synthetic(a1=0.5,a2=0.25)").rates(6) == [0.5, 0.5, 1.0, 0.5, 0.0, 0.0]


def test_names_and_refusals():
    assert "synthetic" in LOSSY_BY_DESIGN and "synthetic" not in REGISTRY
    assert get_verifier("synthetic(a1=0.7,a2=0.4)").name == "synthetic(a1=0.7,a2=0.4,a3=0.4,a4=0.2)"
    for name, match in (("synthetic(a1=1.5)", r"\[0, 1\]"), ("synthetic(a5=0.1)", "takes a1="),
                        ("synthetic(a2=x)", "must be a number")):
        with pytest.raises(UnknownVerifierError, match=match) as caught:
            get_verifier(name)
        assert "\n" not in str(caught.value)
