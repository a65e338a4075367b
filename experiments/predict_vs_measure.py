"""Prediction against measurement: the certified E[tau+1] at real contexts against the mean tau+1 that real
decoding draws from those same contexts.

    python experiments/predict_vs_measure.py --pair qwen-coder --contexts 2 --runs 100 --threads 2
    python experiments/predict_vs_measure.py --pair qwen-coder --device cuda --contexts 8 --runs 400
    python experiments/predict_vs_measure.py --tiny --contexts 2 --runs 300      # tiny random pair, seconds

Contexts come from real decoding traces: for each of the first ``--contexts`` HumanEval prompts, the target
samples a continuation (seeded), and the context is the prompt plus the first ``--cut`` tokens of it.
For each (context, verifier, tree):

* *predicted*: the certified interval [lower, upper] on E[tau+1] (``verispec.certify`` on a ``ModelProblem``
  at that context with the run's sampling law, width at most ``--epsilon`` or the last round's interval when
  ``--max-rows`` runs out, which the table marks);
* *measured*: the mean of tau+1 over ``--runs`` first blocks drawn by real decoding from that context (seeds
  0..runs-1, caches prefilled once and rolled back, ``SpeculativeDecoder.first_block_taus``), with a
  conservative 95% confidence interval (``measured_interval``: Wilson intervals on each P(tau >= d), Bonferroni
  over depths);
* *agree*: the measured 95% interval meets the predicted interval. A cell disagrees by chance at most one
  time in 20; every disagreement is listed for investigation in the summary, not averaged away;
* *derived*: E[tau+1] of the same rule on the derived problem (``verispec derive``: top V-1 tokens and an
  'other' bucket, ``--derived-vocab``), to show what the bucket approximation costs.

Rows go to a resumable ``ResultStore`` keyed on (context, verifier, tree) with every setting as its
parameters; the summary (markdown table and JSON) and a plot of predicted against measured (PNG) are
rewritten after each run, each only where the store recorded that it wrote it (a file of the user's there is
refused before any work). The tiny-pair mode needs no installed model and runs in CI's time.
"""

from __future__ import annotations

import io
import json
import math
import os
import sys
import time
from pathlib import Path

import numpy as np
from tqdm import tqdm

from verispec.errors import VerispecError
from verispec.files.io import ResultStore
from verispec.study.script_files import run_script

#: The OT verifiers at K = 1..4 draft paths and a delayed configuration (tau+1 is at most depth + 1).
DEFAULT_CASES = ["specinfer=chain:3", "specinfer=iid:2,3", "specinfer=iid:3,3", "specinfer=iid:4,3",
                 "specinfer=delayed:4,1,2", "spectr=iid:2,3", "spectr=iid:4,3", "nss=iid:2,3", "nss=iid:4,3"]


def trace_contexts(pair, prompts, cut: int, sampling, seed: int) -> list[tuple[str, list[int]]]:
    """(task id, token ids): each prompt followed by the first ``cut`` tokens the target samples after it."""
    from verispec.models import sample_target

    contexts = []
    for index, (task, prompt) in enumerate(prompts):
        trace = sample_target(pair, prompt, cut, sampling, seed + index, stop_at_eos=False) if cut else None
        contexts.append((task, pair.encode(prompt) + (trace.tokens if trace else [])))
    return contexts


def measured_interval(taus, depth: int, confidence: float = 0.95) -> tuple[float, float, float]:
    """Mean of tau+1 and a conservative ``confidence`` interval: E[tau+1] = 1 + sum_d P(tau >= d), each
    P(tau >= d) bounded by a Wilson score interval at level 1 - (1 - confidence) / depth (Bonferroni), so the
    sum covers with probability at least ``confidence``. Unlike a Student-t interval it stays honest when every
    run gave the same tau (a zero sample variance)."""
    from scipy import stats

    taus = np.asarray(taus)
    runs = len(taus)
    z = float(stats.norm.ppf(1 - (1 - confidence) / (2 * max(depth, 1))))
    low = high = 1.0
    for d in range(1, depth + 1):
        share = float((taus >= d).mean())
        centre = (share + z * z / (2 * runs)) / (1 + z * z / runs)
        half = z * math.sqrt(share * (1 - share) / runs + z * z / (4 * runs * runs)) / (1 + z * z / runs)
        low += max(0.0, centre - half)
        high += min(1.0, centre + half)
    return float(1 + taus.mean()), low, high


def derived_vocab(largest: int, depth: int, max_prefixes: int) -> int:
    """The largest V <= ``largest`` whose derived problem to ``depth`` has at most ``max_prefixes`` prefixes
    (1 + V + .. + V^depth, each a forward row); 0 when not even V = 2 fits, or when none is asked for."""
    for vocab in range(largest, 1, -1):
        if sum(vocab ** length for length in range(depth + 1)) <= max_prefixes:
            return vocab
    return 0


