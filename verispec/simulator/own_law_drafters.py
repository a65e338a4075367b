"""Drafters with draft laws of their own: SpecHub's hub pairs (``hub``, ``hub-tree:L``), Hu et al.'s greedy drafts
(``greedy:K``, ``greedy-tree:K,L``) and DySpec's dynamic tree (``dyspec:N``).

Like every drafter (``verispec.simulator.drafters``) each is one sampling procedure against a ``Chooser``, which
``sample`` runs with a numpy Generator and ``outcomes`` enumerates exactly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from verispec.simulator.chooser import Chooser
from verispec.simulator.drafters import (
    CHAIN_LAWS,
    SIZE_CAP,
    Drafter,
    DraftLaw,
    check_tree_parameters,
    exp_or_inf,
    level_widths,
)
from verispec.simulator.problems import Problem
from verispec.simulator.ranking import best_index_with_ties, hub_token, top_tokens, without_tokens
from verispec.simulator.trees import TreeBuilder, TreeShape


def _draw_hub_pair(chooser: Chooser, q: np.ndarray) -> tuple[int, ...]:
    """SpecHub's pair (Sun et al. 2024, arXiv 2411.05289, Sec. 4): hub a = argmax q (ties: smallest id);
    X_1 ~ q; if X_1 = a then X_2 ~ q(. | != a), else X_2 = a. When q(a) = 1 there is no second token to
    draw and the pair is just (a,)."""
    hub = hub_token(q)
    first = chooser.categorical(q)
    if first != hub:
        return (first, hub)
    rest = without_tokens(q, (hub,))
    mass = rest.sum()
    if mass == 0:
        return (hub,)
    return (hub, chooser.categorical(rest / mass))


def _draw_greedy(chooser: Chooser, q: np.ndarray, count: int) -> tuple[int, ...]:
    """Hu et al.'s greedy draft (arXiv 2502.18779): G = the top count-1 tokens of q (ranked by q, ties by
    smallest id), always drafted, best first; then X ~ q / (1 - q(G)) on V \\ G. If q's support has at
    most count-1 tokens, G is the whole support and there is no X (nothing left to draw)."""
    greedy = top_tokens(q, count - 1)
    rest = without_tokens(q, greedy)
    mass = rest.sum()
    if mass == 0:
        return greedy
    return greedy + (chooser.categorical(rest / mass),)


def _full_tree_nodes(width: int, depth: int) -> float:
    """1 + w + .. + w^(depth - 1), the nodes at depths 0 .. depth - 1 of the full w-ary tree: exact while it is
    below ``SIZE_CAP``, inf above."""
    if width == 1:
        return depth
    if depth * math.log(width) > math.log(SIZE_CAP) + 1:
        return math.inf
    return (width ** depth - 1) // (width - 1)


def _draw_per_node(problem: Problem, chooser: Chooser, depth: int, draw_children) -> TreeShape:
    """Every node at depth < ``depth`` gets its own child list ``draw_children(chooser, q(.|node))``."""
    builder = TreeBuilder()
    level = [(0, ())]
    for _ in range(depth):
        problem.prepare_drafts([prefix for _, prefix in level])
        next_level = []
        for node, prefix in level:
            for token in draw_children(chooser, problem.draft(prefix)):
                next_level.append((builder.add_child(node, token), prefix + (token,)))
        level = next_level
    return builder.shape()


@dataclass(frozen=True)
class HubDrafter(Drafter):
    """SpecHub's hub pairs (Sun et al. 2024, arXiv 2411.05289): every node at depth < L gets a hub pair
    drawn from its own q(.|node), so every node's child list follows the HUB law given the node (what a
    top-down walk needs). ``hub`` is one position (L = 1), ``hub-tree:L`` the full tree of depth L."""

    length: int = 1

    def __post_init__(self):
        check_tree_parameters("hub" if self.length == 1 else "hub-tree", L=self.length)

    @property
    def spec(self) -> str:
        return "hub" if self.length == 1 else f"hub-tree:{self.length}"

    @property
    def depth(self) -> int:
        return self.length

    @property
    def draft_laws(self) -> frozenset[DraftLaw]:
        if self.length == 0:
            return CHAIN_LAWS | {DraftLaw.HUB}
        return frozenset({DraftLaw.HUB})

    @property
    def max_nodes(self) -> int:
        return min(2 ** min(self.length + 1, 64) - 1, SIZE_CAP)

    @property
    def draft_widths(self) -> tuple[int, ...]:
        """Every node above depth L gets up to two children (its hub pair): levels 1, 2, 4, .."""
        return level_widths((2,) * self.length)

    def log_num_outcomes(self, vocab_size: int) -> float:
        internal = exp_or_inf(self.length * math.log(2))  # a pair per internal node: at most 2V choices
        return internal * math.log(2 * vocab_size)

    def draw(self, problem: Problem, chooser: Chooser) -> TreeShape:
        return _draw_per_node(problem, chooser, self.length, _draw_hub_pair)


@dataclass(frozen=True)
class GreedyDrafter(Drafter):
    """Hu et al.'s greedy drafts (arXiv 2502.18779): every node at depth < L gets the top K-1 tokens of its
    q(.|node) plus one X ~ q restricted to the rest. ``greedy:K`` is one position (L = 1),
    ``greedy-tree:K,L`` the full tree of depth L. K = 1 is a chain of L tokens drawn from q."""

    branches: int
    length: int = 1

    def __post_init__(self):
        if self.length == 1:
            check_tree_parameters("greedy", K=self.branches)
        check_tree_parameters("greedy-tree", K=self.branches, L=self.length)

    @property
    def spec(self) -> str:
        return f"greedy:{self.branches}" if self.length == 1 else f"greedy-tree:{self.branches},{self.length}"

    @property
    def depth(self) -> int:
        return self.length

    @property
    def draft_laws(self) -> frozenset[DraftLaw]:
        if self.branches == 1 or self.length == 0:
            return CHAIN_LAWS
        return frozenset({DraftLaw.GREEDY})

    @property
    def max_nodes(self) -> int:
        """The full K-ary tree of depth L, 1 + K + .. + K^L (every node above depth L gets K children at most)."""
        return int(min(SIZE_CAP, _full_tree_nodes(self.branches, self.length + 1)))

    @property
    def draft_widths(self) -> tuple[int, ...]:
        """Every node above depth L gets up to K children: levels 1, K, K^2, .."""
        return level_widths((self.branches,) * self.length)

    def log_num_outcomes(self, vocab_size: int) -> float:
        """Each of the at most 1 + K + .. + K^(L-1) internal nodes draws one token, from the V - (K - 1) tokens
        outside its top K - 1 (its other children are fixed by q); at V <= K at most one is left: no choice.
        Exact where every node's support is V: greedy-tree:2,3 at V = 3 draws 2^7 = 128 trees (V^(K^L) = 6,561
        before, which made ``verispec bound`` refuse it)."""
        free = vocab_size - (self.branches - 1)
        if free <= 1:
            return 0.0
        return _full_tree_nodes(self.branches, self.length) * math.log(free)

    def draw(self, problem: Problem, chooser: Chooser) -> TreeShape:
        return _draw_per_node(problem, chooser, self.length,
                              lambda chooser_, q: _draw_greedy(chooser_, q, self.branches))


@dataclass(frozen=True)
class DySpecDrafter(Drafter):
    """DySpec's dynamic draft tree (Xiong et al. 2024, arXiv 2410.11744, Sec. 3 and Alg. 1), N drafted nodes.

    A heap holds the expandable nodes keyed by their estimated reach probability v (root: v = 1). Pop the
    node with the largest v, draw one more child t from its draft law without replacement (the children
    already drawn there are excluded: q~(t) = q(t) / (1 - q(children so far))), give the child
    v_child = v * q~(t) and the node v * (1 - q~(t)), push both; stop after N children have been drawn.
    A node whose draft support is used up (v becomes 0) is not pushed back.

    Tie-break (not fixed by the paper): equal values go to the node created first (the parent before the
    child it just drew); with node creation order as second key the heap order is a strict total order,
    so the tree is a deterministic function of the draws. "Equal" is the tie rule of
    verispec.simulator.ranking (relative gap at most 1e-12), applied to floats and to exact rationals alike,
    so a float run expands the same nodes as the exact run of the same problem: products that are equal as
    rationals but differ in their last float bits no longer split the two modes.

    Draft law: at every node the children are drawn one after another without replacement from q(.|node),
    in sampling order (WITHOUT_REPLACEMENT), but how many a node gets depends on the tokens drawn
    elsewhere (the budget goes to the largest estimated reach). Top-down recursive rejection sampling
    without replacement stays lossless under such adaptive stopping (the decision to draw another child
    never looks at that child); the tests check it with the exact engine. ``depth`` is N: all N nodes may
    form one path.
    """

    budget: int

    def __post_init__(self):
        check_tree_parameters("dyspec", N=self.budget)

    @property
    def spec(self) -> str:
        return f"dyspec:{self.budget}"

    @property
    def depth(self) -> int:
        return self.budget

    @property
    def draft_laws(self) -> frozenset[DraftLaw]:
        if self.budget <= 1:
            return CHAIN_LAWS
        return frozenset({DraftLaw.WITHOUT_REPLACEMENT})

    @property
    def max_nodes(self) -> int:
        return self.budget + 1

    def log_num_outcomes(self, vocab_size: int) -> float:
        return self.budget * math.log(vocab_size)

    def draw(self, problem: Problem, chooser: Chooser) -> TreeShape:
        builder = TreeBuilder()
        if self.budget == 0:
            return builder.shape()
        prefixes = {0: ()}
        remaining: dict[int, np.ndarray] = {}  # node -> q(.|node) with its drawn children zeroed
        one = 1 + 0 * problem.draft(())[0]     # 1 in the problem's number system
        heap = {0: one}                         # expandable node (= creation id) -> estimated reach value
        for drawn in range(1, self.budget + 1):
            candidates = sorted(heap)           # creation order: among tied values the oldest wins
            node = candidates[best_index_with_ties([heap[c] for c in candidates])]
            value = heap.pop(node)
            if node not in remaining:
                remaining[node] = problem.draft(prefixes[node]).copy()
            left = remaining[node]
            mass = left.sum()
            token = chooser.categorical(left / mass)
            conditional = left[token] / mass   # q~(t), the without-replacement conditional
            child = builder.add_child(node, token)
            prefixes[child] = prefixes[node] + (token,)
            left[token] = 0 * left[token]
            if drawn == self.budget:
                break
            heap[child] = value * conditional
            if left.sum() > 0:
                heap[node] = value * (1 - conditional)
        return builder.shape()
