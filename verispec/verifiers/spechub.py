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

import numpy as np

from verispec.errors import InvalidTreeError
from verispec.simulator.chooser import Chooser
from verispec.simulator.distributions import normalize, positive_part, zeros
from verispec.simulator.drafters import DraftLaw
from verispec.simulator.ranking import hub_token, without_tokens
from verispec.verifiers.tree_walk import NodeSolver


def _capped_ratio(numerator, denominator):
    """min(1, numerator / denominator); 1 when the denominator is 0 (that branch has probability 0)."""
    if denominator == 0:
        return 1 + 0 * numerator
    ratio = numerator / denominator
    return ratio if ratio < 1 else ratio * 0 + 1


class _HubPlan:
    """The quantities of SpecHub's closed-form transport at one node (see the module docstring)."""

    def __init__(self, p: np.ndarray, q: np.ndarray, hub: int | None = None):
        self.hub = a = hub_token(q) if hub is None else hub
        off_hub = without_tokens(q, (a,))                    # q(i) for i != a, 0 at a   [V]
        self.q = off_hub
        self.q_tilde = off_hub / off_hub.sum()                # q(. | != a)             [V]
        self.hub_first = q[a] * self.q_tilde                  # Q(a, i)                 [V]
        target_off_hub = without_tokens(p, (a,))
        self.excess = positive_part(target_off_hub - off_hub)  # (p(i) - q(i))+, 0 at a  [V]
        self.left_hub_first = positive_part(self.hub_first - self.excess).sum()        # L_ai
        self.left_hub_second = positive_part(off_hub - target_off_hub).sum()           # L_ia
        res = positive_part(target_off_hub - self.q_tilde)
        rejected = res.sum()                                                             # R
        # L_ai + L_ia = p(a) + R (module docstring), so p(a) - L_ai = L_ia - R: a difference of sums of
        # positive parts, exact when R = 0, whereas p(a) - L_ai cancels catastrophically when p(a) ~ L_ai
        # and would leave rejection mass for an empty residual.
        self.hub_after_first = positive_part(self.left_hub_second - rejected)           # (p(a) - L_ai)+
        self.hub_first_rejected = positive_part(rejected - self.left_hub_second)        # (L_ai - p(a))+
        res[a] = 0 * res[a]  # (p(a) - L_ai - L_ia)+ = 0: the hub is never short of mass
        self.residual = normalize(res)

    def stages(self, p: np.ndarray, children: tuple[int, ...]):
        """(other token i, P(accept i), P(accept a | i rejected)) for the drafted pair."""
        a = self.hub
        if children[1] == a:   # pair (i, a)
            other = children[0]
            return (other, _capped_ratio(p[other], self.q[other]),
                    _capped_ratio(self.hub_after_first, self.left_hub_second))
        other = children[1]    # pair (a, i)
        return (other, _capped_ratio(self.excess[other], self.hub_first[other]),
                1 - _capped_ratio(self.hub_first_rejected, self.left_hub_first))   # min(1, p(a) / L_ai)


def _check_hub_pair(q: np.ndarray, children: tuple[int, ...]) -> None:
    a = hub_token(q)
    if len(children) == 1 and children[0] == a and without_tokens(q, (a,)).sum() == 0:
        return
    if len(children) == 2 and (children[0] == a) != (children[1] == a):
        return
    raise InvalidTreeError(
        f"spechub needs a hub pair (one child is the hub {a} = argmax q, the other is not; just ({a},) when "
        f"q({a}) = 1), got the child list {children}")


class SpecHubSolver(NodeSolver):
    name = "spechub"
    valid_for = frozenset({DraftLaw.HUB})

    def output_law(self, p: np.ndarray, q: np.ndarray, children: tuple[int, ...]) -> np.ndarray:
        _check_hub_pair(q, children)
        if len(children) == 1:
            return p.copy()
        plan = _HubPlan(p, q)
        other, accept_other, accept_hub = plan.stages(p, children)
        law = zeros(p.shape, exact=p.dtype == object)
        law[other] += accept_other
        law[plan.hub] += (1 - accept_other) * accept_hub
        return law + (1 - accept_other) * (1 - accept_hub) * plan.residual

    def sample(self, p: np.ndarray, q: np.ndarray, children: tuple[int, ...], chooser: Chooser) -> int:
        _check_hub_pair(q, children)
        if len(children) == 1:
            return chooser.categorical(p)
        plan = _HubPlan(p, q)
        other, accept_other, accept_hub = plan.stages(p, children)
        if chooser.bernoulli(accept_other):
            return other
        if chooser.bernoulli(accept_hub):
            return plan.hub
        return chooser.categorical(plan.residual)
