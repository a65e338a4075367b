"""The checks a long script runs before any work (``verispec.study.script_files``, issue 64): numbers in range,
inputs that are regular files, outputs writable with room on their disk, the run's own, and one run at a time."""

from __future__ import annotations

import fcntl
import math
import os
import time
from types import SimpleNamespace

import pytest

from verispec.errors import OutputError, ResultStoreError, VerispecError
from verispec.files.io import ResultStore
from verispec.files.store_lock import lock_path
from verispec.study import script_files
from verispec.study.script_files import RunOutputs, check_free_space, check_input, check_ranges, is_row_store


@pytest.mark.parametrize("value, words", [
    (100000, "--threads 100000 is out of range: give a whole number from 1 to 64"), (0, "--threads 0 is out of range"),
    (-3, "--threads -3 is out of range"), (math.nan, "--threads nan is out of range: give a number from 1 to 64"),
    (math.inf, "--threads inf"), (True, "--threads True")])
def test_a_number_out_of_its_range_is_one_line_naming_it_and_the_range(value, words):
    with pytest.raises(VerispecError) as refusal:
        check_ranges([("--threads", value, 1, 64)])
    assert str(refusal.value).startswith(words) and "\n" not in str(refusal.value)


def test_a_lower_end_the_value_must_exceed():
    """A width, a price, a budget: 0 is refused as out of range, the smallest positive number passes."""
    with pytest.raises(VerispecError, match=r"--time-budget 0.0 is out of range: give a number above 0 and at most 5"):
        check_ranges([("--time-budget", 0.0, script_files.Above(0), 5)])
    with pytest.raises(VerispecError, match=r"--epsilon -1.0 is out of range: give a number above 0$"):
        check_ranges([("--epsilon", -1.0, script_files.Above(0), None)])
    check_ranges([("--epsilon", 5e-324, script_files.Above(0), None)])


def test_numbers_in_range_and_options_left_out_pass():
    """The control: the same check passes every value inside [low, high], at both ends, and an option left out."""
    check_ranges([("--threads", 1, 1, 64), ("--threads", 64, 1, 64), ("--budget", 0.5, 0, None), ("--x", None, 1, 2),
                  ("--seed", -5, None, 0)])


def test_an_input_that_is_not_a_regular_file_is_refused_at_once(tmp_path):
    """A FIFO (whose reader would wait in open() for ever), a device, a folder, a missing file: one line each, at
    once; a regular file passes (the control)."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    cases = {fifo: "is a FIFO (named pipe), not a regular file",
             "/dev/zero": "is a character device, not a regular file",
             tmp_path: "is a folder, not a regular file", tmp_path / "none": "does not exist"}
    began = time.monotonic()
    for path, words in cases.items():
        with pytest.raises(VerispecError) as refusal:
            check_input(path, "the dataset")
        assert words in str(refusal.value) and "\n" not in str(refusal.value)
    assert time.monotonic() - began < 1
    regular = tmp_path / "d.npz"
    regular.write_bytes(b"x")
    check_input(regular, "the dataset")


def test_a_full_disk_is_found_before_the_work(tmp_path, monkeypatch):
    """The file system's free space (statvfs) below what the run may write: one line naming the output; the same
    check passes with room to spare (the control, on the real disk of tmp_path)."""
    out = tmp_path / "out.json"
    check_free_space([out], "--out")
    real = os.statvfs

    def full(path):
        status = real(path)
        return SimpleNamespace(f_bavail=10, f_frsize=status.f_frsize)

    monkeypatch.setattr(script_files.os, "statvfs", full)
    with pytest.raises(OutputError, match="its file system has .* free, less than the 16 MiB"):
        check_free_space([out], "--out")


def test_the_outputs_are_the_runs_own_and_locked_for_it(tmp_path):
    """A table of the user's beside the store is refused and kept; once the store recorded writing a table there,
    the next run may replace it; a file that is no row store at the store's path is refused; a second writer
    holding the lock is refused."""
    import contextlib

    store_path, table = tmp_path / "rows.json", tmp_path / "rows.md"
    outputs = RunOutputs("--output", store=store_path, tables=[table])
    table.write_text("my notes\n")
    with contextlib.ExitStack() as held, pytest.raises(OutputError, match="is not a file this script wrote"):
        outputs.claim(held)
    assert table.read_text() == "my notes\n"
    table.unlink()
    with contextlib.ExitStack() as held:  # the run writes its table through the store
        outputs.claim(held)
        store = ResultStore(store_path, parameters={"run": 1})
        store.add("a", {"value": 1})
        outputs.write_text(store, table, "| a | 1 |\n")
    with contextlib.ExitStack() as held:  # the rerun may replace it: the store recorded its digest
        outputs.claim(held)
    table.write_text("| a | 1 | edited by hand |\n")  # edited since: not the run's any more
    with contextlib.ExitStack() as held, pytest.raises(OutputError, match="is not a file this script wrote"):
        outputs.claim(held)
    table.unlink()
    assert is_row_store(store_path)
    foreign = tmp_path / "foreign.json"
    foreign.write_text('{"my": "settings"}')
    assert not is_row_store(foreign)
    with contextlib.ExitStack() as held, pytest.raises(ResultStoreError, match="is not a row store"):
        RunOutputs("--output", store=foreign).claim(held)
    assert foreign.read_text() == '{"my": "settings"}'
    # another run holds the store's lock (flock is per open file: a second open of the lock file conflicts)
    handle = os.open(lock_path(store_path), os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with contextlib.ExitStack() as held, pytest.raises(ResultStoreError, match="is being written by another run"):
            outputs.claim(held)
    finally:
        os.close(handle)
    with contextlib.ExitStack() as held:  # the control: released, the same claim passes
        outputs.claim(held)


def test_two_outputs_that_are_one_file_are_refused(tmp_path):
    """real_decoding --summary naming its --output: the table would be written over the row store. The control:
    distinct paths pass."""
    import contextlib

    store = tmp_path / "rows.json"
    with contextlib.ExitStack() as held, pytest.raises(OutputError, match="are one file"):
        RunOutputs("--output", store=store, tables=[tmp_path / "sub" / ".." / "rows.json"]).claim(held)
    with contextlib.ExitStack() as held:
        RunOutputs("--output", store=store, tables=[tmp_path / "rows.md"]).claim(held)


def test_run_script_turns_an_error_of_the_run_into_one_line(capsys):
    """Any VerispecError of the body (a save on a disk that filled up mid-run) is one line and exit status 2."""

    def body(_held):
        raise OutputError("cannot write 'x.json' (No space left on device);\nchoose a writable location")

    assert script_files.run_script("demo", body) == 2
    assert capsys.readouterr().err == ("demo: error: cannot write 'x.json' (No space left on device); choose a "
                                       "writable location\n")
    assert script_files.run_script("demo", lambda _held: 0) == 0
