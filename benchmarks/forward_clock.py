"""The two models' forward time inside any decoder, measured the same way for transformers' ``generate`` and for
verispec's: a forward pre-hook and hook on each model's top module (``torch.nn.Module.register_forward_pre_hook``)
read ``time.perf_counter`` around every call, so whatever else a decoder does (sampling, verification, cache
bookkeeping, choosing the next draft length) is the block time less the forwards, whichever code runs it.

    with ForwardClock(pair) as clock:
        generate(...)
    clock.seconds["target"], clock.calls["draft"], clock.after_first("target")

Used by ``bench_same_algorithm.py`` (issue 66, item 2) and ``bench_latency_model.py`` (item 3). A CUDA device is
synchronised at both ends of each call so the time is the forward's, not its launch's.
"""

from __future__ import annotations

import time


class ForwardClock:
    """Seconds and calls of ``pair.target``'s and ``pair.draft``'s forwards while the context is open (nested calls
    of one model count once: the outermost)."""

    def __init__(self, pair):
        self.models = {"target": pair.target, "draft": pair.draft}
        self.cuda = pair.device.type == "cuda"
        self.seconds = {name: 0.0 for name in self.models}
        self.calls = {name: 0 for name in self.models}
        self.first = {name: 0.0 for name in self.models}  # each model's first call: verispec's prefill
        self._handles, self._started = [], {}

    def after_first(self, name: str) -> float:
        """Seconds of ``name``'s forwards after its first call: verispec's decoders prefill each model's KV cache
        with one call before the first block, so this is the forwards of the blocks alone."""
        return self.seconds[name] - self.first[name]

    def _sync(self) -> None:
        if self.cuda:
            import torch

            torch.cuda.synchronize()

    def _pre(self, name):
        def hook(module, args, kwargs=None):
            if name not in self._started:
                self._sync()
                self._started[name] = time.perf_counter()
        return hook

    def _post(self, name):
        def hook(module, args, output, kwargs=None):
            if name in self._started:
                self._sync()
                seconds = time.perf_counter() - self._started.pop(name)
                self.first[name] = seconds if not self.calls[name] else self.first[name]
                self.seconds[name] += seconds
                self.calls[name] += 1
        return hook

    def __enter__(self) -> ForwardClock:
        for name, model in self.models.items():
            self._handles.append(model.register_forward_pre_hook(self._pre(name)))
            self._handles.append(model.register_forward_hook(self._post(name)))
        return self

    def __exit__(self, *exc) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        self._started.clear()


__all__ = ["ForwardClock"]
