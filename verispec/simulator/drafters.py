"""Drafters: the random draft trees of speculative decoding, sampled or enumerated exactly.

Each drafter is written once as a sampling procedure against a ``Chooser`` (``draw``); ``sample`` runs it
with an explicit numpy Generator and ``outcomes`` enumerates every tree with its exact probability
(identical trees merged), through the generic enumerator of ``verispec.simulator.chooser``.

Tree specifications (``parse_tree``): ``chain:L``, ``iid:K,L``, ``delayed:K,L1,L2``, ``branch:b1,..,bD``
(siblings drawn without replacement), ``branch-iid:b1,..,bD`` (siblings i.i.d.), ``hub`` and ``hub-tree:L``
(SpecHub's hub pairs), ``greedy:K`` and ``greedy-tree:K,L`` (Hu et al.'s greedy drafts), ``dyspec:N``
(DySpec's dynamic tree of N drafted nodes), and two paths whose tokens are NOT drawn from the q handed to the
verifier, as production code often does (trap 8 of the reference): ``argmax-chain:L`` (each token is the argmax
of q, a greedy assistant) and ``topk-chain:k,L`` (each token is drawn from q restricted to its k best tokens and
renormalised). No built-in rule is valid for those two; they exist to check verification code written elsewhere
(``verispec check-external``), which may or may not account for how its drafts were drawn.

Each drafter declares the *draft laws* it satisfies; verifiers declare the laws they are valid for, and
pairing a verifier with a drafter outside them is an ``IncompatibleDraftError``.
"""

from __future__ import annotations

import enum
import math
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from verispec.errors import UnknownTreeError, describe
from verispec.simulator.chooser import DEFAULT_MAX_TRACES, Chooser, RandomChooser, enumerate_law
from verispec.simulator.problems import Problem
from verispec.simulator.ranking import best_index_with_ties, hub_token, top_tokens, without_tokens
from verispec.simulator.slots import SlotPlan
from verispec.simulator.trees import DraftTree, TreeBuilder, TreeShape


class DraftLaw(enum.StrEnum):
    """How the children of a draft tree were drawn; the validity condition of a verifier."""

    #: One draft path (every node has at most one child).
    SINGLE_PATH = "single path"
    #: At every node, its child list is m i.i.d. draws from q(.|node), m fixed by the structure above it.
    IID_CHILDREN = "i.i.d. children"
    #: At every node, its children are drawn one after another without replacement from q(.|node).
    WITHOUT_REPLACEMENT = "children without replacement"
    #: K i.i.d. paths of equal length from the root (GBV's draft law).
    ROOT_IID_PATHS = "i.i.d. paths from the root"
    #: At every node, its child list is a SpecHub hub pair from q(.|node) (Sun et al. 2024, arXiv 2411.05289):
    #: hub a = argmax q; X_1 ~ q; X_2 ~ q(. | != a) if X_1 = a, else X_2 = a. Just (a,) when q(a) = 1.
    HUB = "hub pairs"
    #: At every node, its child list is Hu et al.'s greedy draft (arXiv 2502.18779): the top K-1 tokens of
    #: q(.|node), best first, then one X ~ q restricted to the rest and renormalised (no X when q's support
    #: is used up). K may differ between nodes; a single child is the K = 1 case (X ~ q).
    GREEDY = "greedy drafts"
    #: One path whose tokens are the argmax of q(.|prefix) (ties to the smallest id), while the verifier is
    #: handed the full q: a greedy assistant whose logits are passed on (transformers' assisted generation).
    ARGMAX_PATH = "one path of argmax drafts (q handed, not sampled)"
    #: One path whose tokens are drawn from q(.|prefix) restricted to its k best tokens and renormalised, while
    #: the verifier is handed the unfiltered q.
    TOPK_PATH = "one path drawn from top-k filtered q (unfiltered q handed)"


