"""Forward-pass times of a real pair, and the latency model they give (``verispec.latency.LatencyModel``).

t_q is one draft forward of one new token, t_p(n) one target forward scoring n new tree nodes, both after a
committed context, each the median of ``repeats`` runs after two warm-ups (allocations, graph capture). This
is the warm-up microbenchmark of the sweep's throughput and ``benchmarks/bench_forward.py``'s measurement.
"""

from __future__ import annotations

import statistics
import time

from verispec.errors import VerispecError
from verispec.latency import LatencyModel

#: Tree sizes (new tokens) at which t_p is measured by default.
DEFAULT_SIZES = (1, 2, 4, 8, 16, 32)


def _sync(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def cached_model(model, mode: str, length: int):
    """A ``CachedModel`` of ``model`` in one of the cache modes: dynamic, static or graphs."""
    from verispec.models.tree_forward import CachedModel

    if mode == "dynamic":
        return CachedModel(model)
    if mode not in ("static", "graphs"):
        raise VerispecError(f"unknown cache mode {mode!r}; choose dynamic, static or graphs")
    return CachedModel(model, length, graphs=mode == "graphs")


def time_forwards(model, mode: str, context: list[int], widths, repeats: int) -> dict[int, float]:
    """Median milliseconds of one ``extend`` of n chained tokens after ``context``, per width n."""
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise VerispecError(f"repeats must be a positive integer, got {repeats!r}")
    cached = cached_model(model, mode, len(context) + max(widths) + 8)
    cached.prefill(context)
    timings = {}
    vocab = min(model.config.vocab_size, 1000)
    for width in widths:
        tokens, parents = [(7 * i + 3) % vocab for i in range(width)], list(range(-1, width - 1))
        samples = []
        for repeat in range(repeats + 2):  # two warm-ups: allocations, graph capture
            _sync(model.device)
            start = time.perf_counter()
            cached.extend(tokens, parents)
            _sync(model.device)
            if repeat >= 2:
                samples.append(time.perf_counter() - start)
            cached.discard()
        timings[width] = 1000 * statistics.median(samples)
    return timings


def measure_latency(pair, *, context_length: int = 200, sizes=DEFAULT_SIZES, repeats: int = 5,
                    mode: str = "dynamic") -> LatencyModel:
    """The pair's latency model in milliseconds: t_q from one-token draft forwards, t_p(n) from target forwards
    of n new tokens, after a synthetic context of ``context_length`` tokens."""
    sizes = tuple(sorted(set(int(n) for n in sizes)))
    if not sizes or sizes[0] < 1:
        raise VerispecError(f"tree sizes must be positive integers, got {list(sizes)}")
    vocab = min(pair.target.config.vocab_size, 1000)
    context = [(13 * i + 1) % vocab for i in range(max(1, context_length))]
    draft = time_forwards(pair.draft, mode, context, (1,), repeats)[1]
    target = time_forwards(pair.target, mode, context, sizes, repeats)
    return LatencyModel(draft, sizes, tuple(target[n] for n in sizes), "ms",
                        f"measured on {pair.name} ({pair.device}, {mode} cache, context {len(context)}, median of "
                        f"{repeats})")


__all__ = ["DEFAULT_SIZES", "cached_model", "measure_latency", "time_forwards"]
