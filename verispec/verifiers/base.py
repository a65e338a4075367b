"""Verifiers given only as sampling procedures, and the verifier interface (re-exported).

The interface (``Verifier``, ``NodeSolver``) is the contract of verispec.simulator.interfaces: every
verifier writes its law once, batched over trees of one topology (``emission_laws``), plus its sampling
procedure as the parity twin. A researcher may instead write a rule as a procedure alone
(``ProcedureVerifier``): its law then comes from the generic enumerator, tree by tree.
"""

from __future__ import annotations

from collections.abc import Callable

from verispec import backend
from verispec.simulator.chooser import Chooser
from verispec.simulator.drafters import DraftLaw
from verispec.simulator.interfaces import NodeSolver, Verifier, emission_law_of_procedure
from verispec.simulator.trees import DraftTree, TreeBatch


class ProcedureVerifier(Verifier):
    """A verifier given only as a sampling procedure; its law comes from the generic enumerator.

    >>> def my_rule(tree, chooser): ...          # returns (node, token)
    >>> verifier = ProcedureVerifier("mine", my_rule, {DraftLaw.SINGLE_PATH})
    """

    def __init__(self, name: str, procedure: Callable[[DraftTree, Chooser], tuple[int, int]],
                 valid_for=frozenset({DraftLaw.SINGLE_PATH})):
        self.name = name
        self._procedure = procedure
        self.valid_for = frozenset(valid_for)

    def procedure(self, tree: DraftTree, chooser: Chooser) -> tuple[int, int]:
        return self._procedure(tree, chooser)

    def emission_laws(self, batch: TreeBatch):
        laws = [self.enumerated_emission_law(batch.tree(row)) for row in range(batch.num_rows)]
        return backend.asarray(backend.stack(laws, axis=0), batch.p)


__all__ = ["NodeSolver", "ProcedureVerifier", "Verifier", "emission_law_of_procedure"]
