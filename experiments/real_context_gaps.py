"""What real contexts leave (issue 56, item 4): at real roots of a model pair, the optimum E[tau + 1] of any valid
verifier on ``iid:K,L`` and ``delayed:K,L1,L2`` trees against psbv and the best published rule.

    python experiments/real_context_gaps.py --dataset data/selector/qwen-t07-m64.npz --roots 100 \\
        --trees iid:2,1,iid:4,1,iid:2,2,iid:3,2,delayed:2,1,1,delayed:3,1,1 --threads 2 \\
        --out results/real-context-gaps.json

The roots are a seeded sample (``--roots``, ``--seed``) of the dataset's (its ``key`` column holds each root's whole
context, group and sampling: the roots its build traced, the contexts in its trace store ``FILE.traces.json``), the
pair the dataset's (its metadata's installed pair, or ``--target``/``--draft`` directories whose pair name the roots
carry). At each root and tree:

* the problem after the root's context (``verispec.models.problem.ModelProblem``: p and q from the two models'
  forwards under the root's sampling) restricted to its support to the tree's depth
  (``verispec.models.support.restrict_to_support``: at top-k 20 each conditional keeps at most 20 tokens, so the
  prefixes of positive mass are few and the restriction is an exact ``TabularProblem`` over V' tokens, where the
  full vocabulary, 151,936 tokens, could never be tabulated);
* the optimum of every valid verifier from the selection LP (``verispec.bounds.path_selection.selection_optimum``:
  select-then-verify is optimal on both tree families; exact to the LP's 1e-9), or, where its estimated size
  (``selection_lp_estimate``) passes ``--limit`` variables, that size;
* the exact E[tau + 1] of every registry rule valid for the tree (``verispec.simulator.analyze``; each must be
  lossless), psbv's and the best *published* rule's (a citation that is not verispec's own: psbv and traversal-iid
  are not published) named, and the gaps optimum - psbv, optimum - best published.

Rows go to a resumable row store (``OUT.rows.json``, a ``verispec.files.io.ResultStore`` keyed on the root and tree, its
parameters everything a row depends on: the pair, dtype, LP limit, restriction limits and rule set; the load average
recorded in each row). ``--time-budget`` is hard (``verispec.guard.budget``): a tree still running at the deadline stops
there and is no row, the trees finished before it keep theirs, exit 3 (the same command continues); it runs from
the start, so reading the dataset and loading the pair count too (spent before the first root: one line, exit 3,
nothing written). Before any of that the options' ranges, the dataset (a regular file: a FIFO would block its
reader) and the outputs (writable, room on the disk, the run's own, one run at a time;
``verispec.study.script_files``) are checked. The result
file ``OUT`` (JSON, written atomically, with the run's ``record``, ``verispec.files.provenance.run_record``) holds per
tree:
the roots solved and refused, the mean optimum, psbv and best-published efficiencies, the mean gaps with 95%
intervals (percentile bootstrap over the prompts, the dataset's groups, resampled whole: a prompt's roots share
a context, so they are not independent; and the t interval over roots beside it), the fraction of roots where psbv
(and the best published rule) is within 1e-9 of the optimum, each over the roots it is over; the same for psbv
against the best published rule over the SAME roots (``compared``: those where the optimum, psbv and every
published rule were computed, how many, and the roots each refusing rule left out), the roots each rule refused
by name (``rule_refusals``), how often each rule is (tied for) the best published one, the
restriction's sizes (V', reachable prefixes), and the sizes the refused roots would need: the LP's variables, or
where the restriction itself is refused, its table's prefixes (sum of V'^l over lengths 0..depth).
"""

from __future__ import annotations

import json
import math
import os
import shlex
import statistics
import sys
import time
from pathlib import Path

import numpy as np

#: The trees of the issue: depth 1 and 2, K = 2..4 (delayed:K,1,1 is a trunk token, then K one-token branches).
DEFAULT_TREES = "iid:2,1,iid:4,1,iid:2,2,iid:3,2,delayed:2,1,1,delayed:3,1,1"
#: Gaps below this are the optimum reached (the selection LP's tolerance).
TOLERANCE = 1e-9
#: Bootstrap resamples of the prompts for the intervals.
BOOTSTRAP = 2000


