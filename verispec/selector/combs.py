"""The comb of the delay selector's conditional-exact labels (``verispec.selector.labels``): drawn, and the exact
E[tau + 1 | tree] of every action's tree in it.

Glossary of the comb (one sample serves every action of the grid):

* *trunk*: M1 = max(l1s) tokens drawn one after another from q, ``trunk[:l1]`` is a delayed tree's trunk;
* *branch point*: every distinct L1 of the grid; at branch point l1, K = max(ks) i.i.d. *paths* of
  M2 = max(l2s) tokens are drawn from q after ``trunk[:l1]``;
* action (k, l1, l2)'s tree is ``trunk[:l1]`` followed by the first k paths of branch point l1, each cut to its
  first l2 tokens (just the trunk when l2 = 0: ``chain:l1``). Its law is exactly that of ``delayed:k,l1,l2``
  (DDTE Definition 5.2): the trunk is a q-chain, and given the trunk the first k paths are k i.i.d. q-paths of
  which the first l2 tokens are again i.i.d. q-paths. Each action's label is therefore unbiased; labels of
  different actions at one root share their randomness (correlated, which a selector comparing actions
  welcomes). ``tests/selector/test_selector_labels.py`` proves the unbiasedness by enumerating every comb.

The estimator is split as the style guide asks: ``sample_combs`` draws combs from an explicit Generator and
``comb_values`` maps combs to the exact conditional values [S, A] deterministically, so the test can
enumerate combs with their probabilities and feed them to the same ``comb_values``.

Vectorised: the trees of all samples and actions are deduplicated (one value per distinct (verifier, tree); combs
that agree on an action's tokens give it one tree, found by one ``numpy.unique`` over the combs' token rows). A rule
with a node-local solver (the tree walk) runs its solver once per distinct (node, child list) of the combs, whatever
trees hold it, then walks every tree at once on the scalars (``verispec.verifiers.tree_walk.forest_masses``); a rule
that reads a ``LawForest`` (Traversal and GBV: ``forest_stopping_masses``) takes all its trees of a group of combs in
one flat table, whatever their topologies; any other rule's trees are grouped by topology and each group's rows go
through its batched ``emission_laws`` in chunks as wide as the group's laws (top-k 20: a group is one batch). Each
route is tested equal to the emission laws' totals; the routes live in ``verispec.selector.comb_trees``. On a model
problem a root costs what its combs' tokens cost the models: q comes while the combs are drawn, level by level, the
draft fed only each level's new nodes (``ModelProblem.extend_drafts``); p in one target forward over the combs' internal
nodes (``comb_internal_prefixes``) on the context's KV cache; several roots' combs are drawn and forwarded together
(``conditional_exact_labels_together``). p at a leaf is never computed: it only sets the law of the bonus token
after the leaf, for every registered rule (a test over the registry moves p at the leaves and holds the stopping
masses to 1e-12); a rule outside the registry gets it too. A group's vocabulary is cut to the union of p's and q's
supports at its nodes (a token with p = q = 0 at every node takes part in no registered rule's law but khisti's,
whose nodes get exactly the zero-mass tokens they read at full size: ``NodeSolver.outside_tokens_read``; tested):
top-k and top-p laws at V = 151,936 are cheap.
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass

import numpy as np

from verispec.errors import ProblemTooLargeError, VerispecError
from verispec.guard.limits import MAX_DECODE_NODES
from verispec.selector.comb_trees import (  # the names stay importable from here, as before the split
    ShapeForms,
    evaluate_trees,
)
from verispec.simulator.chooser import PreparedCategorical, RandomChooser
from verispec.simulator.problems import Problem
from verispec.simulator.trees import TreeBuilder, TreeShape

#: Float64 entries of the p and q laws ``comb_values`` holds at once (about 1 GiB; combs go in groups that fit).
LAW_ENTRIES = 1 << 27

# --- the comb -------------------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class Combs:
    """S sampled combs of one grid (see the module docstring).

    trunk  [S, M1]        int64 tokens of the trunk
    paths  [S, P, K, M2]  int64 tokens of the K paths at each of the P branch points ``points`` (sorted L1s)
    """

    trunk: np.ndarray
    paths: np.ndarray
    points: tuple[int, ...]

    @property
    def samples(self) -> int:
        return int(self.trunk.shape[0])


def comb_layout(grid) -> tuple[int, tuple[int, ...], int, int]:
    """(M1 = max L1, the branch points = sorted distinct L1s, K = max K, M2 = max L2) of a grid's actions."""
    actions = grid.actions
    if not actions:
        raise VerispecError("the action grid has no action")
    points = tuple(sorted({action.l1 for action in actions}))
    return (max(points), points, max(action.k for action in actions), max(action.l2 for action in actions))


