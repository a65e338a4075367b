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
from verispec.simulator.distributions import normalize, positive_part, ratio_min_one, zeros
from verispec.simulator.drafters import DraftLaw
from verispec.simulator.trees import DraftTree
from verispec.verifiers.base import Verifier


def _weights(tree: DraftTree, nodes: list[int]) -> list:
    """w_0..w_L along the chain."""
    weights = [1]
    for here, child in zip(nodes[:-1], nodes[1:]):
        token = tree.token[child]
        weights.append(ratio_min_one(weights[-1] * tree.p[here, token], tree.q[here, token]))
    return weights


def _stop_probability(weight, p: np.ndarray, q: np.ndarray):
    """h_i = S / (S + 1 - w) with S = sum (w p - q)+; 1 when the denominator vanishes."""
    mass = positive_part(weight * p - q).sum()
    denominator = mass + (1 - weight)  # parenthesised: w = 1 must give exactly h = 1, not 1 - 1e-16
    return mass / denominator if denominator > 0 else denominator * 0 + 1


def _correction(weight, p: np.ndarray, q: np.ndarray) -> np.ndarray:
    return normalize(positive_part(weight * p - q))


class BlockVerifier(Verifier):
    name = "bv"
    valid_for = frozenset({DraftLaw.SINGLE_PATH})

    def emission_law(self, tree: DraftTree) -> np.ndarray:
        nodes = tree.chain_nodes()
        length = len(nodes) - 1
        weights = _weights(tree, nodes)
        law = zeros((tree.num_nodes, tree.vocab_size), exact=tree.exact)
        # Backward scan: P(tau = i) = h_i * prod_{j > i} (1 - h_j), with h_L = w_L and "h_0" = 1.
        none_later = 1
        for i in range(length, -1, -1):
            node = nodes[i]
            if i == length:
                h = weights[length]
                law[node] = h * tree.p[node]
            else:
                h = _stop_probability(weights[i], tree.p[node], tree.q[node]) if i > 0 else 1
                law[node] = none_later * h * _correction(weights[i], tree.p[node], tree.q[node])
            none_later = none_later * (1 - h)
        return law

    def procedure(self, tree: DraftTree, chooser: Chooser) -> tuple[int, int]:
        # Sun et al., Alg. 2, forward form: one uniform per position, tau = the last position that passed.
        nodes = tree.chain_nodes()
        length = len(nodes) - 1
        weight, tau, weight_at_tau = 1, 0, 1
        for i in range(1, length + 1):
            here, child = nodes[i - 1], nodes[i]
            token = tree.token[child]
            weight = ratio_min_one(weight * tree.p[here, token], tree.q[here, token])
            if i < length:
                h = _stop_probability(weight, tree.p[child], tree.q[child])
            else:
                h = weight
            if chooser.bernoulli(h):
                tau, weight_at_tau = i, weight
        if tau == length:
            return nodes[tau], chooser.categorical(tree.p[nodes[tau]])
        return nodes[tau], chooser.categorical(_correction(weight_at_tau, tree.p[nodes[tau]], tree.q[nodes[tau]]))
