"""Verifiers by name. A new verifier is one module plus one line in ``REGISTRY``; the tests pick it up."""

from __future__ import annotations

import functools
import importlib
import importlib.util
import os
import sys
import sysconfig
import types
from contextlib import contextmanager
from pathlib import Path

from verispec import budget
from verispec.errors import UnknownVerifierError
from verispec.simulator.drafters import DraftLaw
from verispec.verifiers.base import NodeSolver, ProcedureVerifier, Verifier, emission_law_of_procedure
from verispec.verifiers.block import BlockVerifier
from verispec.verifiers.gbv import GreedyBlockVerifier
from verispec.verifiers.globalres import GlobalResolutionSolver
from verispec.verifiers.greedy import GreedySolver
from verispec.verifiers.khisti import KhistiSolver
from verispec.verifiers.naive import NaiveVerifier
from verispec.verifiers.naivetree import NaiveTreeSolver
from verispec.verifiers.nss import NaiveSamplingSolver
from verispec.verifiers.otlp import OTLPSolver
from verispec.verifiers.psbv import PositionSharingBlockVerifier
from verispec.verifiers.rrsw import RRSWSolver
from verispec.verifiers.spechub import SpecHubSolver
from verispec.verifiers.specinfer import SpecInferSolver
from verispec.verifiers.spectr import SpecTrSolver
from verispec.verifiers.traversal import TraversalIIDVerifier, TraversalVerifier
from verispec.verifiers.tree_walk import ProcedureSolver, TopDownVerifier
from verispec.verifiers.typical import TypicalVerifier

REGISTRY: dict[str, Verifier] = {
    verifier.name: verifier
    for verifier in (
        NaiveVerifier(),
        BlockVerifier(),
        TopDownVerifier(NaiveSamplingSolver()),
        TopDownVerifier(NaiveTreeSolver()),
        TopDownVerifier(SpecInferSolver()),
        TopDownVerifier(SpecTrSolver()),
        TopDownVerifier(OTLPSolver()),
        TopDownVerifier(KhistiSolver()),
        TopDownVerifier(GlobalResolutionSolver()),
        TraversalVerifier(),
        TraversalIIDVerifier(),
        GreedyBlockVerifier(),
        PositionSharingBlockVerifier(),
        TopDownVerifier(RRSWSolver()),
        TopDownVerifier(SpecHubSolver()),
        TopDownVerifier(GreedySolver()),
    )
}


#: Rules that are lossy by design, kept to measure what they cost (exact TV, gain in block efficiency). They are
#: not in ``REGISTRY`` (whose rules claim losslessness: "all" in sweeps, and every registry-wide test); they are
#: reached by name, and ``typical(epsilon=E,alpha=A)`` sets typical acceptance's parameters.
LOSSY_BY_DESIGN: dict[str, Verifier] = {verifier.name: verifier for verifier in (TypicalVerifier(),)}


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
    """The registered verifier called ``name``, a lossy-by-design rule (``LOSSY_BY_DESIGN``, e.g. ``typical`` or
    ``typical(epsilon=0.05,alpha=0.2)``), or a user's rule given as ``FILE.py:NAME`` or ``package.module:NAME``
    (see ``load_verifier``). UnknownVerifierError lists the valid names."""
    if name in REGISTRY:
        return REGISTRY[name]
    if name in LOSSY_BY_DESIGN:
        return LOSSY_BY_DESIGN[name]
    if name.startswith("typical("):
        return TypicalVerifier.parse(name)
    if ":" in name:
        return load_verifier(name)
    raise UnknownVerifierError(f"unknown verifier {name!r}; valid verifiers: {', '.join(sorted(REGISTRY))}; lossy by "
                               f"design: {', '.join(sorted(LOSSY_BY_DESIGN))} (or FILE.py:NAME for your own rule)")


def load_attribute(spec: str, what: str):
    """The object named by ``FILE.py:NAME`` or ``package.module:NAME`` (a user's rule or function);
    UnknownVerifierError on one line when it cannot be loaded (``what`` names it in messages).

    A file is imported with its own folder first on ``sys.path``, as ``python FILE.py`` would run it, so that it
    can import the modules beside it (``import model`` in a wrapper next to gpt-fast's ``model.py``). Then the
    folder is taken off ``sys.path`` again, and the modules imported from it by their own names are taken out of
    ``sys.modules`` (the loaded file keeps its references to them): nothing from that folder shadows a module
    imported later, and another file's sibling of the same name is its own. Modules the import system finds in
    that folder without the insertion (the folder was on ``sys.path`` already) stay: a later import gets the same
    module object. A sibling imported inside a function when it is called is not found; import siblings at the
    top of the file.

    Loading runs the user's code, and so does every call of what it returns: loading is one call for the command
    line's ``--call-timeout`` (``budget.user_call``), and the files of the module and of the object's code are
    handed to its watchdog (``budget.watch_user_code``), which then limits each call into them."""
    if not isinstance(spec, str) or ":" not in spec:
        raise UnknownVerifierError(f"give the {what} as FILE.py:NAME, got {spec!r}")
    location, _, attribute = spec.rpartition(":")
    try:
        with budget.user_call(f"loading {location}"):
            if location.endswith(".py"):
                path = Path(location)
                if not path.is_file():
                    raise UnknownVerifierError(f"{what} file {location!r} does not exist")
                module_spec = importlib.util.spec_from_file_location(f"verispec_user_{path.stem}", path)
                module = importlib.util.module_from_spec(module_spec)
                with _folder_on_path(path.resolve().parent):
                    module_spec.loader.exec_module(module)
            else:
                module = importlib.import_module(location)
            found = hasattr(module, attribute)
            target = getattr(module, attribute) if found else None
    except UnknownVerifierError:
        raise
    except Exception as error:  # a user's file may fail in any way; report it on one line
        raise UnknownVerifierError(f"cannot load {location!r}: {type(error).__name__}: {error}") from None
    if not found:
        raise UnknownVerifierError(f"{location!r} has no attribute {attribute!r}")
    budget.watch_user_code(_code_files(module, target))
    return target


