"""The selector's labels (verispec.selector.labels): the comb-reuse conditional-exact estimator is unbiased for
every action, proved by enumerating every comb outcome with its probability; the sampled estimator agrees with
the exact value within a stated z bound; a comb that is not i.i.d. (every path a copy of the first) is biased and
caught, exactly and by the same z test; certified labels bracket the exact value (tabular) and the
conditional-exact mean (a tiny model pair with top-k sampling).

Every reference number comes from another algorithm: ``verispec.analyze`` (the exact engine) or
``verispec.certify``; the comb enumeration below computes its probabilities from ``problem.draft`` itself, not
through the sampler.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

import verispec
from verispec.errors import VerispecError
from verispec.selector.actions import ActionGrid
from verispec.selector.combs import Combs, comb_values, sample_combs
from verispec.selector.labels import LabelSet, certified_labels, conditional_exact_labels, exact_labels
from verispec.simulator import random_markov_problem, random_problem

#: Two-sided z bound of the Monte-Carlo checks: P(|Z| > 4.5) = 6.8e-6 per action, so under 3e-4 over the ~35
#: actions of a grid (Bonferroni); the seeds are fixed, so the tests are deterministic.
Z_BOUND = 4.5

VERIFIERS = ("specinfer", "traversal-iid", "gbv")


def enumerate_combs(problem, grid) -> tuple[Combs, np.ndarray]:
    """Every comb of ``grid`` with its probability, straight from the problem's draft conditionals: the trunk
    (max L1 tokens) and, at each distinct L1, max K paths of max L2 tokens, each token drawn from q given its
    own prefix. Combs of probability zero are left out."""
    trunk_length, branches, tail = max(grid.l1s), max(grid.ks), max(grid.l2s)
    points = tuple(sorted(grid.l1s))
    size = problem.vocab_size
    trunks, all_paths, probabilities = [], [], []
    for trunk in itertools.product(range(size), repeat=trunk_length):
        chance = math.prod(float(problem.draft(trunk[:d])[trunk[d]]) for d in range(trunk_length))
        for flat in itertools.product(range(size), repeat=len(points) * branches * tail):
            paths = np.array(flat, dtype=np.int64).reshape(len(points), branches, tail)
            weight = chance
            for index, point in enumerate(points):
                for j in range(branches):
                    path = tuple(int(t) for t in paths[index, j])
                    prefix = trunk[:point]
                    for step in range(tail):
                        weight *= float(problem.draft(prefix + path[:step])[path[step]])
            if weight > 0:
                trunks.append(trunk)
                all_paths.append(paths)
                probabilities.append(weight)
    combs = Combs(np.array(trunks, dtype=np.int64).reshape(len(trunks), trunk_length), np.stack(all_paths), points)
    return combs, np.array(probabilities)


def copied_paths(combs: Combs) -> Combs:
    """The negative control: every path of a branch point replaced by its first path (K copies, not i.i.d.)."""
    paths = combs.paths.copy()
    paths[:, :, 1:, :] = paths[:, :, :1, :]
    return Combs(combs.trunk, paths, combs.points)


def reference(problem, grid) -> np.ndarray:
    """E[tau + 1] of every action by the exact engine, [A]."""
    return np.array([float(verispec.analyze(problem, action.tree, action.verifier).block_efficiency)
                     for action in grid.actions])


CASES = [
    # (problem, grid): V = 2 with a two-token tail, V = 3 with a two-token trunk; context-dependent and Markov
    (random_problem(2, 3, 11, divergence=0.8), ActionGrid((1, 2), (0, 1), (0, 1, 2), VERIFIERS)),
    (random_problem(3, 3, 5, divergence=0.8), ActionGrid((1, 2), (0, 2), (0, 1), VERIFIERS)),
    (random_markov_problem(3, 2, divergence=0.9), ActionGrid((1, 2), (0, 1), (0, 1), VERIFIERS)),
]


@pytest.mark.parametrize("case", range(len(CASES)))
def test_comb_reuse_is_unbiased_for_every_action(case):
    """Over ALL comb outcomes, the expectation of the comb-derived conditional-exact value equals the exact
    E[tau + 1] of every action (specinfer, traversal-iid, gbv on its valid actions, delayed trees included) to
    1e-12."""
    problem, grid = CASES[case]
    combs, probabilities = enumerate_combs(problem, grid)
    assert abs(probabilities.sum() - 1) < 1e-12
    values = comb_values(problem, grid, combs)                                        # [C, A]
    expectation = probabilities @ values
    exact = reference(problem, grid)
    assert {action.verifier for action in grid.actions} == set(VERIFIERS)
    # gbv's actions include delayed trees with a trunk and K > 1 branches (its selection from the trunk's end)
    assert any(action.l1 > 0 and action.l2 > 0 and action.k > 1
               for action in grid.actions if action.verifier == "gbv")
    worst = np.abs(expectation - exact)
    assert worst.max() < 1e-12, (grid.actions[int(worst.argmax())].name, expectation[worst.argmax()],
                                 exact[worst.argmax()])


def test_copied_paths_are_biased_exactly():
    """Negative control: K copies of one path instead of K i.i.d. paths. Its exact expectation over all combs
    misses the exact value by more than 0.01 where K = 2 and L2 > 0, and only there."""
    problem, grid = CASES[0]
    combs, probabilities = enumerate_combs(problem, grid)
    bias = probabilities @ comb_values(problem, grid, copied_paths(combs)) - reference(problem, grid)
    branching = np.array([action.k > 1 and action.l2 > 0 for action in grid.actions])
    assert np.abs(bias[~branching]).max() < 1e-12
    assert np.abs(bias[branching]).max() > 0.01, bias


def test_sampled_labels_agree_with_exact_within_z_bound_and_catch_the_control():
    """1,500 sampled combs: every action's conditional-exact mean lies within 4.5 standard errors of the exact
    value; the copied-path control on the very same combs lies outside for some action."""
    problem = random_problem(3, 3, 0, divergence=0.9)
    grid = ActionGrid((1, 2), (0, 1), (0, 2), VERIFIERS)
    exact = reference(problem, grid)
    labels = conditional_exact_labels(problem, grid, samples=1500, seed=0)
    assert labels.method == "conditional" and labels.samples == 1500
    assert labels.per_sample.shape == (1500, len(grid))
    deterministic = labels.stderr == 0                                                # chain:0 emits one token
    assert np.abs(labels.efficiency[deterministic] - exact[deterministic]).max() < 1e-12
    z = np.abs(labels.efficiency - exact)[~deterministic] / labels.stderr[~deterministic]
    assert z.max() < Z_BOUND, f"largest z {z.max():.2f} (bound {Z_BOUND})"
    # the control, on the same combs (same seed, same sampler)
    combs = sample_combs(problem, grid, 1500, np.random.default_rng(0))
    assert np.allclose(comb_values(problem, grid, combs).mean(axis=0), labels.efficiency, rtol=0, atol=1e-12)
    broken = comb_values(problem, grid, copied_paths(combs))
    spread = broken.std(axis=0, ddof=1) / math.sqrt(1500)
    z_broken = np.abs(broken.mean(axis=0) - exact)[spread > 0] / spread[spread > 0]
    assert z_broken.max() > Z_BOUND, f"the copied-path control was not caught (largest z {z_broken.max():.2f})"


def test_labels_intervals_and_reproducibility():
    problem = random_problem(3, 3, 2)
    grid = ActionGrid((1, 2), (0, 1), (0, 1), ("specinfer",))
    first = conditional_exact_labels(problem, grid, samples=50, seed=3)
    again = conditional_exact_labels(problem, grid, samples=50, seed=3)
    other = conditional_exact_labels(problem, grid, samples=50, seed=4)
    assert np.array_equal(first.efficiency, again.efficiency)
    assert not np.array_equal(first.efficiency, other.efficiency)
    depth = np.array([action.depth + 1.0 for action in grid.actions])
    assert np.all(first.lower <= first.efficiency) and np.all(first.efficiency <= first.upper)
    assert np.all(first.lower >= 1) and np.all(first.upper <= depth)
    single = conditional_exact_labels(problem, grid, samples=1, seed=0)
    assert np.isnan(single.stderr).all()
    assert np.array_equal(single.lower, np.ones(len(grid))) and np.array_equal(single.upper, depth)


@pytest.mark.parametrize("bad", [0, -1, 1.5, True])
def test_conditional_labels_refuse_bad_samples(bad):
    grid = ActionGrid((1,), (0,), (1,), ("specinfer",))
    with pytest.raises(VerispecError, match="samples"):
        conditional_exact_labels(random_problem(2, 1, 0), grid, samples=bad, seed=0)


def test_label_set_refuses_unknown_method():
    with pytest.raises(VerispecError, match="label method"):
        LabelSet(np.ones(1), np.zeros(1), np.ones(1), np.ones(1), "guess")


def test_vocabulary_compression_and_chunking_change_no_value(monkeypatch):
    """Cutting each chunk's vocabulary to the union of the supports of p and q (tokens of probability zero under
    both are neither drafted nor emitted) leaves every verifier's conditional value unchanged, on a problem where
    40% of the entries of p and q are zero; so does taking the combs one at a time (as at a large vocabulary)."""
    import verispec.selector.combs as combs_module
    from verispec.verifiers import REGISTRY

    problem = random_problem(5, 3, 1, zero_fraction=0.4)
    names = tuple(name for name in sorted(REGISTRY) if name != "otlp" and _valid(name))
    assert {"specinfer", "spectr", "khisti", "naivetree", "nss", "traversal-iid", "gbv"} <= set(names)
    grid = ActionGrid((1, 2), (0, 1), (0, 2), names)
    combs = sample_combs(problem, grid, 40, np.random.default_rng(5))
    compressed = comb_values(problem, grid, combs)
    full = comb_values(problem, grid, combs, compress=False)
    assert np.abs(compressed - full).max() < 1e-12
    monkeypatch.setattr(combs_module, "LAW_ENTRIES", 1)
    assert np.abs(comb_values(problem, grid, combs) - compressed).max() < 1e-12


def _valid(name: str) -> bool:
    try:
        return bool(ActionGrid((2,), (0, 1), (2,), (name,)).actions)
    except VerispecError:
        return False


def test_exact_labels_match_the_engine_and_certified_labels_bracket_them():
    problem = random_problem(3, 3, 7)
    grid = ActionGrid((1, 2), (0, 1), (0, 2), VERIFIERS)
    exact = exact_labels(problem, grid)
    assert exact.method == "exact" and np.array_equal(exact.lower, exact.efficiency)
    assert np.abs(exact.efficiency - reference(problem, grid)).max() < 1e-12
    certified = certified_labels(problem, grid, 1e-3)
    assert certified.method == "certified"
    assert np.all(certified.lower <= exact.efficiency) and np.all(exact.efficiency <= certified.upper)
    assert (certified.upper - certified.lower).max() <= 1e-3 + 1e-11


def test_certified_labels_bracket_conditional_labels_on_a_tiny_pair():
    """A tiny model pair under top-k 3 sampling: certified intervals (width <= 0.01) contain the conditional-exact
    mean of 300 sampled combs within 4.5 standard errors, for every action."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from tests.support.tiny_models import tiny_pair
    from verispec.models import ModelProblem, Sampling

    pair = tiny_pair(0)
    problem = ModelProblem(pair, [1, 5, 2, 7], Sampling(1.0, top_k=3))
    grid = ActionGrid((1, 2), (0, 1), (0, 1, 2), ("specinfer",))
    certified = certified_labels(problem, grid, 0.01)
    before = problem.forward_passes
    conditional = conditional_exact_labels(problem, grid, samples=300, seed=0)
    # the combs' conditionals come in batched forwards: one per level (3 here) and one for the rest
    assert problem.forward_passes - before <= 4
    assert (certified.upper - certified.lower).max() <= 0.01 + 1e-11
    slack = Z_BOUND * conditional.stderr + 1e-12
    assert np.all(conditional.efficiency >= certified.lower - slack), (conditional.efficiency, certified.lower)
    assert np.all(conditional.efficiency <= certified.upper + slack), (conditional.efficiency, certified.upper)


