"""Timing and peak-memory helpers shared by the benchmark scripts (imported as a sibling module)."""

from __future__ import annotations

import time
import tracemalloc

from verispec.simulator import analyze


def timed_analysis(*args, **kwargs):
    """(ExactResult, wall seconds) of one ``analyze`` call."""
    start = time.perf_counter()
    value = analyze(*args, **kwargs)
    return value, time.perf_counter() - start


def peak_memory_of_analysis(*args, **kwargs) -> int:
    """Peak bytes allocated (tracemalloc, numpy included) during one ``analyze`` call."""
    tracemalloc.start()
    try:
        analyze(*args, **kwargs)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
