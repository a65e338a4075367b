"""ASD, approximate speculative decoding with regret budgets (arXiv 2608.03447; transformers issue #48636, SGLang
#37101, LightLLM #1555): lossy by design, on a single draft path.

ASD relaxes greedy verification: a drafted token x_i whose local regret r_i = max_v z_i(v) - z_i(x_i) (target
logits; at temperature 1 this is log max p - log p(x_i)) is accepted while (1) the regret spent stays within a budget
B, (2) r_i / (K - i) <= g, with K the number of drafts and i = 0..K-1 the position (later positions have less
suffix value), and (3) at most m tokens are relaxed in the block. B = 0, g = 0 or m = 0 is strict verification.

verispec's sampled form: token-level verification of x_1..x_K whose native rejection (coin min(1, p/q)) at a position
is overridden, the draft accepted and its regret charged, when (1)-(3) hold for it after the charges of earlier
overrides in the block; a rejection that is not overridden stops and resamples from norm((p - q)+); every draft
accepted, the bonus token from p. B = 0, g = 0 or m = 0 is the lossless token-level rule.

Read: the issue's and the PRs' statement of the rule (regret, the three constraints, K - i, B = 0 recovering strict
verification) and the authors' reference code (Kissmetothemoon/ASD, src/asd/budget.py: the longest prefix meeting
the constraints, a 1e-9 tolerance on the budget; configs/dspark_stable.json: B = 8, g = 0.25, m = 2, verispec's
defaults). Reconstructed: the paper's text was not read; ASD is defined for greedy decoding only (its code refuses a
temperature other than 0), so the sampled form above, where only native rejections spend budget, is verispec's; the
budget is per request in ASD and per block here (a one-block law cannot carry a request's spending).
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

DEFAULTS = {"budget": 8.0, "rate": 0.25, "count": 2}
#: The reference code's tolerance on the budget (``affordable = cumulative <= remaining + 1e-9``).
BUDGET_TOLERANCE = 1e-9


def regrets(p_host: np.ndarray, tokens: np.ndarray) -> np.ndarray:
    """log max p - log p(x) at each position, [N, K] (inf where p(x) = 0), from p [N, K, V] and tokens [N, K]."""
    drafted = np.take_along_axis(p_host, tokens[..., None], axis=-1)[..., 0]
    with np.errstate(divide="ignore"):
        return np.where(drafted > 0, np.log(p_host.max(axis=-1)) - np.log(np.maximum(drafted, 1e-300)), np.inf)


class ASDVerifier(Verifier):
    """``asd`` and ``asd(budget=B,rate=R,count=C)``: B, R >= 0, C a whole number >= 0 (module docstring)."""

    summary = "ASD: a rejected draft is accepted while its regret log max p - log p(x) fits the budgets"
    citation = "arXiv 2608.03447 (2026); transformers issue #48636"
    lossy_by_design = True
    valid_for = frozenset({DraftLaw.SINGLE_PATH})
    parameters = ("budget", "rate", "count")

    def __init__(self, budget: float = DEFAULTS["budget"], rate: float = DEFAULTS["rate"],
                 count: int = DEFAULTS["count"], name: str | None = None):
        self.budget = checked_number("asd", "budget", budget, 0.0, math.inf, open_low=False)
        self.rate = checked_number("asd", "rate", rate, 0.0, math.inf, open_low=False)
        self.count = checked_number("asd", "count", count, 0, 64, open_low=False, integer=True)
        self.name = name or parametrised_name(
            "asd", {"budget": self.budget, "rate": self.rate, "count": self.count}, DEFAULTS)

    @property
    def strict(self) -> bool:
        """B = 0, g = 0 or m = 0: strict verification, nothing is relaxed."""
        return self.budget == 0 or self.rate == 0 or self.count == 0

    def allowed(self, regret: np.ndarray, position: int, length: int, spent: np.ndarray, used: np.ndarray):
        """Whether a native rejection at 0-based ``position`` of ``length`` drafts may be overridden, given the regret
        there and what the block has spent and relaxed so far (host arrays [N])."""
        if self.strict:
            return np.zeros(regret.shape, dtype=bool)
        return (np.isfinite(regret) & (regret / (length - position) <= self.rate)
                & (spent + regret <= self.budget + BUDGET_TOLERANCE) & (used + 1 <= self.count))

    def emission_laws(self, batch: TreeBatch):
        nodes = batch.chain_nodes()
        length = len(nodes) - 1
        regret = regrets(host(batch.p[:, nodes[:-1]]), backend.to_numpy(batch.tokens[:, nodes[1:]]).astype(np.int64))
        zero = backend.zeros((batch.num_rows,), batch.p[:, 0, 0])
        branches = [(backend.ones((batch.num_rows,), batch.p[:, 0, 0]), np.zeros(batch.num_rows),
                     np.zeros(batch.num_rows, dtype=np.int64))]          # (mass [N], spent [N], relaxed [N])
        laws = [backend.zeros(batch.p[:, 0].shape, batch.p) for _ in range(batch.num_nodes)]
        for position, (here, child) in enumerate(zip(nodes[:-1], nodes[1:])):
            token = batch.tokens[:, child]
            accept = backend.minimum_one(backend.take(batch.p[:, here], token) / backend.take(batch.q[:, here], token))
            stop, grown = zero, []
            for mass, spent, used in branches:
                rejected = mass * (1 - accept)
                allowed = self.allowed(regret[:, position], position, length, spent, used)
                kept = mask_like(allowed, batch.p)
                grown.append((mass * accept, spent, used))
                charged = np.where(allowed, spent + regret[:, position], spent)
                grown.append((backend.where(kept, rejected, zero), charged, used + allowed))
                stop = stop + backend.where(kept, zero, rejected)
            branches = grown
            laws[here] = laws[here] + stop[:, None] * residual(batch.p[:, here], batch.q[:, here])
        reached = zero
        for mass, _, _ in branches:
            reached = reached + mass
        laws[nodes[-1]] = laws[nodes[-1]] + reached[:, None] * batch.p[:, nodes[-1]]
        return backend.stack(laws, axis=1)

    def procedure(self, tree: DraftTree, chooser: Chooser) -> tuple[int, int]:
        nodes = tree.chain_nodes()
        length = len(nodes) - 1
        regret = regrets(host(tree.p[nodes[:-1]])[None], np.array([[tree.token[child] for child in nodes[1:]]]))[0]
        spent, used = np.zeros(1), np.zeros(1, dtype=np.int64)
        for position, (here, child) in enumerate(zip(nodes[:-1], nodes[1:])):
            token = tree.token[child]
            if chooser.bernoulli(ratio_min_one(tree.p[here, token], tree.q[here, token])):
                continue
            if self.allowed(regret[position:position + 1], position, length, spent, used)[0]:
                spent, used = spent + regret[position], used + 1  # the rejection overridden, its regret charged
                continue
            return here, chooser.categorical(residual(tree.p[here], tree.q[here]))
        return nodes[-1], chooser.categorical(tree.p[nodes[-1]])
