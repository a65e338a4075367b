"""verispec.guard.memory: the heap trim long builds call after every root, and the peak they report."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from verispec.guard.memory import peak_rss_bytes, trim_heap


def test_the_peak_covers_an_array_just_touched_and_never_falls():
    before = peak_rss_bytes()
    block = np.ones(64 << 17)  # 64 MiB, every page written
    after = peak_rss_bytes()
    assert block.sum() == 64 << 17
    assert after >= before and after >= block.nbytes  # the process has held at least this much at once


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="no /proc (Linux only)")
def test_the_peak_is_the_kernels_high_water_mark():
    """A second reading of the same counter: /proc/self/status's VmHWM (KiB) is the peak resident set that
    getrusage reports, so the two agree once neither moves in between (read the status before and after)."""
    def high_water() -> int:
        line = next(line for line in Path("/proc/self/status").read_text().splitlines() if line.startswith("VmHWM:"))
        return int(line.split()[1]) * 1024

    low, peak, high = high_water(), peak_rss_bytes(), high_water()
    assert low <= peak <= high


def test_trim_runs_where_glibc_has_it_and_says_so():
    freed = [np.ones(1 << 15) for _ in range(200)]  # 200 heap blocks of 256 KiB
    del freed
    trimmed = trim_heap()
    assert trimmed is (sys.platform.startswith("linux") and _is_glibc())


def _is_glibc() -> bool:
    import platform

    return platform.libc_ver()[0] == "glibc"
