"""Engines' shipped verification code, checked unmodified: thin, versioned adapters over an installed engine.

An adapter (one module per engine, one line in ``ADAPTERS``) imports the installed package, reads its release,
refuses a release it does not know in one line naming the releases it does, and states the engine's verification
entry points as ``Check``s: each a function of verispec's own in a whole-step layout (``verispec.external.step``)
that builds the engine's own metadata and calls the engine's own code, with the sampling it is asked for and the
verdict it should get. ``verispec check-engine NAME`` runs every check through ``check_external``, the engine's
code running in check-external's sandbox as any code under check does (``verispec.cli.check_engine``).

The engine's conventions are read from the engine (vLLM 0.33's ``GREEDY_TEMPERATURE = 0``, which was -1 before),
never restated: an adapter's errors are where checks of shipped code go wrong, so adapters live here, tested.
"""

from __future__ import annotations

import importlib
import os
import re
from dataclasses import dataclass, field

from verispec.errors import VerispecError

#: Engine name -> its adapter module.
ADAPTERS = {"mlx-lm": "verispec.engines.mlx_lm", "transformers": "verispec.engines.transformers",
            "vllm": "verispec.engines.vllm"}


class EngineError(VerispecError):
    """An engine that cannot be checked as asked: not installed, a release the adapter does not know, an entry
    point moved, a wheel that fails to import. One line, exit 2, never a verdict."""


@dataclass(frozen=True)
class Check:
    """One verification entry point of an engine, checked in one configuration.

    ``function``: ``package.module:NAME`` of a function in a whole-step layout; ``layout``, ``tree``,
    ``sampling``, ``target`` and ``draft``: as for ``verispec check-external``; ``expect``: the verdict a correct
    release gets (``"lossless"``), or ``"lossy"`` for what the engine documents as not holding the law (said in
    ``why``). ``exhaustive``: a deterministic check the adapter runs itself (greedy decoding: every draft list
    against the target's argmax) instead of a law. ``source_applies``: see the field."""

    name: str
    entry: str
    function: str
    description: str
    layout: str = "step-ragged"
    tree: str = "chain:1"
    sampling: str = "temperature=1"
    target: tuple = (0.5, 0.3, 0.2)
    draft: tuple = (0.2, 0.2, 0.6)
    expect: str = "lossless"
    why: str = ""
    exhaustive: bool = False
    options: dict = field(default_factory=dict)
    #: The check runs the module ``--source`` replaces (the adapter's ``SAMPLER_MODULE``); a check that does not is
    #: refused with ``--source``, which would otherwise check the installed code under the mutant's name.
    source_applies: bool = True
    #: The first release that has the entry point ("" for every release the adapter knows): an older release's row
    #: is ABSENT, with that reason, and nothing runs.
    since: str = ""
    #: A rule of verispec's (its registry text, e.g. ``fly(theta=0.3,window=1)``) whose exact law the entry point must
    #: emit, for what is lossy by design: the check is as expected only where the engine's block law is within the
    #: threshold of that rule's on the requested problem ("" for none: the target's law is the reference).
    reference: str = ""
    #: A reproducibility check the adapter runs itself (``verispec.engines.seeds``) instead of a law: each seeded
    #: request of a ``step-ragged`` batch emits the same tokens whenever its own seed is kept (``expect``
    #: "reproducible").
    seeds: bool = False
    #: Check the step's law on the problem's context twin too (``verispec.external.step_context``), whatever the run
    #: asks: for a check built to see a row read at another position or another request's offset.
    context_twin: bool = False


def adapter(name: str):
    """The adapter module of engine ``name``; EngineError naming the engines known."""
    module = ADAPTERS.get(name)
    if module is None:
        raise EngineError(f"unknown engine {name!r}: verispec has adapters for {', '.join(sorted(ADAPTERS))}")
    return importlib.import_module(module)


def source_refusal(name: str, module, source: str, label: str = "source") -> str | None:
    """Why ``--source source`` cannot be checked with engine ``name``'s adapter ``module``, or None: an adapter
    whose ``SAMPLER_MODULE`` is None takes no source; a source must be a file. ``label``: the option's name."""
    if module.SAMPLER_MODULE is None:
        return (f"{name}'s adapter takes no {label} (its verification does not live in a sampler file of its own): "
                "check the installed release, or install a modified copy of the package")
    if not os.path.isfile(source):
        return (f"{label} {source!r} is not a file: give the path of a copy of "
                f"{module.SAMPLER_MODULE.replace('.', '/')}.py")
    return None


def module_present(name: str) -> bool:
    """Whether the installed packages have module ``name`` (dotted), without importing it: False where it or any
    package above it is missing (``importlib.util.find_spec`` raises ModuleNotFoundError for a missing parent, so
    probing a release's newer module from an older release would end the adapter's import instead)."""
    import importlib.util

    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:
        return False


def version_key(release: str) -> tuple:
    """'4.46.3' -> (4, 46, 3); a post, pre or local release sorts beside its base (its letters dropped)."""
    return tuple(int(part) for part in re.findall(r"\d+", release.split("+")[0])[:4])


def installed_release(package: str, install: str, known: str) -> str:
    """The installed ``package``'s release; EngineError naming how to ``install`` it and the releases the adapter
    knows (``known``) when it is not installed."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        raise EngineError(f"{package} is not installed: {install}; verispec's adapter knows releases {known}") from None


def release_in_range(package: str, found: str, first: str, last: str, any_release: bool) -> str:
    """``found`` when it lies from ``first`` to ``last`` (or ``any_release``: its entry points are still found or
    refused where the checks load them); EngineError naming the range otherwise."""
    if not version_key(first) <= version_key(found) <= version_key(last) and not any_release:
        raise EngineError(f"{package} {found} is not a release verispec's adapter knows (it knows "
                          f"{release_range(first, last)}): its entry points may have moved; install a release in "
                          "that range or pass --any-release")
    return found


def release_range(first: str, last: str) -> str:
    return first if first == last else f"{first} to {last}"
