"""Rules that read many trees of many topologies at once (``LawForest``, ``forest_stopping_masses``): Traversal (on
trees drawn without replacement and on i.i.d. child lists), GBV and two broken Traversal variants give, at every node
of every tree, the total of their own ``emission_laws`` there (the law, one tree at a time, a second route) to 1e-12,
on sparse and dense laws, with each node's laws on its own columns or on the whole vocabulary. The forest's sizes and
merges are checked so that the comparison has teeth; a rule whose recursion is its own is not read from a forest; GBV
selects alike on a tree with paths of two lengths."""

from __future__ import annotations

import numpy as np
import pytest

from tests.support.broken_paths import TraversalIIDUpdateOneMinusQ, TraversalKeepTarget
from verispec.selector.comb_trees import ShapeForms, _law_forest, _topology
from verispec.simulator import random_problem
from verispec.simulator.drafters import DraftLaw
from verispec.simulator.trees import TreeBatch, TreeBuilder
from verispec.verifiers.gbv import GreedyBlockVerifier
from verispec.verifiers.traversal import TraversalIIDVerifier, TraversalVerifier

SIZE = 5

RULES = [TraversalVerifier(), TraversalIIDVerifier(), GreedyBlockVerifier(), TraversalIIDUpdateOneMinusQ(),
         TraversalKeepTarget()]


def delayed_shapes(problem, seed: int, count: int, *, distinct_children: bool = False) -> list:
    """Distinct trees of a trunk of 0-2 tokens and 1-4 paths of one length 0-3 below it, each token drawn from q at
    its prefix (sparse laws: paths often agree, giving merged nodes and repeated child-list entries);
    ``distinct_children``: a token already under its parent is redrawn from q without it (drawn without replacement),
    and trees whose paths end at two lengths are left out (GBV takes paths of one length)."""
    rng = np.random.default_rng(seed)
    shapes = {}

    def draw(path, used) -> int | None:
        law = np.array(problem.draft(path), dtype=np.float64)
        law[list(used)] = 0.0
        return None if law.sum() == 0 else int(rng.choice(SIZE, p=law / law.sum()))

    while len(shapes) < count:
        builder, node, trunk = TreeBuilder(), 0, ()
        for _ in range(int(rng.integers(0, 3))):
            token = draw(trunk, ())
            node, trunk = builder.add_child(node, token), trunk + (token,)
        length = int(rng.integers(0, 4))
        for _ in range(int(rng.integers(1, 5)) if length else 0):
            child, path = node, trunk
            for _ in range(length):
                token = draw(path, set(builder.children(child)) if distinct_children else ())
                if token is None:
                    break
                child, path = builder.add_child(child, token), path + (token,)
        shape = builder.shape()
        if distinct_children and len({len(path) for path in _leaf_paths(shape)}) > 1:
            continue
        shapes[shape] = None
    return list(shapes)


def _leaf_paths(shape) -> list:
    paths, _, _, _, child_lists = _topology(shape)
    return [path for path, children in zip(paths, child_lists) if not children]


def law_table(problem, shapes) -> dict:
    """prefix -> (p, q) as ``CompactLaw`` pairs at every internal node of the shapes (what the labels collect)."""
    laws = {}
    for shape in shapes:
        paths, _, _, _, child_lists = _topology(shape)
        for path, children in zip(paths, child_lists):
            if children:
                laws[path] = (problem.target_compact(path), problem.draft_compact(path))
    return laws


def emission_totals(rule, problem, shape) -> np.ndarray:
    """[n] the total of the rule's emission law at each node of one tree (one-row ``TreeBatch``, full vocabulary)."""
    paths, parent, depth, tokens, child_lists = _topology(shape)
    p = np.array([problem.target(path) for path in paths], dtype=np.float64)         # [n, V]
    q = np.array([problem.draft(path) for path in paths], dtype=np.float64)
    q[[not children for children in child_lists]] = np.nan
    batch = TreeBatch(vocab_size=SIZE, parent=parent, depth=depth, child_lists=child_lists,
                      tokens=np.array([tokens]), p=p[None], q=q[None], contexts=np.arange(len(parent))[None])
    return np.asarray(rule.emission_laws(batch), dtype=np.float64)[0].sum(axis=-1)


