"""Khisti et al. 2025's two-step importance-sampling node solver ("Multi-Draft Speculative Sampling: Canonical
Decomposition and Theoretical Limits", arXiv 2410.18234; docs/guides/reference.md, "Single position, K drafts").

Step 1 picks one intermediate token Y' among the node's drafts x = (x_1..x_K) with weights beta_y(x); under
K i.i.d. drafts from q, Y' has law p_I(y) = sum_x Q(x) beta_y(x). Step 2 is single-draft speculative
sampling of Y' against p with proposal p_I: accept Y' with probability min(1, p(Y') / p_I(Y')), else draw
Y ~ norm((p - p_I)+). The node's drafts are accepted iff the final Y is one of them. The rule is lossless
for ANY weights, provided p_I is the exact law of Y' (it is computed from the weights actually used, never
from an LP's objective); the weights only decide how much is accepted.

Choice of weights (``KhistiSolver(exact_limit=..., truncation=...)``):

* Optimal weights (their Thm. 1) over all ordered draft tuples, whenever the weight LP would have at most
  ``EXACT_WEIGHT_LP_MAX_VARIABLES`` = 20,000 variables (about V^K K). They are built from a maximum flow
  (``lp_analysis.importance.flow_weights``), which attains the LP's optimum sum min(p, p_I) = alpha*
  without a solver call and exactly with Fractions; the LP (``importance_weights``) is the tests' second
  derivation.
* Otherwise the deployed s-truncated scheme (their Sec. 4 / App. I; ``truncated_pair_weights``) with
  s = ``DEFAULT_TRUNCATION`` = 5 (the smallest threshold their Table 2 compares, 5, 10, 15, at equal
  block efficiency): two drafts are merged by the truncated pairwise LP (rank by p - q1 q2; free weights
  only among the top s tokens; otherwise the better-ranked token wins). For K > 2 drafts the pairwise
  rule is applied as a tournament in draft order: the winner of x_1..x_i, whose law q_W^(i) is computed
  exactly, meets x_(i+1) ~ q, and the LP of round i uses
  (q1, q2) = (q_W^(i), q). Independence of the challenger from the earlier drafts makes each round's law
  exact, so the tournament stays lossless; it is not optimal for K > 2. (The paper's own extension of the
  truncated LP beyond two drafts could not be confirmed from its text here; the tournament is verispec's
  choice.)

K = 1 is the naive rule (Y' = x_1, p_I = q). Exact mode (Fractions): the flow weights are exact; the
truncated scheme's weights are solved in float64, converted to Fractions and renormalised, and p_I is
recomputed exactly, so the rule is exactly lossless. Each (p, q, K) is solved once per solver instance.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from verispec import backend
from verispec.errors import ProblemTooLargeError
from verispec.lp_analysis.draft_laws import iid_draft_law
from verispec.lp_analysis.importance import PairSelection, flow_weights, truncated_pair_weights
from verispec.simulator.chooser import Chooser
from verispec.simulator.drafters import DraftLaw
from verispec.verifiers.node_cache import NodeCache, node_key
from verispec.verifiers.two_step import TwoStepSolver

#: Largest exact weight LP (variables) solved per node before falling back to the truncated scheme.
EXACT_WEIGHT_LP_MAX_VARIABLES = 20_000

#: Largest [V, V] pair matrix the tournament builds (2^26 float64 entries: 512 MiB, V up to 8192).
MAX_PAIR_MATRIX_ENTRIES = 1 << 26

#: s of the truncated scheme: the number of top-ranked tokens whose pairwise weights are optimised.
DEFAULT_TRUNCATION = 5


def _number(value, exact: bool):
    return Fraction(value) if exact else float(value)


@dataclass(frozen=True, eq=False)
class ExactSelection:
    """Step 1 from the exact weight LP: beta(x) for every ordered tuple x, and p_I."""

    index: dict[tuple[int, ...], int]  # x -> its row of ``weights``
    weights: np.ndarray                # [num_outcomes, V] beta_.(x)
    intermediate: np.ndarray           # [V] p_I

    def laws(self, children: np.ndarray) -> np.ndarray:
        """The law of Y' for every row of ``children`` [R, K] (host integers), [R, V]."""
        return self.weights[[self.index[tuple(row)] for row in children.tolist()]]

    def sample(self, children: tuple[int, ...], chooser: Chooser) -> int:
        return chooser.categorical(self.weights[self.index[tuple(children)]])


