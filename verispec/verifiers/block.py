"""Block verification of a single draft path (Sun et al. 2024, "Block Verification Accelerates
Speculative Decoding", arXiv 2403.10444, Alg. 2).

Weights w_0 = 1, w_i = min(1, w_{i-1} p(x_i | x_<i) / q(x_i | x_<i)). For i < L,
h_i = S_i / (S_i + 1 - w_i) with S_i = sum_x (w_i p(x | x_<=i) - q(x | x_<=i))+ (h_i = 1 when the
denominator is 0), and h_L = w_L. With independent eta_i ~ U(0, 1), tau is the LARGEST i with
eta_i <= h_i (0 if none); emit x_1..x_tau and y ~ norm((w_tau p(. | x_<=tau) - q(. | x_<=tau))+) if
tau < L, y ~ p(. | x_<=L) if tau = L. (Taking tau as the first failure instead is trap 3 of the
reference and is lossy.)
"""

from __future__ import annotations

import numpy as np

from verispec.simulator.chooser import Chooser
from verispec.simulator.distributions import (
    batched_stop_probability,
    batched_weighted_residual,
    ratio_min_one,
    stop_probability,
    weighted_residual,
    zeros,
)
from verispec.simulator.drafters import DraftLaw
from verispec.simulator.trees import DraftTree
from verispec.verifiers.base import Verifier


def block_law_on_path(tree: DraftTree, nodes: list[int], drafts: list[np.ndarray]) -> np.ndarray:
    """Block verification's emission law on the path ``nodes`` (root..leaf) of ``tree``, with draft
    conditional ``drafts[i]`` at path position i < L: q itself for BV, GBV's skewed draft for GBV."""
    length = len(nodes) - 1
    weights = [1]
    for i in range(1, length + 1):
        token = int(tree.token[nodes[i]])
        weights.append(ratio_min_one(weights[-1] * tree.p[nodes[i - 1], token], drafts[i - 1][token]))
    law = zeros((tree.num_nodes, tree.vocab_size), exact=tree.exact)
    # Backward scan: P(tau = i) = h_i * prod_{j > i} (1 - h_j), with h_L = w_L and "h_0" = 1.
    none_later = 1
    for i in range(length, -1, -1):
        node = nodes[i]
        if i == length:
            h = weights[length]
            law[node] = h * tree.p[node]
        else:
            h = stop_probability(weights[i], tree.p[node], drafts[i]) if i > 0 else 1
            law[node] = none_later * h * weighted_residual(weights[i], tree.p[node], drafts[i])
        none_later = none_later * (1 - h)
    return law


def block_procedure_on_path(tree: DraftTree, nodes: list[int], drafts: list[np.ndarray],
                            chooser: Chooser) -> tuple[int, int]:
    """Sun et al., Alg. 2, forward form, on the path ``nodes`` with drafts ``drafts``: one uniform per
    position, tau = the LAST position that passed (not the first failure; trap 3)."""
    length = len(nodes) - 1
    weight, tau, weight_at_tau = 1, 0, 1
    for i in range(1, length + 1):
        token = int(tree.token[nodes[i]])
        weight = ratio_min_one(weight * tree.p[nodes[i - 1], token], drafts[i - 1][token])
        h = stop_probability(weight, tree.p[nodes[i]], drafts[i]) if i < length else weight
        if chooser.bernoulli(h):
            tau, weight_at_tau = i, weight
    if tau == length:
        return nodes[tau], chooser.categorical(tree.p[nodes[tau]])
    return nodes[tau], chooser.categorical(weighted_residual(weight_at_tau, tree.p[nodes[tau]], drafts[tau]))


class BlockVerifier(Verifier):
    name = "bv"
    valid_for = frozenset({DraftLaw.SINGLE_PATH})

    def emission_law(self, tree: DraftTree) -> np.ndarray:
        nodes = tree.chain_nodes()
        return block_law_on_path(tree, nodes, [tree.q[node] for node in nodes])

    def emission_laws(self, group) -> np.ndarray:
        """``emission_law`` for every row of a chain ``TreeGroup`` at once, [N, n, V] (fast enumeration)."""
        return _batched_chain_laws(group)

    def procedure(self, tree: DraftTree, chooser: Chooser) -> tuple[int, int]:
        nodes = tree.chain_nodes()
        return block_procedure_on_path(tree, nodes, [tree.q[node] for node in nodes], chooser)


# --------------------------------------------------------------------------------------------------
# Batched form (engine method 'fast-enumeration'): the same backward scan over many paths at once.


def batched_block_law(targets: list[np.ndarray], drafts: list[np.ndarray], tokens: np.ndarray) -> list[np.ndarray]:
    """Block verification on N paths at once: ``targets[i]`` = p at path position i ([N, V], i = 0..L),
    ``drafts[i]`` = the draft conditional there (i < L), ``tokens[:, i - 1]`` = the drafted token x_i.
    Returns the emission law at each path position, a list of L+1 arrays [N, V]; ``emission_law`` is the
    per-tree oracle (tests/test_fast_enumeration.py)."""
    rows, length = tokens.shape
    everyone = np.arange(rows)
    weights = [np.ones(rows)]
    for i in range(1, length + 1):
        token = tokens[:, i - 1]
        weights.append(np.minimum(weights[-1] * targets[i - 1][everyone, token] / drafts[i - 1][everyone, token], 1.0))
    law: list[np.ndarray] = [None] * (length + 1)
    none_later = np.ones(rows)  # backward scan, as in BlockVerifier.emission_law
    for i in range(length, -1, -1):
        if i == length:
            h = weights[length]
            law[i] = h[:, None] * targets[i]
        else:
            h = batched_stop_probability(weights[i], targets[i], drafts[i]) if i > 0 else np.ones(rows)
            law[i] = (none_later * h)[:, None] * batched_weighted_residual(weights[i], targets[i], drafts[i])
        none_later = none_later * (1 - h)
    return law


def _batched_chain_laws(group) -> np.ndarray:
    """BlockVerifier on every row of a chain topology (verispec.simulator.fast_enumeration.TreeGroup)."""
    length = group.num_nodes - 1  # a chain's node i is at depth i
    path = batched_block_law([group.p(i) for i in range(length + 1)], [group.q(i) for i in range(length)],
                             group.tokens[:, 1:])
    return np.stack(path, axis=1)

