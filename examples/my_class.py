"""A class of verifiers of your own for ``verispec bound --restriction my_class.py:shallow_off_path`` (README,
"Verifier classes in cvxpy"): a function of the multi-step LP's variables returning cvxpy constraints."""

from verispec.simulator.selection import greedy_path


def shallow_off_path(v):
    """Accept at most one token off GBV's greedy path: deeper emissions only on that path."""
    columns = []
    for index, (tree, _) in enumerate(v.outcomes):
        on_path = set(greedy_path(tree))
        deep_off = [n for n in range(tree.num_nodes) if len(tree.paths[n]) > 1 and n not in on_path]
        columns.extend(v.columns(index, deep_off))
    return [v.z[columns] == 0] if columns else []
