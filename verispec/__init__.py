"""verispec: exact-probability simulator and testbed for speculative-decoding verifiers."""

from verispec.version import __version__, package_version

__all__ = ["__version__", "analyze", "certify", "package_version"]


def __getattr__(name: str):
    # ``verispec.analyze`` without importing the engine, the verifiers and scipy at ``import verispec``.
    if name in ("analyze", "certify"):
        from verispec import api

        return getattr(api, name)
    raise AttributeError(f"module 'verispec' has no attribute {name!r}")
