"""Labels of the delay selector: E[tau + 1] of every action of a grid at one root.

The DDTE paper (Thomas et al. 2026, arXiv 2602.16994, Sec. 6, Eq. 3) labels a (root, action) pair with a
Monte-Carlo estimate of the block efficiency E[tau + 1]: the sum over the nodes of a sampled draft tree of the
products of branching (acceptance) probabilities on the path to the node, averaged over 4 sampled trees.
verispec labels the same quantity three ways (``LabelSet.method``):

* ``exact_labels``: ``verispec.analyze`` per action (every draft tree with its probability; small problems).
* ``certified_labels``: ``verispec.certify`` per action, an interval certified to contain the exact value;
  the label is its midpoint.
* ``conditional_exact_labels``: the *conditional-exact* estimator. For each of m sampled draft trees T, the
  exact E[tau + 1 | T] = sum over nodes n of P(the verifier stops at n | T) (depth(n) + 1), from the verifier's
  batched emission law (``Verifier.emission_laws``: law[n, y] = P(accept the path to n, then emit y)); the
  label is the mean over the m trees, with its standard error. It has no verification noise, only draft noise.

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

Vectorised: the trees of all samples and actions are deduplicated (one value per distinct (verifier, tree)), grouped
by topology, and each group's rows go through the verifier's batched ``emission_laws`` in chunks. On a model problem
a root costs what its combs' tokens cost the models: q comes while the combs are drawn, level by level, the draft
fed only each level's new nodes (``ModelProblem.extend_drafts``); p in one target forward over the combs' internal
nodes (``comb_internal_prefixes``) on the context's KV cache; several roots' combs are drawn and forwarded together
(``conditional_exact_labels_together``). p at a leaf is never computed: it only sets the law of the bonus token
after the leaf, for every registered rule (a test over the registry moves p at the leaves and holds the stopping
masses to 1e-12); a rule outside the registry gets it too. A chunk's vocabulary is cut to the union of p's and q's
supports at its nodes (a token with p = q = 0 at every node takes part in no registered rule; tested): top-k and
top-p laws at V = 151,936 are cheap.
"""

from __future__ import annotations

import math
from contextlib import nullcontext
from dataclasses import dataclass

import numpy as np

from verispec import backend
from verispec.errors import ProblemTooLargeError, VerispecError
from verispec.limits import MAX_DECODE_NODES
from verispec.simulator.chooser import PreparedCategorical, RandomChooser
from verispec.simulator.laws import check_emission_laws, check_emission_masses
from verispec.simulator.problems import Problem
from verispec.simulator.trees import TreeBatch, TreeBuilder, TreeShape, shape_paths

#: The ways a label is computed (``LabelSet.method``).
LABEL_METHODS = ("exact", "certified", "conditional")

#: Float64 entries of one [rows, nodes, V] array handed to a verifier at once (p, q and the law each hold one; a
#: rule's temporaries hold a dozen more). 2^22 (32 MiB) rather than 2^24: at Qwen's dense V = 151,936 (T = 1) the
#: larger chunk's temporaries lifted a build's peak by 1.8 GB at the same speed (measured, 6 roots).
CHUNK_ELEMENTS = 1 << 22

#: Float64 entries of the p and q laws ``comb_values`` holds at once (about 1 GiB; combs go in groups that fit).
LAW_ENTRIES = 1 << 27

#: Normal quantile of the two-sided 95% interval stored beside a conditional label (lower, upper).
Z95 = 1.959963984540054


