"""A latency model that prices each action at the sizes its trees have in decoding (issue 66, item 3).

    PYTHONPATH=. python experiments/tree_sizes.py --dataset data/selector/qwen-t07-m64.npz \\
        --latency data/latency/latency-cpu-small-batch.json --roots 64 --samples 8 --threads 2 \\
        --out data/latency/latency-cpu-small-batch-t07.json
    PYTHONPATH=. python experiments/tree_sizes.py --dataset data/selector/qwen-t1-r2.npz \\
        --latency data/latency/latency-cpu-small-batch-t07.json --roots 64 --samples 8 --threads 2 \\
        --out data/latency/latency-cpu-small-batch-t07-t1.json

Reads the latency model ``--latency`` and adds to it the sizes decoding's trees had (``LatencyModel.tree_sizes``,
``verispec.selector.tree_sizes``) under the sampling setting of ``--dataset``: ``--samples`` combs at each of
``--roots`` roots drawn (``--seed``) from the TRAINING prompts of ``--dataset`` (the split ``verispec selector train``
makes with ``--test-fraction`` and ``--split-seed``: the held-out prompts that judge a selector stay unseen), with the
dataset's sampling. Only the draft drafts; the target prefills the contexts. The sizes are filed under the dataset's
setting as the selector names it (``verispec.selector.roots.sampling_text``, ``verispec.selector.study.Setting``:
'T=0.7 top-k=20 top-p=0.8', 'T=1'); any other setting's sizes ``--latency`` carries are kept as they are, and the same
setting's are replaced. So the second command above gives one file with T = 0.7's sizes (from the first) and T = 1's
(about 3 minutes at T = 0.7 on this 2-core CPU with 2 threads; T = 1's trees are bigger, so somewhat longer), the
file ``verispec selector verdict --latency`` and ``selector study --latency`` price both settings' cpu regime with.
A ``--latency`` whose sizes do not name their setting (a file written before they did) is refused before any work.

    PYTHONPATH=. python experiments/tree_sizes.py --latency data/latency/latency-cpu-small-batch-q.json \
        --sizes-from data/latency/latency-cpu-small-batch-t07.json --out data/latency/latency-cpu-small-batch-q-t07.json

With ``--sizes-from FILE`` (instead of ``--dataset``) no model is loaded and nothing is sampled: every setting's sizes
FILE carries, with their sources, are put on ``--latency``'s times. A tree's sizes do not depend on what its forwards
cost, so a re-measured model prices the same trees (refused on one line where FILE carries no sizes of a named
setting, or was measured on another pair).

The output is a latency model like any other (``selector train --latency``, ``selector study``,
``benchmarks/bench_latency_model.py --latency``), written atomically and marked as 'verispec latency' marks its own;
each setting's sizes carry their source (the dataset, split, roots, combs and seed), and its ``record`` the command
and commit of this run.
"""

from __future__ import annotations

