"""No package file over 600 lines and no function over 80 (``experiments/code_lengths.py`` measures both; there are
no stated exceptions: a file or function that grows past its limit is cut where its seams are), and no verification
rule's file over 400 (issue 77: a rule's helpers, such as psbv's split, live beside it in a module of their own)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _code_lengths():
    spec = importlib.util.spec_from_file_location("code_lengths", ROOT / "experiments" / "code_lengths.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_no_package_file_or_function_passes_its_limit():
    lengths = _code_lengths()
    measured = lengths.measure(None)
    assert not measured["long_files"], f"files over {lengths.FILE_LIMIT} lines: {measured['long_files']}"
    assert not measured["long_functions"], (
        f"functions over {lengths.FUNCTION_LIMIT} lines: {measured['long_functions']}")


def test_the_function_lengths_are_measured_from_def_to_last_line():
    """The measure itself, on a source whose lengths are counted by hand: a nested function counts in its parent and
    on its own, a method under its class's name, decorators not at all."""
    source = ("@decorator\ndef outer():\n    def inner():\n        return 1\n    return inner\n\n\n"
              "class A:\n    def m(self):\n        pass\n")
    assert _code_lengths().function_lengths(source) == [("outer", 4), ("outer.inner", 2), ("A.m", 2)]


#: Most lines of one file of ``verispec/verifiers`` (a rule, or the helpers beside it).
RULE_FILE_LIMIT = 400


def test_no_rule_file_passes_400_lines():
    long = {path.name: count for path in sorted((ROOT / "verispec" / "verifiers").glob("*.py"))
            if (count := len(path.read_text().splitlines())) > RULE_FILE_LIMIT}
    assert not long, f"rule files over {RULE_FILE_LIMIT} lines: {long}"


def test_tests_keep_at_most_ten_loose_files():
    """Tests live beside what they test (tests/guard, tests/files, ...); only project-wide ones stay loose."""
    loose = sorted(path.name for path in (ROOT / "tests").glob("test_*.py"))
    assert len(loose) <= 10, loose
