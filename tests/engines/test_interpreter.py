"""verispec's repairs to Triton's interpreter (``verispec.engines.interpreter``): each makes a kernel run under the
interpreter as it runs compiled, and changes nothing else.

* ``repair_masks``: ``mask & flag`` inside a nested ``@triton.jit`` function reaches the store as int32, which the
  interpreter refuses; repaired, the store writes exactly the lanes the boolean mask selects, and a kernel whose
  mask is boolean stores the same with and without the repair.
* ``supply_libdevice``: ``libdevice.log1p`` is a stub that returns None under the interpreter; supplied, it is
  numpy's log1p in the argument's precision.
* ``repair_loop_counters``: the counter of a ``tl.range`` loop is a Python int under the interpreter, so
  ``i.to(tl.int64)`` fails (vLLM's top-k/top-p kernel); repaired, it is the scalar tensor it is compiled.
* ``reuse_language_patch``: a kernel calling nested device functions computes the same numbers with the language
  patched once per launch, from a remembered list of builtins, as with the interpreter's patch at every call; a
  builtin replaced between launches (as verispec's feed of ``tl.rand`` replaces it) is seen by the next launch, and
  the launch after it is restored replays the first launch's remembered patch, with the first launch's numbers.
* ``skip_unasserted_overflow_checks``: the interpreter's int32 overflow check computes a condition that its
  ``device_assert`` ignores unless the debug option is on; skipped, int32 arithmetic (an overflowing product
  included) gives the same numbers, and with the debug option on the overflow is still caught.

Each repair runs in a process of its own (``_run``): it changes the interpreter for the process, and the test
compares a process with it against one without.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("triton")
pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[2]

KERNELS = textwrap.dedent('''
    import json, os, sys
    os.environ["TRITON_INTERPRET"] = "1"
    import numpy as np
    import torch
    import triton
    import triton.language as tl
    import triton.language.extra.libdevice as libdevice

    from verispec.engines import interpreter

    for repair in sys.argv[1].split(",") if sys.argv[1] else []:
        getattr(interpreter, repair)()

    @triton.jit
    def _flagged(mask, flag_ptr):
        flag = tl.load(flag_ptr).to(tl.int64) >= 0
        return mask & flag

    @triton.jit
    def _store_kernel(out_ptr, flag_ptr, vocab, BLOCK: tl.constexpr, NESTED: tl.constexpr):
        lanes = tl.arange(0, BLOCK)
        mask = lanes < vocab
        if NESTED:
            mask = _flagged(mask, flag_ptr)
        tl.store(out_ptr + lanes, lanes + 1, mask=mask)

    @triton.jit
    def _log1p_kernel(out_ptr, x_ptr, BLOCK: tl.constexpr):
        lanes = tl.arange(0, BLOCK)
        tl.store(out_ptr + lanes, libdevice.log1p(tl.load(x_ptr + lanes)))

    @triton.jit
    def _square(x):
        return x * x

    @triton.jit
    def _shifted(x, shift):
        return _square(x) + shift

    @triton.jit
    def _nested_kernel(out_ptr, x_ptr, BLOCK: tl.constexpr):
        lanes = tl.arange(0, BLOCK)
        x = tl.load(x_ptr + lanes)
        tl.store(out_ptr + lanes, _shifted(x, 1.5) - tl.sqrt(_square(x)))

    @triton.jit
    def _int_kernel(out_ptr, x_ptr, BLOCK: tl.constexpr):
        lanes = tl.arange(0, BLOCK)
        x = tl.load(x_ptr + lanes)
        tl.store(out_ptr + lanes, (x * 3 + lanes) - x * 7)

    @triton.jit
    def _loop_kernel(out_ptr, rows, STRIDE: tl.constexpr):
        for row in tl.range(tl.program_id(0), rows, tl.num_programs(0)):
            tl.store(out_ptr + row.to(tl.int64) * STRIDE, row * 10)

    result = {}
    out = torch.full((5,), -1, dtype=torch.int32)
    try:
        _loop_kernel[(2,)](out, 5, STRIDE=1)
        result["loop"] = out.tolist()
    except Exception as error:
        result["loop"] = type(error).__name__ + ": " + str(error)[:200]
    for nested in (False, True):
        out = torch.zeros(8, dtype=torch.int64)
        try:
            _store_kernel[(1,)](out, torch.zeros(1, dtype=torch.int32), 5, BLOCK=8, NESTED=nested)
            result[f"store_nested={nested}"] = out.tolist()
        except Exception as error:
            result[f"store_nested={nested}"] = type(error).__name__ + ": " + str(error)[:200]
    x = torch.tensor([-0.5, -1e-8, 0.0, 1e-7, 0.25, 1.0, 3.0, 100.0], dtype=torch.float32)
    out = torch.zeros(8, dtype=torch.float32)
    try:
        _log1p_kernel[(1,)](out, x, BLOCK=8)
        result["log1p"] = out.tolist()
    except Exception as error:
        result["log1p"] = type(error).__name__ + ": " + str(error)[:200]
    out = torch.zeros(8, dtype=torch.float32)
    _nested_kernel[(1,)](out, torch.linspace(-3, 3, 8, dtype=torch.float32), BLOCK=8)
    result["nested"] = out.tolist()
    # a builtin replaced between launches, as verispec's feed of tl.rand does: the next launch must see it
    original_sqrt = tl.sqrt
    tl.sqrt = tl.exp
    out = torch.zeros(8, dtype=torch.float32)
    _nested_kernel[(1,)](out, torch.linspace(-3, 3, 8, dtype=torch.float32), BLOCK=8)
    tl.sqrt = original_sqrt
    result["swapped"] = out.tolist()
    out = torch.zeros(8, dtype=torch.float32)
    _nested_kernel[(1,)](out, torch.linspace(-3, 3, 8, dtype=torch.float32), BLOCK=8)
    result["restored"] = out.tolist()
    # int32 arithmetic, an overflowing product included (it wraps, as compiled); then with the interpreter's debug
    # option on, where Triton asserts on an int32 overflow: the overflowing product raises, small values do not
    def _ints(values):
        out = torch.zeros(8, dtype=torch.int32)
        try:
            _int_kernel[(1,)](out, torch.tensor(values, dtype=torch.int32), BLOCK=8)
            return out.tolist()
        except Exception as error:
            return type(error).__name__ + ": " + str(error)[:200]

    import dataclasses
    from triton.runtime import interpreter as triton_interpreter

    large, small = [0, 1, -5, 2 ** 20, 10 ** 9, -10 ** 9, 2 ** 31 - 1, -2 ** 31], [-3, -2, -1, 0, 1, 2, 3, 4]
    result["ints"] = _ints(large)
    builder = triton_interpreter.interpreter_builder
    options, builder.options = builder.options, dataclasses.replace(builder.options, debug=True)
    result["ints_debug"], result["ints_debug_small"] = _ints(large), _ints(small)
    builder.options = options
    print(json.dumps(result))
''')


def _run(repairs: str) -> dict:
    done = subprocess.run([sys.executable, "-c", KERNELS, repairs], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_repairs_run_the_kernels_as_compiled_and_change_nothing_else():
    import numpy as np

    bare = _run("")
    repaired = _run("repair_masks,supply_libdevice,reuse_language_patch,repair_loop_counters,"
                    "skip_unasserted_overflow_checks")
    selected = [1, 2, 3, 4, 5, 0, 0, 0]  # lanes 0..4 store lane + 1; the flag is true
    # without the repair the nested mask reaches the store as int32 and the interpreter refuses it
    assert "mask has unsupported dtype" in bare["store_nested=True"]
    assert repaired["store_nested=True"] == selected
    assert bare["store_nested=False"] == repaired["store_nested=False"] == selected
    # the stub returns None, so the kernel fails; supplied, it is log1p in float32
    assert not isinstance(bare["log1p"], list)
    x = np.array([-0.5, -1e-8, 0.0, 1e-7, 0.25, 1.0, 3.0, 100.0], dtype=np.float32)
    assert np.array_equal(np.array(repaired["log1p"], dtype=np.float32), np.log1p(x))
    # a tl.range loop's counter: a Python int under the bare interpreter, the compiled scalar tensor repaired (the
    # two programs take rows 0, 2, 4 and 1, 3)
    assert "'int' object has no attribute 'to'" in bare["loop"]
    assert repaired["loop"] == [0, 10, 20, 30, 40]
    # one language patch a launch: the same numbers, bit for bit
    assert bare["nested"] == repaired["nested"]
    expected = np.linspace(-3, 3, 8, dtype=np.float32)
    assert np.allclose(repaired["nested"], expected * expected + 1.5 - np.abs(expected), atol=1e-5)
    # the remembered list of builtins is listed again when the language's attributes change, and again when restored
    assert bare["swapped"] == repaired["swapped"] and bare["restored"] == repaired["restored"] == repaired["nested"]
    assert np.allclose(repaired["swapped"], expected * expected + 1.5 - np.exp(expected * expected), rtol=1e-5)
    # the overflow check skipped while its assertion is off: the same int32 arithmetic, (3 x + lane) - 7 x wrapped to
    # 32 bits, and with the assertion on Triton's own check still catches the overflowing product
    def wrapped(value):
        return (value + 2 ** 31) % 2 ** 32 - 2 ** 31

    for values, key in (([0, 1, -5, 2 ** 20, 10 ** 9, -10 ** 9, 2 ** 31 - 1, -2 ** 31], "ints"),
                        ([-3, -2, -1, 0, 1, 2, 3, 4], "ints_debug_small")):
        assert bare[key] == repaired[key] == [wrapped(3 * x + lane - 7 * x) for lane, x in enumerate(values)]
    assert "int32 overflow detected for operation mul" in bare["ints_debug"]
    assert repaired["ints_debug"] == bare["ints_debug"]
