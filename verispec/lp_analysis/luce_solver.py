"""Solving Global Resolution's Luce choice programs (``global_resolution``): the projected damped Newton method
both derivations use (``minimise_luce``), and the staged fixed-point solve of one system at any vocabulary through
the integrals of ``luce_integrals`` (``solve_system``; the quadrature and its error bounds are in that module's
docstring)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from verispec.lp_analysis.luce_integrals import (
    BINS,
    CLUSTER_WIDTH,
    GRID_POINTS,
    GRID_STEP,
    GRID_TOLERANCE,
    JACOBIAN_BINS,
    ROUND_TOLERANCE,
    ROUNDS,
    SOLVE_TERMS,
    TERMS,
    ChoiceSystem,
    Expansion,
    Nodes,
    decay_table,
)
from verispec.native import series

#: Lower bound on the inner exponents of the enumerated programs (a target of 1e-300 still has a weight above it).
LOWEST_EXPONENT = -700.0
#: Newton stops when every gradient entry is below this (over multisets; on bins, which only seed the chord
#: steps and whose integrals carry rounding near 1e-15, at the second).
GRADIENT_TOLERANCE = 1e-15
BINNED_TOLERANCE = 1e-12
NEWTON_STEPS = 200
#: The cubic Lagrange weights of points k-1, k, k+1, k+2 as polynomials in theta (coefficients of 1, theta,
#: theta^2, theta^3) for a token at y_k + theta * step.
LAGRANGE = ((0.0, -1 / 3, 1 / 2, -1 / 6), (1.0, -1 / 2, -1.0, 1 / 2), (0.0, 1.0, 1 / 2, -1 / 2),
            (0.0, -1 / 6, 0.0, 1 / 6))
#: Margins (in log weight) beyond the binned solution's extrapolated range that the quadrature and clusters cover,
#: tried in turn while the solution falls short of its system's optimal mass by more than ``WIDEN_ABOVE``. Where
#: alpha* is within ~1e-7 of 1 (a draft close to a peaked target, K up to 8) the binned program is flat and stops
#: by its patience with weights out of order in y, so the range extrapolated from its end bins missed the optimum's
#: weights and pinning them at a margin of 4 cost up to 0.07 of acceptance (near-equal laws at V = 151,936:
#: tests/verifiers/test_globalres_near_equal.py). Seeding from the binned weights' increasing rearrangement
#: instead was measured worse (8 of 180 such nodes over 1e-6 short, against 1 with the wider margins).
RANGE_MARGINS = (4.0, 16.0, 48.0)
WIDEN_ABOVE = 1e-9
#: On the grid, the ``HEAVY_POINTS`` heaviest solved tokens of at least ``HEAVY_MASS`` q mass are points of their own
#: (``_place_tokens``).
HEAVY_MASS = 1e-5
HEAVY_POINTS = 256


def minimise_luce(moments, target: np.ndarray, start: np.ndarray, lower: float, upper: float,
                  tolerance: float = GRADIENT_TOLERANCE, patience: int | None = None) -> np.ndarray:
    """The exponents a minimising f(a) - target . a with lower <= a <= upper, where ``moments(a)`` gives
    (f, grad f, Hessian of f) of a convex f: projected damped Newton with backtracking on the objective (a step
    that keeps the full length is tried longer too: on a face the minimum lies far out). It stops when the free
    gradient is below ``tolerance``, the Newton step below 1e-12, or (given a ``patience``) that many steps in a
    row were cut below 1/1000 (the objective's rounding hides what is left)."""
    size = len(target)
    exponents = np.clip(np.asarray(start, dtype=np.float64), lower, upper)
    if size == 0:
        return exponents

    def value(a):
        objective, marginal, hessian = moments(a)
        return objective - float(target @ a), marginal - target, hessian

    current, gradient, hessian = value(exponents)
    stalled = 0
    for _ in range(NEWTON_STEPS):
        # a bound is active when the exponent sits on it (within 1e-9) and the descent direction points out
        free = ~(((exponents >= upper - 1e-9) & (gradient < 0)) | ((exponents <= lower + 1e-9) & (gradient > 0)))
        if np.abs(gradient[free]).max(initial=0.0) < tolerance:
            break
        newton = np.zeros(size)
        block = hessian[np.ix_(free, free)]
        ridge = 1e-12 * max(np.trace(block), 1e-300)
        newton[free] = np.linalg.solve(block + ridge * np.eye(int(free.sum())), -gradient[free])
        if np.abs(newton).max(initial=0.0) < 1e-12:
            break
        accepted = None
        for step in (newton, np.where(free, -gradient, 0.0)):  # Newton, else projected steepest descent
            scale = 1.0
            while scale > 1e-12:
                with np.errstate(over="ignore"):  # as below: inf clipped to the bound
                    trial = np.clip(exponents + scale * step, lower, upper)
                candidate, new_gradient, new_hessian = value(trial)
                if candidate <= current + 1e-4 * float(gradient @ (trial - exponents)) + 1e-15 * abs(current):
                    accepted = (trial, candidate, new_gradient, new_hessian)
                    break
                scale /= 2
            if accepted is not None:
                break
        if accepted is None:  # near the minimum the objective's rounding hides the decrease: judge the gradient
            trial = np.clip(exponents + newton, lower, upper)
            candidate, new_gradient, new_hessian = value(trial)
            if np.abs(new_gradient[free]).max(initial=0.0) < np.abs(gradient[free]).max(initial=0.0) / 2:
                accepted, scale, step = (trial, candidate, new_gradient, new_hessian), 1.0, newton
        if accepted is None:
            break
        far = np.abs(step).max(initial=0.0) >= 1.0  # a long full step: on a face, where the minimum lies far out
        while far and scale >= 1.0:  # then try 2x, 4x, ... further
            with np.errstate(over="ignore"):  # a near-singular Newton step overflows to inf: clipped to the bound
                longer = np.clip(exponents + 2 * scale * step, lower, upper)
            if np.array_equal(longer, accepted[0]):
                break
            value_longer = value(longer)
            if value_longer[0] >= accepted[1]:
                break
            accepted, scale = (longer, *value_longer), 2 * scale
        if np.array_equal(accepted[0], exponents):
            break
        stalled = stalled + 1 if scale < 1e-3 else 0
        if patience is not None and stalled >= patience:
            break
        exponents, current, gradient, hessian = accepted
    return exponents




@dataclass(frozen=True, eq=False)
class SystemSolution:
    """A system's log weights [n], weights and chosen law q Phi(w) [n], with the quadrature state the tests
    inspect."""

    log_weights: np.ndarray
    weights: np.ndarray   # e^(log_weights), computed once
    intermediate: np.ndarray
    nodes: Nodes
    free: np.ndarray   # G - c0 at the nodes, from the weights used (TERMS terms)
    residual: float    # max |G_true - G| of the last chord step


def solve_system(system: ChoiceSystem) -> SystemSolution:
    """One system's weights and chosen law by the integrals of ``luce_integrals`` (see its docstring):

    1. the convex program on ``BINS`` bins of the tokens' logit y (each token its own bin when they are few),
       solved by ``minimise_luce`` with the integrals' moments;
    2. chord steps on g = G - c0 at the nodes, g <- g + (I - A)^(-1) (G_true(g) - g), with A the Jacobian of the
       fixed-point map on a measure of ``JACOBIAN_BINS`` bins of the current weights (first the binned solution;
       low rank: Woodbury). G_true sums the tokens' own weights, read off the inverse of y(log w) under the current
       g at the tokens themselves (at most ``GRID_POINTS`` of them), or else at grid points in y (the tokens' mass
       carried to the grid by cubic Lagrange weights, their weights interpolated by cubic Hermite; the heaviest
       tokens, whose interpolation error weighs most in G, at points of their own beside the grid; on a grid
       coarser than ``GRID_STEP`` one pass over the tokens measures what the carrying misses, which further steps
       add back). The steps keep the state of smallest residual: near a face of the polytope the fixed point is
       flat in one direction;
    3. p_I = q Phi(w) for the weights used, from the G of exactly those weights (``TERMS`` terms).

    Inner tokens whose weight is below e^(lower) at every node (t w <= 2^-55) are solved in closed form,
    w = r / (K J(0)), which makes their p_I equal p; they count in G as their mass. In the outer system the token
    of largest ratio is held at weight 1, which the optimum satisfies (weights rise with the ratio, the largest is
    1) and which fixes the scale of a choice that has none when no outer token needs the cap (alpha* = 1)."""
    y = system.logit(system.ratio)
    # 1. the binned program, on nodes covering every weight the bounds allow
    bin_y, bin_u, bin_q = _solve_binned(system, y)
    best, best_shortfall = None, math.inf
    for margin in RANGE_MARGINS:
        solution = _solve_in_range(system, y, bin_y, bin_u, bin_q, margin)
        shortfall = optimal_mass(system) - float(np.minimum(system.target, solution.intermediate).sum())
        if shortfall < best_shortfall:
            best, best_shortfall = solution, shortfall
        if not shortfall > WIDEN_ABOVE:
            break
    return best


def optimal_mass(system: ChoiceSystem) -> float:
    """The mass of p the system's chosen law covers at the optimum: all of its tokens' p in the inner system
    (p_I = p on H*), every outer tuple's (c0 + q)^K - c0^K in the outer one (outer tuples never reject)."""
    if system.reject:
        return float(system.target.sum())
    return (system.fixed + float(system.mass.sum())) ** system.drafts - system.fixed ** system.drafts


def _solve_in_range(system: ChoiceSystem, y: np.ndarray, bin_y: np.ndarray, bin_u: np.ndarray, bin_q: np.ndarray,
                    margin: float) -> SystemSolution:
    """Steps 2 and 3 with the weights bounded to the binned solution's extrapolated range widened by ``margin``."""
    lower, upper, negligible, nodes = _weight_range(system, y, bin_y, bin_u, margin)
    # 2. chord steps from the binned solution
    free, kernel, chord = _binned_start(system, nodes, bin_u, bin_q, lower, upper)
    tokens = _place_tokens(system, y, negligible, float(kernel.sum()))
    guess = np.interp(tokens.points, bin_y, bin_u)
    guess += (np.where(tokens.points > bin_y[-1], tokens.points - bin_y[-1], 0.0)
              + np.where(tokens.points < bin_y[0], tokens.points - bin_y[0], 0.0))
    steps = _ChordSteps(system, nodes, lower, upper, tokens, free, chord)
    point_u, point_du, compressed = steps.settle(np.clip(guess, lower, upper))
    if not tokens.direct and tokens.grid_step > GRID_STEP:  # what carrying the mass to a coarse grid misses, once
        u = steps.token_log_weights(point_u, point_du)
        counted = system.mass.copy()
        counted[tokens.tiny] = 0.0
        measured = steps.expansion.sums(steps.expansion.locate(u, "tokens"), counted, SOLVE_TERMS) + steps.tiny_mass
        steps.correction = measured - compressed
        point_u, point_du, compressed = steps.settle(point_u)
    # 3. p_I for the weights used, from their own G
    return _chosen_law(system, steps, steps.token_log_weights(point_u, point_du))


def _solve_binned(system: ChoiceSystem, y: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Step 1: the tokens' q and p mass in at most ``BINS`` bins of their logit ``y`` [n] (each token its own bin
    when they are few), the convex program solved on them; (logit, log weight, q mass) of the bins [B], in
    increasing logit."""
    b, mass, count = system.reject, system.mass, len(system.mass)
    binned = series.bin_measure(y, mass, system.target, BINS) if count > BINS else None  # one compiled pass
    if binned is not None:
        bin_q, bin_p = binned
    else:
        clipped = np.clip(y, -60.0, 60.0)
        if count <= BINS:
            bin_of = np.arange(count)
        else:
            bottom, top = float(clipped.min()), float(clipped.max())
            scale = BINS / (top - bottom) if top > bottom else 0.0
            clipped -= bottom
            clipped *= scale
            bin_of = clipped.astype(np.int64)
            np.minimum(bin_of, BINS - 1, out=bin_of)
        bin_q = np.bincount(bin_of, mass)
        bin_p = np.bincount(bin_of, system.target)
    used = bin_q > 0
    bin_q, bin_p = bin_q[used], bin_p[used]
    bin_y = np.clip(system.logit(bin_p / bin_q), -60.0, 60.0)
    program_lower = max(system.lower, LOWEST_EXPONENT)
    wide = Nodes.covering(program_lower if b == 0 else 0.0, system.upper, b)
    bin_u = minimise_luce(system.program(wide, bin_q, bin_p), bin_p, np.clip(bin_y, program_lower, system.upper),
                          program_lower, system.upper, BINNED_TOLERANCE, patience=3)
    if not b:
        bin_u = np.clip(bin_u - bin_u.max(), program_lower, system.upper)
    order = np.argsort(bin_y, kind="stable")
    return bin_y[order], bin_u[order], bin_q[order]


def _weight_range(system: ChoiceSystem, y: np.ndarray, bin_y: np.ndarray, bin_u: np.ndarray,
                  margin: float) -> tuple[float, float, float, Nodes]:
    """(lower, upper) bounds of the tokens' log weights, extrapolated from the bins (y - u is about constant at both
    ends), the log weight below which an inner token is negligible at every node (t w <= 2^-55; -inf in the outer
    system), and the quadrature nodes covering the range."""
    b = system.reject
    finite = np.isfinite(y)
    finite = y if finite.all() else y.take(np.flatnonzero(finite))  # usually all of them: no [n] select
    y_top = float(finite.max()) if finite.size else float(bin_y[-1])
    y_bottom = float(finite.min()) if finite.size else float(bin_y[0])
    upper = min(system.upper, float(bin_u[-1] + max(y_top - bin_y[-1], 0.0)) + margin)
    if np.isposinf(y).any() or not b:
        upper = system.upper
    lower = max(system.lower, float(bin_u[0] - max(bin_y[0] - y_bottom, 0.0)) - margin)
    if b:
        nodes = Nodes.covering(0.0, upper, b)
        negligible = math.log(2.0 ** -55) - float(math.log(nodes.t[-1]))  # t w <= 2^-55 at every node below
        lower = min(max(lower, negligible), upper)
    else:
        negligible = -math.inf
        nodes = Nodes.covering(lower, upper, b)
    return lower, upper, negligible, nodes


def _chord_for(system: ChoiceSystem, nodes: Nodes, log_w: np.ndarray, derivative: np.ndarray, g_now: np.ndarray):
    """The chord step residual -> (I - A)^(-1) residual, A = dG_true/dg = diag(t) X^T diag(d) X diag(v) on a measure
    of weights ``log_w`` [B] (X = e^(-t w), d = ``derivative``, v = weight e^(-bt) G^(K-2)), of rank B: Woodbury."""
    table = decay_table(np.exp(log_w), nodes.t)                  # [B, T]
    columns = nodes.weight * np.exp(-system.reject * nodes.t) * (system.fixed + g_now) ** (system.drafts - 2)
    left = (nodes.t[:, None] * table.T) * derivative[None, :]   # [T, B]
    right = table * columns[None, :]                            # [B, T]
    small = np.eye(len(log_w)) - right @ left
    return lambda residual: residual + left @ np.linalg.solve(small, right @ residual)


def _response(system: ChoiceSystem, log_w: np.ndarray, mass_of, value: np.ndarray, slope: np.ndarray) -> np.ndarray:
    """d = mass K (K-1) w / Phi'(w), with Phi'(w) = K (J + dJ/du) (J = sum_l a_l e^(-t_l w), u = log w)."""
    K = system.drafts
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        response = mass_of * K * (K - 1) * np.exp(log_w) / np.maximum(K * (value + slope), 1e-300)
    # Phi' rounds to 0 or below at a few weights on real vocabularies (seen at T = 1): such a point leaves the
    # Jacobian, which only steers the chord steps (the state of smallest residual stands), instead of making it NaN
    return np.where(np.isfinite(response), response, 0.0)


def _binned_start(system: ChoiceSystem, nodes: Nodes, bin_u: np.ndarray, bin_q: np.ndarray, lower: float,
                  upper: float):
    """The binned solution's g = G - c0 at the nodes [T], its kernel [T], and the first chord step (on the bins
    that sit strictly inside the range)."""
    bin_w = np.exp(bin_u)
    table = decay_table(bin_w, nodes.t)                             # [B, T]
    free = bin_q @ table
    kernel = system.kernel(nodes, free)
    value = table @ kernel
    slope = -(table * nodes.t) @ kernel * bin_w                     # dJ/du
    moving = (bin_u < upper - 1e-9) & (bin_u > lower + 1e-9)
    chord = _chord_for(system, nodes, bin_u[moving], _response(system, bin_u, bin_q, value, slope)[moving], free)
    return free, kernel, chord


@dataclass(frozen=True, eq=False)
class _Tokens:
    """Where each token's weight comes from: closed form (``tiny``, inner tokens negligible at every node), a bound
    (``capped_high``, ``capped_low``), or the inverse of y(log w) (``solved``) at ``points`` in y: the solved tokens
    themselves (``direct``) or a grid of step ``grid_step`` (its first ``grid_size`` points) that the light solved
    tokens' mass is carried to (``carried``) and their weights interpolated from (``cell``, ``theta``), followed
    by the ``heavy`` solved tokens' own points. Each class is held as token indices (increasing): a [n] boolean
    select of scattered tokens costs several times a ``take``."""

    tiny: np.ndarray          # [tiny] int
    capped_high: np.ndarray   # [capped high] int
    capped_low: np.ndarray    # [capped low] int
    solved: np.ndarray        # [solved] int
    direct: bool
    points: np.ndarray        # [P]
    carried: np.ndarray       # [P] the q mass at each point
    grid_step: float = 0.0
    light: np.ndarray | None = None    # [light] int, solved tokens carried to the grid (grid only)
    heavy: np.ndarray | None = None    # [heavy] int, solved tokens at points of their own after the grid (grid only)
    grid_size: int = 0
    cell: np.ndarray | None = None     # [light] the grid cell k of each light solved token (grid only)
    theta: np.ndarray | None = None    # [light] its place in the cell, (y - y_k) / step in [0, 1) (grid only)

    def held(self, mass: np.ndarray, lower: float, upper: float) -> tuple[np.ndarray, np.ndarray]:
        """The capped tokens as two points: log weights (upper, lower) [2] and their q mass [2] (a capped token's
        weight is its bound whatever g is, so G and Phi see them at two weights)."""
        return np.array([upper, lower]), np.array([float(mass.take(self.capped_high).sum()),
                                                   float(mass.take(self.capped_low).sum())])


def _place_tokens(system: ChoiceSystem, y: np.ndarray, negligible: float, zero_value: float) -> _Tokens:
    """Sort the tokens of logit ``y`` [n] into closed-form tiny ones (inner), capped ones, and the rest solved at
    points in y (``_Tokens``); ``zero_value`` is the binned kernel's J(0)."""
    K, b, mass = system.drafts, system.reject, system.mass
    tiny_below = negligible + math.log(K * zero_value / (system.high - system.low)) - 1.0 if b else -math.inf
    # the outer token of largest ratio has weight 1 (see solve_system)
    ratio_top = None if b else float(system.ratio.max())
    # one compiled pass, into buffers reused by the next system's (a _Tokens lives for one _solve_in_range)
    classes = series.token_classes(y, system.ratio, mass, tiny_below, ratio_top, HEAVY_MASS, "classes")
    tiny, capped_high, capped_low, solved, candidates = classes or _token_classes(system, y, tiny_below, ratio_top)
    if len(solved) <= GRID_POINTS:
        return _Tokens(tiny, capped_high, capped_low, solved, True, y.take(solved), mass.take(solved))
    # a heavy token carried to the grid puts its interpolation error, times its mass, into G: the chord steps then
    # stall (a draft token of mass 0.72 left G 5e-4 off and 2e-5 of acceptance); it gets a point of its own
    if len(candidates) > HEAVY_POINTS:
        candidates = np.sort(candidates[np.argpartition(-mass[candidates], HEAVY_POINTS - 1)[:HEAVY_POINTS]])
    # not empty: more than GRID_POINTS solved, at most HEAVY_POINTS heavy (in buffers that live as long as the rest)
    found = series.light_tokens(solved, candidates, y, "classes.light")  # one compiled pass, else numpy's
    light, bottom, top = found if found is not None else _light_tokens(solved, candidates, y)
    grid_step = max(GRID_STEP, (top - bottom) / (GRID_POINTS - 4))
    points = bottom - grid_step + grid_step * np.arange(math.ceil((top - bottom) / grid_step) + 3)
    found = series.grid_carry(y, mass, light, points, grid_step, "carry")  # one compiled pass, else numpy's
    cell, theta, moments = found if found is not None else _carry(y.take(light), mass.take(light), points, grid_step)
    # cubic Lagrange weights on points k-1..k+2 carry the tokens' mass: from the cell moments sum q theta^j
    carried = np.zeros(len(points))
    for shift, row in zip((-1, 0, 1, 2), LAGRANGE):
        carried[1 + shift: len(points) - 2 + shift] += sum(c * m for c, m in zip(row, moments))[1:-2]
    return _Tokens(tiny, capped_high, capped_low, solved, False, np.concatenate([points, y.take(candidates)]),
                   np.concatenate([carried, mass.take(candidates)]), grid_step, light, candidates, len(points), cell,
                   theta)


