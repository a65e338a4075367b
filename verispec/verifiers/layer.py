"""lv:<base>: Layer Verification, a lifting of any single-step (node-local) lossless rule into a draft-tree verifier
(Cha, Cho & Yun 2026, "Layer Verification Accelerates Speculative Tree Decoding", AdaptFM workshop at ICML 2026,
OpenReview forum XrqcUo6B6L).

What the paper's public abstract states (the full text could not be read here): LV scores each tree node with a
single-step verification rule, coordinates acceptance mass across the nodes of each layer, sweeps the tree layer by
layer, selects the accepted endpoint and samples the corrected token; it is lossless whenever the single-step rule is;
on a single draft path it beats token verification (which is suboptimal even there); with Global Resolution as the
base it is near-optimal for single-step multi-candidate and multi-step single-candidate drafts.

The rule below is verispec's RECONSTRUCTION from that abstract and from block verification (Sun et al. 2024, arXiv
2403.10444, Alg. 2), which it reproduces exactly on a single path with the token-level base. Every formula is
verispec's, derived and checked here (tests/verifiers/test_layer_verification.py), not read from the paper:

* Scores (reconstructed). Each node u carries a weight w_u in [0, 1], w_root = 1: the chance that the path to u
  is still acceptable. The base rule R runs at u on an augmented vocabulary V + 1 with the target
  pi_u = w_u p_u + (1 - w_u) delta_bot (the extra token "bot", never drafted, stands for "the path to u was not
  accepted") and the draft law q_u, on u's child list. Its output law L_u splits into the children's masses
  m_c = L_u(token of c), the mass e_u(y) on real tokens that are not children, and the mass b_u = L_u(bot).
* Layer coordination (reconstructed). The masses of u's children form one sub-probability (they sum to
  W_u <= w_u): the sweep descends to child c with probability m_c / W_u, and every child of u gets the weight
  w_c = W_u (its mass divided by its descent probability).
* Sweep and endpoint (reconstructed). Descend from the root, layer by layer, to a leaf (or to a node whose
  children have no mass); there accept the path with probability w (a leaf: the bonus token ~ p), else climb.
  At an internal node u reached while climbing, stop with probability e_u / (e_u + b_u), emitting the
  correction y ~ e_u / |e_u|, else climb on. At the root b = 0, so the sweep stops there at the latest: the
  endpoint is the deepest node the climb accepts.

Why it is lossless (verispec's proof, checked in exact rationals by the tests): averaged over the drafts below u,
the sweep reaches u from below with probability 1 - W_u = |e_u| + b_u and leaves it upwards with probability
E[b_u] = 1 - w_u (R is lossless for pi_u), so P(stop at u with y) = e_u(y) given u's child list. Writing Phi(s)
for the descent-weighted sum of w over the nodes whose path is s, P(emit s y) = Phi(s) p(y | s) - Phi(s y): the
continuation after any prefix is p. Validity needs exactly what the base's top-down walk needs (every node's child
list follows the base's draft law given the node), so lv:<base> claims the base's draft laws.

On a single path with the token-level base the weights are block verification's (w_(i+1) = min(1, w_i p/q)) and
the stop probabilities its h_i; on one layer of K drafts it is the base rule itself (at a child, the climb returns
with probability 1 - W, and the root then emits e / |e|). The base ``naive`` is the token-level step on a node's
first child (``naivetree``'s kernel, which on one child is token-level verification).
"""

from __future__ import annotations

import numpy as np

from verispec import backend
from verispec.errors import UnknownVerifierError
from verispec.simulator.chooser import Chooser
from verispec.simulator.interfaces import NodeSolver, Verifier
from verispec.simulator.trees import DraftTree, TreeBatch

