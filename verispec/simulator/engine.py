"""The exact engine: (problem, drafter, verifier) -> law of the emitted block -> metrics.

For every draft tree the drafter can produce (with its exact probability) the verifier's emission law
says, for each node n and token y, the probability of accepting the path to n and emitting y. Summing
over trees gives the law of the emitted sequence (x_1..x_tau, y), an ``OutputLaw``.

Losslessness is checked by the definition in the reference ("What lossless means for a block"): emit the
block, then continue with the target up to L+1 tokens; the result must have exactly the target's law over
V^(L+1). ``tv_distance`` is the total-variation distance between the two laws.

Methods (``analyze(method=...)``, ``choose_method``): 'closed-form' (the reference oracle: every draft tree
with its exact probability, the verifier's emission law per tree), 'enumerate' (the same, each law from the
verifier's sampling procedure by the generic enumerator), 'fast-enumeration' (the same trees as numpy arrays,
laws batched over trees of one structure; fast_enumeration.py), 'dp' and 'dp-metrics' (the walk dynamic
program for top-down node solvers on i.i.d.-structured trees; dp.py). Tests hold every fast method to the
oracle at 1e-12.

Tolerance: in float64 every law is a sum of products of at most a few hundred terms, each exact to
about 1e-16 relative; ``DEFAULT_TOLERANCE`` = 1e-12 on the total-variation distance separates rounding
from any real bias (the broken rules in the tests are biased by more than 1e-3). In exact mode
(Fractions) the tolerance is zero.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np
from tqdm import tqdm

from verispec.errors import IncompatibleDraftError, VerifierError
from verispec.simulator import fast_enumeration
from verispec.simulator.distributions import zeros
from verispec.simulator.drafters import Drafter
from verispec.simulator.problems import Problem

DEFAULT_TOLERANCE = 1e-12

#: Largest |sum - 1| of a verifier's emission law on one tree before it is reported as broken.
EMISSION_SUM_TOLERANCE = 1e-9

METHODS = ("auto", "closed-form", "enumerate", "dp", "dp-metrics", "fast-enumeration")

#: 'auto' keeps the full output law (and so checks losslessness) while it has at most this many entries.
MAX_LAW_ENTRIES = 1 << 22


def check_compatible(verifier, drafter: Drafter) -> None:
    """Raise IncompatibleDraftError unless the drafter satisfies one of the verifier's draft laws."""
    if not (drafter.draft_laws & verifier.valid_for):
        wanted = ", ".join(sorted(law.value for law in verifier.valid_for))
        has = ", ".join(sorted(law.value for law in drafter.draft_laws))
        raise IncompatibleDraftError(
            f"verifier '{verifier.name}' is valid only for draft laws [{wanted}]; tree {drafter.spec} draws [{has}]")


def target_conditionals(problem: Problem, length: int) -> np.ndarray:
    """p(. | prefix) for every prefix of the given length, shape (V,)*length + (V,)."""
    size = problem.vocab_size
    table = zeros((size,) * length + (size,), exact=problem.exact)
    for prefix in problem.prefixes(length):
        table[prefix] = problem.target(prefix)
    return table


def target_law(problem: Problem, length: int) -> np.ndarray:
    """The target's joint law of the first ``length`` tokens, shape (V,)*length."""
    joint = target_conditionals(problem, 0)
    for depth in range(1, length):
        joint = joint[..., None] * target_conditionals(problem, depth)
    return joint


@dataclass(frozen=True, eq=False)
class OutputLaw:
    """Law of the emitted block (x_1..x_tau, y). ``by_length[l - 1]`` has shape (V,)*l and holds
    P(emitted sequence = s) for every s of length l = tau + 1, for l = 1..L+1."""

    vocab_size: int
    depth: int
    by_length: tuple[np.ndarray, ...]

    def probability(self, sequence) -> float | Fraction:
        sequence = tuple(sequence)
        if not 1 <= len(sequence) <= self.depth + 1:
            return 0
        return self.by_length[len(sequence) - 1][sequence]

    def items(self):
        """(sequence, probability) for every sequence of positive probability."""
        for array in self.by_length:
            for index in zip(*np.nonzero(array != 0)):
                yield tuple(int(i) for i in index), array[index]

    def length_law(self) -> list:
        """[P(emitted length = l) for l = 1..L+1], i.e. the law of tau shifted by one."""
        return [array.sum() for array in self.by_length]

    def continued_with_target(self, problem: Problem) -> np.ndarray:
        """Law of the first L+1 tokens when the block is followed by target sampling, shape (V,)*(L+1)."""
        extended = self.by_length[0]
        for depth in range(1, self.depth + 1):
            extended = extended[..., None] * target_conditionals(problem, depth) + self.by_length[depth]
        return extended


