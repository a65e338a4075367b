"""Verifier classes in cvxpy (verispec/bounds/classes.py) and the rational certificate of the multi-step LP
(verispec/bounds/certificate.py).

* The cvxpy path (HiGHS through scipy and through highspy) agrees with the scipy/HiGHS path to 1e-9 on every
  case: every valid verifier and GBV's selected-path class; Clarabel (interior point) to its accuracy.
* The relaxations: the coupling program equals the closed form ``coupling_bound`` on a single path and lies
  between the multi-step optimum and it on trees; the information-agnostic LP equals the multi-step optimum on a
  single path, bounds it on trees, and at one position equals 1 + sum_t min(p(t), 1 - (1 - q(t))^K) (derived
  in the test).
* A user's class (the README's example) lies strictly between GBV and the multi-step optimum on iid:3,2; its
  verifier is lossless and attains it.
* The certificate proves 11/9 + 1 on Sun et al.'s toy and 1 + alpha* (Hu et al.'s subset formula, brute force in
  Fractions) at one position; corrupted certificates are refused.
* Bad input: one-line errors.
"""

from __future__ import annotations

import itertools
import json
import textwrap
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.strategies import build_problem
from verispec import cli
from verispec.bounds.certificate import CertificateError, RationalCertificate, _check, solve_rational
from verispec.bounds.classes import (
    CLASSES,
    coupling_program,
    information_agnostic_program,
    optimize_class,
)
from verispec.bounds.multistep import build_multistep_lp, coupling_bound, optimal_block_efficiency
from verispec.errors import ProblemTooLargeError, SolverError, VerispecError
from verispec.simulator import ContextFreeProblem, analyze, parse_tree
from verispec.simulator.generators import sun_toy_problem
from verispec.simulator.selection import greedy_path
from verispec.user_code import load_attribute
from verispec.verifiers import REGISTRY, get_verifier

F = Fraction

smooth_problems = st.fixed_dictionaries(dict(
    vocab_size=st.integers(2, 3), seed=st.integers(0, 10**6), concentration=st.sampled_from([1.0, 3.0]),
    divergence=st.sampled_from([0.0, 0.3, 0.8, 1.0]), zero_fraction=st.sampled_from([0.0, 0.3])))

P3, Q3 = [0.5, 0.3, 0.2], [0.2, 0.6, 0.2]


#: The README's class (at most one token accepted off GBV's greedy path), from the examples folder.
MY_CLASS = f"{Path(__file__).resolve().parents[2] / 'examples' / 'my_class.py'}:shallow_off_path"
shallow_off_path = load_attribute(MY_CLASS, "verifier class")


# --- the cvxpy path against the scipy path ------------------------------------------------------------------

@pytest.mark.parametrize("spec", ["chain:1", "chain:3", "iid:2,1", "iid:3,1", "iid:2,2", "delayed:2,1,1"])
@given(args=smooth_problems)
@settings(max_examples=4)
def test_cvxpy_and_scipy_paths_agree(spec, args):
    drafter = parse_tree(spec)
    problem = build_problem(dict(args, depth=drafter.depth))
    for name, restriction in (("every-valid", None), ("selected-path", "selected-path")):
        scipy_value = optimal_block_efficiency(problem, drafter, restriction=restriction).block_efficiency
        for solver in ("SCIPY", "HIGHS"):
            result = optimize_class(problem, drafter, name, solver=solver, references=False)
            assert result.block_efficiency == pytest.approx(scipy_value, abs=1e-9), (name, solver)
            assert result.tv_distance <= 1e-12


def test_clarabel_agrees_to_its_accuracy_and_says_so():
    problem, drafter = ContextFreeProblem(P3, Q3), parse_tree("iid:2,2")
    result = optimize_class(problem, drafter, "every-valid", solver="clarabel", references=False)
    scipy_value = optimal_block_efficiency(problem, drafter).block_efficiency
    assert result.solver == "CLARABEL" and result.tolerance == 1e-8
    assert result.block_efficiency == pytest.approx(scipy_value, abs=1e-7)
    assert result.tv_distance <= 1e-8