def parse_trees(text: str) -> list[str]:
    """Tree specifications from a comma list ('iid:2,2,delayed:2,1,1': a part that starts with a digit continues
    the tree before it), each parsed and one the selection LP covers (``iid:K,L``, ``delayed:K,L1,L2``, a chain);
    VerispecError (one line) otherwise."""
    from verispec.bounds.path_selection import _trunk_iid
    from verispec.errors import VerispecError
    from verispec.simulator import parse_tree

    specs: list[str] = []
    for part in (piece.strip() for piece in text.split(",")):
        if not part:
            raise VerispecError(f"--trees {text!r}: an empty entry; give e.g. {DEFAULT_TREES}")
        if part[0].isdigit() and specs:
            specs[-1] += "," + part
        else:
            specs.append(part)
    for spec in specs:
        try:
            _trunk_iid(parse_tree(spec))
        except VerispecError as error:
            raise VerispecError(f"--trees: {' '.join(str(error).split())}") from None
    if len(set(specs)) != len(specs):
        raise VerispecError(f"--trees {text!r} names a tree twice")
    return specs


def valid_rules(drafter) -> list[str]:
    """The registry's rules valid for the drafter's trees (``check_compatible``'s test), by name."""
    from verispec.verifiers import REGISTRY

    return sorted(name for name, rule in REGISTRY.items() if drafter.draft_laws & rule.valid_for)


def published(name: str) -> bool:
    """A rule of a paper: its citation is not verispec's own (psbv, traversal-iid)."""
    from verispec.verifiers import REGISTRY

    return not REGISTRY[name].citation.lower().startswith("verispec")


def tree_row(problem, spec: str, limit: int, max_reachable: int, max_table: int) -> dict:
    """One root's row for one tree: the restriction to the support at the tree's depth, the optimum (or the LP size
    it would need), every valid rule's exact E[tau + 1], psbv's and the best published rule's gaps."""
    from verispec.bounds.path_selection import selection_lp_estimate, selection_optimum
    from verispec.errors import AnalysisTimeoutError, ProblemTooLargeError, VerispecError
    from verispec.guard import budget
    from verispec.models.support import reachable_tree, restrict_to_support, table_prefixes
    from verispec.simulator import analyze, parse_tree
    from verispec.verifiers import REGISTRY

    drafter = parse_tree(spec)
    start = time.perf_counter()
    row: dict = {"tree": spec}
    try:
        levels, tokens = reachable_tree(problem, drafter.depth, max_reachable=max_reachable)
        # the sizes a refused restriction would need: V' and its table's prefixes
        row.update(tokens=len(tokens), reachable=[len(level) for level in levels],
                   table_prefixes=table_prefixes(len(tokens), drafter.depth))
        restriction = restrict_to_support(problem, drafter.depth, max_reachable=max_reachable, max_table=max_table,
                                          reachable=(levels, tokens))
    except ProblemTooLargeError as error:
        row.update(refused=" ".join(str(error).split()), lp_variables=None, optimum=None)
        return {**row, "seconds": time.perf_counter() - start}
    small = restriction.problem
    variables = selection_lp_estimate(small, drafter)
    row["lp_variables"] = variables
    if variables > limit:
        row.update(refused=f"the selection LP needs about {variables:,} variables, above --limit {limit:,}",
                   optimum=None)
    else:
        optimum = selection_optimum(small, drafter, limit=limit)
        row.update(refused=None, optimum=optimum.block_efficiency, acceptance=list(optimum.acceptance),
                   lp_seconds=optimum.seconds)
    rules, rule_refused = {}, {}
    for name in valid_rules(drafter):
        try:
            result = analyze(small, drafter, REGISTRY[name])
        except (ProblemTooLargeError, AnalysisTimeoutError) as error:
            if isinstance(error, AnalysisTimeoutError) and budget.remaining() == 0:
                raise  # the run's --time-budget, not the rule's own limit: the tree is not finished
            rule_refused[name] = " ".join(str(error).split())
            continue
        if result.lossless is False:
            raise VerispecError(f"{name} is lossy on {spec} at a real root (TV {float(result.tv_distance):.3g}): a "
                                "registry rule must be lossless")
        rules[name] = float(result.block_efficiency)
    row.update(rules=rules, rule_refused=rule_refused, psbv=rules.get("psbv"))
    candidates = {name: value for name, value in rules.items() if published(name)}
    if candidates:
        best = max(sorted(candidates), key=lambda name: candidates[name])
        row.update(best_published=best, best_published_efficiency=candidates[best],
                   best_published_tied=sorted(name for name, value in candidates.items()
                                              if value >= candidates[best] - 1e-12))
    if row["optimum"] is not None:
        row["gap_psbv"] = None if row["psbv"] is None else row["optimum"] - row["psbv"]
        row["gap_published"] = row["optimum"] - row["best_published_efficiency"] if candidates else None
        row["max_excess"] = max((value - row["optimum"] for value in rules.values()), default=None)
    row["seconds"] = time.perf_counter() - start
    return row


