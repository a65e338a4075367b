"""The zoo of engine bugs: re-creations of publicly reported 2025-26 bugs in speculative decoding's drafting,
verification and sampling, each beside its fixed twin, checked by ``verispec check-external`` as a user runs it.

    python experiments/engine_bugs.py                 # every bug, buggy and fixed: docs/results/engine-bugs.json
    python experiments/engine_bugs.py --only vllm-47386 --out /tmp/bugs.json   # some of them, elsewhere

Each bug is one file ``examples/engine_bugs/<id>.py``: the re-creation (``buggy``) and its fixed twin (``fixed``),
written in the engine's shape, and a literal ``BUG = {...}`` (read with ``ast.literal_eval``, never run) naming its
repository, thread(s) and date, its class, and the check that shows it (layout, tree, problem, sampling, mode; a
black-box check names the TV it is powered for). Each version is checked by the command line itself
(``python -m verispec check-external ... --json``, in the sandbox, under ``--time-budget``), so a row is what a user
would see. A row holds: bug, thread, version, verdict, mode, TV (exact, or the black-box estimate), the smallest
witness (the problem, and the sequence the version over-produces most against the target), seconds, and the exit
status. The goal (issue 65): every buggy version LOSSY with a witness, every fixed one LOSSLESS, none refused; a bug
the catalogue marks inexpressible is listed with its reason and counts against the goal. The file carries the run's
record (command, commit, date, machine, each bug file's SHA-256) and a summary; ``docs/generate.py`` renders the
findings page ``docs/findings/engine_bugs.md`` from it.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ZOO = ROOT / "examples" / "engine_bugs"
DEFAULT_OUT = ROOT / "docs" / "results" / "engine-bugs.json"
#: Seconds each version's check may take (``--time-budget``), and the wall-clock limit around its process.
BUDGET = 240.0
VERSIONS = ("buggy", "fixed")
EXPECTED = {"buggy": "LOSSY", "fixed": "LOSSLESS"}


#: Keys every ``BUG`` literal states.
REQUIRED = ("repository", "threads", "date", "title", "class", "layout", "tree")


def load_catalogue(folder: Path = ZOO) -> list[dict]:
    """Every bug of the zoo, by file name: its ``BUG`` literal, with ``id`` (the file's stem) and ``file``."""
    import ast

    entries = []
    for path in sorted(folder.glob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        literal = next((node.value for node in tree.body if isinstance(node, ast.Assign)
                        and any(isinstance(t, ast.Name) and t.id == "BUG" for t in node.targets)), None)
        if literal is None:
            continue
        entry = {**ast.literal_eval(literal), "id": path.stem.replace("_", "-"), "file": path.name}
        missing = [key for key in REQUIRED if key not in entry]
        if missing:
            raise SystemExit(f"engine_bugs: {path.name}'s BUG states no {missing[0]!r}")
        entries.append(entry)
    return entries


def command(entry: dict, version: str, budget: float) -> list[str]:
    """The check-external command line of one version of one bug."""
    argv = [sys.executable, "-m", "verispec", "check-external",
            f"examples/engine_bugs/{entry['file']}:{entry.get(version, version)}", "--layout", entry["layout"],
            "--tree", entry["tree"], "--json", "--time-budget", f"{budget:g}"]
    if "problem" in entry:
        argv += ["--problem", f"examples/engine_bugs/{entry['problem']}"]
    else:
        argv += ["--target", ",".join(f"{x:g}" for x in entry["target"]),
                 "--draft", ",".join(f"{x:g}" for x in entry["draft"])]
    for option in ("sampling", "arrays", "rng", "mode", "detect_tv", "samples"):
        if entry.get(option) is not None:
            argv += [f"--{option.replace('_', '-')}", str(entry[option])]
    if entry.get("per_row"):
        argv.append("--per-row")
    return argv


def check(entry: dict, version: str, budget: float) -> dict:
    """One version's row: the command's verdict and what it rests on."""
    from verispec.guard.output import run_checked

    argv = command(entry, version, budget)
    start = time.monotonic()
    # one torch thread a check: on a loaded 2-core box two threads make each tiny op ~70 times slower
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    # the verdict from the --json-out file the code under check cannot write, never from stdout
    status, report, err = run_checked(argv, cwd=ROOT, timeout=budget + 60, env=env)
    seconds = time.monotonic() - start
    row = {"bug": entry["id"], "thread": entry["threads"][0], "version": version,
           "function": f"{entry['file']}:{entry.get(version, version)}", "exit_status": status,
           "seconds": round(seconds, 1), "command": shlex.join(["verispec", *argv[3:]])}
    if not isinstance(report, dict) or "verdict" not in report:
        row.update(verdict="REFUSED", mode=None, tv=None, witness=None,
                   error=(err.strip().splitlines() or ["no output"])[-1][:400])
        return row
    over = (report.get("discrepancies") or {}).get("overproduced") or []
    tv = report.get("tv_distance")
    verdict = str(report["verdict"]).upper()  # --json writes the verdict in lower case
    row.update(verdict=verdict, mode=report["mode"],
               tv=tv if tv is not None else report.get("tv_estimate"),
               tv_kind="exact" if tv is not None else "estimate" if report.get("tv_estimate") is not None else None,
               witness=None if verdict != "LOSSY" else {
                   "problem": problem_text(entry), "tree": entry["tree"], "sampling": entry.get("sampling"),
                   "overproduced": over[0] if over else None},
               power=(report.get("power") or {}).get("statement"))
    return row


def problem_text(entry: dict) -> str:
    if "problem" in entry:
        return entry["problem"]
    return f"p = ({', '.join(f'{x:g}' for x in entry['target'])}), q = ({', '.join(f'{x:g}' for x in entry['draft'])})"


def summarize(entries: list[dict], rows: list[dict]) -> dict:
    expressible = [entry for entry in entries if entry.get("expressible", True)]
    met = [entry["id"] for entry in expressible
           if all(any(row["bug"] == entry["id"] and row["version"] == version and row["verdict"] == EXPECTED[version]
                      for row in rows) for version in VERSIONS)]
    return {"bugs": len(entries), "repositories": len({entry["repository"] for entry in entries}),
            "expressible": len(expressible), "goal_met": len(met),
            "buggy_lossy": sum(row["version"] == "buggy" and row["verdict"] == "LOSSY" for row in rows),
            "fixed_lossless": sum(row["version"] == "fixed" and row["verdict"] == "LOSSLESS" for row in rows),
            "refused": sum(row["verdict"] == "REFUSED" for row in rows),
            "inexpressible": [{"bug": entry["id"], "reason": entry.get("reason", "")} for entry in entries
                              if not entry.get("expressible", True)],
            "missed": sorted({entry["id"] for entry in expressible} - set(met))}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default="", help="comma-separated bug ids (default: all)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--budget", type=float, default=BUDGET, help="seconds per version's check")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from verispec.errors import VerispecError
    from verispec.files.io import atomic_write_text
    from verispec.files.provenance import check_result_output, run_record

    if not (math.isfinite(args.budget) and 0 < args.budget <= 86400):
        print(f"engine_bugs: --budget {args.budget:g} is out of range: give the seconds each version's check may "
              "take, in (0, 86400]", file=sys.stderr)
        return 2
    try:  # a file at --out that is not a result file is the user's: never replaced
        check_result_output(args.out)
    except VerispecError as error:
        print(f"{Path(__file__).stem}: {error}", file=sys.stderr)
        return 2
    entries = load_catalogue()
    wanted = [name for name in args.only.split(",") if name]
    unknown = sorted(set(wanted) - {entry["id"] for entry in entries})
    if unknown:
        print(f"engine_bugs: unknown bug id {unknown[0]}; the catalogue lists "
              f"{', '.join(entry['id'] for entry in entries)}", file=sys.stderr)
        return 2
    chosen = [entry for entry in entries if not wanted or entry["id"] in wanted]
    record = run_record(shlex.join(["python", "experiments/engine_bugs.py", *(argv or sys.argv[1:])]),
                        [ZOO / entry["file"] for entry in chosen])
    rows = []
    for index, entry in enumerate(chosen):
        if not entry.get("expressible", True):
            print(f"[{index + 1}/{len(chosen)}] {entry['id']}: not expressible ({entry.get('reason', '')})",
                  file=sys.stderr)
            continue
        for version in VERSIONS:
            row = check(entry, version, args.budget)
            rows.append(row)
            tv = "" if row.get("tv") is None else f", TV {row['tv']:.4g}"
            print(f"[{index + 1}/{len(chosen)}] {entry['id']} {version}: {row['verdict']} ({row.get('mode')}{tv}, "
                  f"{row['seconds']} s)", file=sys.stderr, flush=True)
    bugs = [{key: entry[key] for key in ("id", "repository", "threads", "date", "title", "class", "layout", "tree")}
            | {"expressible": entry.get("expressible", True), "reason": entry.get("reason"),
               "file": f"examples/engine_bugs/{entry['file']}"} for entry in chosen]
    result = {"record": record, "summary": summarize(chosen, rows), "bugs": bugs, "rows": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.out, json.dumps(result, indent=1) + "\n")
    summary = result["summary"]
    print(f"{summary['goal_met']} of {summary['expressible']} expressible bugs caught with their fixes passing "
          f"({summary['bugs']} bugs, {summary['repositories']} repositories); wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
