"""Draft trees: a flat, immutable tree of contexts with the target and draft conditionals at every node.

Node 0 is the root (the empty draft). Every other node is a context: the root-to-node path of drafted
tokens. Sibling nodes carry distinct tokens; the *ordered child list* of a node records every draw that
produced a child, in drawing order, so it may repeat a token: when K i.i.d. paths agree on a prefix they
share its nodes, and a node reached by m paths has a child list of m draws (see docs/guides/reference.md,
"Trees"). ``multiplicity[n]`` is how often node n's token appears in its parent's child list.

A tree is determined by its *shape*: the tuple of ordered child lists in canonical order (breadth first,
siblings in order of first appearance). Drafters build shapes with ``TreeBuilder``; identical shapes are
identical trees, which is how the exact engine merges draft outcomes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from verispec import backend
from verispec.errors import InvalidTreeError
from verispec.simulator.problems import Problem

TreeShape = tuple[tuple[int, ...], ...]


class TreeBuilder:
    """Grow a tree one drawn child at a time; ``shape()`` returns its canonical shape."""

    def __init__(self):
        self._children: list[list[int]] = [[]]
        self._child_node: list[dict[int, int]] = [{}]

    def add_child(self, node: int, token: int) -> int:
        """Record one draw of ``token`` under ``node``; return the child's node id (shared if seen before)."""
        self._children[node].append(token)
        child = self._child_node[node].get(token)
        if child is None:
            child = len(self._children)
            self._children.append([])
            self._child_node.append({})
            self._child_node[node][token] = child
        return child

    def child_id(self, node: int, token: int) -> int:
        """The node id of an already drawn child."""
        return self._child_node[node][token]

    def children(self, node: int) -> tuple[int, ...]:
        """The ordered child list (tokens, with repeats) drawn so far under ``node``."""
        return tuple(self._children[node])

    def shape(self) -> TreeShape:
        order, queue = [], [0]
        while queue:
            node = queue.pop(0)
            order.append(node)
            seen = set()
            for token in self._children[node]:
                if token not in seen:
                    seen.add(token)
                    queue.append(self._child_node[node][token])
        return tuple(tuple(self._children[node]) for node in order)


def shape_from_paths(paths: Sequence[Sequence[int]]) -> TreeShape:
    """The shape of the tree formed by root-to-leaf paths drawn in this order (K i.i.d. paths)."""
    builder = TreeBuilder()
    for path in paths:
        node = 0
        for token in path:
            node = builder.add_child(node, int(token))
    return builder.shape()


def shape_paths(shape: TreeShape) -> list[tuple[int, ...]]:
    """The root-to-node token path of every node of a shape, in its canonical (breadth-first) node order."""
    paths = [()]
    for node, children in enumerate(shape):
        for token in dict.fromkeys(children):
            paths.append(paths[node] + (int(token),))
    return paths


