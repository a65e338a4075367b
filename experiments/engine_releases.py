"""Every vLLM release's shipped rejection sampler, and every minor release of transformers' assisted generation,
checked unmodified and exactly on the CPU (issue 76, items 3 and 5).

    python experiments/engine_releases.py        # 0.20.0 to the newest: docs/results/engine-releases.json
    python experiments/engine_releases.py --releases 0.32.0,0.33.0 --checks v1-greedy --out /tmp/releases.json
    python experiments/engine_releases.py --engine transformers   # docs/results/engine-releases-transformers.json

transformers releases often (4.46 to 5.24 are 87 releases): its run checks the last patch of every minor release
from 4.46 on, each with the newest ``tokenizers`` and ``huggingface-hub`` its own metadata allows (downloaded
without dependencies and unpacked beside it: 4.x pins ``huggingface-hub<1.0`` and checks it when it imports).

For each release the registry lists (``pip index versions vllm``, from ``--since``), the wheel is downloaded without
its dependencies (``pip download --no-deps``), its Python files and its ``METADATA`` are unpacked into a cache
outside git (``$VERISPEC_CACHE/engines/vllm-<release>``, by default ``~/.cache/verispec/engines``) and the wheel is
deleted. Each check then runs as a user runs it: ``python -m verispec check-engine vllm --check NAME --json``, in a
process whose ``PYTHONPATH`` puts the unpacked release before the installed one, so that the release's own files,
and its own ``importlib.metadata`` version, are what the adapter finds. Torch (2.13.0+cpu), Triton (3.9.0) and the
small modules of ``verispec/engines/requirements/vllm.txt`` are the installed ones for every release; a release that
does not import with them is listed with the one-line reason ``check-engine`` gives.

Each (release, check) row is cached as a JSON file keyed by the release, the check's name and definition, the
budget and the SHA-256 of verispec's engine and checking code, so an interrupted run resumes where it stopped and a
changed checker checks again. The result file carries the run's record (command, commit, date, machine), a table of
release by check by verdict, each LOSSY row's witness, and a summary; ``docs/generate.py`` renders the findings page
``docs/findings/engine_releases.md`` from it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from verispec.engines import version_key as _version_key  # noqa: E402 (after the checkout's path)

DEFAULT_OUT = ROOT / "docs" / "results" / "engine-releases.json"
PACKAGE = "vllm"
#: The checks of every release: V1's probabilistic path with a seeded request, V1's greedy kernel, and the V2
#: runner's Gumbel drafting with its probabilistic rejection sampler (where #47386 lived). ``--checks`` adds others
#: (v1-ngram, v1-unseeded, v1-min-p, v2-block, ...).
DEFAULT_CHECKS = ("v1-seeded", "v1-greedy", "v2-seeded")
#: Seconds each check may take (``--time-budget``); the process gets 120 s more to import and report.
BUDGET = 600.0
#: Each engine the run knows: its oldest release, its default checks, its result file, whether only the last patch
#: of each minor release is checked, and the dependencies unpacked beside each release (at the newest version its
#: own metadata allows).
ENGINES = {
    "vllm": {"since": "0.20.0", "checks": DEFAULT_CHECKS, "out": DEFAULT_OUT, "last_patches": False,
             "dependencies": ("blake3", "setproctitle")},  # what releases before 0.17 import and 0.33 does not
    "transformers": {"since": "4.46.0",
                     "checks": ("generate-top-k", "speculative-sampling", "generate-ensemble"),
                     "out": ROOT / "docs" / "results" / "engine-releases-transformers.json", "last_patches": True,
                     "dependencies": ("tokenizers", "huggingface-hub", "httpx", "httpcore")},
}
#: A check-engine refusal that says the release has no such entry point (block verification before 0.25): the row
#: reads ABSENT; one that says the adapter does not read this release's entry point (the V2 runner of 0.20 and
#: 0.21) reads UNREAD. Any other refusal reads REFUSED.
ABSENT_MARKS = ("has no V2 rejection sampler", "has no block verification", "has no assistant_ensemble_weight")
UNREAD_MARKS = ("which the adapter does not read",)  # also the V2 runner's murmur3 noise (0.31 on)
#: verispec's files whose change invalidates the cached rows: everything a check runs through, and the engine's own
#: adapter files (``ENGINE_FILES``; another engine's adapter does not invalidate them). These are roots: the digest
#: also covers every verispec module they import, at any depth and inside functions (``checker_files``), so a
#: module a check reaches (the seed check, the guard, the sandbox) cannot change without re-checking.
CHECKER_FILES = ("verispec/engines/__init__.py", "verispec/engines/check.py", "verispec/engines/greedy.py",
                 "verispec/engines/seeds.py", "verispec/external", "verispec/keyed.py", "verispec/verdict.py",
                 "verispec/cli/check_engine.py", "verispec/simulator", "verispec/models/sampling.py",
                 "verispec/models/penalties.py", "verispec/verifiers")  # the requested law and the reference rules
ENGINE_FILES = {"vllm": ("verispec/engines/vllm.py", "verispec/engines/vllm_v1.py", "verispec/engines/vllm_v2.py",
                         "verispec/engines/interpreter.py"),
                "transformers": ("verispec/engines/transformers.py", "verispec/engines/transformers_step.py")}


def registry_releases(since: str, package: str = PACKAGE, last_patches: bool = False) -> list[str]:
    """The releases the package registry lists, from ``since`` on, oldest first (``last_patches``: only the last
    patch of each minor release); pre-releases are left out."""
    done = subprocess.run([sys.executable, "-m", "pip", "index", "versions", package], capture_output=True, text=True,
                          timeout=300)
    match = re.search(r"Available versions:\s*(.+)", done.stdout)
    if not match:
        raise SystemExit(f"engine_releases: the registry lists no {package} releases "
                         f"({(done.stderr.strip().splitlines() or ['no answer'])[-1]})")
    releases = [name.strip() for name in match.group(1).split(",")]
    releases = sorted((name for name in releases if re.fullmatch(r"\d+(\.\d+){1,3}", name)
                       and _version_key(name) >= _version_key(since)), key=_version_key)
    return last_patch_of_each_minor(releases) if last_patches else releases


def last_patch_of_each_minor(releases: list[str]) -> list[str]:
    """The last patch of each minor release among ``releases``, oldest first ('4.46.3' of 4.46.1 to 4.46.3)."""
    last = {}
    for name in sorted(releases, key=_version_key):  # oldest first: the last one of a minor release stays
        last[_version_key(name)[:2]] = name
    return sorted(last.values(), key=_version_key)


def unpacked(release: str, cache: Path, package: str = PACKAGE, dependencies: tuple = ()) -> Path:
    """The folder holding ``release``'s Python files and its ``METADATA`` (downloaded and unpacked on first use),
    with each of ``dependencies`` whole, at the newest version the release's metadata allows."""
    folder = cache / f"{package}-{release}"
    if (folder / "COMPLETE").is_file():
        complete = json.loads((folder / "COMPLETE").read_text())
        recorded = {_requirement_name(entry["requirement"]) for entry in complete.get("dependencies", ())}
        if set(_requirements(_release_metadata(folder, package), dependencies)) - recorded:  # unpacked before
            _redo_dependencies(folder, complete, dependencies, package)  # they were asked for
        return folder
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache, prefix=f".{package}-{release}-") as scratch:
        done = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", f"{package}=={release}",
                               "-d", scratch], capture_output=True, text=True, timeout=1800)
        wheels = sorted(Path(scratch).glob("*.whl"))
        if done.returncode != 0 or not wheels:
            raise RuntimeError(f"no wheel of {package} {release} downloads "
                               f"({(done.stderr.strip().splitlines() or ['no output'])[-1][:200]})")
        wheel = wheels[0]
        digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
        staging = Path(scratch) / "unpacked"
        with zipfile.ZipFile(wheel) as archive:
            for name in archive.namelist():
                if (name.startswith(f"{package}/") and name.endswith(".py")) or name.endswith(".dist-info/METADATA"):
                    archive.extract(name, staging)
        complete = {"wheel": wheel.name, "sha256": digest}
        if dependencies:
            complete["dependencies"] = _unpack_dependencies(staging, Path(scratch) / "dependencies", dependencies,
                                                            package)
        (staging / "COMPLETE").write_text(json.dumps(complete) + "\n")
        if folder.exists():  # an earlier run stopped while moving it in
            shutil.rmtree(folder)
        staging.rename(folder)
    return folder


