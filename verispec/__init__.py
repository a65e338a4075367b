"""verispec: exact-probability simulator and testbed for speculative-decoding verifiers."""

from verispec.version import __version__, package_version

__all__ = ["__version__", "analyze", "package_version"]


def __getattr__(name: str):
    # ``verispec.analyze`` without importing the engine, the verifiers and scipy at ``import verispec``.
    if name == "analyze":
        from verispec.api import analyze

        return analyze
    raise AttributeError(f"module 'verispec' has no attribute {name!r}")
