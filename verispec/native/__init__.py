"""verispec's compiled kernels (``kernels.c``): single passes over vocabulary-sized rows on the host where numpy
and torch take several, for the selector's choice inside decoding at a large vocabulary (its time a block is the
cold passes over [V] rows that the models' forwards left out of the caches).

* ``logit_moments(rows, inverse_temperature)``: what ``verispec.selector.features._logit_parts`` gives (L_i, five
  dot products, sum min(x_p, x_q), min y_i) plus each row's first argmax and argmin, from three float32 logit rows
  alone: one read of each row from memory, three exponentials an entry, no [V] intermediate but e_p and e_q in a
  scratch reused from call to call. Its values agree with float64 arithmetic to about 1e-7 relative at Qwen's V
  (sums in double across blocks of 2,048; the numpy route's float32 BLAS sums to about 1e-6), tested against a
  float64 reference.
* ``largest(row, count, width)``: the ``count`` largest entries of a float32 row and their ids, largest first, from
  one pass (the top-k support of a sampling law: ``verispec.models.sampling.largest``), equal to ``torch.topk``'s
  values (tested).

On Qwen's V = 151,936 at one CPU thread, with the rows cold, the moments cost about 0.26 ms against 0.52-0.59 ms for
the numpy route and the largest 21 entries about 0.08 ms against 0.15 ms for the torch route
(``benchmarks/bench_native_kernels.py``).

The C file is compiled on first use in a process by the machine's C compiler (``$CC``, else ``cc``, ``gcc`` or
``clang``) with ``-O3 -march=native`` into ``<cache>/kernels/`` (``$VERISPEC_CACHE``, else ``~/.cache/verispec``),
named by a digest of the source, the flags, the compiler's version and the CPU, written atomically (several
processes may compile at once), and checked against numpy on small inputs before it is used. Where any of
that fails (no compiler, a compile error, a failed check, ``VERISPEC_KERNELS=0``) the functions return None and the
callers take their numpy or torch route, which give the same results to float32's rounding (the largest entries
exactly); ``kernel_status()`` says which and why, and ``kernels_off()`` turns the kernels off in a thread for
side-by-side comparisons."""

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

SOURCE = Path(__file__).with_name("kernels.c")
FLAGS = ("-O3", "-march=native", "-fno-math-errno", "-fno-trapping-math", "-fassociative-math", "-fno-signed-zeros",
         "-fPIC", "-shared")
#: Entries per block of the C kernel (its BLOCK): the [blocks, 11] statistics it keeps.
BLOCK = 2048
STATS = 11
COMPILE_TIMEOUT_S = 120

_lock = threading.Lock()
_loaded: dict[str, object] = {}
_workspace = threading.local()


def _compiler() -> tuple[str | None, str]:
    """(the C compiler's path, or None; why not)."""
    configured = os.environ.get("CC")
    if configured:
        found = shutil.which(configured) or (configured if Path(configured).is_file() else None)
        return found, f"$CC = {configured!r} is not a program (set CC to a C compiler, or unset it)"
    found = next((found for found in map(shutil.which, ("cc", "gcc", "clang")) if found), None)
    return found, "no C compiler found ($CC, cc, gcc, clang)"


def _cpu_identity() -> str:
    """The CPU's model and feature flags (Linux), so a cache shared by machines never serves one another's build."""
    try:
        lines = Path("/proc/cpuinfo").read_text(errors="replace").splitlines()
    except OSError:
        return platform.processor()
    wanted = ("model name", "flags", "Features", "CPU part")
    return "\n".join(sorted({line for line in lines if line.split(":")[0].strip() in wanted}))


def _build(compiler: str, folder: Path, *, again: bool = False) -> tuple[Path, bool]:
    """(the compiled kernels' path under ``folder``, whether it was compiled now): compiled there unless a build of
    this source, these flags, this compiler and this CPU exists (``again``: compiled even so, replacing it)."""
    version = subprocess.run([compiler, "--version"], capture_output=True, text=True, errors="replace",
                             timeout=30).stdout
    digest = hashlib.sha256("\0".join([SOURCE.read_text(), *FLAGS, version, platform.machine(),
                                       _cpu_identity()]).encode()).hexdigest()[:16]
    target = folder / f"kernels-{digest}.so"
    if target.is_file() and not again:
        return target, False
    folder.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(suffix=".so", dir=folder)
    os.close(handle)
    try:
        result = subprocess.run([compiler, *FLAGS, "-o", temporary, str(SOURCE), "-lm"], capture_output=True,
                                text=True, errors="replace", timeout=COMPILE_TIMEOUT_S)
        if result.returncode:
            message = (result.stderr.strip().splitlines() or ["no message"])[-1]
            raise OSError(f"{Path(compiler).name} failed ({message})")
        os.replace(temporary, target)  # atomic: a process that compiled it too replaces it by the same bytes
    finally:
        if os.path.exists(temporary):
            os.unlink(temporary)
    return target, True


