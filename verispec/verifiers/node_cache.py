"""A bounded memo for node solvers whose per-node work is an LP: the same (p, q, K) recurs at every tree
outcome that shares a node context, so each LP is solved once per distinct node."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable

import numpy as np

#: Entries kept per solver instance (least recently used evicted first).
DEFAULT_CACHE_SIZE = 4096


def node_key(p: np.ndarray, q: np.ndarray, num_drafts: int) -> Hashable:
    """Equal keys mean equal (p, q, K): the raw bytes in float64, the Fractions themselves in exact mode."""
    if p.dtype == object:
        return ("exact", tuple(p), tuple(q), num_drafts)
    return ("float", np.ascontiguousarray(p, dtype=np.float64).tobytes(),
            np.ascontiguousarray(q, dtype=np.float64).tobytes(), num_drafts)


class NodeCache:
    """get_or_build(key, build) with least-recently-used eviction."""

    def __init__(self, size: int = DEFAULT_CACHE_SIZE):
        self._size = size
        self._entries: OrderedDict[Hashable, object] = OrderedDict()

    def get_or_build(self, key: Hashable, build: Callable[[], object]):
        if key in self._entries:
            self._entries.move_to_end(key)
            return self._entries[key]
        value = build()
        self._entries[key] = value
        if len(self._entries) > self._size:
            self._entries.popitem(last=False)
        return value

    def __contains__(self, key: Hashable) -> bool:
        return key in self._entries

    def get(self, key: Hashable):
        """The cached value (the key must be present)."""
        self._entries.move_to_end(key)
        return self._entries[key]

    def put(self, key: Hashable, value) -> None:
        self._entries[key] = value
        if len(self._entries) > self._size:
            self._entries.popitem(last=False)
