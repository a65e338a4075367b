"""The package layout shows the flow problem -> draft tree -> verifier -> law -> metrics, and keeps it.

Read from the source (every ``import`` statement, lazy ones inside functions included):
* no import cycle between verispec modules;
* every module belongs to one layer, and imports only from its own layer or the layers below it
  (``LAYERS``, the same order ``docs/guides/layout.md`` states, which a test here reads back):
      ground floor  <  simulator  <  lp_analysis  <  verifiers  <  bounds  <  models
      <  api, hunt, external, study  <  selector, report, testing, strategies, policy, engines, pytest_plugin  <  cli;
  the simulator (problems, draft trees, drafters, the verifier contract, the exact engine) never imports a
  concrete verifier, the couplings never import the verifiers built on them, and the verifiers never import the
  bounds that judge them;
* the ground floor (standard library, numpy and each other only) runs one way too: ``GROUND_FLOOR``;
* inside the simulator the flow runs one way: problems < trees < drafters < verifier contract < engines;
* the exact core works without torch installed (torch is an optional extra);
* the scripts under ``benchmarks/`` and ``experiments/`` never import ``verispec.cli``: the command line parses
  options and calls the library, so what a script needs is a library function (``verispec.selector.split.held_out``,
  not ``verispec.cli.selector.held_out``).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "verispec"

#: The ground floor's modules in order; each imports only modules listed before it.
GROUND_FLOOR = ["guard", "files", "errors", "version", "guard.limits", "lazy_names", "backend", "verdict",
                "guard.processes", "guard.confinement", "guard.layers", "guard.output", "guard.watch",
                "guard.supervisor", "guard.budget", "sizes",
                "statistics", "files.reading", "files.provenance", "files.markers", "files.io", "files.store_lock",
                "native", "latency", "guard.wire", "guard.sandbox_process", "guard.sandbox", "user_code",
                "guard.memory"]

#: Package-level layers, lowest first (names after ``verispec.``; "" is the top package itself).
LAYER_NAMES = [
    GROUND_FLOOR,
    ["simulator"],
    ["lp_analysis"],
    ["verifiers"],
    ["bounds"],
    ["models"],
    ["api", "hunt", "external", "keyed", "study"],
    ["selector", "report", "testing", "strategies", "policy", "engines", "pytest_plugin"],
    ["cli", "__main__", ""],
]
LAYERS = [{f"verispec.{name}" if name else "verispec" for name in layer} for layer in LAYER_NAMES]

#: Modules of the simulator in flow order; a module may import only modules listed before it.
SIMULATOR_FLOW = [
    "distributions", "ranking", "slots", "chooser", "problems", "generators", "expansion", "problem_files",
    "deterministic", "trees", "prefix_tables", "selection", "drafters", "own_law_drafters", "ddtree", "tree_specs",
    "interfaces", "laws", "slot_enumeration", "topology", "dp", "fast_enumeration", "engine", "certified",
]


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _imports() -> dict[str, set[str]]:
    """module -> the verispec modules it imports (``from verispec.x import y`` counts y when it is a module)."""
    modules = {_module_name(path): path for path in PACKAGE.rglob("*.py")}
    graph = {}
    for name, path in modules.items():
        targets = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names if alias.name.startswith("verispec"))
            elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("verispec"):
                for alias in node.names:
                    full = f"{node.module}.{alias.name}"
                    targets.add(full if full in modules else node.module)
        graph[name] = {target for target in targets if target in modules and target != name}
    return graph


def _layer(module: str) -> int | None:
    for index, layer in enumerate(LAYERS):
        for prefix in layer:
            if module == prefix or (prefix != "verispec" and module.startswith(prefix + ".")):
                return index
    return None


GRAPH = _imports()


def test_there_is_no_import_cycle():
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(module: str):
        state[module] = 1
        stack.append(module)
        for target in sorted(GRAPH[module]):
            if target.startswith(module + ".") and module == "verispec":
                continue  # the top package's lazy attribute imports its own API module
            if state.get(target) == 1:
                cycle = stack[stack.index(target):] + [target]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if target not in state:
                visit(target)
        stack.pop()
        state[module] = 2

    for module in sorted(GRAPH):
        if module not in state:
            visit(module)


@pytest.mark.parametrize("module", sorted(GRAPH))
def test_nothing_imports_from_a_layer_above(module):
    above = sorted(target for target in GRAPH[module] if (_layer(target) or 0) > (_layer(module) or 0))
    assert not above, f"{module} (layer {_layer(module)}) imports {above} from a layer above"


def test_every_module_belongs_to_a_layer():
    unplaced = sorted(module for module in GRAPH if _layer(module) is None)
    assert not unplaced, f"{unplaced} belong to no layer: add them to LAYER_NAMES (and to docs/guides/layout.md)"


def test_the_ground_floor_flows_one_way():
    position = {f"verispec.{name}": index for index, name in enumerate(GROUND_FLOOR)}
    for module, index in position.items():
        later = sorted(target for target in GRAPH[module] if position.get(target, -1) >= index)
        assert not later, f"{module} imports {later}, which come after it on the ground floor"


def test_docs_layout_states_the_same_order():
    """docs/guides/layout.md's order line (between its ``layers:`` markers) names the layers of LAYER_NAMES, in
    order."""
    text = (PACKAGE.parent / "docs" / "guides" / "layout.md").read_text()
    stated = text.split("<!-- layers:start -->")[1].split("<!-- layers:end -->")[0]
    layers = [[name.strip(" `\n") for name in layer.replace("\n", " ").split(",")] for layer in stated.split("<")]
    expected = [[name or "verispec" for name in layer if name != "__main__"] for layer in LAYER_NAMES]
    assert [sorted(name for name in layer if name) for layer in layers] == [sorted(layer) for layer in expected]


def test_the_simulator_flows_one_way():
    position = {f"verispec.simulator.{name}": index for index, name in enumerate(SIMULATOR_FLOW)}
    assert set(position) | {"verispec.simulator"} == {m for m in GRAPH if m.startswith("verispec.simulator")}
    for module, index in position.items():
        later = sorted(target for target in GRAPH[module] if position.get(target, -1) >= index)
        assert not later, f"{module} imports {later}, which come after it in the flow"


def test_the_exact_core_works_without_torch():
    script = (
        "import sys; sys.modules['torch'] = None\n"  # 'import torch' now fails, as on a machine without it
        "import verispec\n"
        "from verispec.simulator import sun_toy_problem\n"
        "result = verispec.analyze(sun_toy_problem(exact=True), 'iid:2,2', 'specinfer')\n"
        "assert result.tv_distance == 0, result\n"
        "print(result.block_efficiency)\n"
    )
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert "/" in run.stdout  # an exact fraction


def test_no_package_file_is_ignored_by_git():
    """Every module of the package ships: none matches a .gitignore pattern (``report/``, the default report folder,
    once hid ``verispec/report/`` from every clone)."""
    files = [str(path.relative_to(PACKAGE.parent)) for path in PACKAGE.rglob("*.py")]
    try:
        run = subprocess.run(["git", "check-ignore", "--no-index", *files], cwd=PACKAGE.parent, capture_output=True,
                             text=True, timeout=60)
    except FileNotFoundError:
        pytest.skip("git is not installed")
    if run.returncode == 128:
        pytest.skip(f"not a git checkout: {run.stderr.strip()}")
    assert run.stdout == "", f"ignored by git: {run.stdout.split()}"


#: The folders of scripts that run on the library, never on the command line's modules.
SCRIPT_FOLDERS = ("benchmarks", "experiments")


def _command_line_imports(path: Path) -> list[str]:
    """The imports of ``verispec.cli`` (or a module under it) in one script, lazy ones included, as written."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names if alias.name.split(".")[:2] == ["verispec", "cli"]]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            parts = node.module.split(".")
            if parts[:2] == ["verispec", "cli"]:
                found.append(node.module)
            elif parts == ["verispec"]:
                found += [f"verispec.{alias.name}" for alias in node.names if alias.name == "cli"]
    return found


