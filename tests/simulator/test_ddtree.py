"""DDTree drafts (arXiv 2604.12989): the tree against an enumeration written here, the fixed-tree bound against the
multi-step LP, the min(1, p/q) bias of hipfire PR #483 in exact rationals, and the refusals. Each with a broken twin."""

from __future__ import annotations

import itertools
from fractions import Fraction as F

import numpy as np
import pytest

from verispec.bounds.fixed_tree import best_tree_paths, fixed_tree_bound
from verispec.bounds.multistep import optimal_block_efficiency
from verispec.errors import IncompatibleDraftError, ProblemTooLargeError
from verispec.simulator import ContextFreeProblem, TabularProblem, parse_tree, random_problem
from verispec.simulator.ddtree import DDTreeDrafter, ProductDrafts
from verispec.simulator.drafters import DraftLaw
from verispec.simulator.engine import analyze
from verispec.simulator.trees import DraftTree, shape_from_paths
from verispec.verifiers import get_verifier


def _exact_problem(size=3, depth=2):
    """A context-dependent exact problem: p, q at every prefix from a fixed pattern of small rationals."""
    rng = np.random.default_rng(7)

    def law():
        weights = rng.integers(1, 6, size)
        return [F(int(w), int(weights.sum())) for w in weights]

    prefixes = [pre for length in range(depth + 1) for pre in itertools.product(range(size), repeat=length)]
    return TabularProblem(size, {u: law() for u in prefixes}, {u: law() for u in prefixes if len(u) < depth},
                          exact=True)


def _enumerated_ddtree(problem, budget, length, *, marginals=True):
    """The top-``budget`` prefixes by (product of per-position marginals descending, rank tuple ascending), by brute
    force: the marginals from the joint draft law, every prefix scored. ``marginals=False``: the broken reading that
    scores position d with the conditional after the first-ranked prefix instead."""
    size = problem.vocab_size
    if marginals:
        laws, level = [], {(): F(1)}
        for _ in range(length):
            law = [sum(mass * problem.draft(u)[t] for u, mass in level.items()) for t in range(size)]
            laws.append(law)
            level = {u + (t,): mass * problem.draft(u)[t] for u, mass in level.items() for t in range(size)}
    else:
        laws, spine = [], ()
        for _ in range(length):
            law = list(problem.draft(spine))
            laws.append(law)
            spine += (max(range(size), key=lambda t: (law[t], -t)),)
    ranks = [{t: r for r, t in enumerate(sorted((t for t in range(size) if law[t] > 0),
                                               key=lambda t, law=law: (-law[t], t)))} for law in laws]
    scored = []
    for depth in range(1, length + 1):
        for path in itertools.product(range(size), repeat=depth):
            score = np.prod([laws[d][t] for d, t in enumerate(path)])
            if score > 0:
                scored.append((-score, tuple(ranks[d][t] for d, t in enumerate(path)), path))
    return {path for _, _, path in sorted(scored)[:budget]}


@pytest.mark.parametrize("budget,length", [(1, 2), (4, 2), (7, 2), (20, 2)])
def test_ddtree_is_the_top_prefixes_under_the_marginals(budget, length):
    problem = _exact_problem()
    (tree, probability), = DDTreeDrafter(budget, length).outcomes(problem)
    assert probability == 1
    assert set(tree.paths[1:]) == _enumerated_ddtree(problem, budget, length)
    # negative control: scoring with the conditionals along the argmax spine is another tree on this problem
    if budget in (4, 7):
        assert set(tree.paths[1:]) != _enumerated_ddtree(problem, budget, length, marginals=False)


def test_product_drafts_read_the_marginals_back():
    problem = _exact_problem()
    product = ProductDrafts(problem, 2)
    assert DDTreeDrafter(7, 2).outcomes(product)[0][0].paths == DDTreeDrafter(7, 2).outcomes(problem)[0][0].paths
    marginal = [sum(problem.draft(())[a] * problem.draft((a,))[t] for a in range(3)) for t in range(3)]
    assert list(product.draft((2,))) == marginal and sum(marginal) == 1


