"""What a rule's conditional-exact labels cost at a pair's roots: measured at a seeded sample of a dataset's roots,
projected onto all of them (issue 56: psbv at T = 1, where every node keeps the whole vocabulary).

    python experiments/label_cost.py --dataset data/selector/qwen-t1-r2.npz --verifiers psbv --roots 2 \\
        --threads 1 --out docs/results/psbv-t1-label-cost.json

Each sampled root (``--roots``, ``--seed``; the dataset's ``key`` column holds each root's context and sampling) is
labelled as ``verispec selector dataset --traces-of DATASET --verifiers ...`` would label it: the same function
(``verispec.selector.labelling.label_roots``), the dataset's grid parameters (K, L1, L2; or another grid's, ``--ks``,
``--l1s``, ``--l2s``: what labels on a widened grid would cost) with these rules, its number of sampled combs (or
``--samples``) and its seed (so the same combs), one root at a time. Its wall seconds and the load average before and
after (and, where the rule refused the root on its own size limit, a ``ProblemTooLargeError``, the refusal and the
seconds until it; else the root's labels, every action's, and their means over each half of its combs, packed, which
``experiments/grid_reach.py`` reads) go to a resumable row store (``OUT.rows.json``, keyed on the root, its parameters
the pair, dtype, rules, grid, samples, seed and threads); a root whose labels outgrow ``--memory-limit``
(``MemoryCeiling``: an allocation past it fails inside the process rather than the kernel killing the run) is recorded
as refused, with the limit, and labelled again by a run with a larger one; ``--time-budget`` is hard
(``verispec.guard.budget``: it stops a root in the middle, and that root is labelled again by the next run), exit 3:
the same command continues. It runs from the start, so reading the dataset and loading the pair count too (spent
before the first root: one line, exit 3, nothing written). Before any of that the options' ranges, the dataset (a
regular file: a FIFO would block its reader) and the outputs (writable, room on the disk, the run's own, one run at a
time; ``verispec.study.script_files``) are checked. The result file ``OUT`` (JSON, written atomically, with the run's
``record``) holds the rows, how many roots were refused, the mean seconds of a labelled root and that mean times the
dataset's roots: the wall time a build of the rules' labels at every root would take on this machine with these
threads (None where every root was refused; a build stops at its first refusal).
"""

from __future__ import annotations

import contextlib
import os
import resource
import shlex
import statistics
import sys
import time
from pathlib import Path

import numpy as np


def rows_path(out: Path) -> Path:
    return out.with_name(out.name + ".rows.json")


