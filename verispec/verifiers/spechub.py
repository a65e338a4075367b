"""SpecHub, K = 2 (Sun et al. 2024, "SpecHub: Provable Acceleration to Multi-Draft Speculative Decoding",
arXiv 2411.05289, Sec. 4), verification of its own hub-pair draft law.

Draft law (DraftLaw.HUB): hub a = argmax q (ties: the smallest token id, verispec.simulator.ranking);
X_1 ~ q; if X_1 = a then X_2 ~ q(. | != a), else X_2 = a. So the ordered pairs are (i, a) with probability
Q(i, a) = q(i) and (a, i) with probability Q(a, i) = q(a) q~(i), where q~ = q(. | != a) = q / (1 - q(a)) off
the hub; every pair holds a. The optimal-transport LP between this sparse draft law and p (mass moves
from a pair to an output token; it counts as accepted when the token is in the pair) is solved in closed
form by filling it greedily, as in the authors' implementation:

  1. a non-hub token i takes mass from its pairs, first from (i, a), then from (a, i):
       pair (i, a): accept i w.p. min(1, p(i) / q(i));
       pair (a, i): accept i w.p. min(1, (p(i) - q(i))+ / Q(a, i));
  2. the hub a takes what the pairs have left, first from the (a, .) pairs, then from the (., a) pairs:
       L_ai = sum_i (Q(a, i) - (p(i) - q(i))+)+,   L_ia = sum_i (q(i) - p(i))+,
       pair (a, i): accept a w.p. min(1, p(a) / L_ai);
       pair (i, a): accept a w.p. min(1, (p(a) - L_ai)+ / L_ia);
  3. otherwise emit Y ~ norm(res) with res(i) = (p(i) - q~(i))+ and res(a) = (p(a) - L_ai - L_ia)+ (which
     is 0: L_ai + L_ia = 1 - sum_i min(p(i), q~(i)) = p(a) + R with R = sum_i (p(i) - q~(i))+).

The code uses that identity, p(a) - L_ai = L_ia - R, to compute the hub's acceptance from sums of positive
parts: p(a) - L_ai itself cancels catastrophically when p(a) ~ L_ai (float64 then leaves ~1e-8 of
rejection mass for an empty residual).

Token i is emitted with probability min(p(i), q~(i)) + (p(i) - q~(i))+ = p(i) and a with p(a), so the rule is
lossless; its acceptance p(a) + sum_{i != a} min(p(i), q~(i)) is the LP optimum for the hub draft law
(every pair contains a, and i is in a pair with total probability q~(i)). The order in which the hub
draws from the two kinds of pairs does not change the output law of Y.

Degenerate node: when q(a) = 1 the child list is just (a,) and the rule is Y ~ p (accepted iff Y = a).
"""

from __future__ import annotations

from dataclasses import dataclass

from verispec import backend
from verispec.errors import InvalidTreeError
from verispec.simulator.chooser import Chooser
from verispec.simulator.distributions import normalize
from verispec.simulator.drafters import DraftLaw
from verispec.simulator.interfaces import NodeSolver
from verispec.simulator.ranking import top_token_batch


def _capped_ratio(numerator, denominator):
    """min(1, numerator / denominator); 1 when the denominator is 0 (that branch has probability 0)."""
    return backend.minimum_one(backend.divide(numerator, denominator, where_zero=backend.one(numerator)))


