"""The O(V) ranking (one sort, then runs fixed up; inverse permutations by a scatter) orders exactly as the
tie rule's definition: a plain reference written here sorts the values with Python's sort, chains neighbours
within the tie gap into classes, and sorts token ids by (tier, class, id) with Python's sort. Checked on rows
with exact ties, near ties (within TIE_RTOL, chained), zeros of both signs, negatives and infinities, on numpy
float64 (small rows and rows long enough for the radix sort), Fraction objects and torch float64; and GBV's law,
which reads these rankings once per distinct context, does not depend on how contexts are shared."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from verispec import backend
from verispec.simulator.ranking import TIE_RTOL, order_with_ties, ranks_from_order, tie_classes
from verispec.simulator.selection import mass_ranked_below, rank_order
from verispec.simulator.trees import TreeBatch
from verispec.verifiers.gbv import GreedyBlockVerifier

#: Rows long enough for numpy's row-by-row path and the radix sort.
LONG = backend.LARGE_ROW + 517

ORDERINGS = [(False, False), (False, True), (True, False), (True, True)]  # (descending, larger_id_first)


def reference_classes(row: list) -> list[int]:
    """The tie class of each value of ``row`` by the module docstring's rule, in plain Python."""
    ascending = sorted(range(len(row)), key=lambda t: row[t])
    classes, current = [0] * len(row), 0
    for low, high in zip(ascending, ascending[1:]):
        a, b = row[low], row[high]
        if not (b == a or b - a <= TIE_RTOL * max(abs(a), abs(b))):
            current += 1
        classes[high] = current
    return classes


def reference_order(row: list, descending: bool, larger_id_first: bool, tier: list | None = None) -> list[int]:
    """Token ids sorted by (tier, class ascending or descending, id ascending or descending)."""
    classes = reference_classes(row)
    sign, id_sign = (-1 if descending else 1), (-1 if larger_id_first else 1)
    return sorted(range(len(row)), key=lambda t: ((tier[t] if tier else 0), sign * classes[t], id_sign * t))


def tied_row(rng: np.random.Generator, size: int, signed: bool) -> np.ndarray:
    """Values from a small set (exact ties), some nudged within the tie gap (near ties, chains of them),
    zeros of both signs, optionally negatives and infinities."""
    base = rng.choice([0.0, 1e-300, 0.05, 1 / 3, 0.5, 0.7, 2.0, 1e6], size=size)
    base = base * (1 + rng.integers(0, 4, size) * 3e-13)  # a chain: 0, 3e-13, 6e-13, 9e-13 apart (all tied)
    base[rng.random(size) < 0.1] *= 1 + 5e-12  # beyond the gap: a class of its own unless chained
    base = np.where(rng.random(size) < 0.3, rng.random(size), base)  # distinct values
    if signed:
        base = np.where(rng.random(size) < 0.3, -base, base)
        base[rng.random(size) < 0.05] = np.inf
        base[rng.random(size) < 0.05] = -np.inf
    base[rng.random(size) < 0.05] = -0.0
    return base


def to_fractions(values: np.ndarray) -> np.ndarray:
    out = np.empty(values.shape, dtype=object)
    out[...] = [[Fraction(float(v)) for v in row] for row in values.reshape(-1, values.shape[-1])]
    return out.reshape(values.shape)


@pytest.mark.filterwarnings("ignore:invalid value encountered in subtract")  # inf - inf: not tied, as documented
@pytest.mark.parametrize("size", [1, 2, 9, 60, LONG])
@pytest.mark.parametrize("seed", range(3))
def test_numpy_order_matches_the_reference(size, seed):
    rng = np.random.default_rng(seed)
    values = np.stack([tied_row(rng, size, signed=bool(seed % 2)) for _ in range(3)])  # [3, V]
    tier = rng.integers(0, 3, values.shape)
    for descending, larger_id_first in ORDERINGS:
        order = order_with_ties(values, descending=descending, larger_id_first=larger_id_first)
        tiered = order_with_ties(values, descending=descending, larger_id_first=larger_id_first, tier=tier)
        for r, row in enumerate(values.tolist()):
            assert order[r].tolist() == reference_order(row, descending, larger_id_first)
            assert tiered[r].tolist() == reference_order(row, descending, larger_id_first, tier[r].tolist())
    for r, row in enumerate(values.tolist()):
        assert tie_classes(values)[r].tolist() == reference_classes(row)


@pytest.mark.parametrize("seed", range(3))
def test_exact_order_matches_the_reference(seed):
    rng = np.random.default_rng(seed)
    values = tied_row(rng, 80, signed=False)
    exact = to_fractions(values[None])[0]
    exact[rng.random(80) < 0.2] = Fraction(1, 3)  # equal as rationals, unlike float64's 1/3 beside it
    for descending, larger_id_first in ORDERINGS:
        order = order_with_ties(exact, descending=descending, larger_id_first=larger_id_first)
        assert order.tolist() == reference_order(list(exact), descending, larger_id_first)
    assert tie_classes(exact).tolist() == reference_classes(list(exact))


