"""Which parts of a judge execute a mutated statement of vLLM's sampler: each of vLLM's tests, each of verispec's
checks (issue 76, item 4; used by ``engine_mutants.py``).

coverage.py (``pip install 'coverage==7.6.10'``) records the sampler's lines on the unmutated release with one
context per part: each pytest item's node id (setup, call and teardown, switched by a small plugin, so a fixture's
lines count for the test that uses it), and each verispec check's name. Lines run outside every part carry the empty
context: imports, module-level statements, and the adapter's one-time engine (verispec builds vLLM's
``RejectionSampler`` once a run; it is built before the first check, so its constructor's lines land there).

Why a judge may run only the parts that reach the statement, and read the same verdict as running them all: both
judges are deterministic on a given tree (vLLM's tests seed torch; verispec feeds its own uniforms); a part that
executes no line of the mutated statement runs the mutant exactly as it runs the release, unless something an
earlier part did with the mutated code carries over to it. Nothing does here, by these facts of 0.33.0's files:
the sampler keeps no state between calls (its module-level names are constants and a logger; what a
``RejectionSampler`` keeps is set in its constructor); vLLM's test file builds its sampler in a function-scoped
fixture; and what is built once for all parts is built outside them, so a statement of it reaches every part.
Hence a statement that runs outside every part runs every part, and a statement that no part runs leaves the judge
as it is on the release: survived. verispec's judge first imports the adapter, which builds the engine and calls
every route once with constant logits (its warm-up, ``SETUP``): a statement of that setup whose effect persists
(module level, or the sampler's constructor) runs every check; one of a method the warm-up calls runs the checks
that call it themselves, or the first check where none does, since the file keeps no state between calls (no
attribute set outside its constructor, no ``global``, no cache: checked on 0.33.0's file) and a setup that fails
fails every check. ``engine_mutants.py --no-coverage`` runs every part of every judge.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import tempfile
from pathlib import Path

OUTSIDE = ""  # coverage.py's context for lines run outside every part
#: verispec's context for what its judge's process runs once before any check: the imports, the adapter's one-time
#: engine (vLLM's ``RejectionSampler``, built once) and its warm-up calls of every route.
SETUP = "setup"

#: The pytest plugin (module ``verispec_part_contexts``) that gives each test item its own coverage context and
#: writes the items' order to ``$VERISPEC_PART_ORDER``.
PLUGIN = '''
import json, os
import coverage
import pytest

_ORDER = []


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    current = coverage.Coverage.current()
    _ORDER.append(item.nodeid)
    if current is not None:
        current.switch_context(item.nodeid)
    try:
        yield
    finally:
        if current is not None:
            current.switch_context("")


def pytest_sessionfinish(session):
    with open(os.environ["VERISPEC_PART_ORDER"], "w") as handle:
        json.dump(_ORDER, handle)
'''


def statement_span(text: str, line: int) -> tuple[int, int]:
    """(first, last) line of the innermost statement of ``text`` that holds ``line`` (the whole file where none
    does: a decorator's line, say), the lines whose execution shows the mutated code was reached."""
    best = (1, max(1, len(text.splitlines())))
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.stmt) and node.lineno <= line <= node.end_lineno and (
                node.end_lineno - node.lineno <= best[1] - best[0]):
            best = (node.lineno, node.end_lineno)
    return best


def parts_reaching(reach: dict | None, span: tuple[int, int], persistent: bool = True) -> list[str] | None:
    """The parts of a judge that execute a line of ``span`` on the release, in the judge's order: ``None`` (run them
    all) where nothing was measured or a line of it runs outside every part; ``[]`` where no part runs it.
    ``reach`` is ``{"order": [part, ...], "lines": {line: [context, ...]}}`` as measured (keys may be strings).

    A statement the judge's one-time setup runs (``SETUP``) runs every part where what it does persists
    (``persistent``: a module-level statement, or one of a constructor, whose object every part uses); otherwise
    (a method the warm-up calls, which keeps no state) the parts that run it themselves, or the first part where
    none does: a setup that fails is seen by any part, since every part's process runs the setup first."""
    if reach is None:
        return None
    contexts = set()
    for line in range(span[0], span[1] + 1):
        contexts.update(reach["lines"].get(str(line), reach["lines"].get(line, [])))
    if OUTSIDE in contexts or (SETUP in contexts and persistent):
        return None
    if SETUP in contexts:
        contexts.discard(SETUP)
        if not contexts:
            return reach["order"][:1]
    unknown = contexts - set(reach["order"])
    if unknown:  # a context that is not a part: measured under other settings; run everything rather than guess
        return None
    return [part for part in reach["order"] if part in contexts]


