"""Group enumerated drafts by topology: rows whose draws merge into the same tree structure become one
``TreeBatch`` (verispec.simulator.trees), which every verifier's batched law takes at once.

A slot's *representative* is the first slot at its depth with the same parent node and token: i.i.d. draws
under one node that agree share a node (``TreeBuilder``). The *topology* of a row is its representative
vector: which slots are nodes, and each node's ordered child list as node ids, repeats included.
"""

from __future__ import annotations

import math

import numpy as np

from verispec.guard import budget
from verispec.simulator.prefix_tables import ABSENT, PrefixTables
from verispec.simulator.slot_enumeration import SlotDraws
from verispec.simulator.trees import TreeBatch


def representatives(draws: SlotDraws) -> np.ndarray:
    """rep[row, slot]: the first slot at the same depth with the same parent node and token (itself if
    none), -1 for absent slots; equal draws under one node share that node (``TreeBuilder``)."""
    plan, tokens = draws.plan, draws.tokens
    rep = np.where(tokens >= 0, np.arange(plan.num_slots)[None, :], ABSENT)
    rep[:, 0] = 0
    by_depth: dict[int, list[int]] = {}
    for slot in range(1, plan.num_slots):
        by_depth.setdefault(plan.depth[slot], []).append(slot)
    for slots in by_depth.values():
        for later_index, later in enumerate(slots):
            unmerged = rep[:, later] == later
            for earlier in slots[:later_index]:
                if not unmerged.any():
                    break
                same = (unmerged & (tokens[:, earlier] == tokens[:, later]) & (tokens[:, later] >= 0)
                        & (rep[:, plan.parent[earlier]] == rep[:, plan.parent[later]]))
                rep[same, later] = earlier
                unmerged &= ~same
    return rep


def _unique_rows(rep: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """np.unique(rep, axis=0, return_inverse=True), through one integer per row when it fits in int64
    (a 1-d unique is several times faster than a row-wise one)."""
    radix = rep.shape[1] + 1
    if rep.shape[1] * math.log2(radix) < 62:
        code = (rep + 1) @ (radix ** np.arange(rep.shape[1], dtype=np.int64))
        _, first, inverse = np.unique(code, return_index=True, return_inverse=True)
        return rep[first], inverse.ravel()
    keys, inverse = np.unique(rep, axis=0, return_inverse=True)
    return keys, inverse.ravel()




def group_by_topology(draws: SlotDraws, tables: PrefixTables) -> list[tuple[TreeBatch, np.ndarray]]:
    """Split enumerated rows into (batch of one topology, weight [N]) pairs."""
    plan = draws.plan
    rep = representatives(draws)
    keys, inverse = _unique_rows(rep)
    order = np.argsort(inverse, kind="stable")
    bounds = np.searchsorted(inverse[order], np.arange(len(keys) + 1))
    groups = []
    for index, key in enumerate(keys):
        budget.check("grouping draft trees")
        rows = order[bounds[index]:bounds[index + 1]]
        slots = [s for s in range(plan.num_slots) if key[s] == s]
        node_of = {slot: node for node, slot in enumerate(slots)}
        parent = tuple(-1 if s == 0 else node_of[key[plan.parent[s]]] for s in slots)
        child_lists = [[] for _ in slots]
        for slot in range(1, plan.num_slots):
            if key[slot] >= 0:
                child_lists[node_of[key[plan.parent[slot]]]].append(node_of[key[slot]])
        contexts = draws.contexts[np.ix_(rows, slots)]
        batch = TreeBatch(vocab_size=tables.vocab_size, parent=parent, depth=tuple(plan.depth[s] for s in slots),
                          child_lists=tuple(tuple(c) for c in child_lists),
                          tokens=draws.tokens[np.ix_(rows, slots)], p=tables.target[contexts],
                          q=tables.draft[contexts], contexts=contexts)
        groups.append((batch, draws.weight[rows]))
    return groups