@dataclass(frozen=True, eq=False)
class LabelSet:
    """The labels of every action of a grid at one root (arrays in grid order, float64).

    efficiency  [A]  E[tau + 1]: exact, the certified interval's midpoint, or the conditional-exact mean
    stderr      [A]  standard error of the mean (0 for exact and certified; NaN for one sample)
    lower/upper [A]  the value itself (exact); the certified interval (certified); for conditional, the normal
                     95% interval mean -/+ 1.96 stderr clipped to [1, depth + 1] (NOT certified; the sure bounds
                     [1, depth + 1] when stderr is NaN)
    method           "exact", "certified" or "conditional"
    samples          sampled combs (0 unless conditional)
    per_sample  [S, A] (conditional only) the exact conditional value of every sampled comb, so that label
                     quality studies can subsample m trees of the same roots
    """

    efficiency: np.ndarray
    stderr: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    method: str
    samples: int = 0
    per_sample: np.ndarray | None = None

    def __post_init__(self):
        if self.method not in LABEL_METHODS:
            raise VerispecError(f"label method must be one of {', '.join(LABEL_METHODS)}, got {self.method!r}")
        for name in ("efficiency", "stderr", "lower", "upper"):
            array = np.asarray(getattr(self, name), dtype=np.float64)
            array.setflags(write=False)
            object.__setattr__(self, name, array)

    def __len__(self) -> int:
        return len(self.efficiency)


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
                    laws[prefix] = PreparedCategorical(np.asarray(problem.draft(prefix), dtype=np.float64))
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


def _topology(shape: TreeShape):
    """(node paths, parent, depth, tokens, child lists as node ids) of a canonical shape (breadth first)."""
    paths = shape_paths(shape)
    index = {path: node for node, path in enumerate(paths)}
    parent = (-1,) + tuple(index[path[:-1]] for path in paths[1:])
    child_lists = tuple(tuple(index[paths[node] + (int(token),)] for token in children)
                        for node, children in enumerate(shape))
    tokens = (-1,) + tuple(path[-1] for path in paths[1:])
    return paths, parent, tuple(len(path) for path in paths), tokens, child_lists


