"""The multi-path optimum of K i.i.d. draft paths (issue 34) and psbv, the position-sharing rule
(verispec.verifiers.psbv, verispec.bounds.path_selection, docs/guides/rules_2025_26.md).

* The selection LP (select a path, verify it by block verification) is the multi-step LP's optimum (1e-9), on the
  issue's example the certified 44067/15625 of docs/guides/verifier_classes.md.
* The per-depth bounds alpha*_d, against brute force over every set of sequences and the issue's 0.988 / 0.865264.
* psbv: lossless exactly (rationals) on the hunt's canonical problems and in float on random ones (500 in the slow
  set); its first depth accepts alpha*_1 exactly (its node split is OT-optimal); it equals the optimum where the
  optimum is one node's (L = 1) or one path's (K = 1) and stays at or below it everywhere (the gaps are the table
  of experiments/multipath_gap.py); its per-outcome law equals its selected-path sum; broken variants are lossy.
* No rule that sees only the drafted nodes reaches the optimum on both problems of a pair that differ in q at one
  prefix: the stacked program is below the sum of the optima, both proved in rationals; psbv attains that bound.
"""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np
import pytest

import verispec.verifiers.psbv as psbv_module
from verispec.bounds.multistep import optimal_block_efficiency
from verispec.bounds.path_selection import (
    depth_bounds,
    drafted_node_cvxpy,
    drafted_node_program,
    selection_optimum,
)
from verispec.hunt import build_problem as build_candidate
from verispec.hunt import canonical_problems, hunt
from verispec.simulator import ContextFreeProblem, TabularProblem, analyze, parse_tree, random_problem
from verispec.simulator.generators import random_context_free_problem
from verispec.simulator.problems import draft_law, target_law
from verispec.verifiers import get_verifier

PSBV = get_verifier("psbv")
ISSUE_P, ISSUE_Q = (0.5, 0.3, 0.2), (0.2, 0.6, 0.2)


def _exact(values):
    return [Fraction(str(v)) for v in values]


def _brute_force_alpha(p, q, paths: int):
    """1 + min over EVERY set H of outcomes of p(H) - q(H)^K (no sorting argument), exact for Fractions."""
    best = 0 * p[0]
    for mask in range(1 << len(p)):
        members = [i for i in range(len(p)) if mask >> i & 1]
        best = min(best, sum((p[i] for i in members), 0 * p[0]) - sum((q[i] for i in members), 0 * q[0]) ** paths)
    return 1 + best


def _sequence_laws(problem, length):
    return (list(np.asarray(target_law(problem, length)).ravel()), list(np.asarray(draft_law(problem, length)).ravel()))


def test_the_issues_depth_bounds_are_the_ot_values_of_the_sequence_laws():
    problem = ContextFreeProblem(_exact(ISSUE_P), _exact(ISSUE_Q), exact=True)
    bounds = depth_bounds(problem, parse_tree("iid:3,2"))
    assert bounds == tuple(_brute_force_alpha(*_sequence_laws(problem, d), 3) for d in (1, 2))
    assert bounds == (Fraction("0.988"), Fraction("0.865264"))  # the issue's numbers
    # P(tau >= 2) of the optimum stays below alpha*_2: the depths trade off
    optimum = selection_optimum(problem, parse_tree("iid:3,2"))
    assert optimum.acceptance[0] == pytest.approx(0.988, abs=1e-9)
    assert optimum.acceptance[1] < 0.865264 - 0.03


def test_depth_two_alone_stays_below_its_ot_bound():
    # P(tau >= 2) needs the first token accepted on the same path: maximised alone it stays below alpha*_2
    problem = ContextFreeProblem(list(ISSUE_P), list(ISSUE_Q))
    alone = selection_optimum(problem, parse_tree("iid:3,2"), depth_weights=(0, 1)).acceptance[1]
    exact = ContextFreeProblem(_exact(ISSUE_P), _exact(ISSUE_Q), exact=True)
    assert alone < float(_brute_force_alpha(*_sequence_laws(exact, 2), 3)) - 0.01


