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


def fake_verispec_command(monkeypatch, stdout: str, status: int, stderr: str = "") -> None:
    """Every command an experiment runs answers as given: a script that records a verdict reads it from the
    ``--json-out`` file (``verispec.guard.output.run_checked``), which this writes with ``stdout``'s JSON where there is
    some (a command that printed no JSON wrote none)."""
    from types import SimpleNamespace

    import verispec.guard.output as output

    def run(argv, **kwargs):
        if "--json-out" in argv and stdout.strip():
            Path(argv[argv.index("--json-out") + 1]).write_text(stdout)
        return SimpleNamespace(returncode=status, stdout=stdout, stderr=stderr)

    monkeypatch.setattr(output.subprocess, "run", run)
