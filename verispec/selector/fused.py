"""The law features' moments of three logit rows in one compiled pass (``logit_moments.c``), for decoding without a
sampling filter at a large vocabulary, where the numpy route's dozen passes over [V] rows cost most of the
selector's time a block.

``logit_moments(rows, inverse_temperature)`` gives what ``verispec.selector.features._logit_parts`` gives (L_i, five
dot products, sum min(x_p, x_q), min y_i) plus each row's first argmax and argmin, from the float32 logits alone:
one read of each row from memory, three exponentials an entry, no [V] intermediate but e_p and e_q in a scratch that
is reused from block to block. Its values agree with float64 arithmetic to about 1e-7 relative (the numpy route's
float32 BLAS sums to about 1e-6; both tested against a float64 reference). On Qwen's V = 151,936 at one CPU thread
it costs about 0.26 ms with the rows cold in memory against 0.59 ms for the numpy route
(``benchmarks/bench_selector_features.py --fused``).

The C file is compiled on first use in a process by the machine's C compiler (``$CC``, else ``cc``, ``gcc`` or
``clang``) with ``-O3 -march=native`` into ``<cache>/kernels/`` (``$VERISPEC_CACHE``, else ``~/.cache/verispec``),
named by a digest of the source, the flags, the compiler's version and the CPU, written atomically (several
processes may compile at once), and checked against float64 numpy on a small input before it is used. Where any of
that fails (no compiler, a compile error, a failed check, ``VERISPEC_KERNELS=0``), ``logit_moments`` returns None
and the features take the numpy route, which gives the same features to float32's rounding; ``kernel_status()``
says which and why."""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

import numpy as np

SOURCE = Path(__file__).with_name("logit_moments.c")
FLAGS = ("-O3", "-march=native", "-fno-math-errno", "-fno-trapping-math", "-fassociative-math", "-fno-signed-zeros",
         "-fPIC", "-shared")
#: Entries per block of the C kernel (its BLOCK): the [blocks, 11] statistics it keeps.
BLOCK = 2048
STATS = 11
COMPILE_TIMEOUT_S = 120

_lock = threading.Lock()
_loaded: dict[str, object] = {}
_workspace = threading.local()


def _compiler() -> str | None:
    configured = os.environ.get("CC")
    if configured:
        return shutil.which(configured) or (configured if Path(configured).is_file() else None)
    return next((found for found in map(shutil.which, ("cc", "gcc", "clang")) if found), None)


def _cpu_identity() -> str:
    """The CPU's model and feature flags (Linux), so a cache shared by machines never serves one another's build."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return platform.processor()
    wanted = ("model name", "flags", "Features", "CPU part")
    return "\n".join(sorted({line for line in lines if line.split(":")[0].strip() in wanted}))


def _build(compiler: str, folder: Path) -> Path:
    """The compiled kernel's path under ``folder``, compiling it there first unless a build of this source, these
    flags, this compiler and this CPU exists."""
    version = subprocess.run([compiler, "--version"], capture_output=True, text=True, timeout=30).stdout
    digest = hashlib.sha256("\0".join([SOURCE.read_text(), *FLAGS, version, platform.machine(),
                                       _cpu_identity()]).encode()).hexdigest()[:16]
    target = folder / f"logit_moments-{digest}.so"
    if target.is_file():
        return target
    folder.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(suffix=".so", dir=folder)
    os.close(handle)
    try:
        result = subprocess.run([compiler, *FLAGS, "-o", temporary, str(SOURCE), "-lm"], capture_output=True,
                                text=True, timeout=COMPILE_TIMEOUT_S)
        if result.returncode:
            message = (result.stderr.strip().splitlines() or ["no message"])[-1]
            raise OSError(f"{Path(compiler).name} failed ({message})")
        os.replace(temporary, target)  # atomic: a process that compiled it too replaces it by the same bytes
    finally:
        if os.path.exists(temporary):
            os.unlink(temporary)
    return target


def _bind(path: Path):
    library = ctypes.CDLL(str(path))
    function = library.verispec_logit_moments
    floats, doubles = ctypes.POINTER(ctypes.c_float), ctypes.POINTER(ctypes.c_double)
    function.argtypes = [floats, floats, floats, ctypes.c_int64, ctypes.c_double, floats, doubles, doubles,
                         ctypes.POINTER(ctypes.c_int64)]
    function.restype = ctypes.c_int
    return function


def _reference(rows, inverse_temperature: float) -> np.ndarray:
    """The moments in float64 numpy, the self-check's expected values."""
    shifted = [row.astype(np.float64) - row.max() for row in rows]
    weights = [np.exp(y * inverse_temperature) for y in shifted]
    totals = [w.sum() for w in weights]
    laws = [w / total for w, total in zip(weights, totals)]
    (xp, xq, xr), (yp, yq, yr) = laws, shifted
    return np.array([*np.log(totals), xp @ yp, xq @ yq, xr @ yr, xp @ yq, xq @ yp, np.minimum(xp, xq).sum(),
                     *(y.min() for y in shifted)])


