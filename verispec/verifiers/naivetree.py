"""NaiveTree: the token-level rule applied to the first child only (DDTE, arXiv 2602.16994, Sec. 2).

Accept x_1 with probability min(1, p(x_1) / q(x_1)); otherwise Y ~ norm((p - q)+). Y may still equal
another child, which then counts as accepted and the walk moves to it. Valid whenever x_1 ~ q, which
holds for i.i.d. children and for the first draw without replacement."""

from __future__ import annotations

from verispec import backend
from verispec.simulator.chooser import Chooser
from verispec.simulator.distributions import ratio_min_one, residual
from verispec.simulator.drafters import DraftLaw
from verispec.simulator.interfaces import NodeSolver


class NaiveTreeSolver(NodeSolver):
    name = "naivetree"
    summary = "token-level rule on the first child"
    citation = "Thomas et al. 2026, DDTE, arXiv 2602.16994, Sec. 2"
    valid_for = frozenset({DraftLaw.IID_CHILDREN, DraftLaw.WITHOUT_REPLACEMENT})

    def output_laws(self, p, q, children):
        first = children[:, 0]
        accept = backend.minimum_one(backend.take(p, first) / backend.take(q, first))  # [N]
        picked = backend.where(backend.one_hot(first, p.shape[-1]), accept[:, None], backend.zero(p))
        return (1 - accept)[:, None] * residual(p, q) + picked

    def sequential_tests(self, p, q, draws: int):
        # only the first draft is tested; the others are never looked at (their tests accept nothing)
        return [backend.namespace(p, q).minimum(p, q)] + [q * 0] * (draws - 1), residual(p, q)

    def sample(self, p, q, children: tuple[int, ...], chooser: Chooser) -> int:
        first = children[0]
        if chooser.bernoulli(ratio_min_one(p[first], q[first])):
            return first
        return chooser.categorical(residual(p, q))
