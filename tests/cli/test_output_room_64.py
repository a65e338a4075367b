"""A full disk at a command's one output is found before the work (issue 64), not at the write after it: `derive`
(the pair loaded and the problem derived: 6.7 s on the tiny pair, minutes on a real one), `latency` (the pair
loaded and timed: 7.6 s), `hunt --output` and `check-external --output` (a search of up to --time-budget). Each
was measured on a full 256 KiB tmpfs before the fix: the right one line, exit 2, but after the work. Here the
file system reports 0 bytes free, and the command's first work is a sentinel that fails the test if reached."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest

import verispec.study.script_files as script_files
from verispec.cli import main


class WorkStarted(BaseException):
    """The command began its work before it checked its output's disk (a BaseException, which no command's handling
    of a user's rule that raised takes for the rule's)."""


def _started(*_args, **_kwargs):
    raise WorkStarted("the work began before the output's disk was checked")


def _sentinel(monkeypatch, command: str) -> None:
    """Replace the first piece of work of ``command`` by the sentinel."""
    if command == "derive":
        import verispec.cli.derive as module

        monkeypatch.setattr(module, "model_problem", _started)
    elif command == "latency":
        import verispec.cli.latency as module

        monkeypatch.setattr(module, "load_pair", _started)
    elif command == "hunt":
        import verispec.hunt

        monkeypatch.setattr(verispec.hunt, "hunt", _started)
    else:
        import verispec.external.check

        monkeypatch.setattr(verispec.external.check, "check_external", _started)


def _arguments(command: str, out: str, tmp_path) -> list[str]:
    models = ["--target", str(tmp_path / "t"), "--draft", str(tmp_path / "d")]
    return {
        "derive": ["derive", *models, "--context", "a", "--vocab", "3", "--depth", "1", "--output", out],
        "latency": ["latency", *models, "--out", out],
        "hunt": ["hunt", "--verifier", "specinfer", "--tree", "chain:1", "--output", out],
        "check-external": ["check-external", "tests/support/external_rules.py:token_level", "--layout", "chain",
                           "--tree", "chain:1", "--output", out],
    }[command]


@pytest.mark.parametrize("command", ["derive", "latency", "hunt", "check-external"])
def test_a_full_disk_is_refused_before_the_work(command, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    monkeypatch.setenv("VERISPEC_SUPERVISE", "0")  # the sentinel is in this process
    _sentinel(monkeypatch, command)
    real = os.statvfs
    monkeypatch.setattr(script_files.os, "statvfs",
                        lambda path: SimpleNamespace(f_bavail=0, f_frsize=real(path).f_frsize))
    out = tmp_path / "out.json"
    arguments = _arguments(command, str(out), tmp_path)
    assert main(arguments) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and "its file system has 0 bytes free" in error[0] and not out.exists(), error
    # the control: without the check (the old command) the work starts on the same full disk
    monkeypatch.setattr(script_files, "check_free_space", lambda *args, **kwargs: None)
    with pytest.raises(WorkStarted):
        main(arguments)
