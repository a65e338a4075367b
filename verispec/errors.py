"""Typed errors raised at verispec's public edge.

Every error is a ``VerispecError`` (a ``ValueError``), so callers can catch one type; the CLI turns any of
them into a single line on stderr and a non-zero exit status.
"""

from __future__ import annotations


class VerispecError(ValueError):
    """Base class of every error verispec raises on bad input."""


class InvalidDistributionError(VerispecError):
    """A probability vector is NaN, negative, of the wrong length or does not sum to one."""


class InvalidProblemError(VerispecError):
    """A problem is malformed: missing prefixes, wrong vocabulary size, too short for the tree."""


class InvalidTreeError(VerispecError):
    """A draft tree is malformed (token out of range, a drafted token the draft law gives probability 0)."""


class UnknownTreeError(VerispecError):
    """A tree specification string names no known tree kind or has malformed parameters."""


class UnknownVerifierError(VerispecError):
    """A verifier name is not in the registry."""


class IncompatibleDraftError(VerispecError):
    """A verifier is paired with a draft law it is not valid for."""


class VerifierError(VerispecError):
    """A verifier returned an emission law that is not a probability law (a bug in the verifier)."""


class EnumerationTooLargeError(VerispecError):
    """Exhaustive enumeration would exceed the configured number of traces or outcomes."""


class SolverError(VerispecError):
    """A linear program did not solve to optimality, or its solution violates its constraints."""


class ProblemTooLargeError(VerispecError):
    """An exact analysis (a linear program, a subset search) would exceed its configured size limit."""


class AnalysisTimeoutError(VerispecError):
    """An analysis ran past the deadline it was given (``analyze(..., deadline=...)``)."""