def _light_tokens(solved: np.ndarray, heavy: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, float, float]:
    """The numpy route of ``series.light_tokens``: the solved tokens without the heavy ones, and their y's range."""
    keep = np.ones(len(solved), dtype=bool)
    keep[np.searchsorted(solved, heavy)] = False
    light = np.compress(keep, solved, out=series.scratch("classes.light", int(np.count_nonzero(keep)), np.int64))
    light_y = y.take(light)
    return light, float(light_y.min()), float(light_y.max())


def _token_classes(system: ChoiceSystem, y: np.ndarray, tiny_below: float, ratio_top: float | None):
    """The numpy route of ``series.token_classes``: (tiny, capped high, capped low, solved, heavy candidates)."""
    tiny = y < tiny_below
    capped_high = np.isposinf(y)
    if ratio_top is not None:
        capped_high |= system.ratio == ratio_top
    capped_low = np.isneginf(y) & ~tiny
    solved = ~(tiny | capped_high | capped_low)
    return tuple(np.flatnonzero(mask) for mask in (tiny, capped_high, capped_low, solved,
                                                   solved & (system.mass >= HEAVY_MASS)))


def _carry(light_y: np.ndarray, light_mass: np.ndarray, points: np.ndarray, grid_step: float):
    """The numpy route of ``series.grid_carry``: each light token's grid cell and theta [light], and the cell
    moments sum q theta^j (j < 4) [4, P] that the cubic Lagrange weights carry to the points."""
    # (in place where it can be: a fresh [n] array costs its page faults again on this kind of machine)
    scratch = np.subtract(light_y, points[0])
    scratch /= grid_step
    cell = scratch.astype(np.int64)
    np.clip(cell, 1, len(points) - 3, out=cell)
    theta = points.take(cell)
    np.subtract(light_y, theta, out=theta)
    theta /= grid_step
    square = theta * theta
    cube = square * theta
    moments = [np.bincount(cell, light_mass, minlength=len(points))]
    moments += [np.bincount(cell, np.multiply(light_mass, power, out=scratch), minlength=len(points))
                for power in (theta, square, cube)]
    return cell, theta, np.array(moments)


