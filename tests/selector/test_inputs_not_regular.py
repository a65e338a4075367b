"""A dataset or a selector file that is a FIFO, a device or a folder is refused at once on one line (issue 64): a
FIFO's reader would wait in open() for a writer, for ever if none comes, and /dev/zero never ends."""

from __future__ import annotations

import os
import threading
import time

import pytest

from tests.support.timing import Stopwatch

pytest.importorskip("torch")


def test_a_dataset_or_selector_that_is_no_regular_file_is_refused_at_once(tmp_path):
    from verispec.errors import VerispecError
    from verispec.selector.dataset_file import Dataset
    from verispec.selector.selector import Selector

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with Stopwatch() as watch:
        for path in (fifo, "/dev/zero"):
            for load in (Dataset.load, Selector.load):
                with pytest.raises(VerispecError) as refusal:
                    load(path)
                assert "not a regular file" in str(refusal.value) and "\n" not in str(refusal.value)
    assert watch.within(0, 1), watch  # four refusals' CPU work (stretched by the load); a FIFO's open() waits for ever


def test_negative_control_without_the_check_the_dataset_read_waits_for_a_writer(tmp_path, monkeypatch):
    """The check switched off (the old reader), the same FIFO blocks Dataset.load in open() until a writer comes
    0.5 s later (then it reads an empty file: truncated)."""
    from tests.test_experiment_scripts_refuse_early import _late_writer
    from verispec.selector.dataset_file import Dataset, DatasetError
    from verispec.study import script_files

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    monkeypatch.setattr(script_files, "check_input", lambda *args, **kwargs: None)
    stop = threading.Event()
    writer = _late_writer(fifo, 0.5, stop)
    began = time.monotonic()
    try:
        with pytest.raises(DatasetError, match="cannot read the dataset"):
            Dataset.load(fifo)
    finally:
        stop.set()
        writer.join()
    assert time.monotonic() - began >= 0.5