def test_label_quality_against_exact_references():
    """Bias, coverage and ranking of conditional labels against exact ones on five Markov roots; the full-sample row
    of the ranking is recomputed here from the means, and a shifted reference (a negative control) is flagged by
    the coverage."""
    from verispec.latency import LatencyModel
    from verispec.selector.actions import action_times
    from verispec.selector.label_quality import _spearman, label_quality

    grid = ActionGrid((1, 2), (0, 1), (0, 1, 2), ("specinfer",))
    times = action_times(grid, LatencyModel.from_ratio(3.0))
    problems = [random_markov_problem(3, seed, divergence=0.7) for seed in range(5)]
    exact = [exact_labels(problem, grid) for problem in problems]
    conditional = [conditional_exact_labels(problem, grid, samples=64, seed=seed)
                   for seed, problem in enumerate(problems)]
    quality = label_quality(conditional, exact, times=times, trees=(1, 4, 64), repeats=5, seed=0)
    difference = np.stack([c.efficiency - e.efficiency for c, e in zip(conditional, exact)])
    assert abs(quality["bias"] - difference.mean()) < 1e-12 and abs(quality["spread"] - difference.std()) < 1e-12
    assert quality["z_within_95"] >= 0.8
    assert [row["trees"] for row in quality["ranking"]] == [1, 4, 64]
    # by default every power of two below the samples, then all of them (64 here; 12 of them: 1, 2, 4, 8, 12)
    default = label_quality(conditional, exact, times=times, repeats=1)["ranking"]
    assert [row["trees"] for row in default] == [1, 2, 4, 8, 16, 32, 64]
    last = quality["ranking"][-1]
    assert default[-1]["best_agrees"] == last["best_agrees"] and abs(default[-1]["regret"] - last["regret"]) < 1e-12
    twelve = [LabelSet(c.efficiency, c.stderr, c.lower, c.upper, "conditional", 12, c.per_sample[:12])
              for c in conditional]
    assert [row["trees"] for row in label_quality(twelve, exact, times=times, repeats=1)["ranking"]] == [1, 2, 4, 8,
                                                                                                        12]
    full = quality["ranking"][-1]
    chosen = [int((c.efficiency / times).argmax()) for c in conditional]
    best = [int((e.efficiency / times).argmax()) for e in exact]
    assert full["best_agrees"] == np.mean([a == b for a, b in zip(chosen, best)])
    assert full["not_excluded"] == full["best_agrees"]  # exact references: no interval leaves a tie open
    # intervals around the exact values: a chosen action is not excluded when its upper score reaches the best's lower
    widened = [LabelSet(e.efficiency, e.stderr, e.efficiency - 0.05, e.efficiency + 0.05, "certified") for e in exact]
    open_ties = np.mean([((e.efficiency + 0.05) / times)[a] >= ((e.efficiency - 0.05) / times).max()
                         for e, a in zip(exact, chosen)])
    widened_row = label_quality(conditional, widened, times=times, trees=(64,))["ranking"][-1]
    assert widened_row["not_excluded"] == open_ties >= full["best_agrees"]
    regret = np.mean([1 - (e.efficiency / times)[a] / (e.efficiency / times)[b]
                      for e, a, b in zip(exact, chosen, best)])
    assert abs(full["regret"] - regret) < 1e-12
    shifted = [LabelSet(e.efficiency + 0.3, e.stderr, e.lower + 0.3, e.upper + 0.3, "exact") for e in exact]
    assert label_quality(conditional, shifted, times=times, trees=(64,))["z_within_95"] < 0.2
    assert _spearman(np.array([1.0, 3.0, 2.0]), np.array([10.0, 30.0, 20.0])) == 1.0
    assert _spearman(np.array([1.0, 3.0, 2.0]), np.array([3.0, 1.0, 2.0])) == -1.0


