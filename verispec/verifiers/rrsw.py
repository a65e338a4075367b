"""RRSW: recursive rejection sampling WITHOUT replacement (Jeon et al. 2024, "Recursive Speculative
Decoding", arXiv 2402.14160, Sec. 3; the rule of Sequoia and EAGLE-1).

The children x_1..x_m of a node are drawn one after another without replacement from q, and are verified
in that sampling order with the conditional draft law of each draw,

    q_1 = q,   q_{j+1}(x) = q_j(x) 1[x != x_j] / (1 - q_j(x_j))
               (= q(x) 1[x not in {x_1..x_j}] / (1 - q(x_1) - .. - q(x_j))),

r_1 = p; accept x_j with probability min(1, r_j(x_j) / q_j(x_j)); on rejection r_{j+1} = norm((r_j - q_j)+).
If every child is rejected, emit Y ~ r_{m+1}. Using q instead of q_j in the ratio or in the residual, or
verifying in another order, is trap 2 of the reference and is lossy (tests/broken_own_draft_laws.py).

After x_j is tested, r_{j+1}(x_j) = 0 unless x_j was accepted with probability one, so Y = x_j happens
only through the test of x_j: whether x_j is accepted never depends on the children drawn after it.
That is why the rule stays lossless when the number of children is itself decided while drafting
(DySpec's dynamic tree).
"""

from __future__ import annotations

import numpy as np

from verispec.errors import InvalidTreeError
from verispec.simulator.chooser import Chooser
from verispec.simulator.distributions import normalize, ratio_min_one, residual, zeros
from verispec.simulator.drafters import DraftLaw
from verispec.simulator.ranking import without_tokens
from verispec.verifiers.tree_walk import NodeSolver


def next_draft_law(q_j: np.ndarray, token: int) -> np.ndarray:
    """q_{j+1} = q_j with ``token`` removed, renormalised (zero once q's support is used up)."""
    return normalize(without_tokens(q_j, (token,)))


def _check_distinct(children: tuple[int, ...]) -> None:
    if len(set(children)) != len(children):
        raise InvalidTreeError(
            f"rrsw needs children drawn without replacement (distinct tokens), got the child list {children}")


class RRSWSolver(NodeSolver):
    name = "rrsw"
    valid_for = frozenset({DraftLaw.WITHOUT_REPLACEMENT})

    def output_law(self, p: np.ndarray, q: np.ndarray, children: tuple[int, ...]) -> np.ndarray:
        _check_distinct(children)
        law = zeros(p.shape, exact=p.dtype == object)
        rejected_so_far = 1  # P(x_1..x_{j-1} all rejected)
        current, draft = p, q
        for token in children:
            accept = ratio_min_one(current[token], draft[token])
            law[token] += rejected_so_far * accept
            rejected_so_far = rejected_so_far * (1 - accept)
            current = residual(current, draft)
            draft = next_draft_law(draft, token)
        return law + rejected_so_far * current

    def sample(self, p: np.ndarray, q: np.ndarray, children: tuple[int, ...], chooser: Chooser) -> int:
        _check_distinct(children)
        current, draft = p, q
        for token in children:
            if chooser.bernoulli(ratio_min_one(current[token], draft[token])):
                return token
            current = residual(current, draft)
            draft = next_draft_law(draft, token)
        return chooser.categorical(current)
