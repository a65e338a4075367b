"""Layouts: how verification code written elsewhere takes its arguments, and converters to and from verispec.

A production verification function sees draft tokens, draft and target probabilities and explicit uniform
random numbers, batched over a leading dimension, and returns the emitted tokens. Engines lay those arrays
out differently; each ``Layout`` below states one layout as a contract, builds its arguments for a batch of
verispec draft trees (``TreeBatch``) and a matrix of uniforms, calls the function, and decodes what it
returns into verispec's (node, token) outcome. Every layout returns *emitted tokens, left-aligned, padded
with -1*: the accepted draft tokens in order, then exactly one more token (correction or bonus).

Layouts (V = vocabulary size; B = batch rows; all probability arrays float64, uniforms float64 in [0, 1)):

``chain`` (the contract users' scripts rely on; a single draft path of L tokens):
    f(draft_tokens [B, L] int64, draft_probs [B, L, V], target_probs [B, L+1, V], uniforms [B, L+1])
    -> [B, L+1] int64. Row i of draft_probs is the draft law at the prefix before draft i (the law that drew
    token i under plain sampling); row i of target_probs is the target law at the prefix before position i,
    row L the law after all L drafts.

``padded`` (padded [B, K] chains with per-row lengths, the shape of transformers' ``_speculative_sampling``):
    f(candidate_ids [B, K] int64, candidate_lengths [B] int64, draft_probs [B, K, V], target_probs
    [B, K+1, V], uniforms [B, K+1]) -> [B, K+1] int64. Entries beyond a row's length are padding; the adapter
    fills them with junk (``PADDING``) so that a function that reads them is caught. Uniform column i < length
    belongs to candidate i and column ``length`` to the final draw.

``ragged`` (a flattened ragged batch with cumulative draft counts, the layout of vLLM's rejection sampler):
    f(draft_token_ids [T] int64, cu_num_draft_tokens [B] int64, draft_probs [T, V], target_probs [T, V],
    bonus_token_ids [B] int64, uniform_probs [T], recovered_uniforms [T, V]) -> [B, max_spec_len + 1] int64.
    Request b owns entries cu[b-1]..cu[b]-1. ``recovered_uniforms`` carry one uniform per (draft, token), as
    an exponential race (vLLM's recovered-token sampler) needs. The bonus token is drawn by the adapter from
    the target law after the last draft, by inverse CDF of one more uniform, as the engine's sampler would.
    Filler requests with other draft counts sit between the trees' requests (``RaggedLayout``).

``tree-parent`` and ``tree-sibling`` (token trees; root = node 0, drafted nodes 1..N, a parent before its
children, siblings in drafting order; i.i.d. children that drew the same token are separate nodes):
    f(draft_tokens [B, N], parents [B, N], draft_probs [B, N, V], target_probs [B, N+1, V], uniforms [B, N+1])
    f(draft_tokens [B, N], first_child [B, N+1], next_sibling [B, N+1], tree_mask [B, N+1, N+1] bool,
      draft_probs [B, N, V], target_probs [B, N+1, V], uniforms [B, N+1])
    -> [B, D+1] int64 (D = deepest node's depth). draft_tokens[:, j] and parents[:, j] describe node j + 1;
    draft_probs[:, j] is the draft law at its parent (the law that drew it); target_probs[:, n] is the target
    law at node n; first_child / next_sibling are -1 where there is none; tree_mask[b, i, j] says node j is
    node i or one of its ancestors (the attention mask of tree decoding). Uniform j < N belongs to node
    j + 1, uniform N to the final draw.

verispec merges i.i.d. children that drew the same token into one node with a multiplicity; the tree layouts
expand them back into separate nodes, each copy taking its own contiguous block of the merged child list (the
order in which verispec's drafters draw path by path), so the function sees the tree the drafts made.

Arrays go in as numpy or torch (``arrays``), float64; what comes back may be either.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from functools import cached_property, lru_cache

import numpy as np

from verispec.errors import InvalidTreeError, VerifierError, VerispecError
from verispec.simulator.trees import TreeBatch

#: What the ``padded`` layout writes into padding: one junk column of candidate token 0 with a uniform draft
#: law and a target law that is a point mass on token 0.
PADDING = 1

ARRAY_KINDS = ("numpy", "torch")


def inverse_cdf(law: np.ndarray, uniforms: np.ndarray) -> np.ndarray:
    """Categorical draws by inverse CDF: the first token t with cumsum(law)[t] > u * sum(law), clipped to the
    last token of positive mass (law [M, V] >= 0, uniforms [M]) -> [M] int64."""
    cumulative = np.cumsum(law, axis=-1)  # [M, V]
    tokens = np.sum(cumulative <= (uniforms * cumulative[:, -1])[:, None], axis=-1)
    last = law.shape[-1] - 1 - np.argmax((law > 0)[:, ::-1], axis=-1)
    return np.minimum(tokens, last).astype(np.int64)


@dataclass(frozen=True)
class TreeArrays:
    """The canonical rows of a batch: verispec's merged tree plus the token-walk table used to decode."""

    batch: TreeBatch

    @cached_property
    def tokens(self) -> np.ndarray:  # [N, n]
        return np.asarray(self.batch.tokens, dtype=np.int64)

    @cached_property
    def p(self) -> np.ndarray:  # [N, n, V]
        return np.asarray(self.batch.p, dtype=np.float64)

    @cached_property
    def q(self) -> np.ndarray:  # [N, n, V]; NaN at leaves
        return np.asarray(self.batch.q, dtype=np.float64)

    @cached_property
    def child_by_token(self) -> np.ndarray:
        """[N, n, V] int64: the (merged) child of each node reached by each token, -1 where there is none."""
        batch = self.batch
        table = np.full((batch.num_rows, batch.num_nodes, batch.vocab_size), -1, dtype=np.int64)
        rows = np.arange(batch.num_rows)
        for node, children in enumerate(batch.child_nodes):
            for child in children:
                table[rows, node, self.tokens[:, child]] = child
        return table

    @property
    def depth(self) -> int:
        return max(self.batch.depth)


