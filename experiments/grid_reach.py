"""Where the optimum lies beyond the selector grid (issue 78, item 2): the oracle's choices on nested grids, in every
latency regime, from labels on a wider probe grid at a sample of roots.

    python experiments/label_cost.py --dataset data/selector/qwen-t07-m64.npz \\
        --verifiers psbv,globalres,specinfer,traversal,traversal-iid --ks 1-6,8 --l1s 0-6 --l2s 0-6,8,10,12 \\
        --samples 16 --roots 16 --threads 1 --out docs/results/probe-grid-t07.json
    python experiments/label_cost.py --dataset data/selector/qwen-t1-r2.npz \\
        --verifiers globalres,specinfer,traversal,traversal-iid --ks 1-6,8 --l1s 0-6 --l2s 0-6,8,10,12 \\
        --roots 16 --threads 1 --out docs/results/probe-grid-t1.json
    python experiments/grid_reach.py --labels docs/results/probe-grid-t07.json \\
        --labels docs/results/probe-grid-t1.json --latency data/latency/latency-cpu-one-run-t07-t1.json \\
        --out docs/results/grid-reach.json

``label_cost.py`` labels the sampled roots on the probe grid (it keeps every action's label a root, over all its
sampled combs and over each half of them, and what a root cost); this reads them and, for each labels file (a
sampling setting), each latency regime (``verispec.selector.regimes``: gpu-large, the measured CPU of ``--latency``,
h100) and each leading rule, reports ``verispec.selector.reach.grid_reach`` on the candidate grids: the dataset's grid
(the one the verdict was taken on), the widened grid whose labels were priced (K 1-6, L1 0-5, L2 0-6, where the probe
holds it) and the probe grid itself, the oracle cross-fitted on the halves. An action is priced at its largest tree
(1 + L1 + K L2 nodes, K-wide draft steps after the trunk), in every regime alike: the CPU model's tree sizes of
decoding cover the dataset's grid only. The file ``--out`` (JSON, written atomically, with the run's record and the
labels files' records) holds per setting and regime those results, and per setting the probe's label cost (seconds a
root, hours for the dataset's roots).
"""

from __future__ import annotations

import dataclasses
import json
import shlex
import sys
import time
from pathlib import Path

#: The widened grid whose labels experiments/label_cost.py priced (issue 78): a candidate where the probe holds it.
WIDENED = {"ks": list(range(1, 7)), "l1s": list(range(0, 6)), "l2s": list(range(0, 7))}


def main(argv=None) -> int:
    from verispec.study.script_files import ScriptParser

    parser = ScriptParser("grid_reach", description=__doc__.splitlines()[0])
    parser.add_argument("--labels", type=Path, action="append", required=True,
                        help="a label_cost.py result on the probe grid (one a sampling setting; repeat)")
    parser.add_argument("--latency", type=Path, required=True, help="the measured CPU latency model (regime cpu)")
    parser.add_argument("--out", type=Path, required=True, help="the result file (JSON)")
    args = parser.parse_args(argv)
    from verispec.study.script_files import run_script

    return run_script("grid_reach", lambda held: _run(args, argv, held))


#: The largest labels file read (a probe of 16 roots on 2,072 actions is about 0.5 MB).
LABELS_LIMIT = 1 << 30
#: What a label_cost.py result holds that this reads.
LABELS_KEYS = ("record", "dataset", "grid", "action_names", "samplings", "samples", "rows", "seconds_per_root",
               "dataset_roots", "projected_hours", "threads")


