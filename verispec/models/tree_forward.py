"""A causal language model's conditionals at every node of a draft tree in ONE forward pass over its KV cache.

A ``CachedModel`` holds a model's KV cache over a *committed* sequence (the prompt and every accepted
token) plus *pending* tokens: nodes of a draft tree fed but not yet accepted. ``extend(tokens, parents)``
feeds any number of new tree nodes in one forward pass. Each new token attends to the committed sequence
and to its own ancestors among the pending tokens only (a 4D attention mask over the cache), and sits at
position committed length + depth - 1, so its logits are the model's conditional after the root-to-node path,
exactly as if the path had been fed alone (tests/models/test_models.py holds the two equal in float64).
``commit(path)`` keeps the pending tokens of the accepted path, in order, and drops the rest of the tree
from the cache, so the next block starts from the committed sequence without recomputing it.

The same object serves the target (the whole tree in one forward: the draft tree's nodes, under the token
emitted by the previous block) and the draft (its conditionals as the drafter asks for them, each new node
fed on top of the pending ones). Batch size one.

Several contexts share one forward pass through a *packed* model (``CachedModel.packed``): the committed caches
of several sequences (``snapshot``, kept by reference) side by side in one cache, each a *segment*. A pending
token hanging from the committed end names its segment (``extend(..., segments=)``); it and its descendants
attend to that segment's tokens and their own ancestors only, at the positions they would have in that sequence
alone, so one forward serves trees grown under several contexts (the selector's labels: a draft level of several
roots, or the target over several roots' combs, in one pass; tests/models/test_packed_contexts.py holds the
logits equal to each context's own forward in float64).

On a GPU a forward pass of a small model is mostly kernel launches (the reference measured 20-25 ms eager
against 3.3 ms for the 0.5B draft with a static cache on an H100). ``CachedModel(model, max_length,
graphs=True)`` therefore runs every forward through a ``GraphedForward``: a StaticCache and fixed input
buffers (token ids, positions, the 4D mask) whose width is a *bucket* (1, 2, 4, ... new tokens), with one CUDA
graph captured per bucket on first use and replayed after. An extension of n tokens is padded to the
smallest bucket >= n; each padding row attends to its own slot only, and no real row attends to it, so the
real rows' logits are those of the unpadded forward (tests/models/test_models.py checks it on the CPU, where the
same buffers run eagerly, and on a GPU). The runner is kept on the model, keyed by its cache length, so
successive runs reuse the captured graphs instead of capturing them again.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

from verispec.errors import VerispecError


def cache_keyword(model) -> str:
    """The keyword a transformers model's ``forward`` takes its KV cache by: ``cache`` in the releases that renamed
    it (5.24 warns that ``past_key_values`` goes in 5.40), else ``past_key_values``. Read from the signature once
    per model class, so both spellings work and no release's deprecation warning fires."""
    import inspect

    kind = type(model)
    if kind not in _CACHE_KEYWORDS:
        try:
            parameters = inspect.signature(kind.forward).parameters
        except (TypeError, ValueError, AttributeError):  # a forward without a signature: the long-standing name
            parameters = {}
        _CACHE_KEYWORDS[kind] = "cache" if "cache" in parameters else "past_key_values"
    return _CACHE_KEYWORDS[kind]


_CACHE_KEYWORDS: dict[type, str] = {}


@dataclass(frozen=True, eq=False)
class CommittedState:
    """A committed sequence's KV cache (``CachedModel.snapshot``): per layer (keys, values), each [1, heads,
    length, head_dim], held by reference; ``layers`` is empty when ``length`` is 0."""

    layers: tuple
    length: int


