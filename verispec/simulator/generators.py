"""Synthetic problems: random ones drawn from Dirichlet laws (``random_problem``, context-dependent;
``random_context_free_problem``; ``random_markov_problem``), each from an explicit seed or numpy Generator, and
Sun et al.'s toy problem (``sun_toy_problem``).

The random generators share these knobs. ``concentration`` of the Dirichlet draws (small values give peaked laws);
``divergence`` in [0, 1] moves the draft away from the target: q = (1 - divergence) p + divergence r with r an
independent Dirichlet draw (0 gives q = p, 1 an independent draft); ``temperature`` T is applied to both laws
(p^(1/T), renormalised); ``zero_fraction`` zeroes each entry of p and of q independently with that probability (at
least one entry stays), which exercises tokens the draft never proposes and drafted tokens the target forbids.
"""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np

from verispec.errors import InvalidProblemError, describe
from verispec.simulator.problems import ContextFreeProblem, MarkovProblem, TabularProblem
from verispec.sizes import check_table_size, check_vocab_size


def _apply_temperature(probs: np.ndarray, temperature: float) -> np.ndarray:
    """p_T(x) proportional to p(x)^(1/T): the law of sampling the same logits at temperature T."""
    if temperature == 1.0:
        return probs
    powered = probs ** (1.0 / temperature)
    return powered / powered.sum()


def _sparsify(rng: np.random.Generator, probs: np.ndarray, zero_fraction: float) -> np.ndarray:
    """Set each entry to exactly zero with probability ``zero_fraction``, keeping at least one entry."""
    if zero_fraction == 0:
        return probs
    keep = rng.random(len(probs)) >= zero_fraction
    keep[rng.integers(len(probs))] = True
    kept = np.where(keep, probs, 0.0)
    return kept / kept.sum()


def _dirichlet_pair(rng: np.random.Generator, size: int, concentration: float, divergence: float,
                    temperature: float, zero_fraction: float) -> tuple[np.ndarray, np.ndarray]:
    target = rng.dirichlet(np.full(size, concentration))
    other = rng.dirichlet(np.full(size, concentration))
    draft = (1.0 - divergence) * target + divergence * other
    target = _sparsify(rng, target, zero_fraction)
    draft = _sparsify(rng, draft, zero_fraction)
    return _apply_temperature(target, temperature), _apply_temperature(draft, temperature)


def check_knobs(size: int, concentration: float, divergence: float, temperature: float, zero_fraction: float):
    """InvalidProblemError unless the knobs of the random problem generators (below) are usable."""
    if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 1:
        raise InvalidProblemError(f"vocab_size must be a positive integer, got {describe(size)}")
    check_vocab_size(int(size), "the problem generator")
    for name, value in (("concentration", concentration), ("divergence", divergence), ("temperature", temperature),
                        ("zero_fraction", zero_fraction)):
        if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
            raise InvalidProblemError(f"{name} must be a number, got {describe(value)}")
    if not (concentration > 0 and np.isfinite(concentration)):
        raise InvalidProblemError(f"concentration must be positive and finite, got {describe(concentration)}")
    if not 0.0 <= divergence <= 1.0:
        raise InvalidProblemError(f"divergence must lie in [0, 1], got {describe(divergence)}")
    if not (temperature > 0 and np.isfinite(temperature)):
        raise InvalidProblemError(f"temperature must be positive and finite, got {describe(temperature)}")
    if not 0.0 <= zero_fraction < 1.0:
        raise InvalidProblemError(f"zero_fraction must lie in [0, 1), got {describe(zero_fraction)}")


def random_problem(vocab_size: int, depth: int, seed: int | np.random.Generator, *, concentration: float = 1.0,
                   divergence: float = 0.5, temperature: float = 1.0, zero_fraction: float = 0.0) -> TabularProblem:
    """A context-dependent problem: an independent Dirichlet (target, draft) pair per prefix (knobs above).

    Conditionals are given for every prefix of length 0..depth.
    """
    check_knobs(vocab_size, concentration, divergence, temperature, zero_fraction)
    check_table_size(vocab_size, depth, "random_problem")
    rng = np.random.default_rng(seed)
    target_table, draft_table = {}, {}
    for length in range(depth + 1):
        for prefix in itertools.product(range(vocab_size), repeat=length):
            target_table[prefix], draft_table[prefix] = _dirichlet_pair(rng, vocab_size, concentration, divergence,
                                                                        temperature, zero_fraction)
    return TabularProblem(vocab_size, target_table, draft_table, horizon=depth)


def random_context_free_problem(vocab_size: int, seed: int | np.random.Generator, *, concentration: float = 1.0,
                                divergence: float = 0.5, temperature: float = 1.0,
                                zero_fraction: float = 0.0) -> ContextFreeProblem:
    """One Dirichlet pair (p, q) used at every prefix; knobs as in ``random_problem``."""
    check_knobs(vocab_size, concentration, divergence, temperature, zero_fraction)
    rng = np.random.default_rng(seed)
    return ContextFreeProblem(*_dirichlet_pair(rng, vocab_size, concentration, divergence, temperature, zero_fraction))


def random_markov_problem(vocab_size: int, seed: int | np.random.Generator, *, concentration: float = 1.0,
                          divergence: float = 0.5, temperature: float = 1.0,
                          zero_fraction: float = 0.0) -> MarkovProblem:
    """An order-1 Markov problem with Dirichlet rows; knobs as in ``random_problem``."""
    check_knobs(vocab_size, concentration, divergence, temperature, zero_fraction)
    check_vocab_size(int(vocab_size), "random_markov_problem", markov=True)
    rng = np.random.default_rng(seed)
    p0, q0 = _dirichlet_pair(rng, vocab_size, concentration, divergence, temperature, zero_fraction)
    rows = [_dirichlet_pair(rng, vocab_size, concentration, divergence, temperature, zero_fraction)
            for _ in range(vocab_size)]
    return MarkovProblem(p0, q0, np.stack([r[0] for r in rows]), np.stack([r[1] for r in rows]))


def sun_toy_problem(*, exact: bool = False) -> ContextFreeProblem:
    """Sun et al. 2024 (arXiv 2403.10444), Sec. 2: V = {a, b}, p = (1/3, 2/3), q = (2/3, 1/3)."""
    third = Fraction(1, 3)
    return ContextFreeProblem([third, 2 * third], [2 * third, third], exact=exact)