@dataclass(frozen=True, eq=False)
class DraftTree:
    """A draft tree with p and q stored at each node.

    Arrays (read-only):
      parent        [num_nodes]      parent node id, -1 at the root
      token         [num_nodes]      token on the edge into the node, -1 at the root
      depth         [num_nodes]      number of drafted tokens on the root-to-node path
      multiplicity  [num_nodes]      copies of the node's token in its parent's child list (1 at the root)
      p             [num_nodes, V]   target conditional p(. | path to node)
      q             [num_nodes, V]   draft conditional q(. | path to node); NaN (None in exact mode) at leaves
    Tuples:
      child_tokens[n]  ordered child list of node n (tokens, may repeat)
      child_nodes[n]   distinct child node ids of n, in order of first appearance
      paths[n]         root-to-node token path of n
    Node ids are topologically ordered (a parent before its children): breadth first for trees built
    from a shape, the topology's own order for a row of a ``TreeBatch``.
    """

    vocab_size: int
    shape: TreeShape
    parent: np.ndarray
    token: np.ndarray
    depth: np.ndarray
    multiplicity: np.ndarray
    child_tokens: tuple[tuple[int, ...], ...]
    child_nodes: tuple[tuple[int, ...], ...]
    paths: tuple[tuple[int, ...], ...]
    p: np.ndarray
    q: np.ndarray
    exact: bool

    @classmethod
    def from_shape(cls, problem: Problem, shape: TreeShape) -> DraftTree:
        """Attach the problem's conditionals to a shape; validate tokens and drafted probabilities."""
        size = problem.vocab_size
        parent, token, paths = [-1], [-1], [()]
        child_lists: list[tuple[int, ...]] = []
        if len(shape) == 0:
            raise InvalidTreeError("a tree shape needs at least the root")
        for node, children in enumerate(shape):
            if node >= len(paths):
                raise InvalidTreeError(f"shape has {len(shape)} child lists but only {len(paths)} nodes")
            ids: dict[int, int] = {}
            for child_token in children:
                if not (isinstance(child_token, (int, np.integer)) and 0 <= child_token < size):
                    raise InvalidTreeError(
                        f"node at prefix {paths[node]} drafts token {_plain(child_token)}, "
                        f"outside the vocabulary 0..{size - 1}")
                if int(child_token) not in ids:
                    ids[int(child_token)] = len(paths)
                    parent.append(node)
                    token.append(int(child_token))
                    paths.append(paths[node] + (int(child_token),))
            child_lists.append(tuple(ids[int(t)] for t in children))
        if len(paths) != len(shape):
            raise InvalidTreeError(f"shape lists {len(shape)} child lists for {len(paths)} nodes")
        problem.require_depth(max(len(path) for path in paths))
        dtype = object if problem.exact else np.float64
        p = np.array([problem.target(path) for path in paths], dtype=dtype).reshape(len(paths), size)
        q = np.empty((len(paths), size), dtype=dtype)
        q.fill(None if problem.exact else np.nan)
        for node, children in enumerate(shape):
            if children:
                q[node] = problem.draft(paths[node])
        return cls.from_topology(size, tuple(parent), tuple(token), tuple(child_lists), p, q)

    @classmethod
    def from_topology(cls, vocab_size: int, parent: Sequence[int], token: Sequence[int],
                      child_lists: Sequence[Sequence[int]], p: np.ndarray, q: np.ndarray) -> DraftTree:
        """A tree from explicit node arrays: ``parent[n] < n`` (-1 at the root), ``token[n]``, the ordered
        child list of every node as node ids (repeats are i.i.d. draws that agree), p and q [n, V]."""
        num_nodes = len(parent)
        paths: list[tuple[int, ...]] = [()]
        depth = [0]
        for node in range(1, num_nodes):
            if not 0 <= parent[node] < node:
                raise InvalidTreeError(f"node {node} has parent {parent[node]}; parents must come first")
            paths.append(paths[parent[node]] + (int(token[node]),))
            depth.append(depth[parent[node]] + 1)
        child_tokens = tuple(tuple(int(token[c]) for c in children) for children in child_lists)
        child_nodes = tuple(tuple(dict.fromkeys(int(c) for c in children)) for children in child_lists)
        for node, children in enumerate(child_tokens):
            for child_token in children:
                if not q[node, child_token] > 0:
                    raise InvalidTreeError(
                        f"draft token {child_token} at prefix {paths[node]} has q = 0: "
                        "a drafter cannot propose it, and every rule divides by it")
        multiplicity = [1] + [child_tokens[parent[n]].count(int(token[n])) for n in range(1, num_nodes)]
        arrays = {name: np.asarray(values, dtype=np.int64) for name, values in
                  (("parent", parent), ("token", token), ("depth", depth), ("multiplicity", multiplicity))}
        for array in (*arrays.values(), p, q):
            array.setflags(write=False)
        return cls(vocab_size=vocab_size, shape=_canonical_shape(child_tokens, child_nodes, token),
                   child_tokens=child_tokens, child_nodes=child_nodes, paths=tuple(paths), p=p, q=q,
                   exact=p.dtype == object, **arrays)

    @classmethod
    def from_paths(cls, problem: Problem, paths: Sequence[Sequence[int]]) -> DraftTree:
        """The tree of root-to-leaf paths drawn in the given order (a chain is one path)."""
        return cls.from_shape(problem, shape_from_paths(paths))

    @property
    def num_nodes(self) -> int:
        return len(self.paths)

    @property
    def max_depth(self) -> int:
        return int(self.depth.max())

    def is_leaf(self, node: int) -> bool:
        return not self.child_tokens[node]

    def child(self, node: int, token: int) -> int | None:
        """The node reached from ``node`` by ``token``, or None if that token was not drafted there."""
        for child in self.child_nodes[node]:
            if self.token[child] == token:
                return child
        return None

    @cached_property
    def is_chain(self) -> bool:
        """True when every node has at most one draw in its child list (a single draft path)."""
        return all(len(children) <= 1 for children in self.child_tokens)

    def chain_nodes(self) -> list[int]:
        """Node ids root..leaf of a single-path tree."""
        if not self.is_chain:
            raise InvalidTreeError("this rule needs a single draft path, but the tree branches")
        nodes = [0]
        while self.child_nodes[nodes[-1]]:
            nodes.append(self.child_nodes[nodes[-1]][0])
        return nodes

    def as_batch(self) -> TreeBatch:
        """This tree as a one-row ``TreeBatch`` (numpy; Fraction objects in exact mode)."""
        child_lists = tuple(tuple(self.child(node, t) for t in children)
                            for node, children in enumerate(self.child_tokens))
        return TreeBatch(vocab_size=self.vocab_size, parent=tuple(int(v) for v in self.parent),
                         depth=tuple(int(v) for v in self.depth), child_lists=child_lists,
                         tokens=self.token[None, :].copy(), p=self.p[None], q=self.q[None],
                         contexts=np.arange(self.num_nodes)[None, :])

    def __repr__(self) -> str:
        return f"DraftTree(V={self.vocab_size}, shape={self.shape})"


