"""Deliberately broken rules for drafters with their own draft laws, each written as the buggy code reads,
as a top-down walk against a Chooser; every entry must be flagged lossy by the exact engine.

* Trap 2 of docs/guides/reference.md, recursive rejection sampling without replacement: "use the
  conditional law q_j both in the ratio and the residual, in sampling order" (negative controls for rrsw).
* Trap 8 for SpecHub: the verifier breaks a tie for argmax q differently from the drafter (largest id
  instead of smallest), so it plans the transport for a draft law other than the one drafted.
"""

from __future__ import annotations

import numpy as np

from verispec.simulator.distributions import normalize, positive_part, ratio_min_one, residual
from verispec.simulator.drafters import DraftLaw
from verispec.simulator.ranking import without_tokens
from verispec.verifiers import ProcedureVerifier
from verispec.verifiers.spechub import HubPlan

WITHOUT_REPLACEMENT = frozenset({DraftLaw.WITHOUT_REPLACEMENT})


def _walk(node_rule):
    """A top-down tree walk whose node rule is ``node_rule(p, q, children, chooser) -> token``."""
    def procedure(tree, chooser):
        node = 0
        while tree.child_tokens[node]:
            token = node_rule(tree.p[node], tree.q[node], tree.child_tokens[node], chooser)
            child = tree.child(node, token)
            if child is None:
                return node, token
            node = child
        return node, chooser.categorical(tree.p[node])
    return procedure


def _recursive_rejection(children, p, q, chooser, *, ratio_with_q, residual_with_q):
    """RRS over ``children`` in the given order; the flags swap q_j for the unconditioned q."""
    current, draft = p, q
    for token in children:
        denominator = q[token] if ratio_with_q else draft[token]
        if chooser.bernoulli(ratio_min_one(current[token], denominator)):
            return token
        current = residual(current, q if residual_with_q else draft)
        draft = normalize(without_tokens(draft, (token,)))
    if current.sum() == 0:  # the unconditioned residual can run dry; fall back as such code does
        current = normalize(positive_part(p))
    return chooser.categorical(current)


def ratio_with_q(p, q, children, chooser):
    """Accept x_j w.p. min(1, r_j(x_j) / q(x_j)) instead of r_j(x_j) / q_j(x_j)."""
    return _recursive_rejection(children, p, q, chooser, ratio_with_q=True, residual_with_q=False)


def residual_with_q(p, q, children, chooser):
    """Update r_{j+1} = norm((r_j - q)+) instead of norm((r_j - q_j)+)."""
    return _recursive_rejection(children, p, q, chooser, ratio_with_q=False, residual_with_q=True)


def specinfer_on_distinct_drafts(p, q, children, chooser):
    """SpecInfer's with-replacement rule (q in both places) applied to drafts drawn without replacement."""
    return _recursive_rejection(children, p, q, chooser, ratio_with_q=True, residual_with_q=True)


def reversed_order(p, q, children, chooser):
    """The correct q_j arithmetic, but the children are verified last-drawn first."""
    return _recursive_rejection(tuple(reversed(children)), p, q, chooser, ratio_with_q=False,
                                residual_with_q=False)


BROKEN_RRSW_VERIFIERS = {
    name: ProcedureVerifier(name, _walk(rule), WITHOUT_REPLACEMENT)
    for name, rule in (("rrsw-ratio-with-q", ratio_with_q), ("rrsw-residual-with-q", residual_with_q),
                       ("rrsw-specinfer-rule", specinfer_on_distinct_drafts),
                       ("rrsw-reversed-order", reversed_order))
}


def spechub_hub_by_largest_id(p, q, children, chooser):
    """SpecHub's rule, with the hub taken as the LARGEST token among the maxima of q (the drafter uses the
    smallest). Without ties it is the correct rule."""
    hub = max(t for t in range(len(q)) if q[t] == max(q))
    if len(children) == 1:
        return chooser.categorical(p)
    plan = HubPlan.build(p[None], q[None], np.array([hub]))
    if hub not in children:  # the drafted pair is not a pair of this hub: treat the first child as i
        children = (children[0], hub)
    other, accept_other, accept_hub = (value[0] for value in plan.stages(p[None], np.array([children])))
    if chooser.bernoulli(accept_other):
        return int(other)
    if chooser.bernoulli(accept_hub):
        return hub
    return chooser.categorical(plan.residual[0])


BROKEN_HUB_VERIFIERS = {
    "spechub-hub-by-largest-id": ProcedureVerifier("spechub-hub-by-largest-id", _walk(spechub_hub_by_largest_id),
                                                   frozenset({DraftLaw.HUB})),
}