def _redo_dependencies(folder: Path, complete: dict, dependencies: tuple, package: str) -> None:
    """Unpack ``dependencies`` beside a release unpacked before they were asked for (its wheel is not downloaded
    again): into a copy of the folder, moved in for the old one. An interrupted run leaves the old folder, the new
    one, or (between the two renames) none, and the next run unpacks the release again."""
    with tempfile.TemporaryDirectory(dir=folder.parent, prefix=f".{folder.name}-") as scratch:
        staging = Path(scratch) / "unpacked"
        shutil.copytree(folder, staging, ignore=shutil.ignore_patterns("COMPLETE"))
        complete = {**complete, "dependencies": _unpack_dependencies(staging, Path(scratch) / "dependencies",
                                                                     dependencies, package)}
        (staging / "COMPLETE").write_text(json.dumps(complete) + "\n")
        folder.rename(Path(scratch) / "old")
        staging.rename(folder)


def _release_metadata(folder: Path, package: str) -> Path:
    """The release's own ``METADATA`` in an unpacked folder (its dependencies' lie beside it)."""
    normal = package.replace("-", "_").lower()
    return next(path for path in sorted(folder.glob("*.dist-info/METADATA"))
                if path.parent.name.lower().startswith(f"{normal}-"))


def _requirement_name(requirement: str) -> str:
    """The normalised package name a requirement starts with ('Tokenizers_X>=1' -> 'tokenizers-x')."""
    return re.match(r"[A-Za-z0-9_.-]+", requirement).group(0).lower().replace("_", "-")


