"""Global Resolution per tree node: acceptance minus alpha* and milliseconds a node, against the vocabulary size V,
the number of drafts K, with and without top-k, for this tree's code and, in the same run, an older checkout's.

    OMP_NUM_THREADS=1 python benchmarks/bench_globalres.py --before /work/before
    python benchmarks/bench_globalres.py --quick          # V up to 16,384, two repeats, no 'before'
    OMP_NUM_THREADS=1 python benchmarks/bench_globalres.py --before /work/before --vocabularies 151936 \
        --result docs/results/bench/bench_globalres.json      # one vocabulary; a result file with the run's record

Each side runs in its own process (with PYTHONPATH=<before>, or this checkout's root, so that ``import verispec``
finds that checkout and not an editable install of another), one thread. Laws: "dense" are softmaxes of Gaussian
logits (scale 2.5; the draft's logits are the target's plus Gaussian noise of scale 1), "zipf" a Zipf-like target
(p ~ rank^-1.1, ranks shuffled) with a tempered, noisy draft (logit 0.8 log p + N(0, 0.5^2)); without top-k the
whole vocabulary is drafted, with it q keeps its top 20 (Qwen's recommended top-k). Each node is new (a fresh
solver), so a call pays for the step-1 rule's programs and the node's output law for one row of K drafted children
(float64 numpy), as real decoding calls it: inside ``node_cache.fresh_nodes`` where the checkout has it (decoding
asks about each node once, so no memo key is computed), else, and with ``--cached`` on both sides, as the exact
engine calls it (the node's key, then a miss). Reported: alpha* (a sorted-prefix scan over the
whole vocabulary, written here), acceptance sum min(p, p_I) minus alpha*, and the median of ``--repeats`` calls in
wall-clock ms and in CPU ms (process time, which a loaded machine inflates less), with the load average around
each side.

``--result FILE`` writes the rows with the run's record (``measure.write_result``): ``now`` this checkout's wall ms a
node, ``before`` the older checkout's (None without ``--before``, or where it refused the node), ``ratio`` before /
now, with CPU ms and acceptance - alpha* of each side, and the older checkout's commit as ``before_commit``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np
from measure import checkout_commit, comparison, publish_table, start_record, write_result  # benchmarks/measure.py

VOCABULARIES = (1024, 16_384, 151_936)
DRAFTS = (2, 4, 8)
TOP_K = 20


def laws(vocab: int, seed: int, top_k: int | None, family: str):
    rng = np.random.default_rng(seed)
    if family == "dense":
        logits = rng.standard_normal(vocab) * 2.5
        draft = logits + rng.standard_normal(vocab)
    else:
        logits = -1.1 * np.log(rng.permutation(vocab) + 1.0)
        draft = 0.8 * logits + 0.5 * rng.standard_normal(vocab)
    p = np.exp(logits - logits.max())
    q = np.exp(draft - draft.max())
    if top_k is not None:
        q[np.argsort(-q)[top_k:]] = 0.0
    return p / p.sum(), q / q.sum()


def alpha_star(p, q, num_drafts: int) -> float:
    """1 + min over prefixes of the drafted tokens sorted by p/q (p = 0 first) of p(T) - q(T)^K."""
    drafted = np.flatnonzero(q > 0)
    ratio = np.where(p[drafted] > 0, p[drafted] / q[drafted], -1.0)
    order = drafted[np.argsort(ratio, kind="stable")]
    psi = np.cumsum(p[order]) - np.cumsum(q[order]) ** num_drafts
    return 1 + min(0.0, float(psi.min(initial=0.0)))


def cases(quick: bool, vocabularies=None):
    for family in ("dense", "zipf"):
        for vocab in vocabularies or (VOCABULARIES[:2] if quick else VOCABULARIES):
            for top_k in (None, TOP_K):
                for num_drafts in DRAFTS:
                    yield family, vocab, top_k, num_drafts


def node_route(cached: bool):
    """(the context a node is solved in, its name): real decoding's ``fresh_nodes`` (no memo key) where the
    checkout has it and ``cached`` is not asked for, else the cached route every checkout has."""
    try:
        from verispec.verifiers.node_cache import fresh_nodes
    except ImportError:  # an older checkout: the cached route only
        return contextlib.nullcontext, "cached"
    return (contextlib.nullcontext, "cached") if cached else (fresh_nodes, "fresh nodes")


def worker(quick: bool, repeats: int, vocabularies=None, cached: bool = False) -> list[dict]:
    """Time the verispec that ``import verispec`` finds (this process's path decides which checkout)."""
    import verispec
    from verispec.verifiers.globalres import GlobalResolutionSolver

    route, route_name = node_route(cached)
    rows = []
    for family, vocab, top_k, num_drafts in cases(quick, vocabularies):
        p, q = laws(vocab, 0, top_k, family)
        children = np.random.default_rng(0).choice(vocab, num_drafts, p=q)[None, :]
        wall, cpu, error = [], [], None
        for repeat in range(repeats + 1):  # the first call warms caches of shapes, not of nodes
            solver = GlobalResolutionSolver()
            start, start_cpu = time.perf_counter(), time.process_time()
            try:
                with route():
                    solver.output_laws(p[None, :], q[None, :], children)
            except Exception as exc:  # the older code may refuse a node: reported, not fatal
                error = f"{type(exc).__name__}: {exc}"[:80]
                break
            if repeat:
                wall.append(time.perf_counter() - start)
                cpu.append(time.process_time() - start_cpu)
        row = {"law": family, "V": vocab, "top_k": top_k, "K": num_drafts, "error": error, "route": route_name}
        if error is None:
            accepted = float(np.minimum(p, solver.resolution(p, q, num_drafts).intermediate).sum())
            row.update(acceptance=accepted, wall_ms=statistics.median(wall) * 1e3,
                       cpu_ms=statistics.median(cpu) * 1e3)
        rows.append(row)
    return [{"source": os.path.dirname(os.path.dirname(verispec.__file__)), **row} for row in rows]


def run_side(path: str | None, quick: bool, repeats: int, vocabularies=None,
             cached: bool = False) -> tuple[list[dict], float, float]:
    """The worker in a child process, one thread, the older checkout (``path``) or this one first on the path."""
    environment = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    # this side imports its own checkout first (an editable install elsewhere would otherwise answer)
    environment["PYTHONPATH"] = path or os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    command = [sys.executable, os.path.abspath(__file__), "--worker", "--repeats", str(repeats)]
    if quick:
        command.append("--quick")
    if cached:
        command.append("--cached")
    if vocabularies:
        command += ["--vocabularies", ",".join(str(vocab) for vocab in vocabularies)]
    load_before = os.getloadavg()[0]
    output = subprocess.run(command, env=environment, cwd="/tmp", check=True, capture_output=True, text=True)
    return json.loads(output.stdout), load_before, os.getloadavg()[0]


def fmt_gap(row: dict | None) -> str:
    if row is None:
        return "-"
    if row.get("error"):
        return "refused"
    return f"{row['acceptance'] - row['alpha']:+.1e}"


def fmt_ms(row: dict | None) -> str:
    if row is None or row.get("error"):
        return "-"
    return f"{row['wall_ms']:.1f} / {row['cpu_ms']:.1f}"


def main(argv=None) -> int:
    from measure import RESULT, ROWS, TABLE, add_overwrite_option, claim_outputs, write_rows  # benchmarks/measure.py
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="V up to 16,384, two repeats")
    parser.add_argument("--before", help="an older checkout to time in the same run (its root folder)")
    parser.add_argument("--output", default="results/bench_globalres.md", help="the markdown table (also printed)")
    parser.add_argument("--json", help="also write the rows here")
    parser.add_argument("--vocabularies", help="comma-separated V to run instead of "
                        f"{','.join(map(str, VOCABULARIES))} (or --quick's first two)")
    parser.add_argument("--result", help="also write the rows and the run's record here (JSON)")
    parser.add_argument("--cached", action="store_true", help="time the exact engine's cached route (the node's "
                        "key, then a miss) instead of real decoding's fresh nodes, on both sides")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    add_overwrite_option(parser)
    args = parser.parse_args(argv)
    # before any work: a file there that is not this benchmark's own is refused (unless --overwrite), each
    # output locked for the run (benchmarks/measure.py: the writers' rule)
    claim_outputs(__file__, [("--output", args.output, TABLE), ("--json", args.json, ROWS),
                             ("--result", args.result, RESULT)], overwrite=args.overwrite)
    repeats = 2 if args.quick else args.repeats
    vocabularies = [int(vocab) for vocab in args.vocabularies.split(",")] if args.vocabularies else None
    if args.worker:
        json.dump(worker(args.quick, repeats, vocabularies, args.cached), sys.stdout)
        return 0
    started = start_record(__file__, argv, threads=1, result=args.result) if args.result else None
    sides, notes, loads = {}, [], {}
    for label, path in (("before", args.before), ("after", None)):
        if label == "before" and not path:
            continue
        rows, load_before, load_after = run_side(path, args.quick, repeats, vocabularies, args.cached)
        loads[label] = [load_before, load_after]
        sides[label] = {(r["law"], r["V"], r["top_k"], r["K"]): r for r in rows}
        notes.append(f"{label}: {rows[0]['source']} (load average {load_before:.2f} -> {load_after:.2f})")
        print(notes[-1], flush=True)
    table, lines = [], []
    for key in cases(args.quick, vocabularies):
        family, vocab, top_k, num_drafts = key
        alpha = alpha_star(*laws(vocab, 0, top_k, family), num_drafts)
        before, after = (sides.get(label, {}).get(key) for label in ("before", "after"))
        for row in (before, after):
            if row is not None:
                row["alpha"] = alpha
        lines.append([family, f"{vocab:,}", top_k or "none", num_drafts, f"{alpha:.4f}", fmt_gap(before),
                      fmt_gap(after), fmt_ms(before), fmt_ms(after)])
        table.append({"key": list(key), "alpha": alpha, "before": before, "after": after})
    caption = (f"Global Resolution per node, one thread, median of {repeats}; " + "; ".join(notes)
               + f"; {time.strftime('%Y-%m-%d %H:%M')}")
    publish_table(args.output, caption, ["law", "V", "top-k", "K", "alpha*", "before: acceptance - alpha*",
                                         "after", "before: ms a node (wall / CPU)", "after"], lines)
    if args.json:
        write_rows(args.json, {"rows": table})
    if started:
        write_result(args.result, started, result_values(table, args, repeats, loads))
    return 0


