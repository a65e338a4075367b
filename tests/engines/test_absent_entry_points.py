"""A check of an entry point the installed release predates (``Check.since``) is an ABSENT row that runs nothing:
one line naming the release it needs, no verdict on the law, and an exit status that counts it for nothing unless
nothing else was asked (then nothing was checked: exit 2, never a LOSSLESS)."""

from __future__ import annotations

from types import SimpleNamespace

from verispec.engines import Check
from verispec.engines.check import exit_status, row_line, run_check
from verispec.verdict import EXIT_BAD_INPUT


def _adapter(release: str):
    return SimpleNamespace(PACKAGE="engine", THRESHOLD=1e-6, release=lambda: release)


#: A function that cannot be loaded: an ABSENT row must not even load it.
NEWER = Check("newer", "an entry point of 2.0", "no.such.module:function", "added in 2.0", since="2.0.0")


def _row(release: str) -> dict:
    return run_check(_adapter(release), NEWER, engine="engine", tree=None, problem=None, mode="exact",
                     detect_tv=0.01, alpha=1e-6, time_budget=10)


def test_an_older_release_gets_an_absent_row_naming_the_release_it_needs():
    row = _row("1.9.3")
    assert row["verdict"] == "ABSENT" and row["as_expected"] and row.get("tv_distance") is None
    assert "2.0.0" in row["note"] and "1.9.3" in row["note"]
    assert row_line(row).strip().startswith("newer") and "ABSENT" in row_line(row)


def test_the_release_that_has_it_runs_the_check():
    import pytest

    with pytest.raises(Exception, match="no.such|No module"):  # it loads the function: the check runs
        _row("2.0.0")


def test_absent_rows_count_for_nothing_unless_nothing_else_was_asked():
    absent = _row("1.0.0")
    lossless = {"verdict": "LOSSLESS", "as_expected": True}
    lossy = {"verdict": "LOSSY", "as_expected": False}
    assert exit_status([absent]) == EXIT_BAD_INPUT
    assert exit_status([absent, lossless]) == 0
    assert exit_status([absent, lossy]) == 1
