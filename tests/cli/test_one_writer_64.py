"""One run at a time writes a command's one output file (issue 64's writers' rule, 'one writer at a time'): `derive
--output`, `latency --out` and `selector train --out` hold the output's lock (verispec.files.store_lock) from before
their
work to the write, so a second run into the same file is refused on one line naming the first, before it loads a
model or a dataset. Before, two runs into one file both exited 0 and the file held the later one's result (three
concurrent derives with different contexts: 3 x 'wrote', one problem kept)."""

from __future__ import annotations

import os
import subprocess
import sys
from contextlib import nullcontext

import pytest

import verispec.files.store_lock
from verispec.cli import main

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HOLD = ("import sys, time\nfrom verispec.files.store_lock import store_lock\nwith store_lock(sys.argv[1]):\n"
        "    print('held', flush=True)\n    time.sleep(60)\n")


class WorkStarted(BaseException):
    """The command began its work while another run held its output."""


def _started(*_args, **_kwargs):
    raise WorkStarted


@pytest.fixture
def holder(tmp_path):
    """Another process holding the lock of tmp_path/out (a run in progress)."""
    out = tmp_path / "out"
    process = subprocess.Popen([sys.executable, "-c", HOLD, str(out)], stdout=subprocess.PIPE, text=True,
                               cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT})
    try:
        assert process.stdout.readline().strip() == "held"
        yield out, process.pid
    finally:
        process.kill()
        process.wait()


def _command(name: str, out: str, tmp_path, monkeypatch) -> list[str]:
    models = ["--target", str(tmp_path / "t"), "--draft", str(tmp_path / "d")]
    if name == "derive":
        import verispec.cli.derive as module

        monkeypatch.setattr(module, "model_problem", _started)
        return ["derive", *models, "--context", "a", "--vocab", "3", "--depth", "1", "--output", out]
    if name == "latency":
        import verispec.cli.latency as module

        monkeypatch.setattr(module, "load_pair", _started)
        return ["latency", *models, "--out", out]
    from verispec.selector.dataset_file import Dataset

    monkeypatch.setattr(Dataset, "load", staticmethod(_started))
    return ["selector", "train", "--dataset", str(tmp_path / "d.npz"), "--out", out]


@pytest.mark.parametrize("name", ["derive", "latency", "selector train"])
def test_a_second_run_into_one_output_is_refused_before_its_work(name, holder, tmp_path, monkeypatch, capsys):
    if name == "selector train":
        pytest.importorskip("torch")
    out, pid = holder
    arguments = _command(name, str(out), tmp_path, monkeypatch)
    assert main(arguments) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and "is being written by another run" in error[0] and f"pid {pid}" in error[0], error
    assert not out.exists()
    # the negative control: without the lock (the old commands) the second run goes on to its work
    monkeypatch.setattr(verispec.files.store_lock, "store_lock", lambda *args, **kwargs: nullcontext())
    with pytest.raises(WorkStarted):
        main(arguments)