#: A single path satisfies these laws: one i.i.d. draw is one draw without replacement, one path is K = 1
#: i.i.d. paths, and one child drawn from q is the K = 1 greedy draft. Not HUB: a hub pair has two children
#: (one when q(a) = 1, and then it is a, not X ~ q).
CHAIN_LAWS = frozenset({DraftLaw.SINGLE_PATH, DraftLaw.IID_CHILDREN, DraftLaw.WITHOUT_REPLACEMENT,
                        DraftLaw.ROOT_IID_PATHS, DraftLaw.GREEDY})


class Drafter(ABC):
    """Draws a draft tree for a problem."""

    #: The specification string that parses back to this drafter, e.g. 'iid:2,3'.
    spec: str
    #: Deepest node depth the drafter can produce.
    depth: int
    #: The draft laws this drafter satisfies.
    draft_laws: frozenset[DraftLaw]

    @property
    def iid_branching(self) -> tuple[int, ...] | None:
        """(b_1..b_L) when every node at depth d-1 reached by m draws gets m * b_d i.i.d. children from q
        (chain, root i.i.d., delayed, branch-iid); None otherwise. Enables the dynamic-programming engine."""
        return None

    @property
    def without_replacement_branching(self) -> tuple[int, ...] | None:
        """(b_1..b_L) when every node at depth d-1 gets b_d children drawn one after another without
        replacement from q (fewer when q's support runs out) (``branch``); None otherwise."""
        return None

    def slot_plan(self) -> SlotPlan | None:
        """The drafter's slot plan (verispec.simulator.slots) when its trees can be enumerated as arrays of
        draws; None otherwise. Fast enumeration enumerates from it instead of running ``draw``."""
        return None

    @abstractmethod
    def log_num_outcomes(self, vocab_size: int) -> float:
        """Natural log of an upper bound on the number of draft outcomes (ordered draws) at this vocabulary
        size, computed without building anything: engines refuse hopeless enumerations up front with it."""

    @property
    @abstractmethod
    def max_nodes(self) -> int:
        """Most nodes (root included) a drawn tree can have."""

    def __init_subclass__(cls, **kwargs):
        # The engines trust iid_branching and slot_plan instead of running draw(). A subclass that redefines
        # draw() without restating them (e.g. a deliberately different delayed tree) must not inherit its
        # parent's claims, or an engine would silently analyse the parent's trees.
        super().__init_subclass__(**kwargs)
        if "draw" in cls.__dict__:
            if "iid_branching" not in cls.__dict__:
                cls.iid_branching = property(lambda self: None, doc=Drafter.iid_branching.__doc__)
            if "without_replacement_branching" not in cls.__dict__:
                cls.without_replacement_branching = property(
                    lambda self: None, doc=Drafter.without_replacement_branching.__doc__)
            if "slot_plan" not in cls.__dict__:
                cls.slot_plan = lambda self: None

    @abstractmethod
    def draw(self, problem: Problem, chooser: Chooser) -> TreeShape:
        """Draw one tree shape, making every random decision through ``chooser``."""

    def check_problem(self, problem: Problem) -> None:
        """Raise a VerispecError when this drafter's parameters make no sense for ``problem`` (e.g. more
        siblings without replacement than tokens). Default: every problem is fine."""
        return None

    def sample(self, problem: Problem, rng: np.random.Generator) -> DraftTree:
        """One random draft tree."""
        problem.require_depth(self.depth)
        self.check_problem(problem)
        return DraftTree.from_shape(problem, self.draw(problem, RandomChooser(rng)))

    def outcomes(self, problem: Problem, *, max_traces: int = DEFAULT_MAX_TRACES) -> list[tuple[DraftTree, object]]:
        """Every draft tree with its exact probability; identical trees are merged."""
        problem.require_depth(self.depth)
        self.check_problem(problem)
        law = enumerate_law(lambda chooser: self.draw(problem, chooser), exact=problem.exact, max_traces=max_traces)
        return [(DraftTree.from_shape(problem, shape), probability) for shape, probability in law.items()]

    def __repr__(self) -> str:
        return f"<drafter {self.spec}>"


#: Node counts above this are reported as this (no tree near it can be analysed; it keeps sizes finite).
SIZE_CAP = 10**18


