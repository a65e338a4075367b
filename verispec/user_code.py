"""Code of the user's own, named ``FILE.py:NAME`` or ``package.module:NAME``: the one loader behind every place that
runs it (a rule, ``verispec.verifiers.load_verifier``; a function to check, ``verispec.external.adapter.load_function``;
a class of the multi-step LP, ``verispec bound --restriction FILE.py:NAME``).

Loading runs the user's code: it is one call under the command line's ``--call-timeout`` (``verispec.guard.budget``),
and
the files it loaded are handed to the budget's watchdog, which then limits every later call into them. Standard
library only, with verispec's errors and budget: every layer may load user code through it.
"""

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

from verispec.errors import UnknownVerifierError
from verispec.guard import budget, sandbox, supervisor


def load_sandboxed(spec: str, what: str, describe, call_hook=None) -> sandbox.Sandbox | None:
    """In a supervised worker, the object named by ``spec`` loaded in a sandbox of its own (``verispec.guard.sandbox``):
    the started ``Sandbox``, whose ``description`` is what ``describe(target, register)`` said of it there; None
    elsewhere (the caller then loads it with ``load_attribute``). ``UnknownVerifierError`` on one line when it cannot
    be loaded, as ``load_attribute``."""
    if not isinstance(spec, str) or ":" not in spec:
        raise UnknownVerifierError(f"give the {what} as FILE.py:NAME, got {spec!r}")
    if not sandbox.enabled():
        return None
    box = sandbox.Sandbox(spec, what, describe, call_hook, loader=load_attribute)
    box.load()
    return box


def load_attribute(spec: str, what: str):
    """The object named by ``FILE.py:NAME`` or ``package.module:NAME`` (a user's rule, function or LP class);
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
    files = _code_files(module, target)
    budget.watch_user_code(files)
    supervisor.watch_user_files(files)
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
    own = os.path.dirname(os.path.abspath(__file__)) + os.sep  # the verispec package
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
