"""The code two benchmarks run in a child process (``python -c``: bench_dp's SCRIPT, bench_problem_files's
MEASURE) runs: 6687b45 put the module-level lines that find benchmarks/measure.py inside those strings, where
neither ``Path`` nor ``__file__`` exists, so every run of either benchmark ended in a NameError traceback before
its first timing (found by running `python benchmarks/bench_dp.py --output DIR/x`)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OLD_LINES = '''
#: benchmarks/measure.py imports as ``measure`` when this script is loaded as a module too (its tests)
if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
'''


def _benchmark(name: str):
    spec = importlib.util.spec_from_file_location(f"_child_code_{name}", ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run(code: str, *arguments: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code, *arguments], capture_output=True, text=True, cwd=ROOT,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}, check=False)


def test_the_child_code_of_both_benchmarks_runs_and_the_old_code_did_not(tmp_path):
    bench_dp = _benchmark("bench_dp")
    script = bench_dp.SCRIPT.format(problem="random_problem(2, 1, 0)", tree="chain:1", verifier="specinfer",
                                    method="dp")
    problem = tmp_path / "p.json"
    problem.write_text(json.dumps({"vocab_size": 2, "target": {"": [0.5, 0.5], "0": [0.5, 0.5], "1": [1, 0]},
                                   "draft": {"": [0.5, 0.5]}}))
    measure = _benchmark("bench_problem_files").MEASURE
    for code, arguments in ((script, ()), (measure, (str(problem), "1"))):
        assert OLD_LINES not in code
        done = _run(code, *arguments)
        assert done.returncode == 0, done.stderr
        json.loads(done.stdout.strip().splitlines()[-1])
        # the negative control: the same code with the lines put back where 6687b45 put them fails as it did
        old = code.replace("\n", OLD_LINES, 1)
        failed = _run(old, *arguments)
        assert failed.returncode != 0 and "NameError: name 'Path' is not defined" in failed.stderr
