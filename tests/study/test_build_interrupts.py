"""Builds of many cells that are killed or interrupted end whole: a `selector dataset` on local processes killed
outright (SIGKILL, as an outer timeout does) left both worker processes computing 22 minutes later, reparented to
init; SIGTERM left them too and lost the rows not yet saved. Each build here runs in a process of its own, as a
user runs it, and the test looks for its worker processes in /proc (Linux: the workers watch their parent through
the kernel's parent-death signal)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from verispec.study.cells import run_cell
from verispec.study.grid import SweepGrid, cell_key
from verispec.study.sweep import run_sweep

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads processes from /proc")]


def _parents() -> dict[int, tuple[int, str]]:
    """{pid: (parent pid, state)} of every process, from /proc."""
    table = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                text = Path(f"/proc/{name}/stat").read_text()
            except OSError:
                continue
            state, parent = text[text.rindex(")") + 2:].split()[:2]
            table[int(name)] = (int(parent), state)
    return table


def _descendants(root: int) -> set[int]:
    table, found, grew = _parents(), {root}, True
    while grew:
        grew = False
        for pid, (parent, _) in table.items():
            if parent in found and pid not in found:
                found.add(pid)
                grew = True
    return found - {root}


def _running(pids: set[int]) -> set[int]:
    """The processes of ``pids`` still running (a killed process stays a zombie until it is reaped)."""
    table = _parents()
    return {pid for pid in pids if pid in table and table[pid][1] != "Z"}


def _start(argv: list[str], cwd: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "verispec", *argv], cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _wait_for(condition, seconds: float, what: str):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"gave up waiting for {what} after {seconds:g} s")


def _end(build: subprocess.Popen, workers: set[int]) -> None:
    """Kill what a failed test left: the build and the workers it had (an orphan holds the build's output pipes
    open, so reading them would wait for it)."""
    build.kill()
    for pid in _running(workers | _descendants(build.pid)):
        os.kill(pid, signal.SIGKILL)
    build.communicate()


def test_a_killed_dataset_build_leaves_no_worker(tmp_path):
    """SIGKILL (no handler runs) of a `selector dataset` on two local processes: its workers end within a few
    seconds on their own."""
    build = _start(["selector", "dataset", "--family", "markov", "--vocab", "3", "--seeds", "0-39", "--backend",
                    "local", "--jobs", "2", "--out", str(tmp_path / "data.npz")], tmp_path)
    workers: set[int] = set()
    try:
        workers = _wait_for(lambda: len(_descendants(build.pid)) >= 2 and _descendants(build.pid), 60,
                            "the build's two worker processes")
        time.sleep(0.5)  # labelling
        assert build.poll() is None and _running(workers) == workers
        build.kill()
        build.wait()
        left = _wait_for(lambda: not _running(workers) or None, 5, f"workers {sorted(_running(workers))} to end")
        assert left
    finally:
        _end(build, workers)


def test_a_terminated_sweep_ends_whole_and_resumes_without_duplicated_or_dropped_rows(tmp_path):
    """SIGTERM once the first rows are saved: the sweep stops its workers, saves what arrived, says on one line how
    to resume, and exits with 128 + 15. Its row store then holds each finished cell once, under its own key, with
    the values a fresh computation gives; the rerun computes exactly the cells missing and keeps the others as
    they were."""
    # 90 cells (about 4 s on a quiet box): 30 of them once finished in 1.3 s, before the signal could land
    grid = SweepGrid(families=("markov",), vocab_sizes=(3,), seeds=tuple(range(30)), trees=("chain:9",),
                     verifiers=("traversal", "gbv", "bv"))
    out = tmp_path / "sweep.csv"
    store = out.with_name(out.name + ".cells.json")
    build = _start(["sweep", "--families", "markov", "--vocab", "3", "--seeds", "0-29", "--trees", "chain:9",
                    "--verifiers", "traversal,gbv,bv", "--backend", "local", "--jobs", "2", "--out", str(out)],
                   tmp_path)
    workers: set[int] = set()
    try:
        _wait_for(store.exists, 60, "the first rows")
        workers = _descendants(build.pid)
        build.send_signal(signal.SIGTERM)
        _, error = build.communicate(timeout=30)
        assert build.returncode == 128 + signal.SIGTERM, error
        assert error.strip().splitlines() == ["verispec: interrupted by SIGTERM: the finished cells are kept in the "
                                              "row store; run the same command again to resume"]
        _wait_for(lambda: not _running(workers) or None, 5, "the workers to end")
    finally:
        _end(build, workers)
    cells, _ = grid.cells()
    saved = json.loads(store.read_text())["rows"]
    keys = [row["key"] for row in saved]
    assert 0 < len(saved) < len(cells) and len(set(keys)) == len(keys)
    for row in saved:  # each under its own cell's key, with a fresh computation's values
        cell = {name: value for name, value in row.items() if name in cells[0] or name == "file_sha256"}
        assert row["key"] == cell_key(cell)
    for row in saved[:3]:
        fresh = run_cell({name: value for name, value in row.items() if name in cells[0]})
        assert row["tau_law"] == fresh["tau_law"] and row["block_efficiency"] == fresh["block_efficiency"]
    before = {row["key"]: {name: value for name, value in row.items() if name != "key"} for row in saved}
    rows = run_sweep(grid, out, backend="serial", progress=False)
    assert (rows.computed, rows.reused) == (len(cells) - len(saved), len(saved))
    assert len(rows) == len(cells) and sorted(rows.keys) == sorted(cell_key(cell) for cell in cells)
    assert all(before[key] == row for key, row in zip(rows.keys, rows) if key in before)
