"""Issue 77 item 2: the project's experiments take a verdict from the ``--json-out`` file the code under check cannot
write (``verispec.cli.confined.run_checked``), never from the last stdout line.

A hostile zoo entry (chain layout) prints a fake lossless JSON verdict when called and again at its process's exit,
and returns a lossy outcome: it accepts every draft and emits the last drafted token again, so on ``chain:1`` with
p = (1/2, 1/2) and q = (9/10, 1/10) its outputs are (0, 0) w.p. 9/10 and (1, 1) w.p. 1/10 against 1/4 each (TV 0.65).
``experiments/engine_bugs.py`` must record it LOSSY. The negative control runs it in one process
(``VERISPEC_SUPERVISE=0``): there the fake line is stdout's last, so the old reading would have recorded LOSSLESS
(and with protection off the file is the code's to write too, which is why the experiments run supervised).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.scripts import load_script
from verispec.guard import supervisor

pytestmark = [pytest.mark.skipif(not supervisor.available(), reason="needs os.fork (the supervised worker)"),
              pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux's seccomp and /proc")]

ROOT = Path(__file__).resolve().parents[2]
HOSTILE = '''
import atexit, json
import numpy as np

FAKE = json.dumps({"verdict": "lossless", "mode": "exact", "tv_distance": 0.0, "exit_status": 0})
BUG = {"repository": "nowhere/hostile", "threads": ["#0"], "date": "2026-11-30", "title": "hostile",
       "class": "forgery", "layout": "chain", "tree": "chain:1", "target": [0.5, 0.5], "draft": [0.9, 0.1],
       "mode": "exact"}


def buggy(draft_tokens, draft_probs, target_probs, uniforms):
    print(FAKE, flush=True)
    atexit.register(lambda: print(FAKE, flush=True))
    tokens = np.asarray(draft_tokens, dtype=np.int64)  # [B, L]
    return np.concatenate([tokens, tokens[:, -1:]], axis=-1)  # [B, L + 1]
'''


@pytest.fixture()
def entry(tmp_path) -> dict:
    path = tmp_path / "hostile_entry.py"
    path.write_text(HOSTILE)
    script = load_script("experiments/engine_bugs.py")
    (found,) = script.load_catalogue(tmp_path)
    return {**found, "file": os.path.relpath(path, script.ZOO)}


def test_a_hostile_zoo_entry_is_recorded_lossy(entry):
    script = load_script("experiments/engine_bugs.py")
    row = script.check(entry, "buggy", 120.0)
    assert row["exit_status"] == 1 and row["verdict"] == "LOSSY", row
    assert row["tv"] == pytest.approx(0.65, abs=1e-9)


def test_negative_control_in_one_process_the_last_stdout_line_is_forged(entry):
    """Unsupervised, the code's exit handler prints after verispec's JSON: the last stdout line, the experiments'
    reading before this issue, says lossless."""
    script = load_script("experiments/engine_bugs.py")
    argv = script.command(entry, "buggy", 120.0)
    environment = dict(os.environ, PYTHONPATH=str(ROOT), VERISPEC_SUPERVISE="0")
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=300, env=environment)
    assert done.returncode == 1 and json.loads(done.stdout.strip().splitlines()[-1])["verdict"] == "lossless"
