"""Black-box test of an external verification function: stratified sampling with a guaranteed false-failure rate.

For rules exact mode cannot integrate (uniforms raced against each other, used continuously), the block law
is estimated and tested against the target's, by the definition of losslessness in docs/guides/reference.md: emit the
block, continue with the target, and the first L+1 tokens x must have law p(x).

Estimator. The draft trees are stratified: when the drafter has at most ``max_strata`` outcomes, each tree D
(exact probability Q(D)) gets n_D = ceil(N Q(D)) runs with fresh i.i.d. uniforms, weight w = Q(D) / n_D <= 1/N;
otherwise N trees are drawn from the drafter, weight 1/N each. A run emitting s contributes
w * g_x(s) to every x, with g_x(s) = 1[s is a prefix of x] p(x after s | s) in [0, 1] (the continuation is
integrated exactly rather than sampled). The estimate T_x is a sum of independent terms with
E[T_x] = p(x) when the rule is lossless.

Test. Each term lies in [0, b] (b = the largest weight) and Var(T_x) <= b E[T_x] = b p(x) under losslessness,
so Bernstein's inequality gives P(|T_x - p(x)| >= t) <= 2 exp(-t^2 / (2 b (p(x) + t / 3))) with no
large-sample approximation. Over the B sequences of positive target probability (a union bound) the test
rejects when some x deviates beyond t_x = (l b / 3) + sqrt((l b / 3)^2 + 2 l b p(x)), l = log(2 B / alpha), so
a lossless rule is called lossy with probability at most ``alpha`` (default 1e-6). A sequence of target
probability 0 with T_x > 0 is impossible for a lossless rule and rejects outright (p-value 0).

Power. A maximum over sequences misses a bias spread thinly over many sequences, so a second statistic is
tested beside it: the estimated total-variation distance TV^ = 1/2 sum_x |T_x - p(x)|. Changing one run i moves
the vector (T_x) by at most 2 w_i in L1 (a run's terms sum to w_i over x), so TV^ moves by at most w_i, and
McDiarmid's inequality gives P(TV^ - E TV^ >= s) <= exp(-2 s^2 / S) with S = sum_i w_i^2. Under losslessness
E TV^ <= 1/2 sum_x sqrt(Var T_x) <= 1/2 sum_x sqrt(b p(x)) =: m (Cauchy-Schwarz; no sequence of target
probability 0 can appear). The test rejects when TV^ > m + sqrt(S log(2 / alpha) / 2), at level alpha / 2,
and the Bernstein maximum runs at alpha / 2 too, so the false-failure rate stays at most alpha (union bound).
For any rule whose continued block law r has TV(r, p) = delta, E TV^ >= delta (Jensen), so the TV test rejects
with probability at least ``power`` as soon as delta >= detectable_tv := m + sqrt(S log(2 / alpha) / 2) +
sqrt(S log(1 / (1 - power)) / 2). That is the power statement a lossless verdict carries ("a TV of
detectable_tv or more would have been detected with probability >= power"), and since b, S <= 1/N it tells the
number of runs a requested ``detect_tv`` needs (``samples_for_power``).

Runs that raise (``raises``, a ``runner.RaiseLog``: the runs go on past a raise). The law is then unknown on the
raising inputs, and the null hypothesis is composite: SOME outputs there would make the rule lossless. Under it
the runs that did not raise have E[T_x] <= p(x) for every x (the raising mass can only add), so each term still
lies in [0, b] with Var(T_x) <= b p(x): the Bernstein maximum tests overproduction T_x - p(x) alone (one-sided;
the two-sided threshold is kept), and the TV test becomes a test of the excess E^ = sum_x (T_x - p(x))+, which
moves by at most w_i when one run changes (raising or not) and has E E^ <= 1/2 sum_x sqrt(Var T_x) <= m, so the
same threshold and McDiarmid bound hold. A rejection is then a loss no outputs on the raising inputs could undo
(``verispec.external.raises`` gives the exact counterpart), at false-failure rate ``alpha`` under the composite
null; a test without raised runs is the two-sided test above, unchanged.

A second test, ``test="binomial"``, is the plain multinomial one, independent of the above: N draft trees
drawn i.i.d. from the drafter, the block continued by *sampling* the target, and the counts of the sequences
x tested with ``verispec.statistics.exact_binomial_test`` (exact per-sequence binomial tests, Bonferroni, at
alpha / 2) beside the same TV test (each run a weight 1/N; false-failure rate at most ``alpha`` as well). It
uses no stratification and no integration, so the two tests cross-check each other; the Bernstein test is the
default because it needs fewer runs.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

import numpy as np

from verispec.errors import AnalysisTimeoutError, VerispecError
from verispec.external.runner import RAISED, FunctionRaised
from verispec.guard import budget
from verispec.guard.limits import MAX_BLACKBOX_SAMPLES as MAX_SAMPLES  # the largest test's runs
from verispec.simulator.chooser import RandomChooser
from verispec.simulator.drafters import Drafter
from verispec.simulator.laws import OutputLaw
from verispec.simulator.problems import Problem, target_conditionals, target_law
from verispec.simulator.trees import DraftTree, TreeBatch
from verispec.statistics import DEFAULT_ALPHA

#: The smallest TV a lossless verdict must have been able to detect, and with what probability.
DEFAULT_DETECT_TV = 0.01
DEFAULT_POWER = 0.99
#: Drafters with at most this many outcomes are stratified by draft tree.
MAX_STRATA = 4096
#: Rows per call of the function, and once a run raised (``RaiseLog.cut``).
CALL_ROWS = 1 << 16
RAISING_ROWS = 1 << 11
#: Over- and under-produced sequences a result lists.
SHOWN_DISCREPANCIES = 3


def discrepancies(law: np.ndarray, target: np.ndarray, count: int = SHOWN_DISCREPANCIES) -> dict:
    """The sequences a rule over- and under-produces most: {'overproduced': [...], 'underproduced': [...]}, each
    entry {'sequence', 'rule', 'target'} (law and target: arrays of shape (V,)*(L+1), the rule's law continued
    with the target, exact or estimated)."""
    difference = (law - target).reshape(-1)
    order = np.argsort(difference, kind="stable")

    def entries(indices) -> list[dict]:
        return [{"sequence": [int(t) for t in np.unravel_index(int(i), law.shape)], "rule": float(law.flat[i]),
                 "target": float(target.flat[i])} for i in indices]

    over = [i for i in order[::-1][:count] if difference[i] > 0]
    under = [i for i in order[:count] if difference[i] < 0]
    return {"overproduced": entries(over), "underproduced": entries(under)}


def _noise_bound(target: np.ndarray, largest_weight: float) -> float:
    """m = 1/2 sum_x sqrt(b p(x)): the most a lossless rule's TV estimate is expected to show (module docstring)."""
    return 0.5 * float(np.sqrt(largest_weight * np.clip(target, 0, None)).sum())


