"""Deliberately broken path-level tree verifiers: traps 4 and 6 of docs/guides/reference.md, and
Traversal on i.i.d. children in the wrong order. Each must be flagged lossy by the exact engine.

The Traversal variants share one plain procedure (written here afresh, not imported from the shipped
module) with switches for the three mistakes; with every switch off it is the correct rule, which the
tests check too, so each broken variant differs from a lossless rule by exactly one mistake.
"""

from __future__ import annotations

import itertools

import numpy as np

from verispec import backend
from verispec.simulator.distributions import normalize, positive_part, ratio_min_one, stop_probability
from verispec.simulator.drafters import DraftLaw
from verispec.verifiers import ProcedureVerifier
from verispec.verifiers.block import block_law
from verispec.verifiers.traversal import TraversalIIDVerifier, TraversalVerifier, deletion_update

WITHOUT_REPLACEMENT = frozenset({DraftLaw.WITHOUT_REPLACEMENT})
IID = frozenset({DraftLaw.IID_CHILDREN, DraftLaw.ROOT_IID_PATHS})


def traversal(tree, chooser, *, parent_update="paper", recompute=True, emit_residual=True, order=None):
    """Weng et al. 2025, Alg. 1, with one optional mistake.

    parent_update: "paper" p_b <- S / (S + 1 - p_b); "one-minus-q" p_b <- min(1, S / (1 - q(x_a))) (trap 4;
        clipped so that it stays a probability).
    recompute: False keeps the weights computed at the start for the remaining descendants (trap 4).
    emit_residual: False emits from the original p(. | X_a) instead of the current residual (trap 4).
    order: a function (tree, node) -> children order; default the distinct children in first appearance.
    """
    children = [list(order(tree, n) if order else tree.child_nodes[n]) for n in range(tree.num_nodes)]
    target = [tree.p[n] for n in range(tree.num_nodes)]
    draft = [tree.q[n] for n in range(tree.num_nodes)]
    weight = [None] * tree.num_nodes

    def init_below(node):
        for child in children[node]:
            token = tree.token[child]
            weight[child] = ratio_min_one(weight[node] * target[node][token], draft[node][token])
            init_below(child)

    weight[0] = 1 + 0 * tree.p[0, 0]  # 1 in the tree's number system
    init_below(0)
    while True:
        leaf = 0
        while children[leaf]:
            leaf = children[leaf][0]
        emit_from = target[leaf] if emit_residual else tree.p[leaf]
        if leaf == 0:
            return 0, chooser.categorical(emit_from)
        if chooser.bernoulli(weight[leaf]):
            return leaf, chooser.categorical(emit_from)
        parent, token = tree.parent[leaf], tree.token[leaf]
        children[parent].pop(0)
        excess = positive_part(weight[parent] * target[parent] - draft[parent])
        mass = excess.sum()
        if parent_update == "paper":
            denominator = mass + (1 - weight[parent])
            weight[parent] = mass / denominator if denominator > 0 else denominator * 0 + 1
        else:  # 0 / 0 where the deleted child held all of q and no excess is left: NaN, and min keeps 1.0
            with np.errstate(invalid="ignore", divide="ignore"):
                weight[parent] = min(1.0, mass / (1 - draft[parent][token]))
        target[parent] = excess / mass if mass > 0 else target[parent]
        remaining = draft[parent].copy()
        remaining[token] = 0 * remaining[token]
        draft[parent] = normalize(remaining)
        if recompute:
            init_below(parent)


def _by_token_id(tree, node):
    return sorted(tree.child_nodes[node], key=lambda child: tree.token[child])


def _appearances(tree, node) -> tuple[dict, dict, dict]:
    """(first position, last position, count) of each token in the node's child list (its i.i.d. draws)."""
    first, last, count = {}, {}, {}
    for position, token in enumerate(tree.child_tokens[node]):
        first.setdefault(token, position)
        last[token] = position
        count[token] = count.get(token, 0) + 1
    return first, last, count


def child_order(rule: str):
    """An order of a node's distinct children, computed from its draws:
    'first-appearance' (the shipped rule), 'latest-last-appearance' (first appearance when the draws are
    read from the last to the first: lossless too), 'reversed' (the first-appearance list reversed),
    'earliest-last-appearance', 'most-frequent' and 'least-frequent' (ties by first appearance)."""
    keys = {
        "first-appearance": lambda first, last, count, t: first[t],
        "latest-last-appearance": lambda first, last, count, t: -last[t],
        "reversed": lambda first, last, count, t: -first[t],
        "earliest-last-appearance": lambda first, last, count, t: last[t],
        "most-frequent": lambda first, last, count, t: (-count[t], first[t]),
        "least-frequent": lambda first, last, count, t: (count[t], first[t]),
    }
    key = keys[rule]

    def order(tree, node):
        first, last, count = _appearances(tree, node)
        return sorted(tree.child_nodes[node], key=lambda child: key(first, last, count, int(tree.token[child])))
    return order