#: Most nodes (root included) of one comb: the limit of a decoded tree, for the same reason: a model problem feeds
#: the whole comb to the target in one forward pass with an n x n mask. The paper's grid needs 1 + 8 + 9 x 4 x 8 =
#: 297 nodes.
MAX_COMB_NODES = MAX_DECODE_NODES


def comb_nodes(grid) -> int:
    """Nodes (root included) of one comb of ``grid``: the trunk, and K paths of max L2 tokens at every L1."""
    trunk, points, branches, tail = comb_layout(grid)
    return 1 + trunk + len(points) * branches * tail


def check_comb_size(grid) -> None:
    """ProblemTooLargeError, before anything is drawn, when one comb of ``grid`` exceeds MAX_COMB_NODES."""
    nodes = comb_nodes(grid)
    if nodes > MAX_COMB_NODES:
        raise ProblemTooLargeError(f"one sampled comb of the grid {grid.describe()} has {nodes:,} nodes (a trunk of "
                                   "max L1 tokens and max K paths of max L2 tokens at every L1), above the limit "
                                   f"of {MAX_COMB_NODES:,}; use fewer or smaller K, L1 or L2 values")


def sample_combs(problem: Problem, grid, samples: int, rng: np.random.Generator) -> Combs:
    """``samples`` combs drawn from the problem's draft law with ``rng`` (every decision through a
    ``RandomChooser``). Drawn level by level (prefix length 0, 1, ..): the draft conditionals of one level of
    every comb are announced at once (``extend_drafts`` of a model-backed problem: one draft forward of the level's
    new nodes; ``prepare_drafts`` elsewhere)."""
    return sample_combs_together([problem], grid, samples, [rng])[0]


def sample_combs_together(problems, grid, samples: int, rngs, together=nullcontext) -> list[Combs]:
    """``sample_combs(problems[i], grid, samples, rngs[i])`` for every i, level by level in lockstep: each level of
    every problem is announced inside one ``together()`` block (a ``ProblemPack`` runs the level of all its members
    in one draft pass), then each problem draws its level with its own generator, as it would alone."""
    trunk_length, points, branches, tail = comb_layout(grid)
    trunks = [np.zeros((samples, trunk_length), dtype=np.int64) for _ in problems]            # [S, M1] each
    paths = [np.zeros((samples, len(points), branches, tail), dtype=np.int64) for _ in problems]  # [S, P, K, M2]
    choosers = [RandomChooser(rng) for rng in rngs]
    for problem in problems:
        problem.require_depth(max(point + tail for point in points) if tail else trunk_length)
    for level in range(trunk_length + tail):
        levels = []  # per problem: (prefix, where to write the drawn token)
        for trunk, path in zip(trunks, paths):
            slots = []
            for s in range(samples):
                if level < trunk_length:
                    slots.append((tuple(trunk[s, :level].tolist()), (s, level)))
                for index, point in enumerate(points):
                    step = level - point
                    if 0 <= step < tail:
                        base = tuple(trunk[s, :point].tolist())
                        for j in range(branches):
                            slots.append((base + tuple(path[s, index, j, :step].tolist()), (s, index, j, step)))
            levels.append(slots)
        with together():
            for problem, slots in zip(problems, levels):
                # a model problem feeds its draft only the level's new nodes (its tree kept across levels), p later
                announce = getattr(problem, "extend_drafts", None) or problem.prepare_drafts
                announce(list(dict.fromkeys(prefix for prefix, _ in slots)))
        for problem, chooser, trunk, path, slots in zip(problems, choosers, trunks, paths, levels):
            laws = {}  # a prefix's law is drawn from by every comb that reaches it: prepared once
            for prefix, where in slots:
                if prefix not in laws:
                    laws[prefix] = PreparedCategorical.from_compact(*problem.draft_compact(prefix))
                token = chooser.categorical(laws[prefix])
                if len(where) == 2:
                    trunk[where] = token
                else:
                    path[where] = token
    return [Combs(trunk, path, points) for trunk, path in zip(trunks, paths)]