def _deviation(sum_squared_weights: float, probability: float) -> float:
    """s with exp(-2 s^2 / S) = probability (McDiarmid's bound for TV^)."""
    return math.sqrt(sum_squared_weights * math.log(1 / probability) / 2)


def samples_for_power(target: np.ndarray, detect_tv: float, alpha: float, power: float) -> int:
    """Runs that make ``detectable_tv`` <= ``detect_tv`` (b, S <= 1/N for both designs; module docstring)."""
    per_root_n = (_noise_bound(target, 1.0) + _deviation(1.0, alpha / 2) + _deviation(1.0, 1 - power))
    return max(1, math.ceil((per_root_n / detect_tv) ** 2))


@dataclass(frozen=True)
class BlackBoxResult:
    """The outcome of a black-box test (see the module docstring)."""

    samples: int
    alpha: float
    #: 'bernstein' (stratified, integrated continuation) or 'binomial' (sampled, exact binomial tests).
    test: str
    #: Sequences x of positive target probability (the union bound's count; bins for 'binomial').
    cells: int
    stratified: bool
    #: Largest weight of one run (the Bernstein range b).
    largest_weight: float
    #: min(1, 2 min(p_max, p_tv)): the maximum test's Bonferroni-adjusted p-value and the TV test's p-value,
    #: combined by the union bound; 0 for an impossible sequence.
    adjusted_p: float
    #: The estimated TV distance TV^ between the continued block law and the target's (an estimate: a lossless
    #: rule's is positive too, below ``tv_threshold`` with probability >= 1 - alpha / 2).
    tv_estimate: float
    #: The TV test rejects above this estimate.
    tv_threshold: float
    #: Every rule whose true TV is at least this is rejected with probability >= ``power``.
    detectable_tv: float
    power: float
    block_efficiency_estimate: float
    worst_sequence: tuple[int, ...]
    worst_estimate: float
    worst_target: float
    worst_threshold: float
    #: The sequences the rule over- and under-produces most (estimated), see ``discrepancies``.
    discrepancies: dict | None = None
    #: Runs that raised (left out: the test is then one-sided, see the module docstring; ``tv_estimate`` is the
    #: estimated excess sum_x (T_x - p(x))+ of the runs that did not raise).
    raised_runs: int = 0
    #: The time budget ended the test after ``samples`` runs, past a raise: the maximum test alone judged them.
    cut_short: bool = False

    @property
    def rejected(self) -> bool:
        return self.adjusted_p <= self.alpha

    def power_statement(self) -> str:
        if self.detectable_tv > 1:
            return f"too few runs to detect any TV (at most 1) with probability >= {self.power:g}"
        return (f"a TV of {self.detectable_tv:.3g} or more would have been detected with probability >= "
                f"{self.power:g}")

    def describe(self) -> str:
        test = ("Bernstein test" if self.test == "bernstein" else "exact binomial tests (Bonferroni)")
        if self.raised_runs:
            tests = ("runs before the time budget ended the test, {} of which raised: the one-sided maximum test "
                     "(Freedman's inequality, valid wherever the budget stopped the runs)" if self.cut_short else
                     "runs, {} of which raised: one-sided Bernstein and excess tests").format(self.raised_runs)
            return (f"{self.samples} {tests} on the others (what they overproduce, which no output of the raising "
                    f"runs could undo): adjusted p = {self.adjusted_p:.3g} (lossy at <= {self.alpha:g}); worst "
                    f"sequence {list(self.worst_sequence)}: estimated {self.worst_estimate:.6g} against target "
                    f"{self.worst_target:.6g}; estimated excess {self.tv_estimate:.3g}"
                    + ("" if self.cut_short else f" (noise alone stays below {self.tv_threshold:.3g})"))
        return (f"{self.samples} runs ({'stratified by draft tree' if self.stratified else 'sampled draft trees'}), "
                f"{test} over {self.cells} sequences and a TV test: adjusted p = {self.adjusted_p:.3g} (lossy at <= "
                f"{self.alpha:g}); worst {'sequence' if self.worst_sequence else 'bin'} "
                f"{list(self.worst_sequence) if self.worst_sequence else '(pooled rare sequences)'}: estimated "
                f"{self.worst_estimate:.6g} against target {self.worst_target:.6g}"
                + (f" (threshold {self.worst_threshold:.3g})" if self.test == "bernstein" else "")
                + f"; estimated TV {self.tv_estimate:.3g} (noise alone stays below {self.tv_threshold:.3g}); "
                + self.power_statement())

    def to_json(self) -> dict:
        return {"samples": self.samples, "alpha": self.alpha, "test": self.test, "cells": self.cells,
                "stratified": self.stratified,
                "adjusted_p": self.adjusted_p, "rejected": self.rejected, "tv_estimate": self.tv_estimate,
                "tv_threshold": self.tv_threshold, "detectable_tv": self.detectable_tv, "power": self.power,
                "block_efficiency_estimate": self.block_efficiency_estimate,
                "worst_sequence": list(self.worst_sequence), "worst_estimate": self.worst_estimate,
                "worst_target": self.worst_target,
                "worst_threshold": self.worst_threshold if self.test == "bernstein" else None,
                "discrepancies": self.discrepancies, "raised_runs": self.raised_runs, "cut_short": self.cut_short}


