"""The package version (a leaf module: anything may import it)."""

from __future__ import annotations

__version__ = "0.1.0"


def package_version() -> str:
    """The installed distribution's version (package metadata), else ``__version__`` (a bare checkout)."""
    from importlib import metadata

    try:
        return metadata.version("verispec")
    except metadata.PackageNotFoundError:
        return __version__
