"""top_tokens at a real vocabulary ranks a candidate set instead of sorting every token; it must return
exactly what the full ranking (ranked_support, the tie rule over the whole vocabulary) returns."""

from __future__ import annotations

import numpy as np
import pytest

from verispec.simulator.ranking import PARTIAL_RANKING_SIZE, hub_token, ranked_support, top_tokens


def _planted(seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    size = int(rng.integers(PARTIAL_RANKING_SIZE + 1, 3 * PARTIAL_RANKING_SIZE))
    q = rng.random(size) ** 3
    best = rng.choice(size, 6, replace=False)
    if seed % 3 == 0:  # tied maxima, exactly and within float rounding of the tie gap
        q[best] = q.max()
        q[best[:3]] *= 1 + 1e-13
    elif seed % 3 == 1:  # a tie class straddling the count-th place
        rank = np.sort(q)[::-1][int(rng.integers(1, 6))]
        q[best] = rank * (1 - rng.integers(0, 3, 6) * 4e-13)
    q[rng.choice(size, size // 10, replace=False)] = 0
    return q / q.sum()


@pytest.mark.parametrize("seed", range(60))
def test_partial_ranking_equals_the_full_ranking(seed):
    q = _planted(seed)
    full = ranked_support(q)
    for count in (1, 2, 3, 5, 8):
        assert top_tokens(q, count) == tuple(full[:count])
    assert hub_token(q) == full[0]


def test_a_support_smaller_than_the_count_falls_back_to_every_positive_token():
    q = np.zeros(PARTIAL_RANKING_SIZE * 2)
    q[[7, 3, 11]] = [0.5, 0.25, 0.25]
    assert top_tokens(q, 5) == (7, 3, 11)
