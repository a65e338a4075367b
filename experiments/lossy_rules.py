"""The lossy rules engines are merging, priced exactly (issue 67, item 3): each rule's exact total variation from the
target and its E[tau + 1] against the lossless rule on the same tree, at a few settings each (a frontier of TV
against gain), beside Medusa's typical acceptance.

    python experiments/lossy_rules.py                       # random problems: docs/results/lossy-rules.json (~10 s)
    python experiments/lossy_rules.py --pair qwen-coder --out results/lossy-rules-qwen.json   # real roots
    python experiments/lossy_rules.py --tiny --out /tmp/lossy-tiny.json                     # tiny random pair

Problems: by default ``--seeds`` random context-dependent problems (``verispec.simulator.random_problem``, at each V
of ``--vocab``, depth 3, divergence 0.5, as docs/results/exact-findings.json prices ``typical``); with ``--pair`` (or
``--tiny``) the first ``--humaneval`` HumanEval prompts and ``--prose`` prose prompts of the pair, each under two
sampling laws, derived into V-token problems of depth 3 as experiments/typical_derived.py derives them (the top V - 1
tokens by p + q and an 'other' bucket; that loads the pair). Trees: ``chain:3`` against token-level verification
(``naive``) and ``iid:2,2`` against SpecInfer; FLy and ASD are chain rules. Every setting of ``SETTINGS`` is analysed
exactly (``verispec.simulator.analyze``); per tree and setting the file holds the mean and largest TV, the mean
E[tau + 1] and the mean ratio to the lossless rule's, and whether the setting is on the frontier (no other setting on
that tree, the lossless rule at (0, 1) included, has a mean TV as small and a mean ratio as large, one of them
strictly). The file carries the run's record
(``verispec.files.provenance.run_record``).
"""

from __future__ import annotations

import shlex
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "docs" / "results" / "lossy-rules.json"
DEPTH = 3
#: Largest vocabulary priced: chain:3 has V^3 draft outcomes, iid:2,2 V^4.
MAX_VOCAB = 12
#: Each tree and the lossless rule it is priced against.
TREES = {"chain:3": "naive", "iid:2,2": "specinfer"}
#: The settings priced: each rule at a few values of its parameters (the papers' sweeps where they give one).
SETTINGS = {
    "typical": ["typical(epsilon=0.05,alpha=0.2)", "typical", "typical(epsilon=0.3,alpha=0.55)"],
    "fly": ["fly(theta=0,window=1)", "fly(theta=0.5,window=1)", "fly(theta=0.9,window=1)", "fly(theta=0,window=2)",
            "fly(theta=0.5,window=2)"],
    "mars": ["mars(margin=0.25)", "mars(margin=0.5)", "mars(margin=1)", "mars(margin=2)"],
    "asd": ["asd(budget=1,rate=0.25,count=1)", "asd", "asd(budget=8,rate=1,count=2)", "asd(budget=8,rate=1,count=3)"],
    "ensemble": ["ensemble(weight=0.2)", "ensemble(weight=0.4)", "ensemble(weight=0.6)", "ensemble(weight=0.8)"],
    "lenience": ["lenience(lenience=0.2)", "lenience(lenience=0.4)", "lenience", "lenience(lenience=0.8)"],
    "minp": ["minp(ratio=0.1)", "minp", "minp(ratio=0.5)", "minp(ratio=0.7)", "minp(ratio=0.9)"],
    "eta": ["eta(eta=0.05)", "eta", "eta(eta=0.15)", "eta(eta=0.2)", "eta(eta=0.25)"],
}


def price(problems: list, settings: dict = SETTINGS) -> dict:
    """Per tree: the lossless rule's mean E[tau + 1] and, per rule and setting, the exact TV and E[tau + 1] over
    ``problems`` (means, largest TV, mean ratio to the lossless rule on the same problem) and the frontier flag."""
    from verispec.simulator import analyze, parse_tree
    from verispec.verifiers import get_verifier

    out = {}
    for spec, lossless in TREES.items():
        drafter = parse_tree(spec)
        base = [analyze(problem, drafter, get_verifier(lossless)) for problem in problems]
        assert max(float(result.tv_distance) for result in base) < 1e-12, f"{lossless} on {spec} is not lossless"
        rows = {}
        for rule, names in settings.items():
            for name in names:
                verifier = get_verifier(name)
                if not drafter.draft_laws & verifier.valid_for:
                    continue
                results = [analyze(problem, drafter, verifier) for problem in problems]
                tvs = [float(result.tv_distance) for result in results]
                ratios = [float(result.block_efficiency) / float(reference.block_efficiency)
                          for result, reference in zip(results, base)]
                rows[name] = {"rule": rule, "tv_mean": statistics.fmean(tvs), "tv_max": max(tvs),
                              "block_efficiency_mean": statistics.fmean(float(r.block_efficiency) for r in results),
                              "ratio_mean": statistics.fmean(ratios)}
        points = [(row["tv_mean"], row["ratio_mean"]) for row in rows.values()] + [(0.0, 1.0)]  # with the lossless
        for row in rows.values():
            row["frontier"] = not any(tv <= row["tv_mean"] and ratio >= row["ratio_mean"]
                                      and (tv, ratio) != (row["tv_mean"], row["ratio_mean"]) for tv, ratio in points)
        out[spec] = {"lossless_rule": lossless, "problems": len(problems),
                     "lossless_block_efficiency_mean": statistics.fmean(float(r.block_efficiency) for r in base),
                     "settings": rows}
    return out