def bootstrap_interval(values: list[float], groups: list[str], seed: int, resamples: int = BOOTSTRAP) -> list:
    """The percentile bootstrap 95% interval of the mean of ``values``, the groups (prompts) resampled whole."""
    if not values:
        return [None, None]
    names = sorted(set(groups))
    sums = np.zeros(len(names))
    counts = np.zeros(len(names))
    where = {name: i for i, name in enumerate(names)}
    for value, group in zip(values, groups):
        sums[where[group]] += value
        counts[where[group]] += 1
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, len(names), size=(resamples, len(names)))
    means = sums[picks].sum(axis=1) / counts[picks].sum(axis=1)
    return [float(np.quantile(means, 0.025)), float(np.quantile(means, 0.975))]


def t_interval(values: list[float]) -> list:
    """The t 95% interval of the mean over the rows (roots taken as independent)."""
    if len(values) < 2:
        return [None, None]
    from scipy import stats

    mean, spread = statistics.fmean(values), statistics.stdev(values) / math.sqrt(len(values))
    half = float(stats.t.ppf(0.975, len(values) - 1)) * spread
    return [mean - half, mean + half]


def _spread(values: list) -> dict | None:
    if not values:
        return None
    return {"min": min(values), "median": statistics.median(values), "max": max(values)}


def _gap_stats(rows: list[dict], field: str, seed: int) -> dict:
    """The mean of ``field`` over ``rows``, its two 95% intervals, its maximum and the share within 1e-9, and the
    number of roots it is over."""
    values = [row[field] for row in rows]
    return {"roots": len(values), "mean": statistics.fmean(values) if values else None,
            "bootstrap_95": bootstrap_interval(values, [row["group"] for row in rows], seed),
            "t_95": t_interval(values), "max": max(values) if values else None,
            "within_1e-9": sum(value < TOLERANCE for value in values) / len(values) if values else None}


def _refusal_counts(rows: list[dict]) -> dict[str, int]:
    """Roots each rule refused (its own size limit), by rule, most first."""
    counts: dict[str, int] = {}
    for row in rows:
        for name in row.get("rule_refused", {}):
            counts[name] = counts.get(name, 0) + 1
    return dict(sorted(counts.items(), key=lambda item: (-item[1], item[0])))


