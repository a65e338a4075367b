"""SpecInfer: recursive rejection sampling with replacement (Miao et al. 2024, arXiv 2305.09781, Alg. 2).

Drafts x_1..x_m i.i.d. from q. r_1 = p. For j = 1..m: accept x_j with probability min(1, r_j(x_j) / q(x_j));
on rejection r_{j+1} = norm((r_j - q)+). If every draft is rejected, emit Y ~ r_{m+1}. A repeated draft
token is tested again against the updated residual (skipping duplicates is trap 1 of the reference and
is lossy).
"""

from __future__ import annotations

import numpy as np

from verispec.simulator.chooser import Chooser
from verispec.simulator.distributions import ratio_min_one, residual, zeros
from verispec.verifiers.tree_walk import NodeSolver


class SpecInferSolver(NodeSolver):
    name = "specinfer"

    def output_law(self, p: np.ndarray, q: np.ndarray, children: tuple[int, ...]) -> np.ndarray:
        law = zeros(p.shape, exact=p.dtype == object)
        rejected_so_far = 1  # P(x_1..x_{j-1} all rejected)
        current = p
        for token in children:
            accept = ratio_min_one(current[token], q[token])
            law[token] += rejected_so_far * accept
            rejected_so_far = rejected_so_far * (1 - accept)
            current = residual(current, q)
        return law + rejected_so_far * current

    def sample(self, p: np.ndarray, q: np.ndarray, children: tuple[int, ...], chooser: Chooser) -> int:
        current = p
        for token in children:
            if chooser.bernoulli(ratio_min_one(current[token], q[token])):
                return token
            current = residual(current, q)
        return chooser.categorical(current)
