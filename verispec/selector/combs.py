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

Vectorised: the trees of all samples and actions are deduplicated (one value per distinct (verifier, tree)). A rule
with a node-local solver (the tree walk) runs its solver once per distinct (node, child list) of the combs, whatever
trees hold it, then walks every tree at once on the scalars (``verispec.verifiers.tree_walk.forest_masses``); any
other rule's trees are grouped by topology and each group's rows go through its batched ``emission_laws`` in chunks
as wide as the group's laws (top-k 20: a group is one batch). On a model problem
a root costs what its combs' tokens cost the models: q comes while the combs are drawn, level by level, the draft
fed only each level's new nodes (``ModelProblem.extend_drafts``); p in one target forward over the combs' internal
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

from verispec import backend
from verispec.errors import ProblemTooLargeError, VerispecError
from verispec.limits import MAX_DECODE_NODES
from verispec.simulator.chooser import PreparedCategorical, RandomChooser
from verispec.simulator.laws import check_emission_laws, check_stopping_masses
from verispec.simulator.problems import Problem
from verispec.simulator.trees import TreeBatch, TreeBuilder, TreeShape, shape_paths

#: Float64 entries of one [rows, nodes, V] array handed to a verifier at once (p, q and the law each hold one; a
#: rule's temporaries hold a dozen more). 2^22 (32 MiB) rather than 2^24: at Qwen's dense V = 151,936 (T = 1) the
#: larger chunk's temporaries lifted a build's peak by 1.8 GB at the same speed (measured, 6 roots).
CHUNK_ELEMENTS = 1 << 22