def _canonical_shape(child_tokens, child_nodes, token) -> TreeShape:
    """The canonical shape (breadth first, siblings in order of first appearance) of a topology."""
    order, queue = [], [0]
    while queue:
        node = queue.pop(0)
        order.append(node)
        queue.extend(child_nodes[node])
    return tuple(child_tokens[node] for node in order)


def _plain(value):
    """A Python number for messages (no numpy repr)."""
    return value.item() if isinstance(value, np.generic) else value


@dataclass(frozen=True, eq=False)
class TreeBatch:
    """N draft trees of one topology, as arrays on any backend (numpy float64, Fraction objects, torch).

    Every verification rule is written once against this: its law for one tree is the one-row case
    (``DraftTree.as_batch``), the exact engine's fast enumeration hands it thousands of rows at once, and
    real decoding hands it torch tensors on the model's device.

    Topology (Python tuples over node ids; a parent always comes before its children):
      parent[n]        parent node id, -1 at the root
      depth[n]         drafted tokens on the root-to-node path
      child_lists[n]   ordered child list of n as node ids; a repeated id is i.i.d. draws that agreed
    Rows:
      tokens    [N, n]     int64, the token on the edge into each node (-1 at the root)
      p         [N, n, V]  target conditional at each node
      q         [N, n, V]  draft conditional at each node (NaN, or None in exact mode, at leaves)
      contexts  [N, n]     int64 ids: equal ids mean equal (p, q) at those nodes (rules may compute a
                           node-local quantity once per distinct id)
    """

    vocab_size: int
    parent: tuple[int, ...]
    depth: tuple[int, ...]
    child_lists: tuple[tuple[int, ...], ...]
    tokens: Any
    p: Any
    q: Any
    contexts: Any

    @property
    def num_rows(self) -> int:
        return int(self.tokens.shape[0])

    @property
    def num_nodes(self) -> int:
        return len(self.parent)

    @property
    def exact(self) -> bool:
        return backend.is_exact(self.p)

    @cached_property
    def child_nodes(self) -> tuple[tuple[int, ...], ...]:
        """Distinct children of each node in order of first appearance."""
        return tuple(tuple(dict.fromkeys(children)) for children in self.child_lists)

    def children(self, node: int):
        """The child list of ``node`` as tokens, [N, m] (m = len(child_lists[node]))."""
        return self.tokens[:, list(self.child_lists[node])]

    def chain_nodes(self) -> list[int]:
        """Node ids root..leaf when the topology is a single path."""
        nodes = [0]
        while self.child_lists[nodes[-1]]:
            if len(self.child_lists[nodes[-1]]) > 1:
                raise InvalidTreeError("this rule needs a single draft path, but the tree branches")
            nodes.append(self.child_lists[nodes[-1]][0])
        return nodes

    def tree(self, row: int) -> DraftTree:
        """Row ``row`` as a ``DraftTree`` (numpy, node ids as in the batch): for procedures and checks."""
        tokens = [int(t) for t in backend.to_numpy(self.tokens[row])]
        return DraftTree.from_topology(self.vocab_size, self.parent, tokens, self.child_lists,
                                       np.array(backend.to_numpy(self.p[row])),
                                       np.array(backend.to_numpy(self.q[row])))

    def shape(self, row: int) -> TreeShape:
        """The canonical ``TreeShape`` of one row (to compare with ``Drafter.outcomes``)."""
        tokens = backend.to_numpy(self.tokens[row])
        child_tokens = tuple(tuple(int(tokens[c]) for c in children) for children in self.child_lists)
        return _canonical_shape(child_tokens, self.child_nodes, tokens)

    @classmethod
    def of_trees(cls, trees: Sequence[DraftTree]) -> list[tuple[TreeBatch, list[int]]]:
        """Draft trees of one problem grouped by topology: (batch of one topology, the indices of its trees
        in ``trees``) for every topology, so a rule's batched law runs once per topology instead of once per
        tree. A node's context id is its token path (equal paths of one problem have equal conditionals)."""
        groups: dict = {}
        context_of: dict[tuple[int, ...], int] = {}
        for index, tree in enumerate(trees):
            single = tree.as_batch()
            contexts = np.array([[context_of.setdefault(path, len(context_of)) for path in tree.paths]])
            key = (single.parent, single.depth, single.child_lists)
            groups.setdefault(key, []).append((index, single, contexts))
        batches = []
        for members in groups.values():
            first = members[0][1]
            stacked = {name: np.concatenate([getattr(single, name) for _, single, _ in members])
                       for name in ("tokens", "p", "q")}
            stacked["contexts"] = np.concatenate([contexts for _, _, contexts in members])
            batches.append((cls(vocab_size=first.vocab_size, parent=first.parent, depth=first.depth,
                                child_lists=first.child_lists, **stacked), [index for index, _, _ in members]))
        return batches

    def to_torch(self, device="cpu", dtype=None) -> TreeBatch:
        """The same batch as torch tensors (float64 unless ``dtype`` is given) on ``device``."""
        import torch

        dtype = dtype or torch.float64

        def floats(array):
            return torch.tensor(np.asarray(array, dtype=np.float64), dtype=dtype, device=device)

        def ints(array):
            return torch.tensor(np.asarray(backend.to_numpy(array), dtype=np.int64), device=device)

        return TreeBatch(vocab_size=self.vocab_size, parent=self.parent, depth=self.depth,
                         child_lists=self.child_lists, tokens=ints(self.tokens), p=floats(self.p),
                         q=floats(self.q), contexts=ints(self.contexts))