def result_values(table: list[dict], args, repeats: int, loads: dict) -> dict:
    """The result file's values: one row per node case, this checkout (now) against ``--before``."""
    rows = []
    for entry in table:
        family, vocab, top_k, num_drafts = entry["key"]
        before, after = entry["before"], entry["after"]
        measured = {side: row for side, row in (("before", before), ("now", after))
                    if row is not None and not row.get("error")}
        rows.append(comparison(
            measured["now"]["wall_ms"], measured["before"]["wall_ms"] if "before" in measured else None,
            law=family, V=vocab, top_k=top_k, K=num_drafts, alpha=entry["alpha"],
            **{f"{side}_cpu_ms": row["cpu_ms"] for side, row in measured.items()},
            **{f"{side}_gap": row["acceptance"] - row["alpha"] for side, row in measured.items()},
            **{f"{side}_route": row.get("route", "cached") for side, row in measured.items()},
            before_error=before.get("error") if before else None))
    return {"benchmark": "bench_globalres", "unit": f"ms wall a node (median of {repeats}, one thread, a fresh solver)",
            "now": "this checkout's GlobalResolutionSolver.output_laws, in real decoding's route (node_cache."
                   "fresh_nodes: no memo key) unless --cached",
            "before": "the --before checkout's, same run, each side in its own process",
            "before_commit": checkout_commit(args.before) if args.before else None,
            "gap": "acceptance sum min(p, p_I) minus alpha* (the optimum)", "loads": loads, "rows": rows}


if __name__ == "__main__":
    raise SystemExit(main())
