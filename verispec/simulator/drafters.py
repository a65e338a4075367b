"""Drafters: the random draft trees of speculative decoding, sampled or enumerated exactly.

Each drafter is written once as a sampling procedure against a ``Chooser`` (``draw``); ``sample`` runs it
with an explicit numpy Generator and ``outcomes`` enumerates every tree with its exact probability
(identical trees merged), through the generic enumerator of ``verispec.simulator.chooser``.

Tree specifications (``parse_tree``, in ``verispec.simulator.tree_specs``): ``chain:L``, ``iid:K,L``,
``delayed:K,L1,L2``, ``branch:b1,..,bD`` (siblings drawn without replacement), ``branch-iid:b1,..,bD`` (siblings
i.i.d.), ``hub`` and ``hub-tree:L`` (SpecHub's hub pairs), ``greedy:K`` and ``greedy-tree:K,L`` (Hu et al.'s greedy
drafts), ``dyspec:N`` (DySpec's dynamic tree of N drafted nodes), and two paths whose tokens are NOT drawn from the
q handed to the verifier, as production code often does (trap 8 of docs/guides/reference.md): ``argmax-chain:L`` (each
token is the argmax of q, a greedy assistant) and ``topk-chain:k,L`` (each token is drawn from q restricted to its k
best tokens and renormalised). No built-in rule is valid for those two; they exist to check verification code
written elsewhere (``verispec check-external``), which may or may not account for how its drafts were drawn.

Each drafter declares the *draft laws* it satisfies; verifiers declare the laws they are valid for, and
pairing a verifier with a drafter outside them is an ``IncompatibleDraftError``.

Here: the draft laws, the ``Drafter`` contract and the drafters of paths, delayed trees and branching trees; the
drafters with draft laws of their own (hub pairs, greedy drafts, DySpec) are in
``verispec.simulator.own_law_drafters``.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from abc import ABC, abstractmethod
from dataclasses import dataclass

import numpy as np

from verispec.errors import UnknownTreeError, describe
from verispec.guard.limits import MAX_TREE_PARAMETER
from verispec.simulator.chooser import DEFAULT_MAX_TRACES, Chooser, RandomChooser, enumerate_law
from verispec.simulator.problems import Problem
from verispec.simulator.ranking import top_tokens, without_tokens
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
    #: One trunk path drawn from q, then K i.i.d. paths of equal length from its end (delayed trees; a trunk of
    #: length 0 is ROOT_IID_PATHS, which those trees declare instead).
    TRUNK_IID_PATHS = "i.i.d. paths after a trunk"
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
    #: One tree that is a function of the draft's laws, drawn with probability one (DDTree's best-first tree of
    #: ``verispec.simulator.ddtree``): its children are no draws from the q its nodes hand the verifier.
    DETERMINISTIC = "one deterministic tree (no draws)"


#: A single path satisfies these laws: one i.i.d. draw is one draw without replacement, one path is K = 1
#: i.i.d. paths, and one child drawn from q is the K = 1 greedy draft. Not HUB: a hub pair has two children
#: (one when q(a) = 1, and then it is a, not X ~ q).
CHAIN_LAWS = frozenset({DraftLaw.SINGLE_PATH, DraftLaw.IID_CHILDREN, DraftLaw.WITHOUT_REPLACEMENT,
                        DraftLaw.ROOT_IID_PATHS, DraftLaw.GREEDY})


def level_widths(branching) -> tuple[int, ...]:
    """The most nodes at depths 0 .. D-1 of a tree whose depth-d nodes get b_d children each: 1, b_1, b_1 b_2, ..
    (capped at ``SIZE_CAP``)."""
    widths, level = [], 1
    for factor in branching:
        widths.append(level)
        level = min(level * factor, SIZE_CAP)
    return tuple(widths)


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

    @property
    def draft_widths(self) -> tuple[int, ...]:
        """The most tokens each of a block's ``depth`` draft forwards feeds, one forward per depth: forward j
        feeds the nodes at depth j (j = 0 the root), whose laws the next depth is drawn from; the leaves are never
        fed. From ``iid_branching`` or ``without_replacement_branching`` when the drafter has one (a level of
        b_1 .. b_j nodes), else one token a forward (a drafter that grows one node a forward; a drafter with
        wider levels and no branching states its own). A latency model that measured the draft at several
        widths prices a block from these (``verispec.latency``)."""
        branching = self.iid_branching or self.without_replacement_branching
        return level_widths(branching) if branching is not None else (1,) * self.depth

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

    def cut(self, depth: int) -> Drafter | None:
        """A drafter whose trees are this one's cut at ``depth`` (same draws, nodes deeper than ``depth`` left out),
        or None when this drafter has no such twin. Real decoding drafts no deeper than the tokens a run still
        wants (a block emits at most depth + 1 of them), as transformers' assisted generation does; any valid
        draft keeps the output lossless, so the cut only saves the forwards of nodes that could never be kept."""
        return self if depth >= self.depth else None

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


def exp_or_inf(value: float) -> float:
    """exp(value), inf instead of OverflowError (size estimates of absurd trees)."""
    return math.exp(value) if value < 700 else math.inf


def _draw_path(problem: Problem, chooser: Chooser, builder: TreeBuilder, node: int, prefix: tuple, length: int):
    """Extend ``node`` (context ``prefix``) by ``length`` tokens drawn from q; return the end node and prefix."""
    for _ in range(length):
        token = chooser.categorical(problem.draft(prefix))
        node = builder.add_child(node, token)
        prefix = prefix + (token,)
    return node, prefix


def check_tree_parameters(kind: str, **counts: int):
    """UnknownTreeError unless every named parameter of a ``kind`` tree is an integer from its minimum (1 for K and
    b, else 0) to MAX_TREE_PARAMETER."""
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
        check_tree_parameters("chain", L=self.length)

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

    def cut(self, depth: int) -> Drafter:
        # the first ``depth`` tokens of a chain (plain, argmax or top-k) are the same kind of chain, shorter
        return self if depth >= self.length else dataclasses.replace(self, length=max(0, depth))

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
        check_tree_parameters("topk-chain", K=self.k, L=self.length)

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
    then K i.i.d. paths of L2 tokens from the trunk's end. Trunk nodes have exactly one child (docs/guides/reference.md,
    trap 7). ``iid:K,L`` is ``delayed:K,0,L``."""

    branches: int
    trunk: int
    tail: int

    def __post_init__(self):
        if self.trunk == 0:  # the spec reads iid:K,L
            check_tree_parameters("iid", K=self.branches, L=self.tail)
        check_tree_parameters("delayed", K=self.branches, L1=self.trunk, L2=self.tail)

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
        return frozenset({DraftLaw.IID_CHILDREN, DraftLaw.TRUNK_IID_PATHS})

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

    def cut(self, depth: int) -> DelayedDrafter:
        # the trunk's first tokens (no tail) when the cut falls in the trunk, else the K paths cut to depth - L1
        if depth >= self.depth:
            return self
        depth = max(0, depth)
        return DelayedDrafter(self.branches, min(self.trunk, depth), max(0, depth - self.trunk))

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
            check_tree_parameters(kind, b=value)

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
        if sum(b != 1 for b in self.branching) == 1:  # branch-iid:1,..,1,K,1,..,1 is delayed:K,L1,L2
            return frozenset({DraftLaw.IID_CHILDREN, DraftLaw.TRUNK_IID_PATHS})
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
        return sum(exp_or_inf(count) * choice for count, choice in zip(parents, per_parent))

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
