"""A rule written by a user against the built-in one, side by side: token-level verification on chain:8 at
V = 4 (65,536 draft trees), analysed exactly.

* built-in: ``naive`` (verispec/verifiers/naive.py);
* user, batched law: the same rule written in a user's file with its one batched law and its procedure
  (examples/my_whole_tree_rule.py), loaded as ``FILE.py:RULE``; the engine gives it fast enumeration;
* user, procedure only: the README's ``my_rule`` (examples/my_rules.py), whose law comes from the generic
  enumerator tree by tree (skipped with --quick).

Every variant must give the same output law (1e-12). Writes results/bench_user_rule.md.

    python benchmarks/bench_user_rule.py [--quick]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

from verispec.simulator import analyze, parse_tree, random_problem
from verispec.verifiers import get_verifier, load_verifier

#: benchmarks/measure.py imports as ``measure`` when this script is loaded as a module too (its tests)
if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def main(argv=None) -> None:
    from measure import TABLE, add_overwrite_option, claim_outputs, write_table  # benchmarks/measure.py
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="skip the procedure-only rule")
    parser.add_argument("--output", default="results/bench_user_rule.md")
    add_overwrite_option(parser)
    args = parser.parse_args(argv)
    # before any work: a file there that is not this benchmark's own is refused (unless --overwrite), each
    # output locked for the run (benchmarks/measure.py: the writers' rule)
    claim_outputs(__file__, [("--output", args.output, TABLE)],
                  overwrite=args.overwrite)
    problem, drafter = random_problem(4, 8, 0), parse_tree("chain:8")
    variants = {"built-in naive": get_verifier("naive"),
                "user rule, batched law (examples/my_whole_tree_rule.py)": load_verifier(
                    f"{EXAMPLES / 'my_whole_tree_rule.py'}:RULE")}
    if not args.quick:
        variants["user rule, procedure only (examples/my_rules.py)"] = load_verifier(
            f"{EXAMPLES / 'my_rules.py'}:my_rule")
    rows, reference = [], None
    for name, verifier in variants.items():
        start = time.perf_counter()
        result = analyze(problem, drafter, verifier)
        seconds = time.perf_counter() - start
        if reference is None:
            reference = result
        difference = max(float(np.abs(a - b).max()) for a, b in
                         zip(result.output_law.by_length, reference.output_law.by_length, strict=True))
        if difference > 1e-12:
            raise AssertionError(f"{name} differs from the built-in rule by {difference:.3g}")
        rows.append((name, result.method, seconds))
        print(f"{name}: {result.method}, {seconds:.2f} s", flush=True)
    base = rows[0][2]
    lines = [f"chain:8 at V = 4 ({4 ** 8:,} draft trees), random context-dependent problem; {os.cpu_count()} CPUs, "
             f"load average {os.getloadavg()[0]:.2f}", "", "| rule | method | seconds | / built-in |",
             "|---|---|---|---|"]
    lines += [f"| {name} | {method} | {seconds:.2f} | {seconds / base:.2f} |" for name, method, seconds in rows]
    table = "\n".join(lines) + "\n"
    write_table(args.output, table)
    print(table)


if __name__ == "__main__":
    main()
