"""Certified block efficiency at any vocabulary: lower and upper bounds that must contain the exact value.

Exact enumeration stops near V = 50, but most of a draft tree's probability sits on a few prefixes. For a
node-solver verifier (a top-down walk: SpecInfer, SpecTr, NSS, naive, ...) on an i.i.d.-structured tree
(chain, iid, delayed, branch-iid: ``Drafter.iid_branching`` = b_1..b_L), the walk is the Markov chain of
``dp.walk_dp`` on states (prefix u, multiplicity m): a state at depth d gets n = m b_(d+1) ordered i.i.d.
draws c from q(.|u), with probability Q(c) = prod_i q(c_i|u); the solver's output law K(.|c) moves to the
child (u t, count_t(c)) with mass K(t|c) for each drawn t, or stops. A state's mass R(u, m) is the
probability that the walk reaches it, and

    E[tau + 1] = 1 + sum_(d=1..L) P(tau >= d),     P(tau >= d) = sum of R over the states at depth d.

This module explores the chain by mass instead of enumerating it. With a threshold h, a state is expanded
only when its (explored) mass is at least h, and at an expanded state of mass R only the ordered draw
tuples with R Q(c) >= h are evaluated (one batched solver call over them). (Both use h / (L - d) at depth d,
since mass left out at depth d widens the interval by its mass times L - d.) Everything else is *slack*:

    s_d = sum over unexpanded states at depth d of R  +  sum over expanded states at depth d of R (1 - sum_c Q(c)),

summed over the states and tuples left out. The bound argument:

* Lower: every mass that reaches a state at depth d through evaluated tuples is the probability of a set of
  draw outcomes (disjoint across parents and tuples) on which the walk passes depth d. So the explored mass
  at depth d, ``lower_d``, is at most P(tau >= d).
* Upper: every outcome not accounted for lies in the slack of some depth d' (the walk reached an unexpanded
  state there, or drew an unevaluated tuple there), and from depth d' it can reach depth d > d' at most with
  its own probability. So P(tau >= d) <= lower_d + sum_(d' < d) s_(d').
* P(tau >= d) does not increase with d, so the bounds are tightened to upper_d <= upper_(d-1) and
  lower_d >= lower_(d+1); both stay in [0, 1].

For a solver that states its rule as sequential tests (SpecInfer, SpecTr, NSS: ``NodeSolver.sequential_tests``)
an expanded state's kernel is computed in closed form over ALL draw lists (``dp.sequential_kernels``), so the
second part of the slack vanishes: the whole mass moved to depth d + 1 enters ``lower_(d+1)``, the children
with R K >= h / (L - d - 1) become states, and the others' mass is the slack of depth d + 1 (unexpanded
states). Only the likely prefixes then cost a forward pass, however flat q is.

Summed, the width of the E[tau + 1] interval is sum_d' s_d' (L - d'). ``certify`` starts at h = 0.05 (or
epsilon, if larger) and lowers h each round by the ratio of twice the width to epsilon, clamped to 4- to
16-fold, until the width is at most epsilon; the solver rows and the conditionals
(``Problem.prepare``: one batched forward pass per depth for a model-backed problem) are cached between
rounds, so each round costs only what is new. Sums are float64: the bounds hold up to float64 rounding of
sums of at most a few million terms (about 1e-12), which ``ROUNDING`` widens them by.

Whole-tree rules (bv, traversal, gbv, ...) are certified by ``certify_whole_trees``: draft outcomes are
enumerated best-first through the drafter's own ``draw`` (each categorical choice branching on its likeliest
values first), each complete tree's tau law comes from the verifier's batched ``emission_laws``, and the
unexplored draft mass R gives E[tau + 1] in [explored + R, explored + R (L + 1)]. That is only practical for
small trees; ``certify`` refuses (``ProblemTooLargeError``) when the outcome budget runs out.
"""

from __future__ import annotations

import heapq
import math
import sys
import time
from dataclasses import dataclass, field

import numpy as np
from tqdm import tqdm

from verispec.errors import AnalysisTimeoutError, ProblemTooLargeError, VerispecError
from verispec.guard import budget
from verispec.simulator.dp import MAX_WALK_OPERATIONS, ROW_OPERATIONS, check_closed_kernel_size, sequential_kernels
from verispec.simulator.interfaces import NodeSolver, Verifier
from verispec.simulator.problems import Problem
from verispec.sizes import readable_count

