"""Two repairs to Triton's interpreter, so that engines' kernels run under it as they run compiled.

Triton 3.9's interpreter carries a mask built by ``&`` of two comparisons inside a nested ``@triton.jit`` function
as an integer array (its semantic layer promotes the booleans to int32 before ``create_and``), and its C store and
load then refuse it: ``ValueError: mask has unsupported dtype``. vLLM's V2 ``gumbel_block_argmax`` stores its
draft-logits cache under ``mask & is_valid_req``, so every release from 0.22 on fails there on the CPU, while the
compiled kernel, where a mask is an i1 predicate, runs. ``repair_masks`` hands the interpreter's masked loads and
stores such a mask as the booleans it holds (nonzero is true, which for the 0/1 values of a comparison is the
compiled predicate); a boolean mask passes untouched, and nothing else of the interpreter or of the engine changes.

Triton's ``triton.language.extra.libdevice`` is a module of stubs (``def log1p(arg0): ...``) that the compiler
replaces by the device's library; the interpreter leaves them stubs, so ``tldevice.log1p(-u)`` returns None
there. vLLM's V2 Gumbel noise is ``-log(-log1p(-u))`` on its float32 path (releases 0.22 to 0.30).
``supply_libdevice`` gives the stubs vLLM's kernels call (``LIBDEVICE``) numpy's function of the same name, in
the argument's precision (numpy's float32 ``log1p`` and CUDA's ``log1pf`` differ by a few ulps, 1e-7 relative,
far below the checks' threshold of 1e-6 in TV). ``tests/engines/test_vllm_v2.py`` checks both repairs.
"""

from __future__ import annotations

import numpy as np


def _boolean(mask):
    """``mask`` (a TensorHandle) as booleans where the interpreter holds it as integers; else itself."""
    data = getattr(mask, "data", None)
    if data is None or not isinstance(data, np.ndarray) or data.dtype == np.bool_ or data.dtype.kind not in "iu":
        return mask
    import triton.language as tl
    from triton.runtime.interpreter import TensorHandle

    return TensorHandle(data != 0, tl.int1)


def repair_masks() -> None:
    """Install the repair (once per process; the interpreter must be imported, ``TRITON_INTERPRET=1``)."""
    from triton.runtime.interpreter import InterpreterBuilder

    if getattr(InterpreterBuilder, "_verispec_masks_repaired", False):
        return
    load, store = InterpreterBuilder.create_masked_load, InterpreterBuilder.create_masked_store

    def create_masked_load(self, ptrs, mask, other, *args, **kwargs):
        return load(self, ptrs, _boolean(mask), other, *args, **kwargs)

    def create_masked_store(self, ptrs, value, mask, *args, **kwargs):
        return store(self, ptrs, value, _boolean(mask), *args, **kwargs)

    InterpreterBuilder.create_masked_load = create_masked_load
    InterpreterBuilder.create_masked_store = create_masked_store
    InterpreterBuilder._verispec_masks_repaired = True


#: libdevice stubs given numpy's function (name -> numpy ufunc): those vLLM's sampling kernels call.
LIBDEVICE = {"log1p": np.log1p}


def supply_libdevice() -> None:
    """Give ``triton.language.extra.libdevice``'s stubs in ``LIBDEVICE`` numpy's function, in the interpreter."""
    import triton.language as tl
    import triton.language.extra.libdevice as libdevice
    from triton.runtime.interpreter import TensorHandle

    if getattr(libdevice, "_verispec_supplied", False):
        return

    def elementwise(ufunc):
        def function(arg0, *args, **kwargs):
            handle = arg0.handle
            result = ufunc(handle.data).astype(handle.data.dtype, copy=False)
            return tl.core.tensor(TensorHandle(result, handle.dtype.scalar), arg0.type)

        function.__name__ = ufunc.__name__
        return function

    for name, ufunc in LIBDEVICE.items():
        setattr(libdevice, name, elementwise(ufunc))
    libdevice._verispec_supplied = True


def reuse_language_patch() -> None:
    """Patch ``triton.language`` once per kernel launch instead of once per device-function call.

    The interpreter patches the language's builtins (some 2,000 attributes, found by ``inspect.getmembers``) when a
    kernel starts and restores them when it ends, and patches them again, the same way, at every call of a nested
    ``@triton.jit`` function, although the kernel's patch is still in force: a third of a vLLM V2 step's time on
    the CPU. While a kernel's patch covers the language modules a device function sees (``triton.language`` and
    ``triton.language.core``, the same module objects everywhere), the device function's patch is skipped; a
    function that sees a module the kernel's patch does not cover is patched as before. The interpreter computes
    the same numbers either way (``tests/engines/test_vllm_v2.py`` compares the kernels' outputs with and without)."""
    import inspect

    import triton.language as tl
    from triton.runtime import interpreter

    if getattr(interpreter, "_verispec_patch_reused", False):
        return
    original = interpreter._patch_lang
    active: list[frozenset] = []  # the language modules the running kernel's patch covers

    class _KernelScope:
        def __init__(self, scope, langs):
            self._scope, self._langs = scope, langs

        def restore(self):
            try:
                self._scope.restore()
            finally:
                if active and active[-1] is self._langs:
                    active.pop()

        def __getattr__(self, name):
            return getattr(self._scope, name)

    def _patch_lang(fn):
        langs = frozenset(id(value) for value in fn.__globals__.values()
                          if inspect.ismodule(value) and value in (tl, tl.core))
        if active and langs and langs <= active[-1]:
            return _NoScope()
        scope = original(fn)
        if active:  # a device function seeing more than the kernel's patch covers: patched as the interpreter does
            return scope
        active.append(langs)
        return _KernelScope(scope, langs)

    interpreter._patch_lang = _patch_lang
    interpreter._verispec_patch_reused = True


class _NoScope:
    """The scope of a patch that was not needed: nothing to restore."""

    def restore(self) -> None:
        return None
