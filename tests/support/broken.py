"""Deliberately broken verifiers: the traps of docs/guides/reference.md, as sampling procedures.

Every entry must be flagged lossy by the exact engine (negative controls); a checker that passes any of
them is not checking anything. Each is written as the buggy public code reads, against a Chooser.
"""

from __future__ import annotations

from dataclasses import dataclass

from verispec.simulator.distributions import normalize, positive_part, ratio_min_one, residual, stop_probability
from verispec.simulator.drafters import ChainDrafter, DelayedDrafter, DraftLaw, _draw_path
from verispec.simulator.tree_specs import parse_tree
from verispec.simulator.trees import TreeBuilder
from verispec.verifiers import ProcedureSolver, ProcedureVerifier, TopDownVerifier, get_verifier

CHAIN = frozenset({DraftLaw.SINGLE_PATH})
IID = frozenset({DraftLaw.IID_CHILDREN})


def naive_correction_from_target(tree, chooser):
    """Token-level verification that draws the correction from p instead of norm((p - q)+)."""
    node = 0
    while tree.child_nodes[node]:
        child = tree.child_nodes[node][0]
        token = tree.token[child]
        if not chooser.bernoulli(ratio_min_one(tree.p[node, token], tree.q[node, token])):
            return node, chooser.categorical(tree.p[node])
        node = child
    return node, chooser.categorical(tree.p[node])


def _bv_quantities(tree):
    nodes = tree.chain_nodes()
    weights = [1]
    for here, child in zip(nodes[:-1], nodes[1:]):
        token = tree.token[child]
        weights.append(ratio_min_one(weights[-1] * tree.p[here, token], tree.q[here, token]))
    length = len(nodes) - 1
    h = [None] + [stop_probability(weights[i], tree.p[nodes[i]], tree.q[nodes[i]]) for i in range(1, length)]
    if length:
        h.append(weights[length])
    return nodes, weights, h


def bv_first_failure(tree, chooser):
    """Block verification with tau = the position before the first failing eta (trap 3)."""
    nodes, weights, h = _bv_quantities(tree)
    tau = 0
    for i in range(1, len(nodes)):
        if not chooser.bernoulli(h[i]):
            break
        tau = i
    if tau == len(nodes) - 1:
        return nodes[tau], chooser.categorical(tree.p[nodes[tau]])
    correction = normalize(positive_part(weights[tau] * tree.p[nodes[tau]] - tree.q[nodes[tau]]))
    return nodes[tau], chooser.categorical(correction)


def bv_unweighted_residual(tree, chooser):
    """Block verification whose correction at tau ignores the weight: norm((p - q)+) (trap 3)."""
    nodes, weights, h = _bv_quantities(tree)
    tau = 0
    for i in range(1, len(nodes)):
        if chooser.bernoulli(h[i]):
            tau = i
    if tau == len(nodes) - 1:
        return nodes[tau], chooser.categorical(tree.p[nodes[tau]])
    return nodes[tau], chooser.categorical(residual(tree.p[nodes[tau]], tree.q[nodes[tau]]))


BROKEN_CHAIN_VERIFIERS = {
    "naive-correction-from-target": ProcedureVerifier("naive-correction-from-target", naive_correction_from_target,
                                                      CHAIN),
    "bv-first-failure": ProcedureVerifier("bv-first-failure", bv_first_failure, CHAIN),
    "bv-unweighted-residual": ProcedureVerifier("bv-unweighted-residual", bv_unweighted_residual, CHAIN),
}


def specinfer_skipping_duplicates(p, q, children, chooser):
    """SpecInfer that tests each distinct draft token once (trap 1): a repeated token must still apply
    its residual update."""
    current = p
    for token in dict.fromkeys(children):
        if chooser.bernoulli(ratio_min_one(current[token], q[token])):
            return token
        current = residual(current, q)
    return chooser.categorical(current)


@dataclass(frozen=True)
class KCopiesTrunkDrafter(DelayedDrafter):
    """Delayed tree whose trunk edges are recorded K times, as if K i.i.d. paths had all agreed on the
    trunk (trap 7): the verifier then treats the single trunk draw as K agreeing draws."""

    @property
    def spec(self) -> str:
        return f"delayed-kcopies:{self.branches},{self.trunk},{self.tail}"

    def draw(self, problem, chooser):
        builder = TreeBuilder()
        node, prefix = 0, ()
        for _ in range(self.trunk):
            token = chooser.categorical(problem.draft(prefix))
            for _ in range(self.branches):
                child = builder.add_child(node, token)
            node, prefix = child, prefix + (token,)
        for _ in range(self.branches):
            _draw_path(problem, chooser, builder, node, prefix, self.tail)
        return builder.shape()


@dataclass(frozen=True)
class SharpenedDraftChain(ChainDrafter):
    """A chain drafted from norm(q^2) (temperature 1/2 applied to the drafter only) while the tree, and so
    the verifier, holds q (trap 8: the verifier must see the law the tokens were really drawn from)."""

    @property
    def spec(self) -> str:
        return f"chain-sharpened:{self.length}"

    def draw(self, problem, chooser):
        builder = TreeBuilder()
        node, prefix = 0, ()
        for _ in range(self.length):
            q = problem.draft(prefix)
            token = chooser.categorical(q * q / (q * q).sum())
            node, prefix = builder.add_child(node, token), prefix + (token,)
        return builder.shape()


#: name -> (broken verifier, drafter on which the trap shows). Every entry must be flagged lossy, and
#: `verispec hunt` must find a witness for it.
BROKEN_VARIANTS = {
    **{name: (verifier, parse_tree("chain:3")) for name, verifier in BROKEN_CHAIN_VERIFIERS.items()},
    "specinfer-skipping-duplicates": (
        TopDownVerifier(ProcedureSolver("specinfer-skipping-duplicates", specinfer_skipping_duplicates, IID)),
        parse_tree("iid:3,1")),
    "specinfer-on-k-copies-trunk": (get_verifier("specinfer"), KCopiesTrunkDrafter(2, 1, 1)),
    "naive-on-sharpened-drafts": (get_verifier("naive"), SharpenedDraftChain(2)),
}


def all_broken_variants() -> dict:
    """Every deliberately broken variant in the test suite, with a drafter on which its trap shows."""
    from tests.support.broken_own_draft_laws import BROKEN_HUB_VERIFIERS, BROKEN_RRSW_VERIFIERS
    from tests.support.broken_paths import BROKEN_PATH_VERIFIERS
    from tests.support.broken_spectr import BROKEN_KSEQ_VERIFIERS

    variants = dict(BROKEN_VARIANTS)
    variants.update({name: (verifier, parse_tree(spec)) for name, (verifier, spec) in BROKEN_PATH_VERIFIERS.items()})
    variants.update({name: (verifier, parse_tree("iid:3,1")) for name, verifier in BROKEN_KSEQ_VERIFIERS.items()})
    variants.update({name: (verifier, parse_tree("branch:3,1")) for name, verifier in BROKEN_RRSW_VERIFIERS.items()})
    variants.update({name: (verifier, parse_tree("hub")) for name, verifier in BROKEN_HUB_VERIFIERS.items()})
    return variants