def _bind(path: Path) -> dict:
    library = ctypes.CDLL(str(path))
    # every array goes in as its address (an int): data_as() pointers cost microseconds a call
    address, size, real = ctypes.c_void_p, ctypes.c_int64, ctypes.c_double
    moments, largest_entries = library.verispec_logit_moments, library.verispec_largest
    moments.argtypes = [address, address, address, size, real, address, address, address, address]
    largest_entries.argtypes = [address, size, size, size, address, address, address, address]
    moments.restype = largest_entries.restype = ctypes.c_int
    return {"moments": moments, "largest": largest_entries}


def _reference(rows, inverse_temperature: float) -> np.ndarray:
    """The moments in float64 numpy, the self-check's expected values."""
    shifted = [row.astype(np.float64) - row.max() for row in rows]
    weights = [np.exp(y * inverse_temperature) for y in shifted]
    totals = [w.sum() for w in weights]
    laws = [w / total for w, total in zip(weights, totals)]
    (xp, xq, xr), (yp, yq, yr) = laws, shifted
    return np.array([*np.log(totals), xp @ yp, xq @ yq, xr @ yr, xp @ yq, xq @ yp, np.minimum(xp, xq).sum(),
                     *(y.min() for y in shifted)])


def _self_check(kernels: dict) -> None:
    """The kernels against numpy on seeded inputs of 5,000 entries (two whole blocks of the moments and a tail): the
    moments against float64 arithmetic to the tolerance the tests hold them to (1e-6 relative, 2e-7 absolute near
    0), the largest entries against a sort; and their refusal of an infinite logit. An OSError names the first
    disagreement."""
    rows = [(np.random.default_rng(seed).normal(size=5000) * 4).astype(np.float32) for seed in range(3)]
    rows[1][4999] = rows[1].max() + 1  # an argmax in the tail
    got = _moments(kernels["moments"], rows, 1 / 0.7)
    if got is None:
        raise OSError("the kernel refused finite logits")
    values, where = got
    expected = _reference(rows, 1 / 0.7)
    wrong = np.flatnonzero(~np.isclose(values, expected, rtol=1e-6, atol=2e-7))
    if wrong.size:
        raise OSError(f"the kernel's moment {int(wrong[0])} is {values[wrong[0]]!r}, float64 gives "
                      f"{expected[wrong[0]]!r}")
    if where != [int(row.argmax()) for row in rows] + [int(row.argmin()) for row in rows]:
        raise OSError(f"the kernel's argmax and argmin {where} are not numpy's")
    found = _largest(kernels["largest"], rows[1], 9, 16)
    if found is None or found[0].tolist() != np.sort(rows[1])[::-1][:9].tolist() or \
            rows[1][found[1]].tolist() != found[0].tolist():
        shown = None if found is None else found[0][:3].tolist()
        raise OSError(f"the kernel's largest entries (first three {shown}) are not numpy's")
    rows[2][17] = np.inf
    if _moments(kernels["moments"], rows, 1.0) is not None or _largest(kernels["largest"], rows[2], 9, 16):
        raise OSError("the kernel took an infinite logit")


#: VERISPEC_KERNELS values that turn the kernels off, and on.
_OFF, _ON = ("0", "off", "false", "no"), ("", "1", "on", "true", "yes")


def _load(compiler: str) -> tuple[dict, Path]:
    """Build (or find), bind and check the kernels; a cached build that does not load or fails its check (copied
    from another machine, or damaged) is compiled again once."""
    from verispec.io import cache_root

    folder = cache_root() / "kernels"
    path, compiled = _build(compiler, folder)
    try:
        kernels = _bind(path)
        _self_check(kernels)
    except OSError:
        if compiled:
            raise
        path, _ = _build(compiler, folder, again=True)
        # the loader keeps the damaged library under its path's name for this process: load a copy of the new one
        fresh = path.with_name(f".{path.stem}-{os.getpid()}-{threading.get_ident()}.so")
        shutil.copyfile(path, fresh)
        try:
            kernels = _bind(fresh)
        finally:
            with contextlib.suppress(OSError):
                fresh.unlink()  # mapped already; nothing left behind
        _self_check(kernels)
    return kernels, path


