"""The sizes the post-order DP of Traversal's law (``verispec.verifiers.traversal_dp``) estimates before its work:
deletion sequences and outcomes counted exactly or bounded in logs, the first-appearance patterns of a depth, and
the post-order rows of a drafter, each with the limit past which the DP refuses on one line."""

from __future__ import annotations

import math

import numpy as np

from verispec.errors import ProblemTooLargeError
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


def _check_rows(count: int, tokens_of: np.ndarray, draw_count: np.ndarray, draws, size: int, d: int) -> None:
    """ProblemTooLargeError before pass one at depth d would hold more than MAX_SEQUENCE_ENTRIES (deletion
    sequences and outcomes, x V; ``_log_sequences`` and ``_log_outcomes`` per state). ``draws``: the drafter's
    ``traversal_dp._Draws``."""
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


def _log_histories(draws, size: int) -> float:
    """log of an upper bound on the rows of the whole program before merging, in O(depth) (``draws``: the drafter's
    ``traversal_dp._Draws``): a node at depth d receives at most n_d draws (b_1 .. b_(d+1) for i.i.d. children,
    b_(d+1) without replacement), has at most ``_log_sequences(V, min(n_d, V))`` deletion sequences, and enters each
    child with one of at most n_d multiplicities."""
    total, log_states, paths = -math.inf, 0.0, 1
    for b in draws.branching:
        draws_here = min(paths * b, 1 << 62) if draws.iid else b
        sequences = _log_sequences(size, min(draws_here, size))
        total = log_add(total, log_states + log_add(sequences, _log_outcomes(size, draws_here, draws.iid)))
        log_states += sequences + (math.log(draws_here) if draws.iid else 0.0)
        paths = draws_here if draws.iid else 1
    return total
