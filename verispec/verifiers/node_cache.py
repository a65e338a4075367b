"""A bounded memo for node solvers whose per-node work is an LP: the same (p, q, K) recurs at every tree
outcome that shares a node context, so each LP is solved once per distinct node."""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import hashlib
from collections import OrderedDict
from collections.abc import Callable, Hashable

import numpy as np

from verispec.native import series

#: Entries kept per solver instance (least recently used evicted first).
DEFAULT_CACHE_SIZE = 4096
#: Bytes of arrays kept per solver instance: at a real vocabulary one node's rule holds [V] laws (1.2 MB at
#: V = 151,936), so the entry count alone would let a long decoding run hold gigabytes.
DEFAULT_CACHE_BYTES = 256 << 20


#: Vocabularies from which node keys are hashed by NH: below it, the call into the kernel costs more than SHA-256's
#: whole digest (V = 3: 11 us against 1 us; V = 1,000: 6 us against 9 us; a node's key at every cache hit of the
#: exact simulator's small vocabularies). A vocabulary's keys always take one route (the tags differ).
NH_FROM = 512


def node_key(p: np.ndarray, q: np.ndarray, num_drafts: int) -> Hashable:
    """Equal keys mean equal (p, q, K) but for a chance of at most 2^-128: from ``NH_FROM`` tokens, 32 bytes of NH,
    UMAC's universal hash, under this process's random key (``series.universal_digest``: a collision needs the laws
    to depend on a key they never see; 0.2 ms for p and q at V = 151,936, where a node of Global Resolution costs
    about 10 ms), else a SHA-256 digest of the float64 bytes (1.2 ms there; below ``NH_FROM`` or where the compiled
    kernels are not available); the Fractions themselves in exact mode. The arrays are read in place (no copies)."""
    if p.dtype == object:
        return ("exact", tuple(p), tuple(q), num_drafts)
    p, q = np.ascontiguousarray(p, dtype=np.float64), np.ascontiguousarray(q, dtype=np.float64)
    universal = series.universal_digest(p, q) if len(p) >= NH_FROM else None
    if universal is not None:
        return ("nh", universal, len(p), num_drafts)
    digest = hashlib.sha256(p.data)
    digest.update(q.data)
    return ("float", digest.digest(), len(p), num_drafts)


#: Set by ``fresh_nodes``: every node met now is new, so a memo would only pay for its key.
_FRESH_NODES = contextvars.ContextVar("verispec_fresh_nodes", default=False)


@contextlib.contextmanager
def fresh_nodes():
    """Within it every node a solver is asked about is one it has not seen: real decoding, where each tree node
    has its own (p, q) from the target's forward, so the memo never hits. ``NodeCache.get_or_build`` honours it for
    every cached solver: the node's rule is built without its key (NH over p and q: 0.2-0.45 ms a node at
    V = 151,936) and kept nowhere; a solver that reads the cache otherwise (SpecTr) asks ``nodes_are_fresh``. The
    rule is a pure function of (p, q, K), so the laws are the same either way; the exact simulator, which meets the
    same node at many tree outcomes, keeps its collision-safe cached path."""
    token = _FRESH_NODES.set(True)
    try:
        yield
    finally:
        _FRESH_NODES.reset(token)


def nodes_are_fresh() -> bool:
    """Whether the caller is inside ``fresh_nodes``."""
    return _FRESH_NODES.get()


def _nbytes(value, depth: int = 0) -> int:
    """The bytes of the arrays a cached value holds (its fields, two levels down). A view counts its whole base
    array: the view keeps the base alive, so a row cut from a [N, V] batch holds N rows of memory."""
    if isinstance(value, np.ndarray):
        return value.base.nbytes if isinstance(value.base, np.ndarray) else value.nbytes
    if depth > 2:
        return 0
    if isinstance(value, (tuple, list)):
        return sum(_nbytes(item, depth + 1) for item in value)
    if dataclasses.is_dataclass(value):
        return sum(_nbytes(getattr(value, field.name), depth + 1) for field in dataclasses.fields(value))
    return 0


class NodeCache:
    """get_or_build(key_of, build) with least-recently-used eviction, by entries and by the bytes of their arrays."""

    def __init__(self, size: int = DEFAULT_CACHE_SIZE, max_bytes: int = DEFAULT_CACHE_BYTES):
        self._size = size
        self._max_bytes = max_bytes
        self._bytes = 0
        self._entries: OrderedDict[Hashable, object] = OrderedDict()
        self._sizes: dict[Hashable, int] = {}

    def get_or_build(self, key_of: Callable[[], Hashable], build: Callable[[], object]):
        """``build()``, kept under ``key_of()`` and read back when that key recurs. Inside ``fresh_nodes`` (every
        node new) neither the key is computed nor the value kept: the memo would only pay for them."""
        if nodes_are_fresh():
            return build()
        key = key_of()
        if key in self._entries:
            self._entries.move_to_end(key)
            return self._entries[key]
        value = build()
        self.put(key, value)
        return value

    def __contains__(self, key: Hashable) -> bool:
        return key in self._entries

    def get(self, key: Hashable):
        """The cached value (the key must be present)."""
        self._entries.move_to_end(key)
        return self._entries[key]

    def put(self, key: Hashable, value) -> None:
        if key in self._entries:
            self._bytes -= self._sizes.pop(key)
        self._entries[key] = value
        self._entries.move_to_end(key)
        self._sizes[key] = _nbytes(value)
        self._bytes += self._sizes[key]
        while len(self._entries) > 1 and (len(self._entries) > self._size or self._bytes > self._max_bytes):
            old, _ = self._entries.popitem(last=False)
            self._bytes -= self._sizes.pop(old)
