"""The two models' forward time inside any decoder, measured the same way for transformers' ``generate`` and for
verispec's: a forward pre-hook and hook on each model's top module (``torch.nn.Module.register_forward_pre_hook``)
read ``time.perf_counter`` around every call, so whatever else a decoder does (sampling, verification, cache
bookkeeping, choosing the next draft length) is the block time less the forwards, whichever code runs it.

    with ForwardClock(pair) as clock:
        generate(...)
    clock.seconds["target"], clock.calls["draft"], clock.after_first("target")

Used by ``bench_same_algorithm.py`` (issue 66, item 2), ``bench_assisted.py`` (item 1) and ``bench_latency_model.py``
(item 3). A CUDA device is synchronised at both ends of each call so the time is the forward's, not its launch's.

The steady state (``steady``): decoding after its first block, the same cut for any decoder. transformers feeds the
prompt to the target in the same forward as the first block's drafts, verispec prefills the prompt but its last
token first; so "prefill excluded" cannot be one subtraction for both. Subtracting an estimate of verispec's prefill
from transformers' time credits transformers with most of its first target forward (measured here: its prompt+7
forward cost 3.4 s where verispec's prefill plus its first 7-token forward cost 4.2 s, 1 thread, 117-token prompt),
about a block a prompt. Both decoders' first block is the first target forward whose positions reach the prompt's
last token; the window runs from its end to the generation's end, its tokens are the generation's less the first
block's (the next target forward's first position less the prompt's last).
"""

from __future__ import annotations

import time

from verispec.errors import VerispecError


class ForwardClock:
    """Seconds and calls of ``pair.target``'s and ``pair.draft``'s forwards while the context is open (nested calls
    of one model count once: the outermost)."""

    def __init__(self, pair):
        self.models = {"target": pair.target, "draft": pair.draft}
        self.cuda = pair.device.type == "cuda"
        self.seconds = {name: 0.0 for name in self.models}
        self.calls = {name: 0 for name in self.models}
        self.first = {name: 0.0 for name in self.models}  # each model's first call: verispec's prefill
        self.spans = {name: [] for name in self.models}  # per call: (start, end, least position, greatest position)
        self.widths = {name: [] for name in self.models}  # per call: the tokens it fed (None where it named none)
        self._handles, self._started = [], {}

    def after_first(self, name: str) -> float:
        """Seconds of ``name``'s forwards after its first call: verispec's decoders prefill each model's KV cache
        with one call before the first block, so this is the forwards of the blocks alone."""
        return self.seconds[name] - self.first[name]

    def forwards_after_first(self, name: str) -> list[list]:
        """``[width, seconds]`` of each of ``name``'s forwards after its first call (verispec's prefill): the tokens
        each fed and its time, what a latency model fitted to decoding's own forwards reads
        (``bench_latency_model.fit_in_decoding``)."""
        return [[width, end - start] for width, (start, end, _, _) in zip(self.widths[name][1:], self.spans[name][1:])]

    def _sync(self) -> None:
        if self.cuda:
            import torch

            torch.cuda.synchronize()

    def steady(self, prompt_length: int, new_tokens: int, end: float) -> dict:
        """The steady state of one generation of ``new_tokens`` after a ``prompt_length``-token prompt that ended at
        ``end`` (``time.perf_counter``): ``steady_s`` (seconds after the first block's target forward),
        ``steady_tokens`` (tokens after the first block's), ``steady_blocks`` (target forwards after it) and
        ``steady_forward_s`` (both models' forward seconds in the window); no tokens or blocks where the generation
        ended in its first block. VerispecError (one line) if no target forward fed the prompt's last token."""
        last = prompt_length - 1
        calls = self.spans["target"]
        first = next((i for i, (_, _, low, high) in enumerate(calls) if low is not None and low <= last <= high), None)
        if first is None:
            raise VerispecError(f"no first block: none of {len(calls)} target forwards fed position {last} (the "
                                "prompt's last token), or they named no positions")
        start = calls[first][1]
        later = calls[first + 1:]
        if later and later[0][2] is None:
            raise VerispecError("a target forward after the first block named no positions")
        # a generation that ended in its first block (an end-of-text token) has an empty steady state
        tokens = new_tokens - (later[0][2] - last) if later else 0
        forward = sum(e - s for spans in self.spans.values() for s, e, _, _ in spans if s >= start)
        return {"steady_s": end - start, "steady_tokens": tokens, "steady_blocks": len(later),
                "steady_forward_s": forward}

    def _pre(self, name):
        def hook(module, args, kwargs):
            if name not in self._started:
                self._sync()
                self._started[name] = (time.perf_counter(), _positions(args, kwargs), _width(args, kwargs))
        return hook

    def _post(self, name):
        def hook(module, args, kwargs, output):
            if name in self._started:
                self._sync()
                end = time.perf_counter()
                start, (low, high), width = self._started.pop(name)
                seconds = end - start
                self.first[name] = seconds if not self.calls[name] else self.first[name]
                self.seconds[name] += seconds
                self.calls[name] += 1
                self.spans[name].append((start, end, low, high))
                self.widths[name].append(width)
        return hook

    def __enter__(self) -> ForwardClock:
        for name, model in self.models.items():
            self._handles.append(model.register_forward_pre_hook(self._pre(name), with_kwargs=True))
            self._handles.append(model.register_forward_hook(self._post(name), with_kwargs=True))
        return self

    def __exit__(self, *exc) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        self._started.clear()


def steady_rows(rows: dict) -> dict:
    """Timed rows (each with ``ForwardClock.steady``'s fields) as the rate functions read them, ``new_tokens`` over
    ``decode_s``: at their steady state."""
    return {key: {"new_tokens": row["steady_tokens"], "decode_s": row["steady_s"]} for key, row in rows.items()}


def _positions(args, kwargs) -> tuple:
    """The least and greatest position a forward feeds (its ``position_ids``, else its ``cache_position``); (None,
    None) where it names neither."""
    positions = kwargs.get("position_ids")
    if positions is None:
        positions = kwargs.get("cache_position")
    if positions is None or positions.numel() == 0:
        return None, None
    return int(positions.min()), int(positions.max())


def _width(args, kwargs) -> int | None:
    """The tokens a forward feeds (its ``input_ids``' or ``inputs_embeds``' sequence length); None where it names
    neither."""
    for name, axis in (("input_ids", -1), ("inputs_embeds", -2)):
        value = kwargs.get(name)
        if value is not None:
            return int(value.shape[axis])
    return int(args[0].shape[-1]) if args and hasattr(args[0], "shape") else None


__all__ = ["ForwardClock", "steady_rows"]
