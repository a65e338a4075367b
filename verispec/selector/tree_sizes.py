"""The sizes of the trees real decoding forwards for each action of a grid, sampled at a pair's roots.

A delayed tree (K, L1, L2) has at most 1 + L1 + K L2 nodes, and its draft forwards feed at most
``Drafter.draft_widths`` tokens each. Decoding builds each drawn tree with ``TreeBuilder``, so drafts that coincide
are one node (at T = 0.7 top-k 20 a K-path tree often draws the same token several times): the target forwards the
distinct nodes, and each draft forward feeds the distinct nodes of one depth that have children (the leaves are never
fed, ``verispec.models.block_tree``). On a CPU whose t_p(n) jumps between n = 4 and 5, pricing a 5-node tree that
decodes as 3 nodes at t_p(5) made wide trees look x2 dearer than they ran (docs/results/bench/bench-latency-model.json).

``sample_tree_sizes`` draws the labels' combs at the roots (``verispec.selector.combs``: one comb serves every action;
each action's tree in it has exactly the action's law) with the draft model alone, and counts each action's tree's
nodes and per-depth widths. ``LatencyModel.tree_sizes`` carries the counts; ``LatencyModel.drafter_time`` then prices
an action at its expected block time over them.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Sequence

import numpy as np

from verispec.selector.combs import Combs, action_shape, sample_combs_together
from verispec.simulator.trees import TreeShape, shape_paths

#: A tree's sizes: (nodes, root included; tokens each draft forward feeds, one forward per depth).
Sizes = tuple[int, tuple[int, ...]]


def shape_sizes(shape: TreeShape, depth: int) -> Sizes:
    """(distinct nodes, widths) of one drawn tree whose drafter drafts ``depth`` levels: forward j feeds the
    distinct nodes at depth j that have a child (j = 0: the root)."""
    paths = shape_paths(shape)
    widths = [0] * depth
    for node, children in enumerate(shape):
        if children:
            widths[len(paths[node])] += 1
    return len(paths), tuple(widths)


def comb_tree_sizes(combs: Sequence[Combs], grid) -> dict[str, Counter]:
    """Per distinct tree of ``grid``'s actions (its spec): a Counter of its sizes over every comb of ``combs``."""
    sizes: dict[str, Counter] = {}
    for action in grid.actions:
        drafter = action.drafter()
        if drafter.spec in sizes:
            continue  # one tree, several verifiers: the same sizes
        counter = sizes[drafter.spec] = Counter()
        for comb in combs:
            for sample in range(comb.samples):
                shape = action_shape(comb, sample, action.k, action.l1, action.l2)
                counter[shape_sizes(shape, drafter.depth)] += 1
    return sizes


def _root_seed(seed: int, key: str) -> int:
    """A root's own generator seed: the same sizes for a root whichever other roots are sampled with it."""
    return int.from_bytes(hashlib.sha256(f"tree-sizes|{seed}|{key}".encode()).digest()[:8], "little")


def sample_tree_sizes(roots, grid, *, samples: int, seed: int, pair, batch: int = 8, progress=None) -> dict[str,
                                                                                                            Counter]:
    """``comb_tree_sizes`` of ``samples`` combs at each of ``roots`` (a pair's, ``verispec.selector.roots.Root``),
    drawn with the draft model in passes of ``batch`` roots; the target only prefills the contexts."""
    from verispec.models.problem import SharedContext
    from verispec.selector.labelling import root_problems

    combs: list[Combs] = []
    shared = SharedContext(pair)  # a root's context prefix the previous pass fed is not fed again
    for start in range(0, len(roots), batch):
        group = list(roots[start:start + batch])
        problems, together = root_problems(group, grid.max_depth, pair, shared)
        rngs = [np.random.default_rng(_root_seed(seed, root.key())) for root in group]
        combs += sample_combs_together([problem for problem, _ in problems], grid, samples, rngs, together)
        if progress is not None:
            progress.update(len(group))
    return comb_tree_sizes(combs, grid)


def as_tree_sizes(sizes: dict[str, Counter]) -> dict[str, list]:
    """``LatencyModel``'s ``tree_sizes`` entry: per tree, [count, nodes, widths] rows, most frequent first."""
    return {spec: [[count, nodes, list(widths)] for (nodes, widths), count in
                   sorted(counter.items(), key=lambda item: (-item[1], item[0]))]
            for spec, counter in sizes.items()}


__all__ = ["as_tree_sizes", "comb_tree_sizes", "sample_tree_sizes", "shape_sizes"]
