"""The exact law of decoding with a blockwise policy, and the policy that peeks (the negative control).

The delay selector of DDTE (Thomas et al. 2026, arXiv 2602.16994, Sec. 6 and Appendix E) chooses every
block's tree a = (K, L1, L2), and with it verispec's selector may choose the verifier, from features computed
before the block's draws. Why that keeps the target's law: a block that starts after the prefix s and runs a
lossless (drafter, verifier) emits (x_1..x_tau, y) such that, continued with the target, the sequence has the
target's law given s (the definition of docs/guides/reference.md, verispec.simulator.laws). When the pair is a
function of s
alone, the next block starts after s + block with the same property, so by induction over blocks the first n
tokens have the target's law P_target(x_1..x_n) = prod_i p(x_i | x_<i) (the DDTE paper's losslessness of each
block, its Eq. 1-3 per block, composed over blocks).

``policy_output_law`` computes that composition exactly, not by the argument above: for every prefix s reached
with positive probability, the block's output law comes from the exact engine (``verispec.analyze``) on the
problem shifted to s, and the masses multiply block by block until ``length`` tokens are emitted. Compared with
``target_law(problem, length)`` (the product of the target's conditionals, an independent computation), the
total-variation distance is 0 up to rounding for any policy that chooses from the prefix.

``PeekingVerifier`` is a rule that chooses AFTER seeing the block's draws and the target's probabilities at
them: when p of a drafted token is below a threshold it cuts the tree above that token's depth (a smaller
action: delayed:K,L1,L2 cut at depth d is delayed:K,min(L1,d),max(0,d-L1)) and verifies the cut tree by the
base rule. It is what a selector would be if it read p(x) at the drafted tokens, and it is lossy: the engine
says so, with its TV.
"""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction

import numpy as np

from verispec import backend
from verispec.errors import VerispecError
from verispec.simulator.chooser import Chooser
from verispec.simulator.drafters import Drafter
from verispec.simulator.interfaces import Verifier
from verispec.simulator.problems import Prefix, Problem, ShiftedProblem
from verispec.simulator.trees import DraftTree, TreeBatch

#: A policy for ``policy_output_law``: (prefix emitted so far, the problem) -> (tree spec or Drafter, verifier
#: name or Verifier) for the block that starts after the prefix.
Choose = Callable[[Prefix, Problem], tuple]

#: Most prefixes ``policy_output_law`` analyses (one exact analysis each).
MAX_POLICY_PREFIXES = 100_000


def policy_output_law(problem: Problem, choose: Choose, length: int, *, method: str = "auto"):
    """The exact law of the first ``length`` tokens, shape (V,)*length (like ``target_law``), when every block's
    (drafter, verifier) is ``choose(prefix, problem)`` for the prefix emitted before the block: blocks composed
    exactly, each block's output law from ``verispec.analyze`` (``method``) on the problem shifted to its prefix.
    A block that runs past ``length`` is cut there (its later tokens marginalised). Fractions in exact mode.

    The problem must cover every block: horizon >= len(prefix) + the block's depth for every prefix shorter than
    ``length`` (InvalidProblemError otherwise, from the engine)."""
    from verispec.api import analyze

    if isinstance(length, bool) or not isinstance(length, (int, np.integer)) or length < 1:
        raise VerispecError(f"length must be a positive integer, got {length!r}")
    if not callable(choose):
        raise VerispecError(f"choose must be a function (prefix, problem) -> (tree, verifier), got "
                            f"{type(choose).__name__}")
    size, exact = problem.vocab_size, problem.exact
    prefixes = sum(size ** m for m in range(length))
    if prefixes > MAX_POLICY_PREFIXES:
        raise VerispecError(f"the law of {length} tokens at V={size} may need {prefixes:,} block analyses, above "
                            f"{MAX_POLICY_PREFIXES:,}; use fewer tokens or a smaller vocabulary")
    law = np.zeros((size,) * length, dtype=object if exact else np.float64)  # [V] * length
    if exact:
        law[...] = Fraction(0)
    # frontier[m]: prefix of length m (a block boundary) -> the probability that a block starts after it
    frontier: list[dict[Prefix, object]] = [dict() for _ in range(length)]
    frontier[0][()] = Fraction(1) if exact else 1.0
    for reached in frontier:
        for prefix, mass in reached.items():
            tree, verifier = _checked_choice(choose(prefix, problem), prefix)
            block = analyze(ShiftedProblem(problem, prefix), tree, verifier, method=method, need_output_law=True)
            for sequence, probability in block.output_law.items():
                grown = prefix + sequence
                if len(grown) >= length:
                    law[grown[:length]] += mass * probability
                else:
                    target = frontier[len(grown)]
                    target[grown] = target.get(grown, 0) + mass * probability
    return law


def _checked_choice(choice, prefix: Prefix) -> tuple:
    if not (isinstance(choice, (tuple, list)) and len(choice) == 2):
        raise VerispecError(f"choose({prefix}) returned {choice!r:.80}; it must return a (tree, verifier) pair")
    tree, verifier = choice
    if not isinstance(tree, (str, Drafter)) or not isinstance(verifier, (str, Verifier)):
        raise VerispecError(f"choose({prefix}) returned ({type(tree).__name__}, {type(verifier).__name__}); it must "
                            "return (a tree spec or Drafter, a verifier name or Verifier)")
    return tree, verifier


