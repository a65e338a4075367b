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

A grid's action list is derived from each verifier's validity (``valid_actions``), which changes when a rule gains
reach (gbv on delayed trees, say): a file whose columns are a grid's actions therefore records the list itself
(``with_actions`` reads it back), and files written before lists were recorded are read under the draft-law
classification of their format (``under_format_1``, ``LAWS_AFTER_FORMAT_1``).

This module imports neither torch nor the verifiers at import time (the verifiers are resolved when a grid's
actions are first listed), so ``PAPER_GRID`` costs nothing to import.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from functools import cached_property

from verispec.errors import VerispecError, describe

#: The largest K, L1 or L2 a grid may hold (a tree of depth 2 x 64 is far beyond any useful draft).
MAX_GRID_PARAMETER = 64

#: Most (verifier, K, L1, L2) combinations a grid may name, counted before its actions are listed: every root of a
#: dataset is labelled for each action and the network has one logit per action. The paper's grid is 324; with
#: every verifier of the registry, some 5,000.
MAX_ACTIONS = 10_000

#: The draft laws (``verispec.simulator.drafters.DraftLaw`` member names) that did not exist when files recorded a
#: grid's parameters but not its action list (selector datasets of version 1, selector files of format version 1,
#: the row stores of their builds). Such a file's columns are the grid's actions as validity was then: each drafter's
#: declared laws without these (``under_format_1``). TRUNK_IID_PATHS came with psbv on delayed trees (2026-11-27);
#: until then a delayed tree K > 1, L1 > 0, L2 > 0 (and branch-iid of that shape) declared i.i.d. children alone.
#: This reproduces format 1 while every change of a rule's reach since comes with a law named here; a change by other
#: means (a rule's ``valid_for`` gaining a law that existed then) needs its own rule here, and the test of the
#: committed datasets against an enumeration of format 1's validity (tests/selector/test_action_lists.py) fails
#: until it has one. (A version-1 file written by the psbv-on-delayed-trees code of 2026-11-27, before version 2,
#: would hold psbv's delayed columns too; none was committed.)
LAWS_AFTER_FORMAT_1 = ("TRUNK_IID_PATHS",)

#: ``Action.name``: 'specinfer K=2 L1=0 L2=3'.
_ACTION_NAME = re.compile(r"(\S+) K=(\d+) L1=(\d+) L2=(\d+)")


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

    @classmethod
    def from_name(cls, text) -> Action:
        """The action ``name`` spells ('specinfer K=2 L1=0 L2=3'): how files record their action lists, readable
        where a refusal quotes them. A one-line SelectorError for anything else."""
        match = _ACTION_NAME.fullmatch(text) if isinstance(text, str) else None
        if match is None:
            raise SelectorError(f"not an action name such as 'specinfer K=2 L1=0 L2=3': {describe(text)}")
        return cls(match[1], int(match[2]), int(match[3]), int(match[4]))


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


