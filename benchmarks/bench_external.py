"""Checking verification code written elsewhere: what it costs, side by side with the built-in rule.

1. Token-level verification on chain:4 at V = 4 (256 draft trees), analysed exactly three ways in one run:
   the built-in ``naive`` law; the gallery's production-shape function (examples/external/greedy_assistant.py,
   ``verify_sampled``, layout ``chain``) integrated exactly over its 5 uniforms; and the same function in
   black-box mode (200,000 runs). The exact laws must agree to 1e-12.
2. Every gallery bug checked from scratch as ``verispec check-external`` does it (witness search, then the
   verdict), and every correct version on one problem.

Writes results/bench_external.md.

    python benchmarks/bench_external.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np

from verispec.external.adapter import ExternalVerifier, load_function
from verispec.external.blackbox import blackbox_test
from verispec.external.check import check_external
from verispec.io import atomic_write_text
from verispec.simulator import analyze, parse_tree, random_problem
from verispec.verifiers import get_verifier

GALLERY = Path(__file__).resolve().parent.parent / "examples" / "external"

#: The gallery's catalogue (function, layout, tree, arrays, lossless, mode), shared with the tests.
CATALOGUE = json.loads((GALLERY / "gallery.json").read_text())


def chain_at_v4_l4() -> list[str]:
    problem, drafter = random_problem(4, 4, 0), parse_tree("chain:4")
    function = load_function(f"{GALLERY / 'greedy_assistant.py'}:verify_sampled")
    rows = []
    start = time.perf_counter()
    reference = analyze(problem, drafter, get_verifier("naive"))
    rows.append(("built-in naive (closed-form law)", reference.method, time.perf_counter() - start, ""))
    external = ExternalVerifier(function, "chain")
    start = time.perf_counter()
    result = analyze(problem, drafter, external)
    seconds = time.perf_counter() - start
    difference = max(float(np.abs(a - b).max()) for a, b in
                     zip(result.output_law.by_length, reference.output_law.by_length, strict=True))
    if difference > 1e-12:
        raise AssertionError(f"the integrated law differs from the built-in law by {difference:.3g}")
    rows.append(("external function, exact mode", result.method, seconds,
                 f"{external.stats.evaluations:,} function rows, {external.stats.cells:,} cells, "
                 f"TV {result.tv_distance:.1e}"))
    start = time.perf_counter()
    test = blackbox_test(problem, drafter, ExternalVerifier(function, "chain"))
    rows.append(("external function, black-box mode", "200,000 runs", time.perf_counter() - start,
                 f"adjusted p {test.adjusted_p:.2g}, TV estimate {test.tv_estimate:.1e}"))
    base = rows[0][2]
    lines = ["### Token-level verification, chain:4 at V = 4 (256 draft trees)", "",
             "| rule | method | seconds | / built-in | |", "|---|---|---|---|---|"]
    lines += [f"| {name} | {method} | {seconds:.3f} | {seconds / base:.0f} | {extra} |"
              for name, method, seconds, extra in rows]
    return lines


def gallery() -> list[str]:
    lines = ["### The gallery, checked from scratch (witness search for bugs; one problem for correct versions)", "",
             "| function | layout | tree | verdict | mode | witness V | TV | problems tried | seconds |",
             "|---|---|---|---|---|---|---|---|---|"]
    for case in CATALOGUE:
        spec, layout, tree, arrays, lossless = (case[key] for key in ("function", "layout", "tree", "arrays",
                                                                     "lossless"))
        function = load_function(str(GALLERY / spec))
        start = time.perf_counter()
        if lossless:
            report = check_external(function, layout, tree, arrays=arrays, name=spec,
                                    problem=random_problem(3, parse_tree(tree).depth, 0))
        else:
            report = check_external(function, layout, tree, arrays=arrays, name=spec)
        seconds = time.perf_counter() - start
        if report.lossless != lossless:
            raise AssertionError(f"{spec}: expected lossless={lossless}, got {report.lossless}")
        verdict = "lossless" if report.lossless else "LOSSY"
        size = report.problem["vocab_size"] if report.problem else ""
        tv = "" if report.tv_distance is None else f"{report.tv_distance:.3g}"
        lines.append(f"| `{spec}` | {layout} | {tree} | {verdict} | {report.mode} | {size} | {tv} | "
                     f"{report.problems_tried or ''} | {seconds:.1f} |")
        print(lines[-1], flush=True)
    return lines


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="only the chain:4 timing")
    parser.add_argument("--output", default="results/bench_external.md")
    args = parser.parse_args(argv)
    lines = [f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}", ""] + chain_at_v4_l4()
    print("\n".join(lines), flush=True)
    if not args.quick:
        lines += [""] + gallery()
    table = "\n".join(lines) + "\n"
    atomic_write_text(args.output, table)
    print(table)


if __name__ == "__main__":
    main()