class PeekingVerifier(Verifier):
    """The negative control: a choice of the tree made after seeing p at the drafted tokens.

    Given the drawn tree with the target's conditionals at its nodes, find the smallest depth d whose drafted
    tokens include one with p(token | parent's path) < ``threshold``; cut the tree to the nodes of depth < d
    (a smaller action of the same family), and return the base rule's emission law on the cut tree (zero at the
    nodes cut away). A tree with no such token is verified whole. Valid for what the base rule is valid for,
    and lossy: the cut depends on the draws and on p at them, which no lossless rule may use to discard drafts
    (the engine reports its TV)."""

    def __init__(self, base: Verifier, threshold: float):
        if not isinstance(base, Verifier):
            raise VerispecError(f"PeekingVerifier needs a Verifier to wrap, got {type(base).__name__}")
        if isinstance(threshold, bool) or not isinstance(threshold, (int, float, Fraction)) or not 0 <= threshold <= 1:
            raise VerispecError(f"threshold must be a probability in [0, 1], got {threshold!r}")
        self.base = base
        self.threshold = threshold
        self.name = f"peeking-{base.name}"
        self.valid_for = base.valid_for

    @staticmethod
    def _kept(parent, depth, cut: int) -> list[int]:
        return [node for node in range(len(parent)) if depth[node] < cut]

    def cut_depths(self, batch: TreeBatch) -> np.ndarray:
        """[N] the depth each row is cut at (the tree's depth + 1, below every node, when nothing is cut)."""
        rows = batch.num_rows
        cut = np.full(rows, max(batch.depth) + 1, dtype=np.int64)
        for node in range(1, batch.num_nodes):
            drafted = backend.take(batch.p[:, batch.parent[node], :], batch.tokens[:, node])  # [N]
            low = np.array([value < self.threshold for value in backend.to_numpy(drafted)], dtype=bool)
            cut = np.where(low, np.minimum(cut, batch.depth[node]), cut)
        return cut

    def emission_laws(self, batch: TreeBatch):
        """law[row, node, token]: the base rule's law on each row's cut tree, [N, num_nodes, V]."""
        cuts = self.cut_depths(batch)
        out = backend.zeros((batch.num_rows, batch.num_nodes, batch.vocab_size), batch.p)
        for cut in np.unique(cuts):
            rows = np.flatnonzero(cuts == cut)
            kept = self._kept(batch.parent, batch.depth, int(cut))
            sub = _sub_batch(batch, rows, kept)
            laws = self.base.emission_laws(sub)  # [len(rows), len(kept), V]
            row_index = backend.index_array(rows, batch.tokens)
            node_index = backend.index_array(kept, batch.tokens)
            out[row_index[:, None], node_index[None, :]] = laws
        return out

    def procedure(self, tree: DraftTree, chooser: Chooser) -> tuple[int, int]:
        cut = int(tree.depth.max()) + 1
        for node in range(1, tree.num_nodes):
            if tree.p[tree.parent[node], tree.token[node]] < self.threshold:
                cut = min(cut, int(tree.depth[node]))
        kept = self._kept(tree.parent, tree.depth, cut)
        position = {node: index for index, node in enumerate(kept)}
        child_lists = _child_lists(tree, kept, position)
        q = tree.q[kept].copy()
        for index, children in enumerate(child_lists):
            if not children:
                q[index] = None if tree.exact else np.nan
        small = DraftTree.from_topology(tree.vocab_size, [-1] + [position[int(tree.parent[n])] for n in kept[1:]],
                                        [-1] + [int(tree.token[n]) for n in kept[1:]], child_lists,
                                        tree.p[kept].copy(), q)
        node, token = self.base.procedure(small, chooser)
        return kept[node], token


def _child_lists(tree: DraftTree, kept: list[int], position: dict[int, int]) -> list[tuple[int, ...]]:
    """Each kept node's ordered child list as kept positions (repeats kept: i.i.d. draws that agreed)."""
    lists = []
    for node in kept:
        children = []
        for token in tree.child_tokens[node]:
            child = next(c for c in tree.child_nodes[node] if int(tree.token[c]) == token)
            if child in position:
                children.append(position[child])
        lists.append(tuple(children))
    return lists


def _sub_batch(batch: TreeBatch, rows: np.ndarray, kept: list[int]) -> TreeBatch:
    """The rows ``rows`` of ``batch`` restricted to the nodes ``kept`` (closed under parents, in order)."""
    position = {node: index for index, node in enumerate(kept)}
    parent = tuple(-1 if batch.parent[node] < 0 else position[batch.parent[node]] for node in kept)
    child_lists = tuple(tuple(position[c] for c in batch.child_lists[node] if c in position) for node in kept)
    row_index = backend.index_array(rows, batch.tokens)
    node_index = backend.index_array(kept, batch.tokens)
    q = batch.q[row_index][:, node_index]
    leaves = [index for index, children in enumerate(child_lists) if not children]
    if leaves and not backend.is_exact(q):  # q is not defined at a leaf (NaN, as at the leaves of any batch)
        q = q.copy() if isinstance(q, np.ndarray) else q.clone()
        q[:, backend.index_array(leaves, batch.tokens)] = float("nan")
    return TreeBatch(vocab_size=batch.vocab_size, parent=parent, depth=tuple(batch.depth[node] for node in kept),
                     child_lists=child_lists, tokens=batch.tokens[row_index][:, node_index],
                     p=batch.p[row_index][:, node_index], q=q,
                     contexts=batch.contexts[row_index][:, node_index])


__all__ = ["MAX_POLICY_PREFIXES", "PeekingVerifier", "ShiftedProblem", "policy_output_law"]
