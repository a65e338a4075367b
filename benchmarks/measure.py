"""Timing and peak-memory helpers shared by the benchmark scripts (imported as a sibling module)."""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time
import tracemalloc
from pathlib import Path

from verispec.files.io import ResultStore
from verispec.simulator import analyze


def run_arguments(description: str, default_output: str, argv=None, parameters: dict | None = None,
                  script: str = "benchmark"):
    """The options every benchmark of a resumable store takes (--output, --quick, --fresh, --overwrite) and its
    store, claimed (``claim_outputs``) with the Markdown table written beside it (``OUTPUT.md``).

    ``parameters``: what the rows depend on besides their keys (problem generator, seed, divergence,
    methods); recorded in the file with the script's name, and a file from another setting is refused.
    ``--fresh`` discards the store's rows, but only of a store verispec wrote: it used to delete whatever
    --output named (a file of the user's, and the .md beside it was then replaced too)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--output", default=default_output)
    parser.add_argument("--quick", action="store_true", help="a small grid")
    parser.add_argument("--fresh", action="store_true", help="discard saved rows and start over")
    add_overwrite_option(parser)
    args = parser.parse_args(argv)
    path = Path(args.output)
    claim_outputs(script, [("--output", path, STORE), ("--output (its table)", path.with_suffix(".md"), TABLE)],
                  overwrite=args.overwrite)
    recorded = {"benchmark": Path(default_output).stem, **(parameters or {})}
    return args, path, open_store(script, path, recorded, fresh=args.fresh or args.overwrite)


def open_store(script: str, path, parameters: dict, *, fresh: bool = False) -> ResultStore:
    """The resumable row store at ``path`` (claimed first: ``claim_outputs``), its rows discarded with ``fresh``
    (the first row replaces the file, atomically); a store of other parameters refused on one line."""
    from verispec.errors import ResultStoreError

    try:
        return _Store(script, path, parameters=parameters, overwrite=fresh)
    except ResultStoreError as error:
        refuse(script, f"{error}; or pass --fresh to start over")


class _Store(ResultStore):
    """A benchmark's row store: a save that fails (a disk filled during the run) ends the run on one line, status 2,
    its saved rows kept for a rerun, not with a traceback."""

    def __init__(self, script: str, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.script = script

    def add_many(self, rows, *, outputs=None) -> None:
        with _one_line(self.script):
            super().add_many(rows, outputs=outputs)


# --- the writers' rule (issue 64): a benchmark replaces only its own files, atomically, one run at a time -------

#: What a benchmark writes: a Markdown table, a JSON file of rows, a row store, a result file (``write_result``).
TABLE, ROWS, STORE, RESULT = "table", "rows", "store", "result"
#: The ``written_by`` kinds of a benchmark's JSON rows and result files.
ROWS_KIND, RESULT_KIND = "benchmark rows", "benchmark result"

#: Outputs this process claimed (resolved path -> kind): checked, and locked until the process ends.
_CLAIMED: dict[str, str] = {}


def add_overwrite_option(parser) -> None:
    parser.add_argument("--overwrite", action="store_true",
                        help="replace output files that verispec cannot show a benchmark wrote (by default refused)")


def refuse(script: str, message: str):
    """End the benchmark with one line on stderr and status 2 (bad input), as verispec's commands refuse."""
    import sys

    print(f"{Path(script).name}: error: {' '.join(str(message).split())}", file=sys.stderr)
    raise SystemExit(2)


def _output_kind(kind: str):
    from verispec.files.io import MARKDOWN_OUTPUT, ROW_STORE_OUTPUT, OutputKind, marked_json

    return {TABLE: MARKDOWN_OUTPUT, ROWS: OutputKind("benchmark's JSON file (with the written_by marker)",
                                                     marked_json(ROWS_KIND), example="rows.json"),
            STORE: ROW_STORE_OUTPUT,
            RESULT: OutputKind("benchmark's result file (the written_by marker, or a record of a benchmarks/ "
                               "command)", _is_benchmark_result, example="result.json")}[kind]