TESTS = ("bernstein", "binomial")
#: Largest number of sequences x in V^(L+1) a black-box test tabulates.
MAX_SEQUENCES = 1 << 22


def _check_options(samples, alpha: float, detect_tv: float, power: float) -> None:
    if samples is not None and not (isinstance(samples, (int, np.integer)) and not isinstance(samples, bool)
                                    and 1 <= samples <= MAX_SAMPLES):
        raise VerispecError(f"samples must be an integer in 1..{MAX_SAMPLES:,} (or None: enough for detect_tv), got "
                            f"{samples!r}")
    if not (isinstance(alpha, (int, float)) and 0 < alpha < 1):
        raise VerispecError(f"alpha must lie in (0, 1), got {alpha!r}")
    if not (isinstance(detect_tv, (int, float)) and 0 < detect_tv <= 1):
        raise VerispecError(f"detect_tv must lie in (0, 1], got {detect_tv!r}")
    if not (isinstance(power, (int, float)) and 0 < power < 1):
        raise VerispecError(f"power must lie in (0, 1), got {power!r}")


def blackbox_test(problem: Problem, drafter: Drafter, verifier, *, samples: int | None = None,
                  alpha: float = DEFAULT_ALPHA, seed: int = 0, max_strata: int = MAX_STRATA,
                  test: str = "bernstein", detect_tv: float = DEFAULT_DETECT_TV,
                  power: float = DEFAULT_POWER, raises=None) -> BlackBoxResult:
    """Test ``verifier`` (an ``ExternalVerifier``) on trees of ``drafter`` for ``problem`` (see the module
    docstring). ``samples`` None: as many runs as make every TV >= ``detect_tv`` detectable with probability
    ``power`` (capped at MAX_SAMPLES; the result's ``detectable_tv`` says what was reached). Deterministic given
    ``seed``. ``raises`` (a ``runner.RaiseLog``): the runs go on past raises, logged there, and a test with raised
    runs is one-sided (module docstring); None: a raise ends the test (``FunctionRaised``)."""
    _check_options(samples, alpha, detect_tv, power)
    if test not in TESTS:
        raise VerispecError(f"unknown black-box test {test!r}; choose one of {', '.join(TESTS)}")
    if problem.exact:
        raise VerispecError("black-box mode runs in float64; analyse a float problem (leave out --exact)")
    problem.require_depth(drafter.depth)
    drafter.check_problem(problem)
    rng = np.random.default_rng(seed)
    size, depth = problem.vocab_size, drafter.depth
    if (depth + 1) * math.log(size) > math.log(MAX_SEQUENCES):
        raise VerispecError(f"a black-box test tabulates the V^(L+1) = {size}^{depth + 1} sequences of a block, more "
                            f"than {MAX_SEQUENCES:,}; use a smaller vocabulary or a shallower tree")
    target = np.asarray(target_law(problem, depth + 1), dtype=np.float64)  # (V,)*(L+1)
    if samples is None:
        samples = min(MAX_SAMPLES, samples_for_power(target, detect_tv, alpha, power))
    if test == "binomial":
        return _binomial(problem, drafter, verifier, samples, alpha, power, rng, target, raises)
    stratified = drafter.log_num_outcomes(size) <= math.log(max_strata)
    if stratified:
        outcomes = [(tree, float(probability)) for tree, probability in drafter.outcomes(problem) if probability > 0]
        counts = [max(1, math.ceil(samples * probability)) for _, probability in outcomes]
        trees = [tree for tree, _ in outcomes]
        weights = [probability / count for (_, probability), count in zip(outcomes, counts)]
    else:
        trees, counts = _sampled_trees(problem, drafter, samples, rng, max_strata)
        weights = [1.0 / samples] * len(trees)
    emitted = [np.zeros((size,) * length) for length in range(1, depth + 2)]
    # tabulated before the runs where the budget may cut them (past a raise), so that the cut test is still computed
    conditionals = None if raises is None else [target_conditionals(problem, length) for length in range(1, depth + 1)]
    for batch, members in TreeBatch.of_trees(trees):
        if raises is not None and raises.cut:  # the runs not made count as made and raised (module docstring)
            raises.unmade += int(sum(counts[i] for i in members))
            continue
        _run_batch(verifier, batch, [trees[i] for i in members], np.array([counts[i] for i in members]),
                   np.array([weights[i] for i in members]), rng, emitted, raises)
    estimate = _continued(emitted, problem, conditionals)  # (V,)*(L+1)
    efficiency = float(sum(array.sum() * (length + 1) for length, array in enumerate(emitted)))
    squared = float(sum(count * weight ** 2 for count, weight in zip(counts, weights)))
    return _bernstein(estimate, target, sum(counts), alpha, power, max(weights), squared, stratified, efficiency,
                      raises)