def _requirements(metadata: Path, names: tuple) -> dict:
    """{name: requirement} of the ``Requires-Dist`` lines of ``metadata`` that name one of ``names`` (no extra)."""
    wanted = {}
    for line in metadata.read_text(errors="replace").splitlines():
        match = re.fullmatch(r"Requires-Dist:\s*([A-Za-z0-9_.-]+)\s*\(?([^;)]*)\)?\s*(;.*)?", line.strip())
        name = _requirement_name(match.group(1)) if match else None
        if name in names and "extra" not in (match.group(3) or ""):
            wanted[name] = f"{match.group(1)}{match.group(2).replace(' ', '')}"
    return wanted


def _unpack_dependencies(staging: Path, scratch: Path, names: tuple, package: str = PACKAGE) -> list[dict]:
    """Each package of ``names`` that the unpacked release requires, directly or through another of ``names`` (no
    extra), downloaded at the newest version its requirement allows and unpacked whole into ``staging``:
    [{wheel, sha256, requirement}] (huggingface-hub 1.x brings httpx, which the installed 2.x does not use)."""
    pending = _requirements(_release_metadata(staging, package), names)
    found, done_names = [], set()
    while pending:
        name, requirement = pending.popitem()
        done_names.add(name)
        target = scratch / name
        done = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", requirement, "-d",
                               str(target)], capture_output=True, text=True, timeout=1800)
        wheels = sorted(target.glob("*.whl"))
        if done.returncode != 0 or not wheels:
            raise RuntimeError(f"no wheel of {requirement} downloads "
                               f"({(done.stderr.strip().splitlines() or ['no output'])[-1][:200]})")
        with zipfile.ZipFile(wheels[0]) as archive:
            archive.extractall(staging)
            metadata = next(entry for entry in archive.namelist() if entry.endswith(".dist-info/METADATA"))
        found.append({"wheel": wheels[0].name, "sha256": hashlib.sha256(wheels[0].read_bytes()).hexdigest(),
                      "requirement": requirement})
        for more, wanted in _requirements(staging / metadata, names).items():
            if more not in done_names:
                pending.setdefault(more, wanted)
    return found