class CachedModel:
    """A causal LM (a transformers ``...ForCausalLM``) with its KV cache over committed and pending tokens."""

    def __init__(self, model, max_length: int | None = None, *, graphs: bool = False, hidden: bool = False):
        import torch
        from transformers import DynamicCache, StaticCache

        self.model = model
        #: the model's device and dtype, read once: a transformers model's ``device`` walks its parameters on every read
        #: (about 5 reads a forward; a CachedModel lives for one run, during which the model does not move)
        self._device, self.dtype = model.device, model.dtype
        #: the 4D mask's values where a token attends and where it does not (made once: on a CPU a small model's
        #: forward costs little more than the few torch calls around it)
        self._mask_values = (torch.zeros((), dtype=self.dtype, device=self._device),
                             torch.full((), torch.finfo(self.dtype).min, dtype=self.dtype, device=self._device))
        #: hidden: every forward also keeps the last layer's hidden states of its new tokens in ``last_hidden``
        #: ([n, H], for a policy that reads them); eager forwards only (a CUDA graph records the logits alone)
        self.hidden = bool(hidden)
        self.last_hidden = None
        if self.hidden and graphs:
            raise VerispecError("hidden states are kept by eager forwards only; they are not available with "
                                "graphs=True")
        #: None: a DynamicCache that grows; else a StaticCache of this many slots, allocated once, whose
        #: tensors keep their addresses (what torch.compile and CUDA graphs need on a GPU).
        self.max_length = max_length
        if max_length is not None and (isinstance(max_length, bool) or not isinstance(max_length, int)
                                       or max_length < 1):
            raise VerispecError(f"max_length must be a positive integer (or None), got {max_length!r}")
        #: a GraphedForward (fixed buffers, a CUDA graph per bucket on a GPU) or None: plain forwards
        self.runner = None
        if graphs:
            if max_length is None:
                raise VerispecError("graphs=True needs a static cache: give CachedModel a max_length")
            self.runner = GraphedForward.for_model(model, max_length)
            self.runner.reset()
            self.max_length = self.runner.max_length
            self.cache = self.runner.cache
        else:
            self.cache = DynamicCache() if max_length is None else StaticCache(config=model.config,
                                                                               max_cache_len=max_length)
        self.committed = 0                       # tokens in the cache that belong to the sequence
        self._parents: list[int] = []            # pending token i's parent among the pending (-1: committed end)
        self._depths: list[int] = []             # pending token i's depth below the committed end (>= 1)
        #: a packed model's committed segments, (first slot, length) each; None: one sequence (every slot)
        self.segments: tuple[tuple[int, int], ...] | None = None
        self._segment_of: list[int] = []         # a packed model's pending token i's segment
        self.by_segment = False                  # a packed model's attention per segment (``packed``)

    @classmethod
    def packed(cls, model, states, *, by_segment: bool = True) -> CachedModel:
        """A model whose committed cache is the ``CommittedState`` s of several sequences side by side (segment i
        is ``states[i]``), for one forward over trees grown under each (``extend(..., segments=)``). Nothing can be
        committed to it; ``discard`` drops every pending token. ``by_segment``: attention per segment
        (``verispec.models.segmented_attention``: each segment's nodes against its own slots only); False, dense
        masked attention over every slot (the same logits up to rounding, at the cost of every node against every
        context: kept for the benchmark that compares them)."""
        import torch

        states = list(states)
        if not states or not all(isinstance(state, CommittedState) for state in states):
            raise VerispecError("CachedModel.packed needs a non-empty list of CommittedState (CachedModel.snapshot)")
        packed = cls(model)
        spans, start = [], 0
        for state in states:
            spans.append((start, state.length))
            start += state.length
        for index in range(max(len(state.layers) for state in states)):
            parts = [state.layers[index] for state in states if state.length]
            if parts:
                packed.cache.update(torch.cat([keys for keys, _ in parts], dim=-2),
                                    torch.cat([values for _, values in parts], dim=-2), index)
        packed.committed = start
        packed.segments = tuple(spans)
        packed.by_segment = bool(by_segment)
        return packed

    def snapshot(self) -> CommittedState:
        """The committed sequence's KV cache, kept by reference: a dynamic cache's layers are replaced (never
        written in place) by later extensions, rollbacks and prefills, so the state stays what it is now."""
        if self.max_length is not None or self.segments is not None or self.pending:
            raise VerispecError("snapshot needs a dynamic cache of one sequence with no pending tokens")
        layers = []
        for layer in self.cache.layers:
            keys = getattr(layer, "keys", None)
            if keys is None or not keys.numel():
                layers.append(None)
            else:
                layers.append((keys[..., : self.committed, :], layer.values[..., : self.committed, :]))
        if self.committed and any(layer is None for layer in layers):
            raise VerispecError("snapshot: a layer of the cache holds no committed tokens")
        return CommittedState(tuple(layers) if self.committed else (), self.committed)

    @property
    def device(self):
        return self._device

    @property
    def pending(self) -> int:
        return len(self._parents)

    def extend(self, tokens: list[int], parents: list[int], *, last_only: bool = False, segments=None):
        """Feed new tokens in one forward pass; token i hangs under pending token ``parents[i]`` (an index
        among the pending tokens, the new ones included, smaller than its own; -1 for the committed end). A
        packed model needs ``segments[i]``, the segment token i grows under (its parent's, where it has one).
        Returns the logits after each new token, [n, V] (the model's dtype, on its device); with ``last_only``
        (a prompt's prefill) those after the last new token only, [1, V]: the output layer then runs on one
        position instead of n (on a CPU a 500-token prompt's [500, 151,936] logits cost seconds and 300 MB)."""
        import numpy as np
        import torch

        if len(tokens) != len(parents) or not tokens:
            raise VerispecError(f"extend needs one parent per token and at least one token, got {len(tokens)} "
                                f"tokens and {len(parents)} parents")
        if (segments is None) != (self.segments is None) or (segments is not None and len(segments) != len(tokens)):
            raise VerispecError("extend takes one segment per token on a packed model (CachedModel.packed) and "
                                f"none otherwise; got {'no' if segments is None else len(segments)} segments for "
                                f"{len(tokens)} tokens")
        start = self.pending
        for offset, parent in enumerate(parents):
            if not -1 <= parent < start + offset:
                del self._parents[start:], self._depths[start:], self._segment_of[start:]
                raise VerispecError(f"token {offset} of the extension has parent {parent}; parents must be "
                                    f"-1 or an earlier pending token (0..{start + offset - 1})")
            if segments is not None:
                segment = int(segments[offset])
                if not 0 <= segment < len(self.segments) or (parent != -1 and self._segment_of[parent] != segment):
                    del self._parents[start:], self._depths[start:], self._segment_of[start:]
                    raise VerispecError(f"token {offset} of the extension names segment {segments[offset]}; it must "
                                        f"be 0..{len(self.segments) - 1} and its parent's segment")
                self._segment_of.append(segment)
            self._parents.append(parent)
            self._depths.append(1 if parent == -1 else self._depths[parent] + 1)
        count, total = len(tokens), self.committed + self.pending
        if self.max_length is not None and total > self.max_length:
            del self._parents[start:], self._depths[start:]
            raise VerispecError(f"the static KV cache holds {self.max_length} tokens; this forward needs {total} "
                                "(committed, pending and new): give the decoder a larger max_length")
        width = total if self.max_length is None else self.max_length  # a static cache attends over every slot
        # Built on the host (in numpy: fewer torch calls) and moved once: element writes on a GPU tensor would be a
        # kernel launch each.
        allowed = np.zeros((count, width), dtype=bool)
        if self.segments is None:
            allowed[:, : self.committed] = True
            lengths = [self.committed] * count
        else:  # each token sees its own segment of the committed cache
            own = [self._segment_of[start + row] for row in range(count)]
            spans = np.zeros((len(self.segments), self.committed), dtype=bool)       # [segments, committed]
            for index, (first, length) in enumerate(self.segments):
                spans[index, first:first + length] = True
            allowed[:, : self.committed] = spans[own]
            lengths = [self.segments[segment][1] for segment in own]
        ancestors = allowed[:, self.committed: self.committed + self.pending]  # [n, pending]: itself and ancestors
        for row in range(count):
            node, parent = start + row, self._parents[start + row]
            if parent >= start:  # a new token's row extends its parent's (a chain of n is O(n^2) bits, not steps)
                ancestors[row] = ancestors[parent - start]
            else:
                while parent != -1:  # an earlier pending token: walk up once
                    ancestors[row, parent] = True
                    parent = self._parents[parent]
            ancestors[row, node] = True
        positions = [lengths[row] - 1 + self._depths[start + row] for row in range(count)]
        if self.runner is not None:
            return self.runner.forward(tokens, positions, torch.from_numpy(allowed), self.committed + start)
        mask = torch.where(torch.from_numpy(allowed).to(self.device), *self._mask_values)[None, None]  # [1, 1, n, w]
        inputs = torch.from_numpy(np.array([tokens, positions], dtype=np.int64)).to(self.device)  # ids, positions
        if self.max_length is not None:  # writes go to the slots after the committed and pending tokens
            _set_cache_length(self.cache, self.committed + start)
        with torch.no_grad(), self._attention(allowed, start):
            output = self.model(inputs[:1], **{cache_keyword(self.model): self.cache}, attention_mask=mask,
                                position_ids=inputs[1:], use_cache=True, output_hidden_states=self.hidden,
                                logits_to_keep=1 if last_only else 0)
        if self.hidden:
            self.last_hidden = output.hidden_states[-1][0]  # [n, H]: the last entry of transformers' hidden_states
        return output.logits[0]

    def _attention(self, allowed, start: int):
        """The context of a forward's attention: by segment on a packed model (``packed``'s ``by_segment``), from
        the dense mask ``allowed`` [n, width] of the tokens fed from pending index ``start``; else as the model has
        it."""
        if self.segments is None or not self.by_segment:
            return contextlib.nullcontext()
        from verispec.models.segmented_attention import segment_plan, segmented

        plan = segment_plan(allowed, self._segment_of[start:], self.segments, self.committed, self._segment_of,
                            self.dtype, self.device)
        return segmented(self.model, plan)

    def commit(self, path: list[int]) -> None:
        """Keep the pending tokens ``path`` (indices, root to node: each the parent of the next, the first
        hanging from the committed end) as part of the sequence; drop every other pending token."""
        import torch

        if self.segments is not None:
            raise VerispecError("a packed model (several contexts side by side) commits nothing: discard its "
                                "pending tokens instead")
        for index, node in enumerate(path):
            expected = -1 if index == 0 else path[index - 1]
            if not 0 <= node < self.pending or self._parents[node] != expected:
                raise VerispecError(f"commit needs a path of pending tokens from the committed end, got {path}")
        if self.max_length is None:
            keep = torch.tensor(list(range(self.committed)) + [self.committed + node for node in path],
                                device=self.device)
            for layer in self.cache.layers:
                layer.keys = layer.keys.index_select(-2, keep)
                layer.values = layer.values.index_select(-2, keep)
        else:  # move the accepted slots down in place; the slots above are stale and masked from now on
            # A path node already in its slot (plain decoding, a chain's accepted prefix) needs no copy: on a GPU
            # each copy is four kernel launches per layer.
            moves = [(self.committed + index, self.committed + node) for index, node in enumerate(path)
                     if node != index]
            if moves:
                slots = torch.tensor([slot for slot, _ in moves], device=self.device, dtype=torch.long)
                kept = torch.tensor([source for _, source in moves], device=self.device, dtype=torch.long)
                for layer in self.cache.layers:
                    if getattr(layer, "is_initialized", True):
                        layer.keys.index_copy_(-2, slots, layer.keys.index_select(-2, kept))
                        layer.values.index_copy_(-2, slots, layer.values.index_select(-2, kept))
            _set_cache_length(self.cache, self.committed + len(path))
        self.committed += len(path)
        self._parents, self._depths, self._segment_of = [], [], []

    def discard(self) -> None:
        """Drop every pending token from the cache (the committed sequence stays)."""
        self.rollback(self.committed)

    def rollback(self, length: int) -> None:
        """Keep only the first ``length`` committed tokens (and no pending ones): the cache as it was when the
        sequence had that length, e.g. to draw another block from the same context."""
        if isinstance(length, bool) or not isinstance(length, int) or not 0 <= length <= self.committed:
            raise VerispecError(f"rollback needs a length in 0..{self.committed} (the committed tokens), "
                                f"got {length!r}")
        if self.segments is not None and length != self.committed:
            raise VerispecError("a packed model's segments stay whole: it can only discard its pending tokens")
        self.committed = length
        if self.max_length is None:
            for layer in self.cache.layers:
                if getattr(layer, "keys", None) is not None and layer.keys.numel():
                    layer.keys = layer.keys[..., : self.committed, :]
                    layer.values = layer.values[..., : self.committed, :]
        if self.max_length is not None:
            _set_cache_length(self.cache, self.committed)
        self._parents, self._depths, self._segment_of = [], [], []

    def prefill(self, tokens: list[int]):
        """Feed a prompt (or any tokens) as a chain and commit it; returns the logits after its last token."""
        logits = self.extend(tokens, list(range(-1, len(tokens) - 1)), last_only=True)
        self.commit(list(range(len(tokens))))
        return logits[-1]


