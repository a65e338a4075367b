"""A whole-tree rule written by a user (examples/my_whole_tree_rule.py) gets every engine the built-in rules
get, from its one batched law: fast enumeration, exact rationals, torch, and the parity check against its
procedure."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from verispec.simulator import analyze, parse_tree, random_problem, sun_toy_problem
from verispec.simulator.engine import choose_method
from verispec.verifiers import get_verifier, load_verifier

RULE_FILE = Path(__file__).resolve().parents[2] / "examples" / "my_whole_tree_rule.py"


@pytest.fixture(scope="module")
def rule():
    return load_verifier(f"{RULE_FILE}:RULE")


def test_a_user_rule_takes_fast_enumeration(rule):
    problem = random_problem(4, 5, 0)
    assert choose_method(problem, parse_tree("chain:5"), rule) == "fast-enumeration"
    mine = analyze(problem, parse_tree("chain:5"), rule)
    builtin = analyze(problem, parse_tree("chain:5"), get_verifier("naive"))
    assert mine.method == builtin.method == "fast-enumeration" and mine.tv_distance < 1e-12
    for a, b in zip(mine.output_law.by_length, builtin.output_law.by_length, strict=True):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-15)


def test_a_user_rule_is_exact_in_rationals_and_matches_its_procedure(rule):
    # token-level verification on Sun et al.'s toy: E[tau] = 10/9
    result = analyze(sun_toy_problem(exact=True), "chain:2", rule)
    assert result.tv_distance == 0 and result.expected_accepted == Fraction(10, 9)
    procedure = analyze(sun_toy_problem(exact=True), "chain:2", rule, method="enumerate")
    assert procedure.tau_law == result.tau_law


def test_a_user_rule_runs_on_torch(rule):
    torch = pytest.importorskip("torch")
    tree = parse_tree("chain:3").sample(random_problem(5, 3, 1), np.random.default_rng(0))
    expected = rule.emission_law(tree)
    got = rule.emission_laws(tree.as_batch().to_torch("cpu", torch.float64))[0].numpy()
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-12)