def test_class_optimum_verifier_is_lossless_and_attains_it():
    problem, drafter = ContextFreeProblem(P3, Q3), parse_tree("iid:2,2")
    result = optimize_class(problem, drafter, "selected-path", references=False)
    check = analyze(problem, drafter, result.verifier)
    assert check.tv_distance < 1e-12
    assert float(check.block_efficiency) == pytest.approx(result.block_efficiency, abs=1e-9)
    for tree, _ in drafter.outcomes(problem):
        law = result.verifier.emission_law(tree)
        off = np.setdiff1d(np.arange(tree.num_nodes), greedy_path(tree))
        assert not law[off].any()


def test_users_class_strictly_between_gbv_and_the_multistep_optimum():
    # The README's worked example: accepting one token off the greedy path beats GBV's class, but not every
    # valid verifier, on iid:3,2 with p = (0.5, 0.3, 0.2), q = (0.2, 0.6, 0.2).
    problem, drafter = ContextFreeProblem(P3, Q3), parse_tree("iid:3,2")
    result = optimize_class(problem, drafter, shallow_off_path, verifiers=REGISTRY.values())
    gbv = float(analyze(problem, drafter, get_verifier("gbv")).block_efficiency)
    full = optimal_block_efficiency(problem, drafter).block_efficiency
    assert gbv + 0.05 < result.block_efficiency < full - 0.05
    assert result.references["selected-path"] == pytest.approx(gbv, abs=1e-9)  # GBV is its class's optimum
    rows = {row.verifier: row for row in result.rows}
    assert rows["gbv"].ratio < 1 and rows["gbv"].gap == pytest.approx(result.block_efficiency - gbv, abs=1e-12)
    assert all(row.lossless for row in result.rows)
    check = analyze(problem, drafter, result.verifier)
    assert check.tv_distance < 1e-12
    assert float(check.block_efficiency) == pytest.approx(result.block_efficiency, abs=1e-9)


def test_a_constraint_every_valid_verifier_meets_leaves_the_optimum():
    # Losslessness implies P(block starts with t) <= p(t); stated as a class it must not move the optimum.
    problem, drafter = ContextFreeProblem(P3, Q3), parse_tree("iid:2,2")

    def first_token_capped(v):
        caps = []
        for token in range(v.vocab_size):
            columns = [c for index, (tree, _) in enumerate(v.outcomes)
                       for c in v.columns(index, [n for n in range(tree.num_nodes)
                                                  if tree.paths[n][:1] == (token,)])]
            caps.append(v.z[columns].sum() <= P3[token])
        return caps

    result = optimize_class(problem, drafter, first_token_capped, references=False)
    assert result.block_efficiency == pytest.approx(optimal_block_efficiency(problem, drafter).block_efficiency,
                                                    abs=1e-9)


# --- relaxations ------------------------------------------------------------------------------------------

@given(args=smooth_problems, depth=st.integers(1, 3))
@settings(max_examples=6)
def test_relaxations_on_a_single_path(args, depth):
    drafter = parse_tree(f"chain:{depth}")
    problem = build_problem(dict(args, depth=depth))
    optimum = optimal_block_efficiency(problem, drafter).block_efficiency
    assert information_agnostic_program(problem, drafter) == pytest.approx(optimum, abs=1e-9)
    assert coupling_program(problem, drafter) == pytest.approx(coupling_bound(problem, drafter), abs=1e-9)


@pytest.mark.parametrize("spec", ["iid:2,2", "iid:3,2", "delayed:2,1,1", "iid:2,1"])
def test_relaxations_bound_every_valid_verifier_on_trees(spec):
    problem, drafter = ContextFreeProblem(P3, Q3), parse_tree(spec)
    optimum = optimal_block_efficiency(problem, drafter).block_efficiency
    agnostic = information_agnostic_program(problem, drafter)
    coupling = coupling_program(problem, drafter)
    # two different relaxations (neither holds the other's constraints): both bound the optimum
    assert agnostic >= optimum - 1e-9
    assert optimum - 1e-9 <= coupling <= coupling_bound(problem, drafter) + 1e-9


