"""Issue 77 item 4: a categorical too large to enumerate is refused when it is drawn, before the enumerator lists its
outcomes (a single 5,000,000-way draw took 23 GB of memory and the whole 600 s budget before).

Exact enumeration takes one choice trace per outcome of a draw, so a draw with more positive outcomes than the trace
limit can never finish: the refusal names the draw's size and the limit. The negative control is the old order of
work: the same procedure under a limit above its size enumerates, one trace per outcome."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.timing import Stopwatch
from verispec.errors import EnumerationTooLargeError
from verispec.simulator.chooser import enumerate_law

ROOT = Path(__file__).resolve().parents[2]


def _uniform(size: int):
    def procedure(chooser):
        return chooser.categorical([1.0 / size] * size)
    return procedure


def test_a_draw_larger_than_the_trace_limit_is_refused_at_once():
    with pytest.raises(EnumerationTooLargeError, match="categorical of 11 outcomes") as raised:
        enumerate_law(_uniform(11), max_traces=10, name="wide")
    assert "limit of 10" in str(raised.value) and "'wide'" in str(raised.value)


def test_negative_control_under_a_larger_limit_each_outcome_is_a_trace():
    law = enumerate_law(_uniform(11), max_traces=11)
    assert sorted(law) == list(range(11)) and all(abs(p - 1 / 11) < 1e-15 for p in law.values())


def test_a_five_million_way_draw_in_a_rule_is_one_line_and_exit_2(tmp_path):
    rule = tmp_path / "wide.py"
    rule.write_text("def wide(tree, chooser):\n    n = 5_000_000\n    chooser.categorical([1.0 / n] * n)\n"
                    "    return 0, chooser.categorical(tree.p[0])\n")
    with Stopwatch() as watch:
        done = subprocess.run([sys.executable, "-m", "verispec", "exact", "--target", "0.5,0.5", "--draft",
                               "0.9,0.1", "--tree", "chain:1", "--verifier", f"{rule}:wide"], capture_output=True,
                              text=True, timeout=300, env=dict(os.environ, PYTHONPATH=str(ROOT)), cwd=tmp_path)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "categorical of 5,000,000 outcomes" in done.stderr
    assert watch.within(60, 60), watch  # before: the whole 600 s budget
