"""Restricted classes of the multi-step LP, and verifiers with their own draft laws at their LP optimum.

* "selected-path" (Thomas & Pal 2026, arXiv 2602.16961: block verification on a greedily selected path):
  GBV <= class optimum <= unrestricted optimum, equality on a single path, the class's optimal verifier is
  lossless, emits only on the selected path (selected here independently of the code: the
  lexicographically largest root-to-leaf path under the keys (p/q, token id)), and GBV attains the class
  optimum (the averaging argument in verispec/bounds/multistep.py).
* SpecHub (``hub``) and Hu et al.'s greedy drafts (``greedy:K``) reach the single-position OT optimum of their
  own draft laws, and the multi-step LP on those trees equals their block efficiency.
"""

from __future__ import annotations

import json
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.strategies import build_problem, problem_args
from verispec import cli
from verispec.bounds.multistep import optimal_block_efficiency
from verispec.errors import ProblemTooLargeError, VerispecError
from verispec.lp_analysis import (
    greedy_draft_law,
    hub_draft_law,
    iid_ot_optimum,
    ot_coupling,
    set_law,
    set_law_ot_optimum,
)
from verispec.simulator import ContextFreeProblem, GreedyDrafter, HubDrafter, analyze, parse_tree
from verispec.verifiers import REGISTRY, get_verifier

F = Fraction

# Problems without 1e-20 probabilities, which HiGHS cannot resolve (see tests/bounds/test_lp_multistep.py).
moderate_problems = st.fixed_dictionaries(dict(
    vocab_size=st.integers(2, 3), seed=st.integers(0, 10**6), concentration=st.sampled_from([0.5, 1.0, 3.0]),
    divergence=st.sampled_from([0.0, 0.3, 0.8, 1.0]), zero_fraction=st.sampled_from([0.0, 0.3])))


def _key(p, q, token):
    """GBV's documented order: (p/q, token id), undrafted tokens above every drafted one, and ratios that
    differ by at most 1e-12 relative (chained, in sorted order) counting as equal (README, "Ties")."""
    if q[token] == 0:
        return (1, 0, token)
    ratios = sorted(p[t] / q[t] for t in range(len(q)) if q[t] > 0)
    tie_class = [0]
    for low, high in zip(ratios, ratios[1:]):
        tie_class.append(tie_class[-1] + (high - low > 1e-12 * max(abs(low), abs(high))))
    return (0, tie_class[ratios.index(p[token] / q[token])], token)


def _selected_path(tree):
    """The lexicographically largest root-to-leaf node path under the per-node keys (not a greedy descent)."""
    leaves = [n for n in range(tree.num_nodes) if not tree.child_nodes[n]]

    def nodes_to(leaf):
        path = [leaf]
        while path[-1] != 0:
            path.append(int(tree.parent[path[-1]]))
        return path[::-1]

    def keys(path):
        return [_key(tree.p[a], tree.q[a], int(tree.token[b])) for a, b in zip(path, path[1:])]

    return max((nodes_to(leaf) for leaf in leaves), key=keys)


# --- the selected-path class --------------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("spec", ["iid:2,1", "iid:2,2", "iid:3,1", "chain:1", "chain:2", "chain:3"])
@given(args=moderate_problems)
@settings(max_examples=8)
def test_selected_path_class_between_gbv_and_the_optimum(spec, args):
    drafter = parse_tree(spec)
    problem = build_problem(dict(args, depth=drafter.depth))
    full = optimal_block_efficiency(problem, drafter).block_efficiency
    restricted = optimal_block_efficiency(problem, drafter, restriction="selected-path")
    gbv = float(analyze(problem, drafter, get_verifier("gbv")).block_efficiency)
    assert gbv <= restricted.block_efficiency + 1e-9
    assert restricted.block_efficiency <= full + 1e-9
    if spec.startswith("chain"):
        block = float(analyze(problem, drafter, get_verifier("bv")).block_efficiency)
        assert restricted.block_efficiency == pytest.approx(block, abs=1e-9)
        assert full == pytest.approx(block, abs=1e-9)
    confirmed = analyze(problem, drafter, restricted.verifier)
    assert confirmed.tv_distance < 1e-9
    assert float(confirmed.block_efficiency) == pytest.approx(restricted.block_efficiency, abs=1e-9)
    for tree, _ in drafter.outcomes(problem):
        law = restricted.verifier.emission_law(tree)
        off_path = np.setdiff1d(np.arange(tree.num_nodes), _selected_path(tree))
        assert not law[off_path].any()


# On the deeper trees, concentration 0.5 gives draft outcomes of probability 1e-24, below what HiGHS resolves
# (the class LP then gains ~1e-9 by a ~1e-9 loss of losslessness, or fails loudly with SolverError).
smooth_problems = st.fixed_dictionaries(dict(
    vocab_size=st.integers(2, 3), seed=st.integers(0, 10**6), concentration=st.sampled_from([1.0, 3.0]),
    divergence=st.sampled_from([0.0, 0.3, 0.8, 1.0]), zero_fraction=st.sampled_from([0.0, 0.3])))