class _ChordSteps:
    """Step 2's state: g = G - c0 at the nodes, the current chord map, and the correction a coarse grid's carrying
    needs; ``settle`` runs the chord steps from log weights at the points."""

    def __init__(self, system: ChoiceSystem, nodes: Nodes, lower: float, upper: float, tokens: _Tokens,
                 free: np.ndarray, chord):
        self.system, self.nodes, self.lower, self.upper, self.tokens = system, nodes, lower, upper, tokens
        self.expansion = Expansion(nodes, lower, upper)
        self.g = free.copy()
        self.chord = chord
        self.correction = np.zeros(nodes.size)
        self.terms, self.step_tolerance, self.residual_limit = (TERMS, 1e-12, ROUND_TOLERANCE) if tokens.direct \
            else (SOLVE_TERMS, 1e-10, GRID_TOLERANCE)
        self.tiny_mass = float(system.mass.take(tokens.tiny).sum())
        self.total_mass = float(system.mass.sum())
        # the capped tokens sit at a bound whatever g is: their part of G is summed once, not at every step
        self.held = _held_sums(system, nodes, tokens, lower, upper)

    def invert(self, point_u: np.ndarray):
        """log weights at the points under g (safeguarded Newton on the monotone y(u)), du/dy there, and the points'
        responses d."""
        system, expansion, points = self.system, self.expansion, self.tokens.points
        lower, upper = self.lower, self.upper
        coefficients = expansion.coefficients(system.kernel(self.nodes, self.g), self.terms)
        bracket_low, bracket_high = np.full(len(points), lower), np.full(len(points), upper)
        ends = np.array([lower, upper])
        end_value, end_slope = expansion.evaluate(coefficients, expansion.locate(ends), derivative=True)
        end_y, _ = system.curve(ends, end_value, end_slope)
        bracket_high[points <= end_y[0]] = lower  # pinned at a bound: nothing to solve
        bracket_low[points >= end_y[1]] = upper
        u = np.clip(point_u, bracket_low, bracket_high)
        # the steps fused in two compiled passes each (numpy's exponentials and logarithms between them), else numpy
        steps = 0 if series.newton_points(coefficients, points, u, bracket_low, bracket_high, 1 / CLUSTER_WIDTH,
                                          expansion.first, expansion.centres, system.drafts,
                                          system.high - system.low, self.step_tolerance, 60) is not None else 60
        for _ in range(steps):
            located = expansion.locate(u)
            value, slope = expansion.evaluate(coefficients, located, derivative=True)
            current, rate = system.curve(u, value, slope)
            above = current > points
            bracket_high = np.where(above, np.minimum(bracket_high, u), bracket_high)
            bracket_low = np.where(above, bracket_low, np.maximum(bracket_low, u))
            target = u - (current - points) / rate
            outside = (target < bracket_low) | (target > bracket_high)
            target = np.where(outside, 0.5 * (bracket_low + bracket_high), target)
            done = np.abs(target - u).max(initial=0.0) < self.step_tolerance
            u = target
            if done:
                break
        located = expansion.locate(u)
        value, slope = expansion.evaluate(coefficients, located, derivative=True)
        _, rate = system.curve(u, value, slope)
        pinned = (u <= lower + 1e-12) | (u >= upper - 1e-12)
        derivative = _response(system, u, np.where(pinned, 0.0, self.tokens.carried), value, slope)
        return u, np.where(pinned, 0.0, 1 / rate), derivative

    def token_log_weights(self, point_u: np.ndarray, point_du: np.ndarray) -> np.ndarray:
        """Every token's log weight [n] from the points' log weights and slopes."""
        tokens = self.tokens
        u = np.empty(len(self.system.mass))
        u[tokens.capped_high], u[tokens.capped_low] = self.upper, self.lower
        if tokens.direct:
            u[tokens.solved] = point_u
        else:
            cell, theta, grid = tokens.cell, tokens.theta, tokens.grid_size
            # cubic Hermite on each cell as a polynomial in theta, u_k + theta (a1 + theta (a2 + theta a3)); with
            # slopes s = u' step and rise d = u_(k+1) - u_k: a1 = s_k, a2 = 3 d - 2 s_k - s_(k+1),
            # a3 = s_k + s_(k+1) - 2 d
            rise, slope = np.diff(point_u[:grid]), point_du[:grid] * tokens.grid_step
            square = np.zeros(grid)
            cubic = np.zeros(grid)
            square[:-1] = 3 * rise - 2 * slope[:-1] - slope[1:]
            cubic[:-1] = slope[:-1] + slope[1:] - 2 * rise
            if not series.hermite(cubic, square, slope, point_u, cell, theta, tokens.light, u):  # else numpy's
                light_u, term = cubic.take(cell), np.empty(len(cell))  # Horner, in place
                for coefficient in (square, slope, point_u):
                    light_u *= theta
                    light_u += coefficient.take(cell, out=term)
                u[tokens.light] = light_u
            u[tokens.heavy] = point_u[grid:]
            np.clip(u, self.lower, self.upper, out=u)
        u[tokens.tiny] = self.lower  # their G terms are their mass; their weights are set from the final G
        return u

    def settle(self, point_u: np.ndarray):
        """Chord steps until the compressed fixed point holds, keeping the state of the smallest residual (near a
        face of the polytope the fixed point is flat in one direction and the steps stop helping: then the best
        state stands, which costs acceptance only); returns (point u, du/dy, compressed G)."""
        tokens, expansion = self.tokens, self.expansion
        best, worse = None, 0
        for _ in range(ROUNDS):
            point_u, point_du, derivative = self.invert(point_u)
            compressed = expansion.sums(expansion.locate(point_u), tokens.carried, self.terms) + self.tiny_mass
            compressed += self.held
            difference = compressed + self.correction - self.g
            residual = float(np.abs(difference).max())
            if best is None or residual < best[-1]:
                best, worse = (self.g, point_u, point_du, compressed, residual), 0
            else:
                worse += 1
            if worse >= 2 or not residual > self.residual_limit:  # stalled, met, or not a number
                break
            self.chord = _chord_for(self.system, self.nodes, *_lumped(point_u, derivative), self.g)
            self.g = np.clip(self.g + self.chord(difference), 0.0, self.total_mass)
        self.g = best[0]
        return best[1:4]