def compared(solved: list[dict], seed: int) -> dict:
    """psbv against the best published rule over the SAME roots: those where the optimum, psbv and every published
    rule valid for the tree were computed (a root where psbv refused, or where a published rule did and the best
    published would be the best of fewer rules, is left out of both sides, and counted by the rule that refused).
    A mean over the roots psbv reaches against one over every root would compare unlike things: psbv refuses the
    wider contexts (V' >= 41 at depth 3)."""
    def left_out_by(row) -> list[str]:
        return sorted(name for name in row.get("rule_refused", {}) if name == "psbv" or published(name))

    common = [row for row in solved if not left_out_by(row) and row.get("psbv") is not None
              and row.get("best_published_efficiency") is not None]
    left_out: dict[str, int] = {}
    for row in solved:
        for name in left_out_by(row):
            left_out[name] = left_out.get(name, 0) + 1
    return {"roots": len(common), "left_out": dict(sorted(left_out.items(), key=lambda item: (-item[1], item[0]))),
            "mean_optimum": statistics.fmean(row["optimum"] for row in common) if common else None,
            "mean_psbv": statistics.fmean(row["psbv"] for row in common) if common else None,
            "mean_best_published": statistics.fmean(row["best_published_efficiency"] for row in common)
            if common else None,
            "gap_psbv": _gap_stats(common, "gap_psbv", seed),
            "gap_best_published": _gap_stats(common, "gap_published", seed)}


def summarize(rows: list[dict], seed: int) -> dict:
    """Per tree over its rows: the numbers of the module docstring."""
    out = {}
    for spec in dict.fromkeys(row["tree"] for row in rows):
        mine = [row for row in rows if row["tree"] == spec]
        solved = [row for row in mine if row["optimum"] is not None]
        refused = [row for row in mine if row["optimum"] is None]
        entry: dict = {"roots": len(mine), "solved": len(solved), "refused": len(refused),
                       "tokens": _spread([row["tokens"] for row in mine if "tokens" in row]),
                       "reachable_prefixes": _spread([sum(row["reachable"]) for row in mine if "reachable" in row]),
                       "lp_variables_solved": _spread([row["lp_variables"] for row in solved]),
                       "lp_variables_refused": sorted(row["lp_variables"] for row in refused
                                                      if row["lp_variables"] is not None),
                       "table_prefixes_refused": sorted(row["table_prefixes"] for row in refused
                                                        if row.get("table_prefixes") is not None),
                       "refusals": sorted({row["refused"] for row in refused})[:5]}
        for name, field in (("psbv", "gap_psbv"), ("best_published", "gap_published")):  # each over its own roots
            entry[f"gap_{name}"] = _gap_stats([row for row in solved if row.get(field) is not None], field, seed)
        entry["compared"] = compared(solved, seed)
        entry["mean_optimum"] = statistics.fmean(row["optimum"] for row in solved) if solved else None
        entry["mean_psbv"] = statistics.fmean(row["psbv"] for row in mine if row.get("psbv") is not None) \
            if any(row.get("psbv") is not None for row in mine) else None
        entry["mean_best_published"] = statistics.fmean(row["best_published_efficiency"] for row in mine
                                                        if "best_published_efficiency" in row) \
            if any("best_published_efficiency" in row for row in mine) else None
        winners: dict[str, int] = {}
        for row in mine:
            for name in row.get("best_published_tied", []):  # every rule tied (1e-12) for the best counts
                winners[name] = winners.get(name, 0) + 1
        entry["best_published_counts"] = dict(sorted(winners.items(), key=lambda item: (-item[1], item[0])))
        entry["max_rule_excess"] = max((row["max_excess"] for row in solved if row.get("max_excess") is not None),
                                       default=None)
        entry["rules_refused"] = sum(len(row.get("rule_refused", {})) for row in mine)
        entry["rule_refusals"] = _refusal_counts(mine)
        entry["seconds_mean"] = statistics.fmean(row["seconds"] for row in mine)
        out[spec] = entry
    return out


def rows_path(out: Path) -> Path:
    """The row store beside the result file: ``OUT.rows.json``."""
    return out.with_name(out.name + ".rows.json")


