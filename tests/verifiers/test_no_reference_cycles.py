"""Every registered rule lets its inputs go when it returns: no reference cycle holds a batch or a tree.

A cycle (a recursive closure, say) is freed only by a full collection, and big arrays do not trigger one: at
Qwen's vocabulary every batch is [rows, nodes, 151,936] float64, and a T = 1 label build held 1.3 GB of dead
batches through Traversal's recursive closure. Checked with the collector off, through a weak reference to the
batch's p; the control (the recursive closure, as Traversal once had it) is caught.
"""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest

from tests.verifiers.test_registry_verifiers import TREE_SPECS
from verispec.simulator import parse_tree, random_problem
from verispec.simulator.chooser import RandomChooser
from verispec.verifiers import REGISTRY
from verispec.verifiers.traversal import TraversalVerifier

PAIRS = [(name, spec) for name, verifier in sorted(REGISTRY.items()) for spec in TREE_SPECS
         if parse_tree(spec).draft_laws & verifier.valid_for]


def _tree(spec: str, seed: int = 0):
    problem = random_problem(5, 3, seed, divergence=0.7, concentration=0.7)
    return parse_tree(spec).sample(problem, np.random.default_rng(seed))


def _outlives_its_caller(run, make) -> bool:
    """True when ``run(make())`` leaves the input's p alive once the caller drops it (collector off).

    No ``gc.collect()`` first: with the collector off, whether p outlives ``del value`` is decided by reference
    counts alone, whatever garbage was pending before; a full collection of the test process's heap (torch and
    the suite's modules loaded) took 0.5 to 3 s, three times a case, over 400 cases."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        value = make()
        held = weakref.ref(value.p)
        run(value)
        del value
        return held() is not None
    finally:
        if was_enabled:
            gc.enable()


class CyclicTraversal(TraversalVerifier):
    """Negative control: Traversal's law through a self-referencing closure (the cycle the rule once had)."""

    name = "cyclic-traversal"

    def emission_laws(self, batch):
        def visit(node):
            return batch.p[:, node] if node == 0 else visit(node - 1)

        visit(batch.num_nodes - 1)
        return super().emission_laws(batch)


@pytest.mark.parametrize("name,spec", PAIRS)
def test_emission_laws_keep_no_cycle_on_the_batch(name, spec):
    verifier = REGISTRY[name]
    for seed in range(3):  # fresh trees: a node cache that has seen a node must not be what frees it
        assert not _outlives_its_caller(verifier.emission_laws, lambda seed=seed: _tree(spec, seed).as_batch())


@pytest.mark.parametrize("name,spec", PAIRS)
def test_the_procedure_keeps_no_cycle_on_the_tree(name, spec):
    verifier = REGISTRY[name]
    chooser = RandomChooser(np.random.default_rng(0))
    assert not _outlives_its_caller(lambda tree: verifier.procedure(tree, chooser), lambda: _tree(spec))


def test_the_control_cycle_is_caught():
    spec = next(spec for name, spec in PAIRS if name == "traversal")
    assert _outlives_its_caller(CyclicTraversal().emission_laws, lambda: _tree(spec).as_batch())
