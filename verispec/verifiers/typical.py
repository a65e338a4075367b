"""Medusa's typical acceptance (Cai et al. 2024, "Medusa: Simple LLM Inference Acceleration Framework with
Multiple Decoding Heads", arXiv 2401.10774, Sec. 2.3.1): lossy by design.

At a node with target law p, a drafted child token x is accepted when

    p(x) > threshold(p) = min(epsilon, alpha * exp(-H(p))),    H(p) = -sum_v p(v) log(p(v) + 1e-5)

(the smoothed entropy of Medusa's code, ``evaluate_posterior``; natural logs). The draft law q is never read.
Over the whole tree, the accepted nodes are those whose every edge from the root is accepted; the rule stops at
the deepest accepted node, ties broken by the larger likelihood of its path (the sum of log p of its tokens),
then by the first node in tree order (Medusa takes the first best candidate). It then emits one token from p at
that node restricted to the tokens with p(v) >= threshold(p) and renormalised (Medusa-2's "typical" sampling of
the next token, ``get_typical_one_token``). The smoothed entropy gives exp(-H) <= max p + 1e-5 (log is
concave), so with alpha < 1 the most likely token passes unless max p < alpha 1e-5 / (1 - alpha); if no token
passes, p itself is used.

The decisions (thresholds, acceptances, the chosen node) are taken on float64 values in every mode, so float and
exact mode take the same decisions; in exact mode the emitted law is the exact renormalised rational restriction.

Medusa's shipped defaults: epsilon = 0.09 (``posterior_threshold``) and alpha = 0.3 (``posterior_alpha``,
"recommended to be sqrt(posterior_threshold)"). ``typical`` uses them; ``typical(epsilon=E,alpha=A)`` sets
them (a name that cannot be read as ``FILE.py:NAME``).
"""

from __future__ import annotations

import math

import numpy as np

from verispec import backend
from verispec.errors import UnknownVerifierError
from verispec.simulator.chooser import Chooser
from verispec.simulator.drafters import DraftLaw
from verispec.simulator.interfaces import Verifier
from verispec.simulator.trees import DraftTree, TreeBatch

#: Medusa's defaults (``medusa_generate``): posterior_threshold and posterior_alpha.
MEDUSA_EPSILON = 0.09
MEDUSA_ALPHA = 0.3
#: The smoothing inside Medusa's entropy, log(p + 1e-5).
ENTROPY_SMOOTHING = 1e-5


def _host(values) -> np.ndarray:
    """A float64 host copy (Fractions rounded), on which every decision is taken."""
    host = backend.to_numpy(values)
    return host.astype(np.float64) if host.dtype == object else host


def thresholds(p) -> np.ndarray:
    """min(epsilon, alpha exp(-H(p))) is computed by ``TypicalVerifier``; this is exp(-H(p)) per row [...]
    of p [..., V] (float64 host), with Medusa's smoothed entropy."""
    host = _host(p)
    entropy = -(host * np.log(host + ENTROPY_SMOOTHING)).sum(-1)
    return np.exp(-entropy)


