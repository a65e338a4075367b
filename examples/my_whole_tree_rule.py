"""A whole-tree rule written by a user: token-level verification of one draft path, with its law written
once, batched over trees of one shape, and its sampling procedure as the parity twin.

    verispec exact --target 0.5,0.3,0.2 --draft 0.2,0.2,0.6 --tree chain:3 --verifier my_whole_tree_rule.py:RULE

The batched law is all the exact engine needs: fast enumeration hands it every draft tree of a shape at
once (``batch.p`` is [N, nodes, V]), the same code runs on one tree, on exact rationals and on torch tensors,
and ``verispec exact --method enumerate`` checks it against the procedure.
"""

from verispec import backend
from verispec.simulator import DraftLaw, Verifier
from verispec.simulator.distributions import residual


class MyTokenLevelRule(Verifier):
    name = "my-token-level"
    valid_for = frozenset({DraftLaw.SINGLE_PATH})

    def emission_laws(self, batch):
        nodes = batch.chain_nodes()                                   # node ids root..leaf
        reach = backend.ones((batch.num_rows,), batch.p[:, 0, 0])    # P(all drafts so far accepted), [N]
        laws = []
        for here, child in zip(nodes[:-1], nodes[1:]):
            p, q, x = batch.p[:, here], batch.q[:, here], batch.tokens[:, child]
            accept = backend.minimum_one(backend.take(p, x) / backend.take(q, x))
            laws.append((reach * (1 - accept))[:, None] * residual(p, q))
            reach = reach * accept
        laws.append(reach[:, None] * batch.p[:, nodes[-1]])
        return backend.stack(laws, axis=1)                           # [N, nodes, V]

    def procedure(self, tree, chooser):
        node = 0
        while tree.child_nodes[node]:
            child = tree.child_nodes[node][0]
            x = tree.token[child]
            if not chooser.bernoulli(min(1, tree.p[node, x] / tree.q[node, x])):
                return node, chooser.categorical(residual(tree.p[node], tree.q[node]))
            node = child
        return node, chooser.categorical(tree.p[node])


RULE = MyTokenLevelRule()
