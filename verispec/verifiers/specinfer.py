"""SpecInfer: recursive rejection sampling with replacement (Miao et al. 2024, arXiv 2305.09781, Alg. 2).

Drafts x_1..x_m i.i.d. from q. r_1 = p. For j = 1..m: accept x_j with probability min(1, r_j(x_j) / q(x_j));
on rejection r_{j+1} = norm((r_j - q)+). If every draft is rejected, emit Y ~ r_{m+1}. A repeated draft
token is tested again against the updated residual (skipping duplicates is trap 1 of docs/guides/reference.md and
is lossy).
"""

from __future__ import annotations

from verispec import backend
from verispec.simulator.chooser import Chooser
from verispec.simulator.distributions import ratio_min_one, residual
from verispec.simulator.interfaces import NodeSolver


class SpecInferSolver(NodeSolver):
    name = "specinfer"
    summary = "recursive rejection sampling with replacement"
    citation = "Miao et al. 2024, arXiv 2305.09781, Alg. 2"

    def output_laws(self, p, q, children):
        # r_(j+1) = norm((r_j - q)+) does not depend on which tokens were rejected, so the chain r_1..r_(m+1)
        # is computed once per node (run of equal rows) and each row only reads its drafted entries.
        first, inverse = backend.runs(p, q)
        node_q = q[first]
        chain = [p[first]]                                    # r_1 .. r_(m+1), each [U, V]
        for _ in range(children.shape[1]):
            chain.append(residual(chain[-1], node_q))
        rejected_so_far = backend.ones(p.shape[:-1], p)     # P(x_1..x_(j-1) all rejected), [N]
        accepted = []                                         # (token x_j, P(x_j is the accepted draft)), [N]
        for j in range(children.shape[1]):
            token = children[:, j]
            accept = backend.minimum_one(chain[j][inverse, token] / backend.take(q, token))  # [N]
            accepted.append((token, rejected_so_far * accept))
            rejected_so_far = rejected_so_far * (1 - accept)
        law = rejected_so_far[:, None] * chain[-1][inverse]  # every draft rejected: Y ~ r_(m+1)
        for token, mass in accepted:
            law = backend.add_to_tokens(law, token, mass)
        return law

    def sequential_tests(self, p, q, draws: int):
        # draft j is t and accepted: q(t) min(1, r_j(t) / q(t)) = min(q(t), r_j(t)); r_j ignores which
        # drafts were rejected, so the tests are sequential in the sense of NodeSolver.sequential_tests
        chain, accept = p, []
        for _ in range(draws):
            accept.append(backend.namespace(p, q).minimum(q, chain))
            chain = residual(chain, q)
        return accept, chain

    def sample(self, p, q, children: tuple[int, ...], chooser: Chooser) -> int:
        current = p
        for token in children:
            if chooser.bernoulli(ratio_min_one(current[token], q[token])):
                return token
            current = residual(current, q)
        return chooser.categorical(current)