def test_the_optimum_may_give_up_first_depth_acceptance():
    # maximising P(tau >= 1) first (weight 1000) reaches alpha*_1 but loses E[tau + 1] on this problem
    problem = random_problem(2, 3, 1, divergence=1.0)
    drafter = parse_tree("iid:2,3")
    first = selection_optimum(problem, drafter, depth_weights=(1000, 1, 1))
    assert first.acceptance[0] == pytest.approx(_brute_force_alpha(*_sequence_laws(problem, 1), 2), abs=1e-9)
    best = selection_optimum(problem, drafter)
    assert best.block_efficiency == pytest.approx(optimal_block_efficiency(problem, drafter).block_efficiency, abs=1e-9)
    assert first.block_efficiency < best.block_efficiency - 0.01 and best.acceptance[0] < first.acceptance[0] - 0.01


@pytest.mark.parametrize("spec,size,seed", [("iid:2,2", 3, 0), ("iid:3,2", 2, 1), ("iid:2,3", 2, 2), ("iid:3,1", 3, 3)])
def test_the_selection_lp_is_the_multistep_optimum(spec, size, seed):
    problem = random_problem(size, 3, seed, divergence=0.8)
    drafter = parse_tree(spec)
    assert selection_optimum(problem, drafter).block_efficiency == pytest.approx(
        optimal_block_efficiency(problem, drafter).block_efficiency, abs=1e-9)


def test_the_selection_lp_on_the_issue_example_is_the_certified_optimum():
    optimum = selection_optimum(ContextFreeProblem(list(ISSUE_P), list(ISSUE_Q)), parse_tree("iid:3,2"))
    assert optimum.block_efficiency == pytest.approx(44067 / 15625, abs=1e-9)  # docs/guides/verifier_classes.md
    assert sum(optimum.selection.values()) == pytest.approx(1.0, abs=1e-12)


CASES = [(k, length) for k in (1, 2, 3) for length in (1, 2, 3)]


@pytest.mark.parametrize("paths,length", CASES)
def test_psbv_is_lossless_and_at_most_the_optimum_and_its_first_depth_is_alpha_star(paths, length):
    size = 3 if paths ** length <= 9 else 2
    problem = random_problem(size, length, 10 * paths + length, divergence=0.8, concentration=0.7)
    drafter = parse_tree(f"iid:{paths},{length}")
    result = analyze(problem, drafter, PSBV)
    assert result.lossless and result.tv_distance < 1e-12
    optimum = selection_optimum(problem, drafter).block_efficiency
    assert result.block_efficiency <= optimum + 1e-9
    if paths == 1 or length == 1:  # one path: block verification; one node: the OT value, both the optimum
        assert result.block_efficiency == pytest.approx(optimum, abs=1e-9)
    assert result.acceptance_by_depth[0] == pytest.approx(_brute_force_alpha(*_sequence_laws(problem, 1), paths),
                                                          abs=1e-12)


def test_psbv_on_the_issue_example_closes_most_of_the_gap():
    problem = ContextFreeProblem(list(ISSUE_P), list(ISSUE_Q))
    efficiency = {name: analyze(problem, "iid:3,2", get_verifier(name)).block_efficiency
                  for name in ("psbv", "gbv", "khisti")}
    optimum = 44067 / 15625
    assert efficiency["psbv"] <= optimum + 1e-12
    assert (efficiency["psbv"] - efficiency["khisti"]) / (optimum - efficiency["khisti"]) > 0.9
    assert efficiency["psbv"] > efficiency["gbv"] + 0.15


def _canonical_cases():
    for spec in ("iid:2,1", "iid:2,2", "iid:3,1", "chain:2"):
        depth = parse_tree(spec).depth
        for canonical in canonical_problems(depth, max_vocab=3):
            yield spec, canonical


@pytest.mark.parametrize("spec,canonical", list(_canonical_cases()), ids=lambda x: getattr(x, "label", x))
def test_psbv_is_exactly_lossless_on_the_canonical_problems(spec, canonical):
    problem = build_candidate(canonical.candidate, exact=True)
    result = analyze(problem, spec, PSBV)
    assert result.tv_distance == 0 and isinstance(result.block_efficiency, Fraction)


def _random_case(index: int):
    """A problem at V <= 4 and a tree iid:K,L with K, L <= 3 (context-free or not, diverging drafts)."""
    rng = np.random.default_rng(index)
    paths, length = int(rng.integers(1, 4)), int(rng.integers(1, 4))
    size = int(rng.integers(2, 5)) if paths * length <= 6 else int(rng.integers(2, 4))
    divergence = float(rng.choice([0.1, 0.5, 1.0]))
    if index % 3 == 0:
        problem = random_context_free_problem(size, index, divergence=divergence, concentration=0.5)
    else:
        problem = random_problem(size, length, index, divergence=divergence, concentration=0.5,
                                 zero_fraction=0.2 if index % 5 == 0 else 0.0)
    return problem, f"iid:{paths},{length}"


