"""Label quality on real roots: the conditional-exact labels (the paper's Eq. 3 estimator, made exact per sampled
tree) against certified values at the same roots of a model pair, and how many sampled trees the estimator needs
to rank actions as the certified values do.

    python experiments/selector_label_quality.py --pair qwen-coder --dataset qwen.npz --roots 6 \\
        --samples 32 --ks 1,2 --l1s 0,1 --l2s 0,1,2 --verifiers specinfer --epsilon 0.02 --threads 1 \\
        --output results/selector_label_quality.json

The roots are ``--roots`` of the dataset's (every ``len // roots``-th, so they spread over prompts and settings).
At each: ``certified_labels`` (``verispec.certify``: an interval of width at most ``--epsilon`` around the exact
E[tau+1], or wider where its ``--deadline`` ran out, which the row records) and ``conditional_exact_labels``
with ``--samples`` sampled trees, on a grid small enough to certify (certify's walk serves node-solver rules on
i.i.d.-structured trees: specinfer, spectr, khisti, naivetree on delayed trees). ``verispec.selector.labels.
label_quality`` then gives the bias and spread of the conditional means against the certified midpoints, the
fraction inside their 95% intervals, and for m = 1, 2, 4, ... sampled trees (random subsets of the stored
ones) how often the estimated best action (by E / T under the latency model) is the certified best, its regret
and the rank correlation. Each root is one row of a ``ResultStore`` (resumable; load average recorded). A root
where certify gives no interval within its budget (full-vocabulary laws at temperature 1 spread the walk over
many tokens) is kept out of the comparison and listed under ``skipped_roots``; if every root is, the script
says so and exits 3 (nothing measured).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import numpy as np
from tqdm import tqdm

from verispec.errors import AnalysisTimeoutError, ProblemTooLargeError, VerispecError
from verispec.files.io import ResultStore


def main(argv=None) -> int:
    from verispec.study.script_files import ScriptParser

    parser = ScriptParser("selector_label_quality", description=__doc__.splitlines()[0])
    parser.add_argument("--pair", default="qwen-coder", help="installed pair (default qwen-coder)")
    parser.add_argument("--target", help="target model directory (with --draft, instead of --pair)")
    parser.add_argument("--draft", help="draft model directory")
    parser.add_argument("--dataset", required=True, help="a dataset of the pair's roots (verispec selector dataset)")
    parser.add_argument("--roots", type=int, default=6)
    parser.add_argument("--samples", type=int, default=32, help="sampled trees per root (default 32)")
    parser.add_argument("--ks", default="1,2")
    parser.add_argument("--l1s", default="0,1")
    parser.add_argument("--l2s", default="0,1,2")
    parser.add_argument("--verifiers", default="specinfer")
    parser.add_argument("--epsilon", type=float, default=0.02, help="certified interval width (default 0.02)")
    parser.add_argument("--deadline", type=float, default=300.0, help="seconds of certify per action (default 300)")
    parser.add_argument("--cost-ratio", type=float, default=20.0,
                        help="t_p / t_q of regime (a), tree size free (default 20); 'ranking' is ranked by it")
    parser.add_argument("--latency", default=None, metavar="FILE",
                        help="regime (b): a latency model measured on this machine (verispec latency --out FILE); "
                             "regime (c), the H100 model of verispec.selector.regimes, is always ranked too")
    parser.add_argument("--reuse-dataset-trees", action="store_true",
                        help="take each root's sampled trees from the dataset (its per-sample values of the "
                             "grid's actions) instead of sampling --samples new ones: certify is all that runs")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--output", default="results/selector_label_quality.json")
    args = parser.parse_args(argv)
    from verispec.study.script_files import run_script

    return run_script("selector_label_quality", lambda held: _run(args, held))


def _run(args, held) -> int:
    """Check every number, input and output before any work (writable, room on the disk, the run's own files, one
    run at a time), then label and certify the roots not yet in the store."""
    from verispec.guard.limits import MAX_THREADS
    from verispec.study.script_files import MAX_SCRIPT_BUDGET, Above, RunOutputs, check_input, check_ranges

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    check_ranges([("--roots", args.roots, 1, None), ("--samples", args.samples, 2, None),
                  ("--epsilon", args.epsilon, Above(0), None),
                  ("--deadline", args.deadline, Above(0), MAX_SCRIPT_BUDGET),
                  ("--cost-ratio", args.cost_ratio, Above(0), None), ("--seed", args.seed, 0, 2**63 - 1),
                  ("--threads", args.threads, 1, MAX_THREADS)])
    check_input(args.dataset, "the dataset")
    if args.latency:
        check_input(args.latency, "the latency model")
    output = Path(args.output)
    outputs = RunOutputs("--output", store=output, tables=[output.with_suffix(".summary.json")])
    outputs.claim(held)
    import torch

    from verispec.latency import LatencyModel
    from verispec.models import load_pair
    from verispec.selector.actions import ActionGrid, action_times, open_grid_store
    from verispec.selector.dataset_file import Dataset
    from verispec.selector.label_quality import label_quality
    from verispec.selector.labelling import root_problem
    from verispec.selector.labels import LabelSet, certified_labels, conditional_exact_labels
    from verispec.selector.roots import Root

    if args.threads:
        torch.set_num_threads(args.threads)
    grid = ActionGrid.parse(ks=args.ks, l1s=args.l1s, l2s=args.l2s, verifiers=args.verifiers)
    dataset = StoredRoots.load(args.dataset) if args.dataset.endswith(".roots.json") else Dataset.load(args.dataset)
    roots = [Root.from_dict(json.loads(key)) for key in dataset.key.tolist()]
    if any(root.kind != "model" for root in roots):
        raise VerispecError("the dataset holds synthetic roots; their labels are exact already (give a dataset "
                            "traced from a model pair)")
    step = max(1, len(roots) // args.roots)
    chosen = roots[::step][:args.roots]
    from verispec.selector.regimes import regime_models

    regimes = regime_models(args.latency)
    regimes["gpu-large"] = latency = LatencyModel.from_ratio(args.cost_ratio)
    columns = dataset_columns(dataset, grid) if args.reuse_dataset_trees else None
    pair = (load_pair(args.target, args.draft, device=args.device, dtype=args.dtype) if args.target
            else load_pair(args.pair, device=args.device, dtype=args.dtype))
    if pair.name != roots[0].pair:
        raise VerispecError(f"the dataset's roots come from {roots[0].pair!r}, not {pair.name!r}")
    parameters = {"pair": pair.name, "samples": args.samples, "epsilon": args.epsilon,
                  "deadline": args.deadline, "seed": args.seed, "dtype": str(pair.target.dtype)}
    store = open_grid_store(args.output, parameters, grid)  # the rows' columns are the grid's actions
    for index, root in enumerate(tqdm(chosen, desc="roots")):
        key = root.key()
        if store.done(key):
            continue
        problem = root_problem(root, grid.max_depth, pair)[0]
        start = time.perf_counter()
        if columns is None:
            conditional = conditional_exact_labels(problem, grid, samples=args.samples, seed=args.seed + index)
        else:
            conditional = stored_labels(dataset, key, columns)
        middle = time.perf_counter()
        try:
            certified = certified_labels(problem, grid, args.epsilon, deadline=time.monotonic() + args.deadline)
            bounds, skipped = {"lower": certified.lower.tolist(), "upper": certified.upper.tolist()}, None
        except (AnalysisTimeoutError, ProblemTooLargeError) as error:  # certify gave no interval in its budget
            bounds, skipped = None, str(error).splitlines()[0]
        end = time.perf_counter()
        store.add(key, {"conditional": {"efficiency": conditional.efficiency.tolist(),
                                        "stderr": conditional.stderr.tolist(),
                                        "per_sample": conditional.per_sample.tolist()},
                        "certified": bounds, "skipped": skipped, "setting": root.sampling.__repr__(),
                        "conditional_s": middle - start, "certified_s": end - middle,
                        "load_average": os.getloadavg()[0]})
    every = [store.rows[root.key()] for root in chosen]
    rows = [row for row in every if row["certified"] is not None]
    if not rows:
        print(f"selector_label_quality: error: certify gave no interval at any of the {len(every)} roots within "
              f"--deadline {args.deadline:g} s per action ({every[0]['skipped']}); raise --deadline or --epsilon, "
              "or take a smaller grid", file=sys.stderr)
        return 3
    conditional = []
    for r in rows:
        mean, trees = np.array(r["conditional"]["efficiency"]), np.array(r["conditional"]["per_sample"])
        conditional.append(LabelSet(mean, np.array(r["conditional"]["stderr"]), mean, mean, "conditional", len(trees),
                                    trees))
    certified = []
    for row in rows:
        lower, upper = np.array(row["certified"]["lower"]), np.array(row["certified"]["upper"])
        certified.append(LabelSet((lower + upper) / 2, np.zeros(len(lower)), lower, upper, "certified"))
    quality = label_quality(conditional, certified, times=action_times(grid, latency), seed=args.seed)
    quality["ranking_by_regime"] = {name: label_quality(conditional, certified, times=action_times(grid, model),
                                                        seed=args.seed)["ranking"] for name, model in regimes.items()}
    quality["latency_by_regime"] = {name: model.as_dict() for name, model in regimes.items()}
    quality["max_certified_width"] = float(max((c.upper - c.lower).max() for c in certified))
    quality["seconds_per_root"] = {"conditional": float(np.mean([r["conditional_s"] for r in rows])),
                                   "certified": float(np.mean([r["certified_s"] for r in rows]))}
    quality["skipped_roots"] = [{"setting": row["setting"], "why": row["skipped"]} for row in every
                                if row["certified"] is None]
    quality["grid"] = grid.describe()
    quality["latency"] = latency.as_dict()
    outputs.write_text(store, output.with_suffix(".summary.json"), json.dumps(quality, indent=1) + "\n")
    print(json.dumps(quality, indent=1))
    return 0


class StoredRoots:
    """The roots of a build's row store (``OUT.roots.json``) read as a dataset for this script: a build stopped at its
    --time-budget has no ``OUT`` yet, and its finished roots can be studied already. Holds ``key``, ``per_sample``
    [N, S, A], ``efficiency`` [N, A] and ``grid`` (its columns' actions: the store's recorded list, or a store of
    format 1's, ``ActionGrid.under_format_1``)."""

    def __init__(self, keys: list[str], per_sample: list, grid):
        self.key = np.array(keys, dtype=object)
        self.per_sample = np.stack(per_sample) if per_sample and per_sample[0] is not None else None
        self.efficiency = self.per_sample.mean(axis=1) if self.per_sample is not None else None
        self.grid = grid

    @classmethod
    def load(cls, path: str):
        from verispec.files.io import MAX_RESULT_FILE_BYTES, read_user_file, unpack_floats

        try:  # read with a bound (the store's own), as the store reads it
            data = json.loads(read_user_file(path, limit=MAX_RESULT_FILE_BYTES, what="the row store"))
        except (ValueError, RecursionError):
            data = None
        parameters = (data.get("parameters") if isinstance(data, dict) else None) or {}
        rows = list(ResultStore(path).rows.values())
        if "grid" not in parameters or not rows:
            raise VerispecError(f"{path!r} holds no roots of a selector dataset build (OUT.roots.json)")
        from verispec.selector.actions import ActionGrid

        grid = ActionGrid.from_dict(parameters["grid"], parameters["actions"]) if "actions" in parameters else \
            ActionGrid.from_dict(parameters["grid"]).under_format_1()
        return cls([row["key"] for row in rows], [None if row.get("per_sample") is None else
                                                  unpack_floats(row["per_sample"]) for row in rows], grid)


def dataset_columns(dataset, grid) -> list[int]:
    """The dataset's action column of every action of ``grid`` (all must be in the dataset's grid)."""
    stored = dataset.grid.actions  # the columns' actions as the dataset or store recorded them
    index = {(action.verifier, action.k, action.l1, action.l2): column for column, action in enumerate(stored)}
    missing = [action for action in grid.actions if (action.verifier, action.k, action.l1, action.l2) not in index]
    if missing or dataset.per_sample is None:
        raise VerispecError(f"--reuse-dataset-trees needs the dataset's per-sample values of every action of the grid; "
                            f"{'it has none' if dataset.per_sample is None else f'{len(missing)} are not in its grid'}")
    return [index[(action.verifier, action.k, action.l1, action.l2)] for action in grid.actions]


def stored_labels(dataset, key: str, columns: list[int]):
    """The conditional labels of one root of the dataset, restricted to ``columns``, from its stored sampled trees."""
    from verispec.selector.labels import LabelSet

    row = dataset.key.tolist().index(key)
    per_sample = dataset.per_sample[row][:, columns]                                  # [S, A]
    per_sample = per_sample[~np.isnan(per_sample).any(axis=1)]
    mean = per_sample.mean(axis=0)
    stderr = per_sample.std(axis=0, ddof=1) / np.sqrt(len(per_sample))
    return LabelSet(mean, stderr, mean, mean, "conditional", len(per_sample), per_sample)


if __name__ == "__main__":
    raise SystemExit(main())
