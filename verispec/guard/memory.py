"""The process's memory, as long builds need it: handing freed heap back to the system, and the peak so far.

A Qwen dataset build frees gigabytes of [nodes, V] float64 laws after every root. Each law (1.2 MB at
V = 151,936) sits below glibc's mmap threshold, so it lives on the heap, and the freed heap stays mapped
behind the fragments still in use: measured, 2.2-3.0 GB a root that ``malloc_trim`` returns. Lowering the mmap
threshold instead (every law its own mapping) returned it too but ran the build 2.2x slower."""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import resource
import sys


@functools.cache
def _malloc_trim():
    """glibc's ``malloc_trim``, or None where the C library has none (macOS, musl)."""
    name = ctypes.util.find_library("c")
    if not sys.platform.startswith("linux") or name is None:
        return None
    trim = getattr(ctypes.CDLL(name), "malloc_trim", None)
    if trim is not None:
        trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return trim


def trim_heap() -> bool:
    """Return the heap's free pages to the system; True where the C library could (glibc), False elsewhere."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True


def peak_rss_bytes() -> int:
    """The process's peak resident set so far, in bytes (``ru_maxrss``: KiB on Linux, bytes on macOS)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak) if sys.platform == "darwin" else int(peak) * 1024


def available_memory_bytes() -> int | None:
    """Memory the system could give new processes now without swapping (Linux's MemAvailable), in bytes; None
    where the system does not say (no /proc/meminfo)."""
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


__all__ = ["available_memory_bytes", "peak_rss_bytes", "trim_heap"]