class Layout(ABC):
    """One production layout: builds a function's arguments and decodes its result."""

    #: Name used on the command line.
    name: str

    def check_batch(self, batch: TreeBatch) -> None:
        """Raise InvalidTreeError when the layout cannot express this topology."""
        return None

    @abstractmethod
    def num_uniforms(self, batch: TreeBatch) -> int:
        """How many uniforms one tree of this topology consumes (the dimension integrated over)."""

    @abstractmethod
    def arguments(self, trees: TreeArrays, rows: np.ndarray, uniforms: np.ndarray) -> tuple:
        """The function's positional arguments (numpy) for ``rows`` [M] of ``trees`` with ``uniforms`` [M, U]."""

    @abstractmethod
    def width(self, trees: TreeArrays) -> int:
        """Number of columns the function must return."""

    def call(self, function, name: str, trees: TreeArrays, rows: np.ndarray, uniforms: np.ndarray,
             arrays: str = "numpy", device: str = "cpu") -> np.ndarray:
        """Run ``function`` on ``rows`` with ``uniforms`` [M, U]; return codes node * V + token, [M] int64.
        With ``arrays`` 'torch' the arguments are float64 / int64 / bool tensors on ``device``."""
        arguments = self.arguments(trees, rows, uniforms)
        if arrays == "torch":
            import torch

            arguments = tuple(torch.from_numpy(np.ascontiguousarray(a)).to(device) for a in arguments)
        try:
            result = function(*arguments)
        except VerispecError:
            raise
        except Exception as error:  # a user's function may fail in any way; report it on one line
            raise VerifierError(f"external function {name} raised {type(error).__name__}: {error}") from None
        emitted = _as_int_matrix(result, name, (self.output_rows(len(rows)), self.width(trees)))
        return decode(self.own_rows(emitted), trees, rows, name, self.drafted_paths(trees, rows))

    def output_rows(self, count: int) -> int:
        """Rows the function returns for ``count`` trees (more where the layout adds filler requests)."""
        return count

    def own_rows(self, emitted: np.ndarray) -> np.ndarray:
        """The rows of the function's result that belong to the trees (not to filler requests)."""
        return emitted

    def drafted_paths(self, trees: TreeArrays, rows: np.ndarray) -> np.ndarray | None:
        """For messages: [M, D] tokens drafted along a chain (None for trees)."""
        return None