#: Added to every width: float64 rounding of the sums (terms in [0, 1], a few million of them at most).
ROUNDING = 1e-12

#: Most (state, draw tuple) rows one certified walk evaluates before it refuses to go on.
DEFAULT_MAX_ROWS = 2_000_000

#: States whose conditionals are asked for at once (``Problem.prepare_drafts``): a model-backed problem computes
#: them in one forward pass per model, and keeps only so many [V] laws in memory.
PREPARE_BATCH = 256

#: Solver rows evaluated per batched call (each row holds a few [V] float64 arrays).
ROW_ELEMENTS = 1 << 23

#: Replayed draft decisions the certified tree search may make (a few microseconds each, so minutes): about
#: D^2 / 2 for its first tree and D for each later one, D the draws of a tree. iid:99999,2 asked for 2 * 10^10
#: for its first tree, and iid:2000,2 8 * 10^8 over max_outcomes trees, with no estimate.
MAX_REPLAYED_DECISIONS = 10**8

#: Estimated element operations (``verispec.simulator.dp``'s cost model) of the node kernels and solver rows one
#: certified walk computes, as for the exact walk DP: branch-iid:100,100 asked for kernels of up to 10,000 draws,
#: 9 s each, at every expanded state.
MAX_CERTIFIED_OPERATIONS = MAX_WALK_OPERATIONS


@dataclass
class CertifiedResult:
    """Bounds certified to contain the exact values (see the module docstring)."""

    verifier: str
    tree: str
    #: [lower, upper] on E[tau + 1]
    lower: float
    upper: float
    #: [P(tau >= d) bounds for d = 1..L]
    acceptance_lower: list[float]
    acceptance_upper: list[float]
    epsilon: float
    #: the last threshold h (the walk) or outcomes explored (whole trees)
    threshold: float | None
    prefixes_expanded: int
    rows_evaluated: int
    forward_passes: int | None
    seconds: float
    method: str
    rounds: list[dict] = field(default_factory=list)
    #: why the width is above epsilon, when it is (the work budget ran out first)
    note: str = ""

    @property
    def width(self) -> float:
        return self.upper - self.lower

    @property
    def reached(self) -> bool:
        """Whether the width is at most epsilon (a Python bool: a numpy one is not JSON)."""
        return bool(self.width <= self.epsilon)

    def contains(self, value: float, slack: float = 0.0) -> bool:
        return self.lower - slack <= value <= self.upper + slack

    def as_dict(self) -> dict:
        return {"verifier": self.verifier, "tree": self.tree, "method": self.method, "lower": self.lower,
                "upper": self.upper, "width": self.width, "epsilon": self.epsilon, "reached": self.reached,
                "acceptance_lower": self.acceptance_lower, "acceptance_upper": self.acceptance_upper,
                "threshold": self.threshold, "prefixes_expanded": self.prefixes_expanded,
                "rows_evaluated": self.rows_evaluated, "forward_passes": self.forward_passes,
                "seconds": self.seconds, "note": self.note, "rounds": self.rounds}


def _bounds(lower: list[float], slack: list[float]) -> tuple[list[float], list[float]]:
    """P(tau >= d) bounds, d = 1..L, from explored masses lower[d] (index 0 unused) and slack by depth."""
    depth = len(lower) - 1
    lows, highs, behind = [], [], 0.0
    for d in range(1, depth + 1):
        behind += slack[d - 1]
        lows.append(min(1.0, max(0.0, lower[d] - ROUNDING)))
        highs.append(min(1.0, lower[d] + behind + ROUNDING))
    for d in range(1, depth):  # P(tau >= d) is non-increasing in d
        highs[d] = min(highs[d], highs[d - 1])
    for d in range(depth - 2, -1, -1):
        lows[d] = max(lows[d], lows[d + 1])
    return lows, highs


