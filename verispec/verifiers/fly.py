"""FLy, entropy-gated deferred verification (Li et al. 2025, arXiv 2511.22972, ICLR 2026; vLLM PR #53987): lossy by
design, on a single draft path.

Token-level verification of x_1..x_K (accept x_i with probability min(1, p_i(x_i) / q_i(x_i)), p_i and q_i the laws at
x_i's parent) in which a native rejection at position i is overridden, x_i accepted, when all of these hold:

- the target's top-3 entropy at position i, -sum of p log p over its three most likely tokens (in nats, not
  renormalised), is at least ``theta``: the target is undecided there rather than confidently disagreeing;
- p_i(x_i) > 0, and a full window fits: i + W <= K (``window`` W);
- the next W positions are all accepted natively (their own coins), which is FLy's deferred check that the target
  agrees with the continuation.

The window's positions are then accepted and verification goes on at position i + W + 1; otherwise the rule stops
at x_i's parent and resamples from norm((p_i - q_i)+). Every draft accepted: the bonus token from p at the leaf. A
window longer than K - 1 drafts, or theta above log 3, never overrides: the lossless rule.

Read: vLLM PR #53987 and its predecessor #50808 (the three conditions above, the window of native acceptance
decisions, default window 6, refused there when the window is not shorter than the draft), the paper's abstract
(an entropy-level gate and a token-level deferred window) and the authors' code (AMD-AGI/FLy, fly/models/FLy.py:
``calculate_topk_entropy`` with k = 3 on the full log-softmax, the gate ``entropy >= threshold``, and the window as
the acceptance pattern (rejected, accepted x W) over the native decisions). Differences kept as the vLLM port has
them: the authors' sampled verification accepts a draft when it equals one of two target samples (the port uses
rejection sampling, as here), and their code lets no position of the last W + 1 be overridden (one position more
than "a full window fits", which is the port's wording and verispec's). Reconstructed: the default threshold (not
readable; verispec takes 0.5 nats). verispec's default window is 2, since its exact problems have short drafts and
vLLM's 6 needs at least 7.
"""

from __future__ import annotations

import math

import numpy as np

from verispec import backend
from verispec.simulator.chooser import Chooser
from verispec.simulator.distributions import ratio_min_one, residual
from verispec.simulator.drafters import DraftLaw
from verispec.simulator.interfaces import Verifier
from verispec.simulator.trees import DraftTree, TreeBatch
from verispec.verifiers.relaxed import checked_number, host, mask_like, parametrised_name

DEFAULTS = {"theta": 0.5, "window": 2}
#: FLy's gate reads the entropy of the target's three most likely tokens (vLLM #53987: "top-3 entropy").
TOP = 3


def top_entropy(p_host: np.ndarray, top: int = TOP) -> np.ndarray:
    """-sum of p log p over the ``top`` largest entries of each row of p [..., V], in nats (not renormalised, as
    FLy's ``calculate_topk_entropy``) -> [...]."""
    largest = -np.sort(-p_host, axis=-1)[..., :top]
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(largest > 0, -largest * np.log(largest), 0.0).sum(axis=-1)


def fly_gates(p_host: np.ndarray, tokens: np.ndarray, theta: float, window: int) -> np.ndarray:
    """Whether a native rejection at each position may be overridden, [N, K] host booleans, from the target laws
    at the K parents p [N, K, V] and the drafted tokens [N, K]: entropy gate, p(x) > 0, and a full window."""
    count = tokens.shape[1]
    drafted = np.take_along_axis(p_host, tokens[..., None], axis=-1)[..., 0]       # [N, K]
    fits = np.arange(1, count + 1) + window <= count                                # [K]
    return (top_entropy(p_host) >= theta) & (drafted > 0) & fits[None, :]


