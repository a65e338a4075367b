"""Labels of the delay selector: E[tau + 1] of every action of a grid at one root.

The DDTE paper (Thomas et al. 2026, arXiv 2602.16994, Sec. 6, Eq. 3) labels a (root, action) pair with a
Monte-Carlo estimate of the block efficiency E[tau + 1]: the sum over the nodes of a sampled draft tree of the
products of branching (acceptance) probabilities on the path to the node, averaged over 4 sampled trees.
verispec labels the same quantity three ways (``LabelSet.method``):

* ``exact_labels``: ``verispec.analyze`` per action (every draft tree with its probability; small problems).
* ``certified_labels``: ``verispec.certify`` per action, an interval certified to contain the exact value;
  the label is its midpoint.
* ``conditional_exact_labels``: the *conditional-exact* estimator. For each of m sampled draft trees T, the
  exact E[tau + 1 | T] = sum over nodes n of P(the verifier stops at n | T) (depth(n) + 1), from the verifier's
  batched emission law (``Verifier.emission_laws``: law[n, y] = P(accept the path to n, then emit y)); the
  label is the mean over the m trees, with its standard error. It has no verification noise, only draft noise.

The comb (one sample of draft tokens serving every action of the grid), how it is drawn and how its trees' exact
conditional values are computed: ``verispec.selector.combs``.
"""

from __future__ import annotations

import math
from contextlib import nullcontext
from dataclasses import dataclass

import numpy as np

from verispec.errors import VerispecError
from verispec.selector.combs import (
    check_comb_size,
    comb_values,
    prepare_comb_targets,
    sample_combs_together,
)
from verispec.simulator.problems import Problem

#: The ways a label is computed (``LabelSet.method``).
LABEL_METHODS = ("exact", "certified", "conditional")

#: Normal quantile of the two-sided 95% interval stored beside a conditional label (lower, upper).
Z95 = 1.959963984540054


@dataclass(frozen=True, eq=False)
class LabelSet:
    """The labels of every action of a grid at one root (arrays in grid order, float64).

    efficiency  [A]  E[tau + 1]: exact, the certified interval's midpoint, or the conditional-exact mean
    stderr      [A]  standard error of the mean (0 for exact and certified; NaN for one sample)
    lower/upper [A]  the value itself (exact); the certified interval (certified); for conditional, the normal
                     95% interval mean -/+ 1.96 stderr clipped to [1, depth + 1] (NOT certified; the sure bounds
                     [1, depth + 1] when stderr is NaN)
    method           "exact", "certified" or "conditional"
    samples          sampled combs (0 unless conditional)
    per_sample  [S, A] (conditional only) the exact conditional value of every sampled comb, so that label
                     quality studies can subsample m trees of the same roots
    """

    efficiency: np.ndarray
    stderr: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    method: str
    samples: int = 0
    per_sample: np.ndarray | None = None

    def __post_init__(self):
        if self.method not in LABEL_METHODS:
            raise VerispecError(f"label method must be one of {', '.join(LABEL_METHODS)}, got {self.method!r}")
        for name in ("efficiency", "stderr", "lower", "upper"):
            array = np.asarray(getattr(self, name), dtype=np.float64)
            array.setflags(write=False)
            object.__setattr__(self, name, array)

    def __len__(self) -> int:
        return len(self.efficiency)


# --- the three labellers --------------------------------------------------------------------------------------


def _check_grid(grid) -> None:
    if not hasattr(grid, "actions") or not grid.actions:
        raise VerispecError(f"expected an ActionGrid with at least one action, got {type(grid).__name__}")


def conditional_exact_labels(problem: Problem, grid, *, samples: int, seed: int) -> LabelSet:
    """The conditional-exact labels (module docstring; DDTE Eq. 3, averaged over ``samples`` sampled combs
    drawn from ``numpy.random.default_rng(seed)``): mean over combs of the exact E[tau + 1 | tree], its
    standard error (std with ddof 1 over sqrt(samples); NaN for one sample) and a normal 95% interval."""
    return conditional_exact_labels_together([problem], grid, samples=samples, seeds=[seed])[0]


def conditional_exact_labels_together(problems, grid, *, samples: int, seeds, together=nullcontext) -> list[LabelSet]:
    """``conditional_exact_labels(problems[i], grid, samples=samples, seed=seeds[i])`` for every i, the model
    forwards of all of them together: each draft level of every problem's combs inside one ``together()`` block,
    then the target over every problem's comb internal nodes inside another (a ``ProblemPack``'s ``together``: one
    draft pass a level and one target pass for all its members). Each problem draws from its own generator, so its
    labels are those it gets alone, up to the rounding of the larger passes."""
    _check_grid(grid)
    if isinstance(samples, bool) or not isinstance(samples, (int, np.integer)) or samples < 1:
        raise VerispecError(f"samples must be a positive integer (sampled trees per root), got {samples!r}")
    problems, seeds = list(problems), list(seeds)
    if not problems or len(seeds) != len(problems):
        raise VerispecError(f"give one seed per problem: {len(problems)} problems and {len(seeds)} seeds")
    for seed in seeds:
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
            raise VerispecError(f"seed must be a non-negative integer, got {seed!r}")
    check_comb_size(grid)
    combs = sample_combs_together(problems, grid, int(samples), [np.random.default_rng(int(seed)) for seed in seeds],
                                  together)
    with together():  # the target once over every problem's combs (comb_values then finds the laws cached)
        for problem, comb in zip(problems, combs):
            prepare_comb_targets(problem, comb)
    return [_conditional_label_set(comb_values(problem, grid, comb), grid) for problem, comb in zip(problems, combs)]


