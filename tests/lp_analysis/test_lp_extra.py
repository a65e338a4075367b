"""``pip install verispec`` without cvxpy: cvxpy is the ``lp`` extra, and only the paths stated in cvxpy need it.

Without it (``sys.modules['cvxpy'] = None`` in a ``sitecustomize`` on PYTHONPATH, so that every process a command
starts has it too: the supervised worker and the sandbox of the user's code): ``import verispec`` and the commands
that state no program in cvxpy work (``exact``, and ``bound`` over every valid verifier, HiGHS through scipy), an LP
command that needs cvxpy (``bound --restriction FILE.py:NAME``) refuses in one line naming the extra, with exit status
2, and so does each library function stated in cvxpy. With cvxpy installed, nothing but those paths imports it.

The one number asserted, the optimum of ``bound`` at chain:1, p = (0.5, 0.5), q = (0.3, 0.7), is 1 + sum min(p, q) =
1.8: one draft, and the most often a valid verifier can accept it is the maximal coupling's 1 - TV(p, q).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import numpy as np
import pytest

from verispec.errors import MissingExtraError, VerispecError

ROOT = Path(__file__).resolve().parents[2]
REFUSAL = "cvxpy is not installed: pip install 'verispec[lp]' for "
PROBLEM = ("--target", "0.5,0.5", "--draft", "0.3,0.7", "--tree", "chain:1")


def _without_cvxpy(tmp_path: Path, *command: str) -> subprocess.CompletedProcess:
    """``python COMMAND`` in ``tmp_path`` with cvxpy unimportable in it and in every Python process it starts."""
    site = tmp_path / "no_cvxpy"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text("import sys\nsys.modules['cvxpy'] = None  # 'import cvxpy' fails\n")
    path = os.pathsep.join([str(site), str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    return subprocess.run([sys.executable, *command], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": path})


def test_cvxpy_is_the_lp_extra_and_no_dependency():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert not [requirement for requirement in project["dependencies"] if requirement.startswith("cvxpy")]
    assert project["optional-dependencies"]["lp"] == ["cvxpy>=1.5"]
    install = (ROOT / ".ci" / "run").read_text()
    assert "-e '.[test,torch,models,sweep,plots,lp]'" in install


def test_the_sitecustomize_makes_cvxpy_unimportable(tmp_path):
    """The control of the tests below: in the processes they run, 'import cvxpy' fails."""
    run = _without_cvxpy(tmp_path, "-c", "import cvxpy")
    assert run.returncode == 1 and "ModuleNotFoundError: import of cvxpy halted" in run.stderr


def test_an_lp_command_refuses_in_one_line_without_cvxpy(tmp_path):
    (tmp_path / "my_class.py").write_text("def every_valid(v):\n    return []\n")
    run = _without_cvxpy(tmp_path, "-m", "verispec", "bound", *PROBLEM, "--restriction", "my_class.py:every_valid")
    assert run.returncode == 2 and run.stdout == ""
    assert run.stderr.splitlines() == [
        f"verispec: error: {REFUSAL}verifier classes in cvxpy (bound --restriction FILE.py:NAME, "
        "verispec.bounds.classes)"], run.stderr


def test_commands_without_a_program_in_cvxpy_work_without_it(tmp_path):
    run = _without_cvxpy(tmp_path, "-m", "verispec", "bound", *PROBLEM, "--json")
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["optimal_block_efficiency"] == pytest.approx(1 + 0.3 + 0.5, abs=1e-9)
    run = _without_cvxpy(tmp_path, "-m", "verispec", "exact", *PROBLEM, "--verifier", "naive", "--json")
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["lossless"] is True
    run = _without_cvxpy(tmp_path, "-c", "import verispec, verispec.cli, verispec.bounds, verispec.testing, "
                                         "verispec.strategies, verispec.pytest_plugin; print(verispec.__version__)")
    assert run.returncode == 0, run.stderr


def test_nothing_but_the_cvxpy_paths_imports_it(tmp_path):
    """With cvxpy installed: import verispec, list, exact and bound over every valid verifier leave it unimported."""
    script = ("import contextlib, io, sys\nimport verispec\nfrom verispec import cli\n"
              "with contextlib.redirect_stdout(io.StringIO()):\n"
              f"    for argv in (['list'], ['exact', *{PROBLEM!r}, '--verifier', 'bv'], ['bound', *{PROBLEM!r}]):\n"
              "        assert cli.main(argv) == 0, argv\n"
              "print('cvxpy' in sys.modules)\n")
    run = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PYTHONPATH": str(ROOT), "VERISPEC_SUPERVISE": "0"})
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip().splitlines()[-1] == "False"


def _refused(call) -> str:
    with pytest.raises(MissingExtraError) as caught:
        call()
    assert isinstance(caught.value, VerispecError) and isinstance(caught.value, ImportError)
    assert "\n" not in str(caught.value)
    return str(caught.value)


def test_every_library_path_in_cvxpy_refuses_naming_the_extra(monkeypatch):
    from verispec.bounds.classes import optimize_class
    from verispec.bounds.path_selection import drafted_node_cvxpy
    from verispec.lp_analysis.global_resolution import solve_luce_cvxpy
    from verispec.simulator import ContextFreeProblem, parse_tree

    monkeypatch.setitem(sys.modules, "cvxpy", None)
    problem = ContextFreeProblem([0.5, 0.5], [0.3, 0.7])
    assert _refused(lambda: optimize_class(problem, parse_tree("chain:1"))) == (
        f"{REFUSAL}verifier classes in cvxpy (bound --restriction FILE.py:NAME, verispec.bounds.classes)")
    assert _refused(lambda: drafted_node_cvxpy([problem, problem], parse_tree("iid:2,1"))) == (
        f"{REFUSAL}the drafted-node program in cvxpy (drafted_node_cvxpy)")
    counts = np.array([[1.0, 0.0], [0.0, 1.0]])
    assert _refused(lambda: solve_luce_cvxpy(counts, np.array([0.5, 0.5]), np.array([0.5, 0.5]), 0.0)) == (
        f"{REFUSAL}Global Resolution's program in cvxpy (solve_luce_cvxpy)")


def test_a_cvxpy_that_fails_to_import_is_said(monkeypatch):
    """Installed but broken (one of its own imports fails): the line says so, with the error, and names the extra."""
    import builtins

    from verispec.lp_analysis.solve import require_cvxpy

    real_import = builtins.__import__

    def broken(name, *args, **kwargs):
        if name == "cvxpy":
            raise ImportError("libosqp.so: cannot open shared object file", name="osqp")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", broken)
    assert _refused(lambda: require_cvxpy("a test")) == (
        "cvxpy fails to import (ImportError: libosqp.so: cannot open shared object file): pip install "
        "'verispec[lp]' for a test")