def _exp(value: float) -> float:
    """exp(value), inf instead of OverflowError (size estimates of absurd trees)."""
    return math.exp(value) if value < 700 else math.inf


def _draw_path(problem: Problem, chooser: Chooser, builder: TreeBuilder, node: int, prefix: tuple, length: int):
    """Extend ``node`` (context ``prefix``) by ``length`` tokens drawn from q; return the end node and prefix."""
    for _ in range(length):
        token = chooser.categorical(problem.draft(prefix))
        node = builder.add_child(node, token)
        prefix = prefix + (token,)
    return node, prefix


#: Largest tree parameter (and depth) accepted: far beyond any tree an exact analysis can handle, small
#: enough that sizes computed from it stay ordinary integers.
MAX_TREE_PARAMETER = 10**6


def _check_counts(kind: str, **counts: int):
    for name, value in counts.items():
        if not isinstance(value, (int, np.integer)) or isinstance(value, bool):
            raise UnknownTreeError(f"{kind}: {name} must be an integer, got {describe(value)}")
        minimum = 1 if name in {"K", "b"} else 0
        if value < minimum:
            raise UnknownTreeError(f"{kind}: {name} must be at least {minimum}, got {int(value)}")
        if value > MAX_TREE_PARAMETER:
            raise UnknownTreeError(f"{kind}: {name} = {int(value)} is absurdly large; the limit is "
                                   f"{MAX_TREE_PARAMETER} (exact analysis needs far smaller trees)")


@dataclass(frozen=True)
class ChainDrafter(Drafter):
    """A single draft path of length L (token-level and block verification)."""

    length: int

    def __post_init__(self):
        _check_counts("chain", L=self.length)

    @property
    def spec(self) -> str:
        return f"chain:{self.length}"

    @property
    def depth(self) -> int:
        return self.length

    @property
    def draft_laws(self) -> frozenset[DraftLaw]:
        return CHAIN_LAWS

    @property
    def iid_branching(self) -> tuple[int, ...]:
        return (1,) * self.length

    @property
    def max_nodes(self) -> int:
        return self.length + 1

    def log_num_outcomes(self, vocab_size: int) -> float:
        return self.length * math.log(vocab_size)

    def slot_plan(self) -> SlotPlan:
        return SlotPlan.from_levels([[(d, 1, False)] for d in range(self.length)])

    def draw(self, problem: Problem, chooser: Chooser) -> TreeShape:
        builder = TreeBuilder()
        _draw_path(problem, chooser, builder, 0, (), self.length)
        return builder.shape()


@dataclass(frozen=True)
class ArgmaxChainDrafter(ChainDrafter):
    """A single path of greedy drafts: each token is the argmax of q(.|prefix) (ties to the smallest token id,
    ``verispec.simulator.ranking``), while the tree stores, and verifiers are handed, the full q. Its draft law
    is a point mass, so a rule that treats q as the law that drew the token is lossy (trap 8)."""

    @property
    def spec(self) -> str:
        return f"argmax-chain:{self.length}"

    @property
    def draft_laws(self) -> frozenset[DraftLaw]:
        return frozenset({DraftLaw.ARGMAX_PATH})

    def log_num_outcomes(self, vocab_size: int) -> float:
        return 0.0

    def draw(self, problem: Problem, chooser: Chooser) -> TreeShape:
        builder, node, prefix = TreeBuilder(), 0, ()
        for _ in range(self.length):
            token = top_tokens(problem.draft(prefix), 1)[0]
            node, prefix = builder.add_child(node, token), prefix + (token,)
        return builder.shape()