def traversal_with_order(rule: str) -> ProcedureVerifier:
    """Traversal on i.i.d. child lists with the distinct children taken in the order ``rule``."""
    return ProcedureVerifier(f"traversal-iid-{rule}",
                             lambda tree, chooser: traversal(tree, chooser, order=child_order(rule)), IID)


def gbv_tied_ranking(tree, chooser):
    """GBV ranking by min(1, p/q) (trap 6): the CDF breaks ties by token id, the greedy descent by the
    first child in the child list. Written through the emission law of block verification on the selected
    path with the skewed drafts of the CDF order, then sampled."""
    nodes = [0]
    while tree.child_nodes[nodes[-1]]:
        here = nodes[-1]
        score = [ratio_min_one(tree.p[here, t], tree.q[here, t]) if tree.q[here, t] > 0 else 2.0
                 for t in range(tree.vocab_size)]
        nodes.append(max(tree.child_nodes[here], key=lambda child: score[tree.token[child]]))  # first max wins
    paths = len(tree.child_tokens[0])
    drafts, mass, below_path = [], 1.0, 0.0
    for here, child in itertools.pairwise(nodes):
        p, q = tree.p[here], tree.q[here]
        score = [ratio_min_one(p[t], q[t]) if q[t] > 0 else 2.0 for t in range(tree.vocab_size)]
        below, running = q * 0, 0.0
        for token in sorted(range(tree.vocab_size), key=lambda t: (score[t], t)):  # ties: token id
            below[token], running = running, running + q[token]
        low, high = below_path + mass * below, below_path + mass * (below + q)
        drafts.append((high ** paths - low ** paths) / ((below_path + mass) ** paths - below_path ** paths))
        below_path, mass = low[tree.token[child]], mass * q[tree.token[child]]
    path_law = block_law([tree.p[n][None] for n in nodes], [draft[None] for draft in drafts],
                         np.array([[tree.token[n] for n in nodes[1:]]], dtype=np.int64))
    flat = [(node, token) for node, law in zip(nodes, path_law) for token in range(tree.vocab_size)]
    return flat[chooser.categorical([law[0, token] for law in path_law for token in range(tree.vocab_size)])]


class TraversalIIDUpdateOneMinusQ(TraversalIIDVerifier):
    """Trap 4 as a subclass of the shipped rule: after a deletion the parent's weight is min(1, S / (1 - q(x_a)))
    instead of S / (S + 1 - w). Its law and the post-order DP both run it (they share ``deletion_update``), so
    the DP must analyse the broken rule as written, not the rule it assumes."""

    name = "traversal-iid-update-one-minus-q"

    @staticmethod
    def deletion_update(weight, p, q, token):
        _, target, draft = deletion_update(weight, p, q, token)
        excess = backend.total(backend.positive_part(backend.per_row(weight, p) * p - q))
        # 1 when q(x_a) = 1 (no sibling can follow): the mistake is the formula, not a division by zero
        rest = 1 - backend.take(q, token)
        return backend.minimum_one(backend.divide(excess, rest, where_zero=backend.one(rest))), target, draft


class TraversalKeepTarget(TraversalVerifier):
    """Trap 4's third mistake as a subclass: the parent keeps its original p after a deletion (the weight and
    q are updated as in the paper), so later children's weights and the emission use the wrong law."""

    name = "traversal-keep-target"

    @staticmethod
    def deletion_update(weight, p, q, token):
        _, _, draft = deletion_update(weight, p, q, token)
        return stop_probability(weight, p, q), p, draft


BROKEN_PATH_VERIFIERS = {
    "traversal-update-one-minus-q": (
        ProcedureVerifier("traversal-update-one-minus-q",
                          lambda tree, chooser: traversal(tree, chooser, parent_update="one-minus-q"),
                          WITHOUT_REPLACEMENT), "branch:2,2"),
    "traversal-no-recompute": (
        ProcedureVerifier("traversal-no-recompute",
                          lambda tree, chooser: traversal(tree, chooser, recompute=False), WITHOUT_REPLACEMENT),
        "branch:2,2"),
    "traversal-emit-original-p": (
        ProcedureVerifier("traversal-emit-original-p",
                          lambda tree, chooser: traversal(tree, chooser, emit_residual=False), WITHOUT_REPLACEMENT),
        "branch:2,2"),
    "traversal-iid-token-order": (
        ProcedureVerifier("traversal-iid-token-order",
                          lambda tree, chooser: traversal(tree, chooser, order=_by_token_id), IID), "iid:2,1"),
    "gbv-tied-ranking": (ProcedureVerifier("gbv-tied-ranking", gbv_tied_ranking, IID), "iid:2,1"),
    # analysed by the post-order DP (method 'rule-dp', which 'auto' takes for them)
    "traversal-iid-update-one-minus-q": (TraversalIIDUpdateOneMinusQ(), "delayed:2,1,1"),
    "traversal-keep-target": (TraversalKeepTarget(), "branch:2,2"),
}

#: The same procedure with no mistake: must be lossless (so each broken variant isolates one mistake).
CORRECT_TRAVERSAL = ProcedureVerifier("traversal-reference", traversal, WITHOUT_REPLACEMENT | IID)
