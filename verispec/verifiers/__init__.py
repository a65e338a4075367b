"""Verifiers by name: the registry. A new verifier is one module plus one ``register(...)`` line below; ``verispec
list``, the verifier tables of the README and docs/guides/verifiers.md (``verispec.verifiers.catalog``), the
registry-wide
tests and ``all`` in sweeps pick it up from ``REGISTRY``."""

from __future__ import annotations

from verispec.errors import UnknownVerifierError
from verispec.simulator.drafters import DraftLaw
from verispec.user_code import load_attribute
from verispec.verifiers.asd import ASDVerifier
from verispec.verifiers.base import NodeSolver, ProcedureVerifier, Verifier, emission_law_of_procedure
from verispec.verifiers.block import BlockVerifier
from verispec.verifiers.ensemble import EnsembleVerifier
from verispec.verifiers.eta import EtaVerifier
from verispec.verifiers.fly import FLyVerifier
from verispec.verifiers.gbv import GreedyBlockVerifier
from verispec.verifiers.globalres import GlobalResolutionSolver
from verispec.verifiers.greedy import GreedySolver
from verispec.verifiers.khisti import KhistiSolver
from verispec.verifiers.layer import LAYER_PREFIX, lifted
from verispec.verifiers.lenience import LenienceVerifier
from verispec.verifiers.mars import MarsVerifier
from verispec.verifiers.minp import MinPVerifier
from verispec.verifiers.naive import NaiveVerifier
from verispec.verifiers.naivetree import NaiveTreeSolver
from verispec.verifiers.nss import NaiveSamplingSolver
from verispec.verifiers.otlp import OTLPSolver
from verispec.verifiers.psbv import PositionSharingBlockVerifier
from verispec.verifiers.rrsw import RRSWSolver
from verispec.verifiers.spechub import SpecHubSolver
from verispec.verifiers.specinfer import SpecInferSolver
from verispec.verifiers.spectr import SpecTrSolver
from verispec.verifiers.synthetic import SyntheticVerifier
from verispec.verifiers.traversal import TraversalIIDVerifier, TraversalVerifier
from verispec.verifiers.tree_walk import ProcedureSolver, TopDownVerifier
from verispec.verifiers.typical import TypicalVerifier

#: The rules that claim losslessness on every draft law of their ``valid_for``: "all" in sweeps, and every
#: registry-wide test.
REGISTRY: dict[str, Verifier] = {}
#: Rules that are lossy by design, kept to measure what they cost (exact TV, gain in block efficiency). They are
#: reached by name only, never in "all"; ``typical(epsilon=E,alpha=A)`` sets typical acceptance's parameters.
LOSSY_BY_DESIGN: dict[str, Verifier] = {}


def register(rule: Verifier | NodeSolver) -> Verifier:
    """Add ``rule`` to the registry under its ``name`` and return its verifier (a ``NodeSolver`` is walked down
    the tree by ``TopDownVerifier``): to ``LOSSY_BY_DESIGN`` when it sets ``lossy_by_design = True``, else to
    ``REGISTRY``. The rule carries a one-line ``summary`` and its ``citation`` (paper, year, arXiv or venue,
    algorithm or equation), which ``verispec list`` and the generated tables show. A rule whose class names
    keyword ``parameters`` (attributes of the registered instance) is reached as ``name(key=value,...)`` too.
    TypeError or ValueError naming what is missing."""
    verifier = TopDownVerifier(rule) if isinstance(rule, NodeSolver) else rule
    if not isinstance(verifier, Verifier):
        raise TypeError(f"register takes a Verifier or a NodeSolver, got {type(rule).__name__}")
    name = getattr(verifier, "name", None)
    if not isinstance(name, str) or not name or any(char in name for char in "(),: |"):
        raise ValueError(f"register: a rule's name is a word without spaces or any of '(),:|', got {name!r}")
    if name in REGISTRY or name in LOSSY_BY_DESIGN:
        raise ValueError(f"register: the name {name!r} is taken")
    for field in ("summary", "citation"):
        text = getattr(verifier, field, None)
        if not isinstance(text, str) or not text.strip() or "\n" in text or "|" in text:
            raise ValueError(f"register: {name!r} needs a one-line {field} without '|' (for 'verispec list' and the "
                             f"tables), got {text!r}")
    missing = [key for key in getattr(verifier, "parameters", ()) if not hasattr(verifier, key)]
    if missing:
        raise ValueError(f"register: {name!r} names parameters {missing} that it does not have as attributes")
    (LOSSY_BY_DESIGN if getattr(verifier, "lossy_by_design", False) else REGISTRY)[name] = verifier
    return verifier