@dataclass(frozen=True, eq=False)
class TournamentSelection:
    """Step 1 from the truncated pairwise scheme: round i merges the winner so far with draft i + 1."""

    rounds: tuple[np.ndarray, ...]  # [V, V] first_wins[a, b] = P(pick a | winner so far a, challenger b)
    intermediate: np.ndarray        # [V] law of the final winner

    def laws(self, children: np.ndarray) -> np.ndarray:
        """The law of the winner for every row of ``children`` [R, K] (host integers), [R, V]."""
        size = len(self.intermediate)
        winner = np.where(backend.one_hot(children[:, 0], size), 1 + 0 * self.intermediate[0],
                          0 * self.intermediate[0])                                  # [R, V]
        for first_wins, challenger in zip(self.rounds, children[:, 1:].T):
            kept = winner * first_wins[:, challenger].T                               # [R, V]
            lost = (winner - kept).sum(axis=1)
            winner = backend.add_to_tokens(kept, challenger, lost)
        return winner

    def sample(self, children: tuple[int, ...], chooser: Chooser) -> int:
        winner = children[0]
        for first_wins, challenger in zip(self.rounds, children[1:]):
            if not chooser.bernoulli(first_wins[winner, challenger]):
                winner = challenger
        return winner


def _pair_matrix(selection: PairSelection, size: int, exact: bool) -> np.ndarray:
    """first_wins[a, b] for every token pair, in the problem's number system."""
    matrix = np.empty((size, size), dtype=object if exact else np.float64)
    for a in range(size):
        for b in range(size):
            matrix[a, b] = _number(selection.first_wins(a, b), exact)
    return matrix


def _merged_law(first_wins: np.ndarray, q1: np.ndarray, q2: np.ndarray) -> np.ndarray:
    """Law of the pair winner when a ~ q1 and b ~ q2 independently (exact for the rule actually used)."""
    keep = first_wins * q1[:, None] * q2[None, :]         # [V, V] P(a, b, pick a)
    switch = (1 - first_wins) * q1[:, None] * q2[None, :]  # [V, V] P(a, b, pick b)
    return keep.sum(axis=1) + switch.sum(axis=0)


def exact_selection(p: np.ndarray, q: np.ndarray, num_drafts: int) -> ExactSelection:
    """Step 1 with optimal weights for K i.i.d. drafts (a maximum flow; exact with Fractions)."""
    solved = flow_weights(p, iid_draft_law(q, num_drafts))
    index = {outcome: i for i, outcome in enumerate(solved.outcomes)}
    return ExactSelection(index=index, weights=solved.weights, intermediate=solved.intermediate)


def tournament_selection(p: np.ndarray, q: np.ndarray, num_drafts: int, truncation: int) -> TournamentSelection:
    """Step 1 from the truncated pairwise scheme applied as a tournament over the drafts in order."""
    exact = p.dtype == object
    size = len(p)
    if size * size > MAX_PAIR_MATRIX_ENTRIES:
        raise ProblemTooLargeError(
            f"khisti's truncated tournament stores a [S, S] pair matrix per round over the S tokens that p or q "
            f"gives mass to; S = {size} needs {size * size * 8 / 2**30:.0f} GiB, above the limit of "
            f"{MAX_PAIR_MATRIX_ENTRIES:,} entries (S <= {int(MAX_PAIR_MATRIX_ENTRIES ** 0.5)}); filter the laws "
            f"(--top-k / --top-p) or use another verifier")
    winner_law, rounds = q.copy(), []
    for _ in range(num_drafts - 1):
        selection = truncated_pair_weights(p, winner_law, q, truncation)
        first_wins = _pair_matrix(selection, size, exact)
        rounds.append(first_wins)
        winner_law = _merged_law(first_wins, winner_law, q)
    return TournamentSelection(rounds=tuple(rounds), intermediate=winner_law)