@pytest.mark.parametrize("spec", ["iid:2,1", "iid:3,1", "iid:2,2", "iid:3,2", "iid:2,3"])
@given(args=smooth_problems)
@settings(max_examples=5)
def test_gbv_is_optimal_in_its_class(spec, args):
    # The finding: GBV attains the selected-path optimum (the averaging argument of the multistep docstring).
    drafter = parse_tree(spec)
    problem = build_problem(dict(args, depth=drafter.depth))
    restricted = optimal_block_efficiency(problem, drafter, restriction="selected-path")
    gbv = analyze(problem, drafter, get_verifier("gbv"))
    assert float(gbv.block_efficiency) == pytest.approx(restricted.block_efficiency, abs=1e-9)


def test_selected_path_class_by_hand():
    # p = q = (1/2, 1/2), two i.i.d. drafts of one token. Any verifier: both tokens are drafted w.p. 1/2 and
    # the OT optimum is alpha* = 1 (emit 0 from {0,0}, 1 from {1,1}, either from {0,1}), so E[tau+1] = 2.
    # Selected path: keys tie on p/q, so token 1 wins whenever drafted (probability 3/4); only it may be
    # accepted, so P(tau = 1) <= min(p(1), 3/4) + min(p(0), 1/4) = 3/4 and the class optimum is 7/4.
    half = [F(1, 2), F(1, 2)]
    drafter = parse_tree("iid:2,1")
    problem = ContextFreeProblem(half, half, exact=False)
    assert optimal_block_efficiency(problem, drafter).block_efficiency == pytest.approx(2, abs=1e-9)
    restricted = optimal_block_efficiency(problem, drafter, restriction="selected-path")
    assert restricted.block_efficiency == pytest.approx(7 / 4, abs=1e-9)
    assert analyze(ContextFreeProblem(half, half, exact=True), drafter, get_verifier("gbv")).block_efficiency == F(7, 4)


@given(args=moderate_problems, branches=st.integers(1, 3))
@settings(max_examples=10)
def test_one_position_optimum_is_one_plus_alpha_star(args, branches):
    # At one position the best E[tau + 1] is 1 + alpha*, the OT optimum (closed form of single_position.py),
    # attained by a verifier that reads only the root's conditionals: there the on-path class is no smaller.
    problem = build_problem(dict(args, depth=1))
    alpha = iid_ot_optimum(problem.target(()), problem.draft(()), branches).alpha
    optimum = optimal_block_efficiency(problem, parse_tree(f"iid:{branches},1"))
    assert optimum.block_efficiency == pytest.approx(1 + alpha, abs=1e-9)


def test_lp_size_by_hand():
    # chain:1 at V = 2 with full-support conditionals: 2 draft outcomes of 2 nodes, so 2 * 2 * 2 = 8 emission
    # variables z, plus one flow variable F(u) per prefix of length 1..L: 2; 10 variables.
    # Rows: 2 flow rows (length 1), 4 final rows (length 2), 2 outcome rows, minus the implied final row of
    # (0, 0): 7. Nonzeros: every z sits in one prefix row and its outcome row (16); every F(u) in its own row
    # and in the V = 2 final rows of its children (6): 22 before the drop, which removes the entries of
    # F(0) (coefficient p(0 | 0) > 0) and of the leaf z that emits (0, 0): 20.
    # The selected-path class on a chain keeps every node, so it is the same LP.
    # The single-path form (form="auto" on a chain, chain_lp.py) has one variable F(u) per prefix of length
    # 1..L and one row per edge u -> u t with |u| >= 1, two nonzeros each: chain:1 at V = 2 has 2 variables and
    # no row, chain:2 has 2 + 4 variables and 4 rows (8 nonzeros).
    problem = build_problem(dict(vocab_size=2, depth=1, seed=3))
    for restriction in (None, "selected-path"):
        optimum = optimal_block_efficiency(problem, parse_tree("chain:1"), restriction=restriction, form="full")
        assert (optimum.num_variables, optimum.num_constraints, optimum.num_nonzeros) == (10, 7, 20)
        assert optimum.num_draft_outcomes == 2
        single = optimal_block_efficiency(problem, parse_tree("chain:1"), restriction=restriction)
        assert (single.num_variables, single.num_constraints, single.num_nonzeros) == (2, 0, 0)
    deeper = build_problem(dict(vocab_size=2, depth=2, seed=3))
    single = optimal_block_efficiency(deeper, parse_tree("chain:2"))
    assert (single.num_variables, single.num_constraints, single.num_nonzeros) == (6, 4, 8)
    with pytest.raises(ProblemTooLargeError, match="22 nonzero coefficients"):
        optimal_block_efficiency(problem, parse_tree("chain:1"), max_nonzeros=21, form="full")


