"""Fast whole-tree enumeration: every draft tree of a structured drafter as numpy arrays, verified in batches.

Whole-tree enumeration (engine method 'closed-form') replays the drafter's procedure once per choice trace,
builds a ``DraftTree`` per outcome and calls ``verifier.emission_law`` per tree in Python. This module does
the same sum with arrays (engine method 'fast-enumeration'); 'closed-form' stays the oracle it is tested
against (tests/test_fast_enumeration.py).

Glossary:

* *slot*: one draw position of a structured drafter (chain, delayed / root i.i.d., branch with or without
  replacement), numbered breadth first; slot 0 is the root. An enumerated draft is one row of
  ``tokens[row, slot]`` (-1 at the root and at *absent* slots: a without-replacement node whose draft
  support ran out gets fewer children, as in ``BranchingDrafter``).
* *representative*: i.i.d. draws under the same node that agree share a node (``TreeBuilder``); a slot's
  representative is the first slot at its depth with the same parent node and token.
* *topology*: the merged tree structure of a row (which slots are nodes, each node's ordered child list as
  node ids, repeats included). Rows are grouped by topology into ``TreeGroup`` s, and a verifier computes
  the emission laws of a whole group at once (``emission_laws(group)``, [rows, nodes, V]).
* *prefix index*: every prefix of length 0..L gets one flat index (lengths in order, then lexicographic), so
  a node's context is one integer and p, q are rows of ``PrefixTables``.

Exchangeability (DESIGN.md, "Scale"): a verifier whose emission law, keyed by token paths, is the same for
every order of the K i.i.d. paths of a root i.i.d. or delayed tree declares ``order_free = True`` (tests
prove each declaration exactly); for it the K paths are enumerated as multisets with multinomial
weights, C(V^L + K - 1, K) rows instead of V^(K L).

Float64 only: exact (Fraction) problems use 'closed-form'.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from verispec.errors import ProblemTooLargeError, VerifierError
from verispec.simulator.drafters import BranchingDrafter, ChainDrafter, DelayedDrafter, Drafter
from verispec.simulator.problems import Problem
from verispec.simulator.trees import TreeBuilder, TreeShape

ABSENT = -1


# --------------------------------------------------------------------------------------------------
# Conditionals by flat prefix index


@dataclass(frozen=True, eq=False)
class PrefixTables:
    """p and q for every prefix of length 0..depth, indexed by the flat prefix index.

    target [num_prefixes, V]; draft [num_prefixes, V] (NaN for prefixes of length ``depth``, which are
    leaves and never draft). offsets[l] is the index of the first prefix of length l.
    """

    vocab_size: int
    depth: int
    offsets: np.ndarray
    target: np.ndarray
    draft: np.ndarray

    @classmethod
    def build(cls, problem: Problem, depth: int) -> PrefixTables:
        size = problem.vocab_size
        offsets = np.cumsum([0] + [size ** length for length in range(depth + 1)])
        target = np.empty((int(offsets[-1]), size))
        draft = np.full((int(offsets[-1]), size), np.nan)
        for length in range(depth + 1):
            for number, prefix in enumerate(problem.prefixes(length)):
                target[offsets[length] + number] = problem.target(prefix)
                if length < depth:
                    draft[offsets[length] + number] = problem.draft(prefix)
        for array in (offsets, target, draft):
            array.setflags(write=False)
        return cls(vocab_size=size, depth=depth, offsets=offsets, target=target, draft=draft)

    @property
    def num_prefixes(self) -> int:
        return int(self.offsets[-1])

    def child_index(self, index: np.ndarray, length: int, token: np.ndarray) -> np.ndarray:
        """Flat index of prefix + (token,) for prefixes of the given length (-1 where token is absent)."""
        child = self.offsets[length + 1] + (index - self.offsets[length]) * self.vocab_size + token
        return np.where(token >= 0, child, ABSENT)

    def length_of(self, index: int) -> int:
        return int(np.searchsorted(self.offsets, index, side="right")) - 1

    def prefix(self, index: int) -> tuple[int, ...]:
        """The token tuple of a flat prefix index."""
        length = self.length_of(index)
        number = index - int(self.offsets[length])
        digits = []
        for _ in range(length):
            number, digit = divmod(number, self.vocab_size)
            digits.append(digit)
        return tuple(reversed(digits))


# --------------------------------------------------------------------------------------------------
# Slot plans of the structured drafters


@dataclass(frozen=True)
class SlotPlan:
    """Slots of a structured drafter: ``parent[s]`` and ``depth[s]`` (slot 0 is the root), and the draw
    groups in drawing order: (parent slot, child slots, without_replacement). An i.i.d. group is one draw
    per child slot; a without-replacement group draws its child slots in order without replacement."""

    parent: tuple[int, ...]
    depth: tuple[int, ...]
    groups: tuple[tuple[int, tuple[int, ...], bool], ...]

    @property
    def num_slots(self) -> int:
        return len(self.parent)


def _plan_from_levels(levels: list[list[tuple[int, int, bool]]]) -> SlotPlan:
    """levels[d] = [(parent slot, number of children, without_replacement)] for the draws at depth d+1."""
    parent, depth, groups = [-1], [0], []
    for level in levels:
        for parent_slot, count, without in level:
            slots = tuple(range(len(parent), len(parent) + count))
            parent.extend([parent_slot] * count)
            depth.extend([depth[parent_slot] + 1] * count)
            groups.append((parent_slot, slots, without))
    return SlotPlan(tuple(parent), tuple(depth), tuple(groups))


def slot_plan(drafter: Drafter) -> SlotPlan | None:
    """The slot plan of a chain, delayed / root i.i.d. or branch drafter; None for any other drafter
    (including subclasses, which may draw differently, e.g. the deliberately broken drafters of the tests)."""
    kind = type(drafter)
    if kind is ChainDrafter:
        return _plan_from_levels([[(d, 1, False)] for d in range(drafter.length)])
    if kind is DelayedDrafter:
        levels = [[(d, 1, False)] for d in range(drafter.trunk)]
        trunk_end, ends = drafter.trunk, None
        for step in range(drafter.tail):
            if step == 0:
                levels.append([(trunk_end, drafter.branches, False)])
                first = trunk_end + 1
            else:
                levels.append([(end, 1, False) for end in ends])
                first = ends[-1] + 1
            ends = list(range(first, first + drafter.branches))
        # one group of K i.i.d. draws at the trunk end is K independent draws: split it
        return _split_iid(_plan_from_levels(levels))
    if kind is BranchingDrafter:
        levels, frontier = [], [0]
        for branching in drafter.branching:
            levels.append([(slot, branching, not drafter.replacement) for slot in frontier])
            start = frontier[-1] + 1
            frontier = list(range(start, start + branching * len(frontier)))
        return _split_iid(_plan_from_levels(levels))
    return None


def _split_iid(plan: SlotPlan) -> SlotPlan:
    groups = []
    for parent, slots, without in plan.groups:
        if without:  # kept whole, even of one slot: it handles absent parents and exhausted support
            groups.append((parent, slots, True))
        else:
            groups.extend((parent, (slot,), False) for slot in slots)
    return SlotPlan(plan.parent, plan.depth, tuple(groups))


def supports(problem: Problem, drafter: Drafter) -> bool:
    """Whether this module can enumerate the drafter's trees for the problem (float64, structured drafter)."""
    return not problem.exact and slot_plan(drafter) is not None