def _conditional_label_set(per_sample: np.ndarray, grid) -> LabelSet:
    """The LabelSet of conditional values [S, A]: their mean, standard error and normal 95% interval."""
    samples = per_sample.shape[0]
    mean = per_sample.mean(axis=0)                                                    # [A]
    if samples > 1:
        stderr = per_sample.std(axis=0, ddof=1) / math.sqrt(samples)
    else:
        stderr = np.full(len(mean), np.nan)
    top = np.array([action.depth + 1.0 for action in grid.actions])                  # [A] most tokens a block emits
    half = np.where(np.isnan(stderr), np.inf, Z95 * stderr)
    lower = np.clip(mean - half, 1.0, top)
    upper = np.clip(mean + half, 1.0, top)
    per_sample.setflags(write=False)
    return LabelSet(mean, stderr, lower, upper, "conditional", int(samples), per_sample)


def exact_label_method(action) -> str:
    """The engine method of an action's exact label: the walk DP without the output law for a node solver on an
    i.i.d. tree (the label needs E[tau + 1] only), else 'auto'."""
    from verispec.simulator.engine import dp_applies
    from verispec.verifiers import get_verifier

    return "dp-metrics" if dp_applies(action.drafter(), get_verifier(action.verifier)) else "auto"


def label_estimates(problem: Problem, grid, method: str = "exact") -> list[tuple[object, object]]:
    """(action, the engine's estimate of its label: ``estimate_analysis``, or ``estimate_certify`` for 'certified')
    for each distinct (verifier, tree) of ``grid`` on ``problem`` (a problem, or a ``ProblemShape`` of one);
    raises what the engine raises where an action cannot be labelled exactly at all (``ProblemTooLargeError``).
    What a build checks before its first root: a root's labels cost the sum over these."""
    from verispec.simulator.certified import estimate_certify
    from verispec.simulator.engine import estimate_analysis
    from verispec.verifiers import get_verifier

    _check_grid(grid)
    estimates = {}
    for action in grid.actions:
        if (action.verifier, action.tree) not in estimates:
            verifier = get_verifier(action.verifier)
            estimate = estimate_certify(problem, action.tree, verifier) if method == "certified" else \
                estimate_analysis(problem, action.tree, verifier, exact_label_method(action))
            estimates[(action.verifier, action.tree)] = (action, estimate)
    return list(estimates.values())


def exact_labels(problem: Problem, grid, **options) -> LabelSet:
    """Exact E[tau + 1] of every action (``verispec.analyze``; node-solver verifiers through the walk DP without
    the output law: ``exact_label_method``). ``options`` go to analyze (deadline, ...). Raises what analyze raises
    where a tree is too large for it (``ProblemTooLargeError``)."""
    from verispec.api import analyze
    from verispec.verifiers import get_verifier

    _check_grid(grid)
    requested = options.pop("method", None)
    known: dict[tuple[str, str], float] = {}
    values = []
    for action in grid.actions:
        key = (action.verifier, action.tree)
        if key not in known:
            verifier = get_verifier(action.verifier)
            method = requested or exact_label_method(action)
            result = analyze(problem, action.tree, verifier, method=method, **options)
            known[key] = float(result.block_efficiency)
        values.append(known[key])
    efficiency = np.array(values)
    return LabelSet(efficiency, np.zeros(len(values)), efficiency, efficiency, "exact")


def certified_labels(problem: Problem, grid, epsilon: float, **options) -> LabelSet:
    """Certified intervals of width at most ``epsilon`` (``verispec.certify``) for every action; the label is the
    midpoint, ``lower``/``upper`` the interval (wider than epsilon only where certify ran out of its budget and
    says so). ``options`` go to certify (max_rows, deadline, ...)."""
    from verispec.api import certify

    _check_grid(grid)
    known: dict[tuple[str, str], tuple[float, float]] = {}
    lower, upper = [], []
    for action in grid.actions:
        key = (action.verifier, action.tree)
        if key not in known:
            result = certify(problem, action.tree, action.verifier, epsilon, **options)
            known[key] = (float(result.lower), float(result.upper))
        lower.append(known[key][0])
        upper.append(known[key][1])
    lower, upper = np.array(lower), np.array(upper)
    return LabelSet((lower + upper) / 2, np.zeros(len(lower)), lower, upper, "certified")


__all__ = ["LABEL_METHODS", "LabelSet", "certified_labels", "conditional_exact_labels",
           "conditional_exact_labels_together", "exact_label_method", "exact_labels", "label_estimates"]