import os
import shlex
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def main(argv: list[str] | None = None) -> int:
    from verispec.study.script_files import ScriptParser, run_script

    parser = ScriptParser("tree_sizes", description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", default=None, help="a selector dataset traced from a pair")
    parser.add_argument("--sizes-from", default=None, metavar="FILE",
                        help="instead of --dataset: a latency model whose tree sizes (every setting's) to put on "
                             "--latency's times, sampling nothing")
    parser.add_argument("--latency", required=True, help="the measured latency model to add the sizes to")
    parser.add_argument("--roots", type=int, default=96, help="training roots sampled (default 96)")
    parser.add_argument("--samples", type=int, default=16, help="combs drawn at each root (default 16)")
    parser.add_argument("--seed", type=int, default=0, help="the roots' sample and the combs' draws (default 0)")
    parser.add_argument("--test-fraction", type=float, default=0.25, help="selector train's split (default 0.25)")
    parser.add_argument("--split-seed", type=int, default=0, help="selector train's split seed (default 0)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--pair", default=None, help="an installed pair (default: the dataset's)")
    parser.add_argument("--target", default=None)
    parser.add_argument("--draft", default=None)
    parser.add_argument("--out", required=True, help="the latency model with the sizes (atomically)")
    parser.add_argument("--overwrite", action="store_true", help="replace an --out verispec did not write")
    args = parser.parse_args(argv)
    return run_script("tree_sizes", lambda held: _run(args, argv, held))


def _run(args, argv, held) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from verispec.files.io import atomic_write_json, check_output
    from verispec.files.provenance import LATENCY, MARKER_KEY, run_record, written_by
    from verispec.guard.limits import MAX_THREADS
    from verispec.latency import LATENCY_FILE, LatencyModel, check_latency_pair
    from verispec.study.script_files import Above, check_input, check_ranges

    check_ranges([("--roots", args.roots, 1, None), ("--samples", args.samples, 1, 4096),
                  ("--seed", args.seed, 0, 2**63 - 1), ("--test-fraction", args.test_fraction, Above(0), 0.99),
                  ("--split-seed", args.split_seed, 0, 2**63 - 1), ("--threads", args.threads, 1, MAX_THREADS)])
    from verispec.errors import VerispecError

    if (args.dataset is None) == (args.sizes_from is None):
        raise VerispecError("give --dataset (sample the trees' sizes) or --sizes-from FILE (take a model's), one")
    check_input(args.dataset or args.sizes_from, "the dataset" if args.dataset else "--sizes-from")
    latency = LatencyModel.load(args.latency)
    check_output(args.out, LATENCY_FILE, what="--out", overwrite=args.overwrite)
    from verispec.files.store_lock import store_lock

    held.enter_context(store_lock(args.out, what="--out"))  # one writer at a time: a second run is refused
    if args.sizes_from:
        return _copy_sizes(args, argv, latency)
    import torch
    from tqdm import tqdm

    from verispec.selector.actions import ActionGrid
    from verispec.selector.roots import (
        dataset_pair_roots,
        labelling_settings,
        load_roots_pair,
        sample_roots,
        sampling_text,
    )
    from verispec.selector.tree_sizes import as_tree_sizes, sample_tree_sizes

    torch.set_num_threads(args.threads)
    dataset, roots = dataset_pair_roots(args.dataset)
    metadata = labelling_settings(dataset, args.dataset)
    if len(dataset.samplings) != 1:  # one tree's sizes at T = 0.7 are not its sizes at T = 1
        raise VerispecError(f"{args.dataset} holds {len(dataset.samplings)} sampling settings; the sizes belong to "
                            "one setting: give a dataset of one (each setting's are added to the model in turn)")
    setting = sampling_text(dataset.samplings[0])
    latency.check_can_add(setting)  # one line before any model is loaded
    train, _ = dataset.split(args.test_fraction, args.split_seed)
    training = set(train.key.tolist())
    roots = [root for root, key in zip(roots, dataset.key.tolist()) if key in training]
    grid = ActionGrid(metadata["grid"]["ks"], metadata["grid"]["l1s"], metadata["grid"]["l2s"], ("specinfer",))
    pair = load_roots_pair(roots, args.pair, args.target, args.draft, metadata["pair"])
    check_latency_pair(latency, pair.name, "--latency")
    chosen = sample_roots(roots, args.roots, args.seed)
    record = run_record(shlex.join(["python", "experiments/tree_sizes.py", *(sys.argv[1:] if argv is None else argv)]),
                        [args.dataset, args.latency], threads=args.threads)
    print(f"tree_sizes: {len(chosen)} training roots of {len(roots)}, {args.samples} combs each, {grid.describe()}, "
          f"{args.threads} threads, load average {os.getloadavg()[0]:.2f}", file=sys.stderr)
    start = time.perf_counter()
    with tqdm(total=len(chosen), desc="roots", disable=None) as progress:
        sizes = sample_tree_sizes(chosen, grid, samples=args.samples, seed=args.seed, pair=pair, progress=progress)
    source = (f"{args.samples} combs at each of {len(chosen)} training roots (seed {args.seed}) of "
              f"{Path(args.dataset).name} at {setting} (split --test-fraction {args.test_fraction:g} --split-seed "
              f"{args.split_seed}), "
              f"{len(sizes)} trees of the grid {grid.describe()}")
    model = latency.with_tree_sizes(setting, as_tree_sizes(sizes), source)
    kept = [name for name in model.sized_settings if name != setting]
    atomic_write_json(args.out, {**model.as_dict(), "record": record, "seconds": time.perf_counter() - start,
                                 MARKER_KEY: written_by(LATENCY, "latency")})
    print(f"tree_sizes: {source}; kept the sizes of {', '.join(kept) or 'no other setting'}; wrote {args.out} "
          f"({time.perf_counter() - start:.0f} s)")
    return 0


def _copy_sizes(args, argv, latency) -> int:
    """``--sizes-from``: every named setting's sizes of that model (and their sources) on ``--latency``'s times."""
    from verispec.files.io import atomic_write_json
    from verispec.files.provenance import LATENCY, MARKER_KEY, run_record, written_by
    from verispec.latency import UNKNOWN_SETTING, LatencyModel, check_latency_pair, measured_pair

    donor = LatencyModel.load(args.sizes_from)
    if not donor.tree_sizes or UNKNOWN_SETTING in donor.sized_settings:
        from verispec.errors import VerispecError

        raise VerispecError(f"--sizes-from {args.sizes_from} carries no tree sizes of a named sampling setting; give "
                            "a model experiments/tree_sizes.py wrote with --dataset")
    if measured_pair(donor) is not None:
        check_latency_pair(latency, measured_pair(donor), "--latency")
    model = latency
    for setting, trees, source in donor.tree_sizes:
        model = model.with_tree_sizes(setting, dict(trees), f"{source} (taken from {Path(args.sizes_from).name})")
    record = run_record(shlex.join(["python", "experiments/tree_sizes.py", *(sys.argv[1:] if argv is None else argv)]),
                        [args.latency, args.sizes_from], threads=args.threads)
    atomic_write_json(args.out, {**model.as_dict(), "record": record, MARKER_KEY: written_by(LATENCY, "latency")})
    print(f"tree_sizes: the sizes of {', '.join(model.sized_settings)} from {args.sizes_from} on {args.latency}'s "
          f"times; wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
