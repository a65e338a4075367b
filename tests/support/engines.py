"""What the engine tests share: Triton under its interpreter, the installed vLLM's release, and two functions that
say which process runs them (loaded in a supervised worker's sandbox by tests/engines/test_check_engine.py)."""

from __future__ import annotations

import os

import pytest


def triton_under_interpreter():
    """(torch, triton, triton.language) for a test module whose kernels run on the CPU under Triton's interpreter
    (``TRITON_INTERPRET=1``, set by tests/conftest.py before anything imports Triton); the module is skipped where
    the caller set the switch otherwise or a package is missing."""
    os.environ.setdefault("TRITON_INTERPRET", "1")
    if os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("TRITON_INTERPRET is set to something else in this process", allow_module_level=True)
    return pytest.importorskip("torch"), pytest.importorskip("triton"), pytest.importorskip("triton.language")


def vllm_release() -> str:
    """The installed vLLM's release, or the adapter's one-line reason it has none it knows."""
    from verispec.engines import EngineError
    from verispec.engines import vllm as vllm_adapter

    try:
        return vllm_adapter.check_release()
    except EngineError as error:
        return str(error)


def shipped_sampler_mutant(folder, old: str, new: str):
    """A copy of the installed vLLM's V1 sampler file (``vllm/v1/sample/rejection_sampler.py``) in ``folder`` with its
    one line ``old`` replaced by ``new`` (for ``--source``); the installed file is not changed."""
    from importlib.util import find_spec
    from pathlib import Path

    shipped = Path(find_spec("vllm").submodule_search_locations[0]) / "v1" / "sample" / "rejection_sampler.py"
    text = shipped.read_text()
    assert text.count(old) == 1, f"the shipped file holds {text.count(old)} lines {old!r}, not one"
    mutant = Path(folder) / "rejection_sampler.py"
    mutant.write_text(text.replace(old, new))
    return mutant


def sandbox_process() -> str:
    """Which process runs it (the shared-sandbox test of tests/engines/test_check_engine.py loads it): its process-id
    namespace and its id there (a sandbox's code runs as process 2 of a namespace of its own,
    ``verispec.guard.namespace``, so the id alone does not tell two sandboxes apart)."""
    return f"{os.readlink('/proc/self/ns/pid')}/{os.getpid()}"


def sandbox_ids() -> list:
    """``sandbox_process()`` and the id of its parent (loaded beside ``sandbox_process``)."""
    return [sandbox_process(), os.getppid()]
