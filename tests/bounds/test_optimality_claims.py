"""Two 2026 optimality claims against the multi-step LP (issue 67, items 4 and 5; experiments/optimality_claims.py).

* SpecTr-GBV (arXiv 2604.25925, Theorem 5.3 as quoted): E[tau] = sum_x q(x) [1 - (1 - min(p/q, 1))^K], x over the
  drafted prefixes of K i.i.d. paths of length L. The formula is written here again, by enumeration in rationals.
  At a witness (K = 2, L = 2, V = 2) it exceeds the optimum of every valid verifier, proved in rationals; where
  p = q it equals the optimum (so the comparison can fail), and at one position with K = 2 it is below the
  optimum (the formula is no upper bound either: the OT value, by brute force over every token set, exceeds it).
* Greedy drafts (Hu et al., arXiv 2502.18779; UniVer's drafts as read, arXiv 2605.04543): at one position the
  optimum is Hu et al.'s rule, p(G) + sum min(p, q~) in closed form; on ``greedy-tree:2,2`` it is strictly above
  the node-local rule ``greedy`` (1 + a + a^2 on a context-free problem), so a rule coupling the levels has room.
  The broken twin (q in place of q~) misses the one-position optimum.
"""

from __future__ import annotations

import itertools
from fractions import Fraction

import pytest

from tests.support.scripts import load_script
from verispec.bounds.multistep import optimal_block_efficiency
from verispec.simulator import ContextFreeProblem, analyze, parse_tree
from verispec.verifiers import get_verifier


def _quoted_formula(p, q, paths: int, depth: int) -> Fraction:
    """sum over every sequence x of length 1..depth of q(x) [1 - (1 - min(p(x)/q(x), 1))^K], p(x) and q(x) the
    products of a context-free problem's token probabilities."""
    total = Fraction(0)
    for length in range(1, depth + 1):
        for sequence in itertools.product(range(len(p)), repeat=length):
            target = draft = Fraction(1)
            for token in sequence:
                target, draft = target * p[token], draft * q[token]
            if draft:
                total += draft * (1 - (1 - min(target / draft, Fraction(1))) ** paths)
    return total


def _ot_value(p, q, paths: int) -> Fraction:
    """The best P(accept) of K i.i.d. drafts at one position: 1 + min over every token set H of p(H) - q(H)^K."""
    best = Fraction(0)
    for mask in range(1 << len(p)):
        members = [i for i in range(len(p)) if mask >> i & 1]
        best = min(best, sum((p[i] for i in members), Fraction(0)) - sum((q[i] for i in members), Fraction(0)) ** paths)
    return 1 + best


def _same(value, exact: Fraction) -> bool:
    """``value`` is ``exact``: equal as rationals when the engine kept Fractions, else to 1e-12."""
    return value == exact if isinstance(value, Fraction) else abs(float(value) - float(exact)) <= 1e-12


def _exact(values) -> list[Fraction]:
    return [Fraction(value) for value in values]


def _certified(p, q, spec: str) -> Fraction:
    """E[tau + 1] of the best valid verifier, proved in rationals (a primal and a dual solution checked exactly)."""
    problem = ContextFreeProblem(_exact(p), _exact(q), exact=True)
    return optimal_block_efficiency(problem, parse_tree(spec), certify=True, limit=10 ** 9,
                                    max_nonzeros=10 ** 10).certificate.optimum


WITNESS_P, WITNESS_Q = ("1/4", "3/4"), ("3/4", "1/4")


def test_the_quoted_formula_exceeds_every_valid_verifier_on_two_iid_paths():
    claimed = _quoted_formula(_exact(WITNESS_P), _exact(WITNESS_Q), 2, 2)
    assert claimed == Fraction(11, 9)  # by hand: 5/12 + 1/4 at depth 1, 17/144 + 3/16 + 3/16 + 1/16 at depth 2
    optimum = _certified(WITNESS_P, WITNESS_Q, "iid:2,2") - 1
    assert optimum == Fraction(299, 256) and optimum < claimed


def test_negative_control_where_p_equals_q_the_formula_is_the_optimum():
    # every drafted prefix is accepted: E[tau] = L on both sides, so the strict inequality above can fail
    p = ("1/3", "2/3")
    assert _quoted_formula(_exact(p), _exact(p), 2, 2) == 2 == _certified(p, p, "iid:2,2") - 1