def _is_benchmark_result(path: Path) -> bool:
    """A result file a benchmark wrote: its marker, or (written before the marker) a record naming a
    ``python benchmarks/`` command (``start_record``)."""
    from verispec.files.io import json_marker, read_user_file
    from verispec.files.provenance import MAX_RESULT_BYTES, is_marked

    if is_marked(json_marker(path, MAX_RESULT_BYTES), RESULT_KIND):
        return True
    import json

    data = json.loads(read_user_file(path, limit=MAX_RESULT_BYTES, what="the file", regular_only=True))
    command = data.get("record", {}).get("command") if isinstance(data, dict) else None
    return isinstance(command, str) and command.startswith("python benchmarks/")


def claim_outputs(script: str, outputs, *, overwrite: bool = False) -> None:
    """Claim a benchmark's output files before any work: ``outputs`` lists (option, path or None, kind). Each
    path must be writable (not a folder, a FIFO, a read-only file), the paths distinct, and an existing file must
    be one a benchmark wrote of that kind (its marker, ``TABLE`` ... ``RESULT``) unless ``overwrite``; then each
    is locked (``verispec.files.store_lock``) until the process ends, so a second run writing the same file is refused
    naming the first. Any refusal is one line, status 2 (``refuse``)."""
    import os

    from verispec.errors import VerispecError
    from verispec.files.io import check_output
    from verispec.files.store_lock import acquire

    claimed = [(option, Path(path), kind) for option, path, kind in outputs if path is not None]
    seen: dict[str, str] = {}
    for option, path, _ in claimed:
        key = os.path.realpath(path)
        if key in seen:
            refuse(script, f"{option} {str(path)!r} is also {seen[key]}: one file cannot hold both; give "
                           "another path")
        seen[key] = option
    try:
        for option, path, kind in claimed:
            check_output(path, _output_kind(kind), what=option, overwrite=overwrite)
        for option, path, kind in claimed:
            acquire(path, f"python benchmarks/{Path(script).name}", what="output")
            check_output(path, _output_kind(kind), what=option, overwrite=overwrite)  # as the lock's holder finds it
            _CLAIMED[os.path.realpath(path)] = kind
    except VerispecError as error:
        refuse(script, error)


def parse_decoding_run(parser, argv, script: str, default_output: str):
    """A decoding benchmark's command line: ``parser`` with --output (a resumable row store, default
    ``default_output``), --result and --overwrite added, parsed, its outputs claimed before any work
    (``claim_run_outputs``) and the hub kept offline (models come from disk); returns (args, the store's path)."""
    import os

    parser.add_argument("--output", default=default_output, help="the rows (a resumable store)")
    parser.add_argument("--result", default=None, help="also write the summary with the run's record here")
    add_overwrite_option(parser)
    args = parser.parse_args(argv)
    output = claim_run_outputs(script, args)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    return args, output


def claim_run_outputs(script: str, args) -> Path:
    """A decoding benchmark's outputs, claimed before any work (``claim_outputs``): the row store ``args.output``, its
    table (``.md``) and summary (``.summary.json``) beside it, and ``args.result``; returns the store's path."""
    output = Path(args.output)
    claim_outputs(script, [("--output", output, STORE), ("--output (its table)", output.with_suffix(".md"), TABLE),
                           ("--output (its summary)", output.with_suffix(".summary.json"), ROWS),
                           ("--result", args.result, RESULT)], overwrite=args.overwrite)
    return output


def _claim_unclaimed(path, kind: str) -> None:
    """A writer called for a path its script did not claim: claimed now, without --overwrite (never a user's file
    replaced because a script forgot to claim it)."""
    import os
    import sys

    if os.path.realpath(path) not in _CLAIMED:
        claim_outputs(sys.argv[0] if sys.argv and sys.argv[0] else "benchmark", [("the output", path, kind)])


def write_table(path, text: str) -> None:
    """Write a benchmark's Markdown ``text`` to ``path`` atomically, its first line verispec's marker (so a rerun
    can show it wrote the file it replaces)."""
    from verispec.files.io import atomic_write_text
    from verispec.files.provenance import markdown_marker

    _claim_unclaimed(path, TABLE)
    with _one_line():
        atomic_write_text(Path(path), f"{markdown_marker('benchmark')}\n{text}")