class FLyVerifier(Verifier):
    """``fly`` and ``fly(theta=T,window=W)``: theta >= 0 nats, W a whole number >= 1 (module docstring)."""

    summary = "FLy: a rejected draft is accepted when p is undecided (top-3 entropy >= theta) and the next W pass"
    citation = "Li et al. 2025, arXiv 2511.22972 (ICLR 2026); vLLM PR #53987"
    lossy_by_design = True
    valid_for = frozenset({DraftLaw.SINGLE_PATH})
    parameters = ("theta", "window")

    def __init__(self, theta: float = DEFAULTS["theta"], window: int = DEFAULTS["window"], name: str | None = None):
        self.theta = checked_number("fly", "theta", theta, 0.0, math.inf, open_low=False)
        self.window = checked_number("fly", "window", window, 1, 64, open_low=False, integer=True)
        self.name = name or parametrised_name("fly", {"theta": self.theta, "window": self.window}, DEFAULTS)

    def gates(self, batch: TreeBatch, nodes: list[int]) -> np.ndarray:
        """``fly_gates`` on the chain ``nodes`` of ``batch``, [N, K]."""
        p_host = host(batch.p[:, nodes[:-1]])                                       # [N, K, V]
        tokens = backend.to_numpy(batch.tokens[:, nodes[1:]]).astype(np.int64)       # [N, K]
        return fly_gates(p_host, tokens, self.theta, self.window)

    def emission_laws(self, batch: TreeBatch):
        nodes = batch.chain_nodes()
        count = len(nodes) - 1
        gates = mask_like(self.gates(batch, nodes), batch.p)                       # [N, K]
        accept = []                                                                 # a_1..a_K, each [N]
        for here, child in zip(nodes[:-1], nodes[1:]):
            token = batch.tokens[:, child]
            accept.append(backend.minimum_one(backend.take(batch.p[:, here], token) /
                                              backend.take(batch.q[:, here], token)))
        zero = backend.zeros((batch.num_rows,), batch.p[:, 0, 0])
        reach = [zero] * (count + 2)                     # reach[i]: P(position i is decided next), [N]
        reach[1] = backend.ones((batch.num_rows,), batch.p[:, 0, 0])
        laws = [backend.zeros(batch.p[:, 0].shape, batch.p) for _ in range(batch.num_nodes)]
        for i in range(1, count + 1):
            here, rejected = nodes[i - 1], reach[i] * (1 - accept[i - 1])
            reach[i + 1] = reach[i + 1] + reach[i] * accept[i - 1]
            jump = zero
            if i + self.window <= count:
                window = accept[i]
                for later in accept[i + 1:i + self.window]:
                    window = window * later
                jump = backend.where(gates[:, i - 1], window, zero)
                reach[i + self.window + 1] = reach[i + self.window + 1] + rejected * jump
            stop = rejected * (1 - jump)
            laws[here] = laws[here] + stop[:, None] * residual(batch.p[:, here], batch.q[:, here])
        laws[nodes[-1]] = laws[nodes[-1]] + reach[count + 1][:, None] * batch.p[:, nodes[-1]]
        return backend.stack(laws, axis=1)

    def procedure(self, tree: DraftTree, chooser: Chooser) -> tuple[int, int]:
        nodes = tree.chain_nodes()
        count = len(nodes) - 1
        gates = self.gates(tree.as_batch(), nodes)[0]

        def coin(i: int) -> bool:  # position i's native coin
            here, child = nodes[i - 1], nodes[i]
            return chooser.bernoulli(ratio_min_one(tree.p[here, tree.token[child]], tree.q[here, tree.token[child]]))

        i = 1
        while i <= count:
            if coin(i):
                i += 1
                continue
            if gates[i - 1] and all(coin(later) for later in range(i + 1, i + self.window + 1)):
                i += self.window + 1  # the rejection overridden, the window accepted natively
                continue
            here = nodes[i - 1]
            return here, chooser.categorical(residual(tree.p[here], tree.q[here]))
        return nodes[-1], chooser.categorical(tree.p[nodes[-1]])
