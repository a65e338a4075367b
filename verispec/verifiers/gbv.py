"""Greedy multi-path block verification, GBV (Thomas & Pal 2026, arXiv 2602.16961).

Draft law: K i.i.d. draft paths of length L from the root (``iid:K,L``). Glossary:

* *rank key* at a node u: the strict total order key(t) = (p(t|u) / q(t|u), t) over tokens (tokens with
  q(t|u) = 0 are never drafted and rank above every drafted one; they carry no draft mass, so where they
  sit changes nothing). ONE order serves both the greedy descent and the CDFs below: breaking ties
  differently in the two places is lossy (reference, trap 6; tests/broken_paths.py).
* *selected path*: from the root, repeatedly move to the child with the largest key. Since every path has
  length L, this is the lexicographically largest of the K paths under the per-node orders.
* *skewed draft* q_skew(. | u): the law of the next token of the lexicographically largest of K i.i.d.
  paths given that its prefix is u. With x = q(u) (draft probability of the prefix u), A = draft mass of
  the prefixes of the same length ranked below u, below(t) = draft mass at u of the tokens ranked below t:

      q_skew(t | u) = [(A + x below(t) + x q(t|u))^K - (A + x below(t))^K] / [(A + x)^K - A^K]

  (the max prefix is <= ut minus the max prefix is < ut, given the max prefix is u); along the path
  x <- x q(t|u) and A <- A + x below(t). For K = 1, q_skew = q.

The selected path is distributed as a single path drawn from the conditionals q_skew, so block
verification (Sun et al. 2024, arXiv 2403.10444) with q replaced by q_skew on the selected path is
lossless; the other paths only influence which path is selected. K = 1 is plain block verification.
"""

from __future__ import annotations

import itertools

import numpy as np

from verispec.simulator.chooser import Chooser
from verispec.simulator.distributions import zeros
from verispec.simulator.drafters import DraftLaw
from verispec.simulator.trees import DraftTree
from verispec.verifiers.base import Verifier
from verispec.verifiers.block import batched_block_law, block_law_on_path, block_procedure_on_path


def rank_key(p: np.ndarray, q: np.ndarray, token: int) -> tuple:
    """The strict total order (p/q, token id); undrafted tokens (q = 0) rank above all drafted ones."""
    if q[token] > 0:
        return (0, p[token] / q[token], token)
    return (1, 0, token)


