"""The rule of the README's "Prototyping a rule" section, for `verispec ... --verifier my_rules.py:my_rule`.

`my_rule` has no `valid_for` attribute, so the command line takes it to be a single-path rule (chain trees).
tests/cli/test_readme.py checks that it stays identical to the README's copy.
"""


def my_rule(tree, chooser):            # returns (node, emitted token)
    node = 0
    while tree.child_tokens[node]:
        child = tree.child_nodes[node][0]
        x = tree.token[child]
        if not chooser.bernoulli(min(1.0, tree.p[node, x] / tree.q[node, x])):
            leftover = [max(a - b, 0.0) for a, b in zip(tree.p[node], tree.q[node])]
            return node, chooser.categorical([v / sum(leftover) for v in leftover])
        node = child
    return node, chooser.categorical(tree.p[node])


def my_buggy_rule(tree, chooser):
    """my_rule with a classic bug: after a rejection it samples from p instead of the residual max(p - q, 0)."""
    node = 0
    while tree.child_tokens[node]:
        child = tree.child_nodes[node][0]
        x = tree.token[child]
        if not chooser.bernoulli(min(1.0, tree.p[node, x] / tree.q[node, x])):
            return node, chooser.categorical(tree.p[node])
        node = child
    return node, chooser.categorical(tree.p[node])
