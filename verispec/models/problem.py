"""A problem backed by a live model pair: p and q at every prefix after a real context, computed on demand.

``ModelProblem(pair, context, sampling, horizon)`` is an ordinary ``Problem``: ``target(prefix)`` is the
target's sampling law after context + prefix and ``draft(prefix)`` the draft's, both in float64, with the
same ``Sampling`` (temperature, top-k, top-p) as real decoding. The exact engine can analyse it like any
table; at a small vocabulary (the tiny pairs) that gives the exact block efficiency and acceptance law of a
real decoding block at that context, which real runs must reproduce.

Conditionals are computed in batches: ``prepare(prefixes)`` feeds the trie of many prefixes to each model in
one forward pass over the context's KV cache (shared, computed once), reads the laws at the requested nodes,
then drops the trie from the cache. ``target``/``draft`` of a prefix not yet computed prepare it alone;
``prefetch(depth)`` prepares every prefix up to a depth (V^depth of them). Every law is cached, keyed on the
prefix (the pair, context and sampling are fixed per problem).
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Iterable

import numpy as np

from verispec.errors import InvalidProblemError, VerispecError
from verispec.models.pair import ModelPair
from verispec.models.sampling import Sampling
from verispec.models.tree_forward import CachedModel
from verispec.simulator.problems import Prefix, Problem

#: Most tree nodes fed in one forward pass by default.
DEFAULT_NODES_PER_FORWARD = 512
#: Default bytes of cached laws (two [V] float64 arrays per prefix: 2.4 MB at V = 151,936); the least recently
#: used prefixes are dropped past it and recomputed when asked for again.
DEFAULT_CACHE_BYTES = 2 << 30

#: Most prefixes ``prefetch`` accepts (each holds two [V] float64 laws).
MAX_PREFETCH = 1 << 20


class ModelProblem(Problem):
    """p(. | context, prefix) and q(. | context, prefix) from a model pair, computed on demand and cached."""

    exact = False

    def __init__(self, pair: ModelPair, context, sampling: Sampling | None = None, horizon: int | None = None, *,
                 nodes_per_forward: int = DEFAULT_NODES_PER_FORWARD, cache_bytes: int = DEFAULT_CACHE_BYTES):
        if horizon is not None and (isinstance(horizon, bool) or not isinstance(horizon, int) or horizon < 0):
            raise InvalidProblemError(f"horizon must be a non-negative integer or None, got {horizon!r}")
        if isinstance(nodes_per_forward, bool) or not isinstance(nodes_per_forward, int) or nodes_per_forward < 2:
            raise VerispecError(f"nodes_per_forward must be an integer >= 2, got {nodes_per_forward!r}")
        self.pair = pair
        self.context = pair.encode(context)
        self.sampling = sampling or Sampling()
        self.horizon = horizon
        self.vocab_size = pair.vocab_size
        self.nodes_per_forward = nodes_per_forward
        self._models = (CachedModel(pair.target), CachedModel(pair.draft))
        for model in self._models:
            if len(self.context) > 1:
                model.prefill(self.context[:-1])
        #: prefix -> (p, q), least recently used first; at most cache_bytes of them (one prefix at least)
        self._laws: OrderedDict[Prefix, tuple[np.ndarray, np.ndarray]] = OrderedDict()
        self._cache_size = max(1, int(cache_bytes) // (16 * self.vocab_size))
        #: Forward passes so far, of each model (the context's prefill not counted).
        self.forward_passes = 0

    @property
    def cache_capacity(self) -> int:
        """Most prefixes whose laws the cache holds: callers prepare at most this many at once."""
        return self._cache_size

    def __repr__(self) -> str:
        return f"ModelProblem({self.pair.name}, context of {len(self.context)} tokens, {self.sampling})"

    def _check(self, prefix) -> Prefix:
        prefix = tuple(int(t) for t in prefix)
        if self.horizon is not None and len(prefix) > self.horizon:
            raise InvalidProblemError(f"prefix of length {len(prefix)} is beyond the problem's horizon {self.horizon}")
        for token in prefix:
            if not 0 <= token < self.vocab_size:
                raise InvalidProblemError(f"prefix {prefix} has token {token} outside the vocabulary "
                                          f"0..{self.vocab_size - 1}")
        return prefix

    def prepare(self, prefixes: Iterable) -> None:
        """Compute p and q at every prefix not yet cached, in batched forward passes (a trie per pass)."""
        missing = sorted({self._check(prefix) for prefix in prefixes} - self._laws.keys(), key=lambda t: (len(t), t))
        chunk: dict[Prefix, None] = {}  # trie nodes of this pass, a parent before its children
        wanted: list[Prefix] = []
        for prefix in missing:
            nodes = [prefix[:length] for length in range(len(prefix) + 1) if prefix[:length] not in chunk]
            if chunk and len(chunk) + len(nodes) > self.nodes_per_forward:
                self._forward(list(chunk), wanted)
                chunk, wanted = {}, []
                nodes = [prefix[:length] for length in range(len(prefix) + 1)]
            chunk.update(dict.fromkeys(nodes))
            wanted.append(prefix)
        if wanted:
            self._forward(list(chunk), wanted)

    prepare_drafts = prepare  # a drafter's hint: the level it is about to draw

    def _forward(self, trie: list[Prefix], wanted: list[Prefix]) -> None:
        index = {prefix: node for node, prefix in enumerate(trie)}
        # node 0 is the empty prefix: the context's last token, under the committed context
        tokens = [self.context[-1]] + [prefix[-1] for prefix in trie[1:]]
        parents = [-1] + [index[prefix[:-1]] for prefix in trie[1:]]
        rows = [index[prefix] for prefix in wanted]
        laws = []
        for model in self._models:
            logits = model.extend(tokens, parents)[rows]
            model.discard()
            laws.append(self.sampling.probabilities(logits).cpu().numpy())
        self.forward_passes += 1
        for row, prefix in enumerate(wanted):
            target, draft = laws[0][row], laws[1][row]
            target.setflags(write=False)
            draft.setflags(write=False)
            self._laws[prefix] = (target, draft)
            self._laws.move_to_end(prefix)
            while len(self._laws) > self._cache_size:
                self._laws.popitem(last=False)

    def prefetch(self, depth: int) -> None:
        """Compute every prefix of length 0..depth (V^depth of them, refused past MAX_PREFETCH)."""
        if isinstance(depth, bool) or not isinstance(depth, int) or depth < 0:
            raise VerispecError(f"depth must be a non-negative integer, got {depth!r}")
        # V^depth alone passes the limit long before the sum is worth computing (depth 10^9 would not finish)
        count = (depth + 1 if self.vocab_size == 1 else sum(self.vocab_size ** length for length in range(depth + 1))
                 if depth * math.log(self.vocab_size) < 64 else math.inf)
        if count > MAX_PREFETCH:
            shown = f"{count:,}" if count < math.inf else f"more than 10^{depth * math.log10(self.vocab_size):.0f}"
            raise VerispecError(f"prefetching depth {depth} needs {shown} prefixes over {self.vocab_size} tokens, "
                                f"above {MAX_PREFETCH:,}; prepare the prefixes you need instead")
        for length in range(depth + 1):
            self.prepare(self.prefixes(length))

    def target(self, prefix: Prefix) -> np.ndarray:
        prefix = self._check(prefix)
        return self._law(prefix)[0]

    def draft(self, prefix: Prefix) -> np.ndarray:
        prefix = self._check(prefix)
        return self._law(prefix)[1]

    def _law(self, prefix: Prefix) -> tuple[np.ndarray, np.ndarray]:
        if prefix not in self._laws:
            self.prepare([prefix])
        self._laws.move_to_end(prefix)
        return self._laws[prefix]
