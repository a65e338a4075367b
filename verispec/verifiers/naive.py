"""Token-level verification of a single draft path (Leviathan et al. 2023, arXiv 2211.17192, Alg. 1;
Chen et al. 2023, arXiv 2302.01318).

Position i = 1..L: accept x_i with probability min(1, p(x_i | x_<i) / q(x_i | x_<i)); at the first
rejection emit y ~ norm((p - q)+) at that prefix and stop; if every draft is accepted, emit the bonus
token y ~ p(. | x_1..x_L).
"""

from __future__ import annotations

import numpy as np

from verispec.simulator.chooser import Chooser
from verispec.simulator.distributions import batched_weighted_residual, ratio_min_one, residual, zeros
from verispec.simulator.drafters import DraftLaw
from verispec.simulator.trees import DraftTree
from verispec.verifiers.base import Verifier


class NaiveVerifier(Verifier):
    name = "naive"
    valid_for = frozenset({DraftLaw.SINGLE_PATH})

    def emission_law(self, tree: DraftTree) -> np.ndarray:
        nodes = tree.chain_nodes()
        law = zeros((tree.num_nodes, tree.vocab_size), exact=tree.exact)
        reach = 1  # P(all drafts up to this node accepted)
        for here, child in zip(nodes[:-1], nodes[1:]):
            token = tree.token[child]
            accept = ratio_min_one(tree.p[here, token], tree.q[here, token])
            law[here] = reach * (1 - accept) * residual(tree.p[here], tree.q[here])
            reach = reach * accept
        law[nodes[-1]] = reach * tree.p[nodes[-1]]
        return law

    def emission_laws(self, group) -> np.ndarray:
        """``emission_law`` for every row of a chain ``TreeGroup`` at once, [N, n, V] (fast enumeration)."""
        rows, length = group.num_rows, group.num_nodes - 1  # a chain's node i is at depth i
        everyone = np.arange(rows)
        law = np.zeros((rows, group.num_nodes, group.vocab_size))
        reach = np.ones(rows)
        for here in range(length):
            p, q, token = group.p(here), group.q(here), group.tokens[:, here + 1]
            accept = np.minimum(p[everyone, token] / q[everyone, token], 1.0)
            law[:, here] = (reach * (1 - accept))[:, None] * batched_weighted_residual(np.ones(len(p)), p, q)
            reach = reach * accept
        law[:, length] = reach[:, None] * group.p(length)
        return law

    def procedure(self, tree: DraftTree, chooser: Chooser) -> tuple[int, int]:
        node = 0
        while tree.child_nodes[node]:
            child = tree.child_nodes[node][0]
            token = tree.token[child]
            if not chooser.bernoulli(ratio_min_one(tree.p[node, token], tree.q[node, token])):
                return node, chooser.categorical(residual(tree.p[node], tree.q[node]))
            node = child
        return node, chooser.categorical(tree.p[node])


