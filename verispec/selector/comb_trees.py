"""The exact E[tau + 1 | tree] of a group of distinct trees of one problem, every rule its own route (the labels'
``verispec.selector.combs.comb_values`` hands each group of combs' distinct (verifier, tree) keys here).

Three routes, each tested equal to the rule's emission laws summed over tokens
(``tests/selector/test_selector_labels.py``, ``tests/verifiers/test_forest_stopping_masses.py``):

* a rule with a node-local solver (the tree walk: specinfer, spectr, khisti, naivetree) runs its solver once per
  distinct (node, child list), whatever trees hold it and across groups, then walks every tree at once on the
  scalars (``verispec.verifiers.tree_walk.forest_masses``);
* a rule that reads a ``LawForest`` (Traversal and GBV: ``reads_forest``) takes all its trees, of whatever
  topologies, in one flat table (or as few as keep its laws under ``FOREST_LAW_ENTRIES`` at a dense vocabulary) and
  gives every node's stopping mass (``forest_stopping_masses``);
* any other rule's trees are grouped by topology, and each group's rows go through its batched ``emission_laws``.

The laws are read once a node (``_collect_laws``: a model problem's target in batches that its cache holds), each
route's vocabulary cut to the supports that matter (khisti's nodes keep the zero-mass tokens they read).
"""

from __future__ import annotations

import numpy as np

from verispec import backend
from verispec.simulator.laws import check_emission_laws, check_stopping_masses
from verispec.simulator.problems import Problem
from verispec.simulator.trees import LawForest, TreeBatch, TreeShape, shape_paths

#: Float64 entries of one [rows, nodes, V] array handed to a verifier at once (p, q and the law each hold one; a
#: rule's temporaries hold a dozen more). 2^22 (32 MiB) rather than 2^24: at Qwen's dense V = 151,936 (T = 1) the
#: larger chunk's temporaries lifted a build's peak by 1.8 GB at the same speed (measured, 6 roots).
CHUNK_ELEMENTS = 1 << 22

#: Float64 entries of one [rows, V] law handed to a node-local solver at once (``_solve_node_keys``): its temporaries
#: stay in cache. At Qwen's dense V = 151,936 that is 3 rows; 27 rows took 3-4x longer a row (measured on SpecInfer and
#: SpecTr's solvers, 4 children).
SOLVER_ELEMENTS = 1 << 19

#: Float64 entries of a ``LawForest``'s p table (and of its q): about 55 rows at Qwen's dense V = 151,936, where a
#: group's trees go into several forests; one forest at top-k laws.
FOREST_LAW_ENTRIES = 1 << 23

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


def evaluate_trees(problem: Problem, keys: list[tuple], known: dict, compress: bool, stored: dict | None = None,
                   forms: ShapeForms | None = None, solved: dict | None = None) -> None:
    """known[(verifier, shape)] = E[tau + 1 | tree] for every key: a rule with a node-local solver by one walk over
    all its trees (``_walk_values``), a rule that reads a ``LawForest`` by its forests (``_forest_values``), any
    other rule batched per topology through its emission laws."""
    from verispec.verifiers import REGISTRY, get_verifier
    from verispec.verifiers.tree_walk import TopDownVerifier

    forms = ShapeForms() if forms is None else forms
    solved = {} if solved is None else solved
    groups: dict[tuple, list] = {}    # (verifier, topology) -> [(key, node paths, tokens)]
    walks: dict[str, list] = {}       # a walk rule -> the shapes of its trees
    forests: dict[str, list] = {}     # a rule that reads a LawForest -> the shapes of its trees
    kinds = {}                        # a rule -> "walk", "forest" or "laws"
    needs_leaves: dict[TreeShape, bool] = {}  # each shape met -> whether some rule of it reads p at its leaves
    for key in keys:
        verifier, shape = key
        if verifier not in kinds:
            rule = get_verifier(verifier)
            kinds[verifier] = "walk" if isinstance(rule, TopDownVerifier) else \
                "forest" if rule.reads_forest else "laws"
        if kinds[verifier] == "walk":
            walks.setdefault(verifier, []).append(shape)
        elif kinds[verifier] == "forest":
            forests.setdefault(verifier, []).append(shape)
        else:
            paths, parent, depth, tokens, child_lists = forms.topology(shape)
            groups.setdefault((verifier, parent, depth, child_lists), []).append((key, paths, tokens))
        # p at a leaf only sets the bonus token's law, never the mass of stopping there, for every registered rule
        # (tests/selector/test_selector_labels.py holds it): the target is not run at a leaf of every tree
        needs_leaves[shape] = needs_leaves.get(shape, False) or verifier not in REGISTRY
    target_prefixes, draft_prefixes = [], []
    for shape, leaves in needs_leaves.items():  # each shape's nodes once, whatever rules read it
        paths, _, _, _, child_lists = forms.topology(shape)
        target_prefixes.extend(path for path, children in zip(paths, child_lists) if children or leaves)
        draft_prefixes.extend(path for path, children in zip(paths, child_lists) if children)
    laws = _collect_laws(problem, target_prefixes, draft_prefixes, stored)
    size = problem.vocab_size
    for name, shapes in walks.items():
        values = _walk_values(get_verifier(name), shapes, forms, laws, size, compress, solved.setdefault(name, {}))
        for shape, value in zip(shapes, values.tolist()):
            known[(name, shape)] = value
    for name, shapes in forests.items():
        values = _forest_values(get_verifier(name), shapes, forms, laws, size, compress)
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


