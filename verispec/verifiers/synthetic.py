"""Synthetic acceptance (vLLM's ``rejection_sample_method="synthetic"``, its ``synthetic_acceptance_rates``): lossy by
design, a benchmarking mode that accepts drafts at set rates whatever the target says, on a single draft path.

The rule takes the unconditional acceptance rates a_1..a_4 by position (the probability that the first i drafts are
all accepted). Draft i (1-indexed) is accepted with the conditional rate c_i = a_i / a_{i-1} (a_0 = 1; c_i = 0 where
a_{i-1} = 0, capped at 1), its own coin, never reading p or q; the first rejection stops at the draft's parent and
emits a token from norm((p - q)+) there; every draft accepted, the bonus token from p at the leaf. Drafts past the
fourth are never accepted (a_i = 0 for i > 4).

Read: vLLM 0.33's ``vllm/v1/spec_decode/utils.py:unconditional_to_conditional_rates`` (c_i = p_i / p_{i-1}, 0 where
p_{i-1} = 0), ``rejection_random_sample_kernel``'s ``SYNTHETIC_MODE`` branch (``accepted = uniform < rate`` at the
draft's position, else the recovered token, which ``sample_recovered_tokens`` draws from the residual) and
``SpeculativeConfig.synthetic_acceptance_rates`` (a rate a position). vLLM's greedy kernel emits the target's argmax
where this rule draws from the residual; at temperature 0 the residual of a point mass is that argmax.
"""

from __future__ import annotations

from verispec import backend
from verispec.simulator.chooser import Chooser
from verispec.simulator.distributions import residual
from verispec.simulator.drafters import DraftLaw
from verispec.simulator.interfaces import Verifier
from verispec.simulator.trees import DraftTree, TreeBatch
from verispec.verifiers.relaxed import checked_number, number_like, parametrised_name

#: The unconditional rates a_1..a_4 when none are given (vLLM takes them from the user; these fall by 0.2 a position).
DEFAULTS = {"a1": 0.8, "a2": 0.6, "a3": 0.4, "a4": 0.2}


def conditional_rates(unconditional: list[float]) -> list[float]:
    """c_i = min(1, a_i / a_{i-1}) with a_0 = 1, and 0 where a_{i-1} = 0 (vLLM's conversion, then the coin
    ``u < c`` of a uniform u in [0, 1), which accepts with probability min(1, c))."""
    before = [1.0, *unconditional[:-1]]
    return [min(1.0, rate / earlier) if earlier > 0 else 0.0 for rate, earlier in zip(unconditional, before)]


class SyntheticVerifier(Verifier):
    """``synthetic`` and ``synthetic(a1=..,a2=..,a3=..,a4=..)``: each a_i in [0, 1] (module docstring)."""

    summary = "Synthetic acceptance (vLLM): draft i accepted at a set rate a_i / a_(i-1), whatever p and q say"
    citation = "verispec's law of vLLM's synthetic_acceptance_rates (2026, release 0.33), for benchmarking"
    lossy_by_design = True
    valid_for = frozenset({DraftLaw.SINGLE_PATH})
    parameters = ("a1", "a2", "a3", "a4")

    def __init__(self, a1: float = DEFAULTS["a1"], a2: float = DEFAULTS["a2"], a3: float = DEFAULTS["a3"],
                 a4: float = DEFAULTS["a4"], name: str | None = None):
        values = {"a1": a1, "a2": a2, "a3": a3, "a4": a4}
        for key, value in values.items():
            setattr(self, key, checked_number("synthetic", key, value, 0.0, 1.0, open_low=False))
        self.name = name or parametrised_name("synthetic", {key: getattr(self, key) for key in values}, DEFAULTS)

    def rates(self, count: int) -> list[float]:
        """The conditional rates of positions 1..count (0 past the fourth)."""
        given = conditional_rates([self.a1, self.a2, self.a3, self.a4])
        return (given + [0.0] * count)[:count]

    def emission_laws(self, batch: TreeBatch):
        nodes = batch.chain_nodes()
        count = len(nodes) - 1
        reach = backend.ones((batch.num_rows,), batch.p[:, 0, 0])                  # P(position i is decided), [N]
        laws = [backend.zeros(batch.p[:, 0].shape, batch.p) for _ in range(batch.num_nodes)]
        for here, rate in zip(nodes[:-1], self.rates(count)):
            rate = number_like(rate, batch.p)  # a Fraction on exact arrays (the rates' exact binary values)
            laws[here] = laws[here] + (reach * (1 - rate))[:, None] * residual(batch.p[:, here], batch.q[:, here])
            reach = reach * rate
        laws[nodes[-1]] = laws[nodes[-1]] + reach[:, None] * batch.p[:, nodes[-1]]
        return backend.stack(laws, axis=1)

    def procedure(self, tree: DraftTree, chooser: Chooser) -> tuple[int, int]:
        nodes = tree.chain_nodes()
        for here, rate in zip(nodes[:-1], self.rates(len(nodes) - 1)):
            if not chooser.bernoulli(number_like(rate, tree.p)):
                return here, chooser.categorical(residual(tree.p[here], tree.q[here]))
        return nodes[-1], chooser.categorical(tree.p[nodes[-1]])