def run_cell(pair, context: list[int], verifier: str, tree: str, sampling, args) -> dict:
    from verispec import certify
    from verispec.models import SpeculativeDecoder
    from verispec.models.derive import derive_problem
    from verispec.models.problem import ModelProblem
    from verispec.simulator import analyze, parse_tree
    from verispec.verifiers import get_verifier

    rule, drafter = get_verifier(verifier), parse_tree(tree)
    start = time.perf_counter()
    problem = ModelProblem(pair, context, sampling, horizon=drafter.depth)
    result = certify(problem, drafter, rule, args.epsilon, max_rows=args.max_rows)
    predicted_s = time.perf_counter() - start
    start = time.perf_counter()
    decoder = SpeculativeDecoder(pair, drafter, rule, sampling, 0, stop_at_eos=False)
    taus = decoder.first_block_taus(context, range(args.runs))
    mean, low, high = measured_interval(taus, drafter.depth)
    measured_s = time.perf_counter() - start
    row = {"verifier": verifier, "tree": tree, "lower": result.lower, "upper": result.upper,
           "width": result.width, "reached": result.reached, "note": result.note,
           "prefixes_expanded": result.prefixes_expanded, "rows_evaluated": result.rows_evaluated,
           "forward_passes": result.forward_passes, "predicted_s": predicted_s,
           "measured_mean": mean, "measured_low": low, "measured_high": high, "runs": args.runs,
           "tau_counts": np.bincount(taus, minlength=drafter.depth + 1).tolist(), "measured_s": measured_s,
           "agree": bool(low <= result.upper and high >= result.lower)}
    vocab = derived_vocab(min(args.derived_vocab, pair.vocab_size), drafter.depth, args.derived_max_prefixes)
    if vocab:  # the same problem: its cached conditionals serve the derivation too
        derived, _ = derive_problem(problem, vocab, drafter.depth)
        row["derived"] = float(analyze(derived, drafter, rule).block_efficiency)
        row["derived_vocab"] = vocab
    return row


def summarize(rows: dict) -> str:
    lines = ["| context | verifier | tree | predicted E[tau+1] | measured mean (95% CI) | agree | derived |",
             "|---|---|---|---|---|---|---|"]
    for key, row in rows.items():
        context = key.split("|")[0]
        flag = "" if row["reached"] else " (wider than epsilon)"
        derived = f"{row['derived']:.4f} (V={row.get('derived_vocab', '?')})" if "derived" in row else "-"
        lines.append(f"| {context} | {row['verifier']} | {row['tree']} | [{row['lower']:.4f}, {row['upper']:.4f}]"
                     f"{flag} | {row['measured_mean']:.4f} ({row['measured_low']:.4f}-{row['measured_high']:.4f}) "
                     f"| {'yes' if row['agree'] else 'NO'} | {derived} |")
    disagreements = [key for key, row in rows.items() if not row["agree"]]
    lines += ["", f"{len(rows) - len(disagreements)} of {len(rows)} cells agree (conservative 95% intervals: at "
              "most 1 cell in 20 misses by chance)."]
    if disagreements:
        lines.append("Disagreements to investigate: " + ", ".join(disagreements))
    return "\n".join(lines) + "\n"


