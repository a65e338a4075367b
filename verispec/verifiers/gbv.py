"""Greedy multi-path block verification, GBV (Thomas & Pal 2026, arXiv 2602.16961).

Draft law: K i.i.d. draft paths of length L from the root (``iid:K,L``), and delayed trees (``delayed:K,L1,L2``:
a trunk of L1 tokens drawn from q, then K i.i.d. paths of L2 tokens from its end; below). Glossary:

* *rank key* at a node u: the strict total order key(t) = (p(t|u) / q(t|u), t) over tokens, ratios equal
  under the tie rule of verispec.simulator.ranking counting as equal in float and exact mode alike (tokens
  with q(t|u) = 0 are never drafted and rank above every drafted one; they carry no draft mass, so where
  they sit changes nothing). ONE order serves both the greedy descent and the CDFs below: breaking ties
  differently in the two places is lossy (docs/guides/reference.md, trap 6; tests/support/broken_paths.py). The
  order and the descent live in verispec.simulator.selection.
* *selected path*: from the root, repeatedly move to the child with the largest key. Since every path has
  length L, this is the lexicographically largest of the K paths under the per-node orders.
* *skewed draft* q_skew(. | u): the law of the next token of the lexicographically largest of K i.i.d.
  paths given that its prefix is u. With x = q(u) (draft probability of the prefix u), A = draft mass of
  the prefixes of the same length ranked below u, below(t) = draft mass at u of the tokens ranked below t:

      q_skew(t | u) = [(A + x below(t) + x q(t|u))^K - (A + x below(t))^K] / [(A + x)^K - A^K]

  (the max prefix is <= ut minus the max prefix is < ut, given the max prefix is u); along the path
  x <- x q(t|u) and A <- A + x below(t). For K = 1, q_skew = q. Both differences are laws of the largest of K
  i.i.d. uniforms (``verispec.lp_analysis.order_statistics``, shared with psbv's smallest of K).

The selected path is distributed as a single path drawn from the conditionals q_skew, so block
verification (Sun et al. 2024, arXiv 2403.10444) with q replaced by q_skew on the selected path is
lossless; the other paths only influence which path is selected. K = 1 is plain block verification.
Summed over draft outcomes, the law is one term per selected path (``SelectedPathSum``, the ``rule_dp``).

*Delayed trees*: the trunk is one path drawn from q, so the descent has nothing to choose on it; at the trunk's end
t (the first node whose child list is not one draw, ``trunk_shape``; K = its number of draws) it selects among the K
i.i.d. branches exactly as from the root of ``iid:K,L2``, with x and A relative to t (x = q(branch prefix | t),
A starting at 0 at t). Block verification then runs on trunk + selected branch with q along the trunk and q_skew
below t. Lossless for the same reason: given the trunk, the branches are K i.i.d. paths from t, so the selected
branch has the law of the conditionals q_skew (relative to t), and the selected path the law of q along the trunk
times those. ``delayed:K,0,L2`` is ``iid:K,L2``, ``delayed:1,L1,L2`` block verification on ``chain:L1+L2`` (a
chain is its whole path as trunk, K = 1). P(selected path = trunk + u) = q(trunk) [(A + x)^K - A^K].
"""

from __future__ import annotations

import math

import numpy as np

from verispec import backend
from verispec.errors import ProblemTooLargeError
from verispec.guard import budget
from verispec.lp_analysis.order_statistics import largest_of_uniforms_mass, power_difference_quotient
from verispec.simulator.chooser import Chooser
from verispec.simulator.drafters import DraftLaw
from verispec.simulator.interfaces import RuleDP, RuleLaw, Verifier
from verispec.simulator.laws import add_blocks
from verispec.simulator.problems import draft_conditionals, target_conditionals
from verispec.simulator.ranking import ranks_from_order
from verispec.simulator.selection import greedy_path, mass_ranked_below, rank_order, ranked_selected_path
from verispec.simulator.trees import DraftTree, LawForest, TreeBatch
from verispec.sizes import readable_count
from verispec.verifiers.block import block_law, block_procedure_on_path
from verispec.verifiers.psbv import delayed_shape


