"""Position-sharing block verification, psbv: select one of K i.i.d. draft paths by the smallest of K random
positions, then run block verification on it with the selected path's own law (verispec's rule).

Draft law: K i.i.d. paths of length L from the root (``iid:K,L``), as GBV, and delayed trees
(``delayed:K,L1,L2``: a trunk of L1 tokens drawn from q, then K i.i.d. paths of L2 tokens from its end; below). Why
this form: the best block efficiency of ANY valid verifier for these trees (the multi-step LP) is max over selection
laws g of block verification's efficiency with g as the draft, where g ranges over the laws of one path selected from
the K drafts (``verispec.bounds.path_selection``; docs/guides/rules_2025_26.md). GBV is one such selection (the
lexicographic maximum); the optimal one depends on p and q at prefixes no drafted tree shows, so a rule that sees
only the drafted nodes cannot reach it everywhere. This rule chooses, node by node, the selection that is best for
the next depth whatever happens below, and carries the rest of the freedom down the tree. Glossary (the algebra of
position measures, their values, tilings, realisation and the selection law, is in
``verispec.lp_analysis.position_measures``; the law of the smallest of K uniforms in ``lp_analysis.order_statistics``):

* *position measure* nu_u of a prefix u: a measure on [0, 1] with piecewise-constant density, of mass q(u) (the
  draft probability of u). The root's is the uniform measure; the measures of u's children partition nu_u
  (their densities add up to nu_u's), so at every depth the measures of all prefixes partition [0, 1].
* *position* of a drafted path x: a draw from nu_x / q(x). A path drawn from q then has a uniform position, so the
  K drafted paths have i.i.d. uniform positions, and given its position y a path is x with probability nu_x(y).
* *selected path*: the drafted path with the smallest position. The smallest of K uniforms has density
  K (1 - y)^(K - 1), so P(the selected path extends u) = g(u) = integral of nu_u(y) K (1 - y)^(K - 1) dy, the
  *value* of nu_u: sum over its pieces of density * ((1 - a)^K - (1 - b)^K). g(u) needs only nu_u, which is
  computed from p and q on the path to u: everything the rule uses is at drafted nodes.
* *split* at a node u (the rule's choice): its children c with q(c|u) > 0, of masses m_c = q(u) q(c|u), share
  nu_u. Psi(x), the value of the lowest mass x of nu_u, is concave, and the values g(u c) reachable by splits are
  the base polytope of the polymatroid C -> Psi(m(C)). psbv takes its lexicographically optimal base with respect
  to p(. | u) (Fujishige 1980): children ordered by p/q (the tie rule of verispec.simulator.ranking), the
  greatest convex minorant of the points (p(first k), Psi(m(first k))) cuts them into blocks, each block gets its
  segment of nu_u, and inside a block g(u c) is proportional to p(c | u). This base maximises
  sum_c min(g(u c), t p(c | u)) for every t at once, so whatever the acceptance r(u) that reaches u, the next
  depth accepts as much as any split could. A block's values are realised by an exact decomposition into
  tilings (``position_measures.realise``), which fixes the children's measures and so what their own splits can do.
* *verification*: block verification (Sun et al. 2024; ``verispec.verifiers.block``) on the selected path with
  the draft conditionals g(u c) / g(u): the selected path is distributed as a path drawn from them, so the output
  has the target's law (the other paths only influenced which path was selected). K = 1 is block verification.
* *delayed trees*: the trunk is one path drawn from q, so there is nothing to select on it: the K paths get their
  positions relative to the trunk's end t (its measure is the uniform one, as the root's on ``iid:K,L``), the rule
  selects one of them as above with t as the root, and block verification runs on the whole selected path with
  the draft conditionals q along the trunk and g(u c) / g(u) below t. Given the trunk, the selected branch is
  distributed as g's path law from t (the positions' lemma, conditionally on the trunk), so the selected path is
  distributed as that law and block verification with it is lossless. ``delayed:K,0,L2`` is ``iid:K,L2``,
  ``delayed:1,L1,L2`` block verification on ``chain:L1+L2``. The trunk's end is read off the tree: the first node
  whose child list is not one draw (``branch_point``).

A tree's law sums over its distinct leaves P(selected = leaf) (``selection_probabilities``, exact in rationals)
times block verification's law on the leaf's path; the procedure draws each path's position piece by piece (lowest
first, ties uniform) and runs block verification's. Over draft outcomes the law is one term per path u of length L,
weight g(u) (``PositionSelectionSum``; delayed: q(trunk) times g from the trunk's end): V^L terms, not V^(K L).

Cost per block in decoding: a split per drafted internal node (``psbv_split``), the selection integral, block
verification on one path. A split takes 0.001 to 0.1 s at V = 1,000, 0.4 to 14 s at real T = 1 nodes of the Qwen
pair (one core, K = 2 to 4; psbv's labels were refused there), ``psbv(blend=1)`` (``psbv_blend``) 0.1 to 0.35 s.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from verispec import backend
from verispec.errors import ProblemTooLargeError, UnknownVerifierError
from verispec.guard import budget
from verispec.lp_analysis.position_measures import (
    PositionMeasure,
    elementary_intervals,
    selection_probabilities,
)
from verispec.simulator.chooser import Chooser
from verispec.simulator.drafters import DraftLaw
from verispec.simulator.interfaces import RuleDP, RuleLaw, Verifier
from verispec.simulator.laws import add_blocks
from verispec.simulator.problems import draft_conditionals, target_conditionals
from verispec.simulator.trees import DraftTree, TreeBatch
from verispec.sizes import log_prefix_count, readable_count
from verispec.verifiers.block import block_law, block_procedure_on_path
from verispec.verifiers.psbv_cost import RationalCost as _RationalCost
from verispec.verifiers.psbv_split import SPLIT_CACHE_SIZE, _conditionals_key, _numbers, _SplitCache, split


@dataclass(frozen=True)
class _NodeState:
    """A node's position measure, its value g(node) and (internal nodes) its children's values [V]."""

    measure: PositionMeasure
    value: object
    child_values: list | None


def branch_point(tree: DraftTree) -> int:
    """The node where the K paths start: the end of the trunk, the first node whose child list is not one draw (the
    root on ``iid:K,L``; on a chain, whose one path is K = 1 paths, the root too)."""
    node = 0
    while len(tree.child_tokens[node]) == 1:
        node = tree.child_nodes[node][0]
    return node if tree.child_tokens[node] else 0


def split_requests(tree: DraftTree, paths: int, start: int = 0) -> dict:
    """{node: (its split's cache key, its drafted children's tokens)} for the nodes of ``tree`` that ``tree_states``
    splits (K = ``paths`` from the node ``start``): the key is K, the number type and, down from ``start``, each
    node's conditionals and the token taken from it, so trees that share a prefix share its splits."""
    exact = tree.exact
    keys, requests = {0: (paths, exact)}, {}
    trunk = set(_path_nodes(tree, start)[:-1])
    for node in range(tree.num_nodes):  # parents come before children
        children = tree.child_nodes[node]
        if not children:
            continue
        if node in trunk:
            keys[children[0]] = (paths, exact)
            continue
        key = keys[node] + (_conditionals_key(tree.p[node], tree.q[node], exact),)
        requests[node] = (key, frozenset(int(tree.token[child]) for child in children))
        for child in children:
            keys[child] = key + (int(tree.token[child]),)
    return requests