# --------------------------------------------------------------------------------------------------
# Enumeration


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


def enumerate_draws(problem: Problem, drafter: Drafter, tables: PrefixTables, *,
                    multiset_paths: bool = False) -> SlotDraws:
    """Every draft of a structured drafter with its probability, as arrays (the oracle is
    ``drafter.outcomes``). ``multiset_paths`` (delayed / root i.i.d. drafters only): enumerate the K i.i.d.
    tail paths as sorted multisets with multinomial weights, for order-free verifiers."""
    plan = slot_plan(drafter)
    if plan is None:
        raise ValueError(f"no slot plan for {drafter.spec}")
    size = problem.vocab_size
    tokens = np.full((1, plan.num_slots), ABSENT, dtype=np.int64)
    contexts = np.full((1, plan.num_slots), ABSENT, dtype=np.int64)
    contexts[0, 0] = 0
    weight = np.ones(1)
    tail_groups = ()
    if multiset_paths and type(drafter) is DelayedDrafter and drafter.tail > 0 and drafter.branches > 1:
        first_tail = drafter.trunk + 1
        tail_groups = tuple(g for g in plan.groups if g[1][0] >= first_tail)
    for parent, slots, without in plan.groups:
        if (parent, slots, without) in tail_groups:
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
    if tail_groups:
        tokens, contexts, weight = _multiset_tails(drafter, plan, tables, tokens, contexts, weight)
    return SlotDraws(plan, tokens, contexts, weight)


