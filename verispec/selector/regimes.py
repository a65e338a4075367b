"""The three latency regimes the Qwen selector study reports every table under (issue 33), each named in the
tables it appears in:

* ``gpu-large``: t_p = 20 t_q with the tree's size free (``LatencyModel.from_ratio(20)``): a large target on a
  GPU, where a forward of a few hundred tree nodes costs what one token does (DDTE's regime, arXiv 2602.16994).
* ``cpu``: this 2-core CPU, measured with ``verispec latency --pair qwen-coder --threads 2 --out FILE`` (t_q and
  t_p(n) at several n); a tree node costs nearly what a token does, so trees are dear.
* ``h100``: the Qwen pair on an H100 as measured there at one node (target step 5.4 ms, draft step 3.3 ms, so
  t_p = 1.6 t_q), with each tree node beyond the first adding ``H100_PER_NODE`` of t_p. That per-node cost is an
  assumption, not a measurement (no GPU was lent to measure it): a 1.5B model at a batch of up to ~100 tokens is
  memory-bound on an H100, so a node costs a small fraction of a forward; 0.3% makes t_p(64) = 1.19 t_p(1).
  Speculation may not pay here at all: the best action can be chain:0 (no draft), and the tables show it.
"""

from __future__ import annotations

from verispec.latency import LatencyModel

#: t_p(1) and t_q of the Qwen2.5-Coder 1.5B / 0.5B pair on an H100 at one node, in ms (the issue's measurement).
H100_TARGET_MS = 5.4
H100_DRAFT_MS = 3.3
#: The assumed fraction of t_p(1) each tree node beyond the first adds on the H100 (see the module docstring).
H100_PER_NODE = 0.003

#: The regimes' names, in table order.
REGIME_NAMES = ("gpu-large", "cpu", "h100")

REGIME_TITLES = {
    "gpu-large": "(a) t_p = 20 t_q, tree size free (a large target on a GPU)",
    "cpu": "(b) this CPU, measured with verispec latency",
    "h100": f"(c) Qwen on an H100: t_p(1) = {H100_TARGET_MS} ms, t_q = {H100_DRAFT_MS} ms, "
            f"+{100 * H100_PER_NODE:g}% of t_p a node (assumed)",
}


def h100_latency() -> LatencyModel:
    """Regime (c) as a latency model in ms (t_p linear in the nodes: two sizes fix the line)."""
    return LatencyModel(H100_DRAFT_MS, (1, 2), (H100_TARGET_MS, H100_TARGET_MS * (1 + H100_PER_NODE)), "ms",
                        f"Qwen2.5-Coder 1.5B/0.5B on an H100: t_p(1) {H100_TARGET_MS} ms, t_q {H100_DRAFT_MS} ms "
                        f"(measured at one node), {H100_PER_NODE:g} t_p a node (assumed)")


def regime_models(cpu_latency=None) -> dict[str, LatencyModel]:
    """{name: latency model} of the three regimes; ``cpu_latency`` is the measured CPU model (a ``LatencyModel`` or
    the path of ``verispec latency --out``'s file), and the ``cpu`` regime is left out without it."""
    models = {"gpu-large": LatencyModel.from_ratio(20.0)}
    if cpu_latency is not None:
        models["cpu"] = cpu_latency if isinstance(cpu_latency, LatencyModel) else LatencyModel.load(cpu_latency)
    models["h100"] = h100_latency()
    return models


__all__ = ["H100_DRAFT_MS", "H100_PER_NODE", "H100_TARGET_MS", "REGIME_NAMES", "REGIME_TITLES", "h100_latency",
           "regime_models"]