def _continued(emitted: list, problem: Problem, conditionals: list | None) -> np.ndarray:
    """The block law ``emitted`` continued with the target (``OutputLaw.continued_with_target``), from the target's
    ``conditionals`` where they were tabulated beforehand."""
    if conditionals is None:
        return OutputLaw(problem.vocab_size, len(emitted) - 1, tuple(emitted)).continued_with_target(problem)
    extended = emitted[0]
    for length in range(1, len(emitted)):
        extended = extended[..., None] * conditionals[length - 1] + emitted[length]
    return extended


def _tv_test(tv_estimate: float, target: np.ndarray, largest_weight: float, squared: float, alpha: float,
             power: float) -> tuple[float, float, float]:
    """The TV test of the module docstring: (p-value of the estimate, rejection threshold at alpha / 2,
    detectable TV at ``power``)."""
    noise = _noise_bound(target, largest_weight)
    threshold = noise + _deviation(squared, alpha / 2)
    excess = tv_estimate - noise
    p_value = 1.0 if excess <= 0 else min(1.0, math.exp(-2 * excess ** 2 / squared))
    return p_value, threshold, threshold + _deviation(squared, 1 - power)


def _sampled_trees(problem, drafter, samples, rng, max_strata: int = MAX_STRATA):
    """``samples`` i.i.d. draft trees, grouped: (distinct trees, how many runs each). Grouping runs on equal
    trees changes nothing in their joint law; where the drafter's outcomes can be listed, the counts are drawn
    at once, as the Multinomial(samples, Q) they are."""
    if drafter.log_num_outcomes(problem.vocab_size) <= math.log(max_strata):
        outcomes = [(tree, float(probability)) for tree, probability in drafter.outcomes(problem) if probability > 0]
        probabilities = np.array([probability for _, probability in outcomes])
        drawn = rng.multinomial(samples, probabilities / probabilities.sum())
        kept = np.flatnonzero(drawn)
        return [outcomes[i][0] for i in kept], [int(drawn[i]) for i in kept]
    chooser = RandomChooser(rng)
    shapes: Counter = Counter()
    for index in range(samples):
        if index % 4096 == 0:
            budget.check("drawing the black-box test's draft trees")
        shapes[drafter.draw(problem, chooser)] += 1
    return [DraftTree.from_shape(problem, shape) for shape in shapes], list(shapes.values())


