"""Losslessness of real speculative decoding, per verifier, on a tiny pair on any device: the p-values of the
statistical check that tests/models/test_decoding.py runs in CI, and its negative control.

    python experiments/lossless_real_decoding.py                     # CPU, 600 runs per verifier
    python experiments/lossless_real_decoding.py --device cuda --runs 3000

For each verifier (verispec.models.checks.STAT_CASES: a branching tree it is valid for and a sampling setting),
the first two tokens after a fixed context over RUNS seeded runs are tested against the target's exact law
(uncached forward passes): exact binomial tests per outcome bin with a Bonferroni correction, rejecting at
false-failure rate 1e-6; Pearson's chi-square p-value over the same bins is printed beside it. The negative
control drafts from a top-2 filtered q while the verifier sees the unfiltered q, and must be rejected. Writes a
JSON table (--output) atomically, with the run's record (command, commit, machine): a result file, which a
rerun replaces; any other file at --output is refused before the first run.
"""

from __future__ import annotations

import json
import os
import sys
import time

from tqdm import tqdm

from verispec.errors import VerispecError
from verispec.files.io import atomic_write_text
from verispec.study.script_files import run_script

CONTEXT = [1, 2, 3]


#: Most --runs: each is a real decoding of two tokens (milliseconds on a CPU), and the runs' outcomes are held in
#: memory; a million is hours of decoding and far past the power the test needs.
MAX_RUNS = 1_000_000


def main(argv=None) -> int:
    from verispec.study.script_files import ScriptParser

    parser = ScriptParser("lossless_real_decoding", description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--runs", type=int, default=600)
    parser.add_argument("--verifiers", default=None, help="comma-separated subset (default: all)")
    parser.add_argument("--output", default=None, help="JSON table (default results/lossless_real_<device>.json)")
    args = parser.parse_args(argv)
    return run_script("lossless_real_decoding", lambda held: _run(args, argv, held))


def _run(args, argv, held) -> int:
    """Check the options and the result file before any work (writable, room on its disk, a result file of this
    script if it exists, locked), then run every case."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import shlex

    from verispec.files.provenance import run_record
    from verispec.models import Sampling
    from verispec.models.checks import STAT_CASES, decoding_fit
    from verispec.models.tiny import tiny_pair
    from verispec.study.script_files import RunOutputs, check_ranges

    check_ranges([("--runs", args.runs, 1, MAX_RUNS)])
    output = args.output or f"results/lossless_real_{args.device.replace(':', '')}.json"
    RunOutputs("--output", result=output).claim(held)
    pair = tiny_pair(0, device=args.device)
    names = args.verifiers.split(",") if args.verifiers else sorted(STAT_CASES)
    unknown = [name for name in names if name not in STAT_CASES]
    if unknown:
        raise VerispecError(f"no statistical case for {unknown}; known: {', '.join(sorted(STAT_CASES))}")
    record = run_record(shlex.join(["python", "experiments/lossless_real_decoding.py",
                                    *(sys.argv[1:] if argv is None else argv)]), device=str(pair.device))
    cases = [("plain sampling (reference)", None, None, Sampling(1.0), None)]
    cases += [(name, STAT_CASES[name][0], name, STAT_CASES[name][1], None) for name in names]
    filtered = Sampling(1.0, top_k=2)
    cases.append(("NEGATIVE CONTROL: specinfer, draft filtered to top-2", "delayed:2,1,2", "specinfer",
                  Sampling(1.0), filtered.probabilities))
    rows = []
    with tqdm(total=len(cases) * args.runs, desc="runs", disable=not sys.stderr.isatty()) as bar:
        for label, tree, verifier, sampling, law_for_drafting in cases:
            start = time.perf_counter()
            result = decoding_fit(pair, tree, verifier, sampling, context=CONTEXT, runs=args.runs,
                                  law_for_drafting=law_for_drafting, progress=bar)
            rows.append({"case": label, "tree": tree, "sampling": repr(sampling), "runs": args.runs,
                         "bins": result.bins, "adjusted_p": result.adjusted_p, "chi_square": result.chi_square,
                         "chi_square_p": result.chi_square_p, "rejected": result.rejected,
                         "seconds": time.perf_counter() - start})
    print(f"device {pair.device}, {args.runs} runs per case, reject at false-failure rate 1e-6\n")
    print("| case | tree | bins | exact binomial p (Bonferroni) | chi-square p | verdict |")
    print("|---|---|---|---|---|---|")
    for row in rows:
        verdict = "REJECTED (lossy)" if row["rejected"] else "consistent with the target"
        print(f"| {row['case']} | {row['tree'] or '-'} | {row['bins']} | {row['adjusted_p']:.3g} | "
              f"{row['chi_square_p']:.3g} | {verdict} |")
    # the run's record makes it a result file, which a rerun may replace (``check_result_output``)
    atomic_write_text(output, json.dumps({"record": record, "device": str(pair.device), "runs": args.runs,
                                          "rows": rows}, indent=1))
    control_caught = rows[-1]["rejected"]
    correct_pass = not any(row["rejected"] for row in rows[:-1])
    return 0 if control_caught and correct_pass else 1


if __name__ == "__main__":
    raise SystemExit(main())
