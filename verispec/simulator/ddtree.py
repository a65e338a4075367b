"""DDTree drafts (Ringel & Romano 2026, arXiv 2604.12989): a deterministic best-first tree of the top-B prefixes
under a product of per-position draft marginals, the draft law of a block-diffusion drafter (DFlash), which
outputs q_1 .. q_L for the L positions of a block in one forward pass, independent of the tokens drafted before.

The tree (``ddtree:B,L``). Score a prefix x_1 .. x_d (d <= L) by the product q_1(x_1) .. q_d(x_d). The tree holds
the B prefixes of positive score that come first in the order (score descending, then rank tuple ascending), where
a prefix's rank tuple lists the rank of each x_i among the tokens of q_i (best first, ties by the smaller token id:
``verispec.simulator.ranking``). A child's score never exceeds its parent's and its rank tuple extends the parent's,
so a parent always comes before its children and the top B form a tree. It is built with the paper's heap, as the
engine ports write it (vLLM PR #42910, SGLang PR #29907, hipfire ``build_ddtree_tree``; read through their review
threads and a public port of the authors' code, none copied): pop the best candidate, add it, push its next
sibling (same parent, next rank) and its first child (rank 0 at the next position). Every prefix has one such
generator before it in the order, so the pops come in that order. Equal scores are decided by the tie
rule of ``tie_key`` (equal to 12 significant digits), so a float run builds the tree its exact twin builds.
The heap's candidates need positive scores: tokens with q_i = 0 are never drafted (the ports take top-k of a
softmax, which has no zero), so
a tree may hold fewer than B nodes.

Where the marginals come from (verispec's reading; the paper's drafter is a network, a ``Problem`` gives q by
prefix): q_d is the exact marginal of position d under the problem's own draft law, q_d(x) = sum over prefixes u
of length d - 1 of q(u) q(x | u), computed by a forward pass over the problem's states (``draft_marginals``). A
block-diffusion drafter trained to match the per-position laws of the sequence targets exactly these. On a
context-free problem q_d = q. ``ProductDrafts(base, L)`` is the *product-law reading*: a problem whose draft
conditional at every prefix of length d - 1 IS q_d, so its conditionals equal its marginals and a chain sampled
from it is a DFlash draft (each position drawn from its marginal, independently); on it the DDTree marginals are
read back unchanged.

Draft law: ``DraftLaw.DETERMINISTIC``. The tree is a function of the marginals with probability one; the q stored
at its nodes (the problem's conditionals) is NOT the law that drew its children. A rule that treats a child as a
draw from q (token-level min(1, p/q), SpecInfer, Traversal, ...) is therefore not valid on it (hipfire PR #483:
"the min(1, p/q) rejection rule is provably biased for these trees"; the exact witness is in experiments/ddtree.py),
and pairing one with it is refused. Naive sampling (``nss``: Y ~ p at each node, accepted when Y is a child), what
the engines ship, is valid, and on a fixed tree it is optimal: E[tau + 1] = 1 + sum over the non-root nodes of
p(node's path) (``verispec.bounds.fixed_tree``).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Hashable

import numpy as np

from verispec.errors import ProblemTooLargeError
from verispec.simulator.chooser import Chooser
from verispec.simulator.drafters import CHAIN_LAWS, Drafter, DraftLaw, check_tree_parameters
from verispec.simulator.problems import Prefix, Problem
from verispec.simulator.ranking import ranked_support
from verispec.simulator.trees import TreeBuilder, TreeShape
from verispec.sizes import readable_count

#: Most distinct states the forward pass over the draft law may visit to compute the marginals (one draft
#: conditional each): past it a ddtree is refused before any conditional is asked for.
MAX_MARGINAL_STATES = 1_000_000
#: Most nodes a ddtree may hold (B, or every prefix of positive score when there are fewer): the exact engine
#: handles each node's [V] laws, and the multi-step LP V variables a node.
MAX_DDTREE_NODES = 100_000


def marginal_states(problem: Problem, length: int) -> float:
    """An upper bound on the states ``draft_marginals`` visits for positions 1..``length`` (prefixes of length
    0..length-1, each depth at most V^d and at most the problem's own state count), computed without any law."""
    total = 0.0
    for depth in range(length):
        log_states = min(problem.log_state_count(depth), depth * math.log(problem.vocab_size))
        total += math.exp(min(log_states, 700.0))
    return total


def check_marginal_size(problem: Problem, length: int, spec: str) -> None:
    """ProblemTooLargeError, on one line and before any conditional is asked for, when the marginals of
    positions 1..``length`` need more than ``MAX_MARGINAL_STATES`` draft conditionals."""
    states = marginal_states(problem, length)
    if states > MAX_MARGINAL_STATES:
        raise ProblemTooLargeError(
            f"{spec}: the draft marginals of positions 1..{length} at V={problem.vocab_size} sum over up to "
            f"{readable_count(math.log(states))} prefix states, above the limit of {MAX_MARGINAL_STATES:,}; "
            "use a smaller L or vocabulary, or a problem with fewer states (context-free or Markov)")


def draft_marginals(problem: Problem, length: int) -> list[np.ndarray]:
    """[q_1, .., q_length]: q_d [V] the marginal law of position d under the problem's draft, in the problem's number
    system (Fractions when exact). A forward pass over ``problem.state``: prefixes with one state share their
    conditionals, so each state's mass is carried once (context-free: one state a depth; Markov: V)."""
    check_marginal_size(problem, length, f"draft marginals of length {length}")
    if length == 0:
        return []
    one = 1 + 0 * problem.draft(())[0]  # 1 in the problem's number system
    level: dict[Hashable, tuple[Prefix, object]] = {problem.state(()): ((), one)}
    marginals = []
    for depth in range(length):
        problem.prepare_drafts([prefix for prefix, _ in level.values()])
        marginal = 0 * problem.draft(())
        following: dict[Hashable, tuple[Prefix, object]] = {}
        for prefix, mass in level.values():
            q = problem.draft(prefix)
            marginal = marginal + mass * q
            if depth + 1 == length:
                continue
            for token in np.flatnonzero(np.asarray(q != 0)):
                child = prefix + (int(token),)
                key = problem.state(child)
                held = following.get(key)
                following[key] = (child, mass * q[token]) if held is None else (held[0], held[1] + mass * q[token])
        marginals.append(marginal)
        level = following
    return marginals


class ProductDrafts(Problem):
    """``base`` with its draft replaced by the product of its draft marginals (module docstring): draft(u) =
    q_{|u|+1} whatever u, so conditionals equal marginals; the target is untouched. Defined up to ``length``."""

    def __init__(self, base: Problem, length: int):
        self.base = base
        self.length = int(length)
        self.vocab_size = base.vocab_size
        self.exact = base.exact
        self.horizon = self.length if base.horizon is None else min(base.horizon, self.length)
        base.require_depth(self.horizon)
        self.marginals = draft_marginals(base, self.horizon)

    def target(self, prefix: Prefix) -> np.ndarray:
        return self.base.target(prefix)

    def draft(self, prefix: Prefix) -> np.ndarray:
        return self.marginals[len(prefix)]

    def state(self, prefix: Prefix) -> Hashable:
        return (len(prefix), self.base.state(prefix))

    def log_state_count(self, length: int) -> float:
        return self.base.log_state_count(length)


def tie_key(score) -> float:
    """The heap key of a score: its float rounded to 12 significant digits, so scores equal up to rounding (a float
    product of the same factors in another order; a rational and its float twin) tie and fall to the rank tuple,
    the same decision in float and in exact mode (unless a tie straddles a rounding boundary of the 12th digit,
    about 1e-4 of ties; the project's tie rule, ``verispec.simulator.ranking``, has the like edge at its gap)."""
    return float(f"{float(score):.12g}")


def best_first_paths(marginals: list, budget: int) -> list[tuple[int, ...]]:
    """The top-``budget`` prefixes of positive score under the product of ``marginals`` (q_1 .. q_L, each [V]), in
    the order they are popped (each after its parent): the paper's best-first heap (module docstring)."""
    ranked = [ranked_support(np.asarray(q)) for q in marginals]  # tokens of positive mass, best first
    paths: list[tuple[int, ...]] = [()]
    scores = [1 + 0 * marginals[0][0]] if marginals else [1]
    if budget <= 0 or not marginals or not ranked[0]:
        return paths
    # entries: (-score, rank tuple, parent node, score); scores stay in the problem's number system
    first = marginals[0][ranked[0][0]]
    heap = [(-tie_key(first), (0,), 0, first)]
    while heap and len(paths) <= budget:
        _, ranks, parent, score = heapq.heappop(heap)
        depth, rank = len(ranks), ranks[-1]
        paths.append(paths[parent] + (ranked[depth - 1][rank],))
        scores.append(score)
        node = len(paths) - 1
        if rank + 1 < len(ranked[depth - 1]):  # the next sibling
            sibling = scores[parent] * marginals[depth - 1][ranked[depth - 1][rank + 1]]
            heapq.heappush(heap, (-tie_key(sibling), ranks[:-1] + (rank + 1,), parent, sibling))
        if depth < len(marginals) and ranked[depth]:  # the first child
            child = score * marginals[depth][ranked[depth][0]]
            heapq.heappush(heap, (-tie_key(child), ranks + (0,), node, child))
    return paths


class DDTreeDrafter(Drafter):
    """``ddtree:B,L``: the DDTree of B nodes over L positions (module docstring). One tree, probability one."""

    def __init__(self, budget: int, length: int):
        check_tree_parameters("ddtree", B=budget, L=length)
        self.budget, self.length = int(budget), int(length)

    def __eq__(self, other) -> bool:
        return isinstance(other, DDTreeDrafter) and (self.budget, self.length) == (other.budget, other.length)

    def __hash__(self) -> int:
        return hash(("ddtree", self.budget, self.length))

    @property
    def spec(self) -> str:
        return f"ddtree:{self.budget},{self.length}"

    @property
    def depth(self) -> int:
        return min(self.budget, self.length)  # B nodes reach depth B at most

    @property
    def draft_laws(self) -> frozenset[DraftLaw]:
        if self.depth == 0:  # the root alone: nothing drafted, every rule is valid
            return CHAIN_LAWS | {DraftLaw.DETERMINISTIC}
        return frozenset({DraftLaw.DETERMINISTIC})

    @property
    def max_nodes(self) -> int:
        return self.budget + 1

    def log_num_outcomes(self, vocab_size: int) -> float:
        return 0.0  # one tree

    def check_problem(self, problem: Problem) -> None:
        """ProblemTooLargeError, before any law is computed, when the tree would hold more than MAX_DDTREE_NODES
        nodes or its marginals need more than MAX_MARGINAL_STATES draft conditionals."""
        size = problem.vocab_size
        prefixes = sum(size ** d for d in range(1, self.depth + 1)) if self.depth * math.log(size) < 40 else math.inf
        nodes = min(self.budget, prefixes)
        if nodes > MAX_DDTREE_NODES:
            raise ProblemTooLargeError(
                f"{self.spec} at V={size} holds up to {nodes:,} drafted nodes, above the limit of "
                f"{MAX_DDTREE_NODES:,} for exact analysis; use a smaller budget B")
        check_marginal_size(problem, self.depth, self.spec)

    def draw(self, problem: Problem, chooser: Chooser) -> TreeShape:
        builder = TreeBuilder()
        paths = best_first_paths(draft_marginals(problem, self.depth), self.budget)
        node_of = {(): 0}
        for path in paths[1:]:
            node_of[path] = builder.add_child(node_of[path[:-1]], path[-1])
        return builder.shape()