def tree_states(tree: DraftTree, paths: int, cache: _SplitCache | None = None,
                start: int = 0, wanted: dict | None = None, blend: bool = False) -> dict[int, _NodeState]:
    """The position measure and value of every node of ``tree`` (K = ``paths`` from the node ``start``), top down.
    Above ``start`` (the trunk of a delayed tree) there is nothing to select: those nodes get the uniform measure,
    value 1 and their children's values q(. | node), and ``start`` the uniform measure, so that measures and values
    below it are relative to the trunk (each tree has one trunk). Float splits build the measures of the drafted
    children only (no other is read), and of the children ``wanted`` ({key: tokens}, from ``split_requests`` of
    other trees) asks for at the same node, so that trees of one batch share their splits through the cache."""
    exact = tree.exact
    one = Fraction(1) if exact else 1.0
    root = PositionMeasure.uniform(one)
    states = {0: _NodeState(root, one, None)}
    requests = split_requests(tree, paths, start)
    for node in range(tree.num_nodes):  # parents come before children
        children = tree.child_nodes[node]
        if not children:
            continue
        state = states[node]
        if node not in requests:  # the trunk
            states[node] = _NodeState(root, one, _numbers(tree.q[node], exact))
            states[children[0]] = _NodeState(root, one, None)
            continue
        key, drafted = requests[node]
        if wanted is not None and key in wanted:
            drafted = drafted | wanted[key]

        def compute(tokens, measure=state.measure, node=node):
            p, q = (_numbers(tree.p[node], True), _numbers(tree.q[node], True)) if exact else (tree.p[node],
                                                                                              tree.q[node])
            return split(measure, p, q, paths, exact, sorted(tokens), blend)

        values, measures = cache.get(key, drafted, compute, exact) if cache is not None else compute(drafted)
        states[node] = _NodeState(state.measure, state.value, values)
        for child in children:
            token = int(tree.token[child])
            # a drafted child whose mass rounded to 0 (float) has no measure: it is never selected
            states[child] = _NodeState(measures.get(token, PositionMeasure(())), values[token], None)
    return states


