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
so it is memoised on (problem.state(u), n). Everything is batched with arrays: per depth, the new kernels
come from ONE call of the solver's batched law over all (kernel, ordered draw tuple) pairs (in chunks of
at most ``KERNEL_CHUNK_ROWS`` rows), and the states of the depth move to the next as array operations, so
the Python cost is per distinct context, not per (context, multiplicity, draw tuple). Two modes:

* ``law``: states keyed by the full context; returns the law of the emitted block (the same ``OutputLaw``
  as whole-tree enumeration, so losslessness is still checked); memory V^(L+1).
* ``metrics``: states keyed by problem.state(u) (a representative context gives p and q); returns the law
  of tau only, so deep trees on finite-state problems (context-free, Markov) stay exact and cheap.

i.i.d.-structured drafters expose ``iid_branching`` = (b_1..b_L): chain (1,..,1); root i.i.d. (K,1,..,1);
delayed (1 x L1, K, 1 x (L2 - 1)); branch-iid (b_1..b_D). Sizes are checked before any work:
``check_walk_size`` refuses a walk whose single node kernel or output law would not fit.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np
from tqdm import tqdm

from verispec import backend, budget
from verispec.errors import ProblemTooLargeError
from verispec.simulator.interfaces import NodeSolver
from verispec.simulator.problems import Problem

#: Rows (kernel, draw tuple) handed to the solver at once; bounds the DP's working memory. Chunks of a few
#: MB stay in cache: 2^15 rows ran the Markov benchmark (V = 16) in 0.55 s where 2^18 took 0.85 s.
KERNEL_CHUNK_ROWS = 1 << 15

#: Largest number of ordered draw tuples of one node kernel (V^n) the DP accepts: beyond it one kernel
#: alone means billions of solver evaluations (e.g. n = 4 draws at V = 200: 1.6e9 tuples).
MAX_KERNEL_TUPLES = 1 << 24

#: Largest output law (entries over all block lengths) the 'law' mode builds (8 bytes each in float64).
MAX_LAW_MODE_ENTRIES = 1 << 28


@dataclass(frozen=True, eq=False)
class NodeKernel:
    """One node's transition: ``stop[y]`` = P(emit y here) [V], ``moves[t, k - 1]`` = P(move to child t drawn
    k times) [V, n]; together they sum to one."""

    stop: np.ndarray
    moves: np.ndarray


@dataclass(frozen=True, eq=False)
class WalkLaw:
    """Result of the walk DP: ``emitted[l - 1]`` (law mode; else None) and ``tau_law`` (both modes)."""

    emitted: tuple[np.ndarray, ...] | None
    tau_law: list
    num_states: int
    num_kernels: int


def max_draws(branching: tuple[int, ...]) -> int:
    """Most i.i.d. draws one node can receive: every path through it agrees, so b_1 b_2 .. b_(d+1)."""
    most, reached = 0, 1
    for factor in branching:
        most = max(most, reached * factor)
        reached = min(reached * factor, 1 << 62)
    return most


def check_walk_size(size: int, branching: tuple[int, ...], mode: str, solver: NodeSolver | None = None) -> None:
    """ProblemTooLargeError before any work when one node kernel (V^n ordered draw tuples for the most
    draws n at a node, unless ``solver`` has a closed-form kernel) or, in law mode, the output law
    (V + V^2 + .. + V^(L+1) entries) is too large."""
    draws = max_draws(branching)
    log_tuples = draws * math.log(size) if draws else 0.0
    closed_form = solver is not None and solver.has_sequential_tests
    if log_tuples > math.log(MAX_KERNEL_TUPLES) and not closed_form:
        raise ProblemTooLargeError(
            f"the walk DP needs the solver's output law for every ordered list of the n = {draws} i.i.d. draws "
            f"at one node: V^n = 10^{log_tuples / math.log(10):.1f} lists at V={size}, above its limit of "
            f"{MAX_KERNEL_TUPLES:,} (about {MAX_KERNEL_TUPLES * size * 8 * 6 / 2**30:.0f} GiB of arrays); use "
            "fewer paths or a smaller vocabulary")
    if mode == "law":
        log_entries = (len(branching) + 1) * math.log(size) + math.log(size / (size - 1) if size > 1 else 2)
        if log_entries > math.log(MAX_LAW_MODE_ENTRIES):
            raise ProblemTooLargeError(
                f"the output law of a depth-{len(branching)} tree at V={size} has "
                f"10^{log_entries / math.log(10):.1f} entries, above {MAX_LAW_MODE_ENTRIES:,} "
                f"({MAX_LAW_MODE_ENTRIES * 8 / 2**30:.0f} GiB); use method 'dp-metrics' (law of tau only)")