def test_negative_control_at_one_position_the_formula_is_below_the_ot_value():
    # Sun et al.'s toy, K = 2, L = 1: the formula gives 5/6, the OT value (reached by otlp) 8/9
    p, q = _exact(("1/3", "2/3")), _exact(("2/3", "1/3"))
    assert _quoted_formula(p, q, 2, 1) == Fraction(5, 6)
    assert _ot_value(p, q, 2) == Fraction(8, 9) == _certified(("1/3", "2/3"), ("2/3", "1/3"), "iid:2,1") - 1
    otlp = analyze(ContextFreeProblem(p, q, exact=True), parse_tree("iid:2,1"), get_verifier("otlp"))
    assert _same(otlp.block_efficiency, 1 + Fraction(8, 9))


def test_the_experiment_computes_the_same_formula_and_not_its_broken_twin():
    script = load_script("experiments/optimality_claims.py", "optimality_claims_formula")
    p, q = _exact(("1/3", "2/3")), _exact(("2/3", "1/3"))
    problem = ContextFreeProblem(p, q, exact=True)
    for paths, depth in ((1, 2), (2, 3), (4, 2)):
        assert script.claimed_acceptance(problem, paths, depth) == _quoted_formula(p, q, paths, depth)
    assert script.claimed_acceptance(problem, 1, 2) == Fraction(12, 9)  # the per-length coupling bound, Sun's toy
    # the broken twin, the K-th power taken outside the sum (P(one of K drafts passes its own test)), is 8/9 here
    twin = 1 - (1 - sum(min(a, b) for a, b in zip(p, q))) ** 2
    assert twin == Fraction(8, 9) != script.claimed_acceptance(problem, 2, 1)


GREEDY_P, GREEDY_Q = ("1/6", "1/3", "1/2"), ("1/2", "1/3", "1/6")


def _greedy_acceptance(p, q, residual: bool = True) -> Fraction:
    """Hu et al.'s acceptance with K = 2: G = {argmax q}, X ~ q~ = q on the rest renormalised; p(G) + sum over the
    rest of min(p, q~). ``residual=False``: the broken twin, min(p, q) on the rest."""
    top = max(range(len(q)), key=lambda token: (q[token], -token))
    rest = 1 - q[top]
    return p[top] + sum(min(p[t], q[t] / rest if residual else q[t]) for t in range(len(p)) if t != top)


def test_at_one_position_hu_et_als_rule_is_the_optimum_of_greedy_drafts():
    p, q = _exact(GREEDY_P), _exact(GREEDY_Q)
    optimum = _certified(GREEDY_P, GREEDY_Q, "greedy:2")
    assert optimum == 1 + _greedy_acceptance(p, q) == Fraction(11, 6)
    assert _same(analyze(ContextFreeProblem(p, q, exact=True), parse_tree("greedy:2"),
                         get_verifier("greedy")).block_efficiency, optimum)
    assert optimum != 1 + _greedy_acceptance(p, q, residual=False)  # the broken twin is caught


def test_on_greedy_trees_of_depth_two_the_node_local_rule_is_below_the_optimum():
    p, q = _exact(GREEDY_P), _exact(GREEDY_Q)
    accept = _greedy_acceptance(p, q)
    greedy = analyze(ContextFreeProblem(p, q, exact=True), parse_tree("greedy-tree:2,2"), get_verifier("greedy"))
    assert _same(greedy.block_efficiency, 1 + accept + accept ** 2)  # context-free: each level accepts a alone
    optimum = _certified(GREEDY_P, GREEDY_Q, "greedy-tree:2,2")
    assert optimum > 1 + accept + accept ** 2


@pytest.mark.parametrize("spec", ["greedy:2", "greedy-tree:2,2"])
def test_negative_control_where_p_equals_q_greedy_is_the_optimum(spec):
    p = _exact(GREEDY_Q)
    greedy = analyze(ContextFreeProblem(p, p, exact=True), parse_tree(spec), get_verifier("greedy"))
    optimum = _certified(GREEDY_Q, GREEDY_Q, spec)
    assert optimum == 1 + parse_tree(spec).depth and _same(greedy.block_efficiency, optimum)
