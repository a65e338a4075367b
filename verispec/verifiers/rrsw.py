"""RRSW: recursive rejection sampling WITHOUT replacement (Jeon et al. 2024, "Recursive Speculative
Decoding", arXiv 2402.14160, Sec. 3; the rule of Sequoia and EAGLE-1).

The children x_1..x_m of a node are drawn one after another without replacement from q, and are verified
in that sampling order with the conditional draft law of each draw,

    q_1 = q,   q_{j+1}(x) = q_j(x) 1[x != x_j] / (1 - q_j(x_j))
               (= q(x) 1[x not in {x_1..x_j}] / (1 - q(x_1) - .. - q(x_j))),

r_1 = p; accept x_j with probability min(1, r_j(x_j) / q_j(x_j)); on rejection r_{j+1} = norm((r_j - q_j)+).
If every child is rejected, emit Y ~ r_{m+1}. Using q instead of q_j in the ratio or in the residual, or
verifying in another order, is trap 2 of docs/guides/reference.md and is lossy (tests/support/broken_own_draft_laws.py).

After x_j is tested, r_{j+1}(x_j) = 0 unless x_j was accepted with probability one, so Y = x_j happens
only through the test of x_j: whether x_j is accepted never depends on the children drawn after it.
That is why the rule stays lossless when the number of children is itself decided while drafting
(DySpec's dynamic tree).
"""

from __future__ import annotations

from verispec import backend
from verispec.errors import InvalidTreeError
from verispec.simulator.chooser import Chooser
from verispec.simulator.distributions import normalize, ratio_min_one, residual
from verispec.simulator.drafters import DraftLaw
from verispec.simulator.interfaces import NodeSolver


def next_draft_law(q_j, token):
    """q_{j+1} = q_j with ``token`` removed, renormalised (zero once q's support is used up); batched
    (q_j [..., V], token [...])."""
    return normalize(backend.where(backend.one_hot(token, q_j.shape[-1]), backend.zero(q_j), q_j))


def _check_distinct(children) -> None:
    xp = backend.namespace(children)
    count = children.shape[1]
    for i in range(count):
        for j in range(i + 1, count):
            repeated = children[:, i] == children[:, j]
            if bool(xp.any(repeated)):
                row = backend.to_numpy(children[int(backend.to_numpy(repeated).argmax())])
                raise InvalidTreeError("rrsw needs children drawn without replacement (distinct tokens), got "
                                       f"the child list {tuple(int(t) for t in row)}")


class RRSWSolver(NodeSolver):
    name = "rrsw"
    summary = "recursive rejection sampling without replacement (the rule of Sequoia and EAGLE-1)"
    citation = "Jeon et al. 2024, arXiv 2402.14160, Sec. 3"
    valid_for = frozenset({DraftLaw.WITHOUT_REPLACEMENT})

    def output_laws(self, p, q, children):
        _check_distinct(children)
        law = backend.zeros(p.shape, p)
        rejected_so_far = backend.ones(p.shape[:-1], p)  # P(x_1..x_{j-1} all rejected), [N]
        current, draft = p, q  # r_j and q_j, [N, V]
        for j in range(children.shape[1]):
            token = children[:, j]
            accept = backend.minimum_one(backend.take(current, token) / backend.take(draft, token))
            mass = rejected_so_far * accept
            law = backend.add_to_tokens(law, token, mass)
            rejected_so_far = rejected_so_far * (1 - accept)
            current = residual(current, draft)
            draft = next_draft_law(draft, token)
        return law + rejected_so_far[:, None] * current

    def sample(self, p, q, children: tuple[int, ...], chooser: Chooser) -> int:
        if len(set(children)) != len(children):
            raise InvalidTreeError("rrsw needs children drawn without replacement (distinct tokens), got "
                                   f"the child list {children}")
        current, draft = p, q
        for token in children:
            if chooser.bernoulli(ratio_min_one(current[token], draft[token])):
                return token
            current = residual(current, draft)
            rest = draft.copy()
            rest[token] = 0 * rest[token]
            draft = normalize(rest)
        return chooser.categorical(current)