@dataclass(frozen=True)
class TopKChainDrafter(ChainDrafter):
    """A single path whose tokens are drawn from q(.|prefix) restricted to its ``k`` best tokens (ranked by q,
    ties to the smallest id) and renormalised, while the tree stores, and verifiers are handed, the unfiltered
    q (trap 8). k at least the vocabulary size is plain sampling from q."""

    k: int = 1

    def __post_init__(self):
        _check_counts("topk-chain", K=self.k, L=self.length)

    @property
    def spec(self) -> str:
        return f"topk-chain:{self.k},{self.length}"

    @property
    def draft_laws(self) -> frozenset[DraftLaw]:
        return frozenset({DraftLaw.TOPK_PATH})

    def log_num_outcomes(self, vocab_size: int) -> float:
        return self.length * math.log(min(self.k, vocab_size))

    def draw(self, problem: Problem, chooser: Chooser) -> TreeShape:
        builder, node, prefix = TreeBuilder(), 0, ()
        for _ in range(self.length):
            q = problem.draft(prefix)
            kept = top_tokens(q, self.k)
            filtered = without_tokens(q, [t for t in range(len(q)) if t not in set(kept)])
            token = chooser.categorical(filtered / filtered.sum())
            node, prefix = builder.add_child(node, token), prefix + (token,)
        return builder.shape()


@dataclass(frozen=True)
class DelayedDrafter(Drafter):
    """Delayed tree expansion (Thomas et al. 2026, arXiv 2602.16994): one trunk of L1 tokens drawn from q,
    then K i.i.d. paths of L2 tokens from the trunk's end. Trunk nodes have exactly one child (reference,
    trap 7). ``iid:K,L`` is ``delayed:K,0,L``."""

    branches: int
    trunk: int
    tail: int

    def __post_init__(self):
        if self.trunk == 0:  # the spec reads iid:K,L
            _check_counts("iid", K=self.branches, L=self.tail)
        _check_counts("delayed", K=self.branches, L1=self.trunk, L2=self.tail)

    @property
    def spec(self) -> str:
        if self.trunk == 0:
            return f"iid:{self.branches},{self.tail}"
        return f"delayed:{self.branches},{self.trunk},{self.tail}"

    @property
    def depth(self) -> int:
        return self.trunk + self.tail

    @property
    def draft_laws(self) -> frozenset[DraftLaw]:
        if self.branches == 1 or self.tail == 0:
            return CHAIN_LAWS
        if self.trunk == 0:
            return frozenset({DraftLaw.IID_CHILDREN, DraftLaw.ROOT_IID_PATHS})
        return frozenset({DraftLaw.IID_CHILDREN})

    @property
    def iid_branching(self) -> tuple[int, ...]:
        if self.tail == 0:
            return (1,) * self.trunk
        return (1,) * self.trunk + (self.branches,) + (1,) * (self.tail - 1)

    @property
    def max_nodes(self) -> int:
        return 1 + self.trunk + self.branches * self.tail

    def log_num_outcomes(self, vocab_size: int) -> float:
        return (self.trunk + self.branches * self.tail) * math.log(vocab_size)

    def slot_plan(self) -> SlotPlan:
        """Trunk slots 1..L1, then the K tail paths level by level: path k's slot at tail step j is
        L1 + 1 + j K + k. The K paths are exchangeable."""
        levels = [[(d, 1, False)] for d in range(self.trunk)]
        first = self.trunk + 1  # first tail slot
        for step in range(self.tail):
            if step == 0:
                levels.append([(self.trunk, self.branches, False)])
            else:
                start = first + (step - 1) * self.branches
                levels.append([(start + k, 1, False) for k in range(self.branches)])
        plan = SlotPlan.from_levels(levels)
        if self.branches > 1 and self.tail > 0:
            paths = tuple(tuple(first + step * self.branches + k for step in range(self.tail))
                          for k in range(self.branches))
            plan = SlotPlan(plan.parent, plan.depth, plan.groups, exchangeable_paths=paths)
        return plan

    def draw(self, problem: Problem, chooser: Chooser) -> TreeShape:
        # The K tail paths are drawn level by level (step j of every path, then step j + 1), so a model-backed
        # problem computes each level's draft conditionals in one forward pass. Each path's token at step j
        # depends only on its own prefix, so the tree (child lists in path order) has the same law as
        # drawing the paths one after another.
        builder = TreeBuilder()
        trunk_end, trunk_prefix = _draw_path(problem, chooser, builder, 0, (), self.trunk)
        ends = [(trunk_end, trunk_prefix)] * (self.branches if self.tail > 0 else 0)
        for _ in range(self.tail):
            problem.prepare_drafts(dict.fromkeys(prefix for _, prefix in ends))
            grown = []
            for node, prefix in ends:
                token = chooser.categorical(problem.draft(prefix))
                grown.append((builder.add_child(node, token), prefix + (token,)))
            ends = grown
        return builder.shape()