def _library() -> dict | None:
    """The bound kernels, or None (with the reason in ``kernel_status``); built and checked once a process."""
    with _lock:
        if "kernels" in _loaded:
            return _loaded["kernels"]
        kernels, status = None, None
        setting = os.environ.get("VERISPEC_KERNELS", "1").strip().lower()
        compiler, missing = _compiler()
        if setting in _OFF:
            status = f"numpy and torch routes: the compiled kernels are off (VERISPEC_KERNELS={setting})"
        elif setting not in _ON:
            status = (f"numpy and torch routes: VERISPEC_KERNELS = {os.environ['VERISPEC_KERNELS']!r} is neither on "
                      "(1) nor off (0)")
        elif compiler is None:
            status = f"numpy and torch routes: {missing}"
        else:
            try:
                kernels, path = _load(compiler)
                status = f"compiled kernels {path}"
            except (OSError, subprocess.SubprocessError, AttributeError) as error:
                kernels, status = None, f"numpy and torch routes: the compiled kernels are not usable ({error})"
        _loaded.update(kernels=kernels, status=status)
        return kernels


def kernel_status() -> str:
    """Which route the kernels' callers take in this process, and why (building the kernels if not tried yet)."""
    _library()
    return str(_loaded["status"])


def _active() -> dict | None:
    return None if getattr(_workspace, "off", False) else _library()


@contextlib.contextmanager
def kernels_off():
    """Within it, the kernels' functions return None in this thread, so their callers take the numpy or torch
    route: for side-by-side benchmarks and tests."""
    previous = getattr(_workspace, "off", False)
    _workspace.off = True
    try:
        yield
    finally:
        _workspace.off = previous


def _buffers(vocab: int):
    """This thread's scratch [2, V] float32, statistics [blocks, 11], moments [12] and indices [6], and their
    addresses."""
    buffers = getattr(_workspace, "buffers", None)
    if buffers is None or buffers[0].shape[1] != vocab:
        arrays = (np.empty((2, vocab), np.float32), np.empty((-(-vocab // BLOCK), STATS), np.float64),
                  np.empty(12, np.float64), np.empty(6, np.int64))
        buffers = _workspace.buffers = (*arrays, tuple(array.ctypes.data for array in arrays))
    return buffers


def _moments(function, rows, inverse_temperature: float):
    rows = [row if row.dtype == np.float32 and row.flags.c_contiguous else
            np.ascontiguousarray(row, dtype=np.float32) for row in rows]
    vocab = rows[0].shape[0]
    _, _, out, where, addresses = _buffers(vocab)
    status = function(rows[0].ctypes.data, rows[1].ctypes.data, rows[2].ctypes.data, vocab, inverse_temperature,
                      *addresses)
    return None if status else (out.copy(), where.tolist())


def logit_moments(rows, inverse_temperature: float):
    """For float32 rows z_i [V] (i = p, q, r; numpy, one V), with y_i = z_i - max z_i and x_i the softmax of
    y_i * ``inverse_temperature``: (moments [12] float64 as ``_logit_parts`` lays them out, [first argmax of each
    row, first argmin of each row]); moments all NaN when a logit is infinite or NaN; None when the kernels are not
    available in this process (``kernel_status``) or are off in this thread (``kernels_off``)."""
    kernels = _active()
    if kernels is None:
        return None
    got = _moments(kernels["moments"], rows, float(inverse_temperature))
    return got if got is not None else (np.full(12, np.nan), [0] * 6)


def _largest(function, row: np.ndarray, count: int, width: int):
    block_max = np.empty(row.shape[0] // width + count, np.float32)
    chosen, values, ids = np.empty(count, np.int64), np.empty(count, np.float32), np.empty(count, np.int64)
    status = function(row.ctypes.data, row.shape[0], count, width, block_max.ctypes.data, chosen.ctypes.data,
                      values.ctypes.data, ids.ctypes.data)
    return None if status else (values, ids)


def largest(row, count: int, width: int):
    """The ``count`` largest entries of a float32 numpy row [V] and their ids, largest first ((values [count]
    float32, ids [count] int64); equal entries may come in another order than ``torch.topk``'s), from its blocks of
    ``width`` entries (a multiple of 16, ``count`` at most V // width); None when the kernels are not available or
    off, the row is not float32, or an entry is infinite or NaN (torch orders those)."""
    kernels = _active()
    if kernels is None or row.dtype != np.float32 or row.ndim != 1:
        return None
    if width % 16 or not 0 < count <= row.shape[0] // width:
        raise ValueError(f"largest needs a block width that is a multiple of 16 and 0 < count <= V // width, got "
                         f"width {width}, count {count}, V {row.shape[0]}")
    return _largest(kernels["largest"], np.ascontiguousarray(row), count, width)


__all__ = ["kernel_status", "kernels_off", "largest", "logit_moments"]
