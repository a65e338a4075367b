"""The selector's action space: delayed draft trees a = (K, L1, L2), optionally paired with a verifier.

The DDTE paper (Thomas et al. 2026, arXiv 2602.16994, Sec. 5 and Definition 5.2) lets a policy choose, once
per block and before the block's draws, a delayed tree: a trunk of L1 tokens drawn from q, then K i.i.d. paths
of L2 tokens from the trunk's end. Its grid is K in 1..4 and L1, L2 in 0..8, 324 actions (``PAPER_GRID``).
verispec also lets an action name the lossless rule that verifies the block, so one selector may choose the
pair (verifier, tree); only pairs the exact engine accepts (``check_compatible``) are in a grid.

Glossary:
* ``Action.tree``: the drafter specification, ``chain:0`` (no draft: plain decoding) when L1 = L2 = 0, else
  ``delayed:K,L1,L2``. Several actions may share a tree (every K with L2 = 0 is the trunk chain:L1), which
  is why ``Action.name`` spells K, L1 and L2 out.
* ``Action.depth`` = L1 + L2 draft forwards; ``Action.nodes`` = 1 + L1 + K L2 tree nodes, root included:
  the block time of its Eq. 11 is ``latency.block_time(depth, nodes)``. Eq. 11 prices each draft forward at one
  token's t_q; ``action_times`` prices each at its width instead (``Drafter.draft_widths``: L1 + 1 forwards of
  one token, then L2 - 1 forwards of K), which is Eq. 11 under a latency model with a flat draft step.

This module imports neither torch nor the verifiers at import time (the verifiers are resolved when a grid's
actions are first listed), so ``PAPER_GRID`` costs nothing to import.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from functools import cached_property

from verispec.errors import VerispecError, describe

#: The largest K, L1 or L2 a grid may hold (a tree of depth 2 x 64 is far beyond any useful draft).
MAX_GRID_PARAMETER = 64

#: Most (verifier, K, L1, L2) combinations a grid may name, counted before its actions are listed: every root of a
#: dataset is labelled for each action and the network has one logit per action. The paper's grid is 324; with
#: every verifier of the registry, some 5,000.
MAX_ACTIONS = 10_000


class SelectorError(VerispecError):
    """A selector, its action grid or its features cannot be built, read or used as asked."""


def _count(value, what: str, *, least: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not least <= value <= MAX_GRID_PARAMETER:
        raise SelectorError(f"{what} must be an integer from {least} to {MAX_GRID_PARAMETER}, got {describe(value)}")
    return value


@functools.lru_cache(maxsize=4096)
def _drafter(spec: str):
    from verispec.simulator.tree_specs import parse_tree

    return parse_tree(spec)


@dataclass(frozen=True)
class Action:
    """One action: the delayed tree (K, L1, L2) verified by ``verifier``."""

    verifier: str
    k: int
    l1: int
    l2: int

    def __post_init__(self):
        if not isinstance(self.verifier, str) or not self.verifier.strip():
            raise SelectorError(f"an action's verifier is a name such as 'specinfer', got {describe(self.verifier)}")
        _count(self.k, "K (paths of a delayed tree)", least=1)
        _count(self.l1, "L1 (trunk length)", least=0)
        _count(self.l2, "L2 (path length)", least=0)

    @property
    def tree(self) -> str:
        """The drafter specification: ``chain:0`` when L1 = L2 = 0, else ``delayed:K,L1,L2``."""
        return "chain:0" if self.l1 == self.l2 == 0 else f"delayed:{self.k},{self.l1},{self.l2}"

    @property
    def name(self) -> str:
        return f"{self.verifier} K={self.k} L1={self.l1} L2={self.l2}"

    @property
    def depth(self) -> int:
        """Draft forwards of one block: L1 + L2 (the K paths of one depth go in one batched forward)."""
        return self.l1 + self.l2

    @property
    def nodes(self) -> int:
        """Tree nodes, root included: 1 + L1 + K L2."""
        return 1 + self.l1 + self.k * self.l2

    def drafter(self):
        """The parsed drafter of ``tree`` (cached: actions sharing a tree share one drafter)."""
        return _drafter(self.tree)

    def as_dict(self) -> dict:
        return {"verifier": self.verifier, "k": self.k, "l1": self.l1, "l2": self.l2}


def _values(values, what: str, *, least: int) -> tuple[int, ...]:
    if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
        raise SelectorError(f"{what} must be a sequence of integers, got {describe(values)}")
    values = tuple(values)
    if not values:
        raise SelectorError(f"{what} must hold at least one value")
    for value in values:
        _count(value, f"each of {what}", least=least)
    return tuple(sorted(set(values)))


def _parse_values(text, what: str) -> tuple[int, ...]:
    """'1,2,4', '0-8' or '0-3,6' -> the integers; a sequence of integers passes through."""
    if not isinstance(text, str):
        return tuple(text) if hasattr(text, "__iter__") else (text,)
    values = []
    for item in text.split(","):
        item = item.strip()
        low, dash, high = item.partition("-")
        try:
            if dash:
                first, last = int(low), int(high)
                if last < first:
                    raise ValueError
                if last - first > MAX_GRID_PARAMETER:
                    raise SelectorError(f"{what} range {item!r} is longer than {MAX_GRID_PARAMETER + 1} values")
                values.extend(range(first, last + 1))
            else:
                values.append(int(item))
        except ValueError:
            shown = text if len(text) <= 40 else f"{text[:40]}..."
            raise SelectorError(f"cannot read {what} {shown!r}: expected integers such as '1,2,4' or a range "
                                "'0-8'") from None
    return tuple(values)


@dataclass(frozen=True)
class ActionGrid:
    """Every action (verifier, K, L1, L2) of the product grid that the exact engine accepts, in the order
    verifier, K, L1, L2. The default is the paper's grid (K 1..4, L1 and L2 0..8, SpecInfer): 324 actions."""

    ks: tuple[int, ...] = (1, 2, 3, 4)
    l1s: tuple[int, ...] = tuple(range(9))
    l2s: tuple[int, ...] = tuple(range(9))
    verifiers: tuple[str, ...] = ("specinfer",)

    def __post_init__(self):
        object.__setattr__(self, "ks", _values(self.ks, "the K values", least=1))
        object.__setattr__(self, "l1s", _values(self.l1s, "the L1 values", least=0))
        object.__setattr__(self, "l2s", _values(self.l2s, "the L2 values", least=0))
        verifiers = self.verifiers
        if isinstance(verifiers, str) or not hasattr(verifiers, "__iter__"):
            raise SelectorError(f"the verifiers must be a sequence of names, got {describe(verifiers)}")
        verifiers = tuple(verifiers)
        if not verifiers or any(not isinstance(name, str) or not name.strip() for name in verifiers):
            raise SelectorError(f"the verifiers must be at least one name, got {describe(list(verifiers))}")
        if len(set(verifiers)) != len(verifiers):
            raise SelectorError(f"a verifier is named twice in {describe(list(verifiers))}")
        object.__setattr__(self, "verifiers", verifiers)
        count = len(self.ks) * len(self.l1s) * len(self.l2s) * len(verifiers)
        if count > MAX_ACTIONS:
            raise SelectorError(f"the action grid {self.describe()} names {count:,} actions ({len(self.ks)} K x "
                                f"{len(self.l1s)} L1 x {len(self.l2s)} L2 x {len(verifiers)} verifiers), above the "
                                f"limit of {MAX_ACTIONS:,}; give fewer values")

    @cached_property
    def actions(self) -> tuple[Action, ...]:
        """The valid actions, verifier-major then K, L1, L2 (pairs ``check_compatible`` refuses are left out)."""
        from verispec.simulator.engine import check_compatible
        from verispec.verifiers import get_verifier

        actions = []
        for name in self.verifiers:
            try:
                verifier = get_verifier(name)
            except VerispecError as error:
                raise SelectorError(f"the action grid names an unknown verifier: {error}") from None
            for k in self.ks:
                for l1 in self.l1s:
                    for l2 in self.l2s:
                        action = Action(name, k, l1, l2)
                        try:
                            check_compatible(verifier, action.drafter())
                        except VerispecError:
                            continue
                        actions.append(action)
        if not actions:
            raise SelectorError(f"the action grid {self.describe()} holds no tree its verifiers accept")
        return tuple(actions)

    @cached_property
    def _positions(self) -> dict[Action, int]:
        return {action: index for index, action in enumerate(self.actions)}

    def index(self, action: Action) -> int:
        """The position of ``action`` in ``actions``."""
        try:
            return self._positions[action]
        except (KeyError, TypeError):
            raise SelectorError(f"{describe(getattr(action, 'name', action))} is not an action of the grid "
                                f"{self.describe()}") from None

    def __len__(self) -> int:
        return len(self.actions)

    def __iter__(self):
        return iter(self.actions)

    def __getitem__(self, index: int) -> Action:
        return self.actions[index]

    def describe(self) -> str:
        """One line: 'K 1-4, L1 0-8, L2 0-8, specinfer'."""
        def span(values):
            if len(values) > 2 and list(values) == list(range(values[0], values[-1] + 1)):
                return f"{values[0]}-{values[-1]}"
            return ",".join(str(v) for v in values)
        return f"K {span(self.ks)}, L1 {span(self.l1s)}, L2 {span(self.l2s)}, {','.join(self.verifiers)}"

    def as_dict(self) -> dict:
        return {"ks": list(self.ks), "l1s": list(self.l1s), "l2s": list(self.l2s), "verifiers": list(self.verifiers)}

    @classmethod
    def from_dict(cls, data) -> ActionGrid:
        """The grid ``as_dict`` wrote; its verifiers are resolved at once (a one-line SelectorError otherwise)."""
        if not isinstance(data, dict) or set(data) != {"ks", "l1s", "l2s", "verifiers"}:
            keys = sorted(data) if isinstance(data, dict) else type(data).__name__
            raise SelectorError(f"not an action grid (keys ks, l1s, l2s, verifiers), got {describe(keys)}")
        grid = cls(data["ks"], data["l1s"], data["l2s"], data["verifiers"])
        grid.actions  # noqa: B018 - resolve the verifiers at the edge
        return grid

    @classmethod
    def parse(cls, ks="1-4", l1s="0-8", l2s="0-8", verifiers="specinfer") -> ActionGrid:
        """A grid from command-line strings: integers as '1,2,4' or '0-8' (or '0-3,6'), verifiers comma
        separated ('specinfer,traversal')."""
        if isinstance(verifiers, str):
            from verispec.verifiers import split_names

            verifiers = split_names(verifiers)
        grid = cls(_parse_values(ks, "K"), _parse_values(l1s, "L1"), _parse_values(l2s, "L2"), verifiers)
        grid.actions  # noqa: B018 - resolve the verifiers at the edge
        return grid

    @property
    def max_depth(self) -> int:
        return max(action.depth for action in self.actions)

    @property
    def max_nodes(self) -> int:
        return max(action.nodes for action in self.actions)


