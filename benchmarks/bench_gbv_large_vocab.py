"""GBV's batched law at a real vocabulary (V = 151,936): ms per node-row, before and after the O(V) ranking.

Labelling one root of the delay selector at temperature 1 spends most of its time in
``GreedyBlockVerifier.emission_laws`` over full-vocabulary laws. This benchmark draws random trees of K i.i.d.
paths of length L (``iid:K,L``) over V tokens, target and draft laws per context with a heavy head (a Zipf-like
prior times log-normal noise, computed in float32 and widened to float64 as a model's softmax is; the draft a
noisy copy of the target), every row from one root as a root's labels are, and times

* ``before``: the implementation as it was (the functions below, copied from the package before the change:
  four full argsorts a node-row, the ranking computed twice at each selected node, and the output built by
  adding one [N, n, V] array per depth), and
* ``after``: ``GreedyBlockVerifier().emission_laws`` as it is now,

on the same batches, asserting the two laws equal (bit for bit, up to the sign of zero). ``--sparse`` gives the
target a truncated support (many p = 0: one tie class of ~V tokens at ratio 0).

    nice -n 10 python benchmarks/bench_gbv_large_vocab.py                  # V = 151,936
    nice -n 10 python benchmarks/bench_gbv_large_vocab.py --vocab 4096 --rows 1,4
    nice -n 10 python benchmarks/bench_gbv_large_vocab.py --rows 1 --result docs/results/bench/bench_gbv.json

``--result FILE`` also writes the entries with the run's record (``measure.write_result``): ``now`` the ms a
node-row of ``after``, ``before`` that of ``before`` (None with ``--no-before``), ``ratio`` before / now.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

from verispec import backend
from verispec.simulator.ranking import tie_tolerance
from verispec.simulator.trees import TreeBatch
from verispec.verifiers.block import block_law
from verispec.verifiers.gbv import GreedyBlockVerifier

#: benchmarks/measure.py imports as ``measure`` when this script is loaded as a module too (its tests)
if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))

QWEN_VOCAB = 151_936


# --- the implementation before the change (reference only; not in the package) -----------------------------------


def _scatter_rows(values, index, size: int):
    """The old law's way of placing ``values`` [N, V] at node ``index`` [N] of a zero array [N, size, V]."""
    marks = backend.one_hot(index, size)  # [N, size]
    return backend.where(marks[..., None], values[:, None, :], backend.zero(values))

def old_tie_classes(values):
    xp = backend.namespace(values)
    order = backend.argsort(values)
    ordered = xp.take_along_axis(values, order, axis=-1)
    low, high = ordered[..., :-1], ordered[..., 1:]
    scale = xp.maximum(xp.abs(low), xp.abs(high))
    tied = (high == low) | (high - low <= tie_tolerance(values) * scale)
    steps = xp.astype(~tied, xp.int64)
    zero = xp.zeros(steps.shape[:-1] + (1,), dtype=xp.int64, device=backend.device(order))
    class_sorted = backend.cumulative_sum(xp.concat([zero, steps], axis=-1))
    inverse = backend.argsort(order)
    return xp.take_along_axis(class_sorted, inverse, axis=-1)


def old_order_with_ties(values, *, descending: bool, larger_id_first: bool = False, tier=None):
    xp = backend.namespace(values)
    size = values.shape[-1]
    classes = old_tie_classes(values)
    if descending:
        classes = xp.max(classes, axis=-1, keepdims=True) - classes
    ids = backend.arange(size, classes)
    key = classes * size + (size - 1 - ids if larger_id_first else ids)
    if tier is not None:
        key = tier * size * size + key
    return backend.argsort(key)


def old_rank_order(p, q):
    xp = backend.namespace(q)
    ratio = backend.divide(p, q, where_zero=backend.zero(q))
    tier = xp.astype(~(q > 0), xp.int64)
    return old_order_with_ties(ratio, descending=False, tier=tier)


def old_mass_ranked_below(p, q):
    xp = backend.namespace(q)
    order = old_rank_order(p, q)
    ordered = xp.take_along_axis(q, order, axis=-1)
    before = backend.cumulative_sum(ordered) - ordered
    return xp.take_along_axis(before, backend.argsort(order), axis=-1)


def old_selected_path(batch: TreeBatch) -> list:
    rows = backend.arange(batch.num_rows, batch.tokens)
    selected = [backend.index_array([0] * batch.num_rows, batch.tokens)]
    for level in range(1, max(batch.depth) + 1):
        candidates = [node for node in range(batch.num_nodes) if batch.depth[node] == level]
        here = selected[-1]
        xp = backend.namespace(here)
        is_child = xp.stack([here == batch.parent[c] for c in candidates], axis=1)
        found = xp.any(is_child, axis=1)
        if not bool(xp.any(found)):
            break
        ranks = backend.argsort(old_rank_order(batch.p[rows, here], batch.q[rows, here]))
        scores = xp.stack([backend.take(ranks, batch.tokens[:, c]) for c in candidates], axis=1)
        choice = xp.argmax(xp.where(is_child, scores, -1), axis=1)
        selected.append(backend.index_array(candidates, batch.tokens)[choice])
    return selected


