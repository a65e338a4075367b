"""Load an experiment or benchmark script of the repository as a module (they are not in the package)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def load_script(relative: str, name: str | None = None):
    """The module of ``ROOT / relative`` (e.g. 'experiments/real_decoding.py'), executed once per call."""
    path = ROOT / relative
    spec = importlib.util.spec_from_file_location(name or path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def assert_one_line_refusals(main, common: list, cases: list, prefix: str, capsys) -> None:
    """Each (extra arguments, expected words) of ``cases``: ``main(common + extra)`` exits 2 with one stderr line
    that starts with ``prefix`` and holds the words."""
    for extra, expected in cases:
        assert main(common + extra) == 2, extra
        error = capsys.readouterr().err.strip().splitlines()
        assert len(error) == 1 and error[0].startswith(prefix) and expected in error[0], error
