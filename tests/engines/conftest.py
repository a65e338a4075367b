"""Fixtures the engine tests share."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def language_patched_once_per_launch():
    """Triton's interpreter with ``verispec.engines.interpreter.reuse_language_patch`` and
    ``skip_unasserted_overflow_checks`` installed, as the vLLM adapters run it, for one module, then the interpreter as
    it was. The interpreter patches the language at every launch and nested call (``inspect.getmembers`` over its
    modules), the larger part of a small kernel's time under exact mode's thousands of launches, and checks every
    int32 add, sub and mul for overflow with an assertion that is off; the savings change no number a kernel computes
    (``tests/engines/test_interpreter.py`` compares kernels with and without them, a replaced ``tl.rand`` included)."""
    from triton.runtime import interpreter

    from verispec.engines.interpreter import reuse_language_patch, skip_unasserted_overflow_checks

    saved = {name: getattr(interpreter, name) for name in ("_patch_lang", "_patch_builtin")}
    installed = getattr(interpreter, "_verispec_patch_reused", False)
    semantic = interpreter.interpreter_semantic
    skipped = getattr(semantic, "_verispec_overflow_skipped", False)
    reuse_language_patch()
    skip_unasserted_overflow_checks()
    yield
    if not installed:  # installed here: put the interpreter back for the modules that follow
        for name, value in saved.items():
            setattr(interpreter, name, value)
        interpreter._verispec_patch_reused = False
    if not skipped:
        del semantic.binary_op_sanitize_overflow_impl  # the class's method again
        semantic._verispec_overflow_skipped = False