def old_power_difference_quotient(high, low, power: int):
    return sum(high ** j * low ** (power - 1 - j) for j in range(power))


def old_skewed_drafts(targets: list, drafts: list, tokens, paths: int) -> list:
    prefix = [backend.ones((tokens.shape[0],), drafts[0][:, 0])] if drafts else []
    below = [prefix[0] * 0] if drafts else []
    low = []
    for level, (p, q) in enumerate(zip(targets, drafts)):
        low.append(below[level][:, None] + prefix[level][:, None] * old_mass_ranked_below(p, q))
        token = tokens[:, level]
        below.append(backend.take(low[level], token))
        prefix.append(prefix[level] * backend.take(q, token))
    skewed = []
    for level, q in enumerate(drafts):
        high = low[level] + prefix[level][:, None] * q
        skewed.append(q * old_power_difference_quotient(high, low[level], paths)
                      / old_power_difference_quotient(below[level] + prefix[level], below[level], paths)[:, None])
    return skewed


def old_emission_laws(batch: TreeBatch):
    selected = old_selected_path(batch)
    rows = backend.arange(batch.num_rows, batch.tokens)
    targets = [batch.p[rows, nodes] for nodes in selected]
    drafts = [batch.q[rows, nodes] for nodes in selected[:-1]]
    tokens = batch.tokens[:, []] if len(selected) == 1 else backend.stack(
        [batch.tokens[rows, nodes] for nodes in selected[1:]], axis=1)
    path_law = block_law(targets, old_skewed_drafts(targets[:-1], drafts, tokens, len(batch.child_lists[0])), tokens)
    law = _scatter_rows(path_law[0], selected[0], batch.num_nodes)
    for nodes, values in zip(selected[1:], path_law[1:]):
        law = law + _scatter_rows(values, nodes, batch.num_nodes)
    return law


# --- random trees over a large vocabulary -------------------------------------------------------------------------

class Contexts:
    """Target and draft laws [V] per token path, drawn on first use (seeded by the generator and the order of
    first use): p = normalised Zipf prior (random token order) times log-normal noise, q = p times log-normal
    noise, both rounded to float32 as a model's softmax is; ``sparse`` keeps p's 2,000 largest tokens only."""

    def __init__(self, size: int, rng: np.random.Generator, sparse: bool):
        self.size, self.rng, self.sparse = size, rng, sparse
        self.prior = 1.0 / np.arange(1, size + 1) ** 1.1  # [V] heavy head
        self.laws: dict[tuple, tuple[np.ndarray, np.ndarray]] = {}
        self.ids: dict[tuple, int] = {}

    def law(self, path: tuple) -> tuple[np.ndarray, np.ndarray]:
        if path not in self.laws:
            weights = self.rng.permutation(self.prior) * np.exp(self.rng.normal(0.0, 1.0, self.size))
            if self.sparse:
                weights[np.argsort(weights)[:-2000]] = 0.0
            draft = weights * np.exp(self.rng.normal(0.0, 0.5, self.size)) + 1e-9
            p = (weights / weights.sum()).astype(np.float32).astype(np.float64)
            q = (draft / draft.sum()).astype(np.float32).astype(np.float64)
            self.laws[path] = (p, q)
            self.ids[path] = len(self.ids)
        return self.laws[path]

    def sampling(self, path: tuple) -> np.ndarray:
        """The draft law at ``path`` renormalised in float64, to draw from."""
        draft = self.law(path)[1]
        return draft / draft.sum()