#: How a lifted rule is named: ``lv:<base>`` with <base> a registered single-step rule (``lv:globalres``).
LAYER_PREFIX = "lv:"
#: The base name that stands for the token-level step (the registered rule of that name verifies a path).
TOKEN_LEVEL_ALIAS = {"naive": "naivetree"}
CITATION = ("Cha, Cho & Yun 2026, Layer Verification, AdaptFM @ ICML 2026, OpenReview XrqcUo6B6L; rule reconstructed "
            "from its abstract by verispec on Sun et al. 2024, arXiv 2403.10444")


def augmented_node(p, q, weight):
    """(pi, q') on V + 1 tokens, [N, V + 1] each: pi = weight p + (1 - weight) delta_bot, q' = q with q'(bot) = 0."""
    xp = backend.namespace(p)
    bottom = (1 - weight)[:, None]                                                # [N, 1]
    target = xp.concat([weight[:, None] * p, bottom], axis=-1)
    draft = xp.concat([q, backend.zeros((q.shape[0], 1), q)], axis=-1)
    return target, draft


class LayerVerifier(Verifier):
    """Layer Verification lifting the node-local rule ``solver`` (see the module docstring)."""

    def __init__(self, solver: NodeSolver, base: str):
        self.solver = solver
        self.base = base
        self.name = f"{LAYER_PREFIX}{base}"
        self.valid_for = solver.valid_for
        self.summary = f"Layer Verification lifting {base}'s single-step rule to the draft tree (reconstructed)"
        self.citation = CITATION

    def descent_shares(self, masses, total):
        """The layer's coordination: the probability of descending to each child, masses [N, c] over their total
        [N] (a row without mass descends nowhere). Each child's weight is then its mass over its share, the same
        total for every child of the node; the tests' broken twin descends uniformly and is lossy."""
        return backend.divide(masses, total[:, None], where_zero=backend.zero(masses))

    def node_output(self, p, q, children, weight):
        """The base rule's output law at N nodes on the augmented vocabulary, [N, V + 1] (the last entry is bot)."""
        target, draft = augmented_node(p, q, weight)
        return self.solver.output_laws(target, draft, children)

    def _descend(self, batch: TreeBatch):
        """Top-down pass: per node its descent probability [N] and weight [N]; per internal node the stopping law
        e [N, V], the climbing-up mass b [N] and the children's total mass W [N]."""
        size, one = batch.vocab_size, backend.ones((batch.num_rows,), batch.p[:, 0, 0])
        descend, weight, parts = {0: one}, {0: one}, {}
        for node, children in enumerate(batch.child_lists):
            if not children:
                continue
            output = self.node_output(batch.p[:, node], batch.q[:, node], batch.children(node), weight[node])
            distinct = list(batch.child_nodes[node])
            masses = backend.take_along_last(output, batch.tokens[:, distinct])   # [N, c]
            children_mass = backend.total(masses)                                 # [N]
            real = output[:, :size]
            stopping = backend.where(backend.membership(batch.children(node), size), backend.zero(real), real)
            parts[node] = (stopping, output[:, size], children_mass)
            shares = self.descent_shares(masses, children_mass)                   # [N, c]
            for slot, child in enumerate(distinct):
                descend[child] = descend[node] * shares[:, slot]
                weight[child] = backend.where(children_mass > 1, 1, children_mass)  # rounding may pass 1
        return descend, weight, parts

    def emission_laws(self, batch: TreeBatch):
        descend, weight, parts = self._descend(batch)
        laws, climbing = [None] * batch.num_nodes, {}
        for node in reversed(range(batch.num_nodes)):  # children before parents
            if node not in parts:  # a leaf: accept with its weight (bonus ~ p), else climb
                laws[node] = (descend[node] * weight[node])[:, None] * batch.p[:, node]
                climbing[node] = descend[node] * (1 - weight[node])
                continue
            stopping, bottom, children_mass = parts[node]
            arrive = backend.where(children_mass == 0, descend[node], backend.zero(children_mass))
            for child in batch.child_nodes[node]:
                arrive = arrive + climbing[child]
            rest = backend.total(stopping) + bottom                               # = 1 - W, [N]
            laws[node] = backend.divide(arrive[:, None] * stopping, rest[:, None], where_zero=backend.zero(stopping))
            climbing[node] = backend.divide(arrive * bottom, rest, where_zero=backend.zero(rest))
        return backend.stack(laws, axis=1)

    def procedure(self, tree: DraftTree, chooser: Chooser) -> tuple[int, int]:
        node, weight, visited = 0, backend.one(tree.p), []           # visited: (node, stopping law [V], bot mass)
        while tree.child_tokens[node]:
            output = self.node_output(tree.p[node][None], tree.q[node][None],
                                      np.array([tree.child_tokens[node]]), np.array([weight], dtype=tree.p.dtype))[0]
            output = backend.to_numpy(output)
            stopping = output[:tree.vocab_size].copy()
            stopping[list(tree.child_tokens[node])] = 0
            visited.append((node, stopping, output[tree.vocab_size]))
            distinct = tree.child_nodes[node]
            masses = output[[tree.token[child] for child in distinct]][None]      # [1, c]
            total_mass = masses.sum(axis=-1)                                      # [1]
            if total_mass[0] == 0:  # no child can be accepted: the sweep turns here
                break
            node = distinct[chooser.categorical(list(self.descent_shares(masses, total_mass)[0]))]
            weight = min(total_mass[0], backend.one(output))
        if not tree.child_tokens[node] and chooser.bernoulli(weight):
            return node, chooser.categorical(tree.p[node])
        for here, stopping, bottom in reversed(visited):
            kept = stopping.sum()
            if kept > 0 and chooser.bernoulli(kept / (kept + bottom)):
                return here, chooser.categorical(stopping / kept)
        raise AssertionError("the root's bot mass is zero, so the sweep stops there")