def _module_file(name: str) -> Path | None:
    """The file of verispec module ``name`` in this checkout (a package's ``__init__.py``), or None."""
    path = ROOT.joinpath(*name.split("."))
    for file in (path / "__init__.py", path.with_suffix(".py")):
        if file.is_file():
            return file
    return None


def _imported_modules(file: Path, *, module_level: bool = False) -> set[str]:
    """The verispec modules ``file`` imports (anywhere, or with ``module_level`` only outside functions), relative
    ones resolved; ``from package import name`` counts ``package.name`` too, a module when such a file exists."""
    import ast

    package = ".".join(file.relative_to(ROOT).with_suffix("").parts)
    if file.name != "__init__.py":
        package = package.rpartition(".")[0]
    found, nodes = set(), [ast.parse(file.read_text(), str(file))]
    while nodes:
        node = nodes.pop()
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1] + ([base] if base else []))
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
        if not (module_level and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))):
            nodes.extend(ast.iter_child_nodes(node))
    return {name for name in found if name.split(".")[0] == "verispec"}


def checker_files(engine: str = PACKAGE) -> list[Path]:
    """The files of the checker: ``CHECKER_FILES`` and the engine's ``ENGINE_FILES`` (a folder's ``*.py`` files), and
    every verispec module they import, transitively, with each package above a module (its ``__init__`` runs).

    The command-line parser imports every command's module for its table, but another command's functions (and what
    they import) run only when that command runs: of ``verispec/cli``'s modules outside the roots, only the imports
    outside functions are followed."""
    roots, pending, seen = set(), [], set()
    for entry in CHECKER_FILES + ENGINE_FILES[engine]:
        path = ROOT / entry
        roots.update(sorted(path.rglob("*.py")) if path.is_dir() else [path])
    pending.extend(sorted(roots))
    while pending:
        file = pending.pop()
        if file in seen:
            continue
        seen.add(file)
        if file.suffix != ".py":
            continue
        other_command = file.parent == ROOT / "verispec" / "cli" and file not in roots
        for name in _imported_modules(file, module_level=other_command):
            parts = name.split(".")
            for depth in range(1, len(parts) + 1):
                found = _module_file(".".join(parts[:depth]))
                if found is not None and found not in seen:
                    pending.append(found)
    return sorted(seen)


def compact_json(result: dict) -> str:
    """``result`` as JSON with one line per row and per release's wheel (a table of hundreds of rows stays small
    and its diffs readable)."""
    parts = []
    for key, value in result.items():
        if key in ("rows", "wheels") and value:
            items = (json.dumps(item) for item in value) if key == "rows" else (
                f"{json.dumps(name)}: {json.dumps(item)}" for name, item in value.items())
            opening, closing = ("[", "]") if key == "rows" else ("{", "}")
            parts.append(f"{json.dumps(key)}: {opening}\n  " + ",\n  ".join(items) + f"\n {closing}")
        else:
            parts.append(f"{json.dumps(key)}: " + json.dumps(value, indent=1).replace("\n", "\n "))
    return "{\n " + ",\n ".join(parts) + "\n}\n"


def checker_digest(engine: str = PACKAGE) -> str:
    """SHA-256 over verispec's checking code (``checker_files``): a changed checker re-checks every release."""
    digest = hashlib.sha256()
    for file in checker_files(engine):
        digest.update(str(file.relative_to(ROOT)).encode() + b"\0" + file.read_bytes())
    return digest.hexdigest()


def check_definitions(engine: str = PACKAGE) -> dict:
    """Every check of the engine's adapter, by name, as the fields that define it."""
    sys.path.insert(0, str(ROOT))
    from dataclasses import asdict

    from verispec.engines import adapter

    return {check.name: asdict(check) for check in adapter(engine).checks()}


def command(check: str, budget: float, any_release: bool, package: str = PACKAGE) -> list[str]:
    argv = [sys.executable, "-m", "verispec", "check-engine", package, "--check", check, "--json", "--time-budget",
            f"{budget:g}"]
    return argv + (["--any-release"] if any_release else [])