def _as_int_matrix(result, name: str, shape: tuple[int, int]) -> np.ndarray:
    if hasattr(result, "detach"):  # a torch tensor, on any device
        result = result.detach().cpu().numpy()
    try:
        emitted = np.asarray(result)
    except Exception:
        emitted = np.asarray(None, dtype=object)
    if emitted.dtype.kind not in "iu":
        raise VerifierError(f"external function {name} returned {type(result).__name__} of dtype {emitted.dtype}; "
                            f"it must return int64 emitted tokens of shape {list(shape)}, padded with -1")
    if emitted.shape != shape:
        raise VerifierError(f"external function {name} returned shape {list(emitted.shape)}; expected {list(shape)} "
                            "(one row per batch entry: emitted tokens padded with -1)")
    return emitted.astype(np.int64)


def decode(emitted: np.ndarray, trees: TreeArrays, rows: np.ndarray, name: str, drafted=None) -> np.ndarray:
    """Emitted tokens [M, W] (left-aligned, -1 padded) -> codes node * V + token [M]; a VerifierError names the
    first row that is not an accepted draft path followed by one token."""
    size = trees.batch.vocab_size
    valid = emitted >= 0
    length = valid.sum(axis=1)  # [M]
    contiguous = (valid == (np.arange(emitted.shape[1])[None, :] < length[:, None])).all(axis=1)
    in_range = ((emitted >= -1) & (emitted < size)).all(axis=1)
    node = np.zeros(len(rows), dtype=np.int64)
    on_tree = np.ones(len(rows), dtype=bool)
    width = emitted.shape[1]
    for position in range(width - 1):
        moving = on_tree & (position < length - 1)
        token = np.clip(emitted[:, position], 0, size - 1)
        child = trees.child_by_token[rows, node, token]
        on_tree &= ~moving | (child >= 0)
        node = np.where(moving & (child >= 0), child, node)
    good = contiguous & in_range & (length >= 1) & on_tree
    if not good.all():
        bad = int(np.flatnonzero(~good)[0])
        shown = [int(t) for t in emitted[bad]]
        if not in_range[bad]:
            why = f"a token outside -1..{size - 1}"
        elif length[bad] < 1:
            why = "no token at all (a block emits at least one)"
        elif not contiguous[bad]:
            why = "a -1 before a token (emitted tokens must be left-aligned)"
        else:
            why = "tokens before the last one that are not an accepted draft path"
        context = "" if drafted is None else f" for draft tokens {[int(t) for t in drafted[bad]]}"
        raise VerifierError(f"external function {name} emitted {shown}{context}: {why}; it must return the "
                            "accepted draft tokens then one more token, padded with -1")
    last = emitted[np.arange(len(rows)), length - 1]
    return node * size + last


def _chain_nodes(batch: TreeBatch) -> list[int]:
    if any(len(children) > 1 for children in batch.child_lists):
        raise InvalidTreeError("this layout takes a single draft path (chain:L, argmax-chain:L, topk-chain:k,L); "
                               "use --layout tree-parent or tree-sibling for trees")
    return batch.chain_nodes()


class ChainLayout(Layout):
    name = "chain"

    def check_batch(self, batch):
        _chain_nodes(batch)

    def num_uniforms(self, batch):
        return len(_chain_nodes(batch))

    def width(self, trees):
        return trees.depth + 1

    def _chain(self, trees):
        return _chain_nodes(trees.batch)

    def arguments(self, trees, rows, uniforms):
        chain = self._chain(trees)
        drafted, before = chain[1:], chain[:-1]
        draft_tokens = trees.tokens[rows][:, drafted]  # [M, L]
        draft_probs = trees.q[rows][:, before]  # [M, L, V]
        target_probs = trees.p[rows][:, chain]  # [M, L+1, V]
        return draft_tokens, draft_probs, target_probs, np.ascontiguousarray(uniforms, dtype=np.float64)

    def drafted_paths(self, trees, rows):
        return trees.tokens[rows][:, self._chain(trees)[1:]]