def main(argv=None) -> int:
    from verispec.study.script_files import ScriptParser

    parser = ScriptParser("label_cost", description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", required=True, help="a dataset of a pair's roots (verispec selector dataset)")
    parser.add_argument("--verifiers", required=True, help="the rules to label, comma separated (e.g. psbv)")
    parser.add_argument("--pair", default=None, help="installed pair (default: the dataset's)")
    parser.add_argument("--target", help="target model directory (with --draft, instead of --pair)")
    parser.add_argument("--draft", help="draft model directory")
    parser.add_argument("--ks", default=None, help="K values of another grid than the dataset's (e.g. 1-6: the cost "
                                                    "of labels on a widened grid, issue 78)")
    parser.add_argument("--l1s", default=None, help="L1 values of another grid (default the dataset's)")
    parser.add_argument("--l2s", default=None, help="L2 values of another grid (default the dataset's)")
    parser.add_argument("--samples", type=int, default=None,
                        help="sampled combs a root (default the dataset's): fewer for a cheaper look at where the "
                             "optimum lies (experiments/grid_reach.py), not for a build's cost")
    parser.add_argument("--roots", type=int, default=2, help="roots sampled from the dataset (default 2)")
    parser.add_argument("--seed", type=int, default=0, help="the roots' sample (default 0)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1, as the label builds ran)")
    parser.add_argument("--time-budget", type=float, default=None,
                        help="seconds; at it stop, inside a root too (exit 3)")
    parser.add_argument("--memory-limit", type=float, default=None,
                        help="GB the run may hold while it labels (default 90%% of what the system could give it when "
                             "the roots start); a root whose labels need more is recorded as refused, the next goes on")
    parser.add_argument("--out", type=Path, required=True, help="the result file (its rows in OUT.rows.json)")
    args = parser.parse_args(argv)
    start = time.monotonic()  # the budget runs from here: reading the dataset and loading the pair count too
    from verispec.study.script_files import run_script

    return run_script("label_cost", lambda held: _run(args, argv, start, held))


def _run(args, argv, start: float, held) -> int:
    """The run of ``main``'s options: everything checked before the work (the options' ranges, the dataset a
    regular file, the outputs writable, room on their disk, the run's own and locked for it), then the roots."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from verispec.errors import AnalysisTimeoutError, ProblemTooLargeError, VerispecError
    from verispec.files.io import ResultStore, atomic_write_json, unpack_floats
    from verispec.files.provenance import run_record
    from verispec.guard import budget
    from verispec.guard.limits import MAX_THREADS
    from verispec.study.script_files import MAX_SCRIPT_BUDGET, Above, RunOutputs, check_input, check_ranges

    check_ranges([("--roots", args.roots, 1, None), ("--seed", args.seed, 0, 2**63 - 1),
                  ("--samples", args.samples, 1, 4096),
                  ("--threads", args.threads, 1, MAX_THREADS),
                  ("--time-budget", args.time_budget, Above(0), MAX_SCRIPT_BUDGET),
                  ("--memory-limit", args.memory_limit, Above(0), MAX_MEMORY_GB)])
    check_input(args.dataset, "the dataset")
    RunOutputs("--out", store=rows_path(args.out), result=args.out).claim(held)  # never over a file not the run's
    deadline = None if args.time_budget is None else start + args.time_budget
    try:  # hard from the start: a dataset or a pair that takes long to read is inside the budget too
        with budget.time_budget(deadline, hard=True, what="label_cost's --time-budget"):
            import torch

            from verispec.latency import LatencyModel
            from verispec.models.problem import SharedContext
            from verispec.selector.actions import ActionGrid
            from verispec.selector.roots import (
                dataset_pair_roots,
                labelling_settings,
                load_roots_pair,
                sample_roots,
                sampling_text,
            )
            from verispec.verifiers import split_names

            torch.set_num_threads(args.threads)
            dataset, roots = dataset_pair_roots(args.dataset)
            metadata = labelling_settings(dataset, args.dataset)
            grid = ActionGrid(metadata["grid"]["ks"], metadata["grid"]["l1s"], metadata["grid"]["l2s"],
                              tuple(split_names(args.verifiers)))
            if (args.ks, args.l1s, args.l2s) != (None, None, None):  # another grid: each axis given or the dataset's
                values = grid.as_dict()
                grid = ActionGrid.parse(ks=args.ks or _axis(values["ks"]), l1s=args.l1s or _axis(values["l1s"]),
                                        l2s=args.l2s or _axis(values["l2s"]), verifiers=args.verifiers)
            grid.actions  # noqa: B018 - an unknown rule fails here, on one line
            latency = LatencyModel.from_dict(metadata["latency"])  # the features' prices, as the build's
            record = run_record(shlex.join(["python", "experiments/label_cost.py",
                                            *(sys.argv[1:] if argv is None else argv)]), [args.dataset],
                                threads=args.threads)
            pair = load_roots_pair(roots, args.pair, args.target, args.draft, metadata["pair"])
            chosen = sample_roots(roots, args.roots, args.seed)
            samples = metadata["samples"] if args.samples is None else args.samples
            parameters = {"pair": pair.name, "dtype": str(pair.target.dtype), "grid": grid.as_dict(),
                          "samples": samples, "seed": metadata["seed"], "threads": args.threads}
            store = ResultStore(rows_path(args.out), parameters=parameters)
    except AnalysisTimeoutError:
        spent = True
    else:  # a block that ends before the hard budget's timer fires (a tiny pair loads in milliseconds) is past it too
        spent = args.time_budget is not None and time.monotonic() - start > args.time_budget
    if spent:
        print(f"label_cost: --time-budget {args.time_budget:g} s reached before the first root (reading the dataset "
              "and loading the pair); give a larger budget", file=sys.stderr)
        return 3
    from tqdm import tqdm

    from verispec.selector.labelling import label_roots

    try:  # measured once the pair is loaded: what the run already holds lies outside the roots' limit
        limit = _memory_ceiling(args.memory_limit)
    except VerispecError as error:
        print(f"label_cost: error: {error}", file=sys.stderr)
        return 2
    print(f"label_cost: {len(chosen)} roots of {len(roots)}, {grid.describe()}, {args.threads} threads, load "
          f"average {os.getloadavg()[0]:.2f}, memory limit {limit.bytes / 2**30:.1f} GB", file=sys.stderr)
    shared = SharedContext(pair)
    stopped = False
    for root in tqdm(chosen, desc="roots", disable=None):
        if store.done(root.key()) and not _retry(store.rows[root.key()], limit):
            continue
        if args.time_budget is not None and time.monotonic() - start > args.time_budget:
            stopped = True
            break
        load_before, began = os.getloadavg()[0], time.perf_counter()
        try:  # the budget holds inside a root too (a psbv root can run for many minutes): hard, as the build's
            with budget.time_budget(None if args.time_budget is None else start + args.time_budget, hard=True,
                                    what="label_cost's --time-budget"), limit.held():
                row, = label_roots([root], grid, method="conditional", samples=samples,
                                   seed=metadata["seed"], epsilon=metadata["epsilon"], latency=latency, pair=pair,
                                   shared=shared)
            refused, mean_label = None, float(np.mean(unpack_floats(row["efficiency"])))
            labels = {"efficiency": row["efficiency"], "stderr": row["stderr"],  # packed [A], for grid_reach.py
                      "halves": _halves(row)}
        except ProblemTooLargeError as error:  # the rule's own limit: a measured outcome, the next root goes on
            refused, mean_label, labels = " ".join(str(error).split()), None, {}
        except (MemoryError, RuntimeError) as error:  # numpy's MemoryError, torch's allocator's RuntimeError
            if not limit.refused(error):
                raise
            refused, mean_label, labels = limit.words(), None, {"memory_limit_bytes": limit.bytes}
            limit.release()
        except VerispecError as error:
            if isinstance(error, AnalysisTimeoutError) and args.time_budget is not None and \
                    time.monotonic() - start >= args.time_budget:  # stopped unfinished: no row, the rerun redoes it
                stopped = True
                break
            print(f"label_cost: error: at a root of {root.group!r}: {' '.join(str(error).split())}",
                  file=sys.stderr)
            return 2
        store.add(root.key(), {"key": root.key(), "group": root.group, "context_length": len(root.context),
                               "seconds": time.perf_counter() - began, "load_before": load_before,
                               "load_after": os.getloadavg()[0], "mean_label": mean_label, "refused": refused,
                               **labels})
    rows = [store.rows[root.key()] for root in chosen if store.done(root.key())]
    seconds = [row["seconds"] for row in rows if row["refused"] is None]
    result = {"record": {**record, "seconds": round(time.monotonic() - start, 1)},
              "dataset": str(args.dataset), "pair": pair.name, "verifiers": list(grid.verifiers),
              "grid": grid.as_dict(), "action_names": [action.name for action in grid.actions],
              "actions": len(grid.actions), "samples": samples,
              "samplings": sorted({sampling_text(root.as_dict()["sampling"]) for root in chosen}),
              "threads": args.threads, "roots": len(chosen), "roots_done": len(rows), "dataset_roots": len(roots),
              "complete": not stopped, "rows": rows, "refused": sum(row["refused"] is not None for row in rows),
              "seconds_per_root": statistics.fmean(seconds) if seconds else None,
              "projected_hours": statistics.fmean(seconds) * len(roots) / 3600 if seconds else None}
    atomic_write_json(args.out, result)
    print(args.out)
    if stopped:
        print(f"label_cost: --time-budget {args.time_budget:g} s reached after {len(rows)} roots; run the same command "
              "again to continue", file=sys.stderr)
        return 3
    return 0


#: The largest --memory-limit, in GB.
MAX_MEMORY_GB = 65536.0
#: The share of the memory the system could give the run (its resident set and what is available) taken by default.
DEFAULT_MEMORY_SHARE = 0.9


class MemoryCeiling:
    """The data segment a root's labels may grow the process to (``RLIMIT_DATA``, which counts the heap and
    anonymous mappings, where numpy's and torch's arrays live): past it an allocation fails inside the process
    (numpy's MemoryError, torch's "can't allocate memory"), which the run reports as the root's refusal, instead
    of the kernel killing the whole run at the box's end (the T = 1 probe's seventh root, at 24 GB)."""

    def __init__(self, limit_bytes: int):
        self.bytes = int(limit_bytes)

    @contextlib.contextmanager
    def held(self):
        """The limit set around one root, the process's own limit restored after (the pair and the store grow
        outside it)."""
        before = resource.getrlimit(resource.RLIMIT_DATA)
        hard = before[1]
        resource.setrlimit(resource.RLIMIT_DATA, (self.bytes if hard == resource.RLIM_INFINITY
                                                  else min(self.bytes, hard), hard))
        try:
            yield
        finally:
            resource.setrlimit(resource.RLIMIT_DATA, before)

    @staticmethod
    def refused(error: BaseException) -> bool:
        """Whether ``error`` is an allocation the limit refused (not another RuntimeError of the labelling)."""
        return isinstance(error, MemoryError) or any(words in str(error) for words in (
            "can't allocate memory", "not enough memory", "Cannot allocate memory"))

    def words(self) -> str:
        return (f"memory: the root's labels need more than {self.bytes / 2**30:.1f} GB (--memory-limit); label it "
                "again with a larger limit on a larger box")

    @staticmethod
    def release() -> None:
        """The failed root's arrays handed back to the system before the next root."""
        import gc

        from verispec.guard.memory import trim_heap

        gc.collect()
        trim_heap()