def run_check(release: str, folder: Path, check: str, budget: float, any_release: bool,
              package: str = PACKAGE) -> dict:
    """One (release, check) row: the command's verdict and what it rests on, or why the release was refused."""
    from verispec.guard.output import run_checked

    argv = command(check, budget, any_release, package)
    # one torch thread a check (a loaded 2-core box); the unpacked release before the installed one
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(folder), str(ROOT), os.environ.get("PYTHONPATH")]))}
    start = time.monotonic()
    # the verdict from the --json-out file the code under check cannot write, never from stdout
    status, report, err = run_checked(argv, cwd=ROOT, timeout=budget + 120, env=env)
    row = {"release": release, "check": check, "exit_status": status, "seconds": round(time.monotonic() - start, 1),
           "command": f"PYTHONPATH=<{package}-{release}> " + shlex.join(["verispec", *argv[3:]])}
    if not isinstance(report, dict) or not report.get("checks"):
        error = (err.strip().splitlines() or ["no output"])[-1][:400]
        verdict = ("ABSENT" if any(mark in error for mark in ABSENT_MARKS) else
                   "UNREAD" if any(mark in error for mark in UNREAD_MARKS) else "REFUSED")
        row.update(verdict=verdict, error=error)
        return row
    found = report["checks"][0]
    if report.get("release") != release:  # the installed release answered, not the unpacked one
        row.update(verdict="REFUSED", error=f"check-engine read release {report.get('release')}, not {release}")
        return row
    over = (found.get("discrepancies") or {}).get("overproduced") or []
    row.update({key: found.get(key) for key in ("verdict", "expected", "as_expected", "mode", "tv_distance",
                                                 "threshold", "evaluations", "tree", "sampling", "target", "draft",
                                                 "note", "witness")})
    if found.get("verdict") == "LOSSY" and not row.get("witness"):
        row["witness"] = {"target": found.get("target"), "draft": found.get("draft"), "tree": found.get("tree"),
                          "sampling": found.get("sampling"), "overproduced": over[0] if over else None}
    return row


#: The drafting probe of transformers (``verispec.engines.transformers_step.handed_draft_law``): an assistant of law
#: q = (0.3, 0.7) at temperature 0.7, the q handed to ``_speculative_sampling`` read back, and the power it raises q
#: to, in units of 1/T: 1 when the temperature is applied once (the law a user asks for), 1/T = 1.43 when twice.
DRAFT_PROBE = {"draft": [0.3, 0.7], "temperature": 0.7}
_PROBE_SCRIPT = ("import json, sys; from verispec.engines.transformers_step import handed_draft_law; "
                 "print(json.dumps(handed_draft_law(*json.loads(sys.argv[1]))))")


def probe_drafting(release: str, folder: Path) -> dict:
    """transformers ``release``'s drafting temperature (``DRAFT_PROBE``): {release, handed, times_temperature,
    applied: 'once', 'twice' or 'other', or error}."""
    import math

    env = {**os.environ, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(folder), str(ROOT), os.environ.get("PYTHONPATH")]))}
    arguments = json.dumps([DRAFT_PROBE["draft"], DRAFT_PROBE["temperature"]])
    done = subprocess.run([sys.executable, "-c", _PROBE_SCRIPT, arguments], cwd=ROOT, capture_output=True, text=True,
                          timeout=600, env=env)
    row = {"release": release, **DRAFT_PROBE}
    try:
        handed = json.loads(done.stdout.strip().splitlines()[-1])
    except (json.JSONDecodeError, IndexError):
        row["error"] = (done.stderr.strip().splitlines() or ["no output"])[-1][:400]
        return row
    q, t = DRAFT_PROBE["draft"], DRAFT_PROBE["temperature"]
    power = math.log(handed[1] / handed[0]) / math.log(q[1] / q[0])
    times = power * t
    row.update(handed=handed, times_temperature=round(times, 6), applied=drafting_applied(times, t))
    return row


