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

``verispec.native.series`` (``series.c``) holds Global Resolution's passes over the vocabulary, built the same way
(``_library`` with its own source, flags and self-check) but without -ffast-math's reassociation, so that they equal
their numpy route to the last bit.

On Qwen's V = 151,936 at one CPU thread, with the rows cold, the moments cost about 0.26 ms against 0.52-0.59 ms for
the numpy route and the largest 21 entries about 0.08 ms against 0.15 ms for the torch route
(``benchmarks/bench_native_kernels.py``).

The C file is compiled on first use in a process by the machine's C compiler (``$CC``, else ``cc``, ``gcc`` or
``clang``) with ``-O3 -march=native`` into ``<cache>/kernels/`` (``$VERISPEC_CACHE``, else ``~/.cache/verispec``),
named by a digest of the source, the flags, the compiler's version and the CPU, and checked against numpy on small
inputs before it is used. The cache is not trusted: the compiler writes to a temporary name that is renamed into
place, and a record (``kernels-<digest>.json``, written atomically after the library) holds the library's sha256; a
library is loaded only from bytes whose sha256 matches its record, copied to a private file first (so the bytes
loaded are the bytes checked). A truncated library (a killed compile, a full disk: loading one ended the process
with SIGBUS) or one planted under the expected name (its constructor ran when it was loaded) is never loaded: the
kernels are compiled again, over it. The compiler runs in its own process group, ended whole when it passes its time
limit (``COMPILE_TIMEOUT_S``; a ``$CC`` that hangs left its children behind holding the pipes). Where any of that
fails (no compiler, a compile error, a failed check, ``VERISPEC_KERNELS=0``) the functions return None and the
callers take their numpy or torch route, which give the same results to float32's rounding (the largest entries
exactly); ``kernel_status()`` says which and why, and ``kernels_off()`` turns the kernels off in a thread for
side-by-side comparisons."""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import json
import os
import platform
import shutil
import signal
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
#: Seconds the compiler may take for the kernels (about 1 s here), and to print its version; past them its whole
#: process group is ended and the callers take the numpy and torch routes.
COMPILE_TIMEOUT_S = 60
VERSION_TIMEOUT_S = 10
#: Largest library or record read from the cache to be checked (the kernels take about 20 KB).
MAX_CACHED_BYTES = 64 << 20

_lock = threading.Lock()
_loaded: dict[str, object] = {}
#: Libraries found in the cache that did not match their record, and were compiled again over (for the status).
_replaced: dict[Path, bool] = {}
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


def _run_bounded(command: list[str], timeout: float) -> subprocess.CompletedProcess:
    """``command`` with its output captured, in a process group of its own; past ``timeout`` seconds (or on any
    interruption) the whole group is killed and reaped, so a compiler driver's children (cc1, as, ld, or a
    script's sleep) do not outlive it holding the pipes open, and an OSError says so."""
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, errors="replace",
                               start_new_session=True)
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _end_group(process)
        raise OSError(f"{Path(command[0]).name} did not finish in {timeout:g} s; its process group was ended") from None
    except BaseException:
        _end_group(process)
        raise
    return subprocess.CompletedProcess(command, process.returncode, out, err)


def _end_group(process: subprocess.Popen) -> None:
    """Kill ``process`` and everything in its process group, then reap it (a child that left the group and keeps
    the pipes open is waited for 5 s at most)."""
    with contextlib.suppress(OSError):
        if hasattr(os, "killpg"):
            os.killpg(process.pid, signal.SIGKILL)
        else:
            process.kill()
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.communicate(timeout=5)
    process.kill()
    process.wait()


def _read_bounded(path: Path) -> bytes | None:
    """The bytes of a cache file, or None when it is missing, unreadable, not a regular file or over
    MAX_CACHED_BYTES."""
    try:
        with open(path, "rb") as stream:
            content = stream.read(MAX_CACHED_BYTES + 1)
    except OSError:
        return None
    return content if len(content) <= MAX_CACHED_BYTES else None


def _recorded(target: Path, key: str) -> bytes | None:
    """The cached library's bytes when its record names ``key`` and their sha256; None otherwise (no record, a
    library truncated or replaced since it was built)."""
    record, content = _read_bounded(target.with_suffix(".json")), _read_bounded(target)
    if record is None or content is None:
        return None
    try:
        expected = json.loads(record)
    except (ValueError, RecursionError):
        return None
    if not isinstance(expected, dict) or expected.get("key") != key or \
            expected.get("sha256") != hashlib.sha256(content).hexdigest():
        return None
    return content


def _write_atomically(path: Path, content: bytes) -> None:
    handle, temporary = tempfile.mkstemp(suffix=".part", dir=path.parent)
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(content)
        os.replace(temporary, path)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(temporary)


