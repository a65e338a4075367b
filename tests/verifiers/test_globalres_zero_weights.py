"""Global Resolution where an outer tuple's drafts all weigh 0 (arXiv 2511.15898's outer system; verispec's rule in
``lp_analysis.global_resolution``). At p = (1/3, 1/9, 5/9), q = (1/4, 1/3, 5/12), K = 2 the solver puts token 1's
outer weight near e^-37 (9e-17); exact mode once rounded it to 0 and the draft pair (1, 1) divided 0 by 0
(ZeroDivisionError in exact mode; NaN in the float laws of such a rule). The outer system has no reject (every
tuple with a draft outside H* is accepted, as one of those drafts), so an all-zero outer pool chooses its draws
alike, the limit of equal weights.

Held to computations written here in rationals: alpha* by brute force over token subsets, and Khisti et al.'s
two-step frame (arXiv 2410.18234) enumerated over every ordered tuple of drafts: step 1 the count-weighted Luce
choice (written out below), p_I its average, step 2 accept min(1, p / p_I), else norm((p - p_I)+). Broken twins
(a rule that rejects an all-zero outer pool, with its p_I written consistently or left as the solver's; one that
chooses the distinct tokens of the pool alike instead of its draws) are caught."""

from __future__ import annotations

import dataclasses
import itertools
import json
from fractions import Fraction

import numpy as np
import pytest

from verispec.cli import main
from verispec.lp_analysis.global_resolution import Multisets, Resolution, _marginals, resolve
from verispec.simulator import ContextFreeProblem, analyze
from verispec.verifiers.globalres import GlobalResolutionSolver
from verispec.verifiers.tree_walk import TopDownVerifier

P = [Fraction(1, 3), Fraction(1, 9), Fraction(5, 9)]
Q = [Fraction(1, 4), Fraction(1, 3), Fraction(5, 12)]


def rational(values):
    return np.array([Fraction(value) for value in values], dtype=object)


def alpha_star(p, q, num_drafts):
    """1 + min over every token subset H of p(H) - q(H)^K, in rationals."""
    size = len(p)
    return 1 + min(sum(p[list(subset)], Fraction(0)) - sum(q[list(subset)], Fraction(0)) ** num_drafts
                   for count in range(size + 1) for subset in itertools.combinations(range(size), count))


def step_one(weights, inner, drafts, *, zero_pool="alike-draws"):
    """The law of Y' for one ordered tuple of drafts {token: probability}: a tuple with a draft outside H* picks
    one of those draws, draw i with weight w(x_i); an inner tuple picks a draw or rejects with weight 1. An outer
    pool of total weight 0: ``zero_pool`` "alike-draws" (the rule), "alike-tokens" or "reject" (broken twins)."""
    outer = [token for token in drafts if not inner[token]]
    pool, reject = (outer, 0) if outer else (list(drafts), 1)
    weigh = [weights[token] for token in pool]
    if reject == 0 and sum(weigh) == 0:
        if zero_pool == "reject":
            return {}
        weigh = [Fraction(1, pool.count(token)) if zero_pool == "alike-tokens" else Fraction(1) for token in pool]
    total = reject + sum(weigh, Fraction(0))
    law = {}
    for token, weight in zip(pool, weigh):
        law[token] = law.get(token, Fraction(0)) + Fraction(weight) / total
    return law


def two_step_frame(p, q, weights, inner, num_drafts, zero_pool="alike-draws"):
    """(p_I [V], {drafts: output law [V]}) by enumerating every ordered K-tuple of drafts in rationals."""
    size = len(p)
    tuples = list(itertools.product([token for token in range(size) if q[token]], repeat=num_drafts))
    chosen = {drafts: step_one(weights, inner, drafts, zero_pool=zero_pool) for drafts in tuples}
    intermediate = [Fraction(0)] * size
    for drafts in tuples:
        mass = np.prod([q[token] for token in drafts])
        for token, probability in chosen[drafts].items():
            intermediate[token] += mass * probability
    leftover = [max(p[token] - intermediate[token], Fraction(0)) for token in range(size)]
    outputs = {}
    for drafts in tuples:
        kept = [Fraction(0)] * size
        for token, probability in chosen[drafts].items():
            kept[token] = probability * (min(Fraction(1), p[token] / intermediate[token]) if intermediate[token]
                                         else Fraction(1))
        rest = 1 - sum(kept)
        outputs[drafts] = [kept[token] + (rest * leftover[token] / sum(leftover) if rest else 0)
                           for token in range(size)]
    return intermediate, outputs


def with_zero_weights(resolution: Resolution, tokens, q, num_drafts) -> Resolution:
    """The solver's rule with the outer weights of ``tokens`` set to 0 (what exact mode's rounding to 10^-15 once
    made of weights below 5e-16) and p_I recomputed by the code under test (every token drafted here)."""
    weights = resolution.weights.copy()
    weights[list(tokens)] = 0 * weights[0]
    sets = Multisets.of(q, num_drafts)
    intermediate = _marginals(sets.counts, sets.probability, weights, resolution.inner)
    return dataclasses.replace(resolution, weights=weights, intermediate=intermediate)