def _multiset_tails(drafter: DelayedDrafter, plan: SlotPlan, tables: PrefixTables, tokens, contexts, weight):
    """Append the K tail paths as multisets: rows = trunk rows x sorted K-multisets of tail sequences,
    weight *= multinomial(K; counts) * prod P(path | trunk end)."""
    size, branches, tail, trunk = tables.vocab_size, drafter.branches, drafter.tail, drafter.trunk
    sequences = np.array(list(itertools.product(range(size), repeat=tail)), dtype=np.int64)  # [M, L2]
    combos = np.array(list(itertools.combinations_with_replacement(range(len(sequences)), branches)),
                      dtype=np.int64)  # [C, K]
    coefficient = np.array([math.factorial(branches) / math.prod(math.factorial(c) for c in
                                                                  np.unique(row, return_counts=True)[1])
                            for row in combos])
    # P(sequence | trunk end) for every trunk row: [N, M]
    end = contexts[:, trunk]
    probability = np.ones((len(end), len(sequences)))
    context = np.repeat(end[:, None], len(sequences), axis=1)
    for step in range(tail):
        token = np.broadcast_to(sequences[:, step], context.shape)
        probability = probability * np.take_along_axis(tables.draft[context], token[..., None], axis=2)[..., 0]
        context = tables.child_index(context, trunk + step, token)
    rows, count = len(weight), len(combos)
    new_weight = weight[:, None] * coefficient[None, :] * np.prod(
        probability[:, combos], axis=2)  # [N, C]
    new_weight = new_weight.ravel()
    keep = new_weight > 0
    row_of = np.repeat(np.arange(rows), count)[keep]
    combo_of = np.tile(np.arange(count), rows)[keep]
    tokens, contexts = tokens[row_of].copy(), contexts[row_of].copy()
    paths = sequences[combos[combo_of]]  # [N', K, L2]
    for step in range(tail):
        for path in range(branches):
            slot = trunk + 1 + step * branches + path
            tokens[:, slot] = paths[:, path, step]
            parent = plan.parent[slot]
            contexts[:, slot] = tables.child_index(contexts[:, parent], trunk + step, tokens[:, slot])
    return tokens, contexts, new_weight[keep]


# --------------------------------------------------------------------------------------------------
# Topologies


@dataclass(frozen=True, eq=False)
class TreeGroup:
    """Draft trees that share one topology, as arrays over rows.

    Topology (tuples over node ids, breadth first, parents before children): parent, depth, child_lists
    (ordered child list as node ids, repeats kept: the i.i.d. draws), child_nodes (distinct children in
    order of first appearance, as ``DraftTree.child_nodes``). Rows: tokens [N, n] (-1 at the root),
    contexts [N, n] (flat prefix index), weight [N]; ``tables`` gives p and q by context.
    """

    tables: PrefixTables
    parent: tuple[int, ...]
    depth: tuple[int, ...]
    child_lists: tuple[tuple[int, ...], ...]
    tokens: np.ndarray
    contexts: np.ndarray
    weight: np.ndarray

    @property
    def num_nodes(self) -> int:
        return len(self.parent)

    @property
    def num_rows(self) -> int:
        return len(self.weight)

    @property
    def vocab_size(self) -> int:
        return self.tables.vocab_size

    @cached_property
    def child_nodes(self) -> tuple[tuple[int, ...], ...]:
        return tuple(tuple(dict.fromkeys(children)) for children in self.child_lists)

    def p(self, node: int) -> np.ndarray:
        """p(. | path to node) for every row, [N, V]."""
        return self.tables.target[self.contexts[:, node]]

    def q(self, node: int) -> np.ndarray:
        """q(. | path to node) for every row, [N, V] (NaN at leaves)."""
        return self.tables.draft[self.contexts[:, node]]

    def shape(self, row: int) -> TreeShape:
        """The canonical ``TreeShape`` of one row (to compare with ``Drafter.outcomes``)."""
        builder, ids = TreeBuilder(), {0: 0}
        for node in range(self.num_nodes):
            for child in self.child_lists[node]:
                ids[child] = builder.add_child(ids[node], int(self.tokens[row, child]))
        return builder.shape()


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


