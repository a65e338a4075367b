"""The exact numbers three findings state, computed afresh: the single-path optimum on Sun et al.'s toy, what GBV's
commitment to one path costs on ``iid:3,2``, and what Medusa's typical acceptance costs in TV.

    python experiments/exact_findings.py          # writes docs/results/exact-findings.json (about 10 s)

1. Sun et al.'s toy (arXiv 2403.10444: V = 2, p = (1/3, 2/3), q = (2/3, 1/3) at every prefix, ``chain:2``): the
   multi-step LP's optimum over every valid verifier, proved in rationals (``certify=True``), block verification's
   and token-level verification's exact E[tau + 1], and the per-length coupling bound the paper calls an oracle.
2. ``iid:3,2``, p = (0.5, 0.3, 0.2), q = (0.2, 0.6, 0.2) at every prefix: the optimum of every valid verifier, of
   the verifiers that accept only along GBV's greedily selected path (``selected-path``), of the two classes of
   ``examples/my_class.py`` that let the block leave that path by one token (``shallow_off_path``: at depth 1
   only; ``one_off_path``: at any depth), and every rule's E[tau + 1].
3. Typical acceptance at Medusa's defaults on 20 random problems (V = 4, depth 3, divergence 0.5): its exact TV
   to the target and its E[tau + 1] over the lossless rule's on ``chain:3`` and ``iid:2,2``.

The file carries the run's record (command, commit, date, machine; ``verispec.files.provenance.run_record``): the README
and docs/findings/ are generated from it (``python docs/generate.py``).
"""

from __future__ import annotations

import shlex
import sys
import time
from fractions import Fraction
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "docs" / "results" / "exact-findings.json"
CLASS_FILE = ROOT / "examples" / "my_class.py"


def sun_toy() -> dict:
    from verispec.bounds.gaps import gap_report
    from verispec.simulator import ChainDrafter, ContextFreeProblem, analyze
    from verispec.verifiers import REGISTRY

    third = Fraction(1, 3)
    problem = ContextFreeProblem([third, 2 * third], [2 * third, third], exact=True)
    drafter = ChainDrafter(2)
    report = gap_report(problem, drafter, [REGISTRY[name] for name in ("bv", "naive")], certify=True)
    exact = {name: analyze(problem, drafter, REGISTRY[name]).block_efficiency for name in ("bv", "naive")}
    certificate = report.to_json()["certificate"]
    return {"tree": "chain:2", "p": ["1/3", "2/3"], "q": ["2/3", "1/3"],
            "optimum": certificate["optimum"], "coupling_bound": str(Fraction(report.coupling_bound).limit_denominator(
                1000)), "block_efficiency": {name: str(value) for name, value in exact.items()}}


def gbv_commitment() -> dict:
    from verispec.bounds.classes import optimize_class
    from verispec.bounds.gaps import gap_report
    from verispec.simulator import ContextFreeProblem, parse_tree
    from verispec.user_code import load_attribute
    from verispec.verifiers import REGISTRY

    problem = ContextFreeProblem([0.5, 0.3, 0.2], [0.2, 0.6, 0.2])
    drafter = parse_tree("iid:3,2")
    valid = [rule for rule in REGISTRY.values() if drafter.draft_laws & rule.valid_for]
    report = gap_report(problem, drafter, valid)
    off_path = {}
    for where, name in (("depth_1", "shallow_off_path"), ("any_depth", "one_off_path")):
        result = optimize_class(problem, drafter, load_attribute(f"{CLASS_FILE}:{name}", "verifier class"), name=name,
                                references=False)
        off_path.update({f"off_path_{where}_optimum": result.block_efficiency,
                         f"off_path_{where}_tv": result.tv_distance})
    return {"tree": "iid:3,2", "p": [0.5, 0.3, 0.2], "q": [0.2, 0.6, 0.2],
            "optimum": report.optimal_block_efficiency,
            "selected_path_optimum": report.class_optima["selected-path"], **off_path,
            "block_efficiency": {row.verifier: row.block_efficiency for row in report.rows}}


def typical_cost(seeds: int = 20) -> dict:
    """Medusa's typical acceptance at its defaults on ``seeds`` random context-dependent problems (V = 4, depth 3,
    divergence 0.5): its exact TV to the target and its E[tau + 1] over the lossless rule's on the same tree
    (token-level on ``chain:3``, SpecInfer on ``iid:2,2``), means over the problems."""
    import statistics

    from verispec.simulator import analyze, parse_tree, random_problem
    from verispec.verifiers import get_verifier

    out = {}
    for spec, lossless in (("chain:3", "naive"), ("iid:2,2", "specinfer")):
        drafter, tvs, ratios = parse_tree(spec), [], []
        for seed in range(seeds):
            problem = random_problem(4, 3, seed, divergence=0.5)
            typical = analyze(problem, drafter, get_verifier("typical"))
            reference = analyze(problem, drafter, get_verifier(lossless))
            tvs.append(float(typical.tv_distance))
            ratios.append(float(typical.block_efficiency) / float(reference.block_efficiency))
        out[spec] = {"lossless_rule": lossless, "problems": seeds, "tv_mean": statistics.fmean(tvs),
                     "tv_min": min(tvs), "tv_max": max(tvs), "efficiency_ratio_mean": statistics.fmean(ratios)}
    return out


def main(argv=None) -> int:
    from verispec.study.script_files import ScriptParser

    parser = ScriptParser("exact_findings", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"the result file (default {DEFAULT_OUT})")
    args = parser.parse_args(argv)
    from verispec.study.script_files import run_script

    return run_script("exact_findings", lambda held: _run(args, argv, held))


def _run(args, argv, held) -> int:
    """Check the result file before any work (writable, room on its disk, a result file if it exists, locked for
    this run), compute the three findings, write it atomically."""
    from verispec.files.io import atomic_write_json
    from verispec.files.provenance import run_record
    from verispec.study.script_files import RunOutputs

    RunOutputs("--out", result=args.out).claim(held)  # never over a file that is not a result file
    record = run_record(shlex.join(["python", "experiments/exact_findings.py", *(argv or sys.argv[1:])]),
                        [CLASS_FILE])
    start = time.monotonic()
    result = {"sun_toy": sun_toy(), "gbv_commitment": gbv_commitment(), "typical_cost": typical_cost()}
    atomic_write_json(args.out, {"record": {**record, "seconds": round(time.monotonic() - start, 1)}, **result})
    print(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
