"""Issue 64: a failure inside verispec itself is never a verdict. Python ends a process that raises with status 1,
which verispec's checks use for LOSSY, so a bug in a check read as 'lossy' (and in a supervised worker the same 1
was reported). Now: the traceback, one line saying it is verispec's bug, status 70. The bug is put into the command
as a C-level callable (``operator.truediv`` bound to 1, which raises TypeError on the parsed options), so no frame
of the test's own code is on the traceback, as in a real bug; a rule's own exception stays its one line (status 2).
Negative control: the same bug without the entry point's handler (Python's default) exits 1."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOY = ["--target", "1/2,1/2", "--draft", "1/2,1/2", "--tree", "chain:1"]
BUG = ("import functools, operator, sys; from verispec.cli import COMMANDS, entry_point, main; "
       "COMMANDS['exact'].run = functools.partial(operator.truediv, 1); ")


def _run(code: str, *arguments: str, **env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code, *arguments], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, PYTHONPATH=str(ROOT), **env), cwd=ROOT)


@pytest.mark.parametrize("verifier,supervise", [("specinfer", "1"), ("examples/my_rules.py:my_rule", "1"),
                                                ("examples/my_rules.py:my_rule", "0")])
def test_a_bug_in_verispec_is_status_70_never_lossy(verifier, supervise):
    done = _run(BUG + "entry_point()", "exact", *TOY, "--verifier", verifier, VERISPEC_SUPERVISE=supervise)
    assert done.returncode == 70, done.stderr
    assert "Traceback" in done.stderr and "TypeError" in done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith("verispec: internal error: the traceback above is a bug")


def test_negative_control_pythons_own_status_says_lossy():
    done = _run(BUG + "sys.exit(main())", "exact", *TOY, "--verifier", "specinfer")
    assert done.returncode == 1 and "Traceback" in done.stderr


def test_a_rules_own_exception_stays_its_one_line(tmp_path):
    rule = tmp_path / "rule.py"
    rule.write_text("from verispec.simulator import Verifier, DraftLaw\n\n"
                    "class Broken(Verifier):\n    name = 'broken'\n"
                    "    valid_for = frozenset({DraftLaw.SINGLE_PATH})\n\n"
                    "    def emission_laws(self, batch):\n        raise ZeroDivisionError('inside the rule')\n\n"
                    "    def procedure(self, tree, chooser):\n        return 0, 0\n\n\nRULE = Broken()\n")
    done = _run("from verispec.cli import entry_point; entry_point()", "exact", *TOY, "--verifier", f"{rule}:RULE")
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "raised ZeroDivisionError: inside the rule" in done.stderr
