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

from verispec import backend, budget
from verispec.errors import ProblemTooLargeError
from verispec.simulator.interfaces import RuleDP, RuleLaw
from verispec.simulator.laws import add_at, add_blocks
from verispec.simulator.problems import draft_conditionals, target_conditionals
from verispec.sizes import log_add, readable_count

#: Most entries ((deletion sequences + outcomes) x V) pass one may hold at one depth: a sequence keeps p, q and
#: the tokens used, an outcome its final law ([V] each). delayed:4,4,4 at V = 4 reaches 10^7.5 entries at its
#: deepest level and peaks at 1.2 GB (under 40 bytes an entry), so the limit is about 2.7 GB.
MAX_SEQUENCE_ENTRIES = 1 << 26

#: Counts of sequences and outcomes are computed exactly up to this many terms, above it bounded in logs.
EXACT_COUNT_TERMS = 64

#: Most first-appearance patterns (orders of multiplicities) of the draws at one depth: pass one makes one
#: vectorised pass per pattern, tens of microseconds each (n = 4 draws: 8 patterns; iid:1000000,2: a million).
MAX_PATTERNS_PER_DEPTH = 1 << 16

#: Refused up front: more post-order rows than this by ``_log_histories`` (an upper bound before merging).
#: Merging by entry weight saves six to ten orders of magnitude on the cases measured (delayed:4,4,4 at V = 4:
#: a bound of 10^11.9, 4 * 10^5 states; iid:4,6: 10^14.3 and 5 * 10^4), so the bound alone cannot tell; pass
#: one checks each depth's real size before building it (MAX_PATTERNS_PER_DEPTH, MAX_SEQUENCE_ENTRIES).
MAX_LOG_HISTORIES = math.log(1e18)


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


def _log_sequences(tokens: int, longest: int) -> float:
    """log of sum_(j <= r) a!/(a-j)!, the deletion sequences of a node with a drawable tokens and at most r
    distinct children: exact for r <= EXACT_COUNT_TERMS, else the upper bound r a!/(a-r)! (from log-gamma, so
    that r = 16,384 tokens costs nothing); -inf when r = 0."""
    if longest <= 0:
        return -math.inf
    if longest > EXACT_COUNT_TERMS:
        return math.log(longest) + math.lgamma(tokens + 1) - math.lgamma(tokens - longest + 1)
    return math.log(sum(math.perm(tokens, j) for j in range(1, longest + 1)))


def _log_outcomes(tokens: int, draws: int, iid: bool) -> float:
    """log of (an upper bound on) a node's outcomes: i.i.d., sum_(j <= r) C(n - 1, j - 1) a!/(a-j)! (the
    first-appearance patterns of n draws into j blocks times the token sequences), exact for r <= EXACT_COUNT_TERMS,
    else min(a^n, 2^(n-1) a!/(a-r)!); without replacement, the sequences of the r = min(n, a) children."""
    longest = min(draws, tokens)
    if not iid:  # the complete sequences: a!/(a-r)!
        return math.lgamma(tokens + 1) - math.lgamma(tokens - longest + 1) if longest else -math.inf
    if longest <= 0:
        return -math.inf
    if longest > EXACT_COUNT_TERMS:
        return min(draws * math.log(tokens), (draws - 1) * math.log(2) + _log_sequences(tokens, longest))
    return math.log(sum(math.comb(draws - 1, j - 1) * math.perm(tokens, j) for j in range(1, longest + 1)))


def _pattern_count(draws: int, longest: int) -> int:
    """How many first-appearance patterns ``first_appearance_patterns`` lists for n draws into at most r blocks:
    sum_(j <= r) C(n - 1, j - 1) (capped at MAX_PATTERNS_PER_DEPTH + 1 to stay cheap)."""
    total = 0
    for blocks in range(1, longest + 1):
        total += math.comb(draws - 1, blocks - 1)
        if total > MAX_PATTERNS_PER_DEPTH:
            return MAX_PATTERNS_PER_DEPTH + 1
    return total


def _check_rows(count: int, tokens_of: np.ndarray, draw_count: np.ndarray, draws: _Draws, size: int, d: int) -> None:
    """ProblemTooLargeError before pass one at depth d would hold more than MAX_SEQUENCE_ENTRIES (deletion
    sequences and outcomes, x V; ``_log_sequences`` and ``_log_outcomes`` per state)."""
    pairs, members = np.unique(np.stack([tokens_of, draw_count], axis=1), axis=0, return_counts=True)
    if draws.iid:  # one vectorised pass per pattern: their number bounds the Python-level work
        patterns = sum(_pattern_count(n, min(n, size)) for n in np.unique(draw_count).tolist())
        if patterns > MAX_PATTERNS_PER_DEPTH:
            raise ProblemTooLargeError(
                f"the post-order DP would visit more than {MAX_PATTERNS_PER_DEPTH:,} first-appearance patterns of "
                f"the draws at depth {d} (up to {int(draw_count.max()):,} i.i.d. draws at a node); use fewer paths")
    log_rows = -math.inf
    for (tokens, drawn), states in zip(pairs.tolist(), members.tolist()):
        rows = log_add(_log_sequences(tokens, min(tokens, drawn)), _log_outcomes(tokens, drawn, draws.iid))
        log_rows = log_add(log_rows, math.log(states) + rows)
    if log_rows + math.log(size) > math.log(MAX_SEQUENCE_ENTRIES):
        raise ProblemTooLargeError(
            f"the post-order DP reached {count:,} distinct states at depth {d}, with {readable_count(log_rows)} "
            f"deletion sequences and outcomes below them (x V = {size}), above its limit of "
            f"{MAX_SEQUENCE_ENTRIES:,} entries; "
            "use a smaller tree or vocabulary")


def _log_histories(draws: _Draws, size: int) -> float:
    """log of an upper bound on the rows of the whole program before merging, in O(depth): a node at depth d
    receives at most n_d draws (b_1 .. b_(d+1) for i.i.d. children, b_(d+1) without replacement), has at most
    ``_log_sequences(V, min(n_d, V))`` deletion sequences, and enters each child with one of at most n_d
    multiplicities."""
    total, log_states, paths = -math.inf, 0.0, 1
    for b in draws.branching:
        draws_here = min(paths * b, 1 << 62) if draws.iid else b
        sequences = _log_sequences(size, min(draws_here, size))
        total = log_add(total, log_states + log_add(sequences, _log_outcomes(size, draws_here, draws.iid)))
        log_states += sequences + (math.log(draws_here) if draws.iid else 0.0)
        paths = draws_here if draws.iid else 1
    return total
