"""Real speculative-decoding code that runs on CPU, checked UNMODIFIED by ``verispec check-external`` (issue 65, item
5): transformers' assisted-generation acceptance path at the pinned version, Hierarchical Speculative Decoding's
``algorithm_clean.py`` and its head rewrite, and TensorRT-LLM's PyTorch two-model rejection sampler.

    python experiments/real_code.py                       # every check: docs/results/real-code.json
    python experiments/real_code.py --only hsd --out /tmp/real.json

The upstream files are never in this repository: ``examples/real_code/README.md`` says where to put them
(``$VERISPEC_HSD_DIR``, ``$VERISPEC_TRTLLM_DIR``; transformers is the installed package). Each check runs as a user
runs it, ``python -m verispec check-external ... --json`` in a subprocess under ``--time-budget``, through the thin
adapters of ``examples/real_code/`` (each states its upstream file, commit and what it converts). A row holds:
code, upstream repository, commit, layout, tree, problem, sampling, verdict, mode, TV (exact), the sequence most
over-produced, seconds and the exit status; the file carries the run record (command, commit, date, machine, the
SHA-256 of each adapter and upstream file).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "docs" / "results" / "real-code.json"
ADAPTERS = ROOT / "examples" / "real_code"
#: Seconds each check may take (``--time-budget``); the slowest here (HSD on chain:2) takes about 280 s on a
#: loaded 2-core box.
BUDGET = 600.0
PROBLEM = ("0.5,0.3,0.2", "0.2,0.2,0.6")
ZERO_TARGET = ("0.6,0.4,0", "0.2,0.2,0.6")
TRANSFORMERS = ("huggingface/transformers", "5.24.0 (installed; pyproject pins transformers>=5.0)")
HSD = "ZhouYuxuanYX/Hierarchical-Speculative-Decoding"
HSD_CLEAN = "89745108cd6c2eab5e4939fd4f78bb12610046c9 (algorithm_clean.py, its last version)"
HSD_HEAD = "b8575e2ad42bcf2b32d0c6f3481eb49099453f33 (algorithm.py, head)"
TRTLLM = ("NVIDIA/TensorRT-LLM", "00be09f78ecf0691f2b8e15dea518d1d6468679e")


def _check(name, code, repository, commit, layout, tree, problem=PROBLEM, sampling=None, extra=()):
    return {"name": name, "code": code, "repository": repository, "commit": commit, "layout": layout, "tree": tree,
            "target": problem[0], "draft": problem[1], "sampling": sampling, "extra": list(extra)}


CHECKS = [
    *[_check(f"transformers-speculative-sampling-chain{n}", "transformers.generation.utils:_speculative_sampling",
             *TRANSFORMERS, "transformers", f"chain:{n}") for n in (1, 2, 3)],
    _check("transformers-speculative-sampling-float32-zero-target",
           "examples/real_code/transformers_assisted.py:speculative_sampling_float32", *TRANSFORMERS, "transformers",
           "chain:1", ZERO_TARGET),
    *[_check(f"transformers-assisted-step-chain{n}", "examples/real_code/transformers_assisted.py:assisted_step",
             *TRANSFORMERS, "step", f"chain:{n}", sampling="temperature=0.7,top_k=2") for n in (1, 2, 3)],
    _check("transformers-assisted-step-top-p-min-p", "examples/real_code/transformers_assisted.py:assisted_step",
           *TRANSFORMERS, "step", "chain:1", sampling="temperature=1.3,top_p=0.9,min_p=0.1"),
    _check("transformers-assisted-step-float64-control",
           "examples/real_code/transformers_assisted.py:assisted_step_float64", *TRANSFORMERS, "step", "chain:1",
           sampling="temperature=0.7,top_k=2"),
    *[_check(f"hsd-chain{n}", "examples/real_code/hsd.py:hsd", HSD, HSD_CLEAN, "transformers", f"chain:{n}")
      for n in (1, 2)],
    _check("hsd-naive-chain2", "examples/real_code/hsd.py:hsd_naive", HSD, HSD_CLEAN, "transformers", "chain:2"),
    _check("hsd-head-chain1", "examples/real_code/hsd.py:hsd_head", HSD, HSD_HEAD, "transformers", "chain:1"),
    *[_check(f"trtllm-two-model-chain{n}", "examples/real_code/trtllm_two_model.py:verify", *TRTLLM, "chain",
             f"chain:{n}") for n in (1, 2)],
    _check("trtllm-two-model-zero-target", "examples/real_code/trtllm_two_model.py:verify", *TRTLLM, "chain",
           "chain:1", ZERO_TARGET),
    *[_check(f"trtllm-two-model-float64-control-{name}",
             "examples/real_code/trtllm_two_model.py:verify_float64_uniforms", *TRTLLM, "chain", "chain:2", problem)
      for name, problem in (("chain2", PROBLEM), ("zero-target", ZERO_TARGET))],
]


def command(entry: dict, budget: float) -> list[str]:
    argv = [sys.executable, "-m", "verispec", "check-external", entry["code"], "--layout", entry["layout"],
            "--tree", entry["tree"], "--rng", "capture", "--target", entry["target"], "--draft", entry["draft"],
            "--mode", "exact", "--time-budget", f"{budget:g}", "--json", *entry["extra"]]
    if entry["sampling"]:
        argv += ["--sampling", entry["sampling"]]
    return argv


def check(entry: dict, budget: float) -> dict:
    """One check's row: the command's verdict and what it rests on."""
    from verispec.guard.output import run_checked

    argv = command(entry, budget)
    start = time.monotonic()
    # the verdict from the --json-out file the code under check cannot write, never from stdout
    status, report, err = run_checked(argv, cwd=ROOT, timeout=budget + 120)
    row = {key: entry[key] for key in ("name", "code", "repository", "commit", "layout", "tree", "sampling")}
    row.update(problem=f"p = ({entry['target']}), q = ({entry['draft']})", exit_status=status,
               seconds=round(time.monotonic() - start, 1), command=shlex.join(["verispec", *argv[3:]]))
    if not isinstance(report, dict):
        row.update(verdict="REFUSED", mode=None, tv=None, error=(err.strip().splitlines() or ["no output"])[-1][:400])
        return row
    over = (report.get("discrepancies") or {}).get("overproduced") or []
    raised = report.get("raised") or {}
    row.update(verdict=str(report["verdict"]).upper(), mode=report.get("mode"), tv=report.get("tv_distance"),
               overproduced=over[0] if over else None,
               raised=f"{raised.get('exception')}: {raised.get('message')} ({raised.get('line')})" if raised else None)
    return row


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default="", help="run the checks whose name contains this text (default: all)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--budget", type=float, default=BUDGET, help="seconds per check")
    args = parser.parse_args(argv)
    if not (0 < args.budget <= 86400):  # a NaN fails it too
        print(f"real_code: --budget {args.budget:g} is out of range: give the seconds each check may take, in "
              "(0, 86400]", file=sys.stderr)
        return 2
    sys.path.insert(0, str(ROOT))
    from examples.real_code.hsd import DEFAULT_HSD_DIR, HSD_DIR_VARIABLE
    from examples.real_code.trtllm_two_model import DEFAULT_TRTLLM_DIR, MODULE, TRTLLM_DIR_VARIABLE
    from verispec.errors import VerispecError
    from verispec.files.io import atomic_write_text
    from verispec.files.provenance import check_result_output, run_record, sha256_file

    try:  # a file at --out that is not a result file is the user's: never replaced
        check_result_output(args.out)
    except VerispecError as error:
        print(f"{Path(__file__).stem}: {error}", file=sys.stderr)
        return 2
    hsd_dir = Path(os.environ.get(HSD_DIR_VARIABLE, DEFAULT_HSD_DIR))
    trtllm_file = Path(os.environ.get(TRTLLM_DIR_VARIABLE, DEFAULT_TRTLLM_DIR)).joinpath(*MODULE.split("."))
    upstream = [hsd_dir / "algorithm_clean.py", hsd_dir / "algorithm.py", trtllm_file.with_suffix(".py")]
    missing = [str(path) for path in upstream if not path.is_file()]
    if missing:
        print(f"real_code: {missing[0]} does not exist; see examples/real_code/README.md for the upstream files",
              file=sys.stderr)
        return 2
    chosen = [entry for entry in CHECKS if args.only in entry["name"]]
    # the record's inputs are the repository's files; the upstream files, which live outside it, are named with
    # their SHA-256 beside it (a fresh clone cannot hash them)
    record = run_record(shlex.join(["python", "experiments/real_code.py", *(argv or sys.argv[1:])]),
                        sorted(ADAPTERS.glob("*.py")))
    upstream_files = {str(path): sha256_file(path) for path in upstream}
    rows = []
    for index, entry in enumerate(chosen):
        row = check(entry, args.budget)
        rows.append(row)
        tv = "" if row.get("tv") is None else f", TV {row['tv']:.4g}"
        print(f"[{index + 1}/{len(chosen)}] {entry['name']}: {row['verdict']} ({row.get('mode')}{tv}, "
              f"{row['seconds']} s)", file=sys.stderr, flush=True)
    result = {"record": record, "upstream_files": upstream_files, "rows": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.out, json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.out} ({len(rows)} checks)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