def _lumped(point_u: np.ndarray, derivative: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The points' responses lumped into at most JACOBIAN_BINS bins of log weight (their d-weighted mean)."""
    live = derivative != 0
    if live.sum() <= JACOBIAN_BINS:
        return point_u[live], derivative[live]
    u, d = point_u[live], derivative[live]
    bottom, top = float(u.min()), float(u.max())
    index = np.minimum(((u - bottom) * (JACOBIAN_BINS / max(top - bottom, 1e-300))).astype(np.int64),
                       JACOBIAN_BINS - 1)
    size = np.bincount(index, np.abs(d), minlength=JACOBIAN_BINS)
    keep = size > 0
    centre = np.bincount(index, np.abs(d) * u, minlength=JACOBIAN_BINS)[keep] / size[keep]
    return centre, np.bincount(index, d, minlength=JACOBIAN_BINS)[keep]


def _held_sums(system: ChoiceSystem, nodes: Nodes, tokens: _Tokens, lower: float, upper: float) -> np.ndarray:
    """The capped tokens' part of G at the nodes [T]: their mass at the two bounds, e^(-t w) summed directly."""
    held_u, held_mass = tokens.held(system.mass, lower, upper)
    return held_mass @ decay_table(np.exp(held_u), nodes.t)


def _chosen_law(system: ChoiceSystem, steps: _ChordSteps, u: np.ndarray) -> SystemSolution:
    """Step 3: p_I = q Phi(w) for the log weights ``u`` [n] used, from the G of exactly those weights; the tiny
    inner tokens' weights meet their ratio in closed form (J(w) = J(0) to 2^-55 below ``lower``). The series run
    over the solved tokens; the capped ones are two points (their two weights), the tiny ones their mass."""
    K, low, mass, tokens, nodes, expansion = (system.drafts, system.low, system.mass, steps.tokens, steps.nodes,
                                              steps.expansion)
    every = len(tokens.solved) == len(mass)  # usually all of them are solved: no copies, no scatter
    solved_u = u if every else u.take(tokens.solved)
    located = expansion.locate(solved_u, "tokens")  # reused buffers: dead once this law is out
    held_u, _ = tokens.held(mass, steps.lower, steps.upper)
    held_located = expansion.locate(held_u)
    final = expansion.sums(located, mass if every else mass.take(tokens.solved), TERMS) + steps.held \
        + steps.tiny_mass
    kernel = system.kernel(nodes, final)
    coefficients = expansion.coefficients(kernel, TERMS)
    solved_w, held_w = np.exp(solved_u), np.exp(held_u)
    value = expansion.chosen(coefficients, located, solved_w, K, low, "chosen")
    if every:
        weights, chosen = solved_w, value
    else:
        weights, chosen = np.empty(len(mass)), np.empty(len(mass))
        weights[tokens.solved], chosen[tokens.solved] = solved_w, value
    weights[tokens.capped_high], weights[tokens.capped_low] = held_w
    chosen[tokens.capped_high], chosen[tokens.capped_low] = low + K * held_w * expansion.evaluate(coefficients,
                                                                                                held_located)
    if tokens.tiny.size:
        zero_value = kernel.sum()
        u[tokens.tiny] = np.log(system.ratio.take(tokens.tiny) - low) - math.log(K * zero_value)
        weights[tokens.tiny] = np.exp(u.take(tokens.tiny))
        chosen[tokens.tiny] = low + K * weights.take(tokens.tiny) * zero_value
    return SystemSolution(log_weights=u, weights=weights, intermediate=mass * chosen, nodes=nodes, free=final,
                          residual=float(np.abs(final - steps.g).max()))
