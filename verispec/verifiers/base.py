"""The verifier interface.

A verifier maps a draft tree to its *emission law*: an array ``law[node, token]`` (shape
[num_nodes, V]) holding P(accept the root-to-node path and emit ``token`` after it); it sums to one.
Real decoding samples (node, token) from it; the exact engine sums it over draft outcomes.

Every shipped verifier has two entry points tied by a parity test (STYLE.md, "Two entry points"):
``emission_law`` (closed form or dynamic program) and ``procedure`` (the rule written as the paper's
sampling algorithm against a ``Chooser``). ``enumerated_emission_law`` runs the procedure over every
choice trace, so a researcher can prototype a new rule as a procedure alone (``ProcedureVerifier``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable

import numpy as np

from verispec.simulator.chooser import Chooser, enumerate_law
from verispec.simulator.distributions import zeros
from verispec.simulator.drafters import DraftLaw
from verispec.simulator.trees import DraftTree


class Verifier(ABC):
    """Base class: subclasses set ``name``, ``valid_for`` and implement both entry points."""

    #: Registry name used by the CLI.
    name: str
    #: Draft laws the rule is lossless for (verispec.simulator.drafters.DraftLaw).
    valid_for: frozenset[DraftLaw]
    #: True when ``emission_law`` is the top-down walk of ``self.solver`` (``TopDownVerifier``), so the
    #: engines may compute it by the walk DP or the batched walk instead of calling it.
    standard_walk: bool = False

    def __init_subclass__(cls, **kwargs):
        # Engines use faster forms of a verifier's law (a batched ``emission_laws``, the walk DP) in place of
        # ``emission_law``. A subclass that redefines emission_law without restating them must not inherit
        # its parent's, or an engine would silently analyse the parent's rule instead (e.g. a deliberately
        # altered walk in a test).
        super().__init_subclass__(**kwargs)
        if "emission_law" in cls.__dict__:
            if "emission_laws" not in cls.__dict__:
                cls.emission_laws = None
            if "standard_walk" not in cls.__dict__:
                cls.standard_walk = False

    @abstractmethod
    def emission_law(self, tree: DraftTree) -> np.ndarray:
        """law[node, token] = P(stop at node and emit token), shape [num_nodes, V]."""

    @abstractmethod
    def procedure(self, tree: DraftTree, chooser: Chooser) -> tuple[int, int]:
        """Verify ``tree`` making random decisions through ``chooser``; return (node, emitted token)."""

    def enumerated_emission_law(self, tree: DraftTree) -> np.ndarray:
        """The emission law obtained by running ``procedure`` over every choice trace."""
        return emission_law_of_procedure(self.procedure, tree)

    def sample(self, tree: DraftTree, chooser: Chooser) -> tuple[int, int]:
        """One verification outcome (node, token); uses the procedure."""
        return self.procedure(tree, chooser)

    def __repr__(self) -> str:
        return f"<verifier {self.name}>"


def emission_law_of_procedure(procedure: Callable[[DraftTree, Chooser], tuple[int, int]],
                              tree: DraftTree) -> np.ndarray:
    """Exact emission law of a (node, token) sampling procedure, by the generic enumerator."""
    law = zeros((tree.num_nodes, tree.vocab_size), exact=tree.exact)
    for (node, token), probability in enumerate_law(lambda chooser: procedure(tree, chooser),
                                                    exact=tree.exact).items():
        law[node, token] += probability
    return law


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

    def emission_law(self, tree: DraftTree) -> np.ndarray:
        return self.enumerated_emission_law(tree)
