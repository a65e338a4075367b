"""Deterministic token rankings shared by drafters and verifiers that draft "the most likely tokens".

SpecHub's hub token and Hu et al.'s greedy drafts are functions of the draft law q. The drafter and the
verifier must compute them identically, ties included (a disagreement is trap 8 of the reference: the
verifier would be handed a draft law other than the one the drafter used), so both call these helpers.

Tie rule: tokens are ranked by q decreasing, and equal q by token id increasing (the smaller id ranks
first). Only tokens with q > 0 are ever ranked: a drafter cannot propose a token of probability zero.
"""

from __future__ import annotations

import numpy as np


def ranked_support(q: np.ndarray) -> list[int]:
    """Tokens with q > 0, ordered by q decreasing, ties by token id increasing."""
    support = [token for token in range(len(q)) if q[token] > 0]
    return sorted(support, key=lambda token: (-q[token], token))


def top_tokens(q: np.ndarray, count: int) -> tuple[int, ...]:
    """The ``count`` highest-ranked tokens of q (fewer when q's support is smaller), best first."""
    return tuple(ranked_support(q)[:count])


def hub_token(q: np.ndarray) -> int:
    """SpecHub's hub a = argmax q; among equal maxima the smallest token id."""
    return ranked_support(q)[0]


def without_tokens(q: np.ndarray, tokens) -> np.ndarray:
    """q with ``tokens`` zeroed, NOT renormalised (a new array; the input is never modified)."""
    rest = q.copy()
    for token in tokens:
        rest[token] = 0 * rest[token]
    return rest
