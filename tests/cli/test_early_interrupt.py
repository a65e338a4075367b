"""Ctrl-C while the command line is still being read (the options parsed, the command's modules imported: the
first 0.3 s of a run) is the user's stop too (issue 64): one line, status 130. Before, only a Ctrl-C inside a
command's run was caught, and one in the first 0.3 s printed a KeyboardInterrupt traceback of 14 to 34 lines
(status -2 or 1), measured by signalling `python -m verispec exact ... --verifier FILE.py:NAME` at 0.05-0.3 s."""

from __future__ import annotations

import signal

import pytest

import verispec.cli as cli


def _interrupted_while_reading(argv=None):
    raise KeyboardInterrupt


def _old_entry_point() -> None:
    """entry_point as it was (72b0aaa): only a broken pipe handled around main()."""
    import sys

    try:
        sys.exit(cli.main())
    except BrokenPipeError:
        sys.exit(141)


@pytest.fixture
def sigint_restored():
    previous = signal.getsignal(signal.SIGINT)
    yield
    signal.signal(signal.SIGINT, previous)


def test_ctrl_c_while_reading_the_command_line_is_one_line_and_130(monkeypatch, capsys, sigint_restored):
    monkeypatch.setattr(cli, "main", _interrupted_while_reading)
    with pytest.raises(SystemExit) as ended:
        cli.entry_point()
    assert ended.value.code == 130
    captured = capsys.readouterr()
    assert captured.err.splitlines() == ["verispec: interrupted"] and captured.out == ""
    assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN  # a second Ctrl-C cannot cut the line


def test_negative_control_the_old_entry_point_lets_the_traceback_through(monkeypatch, sigint_restored):
    monkeypatch.setattr(cli, "main", _interrupted_while_reading)
    with pytest.raises(KeyboardInterrupt):
        _old_entry_point()
