"""Dynamic programming for top-down walks of node-local solvers on i.i.d.-structured draft trees.

Whole-tree enumeration costs V^(draws) outcomes. For a top-down walk (reference, "Trees") the law
factorises (DESIGN.md, "Scale"): a node with context u reached by m i.i.d. paths gets a child list of
n = m * b_(depth+1) i.i.d. draws from q(.|u), and the subtree under a child t drawn k times depends only on
(u t, k). So the walk is a Markov chain on states (context, multiplicity):

    R(root, 1) = 1;
    at (u, m) with n draws, for every ordered draw tuple c (probability Q(c) = prod q(c_i | u)) and the
    solver's output law K(. | c):   emit u y  with mass R(u, m) Q(c) K(y | c) for y not in c,
                                    move to (u t, count_t(c)) with mass R(u, m) Q(c) K(t | c) for t in c;
    at a leaf (depth L) emit u y with mass R(u, m) p(y | u).

The node kernel (stop mass per token, move mass per (token, count)) depends only on (p(.|u), q(.|u), n),
so it is memoised on (problem.state(u), n). Two modes:

* ``law``: states keyed by the full context; returns the law of the emitted block (the same ``OutputLaw``
  as whole-tree enumeration, so losslessness is still checked); memory V^(L+1).
* ``metrics``: states keyed by problem.state(u) (a representative context gives p and q); returns the law
  of tau only, so deep trees on finite-state problems (context-free, Markov) stay exact and cheap.

i.i.d.-structured drafters expose ``iid_branching`` = (b_1..b_L): chain (1,..,1); root i.i.d. (K,1,..,1);
delayed (1 x L1, K, 1 x (L2 - 1)); branch-iid (b_1..b_D).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from verispec.simulator.distributions import zeros
from verispec.simulator.problems import Problem


@dataclass(frozen=True)
class NodeKernel:
    """One node's transition: ``stop[y]`` = P(emit y here), ``moves[(t, k)]`` = P(move to child t drawn k
    times); they sum to one."""

    stop: np.ndarray
    moves: dict


def _ordered_draws(q: np.ndarray, count: int) -> tuple[np.ndarray, np.ndarray]:
    """Every ordered tuple of ``count`` draws from the support of q, and its probability."""
    support = [token for token in range(len(q)) if q[token] > 0]
    tuples = np.array(list(itertools.product(support, repeat=count)), dtype=np.int64).reshape(-1, count)
    probabilities = np.prod(q[tuples], axis=1) if count else np.ones(1, dtype=q.dtype)
    return tuples, probabilities


def output_laws(solver, p: np.ndarray, q: np.ndarray, tuples: np.ndarray) -> np.ndarray:
    """The solver's output law for every child tuple, [num_tuples, V] (batched when the solver offers it)."""
    batched = getattr(solver, "output_laws", None)
    if batched is not None:
        return batched(p, q, tuples)
    return np.stack([solver.output_law(p, q, tuple(int(t) for t in row)) for row in tuples])


def node_kernel(solver, p: np.ndarray, q: np.ndarray, draws: int) -> NodeKernel:
    """Sum the solver's behaviour over every ordered tuple of ``draws`` i.i.d. children."""
    tuples, probabilities = _ordered_draws(q, draws)
    laws = output_laws(solver, p, q, tuples)  # [T, V]
    size = len(p)
    counts = np.zeros((len(tuples), size), dtype=np.int64)
    for column in range(draws):
        np.add.at(counts, (np.arange(len(tuples)), tuples[:, column]), 1)
    weighted = laws * probabilities[:, None]  # [T, V]
    stop = (weighted * (counts == 0)).sum(axis=0)
    moves = {}
    for count in range(1, draws + 1):
        mass = (weighted * (counts == count)).sum(axis=0)
        for token in range(size):
            if mass[token] != 0:
                moves[(token, count)] = mass[token]
    return NodeKernel(stop=stop, moves=moves)


@dataclass(frozen=True, eq=False)
class WalkLaw:
    """Result of the walk DP: ``emitted[l - 1]`` (law mode; else None) and ``tau_law`` (both modes)."""

    emitted: tuple[np.ndarray, ...] | None
    tau_law: list
    num_states: int
    num_kernels: int


def walk_dp(problem: Problem, branching: tuple[int, ...], solver, *, mode: str = "law",
            kernel_cache: dict | None = None) -> WalkLaw:
    """Exact law of the top-down walk of ``solver`` on trees with i.i.d. branching ``branching``.

    ``kernel_cache`` may be shared between calls on the same problem and solver (e.g. across tree shapes).
    """
    if mode not in ("law", "metrics"):
        raise ValueError(f"mode must be 'law' or 'metrics', got {mode!r}")
    depth = len(branching)
    size, exact = problem.vocab_size, problem.exact
    cache = {} if kernel_cache is None else kernel_cache
    emitted = [zeros((size,) * length, exact=exact) for length in range(1, depth + 2)] if mode == "law" else None
    tau_law = [0 * problem.target(())[0] for _ in range(depth + 1)]
    # level: key -> [representative context, multiplicity, mass]; key is (context or state, multiplicity)
    level = {((), 1): [(), 1, 1 + 0 * problem.target(())[0]]}
    states = 0
    for d in range(depth + 1):
        next_level: dict = {}
        for context, multiplicity, mass in level.values():
            states += 1
            if d == depth:
                if emitted is not None:
                    emitted[d][context] += mass * problem.target(context)
                tau_law[d] += mass
                continue
            draws = multiplicity * branching[d]
            key = (problem.state(context), draws)
            kernel = cache.get(key)
            if kernel is None:
                kernel = cache[key] = node_kernel(solver, problem.target(context), problem.draft(context), draws)
            if emitted is not None:
                emitted[d][context] += mass * kernel.stop
            tau_law[d] += mass * kernel.stop.sum()
            for (token, count), move in kernel.moves.items():
                child = context + (token,)
                child_key = (child if mode == "law" else problem.state(child), count)
                entry = next_level.get(child_key)
                if entry is None:
                    next_level[child_key] = [child, count, mass * move]
                else:
                    entry[2] = entry[2] + mass * move
        level = next_level
    return WalkLaw(emitted=None if emitted is None else tuple(emitted), tau_law=tau_law, num_states=states,
                   num_kernels=len(cache))