def test_a_comb_beyond_the_node_limit_is_refused_before_any_draw():
    """One comb has 1 + max L1 + |L1s| K L2 nodes (counted by hand here): the paper's grid 1 + 8 + 9 * 4 * 8 = 297
    passes, and K up to 16 with L2 up to 32 at 9 trunk positions (1 + 8 + 9 * 16 * 32 = 4,617 > 4,096) is refused
    by name, before the problem is asked for anything."""
    from verispec.errors import ProblemTooLargeError
    from verispec.selector.actions import PAPER_GRID, ActionGrid
    from verispec.selector.combs import MAX_COMB_NODES, check_comb_size, comb_nodes

    assert comb_nodes(PAPER_GRID) == 297 and MAX_COMB_NODES == 4096
    check_comb_size(PAPER_GRID)
    wide = ActionGrid.parse(ks="1-16", l1s="0-8", l2s="0-32")
    assert comb_nodes(wide) == 1 + 8 + 9 * 16 * 32

    class Untouchable:
        vocab_size = 3

        def __getattr__(self, name):
            raise AssertionError(f"the problem was asked for {name}")

    with pytest.raises(ProblemTooLargeError, match="4,617 nodes"):
        conditional_exact_labels(Untouchable(), wide, samples=1, seed=0)


def _stopping_mass(rule, shape, p, q):
    """[n] P(the rule stops at each node) of one tree: its emission law summed over the emitted token."""
    from verispec.selector.comb_trees import _topology
    from verispec.simulator.trees import TreeBatch

    _, parent, depth, tokens, child_lists = _topology(shape)
    batch = TreeBatch(vocab_size=p.shape[-1], parent=parent, depth=depth, child_lists=child_lists,
                      tokens=np.array([tokens]), p=p[None], q=q[None], contexts=np.arange(len(parent))[None])
    return np.asarray(rule.emission_laws(batch), dtype=np.float64)[0].sum(axis=-1)