@pytest.mark.parametrize("compress", [True, False], ids=["own-columns", "whole-vocabulary"])
@pytest.mark.parametrize("rule", RULES, ids=lambda rule: rule.name)
def test_forest_masses_equal_each_trees_emission_law_totals(rule, compress):
    problem = random_problem(SIZE, 6, 4, zero_fraction=0.5, divergence=0.9)
    without_replacement = DraftLaw.WITHOUT_REPLACEMENT in rule.valid_for  # else i.i.d. paths, agreeing often
    shapes = delayed_shapes(problem, 1, 60, distinct_children=without_replacement)
    forms = ShapeForms()
    forest = _law_forest(shapes, forms, law_table(problem, shapes), SIZE, compress)
    masses = rule.forest_stopping_masses(forest)                                      # [F]
    broken = type(rule) in (TraversalIIDUpdateOneMinusQ, TraversalKeepTarget)
    worst, moved = 0.0, 0.0
    for tree, shape in enumerate(shapes):
        here = masses[forest.tree == tree]
        worst = max(worst, float(np.abs(here - emission_totals(rule, problem, shape)).max()))
        if broken:  # the second route's law, for the variants whose masses must move away from Traversal's
            moved = max(moved, float(np.abs(here - emission_totals(TraversalIIDVerifier(), problem, shape)).max()))
    assert worst < 1e-12
    if broken:
        assert moved > 1e-3  # a broken variant's masses are its own, not Traversal's: the forest reads its parts
    # the comparison has teeth: many topologies, merged paths (repeated child-list entries), laws of both kinds
    topologies = {(_topology(shape)[1], _topology(shape)[4]) for shape in shapes}
    assert len(topologies) >= 20 and np.bincount(forest.tree).max() >= 9
    assert (forest.draws > (forest.children >= 0).sum(axis=1)).any() != without_replacement
    if compress:
        assert min(int((row > 0).sum()) for row in forest.p + forest.q) < SIZE == forest.p.shape[1]


def test_a_rule_with_its_own_recursion_is_not_read_from_a_forest():
    """``reads_forest`` holds only where the forest's passes are the rule's law: a Traversal whose recursion is its own
    (``_visit``) or a GBV with its own ``emission_laws`` goes through its emission laws instead."""

    class OwnVisit(TraversalIIDVerifier):
        name = "own-visit"

        def _visit(self, batch, laws, node, weight, reach):
            return super()._visit(batch, laws, node, weight, reach)

    class OwnLaw(GreedyBlockVerifier):
        name = "own-law"

        def emission_laws(self, batch):
            return super().emission_laws(batch)

    assert TraversalVerifier().reads_forest and TraversalIIDVerifier().reads_forest
    assert GreedyBlockVerifier().reads_forest and TraversalKeepTarget().reads_forest
    assert not OwnVisit().reads_forest and not OwnLaw().reads_forest
    # declared by the interface: every other rule, built-in or a user's procedure, says False
    from verispec.verifiers import REGISTRY, ProcedureVerifier

    assert {name for name, rule in REGISTRY.items() if rule.reads_forest} == {"traversal", "traversal-iid", "gbv"}
    assert ProcedureVerifier("mine", lambda tree, chooser: (0, 0), set()).reads_forest is False


def test_gbv_on_paths_of_two_lengths_agrees_on_both_routes():
    """A tree with a path of 2 tokens beside one of 1, alone: GBV's selected path ends at the leaf its descent meets,
    on both routes alike; which one depends on the laws (several problems: each end is met)."""
    builder = TreeBuilder()
    builder.add_child(builder.add_child(0, 1), 2)
    builder.add_child(0, 0)
    shape = builder.shape()
    ends = set()
    for seed in range(8):
        problem = random_problem(SIZE, 3, seed)  # dense laws: every token can be drafted
        forest = _law_forest([shape], ShapeForms(), law_table(problem, [shape]), SIZE, True)
        expected = emission_totals(GreedyBlockVerifier(), problem, shape)
        assert np.abs(GreedyBlockVerifier().forest_stopping_masses(forest) - expected).max() < 1e-12
        ends.add(int(np.flatnonzero(expected > 0).max()))
    assert len(ends) == 2
