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


class ResultStoreError(VerispecError):
    """A result file is unreadable, or holds rows of a run with other parameters."""


class OutputError(VerispecError, OSError):
    """An output path that cannot or may not be written: a read-only folder, a path through a regular file, a
    directory where a file is expected, or an existing file that is not this tool's and was not to be replaced.
    Also an ``OSError``, so code that caught the file system's own error still catches it."""


class MissingExtraError(VerispecError, ImportError):
    """An optional dependency that a path needs is not installed; the message names the extra that installs it
    (``pip install 'verispec[lp]'``). Also an ``ImportError``, so code that caught the import's own error still
    catches it."""


class ModelError(VerispecError):
    """A language model cannot be loaded (offline), or a (target, draft) pair does not fit together."""


def describe(value) -> str:
    """A value for an error message, as plain Python prints it: numpy scalars and arrays become Python
    numbers and lists (no ``np.float64(-0.5)``), fractions read '1/3', strings keep their quotes."""
    from decimal import Decimal
    from fractions import Fraction

    if hasattr(value, "tolist") and callable(value.tolist):  # numpy scalars and arrays, without importing numpy
        value = value.tolist()
    if isinstance(value, Fraction):
        text = str(value)
        if len(text) <= 60:
            return text
        try:
            return f"about {float(value):.17g}"
        except OverflowError:
            return f"about {'-' if value < 0 else ''}10^{len(str(abs(value.numerator))) - len(str(value.denominator))}"
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, (list, tuple)):
        inner = ", ".join(describe(item) for item in value)
        return f"[{inner}]" if isinstance(value, list) else f"({inner}{',' if len(value) == 1 else ''})"
    return repr(value)


class UserCodeExit(BaseException):
    """The code under check tried to end verispec's process (os._exit, os.abort, a signal to itself); raised in its
    place by the supervised worker (``verispec.guard.supervisor``). A ``BaseException``, as ``SystemExit`` is, so the
    code's own ``except Exception`` does not swallow it; the places that run the user's code report it like a raise."""

    def __init__(self, what: str):
        super().__init__(what)
        self.what = what


class SandboxDied(BaseException):
    """The process running the code under check (``verispec.guard.sandbox``) ended, or broke the protocol, without
    answering a call: the command ends ``RAISES`` with ``line``. A ``BaseException``, as ``UserCodeExit`` is, so that
    no handler of verispec's takes it for a raise on one input."""

    def __init__(self, line: str):
        super().__init__(line)
        self.line = line