def _emissions(verifier, batch: TreeBatch, trees, counts, rng, raises=None):
    """Run the function ``counts[i]`` times on tree i with fresh uniforms: yields (emitted sequence, tree
    index, number of runs that emitted it); runs that raised (``raises`` given) are counted in ``raises.runs``."""
    size = batch.vocab_size
    rows = np.repeat(np.arange(len(trees)), counts)
    codes = np.empty(len(rows), dtype=np.int64)
    start = 0
    try:
        while start < len(rows) and not (raises is not None and raises.cut):
            budget.check("the black-box test's runs")
            # as many fresh uniforms as each run draws (a function drawing its own randomness may draw more on one
            # path)
            if raises is None or raises.first is None:  # no raise yet: large calls, and a raise ends one
                try:
                    codes[start:start + CALL_ROWS] = verifier.sample_codes(batch, rows[start:start + CALL_ROWS], rng)
                except FunctionRaised as error:  # these runs again, past raises, in small calls in random order
                    if raises is None:
                        raise
                    raises.add(error, 0)
                    rows[start:] = rng.permutation(rows[start:])
                    continue
                start += CALL_ROWS
            else:  # small calls, so that the budget cuts the test at most RAISING_ROWS runs late
                codes[start:start + RAISING_ROWS] = verifier.sample_codes(batch, rows[start:start + RAISING_ROWS],
                                                                          rng, raises)
                start += RAISING_ROWS
    except AnalysisTimeoutError:  # the budget ended the test: past a raise, the runs made are tested
        if raises is None or raises.first is None:
            raise
        raises.cut = True
    if raises is not None:  # the runs that raised emitted nothing; those not made, nothing either
        start = min(start, len(rows))
        raises.unmade += len(rows) - start
        rows, codes = rows[:start], codes[:start]
        kept = codes != RAISED
        raises.runs += int(len(codes) - kept.sum())
        rows, codes = rows[kept], codes[kept]
    pairs, hits = np.unique(rows * (batch.num_nodes * size) + codes, return_counts=True)
    for pair, hit in zip(pairs.tolist(), hits.tolist()):
        row, code = divmod(pair, batch.num_nodes * size)
        node, token = divmod(code, size)
        yield trees[row].paths[node] + (token,), row, hit