def _memory_ceiling(limit_gb: float | None) -> MemoryCeiling:
    """``--memory-limit`` in bytes, or by default ``DEFAULT_MEMORY_SHARE`` of the process's resident set and the
    memory the system could still give it; VerispecError where the limit lies below what the process already holds
    (every allocation would fail) or where the system does not say what it has and no limit is given."""
    from verispec.errors import VerispecError
    from verispec.guard.memory import available_memory_bytes

    held = _data_bytes()
    if limit_gb is None:
        available = available_memory_bytes()
        if available is None or held is None:
            raise VerispecError("this system does not say how much memory it has (/proc): give --memory-limit GB")
        return MemoryCeiling(int(DEFAULT_MEMORY_SHARE * (held + available)))
    limit = int(limit_gb * 2**30)
    if held is not None and limit <= held:
        raise VerispecError(f"--memory-limit {limit_gb:g} GB is below the {held / 2**30:.1f} GB the run already holds "
                            "(the pair and the dataset): give a larger limit")
    return MemoryCeiling(limit)


def _data_bytes() -> int | None:
    """The process's data segment now (``/proc/self/statm``'s data field, what ``RLIMIT_DATA`` counts), or None."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[5]) * resource.getpagesize()
    except (OSError, ValueError, IndexError):
        return None


def _retry(row: dict, limit: MemoryCeiling) -> bool:
    """Whether a stored row is labelled again: one refused for memory under a smaller limit than this run's."""
    return row.get("memory_limit_bytes") is not None and row["memory_limit_bytes"] < limit.bytes


def _halves(row: dict) -> list[str] | None:
    """The means of a root's labels over the first and the second half of its sampled combs, packed [A] each (a
    cross-fitted oracle chooses on one and scores on the other: ``verispec.selector.reach``); None for one comb."""
    from verispec.files.io import pack_floats, unpack_floats

    if row.get("per_sample") is None:
        return None
    per_sample = unpack_floats(row["per_sample"])  # [S, A]
    half = per_sample.shape[0] // 2
    if half == 0:
        return None
    return [pack_floats(per_sample[:half].mean(axis=0)), pack_floats(per_sample[half:].mean(axis=0))]


def _axis(values) -> str:
    return ",".join(str(int(value)) for value in values)


if __name__ == "__main__":
    raise SystemExit(main())