def iid_batch(contexts: Contexts, rows: int, paths: int, length: int) -> TreeBatch:
    """``rows`` trees of ``paths`` i.i.d. paths of ``length`` tokens from one root (the root's children drawn
    distinct, so that every row has the topology: root, then ``paths`` chains of ``length`` nodes)."""
    size, rng = contexts.size, contexts.rng
    parent = [-1] + [0 if d == 0 else 1 + k * length + d - 1 for k in range(paths) for d in range(length)]
    depth = [0] + [d + 1 for _ in range(paths) for d in range(length)]
    child_lists = [tuple(1 + k * length for k in range(paths))] + [
        (1 + k * length + d + 1,) if d + 1 < length else () for k in range(paths) for d in range(length)]
    nodes = len(parent)
    p = np.empty((rows, nodes, size))
    q = np.full((rows, nodes, size), np.nan)
    tokens = np.full((rows, nodes), -1, dtype=np.int64)
    ids = np.empty((rows, nodes), dtype=np.int64)
    for row in range(rows):
        node_paths = [()]
        firsts = rng.choice(size, size=paths, replace=False, p=contexts.sampling(()))
        for k in range(paths):
            path = ()
            for d in range(length):
                token = int(firsts[k]) if d == 0 else int(rng.choice(size, p=contexts.sampling(path)))
                path = path + (token,)
                node_paths.append(path)
        for node, path in enumerate(node_paths):
            target, draft = contexts.law(path)
            p[row, node] = target
            if child_lists[node]:
                q[row, node] = draft
            tokens[row, node] = path[-1] if path else -1
            ids[row, node] = contexts.ids[path]
    return TreeBatch(vocab_size=size, parent=tuple(parent), depth=tuple(depth), child_lists=tuple(child_lists),
                     tokens=tokens, p=p, q=q, contexts=ids)


def timed(function, batch) -> tuple[float, object]:
    """(seconds of one call, its result)."""
    start = time.perf_counter()
    result = function(batch)
    return time.perf_counter() - start, result


def fastest(functions: dict, batch, repeats: int) -> tuple[dict, dict]:
    """({name: fastest seconds of ``repeats`` calls}, {name: last result}), the calls interleaved (a busy
    machine slows both alike) after one untimed warm-up call of each."""
    results = {name: function(batch) for name, function in functions.items()}
    seconds = {name: float("inf") for name in functions}
    for _ in range(repeats):
        for name, function in functions.items():
            elapsed, results[name] = timed(function, batch)
            seconds[name] = min(seconds[name], elapsed)
    return seconds, results


def main(argv=None) -> None:
    from measure import RESULT, add_overwrite_option, claim_outputs  # benchmarks/measure.py
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocab", type=int, default=QWEN_VOCAB)
    parser.add_argument("--rows", default="1,4,16", help="comma-separated row counts N")
    parser.add_argument("--trees", default="1x1,2x1,4x1,1x4,2x4,4x4", help="KxL: K i.i.d. paths of L tokens")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--sparse", action="store_true", help="p on its 2,000 largest tokens only")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-before", action="store_true", help="time the current implementation only")
    parser.add_argument("--result", help="also write the entries and the run's record here (JSON)")
    add_overwrite_option(parser)
    args = parser.parse_args(argv)
    # before any work: a file there that is not this benchmark's own is refused (unless --overwrite), each
    # output locked for the run (benchmarks/measure.py: the writers' rule)
    claim_outputs(__file__, [("--result", args.result, RESULT)],
                  overwrite=args.overwrite)
    from measure import comparison, start_record, write_result  # benchmarks/measure.py

    started = start_record(__file__, argv, result=args.result) if args.result else None
    entries = []
    verifier = GreedyBlockVerifier()
    for tree in args.trees.split(","):
        paths, length = (int(part) for part in tree.split("x"))
        for rows in (int(r) for r in args.rows.split(",")):
            contexts = Contexts(args.vocab, np.random.default_rng(args.seed), args.sparse)
            batch = iid_batch(contexts, rows, paths, length)
            node_rows = rows * batch.num_nodes
            functions = {"after": verifier.emission_laws}
            if not args.no_before:
                functions["before"] = old_emission_laws
            seconds, laws = fastest(functions, batch, args.repeats)
            entry = {"tree": f"iid:{paths},{length}", "rows": rows, "node_rows": node_rows,
                     "distinct_contexts": len(contexts.ids),
                     "after_ms_per_node_row": round(1000 * seconds["after"] / node_rows, 3)}
            if not args.no_before:
                assert laws["after"].shape == laws["before"].shape
                assert np.array_equal(laws["after"], laws["before"]), "the new law differs from the old one"
                entry["before_ms_per_node_row"] = round(1000 * seconds["before"] / node_rows, 3)
                entry["speed_up"] = round(seconds["before"] / seconds["after"], 2)
            print(json.dumps(entry), flush=True)
            entries.append(comparison(entry["after_ms_per_node_row"], entry.get("before_ms_per_node_row"),
                                      V=args.vocab, **entry))
    if started:
        write_result(args.result, started, {
            "benchmark": "bench_gbv_large_vocab", "unit": f"ms a node-row (fastest of {args.repeats}, interleaved)",
            "now": "GreedyBlockVerifier().emission_laws (the O(V) ranking)",
            "before": "the law as it was before the O(V) ranking (copied into this script), same run, laws equal "
                      "bit for bit", "sparse": args.sparse, "seed": args.seed,
            "load_at_end": round(os.getloadavg()[0], 2), "rows": entries})


if __name__ == "__main__":
    main()
