"""Enumerate every draft of a structured drafter as arrays of draws, from its slot plan.

One enumerated draft is one row of ``tokens[row, slot]`` (-1 at the root and at *absent* slots: a
without-replacement node whose draft support ran out gets fewer children, as in ``BranchingDrafter``), with
``contexts[row, slot]`` its flat prefix index and ``weight[row]`` its probability. Exchangeability:
for verifiers whose law does not depend on the order of the plan's exchangeable paths,
the paths are enumerated as multisets with multinomial weights, C(V^L + K - 1, K) rows instead of V^(K L).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np

from verispec.guard import budget
from verispec.simulator.prefix_tables import ABSENT, PrefixTables
from verispec.simulator.slots import SlotPlan


@dataclass(frozen=True, eq=False)
class SlotDraws:
    """Every enumerated draft as rows: tokens [N, S], contexts (flat prefix index, -1 absent) [N, S],
    weight [N] (probability of the row, times its multiplicity when rows are multisets)."""

    plan: SlotPlan
    tokens: np.ndarray
    contexts: np.ndarray
    weight: np.ndarray


def _ordered_tuples(size: int, count: int) -> list[tuple[int, ...]]:
    """Ordered tuples of distinct tokens of length ``count``, and every shorter one (padded with ABSENT)
    for nodes whose draft support runs out first."""
    tuples = []
    for length in range(count + 1):
        for prefix in itertools.permutations(range(size), length):
            tuples.append(prefix + (ABSENT,) * (count - length))
    return tuples


def _without_replacement_probabilities(q: np.ndarray, tuples: list[tuple[int, ...]]) -> np.ndarray:
    """P(the draws are exactly this tuple) for every row's q [N, V] and tuple: sequential draws with
    q_j(x) = q(x) 1[x not drawn] / (mass not drawn); a padded tuple needs the remaining mass to be zero
    (``_draw_without_replacement`` stops there). Shape [N, len(tuples)]."""
    rows = len(q)
    out = np.empty((rows, len(tuples)))
    for column, draw in enumerate(tuples):
        remaining = q.copy()
        probability = np.ones(rows)
        for token in draw:
            mass = remaining.sum(axis=1)
            if token == ABSENT:
                probability = probability * (mass == 0)
                break
            with np.errstate(invalid="ignore", divide="ignore"):
                probability = probability * np.where(mass > 0, remaining[:, token] / mass, 0.0)
            remaining[:, token] = 0.0
        out[:, column] = probability
    return out


def _expand(tokens, contexts, weight, slots, choices, probabilities):
    """Every row times every choice (a tuple of tokens for ``slots``), keeping positive-probability rows."""
    rows, count = len(weight), len(choices)
    choice_array = np.asarray(choices, dtype=np.int64).reshape(count, len(slots))
    new_weight = (weight[:, None] * probabilities).ravel()
    keep = new_weight > 0
    tokens = np.repeat(tokens, count, axis=0)[keep]
    contexts = np.repeat(contexts, count, axis=0)[keep]
    tokens[:, list(slots)] = np.tile(choice_array, (rows, 1))[keep]
    return tokens, contexts, new_weight[keep]


def enumerate_draws(plan: SlotPlan, tables: PrefixTables, *, multiset_paths: bool = False) -> SlotDraws:
    """Every draft of a slot plan with its probability, as arrays (the oracle is ``Drafter.outcomes``).
    ``multiset_paths``: enumerate the plan's exchangeable paths as sorted multisets with multinomial
    weights (for order-free verifiers)."""
    size = tables.vocab_size
    tokens = np.full((1, plan.num_slots), ABSENT, dtype=np.int64)
    contexts = np.full((1, plan.num_slots), ABSENT, dtype=np.int64)
    contexts[0, 0] = 0
    weight = np.ones(1)
    path_slots = {slot for path in plan.exchangeable_paths for slot in path} if multiset_paths else set()
    for parent, slots, without in plan.groups:
        budget.check("enumerating draft trees")
        if slots[0] in path_slots:
            continue
        q = tables.draft[np.maximum(contexts[:, parent], 0)]
        if without:
            choices = _ordered_tuples(size, len(slots))
            probabilities = _without_replacement_probabilities(np.nan_to_num(q), choices)
            absent_parent = contexts[:, parent] == ABSENT
            if absent_parent.any():  # an absent node draws nothing: only the all-absent choice, w.p. 1
                probabilities[absent_parent] = 0.0
                probabilities[absent_parent, choices.index((ABSENT,) * len(slots))] = 1.0
        else:
            choices = [(token,) for token in range(size)]
            probabilities = q
        tokens, contexts, weight = _expand(tokens, contexts, weight, slots, choices, probabilities)
        depth = plan.depth[parent]
        for slot in slots:
            contexts[:, slot] = tables.child_index(contexts[:, parent], depth, tokens[:, slot])
    if path_slots:
        tokens, contexts, weight = _multiset_paths(plan, tables, tokens, contexts, weight)
    return SlotDraws(plan, tokens, contexts, weight)


def _multiset_paths(plan: SlotPlan, tables: PrefixTables, tokens, contexts, weight):
    """Append the exchangeable paths as multisets: rows = earlier rows x sorted K-multisets of path token
    sequences, weight *= multinomial(K; counts) * prod P(path | start)."""
    paths = plan.exchangeable_paths
    size, branches, length = tables.vocab_size, len(paths), len(paths[0])
    start = plan.parent[paths[0][0]]
    start_depth = plan.depth[start]
    sequences = np.array(list(itertools.product(range(size), repeat=length)), dtype=np.int64)  # [M, L2]
    combos = np.array(list(itertools.combinations_with_replacement(range(len(sequences)), branches)),
                      dtype=np.int64)  # [C, K]
    coefficient = np.array([math.factorial(branches) / math.prod(math.factorial(c) for c in
                                                                  np.unique(row, return_counts=True)[1])
                            for row in combos])
    # P(sequence | start) for every earlier row: [N, M]
    end = contexts[:, start]
    probability = np.ones((len(end), len(sequences)))
    context = np.repeat(end[:, None], len(sequences), axis=1)
    for step in range(length):
        token = np.broadcast_to(sequences[:, step], context.shape)
        probability = probability * np.take_along_axis(tables.draft[context], token[..., None], axis=2)[..., 0]
        context = tables.child_index(context, start_depth + step, token)
    rows, count = len(weight), len(combos)
    new_weight = (weight[:, None] * coefficient[None, :] * np.prod(probability[:, combos], axis=2)).ravel()
    keep = new_weight > 0
    row_of = np.repeat(np.arange(rows), count)[keep]
    combo_of = np.tile(np.arange(count), rows)[keep]
    tokens, contexts = tokens[row_of].copy(), contexts[row_of].copy()
    chosen = sequences[combos[combo_of]]  # [N', K, L2]
    for step in range(length):
        for index, path in enumerate(paths):
            slot = path[step]
            tokens[:, slot] = chosen[:, index, step]
            contexts[:, slot] = tables.child_index(contexts[:, plan.parent[slot]], start_depth + step, tokens[:, slot])
    return tokens, contexts, new_weight[keep]
