"""Problems: validation of every kind of bad input, JSON round trips, generators' knobs."""

from __future__ import annotations

import json
from fractions import Fraction

import numpy as np
import pytest

from verispec.errors import InvalidDistributionError, InvalidProblemError
from verispec.simulator import (
    ContextFreeProblem,
    MarkovProblem,
    TabularProblem,
    load_problem,
    problem_from_json,
    problem_to_json,
    random_context_free_problem,
    random_markov_problem,
    random_problem,
)
from verispec.simulator.distributions import as_distribution, parse_distribution


def test_parse_fractions_exact_and_float():
    assert list(parse_distribution("1/3,2/3", exact=True)) == [Fraction(1, 3), Fraction(2, 3)]
    np.testing.assert_allclose(parse_distribution("1/3, 2/3"), [1 / 3, 2 / 3], rtol=0, atol=1e-16)


@pytest.mark.parametrize("text,message", [
    ("0.5,0.6", "sum to"), ("1.5,-0.5", "negative"), ("nan,1", "NaN"), ("0.5,,0.5", "empty"),
    ("a,b", "cannot read"), ("1/0,1", "cannot read"), ("inf,0", "finite|infinite|cannot")])
@pytest.mark.parametrize("exact", [False, True])
def test_parse_rejects_bad_input(text, message, exact):
    with pytest.raises(InvalidDistributionError, match=message):
        parse_distribution(text, exact=exact, name="--target")


def test_exact_mode_requires_exact_sum():
    with pytest.raises(InvalidDistributionError, match="exact"):
        parse_distribution("0.3333,0.6666", exact=True)
    # float mode accepts a sum within 1e-8 and renormalises
    vector = parse_distribution("0.333333333,0.666666667")
    assert vector.sum() == pytest.approx(1.0, abs=1e-15)


@pytest.mark.parametrize("values,message", [
    ([[0.5, 0.5]], "1-d"), ([], "expected 2"), ([0.2, 0.3, 0.5], "expected 2")])
def test_shape_errors(values, message):
    with pytest.raises(InvalidDistributionError, match=message):
        as_distribution(values, size=2)


def test_context_free_length_mismatch():
    with pytest.raises(InvalidDistributionError, match="expected 2"):
        ContextFreeProblem([0.5, 0.5], [0.2, 0.3, 0.5])


def _json_problem():
    return {"vocab_size": 2,
            "target": {"": ["1/3", "2/3"], "0": [0.5, 0.5], "1": [1, 0]},
            "draft": {"": [0.5, 0.5]}}


def test_json_problem_and_round_trip(tmp_path):
    problem = problem_from_json(_json_problem(), exact=True)
    assert problem.horizon == 1
    assert problem.target((0,))[1] == Fraction(1, 2)
    path = tmp_path / "p.json"
    path.write_text(json.dumps(problem_to_json(problem, 1)))
    again = load_problem(path, exact=True)
    for prefix in [(), (0,), (1,)]:
        assert list(again.target(prefix)) == list(problem.target(prefix))
    assert list(again.draft(())) == list(problem.draft(()))


@pytest.mark.parametrize("mutate,error,message", [
    (lambda d: d["target"].pop("1"), InvalidProblemError, "prefix '1'"),
    (lambda d: d["draft"].pop(""), InvalidProblemError, "draft at prefix ''"),
    (lambda d: d["target"].update({"0": [0.2, 0.2]}), InvalidDistributionError, "prefix '0'"),
    (lambda d: d["target"].update({"0": [0.5, 0.5, 0.0]}), InvalidDistributionError, "expected 2"),
    (lambda d: d["target"].update({"0": ["x", 1]}), InvalidDistributionError, "prefix '0'"),
    (lambda d: d["target"].update({"0,a": [0.5, 0.5]}), InvalidProblemError, "comma-joined"),
    (lambda d: d["target"].update({"5": [0.5, 0.5]}), InvalidProblemError, "outside the vocabulary"),
    (lambda d: d.pop("vocab_size"), InvalidProblemError, "vocab_size"),
    (lambda d: d.update({"vocab_size": 0}), InvalidProblemError, "vocab_size"),
])
def test_json_problem_errors(mutate, error, message):
    data = _json_problem()
    mutate(data)
    with pytest.raises(error, match=message):
        problem = problem_from_json(data)
        problem.require_depth(1)


