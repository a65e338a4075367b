"""Typical acceptance (Medusa) on problems derived from a real pair: its exact TV to the target and its block
efficiency against a lossless rule on the same tree, for every (epsilon, alpha) of the report's study 8.

    python experiments/typical_derived.py --pair qwen-coder --threads 2      # 8 contexts, two sampling laws
    python experiments/typical_derived.py --tiny                            # tiny random pair, seconds

For each context (the first ``--humaneval`` HumanEval prompts and the first ``--prose`` of verispec's small prose
set, ``verispec.selector.prompt_sets.prose_small_prompts``) and each sampling law (T = 0.7 top-k 20 top-p 0.8, and
T = 1 unfiltered), the context is derived into a V-token problem of depth 3 (``verispec derive``: the top V-1
tokens by p + q and an 'other' bucket) and analysed exactly: the lossless rule of ``TYPICAL_TREES`` and typical
acceptance at every setting of ``TYPICAL_SETTINGS`` on ``chain:3`` and ``iid:2,2``. Rows go to a resumable
``ResultStore`` keyed on (sampling, context) with every setting as its parameters; the summary (markdown) is
rewritten after each context.
"""

from __future__ import annotations

import os
import sys
import time
from collections import defaultdict
from pathlib import Path

from tqdm import tqdm

from verispec.files.io import ResultStore
from verispec.study.script_files import run_script

DEPTH = 3


def samplings():
    from verispec.models import Sampling

    return {"T=0.7 top-k 20 top-p 0.8": Sampling(0.7, top_k=20, top_p=0.8), "T=1": Sampling(1.0)}


def analyse(problem, label: str, task: str) -> list[dict]:
    """Exact rows of the lossless rules and every typical setting on one derived problem."""
    from verispec.report.typical import TYPICAL_SETTINGS, TYPICAL_TREES
    from verispec.simulator import analyze, parse_tree
    from verispec.verifiers import get_verifier
    from verispec.verifiers.typical import TypicalVerifier

    rows = []
    for tree, lossless in TYPICAL_TREES.items():
        drafter = parse_tree(tree)
        base = analyze(problem, drafter, get_verifier(lossless))
        for epsilon, alpha in TYPICAL_SETTINGS:
            result = analyze(problem, drafter, TypicalVerifier(epsilon, alpha))
            rows.append({"sampling": label, "context": task, "tree": tree, "lossless": lossless, "epsilon": epsilon,
                         "alpha": alpha, "tv": float(result.tv_distance), "block_efficiency":
                         float(result.block_efficiency), "lossless_block_efficiency": float(base.block_efficiency),
                         "lossless_tv": float(base.tv_distance)})
    return rows


def summary(rows) -> str:
    groups = defaultdict(list)
    for row in rows:
        groups[(row["sampling"], row["tree"], row["lossless"], row["epsilon"], row["alpha"])].append(row)
    lines = ["| sampling | tree | rule | contexts | mean exact TV | mean E[tau+1] | x lossless | lossless max TV |",
             "|---|---|---|---|---|---|---|---|"]
    for (sampling, tree, lossless, epsilon, alpha), group in groups.items():
        tv = sum(row["tv"] for row in group) / len(group)
        efficiency = sum(row["block_efficiency"] for row in group) / len(group)
        ratio = sum(row["block_efficiency"] / row["lossless_block_efficiency"] for row in group) / len(group)
        worst = max(row["lossless_tv"] for row in group)
        lines.append(f"| {sampling} | {tree} | typical({epsilon:g}, {alpha:g}) against {lossless} | {len(group)} | "
                     f"{tv:.4f} | {efficiency:.4f} | {ratio:.4f} | {worst:.1e} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    from verispec.study.script_files import ScriptParser

    parser = ScriptParser("typical_derived", description=__doc__.splitlines()[0])
    parser.add_argument("--pair", default="qwen-coder")
    parser.add_argument("--tiny", action="store_true", help="a tiny random pair (no installed model)")
    parser.add_argument("--humaneval", type=int, default=4)
    parser.add_argument("--prose", type=int, default=4)
    parser.add_argument("--vocab", type=int, default=4)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--output", default="results/typical_derived.json")
    args = parser.parse_args(argv)
    return run_script("typical_derived", lambda held: _run(args, held))


#: Largest --vocab of the derived problem: analysed exactly to depth 3 (V^3 prefixes, every typical setting).
MAX_VOCAB = 64


def _run(args, held) -> int:
    """Check every number and output before any work (writable, room on the disk, the run's own files, one run at a
    time), then derive and analyse the contexts not yet in the store."""
    from verispec.guard.limits import MAX_THREADS
    from verispec.study.script_files import RunOutputs, check_ranges

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    check_ranges([("--humaneval", args.humaneval, 0, None), ("--prose", args.prose, 0, None),
                  ("--vocab", args.vocab, 2, MAX_VOCAB), ("--threads", args.threads, 1, MAX_THREADS)])
    path = Path(args.output)
    outputs = RunOutputs("--output", store=path, tables=[path.with_suffix(".md")])
    outputs.claim(held)
    import torch

    torch.set_num_threads(args.threads)
    from verispec.models import load_pair
    from verispec.models.derive import derive_problem
    from verispec.models.problem import ModelProblem
    from verispec.models.prompts import humaneval_prompts
    from verispec.models.tiny import tiny_pair
    from verispec.selector.prompt_sets import prose_small_prompts

    pair = tiny_pair(0, device=args.device) if args.tiny else load_pair(args.pair, device=args.device)
    contexts = humaneval_prompts(args.humaneval) + prose_small_prompts()[:args.prose]
    if args.tiny:  # token ids only: the tiny pair has no tokenizer
        contexts = [(f"tiny:{index}", [1 + index, 2, 3]) for index in range(args.humaneval + args.prose)]
    dtype = str(getattr(pair.target, "dtype", "unknown"))
    store = ResultStore(path, parameters={"experiment": "typical_derived", "pair": pair.name,
                                          "vocab": args.vocab, "depth": DEPTH, "dtype": dtype})
    jobs = [(label, sampling, task, prompt) for label, sampling in samplings().items() for task, prompt in contexts]
    for label, sampling, task, prompt in tqdm(jobs, desc="contexts", disable=not sys.stderr.isatty()):
        key = f"{label}|{task}"
        if store.done(key):
            continue
        start = time.perf_counter()
        problem, _ = derive_problem(ModelProblem(pair, prompt, sampling, horizon=DEPTH), args.vocab, DEPTH)
        store.add(key, {"rows": analyse(problem, label, task), "seconds": time.perf_counter() - start,
                        "load": os.getloadavg()[0]})
        outputs.write_text(store, path.with_suffix(".md"), summary(
            [row for entry in store.rows.values() for row in entry["rows"]]))
    text = summary([row for entry in store.rows.values() for row in entry["rows"]])
    outputs.write_text(store, path.with_suffix(".md"), text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