class PaddedLayout(ChainLayout):
    name = "padded"

    def arguments(self, trees, rows, uniforms):
        tokens, draft, target, uniforms = super().arguments(trees, rows, uniforms)
        count, length, size = tokens.shape[0], tokens.shape[1], trees.batch.vocab_size
        junk_draft = np.full((count, PADDING, size), 1.0 / size)
        junk_target = np.zeros((count, PADDING, size))
        junk_target[:, :, 0] = 1.0
        candidate_ids = np.concatenate([tokens, np.zeros((count, PADDING), dtype=np.int64)], axis=1)
        lengths = np.full(count, length, dtype=np.int64)
        draft_probs = np.concatenate([draft, junk_draft], axis=1)  # [M, K, V]
        target_probs = np.concatenate([target, junk_target], axis=1)  # [M, K+1, V]
        padded_uniforms = np.concatenate([uniforms, np.full((count, PADDING), 0.5)], axis=1)  # [M, K+1]
        return candidate_ids, lengths, draft_probs, target_probs, padded_uniforms

    def width(self, trees):
        return trees.depth + 1 + PADDING


class RaggedLayout(ChainLayout):
    """vLLM's layout. Before each tree's request the adapter puts a filler request with a different number of
    drafts (0, 1, .., L-1 in turn; uniform laws, fixed uniforms; its output is ignored), so the batch really is
    ragged and a function that gets the offsets wrong shows it."""

    name = "ragged"

    def num_uniforms(self, batch):
        length = len(_chain_nodes(batch)) - 1
        return length + length * batch.vocab_size + 1

    def output_rows(self, count):
        return 2 * count

    def own_rows(self, emitted):
        return emitted[1::2]

    def arguments(self, trees, rows, uniforms):
        chain = self._chain(trees)
        length, size, count = len(chain) - 1, trees.batch.vocab_size, len(rows)
        tokens = trees.tokens[rows][:, chain[1:]]  # [M, L]
        draft = trees.q[rows][:, chain[:-1]]  # [M, L, V]
        target = trees.p[rows][:, chain]  # [M, L+1, V]
        accept = uniforms[:, :length]  # [M, L]
        recovered = uniforms[:, length:length + length * size].reshape(count, length, size)  # [M, L, V]
        bonus = inverse_cdf(target[:, length], uniforms[:, -1])  # [M]
        fillers = np.arange(count) % max(length, 1)  # drafts of the filler request before each tree
        counts = np.stack([fillers, np.full(count, length)], axis=1).reshape(-1)  # [2M] filler, tree, ...
        own = np.repeat(np.arange(2 * count) % 2 == 1, counts)  # [T] True at the trees' own entries
        total = int(counts.sum())
        flat_tokens = np.zeros(total, dtype=np.int64)
        flat_draft = np.full((total, size), 1.0 / size)
        flat_target = np.full((total, size), 1.0 / size)
        flat_accept = np.full(total, 0.5)
        flat_recovered = np.full((total, size), 0.5)
        flat_tokens[own] = tokens.reshape(-1)
        flat_draft[own] = draft.reshape(-1, size)
        flat_target[own] = target[:, :length].reshape(-1, size)
        flat_accept[own] = accept.reshape(-1)
        flat_recovered[own] = recovered.reshape(-1, size)
        bonus_ids = np.zeros(2 * count, dtype=np.int64)
        bonus_ids[1::2] = bonus
        return (flat_tokens, np.cumsum(counts).astype(np.int64), flat_draft, flat_target, bonus_ids, flat_accept,
                flat_recovered)


