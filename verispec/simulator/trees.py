"""Draft trees: a flat, immutable tree of contexts with the target and draft conditionals at every node.

Node 0 is the root (the empty draft). Every other node is a context: the root-to-node path of drafted
tokens. Sibling nodes carry distinct tokens; the *ordered child list* of a node records every draw that
produced a child, in drawing order, so it may repeat a token: when K i.i.d. paths agree on a prefix they
share its nodes, and a node reached by m paths has a child list of m draws (see the reference,
"Trees"). ``multiplicity[n]`` is how often node n's token appears in its parent's child list.

A tree is determined by its *shape*: the tuple of ordered child lists in canonical order (breadth first,
siblings in order of first appearance). Drafters build shapes with ``TreeBuilder``; identical shapes are
identical trees, which is how the exact engine merges draft outcomes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np

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
        parent, token, depth, paths = [-1], [-1], [0], [()]
        child_nodes: list[tuple[int, ...]] = []
        if len(shape) == 0:
            raise InvalidTreeError("a tree shape needs at least the root")
        for node, children in enumerate(shape):
            if node >= len(paths):
                raise InvalidTreeError(f"shape has {len(shape)} child lists but only {len(paths)} nodes")
            distinct = []
            for child_token in children:
                if not (isinstance(child_token, (int, np.integer)) and 0 <= child_token < size):
                    raise InvalidTreeError(
                        f"node at prefix {paths[node]} drafts token {child_token!r}, "
                        f"outside the vocabulary 0..{size - 1}")
                if child_token not in distinct:
                    distinct.append(int(child_token))
            ids = []
            for child_token in distinct:
                ids.append(len(paths))
                parent.append(node)
                token.append(child_token)
                depth.append(depth[node] + 1)
                paths.append(paths[node] + (child_token,))
            child_nodes.append(tuple(ids))
        if len(paths) != len(shape):
            raise InvalidTreeError(f"shape lists {len(shape)} child lists for {len(paths)} nodes")
        problem.require_depth(max(depth))
        dtype = object if problem.exact else np.float64
        p = np.array([problem.target(path) for path in paths], dtype=dtype).reshape(len(paths), size)
        q = np.empty((len(paths), size), dtype=dtype)
        q.fill(None if problem.exact else np.nan)
        for node, children in enumerate(shape):
            if children:
                q[node] = problem.draft(paths[node])
                for child_token in children:
                    if not q[node, child_token] > 0:
                        raise InvalidTreeError(
                            f"draft token {child_token} at prefix {paths[node]} has q = 0: "
                            "a drafter cannot propose it, and every rule divides by it")
        multiplicity = [1] + [shape[parent[n]].count(token[n]) for n in range(1, len(paths))]
        arrays = {name: np.asarray(values) for name, values in
                  (("parent", parent), ("token", token), ("depth", depth), ("multiplicity", multiplicity))}
        for array in (*arrays.values(), p, q):
            array.setflags(write=False)
        return cls(vocab_size=size, shape=tuple(tuple(int(t) for t in c) for c in shape), child_tokens=tuple(shape),
                   child_nodes=tuple(child_nodes), paths=tuple(paths), p=p, q=q, exact=problem.exact, **arrays)

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

    def __repr__(self) -> str:
        return f"DraftTree(V={self.vocab_size}, shape={self.shape})"
