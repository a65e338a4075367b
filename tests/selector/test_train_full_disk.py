"""`selector train --out` on a full disk is refused before the dataset is read and the network trained (issue 64: the
save after minutes of training raised a torch RuntimeError traceback)."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest

pytest.importorskip("torch")


class WorkStarted(AssertionError):
    """The command read its dataset before it checked its output."""


def test_a_full_disk_is_refused_before_the_training(tmp_path, monkeypatch, capsys):
    import verispec.study.script_files as script_files
    from verispec.cli import main
    from verispec.selector.dataset_file import Dataset

    def started(*_args, **_kwargs):
        raise WorkStarted("the dataset was read before the output's disk was checked")

    monkeypatch.setattr(Dataset, "load", staticmethod(started))
    real = os.statvfs
    monkeypatch.setattr(script_files.os, "statvfs",
                        lambda path: SimpleNamespace(f_bavail=0, f_frsize=real(path).f_frsize))
    out = tmp_path / "s.pt"
    arguments = ["selector", "train", "--dataset", str(tmp_path / "d.npz"), "--out", str(out)]
    assert main(arguments) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and "its file system has 0 bytes free" in error[0] and not out.exists()
    # the control: without the check (the old command) the work starts on the same full disk
    monkeypatch.setattr(script_files, "check_free_space", lambda *args, **kwargs: None)
    with pytest.raises(WorkStarted):
        main(arguments)