def test_problem_file_errors(tmp_path):
    with pytest.raises(InvalidProblemError, match="cannot read"):
        load_problem(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(InvalidProblemError, match="not valid JSON"):
        load_problem(bad)


def test_tabular_depth_is_checked():
    problem = random_problem(2, 2, 0)
    problem.require_depth(2)
    with pytest.raises(InvalidProblemError, match="depth 3"):
        problem.require_depth(3)
    with pytest.raises(InvalidProblemError):
        TabularProblem(2, problem.target_table, problem.draft_table, horizon=3)


def test_generators_are_seeded_and_knobs_work():
    a, b = random_problem(3, 2, 11), random_problem(3, 2, 11)
    for prefix in [(), (1,), (2, 0)]:
        np.testing.assert_array_equal(a.target(prefix), b.target(prefix))
    same = random_problem(3, 1, 5, divergence=0.0)
    np.testing.assert_array_equal(same.target(()), same.draft(()))
    sparse = random_problem(6, 1, 3, zero_fraction=0.5)
    assert any((sparse.target(prefix) == 0).any() for prefix in [(), (0,), (1,), (2,)])
    hot, cold = random_context_free_problem(4, 2, temperature=0.5), random_context_free_problem(4, 2)
    expected = cold.p ** 2 / (cold.p ** 2).sum()  # temperature 1/2 squares and renormalises
    np.testing.assert_allclose(hot.p, expected, atol=1e-15)
    for bad in [dict(divergence=1.5), dict(concentration=0.0), dict(temperature=0.0), dict(zero_fraction=1.0)]:
        with pytest.raises(InvalidProblemError):
            random_problem(3, 1, 0, **bad)


def test_markov_problem_state_and_validation():
    problem = random_markov_problem(3, 4)
    assert problem.state((0, 2)) == problem.state((1, 2)) == 2
    np.testing.assert_array_equal(problem.target((0, 2)), problem.target((2,)))
    with pytest.raises(InvalidProblemError, match="shape"):
        MarkovProblem([0.5, 0.5], [0.5, 0.5], np.eye(3), np.eye(2))
    with pytest.raises(InvalidDistributionError, match="target after token 1"):
        MarkovProblem([0.5, 0.5], [0.5, 0.5], [[1, 0], [0.7, 0.7]], np.eye(2))


def test_weighted_residual_and_its_rounding_fallback():
    from verispec.simulator.distributions import residual, stop_probability, weighted_residual

    # ordinary case by hand: w = 1/2, p = (0.8, 0.2), q = (0.1, 0.9): (w p - q)+ = (0.3, 0) -> (1, 0);
    # S = 0.3, so the stop probability is 0.3 / (0.3 + 0.5) = 3/8
    np.testing.assert_allclose(weighted_residual(0.5, np.array([0.8, 0.2]), np.array([0.1, 0.9])), [1, 0])
    assert stop_probability(0.5, np.array([0.8, 0.2]), np.array([0.1, 0.9])) == pytest.approx(3 / 8)
    # rounding empties (p - q)+: q = (8e-19, 1.0) stands for (8e-19, 1 - 8e-19), whose residual is (0, 1)
    np.testing.assert_array_equal(residual(np.array([0.0, 1.0]), np.array([8e-19, 1.0])), [0, 1])
    # exact arithmetic never takes the fallback: an empty residual stays empty (its branch has probability 0)
    p = np.array([Fraction(1, 2), Fraction(1, 2)], dtype=object)
    assert list(residual(p, p)) == [0, 0]