@given(args=smooth_problems, branches=st.integers(1, 3))
@settings(max_examples=8)
def test_information_agnostic_at_one_position_by_hand(args, branches):
    # Blocks M(y) at the root and M(t y): losslessness at length 2 on a context-free... here general: summing the
    # final rows over x2 gives p(t) = M(t) + A(t), A(t) = sum_y M(t y); the capacity A(t) <= 1 - (1 - q(t))^K
    # (t is in the tree) and M >= 0 leave 1 + sum_t min(p(t), 1 - (1 - q(t))^K), attained with
    # M(t y) = A(t) p(y | t).
    problem = build_problem(dict(args, depth=1))
    p, q = np.asarray(problem.target(()), float), np.asarray(problem.draft(()), float)
    expected = 1 + np.minimum(p, 1 - (1 - q) ** branches).sum()
    assert information_agnostic_program(problem, parse_tree(f"iid:{branches},1")) == pytest.approx(expected, abs=1e-9)


# --- the rational certificate --------------------------------------------------------------------------------

def test_certificate_on_sun_toy():
    result = optimal_block_efficiency(sun_toy_problem(exact=True), parse_tree("chain:2"), certify=True)
    assert result.certificate.optimum == 1 + F(11, 9)  # Sun et al.: E[tau] = 11/9 for block verification


def _alpha_star(p, q, k):
    """Hu et al.: alpha* = 1 + min over token sets T of [p(T) - q(T)^K], by brute force in Fractions."""
    tokens = range(len(p))
    return 1 + min(sum((p[t] for t in subset), F(0)) - sum((q[t] for t in subset), F(0)) ** k
                   for r in range(len(p) + 1) for subset in itertools.combinations(tokens, r))


@pytest.mark.parametrize("k", [1, 2, 3])
@pytest.mark.parametrize("p,q", [((F(1, 2), F(1, 3), F(1, 6)), (F(1, 5), F(3, 5), F(1, 5))),
                                 ((F(2, 7), F(4, 7), F(1, 7)), (F(1, 2), F(1, 4), F(1, 4)))])
def test_certificate_proves_one_plus_alpha_star(p, q, k):
    problem = ContextFreeProblem(list(p), list(q), exact=True)
    result = optimal_block_efficiency(problem, parse_tree(f"iid:{k},1"), certify=True)
    assert result.certificate.optimum == 1 + _alpha_star(p, q, k)


@pytest.mark.parametrize("spec", ["iid:2,2", "delayed:2,1,1", "chain:3"])
def test_certificate_on_trees_and_refused_on_float_problems(spec):
    exact = optimal_block_efficiency(ContextFreeProblem([F(1, 2), F(1, 3), F(1, 6)], [F(1, 5), F(3, 5), F(1, 5)],
                                                        exact=True), parse_tree(spec), certify=True)
    assert float(exact.certificate.optimum) == pytest.approx(exact.block_efficiency, abs=1e-9)
    with pytest.raises(VerispecError, match="needs an exact problem"):
        optimal_block_efficiency(ContextFreeProblem(P3, Q3), parse_tree(spec), certify=True)


def test_corrupted_certificates_are_refused():
    problem = ContextFreeProblem([F(1, 2), F(1, 3), F(1, 6)], [F(1, 5), F(3, 5), F(1, 5)], exact=True)
    drafter = parse_tree("iid:2,1")
    lp = build_multistep_lp(problem, drafter)
    certificate = optimal_block_efficiency(problem, drafter, certify=True).certificate
    by_row = [{} for _ in range(lp.num_rows)]
    by_column = [{} for _ in range(lp.num_columns)]
    for i, j, a in zip(lp.rows.tolist(), lp.cols.tolist(), lp.values):
        by_row[i][j] = by_row[i].get(j, 0) + a
        by_column[j][i] = by_column[j].get(i, 0) + a
    b, c = list(lp.b_eq), [F(int(v)) for v in lp.objective]
    _check("lp", certificate.primal, certificate.dual, by_row, by_column, b, c)  # the genuine one passes
    dual = list(certificate.dual)
    dual[0] -= F(1, 10**6)  # a dual a hair too small misses a dual constraint or the objective
    with pytest.raises(CertificateError):
        _check("lp", certificate.primal, dual, by_row, by_column, b, c)
    primal = dict(certificate.primal)
    column = next(iter(primal))
    primal[column] += F(1, 10**9)
    with pytest.raises(CertificateError, match="misses constraint"):
        _check("lp", primal, certificate.dual, by_row, by_column, b, c)
    assert isinstance(certificate, RationalCertificate)