def _set_cache_length(cache, length: int) -> None:
    """Point a StaticCache's next write at slot ``length`` (its layers count written slots in a tensor)."""
    for layer in cache.layers:
        layer.cumulative_length.fill_(length)


#: Widths of the graph buckets: an extension of n tokens runs in the smallest one >= n.
BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)


class GraphedForward:
    """A model's forward over a StaticCache through fixed input buffers, one per bucket width, with one CUDA
    graph per bucket captured on first use (on a CPU the same buffers run eagerly; that path is what the CPU
    tests compare against plain forwards).

    A graph replays the kernels it recorded on the tensors it recorded: the buffers, the cache's key/value
    tensors and its write counter (the StaticLayer's ``cumulative_length``, read on the device). So inputs are
    copied into the buffers, the counter is set to the first free slot, and the graph is replayed; the
    logits buffer is copied out before the next replay overwrites it."""

    _ATTRIBUTE = "_verispec_graphed_forwards"

    def __init__(self, model, max_length: int):
        import torch
        from transformers import StaticCache

        self.model = model
        self.max_length = max_length
        self.cache = StaticCache(config=model.config, max_cache_len=max_length)
        self.device, self.dtype = model.device, model.dtype  # read once (``device`` walks the parameters)
        self.capture = self.device.type == "cuda"
        self.buffers: dict[int, dict] = {}   # bucket -> its input buffers and logits
        self.graphs: dict[int, object] = {}  # bucket -> torch.cuda.CUDAGraph
        self.pool = None                     # one memory pool shared by every bucket's graph
        self.captures = 0
        self._blocked = torch.finfo(self.dtype).min

    @classmethod
    def for_model(cls, model, max_length: int) -> GraphedForward:
        """The runner kept on ``model`` for this cache length (lengths are rounded up to a multiple of 512,
        so prompts of similar lengths share one), device and dtype, created on first use. (A runner made before
        the model moved holds buffers and a cache on the old device; a copied model carries its original's
        runners, so the runner must also belong to this very model object.)"""
        length = -(-max_length // 512) * 512
        runners = model.__dict__.setdefault(cls._ATTRIBUTE, {})
        key = (length, str(model.device), str(model.dtype))
        if key not in runners or runners[key].model is not model:
            runners[key] = cls(model, length)
        return runners[key]

    def reset(self) -> None:
        """Start a new sequence: the cache's slots are stale from here on (every forward masks them)."""
        _set_cache_length(self.cache, 0)

    def bucket(self, count: int, start: int) -> int | None:
        """The bucket for ``count`` new tokens written from slot ``start`` (None: no padded width fits)."""
        return next((width for width in BUCKETS if width >= count and start + width <= self.max_length), None)

    def _buffers(self, width: int) -> dict:
        """The input buffers of a width: kept for the buckets (their graphs read them), made afresh for the
        exact-width forwards of a long prompt or a nearly full cache."""
        import torch

        if width in self.buffers:
            return self.buffers[width]
        device = self.device
        buffers = {"ids": torch.zeros((1, width), dtype=torch.long, device=device),
                   "positions": torch.zeros((1, width), dtype=torch.long, device=device),
                   "mask": torch.zeros((1, 1, width, self.max_length), dtype=self.dtype, device=device),
                   "logits": None}
        if width in BUCKETS:
            self.buffers[width] = buffers
        return buffers

    def _call(self, buffers: dict):
        import torch

        with torch.no_grad():
            return self.model(buffers["ids"], **{cache_keyword(self.model): self.cache}, attention_mask=buffers["mask"],
                              position_ids=buffers["positions"], use_cache=True).logits

    def forward(self, tokens: list[int], positions: list[int], allowed, start: int):
        """Logits [n, V] after each of the n new ``tokens`` at ``positions``, written to slots start..start+n-1;
        ``allowed`` [n, max_length] (bool, host) says which slots each attends to."""
        import torch

        count = len(tokens)
        width = self.bucket(count, start)
        if width is None:  # too close to the end of the cache for padding: an exact-width eager forward
            width = count
        pad = width - count
        if pad:
            rows = torch.zeros((pad, self.max_length), dtype=torch.bool)
            rows[torch.arange(pad), start + count + torch.arange(pad)] = True  # a padding row sees its own slot
            allowed = torch.cat([allowed, rows])
            tokens = list(tokens) + [0] * pad
            positions = list(positions) + [positions[-1]] * pad
        buffers = self._buffers(width)
        device = self.device
        buffers["ids"].copy_(torch.tensor([tokens]), non_blocking=False)
        buffers["positions"].copy_(torch.tensor([positions]), non_blocking=False)
        mask = torch.full((width, self.max_length), self._blocked, dtype=self.dtype)
        mask[allowed] = 0
        buffers["mask"].copy_(mask[None, None].to(device))
        _set_cache_length(self.cache, start)
        if not self.capture or width not in BUCKETS:
            logits = self._call(buffers)
        else:
            if width not in self.graphs:
                self._capture(width, buffers, start)
            self.graphs[width].replay()
            logits = buffers["logits"]
        return logits[0, :count].clone()

    def _capture(self, width: int, buffers: dict, start: int) -> None:
        """Record one forward at this width. Warm-up forwards run first on a side stream (lazy allocations,
        cuBLAS workspaces); they write only the slots this extension is about to write anyway."""
        import torch

        stream = torch.cuda.Stream(self.model.device)
        stream.wait_stream(torch.cuda.current_stream(self.model.device))
        with torch.cuda.stream(stream):
            for _ in range(2):
                _set_cache_length(self.cache, start)
                self._call(buffers)
        torch.cuda.current_stream(self.model.device).wait_stream(stream)
        _set_cache_length(self.cache, start)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool):
            buffers["logits"] = self._call(buffers)
        self.pool = graph.pool()
        self.graphs[width] = graph
        self.captures += 1
        _set_cache_length(self.cache, start)  # the capture did not run; the replay that follows writes