@pytest.mark.parametrize("size", [40, LONG])
def test_torch_order_matches_the_reference(size):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(5)
    values = np.stack([tied_row(rng, size, signed=True) for _ in range(2)])
    tier = rng.integers(0, 2, values.shape)
    for descending, larger_id_first in ORDERINGS:
        order = order_with_ties(torch.tensor(values), descending=descending, larger_id_first=larger_id_first,
                                tier=torch.tensor(tier))
        for r, row in enumerate(values.tolist()):
            assert order[r].tolist() == reference_order(row, descending, larger_id_first, tier[r].tolist())


def test_radix_sort_is_the_stable_sort():
    rng = np.random.default_rng(1)
    values = np.concatenate([rng.normal(size=3000) * 10.0 ** rng.integers(-300, 300, 3000),
                             [np.inf, -np.inf, 5e-324, -5e-324, 0.0, 1.0, 1.0, -1.0, -1.0]])
    values = np.concatenate([values, values[:500]])  # exact ties
    rng.shuffle(values)
    assert np.array_equal(backend.radix_order(values), np.argsort(values, kind="stable"))


@pytest.mark.parametrize("size", [7, LONG])
def test_inverse_permutation_and_ranks(size):
    rng = np.random.default_rng(2)
    order = np.stack([rng.permutation(size) for _ in range(3)])  # [3, V]
    assert np.array_equal(ranks_from_order(order), np.argsort(order, axis=-1))
    values = rng.random((3, size))
    assert np.array_equal(backend.take_along_last(backend.unpermute(values, order), order), values)
    torch = pytest.importorskip("torch")
    assert ranks_from_order(torch.tensor(order)).tolist() == np.argsort(order, axis=-1).tolist()


@pytest.mark.parametrize("size", [30, LONG])
def test_mass_ranked_below_sums_the_reference_order(size):
    rng = np.random.default_rng(3)
    q = rng.random((2, size)) ** 4
    q[:, : size // 4] = q[:, size // 4: 2 * (size // 4)]  # equal draft masses: tied ratios where p is equal too
    p = np.where(rng.random((2, size)) < 0.5, q, rng.random((2, size)))
    q[0, rng.random(size) < 0.1] = 0.0  # never drafted: ranked above every drafted token
    below = mass_ranked_below(p, q)
    for r in range(2):
        ratio = [float(a / b) if b > 0 else 0.0 for a, b in zip(p[r], q[r])]
        order = reference_order(ratio, False, False, [int(not b > 0) for b in q[r]])
        assert rank_order(p, q)[r].tolist() == order
        expected, running = np.empty(size), 0.0
        for token in order:
            expected[token], running = running, running + q[r, token]
        assert np.allclose(below[r], expected, rtol=1e-13, atol=1e-15)


def iid_batch(size: int, rows: int, contexts: str, seed: int) -> TreeBatch:
    """``rows`` trees of 3 i.i.d. paths of 2 tokens over ``size`` tokens, every row from one root with tied
    ratios; context ids 'shared' (equal prefixes share one) or 'distinct' (every row and node its own)."""
    rng = np.random.default_rng(seed)
    parent, depth = (-1, 0, 1, 0, 3, 0, 5), (0, 1, 2, 1, 2, 1, 2)
    child_lists = ((1, 3, 5), (2,), (), (4,), (), (6,), ())
    laws: dict = {}

    def law(path):
        if path not in laws:
            q = rng.random(size) ** 3 + 1e-3
            q[: size // 3] = q[size // 3: 2 * (size // 3)]
            p = q * rng.choice([0.5, 1.0, 2.0], size)  # p / q takes three values up to rounding: near ties
            laws[path] = (p / p.sum(), q / q.sum(), len(laws))
        return laws[path]

    p, q = np.zeros((rows, 7, size)), np.full((rows, 7, size), np.nan)
    tokens, ids = np.full((rows, 7), -1), np.zeros((rows, 7), dtype=np.int64)
    for row in range(rows):
        firsts = rng.choice(4, 3, replace=False)  # few distinct prefixes: rows share contexts
        paths = [()] + [path for k in firsts for path in ((int(k),), (int(k), int(rng.integers(3))))]
        for node, path in enumerate(paths):
            p[row, node], q_node, ids[row, node] = law(path)
            q[row, node] = q_node if child_lists[node] else np.nan
            tokens[row, node] = path[-1] if path else -1
    if contexts == "distinct":
        ids = np.arange(rows * 7).reshape(rows, 7)
    return TreeBatch(vocab_size=size, parent=parent, depth=depth, child_lists=child_lists, tokens=tokens, p=p, q=q,
                     contexts=ids)


@pytest.mark.parametrize("size", [12, LONG])
def test_gbv_law_does_not_depend_on_shared_contexts(size):
    shared, distinct = (iid_batch(size, 6, contexts, seed=4) for contexts in ("shared", "distinct"))
    assert len(np.unique(shared.contexts[:, 0])) == 1  # the root's ranking is computed once for all rows
    law = GreedyBlockVerifier().emission_laws(shared)
    assert np.array_equal(law, GreedyBlockVerifier().emission_laws(distinct))
    assert np.allclose(law.sum(axis=(1, 2)), 1.0, rtol=0, atol=1e-12)
    pytest.importorskip("torch")
    assert np.allclose(GreedyBlockVerifier().emission_laws(shared.to_torch()).numpy(), law, rtol=1e-12, atol=1e-15)