class _ZeroPoolTwin(Resolution):
    """A broken twin: an outer pool of total weight 0 is rejected (``zero_pool`` "reject") or its distinct tokens
    chosen alike ("alike-tokens") instead of its draws."""

    zero_pool = "reject"

    def choice(self, row_children):
        law = step_one(self.weights, self.inner, [int(token) for token in row_children], zero_pool=self.zero_pool)
        return list(law.items())


class _AlikeTokensTwin(_ZeroPoolTwin):
    zero_pool = "alike-tokens"


def twin(resolution, kind, intermediate=None):
    fields = {field.name: getattr(resolution, field.name) for field in dataclasses.fields(resolution)}
    if intermediate is not None:
        fields["intermediate"] = rational(intermediate)
    return kind(**fields)


class _FixedRule(GlobalResolutionSolver):
    """The solver with a given step-1 rule at every node (a test's rule or a broken twin)."""

    def __init__(self, fixed):
        super().__init__()
        self.fixed = fixed

    def resolution(self, p, q, num_drafts):
        return self.fixed

    rule = resolution


def exact_run(p, q, num_drafts, solver):
    """(TV distance to p, E[tau + 1]) of the exact engine on iid:K,1 (rationals)."""
    result = analyze(ContextFreeProblem(p, q, exact=True), f"iid:{num_drafts},1", TopDownVerifier(solver))
    return result.tv_distance, result.block_efficiency


def test_the_reported_node_runs_exactly_from_the_command_line(capsys):
    """``verispec exact ... --exact`` on the node that raised ZeroDivisionError: exit 0, TV 0 in rationals, E[tau + 1]
    = 1 + alpha* (alpha* = 1 by brute force) to 1e-12, and the float run the same to 1e-12."""
    argv = ["exact", "--target", "1/3,1/9,5/9", "--draft", "1/4,1/3,5/12", "--tree", "iid:2,1",
            "--verifier", "globalres", "--json"]
    results = []
    for extra in (["--exact"], []):
        code = main(argv + extra)
        captured = capsys.readouterr()
        assert code == 0 and captured.err == "", captured.err
        results.append(json.loads(captured.out))
    exact, floats = results
    assert exact["tv_distance"] == 0 and exact["lossless"] is True
    assert alpha_star(rational(P), rational(Q), 2) == 1
    assert abs(exact["block_efficiency"] - 2) < 1e-12 and abs(floats["block_efficiency"] - 2) < 1e-12


def test_the_solvers_node_is_the_two_step_frame_in_rationals_and_float_agrees():
    """The solver's rule at the reported node: p_I equal to the tuple enumeration, every row's output law equal to
    the enumerated two-step frame, their average p (all exact), acceptance alpha* to 1e-12; the float solver's p_I
    and rows the same to 1e-12. A twin that rejects the pair (1, 1) when token 1 weighs 0 is lossy."""
    p, q = rational(P), rational(Q)
    solver, floats = GlobalResolutionSolver(), GlobalResolutionSolver()
    resolution = solver.resolution(p, q, 2)
    intermediate, outputs = two_step_frame(p, q, resolution.weights, resolution.inner, 2)
    assert list(resolution.intermediate) == intermediate
    average = [Fraction(0)] * 3
    for drafts, expected in outputs.items():
        row = solver.output_laws(p[None, :], q[None, :], np.array([drafts]))[0]
        assert list(row) == expected, drafts
        float_row = floats.output_laws(p.astype(float)[None, :], q.astype(float)[None, :], np.array([drafts]))[0]
        assert np.abs(float_row - np.array(expected, dtype=float)).max() < 1e-12, drafts
        average = [total + Q[drafts[0]] * Q[drafts[1]] * value for total, value in zip(average, expected)]
    assert average == P
    assert abs(sum(min(a, b) for a, b in zip(P, intermediate)) - alpha_star(p, q, 2)) < 1e-12
    float_rule = floats.resolution(p.astype(float), q.astype(float), 2)
    # the same decision: exact mode's outer weights are the float ones exactly (rounded to 10^-15, token 1's 9e-17
    # was 0, the broken twin this replaces)
    outer = np.flatnonzero(~resolution.inner)
    assert [resolution.weights[token] for token in outer] == [Fraction(float_rule.weights[token]) for token in outer]
    assert 0 < resolution.weights[1] < Fraction(1, 10**15)
    assert Fraction(float_rule.weights[1]).limit_denominator(10**15) == 0
    assert np.abs(float_rule.intermediate - np.array(intermediate, dtype=float)).sum() < 1e-12
    assert np.isfinite(float_rule.laws(np.array(list(outputs)))).all()