@dataclass(frozen=True, eq=False)
class ExactResult:
    """Exact metrics of one (problem, drafter, verifier) triple."""

    verifier: str
    tree: str
    method: str
    output_law: OutputLaw | None  # None for 'dp-metrics', which keeps only the law of tau
    tv_distance: float | Fraction | None  # None when the output law was not computed
    tolerance: float
    tau_law: list
    num_draft_outcomes: int | None  # trees (or multisets of paths) enumerated; None for the DP methods
    exact: bool = False
    extras: dict = field(default_factory=dict)

    @property
    def lossless(self) -> bool | None:
        """TV distance within tolerance; None when the method did not compute the output law."""
        if self.tv_distance is None:
            return None
        return self.tv_distance <= self.tolerance

    @property
    def block_efficiency(self):
        """E[tau + 1]: expected tokens emitted per target call."""
        return sum((index + 1) * mass for index, mass in enumerate(self.tau_law))

    @property
    def expected_accepted(self):
        """E[tau]: expected accepted draft tokens."""
        return sum(index * mass for index, mass in enumerate(self.tau_law))

    @property
    def acceptance_by_depth(self) -> list:
        """[P(tau >= d) for d = 1..L]: probability that the d-th draft position is accepted."""
        return [sum(self.tau_law[d:]) for d in range(1, len(self.tau_law))]

    @property
    def conditional_acceptance(self) -> list:
        """[P(tau >= d | tau >= d - 1) for d = 1..L] (NaN where the condition has probability zero)."""
        reach = [sum(self.tau_law)] + self.acceptance_by_depth
        return [reach[d] / reach[d - 1] if reach[d - 1] > 0 else float("nan") for d in range(1, len(reach))]

    def to_json(self) -> dict:
        data = {
            "verifier": self.verifier,
            "tree": self.tree,
            "method": self.method,
            "block_efficiency": float(self.block_efficiency),
            "expected_accepted": float(self.expected_accepted),
            "tv_distance": None if self.tv_distance is None else float(self.tv_distance),
            "lossless": None if self.lossless is None else bool(self.lossless),
            "tolerance": float(self.tolerance),
            "tau_law": [float(v) for v in self.tau_law],
            "acceptance_by_depth": [float(v) for v in self.acceptance_by_depth],
            "num_draft_outcomes": self.num_draft_outcomes,
            "details": {key: (value if isinstance(value, (int, float, str, bool)) else str(value))
                        for key, value in self.extras.items()},
            "exact": self.exact,
        }
        if self.exact:
            data["exact_values"] = {
                "block_efficiency": str(self.block_efficiency),
                "expected_accepted": str(self.expected_accepted),
                "tv_distance": None if self.tv_distance is None else str(self.tv_distance),
                "tau_law": [str(v) for v in self.tau_law],
            }
        return data


def _emission_law(verifier, tree, method: str) -> np.ndarray:
    if method == "enumerate":
        return verifier.enumerated_emission_law(tree)
    return verifier.emission_law(tree)


def _check_emission_law(verifier, tree, law: np.ndarray) -> None:
    if law.shape != (tree.num_nodes, tree.vocab_size):
        raise VerifierError(f"verifier '{verifier.name}' returned an emission law of shape {law.shape}, "
                            f"expected {(tree.num_nodes, tree.vocab_size)}")
    total = law.sum()
    if tree.exact and isinstance(total, Fraction):
        bad_sum = total != 1
    else:
        bad_sum = abs(float(total) - 1.0) > EMISSION_SUM_TOLERANCE
    if bad_sum or (law < -EMISSION_SUM_TOLERANCE).any():
        raise VerifierError(f"verifier '{verifier.name}' emission law on {tree!r} is not a probability law "
                            f"(sum {float(total)!r}, min {float(law.min())!r})")


def dp_applies(drafter: Drafter, verifier) -> bool:
    """The walk DP is exact for a top-down walk of a node-local solver on i.i.d.-structured trees."""
    return (getattr(verifier, "standard_walk", False) and getattr(verifier, "solver", None) is not None
            and drafter.iid_branching is not None)