def persistent(text: str, span: tuple[int, int]) -> bool:
    """Whether the statement at ``span`` of ``text`` is one whose effect outlives a call: at module level, or in a
    constructor (``__init__``, the innermost function holding it); a statement of any other function runs afresh in
    every call."""
    holders = [node for node in ast.walk(ast.parse(text)) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
               and node.lineno <= span[0] and span[1] <= node.end_lineno]
    innermost = max(holders, key=lambda node: node.lineno, default=None)
    return innermost is None or innermost.name == "__init__"


def executed_lines(reach: dict | None) -> set[int] | None:
    """Every line of the sampler that some context runs (the judge's whole coverage)."""
    return None if reach is None else {int(line) for line in reach["lines"]}


def _contexts(path: Path, data_file: Path) -> dict[str, list[str]]:
    import coverage

    data = coverage.CoverageData(basename=str(data_file))
    data.read()
    lines: dict[str, set[str]] = {}
    for name in data.measured_files():
        if Path(name).resolve() == path.resolve():
            for line, contexts in data.contexts_by_lineno(name).items():
                lines.setdefault(str(line), set()).update(contexts)
    return {line: sorted(contexts) for line, contexts in sorted(lines.items(), key=lambda item: int(item[0]))}


def engine_tests_reach(sampler: Path, tests_root: Path, test_file: str, deselect: list[str], timeout: float,
                       env: dict) -> dict:
    """Each of vLLM's tests' lines of ``sampler`` (pytest under ``coverage run``, one context per test item)."""
    with tempfile.TemporaryDirectory(prefix="verispec-coverage-") as scratch:
        data_file, order_file = Path(scratch) / "coverage", Path(scratch) / "order.json"
        (Path(scratch) / "verispec_part_contexts.py").write_text(PLUGIN)
        argv = [sys.executable, "-m", "coverage", "run", f"--data-file={data_file}", f"--include={sampler}",
                "-m", "pytest", "--noconftest", "-p", "no:cacheprovider", "-p", "no:randomly", "-p",
                "verispec_part_contexts", "-q", test_file] + [f"--deselect={test}" for test in deselect]
        paths = [scratch] + [part for part in [env.get("PYTHONPATH")] if part]
        done = subprocess.run(argv, cwd=tests_root, capture_output=True, text=True, timeout=timeout * 2,
                              env={**env, "PYTHONPATH": ":".join(paths), "VERISPEC_PART_ORDER": str(order_file)})
        if done.returncode != 0 or not order_file.is_file():
            raise RuntimeError(f"vLLM's tests under coverage ended with status {done.returncode}: "
                               f"{(done.stdout.strip().splitlines() or [''])[-1][:300]}")
        return {"order": json.loads(order_file.read_text()), "lines": _contexts(sampler, data_file)}


#: How much longer than its budget a check may take under coverage.py's tracing (in one process, several times slower
#: on the interpreter's Python): a check out of its budget there is a measurement that failed, not a verdict.
COVERAGE_STRETCH = 3


def verispec_reach(sampler: Path, root: Path, package: str, checks: list[str], budget: float, env: dict) -> dict:
    """Each of verispec's checks' lines of ``sampler`` (in one process, the Python API, one context per check; the
    adapter's import, one-time engine and warm-up first, under ``SETUP``)."""
    with tempfile.TemporaryDirectory(prefix="verispec-coverage-") as scratch:
        data_file = Path(scratch) / "coverage"
        program = (
            "import coverage\n"
            f"cov = coverage.Coverage(data_file={str(data_file)!r}, include=[{str(sampler)!r}])\ncov.start()\n"
            f"cov.switch_context({SETUP!r})\n"
            "from verispec.engines import vllm_v1\nfrom verispec.engines.check import run_engine_checks\n"
            "vllm_v1._engine()\ncov.switch_context('')\nfailed = []\n"
            f"for check in {checks!r}:\n"
            "    cov.switch_context(check)\n"
            f"    result = run_engine_checks({package!r}, [check], time_budget={COVERAGE_STRETCH * budget!r})\n"
            "    cov.switch_context('')\n"
            "    failed += [check] if result['exit_status'] != 0 else []\n"
            "cov.stop()\ncov.save()\nassert not failed, failed\n")
        done = subprocess.run([sys.executable, "-c", program], cwd=root, env=env, capture_output=True, text=True,
                              timeout=len(checks) * COVERAGE_STRETCH * budget + 600)
        if done.returncode != 0:  # the checks that did not pass on the release under coverage, by name
            raise RuntimeError(f"verispec's checks under coverage ended with status {done.returncode}: "
                               f"{(done.stderr.strip().splitlines() or [''])[-1][:300]}")
        return {"order": list(checks), "lines": _contexts(sampler, data_file)}
