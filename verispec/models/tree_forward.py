"""A causal language model's conditionals at every node of a draft tree in ONE forward pass over its KV cache.

A ``CachedModel`` holds a model's KV cache over a *committed* sequence (the prompt and every accepted
token) plus *pending* tokens: nodes of a draft tree fed but not yet accepted. ``extend(tokens, parents)``
feeds any number of new tree nodes in one forward pass. Each new token attends to the committed sequence
and to its own ancestors among the pending tokens only (a 4D attention mask over the cache), and sits at
position committed length + depth - 1, so its logits are the model's conditional after the root-to-node path,
exactly as if the path had been fed alone (tests/test_models.py holds the two equal in float64).
``commit(path)`` keeps the pending tokens of the accepted path, in order, and drops the rest of the tree
from the cache, so the next block starts from the committed sequence without recomputing it.

The same object serves the target (the whole tree in one forward: the draft tree's nodes, under the token
emitted by the previous block) and the draft (its conditionals as the drafter asks for them, each new node
fed on top of the pending ones). Batch size one.
"""

from __future__ import annotations

from verispec.errors import VerispecError


class CachedModel:
    """A causal LM (a transformers ``...ForCausalLM``) with its KV cache over committed and pending tokens."""

    def __init__(self, model, max_length: int | None = None):
        from transformers import DynamicCache, StaticCache

        self.model = model
        #: None: a DynamicCache that grows; else a StaticCache of this many slots, allocated once, whose
        #: tensors keep their addresses (what torch.compile and CUDA graphs need on a GPU).
        self.max_length = max_length
        if max_length is not None and (isinstance(max_length, bool) or not isinstance(max_length, int)
                                       or max_length < 1):
            raise VerispecError(f"max_length must be a positive integer (or None), got {max_length!r}")
        self.cache = DynamicCache() if max_length is None else StaticCache(config=model.config,
                                                                           max_cache_len=max_length)
        self.committed = 0                       # tokens in the cache that belong to the sequence
        self._parents: list[int] = []            # pending token i's parent among the pending (-1: committed end)
        self._depths: list[int] = []             # pending token i's depth below the committed end (>= 1)

    @property
    def device(self):
        return self.model.device

    @property
    def pending(self) -> int:
        return len(self._parents)

    def extend(self, tokens: list[int], parents: list[int]):
        """Feed new tokens in one forward pass; token i hangs under pending token ``parents[i]`` (an index
        among the pending tokens, the new ones included, smaller than its own; -1 for the committed end).
        Returns the logits after each new token, [n, V] (the model's dtype, on its device)."""
        import torch

        if len(tokens) != len(parents) or not tokens:
            raise VerispecError(f"extend needs one parent per token and at least one token, got {len(tokens)} "
                                f"tokens and {len(parents)} parents")
        start = self.pending
        for offset, parent in enumerate(parents):
            if not -1 <= parent < start + offset:
                raise VerispecError(f"token {offset} of the extension has parent {parent}; parents must be "
                                    f"-1 or an earlier pending token (0..{start + offset - 1})")
            self._parents.append(parent)
            self._depths.append(1 if parent == -1 else self._depths[parent] + 1)
        count, total = len(tokens), self.committed + self.pending
        if self.max_length is not None and total > self.max_length:
            del self._parents[start:], self._depths[start:]
            raise VerispecError(f"the static KV cache holds {self.max_length} tokens; this forward needs {total} "
                                "(committed, pending and new): give the decoder a larger max_length")
        width = total if self.max_length is None else self.max_length  # a static cache attends over every slot
        # Built on the host and moved once: element writes on a GPU tensor would be a kernel launch each.
        allowed = torch.zeros((count, width), dtype=torch.bool)
        allowed[:, : self.committed] = True
        for row in range(count):
            node = start + row
            while node != -1:  # the token itself and its pending ancestors
                allowed[row, self.committed + node] = True
                node = self._parents[node]
        dtype = self.model.dtype
        blocked = torch.full((), torch.finfo(dtype).min, dtype=dtype, device=self.device)
        mask = torch.where(allowed.to(self.device), torch.zeros((), dtype=dtype, device=self.device),
                           blocked)[None, None]  # [1, 1, count, width]
        positions = torch.tensor([[self.committed - 1 + self._depths[start + row] for row in range(count)]],
                                 device=self.device)
        with torch.no_grad():
            output = self.model(torch.tensor([tokens], device=self.device), past_key_values=self.cache,
                                attention_mask=mask, position_ids=positions, use_cache=True)
        return output.logits[0]

    def commit(self, path: list[int]) -> None:
        """Keep the pending tokens ``path`` (indices, root to node: each the parent of the next, the first
        hanging from the committed end) as part of the sequence; drop every other pending token."""
        import torch

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
            kept = torch.tensor([self.committed + node for node in path], device=self.device, dtype=torch.long)
            slots = torch.arange(self.committed, self.committed + len(path), device=self.device)
            for layer in self.cache.layers:
                if getattr(layer, "is_initialized", True) and len(path):
                    layer.keys.index_copy_(-2, slots, layer.keys.index_select(-2, kept))
                    layer.values.index_copy_(-2, slots, layer.values.index_select(-2, kept))
                layer.cumulative_length.fill_(self.committed + len(path))
        self.committed += len(path)
        self._parents, self._depths = [], []

    def discard(self) -> None:
        """Drop every pending token from the cache (the committed sequence stays)."""
        for layer in self.cache.layers:
            if self.max_length is None:
                if getattr(layer, "keys", None) is not None and layer.keys.numel():
                    layer.keys = layer.keys[..., : self.committed, :]
                    layer.values = layer.values[..., : self.committed, :]
            else:
                layer.cumulative_length.fill_(self.committed)
        self._parents, self._depths = [], []

    def prefill(self, tokens: list[int]):
        """Feed a prompt (or any tokens) as a chain and commit it; returns the logits after its last token."""
        logits = self.extend(tokens, list(range(-1, len(tokens) - 1)))
        self.commit(list(range(len(tokens))))
        return logits[-1]