@dataclass(frozen=True, eq=False)
class ActionGrid:
    """Every action (verifier, K, L1, L2) of the product grid that the exact engine accepts, in the order
    verifier, K, L1, L2. The default is the paper's grid (K 1..4, L1 and L2 0..8, SpecInfer): 324 actions.

    ``listed``: the action list a file recorded (``with_actions``), which the grid then holds instead of the one its
    verifiers' validity derives now, so that a rule gaining reach later does not change what a file's columns mean.
    Two grids are equal when their parameters and their actions are."""

    ks: tuple[int, ...] = (1, 2, 3, 4)
    l1s: tuple[int, ...] = tuple(range(9))
    l2s: tuple[int, ...] = tuple(range(9))
    verifiers: tuple[str, ...] = ("specinfer",)
    listed: tuple[Action, ...] | None = None

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
        if self.listed is not None:
            object.__setattr__(self, "listed", self._checked_list(self.listed))

    def _parameters(self) -> tuple:
        return self.ks, self.l1s, self.l2s, self.verifiers

    def __eq__(self, other) -> bool:
        if not isinstance(other, ActionGrid):
            return NotImplemented
        if self._parameters() != other._parameters():
            return False
        # two derived grids of equal parameters hold the same actions (computed only where one is listed)
        return (self.listed is None and other.listed is None) or self.actions == other.actions

    def __hash__(self) -> int:
        return hash(self._parameters())

    def _verifier(self, name: str):
        from verispec.verifiers import get_verifier

        try:
            return get_verifier(name)
        except VerispecError as error:
            raise SelectorError(f"the action grid names an unknown verifier: {error}") from None

    def valid_actions(self, *, without_laws=()) -> tuple[Action, ...]:
        """The product's actions the exact engine accepts now (``check_compatible``), verifier-major then K, L1,
        L2: the grid's actions unless ``listed``. ``without_laws`` (``DraftLaw`` member names) are left out of each
        drafter's declared laws when deciding, which reproduces the validity of a time before those laws existed
        (``under_format_1``): an action is kept only where one of the drafter's other laws is the verifier's."""
        from verispec.simulator.drafters import DraftLaw
        from verispec.simulator.engine import check_compatible

        unknown = frozenset(DraftLaw[name] for name in without_laws)
        actions = []
        for name in self.verifiers:
            verifier = self._verifier(name)
            for k in self.ks:
                for l1 in self.l1s:
                    for l2 in self.l2s:
                        action = Action(name, k, l1, l2)
                        try:
                            check_compatible(verifier, action.drafter())
                        except VerispecError:
                            continue
                        if unknown and not (action.drafter().draft_laws - unknown) & verifier.valid_for:
                            continue
                        actions.append(action)
        return tuple(actions)

    def _checked_list(self, listed) -> tuple[Action, ...]:
        """``listed`` (actions or their names) as a grid's action list, refused on one line where an action is not
        one of the product's, is named twice or out of the grid's order (verifier-major, then K, L1, L2), or is a
        pair the exact engine refuses now (the file's labels would name a tree no rule verifies)."""
        from verispec.simulator.engine import check_compatible

        if isinstance(listed, (str, bytes)) or not hasattr(listed, "__iter__"):
            raise SelectorError(f"an action list is a sequence of action names, got {describe(listed)}")
        actions = tuple(item if isinstance(item, Action) else Action.from_name(item) for item in listed)
        if not actions:
            raise SelectorError(f"the action list of the grid {self.describe()} is empty")
        order = {name: index for index, name in enumerate(self.verifiers)}
        keys = []
        for action in actions:
            if action.verifier not in order or action.k not in self.ks or action.l1 not in self.l1s or \
                    action.l2 not in self.l2s:
                raise SelectorError(f"the listed action {action.name!r} is not in the grid {self.describe()}")
            try:
                check_compatible(self._verifier(action.verifier), action.drafter())
            except VerispecError as error:
                raise SelectorError(f"the listed action {action.name!r} is not valid: {error}") from None
            keys.append((order[action.verifier], action.k, action.l1, action.l2))
        if len(set(keys)) != len(keys):
            raise SelectorError(f"the action list of the grid {self.describe()} names an action twice")
        if keys != sorted(keys):
            raise SelectorError(f"the action list of the grid {self.describe()} is not in the grid's order "
                                "(verifier, then K, L1, L2)")
        return actions

    @cached_property
    def actions(self) -> tuple[Action, ...]:
        """The grid's actions, verifier-major then K, L1, L2: ``listed`` where a file recorded them, else the pairs
        ``check_compatible`` accepts now (``valid_actions``)."""
        if self.listed is not None:
            return self.listed
        actions = self.valid_actions()
        if not actions:
            raise SelectorError(f"the action grid {self.describe()} holds no tree its verifiers accept")
        return actions

    def with_actions(self, actions) -> ActionGrid:
        """This grid holding ``actions`` (``Action`` or their names, ``Action.name``) as its list: how a file's
        recorded list is read back. A one-line SelectorError where the list does not fit (``listed``)."""
        return ActionGrid(self.ks, self.l1s, self.l2s, self.verifiers, tuple(actions))

    def under_format_1(self) -> ActionGrid:
        """This grid's parameters with the actions files of format 1 meant by them: each verifier's validity with
        ``LAWS_AFTER_FORMAT_1`` left out of every drafter's laws (a file then recorded the parameters alone and its
        reader derived the list, as the writer had)."""
        return self.with_actions(self.valid_actions(without_laws=LAWS_AFTER_FORMAT_1))

    def restricted(self, verifiers) -> ActionGrid:
        """The sub-grid of ``verifiers`` (names of this grid's, in the order given): this grid's actions of those
        verifiers, listed where this grid's are (a sub-grid of a file's grid keeps the file's meaning)."""
        names = tuple(verifiers)
        outside = [name for name in names if name not in self.verifiers]
        if outside or not names:
            raise SelectorError(f"the grid {self.describe()} has no verifier {describe(outside or list(names))}")
        grid = ActionGrid(self.ks, self.l1s, self.l2s, names)
        if self.listed is None:
            return grid
        return grid.with_actions([action for name in names for action in self.actions if action.verifier == name])

    def action_names(self) -> list[str]:
        """``Action.name`` of each action, in order: the list files record (``with_actions`` reads it)."""
        return [action.name for action in self.actions]

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
        return f"{axes_text(self.ks, self.l1s, self.l2s)}, {','.join(self.verifiers)}"

    def as_dict(self) -> dict:
        return {"ks": list(self.ks), "l1s": list(self.l1s), "l2s": list(self.l2s), "verifiers": list(self.verifiers)}

    @classmethod
    def from_dict(cls, data, actions=None) -> ActionGrid:
        """The grid ``as_dict`` wrote (its parameters), holding ``actions`` (names, ``action_names``) where given;
        its verifiers are resolved at once (a one-line SelectorError otherwise)."""
        if not isinstance(data, dict) or set(data) != {"ks", "l1s", "l2s", "verifiers"}:
            keys = sorted(data) if isinstance(data, dict) else type(data).__name__
            raise SelectorError(f"not an action grid (keys ks, l1s, l2s, verifiers), got {describe(keys)}")
        grid = cls(data["ks"], data["l1s"], data["l2s"], data["verifiers"])
        if actions is not None:
            return grid.with_actions(actions)
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