@dataclass(frozen=True, eq=False)
class SupportSelection:
    """A step-1 rule solved on a subset of the vocabulary (``tokens``, ascending), read at full size.

    Tokens outside the union of p's and q's supports are never drafted and never emitted, so the rule is solved
    on that union plus the ``truncation`` lowest-numbered tokens outside it: the truncated scheme ranks tokens
    by p - q1 q2 with ties broken by token id, and those are the only outside tokens (rank value 0) that can
    take a top-s slot. The compressed rule therefore takes the same decisions as the rule at full size, and
    a top-k/top-p filtered node at V = 151,936 costs what its few kept tokens cost.
    """

    tokens: np.ndarray  # [S] vocabulary ids kept, ascending
    inner: ExactSelection | TournamentSelection  # the rule on the S kept tokens
    intermediate: np.ndarray  # [V] p_I at full size

    def laws(self, children: np.ndarray) -> np.ndarray:
        compressed = self.inner.laws(np.searchsorted(self.tokens, children))  # [R, S]
        full = np.full((len(children), len(self.intermediate)), 0 * self.intermediate[0],
                       dtype=self.intermediate.dtype)  # [R, V]
        full[:, self.tokens] = compressed
        return full

    def sample(self, children: tuple[int, ...], chooser: Chooser) -> int:
        compressed = tuple(int(i) for i in np.searchsorted(self.tokens, children))
        return int(self.tokens[self.inner.sample(compressed, chooser)])


def kept_tokens(p: np.ndarray, q: np.ndarray, truncation: int) -> np.ndarray:
    """The tokens a step-1 rule is solved on (see ``SupportSelection``), ascending."""
    nonzero = np.array([bool(a) or bool(b) for a, b in zip(p, q)]) if p.dtype == object else (p > 0) | (q > 0)
    outside = np.flatnonzero(~nonzero)[:truncation]
    return np.sort(np.concatenate([np.flatnonzero(nonzero), outside]))


def _exact_lp_variables(q: np.ndarray, num_drafts: int) -> int:
    support = int(sum(1 for v in q if v > 0))
    return support ** num_drafts * min(num_drafts, support) + len(q)


class KhistiSolver(TwoStepSolver):
    valid_for = frozenset({DraftLaw.IID_CHILDREN})
    summary = "two-step importance sampling (optimal weights when small, a truncated LP otherwise)"
    citation = ("Khisti et al. 2025, arXiv 2410.18234: Thm. 1 for the optimal weights, Sec. 4 and App. I for the "
                "truncated scheme")

    def __init__(self, *, exact_limit: int = EXACT_WEIGHT_LP_MAX_VARIABLES, truncation: int = DEFAULT_TRUNCATION,
                 name: str = "khisti"):
        self.name = name
        self.exact_limit = exact_limit
        self.truncation = truncation
        # kept_tokens: the support and the `truncation` lowest-numbered tokens outside it (their places among the
        # support's tokens move the maximum flow's choice among optimal weights and the ranking's top-s slots)
        self.outside_tokens_read = truncation
        self._cache = NodeCache()

    def selection(self, p: np.ndarray, q: np.ndarray, num_drafts: int):
        """The (cached) step-1 rule at a node (host arrays): optimal weights when small enough, else the
        tournament."""
        def solve(p_kept, q_kept):
            if _exact_lp_variables(q_kept, num_drafts) <= self.exact_limit:
                return exact_selection(p_kept, q_kept, num_drafts)
            return tournament_selection(p_kept, q_kept, num_drafts, self.truncation)

        def build():
            tokens = kept_tokens(p, q, self.truncation)
            if len(tokens) == len(p):
                return solve(p, q)
            inner = solve(p[tokens], q[tokens])
            intermediate = np.full(len(p), 0 * p[0], dtype=p.dtype)  # [V]
            intermediate[tokens] = inner.intermediate
            return SupportSelection(tokens=tokens, inner=inner, intermediate=intermediate)
        return self._cache.get_or_build(lambda: node_key(p, q, num_drafts) + (self.exact_limit, self.truncation),
                                        build)

    rule = selection