def RootIIDDrafter(branches: int, length: int) -> DelayedDrafter:
    """K i.i.d. draft paths of length L from the root (SpecInfer / SpecTr / DDTE's 'root i.i.d.')."""
    return DelayedDrafter(branches, 0, length)


@dataclass(frozen=True)
class BranchingDrafter(Drafter):
    """Fixed branching (b_1, .., b_D): every child drawn at depth d-1 gets b_d children.

    ``replacement=False`` (Sequoia, Traversal Verification): a node's children are drawn one after
    another without replacement from q(.|node); if q's support runs out first the node gets fewer.
    ``replacement=True``: i.i.d. draws; equal draws share a node, so a node drawn m times has m * b_d
    i.i.d. children (``branch-iid:K,1,..,1`` is ``iid:K,L``).
    """

    branching: tuple[int, ...]
    replacement: bool

    def __post_init__(self):
        kind = "branch-iid" if self.replacement else "branch"
        if len(self.branching) == 0:
            raise UnknownTreeError(f"{kind}: give at least one branching factor")
        if len(self.branching) > MAX_TREE_PARAMETER:
            raise UnknownTreeError(f"{kind}: depth {len(self.branching)} is absurdly large; the limit is "
                                   f"{MAX_TREE_PARAMETER}")
        for value in self.branching:
            _check_counts(kind, b=value)

    def check_problem(self, problem: Problem) -> None:
        """Without replacement, a node cannot get more distinct children than there are tokens."""
        widest = max(self.branching)
        if not self.replacement and widest > problem.vocab_size:
            size = problem.vocab_size
            raise UnknownTreeError(
                f"{self.spec} draws {widest} siblings without replacement but the vocabulary has only {size} "
                f"token{'s' if size != 1 else ''}; use b <= {size} or branch-iid")

    @property
    def spec(self) -> str:
        return ("branch-iid:" if self.replacement else "branch:") + ",".join(map(str, self.branching))

    @property
    def depth(self) -> int:
        return len(self.branching)

    @property
    def draft_laws(self) -> frozenset[DraftLaw]:
        if all(b == 1 for b in self.branching):
            return CHAIN_LAWS
        if not self.replacement:
            return frozenset({DraftLaw.WITHOUT_REPLACEMENT})
        if all(b == 1 for b in self.branching[1:]):
            return frozenset({DraftLaw.IID_CHILDREN, DraftLaw.ROOT_IID_PATHS})
        return frozenset({DraftLaw.IID_CHILDREN})

    @property
    def iid_branching(self) -> tuple[int, ...] | None:
        return self.branching if self.replacement else None

    @property
    def without_replacement_branching(self) -> tuple[int, ...] | None:
        return None if self.replacement else self.branching

    def _log_level_sizes(self) -> list[float]:
        """log of the number of draws at each depth (b_1 b_2 .. b_d)."""
        sizes, running = [], 0.0
        for branching in self.branching:
            running += math.log(branching)
            sizes.append(running)
        return sizes

    @property
    def max_nodes(self) -> int:
        total, level = 1, 1
        for branching in self.branching:
            level = min(level * branching, SIZE_CAP)
            total = min(total + level, SIZE_CAP)
        return total

    def log_num_outcomes(self, vocab_size: int) -> float:
        """Each depth-d draw picks one of V tokens (i.i.d.); without replacement each parent draws an
        ordered tuple of b_d distinct tokens (at most V!/(V-b_d)! of them with positive probability, a
        shorter tuple only when its support is smaller), or nothing when it is absent."""
        if self.replacement:
            per_parent = [b * math.log(vocab_size) for b in self.branching]
        else:
            per_parent = [math.log(math.perm(vocab_size, min(b, vocab_size)) + 1) for b in self.branching]
        parents = [0.0] + self._log_level_sizes()[:-1]
        return sum(_exp(count) * choice for count, choice in zip(parents, per_parent))

    def slot_plan(self) -> SlotPlan:
        levels, frontier = [], [0]
        for branching in self.branching:
            levels.append([(slot, branching, not self.replacement) for slot in frontier])
            start = frontier[-1] + 1
            frontier = list(range(start, start + branching * len(frontier)))
        return SlotPlan.from_levels(levels)

    def draw(self, problem: Problem, chooser: Chooser) -> TreeShape:
        builder = TreeBuilder()
        level = [(0, (), 1)]  # (node, prefix, number of draws that reached it)
        for branching in self.branching:
            problem.prepare_drafts([prefix for _, prefix, _ in level])
            next_level = []
            for node, prefix, reached in level:
                q = problem.draft(prefix)
                if self.replacement:
                    tokens = [chooser.categorical(q) for _ in range(reached * branching)]
                else:
                    tokens = _draw_without_replacement(chooser, q, branching)
                for token in tokens:
                    builder.add_child(node, token)
                children = builder.children(node)
                for token in dict.fromkeys(children):
                    next_level.append((builder.child_id(node, token), prefix + (token,), children.count(token)))
            level = next_level
        return builder.shape()