def _scripts_importing_the_command_line(root: Path) -> dict[str, list[str]]:
    return {str(path.relative_to(root)): imports for folder in SCRIPT_FOLDERS
            for path in sorted((root / folder).rglob("*.py")) if (imports := _command_line_imports(path))}


def test_scripts_do_not_import_the_command_line():
    found = _scripts_importing_the_command_line(PACKAGE.parent)
    assert not found, f"scripts import the command line's modules (import the library's functions instead): {found}"


def test_a_script_importing_the_command_line_is_caught(tmp_path):
    """Negative control of the check above: each way of importing ``verispec.cli`` is found, lazy ones too, and a
    script that imports only the library is not."""
    (tmp_path / "experiments").mkdir()
    (tmp_path / "benchmarks" / "deep").mkdir(parents=True)
    (tmp_path / "experiments" / "from_module.py").write_text("from verispec.cli.selector import held_out\n")
    (tmp_path / "experiments" / "library_only.py").write_text(
        "import verispec.client_side\nfrom verispec.selector.split import held_out\nimport verispec\n")
    (tmp_path / "benchmarks" / "deep" / "lazy.py").write_text(
        "def main():\n    import verispec.cli.options as options\n    from verispec import cli, api\n")
    assert _scripts_importing_the_command_line(tmp_path) == {
        "benchmarks/deep/lazy.py": ["verispec.cli.options", "verispec.cli"],
        "experiments/from_module.py": ["verispec.cli.selector"]}


def test_no_selector_module_re_exports_another_modules_names():
    """Each name a module of verispec/selector lists in ``__all__`` is defined there (issue 55): a caller imports a
    name from the module that defines it, so there is one place to look for each."""
    import ast

    offenders = {}
    for path in sorted((PACKAGE / "selector").glob("*.py")):
        if path.name == "__init__.py":  # the package's lazy names point at the defining modules
            continue
        tree = ast.parse(path.read_text())
        imported = {alias.asname or alias.name for node in tree.body if isinstance(node, ast.ImportFrom)
                    for alias in node.names}
        listed = [element.value for node in tree.body if isinstance(node, ast.Assign)
                  and any(getattr(target, "id", None) == "__all__" for target in node.targets)
                  for element in node.value.elts]
        if [name for name in listed if name in imported]:
            offenders[path.name] = [name for name in listed if name in imported]
    assert not offenders, offenders
