"""Fast whole-tree enumeration: every draft tree of a structured drafter as arrays, verified in batches.

Whole-tree enumeration (engine method 'closed-form') replays the drafter's procedure once per choice trace,
builds a ``DraftTree`` per outcome and asks the verifier for its law tree by tree. This does the same sum
with arrays (engine method 'fast-enumeration'): the drafter's declared slot plan is enumerated
(slot_enumeration.py), rows are grouped into batches of one topology (topology.py), each batch goes through
the verifier's ONE batched law (``Verifier.emission_laws``; node solvers through the top-down walk), and the
weighted laws are summed into the law of the emitted block by flat (prefix, token) index. 'closed-form'
stays the oracle it is tested against (tests/simulator/test_fast_enumeration.py).

Sizes are estimated in logs before anything is built, and a run estimated above ``MAX_FAST_BYTES`` of
working memory is refused with a readable size. Float64 only: exact problems use 'closed-form'.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from verispec.errors import ProblemTooLargeError
from verispec.guard import budget
from verispec.simulator.drafters import Drafter
from verispec.simulator.interfaces import Verifier
from verispec.simulator.laws import check_emission_laws
from verispec.simulator.prefix_tables import PrefixTables
from verispec.simulator.problems import Problem
from verispec.simulator.slot_enumeration import enumerate_draws
from verispec.simulator.topology import group_by_topology
from verispec.simulator.trees import TreeBatch

#: Largest estimated working memory of one fast enumeration; beyond it the run is refused up front
#: (ProblemTooLargeError) instead of exhausting the machine.
MAX_FAST_BYTES = 4 * 2**30


def applies(problem: Problem, drafter: Drafter) -> bool:
    """Fast enumeration needs a float problem and a drafter that declares a slot plan."""
    return not problem.exact and drafter.slot_plan() is not None


def uses_multisets(drafter: Drafter, verifier: Verifier) -> bool:
    """Multiset paths for order-free verifiers on drafters with exchangeable paths."""
    return verifier.order_free and bool(drafter.slot_plan().exchangeable_paths)


def log_rows(size: int, drafter: Drafter, multisets: bool) -> float:
    """Natural log of an upper bound on the rows fast enumeration holds at once."""
    if not multisets:
        return drafter.log_num_outcomes(size)
    plan = drafter.slot_plan()
    paths = plan.exchangeable_paths
    branches, length = len(paths), len(paths[0])
    sequences = length * math.log(size)
    # log C(M + K - 1, K) with M = V^L2 sequences: at most K log(M + K) - log K!
    combos = branches * math.log(math.exp(sequences) + branches) - math.lgamma(branches + 1) if sequences < 700 \
        else branches * sequences - math.lgamma(branches + 1)
    return (plan.num_slots - 1 - branches * length) * math.log(size) + combos


def log_bytes(size: int, drafter: Drafter, multisets: bool) -> float:
    """Natural log of the working memory, upper estimate: tokens, contexts and representatives per node
    (int64), p and q per node, and the batched emission laws with their weighted copy (float64)."""
    nodes = drafter.max_nodes
    return log_rows(size, drafter, multisets) + math.log(8 * (6 * nodes + 4 * nodes * size))


def readable_bytes(log_value: float) -> str:
    """'3.2 GiB', '1e+42 GiB' (from a natural log of a byte count)."""
    gib = log_value - math.log(2**30)
    return f"{math.exp(gib):.1f} GiB" if gib < 30 else f"10^{gib / math.log(10):.0f} GiB"


def check_size(problem: Problem, drafter: Drafter, multisets: bool) -> None:
    """ProblemTooLargeError, with readable sizes, when the enumeration is estimated above the limit."""
    needed = log_bytes(problem.vocab_size, drafter, multisets)
    if needed > math.log(MAX_FAST_BYTES):
        rows = log_rows(problem.vocab_size, drafter, multisets) / math.log(10)
        raise ProblemTooLargeError(
            f"exact enumeration of {drafter.spec} at V={problem.vocab_size} holds up to 10^{rows:.1f} draft trees "
            f"(about {readable_bytes(needed)}), above the {MAX_FAST_BYTES / 2**30:.0f} GiB limit; use a smaller "
            f"vocabulary or tree (node-local solvers on i.i.d. trees take the DP, which has no such limit)")


@dataclass(frozen=True, eq=False)
class FastLaw:
    """Output of ``fast_output_law``: ``emitted[l - 1]`` of shape (V,)*l, and counts for the report."""

    emitted: tuple[np.ndarray, ...]
    num_rows: int
    num_topologies: int
    multisets: bool


def tree_batches(problem: Problem, drafter: Drafter, *, multiset_paths: bool = False,
                 tables: PrefixTables | None = None) -> list[tuple[TreeBatch, np.ndarray]]:
    """Every draft tree of ``drafter`` as (batch of one topology, weight [N]) pairs."""
    problem.require_depth(drafter.depth)
    tables = tables or PrefixTables.build(problem, drafter.depth)
    return group_by_topology(enumerate_draws(drafter.slot_plan(), tables, multiset_paths=multiset_paths), tables)


def accumulate(groups: list[tuple[TreeBatch, np.ndarray]], law_function,
               tables: PrefixTables) -> tuple[np.ndarray, ...]:
    """Sum weight * law into the law of the emitted block, by flat (prefix, token) index with bincount."""
    size = tables.vocab_size
    flat = np.zeros(tables.num_prefixes * size)
    for batch, weight in groups:
        budget.check("verifying draft trees")
        laws = law_function(batch)  # [N, n, V]
        for node in range(batch.num_nodes):  # one bincount per node keeps the temporaries at [N, V]
            index = batch.contexts[:, node, None] * size + np.arange(size)[None, :]
            flat += np.bincount(index.ravel(), weights=(weight[:, None] * laws[:, node]).ravel(), minlength=len(flat))
    return tuple(flat[tables.offsets[length] * size:tables.offsets[length + 1] * size].reshape(
        (size,) * (length + 1)) for length in range(tables.depth + 1))


def fast_output_law(problem: Problem, drafter: Drafter, verifier: Verifier) -> FastLaw:
    """The law of the emitted block by fast enumeration (same result as the engine's 'closed-form')."""
    if not applies(problem, drafter):
        raise ValueError(f"fast enumeration does not apply to {drafter.spec} on this problem")
    multisets = uses_multisets(drafter, verifier)
    check_size(problem, drafter, multisets)
    tables = PrefixTables.build(problem, drafter.depth)
    groups = tree_batches(problem, drafter, multiset_paths=multisets, tables=tables)

    def checked_laws(batch: TreeBatch):
        laws = verifier.emission_laws(batch)
        check_emission_laws(verifier.name, batch, laws)
        return laws

    emitted = accumulate(groups, checked_laws, tables)
    return FastLaw(emitted=emitted, num_rows=sum(len(weight) for _, weight in groups), num_topologies=len(groups),
                   multisets=multisets)
