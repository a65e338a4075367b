"""Explicit single-position draft laws: the law Q of the ordered draft tuple (x_1..x_K) at one node.

A draft law is a dict {ordered token tuple: probability}. Four are built in (tokens outside the support of
q never appear, which keeps the tables small):

* ``iid_draft_law``: K i.i.d. draws from q, Q(x) = prod_i q(x_i) (SpecInfer, SpecTr, the OT LP of the
  docs/guides/reference.md, "Single position, K drafts").
* ``without_replacement_draft_law``: K draws one after another without replacement,
  Q(x) = prod_j q(x_j) / q(V minus {x_1..x_(j-1)}) (Jeon et al. 2024; Sequoia). If q has fewer than K
  tokens of positive probability the tuple is shorter, exactly as the simulator's drafter stops early.
* ``hub_draft_law``: SpecHub's hub pair (Sun et al. 2024, arXiv 2411.05289, Sec. 4): hub a = argmax q;
  Q(i, a) = q(i) and Q(a, i) = q(a) q(i) / (1 - q(a)) for i != a; just (a,) when q(a) = 1.
* ``greedy_draft_law``: Hu et al.'s greedy drafts (arXiv 2502.18779): the top K-1 tokens G of q, best
  first, then X ~ q / (1 - q(G)) off G: Q(G + (x,)) = q(x) / (1 - q(G)); just G when q's support is G.

The last two rank tokens with ``verispec.simulator.ranking``, as the drafters do (a different tie rule
would be another draft law). All work in float64 and, given Fraction vectors, in exact rationals.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping

import numpy as np

from verispec.errors import InvalidDistributionError, ProblemTooLargeError
from verispec.simulator.ranking import hub_token, top_tokens, without_tokens

#: Largest number of draft outcomes an explicit draft law is built with.
DEFAULT_MAX_OUTCOMES = 100_000

DraftLawTable = dict[tuple[int, ...], object]


def _support(q: np.ndarray) -> list[int]:
    return [token for token in range(len(q)) if q[token] > 0]


def _check_count(count: int, limit: int, what: str) -> None:
    if count > limit:
        raise ProblemTooLargeError(f"{what}: {count:,} draft outcomes, above the limit of {limit:,}")


def _check_drafts(num_drafts: int) -> None:
    if not isinstance(num_drafts, (int, np.integer)) or isinstance(num_drafts, bool) or num_drafts < 1:
        raise InvalidDistributionError(f"the number of drafts must be a positive integer, got {num_drafts!r}")


def iid_draft_law(q: np.ndarray, num_drafts: int, *, limit: int = DEFAULT_MAX_OUTCOMES) -> DraftLawTable:
    """Law of K i.i.d. draws from q, over ordered K-tuples of tokens in the support of q."""
    _check_drafts(num_drafts)
    support = _support(q)
    _check_count(len(support) ** num_drafts, limit, f"{num_drafts} i.i.d. drafts over {len(support)} tokens")
    law: DraftLawTable = {}
    for outcome in itertools.product(support, repeat=num_drafts):
        probability = q[outcome[0]]
        for token in outcome[1:]:
            probability = probability * q[token]
        law[outcome] = probability
    return law


def without_replacement_draft_law(q: np.ndarray, num_drafts: int, *,
                                  limit: int = DEFAULT_MAX_OUTCOMES) -> DraftLawTable:
    """Law of K sequential draws without replacement from q, over ordered tuples of distinct tokens."""
    _check_drafts(num_drafts)
    support = _support(q)
    length = min(num_drafts, len(support))
    _check_count(math.perm(len(support), length), limit,
                 f"{num_drafts} drafts without replacement over {len(support)} tokens")
    law: DraftLawTable = {}
    for outcome in itertools.permutations(support, length):
        probability = 1 + 0 * q[outcome[0]]
        drawn: set[int] = set()
        for token in outcome:
            # The remaining mass is summed over the undrawn tokens rather than taken as 1 - q(drawn):
            # the same value in exact mode, and no cancellation in float64.
            remaining = sum((q[t] for t in support if t not in drawn), 0 * q[token])
            probability = probability * q[token] / remaining
            drawn.add(token)
        law[outcome] = probability
    return law


def hub_draft_law(q: np.ndarray) -> DraftLawTable:
    """Law of SpecHub's ordered hub pair: (i, a) w.p. q(i), (a, i) w.p. q(a) q(i) / (1 - q(a))."""
    hub = hub_token(q)
    rest = without_tokens(q, (hub,))
    mass = rest.sum()
    if mass == 0:
        return {(hub,): 1 + 0 * q[hub]}
    law: DraftLawTable = {}
    for token in _support(rest):
        law[(token, hub)] = q[token]
        law[(hub, token)] = q[hub] * q[token] / mass
    return law


def greedy_draft_law(q: np.ndarray, num_drafts: int) -> DraftLawTable:
    """Law of Hu et al.'s greedy draft: the top K-1 tokens of q, then one token drawn from q off them."""
    _check_drafts(num_drafts)
    greedy = top_tokens(q, num_drafts - 1)
    rest = without_tokens(q, greedy)
    mass = rest.sum()
    if mass == 0:
        return {greedy: 1 + 0 * q[greedy[0]]}
    return {greedy + (token,): rest[token] / mass for token in _support(rest)}


def set_law(draft_law: Mapping[tuple[int, ...], object]) -> dict[frozenset[int], object]:
    """The law of the SET of drafted tokens (what the acceptance event 'Y is a draft' depends on)."""
    sets: dict[frozenset[int], object] = {}
    for outcome, probability in draft_law.items():
        key = frozenset(outcome)
        sets[key] = sets[key] + probability if key in sets else probability
    return sets