def test_no_registered_rule_reads_p_at_a_leaf_for_its_stopping_mass():
    """What lets a label skip the target's forward at a comb's leaves: for every registered rule, the probability
    of stopping at each node is unchanged when p at the leaves is replaced by other laws (p there only sets the
    bonus token). Every registered rule a grid takes is checked (``comb_trees.evaluate_trees`` skips leaves for
    registered rules only). The control: replacing p at the internal nodes does change it (on some tree for every
    rule: a weight of block verification can saturate at 1 on one), so the comparison can fail."""
    from verispec.selector.comb_trees import _topology
    from verispec.simulator.trees import TreeBuilder
    from verispec.verifiers import REGISTRY

    rng = np.random.default_rng(3)
    size = 4
    shapes = []
    for trunk, branches, tail in [(0, 1, 3), (1, 1, 2), (0, 3, 2), (2, 2, 1), (1, 4, 2)]:
        builder, node = TreeBuilder(), 0
        for token in rng.integers(0, size, trunk):
            node = builder.add_child(node, int(token))
        for _ in range(branches):
            child = node
            for token in rng.integers(0, size, tail):
                child = builder.add_child(child, int(token))
        shapes.append(builder.shape())
    checked, moved = set(), set()  # rules checked; rules whose mass the control moved on some tree
    gridded = {name for name in REGISTRY if _valid(name)}  # the rules an action grid takes (delayed trees)
    for name in sorted(gridded):
        rule = REGISTRY[name]
        for shape in shapes:
            leaves = np.array([not children for children in _topology(shape)[4]])
            p = rng.dirichlet(np.full(size, 0.7), size=len(leaves))                 # [n, V]
            q = rng.dirichlet(np.full(size, 0.7), size=len(leaves))                 # [n, V]
            q[leaves] = np.nan
            try:
                mass = _stopping_mass(rule, shape, p, q)
            except VerispecError:  # a tree this rule does not take (a chain rule on a branching tree)
                continue
            other = p.copy()
            other[leaves] = rng.dirichlet(np.full(size, 0.7), size=int(leaves.sum()))
            assert np.abs(_stopping_mass(rule, shape, other, q) - mass).max() < 1e-12, (name, shape)
            checked.add(name)
            internal = p.copy()
            internal[~leaves] = rng.dirichlet(np.full(size, 0.7), size=int((~leaves).sum()))
            if np.abs(_stopping_mass(rule, shape, internal, q) - mass).max() > 1e-6:
                moved.add(name)
    assert checked == gridded and moved == checked and len(gridded) >= 7


