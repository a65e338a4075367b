"""The top-level Python API: ``verispec.analyze`` and ``verispec.certify`` take objects or names.

    >>> import verispec
    >>> verispec.analyze(verispec.simulator.sun_toy_problem(), "chain:2", "bv").block_efficiency

It sits above every package (problems, drafters, the exact engine, the verifiers), so it can resolve a
verifier name through the registry; ``verispec.simulator.engine.analyze`` itself takes Verifier objects.
"""

from __future__ import annotations

import inspect

from verispec.errors import VerispecError
from verispec.simulator.drafters import Drafter
from verispec.simulator.engine import ExactResult
from verispec.simulator.engine import analyze as _analyze
from verispec.simulator.interfaces import Verifier
from verispec.simulator.problems import Problem
from verispec.verifiers import get_verifier


def analyze(problem: Problem, tree: Drafter | str, verifier: Verifier | str, **options) -> ExactResult:
    """Exact analysis of ``verifier`` (a Verifier, a registered name such as 'bv', or 'FILE.py:NAME') on
    the trees of ``tree`` (a Drafter or a specification such as 'iid:2,3') for ``problem``; ``options`` are
    those of ``verispec.simulator.engine.analyze`` (method, tolerance, deadline, ...)."""
    _check_options("analyze", _analyze, options)
    if isinstance(verifier, str):
        verifier = get_verifier(verifier)
    return _analyze(problem, tree, verifier, **options)


def certify(problem: Problem, tree: Drafter | str, verifier: Verifier | str, epsilon: float, **options):
    """Certified bounds on E[tau + 1] and P(tau >= d) (``verispec.simulator.certified.certify``), with the
    verifier given as an object or a name."""
    from verispec.simulator.certified import certify as _certify

    _check_options("certify", _certify, options)
    if isinstance(verifier, str):
        verifier = get_verifier(verifier)
    return _certify(problem, tree, verifier, epsilon, **options)


def _check_options(name: str, function, options: dict) -> None:
    """A one-line VerispecError naming an option ``function`` does not take (instead of Python's TypeError)."""
    known = [parameter.name for parameter in inspect.signature(function).parameters.values()
             if parameter.kind is inspect.Parameter.KEYWORD_ONLY]
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise VerispecError(f"verispec.{name} has no option {unknown[0]!r}; its options are {', '.join(known)}")
