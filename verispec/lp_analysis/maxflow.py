"""An optimal single-position coupling by maximum flow: the OT optimum without a linear-program solver.

The OT LP (``ot.py``) rewards pi(x, y) only when y is in the SET of drafts of x, so its value depends on the
draft outcomes only through their sets S, with masses Q(S). It is the bipartite flow of
``single_position.py``'s min-cut argument:

    source -> S (capacity Q(S)),  S -> y for y in S (capacity Q(S)),  y -> sink (capacity p(y)).

A maximum flow f gives the accepted mass; the rest of each set, r(S) = Q(S) - sum_y f(S, y), is matched with
the rest of each token, c(y) = p(y) - sum_S f(S, y), in proportion (r(S) c(y) / sum c). The coupling of an
ordered outcome x with set S is pi(x, .) = Q(x) / Q(S) * (f(S, .) + r(S) c / sum c): its rows are Q and its
columns p, and its acceptance is the max-flow value, which equals alpha* = 1 + min_U [p(U) - Q(S inside U)]
(max-flow / min-cut), the LP optimum.

Edmonds-Karp (shortest augmenting paths) on at most 2^V + V + 2 nodes; it runs in the number system of its
inputs, so with Fractions the coupling and its acceptance are exact. tests/lp_analysis/test_maxflow_coupling.py holds it
to the LP (``ot_coupling``) and to the closed form.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from verispec.lp_analysis.ot import OTCoupling


def _max_flow(capacity: list[dict[int, object]], source: int, sink: int, zero) -> list[dict[int, object]]:
    """Edmonds-Karp on a residual-capacity adjacency list (modified in place); returns the flow on every
    original edge as flow[u][v] (capacity minus residual, for the edges given)."""
    original = [dict(edges) for edges in capacity]
    for u, edges in enumerate(original):  # reverse edges with zero capacity
        for v in edges:
            capacity[v].setdefault(u, zero)
    while True:
        parent = {source: None}
        queue = deque([source])
        while queue and sink not in parent:
            u = queue.popleft()
            for v, residual in capacity[u].items():
                if residual > 0 and v not in parent:
                    parent[v] = u
                    queue.append(v)
        if sink not in parent:
            break
        bottleneck, v = None, sink
        while parent[v] is not None:
            u = parent[v]
            residual = capacity[u][v]
            bottleneck = residual if bottleneck is None or residual < bottleneck else bottleneck
            v = u
        v = sink
        while parent[v] is not None:
            u = parent[v]
            capacity[u][v] = capacity[u][v] - bottleneck
            capacity[v][u] = capacity[v][u] + bottleneck
            v = u
    return [{v: cap - capacity[u][v] for v, cap in edges.items()} for u, edges in enumerate(original)]


@dataclass(frozen=True, eq=False)
class SetFlow:
    """A maximum flow of the draft law's sets into p.

    outcomes   ordered draft tuples x, with ``probabilities`` Q(x)
    set_of     set index of every outcome
    sets       the distinct draft sets S, with ``set_mass`` Q(S)
    accepted   [num_sets, V] flow f(S, y), zero for y outside S; its total is alpha*
    """

    outcomes: tuple[tuple[int, ...], ...]
    probabilities: np.ndarray
    set_of: list[int]
    sets: list[frozenset[int]]
    set_mass: np.ndarray
    accepted: np.ndarray


def set_flow(p: np.ndarray, draft_law: Mapping[tuple[int, ...], object]) -> SetFlow:
    """A maximum flow from the draft sets (capacity Q(S)) through their members into p (capacity p(y))."""
    size = len(p)
    exact = p.dtype == object
    zero = 0 * p[0]
    outcomes = tuple(tuple(int(t) for t in outcome) for outcome in draft_law)
    probabilities = np.array([draft_law[outcome] for outcome in outcomes], dtype=object if exact else np.float64)
    index_of: dict[frozenset[int], int] = {}
    set_of, set_mass = [], []
    for outcome, probability in zip(outcomes, probabilities):
        index = index_of.setdefault(frozenset(outcome), len(index_of))
        if index == len(set_mass):
            set_mass.append(zero)
        set_mass[index] = set_mass[index] + probability
        set_of.append(index)
    sets = list(index_of)
    # nodes: 0 source, 1..m sets, m+1..m+V tokens, m+V+1 sink
    m = len(sets)
    source, sink = 0, m + size + 1
    capacity: list[dict[int, object]] = [dict() for _ in range(sink + 1)]
    for index, members in enumerate(sets):
        capacity[source][1 + index] = set_mass[index]
        for token in members:
            capacity[1 + index][1 + m + token] = set_mass[index]
    for token in range(size):
        capacity[1 + m + token][sink] = p[token]
    flow = _max_flow(capacity, source, sink, zero)
    accepted = np.full((m, size), zero, dtype=probabilities.dtype)
    for index, members in enumerate(sets):
        for token in members:
            accepted[index, token] = flow[1 + index][1 + m + token]
    accepted = np.maximum(accepted, 0 * accepted)  # residuals may round a hair above a capacity
    return SetFlow(outcomes=outcomes, probabilities=probabilities, set_of=set_of, sets=sets,
                   set_mass=np.array(set_mass, dtype=probabilities.dtype), accepted=accepted)


def maxflow_coupling(p: np.ndarray, draft_law: Mapping[tuple[int, ...], object]) -> OTCoupling:
    """An optimal coupling of the draft law {ordered tuple: probability} and p, by maximum flow."""
    flow = set_flow(p, draft_law)
    set_rest = flow.set_mass - flow.accepted.sum(axis=1)
    token_rest = p - flow.accepted.sum(axis=0)
    set_rest = np.maximum(set_rest, 0 * set_rest)  # float rounding only; exact flows are feasible
    token_rest = np.maximum(token_rest, 0 * token_rest)
    total = token_rest.sum()
    per_set = flow.accepted + (np.outer(set_rest, token_rest / total) if total > 0 else 0 * flow.accepted)
    if p.dtype != object:
        # Rescale each set's row to exactly its mass: flows are exact only up to absolute rounding of the
        # large flows (~1e-17), which is a large relative error for a set of mass 1e-12, and the verifier
        # divides by that mass. Columns move by the same absolute rounding only.
        for index, members in enumerate(flow.sets):
            if per_set[index].sum() == 0 and flow.set_mass[index] > 0:
                # its rest met a token rest that rounded to zero: place it on its own tokens by p
                inside = np.array([p[t] if t in members else 0.0 for t in range(len(p))])
                per_set[index] = inside if inside.sum() > 0 else p
        totals = per_set.sum(axis=1)
        per_set = per_set * np.where(totals > 0, flow.set_mass / np.where(totals > 0, totals, 1.0), 0.0)[:, None]
    coupling = np.empty((len(flow.outcomes), len(p)), dtype=per_set.dtype)
    for row, (index, probability) in enumerate(zip(flow.set_of, flow.probabilities)):
        coupling[row] = per_set[index] * (probability / flow.set_mass[index])
    coupling.setflags(write=False)
    flow.probabilities.setflags(write=False)
    # acceptance = sum_x sum_{y in set(x)} pi(x, y); the rows of one set add up to its per-set row
    member = np.zeros(per_set.shape, dtype=bool)
    for index, members in enumerate(flow.sets):
        member[index, list(members)] = True
    value = np.where(member, per_set, 0 * per_set).sum()
    return OTCoupling(outcomes=flow.outcomes, probabilities=flow.probabilities, coupling=coupling,
                      optimum=value if p.dtype == object else float(value))