def _ordered_tuples(q: np.ndarray, draws: int, floor: float, limit: int) -> tuple[np.ndarray, np.ndarray]:
    """Every ordered tuple c of ``draws`` tokens with prod q(c_i) >= floor, and those products: [T, n], [T].
    Grown one position at a time: a tuple's product only shrinks as it grows, so a partial tuple below the
    floor is dropped."""
    candidates = np.flatnonzero(q >= floor)
    candidates = candidates[np.argsort(-q[candidates], kind="stable")]   # [C] by q decreasing
    values = q[candidates]
    tuples = np.zeros((1, 0), dtype=np.int64)
    mass = np.ones(1)
    for _ in range(draws):
        # partial tuple j extends by the candidates whose q keeps the product >= floor
        counts = np.searchsorted(-values, -(floor / mass), side="right")
        total = int(counts.sum())
        if total > limit:
            raise ProblemTooLargeError(f"a node would evaluate over {limit:,} ordered draw tuples of {draws} draws; "
                                       "raise epsilon or max_rows")
        parent = np.repeat(np.arange(len(mass)), counts)
        offsets = np.arange(total) - np.repeat(np.cumsum(counts) - counts, counts)
        tuples = np.concatenate([tuples[parent], candidates[offsets][:, None]], axis=1)
        mass = mass[parent] * values[offsets]
        if total == 0:
            break
    return tuples, mass