@dataclass(frozen=True)
class ExpandedTree:
    """A merged verispec topology expanded into one node per drawn child (see the module docstring)."""

    merged: tuple[int, ...]  # merged node of each expanded node; [0] is the root
    parent: tuple[int, ...]  # expanded parent of each expanded node; -1 at the root

    @classmethod
    def of(cls, batch: TreeBatch) -> ExpandedTree:
        return _expanded(batch.child_lists)


@lru_cache(maxsize=256)
def _expanded(child_lists: tuple[tuple[int, ...], ...]) -> ExpandedTree:
    """The expansion of one merged topology (its child lists); cached, since every call of a function on a batch
    of that topology needs it."""
    merged, parent = [0], [-1]
    copies: dict[int, list[int]] = {0: [0]}
    for node, children in enumerate(child_lists):
        if not children:
            continue
        own = copies.get(node, [])
        if len(children) % len(own):
            raise InvalidTreeError(f"node {node} has {len(own)} copies but {len(children)} children, which do not "
                                   "split into equal blocks; the tree layouts expand i.i.d. duplicates only")
        block = len(children) // len(own)
        for index, copy in enumerate(own):
            for child in children[index * block:(index + 1) * block]:
                copies.setdefault(child, []).append(len(merged))
                merged.append(child)
                parent.append(copy)
    return ExpandedTree(tuple(merged), tuple(parent))


class TreeParentLayout(Layout):
    name = "tree-parent"

    def check_batch(self, batch):
        ExpandedTree.of(batch)

    def num_uniforms(self, batch):
        return len(ExpandedTree.of(batch).merged)

    def width(self, trees):
        return trees.depth + 1

    def _common(self, trees, rows):
        tree = ExpandedTree.of(trees.batch)
        merged = np.array(tree.merged)
        parent_merged = merged[np.array(tree.parent[1:], dtype=np.int64)]
        draft_tokens = trees.tokens[rows][:, merged[1:]]  # [M, N]
        draft_probs = trees.q[rows][:, parent_merged]  # [M, N, V]
        target_probs = trees.p[rows][:, merged]  # [M, N+1, V]
        return tree, draft_tokens, draft_probs, target_probs

    def arguments(self, trees, rows, uniforms):
        tree, draft_tokens, draft_probs, target_probs = self._common(trees, rows)
        parents = np.broadcast_to(np.array(tree.parent[1:], dtype=np.int64), draft_tokens.shape).copy()
        return draft_tokens, parents, draft_probs, target_probs, np.ascontiguousarray(uniforms, dtype=np.float64)


class TreeSiblingLayout(TreeParentLayout):
    name = "tree-sibling"

    def arguments(self, trees, rows, uniforms):
        tree, draft_tokens, draft_probs, target_probs = self._common(trees, rows)
        count, nodes = len(rows), len(tree.merged)
        first_child = np.full(nodes, -1, dtype=np.int64)
        next_sibling = np.full(nodes, -1, dtype=np.int64)
        last_child: dict[int, int] = {}
        mask = np.eye(nodes, dtype=bool)
        for node in range(1, nodes):
            parent = tree.parent[node]
            if parent in last_child:
                next_sibling[last_child[parent]] = node
            else:
                first_child[parent] = node
            last_child[parent] = node
            mask[node] |= mask[parent]
        return (draft_tokens, np.broadcast_to(first_child, (count, nodes)).copy(),
                np.broadcast_to(next_sibling, (count, nodes)).copy(),
                np.broadcast_to(mask, (count, nodes, nodes)).copy(), draft_probs, target_probs,
                np.ascontiguousarray(uniforms, dtype=np.float64))


LAYOUTS: dict[str, Layout] = {layout.name: layout for layout in (
    ChainLayout(), PaddedLayout(), RaggedLayout(), TreeParentLayout(), TreeSiblingLayout())}


def get_layout(name: str) -> Layout:
    if name not in LAYOUTS:
        raise VerispecError(f"unknown layout {name!r}; choose one of {', '.join(LAYOUTS)}")
    return LAYOUTS[name]