def group_by_topology(draws: SlotDraws, tables: PrefixTables) -> list[TreeGroup]:
    """Split enumerated rows into groups of one topology each."""
    plan = draws.plan
    rep = representatives(draws)
    keys, inverse = _unique_rows(rep)
    order = np.argsort(inverse, kind="stable")
    bounds = np.searchsorted(inverse[order], np.arange(len(keys) + 1))
    groups = []
    for index, key in enumerate(keys):
        rows = order[bounds[index]:bounds[index + 1]]
        slots = [s for s in range(plan.num_slots) if key[s] == s]
        node_of = {slot: node for node, slot in enumerate(slots)}
        parent = tuple(-1 if s == 0 else node_of[key[plan.parent[s]]] for s in slots)
        child_lists = [[] for _ in slots]
        for slot in range(1, plan.num_slots):
            if key[slot] >= 0:
                child_lists[node_of[key[plan.parent[slot]]]].append(node_of[key[slot]])
        groups.append(TreeGroup(
            tables=tables, parent=parent, depth=tuple(plan.depth[s] for s in slots),
            child_lists=tuple(tuple(c) for c in child_lists), tokens=draws.tokens[np.ix_(rows, slots)],
            contexts=draws.contexts[np.ix_(rows, slots)], weight=draws.weight[rows]))
    return groups


def tree_groups(problem: Problem, drafter: Drafter, *, multiset_paths: bool = False,
                tables: PrefixTables | None = None) -> list[TreeGroup]:
    """Every draft tree of ``drafter`` grouped by topology."""
    problem.require_depth(drafter.depth)
    tables = tables or PrefixTables.build(problem, drafter.depth)
    return group_by_topology(enumerate_draws(problem, drafter, tables, multiset_paths=multiset_paths), tables)


def outcome_law(groups: list[TreeGroup]) -> dict[TreeShape, float]:
    """{shape: probability} over every row (a slow, per-row check against ``Drafter.outcomes``)."""
    law: dict[TreeShape, float] = {}
    for group in groups:
        for row in range(group.num_rows):
            shape = group.shape(row)
            law[shape] = law.get(shape, 0.0) + float(group.weight[row])
    return law


# --------------------------------------------------------------------------------------------------
# Batched laws and accumulation


def top_down_emission_laws(verifier, group: TreeGroup) -> np.ndarray:
    """The top-down walk (verispec.verifiers.tree_walk.TopDownVerifier) on every row of a group,
    [N, n, V]; the solver's output law is computed once per distinct (context, child list)."""
    from verispec.simulator.dp import output_laws  # batched when the solver offers it

    rows, size = group.num_rows, group.vocab_size
    law = np.zeros((rows, group.num_nodes, size))
    reach = np.zeros((rows, group.num_nodes))
    reach[:, 0] = 1.0
    everyone = np.arange(rows)
    for node in range(group.num_nodes):
        children = group.child_lists[node]
        if not children:
            law[:, node] = reach[:, node, None] * group.p(node)
            continue
        child_tokens = group.tokens[:, list(children)]
        keys = np.concatenate([group.contexts[:, [node]], child_tokens], axis=1)
        unique, inverse = np.unique(keys, axis=0, return_inverse=True)
        inverse = inverse.ravel()
        kernels = np.empty((len(unique), size))
        for context in np.unique(unique[:, 0]):
            which = np.flatnonzero(unique[:, 0] == context)
            kernels[which] = output_laws(verifier.solver, group.tables.target[context],
                                         group.tables.draft[context], unique[which, 1:])
        output = kernels[inverse]  # [N, V]
        stop = output.copy()
        for child in group.child_nodes[node]:
            token = group.tokens[:, child]
            reach[:, child] = reach[:, node] * output[everyone, token]
            stop[everyone, token] = 0.0
        law[:, node] = reach[:, node, None] * stop
    return law


def batched_law_function(verifier):
    """f(group) -> [N, n, V] for verifiers with a batched law (``emission_laws``) or a node solver
    (the top-down walk); None otherwise."""
    method = getattr(verifier, "emission_laws", None)
    if method is not None:
        return method
    if getattr(verifier, "standard_walk", False) and getattr(verifier, "solver", None) is not None:
        return lambda group: top_down_emission_laws(verifier, group)
    return None


def applies(problem: Problem, drafter: Drafter, verifier) -> bool:
    """Fast enumeration needs a float problem, a structured drafter and a batched verifier law."""
    return supports(problem, drafter) and batched_law_function(verifier) is not None


def uses_multisets(drafter: Drafter, verifier) -> bool:
    """Multiset paths for order-free verifiers on delayed / root i.i.d. trees with K > 1."""
    return (bool(getattr(verifier, "order_free", False)) and type(drafter) is DelayedDrafter
            and drafter.branches > 1 and drafter.tail > 0)


@dataclass(frozen=True, eq=False)
class FastLaw:
    """Output of ``fast_output_law``: ``emitted[l - 1]`` of shape (V,)*l, and counts for the report."""

    emitted: tuple[np.ndarray, ...]
    num_rows: int
    num_topologies: int
    multisets: bool