def choose_method(problem: Problem, drafter: Drafter, verifier, method: str = "auto") -> str:
    """The fastest correct method: the walk DP where it applies (keeping the output law while it has at
    most MAX_LAW_ENTRIES entries, else only the law of tau), else fast enumeration where it applies,
    whole-tree enumeration otherwise."""
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; choose one of {', '.join(METHODS)}")
    if method in ("dp", "dp-metrics") and not dp_applies(drafter, verifier):
        raise IncompatibleDraftError(
            f"method '{method}' needs a top-down solver verifier on an i.i.d.-structured tree "
            f"(chain, iid, delayed, branch-iid); '{verifier.name}' on {drafter.spec} is not one")
    if method == "fast-enumeration" and not fast_enumeration.applies(problem, drafter, verifier):
        raise IncompatibleDraftError(
            f"method 'fast-enumeration' needs a float problem, a chain, delayed, iid or branch tree and a "
            f"verifier with a batched law; '{verifier.name}' on {drafter.spec} is not one")
    if method != "auto":
        return method
    if dp_applies(drafter, verifier):
        return "dp" if problem.vocab_size ** (drafter.depth + 1) <= MAX_LAW_ENTRIES else "dp-metrics"
    if fast_enumeration.applies(problem, drafter, verifier):
        return "fast-enumeration"
    return "closed-form"


def analyze(problem: Problem, drafter: Drafter, verifier, *, method: str = "auto",
            tolerance: float | None = None, kernel_cache: dict | None = None, progress: bool = False) -> ExactResult:
    """Exact output law and metrics of ``verifier`` on trees drawn by ``drafter`` for ``problem``.

    ``method``: 'closed-form' enumerates every draft tree and uses the verifier's emission law;
    'enumerate' also runs its sampling procedure over every choice trace (the generic enumerator);
    'dp' runs the walk dynamic program (top-down solver verifiers on i.i.d.-structured trees);
    'dp-metrics' the same keyed on problem states, giving the law of tau without the output law (so no
    losslessness check); 'fast-enumeration' enumerates the trees of chain, delayed, iid and branch drafters
    as arrays and verifies them in batches (same law as 'closed-form', float64 only;
    verispec/simulator/fast_enumeration.py); 'auto' picks with ``choose_method``. ``kernel_cache`` may be
    shared between DP calls on the same problem and verifier. ``progress`` shows a progress bar over the
    draft trees of the per-tree methods.
    """
    used = choose_method(problem, drafter, verifier, method)
    check_compatible(verifier, drafter)
    problem.require_depth(drafter.depth)
    size, depth, exact = problem.vocab_size, drafter.depth, problem.exact
    if tolerance is None:
        tolerance = 0 if exact else DEFAULT_TOLERANCE
    if used in ("dp", "dp-metrics"):
        from verispec.simulator.dp import walk_dp  # the DP module imports this one's helpers

        walk = walk_dp(problem, drafter.iid_branching, verifier.solver, mode="law" if used == "dp" else "metrics",
                       kernel_cache=kernel_cache)
        if walk.emitted is None:
            return ExactResult(verifier=verifier.name, tree=drafter.spec, method=used, output_law=None,
                               tv_distance=None, tolerance=tolerance, tau_law=walk.tau_law,
                               num_draft_outcomes=None, exact=exact, extras={"dp_states": walk.num_states})
        emitted, num_outcomes, extras = list(walk.emitted), None, {"dp_states": walk.num_states}
    elif used == "fast-enumeration":
        from verispec.simulator.fast_enumeration import fast_output_law

        fast = fast_output_law(problem, drafter, verifier)
        emitted, num_outcomes = list(fast.emitted), fast.num_rows
        extras = {"topologies": fast.num_topologies, "multiset_paths": fast.multisets}
    else:
        emitted = [zeros((size,) * length, exact=exact) for length in range(1, depth + 2)]
        outcomes = drafter.outcomes(problem)
        for tree, probability in tqdm(outcomes, desc="draft trees", disable=not progress, leave=False):
            law = _emission_law(verifier, tree, used)
            _check_emission_law(verifier, tree, law)
            for node, path in enumerate(tree.paths):
                emitted[len(path)][path] += probability * law[node]
        num_outcomes, extras = len(outcomes), {}
    output_law = OutputLaw(size, depth, tuple(emitted))
    difference = output_law.continued_with_target(problem) - target_law(problem, depth + 1)
    tv_distance = abs(difference).sum() / 2
    return ExactResult(verifier=verifier.name, tree=drafter.spec, method=used, output_law=output_law,
                       tv_distance=tv_distance, tolerance=tolerance, tau_law=output_law.length_law(),
                       num_draft_outcomes=num_outcomes, exact=exact, extras=extras)