def main(argv=None) -> int:
    from verispec.study.script_files import ScriptParser

    parser = ScriptParser("real_context_gaps", description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", required=True, help="a dataset of a pair's roots (verispec selector dataset)")
    parser.add_argument("--pair", default=None, help="installed pair (default: the dataset's)")
    parser.add_argument("--target", help="target model directory (with --draft, instead of --pair)")
    parser.add_argument("--draft", help="draft model directory")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--roots", type=int, default=100, help="roots sampled from the dataset (default 100)")
    parser.add_argument("--seed", type=int, default=0, help="the roots' sample and the bootstrap (default 0)")
    parser.add_argument("--trees", default=DEFAULT_TREES, help=f"comma list of trees (default {DEFAULT_TREES})")
    parser.add_argument("--limit", type=int, default=None,
                        help="most variables of a selection LP (default verispec's 200,000); larger: the size "
                             "is reported")
    parser.add_argument("--max-reachable", type=int, default=None,
                        help="most reachable prefixes of a restriction (default 65,536)")
    parser.add_argument("--max-table", type=int, default=None,
                        help="most table prefixes of a restriction (default 262,144)")
    parser.add_argument("--time-budget", type=float, default=None,
                        help="seconds; at it stop, inside a root too (exit 3)")
    parser.add_argument("--threads", type=int, default=2, help="torch threads (default 2)")
    parser.add_argument("--out", type=Path, default=Path("results/real-context-gaps.json"),
                        help="the result file (its rows in OUT.rows.json)")
    args = parser.parse_args(argv)
    start = time.monotonic()  # the budget runs from here: reading the dataset and loading the pair count too
    from verispec.study.script_files import run_script

    return run_script("real_context_gaps", lambda held: _run(args, argv, start, held))


#: Most prefixes of a restriction's reachable set or table (--max-reachable, --max-table): a table of 2^24 prefixes
#: holds p and q over V' tokens at each, 11 GB at V' = 41, more than the machines these runs go on hold.
MAX_PREFIXES = 1 << 24


def _run(args, argv, start: float, held) -> int:
    """The run of ``main``'s options: everything checked before the work (the options' ranges, the trees, the dataset
    a regular file, the outputs writable, room on their disk, the run's own and locked for it), then the roots."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from tqdm import tqdm

    from verispec.errors import AnalysisTimeoutError, VerispecError
    from verispec.files.io import ResultStore, atomic_write_json
    from verispec.files.provenance import run_record
    from verispec.guard import budget
    from verispec.guard.limits import MAX_LP_VARIABLES, MAX_THREADS
    from verispec.lp_analysis.solve import DEFAULT_MAX_VARIABLES
    from verispec.models import support
    from verispec.study.script_files import MAX_SCRIPT_BUDGET, Above, RunOutputs, check_input, check_ranges

    limit = DEFAULT_MAX_VARIABLES if args.limit is None else args.limit
    max_reachable = support.DEFAULT_MAX_REACHABLE if args.max_reachable is None else args.max_reachable
    max_table = support.DEFAULT_MAX_TABLE if args.max_table is None else args.max_table
    check_ranges([("--roots", args.roots, 1, None), ("--seed", args.seed, 0, 2**63 - 1),
                  ("--limit", limit, 1, MAX_LP_VARIABLES), ("--max-reachable", max_reachable, 1, MAX_PREFIXES),
                  ("--max-table", max_table, 1, MAX_PREFIXES), ("--threads", args.threads, 1, MAX_THREADS),
                  ("--time-budget", args.time_budget, Above(0), MAX_SCRIPT_BUDGET)])
    trees = parse_trees(args.trees)
    check_input(args.dataset, "the dataset")
    RunOutputs("--out", store=rows_path(args.out), result=args.out).claim(held)  # never over a file not the run's
    deadline = None if args.time_budget is None else start + args.time_budget
    try:  # hard from the start: a dataset or a pair that takes long to read is inside the budget too
        with budget.time_budget(deadline, hard=True, what="real_context_gaps's --time-budget"):
            import torch

            from verispec.models.problem import ModelProblem, SharedContext
            from verispec.selector.roots import dataset_pair_roots, load_roots_pair, sample_roots, sampling_text
            from verispec.simulator import parse_tree

            torch.set_num_threads(args.threads)
            dataset, roots = dataset_pair_roots(args.dataset)
            record = run_record(shlex.join(["python", "experiments/real_context_gaps.py",
                                            *(sys.argv[1:] if argv is None else argv)]), [args.dataset],
                                threads=args.threads, device=str(args.device))
            pair = load_roots_pair(roots, args.pair, args.target, args.draft, dataset.metadata["pair"],
                                   device=args.device, dtype=args.dtype)
            chosen = sample_roots(roots, args.roots, args.seed)
            rules = sorted({name for spec in trees for name in valid_rules(parse_tree(spec))})
            parameters = {"pair": pair.name, "dtype": str(pair.target.dtype), "limit": limit,
                          "max_reachable": max_reachable, "max_table": max_table, "rules": rules}
            store = ResultStore(rows_path(args.out), parameters=parameters)
    except AnalysisTimeoutError:
        print(f"real_context_gaps: --time-budget {args.time_budget:g} s reached before the first root (reading the "
              "dataset and loading the pair); give a larger budget", file=sys.stderr)
        return 3
    print(f"real_context_gaps: {len(chosen)} roots of {len(roots)} x {len(trees)} trees, {pair.name}, "
          f"{args.threads} threads, load average {os.getloadavg()[0]:.2f}", file=sys.stderr)
    shared = SharedContext(pair)
    stopped = False
    for root in tqdm(chosen, desc="roots", disable=None):
        keys = {spec: json.dumps({"root": root.key(), "tree": spec}, sort_keys=True) for spec in trees}
        if all(store.done(key) for key in keys.values()):
            continue
        if args.time_budget is not None and time.monotonic() - start > args.time_budget:
            stopped = True
            break
        forward = time.perf_counter()
        found, problem = {}, None
        try:  # hard inside a root too (an LP or a rule can run for minutes): a tree stopped unfinished is no row
            with budget.time_budget(None if args.time_budget is None else start + args.time_budget, hard=True,
                                    what="real_context_gaps's --time-budget"):
                problem = ModelProblem(pair, list(root.context), root.sampling, shared=shared)
                for spec, key in keys.items():
                    if not store.done(key):
                        found[key] = {**tree_row(problem, spec, limit, max_reachable, max_table),
                                      "group": root.group, "context_length": len(root.context),
                                      "load_average": os.getloadavg()[0]}
        except VerispecError as error:
            if isinstance(error, AnalysisTimeoutError) and args.time_budget is not None and \
                    time.monotonic() - start >= args.time_budget:  # the run's deadline, not some other limit
                stopped = True
            else:
                print(f"real_context_gaps: error: at a root of {root.group!r}: {' '.join(str(error).split())}",
                      file=sys.stderr)
                return 2
        for row in found.values():  # the trees finished before a stop keep their rows
            row["root_seconds"] = time.perf_counter() - forward
            row["forwards"] = list(problem.passes)
        store.add_many(found)
        if stopped:
            break
    keyed = [[json.dumps({"root": root.key(), "tree": spec}, sort_keys=True) for spec in trees] for root in chosen]
    rows = [store.rows[key] for keys in keyed for key in keys if store.done(key)]
    result = {"record": {**record, "seconds": round(time.monotonic() - start, 1)},
              "dataset": str(args.dataset), "pair": pair.name, "roots": len(chosen),
              "roots_done": sum(all(store.done(key) for key in keys) for keys in keyed), "trees": trees,
              "limit": limit, "samplings": sorted({sampling_text(root.as_dict()["sampling"]) for root in chosen}),
              "interval": f"95%: percentile bootstrap over the prompts (groups resampled whole, {BOOTSTRAP} "
                          f"resamples, seed {args.seed}); t_95 over the roots as independent",
              "complete": not stopped, "rows": str(rows_path(args.out)), "by_tree": summarize(rows, args.seed)}
    atomic_write_json(args.out, result)
    print(args.out)
    if stopped:
        print(f"real_context_gaps: --time-budget {args.time_budget:g} s reached after {len(rows)} rows; run the same "
              "command again to continue", file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