def _draw_without_replacement(chooser: Chooser, q: np.ndarray, count: int) -> list[int]:
    """Sequential draws without replacement: q_j(x) = q(x) 1[x not drawn] / (1 - q(drawn))."""
    remaining = q.copy()
    tokens = []
    for _ in range(count):
        mass = remaining.sum()
        if mass == 0:
            break
        token = chooser.categorical(remaining / mass)
        tokens.append(token)
        remaining[token] = 0 * remaining[token]
    return tokens


# --------------------------------------------------------------------------------------------------
# Drafters with their own draft laws: SpecHub's hub pairs, Hu et al.'s greedy drafts, DySpec's dynamic tree


def _draw_hub_pair(chooser: Chooser, q: np.ndarray) -> tuple[int, ...]:
    """SpecHub's pair (Sun et al. 2024, arXiv 2411.05289, Sec. 4): hub a = argmax q (ties: smallest id);
    X_1 ~ q; if X_1 = a then X_2 ~ q(. | != a), else X_2 = a. When q(a) = 1 there is no second token to
    draw and the pair is just (a,)."""
    hub = hub_token(q)
    first = chooser.categorical(q)
    if first != hub:
        return (first, hub)
    rest = without_tokens(q, (hub,))
    mass = rest.sum()
    if mass == 0:
        return (hub,)
    return (hub, chooser.categorical(rest / mass))


def _draw_greedy(chooser: Chooser, q: np.ndarray, count: int) -> tuple[int, ...]:
    """Hu et al.'s greedy draft (arXiv 2502.18779): G = the top count-1 tokens of q (ranked by q, ties by
    smallest id), always drafted, best first; then X ~ q / (1 - q(G)) on V \\ G. If q's support has at
    most count-1 tokens, G is the whole support and there is no X (nothing left to draw)."""
    greedy = top_tokens(q, count - 1)
    rest = without_tokens(q, greedy)
    mass = rest.sum()
    if mass == 0:
        return greedy
    return greedy + (chooser.categorical(rest / mass),)


def _draw_per_node(problem: Problem, chooser: Chooser, depth: int, draw_children) -> TreeShape:
    """Every node at depth < ``depth`` gets its own child list ``draw_children(chooser, q(.|node))``."""
    builder = TreeBuilder()
    level = [(0, ())]
    for _ in range(depth):
        problem.prepare_drafts([prefix for _, prefix in level])
        next_level = []
        for node, prefix in level:
            for token in draw_children(chooser, problem.draft(prefix)):
                next_level.append((builder.add_child(node, token), prefix + (token,)))
        level = next_level
    return builder.shape()


