"""Repairs to Triton's interpreter, so that engines' kernels run under it as they run compiled (and one saving).

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
far below the checks' threshold of 1e-6 in TV).

``repair_loop_counters`` hands the counter of a ``tl.range`` loop as the scalar tensor it is compiled (the
interpreter hands a Python int, so vLLM's top-k/top-p kernel fails at ``row_id.to(tl.int64)``), and two savings:
``reuse_language_patch`` saves the interpreter's repeated patching of the language, ``skip_unasserted_overflow_checks``
its int32 overflow checks whose assertion is off.
``tests/engines/test_interpreter.py`` checks each against a bare run.
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


def repair_loop_counters() -> None:
    """Give a ``tl.range`` loop's counter the tensor type it has compiled (install once per process).

    Compiled, the counter of ``for i in tl.range(start, end, step)`` is a scalar tensor (int32, or int64 where a
    bound is), so a kernel may write ``i.to(tl.int64)``; the interpreter runs the loop over Python's ``range`` and
    hands a Python int, on which ``.to`` fails (vLLM's top-k/top-p kernel, ``_topk_topp_kernel``, fails so on the
    CPU, and with it vLLM's own top-k and top-p tests). Repaired, the counter is that scalar tensor, taking the
    values Python's range takes; ``tl.static_range`` stays a range of ints, as its counter is a constant compiled."""
    import triton.language as tl
    from triton.runtime import interpreter
    from triton.runtime.interpreter import TensorHandle

    if getattr(interpreter, "_verispec_loop_counters", False):
        return
    original = interpreter._patch_lang_core

    def counter_type(*bounds):
        wide = any(isinstance(bound, tl.tensor) and bound.dtype in (tl.int64, tl.uint64) for bound in bounds)
        wide = wide or any(isinstance(bound, int) and not -2 ** 31 <= bound < 2 ** 31 for bound in bounds)
        return (np.int64, tl.int64) if wide else (np.int32, tl.int32)

    def loop_range(arg1, arg2=None, step=None, **kwargs):
        start, end = (0, arg1) if arg2 is None else (arg1, arg2)
        step = 1 if step is None else step
        numpy_type, triton_type = counter_type(start, end, step)
        for value in range(int(start), int(end), int(step)):
            yield tl.tensor(TensorHandle(np.array([value], dtype=numpy_type), triton_type), triton_type)

    def _patch_lang_core(lang, scope):
        original(lang, scope)
        scope.set_attr(lang, "range", loop_range)

    interpreter._patch_lang_core = _patch_lang_core
    interpreter._verispec_loop_counters = True


def skip_unasserted_overflow_checks() -> None:
    """Skip the interpreter's integer overflow check while its assertion is off (install once per process).

    Triton's semantic layer checks every integer add, sub and mul narrower than 64 bits
    (``TritonSemantic.binary_op_sanitize_overflow_impl``): it widens both operands to int64, recomputes the
    operation, compares it with the type's bounds and hands the condition to ``device_assert``, which does nothing
    unless the builder's ``options.debug`` is on, and the interpreter's options (``InterpreterOptions``) have it
    off. Under the interpreter each check is half a dozen numpy operations whose result nobody reads, about a fifth
    of a vLLM kernel's time. Installed on the interpreter's semantic object only (compiled kernels are untouched),
    the check keeps its operand-type assertions and skips the rest while ``debug`` is off; with ``debug`` on it is
    Triton's own. A kernel computes the same numbers either way (``tests/engines/test_interpreter.py``, an
    overflowing int32 product included, and with ``debug`` on the overflow is still caught)."""
    from triton.runtime import interpreter

    semantic = interpreter.interpreter_semantic
    if getattr(semantic, "_verispec_overflow_skipped", False):
        return
    original = semantic.binary_op_sanitize_overflow_impl

    def binary_op_sanitize_overflow_impl(lhs, rhs, binary_op):
        options = semantic.builder.options
        if options.debug:
            return original(lhs, rhs, binary_op)
        if lhs.type.scalar.int_bitwidth >= 64 or not options.sanitize_overflow:
            return None
        assert lhs.type.scalar == rhs.type.scalar, (f"expected matching operand types, got {lhs.type.scalar} and "
                                                    f"{rhs.type.scalar}")
        assert lhs.type.scalar.is_int(), f"expected integer type, got {lhs.type.scalar}"
        return None  # device_assert's condition, unread with debug off, is not computed

    semantic.binary_op_sanitize_overflow_impl = binary_op_sanitize_overflow_impl
    semantic._verispec_overflow_skipped = True


def reuse_language_patch() -> None:
    """Patch ``triton.language`` once per kernel launch instead of once per device-function call, from a remembered
    list of its builtins.

    The interpreter patches the language's builtins (found by ``inspect.getmembers`` over the modules and classes
    and ``tl.core.is_builtin`` on each member) when a kernel starts and restores them when it ends, and patches them
    again, the same way, at every call of a nested ``@triton.jit`` function, although the kernel's patch is still in
    force. Two changes, neither to what is patched: a kernel's patch covers both language modules
    (``triton.language`` and ``triton.language.core``, as the interpreter's patch of the first device function that
    sees ``core`` does), and while it is in force a device function's patch is skipped (its modules are covered);
    and the builtins are listed from memory (``_remembered_lists``), where the language's attributes are as they
    were at an earlier launch the whole patch is replayed from memory: the same attributes set to the same values
    (``_plan``), without making some 300 wrappers again. The interpreter computes the same numbers either way
    (``tests/engines/test_interpreter.py`` runs kernels with and without)."""
    import triton.language as tl
    from triton.runtime import interpreter

    if getattr(interpreter, "_verispec_patch_reused", False):
        return
    original = interpreter._patch_lang
    active: list[frozenset] = []  # the language modules the running kernel's patch covers
    both_ids = frozenset((id(tl), id(tl.core)))
    _patch_builtin, kernel_patch = _remembered_lists(original)

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
        # the ids of tl and tl.core among the function's globals (a module is equal only to itself), read in C
        langs = both_ids.intersection(map(id, fn.__globals__.values()))
        if active and langs and langs <= active[-1]:
            return _NoScope()
        if active or not langs:  # a device function seeing more than the kernel's patch covers, or none at all
            return original(fn)  # (the interpreter's own assertion): patched as the interpreter does
        scope = kernel_patch()
        active.append(both_ids)
        return _KernelScope(scope, both_ids)

    interpreter._patch_lang = _patch_lang
    interpreter._patch_builtin = _patch_builtin
    interpreter._verispec_patch_reused = True


def _remembered_lists(original):
    """(a ``_patch_builtin`` that takes each module's or class's builtins from memory, the patch of both language
    modules that uses it): the builtins each ``_patch_builtin`` call of a kernel's patch finds are remembered by the
    language's attributes before the patch (their names and identities over every module and class of the MRO; a
    capture that replaces ``tl.rand`` changes them), since the patch is a deterministic function of them: equal
    attributes give the same lists in the same order, and new attributes are listed as the interpreter lists them.
    By the same key, with the interpreter's patch helpers (``_PATCH_HELPERS``), the whole patch is remembered as
    what it set (``_plan``) and replayed with the interpreter's own scope, which restores it as it restores a patch;
    its wrappers call the builtin they wrap with the interpreter's semantic and keep no state, so one made at an
    earlier launch is the one this launch would make."""
    import inspect
    import types

    import triton.language as tl
    from triton.runtime import interpreter

    both = types.FunctionType((lambda: None).__code__, {"tl": tl, "core": tl.core}, "language")
    listed: dict[tuple, list] = {}
    plans: dict[tuple, list | None] = {}  # key -> (owner, name, value) of every attribute its patch set
    launch: dict = {"key": None, "calls": None}  # the patch in progress: its key and the lists found so far

    def fingerprint(pkg):
        owners = [pkg] if inspect.ismodule(pkg) else list(getattr(pkg, "__mro__", [pkg]))
        return tuple((id(owner), tuple(vars(owner)), tuple(map(id, vars(owner).values()))) for owner in owners)

    def _patch_builtin(pkg, builder, scope):
        calls = launch["calls"]
        remembered = listed.get(launch["key"]) if calls is not None else None
        if remembered is not None and len(calls) < len(remembered) and remembered[len(calls)][0] is pkg:
            members = remembered[len(calls)][1]
        else:
            members = [(name, member) for name, member in inspect.getmembers(pkg) if tl.core.is_builtin(member)]
        if calls is not None:
            calls.append((pkg, members))
        for name, member in members:
            interpreter._patch_attr(pkg, name, member, builder, scope)

    def kernel_patch():
        key = tuple(fingerprint(pkg) for pkg in (tl, tl.core, tl.tensor, tl.math, tl.core.tensor_descriptor_base))
        key += (tuple(id(getattr(interpreter, name, None)) for name in _PATCH_HELPERS),)
        plan = plans.get(key)
        if plan is not None:  # the same language, the same helpers: the same attributes set to the same values
            scope = interpreter._LangPatchScope()
            for owner, name, value in plan:
                scope.set_attr(owner, name, value)
            return scope
        launch.update(key=key, calls=[])
        try:
            scope = original(both)
        finally:
            calls, launch["calls"] = launch["calls"], None
        for remembered, value in ((listed, calls), (plans, _plan(scope))):
            if len(remembered) >= 16:  # states that do not come back (a capture's replaced tl.rand, since restored)
                remembered.clear()
            remembered.setdefault(key, value)
        return scope

    return _patch_builtin, kernel_patch


#: The interpreter's functions that make its language patch (read as module globals when it runs): a patch is replayed
#: only where they are the ones that made it (``repair_loop_counters`` replaces ``_patch_lang_core``).
_PATCH_HELPERS = ("_patch_lang_core", "_patch_lang_tensor", "_patch_reduce_scan", "_patch_attr", "_patch_builtin",
                  "_LangPatchScope")


def _plan(scope) -> list | None:
    """The attributes a finished language patch set, in order, each with the value it holds now (the last one set
    where one was set twice): replayed with ``set_attr`` they give the same language and the same restore. None
    where a value cannot be read back as it was set (not in its owner's ``__dict__``)."""
    changes = getattr(scope, "_changes", None)  # Triton's _LangPatchScope: (owner, name, value before) in order
    if not changes:
        return None
    plan = []
    for owner, name, _ in changes:
        value = getattr(owner, "__dict__", {}).get(name, _PLAN_MISSING)
        if value is _PLAN_MISSING:
            return None
        plan.append((owner, name, value))
    return plan


_PLAN_MISSING = object()


class _NoScope:
    """The scope of a patch that was not needed: nothing to restore."""

    def restore(self) -> None:
        return None
