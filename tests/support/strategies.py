"""Hypothesis strategies of random problems.

Random problems are drawn through their seed and knobs (the generators are seeded and deterministic),
so hypothesis explores vocabularies, depths, divergences, temperatures and sparsity; a failing example
prints the exact arguments that rebuild the problem.
"""

from __future__ import annotations

from hypothesis import strategies as st

from verispec.simulator import random_problem


@st.composite
def problem_args(draw, vocab=(2, 4), depth=(1, 4), max_size=512):
    """Keyword arguments of ``random_problem`` (V^depth kept below ``max_size`` prefixes)."""
    size = draw(st.integers(*vocab))
    length = draw(st.integers(*depth))
    while size ** length > max_size and length > depth[0]:
        length -= 1
    return dict(
        vocab_size=size,
        depth=length,
        seed=draw(st.integers(0, 2**32 - 1)),
        concentration=draw(st.sampled_from([0.2, 0.5, 1.0, 3.0])),
        divergence=draw(st.sampled_from([0.0, 0.2, 0.5, 0.9, 1.0])),
        temperature=draw(st.sampled_from([0.5, 1.0, 2.0])),
        zero_fraction=draw(st.sampled_from([0.0, 0.0, 0.3])),
    )


def build_problem(args: dict):
    return random_problem(**args)