def _run_batch(verifier, batch: TreeBatch, trees, counts: np.ndarray, weights: np.ndarray, rng, emitted,
               raises=None) -> None:
    for path, row, hit in _emissions(verifier, batch, trees, counts, rng, raises):
        emitted[len(path) - 1][path] += hit * weights[row]


def _continuations(problem: Problem, prefix: tuple, length: int) -> tuple[list[tuple], np.ndarray]:
    """Every continuation of ``prefix`` to ``length`` tokens with its target probability."""
    sequences, probabilities = [prefix], [1.0]
    for _ in range(length - len(prefix)):
        grown, grown_probabilities = [], []
        for sequence, probability in zip(sequences, probabilities):
            law = np.asarray(problem.target(sequence), dtype=np.float64)
            for token in np.flatnonzero(law > 0):
                grown.append(sequence + (int(token),))
                grown_probabilities.append(probability * law[token])
        sequences, probabilities = grown, grown_probabilities
    return sequences, np.array(probabilities)


def _binomial(problem, drafter, verifier, samples, alpha, power, rng, target, raises=None) -> BlackBoxResult:
    from verispec.statistics import exact_binomial_test

    depth = drafter.depth
    trees, counts = _sampled_trees(problem, drafter, samples, rng)
    emitted: Counter = Counter()
    for batch, members in TreeBatch.of_trees(trees):
        if raises is not None and raises.cut:
            raises.unmade += int(sum(counts[i] for i in members))
            continue
        member_trees = [trees[i] for i in members]
        for path, _, hit in _emissions(verifier, batch, member_trees, np.array([counts[i] for i in members]), rng,
                                       raises):
            emitted[path] += hit
    observed: Counter = Counter()
    for path, hit in sorted(emitted.items()):  # every run continued by the target: one multinomial per block
        sequences, probabilities = _continuations(problem, path, depth + 1)
        drawn = rng.multinomial(hit, probabilities / probabilities.sum())
        for sequence, count in zip(sequences, drawn.tolist()):
            if count:
                observed[sequence] += count
    accepted_total = sum(hit * len(path) for path, hit in emitted.items())
    if raises is not None and (raises.runs or raises.unmade):  # each run weighs 1/N: the one-sided tests
        frequencies = np.zeros_like(target)
        for sequence, count in observed.items():
            frequencies[sequence] = count / samples
        return _bernstein(frequencies, target, samples, alpha, power, 1.0 / samples, 1.0 / samples, False,
                          accepted_total / samples, raises)
    law = {tuple(int(i) for i in index): float(target[index]) for index in zip(*np.nonzero(target > 0))}
    fit = exact_binomial_test(observed, law, alpha=alpha / 2)
    frequencies = np.zeros_like(target)
    for sequence, count in observed.items():
        frequencies[sequence] = count / samples
    tv = float(np.abs(frequencies - target).sum() / 2)
    p_tv, tv_threshold, detectable = _tv_test(tv, target, 1.0 / samples, 1.0 / samples, alpha, power)
    worst = fit.worst_bin if isinstance(fit.worst_bin, tuple) else ()
    return BlackBoxResult(samples=samples, alpha=alpha, test="binomial", cells=fit.bins, stratified=False,
                          largest_weight=1.0 / samples, adjusted_p=min(1.0, 2 * min(fit.adjusted_p, p_tv)),
                          tv_estimate=tv, tv_threshold=tv_threshold, detectable_tv=detectable, power=power,
                          block_efficiency_estimate=accepted_total / samples, worst_sequence=worst,
                          worst_estimate=fit.worst_observed / samples, worst_target=fit.worst_expected / samples,
                          worst_threshold=float("nan"), discrepancies=discrepancies(frequencies, target))