def test_comb_internal_prefixes_are_the_internal_nodes_of_every_actions_tree():
    """What a model problem forwards the target over before the groups: the distinct internal nodes of the combs,
    equal to the union over every action's tree (read from ``action_shape``, a second route) of its internal nodes,
    for grids with and without a path tail."""
    from verispec.selector.comb_trees import _topology
    from verispec.selector.combs import action_shape, comb_internal_prefixes

    problem = random_problem(3, 4, 2, divergence=0.8)
    for grid in (ActionGrid((1, 3), (0, 2), (0, 2), ("specinfer",)), ActionGrid((2,), (1, 3), (0,), ("specinfer",))):
        combs = sample_combs(problem, grid, 5, np.random.default_rng(1))
        expected = set()
        for s in range(combs.samples):
            for action in grid.actions:
                paths, _, _, _, child_lists = _topology(action_shape(combs, s, action.k, action.l1, action.l2))
                expected |= {path for path, children in zip(paths, child_lists) if children}
        found = comb_internal_prefixes(combs)
        assert len(found) == len(set(found)) and set(found) == expected


def test_the_stopping_masses_route_gives_the_laws_values(monkeypatch):
    """Labels of rules with a node-local solver come from one walk over all their trees (``forest_masses``, the
    solver's scalars once per distinct node and child list of the combs, whatever trees hold it): every verifier's
    conditional values equal those of the full emission laws summed over tokens (the route before it) to 1e-12,
    compressed or not; and each walk rule's solver ran on exactly one row per distinct (node, child list) of the
    combs' trees, counted here from the trees themselves."""
    import verispec.verifiers.tree_walk as tree_walk
    from verispec.selector.comb_trees import _topology
    from verispec.selector.combs import action_shape
    from verispec.verifiers import REGISTRY, get_verifier

    problem = random_problem(5, 3, 2, zero_fraction=0.3)
    names = tuple(name for name in sorted(REGISTRY) if name != "otlp" and _valid(name))
    grid = ActionGrid((1, 2, 3), (0, 1), (0, 2), names)
    combs = sample_combs(problem, grid, 12, np.random.default_rng(8))
    solved_rows: dict[str, int] = {}
    original = tree_walk.TopDownVerifier.node_scalars

    def counting(self, p, q, children):
        solved_rows[self.name] = solved_rows.get(self.name, 0) + len(p)
        return original(self, p, q, children)

    monkeypatch.setattr(tree_walk.TopDownVerifier, "node_scalars", counting)
    by_masses = {compress: comb_values(problem, grid, combs, compress=compress) for compress in (True, False)}
    distinct = set()  # (token path, child list's tokens) at every internal node of every tree of the combs
    for s in range(combs.samples):
        for action in grid.actions:
            paths, _, _, _, child_lists = _topology(action_shape(combs, s, action.k, action.l1, action.l2))
            distinct |= {(paths[node], tuple(paths[child][-1] for child in children))
                         for node, children in enumerate(child_lists) if children}
    walks = [name for name in names if isinstance(get_verifier(name), tree_walk.TopDownVerifier)]
    assert len(walks) >= 4 and solved_rows == {name: 2 * len(distinct) for name in walks}  # once a compress value

    # the route before it: every rule's [N, n, V] emission laws over gathered batches, summed over tokens (the labels
    # take it for any rule that is not a walk)
    monkeypatch.setattr(tree_walk, "TopDownVerifier", type("NotAWalk", (), {}))
    for compress in (True, False):
        by_laws = comb_values(problem, grid, combs, compress=compress)
        assert np.abs(by_masses[compress] - by_laws).max() < 1e-12