def plot(rows: dict) -> bytes:
    """The PNG of predicted against measured E[tau+1], one point per cell."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(6, 6))
    predicted = np.array([(row["lower"] + row["upper"]) / 2 for row in rows.values()])
    half = np.array([(row["upper"] - row["lower"]) / 2 for row in rows.values()])
    measured = np.array([row["measured_mean"] for row in rows.values()])
    error = np.array([[row["measured_mean"] - row["measured_low"], row["measured_high"] - row["measured_mean"]]
                      for row in rows.values()]).T
    axes.errorbar(predicted, measured, xerr=half, yerr=error, fmt="o", capsize=3, label="(context, verifier, tree)")
    low, high = min(predicted.min(), measured.min()) - 0.2, max(predicted.max(), measured.max()) + 0.2
    axes.plot([low, high], [low, high], "k--", linewidth=1, label="predicted = measured")
    axes.set_xlabel("certified E[tau+1] (interval midpoint; bar: the interval)")
    axes.set_ylabel("measured mean tau+1 in real decoding (bar: 95% CI)")
    axes.set_title("Prediction against measurement, tokens per target call")
    axes.legend(loc="upper left")
    figure.tight_layout()
    image = io.BytesIO()
    figure.savefig(image, dpi=120, format="png")
    plt.close(figure)
    return image.getvalue()


def main(argv=None) -> int:
    from verispec.study.script_files import ScriptParser

    parser = ScriptParser("predict_vs_measure", description=__doc__.splitlines()[0])
    parser.add_argument("--pair", default="qwen-coder")
    parser.add_argument("--target", help="target model directory (with --draft, instead of --pair)")
    parser.add_argument("--draft", help="draft model directory")
    parser.add_argument("--tiny", action="store_true", help="a tiny random pair (no installed model needed)")
    parser.add_argument("--contexts", type=int, default=2, help="first N HumanEval prompts (default 2)")
    parser.add_argument("--cut", type=int, default=16, help="tokens of the sampled trace kept in the context")
    parser.add_argument("--cases", default=";".join(DEFAULT_CASES), help="';'-separated VERIFIER=TREE")
    parser.add_argument("--runs", type=int, default=200, help="first blocks drawn per cell (default 200)")
    parser.add_argument("--epsilon", type=float, default=1e-2)
    parser.add_argument("--max-rows", type=int, default=200_000)
    parser.add_argument("--derived-vocab", type=int, default=8, help="V of the derived problem (0: none)")
    parser.add_argument("--derived-max-prefixes", type=int, default=2000,
                        help="a deep tree's derived problem uses the largest V up to --derived-vocab whose "
                             "prefixes (1 + V + .. + V^L) stay within this (default 2000)")
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--top-k", type=int, default=None)
    parser.add_argument("--top-p", type=float, default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--output", default=None, help="rows (default results/predict_vs_measure_<device>.json)")
    args = parser.parse_args(argv)
    return run_script("predict_vs_measure", lambda held: _run(args, held))


#: Most --runs of a cell: each is a real first block (milliseconds to a second), the taus held in memory.
MAX_RUNS = 1_000_000


def _run(args, held) -> int:
    """Check every number and output before any work (writable, room on the disk, the run's own files, one run at a
    time), then predict and measure the cells not yet in the store."""
    from verispec.guard.limits import MAX_CONTEXT_TOKENS, MAX_THREADS
    from verispec.study.script_files import Above, RunOutputs, check_ranges

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    check_ranges([("--contexts", args.contexts, 1, None), ("--cut", args.cut, 0, MAX_CONTEXT_TOKENS),
                  ("--runs", args.runs, 2, MAX_RUNS), ("--epsilon", args.epsilon, Above(0), None),
                  ("--max-rows", args.max_rows, 1, None), ("--derived-vocab", args.derived_vocab, 0, None),
                  ("--derived-max-prefixes", args.derived_max_prefixes, 1, None), ("--seed", args.seed, 0, 2**63 - 1),
                  ("--threads", args.threads, 1, MAX_THREADS)])
    output = Path(args.output or f"results/predict_vs_measure_{args.device.replace(':', '')}.json")
    outputs = RunOutputs("--output", store=output, tables=[output.with_suffix(suffix) for suffix in
                                                           (".md", ".summary.json", ".png")])
    outputs.claim(held)
    import torch
    import transformers

    from verispec.models import Sampling, load_pair
    from verispec.models.tiny import VOCAB, tiny_pair

    transformers.utils.logging.set_verbosity_error()
    if args.threads:
        torch.set_num_threads(args.threads)
    sampling = Sampling(args.temperature, args.top_k, args.top_p)
    cases = [case.strip().partition("=")[::2] for case in args.cases.split(";") if case.strip()]
    if any(not verifier or not tree for verifier, tree in cases):
        raise VerispecError(f"--cases must be ';'-separated VERIFIER=TREE, got {args.cases!r}")
    if args.tiny:
        pair = tiny_pair(2, device=args.device)
        prompts = [(f"tiny/{index}", [(3 * index + offset) % VOCAB for offset in (4, 1, 7)])
                   for index in range(args.contexts)]
        name = "tiny"
    else:
        from verispec.models.prompts import humaneval_prompts

        pair = (load_pair(args.target, args.draft, device=args.device, dtype=args.dtype) if args.target
                else load_pair(args.pair, device=args.device, dtype=args.dtype))
        prompts, name = humaneval_prompts(args.contexts), pair.name
    parameters = {"pair": name, "contexts": args.contexts, "cut": args.cut, "runs": args.runs,
                  "epsilon": args.epsilon, "max_rows": args.max_rows, "derived_vocab": args.derived_vocab,
                  "derived_max_prefixes": args.derived_max_prefixes,
                  "temperature": args.temperature, "top_k": args.top_k, "top_p": args.top_p, "seed": args.seed,
                  "device": str(pair.device), "dtype": str(pair.target.dtype).removeprefix("torch.")}
    store = ResultStore(output, parameters=parameters)
    contexts = trace_contexts(pair, prompts, args.cut, sampling, args.seed)
    cells = [(task, context, verifier, tree) for task, context in contexts for verifier, tree in cases]
    for task, context, verifier, tree in tqdm(cells, desc="cells"):
        key = f"{task}|{verifier}|{tree}"
        if store.done(key):
            continue
        row = run_cell(pair, context, verifier, tree, sampling, args)
        row["load_average"] = os.getloadavg()[0]
        store.add(key, row)
        outputs.write_text(store, output.with_suffix(".md"), summarize(dict(store.rows)))
    rows = dict(store.rows)
    text = summarize(rows)
    outputs.write_text(store, output.with_suffix(".md"), text)
    outputs.write_text(store, output.with_suffix(".summary.json"), json.dumps(rows, indent=1) + "\n")
    print(text)
    try:
        outputs.write_bytes(store, output.with_suffix(".png"), plot(rows))
    except ImportError:
        print("predict_vs_measure: matplotlib is not installed; no plot", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
