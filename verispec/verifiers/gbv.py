"""Greedy multi-path block verification, GBV (Thomas & Pal 2026, arXiv 2602.16961).

Draft law: K i.i.d. draft paths of length L from the root (``iid:K,L``). Glossary:

* *rank key* at a node u: the strict total order key(t) = (p(t|u) / q(t|u), t) over tokens, ratios equal
  under the tie rule of verispec.simulator.ranking counting as equal in float and exact mode alike (tokens
  with q(t|u) = 0 are never drafted and rank above every drafted one; they carry no draft mass, so where
  they sit changes nothing). ONE order serves both the greedy descent and the CDFs below: breaking ties
  differently in the two places is lossy (reference, trap 6; tests/broken_paths.py). The order and the
  descent live in verispec.simulator.selection.
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

from verispec import backend
from verispec.simulator.chooser import Chooser
from verispec.simulator.drafters import DraftLaw
from verispec.simulator.interfaces import Verifier
from verispec.simulator.selection import greedy_path, mass_ranked_below, selected_path
from verispec.simulator.trees import DraftTree, TreeBatch
from verispec.verifiers.block import block_law, block_procedure_on_path


def _power_difference_quotient(high, low, power: int):
    """(high^K - low^K) / (high - low) = sum_{j<K} high^j low^(K-1-j), a sum of non-negative terms."""
    return sum(high ** j * low ** (power - 1 - j) for j in range(power))


def skewed_drafts(targets: list, drafts: list, tokens, paths: int) -> list:
    """q_skew(. | u_i) along N selected paths at once (see the module docstring): ``targets[i]`` and
    ``drafts[i]`` are p and q at path position i ([N, V], i < L), ``tokens[:, i]`` the token x_{i+1}
    ([N, L]), ``paths`` = K. Returns L arrays [N, V]."""
    mass = backend.ones((tokens.shape[0],), drafts[0][:, 0]) if drafts else None  # x: draft prob. of the prefix
    below_path = mass * 0 if drafts else None  # A: draft mass of same-length prefixes ranked below it
    skewed = []
    for level, (p, q) in enumerate(zip(targets, drafts)):
        low = below_path[:, None] + mass[:, None] * mass_ranked_below(p, q)
        high = low + mass[:, None] * q
        # a^K - b^K = (a - b) sum_j a^j b^(K-1-j): with a - b = x q(t) this form has no cancellation
        # (a draft token of q = 1e-12 next to a ranked-below mass of 1 would lose half its digits).
        skewed.append(q * _power_difference_quotient(high, low, paths)
                      / _power_difference_quotient(below_path + mass, below_path, paths)[:, None])
        token = tokens[:, level]
        below_path = backend.take(low, token)
        mass = mass * backend.take(q, token)
    return skewed


def path_skewed_drafts(tree: DraftTree, nodes: list[int]) -> list:
    """q_skew at each node of one tree's selected path ``nodes`` (root..leaf), L arrays [V] (the one-row case
    of ``skewed_drafts``)."""
    tokens = backend.index_array([[int(tree.token[n]) for n in nodes[1:]]], tree.token)
    drafts = skewed_drafts([tree.p[n][None] for n in nodes[:-1]], [tree.q[n][None] for n in nodes[:-1]], tokens,
                           len(tree.child_tokens[0]))
    return [draft[0] for draft in drafts]


def number_of_paths(batch: TreeBatch) -> int:
    """K: the root's child list holds one draw per i.i.d. path."""
    return len(batch.child_lists[0])


class GreedyBlockVerifier(Verifier):
    name = "gbv"
    valid_for = frozenset({DraftLaw.ROOT_IID_PATHS})
    #: The law, keyed by token paths, depends on the K paths only through the selected path (the
    #: lexicographic maximum, whatever the order of the paths) and K: any order of the paths gives the
    #: same law. tests/test_fast_enumeration.py proves it by permuting the paths of random trees.
    order_free = True

    def emission_laws(self, batch: TreeBatch):
        selected = selected_path(batch)  # [N] node ids per depth 0..L
        rows = backend.arange(batch.num_rows, batch.tokens)
        targets = [batch.p[rows, nodes] for nodes in selected]
        drafts = [batch.q[rows, nodes] for nodes in selected[:-1]]
        tokens = batch.tokens[:, []] if len(selected) == 1 else backend.stack(
            [batch.tokens[rows, nodes] for nodes in selected[1:]], axis=1)  # [N, L]
        path_law = block_law(targets, skewed_drafts(targets[:-1], drafts, tokens, number_of_paths(batch)), tokens)
        law = backend.scatter_rows(path_law[0], selected[0], batch.num_nodes)
        for nodes, values in zip(selected[1:], path_law[1:]):
            law = law + backend.scatter_rows(values, nodes, batch.num_nodes)
        return law

    def procedure(self, tree: DraftTree, chooser: Chooser) -> tuple[int, int]:
        # Select greedily, then block verification's sampling procedure with q_skew.
        nodes = greedy_path(tree)
        return block_procedure_on_path(tree, nodes, path_skewed_drafts(tree, nodes), chooser)