register(NaiveVerifier())
register(BlockVerifier())
register(NaiveSamplingSolver())
register(NaiveTreeSolver())
register(SpecInferSolver())
register(SpecTrSolver())
register(OTLPSolver())
register(KhistiSolver())
register(GlobalResolutionSolver())
register(TraversalVerifier())
register(TraversalIIDVerifier())
register(GreedyBlockVerifier())
register(PositionSharingBlockVerifier())
register(RRSWSolver())
register(SpecHubSolver())
register(GreedySolver())
register(TypicalVerifier())
register(FLyVerifier())
register(MarsVerifier())
register(ASDVerifier())
register(EnsembleVerifier())
register(LenienceVerifier())
register(MinPVerifier())
register(EtaVerifier())
register(SyntheticVerifier())


def split_names(text: str) -> tuple[str, ...]:
    """A comma-separated list of verifier names, split at the commas outside parentheses (so that
    ``specinfer,typical(epsilon=0.05,alpha=0.2)`` is two names), blanks dropped."""
    names, depth, start = [], 0, 0
    for index, char in enumerate(text):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            names.append(text[start:index])
            start = index + 1
    names.append(text[start:])
    return tuple(name.strip() for name in names if name.strip())


def get_verifier(name: str) -> Verifier:
    """The registered verifier called ``name``, a lossy-by-design rule (``LOSSY_BY_DESIGN``, e.g. ``typical``), a
    rule with parameters (``typical(epsilon=0.05,alpha=0.2)``, see ``with_parameters``), or a user's rule given as
    ``FILE.py:NAME`` or ``package.module:NAME`` (see ``load_verifier``). UnknownVerifierError lists the valid
    names."""
    if name in REGISTRY:
        return REGISTRY[name]
    if name in LOSSY_BY_DESIGN:
        return LOSSY_BY_DESIGN[name]
    if takes_parameters(name):
        return with_parameters(name)
    if name.startswith(LAYER_PREFIX):  # Layer Verification lifting a single-step rule: lv:globalres
        return lifted(name, REGISTRY, LOSSY_BY_DESIGN)
    if ":" in name:
        return load_verifier(name)
    raise UnknownVerifierError(f"unknown verifier {name!r}; valid verifiers: {', '.join(sorted(REGISTRY))}; lossy by "
                               f"design: {', '.join(sorted(LOSSY_BY_DESIGN))} (or FILE.py:NAME for your own rule)")


def lossless_rules() -> list[str]:
    """The names ``all`` stands for: every rule of ``REGISTRY``, sorted. UnknownVerifierError on one line when a
    lossy-by-design rule sits there (put in ``REGISTRY`` by hand rather than by ``register``): ``all`` is what
    sweeps and reports check for losslessness, so a lossy rule is named explicitly, never folded into it."""
    lossy = sorted(name for name, rule in REGISTRY.items() if getattr(rule, "lossy_by_design", False))
    if lossy:
        raise UnknownVerifierError(f"{lossy[0]!r} is lossy by design and cannot be part of 'all'; file it with "
                                   f"register() (LOSSY_BY_DESIGN) and name it beside all, e.g. 'all,{lossy[0]}'")
    return sorted(REGISTRY)


