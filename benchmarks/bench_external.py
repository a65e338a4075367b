"""Checking verification code written elsewhere: what it costs, side by side with the built-in rule.

1. Token-level verification on chain:4 at V = 4 (256 draft trees), analysed exactly three ways in one run:
   the built-in ``naive`` law; the gallery's production-shape function (examples/external/greedy_assistant.py,
   ``verify_sampled``, layout ``chain``) integrated exactly over its 5 uniforms; and the same function in
   black-box mode (as many runs as its default power needs). The exact laws must agree to 1e-12.
2. One-sequence functions: the exact check of a rule written for ONE chain at a time (``per_row``) against the
   same rule vectorised over the batch, both drawing from torch's global RNG through RNG capture
   (examples/external/global_rng.py), and transformers' own ``_speculative_sampling``, unmodified, on chain:3 at
   V = 3 (27 draft trees).
3. The time to refuse an exponential race (vLLM's recovered-token sampler, examples/external/vllm_rejection.py,
   ragged layout, chain:2), both in one run of the same code: without the breakpoint check
   (``check_races=False``: the bounds on boxes alone) and with it.
4. Every gallery bug checked from scratch as ``verispec check-external`` does it (witness search, then the
   verdict), and every correct version on one problem.

Writes results/bench_external.md (--output to write elsewhere; the run the docs cite is
docs/results/bench/earlier/bench_external.md).

    python benchmarks/bench_external.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

from verispec.external.adapter import ExternalVerifier, load_function
from verispec.external.blackbox import blackbox_test
from verispec.external.check import check_external
from verispec.external.exact import NotPiecewiseConstantError
from verispec.simulator import ContextFreeProblem, analyze, parse_tree, random_problem
from verispec.verifiers import get_verifier

#: benchmarks/measure.py imports as ``measure`` when this script is loaded as a module too (its tests)
if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))

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
    rows.append(("external function, black-box mode", f"{test.samples:,} runs", time.perf_counter() - start,
                 f"adjusted p {test.adjusted_p:.2g}, TV estimate {test.tv_estimate:.1e}"))
    base = rows[0][2]
    lines = ["### Token-level verification, chain:4 at V = 4 (256 draft trees)", "",
             "| rule | method | seconds | / built-in | |", "|---|---|---|---|---|"]
    lines += [f"| {name} | {method} | {seconds:.3f} | {seconds / base:.0f} | {extra} |"
              for name, method, seconds, extra in rows]
    return lines


def one_sequence() -> list[str]:
    problem, drafter = random_problem(3, 3, 0), parse_tree("chain:3")
    reference = analyze(problem, drafter, get_verifier("naive"))
    function = load_function(f"{GALLERY / 'global_rng.py'}:speculative_sampling")
    cases = [("global_rng.py:speculative_sampling, vectorised", function, "chain",
              dict(arrays="torch", rng="capture")),
             ("the same, one row at a time (--per-row)", function, "chain",
              dict(arrays="torch", rng="capture", per_row=True))]
    try:
        from transformers.generation.utils import _speculative_sampling

        cases.append(("transformers' _speculative_sampling, unmodified", _speculative_sampling, "transformers",
                      dict(rng="capture")))
    except ImportError:
        pass
    lines = ["### One-sequence functions: exact check on chain:3 at V = 3 (27 draft trees), RNG capture", "",
             "| function | layout | seconds | rows through the function | per call (us) | TV | E[tau+1] - naive's |",
             "|---|---|---|---|---|---|---|"]
    for title, rule, layout, options in cases:
        verifier = ExternalVerifier(rule, layout, **options)
        start = time.perf_counter()
        result = analyze(problem, drafter, verifier)
        seconds = time.perf_counter() - start
        per_call = f"{1e6 * seconds / verifier.stats.evaluations:.0f}" if verifier.per_row else "(batched)"
        lines.append(f"| {title} | {layout} | {seconds:.2f} | {verifier.stats.evaluations:,} "
                     f"| {per_call} | {result.tv_distance:.1e} | "
                     f"{result.block_efficiency - reference.block_efficiency:.1e} |")
        print(lines[-1], flush=True)
    return lines


def torch_race_one_sequence(draft_tokens, draft_probs, target_probs):
    """Token-level verification of ONE chain on torch's global RNG whose correction token is an exponential race
    with its noise clamped away from 0 first (a use besides the race, so the race rule does not read it as one
    categorical draw; exact mode must refuse it)."""
    import torch

    tokens, q, p = draft_tokens[0], draft_probs[0], target_probs[0]
    length = tokens.shape[0]
    ratio = p[torch.arange(length), tokens] / q[torch.arange(length), tokens]
    rejected = (torch.rand_like(ratio) >= ratio).nonzero()
    accepted = int(rejected[0]) if len(rejected) else length
    law = (p[accepted] - q[accepted]).clamp(min=0) if accepted < length else p[length]
    noise = torch.empty_like(law).exponential_().clamp(min=1e-300)
    last = torch.argmax(law / noise).view(1)
    return torch.cat([tokens[:accepted], last, torch.full((length - accepted,), -1)]).view(1, -1)


def race_refusal(limit: float) -> list[str]:
    from verispec.errors import AnalysisTimeoutError
    from verispec.guard import budget

    vllm = load_function(f"{GALLERY / 'vllm_rejection.py'}:rejection_sample")
    lines = ["### Refusing an exponential race in exact mode, chain:2", "",
             "Both with today's code: without the breakpoint check (check_races=False: the bounds on boxes alone, "
             f"1024 per tree) and with it. Runs stopped at {limit:g} s.",
             "", "| function | problem | without the breakpoint check: seconds | evaluations | with it: seconds "
             "| evaluations |",
             "|---|---|---|---|---|---|"]
    cases = [("vllm_rejection.py:rejection_sample (ragged, numpy, batched)", vllm, "ragged", {},
              "context-free (0.5, 0.3, 0.2) / (0.2, 0.2, 0.6)", ContextFreeProblem([0.5, 0.3, 0.2], [0.2, 0.2, 0.6])),
             ("vllm_rejection.py:rejection_sample", vllm, "ragged", {}, "random V = 4, seed 1",
              random_problem(4, 2, 1)),
             ("a one-sequence torch race (chain, --rng capture --per-row)", torch_race_one_sequence, "chain",
              dict(arrays="torch", rng="capture", per_row=True), "context-free (0.5, 0.3, 0.2) / (0.2, 0.2, 0.6)",
              ContextFreeProblem([0.5, 0.3, 0.2], [0.2, 0.2, 0.6]))]
    for title, function, layout, options, problem_title, problem in cases:
        cells = []
        for check in (False, True):
            verifier = ExternalVerifier(function, layout, check_races=check, **options)
            start = time.perf_counter()
            try:
                with budget.time_budget(time.monotonic() + limit):
                    analyze(problem, "chain:2", verifier)
            except NotPiecewiseConstantError:
                seconds = f"{time.perf_counter() - start:.2f}"
            except AnalysisTimeoutError:
                seconds = f"> {limit:g} (stopped)"
            else:
                raise AssertionError(f"exact mode did not refuse the race of {title} on {problem_title}")
            cells.append(f"{seconds} | {verifier.stats.evaluations:,}")
        lines.append(f"| {title} | {problem_title} | {' | '.join(cells)} |")
        print(lines[-1], flush=True)
    return lines


def gallery() -> list[str]:
    lines = ["### The gallery, checked from scratch (witness search for bugs; one problem for correct versions)", "",
             "| function | layout | tree | verdict | mode | witness V | TV | problems tried | seconds |",
             "|---|---|---|---|---|---|---|---|---|"]
    for case in CATALOGUE:
        spec, layout, tree, arrays, lossless = (case[key] for key in ("function", "layout", "tree", "arrays",
                                                                     "lossless"))
        function = load_function(str(GALLERY / spec))
        options = {"rng": case["rng"]} if "rng" in case else {}
        start = time.perf_counter()
        if lossless:
            report = check_external(function, layout, tree, arrays=arrays, name=spec,
                                    problem=random_problem(3, parse_tree(tree).depth, 0), **options)
        else:
            report = check_external(function, layout, tree, arrays=arrays, name=spec, **options)
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
    from measure import TABLE, add_overwrite_option, claim_outputs, write_table  # benchmarks/measure.py
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="without the gallery")
    parser.add_argument("--race-limit", type=float, default=120.0,
                        help="seconds a race refusal may run (without the breakpoint check)")
    parser.add_argument("--output", default="results/bench_external.md")
    add_overwrite_option(parser)
    args = parser.parse_args(argv)
    # before any work: a file there that is not this benchmark's own is refused (unless --overwrite), each
    # output locked for the run (benchmarks/measure.py: the writers' rule)
    claim_outputs(__file__, [("--output", args.output, TABLE)],
                  overwrite=args.overwrite)
    lines = [f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}", ""] + chain_at_v4_l4()
    print("\n".join(lines), flush=True)
    lines += [""] + one_sequence() + [""] + race_refusal(args.race_limit)
    if not args.quick:
        lines += [""] + gallery()
    table = "\n".join(lines) + "\n"
    write_table(args.output, table)
    print(table)


if __name__ == "__main__":
    main()
