"""Node kernels enumerated over the drafted tokens only: equal to the sum over every ordered draw list of the
vocabulary (a plain loop here), sized by the drafted tokens before any work, and refused when even they are
too many. Before, iid:4,1 at V = 51 built every one of 51^4 lists with a [lists, 4, V] one-hot (13.8 GB)."""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np
import pytest

from verispec import backend
from verispec.errors import ProblemTooLargeError
from verispec.simulator import analyze, parse_tree
from verispec.simulator.dp import MAX_KERNEL_TUPLE_ENTRIES, check_walk_size, enumerated_node_kernels
from verispec.simulator.problems import ContextFreeProblem, TabularProblem
from verispec.verifiers import REGISTRY

ENUMERATED = ["khisti", "globalres"]  # solvers without closed-form kernels


def _rows(size: int, drafted: int, rows: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """p with full support; q on the first ``drafted`` tokens only, one row on fewer still."""
    rng = np.random.default_rng(seed)
    p = rng.dirichlet(np.full(size, 0.7), rows)
    q = np.zeros((rows, size))
    q[:, :drafted] = rng.dirichlet(np.full(drafted, 0.7), rows)
    q[0, 1] = 0.0
    return p, q / q.sum(1, keepdims=True)


def _kernels_by_loop(solver, p, q, draws):
    """stop [U, V] and moves [U, V, n] from every one of the V^n ordered lists, one list at a time."""
    count, size = p.shape
    stop, moves = np.zeros((count, size)), np.zeros((count, size, draws))
    for node in range(count):
        for children in itertools.product(range(size), repeat=draws):
            weight = np.prod([q[node, token] for token in children])
            if weight == 0:
                continue
            law = np.asarray(solver.output_laws(p[node:node + 1], q[node:node + 1], np.array([children])))[0]
            for token in range(size):
                drawn = children.count(token)
                if drawn:
                    moves[node, token, drawn - 1] += weight * law[token]
                else:
                    stop[node, token] += weight * law[token]
    return stop, moves


@pytest.mark.parametrize("name", ENUMERATED)
@pytest.mark.parametrize("draws", [1, 2, 3])
def test_kernels_over_the_drafted_tokens_equal_the_sum_over_every_list(name, draws):
    solver = REGISTRY[name].node_solver
    p, q = _rows(size=6, drafted=4, rows=3, seed=draws)
    stop, moves = _kernels_by_loop(solver, p, q, draws)
    kernels = enumerated_node_kernels(solver, p, q, draws)
    np.testing.assert_allclose(np.stack([k.stop for k in kernels]), stop, rtol=0, atol=1e-12)
    np.testing.assert_allclose(np.stack([k.moves for k in kernels]), moves, rtol=0, atol=1e-12)


def _depth_one(size: int, drafted: int, seed: int, *, exact: bool = False) -> TabularProblem:
    p, q = _rows(size, drafted, rows=1, seed=seed)
    convert = (lambda row: [Fraction(v).limit_denominator(10**6) for v in row]) if exact else (lambda row: row)
    if exact:  # rationals that sum to one exactly
        p, q = ([*row[:-1], 1 - sum(row[:-1])] for row in (convert(p[0]), convert(q[0])))
    else:
        p, q = p[0], q[0]
    uniform = [Fraction(1, size)] * size if exact else np.full(size, 1 / size)
    target = {(): p, **{(t,): uniform for t in range(size)}}
    return TabularProblem(size, target, {(): q}, exact=exact, horizon=1)


@pytest.mark.parametrize("name", ENUMERATED)
def test_the_walk_equals_whole_tree_enumeration_when_few_tokens_are_drafted(name):
    problem = _depth_one(size=9, drafted=3, seed=4)
    walk = analyze(problem, "iid:3,1", REGISTRY[name], method="dp")
    whole = analyze(problem, "iid:3,1", REGISTRY[name], method="enumerate")
    assert walk.lossless and whole.lossless
    assert abs(float(walk.block_efficiency) - float(whole.block_efficiency)) < 1e-12


@pytest.mark.parametrize("name", ENUMERATED)
def test_exact_mode_enumerates_the_drafted_tokens_and_stays_lossless(name):
    problem = _depth_one(size=7, drafted=3, seed=5, exact=True)
    exact = analyze(problem, "iid:2,1", REGISTRY[name], method="dp")
    assert exact.lossless is True and isinstance(exact.block_efficiency, Fraction)
    floats = analyze(_depth_one(size=7, drafted=3, seed=5), "iid:2,1", REGISTRY[name], method="dp")
    assert abs(float(exact.block_efficiency) - float(floats.block_efficiency)) < 1e-5  # rationals rounded to 1e-6


def test_the_size_check_counts_drafted_tokens_and_refuses_a_full_support_on_one_line():
    branching = parse_tree("iid:4,1").iid_branching
    solver = REGISTRY["khisti"].node_solver
    narrow = _depth_one(size=51, drafted=20, seed=1)
    assert narrow.draft_support_bound() == 19  # tokens 0, 2..19: _rows zeroes token 1 in its first row
    check_walk_size(51, branching, "metrics", solver, problem=narrow)  # 19^4 x 51 = 6.6e6 entries
    wide = ContextFreeProblem(np.full(51, 1 / 51), np.full(51, 1 / 51))
    assert 51 ** 4 * 51 > MAX_KERNEL_TUPLE_ENTRIES
    with pytest.raises(ProblemTooLargeError) as refused:
        check_walk_size(51, branching, "metrics", solver, problem=wide)
    message = str(refused.value)
    assert "\n" not in message and "s = 51 drafted tokens" in message and "fewer paths" in message
    with pytest.raises(ProblemTooLargeError):
        analyze(wide, "iid:4,1", REGISTRY["khisti"])


def test_a_real_support_sized_analysis_runs_where_it_was_refused_or_ran_out_of_memory():
    problem = _depth_one(size=51, drafted=12, seed=2)
    result = analyze(problem, "iid:4,1", REGISTRY["globalres"])
    assert result.lossless and 1 < float(result.block_efficiency) <= 2


@pytest.mark.parametrize("module", ["numpy", "torch"])
def test_counts_equal_a_bincount_of_each_row(module):
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, 7, size=(50, 4))
    expected = np.stack([np.bincount(row, minlength=7) for row in tokens])
    if module == "torch":
        torch = pytest.importorskip("torch")
        result = backend.counts(torch.as_tensor(tokens), 7).numpy()
    else:
        result = backend.counts(tokens, 7)
    np.testing.assert_array_equal(result, expected)


@pytest.mark.parametrize("name", ENUMERATED)
def test_nodes_drafting_different_tokens_each_enumerate_their_own(name, monkeypatch):
    """Two nodes with disjoint drafted tokens: each kernel equals the loop over every list (the size check
    counts one node's drafted tokens, so no node may enumerate the union's lists)."""
    solver = REGISTRY[name].node_solver
    p, q = _rows(size=6, drafted=3, rows=2, seed=9)
    q[1] = np.roll(q[1], 3)  # tokens 3-5 for the second node, 0-2 for the first
    stop, moves = _kernels_by_loop(solver, p, q, 2)
    import verispec.simulator.dp as dp

    enumerated, original = [], dp._draw_tuples
    monkeypatch.setattr(dp, "_draw_tuples", lambda tokens, count: enumerated.append(len(tokens)) or
                        original(tokens, count))
    kernels = enumerated_node_kernels(solver, p, q, 2)
    assert max(enumerated) <= max(np.count_nonzero(row) for row in q)  # never the union of the nodes' tokens
    np.testing.assert_allclose(np.stack([k.stop for k in kernels]), stop, rtol=0, atol=1e-12)
    np.testing.assert_allclose(np.stack([k.moves for k in kernels]), moves, rtol=0, atol=1e-12)
