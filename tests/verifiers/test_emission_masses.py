"""``TopDownVerifier.emission_masses``: the stopping mass at each node by the tree walk on scalars, for every
registered rule with a node-local solver and a user's procedure-only solver, equals its emission laws summed over
tokens to 1e-12 (random batches of three topologies, i.i.d. children that agree included). The flat walk over many
trees (``forest_masses``, the labels' route: the solver's scalars once per node key, ``node_scalars``) gives the same
masses, and keys that lie (one key for roots whose laws differ, the control) are caught by the same comparison."""

from __future__ import annotations

import numpy as np
import pytest

from verispec.errors import InvalidTreeError
from verispec.simulator.trees import TreeBatch
from verispec.verifiers import REGISTRY, get_verifier
from verispec.verifiers.tree_walk import Forest, ProcedureSolver, TopDownVerifier, forest_masses

VOCAB = 9
#: (parent, child lists): a root with three i.i.d. children of which two agree; a chain of 3; two levels of two.
TOPOLOGIES = [((-1, 0, 0, 1, 1), ((1, 1, 2), (3, 4), (), (), ())),
              ((-1, 0, 1, 2), ((1,), (2,), (3,), ())),
              ((-1, 0, 0, 1, 1, 2, 2), ((1, 2), (3, 4), (5, 6), (), (), (), ()))]


def _depths(parent):
    depth = []
    for up in parent:
        depth.append(0 if up < 0 else depth[up] + 1)
    return tuple(depth)


def _batch(topology, rows: int, seed: int, shared_root: bool = False) -> TreeBatch:
    parent, child_lists = topology
    rng = np.random.default_rng(seed)
    nodes = len(parent)
    p = rng.dirichlet(np.ones(VOCAB) * 0.7, size=(rows, nodes))  # [N, n, V]
    q = rng.dirichlet(np.ones(VOCAB) * 0.7, size=(rows, nodes))
    tokens = -np.ones((rows, nodes), np.int64)  # [N, n]; distinct children of a node carry distinct tokens
    for children in child_lists:
        distinct = list(dict.fromkeys(children))
        for row in range(rows):
            tokens[row, distinct] = rng.choice(VOCAB, len(distinct), replace=False)
    contexts = np.arange(rows * nodes).reshape(rows, nodes)
    if shared_root:  # every row the same root law and root children: one solver call for them all
        p[:, 0], q[:, 0], contexts[:, 0] = p[0, 0], q[0, 0], 0
        tokens[:, list(child_lists[0])] = tokens[0, list(child_lists[0])]
    return TreeBatch(vocab_size=VOCAB, parent=parent, depth=_depths(parent), child_lists=child_lists, tokens=tokens,
                     p=p, q=q, contexts=contexts)


def _walk_rules():
    rules = [name for name in sorted(REGISTRY) if isinstance(get_verifier(name), TopDownVerifier)]
    assert {"specinfer", "spectr", "naivetree", "khisti"} <= set(rules)
    return rules


def _laws_total(verifier, batch):
    return np.asarray(verifier.emission_laws(batch), dtype=np.float64).sum(axis=-1)  # [N, n]


def _forest_masses(verifier, batch, shared_root: bool, lying: bool = False):
    """The batch's rows as the trees of one ``Forest`` (flat, a row's nodes in order), a node key per (row, node) but
    one for the roots where the batch shares its root (or, ``lying``, where it does not), the solver's scalars once a
    key from that key's first row: the masses [N, n] by ``forest_masses``, and the solver rows it took."""
    rows, nodes = batch.num_rows, batch.num_nodes
    parent = np.array(batch.parent)
    keys: dict = {}
    key = np.full((rows, nodes), -1)                                                  # [N, n]
    for row in range(rows):
        for node in range(nodes):
            if batch.child_lists[node]:
                name = ("root",) if (shared_root or lying) and node == 0 else (row, node)
                key[row, node] = keys.setdefault(name, len(keys))
    first = {int(key[row, node]): (row, node) for row in reversed(range(rows)) for node in range(nodes)
             if key[row, node] >= 0}
    widest = max(len(children) for children in batch.child_lists)
    taken, stop = np.zeros((len(keys), widest)), np.zeros(len(keys))
    for index, (row, node) in sorted(first.items()):
        children = batch.children(node)[row:row + 1]
        row_taken, row_stop = verifier.node_scalars(batch.p[row:row + 1, node], batch.q[row:row + 1, node], children)
        taken[index, :children.shape[1]], stop[index] = row_taken[0], row_stop[0]
    slot = np.array([-1] + [batch.child_lists[up].index(node) for node, up in enumerate(batch.parent) if up >= 0])
    flat_parent = np.tile(parent, rows)                                               # [N * n]
    forest = Forest(tree=np.repeat(np.arange(rows), nodes),
                    parent=np.where(flat_parent >= 0, flat_parent + np.repeat(np.arange(rows) * nodes, nodes), -1),
                    slot=np.tile(slot, rows), depth=np.tile(np.array(batch.depth), rows), key=key.ravel())
    return forest_masses(forest, taken, stop).reshape(rows, nodes), len(first)


