"""Deterministic (point-mass) drafts: the drafts are a fixed function of the context, and the verifier is handed
the law that really drew them, a point mass, or a uniform law over a fixed candidate set.

N-gram and prompt-lookup drafters, EAGLE's trees verified with q = 1, and engines that pass no draft
probabilities all draft this way. ``DeterministicDrafts(problem, rule)`` is a problem whose draft conditional is
that law, so every drafter and every engine of verispec analyses it unchanged, exactly:

* ``argmax``: q'(.|u) = the point mass at the most likely token of q(.|u) (ties to the smaller id): a greedy
  draft handed q = 1. Any tree kind then drafts one token per node (i.i.d. draws from a point mass agree), so
  ``chain:L`` is the single path EAGLE or a greedy assistant proposes.
* ``ngram:N``: q'(.|u) = the point mass at the token that followed the most recent earlier occurrence of the last
  N tokens of context + u (prompt lookup, Saxena 2023; the context is the ``context`` tokens before the block),
  else at the argmax of q.
* ``top:K``: q'(.|u) = uniform over the K most likely tokens of q(.|u): with ``branch:K,...`` (K draws without
  replacement) the children are exactly those K tokens, in a uniformly random order, the static top-K trees of
  EAGLE and Medusa with the law that drew their order handed over.

The target is untouched, so "lossless" keeps its meaning: the output law of the block against p. What a
deterministic draft gives up is measured against sampled drafts from q at the same tree size.
"""

from __future__ import annotations

import math
from collections.abc import Hashable

import numpy as np

from verispec.errors import InvalidProblemError
from verispec.simulator.problems import Prefix, Problem
from verispec.simulator.ranking import top_tokens

RULES = ("argmax", "ngram:N", "top:K")


def parse_rule(text: str) -> tuple[str, int]:
    """('argmax', 1), ('ngram', N) or ('top', K) from the rule's text; a one-line error otherwise."""
    kind, _, value = str(text).strip().partition(":")
    if kind == "argmax" and not value:
        return "argmax", 1
    if kind in ("ngram", "top"):
        try:
            count = int(value)
        except ValueError:
            count = 0
        if count >= 1:
            return kind, count
    raise InvalidProblemError(f"unknown deterministic draft rule {text!r}; use one of {', '.join(RULES)} "
                              "(N, K positive integers)")


class DeterministicDrafts(Problem):
    """``base`` with its draft conditional replaced by the law of a deterministic drafter (module docstring)."""

    def __init__(self, base: Problem, rule: str, context: Prefix = ()):
        self.base = base
        self.kind, self.count = parse_rule(rule)
        self.rule = "argmax" if self.kind == "argmax" else f"{self.kind}:{self.count}"
        self.context = tuple(int(token) for token in context)
        self.vocab_size = base.vocab_size
        self.exact = base.exact
        self.horizon = base.horizon
        if self.kind == "top" and self.count > self.vocab_size:
            raise InvalidProblemError(f"top:{self.count} asks for more tokens than the vocabulary's "
                                      f"{self.vocab_size}")

    def target(self, prefix: Prefix) -> np.ndarray:
        return self.base.target(prefix)

    def _law_on(self, tokens, like: np.ndarray) -> np.ndarray:
        law = np.array([0 * like[0]] * self.vocab_size, dtype=like.dtype)  # [V], in the number system of q
        for token in tokens:
            law[token] = (1 + 0 * like[0]) / len(tokens)
        return law

    def continuation(self, prefix: Prefix) -> int | None:
        """The n-gram rule's token after ``prefix`` (None when the last N tokens occurred nowhere before)."""
        history = self.context + tuple(prefix)
        size = self.count
        if len(history) < size:
            return None
        tail = history[-size:]
        for start in range(len(history) - size - 1, -1, -1):
            if history[start:start + size] == tail:
                return history[start + size]
        return None

    def draft(self, prefix: Prefix) -> np.ndarray:
        q = self.base.draft(prefix)
        if self.kind == "top":
            return self._law_on(top_tokens(q, self.count), q)
        if self.kind == "ngram":
            token = self.continuation(prefix)
            if token is not None:
                return self._law_on([token], q)
        return self._law_on(top_tokens(q, 1), q)

    def state(self, prefix: Prefix) -> Hashable:
        # argmax and top-K are functions of q(.|prefix), so of the base's state; the n-gram rule reads the prefix
        return prefix if self.kind == "ngram" else self.base.state(prefix)

    def log_state_count(self, length: int) -> float:
        if self.kind == "ngram":
            return length * math.log(self.vocab_size)
        return self.base.log_state_count(length)