class ShapeForms:
    """Each tree shape's topology (``_topology``) and flat form, computed once for every rule and group of combs
    that meets it, and the ids of the walk's node keys: a node's (token path, child list's tokens), what a node-local
    solver reads there. Paths name the laws within one problem, and tokens are the vocabulary's, so ids compare
    across shapes and groups."""

    def __init__(self):
        self._topologies: dict[TreeShape, tuple] = {}
        self._flat: dict[TreeShape, tuple] = {}
        self.node_ids: dict[tuple, int] = {}
        self.node_keys: list[tuple] = []  # id -> (token path, child list's tokens)
        self._post: dict[TreeShape, tuple] = {}
        self.path_ids: dict[tuple, int] = {}  # a node's token path -> its id (``post_form``)
        self.path_list: list[tuple] = []      # id -> the path

    def topology(self, shape: TreeShape) -> tuple:
        if shape not in self._topologies:
            self._topologies[shape] = _topology(shape)
        return self._topologies[shape]

    def post_form(self, shape: TreeShape) -> tuple:
        """(parent, depth, path id, token, distinct children [n, m] -1 padded, child list length, post-order), int64
        arrays of one tree of this shape: ``LawForest``'s columns before they are placed in a forest (path ids number
        the node paths of every shape met, so that trees sharing a node share its law row)."""
        if shape not in self._post:
            paths, parent, depth, tokens, child_lists = self.topology(shape)
            distinct = [tuple(dict.fromkeys(children)) for children in child_lists]
            children = np.full((len(parent), max(1, max(map(len, distinct)))), -1, dtype=np.int64)
            for node, kids in enumerate(distinct):
                children[node, :len(kids)] = kids
            post, stack = [], [(0, False)]
            while stack:  # children in order, each subtree before its later siblings, a node after its subtree
                node, done = stack.pop()
                if done:
                    post.append(node)
                else:
                    stack.append((node, True))
                    stack.extend((child, False) for child in reversed(distinct[node]))
            for path in paths:
                if path not in self.path_ids:
                    self.path_ids[path] = len(self.path_list)
                    self.path_list.append(path)
            ids = [self.path_ids[path] for path in paths]
            self._post[shape] = (np.array(parent, dtype=np.int64), np.array(depth, dtype=np.int64),
                                 np.array(ids, dtype=np.int64), np.array(tokens, dtype=np.int64), children,
                                 np.array([len(children) for children in child_lists], dtype=np.int64),
                                 np.array(post, dtype=np.int64))
        return self._post[shape]

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


