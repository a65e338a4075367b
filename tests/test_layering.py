"""The package layout shows the flow problem -> draft tree -> verifier -> law -> metrics, and keeps it.

Read from the source (every ``import`` statement, lazy ones inside functions included):
* no import cycle between verispec modules;
* each package imports only from its own layer or the layers below it:
      errors, io, backend, budget, version, statistics, latency, verdict, lazy_names  <  simulator  <  lp_analysis
      <  verifiers  <  models  <  hunt, external, testing, api, cli;
  the simulator (problems, draft trees, drafters, the verifier contract, the exact engine) never imports a
  concrete verifier, and the linear programs never import the verifiers built on them;
* inside the simulator the flow runs one way: problems < trees < drafters < verifier contract < engines;
* the exact core works without torch installed (torch is an optional extra).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "verispec"

#: Package-level layers, lowest first.
LAYERS = [
    {"verispec.errors", "verispec.io", "verispec.backend", "verispec.budget", "verispec.version",
     "verispec.statistics", "verispec.latency", "verispec.verdict", "verispec.lazy_names"},
    {"verispec.simulator"},
    {"verispec.lp_analysis"},
    {"verispec.verifiers"},
    {"verispec.models"},
    {"verispec.hunt", "verispec.external", "verispec.testing", "verispec.api", "verispec.cli", "verispec.__main__",
     "verispec.policy", "verispec.selector",
     "verispec"},
]

#: Modules of the simulator in flow order; a module may import only modules listed before it.
SIMULATOR_FLOW = [
    "distributions", "ranking", "slots", "chooser", "problems", "deterministic", "trees", "prefix_tables",
    "selection", "drafters", "interfaces", "laws", "slot_enumeration", "topology", "dp", "fast_enumeration", "engine",
    "certified",
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


def _layer(module: str) -> int:
    for index, layer in enumerate(LAYERS):
        for prefix in layer:
            if module == prefix or (prefix != "verispec" and module.startswith(prefix + ".")):
                return index
    return len(LAYERS) - 1  # top-level modules such as verispec.api


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
    above = sorted(target for target in GRAPH[module] if _layer(target) > _layer(module))
    assert not above, f"{module} (layer {_layer(module)}) imports {above} from a layer above"


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