def cache_entry(compiler: str, folder: Path, source: Path | None = None,
                flags: tuple | None = None) -> tuple[str, Path]:
    """(the key of a build of this source, these flags, this compiler's version and this CPU; the library's path
    under ``folder``, its record beside it with the suffix .json). ``source`` and ``flags``: SOURCE and FLAGS (as
    they are when called) unless given."""
    source, flags = source or SOURCE, flags or FLAGS
    version = _run_bounded([compiler, "--version"], VERSION_TIMEOUT_S).stdout
    key = hashlib.sha256("\0".join([source.read_text(), *flags, version, platform.machine(),
                                    _cpu_identity()]).encode()).hexdigest()
    return key, folder / f"{source.stem}-{key[:16]}.so"


def _build(compiler: str, folder: Path, *, again: bool = False, source: Path | None = None,
           flags: tuple | None = None) -> tuple[Path, bytes, bool]:
    """(the compiled kernels' path under ``folder``, their bytes, whether they were compiled now): compiled there
    unless a build of this source, these flags, this compiler and this CPU is there and matches its record
    (``again``: compiled even so, replacing it). The library is renamed into place, then its record written."""
    source, flags = source or SOURCE, flags or FLAGS
    key, target = cache_entry(compiler, folder, source, flags)
    content = None if again else _recorded(target, key)
    if content is not None:
        return target, content, False
    _replaced[target] = target.exists() or target.is_symlink()
    folder.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(suffix=".so", dir=folder)
    os.close(handle)
    try:
        result = _run_bounded([compiler, *flags, "-o", temporary, str(source), "-lm"], COMPILE_TIMEOUT_S)
        if result.returncode:
            message = (result.stderr.strip().splitlines() or ["no message"])[-1]
            raise OSError(f"{Path(compiler).name} failed ({message})")
        content = _read_bounded(Path(temporary))
        if content is None:
            raise OSError(f"{Path(compiler).name} wrote no readable library")
        os.replace(temporary, target)  # atomic: a process that compiled it too replaces it, and its record
    finally:
        if os.path.exists(temporary):
            os.unlink(temporary)
    record = {"key": key, "sha256": hashlib.sha256(content).hexdigest(), "compiler": compiler, "flags": flags,
              "source_sha256": hashlib.sha256(source.read_bytes()).hexdigest()}
    _write_atomically(target.with_suffix(".json"), json.dumps(record).encode())
    return target, content, True


def _bind_checked(content: bytes, folder: Path, bind=None) -> dict:
    """Bind the library whose bytes were checked, from a private copy of them (mode 0600, removed once mapped):
    nothing swapped into the cache after the check is loaded, and a process that found a damaged library under
    the cache's name never maps it."""
    handle, private = tempfile.mkstemp(prefix=".kernels-", suffix=".so", dir=folder)
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(content)
        return (bind or _bind)(Path(private))
    finally:
        with contextlib.suppress(OSError):
            os.unlink(private)


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


def _load(compiler: str, source: Path | None = None, flags: tuple | None = None, bind=None,
          check=None) -> tuple[dict, Path, str]:
    """Build (or find and verify), bind and check the kernels of ``source`` (``bind`` and ``check``: this module's
    ``_bind`` and ``_self_check`` unless given): (them, their path, a note on a rebuild). A cached build that fails
    its check though it matches its record (copied from another machine) is compiled again once."""
    from verispec.files.io import cache_root

    folder, check = cache_root() / "kernels", check or _self_check
    path, content, compiled = _build(compiler, folder, source=source, flags=flags)
    note = "" if not compiled or not _replaced.get(path) else \
        " (compiled again: the cached library did not match the sha256 recorded when it was built)"
    try:
        kernels = _bind_checked(content, folder, bind)
        check(kernels)
    except OSError as error:
        if compiled:
            raise
        path, content, _ = _build(compiler, folder, again=True, source=source, flags=flags)
        kernels = _bind_checked(content, folder, bind)
        check(kernels)
        note = f" (compiled again: the cached build failed its check: {error})"
    return kernels, path, note


def _library(name: str = "kernels", source: Path | None = None, flags: tuple | None = None, bind=None,
             check=None) -> dict | None:
    """The bound kernels of ``source`` (kept under ``name``), or None (with the reason in ``kernel_status``); built
    and checked once a process."""
    status_name = "status" if name == "kernels" else f"{name}_status"
    with _lock:
        if name in _loaded:
            return _loaded[name]
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
                kernels, path, note = _load(compiler, source, flags, bind, check)
                status = f"compiled kernels {path}{note}"
            except (OSError, subprocess.SubprocessError, AttributeError) as error:
                kernels, status = None, f"numpy and torch routes: the compiled kernels are not usable ({error})"
        _loaded.update({name: kernels, status_name: status})
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