@dataclass(frozen=True, eq=False)
class LawForest:
    """Many draft trees of many topologies in one flat table, with the laws their internal nodes read: what a
    rule's ``forest_stopping_masses`` takes where its law on a tree reads p and q at a few nodes and is cheap per
    node, so that thousands of small trees (a label build's root) cost a few array passes, not one batch per
    topology. numpy float64 only (the labels' host arrays). Within a tree a parent comes before its children.

    Each internal node's laws are one row of ``p`` and ``q`` over that row's own columns: the union of p's and q's
    supports there (top-k laws at V = 151,936 stay a few dozen wide), ascending token ids, zero-padded to the widest
    row; a node's ``token`` is its token's column in its PARENT's row. A token with p = q = 0 at a node takes part in
    no rule that reads the forest (``forest_stopping_masses``); tokens keep their order, so rules ranking by token
    id rank alike.

    tree      [F]     int64  the tree each node is in (0, 1, ..)
    parent    [F]     int64  the flat index of the node's parent, -1 at a tree's root
    depth     [F]     int64  tokens from the tree's root
    token     [F]     int64  the node's token as a column of its parent's law row, -1 at a root
    law       [F]     int64  the node's row of ``p`` and ``q``, -1 at a leaf (p there only sets the bonus token's
                             law: a leaf's p is taken to total 1)
    children  [F, m]  int64  the node's distinct children (flat indices) in order of first appearance, -1 padded
    draws     [F]     int64  the length of the node's child list, repeats counted (K at a root of K i.i.d. paths)
    post      [T, n]  int64  each tree's nodes in post-order (children in the order of ``children``), -1 padded
    p, q      [D, W]  float64  the law rows
    """

    tree: np.ndarray
    parent: np.ndarray
    depth: np.ndarray
    token: np.ndarray
    law: np.ndarray
    children: np.ndarray
    draws: np.ndarray
    post: np.ndarray
    p: np.ndarray
    q: np.ndarray