def lexicographic_masses(targets: list, drafts: list, tokens, ranked_below: list | None = None):
    """The draft masses behind the lexicographic order of paths, along N paths at once (module docstring):
    ``prefix[i]`` [N] = x, the draft probability of the path's length-i prefix u; ``below[i]`` [N] = A, the
    draft mass of the length-i prefixes ranked below u (i = 0..L); ``low[i]`` [N, V] = A + x below(t), the mass
    of the length-(i+1) prefixes ranked below u t (i < L). ``targets[i]``, ``drafts[i]`` are p and q at path
    position i ([N, V], i < L), ``tokens`` [N, L]; ``ranked_below[i]`` [N, V] is ``mass_ranked_below`` there when the
    caller has it."""
    prefix = [backend.ones((tokens.shape[0],), drafts[0][:, 0])] if drafts else []
    below = [prefix[0] * 0] if drafts else []
    low = []
    for level, (p, q) in enumerate(zip(targets, drafts)):
        masses = mass_ranked_below(p, q) if ranked_below is None else ranked_below[level]
        low.append(below[level][:, None] + prefix[level][:, None] * masses)
        token = tokens[:, level]
        below.append(backend.take(low[level], token))
        prefix.append(prefix[level] * backend.take(q, token))
    return prefix, below, low


def skewed_drafts(targets: list, drafts: list, tokens, paths: int) -> list:
    """q_skew(. | u_i) along N selected paths at once (see the module docstring): ``targets[i]`` and
    ``drafts[i]`` are p and q at path position i ([N, V], i < L), ``tokens[:, i]`` the token x_{i+1}
    ([N, L]), ``paths`` = K. Returns L arrays [N, V]."""
    return _skewed(drafts, lexicographic_masses(targets, drafts, tokens), paths)


def _skewed(drafts: list, masses: tuple, paths: int) -> list:
    """``skewed_drafts`` from the paths' ``lexicographic_masses``."""
    prefix, below, low = masses
    skewed = []
    for level, q in enumerate(drafts):
        high = low[level] + prefix[level][:, None] * q
        # q_skew = [(low + x q)^K - low^K] / [(A + x)^K - A^K] = x q Q(low + x q, low) / (x Q(A + x, A)), Q the
        # power_difference_quotient (a^K - b^K = (a - b) Q(a, b)): x cancels and no width is recovered from a
        # difference, so nothing cancels (a draft token of q = 1e-12 next to a ranked-below mass of 1 would lose
        # half its digits in (low + x q)^K - low^K).
        skewed.append(q * power_difference_quotient(high, low[level], paths)
                      / power_difference_quotient(below[level] + prefix[level], below[level], paths)[:, None])
    return skewed


def selection_probability(prefix, below, paths: int):
    """P(the lexicographic maximum of K i.i.d. paths is the path u) = (A + x)^K - A^K, from the order
    statistics of K draws (all paths <= u, minus all < u): the paths laid out on [0, 1] in rank order, u is
    [A, A + x) and the largest of K uniforms falls in it; x = q(u) and A = the draft mass of the paths ranked
    below u ([N] each)."""
    return largest_of_uniforms_mass(below, prefix, paths)


def path_skewed_drafts(tree: DraftTree, nodes: list[int]) -> list:
    """The selected path's draft conditionals at each node of ``nodes`` (root..leaf), L arrays [V]: q along the
    trunk, q_skew relative to its end below it (the one-row case of ``skewed_drafts``)."""
    trunk, paths = trunk_shape(tree.as_batch().child_lists)
    tokens = backend.index_array([[int(tree.token[n]) for n in nodes[trunk + 1:]]], tree.token)
    drafts = skewed_drafts([tree.p[n][None] for n in nodes[trunk:-1]], [tree.q[n][None] for n in nodes[trunk:-1]],
                           tokens, paths)
    return [tree.q[n] for n in nodes[:trunk]] + [draft[0] for draft in drafts]


def trunk_shape(child_lists) -> tuple[int, int]:
    """(L1, K) of a topology (``child_lists`` of node ids, node 0 the root): the trunk's length, the leading nodes
    whose child list is one draw, and the number of draws at its end, one per i.i.d. path (K = 1 on a chain, whose
    whole path is trunk; L1 = 0 on ``iid:K,L``)."""
    node, trunk = 0, 0
    while len(child_lists[node]) == 1:
        node, trunk = child_lists[node][0], trunk + 1
    return trunk, len(child_lists[node]) or 1


#: Most paths V^L the selected-path sum visits: a few hundred array elements each (iid:4,6 at V = 16, 1.7e7
#: paths, is about a minute of one core; V^(L+1) is also the output law's size, bounded by the engine).
MAX_SELECTED_PATHS = 1 << 24

