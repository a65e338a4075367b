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


# --- result files (issue 55: the README's "How fast" table is generated from them, no number typed by hand) -------

#: The variables that cap the BLAS and OpenMP pools under numpy and torch: a result file records them.
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


class RunStart:
    """What ``start_record`` saw when a benchmark began: the run's record and the clock (``write_result`` adds the
    seconds since)."""

    def __init__(self, record: dict, started: float):
        self.record, self.started = record, started


def start_record(script: str, argv=None, inputs=(), *, threads: int | None = None, result=None) -> RunStart:
    """The record of a benchmark run, taken at its START (so the load average is the box's before the run adds its
    own): ``verispec.provenance.run_record`` of the command ``python benchmarks/SCRIPT ARGV`` (``argv`` None: this
    process's ``sys.argv[1:]``), ``inputs`` (files whose SHA-256 is recorded) and ``threads`` (the torch threads the
    run pins; None: not a torch run), plus the thread caps in the environment (``THREAD_VARIABLES``). ``result``: the
    file ``write_result`` will write, refused here, before any work, when a file that is not a result file is there
    (``verispec.provenance.check_result_output``).

    Two steps, because the record must be taken before the work and the file written after it::

        started = start_record("bench_x.py", argv) if args.result else None
        ...  # the measurement
        if started:
            write_result(args.result, started, {"unit": "s", "rows": rows})
    """
    import os
    import shlex
    import sys

    from verispec.provenance import check_result_output, run_record

    if result is not None:
        from verispec.errors import VerispecError

        try:
            check_result_output(result)
        except VerispecError as error:  # one line, as verispec's commands refuse
            raise SystemExit(f"{Path(script).name}: --result {error}") from None
    argv = sys.argv[1:] if argv is None else [str(argument) for argument in argv]
    record = run_record(f"python benchmarks/{Path(script).name} {shlex.join(argv)}".rstrip(), inputs,
                        threads=threads)
    record["thread_caps"] = {name: os.environ.get(name) for name in THREAD_VARIABLES}
    return RunStart(record, time.perf_counter())


def write_result(path, started: RunStart, values: dict) -> dict:
    """Write the result file ``path`` atomically (``verispec.io.atomic_write_json``): ``{"record": the run's record
    plus "seconds" (wall seconds since ``start_record``), **values}``; returns what it wrote.

    By convention ``values`` holds ``benchmark`` (the script's stem), ``unit`` and ``rows``: one dict per measured
    case with ``now``, ``before`` (None where this run measured no before), ``ratio`` (before / now, None likewise)
    in ``unit``, the sizes that case measured, and, where "before" is an older checkout, ``before_commit``."""
    from verispec.io import atomic_write_json

    data = {"record": {**started.record, "seconds": round(time.perf_counter() - started.started, 3)}, **values}
    atomic_write_json(Path(path), data)
    print(f"result: {path}")
    return data


def comparison(now: float, before: float | None, **sizes) -> dict:
    """One row of a result file: ``sizes`` (what was measured), then ``now``, ``before`` and ``ratio`` =
    before / now (None without a before)."""
    ratio = None if before is None or not now else before / now
    return {**sizes, "now": now, "before": before, "ratio": ratio}


def checkout_commit(folder) -> str | None:
    """The commit a checkout (a git worktree of an older commit, a benchmark's baseline) is at; None outside git."""
    from verispec.provenance import commit_of

    return commit_of(folder, mark_dirty=False)
