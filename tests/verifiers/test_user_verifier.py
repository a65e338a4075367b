"""A researcher's workflow: a new rule written in ten lines as a sampling procedure, checked
exhaustively by the generic enumerator alone (no closed form anywhere)."""

from __future__ import annotations

import itertools
import math

import pytest

from verispec.simulator import ChainDrafter, DraftLaw, analyze, random_problem
from verispec.verifiers import ProcedureVerifier


def my_token_level_rule(tree, chooser):
    node = 0
    while tree.child_tokens[node]:
        child = tree.child_nodes[node][0]
        x = tree.token[child]
        if chooser.bernoulli(min(1.0, tree.p[node, x] / tree.q[node, x])):
            node = child
            continue
        leftover = [max(a - b, 0.0) for a, b in zip(tree.p[node], tree.q[node])]
        return node, chooser.categorical([v / sum(leftover) for v in leftover])
    return node, chooser.categorical(tree.p[node])


def my_buggy_rule(tree, chooser):
    """The same rule, but on rejection it resamples from q: a plausible slip."""
    node = 0
    while tree.child_tokens[node]:
        child = tree.child_nodes[node][0]
        x = tree.token[child]
        if chooser.bernoulli(min(1.0, tree.p[node, x] / tree.q[node, x])):
            node = child
            continue
        return node, chooser.categorical(tree.q[node])
    return node, chooser.categorical(tree.p[node])


@pytest.mark.parametrize("seed", range(3))
def test_ten_line_rule_is_checked_by_enumeration_alone(seed):
    problem = random_problem(3, 3, seed)
    verifier = ProcedureVerifier("mine", my_token_level_rule, {DraftLaw.SINGLE_PATH})
    result = analyze(problem, ChainDrafter(3), verifier)
    assert result.lossless and result.tv_distance < 1e-12
    # independent check of its efficiency: P(tau >= d) = sum over x_1..x_d of prod_i min(p, q)(x_i | x_<i)
    for depth in range(1, 4):
        expected = sum(
            math.prod(min(problem.target(x[:i])[x[i]], problem.draft(x[:i])[x[i]]) for i in range(depth))
            for x in itertools.product(range(3), repeat=depth))
        assert result.acceptance_by_depth[depth - 1] == pytest.approx(expected, abs=1e-12)


def test_buggy_rule_is_caught():
    verifier = ProcedureVerifier("buggy", my_buggy_rule, {DraftLaw.SINGLE_PATH})
    result = analyze(random_problem(3, 2, 0), ChainDrafter(2), verifier)
    assert not result.lossless and result.tv_distance > 1e-3