def test_fixed_tree_bound_is_the_multistep_optimum_and_nss_reaches_it():
    for seed in range(3):
        problem = random_problem(3, 2, seed)
        drafter = parse_tree("ddtree:5,2")
        tree = drafter.outcomes(problem)[0][0]
        bound = fixed_tree_bound(tree)
        by_hand = 1 + sum(np.prod([problem.target(path[:d])[t] for d, t in enumerate(path)]) for path in tree.paths[1:])
        assert abs(bound - by_hand) < 1e-12
        assert abs(optimal_block_efficiency(problem, drafter).block_efficiency - bound) < 1e-9
        assert abs(analyze(problem, drafter, get_verifier("nss")).block_efficiency - bound) < 1e-12
        # negative control: the same sum over q (the drafter's own belief) is not the bound
        wrong = 1 + sum(np.prod([problem.draft(path[:d])[t] for d, t in enumerate(path)]) for path in tree.paths[1:])
        assert abs(wrong - bound) > 1e-3


def _rooted_trees(size, nodes, depth):
    """Every set of ``nodes`` prefixes (length 1..depth) closed under taking prefixes, by brute force."""
    prefixes = [u for length in range(1, depth + 1) for u in itertools.product(range(size), repeat=length)]
    for chosen in itertools.combinations(prefixes, nodes):
        chosen = set(chosen)
        if all(u[:-1] in chosen or len(u) == 1 for u in chosen):
            yield chosen


def test_best_tree_of_capacity_p_is_greedy():
    problem = random_problem(3, 3, 4)
    for capacity in (1, 3, 5):
        paths, value = best_tree_paths(problem, capacity)
        values = [1 + sum(np.prod([problem.target(u[:d])[t] for d, t in enumerate(u)]) for u in tree)
                  for tree in _rooted_trees(3, capacity, 3)]
        assert abs(value - max(values)) < 1e-12 and len(paths) == capacity + 1
        assert sorted(values)[-2] < max(values) or capacity == 1  # negative control: not every tree is best
        tree = DraftTree.from_shape(problem, shape_from_paths(paths[1:]))
        assert abs(fixed_tree_bound(tree) - value) < 1e-12


def test_min_one_p_over_q_on_a_ddtree_is_biased_and_nss_is_not():
    # hipfire PR #483: the smallest witness V = 2, B = 1, L = 1 (found by experiments/ddtree.py's exhaustive search):
    # the single node x = argmax q is accepted with min(1, p(x)/q(x)) = 1, so the output is x always.
    problem = ContextFreeProblem([F(1, 2), F(1, 2)], [F(1, 2), F(1, 2)], exact=True, horizon=1)
    drafter = parse_tree("ddtree:1,1")
    assert drafter.draft_laws == {DraftLaw.DETERMINISTIC}
    with pytest.raises(IncompatibleDraftError):
        analyze(problem, drafter, get_verifier("naivetree"))
    tree = drafter.outcomes(problem)[0][0]
    law = get_verifier("naivetree").emission_law(tree)  # the rule forced onto the tree, outside the engine
    first = [law[0][y] + sum(sum(law[n]) for n in range(1, tree.num_nodes) if tree.paths[n][0] == y)
             for y in range(2)]  # the law of the block's first token
    assert first == [1, 0]  # TV 1/2 from p = (1/2, 1/2), exactly
    result = analyze(problem, drafter, get_verifier("nss"))  # the correct rule: TV 0 exactly
    assert result.tv_distance == 0 and result.block_efficiency == F(3, 2)


def test_a_ddtree_too_large_is_refused_before_any_work():
    with pytest.raises(ProblemTooLargeError, match="limit"):
        parse_tree("ddtree:1000000,20").check_problem(random_problem(4, 20, 0))
    from verispec.cli import main

    assert main(["exact", "--target", "0.5,0.5", "--draft", "0.5,0.5", "--tree", "ddtree:1000000,30",
                 "--verifier", "nss"]) == 2