def _draw_tuples(size: int, count: int) -> np.ndarray:
    """Every ordered tuple of ``count`` tokens, [V^count, count]."""
    return np.array(list(itertools.product(range(size), repeat=count)), dtype=np.int64).reshape(-1, count)


def node_kernels(solver: NodeSolver, p: np.ndarray, q: np.ndarray, draws: int) -> list[NodeKernel]:
    """The kernels of U nodes with ``draws`` i.i.d. children each (p, q [U, V]): in closed form for a solver
    that states its rule as sequential tests (``NodeSolver.sequential_tests``), else by enumeration of every
    ordered draw tuple (``enumerated_node_kernels``)."""
    if draws and solver.has_sequential_tests:
        stop, moves = sequential_kernels(q, *solver.sequential_tests(p, q, draws))
        return [NodeKernel(stop=stop[u], moves=moves[u]) for u in range(len(p))]
    return enumerated_node_kernels(solver, p, q, draws)


def _times_linear(coefficients: list, constant, slope) -> list:
    """The coefficients (in x) of (sum_k c_k x^k) (constant + slope x); arrays elementwise."""
    product = [coefficients[0] * constant]
    for k in range(1, len(coefficients)):
        product.append(coefficients[k] * constant + coefficients[k - 1] * slope)
    product.append(coefficients[-1] * slope)
    return product


def sequential_kernels(q, accept: list, final):
    """Node kernels of a rule that tests n i.i.d. drafts one by one (``NodeSolver.sequential_tests``), summed
    over all V^n draw lists in closed form: (stop [U, V], moves [U, V, n]).

    The output is t with t drawn k times exactly when either (a) draft j is t and is accepted, the j - 1
    drafts before it were rejected with k_1 of them equal to t, and the n - j after it (never examined,
    plain draws from q) hold k - 1 - k_1 more t's; or (b) all n drafts are rejected, k of them being t, and
    the final law gives t. Because the tests' laws do not depend on which tokens were rejected, the count of
    t among rejected drafts is a sum of independent steps: step i rejects a t with probability
    rho_i(t) = q(t) - accept_i(t) and rejects another token with probability sum(rho_i) - rho_i(t). So for
    each token the count's generating function is a product of linear factors:

        moves[t, k - 1] = sum_j accept_j(t) [x^(k-1)] prod_(i<j) ((sum rho_i - rho_i(t)) + rho_i(t) x)
                                                      * ((1 - q(t)) + q(t) x)^(n - j)
                          + final(t) [x^k] prod_(i<=n) ((sum rho_i - rho_i(t)) + rho_i(t) x),
        stop[t]         = final(t) [x^0] prod_(i<=n) (...).

    O(n^3 V) work; the same +, -, * on every backend (exact rationals stay exact)."""
    draws = len(accept)
    ones = q * 0 + 1
    suffix = [[ones]]                       # suffix[m]: coefficients of ((1 - q) + q x)^m, each [U, V]
    for _ in range(1, draws):
        suffix.append(_times_linear(suffix[-1], 1 - q, q))
    moves = [q * 0 for _ in range(draws)]   # moves[k - 1]: [U, V]
    rejected_so_far = [ones]                # coefficients: drafts so far all rejected, k of them being t
    for j, accepted in enumerate(accept):
        after = suffix[draws - 1 - j]
        for before_count, before in enumerate(rejected_so_far):
            for after_count, later in enumerate(after):
                moves[before_count + after_count] = moves[before_count + after_count] + accepted * before * later
        rejected = q - accepted                                            # draft j is t and rejected
        others = backend.total(rejected, keepdims=True) - rejected          # draft j is another token, rejected
        rejected_so_far = _times_linear(rejected_so_far, others, rejected)
    stop = final * rejected_so_far[0]
    for k in range(1, draws + 1):
        moves[k - 1] = moves[k - 1] + final * rejected_so_far[k]
    return stop, backend.stack(moves, axis=-1)