def test_the_forest_route_gives_the_laws_values(monkeypatch):
    """Labels of the rules that read a ``LawForest`` (traversal, traversal-iid, gbv: their law on a tree is cheap per
    node but not node-local) come from one forest of all their distinct trees a group of combs: equal to their
    emission laws summed over tokens, in batches of one topology (the route before it), to 1e-12, compressed or not,
    the combs taken all at once or one at a time, the trees in one forest or one a forest; the forest route is taken
    once a group for each of them."""
    import verispec.selector.comb_trees as comb_trees
    import verispec.selector.combs as combs_module
    from verispec.verifiers.gbv import GreedyBlockVerifier
    from verispec.verifiers.traversal import TraversalVerifier

    problem = random_problem(5, 4, 6, zero_fraction=0.3)
    names = tuple(name for name in ("traversal", "traversal-iid", "gbv") if _valid(name))
    grid = ActionGrid((1, 2, 4), (0, 1), (0, 1, 3), names)
    combs = sample_combs(problem, grid, 16, np.random.default_rng(4))
    read: dict[str, int] = {}

    def counted(original):
        def forest_stopping_masses(self, forest):
            read[self.name] = read.get(self.name, 0) + 1
            return original(self, forest)
        return forest_stopping_masses

    for rule in (TraversalVerifier, GreedyBlockVerifier):
        monkeypatch.setattr(rule, "forest_stopping_masses", counted(rule.forest_stopping_masses))
    by_forest = {compress: comb_values(problem, grid, combs, compress=compress) for compress in (True, False)}
    assert set(read) == set(names) and len(names) >= 2 and set(read.values()) == {2}  # once per compress value
    for module, setting in ((combs_module, "LAW_ENTRIES"), (comb_trees, "FOREST_LAW_ENTRIES")):  # one comb a group;
        with monkeypatch.context() as patch:                                                 # one tree a forest
            patch.setattr(module, setting, 1)
            assert np.abs(comb_values(problem, grid, combs) - by_forest[True]).max() < 1e-12
    assert min(read.values()) > 2 + combs.samples  # the trees went in several forests
    for rule in (TraversalVerifier, GreedyBlockVerifier):
        monkeypatch.setattr(rule, "reads_forest", False)
    before = dict(read)
    for compress in (True, False):
        by_laws = comb_values(problem, grid, combs, compress=compress)
        assert np.abs(by_forest[compress] - by_laws).max() < 1e-12
    assert read == before  # the laws' route read no forest