@dataclass(frozen=True)
class HubDrafter(Drafter):
    """SpecHub's hub pairs (Sun et al. 2024, arXiv 2411.05289): every node at depth < L gets a hub pair
    drawn from its own q(.|node), so every node's child list follows the HUB law given the node (what a
    top-down walk needs). ``hub`` is one position (L = 1), ``hub-tree:L`` the full tree of depth L."""

    length: int = 1

    def __post_init__(self):
        _check_counts("hub" if self.length == 1 else "hub-tree", L=self.length)

    @property
    def spec(self) -> str:
        return "hub" if self.length == 1 else f"hub-tree:{self.length}"

    @property
    def depth(self) -> int:
        return self.length

    @property
    def draft_laws(self) -> frozenset[DraftLaw]:
        if self.length == 0:
            return CHAIN_LAWS | {DraftLaw.HUB}
        return frozenset({DraftLaw.HUB})

    @property
    def max_nodes(self) -> int:
        return min(2 ** min(self.length + 1, 64) - 1, SIZE_CAP)

    def log_num_outcomes(self, vocab_size: int) -> float:
        internal = _exp(self.length * math.log(2))  # a pair per internal node: at most 2V choices
        return internal * math.log(2 * vocab_size)

    def draw(self, problem: Problem, chooser: Chooser) -> TreeShape:
        return _draw_per_node(problem, chooser, self.length, _draw_hub_pair)


@dataclass(frozen=True)
class GreedyDrafter(Drafter):
    """Hu et al.'s greedy drafts (arXiv 2502.18779): every node at depth < L gets the top K-1 tokens of its
    q(.|node) plus one X ~ q restricted to the rest. ``greedy:K`` is one position (L = 1),
    ``greedy-tree:K,L`` the full tree of depth L. K = 1 is a chain of L tokens drawn from q."""

    branches: int
    length: int = 1

    def __post_init__(self):
        if self.length == 1:
            _check_counts("greedy", K=self.branches)
        _check_counts("greedy-tree", K=self.branches, L=self.length)

    @property
    def spec(self) -> str:
        return f"greedy:{self.branches}" if self.length == 1 else f"greedy-tree:{self.branches},{self.length}"

    @property
    def depth(self) -> int:
        return self.length

    @property
    def draft_laws(self) -> frozenset[DraftLaw]:
        if self.branches == 1 or self.length == 0:
            return CHAIN_LAWS
        return frozenset({DraftLaw.GREEDY})

    @property
    def max_nodes(self) -> int:
        return int(min(float(SIZE_CAP), _exp((self.length + 1) * math.log(self.branches)) + self.length + 1))

    def log_num_outcomes(self, vocab_size: int) -> float:
        internal = (self.length if self.branches == 1
                    else _exp(self.length * math.log(self.branches)))  # at most K^L internal nodes
        return internal * math.log(vocab_size)  # the last draft of each internal node: one of V tokens

    def draw(self, problem: Problem, chooser: Chooser) -> TreeShape:
        return _draw_per_node(problem, chooser, self.length,
                              lambda chooser_, q: _draw_greedy(chooser_, q, self.branches))