def enumerated_node_kernels(solver: NodeSolver, p: np.ndarray, q: np.ndarray, draws: int) -> list[NodeKernel]:
    """The kernels of U nodes with ``draws`` i.i.d. children each (p, q [U, V]): the solver's output law
    summed over every ordered draw tuple, one batched solver call per chunk of (node, tuple) rows."""
    count, size = len(p), p.shape[1]
    stop = backend.zeros((count, size), p)
    moves = backend.zeros((count, size, draws), p)
    if draws == 0:
        return [NodeKernel(stop=p[u], moves=moves[u]) for u in range(count)]
    tuples = _draw_tuples(size, draws)                                   # [T, n]
    probability = q[:, tuples[:, 0]]
    for column in range(1, draws):
        probability = probability * q[:, tuples[:, column]]               # [U, T]
    counts = backend.counts(tuples, size)                                 # [T, V]
    # flat index of (token, times drawn) in a kernel table [V, n + 1], per tuple: [T, V]
    within = np.arange(size) * (draws + 1) + counts
    node_of, tuple_of = np.nonzero(probability != 0)                     # row-major: sorted by node
    for start in range(0, len(node_of), KERNEL_CHUNK_ROWS):
        budget.check("the walk DP")
        nodes, which = node_of[start:start + KERNEL_CHUNK_ROWS], tuple_of[start:start + KERNEL_CHUNK_ROWS]
        laws = solver.output_laws(p[nodes], q[nodes], tuples[which])   # [R, V]
        weighted = laws * probability[nodes, which][:, None]
        if weighted.dtype == object:  # exact rationals: no bincount for objects
            drawn = counts[which]                                        # [R, V]: how often each token is drawn
            segments = np.flatnonzero(np.r_[True, nodes[1:] != nodes[:-1]])
            targets = nodes[segments]
            stop[targets] += np.add.reduceat(np.where(drawn == 0, weighted, 0), segments)
            for k in range(1, draws + 1):
                moves[targets, :, k - 1] += np.add.reduceat(np.where(drawn == k, weighted, 0), segments)
        else:  # one pass: mass of (node, token, times drawn), the last index 0 meaning "not drawn: stop"
            index = nodes[:, None] * (size * (draws + 1)) + within[which]
            table = np.bincount(index.ravel(), weights=weighted.ravel(), minlength=count * size * (draws + 1))
            table = table.reshape(count, size, draws + 1)
            stop += table[:, :, 0]
            moves += table[:, :, 1:]
    return [NodeKernel(stop=stop[u], moves=moves[u]) for u in range(count)]


def walk_dp(problem: Problem, branching: tuple[int, ...], solver: NodeSolver, *, mode: str = "law",
            kernel_cache: dict | None = None, progress: bool = False) -> WalkLaw:
    """Exact law of the top-down walk of ``solver`` on trees with i.i.d. branching ``branching``.

    ``kernel_cache`` may be shared between calls on the same problem and solver (e.g. across tree shapes).
    """
    if mode not in ("law", "metrics"):
        raise ValueError(f"mode must be 'law' or 'metrics', got {mode!r}")
    size, depth = problem.vocab_size, len(branching)
    check_walk_size(size, branching, mode, solver)
    cache = {} if kernel_cache is None else kernel_cache
    root = problem.target(())
    number = type(root[0])
    dtype = object if problem.exact else np.float64
    emitted = ([np.zeros(size ** length, dtype=dtype) for length in range(1, depth + 2)]
               if mode == "law" else None)
    if emitted is not None and problem.exact:
        for array in emitted:
            array[...] = number(0)
    tau_law = [0 * root[0] for _ in range(depth + 1)]
    # Distinct contexts of the current depth: representative prefixes (and flat indices in law mode); the
    # states are (context index, multiplicity) with their reach mass.
    prefixes: list[tuple[int, ...]] = [()]
    flat = np.zeros(1, dtype=np.int64)
    context = np.zeros(1, dtype=np.int64)
    multiplicity = np.ones(1, dtype=np.int64)
    mass = np.array([1 + 0 * root[0]], dtype=dtype)
    states = 0
    for d in tqdm(range(depth + 1), desc="walk DP depths", disable=not progress, leave=False):
        budget.check("the walk DP")
        if len(mass) == 0:  # every walk has stopped above this depth
            break
        states += len(mass)
        if d == depth:
            tau_law[d] = tau_law[d] + mass.sum()
            if emitted is not None:
                targets = np.array([problem.target(prefixes[c]) for c in range(len(prefixes))], dtype=dtype)
                np.add.at(emitted[d], (flat[context][:, None] * size + np.arange(size)).ravel(),
                          (mass[:, None] * targets[context]).ravel())
            break
        draws = multiplicity * branching[d]
        stop, moves = _kernels_for(problem, solver, cache, prefixes, context, draws)  # [S, V], [S, V, most]
        most = moves.shape[2]
        stop_mass = mass[:, None] * stop
        tau_law[d] = tau_law[d] + stop_mass.sum()
        if emitted is not None:
            np.add.at(emitted[d], (flat[context][:, None] * size + np.arange(size)).ravel(), stop_mass.ravel())
        move_mass = mass[:, None, None] * moves                                   # [S, V, most]
        state_of, token_of, count_of = np.nonzero(move_mass != 0)
        # children: (context, token) -> next context index; (next context, count) -> next state
        parent_context = context[state_of]
        pair = parent_context * size + token_of
        pairs, pair_index = np.unique(pair, return_inverse=True)
        next_prefixes, next_flat, child_of_pair = _child_contexts(problem, mode, prefixes, flat, pairs, size)
        key = child_of_pair[pair_index] * (most + 1) + count_of + 1
        keys, key_index = np.unique(key, return_inverse=True)
        new_mass = np.zeros(len(keys), dtype=dtype)
        if problem.exact:
            new_mass[...] = number(0)
        np.add.at(new_mass, key_index, move_mass[state_of, token_of, count_of])
        prefixes, flat = next_prefixes, next_flat
        context, multiplicity, mass = keys // (most + 1), keys % (most + 1), new_mass
    shaped = None if emitted is None else tuple(array.reshape((size,) * (length + 1))
                                                for length, array in enumerate(emitted))
    return WalkLaw(emitted=shaped, tau_law=tau_law, num_states=states, num_kernels=len(cache))


