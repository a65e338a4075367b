"""Token-level verification of a single draft path (Leviathan et al. 2023, arXiv 2211.17192, Alg. 1;
Chen et al. 2023, arXiv 2302.01318).

Position i = 1..L: accept x_i with probability min(1, p(x_i | x_<i) / q(x_i | x_<i)); at the first
rejection emit y ~ norm((p - q)+) at that prefix and stop; if every draft is accepted, emit the bonus
token y ~ p(. | x_1..x_L).
"""

from __future__ import annotations

from verispec import backend
from verispec.simulator.chooser import Chooser
from verispec.simulator.distributions import ratio_min_one, residual
from verispec.simulator.drafters import DraftLaw
from verispec.simulator.interfaces import Verifier
from verispec.simulator.trees import DraftTree, TreeBatch


class NaiveVerifier(Verifier):
    name = "naive"
    summary = "token-level verification"
    citation = "Leviathan et al. 2023, arXiv 2211.17192, Alg. 1; Chen et al. 2023, arXiv 2302.01318"
    valid_for = frozenset({DraftLaw.SINGLE_PATH})

    def emission_laws(self, batch: TreeBatch):
        nodes = batch.chain_nodes()
        reach = backend.ones((batch.num_rows,), batch.p[:, 0, 0])  # P(every draft so far accepted), [N]
        laws = [None] * batch.num_nodes
        for here, child in zip(nodes[:-1], nodes[1:]):
            p, q, token = batch.p[:, here], batch.q[:, here], batch.tokens[:, child]
            accept = backend.minimum_one(backend.take(p, token) / backend.take(q, token))  # [N]
            laws[here] = (reach * (1 - accept))[:, None] * residual(p, q)
            reach = reach * accept
        laws[nodes[-1]] = reach[:, None] * batch.p[:, nodes[-1]]
        return backend.stack(laws, axis=1)

    def procedure(self, tree: DraftTree, chooser: Chooser) -> tuple[int, int]:
        node = 0
        while tree.child_nodes[node]:
            child = tree.child_nodes[node][0]
            token = tree.token[child]
            if not chooser.bernoulli(ratio_min_one(tree.p[node, token], tree.q[node, token])):
                return node, chooser.categorical(residual(tree.p[node], tree.q[node]))
            node = child
        return node, chooser.categorical(tree.p[node])