def _collect_laws(problem: Problem, target_prefixes, draft_prefixes, stored: dict | None = None) -> dict:
    """prefix -> (p or None, q or None) as ``CompactLaw`` pairs: p at ``target_prefixes``, q at ``draft_prefixes``;
    ``stored`` ((model, prefix) -> pair) keeps them from one call to the next (a law is scanned for its support
    once a root, not once for each group of combs that reads it).
    Asked for through ``Problem.prepare`` (the target alone where the problem can: the draft's laws at a comb's
    internal nodes were computed while it was drawn) or ``prepare_drafts``, in batches no larger than half a model
    problem's law cache, so nothing is evicted before it is read."""
    model_prepare = getattr(problem, "prepare", None)
    capacity = getattr(problem, "cache_capacity", None)
    targets = set(target_prefixes)
    internal = set(draft_prefixes)
    prefixes = list(dict.fromkeys(list(target_prefixes) + list(draft_prefixes)))
    batch = max(1, capacity // 2) if capacity else max(1, len(prefixes))
    laws = {}
    for start in range(0, len(prefixes), batch):
        chunk = prefixes[start:start + batch]
        if model_prepare is not None:
            model_prepare([prefix for prefix in chunk if prefix in targets], draft=False)
        else:
            problem.prepare_drafts(chunk)
        for prefix in chunk:
            laws[prefix] = (_stored_law(problem, 0, prefix, stored) if prefix in targets else None,
                            _stored_law(problem, 1, prefix, stored) if prefix in internal else None)
    return laws


def _stored_law(problem: Problem, model: int, prefix, stored: dict | None):
    """p (model 0) or q (model 1) at ``prefix`` as a ``CompactLaw``, kept in ``stored``."""
    if stored is not None and (model, prefix) in stored:
        return stored[(model, prefix)]
    pair = problem.target_compact(prefix) if model == 0 else problem.draft_compact(prefix)
    if stored is not None:
        stored[(model, prefix)] = pair
    return pair


def comb_internal_prefixes(combs: Combs) -> list[tuple[int, ...]]:
    """The distinct internal nodes of the combs (prefixes with a child in some comb): the trunk's prefixes but its
    whole self unless paths hang from it, and each path's proper prefixes under its branch point. Every node a
    registered rule needs p at (no registered rule reads p at a leaf: ``_evaluate``)."""
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
    stopping masses instead (``TopDownVerifier.emission_masses``: its solver once per distinct node and child
    list of the combs, whatever trees hold it; tested equal to the laws' totals). ``compress`` cuts each chunk's
    vocabulary to the union of the supports of p and q at its nodes (see the module docstring). Combs are taken a
    few at a time, so that the laws held at once stay under ``LAW_ENTRIES`` float64 entries (one comb at a time at
    Qwen's dense V = 151,936 on the paper's grid); a tree seen in an earlier comb is not evaluated again. A model
    problem computes the target's laws at every comb's internal nodes first, in one batch (where they fit in half
    its law cache), so the groups find them cached."""
    actions = grid.actions
    values = np.full((combs.samples, len(actions)), np.nan)                          # [S, A]
    _prepare_comb_targets(problem, combs)
    step = max(1, LAW_ENTRIES // (2 * comb_nodes(grid) * problem.vocab_size))
    known: dict[tuple, float] = {}    # (verifier, shape) -> value
    stored: dict[tuple, tuple] = {}   # (model, prefix) -> a law as (support, values)
    for first in range(0, combs.samples, step):
        members: dict[tuple, list[tuple[int, int]]] = {}  # (verifier, shape) -> [(sample, action)]
        for s in range(first, min(first + step, combs.samples)):
            shapes: dict[tuple[int, int, int], TreeShape] = {}  # the rules of a grid share its trees
            for a, action in enumerate(actions):
                tree = (action.k, action.l1, action.l2)
                if tree not in shapes:
                    shapes[tree] = action_shape(combs, s, *tree)
                members.setdefault((action.verifier, shapes[tree]), []).append((s, a))
        _evaluate(problem, [key for key in members if key not in known], known, compress, stored)
        for key, where in members.items():
            for s, a in where:
                values[s, a] = known[key]
    return values


def _prepare_comb_targets(problem: Problem, combs: Combs) -> None:
    """A model problem's target laws at every internal node of the combs in one batch (forwards of up to 512
    nodes), where they fit in half its law cache; nothing where they are cached already or the problem is not
    model-backed."""
    prepare, capacity = getattr(problem, "prepare", None), getattr(problem, "cache_capacity", None)
    internal = comb_internal_prefixes(combs)
    if prepare is not None and capacity and len(internal) <= capacity // 2:
        prepare(internal, draft=False)


def _evaluate(problem: Problem, keys: list[tuple], known: dict, compress: bool, stored: dict | None = None) -> None:
    """known[(verifier, shape)] = E[tau + 1 | tree] for every key, batched per (verifier, topology)."""
    from verispec.verifiers import REGISTRY, get_verifier
    from verispec.verifiers.tree_walk import TopDownVerifier

    groups: dict[tuple, list] = {}    # (verifier, topology) -> [(key, node paths, tokens)]
    target_prefixes, draft_prefixes = [], []
    for key in keys:
        verifier, shape = key
        paths, parent, depth, tokens, child_lists = _topology(shape)
        groups.setdefault((verifier, parent, depth, child_lists), []).append((key, paths, tokens))
        # p at a leaf only sets the bonus token's law, never the mass of stopping there, for every registered rule
        # (tests/selector/test_selector_labels.py holds it): the target is not run at a leaf of every tree
        leaf_free = verifier in REGISTRY
        target_prefixes.extend(path for path, children in zip(paths, child_lists) if children or not leaf_free)
        draft_prefixes.extend(path for path, children in zip(paths, child_lists) if children)
    laws = _collect_laws(problem, target_prefixes, draft_prefixes, stored)
    size = problem.vocab_size
    # a rule with a node-local solver (the tree walk) runs it once per distinct (node, child list) of these combs,
    # whatever trees hold it, and gives the stopping masses without the [N, n, V] laws (emission_masses)
    solved: dict[str, dict] = {}
    for (name, parent, depth, child_lists), rows in groups.items():
        verifier = get_verifier(name)
        nodes = len(parent)
        weights = np.asarray(depth, dtype=np.float64) + 1.0                           # [n] tau + 1 at each node
        per_chunk = max(1, CHUNK_ELEMENTS // (nodes * size))
        for start in range(0, len(rows), per_chunk):
            chunk = rows[start:start + per_chunk]
            if isinstance(verifier, TopDownVerifier):
                cache, keys = solved.setdefault(name, {}), _node_keys(chunk, child_lists)
                fresh = _rows_with_new_nodes(keys, cache)
                if fresh:  # the laws of rows bringing a node not solved yet: the solver runs there, once a node
                    verifier.emission_masses(_batch([chunk[row] for row in fresh], laws, size, parent, depth,
                                                    child_lists, compress), [keys[row] for row in fresh], cache)
                # every node solved: the walk reads the cached scalars alone, and no [N, n, V] laws are gathered
                batch = _topology_batch(chunk, parent, depth, child_lists)
                mass = verifier.emission_masses(batch, keys, cache)
                check_emission_masses(verifier.name, batch, mass)                     # [N, n]
            else:
                batch = _batch(chunk, laws, size, parent, depth, child_lists, compress)
                emitted = verifier.emission_laws(batch)                               # [N, n, V']
                check_emission_laws(verifier.name, batch, emitted)
                mass = np.asarray(backend.to_numpy(emitted), dtype=np.float64).sum(axis=-1)   # [N, n]
            for (key, _, _), value in zip(chunk, mass @ weights):
                known[key] = float(value)


def _node_keys(rows, child_lists) -> list[list]:
    """Per tree and node, what a node-local solver reads there: (the node's token path, its child list's tokens),
    None at leaves. Paths name the laws within one problem, and tokens are the vocabulary's (not a chunk's
    compressed columns), so keys compare across chunks."""
    return [[(paths[node], tuple(paths[child][-1] for child in children)) if children else None
             for node, children in enumerate(child_lists)] for _, paths, _ in rows]


def _rows_with_new_nodes(keys: list[list], cache: dict) -> list[int]:
    """The fewest rows, first come, that hold every internal node whose key ``cache`` lacks."""
    rows, covered = [], set()
    for row, row_keys in enumerate(keys):
        new = {key for key in row_keys if key is not None and key not in cache and key not in covered}
        if new:
            rows.append(row)
            covered |= new
    return rows


def _topology_batch(rows, parent, depth, child_lists) -> TreeBatch:
    """A ``TreeBatch`` of the rows' topology and tokens without their laws, for a walk rule whose every node is
    solved already (``TopDownVerifier.emission_masses`` with its cache then reads no law but p's total at a leaf,
    which is 1: each leaf's p is given as the one-token law [1])."""
    count, nodes = len(rows), len(parent)
    tokens = np.array([[-1] + [int(token) for token in node_tokens[1:]] for _, _, node_tokens in rows],
                      dtype=np.int64).reshape(count, nodes)                           # [N, n]
    return TreeBatch(vocab_size=1, parent=parent, depth=depth, child_lists=child_lists, tokens=tokens,
                     p=np.ones((count, nodes, 1)), q=np.full((count, nodes, 1), np.nan),
                     contexts=np.zeros((count, nodes), dtype=np.int64))


#: The laws of a node that is a leaf of every tree asked for (p unused, q undefined).
NO_LAWS = (None, None)


def _batch(rows, laws: dict, size: int, parent, depth, child_lists, compress: bool) -> TreeBatch:
    """A ``TreeBatch`` of one topology from (key, node paths, tokens) rows, p and q gathered from ``laws``."""
    internal = [bool(children) for children in child_lists]
    distinct = list(dict.fromkeys(path for _, paths, _ in rows for path in paths))
    stored = [law for path in distinct for law in laws.get(path, NO_LAWS) if law is not None]
    if compress and all(support is not None for support, _ in stored):
        support = np.unique(np.concatenate([support for support, _ in stored]))      # [V'] kept tokens
    else:
        support = np.arange(size)
    column = np.full(size, -1, dtype=np.int64)
    column[support] = np.arange(len(support))
    width, count, nodes = len(support), len(rows), len(parent)
    context_id = {path: index for index, path in enumerate(distinct)}
    # each distinct node's laws once, then gathered into the rows in one indexing (a tree of n nodes per row shares
    # most of its nodes with the other rows); q's last row is the NaN law of a leaf
    target_rows = np.empty((len(distinct), width))                                    # [D, V']
    draft_rows = np.empty((len(distinct) + 1, width))                                 # [D + 1, V']
    draft_rows[-1] = np.nan

    def put(target, law):
        if law is None:  # a leaf's p, which no registered rule's stopping mass reads: any law will do
            target[:] = 0.0
            target[0] = 1.0
            return
        where, values = law
        if where is None:
            target[:] = values  # a dense law forces the whole vocabulary
        else:
            target[:] = 0.0
            target[column[where]] = values

    for index, path in enumerate(distinct):
        target_law, draft_law = laws.get(path, NO_LAWS)
        put(target_rows[index], target_law)
        put(draft_rows[index], draft_law)
    contexts = np.array([[context_id[path] for path in paths] for _, paths, _ in rows],
                        dtype=np.int64).reshape(count, nodes)                         # [N, n]
    leaf = ~np.array(internal)                                                        # [n]
    p = target_rows[contexts]                                                         # [N, n, V']
    q = draft_rows[np.where(leaf[None, :], len(distinct), contexts)]                  # [N, n, V'] NaN at leaves
    tokens = np.array([[-1] + [int(column[t]) for t in node_tokens[1:]] for _, _, node_tokens in rows],
                      dtype=np.int64).reshape(count, nodes)                           # [N, n]
    return TreeBatch(vocab_size=width, parent=parent, depth=depth, child_lists=child_lists, tokens=tokens, p=p,
                     q=q, contexts=contexts)


# --- the three labellers --------------------------------------------------------------------------------------


def _check_grid(grid) -> None:
    if not hasattr(grid, "actions") or not grid.actions:
        raise VerispecError(f"expected an ActionGrid with at least one action, got {type(grid).__name__}")


def conditional_exact_labels(problem: Problem, grid, *, samples: int, seed: int) -> LabelSet:
    """The conditional-exact labels (module docstring; DDTE Eq. 3, averaged over ``samples`` sampled combs
    drawn from ``numpy.random.default_rng(seed)``): mean over combs of the exact E[tau + 1 | tree], its
    standard error (std with ddof 1 over sqrt(samples); NaN for one sample) and a normal 95% interval."""
    return conditional_exact_labels_together([problem], grid, samples=samples, seeds=[seed])[0]


def conditional_exact_labels_together(problems, grid, *, samples: int, seeds, together=nullcontext) -> list[LabelSet]:
    """``conditional_exact_labels(problems[i], grid, samples=samples, seed=seeds[i])`` for every i, the model
    forwards of all of them together: each draft level of every problem's combs inside one ``together()`` block,
    then the target over every problem's comb internal nodes inside another (a ``ProblemPack``'s ``together``: one
    draft pass a level and one target pass for all its members). Each problem draws from its own generator, so its
    labels are those it gets alone, up to the rounding of the larger passes."""
    _check_grid(grid)
    if isinstance(samples, bool) or not isinstance(samples, (int, np.integer)) or samples < 1:
        raise VerispecError(f"samples must be a positive integer (sampled trees per root), got {samples!r}")
    problems, seeds = list(problems), list(seeds)
    if not problems or len(seeds) != len(problems):
        raise VerispecError(f"give one seed per problem: {len(problems)} problems and {len(seeds)} seeds")
    for seed in seeds:
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
            raise VerispecError(f"seed must be a non-negative integer, got {seed!r}")
    check_comb_size(grid)
    combs = sample_combs_together(problems, grid, int(samples), [np.random.default_rng(int(seed)) for seed in seeds],
                                  together)
    with together():  # the target once over every problem's combs (comb_values then finds the laws cached)
        for problem, comb in zip(problems, combs):
            _prepare_comb_targets(problem, comb)
    return [_conditional_label_set(comb_values(problem, grid, comb), grid) for problem, comb in zip(problems, combs)]


def _conditional_label_set(per_sample: np.ndarray, grid) -> LabelSet:
    """The LabelSet of conditional values [S, A]: their mean, standard error and normal 95% interval."""
    samples = per_sample.shape[0]
    mean = per_sample.mean(axis=0)                                                    # [A]
    if samples > 1:
        stderr = per_sample.std(axis=0, ddof=1) / math.sqrt(samples)
    else:
        stderr = np.full(len(mean), np.nan)
    top = np.array([action.depth + 1.0 for action in grid.actions])                  # [A] most tokens a block emits
    half = np.where(np.isnan(stderr), np.inf, Z95 * stderr)
    lower = np.clip(mean - half, 1.0, top)
    upper = np.clip(mean + half, 1.0, top)
    per_sample.setflags(write=False)
    return LabelSet(mean, stderr, lower, upper, "conditional", int(samples), per_sample)


def exact_label_method(action) -> str:
    """The engine method of an action's exact label: the walk DP without the output law for a node solver on an
    i.i.d. tree (the label needs E[tau + 1] only), else 'auto'."""
    from verispec.simulator.engine import dp_applies
    from verispec.verifiers import get_verifier

    return "dp-metrics" if dp_applies(action.drafter(), get_verifier(action.verifier)) else "auto"


def label_estimates(problem: Problem, grid, method: str = "exact") -> list[tuple[object, object]]:
    """(action, the engine's estimate of its label: ``estimate_analysis``, or ``estimate_certify`` for 'certified')
    for each distinct (verifier, tree) of ``grid`` on ``problem`` (a problem, or a ``ProblemShape`` of one);
    raises what the engine raises where an action cannot be labelled exactly at all (``ProblemTooLargeError``).
    What a build checks before its first root: a root's labels cost the sum over these."""
    from verispec.simulator.certified import estimate_certify
    from verispec.simulator.engine import estimate_analysis
    from verispec.verifiers import get_verifier

    _check_grid(grid)
    estimates = {}
    for action in grid.actions:
        if (action.verifier, action.tree) not in estimates:
            verifier = get_verifier(action.verifier)
            estimate = estimate_certify(problem, action.tree, verifier) if method == "certified" else \
                estimate_analysis(problem, action.tree, verifier, exact_label_method(action))
            estimates[(action.verifier, action.tree)] = (action, estimate)
    return list(estimates.values())


def exact_labels(problem: Problem, grid, **options) -> LabelSet:
    """Exact E[tau + 1] of every action (``verispec.analyze``; node-solver verifiers through the walk DP without
    the output law: ``exact_label_method``). ``options`` go to analyze (deadline, ...). Raises what analyze raises
    where a tree is too large for it (``ProblemTooLargeError``)."""
    from verispec.api import analyze
    from verispec.verifiers import get_verifier

    _check_grid(grid)
    requested = options.pop("method", None)
    known: dict[tuple[str, str], float] = {}
    values = []
    for action in grid.actions:
        key = (action.verifier, action.tree)
        if key not in known:
            verifier = get_verifier(action.verifier)
            method = requested or exact_label_method(action)
            result = analyze(problem, action.tree, verifier, method=method, **options)
            known[key] = float(result.block_efficiency)
        values.append(known[key])
    efficiency = np.array(values)
    return LabelSet(efficiency, np.zeros(len(values)), efficiency, efficiency, "exact")


def certified_labels(problem: Problem, grid, epsilon: float, **options) -> LabelSet:
    """Certified intervals of width at most ``epsilon`` (``verispec.certify``) for every action; the label is the
    midpoint, ``lower``/``upper`` the interval (wider than epsilon only where certify ran out of its budget and
    says so). ``options`` go to certify (max_rows, deadline, ...)."""
    from verispec.api import certify

    _check_grid(grid)
    known: dict[tuple[str, str], tuple[float, float]] = {}
    lower, upper = [], []
    for action in grid.actions:
        key = (action.verifier, action.tree)
        if key not in known:
            result = certify(problem, action.tree, action.verifier, epsilon, **options)
            known[key] = (float(result.lower), float(result.upper))
        lower.append(known[key][0])
        upper.append(known[key][1])
    lower, upper = np.array(lower), np.array(upper)
    return LabelSet((lower + upper) / 2, np.zeros(len(lower)), lower, upper, "certified")


__all__ = ["CHUNK_ELEMENTS", "LABEL_METHODS", "LAW_ENTRIES", "Combs", "LabelSet", "action_shape", "certified_labels",
           "comb_internal_prefixes", "comb_layout", "comb_values", "conditional_exact_labels",
           "conditional_exact_labels_together", "exact_label_method", "exact_labels", "label_estimates",
           "sample_combs", "sample_combs_together"]