def _labels(path: Path):
    """(the label_cost.py result at ``path``, its grid, its labelled roots' labels [N, A], their halves [2, N, A] or
    None), or a one-line VerispecError naming what is wrong with the file."""
    import numpy as np

    from verispec.errors import VerispecError
    from verispec.files.io import unpack_floats
    from verispec.files.reading import read_user_file
    from verispec.selector.actions import ActionGrid

    what = f"the labels file {str(path)!r}"
    try:
        cost = json.loads(read_user_file(path, limit=LABELS_LIMIT, what="the labels file", regular_only=True))
    except ValueError as error:
        raise VerispecError(f"{what} is not JSON ({error}); give a result of experiments/label_cost.py") from None
    missing = [key for key in LABELS_KEYS if not isinstance(cost, dict) or key not in cost]
    if missing:
        raise VerispecError(f"{what} holds no {missing[0]!r}; give a result of experiments/label_cost.py")
    grid = ActionGrid.from_dict(cost["grid"], cost["action_names"])
    rows = [row for row in cost["rows"] if isinstance(row, dict) and row.get("refused") is None and "efficiency" in row]
    if not rows:
        raise VerispecError(f"{what} holds no labelled root with its labels; rerun label_cost.py at this commit (it "
                            "keeps them)")
    try:
        efficiency = np.stack([unpack_floats(row["efficiency"]) for row in rows])  # [N, A]
        halves = None  # [2, N, A]: each root's labels over each half of its combs (the cross-fitted oracle)
        if all(row.get("halves") for row in rows):
            halves = np.stack([np.stack([unpack_floats(row["halves"][side]) for row in rows]) for side in (0, 1)])
    except (ValueError, TypeError, KeyError, IndexError) as error:
        raise VerispecError(f"{what}: a root's labels cannot be read ({error}); rerun label_cost.py") from None
    wrong_halves = halves is not None and halves.shape[1:] != efficiency.shape
    if efficiency.shape[1:] != (len(grid.actions),) or wrong_halves:
        raise VerispecError(f"{what}: its labels are not one a grid action ({len(grid.actions)}) a root; rerun "
                            "label_cost.py")
    return cost, grid, efficiency, halves


def _run(args, argv, held) -> int:
    from verispec.errors import VerispecError
    from verispec.files.io import atomic_write_json
    from verispec.files.provenance import run_record
    from verispec.latency import LatencyModel
    from verispec.selector.actions import action_times
    from verispec.selector.dataset_file import Dataset
    from verispec.selector.reach import candidates_from, grid_reach
    from verispec.selector.regimes import regime_models
    from verispec.study.script_files import RunOutputs, check_input

    for path in [*args.labels, args.latency]:
        check_input(path, "an input")
    RunOutputs("--out", result=args.out).claim(held)
    start = time.monotonic()
    cpu = LatencyModel.load(args.latency)
    cpu = dataclasses.replace(cpu, tree_sizes=(), setting=None)  # every action at its largest tree (docstring)
    regimes = regime_models(cpu)
    record = run_record(shlex.join(["python", "experiments/grid_reach.py", *(sys.argv[1:] if argv is None else argv)]),
                        [*map(str, args.labels), str(args.latency)])
    settings = {}
    for path in args.labels:
        cost, grid, efficiency, halves = _labels(path)
        base = Dataset.load(cost["dataset"]).metadata["grid"]
        spec = {"dataset": {axis: base[axis] for axis in ("ks", "l1s", "l2s")}}
        if all(set(WIDENED[axis]) <= set(getattr(grid, axis)) for axis in WIDENED):
            spec["widened"] = WIDENED
        spec["probe"] = {"ks": list(grid.ks), "l1s": list(grid.l1s), "l2s": list(grid.l2s)}
        candidates = candidates_from(spec)
        setting = cost["samplings"][0] if len(cost["samplings"]) == 1 else "; ".join(cost["samplings"])
        if setting in settings:
            raise VerispecError(f"--labels {str(path)!r} labels the setting {setting!r}, as "
                                f"{settings[setting]['labels']!r} does; give one labels file a sampling setting")
        settings[setting] = {
            "labels": str(path), "labels_record": cost["record"], "roots": len(efficiency), "samples": cost["samples"],
            "probe_grid": spec["probe"], "candidates": spec, "verifiers": list(grid.verifiers),
            "cost": {"seconds_per_root": cost["seconds_per_root"], "dataset_roots": cost["dataset_roots"],
                     "projected_hours": cost["projected_hours"], "threads": cost["threads"]},
            "crossfit": halves is not None,
            "regimes": {name: grid_reach(efficiency, grid, action_times(grid, latency), candidates, halves=halves)
                        for name, latency in regimes.items()}}
    atomic_write_json(args.out, {"record": {**record, "seconds": round(time.monotonic() - start, 1)},
                                 "latency": str(args.latency), "settings": settings})
    print(args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