def _leaf_copies(tree: DraftTree) -> dict[int, int]:
    """Each leaf with the number of drafted paths that end in it (its copies in its parent's child list)."""
    copies = {}
    for node in range(1, tree.num_nodes):
        if not tree.child_nodes[node]:
            copies[node] = tree.child_tokens[tree.parent[node]].count(int(tree.token[node]))
    return copies


def _path_nodes(tree: DraftTree, leaf: int) -> list[int]:
    nodes = [leaf]
    while nodes[-1] != 0:
        nodes.append(int(tree.parent[nodes[-1]]))
    return nodes[::-1]


def _selected_drafts(states: dict, nodes: list[int]) -> list:
    """The selected path's draft conditionals g(u c) / g(u) at each internal node of ``nodes``: [V] each."""
    return [np.asarray([v / states[node].value for v in states[node].child_values], dtype=object)
            if isinstance(states[node].value, Fraction) else
            np.asarray(states[node].child_values, dtype=np.float64) / states[node].value
            for node in nodes[:-1]]


class PositionSelectionSum(RuleDP):
    """psbv's exact law over every draft outcome of ``iid:K,L`` and ``delayed:K,L1,L2``, one term per path u of
    length L:

        law = sum_u g(u) * block_law(u; p, g-conditionals),   g(u) = the value of nu_u,

    (on a delayed tree g(u) = q(trunk) times the value relative to the trunk's end, and the conditionals are q
    along the trunk),

    the positions' lemma (module docstring) in place of enumerating the V^(K L) trees; it assumes that lemma and
    nothing about losslessness, and the tests hold it to whole-tree enumeration (which integrates the selection
    tree by tree) at 1e-12 and exactly in rationals."""

    name = "position-selection sum"

    def __init__(self, blend: bool = False):
        self.blend = blend  # the realisation of the splits (``split``), as the verifier's

    def applies(self, drafter) -> bool:
        return delayed_shape(drafter.iid_branching) is not None

    def check_size(self, problem, drafter) -> None:
        size, depth = problem.vocab_size, drafter.depth
        log_paths = depth * math.log(size)
        # one split per prefix shorter than L, each about V^2 steps of Python arithmetic (a decomposition per block)
        log_work = log_prefix_count(size, 0, depth - 1) + 2 * math.log(size) if depth else 0.0
        if log_paths > math.log(MAX_SELECTED_PATHS) or log_work > math.log(MAX_SPLIT_WORK):
            raise ProblemTooLargeError(
                f"psbv's position-selection sum on {drafter.spec} at V={size} visits V^L = {readable_count(log_paths)} "
                f"paths and about {readable_count(log_work)} steps of node splits, above its limits of "
                f"{MAX_SELECTED_PATHS:,} paths and {MAX_SPLIT_WORK:,} steps; use a shorter tree or a smaller "
                "vocabulary")

    def output_law(self, problem, drafter, *, progress: bool = False) -> RuleLaw:
        size, depth = problem.vocab_size, drafter.depth
        trunk, paths = delayed_shape(drafter.iid_branching)
        exact = problem.exact
        targets = [np.asarray(target_conditionals(problem, i)).reshape(size ** i, size) for i in range(depth + 1)]
        drafts = [np.asarray(draft_conditionals(problem, i)).reshape(size ** i, size) for i in range(depth)]
        level, conditionals = _selection_levels(targets, drafts, size, trunk, paths, exact, drafter.spec, self.blend)
        level = {leaf: (measure, value * weight) for leaf, (measure, value, weight) in level.items()}
        emitted = [np.zeros(size ** (length + 1), dtype=object if exact else np.float64) for length in range(depth + 1)]
        if exact:
            for array in emitted:
                array[:] = Fraction(0)
        leaves = [leaf for leaf in sorted(level) if level[leaf][1] > 0]
        dtype = object if exact else np.float64
        prefixes = [np.asarray([leaf // size ** (depth - i) for leaf in leaves], dtype=np.int64)
                    for i in range(depth + 1)]
        tokens = np.stack([prefixes[i + 1] % size for i in range(depth)], axis=1) if depth else \
            np.zeros((len(leaves), 0), dtype=np.int64)
        path_targets = [np.asarray(targets[i][prefixes[i]], dtype=dtype) for i in range(depth + 1)]
        path_drafts = [np.asarray([conditionals[i][int(k)] for k in prefixes[i]], dtype=dtype) for i in range(depth)]
        selected = np.asarray([level[leaf][1] for leaf in leaves], dtype=dtype)
        law = block_law(path_targets, path_drafts, tokens)
        for length, values in enumerate(law):
            add_blocks(emitted[length], prefixes[length], selected[:, None] * values)
        shaped = tuple(array.reshape((size,) * (length + 1)) for length, array in enumerate(emitted))
        return RuleLaw(emitted=shaped, details={"selected_paths": len(leaves)})


def delayed_shape(branching) -> tuple[int, int] | None:
    """(L1, K) for the i.i.d. branching of a delayed tree (one entry K at depth L1, every other 1; a chain is
    K = 1 paths from the root, depth 0 too), else None (and None for a drafter without i.i.d. branching)."""
    if branching is None:
        return None
    wide = [depth for depth, factor in enumerate(branching) if factor != 1]
    if len(wide) > 1:
        return None
    return (wide[0], branching[wide[0]]) if wide else (0, 1)


def _selection_levels(targets: list, drafts: list, size: int, trunk: int, paths: int, exact: bool, spec: str = "",
                      blend: bool = False):
    """The position-selection sum's states, depth by depth: {path of length L: (measure, value, weight)} (the
    measure and value relative to the trunk's end, weight = q(trunk)) and, by depth, {prefix: the selected path's
    draft conditionals [V]} (q along the trunk). In rationals the splits are watched by ``_RationalCost``."""
    one = Fraction(1) if exact else 1.0
    level = {0: (PositionMeasure.uniform(one), one, one)}
    conditionals = []
    cost = _RationalCost(spec, size) if exact else None
    for i in range(len(drafts)):
        budget.check("psbv's position-selection sum")
        following, table = {}, {}
        live = {index: state for index, state in level.items() if state[1] * state[2] > 0}
        if cost is not None and i >= trunk:
            cost.start_level(i - trunk, [measure for measure, _, _ in live.values()])
        for index, (measure, value, weight) in live.items():  # (float: a value rounded to 0 is never selected)
            budget.check("psbv's position-selection sum")
            q = _numbers(drafts[i][index], exact)
            if i < trunk:  # one path drawn from q: nothing to select; the K paths start uniform at its end
                table[index] = q
                following.update({index * size + token: (measure, value, weight * q[token])
                                  for token in range(size) if q[token] > 0})
                continue
            values, measures = split(measure, _numbers(targets[i][index], exact), q, paths, exact, blend=blend)
            if cost is not None:
                cost.split_done()
            table[index] = [v / value for v in values]
            for token, child in measures.items():
                following[index * size + token] = (child, values[token], weight)
        if cost is not None and i >= trunk:
            cost.end_level()
        conditionals.append(table)
        level = following
    return level, conditionals


#: Most paths V^L the position-selection sum visits, and most steps of its splits (prefixes shorter than L times
#: V^2): iid:2,3 at V = 16 is 2^18 steps and a few seconds.
MAX_SELECTED_PATHS = 1 << 16
MAX_SPLIT_WORK = 1 << 22


class PositionSharingBlockVerifier(Verifier):
    name = "psbv"
    summary = ("position-sharing block verification: the path with the smallest of K random positions, verified as a "
               "block")
    citation = "verispec, docs/guides/rules_2025_26.md; block verification of Sun et al. 2024, arXiv 2403.10444"
    valid_for = frozenset({DraftLaw.ROOT_IID_PATHS, DraftLaw.TRUNK_IID_PATHS})
    #: The selection treats the K paths alike and the verification reads only the selected path: any order of the
    #: paths (from the root, or from a delayed tree's trunk) gives the same law (tests/simulator/
    #: test_fast_enumeration.py checks the declaration by permuting paths).
    order_free = True
    rule_dp = PositionSelectionSum()
    #: ``psbv(blend=1)`` (the registry's hook for parameters) realises each block by bisection blends of tiling and
    #: even share (``psbv_blend``, O(n log n) a node); 0 (default): the exact decomposition. Both lossless.
    parameters = ("blend",)

    def __init__(self, blend: float = 0):
        if isinstance(blend, bool) or blend not in (0, 1):
            raise UnknownVerifierError(f"psbv's blend is 0 (the exact split) or 1 (the blended split), got {blend!r}")
        self.blend = int(blend)
        self.name = "psbv(blend=1)" if self.blend else "psbv"
        self.rule_dp = PositionSelectionSum(bool(self.blend)) if self.blend else type(self).rule_dp
        self._cache = _SplitCache(SPLIT_CACHE_SIZE)

    def _states(self, tree: DraftTree, wanted: dict | None = None) -> dict[int, _NodeState]:
        """Every node's state, the K paths taken from the trunk's end (the root but on delayed trees)."""
        start = branch_point(tree)
        return tree_states(tree, len(tree.child_tokens[start]), self._cache, start, wanted, bool(self.blend))

    def emission_laws(self, batch: TreeBatch):
        trees = [batch.tree(row) for row in range(batch.num_rows)]
        # every tree's drafted children at each node, so that a node the trees share is split once (a float split
        # builds only the measures asked for)
        wanted = {}
        for tree in trees:
            if tree.child_nodes[0]:
                start = branch_point(tree)
                for key, drafted in split_requests(tree, len(tree.child_tokens[start]), start).values():
                    wanted[key] = wanted.get(key, frozenset()) | drafted
        laws = [self._tree_law(tree, wanted) for tree in trees]
        return backend.asarray(np.stack(laws), batch.p)

    def _tree_law(self, tree: DraftTree, wanted: dict | None = None) -> np.ndarray:
        exact = tree.exact
        dtype = object if exact else np.float64
        law = np.zeros((tree.num_nodes, tree.vocab_size), dtype=dtype)
        if exact:
            law[...] = Fraction(0)
        if not tree.child_nodes[0]:
            law[0] = tree.p[0]
            return law
        states = self._states(tree, wanted)
        copies = _leaf_copies(tree)
        leaves = list(copies)
        chosen = selection_probabilities([states[leaf].measure for leaf in leaves], [copies[leaf] for leaf in leaves])
        if not any(probability > 0 for probability in chosen):
            # every drafted path's measure rounded away (float, draft probabilities below 1e-300): a tree of
            # negligible probability, verified by rejecting at the root
            law[0] = tree.p[0]
            return law
        for leaf, probability in zip(leaves, chosen):
            if not probability > 0:
                continue
            nodes = _path_nodes(tree, leaf)
            drafts = _selected_drafts(states, nodes)
            tokens = np.asarray([[int(tree.token[n]) for n in nodes[1:]]], dtype=np.int64)
            path_law = block_law([np.asarray(tree.p[n], dtype=dtype)[None] for n in nodes],
                                 [draft[None] for draft in drafts], tokens)
            for node, values in zip(nodes, path_law):
                law[node] = law[node] + probability * values[0]
        return law

    def procedure(self, tree: DraftTree, chooser: Chooser) -> tuple[int, int]:
        # Each drafted path's position, piece by piece from the bottom: at an elementary interval, a path not yet
        # placed lands in it with probability (its mass there) / (its mass from there up); the first interval
        # where some path lands holds the smallest position, and the paths that landed there are equally likely
        # to be lowest (their positions are uniform on it). Then block verification's procedure on that path.
        if not tree.child_nodes[0]:
            return 0, chooser.categorical(tree.p[0])
        states = self._states(tree)
        copies = _leaf_copies(tree)
        drawn = [leaf for leaf, count in copies.items() for _ in range(count)]
        measures = [states[leaf].measure for leaf in drawn]
        above = [m.mass() for m in measures]
        winner = None
        for start, stop, densities in elementary_intervals(measures):
            landed = []
            for i, density in enumerate(densities):
                here = density * (stop - start)
                if here > 0:
                    chance = here / above[i]
                    if chooser.bernoulli(chance if chance < 1 else chance * 0 + 1):
                        landed.append(i)
                above[i] = above[i] - here
            if landed:
                uniform = Fraction(1, len(landed)) if tree.exact else 1.0 / len(landed)
                winner = drawn[landed[chooser.categorical([uniform] * len(landed))]]
                break
        if winner is None:  # every path's measure rounded away (as in the law)
            return 0, chooser.categorical(tree.p[0])
        nodes = _path_nodes(tree, winner)
        return block_procedure_on_path(tree, nodes, _selected_drafts(states, nodes), chooser)