def random_problems(vocab: int, seeds: int) -> list:
    from verispec.simulator import random_problem

    return [random_problem(vocab, DEPTH, seed, divergence=0.5) for seed in range(seeds)]


def derived_problems(args) -> tuple[list, dict]:
    """The pair's contexts (``--humaneval``, ``--prose``) under two sampling laws, derived into V-token problems of
    depth 3 (experiments/typical_derived.py's derivation), and what they are."""
    import os

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch

    torch.set_num_threads(args.threads)
    from verispec.models import Sampling, load_pair
    from verispec.models.derive import derive_problem
    from verispec.models.problem import ModelProblem
    from verispec.models.prompts import humaneval_prompts
    from verispec.models.tiny import tiny_pair
    from verispec.selector.prompt_sets import prose_small_prompts

    pair = tiny_pair(0, device="cpu") if args.tiny else load_pair(args.pair, device="cpu")
    if args.tiny:  # token ids only: the tiny pair has no tokenizer
        contexts = [(f"tiny:{index}", [1 + index, 2, 3]) for index in range(args.humaneval + args.prose)]
    else:
        contexts = humaneval_prompts(args.humaneval) + prose_small_prompts()[:args.prose]
    samplings = {"T=0.7 top-k 20 top-p 0.8": Sampling(0.7, top_k=20, top_p=0.8), "T=1": Sampling(1.0)}
    problems = [derive_problem(ModelProblem(pair, prompt, sampling, horizon=DEPTH), args.vocab, DEPTH)[0]
                for sampling in samplings.values() for _, prompt in contexts]
    return problems, {"family": "derived", "pair": pair.name, "contexts": [task for task, _ in contexts],
                      "samplings": list(samplings), "vocab": args.vocab, "depth": DEPTH}


def main(argv=None) -> int:
    from verispec.study.script_files import ScriptParser, run_script

    parser = ScriptParser("lossy_rules", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=20, help="random problems (default 20)")
    parser.add_argument("--vocab", default="4,8", help="their vocabulary sizes, comma-separated (default 4,8); with "
                        "--pair or --tiny, the derived problems' (one size)")
    parser.add_argument("--pair", default=None, help="price at real roots of this installed pair instead (loads it)")
    parser.add_argument("--tiny", action="store_true", help="at roots of a tiny random pair (no installed model)")
    parser.add_argument("--humaneval", type=int, default=4)
    parser.add_argument("--prose", type=int, default=4)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"the result file (default {DEFAULT_OUT})")
    args = parser.parse_args(argv)
    return run_script("lossy_rules", lambda held: _run(args, argv, held))


def _run(args, argv, held) -> int:
    """Check the numbers and the result file before any work, price every setting, write the file atomically."""
    from verispec.errors import VerispecError
    from verispec.files.io import atomic_write_json
    from verispec.files.provenance import run_record
    from verispec.guard.limits import MAX_THREADS
    from verispec.study.script_files import RunOutputs, check_ranges

    try:
        args.vocab = [int(text) for text in args.vocab.split(",")]
    except ValueError:
        raise VerispecError(f"--vocab {args.vocab!r}: give comma-separated whole numbers, e.g. 4,8") from None
    check_ranges([("--seeds", args.seeds, 1, 1000), ("--humaneval", args.humaneval, 0, None),
                  ("--prose", args.prose, 0, None), ("--threads", args.threads, 1, MAX_THREADS)]
                 + [("--vocab", vocab, 2, MAX_VOCAB) for vocab in args.vocab])
    if (args.pair or args.tiny) and len(args.vocab) != 1:
        raise VerispecError(f"--vocab: the derived problems take one size, got {len(args.vocab)}")
    RunOutputs("--out", result=args.out).claim(held)  # never over a file that is not a result file
    record = run_record(shlex.join(["python", "experiments/lossy_rules.py", *(argv or sys.argv[1:])]), [])
    start = time.monotonic()
    if args.pair or args.tiny:
        args.vocab = args.vocab[0]
        problems, what = derived_problems(args)
        by_vocab = {str(args.vocab): {"problems": what, "trees": price(problems)}}
    else:
        by_vocab = {str(vocab): {"problems": {"family": "random", "seeds": args.seeds, "vocab": vocab, "depth": DEPTH,
                                              "divergence": 0.5}, "trees": price(random_problems(vocab, args.seeds))}
                    for vocab in args.vocab}
    atomic_write_json(args.out, {"record": {**record, "seconds": round(time.monotonic() - start, 1)},
                                 "by_vocab": by_vocab})
    print(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
