"""Classes of verifiers of your own for ``verispec bound --restriction my_class.py:NAME`` (README, "Verifier classes
in cvxpy"): functions of the multi-step LP's variables returning cvxpy constraints.

Both classes lie between GBV's (emissions only along its greedily selected path) and every valid verifier; they
differ in where the block may leave the path:

* ``shallow_off_path``: only at depth 1 (a first token other than the path's, then nothing deeper);
* ``one_off_path``: at any depth, by one token (the path's first tokens, then one token off it).

On ``iid:3,2`` with p = (1/2, 3/10, 1/5), q = (1/5, 3/5, 1/5) their optima are 42693/15625 = 2.732352 and
85509/31250 = 2.736288 (docs/findings/gbv_commitment.md).
"""

from verispec.simulator.selection import greedy_path


def shallow_off_path(v):
    """Accept at most one token off GBV's greedy path: deeper emissions only on that path."""
    columns = []
    for index, (tree, _) in enumerate(v.outcomes):
        on_path = set(greedy_path(tree))
        deep_off = [n for n in range(tree.num_nodes) if len(tree.paths[n]) > 1 and n not in on_path]
        columns.extend(v.columns(index, deep_off))
    return [v.z[columns] == 0] if columns else []


def one_off_path(v):
    """Accept a prefix of GBV's greedy path and at most one token off it, at any depth: emissions only at the
    path's nodes and their children (a child of a node off the path is two tokens off)."""
    columns = []
    for index, (tree, _) in enumerate(v.outcomes):
        on_path = set(greedy_path(tree))
        two_off = [n for n in range(tree.num_nodes) if n not in on_path and int(tree.parent[n]) not in on_path]
        columns.extend(v.columns(index, two_off))
    return [v.z[columns] == 0] if columns else []