# (p, q, K, the outer tokens whose weights are set to 0): the reported node, and a node with two outer tokens, where
# the pool (0, 0, 1) tells choosing its draws alike (2/3, 1/3) from choosing its tokens alike (1/2, 1/2)
ZERO_CASES = [(P, Q, 2, (1,)),
              ([Fraction(1, 2), Fraction(1, 4), Fraction(1, 8), Fraction(1, 8)],
               [Fraction(1, 8), Fraction(1, 16), Fraction(5, 16), Fraction(1, 2)], 3, (0, 1))]


@pytest.mark.parametrize("case", range(len(ZERO_CASES)))
def test_an_all_zero_outer_pool_chooses_its_draws_alike_in_both_modes(case):
    """With outer weights exactly 0, exact and float mode take the same decision: the code's p_I, its rows of
    step-1 laws and the engine's output equal the enumerated frame (rationals), the float rule's the same to 1e-12
    (no NaN), and the node is lossless (TV 0). At the reported node the rule is then optimal in rationals
    (acceptance exactly alpha* = 1)."""
    p_list, q_list, num_drafts, zeroed = ZERO_CASES[case]
    p, q = rational(p_list), rational(q_list)
    exact = with_zero_weights(resolve(p, q, num_drafts), zeroed, q, num_drafts)
    floats = with_zero_weights(resolve(p.astype(float), q.astype(float), num_drafts), zeroed, q.astype(float),
                               num_drafts)
    assert all(exact.inner[token] == floats.inner[token] == False for token in zeroed)  # noqa: E712 (outer)
    intermediate, outputs = two_step_frame(p, q, exact.weights, exact.inner, num_drafts)
    assert list(exact.intermediate) == intermediate
    assert np.abs(floats.intermediate - np.array(intermediate, dtype=float)).sum() < 1e-12
    tuples = np.array(list(outputs))
    expected = np.array([[step_one(exact.weights, exact.inner, drafts).get(token, Fraction(0))
                          for token in range(len(p))] for drafts in outputs], dtype=object)
    assert (exact.laws(tuples) == expected).all()
    float_laws = floats.laws(tuples)
    assert np.isfinite(float_laws).all() and np.abs(float_laws - expected.astype(float)).max() < 1e-12
    solver = _FixedRule(exact)
    for drafts, law in outputs.items():
        assert list(solver.output_laws(p[None, :], q[None, :], np.array([drafts]))[0]) == law
    tv, efficiency = exact_run(p, q, num_drafts, solver)
    assert tv == 0
    if case == 0:
        assert intermediate == P and efficiency == 1 + alpha_star(p, q, num_drafts) == 2


def test_broken_twins_of_the_zero_pool_are_caught():
    """Rejecting an all-zero outer pool with the solver's p_I left as it is: lossy (TV > 0.01); with its own p_I
    written consistently: lossless, but its row (1, 1) rejects where float mode picks token 1, and its step-1
    acceptance sum min(p, p_I) is 8/9 < alpha* = 1 (the engine's E[tau + 1] is 2 for both: the residual then
    emits token 1, a draft); choosing the pool's
    distinct tokens alike: lossy by TV 1/4096 on the two-outer-token node, its row (0, 0, 1) 1/2, 1/2."""
    p, q = rational(P), rational(Q)
    rule = with_zero_weights(resolve(p, q, 2), (1,), q, 2)
    tv, _ = exact_run(p, q, 2, _FixedRule(twin(rule, _ZeroPoolTwin)))
    assert tv > Fraction(1, 100)
    consistent, _ = two_step_frame(p, q, rule.weights, rule.inner, 2, zero_pool="reject")
    rejecting = twin(rule, _ZeroPoolTwin, consistent)
    tv, _ = exact_run(p, q, 2, _FixedRule(rejecting))
    assert tv == 0  # a valid rule, but not the one float mode runs, and below the program's acceptance:
    float_rule = resolve(p.astype(float), q.astype(float), 2)
    assert rejecting.laws(np.array([[1, 1]]))[0, 1] == 0 and float_rule.laws(np.array([[1, 1]]))[0, 1] == 1
    assert sum(min(a, b) for a, b in zip(P, consistent)) == Fraction(8, 9) < alpha_star(p, q, 2)
    p_list, q_list, num_drafts, zeroed = ZERO_CASES[1]
    p, q = rational(p_list), rational(q_list)
    rule = with_zero_weights(resolve(p, q, num_drafts), zeroed, q, num_drafts)
    tokens = twin(rule, _AlikeTokensTwin)
    assert dict(tokens.choice(np.array([0, 0, 1]))) == {0: Fraction(1, 2), 1: Fraction(1, 2)}
    assert dict(rule.choice(np.array([0, 0, 1]))) == {0: Fraction(2, 3), 1: Fraction(1, 3)}
    tv, _ = exact_run(p, q, num_drafts, _FixedRule(tokens))
    # the pools {0, 0, 1} (3 q0^2 q1 of the mass) and {0, 1, 1} (3 q0 q1^2) give token 0 half instead of 2/3 and
    # 1/3: it loses q0 q1 (q0 - q1) / 2 to token 1, both always accepted (p_I <= p there)
    assert tv == q[0] * q[1] * (q[0] - q[1]) / 2 == Fraction(1, 4096)