def max_action_tree(grid: ActionGrid) -> str:
    """The smallest delayed tree containing every action's tree: ``delayed:max K,max L1,max L2`` (``chain:0``
    when the grid drafts nothing). One such tree sampled per root serves every action (the labels' "comb")."""
    return Action("specinfer", max(grid.ks), max(grid.l1s), max(grid.l2s)).tree


def action_times(grid: ActionGrid, latency):
    """T(a) for every action [A] (float64): ``latency.block_time(depth, nodes, widths)`` = the L1 + L2 draft
    forwards, each at its width (``Drafter.draft_widths``: (L1 + 1) t_q(1) + (L2 - 1) t_q(K) when L2 > 0), plus
    t_p(1 + L1 + K L2): the paper's Eq. 11 at one context length when the draft step's time does not depend on its
    width, and the measured price of the K-wide steps when it does."""
    import numpy as np

    return np.array([latency.block_time(action.depth, action.nodes, action.drafter().draft_widths)
                     for action in grid.actions], dtype=np.float64)  # [A]


def policy_action_times(grid: ActionGrid, latency, *, reads_draft: bool):
    """T(a) [A] of each action when a policy chooses it from the block's features: ``action_times``, plus one draft
    step t_q on the actions that draft nothing (depth 0) when the policy reads the draft's laws at the root
    (``verispec.selector.features.DRAFT_FEATURES``). Decoding runs the draft on the root before choosing
    (``needs_draft``, ``verispec.models.decoding``); a drafting action reuses that step as its first draw's, but a
    block that drafts nothing still paid for it. (Eq. 11 of the DDTE paper prices chain:0 at t_p(1) alone, which
    holds for a fixed tree, not for a selector that looks at the draft first.)"""
    import numpy as np

    times = action_times(grid, latency)  # [A]
    if reads_draft:
        times = times + latency.draft_step * np.array([action.depth == 0 for action in grid.actions])
    return times  # [A]


#: The paper's grid: K 1..4, L1 0..8, L2 0..8 with SpecInfer, 324 actions.
PAPER_GRID = ActionGrid()

__all__ = ["PAPER_GRID", "Action", "ActionGrid", "SelectorError", "action_times", "max_action_tree",
           "policy_action_times"]
