"""What any verifier can reach on a FIXED (deterministic) draft tree, the best such tree of a given capacity, and the
speed-of-light bound of Pankratov & Alistarh (arXiv 2512.11718) that claims to bound it.

**The fixed-tree bound.** Let a draft law put probability one on one tree T (DDTree's, ``ddtree:B,L``; a static
tree of n-gram or EAGLE drafts). A valid verifier emits a block whose first tau tokens are the path of an accepted
node of T, and the block continued by the target follows the target's law. So P(tau >= d) <= sum over depth-d nodes
n of p(path(n)): the event needs the output's first d tokens to be one of those paths. Summing over d,

    E[tau + 1] <= 1 + sum over the non-root nodes n of T of p(path(n)),

and naive sampling (``nss``: Y ~ p at each node from the root, moving down while Y is a child) attains it: its
output is a target sample and it stops exactly when that sample leaves T. On such a tree the coupling bound is the
multi-step optimum, and no rule that uses q does better (``fixed_tree_bound``; tests/bounds/test_fixed_tree.py
checks it against the multi-step LP).

**The best tree of capacity P.** Maximise the sum of p(path) over trees of P drafted nodes. Any such tree's sum is
at most that of the P largest prefix probabilities, and the P first prefixes in the order (p(prefix) descending,
rank tuple ascending; ranks of each token under p(. | its parent), scores tied as
``verispec.simulator.ddtree.tie_key`` ties them) form a tree, since p(u t) <= p(u) and u's rank tuple is a prefix
of u t's: greedy is exact (``best_tree_paths``, by the best-first heap DDTree uses with p in place of q; the tests
check it against an
enumeration of every rooted tree of P nodes).

**Speed of light.** The paper's abstract states, for any deterministic speculative algorithm whose verifier checks
P tokens an iteration, E[X] <= (mu + mu_(2)) log(P) / mu^2 + O(1), mu the expected entropy of the target's next-token
law and mu_(2) its expected second log-moment, E[(log p(x))^2]. Only the abstract could be read here; the O(1) and the
"basic assumptions" are not known, so ``speed_of_light_term`` evaluates the leading term as written (natural log by
default) and experiments/ddtree.py measures it against the exact best tree, whose value grows as log(P) / mu for an
i.i.d. target (a first-passage time of the random walk of -log p past log P).
"""

from __future__ import annotations

import heapq
import math

import numpy as np

from verispec.errors import VerispecError
from verispec.simulator.ddtree import tie_key
from verispec.simulator.problems import Problem
from verispec.simulator.ranking import ranked_support
from verispec.simulator.trees import DraftTree

#: Most nodes ``best_tree_paths`` builds (a heap of Python tuples: about a second a hundred thousand).
MAX_CAPACITY = 1_000_000


def path_probabilities(tree: DraftTree) -> list:
    """p(path(n)) for every node n of ``tree`` (1 at the root), in the tree's number system: the product of the
    target conditionals stored along the path."""
    masses = [1 + 0 * tree.p[0][0]]
    for node in range(1, tree.num_nodes):
        parent = int(tree.parent[node])
        masses.append(masses[parent] * tree.p[parent][int(tree.token[node])])
    return masses


def fixed_tree_bound(tree: DraftTree):
    """1 + sum over the non-root nodes of p(path): the most E[tau + 1] any valid verifier reaches on ``tree`` drawn
    with probability one, attained by naive sampling (module docstring). Exact on an exact tree."""
    return sum(path_probabilities(tree))


def best_tree_paths(problem: Problem, capacity: int) -> tuple[list[tuple[int, ...]], object]:
    """(paths, value): the best tree of ``capacity`` drafted nodes for the target (module docstring), its paths in
    the order chosen (the root () first, each node after its parent; fewer when the target's positive prefixes up to
    the horizon run out), and its value 1 + sum of p(path) over its non-root nodes."""
    if not isinstance(capacity, (int, np.integer)) or isinstance(capacity, bool) or not 0 <= capacity <= MAX_CAPACITY:
        raise VerispecError(f"the capacity P of a tree is an integer from 0 to {MAX_CAPACITY:,}, got {capacity!r}")
    horizon = problem.horizon
    one = 1 + 0 * problem.target(())[0]
    paths, masses, ranked = [()], [one], {}

    def ranking(prefix):  # (tokens of positive p, best first; p): one ranking per state of the problem
        key = problem.state(prefix)
        if key not in ranked:
            ranked[key] = (ranked_support(np.asarray(problem.target(prefix))), problem.target(prefix))
        return ranked[key]

    def candidate(parent, rank, ranks):
        tokens, law = ranking(paths[parent])
        if rank >= len(tokens):
            return None
        mass = masses[parent] * law[tokens[rank]]
        return (-tie_key(mass), ranks, parent, rank, mass)

    heap = [entry for entry in [candidate(0, 0, (0,))] if entry is not None and capacity > 0 and horizon != 0]
    while heap and len(paths) <= capacity:
        _, ranks, parent, rank, mass = heapq.heappop(heap)
        paths.append(paths[parent] + (ranking(paths[parent])[0][rank],))
        masses.append(mass)
        node = len(paths) - 1
        following = [candidate(parent, rank + 1, ranks[:-1] + (rank + 1,))]
        if horizon is None or len(paths[node]) < horizon:
            following.append(candidate(node, 0, ranks + (0,)))
        for entry in following:
            if entry is not None:
                heapq.heappush(heap, entry)
    return paths, sum(masses)


def log_moments(p) -> tuple[float, float]:
    """(mu, mu_2): the entropy E[-ln p(x)] and the second log-moment E[(ln p(x))^2] of a law p [V], in nats."""
    p = np.asarray(p, dtype=np.float64)
    positive = p[p > 0]
    logs = np.log(positive)
    return float(-(positive * logs).sum()), float((positive * logs ** 2).sum())


def speed_of_light_term(mu: float, mu_2: float, capacity: int, *, base: float = math.e) -> float:
    """(mu + mu_2) log(P) / mu^2, the leading term of the bound of arXiv 2512.11718 (abstract), with mu, mu_2 given in
    nats and converted to the logarithm's ``base`` (the formula adds mu to mu_2, so its value depends on the base)."""
    if mu <= 0:
        raise VerispecError(f"the speed-of-light term needs a positive entropy mu, got {mu!r} (a point-mass target "
                            "is predicted without limit)")
    scale = math.log(base)
    mu_b, mu_2b = mu / scale, mu_2 / scale ** 2
    return (mu_b + mu_2b) * math.log(capacity, base) / mu_b ** 2
