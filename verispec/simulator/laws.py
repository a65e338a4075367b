"""The law of an emitted block, and the check every verifier's emission laws must pass.

An ``OutputLaw`` is what the exact engines produce from (problem, drafter, verifier): the law of the
emitted sequence (x_1..x_tau, y). Losslessness is checked on it by the definition in docs/guides/reference.md ("What
lossless means for a block"): emit the block, then continue with the target up to L+1 tokens; the result
must have exactly the target's law over V^(L+1).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from verispec import backend
from verispec.errors import VerifierError
from verispec.simulator.problems import Problem, target_conditionals
from verispec.simulator.trees import TreeBatch

#: Largest |sum - 1| of a verifier's emission law on one tree before it is reported as broken.
EMISSION_SUM_TOLERANCE = 1e-9


@dataclass(frozen=True, eq=False)
class OutputLaw:
    """Law of the emitted block (x_1..x_tau, y). ``by_length[l - 1]`` has shape (V,)*l and holds
    P(emitted sequence = s) for every s of length l = tau + 1, for l = 1..L+1."""

    vocab_size: int
    depth: int
    by_length: tuple[np.ndarray, ...]

    def probability(self, sequence) -> float | Fraction:
        sequence = tuple(sequence)
        if not 1 <= len(sequence) <= self.depth + 1:
            return 0
        return self.by_length[len(sequence) - 1][sequence]

    def items(self):
        """(sequence, probability) for every sequence of positive probability."""
        for array in self.by_length:
            for index in zip(*np.nonzero(array != 0)):
                yield tuple(int(i) for i in index), array[index]

    def length_law(self) -> list:
        """[P(emitted length = l) for l = 1..L+1], i.e. the law of tau shifted by one."""
        return [array.sum() for array in self.by_length]

    def continued_with_target(self, problem: Problem) -> np.ndarray:
        """Law of the first L+1 tokens when the block is followed by target sampling, shape (V,)*(L+1)."""
        extended = self.by_length[0]
        for depth in range(1, self.depth + 1):
            extended = extended[..., None] * target_conditionals(problem, depth) + self.by_length[depth]
        return extended

    def __repr__(self) -> str:
        return f"OutputLaw(V={self.vocab_size}, depth={self.depth})"


def add_at(target: np.ndarray, index: np.ndarray, values) -> None:
    """target[index[n]] += values[n] for every n, repeated indices summed, in place: one bincount in float64,
    ``np.add.at`` on exact rationals (numpy arrays only: the exact engines' accumulators)."""
    if target.dtype == object:
        np.add.at(target, index, values)
    else:
        target += np.bincount(index, weights=values, minlength=len(target))


def add_blocks(flat: np.ndarray, prefix: np.ndarray, values) -> None:
    """Add block laws to one level of an output law kept flat (V^l entries, lexicographic):
    flat[prefix[n] * V + y] += values[n, y], with prefix [N] the flat index of each block's first l - 1 tokens
    and values [N, V]."""
    size = values.shape[1]
    add_at(flat, (prefix[:, None] * size + np.arange(size)).ravel(), values.ravel())


def check_stopping_masses(name: str, totals, minima, shape_of) -> None:
    """Raise VerifierError unless every tree's stopping masses form a probability law within
    EMISSION_SUM_TOLERANCE: ``totals`` and ``minima`` [T] float64, each tree's sum and least mass (many trees of
    many topologies walked at once, ``verispec.verifiers.tree_walk.forest_masses``); ``shape_of(t)`` names tree t."""
    bad = _bad_float_rows(totals, minima)
    if len(bad):
        tree = int(bad[0])
        raise VerifierError(f"verifier '{name}' emission masses on {shape_of(tree)} are not a probability law (sum "
                            f"{float(totals[tree])!r}, min {float(minima[tree])!r})")


def _bad_float_rows(totals, minima):
    """Rows whose float total is more than EMISSION_SUM_TOLERANCE from 1 or whose least entry is below
    -EMISSION_SUM_TOLERANCE (totals and minima [N] on the host)."""
    return np.flatnonzero(~(np.abs(totals - 1.0) <= EMISSION_SUM_TOLERANCE) | ~(minima >= -EMISSION_SUM_TOLERANCE))


def _refuse(name: str, what: str, batch: TreeBatch, bad, totals, minima) -> None:
    """VerifierError naming the first of the ``bad`` rows (``what`` holds '{}' for the row's tree shape)."""
    if len(bad):
        row = int(bad[0])
        raise VerifierError(f"verifier '{name}' {what.format(batch.shape(row))} not a probability law (sum "
                            f"{float(totals[row])!r}, min {float(minima[row])!r})")


def check_emission_laws(name: str, batch: TreeBatch, laws) -> None:
    """Raise VerifierError unless ``laws`` has shape [N, num_nodes, V] and every row is a probability law
    (exactly in exact mode, within EMISSION_SUM_TOLERANCE in float)."""
    expected = (batch.num_rows, batch.num_nodes, batch.vocab_size)
    shape = tuple(getattr(laws, "shape", ()))
    if shape != expected:
        raise VerifierError(f"verifier '{name}' returned emission laws of shape {shape}, expected {expected}")
    if backend.is_exact(laws):
        flat = laws.reshape(len(laws), -1)
        totals, minima = flat.sum(axis=1), np.array([min(row) for row in flat], dtype=object)
        bad = [row for row in range(len(laws)) if totals[row] != 1 or minima[row] < 0]
    else:
        # reduced where the laws live (a GPU included): only [N] totals and minima come to the host
        flat = backend.namespace(laws).reshape(laws, (expected[0], -1))
        totals, minima = (backend.to_numpy(backend.namespace(flat).sum(flat, axis=1)),
                          backend.to_numpy(backend.namespace(flat).min(flat, axis=1)))
        bad = _bad_float_rows(totals, minima)
    _refuse(name, "emission law on {} is", batch, bad, totals, minima)
