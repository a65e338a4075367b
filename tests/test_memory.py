"""verispec.memory: the heap trim long builds call after every root, and the peak they report."""

from __future__ import annotations

import sys

import numpy as np

from verispec.memory import peak_rss_bytes, trim_heap


def test_the_peak_covers_an_array_just_touched_and_never_falls():
    before = peak_rss_bytes()
    block = np.ones(64 << 17)  # 64 MiB, every page written
    after = peak_rss_bytes()
    assert block.sum() == 64 << 17
    assert after >= before and after >= block.nbytes  # the process has held at least this much at once


def test_trim_runs_where_glibc_has_it_and_says_so():
    freed = [np.ones(1 << 15) for _ in range(200)]  # 200 heap blocks of 256 KiB
    del freed
    trimmed = trim_heap()
    assert trimmed is (sys.platform.startswith("linux") and _is_glibc())


def _is_glibc() -> bool:
    import platform

    return platform.libc_ver()[0] == "glibc"