def is_registered(name: str) -> bool:
    """Whether ``name`` names a rule of the registry, with or without parameters, rather than a user's rule."""
    return name in REGISTRY or name in LOSSY_BY_DESIGN or takes_parameters(name) or name.startswith(LAYER_PREFIX)


def takes_parameters(name: str) -> bool:
    """Whether ``name`` is written ``base(...)`` for a registered rule whose class names ``parameters``."""
    base, parenthesis, _ = name.partition("(")
    return bool(parenthesis) and bool(getattr(REGISTRY.get(base) or LOSSY_BY_DESIGN.get(base), "parameters", ()))


def with_parameters(name: str) -> Verifier:
    """The rule ``base(key=value,...)`` (``takes_parameters``): the registered rule's class built with the values
    given (numbers; blanks ignored, any key may be left out) and the others as the registered instance has them.
    UnknownVerifierError on one line for text it cannot read, a key it does not take or one given twice, or a
    value that is not a number; the class checks the values' range."""
    base = name.partition("(")[0]
    registered = REGISTRY.get(base) or LOSSY_BY_DESIGN[base]
    keys = registered.parameters
    compact = name.replace(" ", "")
    if not compact.endswith(")"):
        example = ",".join(f"{key}={getattr(registered, key):g}" for key in keys)
        raise UnknownVerifierError(f"cannot read {name!r}; write {base} or {base}({example})")
    values = {}
    for item in filter(None, compact[len(base) + 1:-1].split(",")):
        key, _, text = item.partition("=")
        if key not in keys or key in values:
            raise UnknownVerifierError(f"{base} takes {' and '.join(f'{keyword}=' for keyword in keys)} once each, got "
                                       f"{item!r} in {name!r}")
        try:
            values[key] = float(text)
        except ValueError:
            raise UnknownVerifierError(f"{base}'s {key} must be a number, got {text!r} in {name!r}") from None
    return type(registered)(**{key: getattr(registered, key) for key in keys} | values)


#: The rules loaded in a sandbox, by spec: one sandbox per rule and process (a fork starts its own on first use).
_SANDBOXED: dict[str, Verifier] = {}


def load_verifier(spec: str) -> Verifier:
    """Load a user's rule from ``FILE.py:NAME`` or ``package.module:NAME``.

    NAME may be a ``Verifier`` instance, a ``NodeSolver`` instance (verified by the top-down walk), or a
    plain function ``procedure(tree, chooser) -> (node, token)``, wrapped in ``ProcedureVerifier``; a
    function may carry a ``valid_for`` attribute (a set of ``DraftLaw``), else it is taken to be a
    single-path rule.
    """
    from verispec.user_code import load_sandboxed
    from verispec.verifiers import sandboxed

    if spec in _SANDBOXED:  # loaded once per command: each cell of a sweep asks again
        return _SANDBOXED[spec]
    box = load_sandboxed(spec, "verifier", sandboxed.describe, sandboxed.traces_in_sandbox)
    if box is not None:  # a supervised worker: the rule runs in a process of its own (verispec.guard.sandbox)
        verifier = _SANDBOXED[spec] = sandboxed.sandboxed_rule(spec, box)
        return verifier
    target = load_attribute(spec, "verifier")
    if isinstance(target, Verifier):
        return target
    if isinstance(target, NodeSolver):
        return TopDownVerifier(target)
    if callable(target):
        return ProcedureVerifier(spec.rpartition(":")[2], target, getattr(target, "valid_for", {DraftLaw.SINGLE_PATH}))
    raise UnknownVerifierError(f"{spec!r} is neither a Verifier, a NodeSolver nor a procedure function")


__all__ = [
    "LOSSY_BY_DESIGN", "REGISTRY", "NodeSolver", "ProcedureSolver", "ProcedureVerifier", "TopDownVerifier",
    "TypicalVerifier", "Verifier", "emission_law_of_procedure", "get_verifier", "is_registered",
    "load_verifier", "lossless_rules", "register", "split_names", "takes_parameters", "with_parameters",
]