def _check_random_case(index: int):
    # the law tree by tree (the selection integrated per tree) where the trees are few, else the selected-path sum
    problem, spec = _random_case(index)
    small = parse_tree(spec).log_num_outcomes(problem.vocab_size) <= np.log(256)
    result = analyze(problem, spec, PSBV, method="closed-form" if small else "rule-dp")
    assert result.tv_distance < 1e-12, f"psbv on {spec}, case {index}: TV {result.tv_distance}"


@pytest.mark.parametrize("index", range(20))
def test_psbv_is_lossless_on_random_problems(index):
    _check_random_case(index)


@pytest.mark.slow
def test_psbv_is_lossless_on_500_random_problems():
    # indices 0-19 are the parametrized cells above: together the 500 problems
    for index in range(20, 500):
        _check_random_case(index)


@pytest.mark.parametrize("spec,size", [("iid:2,2", 3), ("iid:3,2", 2), ("iid:2,3", 2)])
def test_the_selected_path_sum_is_the_per_outcome_law(spec, size):
    problem = random_problem(size, 3, 4, divergence=0.7, concentration=0.5)
    oracle = analyze(problem, spec, PSBV, method="closed-form")
    summed = analyze(problem, spec, PSBV, method="rule-dp")
    assert summed.method == "rule-dp"
    for a, b in zip(oracle.output_law.by_length, summed.output_law.by_length):
        assert np.max(np.abs(np.asarray(a, dtype=float) - np.asarray(b, dtype=float))) <= 1e-12


def test_in_rationals_the_law_the_sum_and_the_procedure_agree():
    problem = ContextFreeProblem([Fraction(1, 2), Fraction(1, 3), Fraction(1, 6)],
                                 [Fraction(1, 6), Fraction(1, 2), Fraction(1, 3)], exact=True)
    drafter = parse_tree("iid:2,2")
    oracle = analyze(problem, drafter, PSBV, method="closed-form")
    summed = analyze(problem, drafter, PSBV, method="rule-dp")
    assert oracle.tv_distance == 0 == summed.tv_distance
    assert oracle.block_efficiency == summed.block_efficiency
    for tree, _ in drafter.outcomes(problem)[:12]:
        assert (PSBV.emission_law(tree) == PSBV.enumerated_emission_law(tree)).all()


def test_verifying_the_selected_path_with_the_plain_draft_is_lossy(monkeypatch):
    # negative control: the selected path is not distributed as q, so block verification with q is lossy
    problem = ContextFreeProblem(list(ISSUE_P), list(ISSUE_Q))
    assert analyze(problem, "iid:3,2", PSBV, method="closed-form").tv_distance < 1e-12
    q = np.asarray(ISSUE_Q)
    monkeypatch.setattr(psbv_module, "_selected_drafts", lambda states, nodes: [q for _ in nodes[:-1]])
    assert analyze(problem, "iid:3,2", PSBV, method="closed-form").tv_distance > 1e-3


def test_selecting_uniformly_is_lossy(monkeypatch):
    # negative control: the selection must be the smallest position's, not a uniform pick among the paths
    problem = ContextFreeProblem(list(ISSUE_P), list(ISSUE_Q))

    def uniform(measures, copies):
        total = sum(copies)
        return [c / total for c in copies]

    monkeypatch.setattr(psbv_module, "selection_probabilities", uniform)
    assert analyze(problem, "iid:3,2", PSBV, method="closed-form").tv_distance > 1e-3


