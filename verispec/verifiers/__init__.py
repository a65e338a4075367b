"""Verifiers by name. A new verifier is one module plus one line in ``REGISTRY``; the tests pick it up."""

from __future__ import annotations

from verispec.errors import UnknownVerifierError
from verispec.verifiers.base import ProcedureVerifier, Verifier, emission_law_of_procedure
from verispec.verifiers.block import BlockVerifier
from verispec.verifiers.greedy import GreedySolver
from verispec.verifiers.naive import NaiveVerifier
from verispec.verifiers.naivetree import NaiveTreeSolver
from verispec.verifiers.nss import NaiveSamplingSolver
from verispec.verifiers.rrsw import RRSWSolver
from verispec.verifiers.specinfer import SpecInferSolver
from verispec.verifiers.spechub import SpecHubSolver
from verispec.verifiers.tree_walk import NodeSolver, TopDownVerifier

REGISTRY: dict[str, Verifier] = {
    verifier.name: verifier
    for verifier in (
        NaiveVerifier(),
        BlockVerifier(),
        TopDownVerifier(NaiveSamplingSolver()),
        TopDownVerifier(NaiveTreeSolver()),
        TopDownVerifier(SpecInferSolver()),
        TopDownVerifier(RRSWSolver()),
        TopDownVerifier(SpecHubSolver()),
        TopDownVerifier(GreedySolver()),
    )
}


def get_verifier(name: str) -> Verifier:
    """The registered verifier called ``name``; UnknownVerifierError lists the valid names."""
    try:
        return REGISTRY[name]
    except KeyError:
        raise UnknownVerifierError(f"unknown verifier {name!r}; valid verifiers: {', '.join(sorted(REGISTRY))}") from None


__all__ = ["REGISTRY", "NodeSolver", "ProcedureVerifier", "TopDownVerifier", "Verifier", "emission_law_of_procedure",
           "get_verifier"]