def mass_ranked_below(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """below[t] = sum of q(s) over tokens s ranked strictly below t by ``rank_key``; shape [V]."""
    below = zeros(q.shape, exact=q.dtype == object)
    running = 0 * q[0]
    for token in sorted(range(len(q)), key=lambda t: rank_key(p, q, t)):
        below[token] = running
        running = running + q[token]
    return below


def greedy_path(tree: DraftTree) -> list[int]:
    """Node ids root..leaf of the selected path: the child with the largest rank key at every step."""
    nodes = [0]
    while tree.child_nodes[nodes[-1]]:
        here = nodes[-1]
        nodes.append(max(tree.child_nodes[here],
                         key=lambda c: rank_key(tree.p[here], tree.q[here], int(tree.token[c]))))
    return nodes


def number_of_paths(tree: DraftTree) -> int:
    """K: the root's child list holds one draw per i.i.d. path."""
    return len(tree.child_tokens[0])


def _power_difference_quotient(high, low, power: int):
    """(high^K - low^K) / (high - low) = sum_{j<K} high^j low^(K-1-j), a sum of non-negative terms."""
    return sum(high ** j * low ** (power - 1 - j) for j in range(power))


def skewed_drafts(tree: DraftTree, nodes: list[int], paths: int) -> list[np.ndarray]:
    """q_skew(. | nodes[i]) for i = 0..L-1 along the selected path (see the module docstring)."""
    mass = 1 + 0 * tree.p[0, 0]    # x: draft probability of the prefix
    below_path = 0 * mass          # A: draft mass of same-length prefixes ranked below it
    drafts = []
    for here, child in itertools.pairwise(nodes):
        p, q = tree.p[here], tree.q[here]
        below = mass_ranked_below(p, q)
        low = below_path + mass * below
        high = low + mass * q
        # a^K - b^K = (a - b) sum_j a^j b^(K-1-j): with a - b = x q(t) this form has no cancellation
        # (a draft token of q = 1e-12 next to a ranked-below mass of 1 would lose half its digits).
        drafts.append(q * _power_difference_quotient(high, low, paths)
                      / _power_difference_quotient(below_path + mass, below_path, paths))
        token = int(tree.token[child])
        below_path = low[token]
        mass = mass * q[token]
    return drafts


def batched_gbv_laws(group) -> np.ndarray:
    """``GreedyBlockVerifier.emission_law`` for every row of a ``TreeGroup`` at once, [N, n, V].

    Rank positions and ranked-below masses are computed once per prefix with ``rank_key`` and
    ``mass_ranked_below`` (the per-tree code's own order); the selected path, the skewed drafts and the
    block verification run with numpy over the rows."""
    tables, rows = group.tables, group.num_rows
    everyone = np.arange(rows)
    depth = max(group.depth)
    size = group.vocab_size
    rank = np.zeros((tables.num_prefixes, size), dtype=np.int64)
    below_table = np.zeros((tables.num_prefixes, size))
    for index in range(int(tables.offsets[min(depth, tables.depth)])):  # prefixes that draft
        p, q = tables.target[index], tables.draft[index]
        rank[index, sorted(range(size), key=lambda t: rank_key(p, q, t))] = np.arange(size)
        below_table[index] = mass_ranked_below(p, q)
    # Greedy descent: at each depth the child of the selected node with the largest rank.
    selected = [np.zeros(rows, dtype=np.int64)]
    for level in range(1, depth + 1):
        candidates = [node for node in range(group.num_nodes) if group.depth[node] == level]
        score = np.stack([np.where(selected[-1] == group.parent[c],
                                   rank[group.contexts[:, group.parent[c]], group.tokens[:, c]], -1)
                          for c in candidates], axis=1)
        selected.append(np.asarray(candidates)[np.argmax(score, axis=1)])
    paths = number_of_paths_of(group)
    contexts = [group.contexts[everyone, nodes] for nodes in selected]
    tokens = (np.stack([group.tokens[everyone, nodes] for nodes in selected[1:]], axis=1) if depth
              else np.zeros((rows, 0), dtype=np.int64))
    mass, below_path = np.ones(rows), np.zeros(rows)  # x and A of the module docstring
    drafts = []
    for level in range(depth):
        q, below = tables.draft[contexts[level]], below_table[contexts[level]]
        low = below_path[:, None] + mass[:, None] * below
        high = low + mass[:, None] * q
        drafts.append(q * _power_difference_quotient(high, low, paths)
                      / _power_difference_quotient(below_path + mass, below_path, paths)[:, None])
        token = tokens[:, level]
        below_path = low[everyone, token]
        mass = mass * q[everyone, token]
    path_law = batched_block_law([tables.target[c] for c in contexts], drafts, tokens)
    law = np.zeros((rows, group.num_nodes, size))
    for nodes, values in zip(selected, path_law):
        law[everyone, nodes] = values
    return law


def number_of_paths_of(group) -> int:
    """K for a ``TreeGroup``: the root's child list holds one draw per i.i.d. path."""
    return len(group.child_lists[0])


class GreedyBlockVerifier(Verifier):
    name = "gbv"
    valid_for = frozenset({DraftLaw.ROOT_IID_PATHS})
    #: The law, keyed by token paths, depends on the K paths only through the selected path (the
    #: lexicographic maximum, whatever the order of the paths) and K: any order of the paths gives the
    #: same law. tests/test_fast_enumeration.py proves it by permuting the paths of random trees.
    order_free = True

    def emission_laws(self, group) -> np.ndarray:
        """``emission_law`` for every row of a ``TreeGroup`` at once (fast enumeration)."""
        return batched_gbv_laws(group)

    def emission_law(self, tree: DraftTree) -> np.ndarray:
        nodes = greedy_path(tree)
        return block_law_on_path(tree, nodes, skewed_drafts(tree, nodes, number_of_paths(tree)))

    def procedure(self, tree: DraftTree, chooser: Chooser) -> tuple[int, int]:
        # Select greedily, then block verification's sampling procedure with q_skew.
        nodes = greedy_path(tree)
        return block_procedure_on_path(tree, nodes, skewed_drafts(tree, nodes, number_of_paths(tree)), chooser)