def _pair_differing_in_q_at_one_prefix():
    """Two problems at V = 3 equal everywhere but at prefix (1,), where the draft is the target's point mass in the
    first and misses it in the second (docs/guides/rules_2025_26.md)."""
    def vector(text):
        return [Fraction(x) for x in text.split()]

    third = [Fraction(1, 3)] * 3
    target = {(): vector("3/10 1/2 1/5"), (0,): vector("0 1/5 4/5"), (1,): vector("0 1 0"), (2,): vector("1/2 1/2 0")}
    draft = {(): vector("7/10 1/5 1/10"), (0,): vector("3/5 3/10 1/10"), (1,): vector("0 1 0"),
             (2,): vector("0 1/2 1/2")}
    target.update({u: third for u in itertools.product(range(3), repeat=2)})
    other = dict(draft)
    other[(1,)] = vector("4/5 0 1/5")
    return (TabularProblem(3, target, draft, exact=True, horizon=2),
            TabularProblem(3, target, other, exact=True, horizon=2))


def test_no_drafted_node_rule_reaches_the_optimum_on_both_problems():
    first, second = _pair_differing_in_q_at_one_prefix()
    drafter = parse_tree("iid:2,2")
    bound = drafted_node_program([first, second], drafter, certify=True)
    assert bound.tied_trees > 0
    joint, optima = bound.exact["joint"], bound.exact["optima"]
    assert joint < sum(optima)  # proved in rationals: every drafted-node rule loses sum(optima) - joint
    efficiencies = [analyze(problem, drafter, PSBV).block_efficiency for problem in (first, second)]
    assert all(e <= o for e, o in zip(efficiencies, optima))
    assert sum(efficiencies) == joint  # psbv is the best drafted-node rule on this pair (exact engine)


def test_the_drafted_node_class_in_cvxpy_has_the_certified_optimum():
    # the same class as cvxpy constraints: the rational optimum of docs/guides/rules_2025_26.md to cvxpy's tolerance,
    # and
    # without the ties (negative control) the sum of the two problems' own certified optima
    pair = list(_pair_differing_in_q_at_one_prefix())
    drafter = parse_tree("iid:2,2")
    assert drafted_node_cvxpy(pair, drafter) == pytest.approx(22181 / 5000, abs=1e-6)
    assert drafted_node_cvxpy(pair, drafter, tied=False) == pytest.approx(23981 / 10000 + 20581 / 10000, abs=1e-6)


def test_the_drafted_node_program_is_the_optimum_when_nothing_differs():
    # control: two copies of one problem tie every tree, and the program is twice the optimum
    first, _ = _pair_differing_in_q_at_one_prefix()
    bound = drafted_node_program([first, first], parse_tree("iid:2,2"), certify=True)
    assert bound.exact["joint"] == 2 * bound.exact["optima"][0]


def test_the_hunt_finds_no_witness_against_psbv():
    result = hunt(PSBV, parse_tree("iid:2,2"), max_examples=25, time_budget=120)
    assert result.witness is None and result.canonical_complete


@pytest.mark.slow
def test_the_gap_table_script_bounds_every_rule_by_the_optimum(tmp_path):
    # experiments/multipath_gap.py with one problem per cell: every registered rule valid for iid trees, and for the
    # delayed trees, is at most the selection LP's optimum (a check of that LP as an upper bound), and the tables are
    # written
    import json

    from tests.support.scripts import load_script

    module = load_script("experiments/multipath_gap.py")
    rows = module.run(1, tmp_path / "gap", progress=False, write_csv=True)
    iid = [row for row in rows if row["L1"] == 0]
    assert {row["rule"] for row in iid} == set(module.valid_rules("iid:2,2")) >= {"psbv", "gbv", "khisti"}
    assert all(row["gap"] >= -1e-9 for row in rows)
    assert len(iid) == len(module.valid_rules("iid:2,2")) * (len(module.TREES) * len(module.VOCABS)
                                                             - len(module.SKIPPED)) * len(module.DIVERGENCES)
    delayed_specs = [f"delayed:{k},{l1},{l2}" for k, l1, l2 in module.DELAYED_TREES]
    assert len(rows) - len(iid) == sum(len(module.valid_rules(spec)) for spec in delayed_specs) * len(
        module.DELAYED_VOCABS) * len(module.DIVERGENCES)
    table = (tmp_path / "gap.md").read_text()
    assert "| 3 | 3 | 3 | 1 |" in table and "psbv closes" in table and (tmp_path / "gap.csv").exists()
    assert "## Delayed trees" in table and "| 3 | 2 | 1 | 4 | 1 |" in table
    result = json.loads((tmp_path / "gap.json").read_text())
    assert result["problems"] == len(iid) // len(module.valid_rules("iid:2,2"))
    assert result["delayed"]["trees"] == sorted(delayed_specs)