@dataclass(frozen=True)
class DySpecDrafter(Drafter):
    """DySpec's dynamic draft tree (Xiong et al. 2024, arXiv 2410.11744, Sec. 3 and Alg. 1), N drafted nodes.

    A heap holds the expandable nodes keyed by their estimated reach probability v (root: v = 1). Pop the
    node with the largest v, draw one more child t from its draft law without replacement (the children
    already drawn there are excluded: q~(t) = q(t) / (1 - q(children so far))), give the child
    v_child = v * q~(t) and the node v * (1 - q~(t)), push both; stop after N children have been drawn.
    A node whose draft support is used up (v becomes 0) is not pushed back.

    Tie-break (not fixed by the paper): equal values go to the node created first (the parent before the
    child it just drew); with node creation order as second key the heap order is a strict total order,
    so the tree is a deterministic function of the draws. "Equal" is the tie rule of
    verispec.simulator.ranking (relative gap at most 1e-12), applied to floats and to exact rationals alike,
    so a float run expands the same nodes as the exact run of the same problem: products that are equal as
    rationals but differ in their last float bits no longer split the two modes.

    Draft law: at every node the children are drawn one after another without replacement from q(.|node),
    in sampling order (WITHOUT_REPLACEMENT), but how many a node gets depends on the tokens drawn
    elsewhere (the budget goes to the largest estimated reach). Top-down recursive rejection sampling
    without replacement stays lossless under such adaptive stopping (the decision to draw another child
    never looks at that child); the tests check it with the exact engine. ``depth`` is N: all N nodes may
    form one path.
    """

    budget: int

    def __post_init__(self):
        _check_counts("dyspec", N=self.budget)

    @property
    def spec(self) -> str:
        return f"dyspec:{self.budget}"

    @property
    def depth(self) -> int:
        return self.budget

    @property
    def draft_laws(self) -> frozenset[DraftLaw]:
        if self.budget <= 1:
            return CHAIN_LAWS
        return frozenset({DraftLaw.WITHOUT_REPLACEMENT})

    @property
    def max_nodes(self) -> int:
        return self.budget + 1

    def log_num_outcomes(self, vocab_size: int) -> float:
        return self.budget * math.log(vocab_size)

    def draw(self, problem: Problem, chooser: Chooser) -> TreeShape:
        builder = TreeBuilder()
        if self.budget == 0:
            return builder.shape()
        prefixes = {0: ()}
        remaining: dict[int, np.ndarray] = {}  # node -> q(.|node) with its drawn children zeroed
        one = 1 + 0 * problem.draft(())[0]     # 1 in the problem's number system
        heap = {0: one}                         # expandable node (= creation id) -> estimated reach value
        for drawn in range(1, self.budget + 1):
            candidates = sorted(heap)           # creation order: among tied values the oldest wins
            node = candidates[best_index_with_ties([heap[c] for c in candidates])]
            value = heap.pop(node)
            if node not in remaining:
                remaining[node] = problem.draft(prefixes[node]).copy()
            left = remaining[node]
            mass = left.sum()
            token = chooser.categorical(left / mass)
            conditional = left[token] / mass   # q~(t), the without-replacement conditional
            child = builder.add_child(node, token)
            prefixes[child] = prefixes[node] + (token,)
            left[token] = 0 * left[token]
            if drawn == self.budget:
                break
            heap[child] = value * conditional
            if left.sum() > 0:
                heap[node] = value * (1 - conditional)
        return builder.shape()


# --------------------------------------------------------------------------------------------------
# Specification strings


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
        _check_counts(kind, **{names[index] if names is not None else "b": value})
    return values


TREE_KINDS: dict[str, tuple[str, Callable[[str], Drafter]]] = {
    "chain": ("chain:L", lambda text: ChainDrafter(*_ints("chain", text, ("L",)))),
    "iid": ("iid:K,L", lambda text: RootIIDDrafter(*_ints("iid", text, ("K", "L")))),
    "delayed": ("delayed:K,L1,L2", lambda text: DelayedDrafter(*_ints("delayed", text, ("K", "L1", "L2")))),
    "branch": ("branch:b1,b2,...", lambda text: BranchingDrafter(tuple(_ints("branch", text, None)), False)),
    "branch-iid": ("branch-iid:b1,b2,...",
                   lambda text: BranchingDrafter(tuple(_ints("branch-iid", text, None)), True)),
    "hub": ("hub", lambda text: HubDrafter(1)),
    "hub-tree": ("hub-tree:L", lambda text: HubDrafter(*_ints("hub-tree", text, ("L",)))),
    "greedy": ("greedy:K", lambda text: GreedyDrafter(*_ints("greedy", text, ("K",)))),
    "greedy-tree": ("greedy-tree:K,L", lambda text: GreedyDrafter(*_ints("greedy-tree", text, ("K", "L")))),
    "dyspec": ("dyspec:N", lambda text: DySpecDrafter(*_ints("dyspec", text, ("N",)))),
    "argmax-chain": ("argmax-chain:L", lambda text: ArgmaxChainDrafter(*_ints("argmax-chain", text, ("L",)))),
    "topk-chain": ("topk-chain:k,L",
                   lambda text: TopKChainDrafter(*reversed(_ints("topk-chain", text, ("K", "L"))))),
}


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
