"""Dynamic programming for top-down walks of node-local solvers on i.i.d.-structured draft trees.

Whole-tree enumeration costs V^(draws) outcomes. For a top-down walk (docs/guides/reference.md, "Trees") the law
factorises: a node with context u reached by m i.i.d. paths gets a child list of
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
``check_walk_size`` refuses a walk whose single node kernel, output law, per-depth state arrays or total work
(``estimate_walk``, computed in logs from the branching, V and the problem's state count) would not fit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from tqdm import tqdm

from verispec import backend
from verispec.errors import ProblemTooLargeError
from verispec.guard import budget
from verispec.simulator.interfaces import NodeSolver
from verispec.simulator.problems import Problem
from verispec.sizes import log_add, log_prefix_count, readable_count

#: Rows (kernel, draw tuple) handed to the solver at once; bounds the DP's working memory. Chunks of a few
#: MB stay in cache: 2^15 rows ran the Markov benchmark (V = 16) in 0.55 s where 2^18 took 0.85 s.
KERNEL_CHUNK_ROWS = 1 << 15

#: Largest (ordered draw tuple, token) table of one enumerated node kernel, s^n tuples x V tokens (s the
#: drafted tokens of a node, n its draws), the DP accepts: its counts and their flat indices are arrays of that
#: many 8-byte entries (1 GiB each at the limit). iid:4,1 at V = 51 with every token drafted is 3.5e8 and
#: refused (it took 13.8 GB before the limit counted V); with 20 tokens drafted it is 8.2e6.
MAX_KERNEL_TUPLE_ENTRIES = 1 << 27

#: Largest output law (entries over all block lengths) the 'law' mode builds (8 bytes each in float64).
MAX_LAW_MODE_ENTRIES = 1 << 28

#: Largest coefficient array (draws x nodes x V) of one batch of closed-form kernels (``sequential_kernels``
#: holds about four): 512 MiB each in float64. Larger batches are split by nodes; a single node beyond it is
#: refused (n = 99,999 draws at V = 2,000 would need 1.6 GB per array).
MAX_KERNEL_ELEMENTS = 1 << 26

#: Largest array of move masses [states, V, most draws] at one depth of the walk (8 bytes each; the walk
#: keeps a few of them and their nonzero indices).
MAX_STATE_ENTRIES = 1 << 25

#: Estimated element operations (``estimate_walk``) beyond which the walk is refused: about 1.5 ns each on
#: one core, so the limit is a few minutes. iid:2000,2 (kernels of up to 2000 draws for each of 2000
#: multiplicities) estimates 10^11.0 at V = 2 and is refused; iid:600,2 estimates 10^9.8 and runs in 11 s,
#: iid:160,2 10^8.6 and 1.3 s (both measured on a loaded 2-core machine).
MAX_WALK_OPERATIONS = 10**11

#: Cost model of ``estimate_walk``, in element operations: one Python-level step of a closed-form kernel
#: (a dozen array calls), one coefficient of its Horner recursion (about ten array operations touch it), and
#: one (draw tuple, token) of an enumerated kernel (the solver's batched law and the scatter).
KERNEL_STEP_OPERATIONS = 25_000
KERNEL_ELEMENT_OPERATIONS = 10
ROW_OPERATIONS = 200
#: ... and the bookkeeping of one depth: a fixed cost (about 75 us), one state, one token of a child prefix.
DEPTH_OPERATIONS = 50_000
STATE_OPERATIONS = 1_000
PREFIX_OPERATIONS = 3

#: Estimated element operations of ONE closed-form kernel beyond which it is refused (about 15 s of one core):
#: n = 10,000 draws at V = 2 is 2.3 * 10^9; n = 99,999 is 10^11.3.
MAX_KERNEL_OPERATIONS = 10**10


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


def _drafted_tokens(size: int, problem: Problem | None) -> int:
    """s: the most tokens one draft law puts mass on (``Problem.draft_support_bound``; V without a problem)."""
    return size if problem is None else max(1, min(size, problem.draft_support_bound()))


def check_walk_size(size: int, branching: tuple[int, ...], mode: str, solver: NodeSolver | None = None, *,
                    problem: Problem | None = None) -> float:
    """ProblemTooLargeError before any work when the walk cannot finish; else the natural log of its estimated
    element operations (``estimate_walk``). Refused, in this order: one node kernel enumerated over s^n ordered
    draw tuples (n the most draws at a node, s the drafted tokens: ``Problem.draft_support_bound``, V without a
    problem) of V tokens each above ``MAX_KERNEL_TUPLE_ENTRIES``; one closed-form kernel above
    ``MAX_KERNEL_ELEMENTS`` or ``MAX_KERNEL_OPERATIONS`` (``check_closed_kernel_size``); in law mode, an output
    law (V + .. + V^(L+1) entries) above ``MAX_LAW_MODE_ENTRIES``; the state arrays of one depth above
    ``MAX_STATE_ENTRIES``; the whole walk above ``MAX_WALK_OPERATIONS``.
    ``problem`` bounds the states of metrics mode (``Problem.log_state_count``); without it every prefix is
    taken to be its own state."""
    draws = max_draws(branching)
    drafted = _drafted_tokens(size, problem)
    log_tuples = draws * math.log(drafted) if draws else 0.0
    closed_form = solver is not None and solver.has_sequential_tests
    if log_tuples + math.log(size) > math.log(MAX_KERNEL_TUPLE_ENTRIES) and not closed_form:
        raise ProblemTooLargeError(
            f"the walk DP needs the solver's output law for every ordered list of the n = {draws} i.i.d. draws "
            f"at one node: s^n = 10^{log_tuples / math.log(10):.1f} lists of the s = {drafted} drafted tokens, "
            f"times V = {size} tokens, above its limit of {MAX_KERNEL_TUPLE_ENTRIES:,} entries (8 bytes each, a "
            "few arrays of them); use fewer paths or a smaller vocabulary")
    if closed_form and draws:
        check_closed_kernel_size(draws, size, "the walk DP")
    if mode == "law":
        log_entries = log_prefix_count(size, 1, len(branching) + 1)
        if log_entries > math.log(MAX_LAW_MODE_ENTRIES):
            raise ProblemTooLargeError(
                f"the output law of a depth-{len(branching)} tree at V={size} has "
                f"10^{log_entries / math.log(10):.1f} entries, above {MAX_LAW_MODE_ENTRIES:,} "
                f"({MAX_LAW_MODE_ENTRIES * 8 / 2**30:.0f} GiB); use method 'dp-metrics' (law of tau only)")
    estimate = estimate_walk(size, branching, mode, closed_form, problem,
                             stop_above=math.log(MAX_WALK_OPERATIONS) + 1, drafted=drafted)
    if estimate.log_state_entries > math.log(MAX_STATE_ENTRIES):
        raise ProblemTooLargeError(
            f"the walk DP on {_branching_text(branching)} at V={size} would hold "
            f"{readable_count(estimate.log_state_entries)} (state, token, count) masses at one depth, above its "
            f"limit of {MAX_STATE_ENTRIES:,} ({MAX_STATE_ENTRIES * 8 / 2**20:.0f} MiB); use fewer paths or a "
            f"smaller vocabulary{_metrics_hint(mode)}")
    if estimate.log_operations > math.log(MAX_WALK_OPERATIONS):
        kernels = ("closed-form kernels" if closed_form else "kernels enumerated over ordered draw lists")
        raise ProblemTooLargeError(
            f"the walk DP on {_branching_text(branching)} at V={size} would take "
            f"{'about' if estimate.complete else 'more than'} {readable_count(estimate.log_operations)} element "
            f"operations ({kernels} of up to n = {draws:,} draws, over {len(branching):,} depths), above its limit "
            f"of 10^{math.log10(MAX_WALK_OPERATIONS):.0f} (a few minutes of one core); use fewer paths or a smaller "
            f"vocabulary{_metrics_hint(mode)}")
    return estimate.log_operations


def _metrics_hint(mode: str) -> str:
    return (", or method 'dp-metrics' (law of tau only), whose states are the problem's states rather than "
            "every prefix") if mode == "law" else ""


def check_closed_kernel_size(draws: int, size: int, what: str) -> float:
    """ProblemTooLargeError, before ``sequential_tests`` is even called, when the closed-form kernel of one node
    with ``draws`` i.i.d. draws over ``size`` tokens would hold more than MAX_KERNEL_ELEMENTS coefficients or take
    more than MAX_KERNEL_OPERATIONS element operations (the cost model of ``estimate_walk``); else its estimated
    element operations."""
    log_elements = math.log(draws) + math.log(max(size, 1))
    log_operations = log_add(math.log(KERNEL_STEP_OPERATIONS * draws),
                              math.log(KERNEL_ELEMENT_OPERATIONS) + math.log(draws) + log_elements)
    if log_elements > math.log(MAX_KERNEL_ELEMENTS) or log_operations > math.log(MAX_KERNEL_OPERATIONS):
        raise ProblemTooLargeError(
            f"{what}: the closed-form kernel of a node with n = {draws:,} i.i.d. draws over {size:,} tokens would "
            f"hold {readable_count(log_elements)} coefficients and take about {readable_count(log_operations)} element "
            f"operations, above the limits of {MAX_KERNEL_ELEMENTS:,} and 10^{math.log10(MAX_KERNEL_OPERATIONS):.0f} "
            "(about 15 s of one core); use fewer paths")
    return math.exp(log_operations)


@dataclass(frozen=True)
class WalkEstimate:
    """Upper bounds, as natural logs, on the work of a walk DP (``estimate_walk``)."""

    #: element operations of every node kernel and of each depth's bookkeeping
    log_operations: float
    #: entries of the largest per-depth array of move masses [states, V, most draws]
    log_state_entries: float
    #: False when the sum stopped early (``stop_above``): the operations are then a lower bound of the estimate
    complete: bool = True


def estimate_walk(size: int, branching: tuple[int, ...], mode: str, closed_form: bool,
                  problem: Problem | None = None, *, stop_above: float = math.inf,
                  drafted: int | None = None) -> WalkEstimate:
    """Upper bounds on the walk's work, computed in logs without building anything (the walk may end sooner:
    it stops at the first depth that no mass reaches).

    At depth d (0-based) a state is (context, m) with m <= M_d = b_1 .. b_d paths through it, so there are at
    most C_d M_d states, C_d the contexts (law mode: V^d prefixes; metrics mode: ``problem``'s states), and
    each needs the kernel of n = m b_(d+1) draws. A closed-form kernel of n draws for U contexts costs about
    ``KERNEL_STEP_OPERATIONS`` n (Python-level steps) + ``KERNEL_ELEMENT_OPERATIONS`` n^2 U V (Horner's rule
    on coefficient arrays; ``sequential_kernels``); an enumerated one costs ``ROW_OPERATIONS`` V per ordered
    draw tuple, s^n of them (s = ``drafted``: ``_drafted_tokens``). Each depth also costs ``DEPTH_OPERATIONS``,
    ``STATE_OPERATIONS`` per state, and ``PREFIX_OPERATIONS`` per token of the child prefixes (length d + 1)
    built for up to C_d V (context, token) pairs: quadratic in the depth, which is what a chain of 100,000 with
    p = q spends its 80 s on. One operation is about 1.5 ns on one core (measured: closed-form kernels at
    n = 1000..4000, khisti's enumerated kernels at V = 8 and 64, chains of 10,000 and 100,000). The sum stops
    early once it passes
    ``stop_above`` (a log), so refusing chain:1000000 costs no million-step loop."""
    log_size = math.log(size)
    if drafted is None:
        drafted = _drafted_tokens(size, problem)
    log_drafted = math.log(drafted)
    log_paths = 0.0                                            # log M_d
    operations, entries = [], []
    log_total = -math.inf
    for d, factor in enumerate(branching):
        if log_total > stop_above:
            break
        log_contexts = d * log_size
        if mode != "law" and problem is not None:
            log_contexts = min(log_contexts, problem.log_state_count(d))
        log_factor = math.log(factor)
        log_most = log_paths + log_factor                      # log of the most draws n at depth d
        entries.append(log_contexts + log_paths + log_size + log_most)
        if closed_form:
            steps = log_factor + _log_power_sum(log_paths, 1)                       # sum_m m b
            elements = 2 * log_factor + _log_power_sum(log_paths, 2) + log_contexts + log_size
            operations.append(log_add(math.log(KERNEL_STEP_OPERATIONS) + steps,
                                       math.log(KERNEL_ELEMENT_OPERATIONS) + elements))
        else:
            # sum_(m <= M) s^(m b) <= s^(M b) s^b / (s^b - 1), or M when s = 1
            per_context = (_exp_or_inf(log_paths) * factor * log_drafted
                           - math.log1p(-math.exp(-factor * log_drafted)) if log_drafted > 0 else log_paths)
            operations.append(math.log(ROW_OPERATIONS) + log_size + log_contexts + per_context)
        operations.append(_log_sum([math.log(DEPTH_OPERATIONS),
                                    math.log(STATE_OPERATIONS) + log_contexts + log_paths,
                                    math.log(PREFIX_OPERATIONS * (d + 1)) + log_contexts + log_size]))
        log_total = log_add(log_total, log_add(operations[-2], operations[-1]))
        log_paths = log_most
    return WalkEstimate(log_operations=log_total, log_state_entries=max(entries, default=0.0),
                        complete=len(entries) == len(branching))


def _exp_or_inf(log_value: float) -> float:
    return math.exp(log_value) if log_value < 700 else math.inf


def _log_sum(values: list[float]) -> float:
    total = -math.inf
    for value in values:
        total = log_add(total, value)
    return total


def _log_power_sum(log_count: float, power: int) -> float:
    """log of an upper bound on sum_(m = 1..M) m^power, M = e^log_count: (M + 1)^(power + 1) / (power + 1)."""
    log_next = log_count + math.log1p(math.exp(-log_count)) if log_count < 700 else log_count
    return (power + 1) * log_next - math.log(power + 1)


def _branching_text(branching: tuple[int, ...]) -> str:
    shown = ",".join(map(str, branching[:6])) + (",..." if len(branching) > 6 else "")
    return f"branching ({shown})"


def _draw_tuples(tokens: np.ndarray, count: int) -> np.ndarray:
    """Every ordered tuple of ``count`` of ``tokens`` (s of them), lexicographic, [s^count, count]."""
    digits = np.unravel_index(np.arange(len(tokens) ** count, dtype=np.int64), (len(tokens),) * count)
    return np.asarray(tokens, dtype=np.int64)[np.stack(digits, axis=-1).reshape(-1, count)]


def node_kernels(solver: NodeSolver, p: np.ndarray, q: np.ndarray, draws: int) -> list[NodeKernel]:
    """The kernels of U nodes with ``draws`` i.i.d. children each (p, q [U, V]): in closed form for a solver
    that states its rule as sequential tests (``NodeSolver.sequential_tests``), else by enumeration of every
    ordered draw tuple (``enumerated_node_kernels``)."""
    if draws and solver.has_sequential_tests:
        kernels = []
        chunk = max(1, MAX_KERNEL_ELEMENTS // (draws * p.shape[-1]))  # coefficient arrays [n, chunk, V]
        for start in range(0, len(p), chunk):
            budget.check("the walk DP")
            rows_p, rows_q = p[start:start + chunk], q[start:start + chunk]
            stop, moves = sequential_kernels(rows_q, *solver.sequential_tests(rows_p, rows_q, draws))
            kernels += [NodeKernel(stop=stop[u], moves=moves[u]) for u in range(len(rows_p))]
        return kernels
    return enumerated_node_kernels(solver, p, q, draws)


def _times_linear(coefficients, constant, slope):
    """The coefficients (in x) of (sum_k c_k x^k) (constant + slope x): ``coefficients`` [k + 1, ...] ->
    [k + 2, ...], with ``constant`` and ``slope`` broadcast against one coefficient."""
    product = backend.zeros((len(coefficients) + 1, *coefficients.shape[1:]), coefficients)
    product[:-1] = coefficients * constant
    product[1:] = product[1:] + coefficients * slope
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
    each token the count's generating function is a product of linear factors L_i(x) = (sum rho_i - rho_i(t))
    + rho_i(t) x, and with A_m(x) = ((1 - q(t)) + q(t) x)^m (m unexamined drafts):

        sum_k moves[t, k - 1] x^(k-1) = sum_j accept_j(t) prod_(i<j) L_i(x) A_(n-1-j)(x)
                                        + final(t) (prod_(i<=n) L_i(x) - prod_(i<=n) L_i(0)) / x,
        stop[t]                       = final(t) prod_(i<=n) L_i(0).

    The sum over j is evaluated by Horner's rule from the last draft up, T_(n-1) = accept_(n-1) A_0,
    T_j = accept_j A_(n-1-j) + L_j T_(j+1), T_0 being the sum, with A_m grown one factor per step: O(n^2 V)
    work in O(n) array operations on coefficient arrays [degree + 1, U, V] (the direct double sum over
    (j, count before j, count after j) was O(n^3 V) Python-level steps). Every term is a product of
    non-negative numbers, so no cancellation; the same +, -, * on every backend (exact rationals stay exact)."""
    draws = len(accept)
    ones = (q * 0 + 1)[None]                                  # the polynomial 1: [1, U, V]
    rejected = [q - accepted for accepted in accept]          # draft i is t and rejected, [U, V] each
    # prod_(i<n) L_i: all n drafts rejected, k of them being t -> [n + 1, U, V]
    all_rejected = ones
    for rejected_t in rejected:
        all_rejected = _times_linear(all_rejected, backend.total(rejected_t, keepdims=True) - rejected_t, rejected_t)
    # Horner from the last draft up: T holds sum_(i>=j) accept_i prod_(j<=l<i) L_l A_(n-1-i), [n - j, U, V]
    unexamined = ones                                         # A_(n-1-j)
    horner = accept[-1] * unexamined
    for j in range(draws - 2, -1, -1):
        budget.check("closed-form node kernels")
        unexamined = _times_linear(unexamined, 1 - q, q)
        rejected_t = rejected[j]
        horner = accept[j] * unexamined + _times_linear(horner, backend.total(rejected_t, keepdims=True) - rejected_t,
                                                        rejected_t)
    stop = final * all_rejected[0]
    moves = horner + final * all_rejected[1:]                 # [n, U, V]: index k - 1
    return stop, backend.stack(list(moves), axis=-1)


def enumerated_node_kernels(solver: NodeSolver, p: np.ndarray, q: np.ndarray, draws: int) -> list[NodeKernel]:
    """The kernels of U nodes with ``draws`` i.i.d. children each (p, q [U, V]): the solver's output law
    summed over every ordered draw tuple of the node's drafted tokens (a tuple holding any other token has
    probability 0), nodes with the same drafted tokens together, so that no node enumerates more than
    s^n tuples (s = its drafted tokens, the count ``check_walk_size`` sizes), one batched solver call per
    chunk of (node, tuple) rows."""
    count, size = len(p), p.shape[1]
    stop = backend.zeros((count, size), p)
    moves = backend.zeros((count, size, draws), p)
    if draws == 0:
        return [NodeKernel(stop=p[u], moves=moves[u]) for u in range(count)]
    drafted = np.asarray(q != 0, dtype=bool)                             # [U, V]
    groups: dict[bytes, list[int]] = {}
    for node in range(count):
        groups.setdefault(drafted[node].tobytes(), []).append(node)
    for members in groups.values():
        _add_enumerated(solver, p, q, np.asarray(members), np.flatnonzero(drafted[members[0]]), draws, stop, moves)
    return [NodeKernel(stop=stop[u], moves=moves[u]) for u in range(count)]


def _add_enumerated(solver, p, q, members: np.ndarray, tokens: np.ndarray, draws: int, stop, moves) -> None:
    """Adds to ``stop`` [U, V] and ``moves`` [U, V, n] the kernels of the nodes ``members``, which draft exactly
    ``tokens``: the solver's law over every ordered tuple of ``draws`` of them, weighted by its probability."""
    count, size = len(p), p.shape[1]
    tuples = _draw_tuples(tokens, draws)                                 # [T, n]
    probability = q[members][:, tuples[:, 0]]
    for column in range(1, draws):
        probability = probability * q[members][:, tuples[:, column]]    # [G, T]
    counts = backend.counts(tuples, size)                                 # [T, V]
    # flat index of (token, times drawn) in a kernel table [V, n + 1], per tuple: [T, V]
    within = np.arange(size) * (draws + 1) + counts
    member_of, tuple_of = np.nonzero(probability != 0)                   # row-major: sorted by node
    for start in range(0, len(member_of), KERNEL_CHUNK_ROWS):
        budget.check("the walk DP")
        local, which = member_of[start:start + KERNEL_CHUNK_ROWS], tuple_of[start:start + KERNEL_CHUNK_ROWS]
        nodes = members[local]
        laws = solver.output_laws(p[nodes], q[nodes], tuples[which])   # [R, V]
        weighted = laws * probability[local, which][:, None]
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


def walk_dp(problem: Problem, branching: tuple[int, ...], solver: NodeSolver, *, mode: str = "law",
            kernel_cache: dict | None = None, progress: bool = False) -> WalkLaw:
    """Exact law of the top-down walk of ``solver`` on trees with i.i.d. branching ``branching``.

    ``kernel_cache`` may be shared between calls on the same problem and solver (e.g. across tree shapes).
    """
    if mode not in ("law", "metrics"):
        raise ValueError(f"mode must be 'law' or 'metrics', got {mode!r}")
    size, depth = problem.vocab_size, len(branching)
    check_walk_size(size, branching, mode, solver, problem=problem)
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
