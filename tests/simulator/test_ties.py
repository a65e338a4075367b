"""Float and exact mode take the same decisions, ties included.

Rules that rank tokens (GBV's key p/q then token id, SpecHub's hub, the greedy drafts, DySpec's heap,
Khisti's truncated LP) or route a maximum flow (otlp, khisti) decide discretely. On problems built to
have exact ties, float64 values that are equal as rationals can differ in their last bits, and a rule that
looks at those bits decides differently in the two modes. Every verifier, on every tree kind it is valid
for, must give the same output law in float and in exact rational mode on such problems (to 1e-12); the
drafters must produce the same trees with the same probabilities.
"""

from __future__ import annotations

import json
from fractions import Fraction as F

import numpy as np
import pytest

from tests.verifiers.test_registry_verifiers import TREE_SPECS
from verispec.cli import main
from verispec.simulator import ContextFreeProblem, TabularProblem, analyze, parse_tree
from verispec.verifiers import REGISTRY


def _tabular(exact: bool) -> TabularProblem:
    """Context-dependent, every conditional from a small set of fractions so that ratios, equal draft
    probabilities and products of them tie across tokens and prefixes."""
    laws = [(F(1, 20), F(3, 20), F(16, 20)), (F(3, 20), F(9, 20), F(8, 20)), (F(1, 3), F(1, 3), F(1, 3)),
            (F(1, 2), F(1, 6), F(1, 3)), (F(2, 5), F(2, 5), F(1, 5)), (F(1, 5), F(2, 5), F(2, 5))]
    target, draft = {}, {}
    for length in range(5):
        for index, prefix in enumerate(np.ndindex(*(3,) * length)):
            target[prefix] = laws[(index + length) % len(laws)]
            draft[prefix] = laws[(2 * index + length + 1) % len(laws)]
    return TabularProblem(3, target, draft, exact=exact)


#: (name, factory(exact) -> Problem): tied ratios p/q (GBV), tied draft probabilities (hub, greedy, DySpec
#: products 1/3 = 2/3 * 1/2), p = q (every residual empty), and all of them by prefix.
TIE_PROBLEMS = {
    "ratio-ties": lambda exact: ContextFreeProblem([F(1, 20), F(3, 20), F(16, 20)], [F(3, 20), F(9, 20), F(8, 20)],
                                                   exact=exact),
    "uniform-draft": lambda exact: ContextFreeProblem([F(1, 2), F(1, 6), F(1, 3)], [F(1, 3)] * 3, exact=exact),
    "tied-draft-maxima": lambda exact: ContextFreeProblem([F(1, 5), F(2, 5), F(2, 5)], [F(2, 5), F(2, 5), F(1, 5)],
                                                          exact=exact),
    "target-equals-draft": lambda exact: ContextFreeProblem([F(1, 3)] * 3, [F(1, 3)] * 3, exact=exact),
    "by-prefix": _tabular,
}

PAIRS = [(name, spec) for name, verifier in sorted(REGISTRY.items()) for spec in TREE_SPECS
         if parse_tree(spec).draft_laws & verifier.valid_for and parse_tree(spec).depth <= 2]


def _tie_cases():
    """Every (verifier, tree, problem); the fast loop keeps the by-prefix problem, which has every kind of
    tie, and the slow run adds the context-free ones."""
    for name, spec in PAIRS:
        for problem_name in sorted(TIE_PROBLEMS):
            marks = [] if problem_name == "by-prefix" else [pytest.mark.slow]
            yield pytest.param(name, spec, problem_name, marks=marks, id=f"{name}-{spec}-{problem_name}")


@pytest.mark.parametrize("name,spec,problem_name", list(_tie_cases()))
def test_float_and_exact_mode_give_the_same_law(name, spec, problem_name):
    drafter, verifier = parse_tree(spec), REGISTRY[name]
    floats = analyze(TIE_PROBLEMS[problem_name](False), drafter, verifier)
    exact = analyze(TIE_PROBLEMS[problem_name](True), drafter, verifier)
    assert exact.tv_distance == 0 and floats.tv_distance < 1e-12
    for got, expected in zip(floats.output_law.by_length, exact.output_law.by_length, strict=True):
        np.testing.assert_allclose(got, np.asarray(expected, dtype=float), rtol=0, atol=1e-12,
                                   err_msg=f"{name} on {spec}, {problem_name}: float and exact mode differ")


@pytest.mark.parametrize("problem_name", sorted(TIE_PROBLEMS))
@pytest.mark.parametrize("spec", ["dyspec:3", "dyspec:4", "hub-tree:2", "greedy-tree:2,2", "greedy:3"])
def test_drafters_draw_the_same_trees_in_both_modes(spec, problem_name):
    floats = dict(parse_tree(spec).outcomes(TIE_PROBLEMS[problem_name](False)))
    exact = dict(parse_tree(spec).outcomes(TIE_PROBLEMS[problem_name](True)))
    floats = {tree.shape: probability for tree, probability in floats.items()}
    exact = {tree.shape: probability for tree, probability in exact.items()}
    assert set(floats) == set(exact)
    assert max(abs(floats[shape] - float(exact[shape])) for shape in exact) < 1e-15


def test_gbv_on_tied_ratios_matches_its_exact_value(capsys):
    # The reproduction: p/q = 1/3 for tokens 0 and 1. Worked by hand with the key (p/q, token id):
    # token 1 ranks above 0 and 2 above both, so the selected child is the larger-keyed of the two draws.
    # q_skew(t) = P(max of two draws is t): (q0^2, (q0+q1)^2 - q0^2, 1 - (q0+q1)^2) = (9/400, 135/400, 256/400)
    # ... and block verification with it accepts sum min(p, q_skew) = 9/400 + 60/400 + 256/400 = 13/16
    # (p = (20, 60, 320)/400), so E[tau + 1] = 29/16 in both modes.
    values = []
    for exact in ([], ["--exact"]):
        code = main(["exact", "--target", "1/20,3/20,16/20", "--draft", "3/20,9/20,8/20", "--tree", "iid:2,1",
                     "--verifier", "gbv", "--json", *exact])
        assert code == 0
        values.append(json.loads(capsys.readouterr().out)["block_efficiency"])
    assert values == pytest.approx([29 / 16, 29 / 16], abs=1e-12)