def test_khisti_labels_do_not_depend_on_the_cut_vocabulary(monkeypatch):
    """Khisti's rule reads zero-mass tokens (its truncated ranking's top-s slots; their places move the maximum
    flow's choice among optimal weights), so a vocabulary cut to the union of the supports of the nodes solved
    together would change its labels with the batch. The labels hand each khisti node the tokens it keeps at full
    size (``NodeSolver.outside_tokens_read``): its values with the cut equal those at full size to 1e-12 (sparse
    laws, V = 12, up to 4 i.i.d. children), whatever the solver's chunks. The control: the same solver declaring
    that it reads no outside token, on trees of the root alone (each group of child lists then holds the root's
    laws only, and its cut no zero-mass token), moves them."""
    import verispec.selector.comb_trees as comb_trees
    from verispec.verifiers import get_verifier

    grid = ActionGrid((2, 3, 4), (0, 1), (1,), ("khisti",))
    for seed in (3, 6):
        problem = random_problem(12, 2, seed, zero_fraction=0.5)
        combs = sample_combs(problem, grid, 16, np.random.default_rng(2))
        full = comb_values(problem, grid, combs, compress=False)
        assert np.abs(comb_values(problem, grid, combs) - full).max() < 1e-12
        with monkeypatch.context() as patch:
            patch.setattr(comb_trees, "SOLVER_ELEMENTS", 1)  # one node a chunk
            assert np.abs(comb_values(problem, grid, combs) - full).max() < 1e-12
    root_only = ActionGrid((2, 3, 4), (0,), (1,), ("khisti",))
    problem = random_problem(12, 1, 6, zero_fraction=0.5)
    combs = sample_combs(problem, root_only, 16, np.random.default_rng(2))
    full = comb_values(problem, root_only, combs, compress=False)
    assert np.abs(comb_values(problem, root_only, combs) - full).max() < 1e-12
    monkeypatch.setattr(get_verifier("khisti").node_solver, "outside_tokens_read", 0)
    assert np.abs(comb_values(problem, root_only, combs) - full).max() > 1e-3


def test_a_broken_solvers_masses_are_caught_in_the_labels(monkeypatch):
    """The control: a node-local solver whose output law loses 5% of its mass is refused by the masses' check."""
    import verispec.verifiers as verifiers
    from verispec.errors import VerifierError
    from verispec.verifiers.tree_walk import TopDownVerifier

    specinfer = verifiers.get_verifier("specinfer").node_solver

    class Leaky(type(specinfer)):
        name = "leaky"

        def output_laws(self, p, q, children):
            return 0.95 * super().output_laws(p, q, children)

    problem = random_problem(4, 3, 3)
    grid = ActionGrid((2,), (0,), (2,), ("specinfer",))
    combs = sample_combs(problem, grid, 3, np.random.default_rng(1))
    leaky, original = TopDownVerifier(Leaky()), verifiers.get_verifier
    monkeypatch.setattr(verifiers, "get_verifier", lambda name: leaky if name == "specinfer" else original(name))
    with pytest.raises(VerifierError, match="emission masses .* not a probability law"):
        comb_values(problem, grid, combs)


def test_a_forest_rules_lost_mass_is_caught_in_the_labels(monkeypatch):
    """The control of the forest route: a rule whose forest masses lose 5% is refused by the masses' check."""
    from verispec.errors import VerifierError
    from verispec.verifiers.traversal import TraversalVerifier

    original = TraversalVerifier.forest_stopping_masses
    monkeypatch.setattr(TraversalVerifier, "forest_stopping_masses",
                        lambda self, forest: 0.95 * original(self, forest))
    problem = random_problem(4, 3, 3)
    grid = ActionGrid((2,), (0,), (2,), ("traversal-iid",))
    combs = sample_combs(problem, grid, 3, np.random.default_rng(1))
    with pytest.raises(VerifierError, match="emission masses .* not a probability law"):
        comb_values(problem, grid, combs)
