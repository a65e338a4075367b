"""Timing and peak-memory helpers shared by the benchmark scripts (imported as a sibling module)."""

from __future__ import annotations

import argparse
import statistics
import time
import tracemalloc
from pathlib import Path

from verispec.io import ResultStore
from verispec.simulator import analyze


def run_arguments(description: str, default_output: str, argv=None, parameters: dict | None = None):
    """The options every benchmark takes (--output, --quick, --fresh) and its resumable result store.

    ``parameters``: what the rows depend on besides their keys (problem generator, seed, divergence,
    methods); recorded in the file with the script's name, and a file from another setting is refused."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--output", default=default_output)
    parser.add_argument("--quick", action="store_true", help="a small grid")
    parser.add_argument("--fresh", action="store_true", help="discard saved rows and start over")
    args = parser.parse_args(argv)
    path = Path(args.output)
    if args.fresh and path.exists():
        path.unlink()
    recorded = {"benchmark": Path(default_output).stem, **(parameters or {})}
    return args, path, ResultStore(path, parameters=recorded)


def median_us(call, repeats: int, evict=None) -> float:
    """The median of ``repeats`` timed calls of ``call`` after one untimed warm-up, in microseconds; ``evict``
    (untimed) runs before each timed call, as a model's forward would leave the caches."""
    call()
    times = []
    for _ in range(repeats):
        if evict is not None:
            evict()
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e6


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


def publish_table(path, caption: str, columns: list[str], rows: list[list]) -> str:
    """A markdown table (``caption``, a blank line, the header and one line per row of formatted cells), written
    atomically to ``path`` and printed; returns its text."""
    from verispec.io import atomic_write_text

    lines = [caption, "", "| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    text = "\n".join(lines) + "\n"
    atomic_write_text(Path(path), text)
    print(text)
    return text
