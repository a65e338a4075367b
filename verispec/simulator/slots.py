"""Slot plans: how a structured drafter draws, declared by the drafter itself (``Drafter.slot_plan``).

A *slot* is one draw position, numbered breadth first; slot 0 is the root. Draws come in *groups* in
drawing order: (parent slot, child slots, without_replacement). An i.i.d. group is one independent draw
from q(. | parent) per child slot; a without-replacement group draws its slots in order without
replacement (and stops early if q's support runs out). Fast enumeration (verispec.simulator.fast_enumeration)
enumerates every assignment of tokens to slots from the plan, so a new structured drafter needs no edit
there: it declares its plan.

``exchangeable_paths``: slot tuples of paths that are i.i.d. and interchangeable (the K tail paths of a
delayed or root i.i.d. tree, each listed root to leaf, all hanging from one slot). Verifiers whose law does
not depend on the order of those paths (``Verifier.order_free``) are then enumerated over multisets of paths.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SlotPlan:
    """``parent[s]`` and ``depth[s]`` of every slot (slot 0 is the root), the draw groups in drawing order,
    and the exchangeable paths (see the module docstring)."""

    parent: tuple[int, ...]
    depth: tuple[int, ...]
    groups: tuple[tuple[int, tuple[int, ...], bool], ...]
    exchangeable_paths: tuple[tuple[int, ...], ...] = ()

    @property
    def num_slots(self) -> int:
        return len(self.parent)

    @classmethod
    def from_levels(cls, levels: list[list[tuple[int, int, bool]]]) -> SlotPlan:
        """levels[d] = [(parent slot, number of children, without_replacement)] for the draws at depth d+1.
        An i.i.d. group of several children is split into independent one-slot groups; a
        without-replacement group is kept whole (it handles absent parents and exhausted support)."""
        parent, depth, groups = [-1], [0], []
        for level in levels:
            for parent_slot, count, without in level:
                slots = tuple(range(len(parent), len(parent) + count))
                parent.extend([parent_slot] * count)
                depth.extend([depth[parent_slot] + 1] * count)
                if without:
                    groups.append((parent_slot, slots, True))
                else:
                    groups.extend((parent_slot, (slot,), False) for slot in slots)
        return cls(tuple(parent), tuple(depth), tuple(groups))
