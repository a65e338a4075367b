"""The arrays of a batch of draft trees as external code sees them, and the way back to verispec's outcomes.

``TreeArrays`` holds a batch's canonical rows (tokens, target and draft laws) and the token-walk table that
decodes; ``as_int_matrix`` reads what a function returned as emitted tokens, and ``decode`` turns emitted tokens
(the accepted draft tokens, then one more, padded with -1) into verispec's (node, token) codes. ``inverse_cdf``
is the categorical draw by inverse CDF that the layouts (vLLM's bonus token) and RNG capture both use.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from verispec.errors import InvalidTreeError, VerifierError
from verispec.simulator.trees import TreeBatch


def inverse_cdf(law: np.ndarray, uniforms: np.ndarray) -> np.ndarray:
    """Categorical draws by inverse CDF: the first token t with cumsum(law)[t] > u * sum(law), clipped to the
    last token of positive mass (law [M, V] >= 0, uniforms [M]) -> [M] int64."""
    cumulative = np.cumsum(law, axis=-1)  # [M, V]
    tokens = np.count_nonzero(cumulative <= (uniforms * cumulative[:, -1])[:, None], axis=-1)
    last = law.shape[-1] - 1 - np.argmax((law > 0)[:, ::-1], axis=-1)
    return np.minimum(tokens, last).astype(np.int64)


#: The most changes of one categorical draw whose points exact integration is handed (``categorical_breaks``), as
#: for an integer draw (``rng.rules.MAX_KNOWN_BREAKS``).
MAX_CATEGORICAL_BREAKS = 256


def categorical_breaks(law: np.ndarray) -> np.ndarray | None:
    """Where ``inverse_cdf(law[None], [u])`` changes as u goes over [0, 1): for each token t before the last of
    positive mass, the least float64 u with u * sum(law) >= cumsum(law)[t] in float64 - the comparison
    ``inverse_cdf`` makes - as sorted distinct points inside (0, 1). Each point is pinned to its float (checked: the
    result changes between it and the float below, and nowhere else, since the count of cumulative masses at or
    below u * sum(law) only grows with u); None where one cannot be (a law without positive mass, a point that
    does not settle) or where there are more than ``MAX_CATEGORICAL_BREAKS``. Remembered by the law's bytes (a
    check draws from the same few laws thousands of times)."""
    law = np.asarray(law, dtype=np.float64)
    key = law.tobytes()
    if key not in _BREAKS:
        if len(_BREAKS) >= 4096:
            _BREAKS.clear()
        _BREAKS[key] = _categorical_breaks(law)
    return _BREAKS[key]


#: Law bytes -> its breakpoints (``categorical_breaks``).
_BREAKS: dict[bytes, np.ndarray | None] = {}


def _categorical_breaks(law: np.ndarray) -> np.ndarray | None:
    cumulative = np.cumsum(law[None, :], axis=-1)[0]  # as inverse_cdf sums
    total = float(cumulative[-1])
    positive = np.flatnonzero(law > 0)
    if not (math.isfinite(total) and total > 0 and len(positive)) or positive[-1] > MAX_CATEGORICAL_BREAKS:
        return None
    points = set()
    for bar in cumulative[:positive[-1]].tolist():  # token t -> t + 1 where u * total reaches the bar
        if bar <= 0:
            continue
        u = min(bar / total, 1.0)  # Python floats multiply as numpy's float64 do: the same roundings
        for _ in range(4):  # up while u * total is still below the bar, then down while the float below reaches it
            if u * total < bar:
                u = math.nextafter(u, 2.0)
        for _ in range(4):
            if math.nextafter(u, -1.0) * total >= bar:
                u = math.nextafter(u, -1.0)
        if not (u * total >= bar and math.nextafter(u, -1.0) * total < bar):
            return None
        if u < 1.0:
            points.add(u)
    found = np.array(sorted(points), dtype=np.float64)
    found.flags.writeable = False  # shared by every draw from the same law
    return found


def chain_nodes(batch: TreeBatch) -> list[int]:
    """The nodes of ``batch``'s one draft path, root first; ``InvalidTreeError`` for a tree that branches."""
    if any(len(children) > 1 for children in batch.child_lists):
        raise InvalidTreeError("this layout takes a single draft path (chain:L, argmax-chain:L, topk-chain:k,L); "
                               "use --layout tree-parent or tree-sibling for trees")
    return batch.chain_nodes()


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

    @cached_property
    def chain(self) -> list[int]:
        """The nodes of the batch's one draft path, root first (``chain_nodes``): the chain layouts ask at every
        call."""
        return chain_nodes(self.batch)

    @property
    def depth(self) -> int:
        return max(self.batch.depth)

    @cached_property
    def laws_by_path(self) -> tuple[dict, dict]:
        """(target law, draft law) at each node, keyed by the tokens drafted on the path from the root to it,
        over every row (the draft law only where the node has children; it is NaN at leaves)."""
        batch = self.batch
        paths: dict[int, tuple[int, ...]] = {0: ()}  # node -> the nodes below the root on its path
        waiting = [0]
        while waiting:
            node = waiting.pop()
            for child in dict.fromkeys(batch.child_lists[node]):
                paths[child] = paths[node] + (child,)
                waiting.append(child)
        target, draft = {}, {}
        for row in range(batch.num_rows):
            for node, path in paths.items():
                key = tuple(int(t) for t in self.tokens[row, list(path)])
                target.setdefault(key, self.p[row, node])
                if batch.child_lists[node]:
                    draft.setdefault(key, self.q[row, node])
        return target, draft


def as_int_matrix(result, name: str, shape: tuple[int, int]) -> np.ndarray:
    """A function's result (numpy or torch, any device) as int64 emitted tokens of ``shape`` [rows, width];
    VerifierError naming the function otherwise."""
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