class TypicalVerifier(Verifier):
    """Typical acceptance with parameters ``epsilon`` and ``alpha`` (see the module docstring)."""

    summary = "Medusa's typical acceptance: accept a draft when p(x) > min(epsilon, alpha exp(-H(p)))"
    citation = "Cai et al. 2024, arXiv 2401.10774, Sec. 2.3.1"
    #: Lossy by design: ``valid_for`` names the drafts it runs on (all: it never reads q), not a claim.
    lossy_by_design = True
    valid_for = frozenset(DraftLaw)
    #: The registry's hook for rules with parameters: ``typical(epsilon=E,alpha=A)`` is this class built with
    #: those keywords, the others taken from the registered instance (``verispec.verifiers.get_verifier``).
    parameters = ("epsilon", "alpha")

    def __init__(self, epsilon: float = MEDUSA_EPSILON, alpha: float = MEDUSA_ALPHA, name: str | None = None):
        for value, what in ((epsilon, "epsilon"), (alpha, "alpha")):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                    or not 0 < value <= 1:
                raise UnknownVerifierError(f"typical acceptance's {what} must be a number in (0, 1], got {value!r}")
        self.epsilon, self.alpha = float(epsilon), float(alpha)
        default = (self.epsilon, self.alpha) == (MEDUSA_EPSILON, MEDUSA_ALPHA)
        self.name = name or ("typical" if default else f"typical(epsilon={self.epsilon:g},alpha={self.alpha:g})")

    def threshold(self, p) -> np.ndarray:
        """min(epsilon, alpha exp(-H(p))) per row of p [..., V], float64 host [...]."""
        return np.minimum(self.epsilon, self.alpha * thresholds(p))

    def stopping_nodes(self, batch: TreeBatch) -> np.ndarray:
        """The node each row stops at [N] (host ints): the deepest node whose every edge is accepted, ties
        by the larger path likelihood, then the first in tree order."""
        p = _host(batch.p)                                     # [N, n, V]
        limit = self.threshold(p)                              # [N, n]
        tokens = backend.to_numpy(batch.tokens)                # [N, n]
        rows = np.arange(batch.num_rows)
        reached = np.zeros((batch.num_rows, batch.num_nodes), dtype=bool)  # [N, n]
        loglik = np.zeros((batch.num_rows, batch.num_nodes))   # [N, n] sum of log p along the path
        reached[:, 0] = True
        for node in range(1, batch.num_nodes):                 # a parent comes before its children
            parent = batch.parent[node]
            chance = p[rows, parent, tokens[:, node]]          # [N]
            reached[:, node] = reached[:, parent] & (chance > limit[:, parent])
            with np.errstate(divide="ignore"):
                loglik[:, node] = loglik[:, parent] + np.log(chance)
        depth = np.asarray(batch.depth)
        # lexicographic (depth, likelihood, -node): argmax over the reached nodes
        score = np.where(reached, depth[None, :], -1)
        best = score.max(axis=1, keepdims=True)
        likely = np.where(score == best, loglik, -np.inf)
        top = likely.max(axis=1, keepdims=True)
        candidates = (score == best) & (likely == top)
        return candidates.argmax(axis=1)

    def emitted_laws(self, p):
        """The law of the emitted token at nodes with target laws p [..., V]: p restricted to
        p >= threshold(p), renormalised (in the backend of p)."""
        keep = _host(p) >= self.threshold(p)[..., None]        # [..., V]
        keep |= ~keep.any(-1, keepdims=True)                   # never empty: then p itself
        if isinstance(p, np.ndarray):
            mask = keep
        else:  # a torch tensor: the mask as booleans on its device
            mask = backend.namespace(p).asarray(keep, device=backend.device(p))
        kept = backend.where(mask, p, backend.zero(p))
        return kept / backend.total(kept, keepdims=True)

    def emission_laws(self, batch: TreeBatch):
        stop = self.stopping_nodes(batch)                                   # [N]
        index = backend.index_array(stop, batch.tokens)
        at_stop = batch.p[backend.arange(batch.num_rows, batch.tokens), index]  # [N, V]
        law = self.emitted_laws(at_stop)                                     # [N, V]
        chosen = backend.one_hot(index, batch.num_nodes)                     # [N, n]
        return backend.where(chosen[:, :, None], law[:, None, :], backend.zero(batch.p))  # [N, n, V]

    def procedure(self, tree: DraftTree, chooser: Chooser) -> tuple[int, int]:
        limit = [float(v) for v in self.threshold(tree.p)]
        best, best_key = 0, (0, 0.0)
        stack = [(0, 0.0)]
        while stack:
            node, loglik = stack.pop()
            for child in tree.child_nodes[node]:
                chance = float(tree.p[node, tree.token[child]])
                if chance > limit[node]:
                    key = (tree.depth[child], loglik + math.log(chance))
                    if key > best_key or (key == best_key and child < best):
                        best, best_key = child, key
                    stack.append((child, key[1]))
        return best, chooser.categorical(self.emitted_laws(tree.p[best]))