def _walk_values(verifier, shapes: list, forms: ShapeForms, laws: dict, size: int, compress: bool,
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
    return _checked_values(verifier.name, forest.tree, depth, masses, shapes)


def _forest_values(verifier, shapes: list, forms: ShapeForms, laws: dict, size: int, compress: bool) -> np.ndarray:
    """E[tau + 1 | tree] of the trees of ``shapes`` under a rule that reads a ``LawForest``, [T] float64: their nodes
    in as few forests as keep each forest's p and q under ``FOREST_LAW_ENTRIES`` entries (``_law_forest``; one at
    top-k laws, dozens of rows each at a dense vocabulary), the rule's stopping masses over each at once, each tree's
    masses checked to be a probability law."""
    values = np.zeros(len(shapes))
    for trees in _forest_chunks(shapes, forms, laws, size, compress):
        chunk = [shapes[tree] for tree in trees]
        forest = _law_forest(chunk, forms, laws, size, compress)
        masses = verifier.forest_stopping_masses(forest)                              # [F]
        values[trees] = _checked_values(verifier.name, forest.tree, forest.depth, masses, chunk)
    return values


def _checked_values(name: str, tree, depth, masses, shapes: list) -> np.ndarray:
    """E[tau + 1 | tree] of the trees of ``shapes`` from the stopping masses of their nodes, [T] float64 (``tree``,
    ``depth`` and ``masses`` [F], a forest's nodes), each tree's masses first checked to be a probability law."""
    totals = np.bincount(tree, masses, minlength=len(shapes))                         # [T]
    minima = np.full(len(shapes), np.inf)
    with np.errstate(invalid="ignore"):  # NaN masses (NaN laws) fail the check below, which names the tree
        np.minimum.at(minima, tree, masses)
    check_stopping_masses(name, totals, minima, shapes.__getitem__)
    return np.bincount(tree, masses * (depth + 1.0), minlength=len(shapes))


def _forest_chunks(shapes: list, forms: ShapeForms, laws: dict, size: int, compress: bool) -> list[list[int]]:
    """The trees of ``shapes`` (their indices) in groups whose distinct internal nodes' law rows, at the widest a row
    can be (p's support and q's together, or the whole vocabulary where a law is dense or ``compress`` is off), hold
    at most ``FOREST_LAW_ENTRIES`` entries (a tree alone may hold more)."""
    internal = [{int(path) for path in table[2][table[5] > 0]} for table in map(forms.post_form, shapes)]
    widest = 1
    for path in set().union(*internal):
        target, draft = laws[forms.path_list[path]]
        dense = not compress or target[0] is None or draft[0] is None
        widest = max(widest, size if dense else len(target[0]) + len(draft[0]))
    rows = max(1, FOREST_LAW_ENTRIES // min(widest, size))
    chunks, held = [[]], set()
    for tree, paths in enumerate(internal):
        if chunks[-1] and len(held | paths) > rows:
            chunks.append([])
            held = set()
        chunks[-1].append(tree)
        held |= paths
    return chunks


def _law_forest(shapes: list, forms: ShapeForms, laws: dict, size: int, compress: bool) -> LawForest:
    """The trees of ``shapes`` as one ``LawForest``: their nodes side by side, each distinct internal node path's p and
    q one row over its own columns (the union of their supports; the whole vocabulary where a law is dense or
    ``compress`` is off), a node's token as a column of its parent's row."""
    tables = [forms.post_form(shape) for shape in shapes]
    counts = np.array([len(table[0]) for table in tables], dtype=np.int64)           # [T] nodes a tree
    starts = np.cumsum(counts) - counts                                               # [T] its first flat index
    offsets = np.repeat(starts, counts)                                               # [F]
    parent, depth, path, token, draws = (np.concatenate([table[column] for table in tables])
                                         for column in (0, 1, 2, 3, 5))
    width = max(table[4].shape[1] for table in tables)
    children = np.full((len(parent), width), -1, dtype=np.int64)                      # [F, m]
    post = np.full((len(tables), int(counts.max())), -1, dtype=np.int64)              # [T, n]
    for index, table in enumerate(tables):
        start, end = starts[index], starts[index] + counts[index]
        local = table[4]
        children[start:end, :local.shape[1]] = np.where(local >= 0, local + start, -1)
        post[index, :counts[index]] = table[6] + start
    parent = np.where(parent >= 0, parent + offsets, -1)
    internal = np.flatnonzero(draws > 0)
    rows, law_of = np.unique(path[internal], return_inverse=True)                    # distinct internal paths
    law = np.full(len(parent), -1, dtype=np.int64)
    law[internal] = law_of.reshape(-1)
    supports = []  # each row's tokens, ascending; None: the whole vocabulary (a token's column is the token)
    for path_id in rows.tolist():
        target, draft = laws[forms.path_list[path_id]]
        dense = not compress or target[0] is None or draft[0] is None
        supports.append(None if dense else np.union1d(target[0], draft[0]))
    widths = [size if support is None else len(support) for support in supports]
    p, q = np.zeros((len(rows), max(widths, default=1))), np.zeros((len(rows), max(widths, default=1)))  # [D, W]
    for row, (path_id, support) in enumerate(zip(rows.tolist(), supports)):
        for table, (ids, values) in zip((p, q), laws[forms.path_list[path_id]]):
            if ids is None:
                table[row, :size] = values
            else:
                table[row, ids if support is None else np.searchsorted(support, ids)] = values
    # each non-root node's token as a column of its parent's row: one search over every cut row's tokens at once
    child = np.flatnonzero(parent >= 0)
    above = law[parent[child]]                                                        # [c] the parent's row
    column = np.full(len(parent), -1, dtype=np.int64)
    column[child] = token[child]
    cut = [row for row, support in enumerate(supports) if support is not None]
    if cut:
        flat = np.concatenate([supports[row] + row * size for row in cut])
        first = np.zeros(len(rows), dtype=np.int64)
        first[cut] = np.cumsum([0] + [widths[row] for row in cut])[:-1]
        where = np.flatnonzero(np.isin(above, cut))
        column[child[where]] = np.searchsorted(flat, above[where] * size + token[child[where]]) - first[above[where]]
    return LawForest(tree=np.repeat(np.arange(len(tables)), counts), parent=parent, depth=depth, token=column,
                     law=law, children=children, draws=draws, post=post, p=p, q=q)


def _solve_node_keys(verifier, nodes: list[int], forms: ShapeForms, laws: dict, size: int, compress: bool,
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


__all__ = ["CHUNK_ELEMENTS", "FOREST_LAW_ENTRIES", "NO_LAWS", "SOLVER_ELEMENTS", "ShapeForms", "evaluate_trees"]