def check_laws(verifier, group: TreeGroup, laws: np.ndarray) -> None:
    """Raise VerifierError unless every row's emission law has the group's shape and is a probability law
    (the batched form of the engine's per-tree check)."""
    from verispec.simulator.engine import EMISSION_SUM_TOLERANCE

    expected = (group.num_rows, group.num_nodes, group.vocab_size)
    if laws.shape != expected:
        raise VerifierError(f"verifier '{verifier.name}' returned batched emission laws of shape {laws.shape}, "
                            f"expected {expected}")
    totals = laws.sum(axis=(1, 2))
    bad = np.flatnonzero(~(np.abs(totals - 1.0) <= EMISSION_SUM_TOLERANCE)
                         | (laws < -EMISSION_SUM_TOLERANCE).any(axis=(1, 2)))
    if len(bad):
        row = int(bad[0])
        raise VerifierError(f"verifier '{verifier.name}' emission law on {group.shape(row)} is not a probability "
                            f"law (sum {totals[row]!r}, min {laws[row].min()!r})")


def accumulate(groups: list[TreeGroup], law_function, tables: PrefixTables,
               check=None) -> tuple[np.ndarray, ...]:
    """Sum weight * law into the law of the emitted block, by flat (prefix, token) index with bincount;
    ``check(group, laws)`` sees every group's laws first."""
    size = tables.vocab_size
    flat = np.zeros(tables.num_prefixes * size)
    for group in groups:
        laws = law_function(group)  # [N, n, V]
        if check is not None:
            check(group, laws)
        for node in range(group.num_nodes):  # one bincount per node keeps the temporaries at [N, V]
            index = group.contexts[:, node, None] * size + np.arange(size)[None, :]
            flat += np.bincount(index.ravel(), weights=(group.weight[:, None] * laws[:, node]).ravel(),
                                minlength=len(flat))
    return tuple(flat[tables.offsets[length] * size:tables.offsets[length + 1] * size].reshape(
        (size,) * (length + 1)) for length in range(tables.depth + 1))


#: Largest estimated working memory of one fast enumeration; beyond it the run is refused up front
#: (ProblemTooLargeError) instead of exhausting the machine.
MAX_FAST_BYTES = 4 * 2**30


def estimated_rows(size: int, drafter: Drafter, multisets: bool) -> int:
    """An upper bound on the rows fast enumeration holds at once (zero-probability draws only lower it)."""
    plan = slot_plan(drafter)
    if multisets:
        return size ** drafter.trunk * math.comb(size ** drafter.tail + drafter.branches - 1, drafter.branches)
    rows = 1
    for _, slots, without in plan.groups:
        rows *= (math.perm(size, len(slots)) + 1) if without else size ** len(slots)
    return rows


def estimated_bytes(size: int, drafter: Drafter, multisets: bool) -> int:
    """Working memory, upper estimate: tokens, contexts and representatives per slot (int64) plus the
    batched emission laws and their weighted copy per node and token (float64), for every row."""
    slots = slot_plan(drafter).num_slots
    return estimated_rows(size, drafter, multisets) * 8 * (6 * slots + 2 * (slots + 1) * size)


def fast_output_law(problem: Problem, drafter: Drafter, verifier) -> FastLaw:
    """The law of the emitted block by fast enumeration (same result as the engine's 'closed-form')."""
    law_function = batched_law_function(verifier)
    if law_function is None or not supports(problem, drafter):
        raise ValueError(f"fast enumeration does not apply to '{verifier.name}' on {drafter.spec}")
    multisets = uses_multisets(drafter, verifier)
    needed = estimated_bytes(problem.vocab_size, drafter, multisets)
    if needed > MAX_FAST_BYTES:
        rows = estimated_rows(problem.vocab_size, drafter, multisets)
        raise ProblemTooLargeError(
            f"exact enumeration of {drafter.spec} at V={problem.vocab_size} holds up to {rows:.3g} draft trees "
            f"(about {needed / 2**30:.1f} GiB), above the {MAX_FAST_BYTES / 2**30:.0f} GiB limit; use a smaller "
            f"vocabulary or tree (node-local solvers on i.i.d. trees take the DP, which has no such limit)")
    tables = PrefixTables.build(problem, drafter.depth)
    groups = tree_groups(problem, drafter, multiset_paths=multisets, tables=tables)
    emitted = accumulate(groups, law_function, tables, lambda group, laws: check_laws(verifier, group, laws))
    return FastLaw(emitted=emitted, num_rows=sum(g.num_rows for g in groups), num_topologies=len(groups),
                   multisets=multisets)