def single_step_bases(registry: dict) -> list[str]:
    """The bases ``lv:`` accepts, sorted: every rule of ``registry`` that is a node solver walked down the tree (its
    ``node_solver`` is set), and ``naive`` for the token-level step. ``verispec list`` and the generated table show
    ``lv:<base>`` for each, so a node-local rule registered later is listed lifted too."""
    return sorted(set(TOKEN_LEVEL_ALIAS) | {key for key, rule in registry.items() if rule.node_solver is not None})


def lifted(name: str, registry: dict, lossy_by_design: dict | None = None) -> LayerVerifier:
    """The rule ``lv:<base>`` for a registered single-step rule <base> (``naive`` stands for the token-level step);
    UnknownVerifierError on one line for a base that is unknown, lossy by design (a name of ``lossy_by_design``, with
    or without parameters: the lifting is lossless only where its base is) or not single-step (a whole-tree rule, or
    lv:)."""
    base = name[len(LAYER_PREFIX):]
    choices = ", ".join(LAYER_PREFIX + key for key in single_step_bases(registry))
    nested = base.startswith(LAYER_PREFIX)  # a lifted rule verifies a whole tree
    rule = None if nested else registry.get(TOKEN_LEVEL_ALIAS.get(base, base))
    if rule is None and base.partition("(")[0] in (lossy_by_design or {}):
        raise UnknownVerifierError(f"{name!r}: {base!r} is lossy by design, and lv lifts a lossless single-step rule: "
                                   f"{choices}")
    if rule is None and not nested:
        raise UnknownVerifierError(f"unknown base {base!r} in {name!r}; lv lifts a single-step rule: {choices}")
    if nested or rule.node_solver is None:
        raise UnknownVerifierError(f"{name!r}: {base!r} verifies a whole draft tree, not a single step; lv lifts a "
                                   f"single-step rule: {choices}")
    return LayerVerifier(rule.node_solver, base)


__all__ = ["CITATION", "LAYER_PREFIX", "LayerVerifier", "augmented_node", "lifted", "single_step_bases"]
