"""Tree specifications: ``parse_tree`` turns a string such as ``chain:3``, ``delayed:2,1,2`` or ``hub`` into its
drafter (the forms are listed in ``verispec.simulator.drafters``), with one-line errors for every malformed one.
"""

from __future__ import annotations

from collections.abc import Callable

from verispec.errors import UnknownTreeError, describe
from verispec.guard.limits import MAX_TREE_PARAMETER, TREE_FORMS
from verispec.simulator.ddtree import DDTreeDrafter
from verispec.simulator.drafters import (
    ArgmaxChainDrafter,
    BranchingDrafter,
    ChainDrafter,
    DelayedDrafter,
    Drafter,
    RootIIDDrafter,
    TopKChainDrafter,
    check_tree_parameters,
)
from verispec.simulator.own_law_drafters import DySpecDrafter, GreedyDrafter, HubDrafter


def _ints(kind: str, text: str, names: tuple[str, ...] | None) -> list[int]:
    """The comma-separated parameters of ``kind:text``, checked under their names (``names`` None: any
    number of branching factors b)."""
    form = TREE_KINDS[kind][0]
    shown = text if len(text) <= 40 else f"{text[:20]}...{text[-10:]}"
    values = []
    for part in text.split(","):
        try:
            values.append(int(part))
        except ValueError:
            digits = part.strip().lstrip("+-")
            problem = "is absurdly large" if digits.isdigit() else "is not an integer"
            part = part.strip() if len(part.strip()) <= 40 else f"{part.strip()[:20]}..."
            raise UnknownTreeError(f"tree '{kind}:{shown}': parameter {part!r} {problem}; "
                                   f"expected {form} with small non-negative integers") from None
    if names is not None and len(values) != len(names):
        raise UnknownTreeError(f"tree kind '{kind}' takes {len(names)} parameter(s), got {len(values)} in "
                               f"'{kind}:{shown}'; expected {form}")
    if names is None and len(values) > MAX_TREE_PARAMETER:
        raise UnknownTreeError(f"tree '{kind}:...': {len(values)} branching factors is absurdly many; the limit "
                               f"is {MAX_TREE_PARAMETER}")
    for index, value in enumerate(values):
        check_tree_parameters(kind, **{names[index] if names is not None else "b": value})
    return values


#: Each tree kind's drafter, built from the text after its colon.
_FACTORIES: dict[str, Callable[[str], Drafter]] = {
    "chain": lambda text: ChainDrafter(*_ints("chain", text, ("L",))),
    "iid": lambda text: RootIIDDrafter(*_ints("iid", text, ("K", "L"))),
    "delayed": lambda text: DelayedDrafter(*_ints("delayed", text, ("K", "L1", "L2"))),
    "branch": lambda text: BranchingDrafter(tuple(_ints("branch", text, None)), False),
    "branch-iid": lambda text: BranchingDrafter(tuple(_ints("branch-iid", text, None)), True),
    "hub": lambda text: HubDrafter(1),
    "hub-tree": lambda text: HubDrafter(*_ints("hub-tree", text, ("L",))),
    "greedy": lambda text: GreedyDrafter(*_ints("greedy", text, ("K",))),
    "greedy-tree": lambda text: GreedyDrafter(*_ints("greedy-tree", text, ("K", "L"))),
    "dyspec": lambda text: DySpecDrafter(*_ints("dyspec", text, ("N",))),
    "argmax-chain": lambda text: ArgmaxChainDrafter(*_ints("argmax-chain", text, ("L",))),
    "topk-chain": lambda text: TopKChainDrafter(*reversed(_ints("topk-chain", text, ("K", "L")))),
    "ddtree": lambda text: DDTreeDrafter(*_ints("ddtree", text, ("B", "L"))),
}

#: Each tree kind (the text before the colon) -> its form and drafter, in the order of
#: ``verispec.guard.limits.TREE_FORMS``
#: (the forms --help lists, read there without importing numpy).
TREE_KINDS: dict[str, tuple[str, Callable[[str], Drafter]]] = {
    form.partition(":")[0]: (form, _FACTORIES[form.partition(":")[0]]) for form in TREE_FORMS}


def parse_tree(spec: str) -> Drafter:
    """Parse a tree specification such as 'chain:3', 'delayed:2,1,2' or 'hub' into a drafter."""
    if not isinstance(spec, str):
        raise UnknownTreeError(f"a tree specification is a string such as 'chain:3', got {describe(spec)}")
    kind, sep, params = spec.strip().partition(":")
    if kind not in TREE_KINDS:
        forms = ", ".join(form for form, _ in TREE_KINDS.values())
        shown = spec if len(spec) <= 60 else f"{spec[:40]}..."
        raise UnknownTreeError(f"unknown tree kind {kind[:40]!r} in {shown!r}; known kinds: {forms}")
    form, factory = TREE_KINDS[kind]
    if ":" not in form:  # a kind without parameters, e.g. 'hub'
        if sep:
            raise UnknownTreeError(f"tree kind {kind!r} takes no parameters, got {spec!r}; expected {form}")
        return factory("")
    if not sep or not params.strip():
        raise UnknownTreeError(f"tree {spec!r} is missing its parameters; expected {form}")
    drafter = factory(params)
    if drafter.depth > MAX_TREE_PARAMETER:
        raise UnknownTreeError(f"tree {drafter.spec[:40]!r} has depth {drafter.depth}, absurdly deep; the limit is "
                               f"{MAX_TREE_PARAMETER}")
    return drafter