def test_solve_rational_by_hand():
    # x + y = 3, x - y = 1 -> (2, 1); a dependent third row is consistent; an inconsistent one is None
    rows = [{0: F(1), 1: F(1)}, {0: F(1), 1: F(-1)}, {0: F(2)}]
    assert solve_rational(rows, [F(3), F(1), F(4)], 2, [F(0), F(0)]) == [2, 1]
    assert solve_rational(rows, [F(3), F(1), F(5)], 2, [F(0), F(0)]) is None
    # one equation, two unknowns: the free one keeps its fallback
    assert solve_rational([{0: F(1), 1: F(1)}], [F(1)], 2, [F(0), F(1, 4)]) == [F(3, 4), F(1, 4)]


# --- command line and bad input ---------------------------------------------------------------------------

@pytest.fixture
def class_file(tmp_path):
    path = tmp_path / "classes.py"
    path.write_text(textwrap.dedent('''
        def empty(v):
            return [v.z == 0]

        def raises(v):
            raise RuntimeError("broken class")

        def not_constraints(v):
            return [3]

        def non_convex(v):
            import cvxpy
            return [cvxpy.square(v.z[0]) >= 1]

        NOT_A_FUNCTION = 3
    '''))
    return path


def _bound(capsys, *extra, tree="iid:3,2"):
    code = cli.main(["bound", "--target", "0.5,0.3,0.2", "--draft", "0.2,0.6,0.2", "--tree", tree, *extra])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_bound_with_a_users_class(capsys, class_file):
    code, out, _ = _bound(capsys, "--restriction", MY_CLASS, "--json")
    assert code == 0
    data = json.loads(out)
    gbv = next(row for row in data["verifiers"] if row["verifier"] == "gbv")
    assert gbv["block_efficiency"] < data["optimal_block_efficiency"] < data["references"]["every valid verifier"]
    assert data["solver"] == "SCIPY" and data["tv_distance"] <= data["tolerance"] == 1e-12


def test_bound_certify(capsys):
    code, out, _ = _bound(capsys, "--certify", "--json", tree="iid:2,1")
    assert code == 0
    data = json.loads(out)
    p, q = (F(1, 2), F(3, 10), F(1, 5)), (F(1, 5), F(3, 5), F(1, 5))
    assert F(data["certificate"]["optimum"]) == 1 + _alpha_star(p, q, 2)


@pytest.mark.parametrize("extra,message", [
    (["--restriction", "{file}:empty"], "infeasible"),
    (["--restriction", "{file}:raises"], "raised RuntimeError: broken class"),
    (["--restriction", "{file}:not_constraints"], "not a cvxpy constraint"),
    (["--restriction", "{file}:non_convex"], "non-convex"),
    (["--restriction", "{file}:NOT_A_FUNCTION"], "not a function"),
    (["--restriction", "{file}:missing"], "has no attribute"),
    (["--restriction", MY_CLASS, "--solver", "gurobi-nope"], "is not installed"),
    (["--restriction", MY_CLASS, "--certify"], "drop --certify"),
    (["--restriction", "selected-path", "--solver", "HIGHS"], "drop --solver"),
    (["--restriction", "nonsense"], "must be one of selected-path or FILE.py:NAME"),
])
def test_bound_class_errors(capsys, class_file, extra, message):
    extra = [item.replace("{file}", str(class_file)) for item in extra]
    code, out, err = _bound(capsys, *extra)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_api_errors():
    problem, drafter = ContextFreeProblem(P3, Q3), parse_tree("iid:2,1")
    with pytest.raises(VerispecError, match="unknown verifier class 'nope'"):
        optimize_class(problem, drafter, "nope")
    with pytest.raises(SolverError, match="not installed"):
        optimize_class(problem, drafter, "every-valid", solver="NOPE")
    assert set(CLASSES) == {"every-valid", "selected-path"}


def test_size_is_refused_before_building():
    problem = ContextFreeProblem([0.25] * 4, [0.25] * 4)
    with pytest.raises(ProblemTooLargeError, match="above the limit"):
        optimize_class(problem, parse_tree("iid:6,6"), "every-valid")