def axis_text(values) -> str:
    """Sorted axis values as text, each run of more than two consecutive values as 'low-high': '0-6,8,10,12'."""
    values, parts, start = sorted(values), [], 0
    for end in range(1, len(values) + 1):
        if end == len(values) or values[end] != values[end - 1] + 1:
            run = values[start:end]
            parts += [f"{run[0]}-{run[-1]}"] if len(run) > 2 else [str(value) for value in run]
            start = end
    return ",".join(parts)


def axes_text(ks, l1s, l2s) -> str:
    """'K 1-4, L1 0-3, L2 0-4': a grid's three axes (``axis_text`` each)."""
    return f"K {axis_text(ks)}, L1 {axis_text(l1s)}, L2 {axis_text(l2s)}"


def grid_record(grid: ActionGrid, *, format_1: bool = False) -> dict:
    """What a row store's parameters record of the grid whose actions its rows' columns are: {"grid": parameters,
    "actions": names}. ``format_1``: the record of a store written before lists were recorded ({"grid": parameters}
    alone), which holds the format-1 actions of its grid; None where this grid's actions are not those (such a
    store's rows are not this grid's). See ``open_grid_store``."""
    if not format_1:
        return {"grid": grid.as_dict(), "actions": grid.action_names()}
    if grid.actions != grid.under_format_1().actions:
        return None
    return {"grid": grid.as_dict()}


def open_grid_store(path, parameters: dict, grid: ActionGrid, *, overwrite: bool = False, **options):
    """The ``ResultStore`` at ``path`` of rows labelled for ``grid``'s actions, with ``parameters`` and
    ``grid_record(grid)``. A store written before action lists were recorded (its parameters name the grid alone)
    opens too where its format-1 actions are ``grid``'s; otherwise the store's ``ResultStoreError`` is raised, as
    for any other parameter that differs."""
    from verispec.errors import ResultStoreError
    from verispec.files.io import ResultStore

    try:
        return ResultStore(path, parameters={**parameters, **grid_record(grid)}, overwrite=overwrite, **options)
    except ResultStoreError as error:
        refusal = error
    legacy = None if overwrite else grid_record(grid, format_1=True)
    if legacy is not None:
        try:
            return ResultStore(path, parameters={**parameters, **legacy}, **options)
        except ResultStoreError:
            pass  # not a store of format 1 either: the refusal naming this grid's record says why
    raise refusal


def max_action_tree(grid: ActionGrid) -> str:
    """The smallest delayed tree containing every action's tree: ``delayed:max K,max L1,max L2`` (``chain:0``
    when the grid drafts nothing). One such tree sampled per root serves every action (the labels' "comb")."""
    return Action("specinfer", max(grid.ks), max(grid.l1s), max(grid.l2s)).tree


def action_times(grid: ActionGrid, latency):
    """T(a) for every action [A] (float64): ``latency.block_time(depth, nodes, widths)`` = the L1 + L2 draft
    forwards, each at its width (``Drafter.draft_widths``: (L1 + 1) t_q(1) + (L2 - 1) t_q(K) when L2 > 0), plus
    t_p(1 + L1 + K L2): the paper's Eq. 11 at one context length when the draft step's time does not depend on its
    width, and the measured price of the K-wide steps when it does. A model that carries the sizes decoding's trees
    had (``LatencyModel.tree_sizes``: coinciding drafts merge) prices an action at its expected block time over them
    (``LatencyModel.drafter_time``)."""
    import numpy as np

    return np.array([latency.drafter_time(action.drafter()) for action in grid.actions], dtype=np.float64)  # [A]


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

__all__ = ["LAWS_AFTER_FORMAT_1", "PAPER_GRID", "Action", "ActionGrid", "SelectorError", "action_times", "axes_text",
           "axis_text",
           "grid_record", "max_action_tree", "open_grid_store", "policy_action_times"]
