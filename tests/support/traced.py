"""``verispec`` run in the test's own process with its time and traced allocations measured: the refusal tests of
declared sizes (issues 31 and 54) assert that a command refuses fast and before it allocates what a file declares."""

from __future__ import annotations

import time
import tracemalloc

from verispec.cli import main


def traced_main(capsys, argv) -> tuple[int, str, str, float, int]:
    """(exit status, stdout, stderr, seconds, peak traced bytes) of ``verispec argv`` in this process."""
    capsys.readouterr()
    tracemalloc.start()
    start = time.perf_counter()
    try:
        code = main([str(part) for part in argv])
    finally:
        elapsed = time.perf_counter() - start
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    out, err = capsys.readouterr()
    return code, out, err, elapsed, peak