def _padded(moves: np.ndarray, most: int) -> np.ndarray:
    """moves [V, n] padded with zeros to [V, most]."""
    if moves.shape[1] == most:
        return moves
    pad = np.zeros((moves.shape[0], most - moves.shape[1]), dtype=moves.dtype)
    if moves.dtype == object:
        pad[...] = 0 * moves.flat[0] if moves.size else 0
    return np.concatenate([moves, pad], axis=1)


def _kernels_for(problem: Problem, solver: NodeSolver, cache: dict, prefixes: list, context: np.ndarray,
                 draws: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(stop [S, V], moves [S, V, max draws]) of every state (context index, draws), from the kernel cache;
    the missing kernels are computed in one batch per number of draws n."""
    pairs, pair_of_state = np.unique(context * (int(draws.max()) + 1) + draws, return_inverse=True)
    most = int(draws.max()) + 1
    keys = [(problem.state(prefixes[pair // most]), pair % most) for pair in pairs.tolist()]
    missing: dict[int, dict] = {}
    for (state, n), pair in zip(keys, pairs.tolist()):
        if (state, n) not in cache:
            missing.setdefault(n, {}).setdefault(state, pair // most)
    dtype = object if problem.exact else np.float64
    for n, by_state in missing.items():
        states = list(by_state)
        contexts = [prefixes[by_state[state]] for state in states]
        p = np.array([problem.target(prefix) for prefix in contexts], dtype=dtype)
        q = np.array([problem.draft(prefix) for prefix in contexts], dtype=dtype)
        for state, kernel in zip(states, node_kernels(solver, p, q, n)):
            cache[(state, n)] = kernel
    distinct = [cache[key] for key in keys]
    width = most - 1
    stop = np.stack([kernel.stop for kernel in distinct])                          # [P, V]
    moves = np.stack([_padded(kernel.moves, width) for kernel in distinct])         # [P, V, most draws]
    return stop[pair_of_state.reshape(-1)], moves[pair_of_state.reshape(-1)]


def _child_contexts(problem: Problem, mode: str, prefixes: list, flat: np.ndarray, pairs: np.ndarray, size: int):
    """The distinct child contexts of (context index * V + token) ``pairs``: their representative prefixes,
    flat indices, and the child index of every pair. Law mode keys children by prefix, metrics mode by
    ``problem.state`` (the first prefix seen represents the state)."""
    parent_of, token_of = pairs // size, pairs % size
    child_prefixes, child_flat, index_of, child_of_pair = [], [], {}, []
    for parent, token in zip(parent_of.tolist(), token_of.tolist()):
        prefix = prefixes[parent] + (token,)
        key = prefix if mode == "law" else problem.state(prefix)
        index = index_of.get(key)
        if index is None:
            index = index_of[key] = len(child_prefixes)
            child_prefixes.append(prefix)
            child_flat.append(int(flat[parent]) * size + token if mode == "law" else 0)
        child_of_pair.append(index)
    return child_prefixes, np.array(child_flat, dtype=np.int64), np.array(child_of_pair, dtype=np.int64)
