"""Attention of a packed forward by segment: each context's trees against that context's keys only.

A packed model (``CachedModel.packed``) holds several contexts' KV caches side by side and feeds the trees grown
under all of them in one forward, so that the linear layers run over every node at once. Its attention mask lets a
node see its own context's segment and its own ancestors; dense masked attention still computes every node against
every slot of every context (cost nodes x (all contexts + all nodes)) and throws most of it away. With 32 contexts of
200 tokens and 768 nodes that was a third of the forward on a CPU (the Qwen target: 19.6 s packed against 12.8 s
for the same 768 tokens after one context). Here the attention runs per segment: the segment's nodes (queries)
against its committed span and the segment's own pending nodes (keys), with the dense mask's entries at those rows
and columns; the rows and columns any node sees are exactly those (the mask is False everywhere else), so the result
is the dense one up to the order of a softmax's sums.

Switched on for one forward only (``segmented``): the model's attention implementation is set to
``ATTENTION_NAME`` and the plan to this forward's segments for the duration of the call, then both restored; with no
plan the registered function is plain SDPA, so a model left with the name (an exception between the two) still
computes the dense attention right.
"""

from __future__ import annotations

import contextlib
import contextvars
from dataclasses import dataclass

#: The name registered with transformers' ``AttentionInterface`` (and its mask interface, as SDPA's).
ATTENTION_NAME = "verispec_segmented"

_PLAN: contextvars.ContextVar = contextvars.ContextVar("verispec_segment_plan", default=None)
_REGISTERED = [False]


@dataclass(frozen=True)
class SegmentPlan:
    """One packed forward's segments: per segment with new tokens, (rows: the new tokens' indices [n_s] int64,
    columns: the cache slots they may see [c_s] int64, mask: [1, 1, n_s, c_s] additive float mask)."""

    parts: tuple


def segment_plan(allowed, segment_of_new, spans, committed: int, pending_segments, dtype, device) -> SegmentPlan:
    """The plan of a forward whose dense mask is ``allowed`` ([n, width] bool, host): new token i lies in segment
    ``segment_of_new[i]``; segment s holds committed slots ``spans[s]`` = (first, length); the pending tokens (the new
    ones last) lie in ``pending_segments`` (one segment each), at slots committed + j."""
    import numpy as np
    import torch

    segment_of_new = np.asarray(segment_of_new, dtype=np.int64)                      # [n]
    pending_segments = np.asarray(pending_segments, dtype=np.int64)                  # [pending]
    allowed = allowed.numpy() if hasattr(allowed, "numpy") else np.asarray(allowed)  # [n, width]
    blocked = torch.finfo(dtype).min
    parts = []
    for segment in np.unique(segment_of_new).tolist():
        first, length = spans[segment]
        rows = np.flatnonzero(segment_of_new == segment)                             # [n_s]
        columns = np.concatenate([np.arange(first, first + length),
                                  committed + np.flatnonzero(pending_segments == segment)])  # [c_s]
        seen = allowed[np.ix_(rows, columns)]                                        # [n_s, c_s]
        mask = torch.where(torch.from_numpy(seen), torch.zeros((), dtype=dtype), torch.full((), blocked, dtype=dtype))
        parts.append((torch.from_numpy(rows).to(device), torch.from_numpy(columns).to(device),
                      mask[None, None].to(device)))
    return SegmentPlan(tuple(parts))


def segmented_attention(module, query, key, value, attention_mask, dropout: float = 0.0, scaling=None, **kwargs):
    """transformers' attention call (query [B, H, n, D], key and value [B, H_kv, width, D]; returns ([B, n, H, D],
    None)): per segment of the active plan, else plain SDPA."""
    import torch
    from transformers.integrations.sdpa_attention import repeat_kv, sdpa_attention_forward

    plan = _PLAN.get()
    if plan is None:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      **kwargs)
    groups = int(getattr(module, "num_key_value_groups", 1))
    output = query.new_empty((*query.shape[:3], value.shape[-1]))                     # [B, H, n, D]
    for rows, columns, mask in plan.parts:
        keys, values = key.index_select(2, columns), value.index_select(2, columns)  # [B, H_kv, c_s, D]
        if groups > 1:
            keys, values = repeat_kv(keys, groups), repeat_kv(values, groups)
        output[:, :, rows] = torch.nn.functional.scaled_dot_product_attention(
            query.index_select(2, rows), keys, values, attn_mask=mask, dropout_p=dropout, scale=scaling)
    return output.transpose(1, 2).contiguous(), None


def _register() -> None:
    if _REGISTERED[0]:
        return
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

    AttentionInterface.register(ATTENTION_NAME, segmented_attention)
    ALL_MASK_ATTENTION_FUNCTIONS.register(ATTENTION_NAME, sdpa_mask)
    _REGISTERED[0] = True


@contextlib.contextmanager
def segmented(model, plan: SegmentPlan):
    """Run ``model``'s forwards inside the block with attention by segment of ``plan``; its attention implementation
    and the plan are restored on the way out, exception or not."""
    _register()
    config = model.config
    before = config._attn_implementation
    token = _PLAN.set(plan)
    config._attn_implementation = ATTENTION_NAME
    try:
        yield
    finally:
        config._attn_implementation = before
        _PLAN.reset(token)


__all__ = ["ATTENTION_NAME", "SegmentPlan", "segment_plan", "segmented", "segmented_attention"]
