"""The tree of one block of real decoding: drawn by the drafter against the draft model (``DraftSide``, a ``Problem``
whose draft conditionals the draft model computes over its KV cache, one forward pass per tree level), and laid out
as node arrays for the target's one tree forward and the verifier's ``TreeBatch`` (``TreeLayout``)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from verispec.errors import ProblemTooLargeError, VerispecError
from verispec.guard.limits import MAX_DECODE_NODES
from verispec.models.sampling import Sampling
from verispec.models.tree_forward import CachedModel
from verispec.simulator.problems import Prefix, Problem
from verispec.simulator.trees import TreeShape, shape_paths
from verispec.sizes import readable_count

if TYPE_CHECKING:
    from verispec.simulator.drafters import Drafter

#: Most float64 entries (nodes x V) of one tree's conditionals: p, q and the verifier's law each hold one such
#: array (2 GiB at this limit); at Qwen's V = 151,936 the limit allows 1,766 nodes.
MAX_TREE_LAW_ENTRIES = 1 << 28


def check_decode_tree(drafter: Drafter, vocab_size: int | None = None) -> None:
    """ProblemTooLargeError, before any model runs, when a tree of ``drafter`` could have more than
    MAX_DECODE_NODES nodes or (given the vocabulary) its conditionals more than MAX_TREE_LAW_ENTRIES float64
    entries. Computed from ``Drafter.max_nodes`` alone: nothing is drawn or built."""
    nodes = drafter.max_nodes
    log_entries = math.log(nodes) + math.log(vocab_size or 1)
    if nodes > MAX_DECODE_NODES or log_entries > math.log(MAX_TREE_LAW_ENTRIES):
        shown = readable_count(log_entries) if log_entries >= math.log(1e9) else f"{math.exp(log_entries):,.0f}"
        raise ProblemTooLargeError(
            f"tree {drafter.spec} has up to {nodes:,} nodes; one block would forward all of them at once (an "
            f"n x n attention mask) and hold "
            + (f"{shown} float64 conditionals (n x V at V={vocab_size:,}: {math.exp(log_entries) * 8 / 2**30:,.1f} "
               "GiB per array)" if vocab_size else "n x V float64 conditionals")
            + f", above the limits of {MAX_DECODE_NODES:,} nodes and {MAX_TREE_LAW_ENTRIES:,} entries; use a "
              "smaller tree")


class DraftSide(Problem):
    """The draft half of a problem for one block, backed by the draft model: ``draft(prefix)`` is q(. | the
    tokens before the root, root, prefix), computed by the draft model over its KV cache.

    Every prefix the drafter asks about extends one it asked about before (a child is drawn from its
    parent's q), so each new prefix is one new token under an already fed node. ``prepare_drafts`` feeds a
    whole level in one forward pass. ``target`` is not available here: the target scores the finished tree
    in one pass instead."""

    exact = False

    def __init__(self, model: CachedModel, root_logits, root_node: int, sampling: Sampling, horizon: int,
                 law_for_drafting=None, root_hidden=None, root_law=None):
        self.model = model
        self.sampling = sampling
        self.horizon = horizon
        self.vocab_size = int(root_logits.shape[-1])
        #: q for the drafter, optionally different from the verifier's (only the broken controls in tests)
        self._law_for_drafting = law_for_drafting
        self.node: dict[Prefix, int] = {(): root_node}  # prefix -> its pending index in the draft cache
        self.law: dict[Prefix, Any] = {}                # prefix -> q on the device, float64 [V]
        self.logits: dict[Prefix, Any] = {}             # prefix -> the draft's logits there [V]
        self.host: dict[Prefix, np.ndarray] = {}        # prefix -> the drafter's q on the host [V]
        self.hidden: dict[Prefix, Any] = {}             # prefix -> the draft's hidden state [H] (model.hidden only)
        self.forward_calls = 0
        self._store([()], root_logits[None], None if root_hidden is None else root_hidden[None],
                    None if root_law is None else root_law[None])

    def _store(self, prefixes, logits, hidden=None, laws=None) -> None:
        """``laws``: the sampling laws of ``logits`` when the caller has them already (the policy's q_root)."""
        laws = self.sampling.probabilities(logits) if laws is None else laws  # [n, V] float64
        drafting = laws if self._law_for_drafting is None else self._law_for_drafting(logits)
        host = drafting.cpu().numpy()
        host.setflags(write=False)  # on a CPU it shares memory with the q the verifier is handed
        for row, prefix in enumerate(prefixes):
            self.law[prefix] = laws[row]
            self.logits[prefix] = logits[row]
            self.host[prefix] = host[row]
            if hidden is not None:
                self.hidden[prefix] = hidden[row]

    def prepare_drafts(self, prefixes) -> None:
        missing = [prefix for prefix in dict.fromkeys(tuple(p) for p in prefixes) if prefix not in self.law]
        if not missing:
            return
        for prefix in missing:
            if prefix[:-1] not in self.node:
                raise VerispecError(f"the drafter asked for q after {prefix} before drawing its parent's child")
        first = self.model.pending
        logits = self.model.extend([prefix[-1] for prefix in missing], [self.node[prefix[:-1]] for prefix in missing])
        self.forward_calls += 1
        for offset, prefix in enumerate(missing):
            self.node[prefix] = first + offset
        self._store(missing, logits, self.model.last_hidden if self.model.hidden else None)

    def draft(self, prefix: Prefix) -> np.ndarray:
        prefix = tuple(prefix)
        if prefix not in self.law:
            self.prepare_drafts([prefix])
        return self.host[prefix]

    def target(self, prefix: Prefix) -> np.ndarray:
        raise VerispecError("the draft side of a block has no target law; the target scores the whole tree at once")


@dataclass(frozen=True)
class TreeLayout:
    """A drawn shape as node arrays in its canonical (breadth-first) order: what TreeBatch and the target's
    tree forward need."""

    paths: tuple[tuple[int, ...], ...]
    parent: tuple[int, ...]
    depth: tuple[int, ...]
    tokens: tuple[int, ...]
    child_lists: tuple[tuple[int, ...], ...]

    @classmethod
    def of_shape(cls, shape: TreeShape) -> TreeLayout:
        paths = shape_paths(shape)
        index = {path: node for node, path in enumerate(paths)}
        parent = (-1,) + tuple(index[path[:-1]] for path in paths[1:])
        child_lists = tuple(tuple(index[paths[node] + (int(token),)] for token in children)
                            for node, children in enumerate(shape))
        return cls(tuple(paths), parent, tuple(len(path) for path in paths),
                   (-1,) + tuple(path[-1] for path in paths[1:]), child_lists)

    def path_to(self, node: int) -> list[int]:
        """Node ids from the root's first child down to ``node`` (empty for the root)."""
        path = []
        while node > 0:
            path.append(node)
            node = self.parent[node]
        return path[::-1]