def _self_check(function) -> None:
    """The kernel against float64 numpy on a seeded input of 5,000 entries (two whole blocks and a tail), and its
    refusal of an infinite logit; an OSError names the first disagreement."""
    rows = [(np.random.default_rng(seed).normal(size=5000) * 4).astype(np.float32) for seed in range(3)]
    rows[1][4999] = rows[1].max() + 1  # an argmax in the tail
    got = _call(function, rows, 1 / 0.7)
    if got is None:
        raise OSError("the kernel refused finite logits")
    values, where = got
    expected = _reference(rows, 1 / 0.7)
    wrong = np.flatnonzero(~np.isclose(values, expected, rtol=1e-6, atol=1e-7))
    if wrong.size:
        raise OSError(f"the kernel's moment {int(wrong[0])} is {values[wrong[0]]!r}, float64 gives "
                      f"{expected[wrong[0]]!r}")
    if where != [int(row.argmax()) for row in rows] + [int(row.argmin()) for row in rows]:
        raise OSError(f"the kernel's argmax and argmin {where} are not numpy's")
    rows[2][17] = np.inf
    if _call(function, rows, 1.0) is not None:
        raise OSError("the kernel took an infinite logit")


def _library():
    """The bound kernel, or None (with the reason in ``kernel_status``); built and checked once a process."""
    with _lock:
        if "function" in _loaded:
            return _loaded["function"]
        function, status = None, None
        if os.environ.get("VERISPEC_KERNELS", "1") == "0":
            status = "numpy route: the compiled kernel is off (VERISPEC_KERNELS=0)"
        elif (compiler := _compiler()) is None:
            status = "numpy route: no C compiler found ($CC, cc, gcc, clang)"
        else:
            from verispec.io import cache_root

            try:
                path = _build(compiler, cache_root() / "kernels")
                function = _bind(path)
                _self_check(function)
                status = f"compiled kernel {path}"
            except (OSError, subprocess.SubprocessError, AttributeError) as error:
                function, status = None, f"numpy route: the compiled kernel is not usable ({error})"
        _loaded.update(function=function, status=status)
        return function


def kernel_status() -> str:
    """Which route the logit moments take in this process, and why (building the kernel if not tried yet)."""
    _library()
    return str(_loaded["status"])


def _buffers(vocab: int):
    """This thread's scratch [2, V] float32, statistics [blocks, 11], moments [12] and indices [6]."""
    buffers = getattr(_workspace, "buffers", None)
    if buffers is None or buffers[0].shape[1] != vocab:
        buffers = _workspace.buffers = (np.empty((2, vocab), np.float32),
                                        np.empty((-(-vocab // BLOCK), STATS), np.float64),
                                        np.empty(12, np.float64), np.empty(6, np.int64))
    return buffers


def _call(function, rows, inverse_temperature: float):
    rows = [np.ascontiguousarray(row, dtype=np.float32) for row in rows]
    scratch, stats, out, where = _buffers(rows[0].shape[0])
    floats, doubles = ctypes.POINTER(ctypes.c_float), ctypes.POINTER(ctypes.c_double)
    status = function(*(row.ctypes.data_as(floats) for row in rows), rows[0].shape[0], inverse_temperature,
                      scratch.ctypes.data_as(floats), stats.ctypes.data_as(doubles), out.ctypes.data_as(doubles),
                      where.ctypes.data_as(ctypes.POINTER(ctypes.c_int64)))
    return None if status else (out.copy(), where.tolist())


@contextlib.contextmanager
def numpy_route():
    """Within it, ``logit_moments`` returns None in this thread, so the features take the numpy route: for
    side-by-side benchmarks and tests."""
    previous = getattr(_workspace, "off", False)
    _workspace.off = True
    try:
        yield
    finally:
        _workspace.off = previous


def logit_moments(rows, inverse_temperature: float):
    """For float32 rows z_i [V] (i = p, q, r; numpy, one V), with y_i = z_i - max z_i and x_i the softmax of
    y_i * ``inverse_temperature``: (moments [12] float64 as ``_logit_parts`` lays them out, [first argmax of each
    row, first argmin of each row]); moments all NaN when a logit is infinite or NaN; None when the compiled kernel
    is not available in this process (``kernel_status``) or is off in this thread (``numpy_route``)."""
    function = None if getattr(_workspace, "off", False) else _library()
    if function is None:
        return None
    got = _call(function, rows, float(inverse_temperature))
    return got if got is not None else (np.full(12, np.nan), [0] * 6)


__all__ = ["kernel_status", "logit_moments", "numpy_route"]