def _bernstein(estimate, target, samples, alpha, power, largest_weight, squared, stratified,
               efficiency, raises=None) -> BlackBoxResult:
    """The maximum test (Bernstein, Bonferroni over the sequences, at alpha / 2) and the TV test (alpha / 2); with
    runs that raised (``raises``), both one-sided: overproduction, and the excess in place of the TV; on a test the
    budget cut (``raises.cut``), the maximum test alone (module docstring)."""
    raised_runs = 0 if raises is None else raises.runs + raises.unmade
    cut = raises is not None and raises.cut
    positive = target > 0
    cells = int(positive.sum())
    log_term = math.log(2 * cells / (alpha / 2))
    b = largest_weight
    deviation = np.maximum(estimate - target, 0.0) if raised_runs else np.abs(estimate - target)
    threshold = log_term * b / 3 + np.sqrt((log_term * b / 3) ** 2 + 2 * log_term * b * target)
    impossible = ~positive & (estimate > 0)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        exponent = deviation ** 2 / (2 * b * (target + deviation / 3))
        p_values = np.where(positive, np.minimum(1.0, 2 * np.exp(-exponent)), 1.0)
    p_values = np.where(impossible, 0.0, p_values)
    # the sequence furthest beyond (or least inside) its threshold; an impossible one first
    ratio = np.where(impossible, np.inf, deviation / np.where(positive, threshold, np.inf))
    worst = np.unravel_index(int(np.argmax(ratio)), target.shape)
    maximum_p = 0.0 if impossible.any() else min(1.0, float(p_values.min()) * cells)
    tv = float(deviation.sum() / (1 if raised_runs else 2))  # the excess, or the TV
    p_tv, tv_threshold, detectable = _tv_test(tv, target, b, squared, alpha, power)
    if cut:  # the excess at a stopping time the runs chose: no McDiarmid bound, the maximum (Freedman) alone
        p_tv = 1.0
    shown = discrepancies(estimate, target)
    if raised_runs:  # what the raising runs leave out is missing, not shown to be underproduced
        shown["underproduced"] = []
    return BlackBoxResult(samples=int(samples) - (0 if raises is None else raises.unmade), alpha=float(alpha),
                          test="bernstein", cells=cells,
                          stratified=stratified, largest_weight=float(b),
                          adjusted_p=min(1.0, 2 * min(maximum_p, p_tv)), tv_estimate=tv, tv_threshold=tv_threshold,
                          detectable_tv=detectable, power=float(power),
                          block_efficiency_estimate=efficiency, worst_sequence=tuple(int(t) for t in worst),
                          worst_estimate=float(estimate[worst]), worst_target=float(target[worst]),
                          worst_threshold=float(threshold[worst]) if positive[worst] else 0.0,
                          discrepancies=shown, raised_runs=0 if raises is None else raises.runs, cut_short=cut)


def underpowered(result: BlackBoxResult, target: np.ndarray, detect_tv: float, clocked: bool = False) -> str:
    """What a test that did not reject but cannot detect a TV of ``detect_tv`` says, and the run that would
    (``clocked``: its runs were as many as fit the time left after exact mode)."""
    needed = samples_for_power(target, detect_tv, result.alpha, result.power)
    if clocked and needed <= MAX_SAMPLES:
        advice = f"give a larger --time-budget: the {needed:,} runs that detect a TV of {detect_tv:g} did not fit"
    elif needed <= MAX_SAMPLES:
        coarser = f", or accept a coarser --detect-tv {result.detectable_tv:.3g}" if result.detectable_tv <= 1 else ""
        advice = (f"run with --samples {needed} (or leave --samples out), which detects a TV of "
                  f"{detect_tv:g}{coarser}")
    else:
        reachable = result.detectable_tv * math.sqrt(result.samples / MAX_SAMPLES)
        advice = (f"the largest test ({MAX_SAMPLES:,} runs) detects a TV of about {reachable:.3g}: use "
                  f"--detect-tv {reachable:.3g} or more, or a smaller problem (fewer sequences)")
    reach = (f"it detects only a TV of {result.detectable_tv:.3g} or more" if result.detectable_tv <= 1 else
             "it cannot detect even the largest TV (1)")
    return (f"the test did not reject, but with {result.samples} runs {reach} (--detect-tv {detect_tv:g} was asked); "
            f"{advice}")