def drafting_applied(times: float, temperature: float) -> str:
    """'once' when the handed q is q^(times / T) with times = 1 (the law asked for), 'twice' when times = 1/T
    (q^(1/T^2)), 'other' otherwise (to 1e-4: the probe reads float32 scores)."""
    if abs(times - 1) < 1e-4:
        return "once"
    return "twice" if abs(times - 1 / temperature) < 1e-4 else "other"


def cached_row(cache: Path, release: str, check: str, key: str, package: str = PACKAGE):
    path = cache / "results" / f"{package}-{release}-{check}-{key[:16]}.json"
    return path, (json.loads(path.read_text()) if path.is_file() else None)


def summarize(releases: list[str], rows: list[dict], checks: list[str]) -> dict:
    """Counts, the releases each check is LOSSY in (unexpectedly), and the releases refused."""
    unexpected = [row for row in rows if row["verdict"] == "LOSSY" and not row.get("as_expected")]
    return {"releases": len(releases), "oldest": releases[0] if releases else None,
            "newest": releases[-1] if releases else None, "checks": checks, "rows": len(rows),
            "lossless": sum(row["verdict"] == "LOSSLESS" for row in rows),
            "reproducible": sum(row["verdict"] == "REPRODUCIBLE" for row in rows),
            "irreproducible": [{"release": row["release"], "check": row["check"]} for row in rows
                               if row["verdict"] == "IRREPRODUCIBLE"],
            "lossy_expected": sum(row["verdict"] == "LOSSY" and bool(row.get("as_expected")) for row in rows),
            "lossy_unexpected": [{"release": row["release"], "check": row["check"], "tv": row.get("tv_distance")}
                                 for row in unexpected],
            "absent": sorted({(row["release"], row["check"]) for row in rows if row["verdict"] == "ABSENT"}),
            "unread": sorted({(row["release"], row["check"]) for row in rows if row["verdict"] == "UNREAD"}),
            "other": sorted({(row["release"], row["check"], row["verdict"]) for row in rows
                             if row["verdict"] not in ("LOSSLESS", "LOSSY", "ABSENT", "UNREAD", "REPRODUCIBLE",
                                                       "IRREPRODUCIBLE")}),
            "refused_releases": sorted({row["release"] for row in rows if row["verdict"] == "REFUSED"},
                                       key=_version_key)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engine", choices=sorted(ENGINES), default=PACKAGE, help="the engine (default vllm)")
    parser.add_argument("--since", default=None, help="the oldest release checked (default vllm 0.20.0, "
                                                      "transformers 4.46.0)")
    parser.add_argument("--releases", default="", help="comma-separated releases (default: the registry's from "
                                                       "--since on)")
    parser.add_argument("--checks", default=None, help="comma-separated check-engine checks (default the engine's)")
    parser.add_argument("--out", type=Path, default=None, help="the result file (default the engine's, under "
                                                                "docs/results)")
    parser.add_argument("--budget", type=float, default=BUDGET, help="seconds per check")
    parser.add_argument("--cache", type=Path, default=None,
                        help="where releases and rows are cached (default $VERISPEC_CACHE/engines)")
    parser.add_argument("--any-release", action="store_true",
                        help="check releases outside the adapter's list (their entry points are still verified)")
    args = parser.parse_args(argv)
    engine = ENGINES[args.engine]
    args.since = args.since or engine["since"]
    args.checks = args.checks or ",".join(engine["checks"])
    args.out = args.out or engine["out"]
    if not (0 < args.budget < float("inf")):
        print(f"engine_releases: --budget {args.budget:g} is out of range: give a positive number of seconds",
              file=sys.stderr)
        return 2
    if not re.fullmatch(r"\d+(\.\d+){1,3}", args.since):
        print(f"engine_releases: --since {args.since!r} is not a release: give one such as 0.20.0", file=sys.stderr)
        return 2
    sys.path.insert(0, str(ROOT))
    from verispec.errors import VerispecError
    from verispec.files.io import atomic_write_json, atomic_write_text, cache_root
    from verispec.files.provenance import check_result_output, run_record

    try:  # a file at --out that is not a result file is the user's: never replaced
        check_result_output(args.out)
    except VerispecError as error:
        print(f"engine_releases: {error}", file=sys.stderr)
        return 2
    definitions = check_definitions(args.engine)
    checks = [name for name in args.checks.split(",") if name]
    unknown = [name for name in checks if name not in definitions]
    if unknown or not checks:
        print(f"engine_releases: unknown check {', '.join(unknown) or repr(args.checks)}; the adapter has "
              f"{', '.join(definitions)}", file=sys.stderr)
        return 2
    releases = ([name for name in args.releases.split(",") if name] if args.releases
                else registry_releases(args.since, args.engine, engine["last_patches"]))
    cache = args.cache or cache_root() / "engines"
    record = run_record(shlex.join(["python", "experiments/engine_releases.py", *(argv or sys.argv[1:])]),
                        outputs=[args.out])
    digest = checker_digest(args.engine)
    record["checker_sha256"] = digest
    rows = []
    for index, release in enumerate(releases):
        try:
            folder = unpacked(release, cache, args.engine, engine["dependencies"])
            wheel = json.loads((folder / "COMPLETE").read_text())
        except (RuntimeError, OSError, subprocess.TimeoutExpired, zipfile.BadZipFile) as error:
            rows += [{"release": release, "check": check, "verdict": "REFUSED", "error": str(error)[:400]}
                     for check in checks]
            print(f"[{index + 1}/{len(releases)}] {release}: {error}", file=sys.stderr, flush=True)
            continue
        for check in checks:
            key = hashlib.sha256(json.dumps([release, definitions[check], args.budget, args.any_release, digest,
                                             wheel["sha256"]], sort_keys=True).encode()).hexdigest()
            path, row = cached_row(cache, release, check, key, args.engine)
            if row is None:
                row = run_check(release, folder, check, args.budget, args.any_release, args.engine)
                row["wheel"] = wheel
                if row["verdict"] != "REFUSED" or row.get("exit_status") is not None:  # a timeout is not cached
                    atomic_write_json(path, row)
            rows.append(row)
            tv = "" if row.get("tv_distance") is None else f", TV {row['tv_distance']:.3g}"
            print(f"[{index + 1}/{len(releases)}] {release} {check}: {row['verdict']}{tv} ({row['seconds']} s)"
                  + (f": {row['error']}" if row.get("error") else ""), file=sys.stderr, flush=True)
    drafting = []
    if args.engine == "transformers":  # how the assistant drafts: the law asked for, or another one
        for release in releases:
            folder = cache / f"{args.engine}-{release}"
            if not (folder / "COMPLETE").is_file():
                continue
            key = hashlib.sha256(json.dumps([release, DRAFT_PROBE, digest]).encode()).hexdigest()
            path, row = cached_row(cache, release, "draft-probe", key, args.engine)
            if row is None:
                row = probe_drafting(release, folder)
                if "error" not in row:
                    atomic_write_json(path, row)
            drafting.append(row)
            print(f"{release} drafting: {row.get('applied', row.get('error'))}", file=sys.stderr, flush=True)
    wheels = {row["release"]: row["wheel"] for row in rows if row.get("wheel")}  # each release's once, not a row's
    rows = [{key: value for key, value in row.items() if key != "wheel"} for row in rows]
    result = {"record": record, "engine": args.engine, "summary": summarize(releases, rows, checks),
              "drafting": drafting, "releases": releases, "wheels": wheels,
              "checks": {name: definitions[name] for name in checks}, "rows": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.out, compact_json(result))
    summary = result["summary"]
    print(f"{len(releases)} releases x {len(checks)} checks: {summary['lossless']} LOSSLESS, "
          f"{summary['lossy_expected']} documented LOSSY, {len(summary['lossy_unexpected'])} unexpected LOSSY, "
          f"{summary['reproducible']} REPRODUCIBLE, {len(summary['irreproducible'])} IRREPRODUCIBLE, "
          f"{len(summary['refused_releases'])} releases refused; wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