class _NodeRows:
    """The solver's acceptance probabilities K(c_i | c) per (state, draws, tuple), computed in batches and
    kept across rounds."""

    def __init__(self, solver: NodeSolver):
        self.solver = solver
        self.rows: dict[tuple, dict[bytes, np.ndarray]] = {}
        self.evaluated = 0
        self.operations = 0.0  # estimated element operations spent (_spend)

    def accept(self, key, p: np.ndarray, q: np.ndarray, tuples: np.ndarray) -> np.ndarray:
        """[T, n]: K(c_i | c) for each tuple's i-th token (the mass of moving to that child)."""
        known = self.rows.setdefault(key, {})
        keys = [row.tobytes() for row in tuples]
        missing = [index for index, k in enumerate(keys) if k not in known]
        if missing:
            _spend(self, ROW_OPERATIONS * len(p) * len(missing))
            size = len(p)
            chunk = max(1, ROW_ELEMENTS // max(size, 1))
            for start in range(0, len(missing), chunk):
                budget.check("the certified walk")
                rows = missing[start:start + chunk]
                children = tuples[rows]
                laws = self.solver.output_laws(np.broadcast_to(p, (len(rows), size)).copy(),
                                               np.broadcast_to(q, (len(rows), size)).copy(), children)  # [R, V]
                laws = np.asarray(laws, dtype=np.float64)
                picked = np.take_along_axis(laws, children, axis=1)                                   # [R, n]
                for row, values in zip(rows, picked):
                    known[keys[row]] = values
            self.evaluated += len(missing)
        return np.array([known[k] for k in keys]).reshape(len(tuples), tuples.shape[1])


class _ClosedKernels:
    """Node kernels in closed form (``NodeSolver.sequential_tests``): every draw list at once, so an expanded
    state leaves no draw tuple out. Per (state, draws) the move masses are kept sorted, down to a cutoff 2^-10
    below the one asked for, so later rounds (lower floors) seldom recompute them."""

    #: The kept entries reach this factor below the relative floor first asked for.
    HEADROOM = 1024.0

    def __init__(self, solver: NodeSolver, max_rows: int):
        self.solver = solver
        self.max_rows = max_rows
        self.kept: dict[tuple, tuple[float, float, np.ndarray, np.ndarray, np.ndarray]] = {}
        self.evaluated = 0
        self.operations = 0.0  # estimated element operations spent (_spend)

    def missing(self, state, draws: int, floor: float) -> bool:
        """Whether ``children`` at this floor must compute the kernel (it is not kept deep enough)."""
        known = self.kept.get((state, draws))
        return known is None or (known[1] > floor and known[1] > 0)

    def children(self, problem: Problem, state, prefix, draws: int, floor: float):
        """(total move mass, [(token, times drawn, move mass) for the moves >= floor]) of one state."""
        if self.missing(state, draws, floor):
            if self.evaluated >= self.max_rows:
                raise ProblemTooLargeError(f"the certified walk would compute over {self.max_rows:,} node kernels; "
                                           "raise epsilon or max_rows")
            budget.check("the certified walk")
            p, q = _float(problem.target(prefix)), _float(problem.draft(prefix))
            # top-k / top-p laws: tokens where p = q = 0 take no part in the tests (NodeSolver.sequential_tests)
            support = np.flatnonzero((p > 0) | (q > 0))                                     # [S]
            operations = check_closed_kernel_size(draws, len(support), "the certified walk")
            _spend(self, operations)
            p, q = p[support][None], q[support][None]
            _, moves = sequential_kernels(q, *self.solver.sequential_tests(p, q, draws))
            moves = np.asarray(moves, dtype=np.float64)[0]                                  # [S, n]
            cutoff = floor / self.HEADROOM if math.isfinite(floor) else math.inf
            token, count = np.nonzero(moves >= cutoff) if math.isfinite(cutoff) else (np.zeros(0, int),) * 2
            values, token = moves[token, count], support[token]
            order = np.argsort(-values, kind="stable")
            known = (float(moves.sum()), cutoff, token[order], count[order] + 1, values[order])
            self.kept[(state, draws)] = known
            self.evaluated += 1
        total, _, tokens, counts, values = self.kept[(state, draws)]
        taken = int(np.searchsorted(-values, -floor, side="right"))
        return total, list(zip(tokens[:taken].tolist(), counts[:taken].tolist(), values[:taken].tolist()))


def _spend(rows: _NodeRows | _ClosedKernels, operations: float) -> None:
    """Count a batch of kernels or rows against MAX_CERTIFIED_OPERATIONS before it is computed."""
    rows.operations += operations
    if rows.operations > MAX_CERTIFIED_OPERATIONS:
        raise ProblemTooLargeError(
            f"the certified walk would spend over 10^{math.log10(MAX_CERTIFIED_OPERATIONS):.0f} element operations "
            "on node kernels and solver rows (a few minutes of one core); raise epsilon or use fewer paths")


def _float(law) -> np.ndarray:
    return np.asarray(law, dtype=np.float64)


def _walk(problem: Problem, branching: tuple[int, ...], rows: _NodeRows | _ClosedKernels, threshold: float,
          max_rows: int,
          progress: bool) -> tuple[list[float], list[float], int]:
    """One exploration at threshold h: explored mass per depth (index 0 = 1) and slack per depth."""
    depth = len(branching)
    lower, slack = [1.0] + [0.0] * depth, [0.0] * (depth + 1)
    # states: (problem.state(prefix), multiplicity) -> [representative prefix, mass]
    states: dict[tuple, list] = {(problem.state(()), 1): [(), 1.0]}
    expanded = 0
    kernels = rows if isinstance(rows, _ClosedKernels) else None
    # never ask for more prefixes at once than a model-backed problem's law cache holds (they would be evicted)
    prepare_batch = max(1, min(PREPARE_BATCH, getattr(problem, "cache_capacity", PREPARE_BATCH)))
    for d in tqdm(range(depth), desc="certified walk depths", disable=not progress, leave=False):
        budget.check("the certified walk")
        if d > 0 and kernels is None:
            lower[d] = sum(mass for _, mass in states.values())
        elif d > 0:
            # the children's whole moved mass was added up at their parents (those left below the floor too);
            # the states kept are the ones at or above it
            slack[d] += max(0.0, lower[d] - sum(mass for _, mass in states.values()))
        # an item of mass x left out at depth d widens the interval by x (L - d): the threshold is on that
        floor = threshold / (depth - d)
        active = [(key, prefix, mass) for key, (prefix, mass) in states.items() if mass >= floor]
        slack[d] += sum(mass for _, (_, mass) in states.items() if mass < floor)
        children: dict[tuple, list] = {}
        if kernels is not None:
            next_floor = threshold / (depth - d - 1) if d + 1 < depth else math.inf
            for start in range(0, len(active), prepare_batch):
                batch = active[start:start + prepare_batch]
                # conditionals only where a kernel is missing: rounds after the first mostly reuse kernels
                problem.prepare_drafts([prefix for (state, multiplicity), prefix, mass in batch
                                        if kernels.missing(state, multiplicity * branching[d], next_floor / mass)])
                expanded += len(batch)
                for (state, multiplicity), prefix, mass in batch:
                    moved, kept = kernels.children(problem, state, prefix, multiplicity * branching[d],
                                                   next_floor / mass)
                    lower[d + 1] += mass * moved
                    for token, count, move in kept:
                        child_prefix = prefix + (token,)
                        entry = children.setdefault((problem.state(child_prefix), count), [child_prefix, 0.0])
                        entry[1] += mass * move
            states = children
            continue
        for index, ((state, multiplicity), prefix, mass) in enumerate(active):
            if index % prepare_batch == 0:  # one batched forward pass per model for the next batch of states
                problem.prepare_drafts([prefix for _, prefix, _ in active[index:index + prepare_batch]])
            expanded += 1
            draws = multiplicity * branching[d]
            p, q = _float(problem.target(prefix)), _float(problem.draft(prefix))
            tuples, chance = _ordered_tuples(q, draws, floor / mass, max_rows)
            slack[d] += mass * max(0.0, 1.0 - float(chance.sum()))
            if len(tuples) == 0:
                continue
            if rows.evaluated + len(tuples) > max_rows:
                raise ProblemTooLargeError(f"the certified walk would evaluate over {max_rows:,} (node, draw tuple) "
                                           "rows; raise epsilon or max_rows")
            accept = rows.accept((state, draws), p, q, tuples)            # [T, n]
            for tuple_row, tuple_chance, accepted in zip(tuples.tolist(), chance.tolist(), accept):
                seen: set[int] = set()
                for position, token in enumerate(tuple_row):
                    if token in seen or accepted[position] <= 0:
                        continue
                    seen.add(token)
                    child_prefix = prefix + (token,)
                    key = (problem.state(child_prefix), tuple_row.count(token))
                    entry = children.setdefault(key, [child_prefix, 0.0])
                    entry[1] += mass * tuple_chance * float(accepted[position])
        states = children
    if kernels is None:
        lower[depth] = sum(mass for _, mass in states.values())
    return lower, slack, expanded


def certify(problem: Problem, drafter, verifier: Verifier, epsilon: float, *, max_rows: int = DEFAULT_MAX_ROWS,
            max_outcomes: int = 200_000, progress: bool = False, deadline: float | None = None) -> CertifiedResult:
    """Bounds on E[tau + 1] and P(tau >= d) of ``verifier`` on trees drawn by ``drafter`` for ``problem``,
    certified to contain the exact values, of width at most ``epsilon`` (see the module docstring).

    Node-solver verifiers on i.i.d.-structured trees take the certified walk; other verifiers take the
    whole-tree best-first enumeration (small trees only). ``max_rows``, ``max_outcomes`` and ``deadline`` (a
    ``time.monotonic()`` value; or the caller's ``verispec.guard.budget``) bound the work. When the walk's rows or
    time run out after a complete round, the last round's interval is returned (still certified, wider than
    epsilon: ``reached`` is False and ``note`` says why); before that a ``ProblemTooLargeError`` or
    ``AnalysisTimeoutError`` says so. The whole-tree search returns its bounds so far at the deadline (they hold
    at any moment) and refuses past ``max_outcomes``."""
    from verispec.simulator.engine import as_drafter, as_problem, as_verifier, check_compatible, check_deadline

    problem, drafter = as_problem(problem), as_drafter(drafter)
    verifier = as_verifier(verifier)  # names are resolved a layer up: verispec.certify
    if isinstance(epsilon, bool) or not isinstance(epsilon, (int, float)) or not (0 < epsilon < math.inf):
        raise VerispecError(f"epsilon must be a positive number, got {epsilon!r}")
    for name, value in (("max_rows", max_rows), ("max_outcomes", max_outcomes)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise VerispecError(f"{name} must be a positive integer, got {value!r}")
    check_deadline(deadline)
    check_compatible(verifier, drafter)
    problem.require_depth(drafter.depth)
    drafter.check_problem(problem)
    solver = verifier.node_solver
    with budget.time_budget(deadline):
        # (a solver given only as a sampling procedure derives its rows by enumeration: exact, slow at large V)
        if solver is not None and drafter.iid_branching is not None:
            return _certify_walk(problem, drafter, verifier, float(epsilon), max_rows, progress)
        return certify_whole_trees(problem, drafter, verifier, float(epsilon), max_outcomes=max_outcomes,
                                   progress=progress)


#: Seconds per complete draft tree of the whole-tree search (best-first draws replayed from the root, the tree's
#: law, the heap): 0.5-0.7 ms measured here for traversal on chains of 8 to 12 at V = 3 (chain:10, all 59,049
#: trees, in 37 s; chain:12 refused after 200,000 trees and 147 s).
WHOLE_TREE_SECONDS = 6e-4


def estimate_certify(problem: Problem, drafter, verifier: Verifier, *, max_outcomes: int = 200_000):
    """A rough upper estimate of ``certify``'s work (``verispec.simulator.engine.AnalysisEstimate``), computed
    without building anything, for a build that checks its largest cell first: the certified walk does at most
    the exact walk's work (``estimate_analysis`` with 'dp-metrics'); the whole-tree search visits at most every
    draft outcome, and at most ``max_outcomes`` of them (at ``WHOLE_TREE_SECONDS`` each), fewer where the
    draft's mass sits on a few trees. Raises what the exact walk's size checks raise (the certified walk may
    still run: it explores by mass)."""
    from verispec.simulator.engine import AnalysisEstimate, as_drafter, estimate_analysis

    drafter = as_drafter(drafter)
    if verifier.node_solver is not None and drafter.iid_branching is not None:
        estimate = estimate_analysis(problem, drafter, verifier, "dp-metrics")
        return AnalysisEstimate("certified walk", estimate.seconds, estimate.bytes)
    trees = math.exp(min(drafter.log_num_outcomes(problem.vocab_size), math.log(max_outcomes)))
    return AnalysisEstimate("certified whole trees", WHOLE_TREE_SECONDS * trees, 0.0)


def _forward_passes(problem: Problem) -> int | None:
    return getattr(problem, "forward_passes", None)


def _certify_walk(problem, drafter, verifier, epsilon, max_rows, progress) -> CertifiedResult:
    start = time.perf_counter()
    branching = tuple(drafter.iid_branching)
    solver = verifier.node_solver
    rows = _ClosedKernels(solver, max_rows) if solver.has_sequential_tests else _NodeRows(solver)
    method = "certified walk" + (" (closed-form kernels)" if isinstance(rows, _ClosedKernels) else "")
    threshold, rounds = min(0.5, max(epsilon, 0.05)), []  # coarse first: rows are kept for later rounds
    result = None
    while True:
        try:
            lower, slack, expanded = _walk(problem, branching, rows, threshold, max_rows, progress)
        except (ProblemTooLargeError, AnalysisTimeoutError) as error:
            if result is None:
                raise
            # the last complete round's interval is certified; it is only wider than asked
            if isinstance(error, AnalysisTimeoutError):
                result.note = f"stopped at width {result.width:.3g} > epsilon {epsilon:g}: {error}"
            else:
                result.note = (f"stopped at width {result.width:.3g} > epsilon {epsilon:g}: {error}. Mass left in "
                               "draft tokens too unlikely to enumerate (a long tail of q) bounds the width; top-k "
                               "or top-p sampling removes the tail")
            result.seconds = time.perf_counter() - start
            return result
        lows, highs = _bounds(lower, slack)
        result = CertifiedResult(verifier.name, drafter.spec, 1.0 + sum(lows), 1.0 + sum(highs), lows, highs,
                                 epsilon, threshold, expanded, rows.evaluated, _forward_passes(problem),
                                 time.perf_counter() - start, method, rounds)
        rounds.append({"threshold": threshold, "width": result.width, "prefixes_expanded": expanded,
                       "rows_evaluated": rows.evaluated, "seconds": result.seconds,
                       "slack_by_depth": [float(x) for x in slack[:-1]]})
        if progress:
            passes = _forward_passes(problem)
            tqdm.write(f"round {len(rounds)}: threshold {threshold:.3g}, width {result.width:.4g} "
                       f"[{result.lower:.6f}, {result.upper:.6f}], {expanded:,} prefixes expanded"
                       + (f", {passes:,} forward passes" if passes is not None else "")
                       + f", {result.seconds:.1f} s", file=sys.stderr)
        if result.reached:
            return result
        # falls at most 16-fold a round: the work grows about as fast as the threshold falls
        threshold /= max(4.0, min(16.0, 2 * result.width / epsilon))


# --- whole trees, best first --------------------------------------------------------------------------------------

class _Replay:
    """A chooser that replays a fixed list of choices and stops at the first new one, reporting its law."""

    class Branch(Exception):
        def __init__(self, weights):
            self.weights = weights

    def __init__(self, choices: tuple[int, ...]):
        self.choices = choices
        self.position = 0

    def categorical(self, weights) -> int:
        if self.position < len(self.choices):
            choice = self.choices[self.position]
            self.position += 1
            return choice
        raise _Replay.Branch(np.asarray(weights, dtype=np.float64))

    def bernoulli(self, prob) -> bool:
        prob = float(prob)
        return self.categorical(np.array([1.0 - prob, prob])) == 1


def _check_replay_cost(drafter, max_outcomes: int) -> None:
    """ProblemTooLargeError when the whole-tree search could replay more than ``MAX_REPLAYED_DECISIONS`` draws.

    Each step replays the drafter from the root up to its next choice, so the first complete tree alone costs
    about D^2 / 2 replayed decisions, D <= max_nodes the decisions of one tree (every draw adds a node)."""
    decisions = drafter.max_nodes
    replayed = decisions * decisions / 2 + max_outcomes * decisions
    if replayed > MAX_REPLAYED_DECISIONS:
        raise ProblemTooLargeError(
            f"the certified tree search replays {drafter.spec} from the root at each of its up to {decisions:,} "
            f"draws: up to 10^{math.log10(replayed):.1f} replayed decisions ({decisions * decisions / 2:,.0f} for "
            f"its first tree, {decisions:,} for each later one of up to {max_outcomes:,}), above the limit of "
            f"10^{math.log10(MAX_REPLAYED_DECISIONS):.0f}; use a smaller tree or fewer max_outcomes, or a "
            "node-solver verifier on an i.i.d. tree (the certified walk)")


def _check_trees_needed(drafter, epsilon: float, explored: float, log_mass: float, outcomes: int, max_outcomes: int):
    """ProblemTooLargeError once the trees still needed for width ``epsilon`` (mass 1 - (epsilon - 2 ROUNDING) /
    depth, less 1e-9: a search that can finish goes on) surely pass ``max_outcomes``. ``log_mass`` bounds every
    uncounted tree's log mass: the heap's top, or ``_largest_tree_mass``. No draft (depth 0): nothing to bound."""
    if drafter.depth == 0:
        return
    needed = 1.0 - (epsilon - 2 * ROUNDING) / drafter.depth - explored - 1e-9
    log_more = math.log(needed) - log_mass if needed > 0 else -math.inf
    if log_more > math.log(max_outcomes - outcomes + 1):
        raise ProblemTooLargeError(
            f"the certified tree search of {drafter.spec} needs at least {readable_count(log_more)} more draft trees "
            f"for width {epsilon:g} (none left has probability above 10^{log_mass / math.log(10):.1f}; {outcomes:,} "
            f"so far), above the limit of {max_outcomes:,} trees; use a node-solver verifier on an i.i.d. tree, a "
            "smaller tree, a larger epsilon, or 'verispec exact' on a problem file (exact, no search)")


def _largest_tree_mass(problem: Problem, drafter) -> float:
    """Log of a bound on every draft tree's mass, before the search: max q(root)^b_1 under i.i.d. branching (b_1
    root draws from q(root)); 0 (no bound) for other drafters."""
    branching = drafter.iid_branching
    largest = float(np.max(np.asarray(problem.draft(()), dtype=np.float64))) if branching else 0.0
    return branching[0] * math.log(largest) if largest > 0 else 0.0


def _node_masses(problem: Problem, shape, verifier: Verifier) -> tuple[np.ndarray, np.ndarray]:
    """Each node's depth [n] and the mass the verifier emits at it [n] on the complete draft tree ``shape``, its
    emission laws checked first."""
    from verispec.simulator.laws import check_emission_laws
    from verispec.simulator.trees import DraftTree

    batch = DraftTree.from_shape(problem, shape).as_batch()
    laws = verifier.emission_laws(batch)
    check_emission_laws(verifier.name, batch, laws)
    return np.asarray(batch.depth), np.asarray(laws, dtype=np.float64)[0].sum(axis=-1)


def certify_whole_trees(problem: Problem, drafter, verifier: Verifier, epsilon: float, *,
                        max_outcomes: int = 200_000, progress: bool = False) -> CertifiedResult:
    """Best-first enumeration of complete draft trees (see the module docstring)."""
    start = time.perf_counter()
    depth = drafter.depth
    _check_replay_cost(drafter, max_outcomes)
    _check_trees_needed(drafter, epsilon, 0.0, _largest_tree_mass(problem, drafter), 0, max_outcomes)
    tau = np.zeros(depth + 1)
    explored = 0.0
    outcomes = 0
    # heap of (-mass, tie, choices, weights-or-None, next rank): a node is a choice prefix; its children are its
    # next categorical's values, pushed lazily one at a time in decreasing probability
    heap = [(-1.0, 0, (), None, 0)]
    tie = 1
    bar = tqdm(desc="certified trees", disable=not progress, leave=False, unit=" trees")
    note = ""
    while heap:
        if (1.0 - explored) * depth + 2 * ROUNDING <= epsilon:
            break
        try:
            budget.check("the certified tree search")
        except AnalysisTimeoutError as error:  # the bounds below hold for the trees explored so far
            note = f"stopped before reaching epsilon {epsilon:g}: {error}"
            break
        negative, _, choices, order, rank = heapq.heappop(heap)
        mass = -negative
        _check_trees_needed(drafter, epsilon, explored, math.log(max(mass, 1e-320)), outcomes, max_outcomes)
        if order is None:  # not yet replayed: run the drafter to its next choice or to a complete tree
            chooser = _Replay(choices)
            try:
                shape = drafter.draw(problem, chooser)
            except _Replay.Branch as branch:
                weights = branch.weights / branch.weights.sum()
                ranked = np.argsort(-weights, kind="stable")
                ranked = ranked[weights[ranked] > 0]
                order = (weights, ranked)
                heapq.heappush(heap, (-mass * weights[ranked[0]], tie, choices + (int(ranked[0]),), None, 0))
                tie += 1
                # the parent stays, holding the rest of its children: the mass of its next child comes first
                if len(ranked) > 1:
                    heapq.heappush(heap, (-mass * weights[ranked[1]], tie, choices, order, 1))
                    tie += 1
                continue
            outcomes += 1
            bar.update()
            if outcomes > max_outcomes:
                bar.close()
                raise ProblemTooLargeError(f"the certified tree search needs over {max_outcomes:,} draft trees for "
                                           f"width {epsilon:g}; use a node-solver verifier on an i.i.d. tree, a "
                                           "smaller tree, or a larger epsilon")
            node_depth, node_mass = _node_masses(problem, shape, verifier)              # [n], [n]
            np.add.at(tau, node_depth, mass * node_mass)
            explored += mass
            continue
        # a parent holding children: expand its rank-th child, and keep the parent for the next one
        weights, ranked = order
        parent_mass = mass / weights[ranked[rank]]
        heapq.heappush(heap, (-mass, tie, choices + (int(ranked[rank]),), None, 0))
        tie += 1
        if rank + 1 < len(ranked):
            heapq.heappush(heap, (-parent_mass * weights[ranked[rank + 1]], tie, choices, order, rank + 1))
            tie += 1
    bar.close()
    gap = max(0.0, 1.0 - explored)
    lower = [0.0] * (depth + 1)
    slack = [0.0] * (depth + 1)
    lower[0] = 1.0
    for d in range(1, depth + 1):
        lower[d] = float(tau[d:].sum())
    slack[0] = gap
    lows, highs = _bounds(lower, slack)
    return CertifiedResult(verifier.name, drafter.spec, 1.0 + sum(lows), 1.0 + sum(highs), lows, highs, epsilon,
                           None, outcomes, outcomes, _forward_passes(problem), time.perf_counter() - start,
                           "certified whole trees", note=note)


__all__ = ["CertifiedResult", "certify", "certify_whole_trees", "estimate_certify"]
