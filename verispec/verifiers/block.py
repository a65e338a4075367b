"""Block verification of a single draft path (Sun et al. 2024, "Block Verification Accelerates
Speculative Decoding", arXiv 2403.10444, Alg. 2).

Weights w_0 = 1, w_i = min(1, w_{i-1} p(x_i | x_<i) / q(x_i | x_<i)). For i < L,
h_i = S_i / (S_i + 1 - w_i) with S_i = sum_x (w_i p(x | x_<=i) - q(x | x_<=i))+ (h_i = 1 when the
denominator is 0), and h_L = w_L. With independent eta_i ~ U(0, 1), tau is the LARGEST i with
eta_i <= h_i (0 if none); emit x_1..x_tau and y ~ norm((w_tau p(. | x_<=tau) - q(. | x_<=tau))+) if
tau < L, y ~ p(. | x_<=L) if tau = L. (Taking tau as the first failure instead is trap 3 of the
reference and is lossy.) GBV (gbv.py) runs the same law on its selected path with a skewed draft.
"""

from __future__ import annotations

from verispec import backend
from verispec.simulator.chooser import Chooser
from verispec.simulator.distributions import ratio_min_one, stop_probability, weighted_residual
from verispec.simulator.drafters import DraftLaw
from verispec.simulator.interfaces import Verifier
from verispec.simulator.trees import DraftTree, TreeBatch


def block_law(targets: list, drafts: list, tokens) -> list:
    """Block verification's emission law on N paths at once, on any backend.

    ``targets[i]`` = p at path position i ([N, V], i = 0..L), ``drafts[i]`` = the draft conditional there
    ([N, V], i < L: q for BV, GBV's skewed draft for GBV), ``tokens[:, i - 1]`` = the drafted token x_i
    ([N, L]). Returns the emission law at each path position, a list of L + 1 arrays [N, V].
    """
    length = len(drafts)
    weights = [backend.ones((tokens.shape[0],), targets[0][:, 0])]  # w_0 = 1, [N]
    for i in range(1, length + 1):
        token = tokens[:, i - 1]
        ratio = weights[-1] * backend.take(targets[i - 1], token) / backend.take(drafts[i - 1], token)
        weights.append(backend.minimum_one(ratio))
    law = [None] * (length + 1)
    none_later = backend.ones((tokens.shape[0],), weights[0])  # backward scan: P(no h_j passed for j > i)
    for i in range(length, -1, -1):
        if i == length:
            h = weights[length]
            law[i] = h[:, None] * targets[i]
        else:
            h = stop_probability(weights[i], targets[i], drafts[i]) if i > 0 else weights[0]
            law[i] = (none_later * h)[:, None] * weighted_residual(weights[i], targets[i], drafts[i])
        none_later = none_later * (1 - h)
    return law


def block_procedure_on_path(tree: DraftTree, nodes: list[int], drafts: list, chooser: Chooser) -> tuple[int, int]:
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
    summary = "block verification"
    citation = "Sun et al. 2024, arXiv 2403.10444, Alg. 2"
    valid_for = frozenset({DraftLaw.SINGLE_PATH})

    def emission_laws(self, batch: TreeBatch):
        nodes = batch.chain_nodes()  # node i sits at depth i
        path = block_law([batch.p[:, n] for n in nodes], [batch.q[:, n] for n in nodes[:-1]],
                         batch.tokens[:, nodes[1:]])
        laws = [None] * batch.num_nodes
        for node, law in zip(nodes, path):
            laws[node] = law
        return backend.stack(laws, axis=1)

    def procedure(self, tree: DraftTree, chooser: Chooser) -> tuple[int, int]:
        nodes = tree.chain_nodes()
        return block_procedure_on_path(tree, nodes, [tree.q[node] for node in nodes], chooser)
