"""Whether a whole-step check can see a function read another position's row, and a problem on which it can.

A step layout (``verispec.external.step``) hands the function two models whose logits at position t are the law
after the block so far. On a context-free problem every position's law is the same (p for the target, q for the
draft), so a function that reads the logits of the wrong position (the row after the draft instead of the row
before it, an index off by one into the target's rows) reads the same numbers, and its step's law is the correct
one: such a check reads LOSSLESS whatever the offset. ``offset_blind`` says so before the check runs, and the report
states it (``offsets_visible``).

``context_twin`` builds the problem on which it is seen: the same laws at the root, rotated by one more place at
each position (``RotatedByPosition``). A function that verifies draft i against the row of position i + 1 then
verifies it against another law q' = roll(p, 1): speculative sampling against q' emits q', not p, so the offset
changes the step's law wherever p is not invariant under that rotation (shown in tests/external/test_step_context.py
at its closed form).
"""

from __future__ import annotations

import itertools

import numpy as np

from verispec.simulator.problems import ContextFreeProblem, Problem

#: What a report adds where the given problem cannot show an offset (the option that checks its twin too).
BLIND_NOTE = ("the problem is context-free up to the check's depth (every position's target and draft laws are the "
              "same), so a function that reads another position's row reads the same numbers and is not seen; "
              "--context-twin (context_twin=True) also checks a context-dependent twin of it")


def offset_blind(problem: Problem, depth: int, target=None) -> bool:
    """Whether every prefix of at most ``depth`` tokens has the root's target law and the root's draft law: then a
    function reading any position's row in place of another's reads the same numbers. ``target``: the law the step
    must keep after a prefix, where it is not the problem's own (a penalised one, ``step_penalties``)."""
    if isinstance(problem, ContextFreeProblem) and target is None:
        return True
    target = target or problem.target
    root_p, root_q = np.asarray(target(())), np.asarray(problem.draft(()))
    size = problem.vocab_size
    for length in range(1, depth + 1):
        for prefix in itertools.product(range(size), repeat=length):
            if not (np.array_equal(np.asarray(target(prefix)), root_p)
                    and np.array_equal(np.asarray(problem.draft(prefix)), root_q)):
                return False
    return True


class RotatedByPosition(Problem):
    """The twin of a context-free problem: after a prefix of d tokens the target's law is p rotated by d
    (``np.roll(p, d)``) and the draft's q rotated by d, whatever the tokens. Neighbouring positions' rows differ
    wherever p (or q) is not invariant under a rotation by one, so a function that reads the row of the position
    after (or before) the one it verifies reads another law; a rotation by V is the identity, so rows V positions
    apart are the same."""

    def __init__(self, p, q):
        self.p, self.q = np.asarray(p, dtype=np.float64), np.asarray(q, dtype=np.float64)
        self.vocab_size, self.exact, self.horizon = len(self.p), False, None

    def target(self, prefix) -> np.ndarray:
        return np.roll(self.p, len(prefix))

    def draft(self, prefix) -> np.ndarray:
        return np.roll(self.q, len(prefix))

    def state(self, prefix):
        return len(prefix) % self.vocab_size

    def log_state_count(self, length: int) -> float:
        return 0.0


def context_twin(problem: Problem) -> RotatedByPosition | None:
    """The twin of ``problem``'s root laws whose rows move with the position (``RotatedByPosition``), or None where
    a rotation by one moves neither law (p and q uniform: no problem of these laws shows an offset)."""
    p, q = np.asarray(problem.target(()), dtype=np.float64), np.asarray(problem.draft(()), dtype=np.float64)
    if np.array_equal(np.roll(p, 1), p) and np.array_equal(np.roll(q, 1), q):
        return None
    return RotatedByPosition(p, q)


__all__ = ["BLIND_NOTE", "RotatedByPosition", "context_twin", "offset_blind"]
