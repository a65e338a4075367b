"""Traversal Verification's exact law over every draft outcome, without enumerating trees: a dynamic
program over the post-order (docs/guides/whole_tree_rules.md gives the argument and the measurements).

Traversal (verispec.verifiers.traversal) visits leaves in post-order. It uses three facts about its own
mechanics, none of them its losslessness:

1. a node's state (weight, p, q) changes only when one of its children is deleted, and then through that
   child's token alone (``deletion_update``), never through what happened inside the child's subtree;
2. a child's weight is computed from its parent's state when the child's subtree is first visited (Alg. 1
   recomputes every remaining descendant after a deletion; ``child_weight``);
3. a subtree, once entered, either emits or is deleted whole, so its later siblings see it only through
   that one event.

The drafter adds a fourth: the subtrees of a node's distinct children are independent given the children's
tokens and multiplicities (i.i.d. draws: the child drawn k times has k b i.i.d. draws below it; without
replacement: every child draws its own b). So a subtree is summarised by its *state* (context u, number m of
i.i.d. paths through it, entry weight w), and

    T(u, m, w) = P(the subtree emits)   (over its draws and the rule's uniforms)

is a function of the state. At a node, an *outcome* is its ordered list of distinct children c_1..c_r (first
appearance) with multiplicities m_1..m_r, of probability Q; Traversal enters c_j with the weight w_j that
the node's state after deleting c_1..c_(j-1) gives, so child j is entered with probability
prod_(i<j) (1 - T_i) and the node emits, after all r are deleted, with prod_i (1 - T_i) times its final
weight (1 at the root), from its final p. Three passes over the depths:

* down: every reachable state, its outcomes and their children's states (states with equal (u, m, w) are
  merged: the entry weight is often 1, and then the state is shared by every history above it);
* up: T of every state from its children's (a leaf's is its weight);
* down: the probability of reaching every state, and the emitted law.

The work is per state and outcome, not per tree: delayed:4,4,4 at V = 4 has 10^12 ordered draft outcomes
and about 4 * 10^5 states (5 s; benchmarks/bench_rule_dp.py). ``T(u, m, w) = w`` holds for the correct
rule (Traversal's invariant, checked by the tests), but the program never assumes it: a variant with a
broken update is analysed as written.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from verispec import backend
from verispec.errors import ProblemTooLargeError
from verispec.guard import budget
from verispec.simulator.interfaces import RuleDP, RuleLaw
from verispec.simulator.laws import add_at, add_blocks
from verispec.simulator.problems import draft_conditionals, target_conditionals
from verispec.sizes import readable_count
from verispec.verifiers.traversal_dp_sizes import MAX_LOG_HISTORIES, _check_rows, _log_histories


@functools.cache
def first_appearance_patterns(draws: int, most: int) -> tuple[tuple[tuple[int, ...], int], ...]:
    """The multiplicities (m_1..m_r) of the distinct tokens of ``draws`` ordered draws, in order of first
    appearance, r <= ``most`` (the vocabulary), each with the number of draw orders that give it:
    prod_i C(n - m_1 - .. - m_(i-1) - 1, m_i - 1) (the first free position opens block i, which takes
    m_i - 1 of the later free positions). Summed against the V!/(V-r)! token sequences this counts V^n."""
    patterns = []

    def extend(parts: tuple[int, ...], left: int, count: int) -> None:
        if left == 0:
            patterns.append((parts, count))
            return
        if len(parts) == most:
            return
        for size in range(1, left + 1):
            extend(parts + (size,), left - size, count * math.comb(left - 1, size - 1))

    extend((), draws, 1)
    return tuple(patterns)


@dataclass(frozen=True)
class _Draws:
    """How the drafter draws children: ``iid`` (each node reached by m paths draws m b_d i.i.d. tokens) or
    without replacement (b_d distinct tokens, fewer when q's support runs out)."""

    branching: tuple[int, ...]
    iid: bool


def tree_draws(drafter) -> _Draws | None:
    """The drafter's draws when the program covers them, else None."""
    if drafter.iid_branching is not None:
        return _Draws(tuple(drafter.iid_branching), True)
    if drafter.without_replacement_branching is not None:
        return _Draws(tuple(drafter.without_replacement_branching), False)
    return None


@dataclass
class _Depth:
    """The states of one depth and what pass one found below them.

    ``context`` [S] flat prefix index, ``paths`` [S] m, ``weight`` [S] entry weight; ``outcomes``: one
    (state [O], probability [O], children [O, r] state indices at the next depth, emit weight [O], emit law
    [O, V]) per outcome pattern."""

    context: np.ndarray
    paths: np.ndarray
    weight: np.ndarray
    outcomes: list


class PostOrderDP(RuleDP):
    """Traversal's law by the post-order program (module docstring), for the rule as the verifier writes it
    (its ``child_weight`` and ``deletion_update``)."""

    name = "post-order DP"

    def __init__(self, verifier):
        self.verifier = verifier

    def applies(self, drafter) -> bool:
        draws = tree_draws(drafter)
        return draws is not None and len(draws.branching) > 0

    def check_size(self, problem, drafter) -> None:
        log_rows = _log_histories(tree_draws(drafter), problem.vocab_size)
        if log_rows > MAX_LOG_HISTORIES:
            raise ProblemTooLargeError(
                f"{self.verifier.name}'s post-order DP on {drafter.spec} at V={problem.vocab_size} would follow up "
                f"to {readable_count(log_rows)} post-order rows (an upper bound before merging), above its limit of "
                f"{readable_count(MAX_LOG_HISTORIES)}; use a smaller tree or vocabulary")

    def output_law(self, problem, drafter, *, progress: bool = False) -> RuleLaw:
        from tqdm import tqdm  # only when a law is computed: importing the verifiers stays light

        draws, size = tree_draws(drafter), problem.vocab_size
        depth = len(draws.branching)
        targets = [target_conditionals(problem, d).reshape(size ** d, size) for d in range(depth + 1)]
        drafts = [draft_conditionals(problem, d).reshape(size ** d, size) for d in range(depth)]
        like = targets[0]  # float64, or Fractions in exact mode
        levels = [_Depth(context=np.zeros(1, dtype=np.int64), paths=np.ones(1, dtype=np.int64),
                         weight=backend.ones((1,), like), outcomes=[])]
        for d in tqdm(range(depth), desc="post-order DP, states", disable=not progress, leave=False):
            budget.check("the post-order DP")
            levels.append(self._expand(levels[d], d, draws, targets[d], drafts[d]))
        # up: T = P(the subtree emits); a leaf emits with its weight
        emits = [None] * (depth + 1)
        emits[depth] = levels[depth].weight
        for d in range(depth - 1, -1, -1):
            budget.check("the post-order DP")
            emits[d] = backend.zeros((len(levels[d].context),), like)
            for state, probability, children, final_weight, _ in levels[d].outcomes:
                survive, emitted = probability, probability * 0
                for column in range(children.shape[1]):
                    child = emits[d + 1][children[:, column]]
                    emitted = emitted + survive * child
                    survive = survive * (1 - child)
                add_at(emits[d], state, emitted + survive * final_weight)
        # down: the probability of entering every state, and the emitted law
        emitted_law = [backend.zeros((size ** (d + 1),), like) for d in range(depth + 1)]
        reach = backend.ones((1,), like)
        for d in range(depth):
            budget.check("the post-order DP")
            below = backend.zeros((len(levels[d + 1].context),), like)
            for state, probability, children, final_weight, final_law in levels[d].outcomes:
                entered = reach[state] * probability
                for column in range(children.shape[1]):
                    add_at(below, children[:, column], entered)
                    entered = entered * (1 - emits[d + 1][children[:, column]])
                add_blocks(emitted_law[d], levels[d].context[state], (entered * final_weight)[:, None] * final_law)
            reach = below
        leaves = levels[depth]
        leaf_laws = (reach * leaves.weight)[:, None] * targets[depth][leaves.context]
        add_blocks(emitted_law[depth], leaves.context, leaf_laws)
        shaped = tuple(array.reshape((size,) * (d + 1)) for d, array in enumerate(emitted_law))
        # Traversal's invariant, T(u, m, w) = w: reported, never assumed (a broken variant breaks it)
        gap = max((float(abs(emits[d] - levels[d].weight).max()) for d in range(1, depth + 1)
                   if len(levels[d].weight)), default=0.0)
        return RuleLaw(emitted=shaped, details={
            "dp_states": sum(len(level.context) for level in levels),
            "dp_outcomes": sum(len(group[0]) for level in levels for group in level.outcomes),
            "emit_probability_minus_weight": gap})

    def _expand(self, level: _Depth, d: int, draws: _Draws, target, draft) -> _Depth:
        """Pass one at depth d: every sequence of deletions at every state, the outcomes, and the states of
        depth d + 1 (merged by (context, paths, weight))."""
        size = target.shape[1]
        count = len(level.context)
        available = np.asarray(draft[level.context] > 0, dtype=bool)                         # [S, V]
        tokens_of = available.sum(axis=1)
        draw_count = level.paths * draws.branching[d] if draws.iid else np.full(count, draws.branching[d])
        longest = np.minimum(draw_count, tokens_of)                                           # most distinct children
        _check_rows(count, tokens_of, draw_count, draws, size, d)
        # sequences of deleted children, level by level: row = (state, c_1..c_j)
        rows = {"state": np.arange(count), "parent": np.full(count, -1), "token": np.full(count, -1),
                "weight": level.weight, "p": target[level.context], "q": draft[level.context],
                "used": np.zeros((count, size), dtype=bool)}
        if not draws.iid:  # q mass of the tokens not yet drawn, summed (1 - q(drawn) cancels: q = (1 - 1e-12, 1e-12))
            rows["rest"] = backend.total(draft[level.context])
        sequences = [rows]
        child_weights = [None]
        for j in range(1, int(longest.max(initial=0)) + 1):
            budget.check("the post-order DP")
            previous = sequences[-1]
            open_rows = np.flatnonzero(longest[previous["state"]] >= j)
            allowed = available[previous["state"][open_rows]] & ~previous["used"][open_rows]
            which, token = np.nonzero(allowed)
            parent = open_rows[which]
            w, p, q = previous["weight"][parent], previous["p"][parent], previous["q"][parent]
            child_weights.append(self.verifier.child_weight(w, p, q, token))
            new_weight, new_p, new_q = self.verifier.deletion_update(w, p, q, token)
            used = previous["used"][parent].copy()
            used[np.arange(len(token)), token] = True
            state = previous["state"][parent]
            sequences.append({"state": state, "parent": parent, "token": token, "weight": new_weight, "p": new_p,
                              "q": new_q, "used": used})
            if not draws.iid:
                original = draft[level.context[state]]
                sequences[-1]["rest"] = backend.total(backend.where(used, backend.zero(original), original))
        last = d + 1 == len(draws.branching)
        children = _child_states(sequences, child_weights, level.context, draw_count, size, iid=draws.iid, last=last)
        outcomes = []
        if draws.iid:
            for n in np.unique(draw_count).tolist():
                for parts, ways in first_appearance_patterns(n, size):
                    budget.check("the post-order DP")
                    r = len(parts)
                    if r >= len(sequences):  # more distinct children than any state's q can draw
                        continue
                    final = sequences[r]
                    members = np.flatnonzero(draw_count[final["state"]] == n)
                    if len(members) == 0:
                        continue
                    probability = backend.full((len(members),), ways, draft)
                    columns = []
                    for i, (row, times) in enumerate(zip(_ancestors(sequences, r, members), parts), start=1):
                        token = sequences[i]["token"][row]
                        probability = probability * draft[level.context[sequences[i]["state"][row]], token] ** times
                        columns.append(children.index(i, row, times))
                    outcomes.append(self._outcome(final, members, probability, columns, d))
        else:
            for r in range(1, len(sequences)):
                final = sequences[r]
                # complete: b children drawn, or q's support used up
                members = np.flatnonzero(r == longest[final["state"]])
                if len(members) == 0:
                    continue
                probability = backend.ones((len(members),), draft)
                columns = []
                for i, row in enumerate(_ancestors(sequences, r, members), start=1):
                    token, state = sequences[i]["token"][row], sequences[i]["state"][row]
                    rest = sequences[i - 1]["rest"][sequences[i]["parent"][row]]
                    probability = probability * draft[level.context[state], token] / rest
                    columns.append(children.index(i, row))
                outcomes.append(self._outcome(final, members, probability, columns, d))
        level.outcomes = outcomes
        return children.states

    @staticmethod
    def _outcome(final: dict, members, probability, columns: list, d: int) -> tuple:
        """(state, probability, children [O, r], emit weight, emit law) of the outcomes ending at ``members``
        of the final sequence level; the root, once a leaf, always emits (weight 1)."""
        weight = final["weight"][members]
        return (final["state"][members], probability, np.stack(columns, axis=1),
                weight * 0 + 1 if d == 0 else weight, final["p"][members])


@dataclass(frozen=True)
class _Children:
    """The states of the next depth, and which one each (sequence level i, row, multiplicity k) enters."""

    states: _Depth
    starts: list     # starts[i][row]: position of (i, row, k = 1) among all entries
    inverse: np.ndarray  # child state of every entry

    def index(self, level: int, rows: np.ndarray, times=1) -> np.ndarray:
        """Child states entered at ``rows`` of sequence level ``level`` with multiplicity ``times``."""
        return self.inverse[self.starts[level][rows] + (times - 1)]


def _child_states(sequences: list, child_weights: list, context: np.ndarray, draw_count: np.ndarray, size: int, *,
                  iid: bool, last: bool) -> _Children:
    """Every child state (context, paths, entry weight) a deletion sequence can enter, merged by value: row
    ``row`` of level i enters its last token with multiplicity k = 1..n - i + 1 (i.i.d.: the i - 1 earlier
    distinct tokens take at least one draw each) or 1 (without replacement). A leaf's paths do not matter."""
    keys_context, keys_paths, keys_weight, starts_by_level, offset = [], [], [], [None], 0
    for i in range(1, len(sequences)):
        rows = sequences[i]
        options = draw_count[rows["state"]] - i + 1 if iid else np.ones(len(rows["state"]), dtype=np.int64)
        starts = offset + np.concatenate([[0], np.cumsum(options)[:-1]]).astype(np.int64)
        starts_by_level.append(starts)
        row_of = np.repeat(np.arange(len(options)), options)
        times = np.arange(len(row_of)) - np.repeat(starts - offset, options) + 1       # k = 1..options per row
        keys_context.append(context[rows["state"][row_of]] * size + rows["token"][row_of])
        keys_paths.append(np.zeros_like(times) if last else times)
        keys_weight.append(child_weights[i][row_of])
        offset += len(row_of)
    contexts, paths = np.concatenate(keys_context), np.concatenate(keys_paths)
    weights = np.concatenate(keys_weight)
    representative, inverse = _unique_states(contexts, paths, weights)
    states = _Depth(context=contexts[representative], paths=paths[representative], weight=weights[representative],
                    outcomes=[])
    return _Children(states, starts_by_level, inverse)


def _unique_states(contexts: np.ndarray, paths: np.ndarray, weights) -> tuple[np.ndarray, np.ndarray]:
    """(one entry of every distinct (context, paths, weight), the distinct key of every entry). Weights are
    compared exactly: float64 bits (after -0.0 -> 0.0), or Fractions in exact mode."""
    if weights.dtype == object:
        seen: dict = {}
        representative, inverse = [], np.empty(len(contexts), dtype=np.int64)
        for n, key in enumerate(zip(contexts.tolist(), paths.tolist(), weights.tolist())):
            found = seen.get(key)
            if found is None:
                found = seen[key] = len(representative)
                representative.append(n)
            inverse[n] = found
        return np.array(representative, dtype=np.int64), inverse
    bits = (weights + 0.0).view(np.int64)
    order = np.lexsort((bits, paths, contexts))
    new = np.ones(len(order), dtype=bool)
    new[1:] = ((contexts[order][1:] != contexts[order][:-1]) | (paths[order][1:] != paths[order][:-1])
               | (bits[order][1:] != bits[order][:-1]))
    group = np.cumsum(new) - 1
    inverse = np.empty(len(order), dtype=np.int64)
    inverse[order] = group
    return order[new], inverse


def _ancestors(sequences: list, r: int, members: np.ndarray) -> list:
    """Rows at sequence levels 1..r of the sequences ending at ``members`` of level r."""
    rows = [members]
    for i in range(r, 1, -1):
        rows.append(sequences[i]["parent"][rows[-1]])
    return rows[::-1]
