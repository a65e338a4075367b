"""Luce choices among K i.i.d. drafts as one-dimensional integrals: Global Resolution's two programs at any
vocabulary, without enumerating draft multisets.

The identity. A Luce choice among the K drafts picks draft position i with weight w(x_i) (the count-weighted
rule: token x weighs c_x w_x, where c_x counts its drafts), so with S = sum_y c_y w_y and b the reject weight,
token x is chosen with probability c_x w_x / (b + S). Since 1/(b + S) = int_0^inf e^(-t(b + S)) dt and the
counts are multinomial, whose generating function is E[prod_y z_y^(c_y)] = (sum_y q_y z_y)^K,

    E[c_x e^(-tS)] = K q_x e^(-t w_x) G(t)^(K-1),     G(t) = sum_y q_y e^(-t w_y),

and every quantity of the programs is one integral over t of O(V) sums:

* inner system (all K drafts in H*, reject weight b = 1): G(t) = c0 + sum_(y in H*, p_y > 0) q_y e^(-t w_y), with
  c0 = q(H* tokens of p = 0, weight 0);
* outer system (some draft outside H*, choice among the outer drafts, b = 0): G(t) = c0 + sum_(y outside H*) q_y
  e^(-t w_y), with c0 = q(H*) (an inner draft counts in no sum).

The chosen law of token x is m_x = q_x Phi(w_x) with

    Phi(w) = lo + K w int_0^inf e^(-t(b + w)) D(t) dt,   D = G^(K-1) (b = 1),  D = G^(K-1) - c0^(K-1) (b = 0),

lo = 0 (inner) or K c0^(K-1) (outer: the chance that x is the only outer draft), rising to hi = K G(0)^(K-1). So
the programs' optimum (m_x = p_x on the inner tokens and on the outer tokens of weight below 1, by the KKT
conditions) is a fixed point in the one function G: w_x = Phi_G^(-1)(p_x / q_x), G = c0 + sum_x q_x e^(-t w_x).
The weight depends on the token only through its ratio r = p/q. The reject mass of the inner system is
int_0^inf e^(-t) G(t)^K dt, the objectives are Frullani integrals (log X = int (e^(-t) - e^(-tX))/t dt), and the
Hessian uses 1/(b + S)^2 = int t e^(-t(b + S)) dt with E[c_x c_z e^(-tS)] = K(K-1) q_x q_z e^(-t(w_x + w_z))
G^(K-2) + [x = z] K q_x e^(-t w_x) G^(K-1).

Quadrature and its error. In s = log t the integrand of Phi - lo, f(s) = K w e^s e^(-e^s (b + w)) D(e^s), is
analytic in the strip |Im s| < pi/2, and |G(e^(s+iy))| <= G(e^s cos y) (D likewise: a polynomial in G - c0 with
positive coefficients), so int |f(s + iy)| ds <= (Phi - lo) / cos y. The trapezoid rule with step h then errs by at
most 2 (Phi - lo) / (cos a (e^(2 pi a / h) - 1)) for every a < pi/2 (Trefethen & Weideman, SIAM Review 2014,
Thm 5.1): at h = ``STEP`` = 0.25 the minimum over a is 9.8e-16 of Phi - lo. The sum is cut where its tails are
below 2e-17 K in absolute terms: t >= 2^-56 / max(1, w_max) on the left (the integrand is at most K w t there) and
t (b + w_min) <= 45 on the right (at most K tau e^-tau beyond). G itself is summed exactly at the nodes.

The sums over the vocabulary. G(t_l) at T nodes over V tokens, and Phi at V tokens over T nodes, would cost V T
exponentials. Tokens are grouped instead by log weight into clusters of width eta = ``STEP`` / ``REFINE`` centred on
w_c = e^(c eta), and e^(-t w) = e^(-t w_c) sum_(k < n) (-t w_c eps)^k / k! + R_n with eps = w / w_c - 1,
|eps| <= e^(eta/2) - 1: |R_n| <= e^(-tau(1 - |eps|)) (tau |eps|)^n / n! (tau = t w_c), at most
(|eps| / (1 - |eps|))^n / sqrt(2 pi n) over all tau. With eta = 1/16 that ratio is 0.0328, so n = ``TERMS`` = 11
terms err by 1e-17 per unit mass in G and by at most 2 K D(0) 0.0328^11 / (1 - |eps|) < 1e-16 K in Phi. The cost
is V n for the cluster moments sum_(x in c) q_x eps_x^k and for the per-token series, and (clusters x nodes x n)
for the tables, whose tau = t_l w_c lie on one geometric grid (both grids are powers of e^eta).

Solving. The fixed point is found in three stages (``luce_solver.solve_system``): the convex program on a
compressed measure (the tokens' q and p mass binned by the logit y = log((r - lo) / (hi - r)) of their ratio;
lumping tokens of equal weight is exact for the count-weighted rule), solved by Newton with these integrals; chord
steps on G at the nodes whose Jacobian comes from bins of the current weights, every token's weight read off the
inverse of y(log w) (solved at the tokens themselves when they are few, else on a grid in y and interpolated by
cubic Hermite); and the p_I of the weights finally used, computed with ``TERMS`` terms from the G of those
weights. Only acceptance depends on how well the fixed point is met; p_I is always the law of the weights used.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from verispec.native import series

#: Trapezoid step in s = log t (relative discretisation error below 1e-15; see the module docstring).
STEP = 0.25
#: Clusters per quadrature step: cluster width eta = STEP / REFINE in log weight.
REFINE = 4
CLUSTER_WIDTH = STEP / REFINE
#: Taylor terms per cluster for the final p_I (error below 1e-16 K) and while solving (below 1e-10).
TERMS = 11
SOLVE_TERMS = 6
#: The quadrature's tails: t (b + w_min) <= TAIL on the right, t <= HEAD / max(1, w_max) on the left.
TAIL = 45.0
HEAD = 2.0 ** -56
#: Largest inner log weight (a face of the polytope sends weights to infinity; e^60 is past float precision).
INNER_CEILING = 60.0
#: Smallest outer log weight relative to the largest (1): a token whose ratio sits at the outer threshold.
OUTER_FLOOR = -60.0
#: Bins of the compressed measure the convex program is solved on, and of the chord's Jacobian.
BINS = 48
JACOBIAN_BINS = 96
#: Tokens solved one by one up to this many; beyond, on a grid in y of this many points at most.
GRID_POINTS = 2048
GRID_STEP = 0.02
#: Chord steps on G at most, and the residual max |G_true - G| (absolute) at which they stop: solving at the
#: tokens, and on a grid (whose interpolation costs acceptance near 1e-10 anyway).
ROUNDS = 40
ROUND_TOLERANCE = 1e-14
GRID_TOLERANCE = 1e-10


@dataclass(frozen=True)
class Nodes:
    """Trapezoid nodes t_l = e^((first + l) STEP) and weights STEP t_l (dt = t ds)."""

    first: int
    t: np.ndarray       # [T]
    weight: np.ndarray  # [T]

    @classmethod
    def covering(cls, smallest: float, largest: float, reject: int) -> Nodes:
        """Nodes for log weights in [smallest, largest] (see the module docstring for the tails)."""
        low, high = _tails(smallest, largest, reject)
        first = math.floor(low / STEP)
        count = math.ceil(high / STEP) - first + 1
        s = (first + np.arange(count)) * STEP
        t = np.exp(s)
        return cls(first=first, t=t, weight=STEP * t)

    @property
    def size(self) -> int:
        return len(self.t)

    def within(self, smallest: float, largest: float, reject: int) -> slice:
        """The slice of these nodes that ``covering(smallest, largest, reject)`` would give (the rest lie beyond the
        tails of those log weights)."""
        low, high = _tails(smallest, largest, reject)
        start = min(max(math.floor(low / STEP) - self.first, 0), self.size)
        return slice(start, max(min(math.ceil(high / STEP) - self.first + 1, self.size), start))


def _tails(smallest: float, largest: float, reject: int) -> tuple[float, float]:
    """The ends in s = log t of the quadrature for log weights in [smallest, largest] (the module docstring)."""
    return math.log(HEAD) - max(largest, 0.0), math.log(TAIL) - (0.0 if reject else smallest)


@dataclass(frozen=True)
class Located:
    """Tokens placed in clusters: index [n] (0..C-1) and eps = w / w_c - 1 [n]."""

    index: np.ndarray
    eps: np.ndarray


class Expansion:
    """e^(-t_l w) for every node and every w in [e^lower, e^upper], as Taylor series around the cluster centres.

    tables [l, k, c] = e^(-tau) (-tau)^k / k! with tau = t_l w_c: a slice of one sequence over the geometric grid
    tau = e^(m eta), m = REFINE * (nodes.first + l) + c_first + c. Their size is bounded by the ranges the systems
    allow: log weights in [-42, 60] (inner) or [-60, 0] (outer), at most 411 nodes: 60 MB at most, about 10 MB for
    the laws of ``benchmarks/bench_globalres.py``. The compiled route never builds them: the sums and coefficients
    read the sequence [terms, M] (tens of kB, in cache) in place (``series.window_sums``, ``window_coefficients``),
    each sum in a fixed order (over (k, c) for a node's sum, over the nodes for a coefficient), which the numpy route
    reproduces on the tables with sequential reductions (``series.reference_window_*``), so both agree bit for bit.
    That order is not the BLAS products' this code took up to 3881aaf: the solver's iterates move in the last bits,
    and in flat directions of the programs (a common scale of inner weights near e^22 where alpha* is 1 - 1e-10)
    weights moved by up to 1.1e-5 relative, with every draft's choice probability and p_I within 5e-13 and H* the
    same (114 nodes, V up to 151,936, against 13026f1; issue 66, item 5).
    """

    def __init__(self, nodes: Nodes, lower: float, upper: float, terms: int = TERMS):
        self.nodes = nodes
        self.first = math.floor(lower / CLUSTER_WIDTH) - 1
        self.size = math.ceil(upper / CLUSTER_WIDTH) + 1 - self.first + 1
        offset = REFINE * nodes.first + self.first
        tau = np.exp((offset + np.arange(REFINE * (nodes.size - 1) + self.size)) * CLUSTER_WIDTH)
        self.terms = terms
        self.sequence = np.empty((terms, len(tau)))                                           # [terms, M]
        self.sequence[0] = np.exp(-tau)
        for k in range(1, terms):
            self.sequence[k] = self.sequence[k - 1] * (-tau / k)
        self.centres = (self.first + np.arange(self.size)) * CLUSTER_WIDTH

    @functools.cached_property
    def tables(self) -> np.ndarray:
        """[T, terms, C] (the numpy route's copy of the windows; the compiled route reads the sequence in place)."""
        windows = np.lib.stride_tricks.sliding_window_view(self.sequence, self.size, axis=1)  # [terms, M - C + 1, C]
        return np.ascontiguousarray(windows[:, ::REFINE][:, : self.nodes.size].transpose(1, 0, 2))

    @functools.cached_property
    def phases(self) -> np.ndarray:
        """The sequence as ``series.window_phases`` lays it out for the compiled sums."""
        return series.window_phases(self.sequence, REFINE)

    def locate(self, log_weight: np.ndarray, slot: str | None = None) -> Located:
        """The cluster of each log weight (which must lie in [lower, upper]) and its eps (on the compiled route in
        this thread's buffers ``slot`` when given: valid until the next locate with that slot)."""
        found = series.locate(log_weight, 1 / CLUSTER_WIDTH, self.first, self.centres, slot)  # one compiled pass
        if found is not None:
            return Located(*found)
        # in place where it can be: a fresh [n] array costs its page faults again on this kind of machine
        scaled = np.multiply(log_weight, 1 / CLUSTER_WIDTH)
        index = np.rint(scaled, out=scaled).astype(np.int64)
        index -= self.first
        np.clip(index, 0, self.size - 1, out=index)
        eps = self.centres.take(index, out=scaled)
        np.subtract(log_weight, eps, out=eps)
        return Located(index, np.expm1(eps, out=eps))

    def sums(self, located: Located, mass: np.ndarray, terms: int) -> np.ndarray:
        """sum_x mass_x e^(-t_l w_x) at every node [T]."""
        moments = series.moments(located.index, located.eps, mass, self.size, terms)  # one compiled pass
        if moments is None:
            power = np.array(mass, dtype=np.float64)
            moments = np.empty((terms, self.size))
            for k in range(terms):
                moments[k] = np.bincount(located.index, power, minlength=self.size)
                if k + 1 < terms:
                    power *= located.eps
        moments = moments[:terms]
        total = series.window_sums(self.phases, moments, self.nodes.size, REFINE)  # one compiled pass, else numpy's
        return series.reference_window_sums(self.tables, moments) if total is None else total

    def coefficients(self, node_vector: np.ndarray, terms: int) -> np.ndarray:
        """B [C, terms] with sum_l a_l e^(-t_l w) = sum_k eps^k B[c, k] for w in cluster c (a [T])."""
        found = series.window_coefficients(self.sequence, node_vector, terms, self.size, REFINE)
        return series.reference_window_coefficients(self.tables, node_vector, terms) if found is None else found

    @staticmethod
    def evaluate(coefficients: np.ndarray, located: Located, derivative: bool = False):
        """sum_k eps^k B[index, k] per token, and its derivative in log w when asked."""
        found = series.evaluate(coefficients, located.index, located.eps, derivative)  # one compiled pass
        if found is not None:
            return found
        terms = coefficients.shape[1]
        columns = np.ascontiguousarray(coefficients.T)  # [terms, C]: one take per term, not a 2-D gather
        index, eps = located.index, located.eps
        value = columns[terms - 1].take(index)
        slope = np.zeros_like(value) if derivative else None
        term = np.empty_like(value)
        for k in range(terms - 2, -1, -1):
            if derivative:
                slope *= eps
                slope += value
            value *= eps
            value += columns[k].take(index, out=term)
        if derivative:
            np.add(eps, 1, out=term)
            slope *= term
        return (value, slope) if derivative else value

    @staticmethod
    def chosen(coefficients: np.ndarray, located: Located, weight: np.ndarray, drafts: int, low: float,
               slot: str | None = None) -> np.ndarray:
        """Phi(w) = lo + K w sum_k eps^k B[index, k] per token (``weight`` = w [n]; on the compiled route in this
        thread's buffer ``slot`` when given)."""
        found = series.evaluate(coefficients, located.index, located.eps, weight=weight, factor=drafts, low=low,
                                slot=slot)
        if found is not None:
            return found
        value = Expansion.evaluate(coefficients, located)
        value *= weight
        value *= drafts
        value += low
        return value


#: exp(x) is 0 in float64 for every x below this (e^-745.14 is below half the smallest subnormal, 2^-1075).
UNDERFLOW = -746.0


def decay_table(weight: np.ndarray, t: np.ndarray) -> np.ndarray:
    """e^(-w t) [len(weight), len(t)]: numpy's exp where -w t >= ``UNDERFLOW`` and 0 elsewhere, where that exp is 0
    anyway (the same bits as np.exp(-np.outer(w, t))). numpy's SIMD exp runs about 9 times slower on arguments that
    underflow (92 against 11 us for 20,000 of them on this project's EPYC), and in the programs' [bins, nodes]
    tables most of them do: the nodes t_l span e^100 and more."""
    exponent = np.multiply.outer(-weight, t)  # the bits of -outer(w, t): negation is exact
    return np.exp(exponent, out=np.zeros_like(exponent), where=~(exponent < UNDERFLOW))


def positive_binomial_tail(fixed: float, free: np.ndarray, power: int) -> np.ndarray:
    """(fixed + free)^power - fixed^power as a sum of positive terms (no cancellation; free >= 0)."""
    out = np.zeros_like(free)
    for i in range(1, power + 1):
        out += math.comb(power, i) * fixed ** (power - i) * free ** i
    return out


@dataclass(frozen=True)
class ChoiceSystem:
    """One of Global Resolution's two systems: its free tokens (mass q and ratio r = p / q), K, the reject weight
    b (1 inner, 0 outer), the mass c0 that stays in G at every t, and the bounds on log weights."""

    mass: np.ndarray    # [n] q of the free tokens
    ratio: np.ndarray   # [n] p / q
    drafts: int
    reject: int
    fixed: float
    lower: float
    upper: float

    @functools.cached_property
    def low(self) -> float:
        """Phi at weight 0+ (outer: the chance that the token is the only outer draft)."""
        return 0.0 if self.reject else self.drafts * self.fixed ** (self.drafts - 1)

    @functools.cached_property
    def high(self) -> float:
        """Phi at infinite weight: K G(0)^(K-1)."""
        return self.drafts * (self.fixed + float(self.mass.sum())) ** (self.drafts - 1)

    def logit(self, ratio: np.ndarray) -> np.ndarray:
        """y = log((r - lo) / (hi - r)), +-inf outside (lo, hi)."""
        low, high = self.low, self.high
        found = series.logit(ratio, low, high, "logit")  # two compiled passes around numpy's logs
        if found is not None:
            return found
        with np.errstate(divide="ignore", invalid="ignore"):
            value = np.subtract(ratio, low)  # in place: log(r - lo) - log(hi - r)
            np.log(value, out=value)
            rest = np.subtract(high, ratio, out=series.scratch("logit", len(ratio)))  # no fresh [n] temporary
            value -= np.log(rest, out=rest)
        value[np.flatnonzero(ratio >= high)] = np.inf  # few of them: set where they are, no [n] selects
        value[np.flatnonzero(ratio <= low)] = -np.inf
        return value

    @functools.cached_property
    def target(self) -> np.ndarray:
        """p of the free tokens, q r [n] (the programs' target; computed once)."""
        return self.mass * self.ratio

    def kernel(self, nodes: Nodes, free: np.ndarray) -> np.ndarray:
        """a_l = weight_l e^(-b t_l) D(t_l) from G - c0 at the nodes, so that Phi(w) = lo + K w sum_l a_l e^(-t_l w)."""
        power = self.drafts - 1
        if self.reject:
            tail = (self.fixed + free) ** power
        else:
            tail = positive_binomial_tail(self.fixed, free, power)
        return nodes.weight * np.exp(-self.reject * nodes.t) * tail

    def curve(self, log_weight: np.ndarray, value: np.ndarray, slope: np.ndarray):
        """(y, dy/du) at u = log w from J = sum a e^(-tw) and dJ/du."""
        chosen = self.drafts * np.exp(log_weight) * value  # Phi - lo
        span = self.high - self.low
        rest = np.maximum(span - chosen, span * 1e-300)
        return np.log(chosen) - np.log(rest), (1 + slope / value) * span / rest

    def program(self, nodes: Nodes, mass: np.ndarray, target: np.ndarray):
        """The convex program on a measure of bins (their q ``mass`` and p ``target``): a -> (objective, gradient
        without the target, Hessian) of E[log(b + S); rows], by the integrals (the Newton solver's moments). Each
        call sums over the part of ``nodes`` that covers its own weights (``Nodes.within``): the nodes cover every
        weight the bounds allow (413 of them), the bins' weights a range often half as wide, and the nodes left out
        add less than the tails' 2e-17 K."""
        K, b, c0 = self.drafts, self.reject, self.fixed
        all_decay = np.exp(-b * nodes.t)
        total = (c0 + float(mass.sum())) ** K - (0.0 if b else c0 ** K)

        def moments(log_weight):
            weight = np.exp(log_weight)
            live = nodes.within(float(log_weight.min()), float(log_weight.max()), b)
            part = Nodes(first=nodes.first + live.start, t=nodes.t[live], weight=nodes.weight[live])
            t, decay = part.t, all_decay[live]
            table = decay_table(weight, t)              # [B, T]
            free = mass @ table                         # G - c0
            whole = c0 + free
            if b:
                integrand = decay * (total - whole ** K)
            else:
                integrand = np.exp(-t) * total - positive_binomial_tail(c0, free, K)
            objective = STEP * float(integrand.sum())
            chosen = mass * (self.low + K * weight * (table @ self.kernel(part, free)))
            spread = (mass * weight)[:, None] * table    # [B, T]
            cross = part.weight * t * decay * K * (K - 1) * whole ** (K - 2)
            own = K * mass * weight ** 2 * (table @ (part.weight * t * decay * whole ** (K - 1)))
            hessian = np.diag(chosen - own) - (spread * cross) @ spread.T
            return objective, chosen, hessian

        return moments
