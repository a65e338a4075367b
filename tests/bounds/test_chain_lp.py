"""The multi-step LP on a single path in its single-path form (verispec/bounds/chain_lp.py): one variable per
output prefix instead of one per (draft outcome, node, token).

* It equals the full LP over every draft outcome (form="full") to 1e-9 on context-dependent problems, and block
  verification's exact block efficiency (optimal on a single path, Thomas & Pal 2026).
* Its optimal verifier, rebuilt outcome by outcome, is lossless and attains it.
* Its rational certificate proves exactly the value the exact engine computes for block verification in
  Fractions (a second, independent derivation), 20/9 on Sun et al.'s toy; corrupted certificates are refused.
* At one position the least feasible point is F(t) = max(0, p(t) - q(t)), E[tau + 1] = 1 + sum_t min(p, q).
* chain:8 at V = 3 (9,840 variables; the full LP had 177k emission variables and took 73 s) in the command.
"""

from __future__ import annotations

import json
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.strategies import build_problem
from verispec import cli
from verispec.bounds.certificate import CertificateError
from verispec.bounds.chain_lp import _check_chain, certify_chain, chain_tables, least_flows
from verispec.bounds.multistep import optimal_block_efficiency
from verispec.errors import ProblemTooLargeError
from verispec.simulator import ContextFreeProblem, analyze, parse_tree, sun_toy_problem
from verispec.simulator.problem_files import problem_from_json, problem_to_json
from verispec.verifiers import get_verifier

chain_problems = st.fixed_dictionaries(dict(
    vocab_size=st.integers(2, 3), seed=st.integers(0, 10**6), concentration=st.sampled_from([0.5, 1.0, 3.0]),
    divergence=st.sampled_from([0.0, 0.3, 0.8, 1.0]), zero_fraction=st.sampled_from([0.0, 0.3])))


def _exact(problem, depth):
    """The problem with its decimal conditionals read as Fractions (rows that sum to one exactly)."""
    return problem_from_json(json.loads(json.dumps(problem_to_json(problem, depth))), exact=True)


@given(args=chain_problems, depth=st.integers(1, 4))
@settings(max_examples=12)
def test_single_path_form_equals_the_full_lp_and_block_verification(args, depth):
    problem = build_problem(dict(args, depth=depth))
    drafter = parse_tree(f"chain:{depth}")
    single = optimal_block_efficiency(problem, drafter)
    assert single.num_variables == sum(problem.vocab_size ** k for k in range(1, depth + 1))
    if depth <= 3:
        full = optimal_block_efficiency(problem, drafter, form="full")
        assert single.block_efficiency == pytest.approx(full.block_efficiency, abs=1e-9)
    block = analyze(problem, drafter, get_verifier("bv"))
    assert single.block_efficiency == pytest.approx(float(block.block_efficiency), abs=1e-9)
    confirmed = analyze(problem, drafter, single.verifier)
    assert confirmed.tv_distance < 1e-9
    assert float(confirmed.block_efficiency) == pytest.approx(single.block_efficiency, abs=1e-9)


@given(args=chain_problems, depth=st.integers(1, 3))
@settings(max_examples=8)
def test_certificate_equals_block_verification_in_fractions(args, depth):
    problem = _exact(build_problem(dict(args, depth=depth)), depth)
    drafter = parse_tree(f"chain:{depth}")
    result = optimal_block_efficiency(problem, drafter, certify=True)
    block = analyze(problem, drafter, get_verifier("bv"))
    assert isinstance(block.block_efficiency, Fraction)
    assert result.certificate.optimum == block.block_efficiency


def test_certificate_on_sun_toy_in_both_forms():
    for form in ("auto", "full"):
        result = optimal_block_efficiency(sun_toy_problem(exact=True), parse_tree("chain:2"), certify=True, form=form)
        assert result.certificate.optimum == Fraction(20, 9)


def test_least_flows_at_one_position_by_hand():
    p, q = [0.5, 0.3, 0.2], [0.2, 0.6, 0.2]
    result = optimal_block_efficiency(ContextFreeProblem(p, q), parse_tree("chain:1"))
    assert result.block_efficiency == pytest.approx(1 + sum(min(a, b) for a, b in zip(p, q)), abs=1e-12)


def test_corrupted_chain_certificates_are_refused():
    problem = _exact(build_problem(dict(vocab_size=3, depth=3, seed=7, divergence=0.8)), 3)
    target, draft, conditional = chain_tables(problem, 3)
    certificate = certify_chain(target, draft, conditional, 3)
    offsets = np.cumsum([0, 3, 9, 27])

    def split(values):
        values = np.asarray(values, dtype=object)
        return [values[offsets[k]:offsets[k + 1]] for k in range(3)]

    flows, bound_duals, edge_duals = (split(v) for v in (certificate.flows, certificate.bound_duals,
                                                         certificate.edge_duals))
    _check_chain(target, draft, conditional, flows, bound_duals, edge_duals, 3)  # the genuine one passes
    assert [list(f) for f in flows] == [list(f) for f in least_flows(target, draft, conditional, 3)]
    raised = [b.copy() for b in bound_duals]
    raised[0][int(np.argmax(raised[0]))] += Fraction(1, 1000)  # a dual row above its cost
    with pytest.raises(CertificateError):
        _check_chain(target, draft, conditional, flows, raised, edge_duals, 3)
    lowered = [f.copy() for f in flows]
    level = next(k for k in range(3) if any(v > 0 for v in lowered[k]))
    index = next(i for i, v in enumerate(lowered[level]) if v > 0)
    lowered[level][index] -= Fraction(1, 10**9)  # below a lower bound or an edge row
    with pytest.raises(CertificateError):
        _check_chain(target, draft, conditional, lowered, bound_duals, edge_duals, 3)


def test_bound_on_chain8_is_block_verification(capsys):
    code = cli.main(["bound", "--target", "0.5,0.3,0.2", "--draft", "0.2,0.6,0.2", "--tree", "chain:8", "--json"])
    data = json.loads(capsys.readouterr().out)
    assert code == 0 and data["lp_variables"] == 3 + 9 + 27 + 81 + 243 + 729 + 2187 + 6561
    block = next(row for row in data["verifiers"] if row["verifier"] == "bv")
    assert data["optimal_block_efficiency"] == pytest.approx(block["block_efficiency"], abs=1e-9)


def test_a_chain_past_the_limit_is_refused_before_anything_is_built():
    # chain:20 at V = 3: 3 + ... + 3^20 = 5.2e9 prefixes; chain:12 at V = 3: 797,160 > 200,000 (exact count)
    problem = ContextFreeProblem([0.5, 0.3, 0.2], [0.2, 0.6, 0.2])
    for depth in (12, 20):
        with pytest.raises(ProblemTooLargeError, match="one per output prefix"):
            optimal_block_efficiency(problem, parse_tree(f"chain:{depth}"))