#: Float64 entries of one [rows, V] law handed to a node-local solver at once (``_solve_node_keys``): its temporaries
#: stay in cache. At Qwen's dense V = 151,936 that is 3 rows; 27 rows took 3-4x longer a row (measured on SpecInfer and
#: SpecTr's solvers, 4 children).
SOLVER_ELEMENTS = 1 << 19

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
    stopping masses instead (its solver once per distinct node and child list of the combs, whatever trees hold
    it, kept across groups of combs, then one walk over all its trees: ``forest_masses``; tested equal to the
    laws' totals). ``compress`` cuts each group's vocabulary to the union of the supports of p and q at its nodes
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
    forms = _ShapeForms()             # each shape's topology and flat form, once for every rule
    solved: dict[str, dict] = {}      # a walk rule's scalars at each node key id, across groups of combs
    for first in range(0, combs.samples, step):
        members: dict[tuple, list[tuple[int, int]]] = {}  # (verifier, shape) -> [(sample, action)]
        for s in range(first, min(first + step, combs.samples)):
            shapes: dict[tuple[int, int, int], TreeShape] = {}  # the rules of a grid share its trees
            for a, action in enumerate(actions):
                tree = (action.k, action.l1, action.l2)
                if tree not in shapes:
                    shapes[tree] = action_shape(combs, s, *tree)
                members.setdefault((action.verifier, shapes[tree]), []).append((s, a))
        _evaluate(problem, [key for key in members if key not in known], known, compress, stored, forms, solved)
        for key, where in members.items():
            for s, a in where:
                values[s, a] = known[key]
    return values


def prepare_comb_targets(problem: Problem, combs: Combs) -> None:
    """A model problem's target laws at every internal node of the combs in one batch (forwards of up to 512
    nodes), where they fit in half its law cache; nothing where they are cached already or the problem is not
    model-backed."""
    prepare, capacity = getattr(problem, "prepare", None), getattr(problem, "cache_capacity", None)
    internal = comb_internal_prefixes(combs)
    if prepare is not None and capacity and len(internal) <= capacity // 2:
        prepare(internal, draft=False)


def _evaluate(problem: Problem, keys: list[tuple], known: dict, compress: bool, stored: dict | None = None,
              forms: _ShapeForms | None = None, solved: dict | None = None) -> None:
    """known[(verifier, shape)] = E[tau + 1 | tree] for every key: a rule with a node-local solver by one walk over
    all its trees (``_walk_values``), any other rule batched per topology through its emission laws."""
    from verispec.verifiers import REGISTRY, get_verifier
    from verispec.verifiers.tree_walk import TopDownVerifier

    forms = _ShapeForms() if forms is None else forms
    solved = {} if solved is None else solved
    groups: dict[tuple, list] = {}    # (verifier, topology) -> [(key, node paths, tokens)]
    walks: dict[str, list] = {}       # a walk rule -> the shapes of its trees
    target_prefixes, draft_prefixes = [], []
    for key in keys:
        verifier, shape = key
        paths, parent, depth, tokens, child_lists = forms.topology(shape)
        if isinstance(get_verifier(verifier), TopDownVerifier):
            walks.setdefault(verifier, []).append(shape)
        else:
            groups.setdefault((verifier, parent, depth, child_lists), []).append((key, paths, tokens))
        # p at a leaf only sets the bonus token's law, never the mass of stopping there, for every registered rule
        # (tests/selector/test_selector_labels.py holds it): the target is not run at a leaf of every tree
        leaf_free = verifier in REGISTRY
        target_prefixes.extend(path for path, children in zip(paths, child_lists) if children or not leaf_free)
        draft_prefixes.extend(path for path, children in zip(paths, child_lists) if children)
    laws = _collect_laws(problem, target_prefixes, draft_prefixes, stored)
    size = problem.vocab_size
    for name, shapes in walks.items():
        values = _walk_values(get_verifier(name), shapes, forms, laws, size, compress, solved.setdefault(name, {}))
        for shape, value in zip(shapes, values.tolist()):
            known[(name, shape)] = value
    for (name, parent, depth, child_lists), rows in groups.items():
        verifier = get_verifier(name)
        nodes = len(parent)
        weights = np.asarray(depth, dtype=np.float64) + 1.0                           # [n] tau + 1 at each node
        # the group's laws cut once, its chunks sized by that width, not V: at top-k 20 a whole group is one batch
        cut = _columns([law for path in dict.fromkeys(path for _, paths, _ in rows for path in paths)
                        for law in laws.get(path, NO_LAWS)], size, compress)
        per_chunk = max(1, CHUNK_ELEMENTS // (nodes * cut[1]))
        for start in range(0, len(rows), per_chunk):
            chunk = rows[start:start + per_chunk]
            batch = _batch(chunk, laws, parent, depth, child_lists, cut)
            emitted = verifier.emission_laws(batch)                                   # [N, n, V']
            check_emission_laws(verifier.name, batch, emitted)
            mass = np.asarray(backend.to_numpy(emitted), dtype=np.float64).sum(axis=-1)   # [N, n]
            for (key, _, _), value in zip(chunk, mass @ weights):
                known[key] = float(value)


class _ShapeForms:
    """Each tree shape's topology (``_topology``) and flat form, computed once for every rule and group of combs
    that meets it, and the ids of the walk's node keys: a node's (token path, child list's tokens), what a node-local
    solver reads there. Paths name the laws within one problem, and tokens are the vocabulary's, so ids compare
    across shapes and groups."""

    def __init__(self):
        self._topologies: dict[TreeShape, tuple] = {}
        self._flat: dict[TreeShape, tuple] = {}
        self.node_ids: dict[tuple, int] = {}
        self.node_keys: list[tuple] = []  # id -> (token path, child list's tokens)

    def topology(self, shape: TreeShape) -> tuple:
        if shape not in self._topologies:
            self._topologies[shape] = _topology(shape)
        return self._topologies[shape]

    def flat(self, shape: TreeShape) -> tuple:
        """(parent, slot, depth, node key id), [n] int64 each: ``Forest``'s columns for one tree of this shape."""
        if shape not in self._flat:
            paths, parent, depth, _, child_lists = self.topology(shape)
            slot, key = [-1] * len(parent), [-1] * len(parent)
            for node, children in enumerate(child_lists):
                if children:
                    node_key = (paths[node], tuple(paths[child][-1] for child in children))
                    if node_key not in self.node_ids:
                        self.node_ids[node_key] = len(self.node_keys)
                        self.node_keys.append(node_key)
                    key[node] = self.node_ids[node_key]
                    for child in dict.fromkeys(children):
                        slot[child] = children.index(child)
            self._flat[shape] = tuple(np.array(column, dtype=np.int64) for column in (parent, slot, depth, key))
        return self._flat[shape]


def _walk_values(verifier, shapes: list, forms: _ShapeForms, laws: dict, size: int, compress: bool,
                 scalars: dict) -> np.ndarray:
    """E[tau + 1 | tree] of a node-local rule's trees of ``shapes``, [T] float64: its solver once per node key id not
    in ``scalars`` (id -> (K at each child-list entry, stopping mass), kept across calls), then one walk over every
    tree (``forest_masses``), each tree's masses checked to be a probability law."""
    from verispec.verifiers.tree_walk import Forest, forest_masses

    flats = [forms.flat(shape) for shape in shapes]
    counts = np.array([len(flat[0]) for flat in flats], dtype=np.int64)               # [T] nodes a tree
    offsets = np.repeat(np.cumsum(counts) - counts, counts)                          # [F] its tree's first node
    parent, slot, depth, key = (np.concatenate([flat[column] for flat in flats]) for column in range(4))
    forest = Forest(tree=np.repeat(np.arange(len(shapes)), counts), parent=np.where(parent >= 0, parent + offsets, -1),
                    slot=slot, depth=depth, key=key)
    used = np.unique(key[key >= 0]).tolist()
    _solve_node_keys(verifier, [node for node in used if node not in scalars], forms, laws, size, compress, scalars)
    widest = max((len(forms.node_keys[node][1]) for node in used), default=1)
    taken, stop = np.zeros((len(forms.node_keys), widest)), np.zeros(len(forms.node_keys))  # [K, m], [K]
    for node in used:
        row, stop[node] = scalars[node]
        taken[node, :len(row)] = row
    masses = forest_masses(forest, taken, stop)                                       # [F]
    totals = np.bincount(forest.tree, masses, minlength=len(shapes))                  # [T]
    minima = np.full(len(shapes), np.inf)
    with np.errstate(invalid="ignore"):  # NaN masses (NaN laws) fail the check below, which names the tree
        np.minimum.at(minima, forest.tree, masses)
    check_stopping_masses(verifier.name, totals, minima, lambda tree: shapes[tree])
    return np.bincount(forest.tree, masses * (depth + 1.0), minlength=len(shapes))


def _solve_node_keys(verifier, nodes: list[int], forms: _ShapeForms, laws: dict, size: int, compress: bool,
                     scalars: dict) -> None:
    """scalars[id] = the solver's (K at each child-list entry [m], stopping mass) at each node key id of ``nodes``,
    solved together per child-list length, their laws cut to the union of their supports (``_batch``'s cut)."""
    outside = int(getattr(verifier.node_solver, "outside_tokens_read", 0))
    if outside and compress:  # each node on the tokens it reads at full size, in their order (khisti)
        for node in nodes:
            path, children = forms.node_keys[node]
            taken, stopped = verifier.node_scalars(*_own_node(laws[path], children, size, outside))
            scalars[node] = (taken[0], float(stopped[0]))
        return
    by_length: dict[int, list[int]] = {}
    for node in nodes:
        by_length.setdefault(len(forms.node_keys[node][1]), []).append(node)
    for group in by_length.values():
        group_laws = [laws[forms.node_keys[node][0]] for node in group]
        column, width = _columns([law for pair in group_laws for law in pair], size, compress)  # cut once a group
        rows = max(1, SOLVER_ELEMENTS // width)
        for start in range(0, len(group), rows):
            chunk, chunk_laws = group[start:start + rows], group_laws[start:start + rows]
            p = _law_rows([target for target, _ in chunk_laws], column, width)                # [M, V']
            q = _law_rows([draft for _, draft in chunk_laws], column, width)                  # [M, V']
            children = column[np.array([forms.node_keys[node][1] for node in chunk], dtype=np.int64)]  # [M, m]
            taken, stopped = verifier.node_scalars(p, q, children)
            for index, node in enumerate(chunk):
                scalars[node] = (taken[index], float(stopped[index]))


#: The laws of a node that is a leaf of every tree asked for (p unused, q undefined).
NO_LAWS = (None, None)


def _columns(stored: list, size: int, compress: bool) -> tuple[np.ndarray, int]:
    """(column [V] int64, width): the vocabulary cut to the union of the supports of the ``stored`` laws
    (``CompactLaw`` pairs or None), ``column[token]`` a token's place in it or -1; the whole vocabulary where a law is
    dense or ``compress`` is off (a token with p = q = 0 at every node takes part in no registered rule's law but
    khisti's: ``_own_node``)."""
    present = [law for law in stored if law is not None]
    if compress and all(support is not None for support, _ in present):
        support = np.unique(np.concatenate([support for support, _ in present])) if present else np.zeros(1, np.int64)
    else:
        support = np.arange(size)
    column = np.full(size, -1, dtype=np.int64)
    column[support] = np.arange(len(support))
    return column, len(support)


def _own_node(pair: tuple, children: tuple, size: int, outside: int):
    """(p, q [1, V'], the child list [1, m] as columns) of one node whose rule reads ``outside`` zero-mass tokens
    (``NodeSolver.outside_tokens_read``): the union of its p's and q's supports and the ``outside`` lowest-numbered
    tokens outside it, the columns its rule keeps at full size, in vocabulary order (no [V] index: a few tokens a
    node); the whole vocabulary where a law is dense."""
    if any(law is None or law[0] is None for law in pair):
        column, width = _columns(list(pair), size, False)
        return (*(_law_rows([law], column, width) for law in pair), column[np.array([children], dtype=np.int64)])
    union = np.union1d(pair[0][0], pair[1][0])
    lowest = np.setdiff1d(np.arange(min(size, len(union) + outside)), union)[:outside]
    support = np.union1d(union, lowest)                                               # [V'] ascending
    p, q = np.zeros((1, len(support))), np.zeros((1, len(support)))
    for row, (ids, values) in zip((p, q), pair):
        row[0, np.searchsorted(support, ids)] = values
    return p, q, np.searchsorted(support, np.array([children], dtype=np.int64))       # children: q > 0, kept


def _law_rows(stored: list, column: np.ndarray, width: int) -> np.ndarray:
    """The ``stored`` laws (``CompactLaw`` pairs, or None for a leaf's p, which no registered rule's stopping mass
    reads: any law will do) as rows over the cut vocabulary, [D, V'] float64."""
    rows = np.zeros((len(stored), width))                                             # [D, V']
    for row, law in zip(rows, stored):
        if law is None:
            row[0] = 1.0
        elif law[0] is None:
            row[:] = law[1]  # a dense law forces the whole vocabulary
        else:
            row[column[law[0]]] = law[1]
    return rows


def _batch(rows, laws: dict, parent, depth, child_lists, cut: tuple[np.ndarray, int]) -> TreeBatch:
    """A ``TreeBatch`` of one topology from (key, node paths, tokens) rows, p and q gathered from ``laws`` onto the
    vocabulary ``cut`` (``_columns`` of the rows' group: (column [V], width))."""
    internal = [bool(children) for children in child_lists]
    distinct = list(dict.fromkeys(path for _, paths, _ in rows for path in paths))
    column, width = cut
    count, nodes = len(rows), len(parent)
    context_id = {path: index for index, path in enumerate(distinct)}
    # each distinct node's laws once, then gathered into the rows in one indexing (a tree of n nodes per row shares
    # most of its nodes with the other rows); q's last row is the NaN law of a leaf
    target_rows = _law_rows([laws.get(path, NO_LAWS)[0] for path in distinct], column, width)          # [D, V']
    draft_rows = np.concatenate([_law_rows([laws.get(path, NO_LAWS)[1] for path in distinct], column, width),
                                 np.full((1, width), np.nan)])                                         # [D + 1, V']
    contexts = np.array([[context_id[path] for path in paths] for _, paths, _ in rows],
                        dtype=np.int64).reshape(count, nodes)                         # [N, n]
    leaf = ~np.array(internal)                                                        # [n]
    p = target_rows[contexts]                                                         # [N, n, V']
    q = draft_rows[np.where(leaf[None, :], len(distinct), contexts)]                  # [N, n, V'] NaN at leaves
    tokens = np.array([[-1] + [int(column[t]) for t in node_tokens[1:]] for _, _, node_tokens in rows],
                      dtype=np.int64).reshape(count, nodes)                           # [N, n]
    return TreeBatch(vocab_size=width, parent=parent, depth=depth, child_lists=child_lists, tokens=tokens, p=p,
                     q=q, contexts=contexts)


__all__ = ["CHUNK_ELEMENTS", "LAW_ENTRIES", "MAX_COMB_NODES", "SOLVER_ELEMENTS", "Combs", "action_shape",
           "check_comb_size", "comb_internal_prefixes", "comb_layout", "comb_nodes", "comb_values",
           "prepare_comb_targets", "sample_combs", "sample_combs_together"]