def _code_files(module, target) -> set[str]:
    """The files (as code objects name them, ``co_filename``) of a loaded module and of the code of ``target``: a
    function, or the methods of a class or an instance's class and of its bases written by the user (not
    verispec's, the standard library's or an installed package's: their frames are not a call into the user's
    code, and verispec runs them for its own work too)."""
    found = {getattr(module, "__file__", None)}
    if isinstance(target, functools.partial):
        target = target.func
    code = getattr(target, "__code__", None)
    if code is not None:
        found.add(code.co_filename)
    own = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep  # the verispec package
    libraries = (own, *{os.path.abspath(sysconfig.get_paths()[key]) + os.sep
                        for key in ("stdlib", "platstdlib", "purelib", "platlib")})
    for klass in (target if isinstance(target, type) else type(target)).__mro__:
        for member in vars(klass).values():
            if isinstance(member, (classmethod, staticmethod)):
                member = member.__func__
            elif isinstance(member, property):
                member = member.fget
            if isinstance(member, types.FunctionType) \
                    and not os.path.abspath(member.__code__.co_filename).startswith(libraries):
                found.add(member.__code__.co_filename)
    return {name for name in found if name and not name.startswith("<") and not os.path.abspath(name).startswith(own)}


@contextmanager
def _folder_on_path(folder: Path):
    """``folder`` first on sys.path for the block; afterwards off it, and the modules imported from it by their own
    top-level names (``folder/NAME.py``, ``folder/NAME/``) out of sys.modules, unless the import system finds them
    there without the insertion (the folder was on sys.path already, or an installed path finder finds it): those
    were importable anyway, and taking them out would give a later import a second module object."""
    entry = str(folder)
    before = set(sys.modules)
    sys.path.insert(0, entry)
    try:
        yield
    finally:
        if entry in sys.path:
            sys.path.remove(entry)  # the first occurrence: the one inserted above
        elsewhere: dict[str, bool] = {}
        for name in set(sys.modules) - before:
            top = name.partition(".")[0]
            if (folder / f"{top}.py").is_file() or (folder / top).is_dir():
                module = sys.modules.get(name)
                origin = getattr(getattr(module, "__spec__", None), "origin", None) or ""
                if not origin.startswith(entry + os.sep):
                    continue
                if top not in elsewhere:
                    elsewhere[top] = _found_without_insertion(top, folder)
                if not elsewhere[top]:
                    del sys.modules[name]


def _found_without_insertion(top: str, folder: Path) -> bool:
    """Whether the import system, as it stands (the inserted entry removed), finds top-level module ``top`` in
    ``folder``; checked with the finders themselves (not sys.modules), so a module imported above is not
    mistaken for one importable anyway."""
    for finder in sys.meta_path:
        find_spec = getattr(finder, "find_spec", None)
        if find_spec is None:
            continue
        try:
            spec = find_spec(top, None)
        except Exception:  # a third-party finder may fail in any way; it then finds nothing
            continue
        if spec is None:
            continue
        places = [spec.origin] if spec.origin else list(spec.submodule_search_locations or ())
        return any(os.path.realpath(place).startswith(os.path.realpath(folder) + os.sep) for place in places)
    return False


def load_verifier(spec: str) -> Verifier:
    """Load a user's rule from ``FILE.py:NAME`` or ``package.module:NAME``.

    NAME may be a ``Verifier`` instance, a ``NodeSolver`` instance (verified by the top-down walk), or a
    plain function ``procedure(tree, chooser) -> (node, token)``, wrapped in ``ProcedureVerifier``; a
    function may carry a ``valid_for`` attribute (a set of ``DraftLaw``), else it is taken to be a
    single-path rule.
    """
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
    "TypicalVerifier", "Verifier", "emission_law_of_procedure", "get_verifier", "load_attribute", "load_verifier",
    "split_names",
]
