"""Packages whose names load their module on first use (PEP 562), so that importing one piece of verispec does
not import every other: ``verispec.simulator`` without the engine, ``verispec.lp_analysis`` without scipy,
``verispec.selector`` without torch."""

from __future__ import annotations

import importlib
import sys


def lazy_names(package: str, exports: dict[str, str]):
    """(``__getattr__``, ``__dir__``) for ``package``: each name of ``exports`` (name -> the absolute module that
    defines it) is imported at its first use and then kept in the package."""

    def __getattr__(name: str):
        if name not in exports:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(exports[name]), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__():
        return sorted(set(vars(sys.modules[package])) | set(exports))

    return __getattr__, __dir__