def action_shape(combs: Combs, sample: int, k: int, l1: int, l2: int) -> TreeShape:
    """The tree of action (k, l1, l2) in one comb: ``trunk[:l1]``, then the first k paths of branch point l1 cut
    to l2 tokens (the child lists in path order, as ``DelayedDrafter.draw`` builds them)."""
    builder, node = TreeBuilder(), 0
    for token in combs.trunk[sample, :l1].tolist():
        node = builder.add_child(node, token)
    if l2 > 0:
        point = combs.points.index(l1)
        for j in range(k):
            child = node
            for token in combs.paths[sample, point, j, :l2].tolist():
                child = builder.add_child(child, token)
    return builder.shape()


def comb_internal_prefixes(combs: Combs) -> list[tuple[int, ...]]:
    """The distinct internal nodes of the combs (prefixes with a child in some comb): the trunk's prefixes but its
    whole self unless paths hang from it, and each path's proper prefixes under its branch point. Every node a
    registered rule needs p at (no registered rule reads p at a leaf: ``comb_trees.evaluate_trees``)."""
    trunk_length, tail = combs.trunk.shape[1], combs.paths.shape[-1]
    internal: dict[tuple[int, ...], None] = {}
    for s in range(combs.samples):
        trunk = tuple(combs.trunk[s].tolist())
        internal.update(dict.fromkeys(trunk[:length] for length in range(trunk_length)))
        for index, point in enumerate(combs.points):
            for path in combs.paths[s, index].tolist():
                internal.update(dict.fromkeys(trunk[:point] + tuple(path[:step]) for step in range(tail)))
    return list(internal)


