"""Conditionals by flat prefix index: every prefix of length 0..L gets one integer (lengths in order, then
lexicographic), so a node's context is one integer and p, q are rows of two tables."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from verispec.simulator.problems import Problem

#: Index of an absent slot or prefix.
ABSENT = -1


@dataclass(frozen=True, eq=False)
class PrefixTables:
    """p and q for every prefix of length 0..depth, indexed by the flat prefix index.

    target [num_prefixes, V]; draft [num_prefixes, V] (NaN for prefixes of length ``depth``, which are
    leaves and never draft). offsets[l] is the index of the first prefix of length l.
    """

    vocab_size: int
    depth: int
    offsets: np.ndarray
    target: np.ndarray
    draft: np.ndarray

    @classmethod
    def build(cls, problem: Problem, depth: int) -> PrefixTables:
        size = problem.vocab_size
        offsets = np.cumsum([0] + [size ** length for length in range(depth + 1)])
        target = np.empty((int(offsets[-1]), size))
        draft = np.full((int(offsets[-1]), size), np.nan)
        for length in range(depth + 1):
            for number, prefix in enumerate(problem.prefixes(length)):
                target[offsets[length] + number] = problem.target(prefix)
                if length < depth:
                    draft[offsets[length] + number] = problem.draft(prefix)
        for array in (offsets, target, draft):
            array.setflags(write=False)
        return cls(vocab_size=size, depth=depth, offsets=offsets, target=target, draft=draft)

    @property
    def num_prefixes(self) -> int:
        return int(self.offsets[-1])

    def child_index(self, index: np.ndarray, length: int, token: np.ndarray) -> np.ndarray:
        """Flat index of prefix + (token,) for prefixes of the given length (-1 where token is absent)."""
        child = self.offsets[length + 1] + (index - self.offsets[length]) * self.vocab_size + token
        return np.where(token >= 0, child, ABSENT)

    def length_of(self, index: int) -> int:
        return int(np.searchsorted(self.offsets, index, side="right")) - 1

    def prefix(self, index: int) -> tuple[int, ...]:
        """The token tuple of a flat prefix index."""
        length = self.length_of(index)
        number = index - int(self.offsets[length])
        digits = []
        for _ in range(length):
            number, digit = divmod(number, self.vocab_size)
            digits.append(digit)
        return tuple(reversed(digits))