def test_unknown_restriction_is_a_clear_error():
    problem = build_problem(dict(vocab_size=2, depth=1, seed=0))
    with pytest.raises(VerispecError, match="restriction 'on-path'"):
        optimal_block_efficiency(problem, parse_tree("iid:2,1"), restriction="on-path")


# --- own draft laws at their optimum ------------------------------------------------------------------------

@st.composite
def rational_problems(draw, sizes=(2, 6)):
    """Context-free problems with small rational p and q, zeros and ties included."""
    size = draw(st.integers(*sizes))

    def vector():
        weights = draw(st.lists(st.integers(0, 5), min_size=size, max_size=size).filter(lambda w: sum(w) > 0))
        return [F(w, sum(weights)) for w in weights]

    return ContextFreeProblem(vector(), vector(), exact=True)


def _root_law(drafter, problem):
    """The law of the root's ordered child list, read off the simulator's drafter."""
    law = {}
    for tree, probability in drafter.outcomes(problem):
        law[tree.child_tokens[0]] = law.get(tree.child_tokens[0], 0) + probability
    return law


@settings(max_examples=30)
@given(problem=rational_problems())
def test_explicit_own_draft_laws_match_the_drafters(problem):
    assert hub_draft_law(problem.q) == _root_law(HubDrafter(1), problem)
    for branches in (1, 2, 3):
        assert greedy_draft_law(problem.q, branches) == _root_law(GreedyDrafter(branches), problem)


OWN_LAWS = [("hub", "spechub", hub_draft_law), ("greedy:2", "greedy", lambda q: greedy_draft_law(q, 2)),
            ("greedy:3", "greedy", lambda q: greedy_draft_law(q, 3))]


@pytest.mark.parametrize("spec,name,draft_law", OWN_LAWS)
@given(args=problem_args(vocab=(2, 6), depth=(1, 1)))
@settings(max_examples=20)
def test_own_draft_law_verifiers_reach_the_ot_optimum(spec, name, draft_law, args):
    problem = build_problem(args)
    p, q = problem.target(()), problem.draft(())
    law = draft_law(q)
    acceptance = float(analyze(problem, parse_tree(spec), REGISTRY[name]).acceptance_by_depth[0])
    assert acceptance == pytest.approx(ot_coupling(p, law).optimum, abs=1e-9)
    assert acceptance == pytest.approx(set_law_ot_optimum(p, set_law(law)).alpha, abs=1e-9)  # max-flow form


@pytest.mark.parametrize("spec,name,draft_law", OWN_LAWS)
@given(args=moderate_problems, size=st.integers(2, 6))
@settings(max_examples=8)
def test_multistep_optimum_on_own_draft_laws_is_their_block_efficiency(spec, name, draft_law, args, size):
    drafter = parse_tree(spec)
    problem = build_problem(dict(args, vocab_size=size, depth=1))
    optimum = optimal_block_efficiency(problem, drafter)
    efficiency = float(analyze(problem, drafter, REGISTRY[name]).block_efficiency)
    assert efficiency == pytest.approx(optimum.block_efficiency, abs=1e-9)


# --- 'verispec bound --restriction' -------------------------------------------------------------------------

def _bound(capsys, *extra):
    code = cli.main(["bound", "--target", "1/2,1/2", "--draft", "1/2,1/2", "--tree", "iid:2,1", "--json", *extra])
    return code, json.loads(capsys.readouterr().out)


def test_bound_with_restriction_compares_with_the_class_optimum(capsys):
    code, data = _bound(capsys, "--restriction", "selected-path")
    assert code == 0 and data["restriction"] == "selected-path"
    assert data["optimal_block_efficiency"] == pytest.approx(7 / 4, abs=1e-9)  # test_selected_path_class_by_hand
    rows = {row["verifier"]: row for row in data["verifiers"]}
    assert rows["gbv"]["ratio"] == pytest.approx(1.0, abs=1e-9)
    assert rows["otlp"]["ratio"] == pytest.approx(2 / (7 / 4), abs=1e-9)  # outside the class: above 1


def test_bound_without_restriction_lists_the_class_optimum(capsys):
    code, data = _bound(capsys)
    assert code == 0 and data["restriction"] is None
    assert data["optimal_block_efficiency"] == pytest.approx(2, abs=1e-9)
    assert data["class_optima"]["selected-path"] == pytest.approx(7 / 4, abs=1e-9)
    assert cli.main(["bound", "--target", "1/2,1/2", "--draft", "1/2,1/2", "--tree", "iid:2,1"]) == 0
    assert "LP optimum (selected-path class)" in capsys.readouterr().out
