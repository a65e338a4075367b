"""Forward-pass times of a real pair, and the latency model they give (``verispec.latency.LatencyModel``).

t_q(w) is one draft forward of w new tokens (t_q = t_q(1); a delayed tree's last L2 - 1 forwards feed its K paths
at once), t_p(n) one target forward scoring n new tree nodes, both after a committed context, each the median
of ``repeats`` runs after two warm-ups (allocations, graph capture). This is the warm-up microbenchmark of the
sweep's throughput and ``benchmarks/bench_forward.py``'s measurement.
"""

from __future__ import annotations

import statistics
import time

from verispec.errors import VerispecError
from verispec.latency import LatencyModel

#: Tree sizes (new tokens) at which t_p is measured by default.
DEFAULT_SIZES = (1, 2, 4, 8, 16, 32)
#: Widths (new tokens) at which the draft forward is measured by default: the K of the selector's grids.
DEFAULT_DRAFT_SIZES = (1, 2, 4)


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
    """Median milliseconds of one ``extend`` of n chained tokens after ``context``, per width n. The widths take
    turns within each round of repeats (after two warm-up rounds: allocations, graph capture), so that a spell of
    load on a shared machine lands on every width alike instead of on the few timed during it."""
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise VerispecError(f"repeats must be a positive integer, got {repeats!r}")
    cached = cached_model(model, mode, len(context) + max(widths) + 8)
    cached.prefill(context)
    samples = {width: [] for width in widths}
    vocab = min(model.config.vocab_size, 1000)
    for repeat in range(repeats + 2):
        for width in widths:
            tokens, parents = [(7 * i + 3) % vocab for i in range(width)], list(range(-1, width - 1))
            _sync(model.device)
            start = time.perf_counter()
            cached.extend(tokens, parents)
            _sync(model.device)
            if repeat >= 2:
                samples[width].append(time.perf_counter() - start)
            cached.discard()
    return {width: 1000 * statistics.median(times) for width, times in samples.items()}


def _sizes(values, what: str) -> tuple[int, ...]:
    values = tuple(sorted(set(int(n) for n in values)))
    if not values or values[0] < 1:
        raise VerispecError(f"{what} must be positive integers, got {list(values)}")
    return values


def measure_latency(pair, *, context_length: int = 200, sizes=DEFAULT_SIZES, repeats: int = 5,
                    mode: str = "dynamic", draft_sizes=DEFAULT_DRAFT_SIZES) -> LatencyModel:
    """The pair's latency model in milliseconds: t_q(w) from draft forwards of w new tokens (w = 1 always
    measured: t_q), t_p(n) from target forwards of n new tokens, after a synthetic context of ``context_length``
    tokens."""
    sizes = _sizes(sizes, "tree sizes")
    draft_sizes = _sizes((1, *draft_sizes), "draft widths")
    vocab = min(pair.target.config.vocab_size, 1000)
    context = [(13 * i + 1) % vocab for i in range(max(1, context_length))]
    # the source names the CPU linear path when it is on (a different kernel, other times; files before it unchanged)
    linears = ", small-batch linears" if pair.small_batch_linear else ""
    draft = time_forwards(pair.draft, mode, context, draft_sizes, repeats)
    target = time_forwards(pair.target, mode, context, sizes, repeats)
    return LatencyModel(draft[1], sizes, tuple(target[n] for n in sizes), "ms",
                        f"measured on {pair.name} ({pair.device}, {mode} cache{linears}, context {len(context)}, "
                        f"median of {repeats})", draft_sizes, tuple(draft[w] for w in draft_sizes))


__all__ = ["DEFAULT_DRAFT_SIZES", "DEFAULT_SIZES", "cached_model", "measure_latency", "time_forwards"]