def comb_values(problem: Problem, grid, combs: Combs, *, compress: bool = True) -> np.ndarray:
    """The exact E[tau + 1 | tree] of every action's tree in every comb, [S, A] float64 (grid order).

    Deterministic: the same combs give the same values. Trees are deduplicated per (verifier, shape), grouped
    by topology and evaluated with the verifier's batched ``emission_laws`` (DDTE Eq. 3 with the verifier's
    exact law in place of the product of acceptance probabilities); a rule with a node-local solver gives its
    stopping masses instead (its solver once per distinct node and child list of the combs, whatever trees hold
    it, kept across groups of combs, then one walk over all its trees: ``forest_masses``), and so does a rule that
    reads a ``LawForest`` (all its trees of a group in one table: ``forest_stopping_masses``); both tested equal to
    the laws' totals. ``compress`` cuts each group's vocabulary to the union of the supports of p and q at its nodes
    (see the module docstring). Combs are taken a few at a time, so that the laws held at once stay under
    ``LAW_ENTRIES`` float64 entries (one comb at a time at Qwen's dense V = 151,936 on the paper's grid, all of them
    at once under top-k 20: ``largest_law_entries``); a tree seen in an earlier comb is not evaluated again. A model
    problem computes the target's laws at every comb's internal nodes first, in one batch (where they fit in half
    its law cache), so the groups find them cached."""
    actions = grid.actions
    values = np.full((combs.samples, len(actions)), np.nan)                          # [S, A]
    prepare_comb_targets(problem, combs)
    width = min(problem.vocab_size, getattr(problem, "largest_law_entries", problem.vocab_size))
    step = max(1, LAW_ENTRIES // (2 * comb_nodes(grid) * width))
    known: dict[tuple, float] = {}    # (verifier, shape) -> value
    stored: dict[tuple, tuple] = {}   # (model, prefix) -> a law as (support, values)
    forms = ShapeForms()              # each shape's topology and flat form, once for every rule
    solved: dict[str, dict] = {}      # a walk rule's scalars at each node key id, across groups of combs
    trees = _distinct_trees(combs, actions)
    for first in range(0, combs.samples, step):
        last = min(first + step, combs.samples)
        members: dict[tuple, list[tuple[np.ndarray, int]]] = {}  # (verifier, shape) -> [(samples [s], action)]
        for tree, (inverse, shapes, rules) in trees.items():
            here = inverse[first:last]                                                # [s] distinct row a comb
            for row in np.unique(here).tolist():
                if shapes[row] is None:  # its tree built once, from the first comb that holds it
                    shapes[row] = action_shape(combs, int(np.argmax(inverse == row)), *tree)
                samples = first + np.flatnonzero(here == row)
                for a, verifier in rules:
                    members.setdefault((verifier, shapes[row]), []).append((samples, a))
        evaluate_trees(problem, [key for key in members if key not in known], known, compress, stored, forms, solved)
        for key, where in members.items():
            for samples, a in where:
                values[samples, a] = known[key]
    return values


def _distinct_trees(combs: Combs, actions) -> dict[tuple, tuple]:
    """(k, l1, l2) -> (inverse [S]: the distinct token rows of that tree's combs, numbered; [None] a distinct row,
    filled with its TreeShape when first met; [(action index, verifier)] of the actions with that tree). A tree's
    tokens are ``trunk[:l1]`` and its k paths cut to l2 (``action_shape``): combs that agree there give one tree,
    built and evaluated once (a code root's 64 combs often hold a handful of distinct trees)."""
    trees: dict[tuple, tuple] = {}
    for a, action in enumerate(actions):
        tree = (action.k, action.l1, action.l2)
        if tree not in trees:
            tokens = [combs.trunk[:, :action.l1]]
            if action.l2 > 0:
                point = combs.points.index(action.l1)
                tokens.append(combs.paths[:, point, :action.k, :action.l2].reshape(combs.samples, -1))
            rows = np.concatenate(tokens, axis=1)                                     # [S, l1 + k l2]
            if rows.shape[1]:
                _, inverse = np.unique(rows, axis=0, return_inverse=True)
            else:  # the root alone: one tree
                inverse = np.zeros(combs.samples, dtype=np.int64)
            inverse = inverse.reshape(-1)
            trees[tree] = (inverse, [None] * (int(inverse.max()) + 1), [])
        trees[tree][2].append((a, action.verifier))
    return trees


def prepare_comb_targets(problem: Problem, combs: Combs) -> None:
    """A model problem's target laws at every internal node of the combs in one batch (forwards of up to 512
    nodes), where they fit in half its law cache; nothing where they are cached already or the problem is not
    model-backed."""
    prepare, capacity = getattr(problem, "prepare", None), getattr(problem, "cache_capacity", None)
    internal = comb_internal_prefixes(combs)
    if prepare is not None and capacity and len(internal) <= capacity // 2:
        prepare(internal, draft=False)


__all__ = ["LAW_ENTRIES", "MAX_COMB_NODES", "Combs", "action_shape", "check_comb_size", "comb_internal_prefixes",
           "comb_layout", "comb_nodes", "comb_values", "prepare_comb_targets", "sample_combs",
           "sample_combs_together"]