@dataclass(frozen=True, eq=False)
class HubPlan:
    """The quantities of SpecHub's closed-form transport for N nodes (see the module docstring)."""

    hub: object                  # [N]     a = argmax q (the tie rule of verispec.simulator.ranking)
    off_hub: object              # [N, V]  q(i) for i != a, 0 at a
    hub_first: object            # [N, V]  Q(a, i) = q(a) q~(i)
    excess: object               # [N, V]  (p(i) - q(i))+, 0 at a
    left_hub_first: object       # [N]     L_ai
    left_hub_second: object      # [N]     L_ia
    hub_after_first: object      # [N]     (p(a) - L_ai)+
    hub_first_rejected: object   # [N]     (L_ai - p(a))+
    residual: object             # [N, V]  norm(res), res(a) = 0

    @classmethod
    def build(cls, p, q, hub=None) -> HubPlan:
        """The plan for p, q [N, V]; ``hub`` [N] overrides argmax q (for deliberately broken variants)."""
        hub = top_token_batch(q, 1)[:, 0] if hub is None else hub
        at_hub = backend.one_hot(hub, q.shape[-1])
        off_hub = backend.where(at_hub, backend.zero(q), q)
        q_tilde = normalize(off_hub)                                       # q(. | != a)
        target_off_hub = backend.where(at_hub, backend.zero(p), p)
        hub_first = backend.take(q, hub)[:, None] * q_tilde
        excess = backend.positive_part(target_off_hub - off_hub)
        res = backend.positive_part(target_off_hub - q_tilde)
        left_hub_second = backend.total(backend.positive_part(off_hub - target_off_hub))
        rejected = backend.total(res)                                      # R
        # L_ai + L_ia = p(a) + R (module docstring), so p(a) - L_ai = L_ia - R: a difference of sums of
        # positive parts, exact when R = 0, whereas p(a) - L_ai cancels catastrophically when p(a) ~ L_ai
        # and would leave rejection mass for an empty residual.
        return cls(hub=hub, off_hub=off_hub, hub_first=hub_first, excess=excess,
                   left_hub_first=backend.total(backend.positive_part(hub_first - excess)),
                   left_hub_second=left_hub_second,
                   hub_after_first=backend.positive_part(left_hub_second - rejected),
                   hub_first_rejected=backend.positive_part(rejected - left_hub_second),
                   residual=normalize(res))  # res(a) = 0: the hub is never short of mass

    def stages(self, p, children):
        """(other token i [N], P(accept i) [N], P(accept a | i rejected) [N]) for drafted pairs [N, 2]."""
        hub_second = children[:, 1] == self.hub      # pair (i, a); else pair (a, i)
        other = backend.where(hub_second, children[:, 0], children[:, 1])
        accept_other = backend.where(
            hub_second, _capped_ratio(backend.take(p, other), backend.take(self.off_hub, other)),
            _capped_ratio(backend.take(self.excess, other), backend.take(self.hub_first, other)))
        accept_hub = backend.where(
            hub_second, _capped_ratio(self.hub_after_first, self.left_hub_second),
            1 - _capped_ratio(self.hub_first_rejected, self.left_hub_first))   # min(1, p(a) / L_ai)
        return other, accept_other, accept_hub


def _check_hub_pairs(plan: HubPlan, children) -> None:
    xp = backend.namespace(children)
    hub = plan.hub
    if children.shape[1] == 2:
        valid = (children[:, 0] == hub) != (children[:, 1] == hub)
    elif children.shape[1] == 1:
        valid = (children[:, 0] == hub) & (backend.total(plan.off_hub) == 0)
    else:
        valid = xp.zeros(children.shape[:1], dtype=xp.bool)
    if not bool(xp.all(valid)):
        row = int(backend.to_numpy(~valid).argmax())
        a = int(backend.to_numpy(hub)[row])
        listed = tuple(int(t) for t in backend.to_numpy(children[row]))
        raise InvalidTreeError(
            f"spechub needs a hub pair (one child is the hub {a} = argmax q, the other is not; just ({a},) when "
            f"q({a}) = 1), got the child list {listed}")


class SpecHubSolver(NodeSolver):
    name = "spechub"
    summary = "SpecHub: hub pairs verified by the closed-form LP"
    citation = "Sun et al. 2024, arXiv 2411.05289, Sec. 4"
    valid_for = frozenset({DraftLaw.HUB})

    def output_laws(self, p, q, children):
        plan = HubPlan.build(p, q)
        _check_hub_pairs(plan, children)
        if children.shape[1] == 1:  # q(a) = 1: the rule is Y ~ p
            return p
        other, accept_other, accept_hub = plan.stages(p, children)
        size = p.shape[-1]
        first = backend.where(backend.one_hot(other, size), accept_other[:, None], backend.zero(p))
        second = backend.where(backend.one_hot(plan.hub, size), ((1 - accept_other) * accept_hub)[:, None],
                               backend.zero(p))
        return first + second + ((1 - accept_other) * (1 - accept_hub))[:, None] * plan.residual

    def sample(self, p, q, children: tuple[int, ...], chooser: Chooser) -> int:
        plan = HubPlan.build(p[None], q[None])
        pair = backend.index_array([list(children)], p)
        _check_hub_pairs(plan, pair)
        if len(children) == 1:
            return chooser.categorical(p)
        other, accept_other, accept_hub = (value[0] for value in plan.stages(p[None], pair))
        if chooser.bernoulli(accept_other):
            return int(other)
        if chooser.bernoulli(accept_hub):
            return int(plan.hub[0])
        return chooser.categorical(plan.residual[0])