def write_rows(path, data: dict) -> None:
    """Write a benchmark's JSON ``data`` (an object) to ``path`` atomically, with the marker of ``ROWS_KIND``."""
    import json

    from verispec.files.io import atomic_write_text
    from verispec.files.provenance import MARKER_KEY, written_by

    _claim_unclaimed(path, ROWS)
    with _one_line():
        atomic_write_text(Path(path), json.dumps({**data, MARKER_KEY: written_by(ROWS_KIND, "benchmark")}, indent=1)
                          + "\n")


@contextlib.contextmanager
def _one_line(script: str | None = None):
    """A write that fails on the way (a full disk, a folder made read-only during the run) ends the benchmark
    (``script``, by default this process's) on one line, status 2 (``refuse``), instead of a traceback after its
    work."""
    import sys

    from verispec.errors import VerispecError

    try:
        yield
    except VerispecError as error:
        refuse(script or (sys.argv[0] if sys.argv and sys.argv[0] else "benchmark"), error)


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
    to ``path`` (``write_table``) and printed; returns its text."""
    lines = [caption, "", "| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    text = "\n".join(lines) + "\n"
    write_table(path, text)  # marked, atomic; refused over a file that is not a benchmark's table
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


def start_record(script: str, argv=None, inputs=(), *, threads: int | None = None, result=None,
                 overwrite: bool = False) -> RunStart:
    """The record of a benchmark run, taken at its START (so the load average is the box's before the run adds its
    own): ``verispec.files.provenance.run_record`` of the command ``python benchmarks/SCRIPT ARGV`` (``argv`` None: this
    process's ``sys.argv[1:]``), ``inputs`` (files whose SHA-256 is recorded) and ``threads`` (the torch threads the
    run pins; None: not a torch run), plus the thread caps in the environment (``THREAD_VARIABLES``). ``result``: the
    file ``write_result`` will write, claimed here before any work (``claim_outputs``: a file there that is not a
    benchmark's result file is refused unless ``overwrite``, and the file is locked for the run).

    Two steps, because the record must be taken before the work and the file written after it::

        started = start_record("bench_x.py", argv) if args.result else None
        ...  # the measurement
        if started:
            write_result(args.result, started, {"unit": "s", "rows": rows})
    """
    import os
    import shlex
    import sys

    from verispec.files.provenance import run_record

    if result is not None and os.path.realpath(result) not in _CLAIMED:  # else its script claimed it already
        claim_outputs(script, [("--result", result, RESULT)], overwrite=overwrite)
    argv = sys.argv[1:] if argv is None else [str(argument) for argument in argv]
    record = run_record(f"python benchmarks/{Path(script).name} {shlex.join(argv)}".rstrip(), inputs,
                        threads=threads)
    record["thread_caps"] = {name: os.environ.get(name) for name in THREAD_VARIABLES}
    return RunStart(record, time.perf_counter())


def write_result(path, started: RunStart, values: dict) -> dict:
    """Write the result file ``path`` atomically (``verispec.files.io.atomic_write_json``): ``{"record": the run's
    record
    plus "seconds" (wall seconds since ``start_record``), **values}``; returns what it wrote.

    By convention ``values`` holds ``benchmark`` (the script's stem), ``unit`` and ``rows``: one dict per measured
    case with ``now``, ``before`` (None where this run measured no before), ``ratio`` (before / now, None likewise)
    in ``unit``, the sizes that case measured, and, where "before" is an older checkout, ``before_commit``."""
    from verispec.files.io import atomic_write_json
    from verispec.files.provenance import MARKER_KEY, written_by

    _claim_unclaimed(path, RESULT)
    data = {"record": {**started.record, "seconds": round(time.perf_counter() - started.started, 3)}, **values,
            MARKER_KEY: written_by(RESULT_KIND, "benchmark")}
    with _one_line():
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
    from verispec.files.provenance import commit_of

    return commit_of(folder, mark_dirty=False)