@pytest.mark.parametrize("name", _walk_rules())
@pytest.mark.parametrize("topology", range(len(TOPOLOGIES)))
def test_masses_equal_the_laws_totals(name, topology, monkeypatch):
    verifier = get_verifier(name)
    batch = _batch(TOPOLOGIES[topology], 6, seed=topology, shared_root=True)
    try:
        expected = _laws_total(verifier, batch)
    except InvalidTreeError:  # a rule that needs structured children (greedy, rrsw, spechub) refuses random ones,
        with pytest.raises(InvalidTreeError):  # and the masses refuse them alike
            verifier.emission_masses(batch)
        return
    solved_rows = []
    output_laws = verifier.solver.output_laws
    monkeypatch.setattr(verifier.solver, "output_laws",
                        lambda p, q, children: solved_rows.append(len(p)) or output_laws(p, q, children))
    assert np.abs(verifier.emission_masses(batch) - expected).max() < 1e-12
    assert solved_rows[0] == 1  # the batch's context ids: the shared root solved once for its 6 rows
    monkeypatch.undo()
    flat, solved = _forest_masses(verifier, batch, shared_root=True)
    assert np.abs(flat - expected).max() < 1e-12
    internal = sum(bool(children) for children in batch.child_lists)
    assert solved == 1 + batch.num_rows * (internal - 1)  # the shared root solved once


def test_a_procedure_only_solver_gives_the_same_masses():
    def first_acceptable(p, q, children, chooser):  # SpecInfer-like one-child rule written only as a procedure
        token = children[0]
        if chooser.bernoulli(min(1.0, p[token] / q[token])):
            return token
        residual = np.maximum(p - q, 0)
        return chooser.categorical(residual / residual.sum())

    verifier = TopDownVerifier(ProcedureSolver("user-first", first_acceptable))
    batch = _batch(TOPOLOGIES[1], 4, seed=9)
    assert np.abs(verifier.emission_masses(batch) - _laws_total(verifier, batch)).max() < 1e-12


def test_keys_that_lie_are_caught():
    """The control: one key for every root although the roots' laws differ; the masses are then the first row's
    scalars everywhere, which the comparison with the laws catches."""
    verifier = get_verifier("specinfer")
    batch = _batch(TOPOLOGIES[0], 6, seed=4)
    honest, _ = _forest_masses(verifier, batch, shared_root=False)
    assert np.abs(honest - _laws_total(verifier, batch)).max() < 1e-12
    lying, _ = _forest_masses(verifier, batch, shared_root=False, lying=True)
    assert np.abs(lying - _laws_total(verifier, batch)).max() > 1e-3


def test_an_exact_batch_gets_exact_totals():
    from fractions import Fraction

    batch = _batch(TOPOLOGIES[0], 2, seed=5)
    exact = TreeBatch(vocab_size=VOCAB, parent=batch.parent, depth=batch.depth, child_lists=batch.child_lists,
                      tokens=batch.tokens, contexts=batch.contexts,
                      p=np.vectorize(lambda x: Fraction(round(1000 * x) + 1), otypes=[object])(batch.p),
                      q=np.vectorize(lambda x: Fraction(round(1000 * x) + 1), otypes=[object])(batch.q))
    exact.p[...] = exact.p / exact.p.sum(axis=-1, keepdims=True)  # rational laws that sum to one exactly
    exact.q[...] = exact.q / exact.q.sum(axis=-1, keepdims=True)
    masses = get_verifier("specinfer").emission_masses(exact)
    assert masses.dtype == object and all(isinstance(value, Fraction) for value in masses.ravel())
    assert all(total == 1 for total in masses.sum(axis=1))