#: Paths per batch of the selected-path sum (a few MB of arrays per level).
PATH_CHUNK = 1 << 14


class SelectedPathSum(RuleDP):
    """GBV's exact law over every draft outcome of ``iid:K,L`` and ``delayed:K,L1,L2``, one term per path u of length
    L.

    GBV's law on a tree reads only its selected path (p, q and the rank keys at the path's nodes) and K, so
    summing over trees is summing over the selected path u:

        law = sum_u P(selected path = u) * block_law(u; p, q_skew),  P(selected path = u) = F(u)^K - F<(u)^K,

    F(u) (F<(u)) the draft mass of the paths ranked at most (strictly) below u: the lexicographic maximum of K
    i.i.d. paths is at most u exactly when all K are. That is V^L terms instead of V^(K L) trees, and the
    selection probability comes from the order statistics, not from the q_skew factorisation that makes
    GBV lossless, so the engine's losslessness check still tests that claim (docs/guides/whole_tree_rules.md).
    On a delayed tree u = trunk + branch: P = q(trunk) [F(branch)^K - F<(branch)^K], F relative to the trunk's end,
    and block verification with q along the trunk.
    """

    name = "selected-path sum"

    def applies(self, drafter) -> bool:
        return delayed_shape(drafter.iid_branching) is not None  # chains, iid:K,L, delayed:K,L1,L2 (and L = 0)

    def check_size(self, problem, drafter) -> None:
        log_paths = drafter.depth * math.log(problem.vocab_size)
        if log_paths > math.log(MAX_SELECTED_PATHS):
            raise ProblemTooLargeError(
                f"gbv's selected-path sum on {drafter.spec} at V={problem.vocab_size} visits V^L = "
                f"{readable_count(log_paths)} paths, above its limit of {MAX_SELECTED_PATHS:,}; use a shorter "
                "tree or a smaller vocabulary")

    def output_law(self, problem, drafter, *, progress: bool = False) -> RuleLaw:
        from tqdm import tqdm  # only when a law is computed: importing the verifiers stays light

        size, depth = problem.vocab_size, drafter.depth
        trunk, paths = delayed_shape(drafter.iid_branching)
        # p and q of every prefix by flat index (lexicographic, token 0 first): [V^i, V] per length i
        targets = [target_conditionals(problem, i).reshape(size ** i, size) for i in range(depth + 1)]
        drafts = [draft_conditionals(problem, i).reshape(size ** i, size) for i in range(depth)]
        emitted = [backend.zeros((size ** (length + 1),), targets[0]) for length in range(depth + 1)]
        if not depth:  # no draft: the bonus token from p
            return RuleLaw(emitted=(targets[0][0] + emitted[0],), details={"selected_paths": 1})
        total, drafted = size ** depth, 0
        for start in tqdm(range(0, total, PATH_CHUNK), desc="gbv selected paths", disable=not progress,
                          leave=False):
            budget.check("gbv's selected-path sum")
            rows = np.arange(start, min(total, start + PATH_CHUNK))
            prefixes = [rows // size ** (depth - i) for i in range(depth + 1)]  # flat prefix index per length
            tokens = np.stack([prefixes[i + 1] % size for i in range(depth)], axis=1)      # [N, L]
            path_targets = [table[index] for table, index in zip(targets, prefixes)]         # L + 1 x [N, V]
            path_drafts = [table[index] for table, index in zip(drafts, prefixes)]           # L x [N, V]
            masses = lexicographic_masses(path_targets[trunk:-1], path_drafts[trunk:], tokens[:, trunk:])
            weight = masses[0][-1] * 0 + 1  # q(trunk), 1 on iid:K,L
            for level in range(trunk):
                weight = weight * backend.take(path_drafts[level], tokens[:, level])
            keep = np.flatnonzero(np.asarray((weight != 0) & (masses[0][-1] != 0), dtype=bool))  # drafted paths
            drafted += len(keep)
            prefixes, tokens, weight = [index[keep] for index in prefixes], tokens[keep], weight[keep]
            path_targets, path_drafts = [a[keep] for a in path_targets], [a[keep] for a in path_drafts]
            masses = tuple([a[keep] for a in part] for part in masses)
            selected = weight * selection_probability(masses[0][-1], masses[1][-1], paths)         # [N]
            law = block_law(path_targets, path_drafts[:trunk] + _skewed(path_drafts[trunk:], masses, paths), tokens)
            for length, values in enumerate(law):
                add_blocks(emitted[length], prefixes[length], selected[:, None] * values)
        shaped = tuple(array.reshape((size,) * (length + 1)) for length, array in enumerate(emitted))
        return RuleLaw(emitted=shaped, details={"selected_paths": drafted})


class _RowOrders:
    """The rank order (``rank_order``) of a ``LawForest``'s law rows, computed for a row when first read and kept
    (at a dense vocabulary an order is a sort of 151,936 tokens: only the rows where a path is chosen or a CDF read)."""

    def __init__(self, forest: LawForest):
        self.forest = forest
        self.orders: dict[int, np.ndarray] = {}

    def _orders(self, rows) -> np.ndarray:
        """The orders of law ``rows`` [n], [n, W]."""
        missing = [row for row in dict.fromkeys(rows.tolist()) if row not in self.orders]
        if missing:
            index = np.array(missing, dtype=np.int64)
            for row, order in zip(missing, rank_order(self.forest.p[index], self.forest.q[index])):
                self.orders[row] = order
        return np.stack([self.orders[row] for row in rows.tolist()]) if len(rows) else \
            np.zeros((0, self.forest.p.shape[1]), dtype=np.int64)

    def ranks(self, rows, columns) -> np.ndarray:
        """The rank of ``columns[i, j]`` in law row ``rows[i]``'s order (0 = lowest), [n, m]."""
        ranks = ranks_from_order(self._orders(rows))                                  # [n, W]
        return np.take_along_axis(ranks, columns, axis=1)

    def mass_below(self, rows) -> np.ndarray:
        """``mass_ranked_below`` at law ``rows`` [n], [n, W]."""
        return mass_ranked_below(self.forest.p[rows], self.forest.q[rows], self._orders(rows))


def selected_path_law(targets: list, drafts: list, tokens, paths: int, ranked_below, trunk: int = 0) -> list:
    """GBV's emission law along N selected paths, L + 1 arrays [N, V]: block verification (``block_law``) with
    q along the first ``trunk`` positions and q_skew relative to the trunk's end below (module docstring).
    ``targets[i]``, ``drafts[i]`` are p and q at path position i ([N, V]; i <= L and i < L), ``tokens`` [N, L] the
    path's tokens, ``paths`` = K, ``ranked_below()`` the list of ``mass_ranked_below`` at positions
    trunk <= i < L in the order that selected the path (called only when K > 1)."""
    if paths == 1:  # q_skew = q: no ranking needed (the selection had one child to choose from)
        skewed = drafts
    else:
        masses = lexicographic_masses(targets[trunk:-1], drafts[trunk:], tokens[:, trunk:], ranked_below())
        skewed = list(drafts[:trunk]) + _skewed(drafts[trunk:], masses, paths)
    return block_law(targets, skewed, tokens)


def _forest_selected_paths(forest: LawForest, orders: _RowOrders) -> np.ndarray:
    """Each tree's selected path in a ``LawForest``, [T, L + 1] node ids (-1 past its leaf): from the root, the child
    whose token ranks highest there in the rank order (one a law row), down to a leaf, as on a tree alone."""
    roots = np.flatnonzero(forest.parent < 0)                                     # [T] in tree order
    path = np.full((len(roots), int(forest.depth.max(initial=0)) + 1), -1, dtype=np.int64)  # [T, L + 1]
    path[:, 0] = roots
    live = np.flatnonzero(forest.children[roots, 0] >= 0)  # trees whose selected node has children
    for depth in range(1, path.shape[1]):
        here = path[live, depth - 1]
        children = forest.children[here]                                          # [N, m]
        choice = np.zeros(len(here), dtype=np.int64)
        several = np.flatnonzero(children[:, 1] >= 0) if children.shape[1] > 1 else np.zeros(0, dtype=np.int64)
        if len(several):  # a node with one distinct child needs no ranking to choose it
            kids = children[several]
            scores = orders.ranks(forest.law[here[several]], forest.token[np.maximum(kids, 0)])  # [n, m]
            choice[several] = np.argmax(np.where(kids >= 0, scores, -1), axis=1)
        path[live, depth] = children[np.arange(len(here)), choice]
        live = live[forest.children[path[live, depth], 0] >= 0]
    return path


class GreedyBlockVerifier(Verifier):
    name = "gbv"
    summary = "greedy multi-path block verification with one strict ranking"
    citation = "Thomas & Pal 2026, arXiv 2602.16961"
    valid_for = frozenset({DraftLaw.ROOT_IID_PATHS, DraftLaw.TRUNK_IID_PATHS})
    #: The law, keyed by token paths, depends on the K paths only through the selected path (the
    #: lexicographic maximum, whatever the order of the paths, from the root or a delayed tree's trunk) and K: any
    #: order of the paths gives the same law. tests/simulator/test_fast_enumeration.py proves it by permuting the
    #: paths of random trees.
    order_free = True
    rule_dp = SelectedPathSum()

    def emission_laws(self, batch: TreeBatch):
        selected, rankings = ranked_selected_path(batch)  # [N] node ids per depth 0..L; the rank orders there
        rows = backend.arange(batch.num_rows, batch.tokens)
        targets = [batch.p[rows, nodes] for nodes in selected]
        drafts = [batch.q[rows, nodes] for nodes in selected[:-1]]
        tokens = batch.tokens[:, []] if len(selected) == 1 else backend.stack(
            [batch.tokens[rows, nodes] for nodes in selected[1:]], axis=1)  # [N, L]
        trunk, paths = trunk_shape(batch.child_lists)
        path_law = selected_path_law(targets, drafts, tokens, paths,
                                     lambda: [ranking.mass_below() for ranking in rankings[trunk:]], trunk)
        law = backend.zeros((batch.num_rows, batch.num_nodes, path_law[0].shape[-1]), path_law[0])  # [N, n, V]
        for nodes, values in zip(selected, path_law):
            law[rows, nodes] += values  # 0 + value: what adding one zero-padded array per depth gave, -0.0 included
        return law

    @property
    def reads_forest(self) -> bool:
        """Whether ``forest_stopping_masses`` is this rule's law (a subclass's own ``emission_laws`` is not)."""
        return type(self).emission_laws is GreedyBlockVerifier.emission_laws

    def forest_stopping_masses(self, forest: LawForest) -> np.ndarray:
        """The stopping mass at every node of many trees of many topologies at once (``LawForest``), [F] float64:
        the total of ``emission_laws`` at each node. The law reads a tree only through its selected path and K, so
        each tree's selected path is found by the same descent (from the root, the child whose token ranks highest
        there in the rank order, ``rank_order``, one a law row, down to a leaf, as on a tree alone), then the paths of
        one (K, length, trunk) go through ``selected_path_law`` together, whatever their trees' topologies (the trunk:
        the leading nodes of the path whose child list is one draw, K the draws at its end, ``trunk_shape``)."""
        masses = np.zeros(len(forest.parent))
        orders = _RowOrders(forest)
        path = _forest_selected_paths(forest, orders)                                # [T, L + 1]
        lengths = (path >= 0).sum(axis=1) - 1                                         # [T] L of each selected path
        draws = np.where(path >= 0, forest.draws[np.maximum(path, 0)], 0)             # [T, L + 1]
        trunks = np.cumprod(draws == 1, axis=1).sum(axis=1)                           # [T] L1 (a leaf: 0 draws)
        ends = np.maximum(draws[np.arange(len(path)), trunks], 1)                     # [T] K (1 on a chain)
        for length, paths, trunk in sorted(set(zip(lengths.tolist(), ends.tolist(), trunks.tolist()))):
            trees = np.flatnonzero((lengths == length) & (ends == paths) & (trunks == trunk))
            selected = [path[trees, depth] for depth in range(length + 1)]           # [N] per depth 0..L
            rows = [forest.law[nodes] for nodes in selected[:-1]]
            leaf = np.zeros((len(trees), forest.p.shape[1]))
            leaf[:, 0] = 1.0  # p at a leaf only sets the bonus token's law: any law of total 1
            tokens = np.stack([forest.token[nodes] for nodes in selected[1:]], axis=1) if length else \
                np.zeros((len(trees), 0), dtype=np.int64)                             # [N, L]
            below = rows[trunk:]
            path_law = selected_path_law([forest.p[row] for row in rows] + [leaf], [forest.q[row] for row in rows],
                                         tokens, paths, lambda below=below: [orders.mass_below(r) for r in below],
                                         trunk)
            for nodes, values in zip(selected, path_law):
                masses[nodes] = values.sum(axis=-1)
        return masses

    def procedure(self, tree: DraftTree, chooser: Chooser) -> tuple[int, int]:
        # Select greedily, then block verification's sampling procedure with q_skew.
        nodes = greedy_path(tree)
        return block_procedure_on_path(tree, nodes, path_skewed_drafts(tree, nodes), chooser)
