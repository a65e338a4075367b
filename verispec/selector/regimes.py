"""The three latency regimes the Qwen selector study reports every table under (issue 33), each named in the
tables it appears in:

* ``gpu-large``: t_p = 20 t_q with the tree's size free (``LatencyModel.from_ratio(20)``): a large target on a
  GPU, where a forward of a few hundred tree nodes costs what one token does (DDTE's regime, arXiv 2602.16994).
* ``cpu``: this 2-core CPU, measured with ``verispec latency --pair qwen-coder --threads 2 --out FILE`` (t_q and
  t_p(n) at several n); a tree node costs nearly what a token does, so trees are dear.
* ``h100``: the Qwen pair on an H100 as measured there at one node (target step 5.4 ms, draft step 3.3 ms, so
  t_p = 1.6 t_q), with t_p(n) for a forward of n tree nodes scaled by ``H100_TARGET_RATIOS``: t_p(n) / t_p(1) as
  measured on an H100 80GB HBM3 for the 1.5B target's architecture (``benchmarks/bench_forward.py --configs
  benchmarks/configs/qwen2.5-coder-1.5b.json,benchmarks/configs/qwen2.5-coder-0.5b.json --device cuda --widths
  1,2,4,...,512``: random weights, bf16, CUDA graphs over a static cache, 200 tokens of context, two runs, medians
  of 20 and 50 forwards, ``data/latency/forward-h100-run{1,2}.json``; the ratios are the two runs' mean). A second
  node costs 15% of a forward (the graph for 2 tokens runs other kernels than the one-token step), each node after
  it 0.3-0.4% up to 64 nodes. There a forward runs at the next power of two (its graph's bucket); between the
  measured sizes the model interpolates linearly, at most 3% under that step. The same runs measured t_p(1) =
  4.67-4.69 ms and t_q = 3.20-3.30 ms (t_p = 1.45 t_q) with random weights; the issue's 5.4 and 3.3 ms stay the
  regime's one-node times. A draft forward of w tokens (the forwards that feed a delayed tree's K paths) costs t_q x
  ``H100_DRAFT_RATIOS`` from the same runs (the 0.5B draft's architecture: x1.137 at 2 tokens, x1.163 at 4).
  Speculation may not pay here at all: the best action can be chain:0 (no draft), and the
  tables show it.
"""

from __future__ import annotations

from verispec.latency import LatencyModel

#: t_p(1) and t_q of the Qwen2.5-Coder 1.5B / 0.5B pair on an H100 at one node, in ms (the issue's measurement).
H100_TARGET_MS = 5.4
H100_DRAFT_MS = 3.3
#: t_p(n) / t_p(1) on an H100 at n tree nodes (see the module docstring): the mean of two measured runs, which
#: differ by at most 0.054 (n = 256) and 0.043 (n <= 32). The 512-node forward took 5.3-8.1 t_p(1) in those runs (an
#: attention path the smaller widths do not take); the grid's trees stay under 32 nodes, so it is left out and
#: larger trees extrapolate from 128 and 256.
H100_TARGET_RATIOS = ((1, 1.0), (2, 1.149), (4, 1.171), (8, 1.206), (16, 1.242), (32, 1.276), (64, 1.351),
                      (128, 1.414), (256, 1.573))

#: t_q(w) / t_q(1) on an H100 for a draft forward of w tokens, from the same two runs (their mean; they differ by at
#: most 0.024 at w <= 4, 0.094 at w = 8).
H100_DRAFT_RATIOS = ((1, 1.0), (2, 1.137), (4, 1.163), (8, 1.243), (16, 1.228), (32, 1.311), (64, 1.363),
                     (128, 1.45), (256, 1.591))

#: The regimes' names, in table order.
REGIME_NAMES = ("gpu-large", "cpu", "h100")

REGIME_TITLES = {
    "gpu-large": "(a) t_p = 20 t_q, tree size free (a large target on a GPU)",
    "cpu": "(b) this CPU, measured with verispec latency (t_p by tree size, the draft step by width)",
    "h100": f"(c) Qwen on an H100: t_p(1) = {H100_TARGET_MS} ms, t_q = {H100_DRAFT_MS} ms, "
            f"t_p(n) as measured there (x{dict(H100_TARGET_RATIOS)[2]:g} at 2 nodes, "
            f"x{dict(H100_TARGET_RATIOS)[32]:g} at 32), a draft step of K tokens as measured there "
            f"(x{dict(H100_DRAFT_RATIOS)[2]:g} at 2, x{dict(H100_DRAFT_RATIOS)[4]:g} at 4)",
}


def h100_latency() -> LatencyModel:
    """Regime (c) as a latency model in ms: t_p(1) and t_q at one node, t_p(n) = t_p(1) x the measured ratio
    (linear between measured sizes, as every ``LatencyModel``)."""
    sizes = tuple(n for n, _ in H100_TARGET_RATIOS)
    times = tuple(H100_TARGET_MS * ratio for _, ratio in H100_TARGET_RATIOS)
    widths = tuple(w for w, _ in H100_DRAFT_RATIOS)
    draft_times = tuple(H100_DRAFT_MS * ratio for _, ratio in H100_DRAFT_RATIOS)
    return LatencyModel(H100_DRAFT_MS, sizes, times, "ms",
                        f"Qwen2.5-Coder 1.5B/0.5B on an H100: t_p(1) {H100_TARGET_MS} ms, t_q {H100_DRAFT_MS} ms "
                        "(measured at one node), t_p(n) / t_p(1) and t_q(w) / t_q(1) measured there (config-built, "
                        "bf16, CUDA graphs)", widths, draft_times)


def regime_models(cpu_latency=None) -> dict[str, LatencyModel]:
    """{name: latency model} of the three regimes; ``cpu_latency`` is the measured CPU model (a ``LatencyModel`` or
    the path of ``verispec latency --out``'s file), and the ``cpu`` regime is left out without it."""
    models = {"gpu-large": LatencyModel.from_ratio(20.0)}
    if cpu_latency is not None:
        models["cpu"] = cpu_latency if isinstance(cpu_latency, LatencyModel) else LatencyModel.load(cpu_latency)
    models["h100"] = h100_latency()
    return models


def dataset_latency(latency: LatencyModel, data, what: str = "the dataset") -> LatencyModel:
    """``latency`` bound to the sampling setting of ``data``'s roots (a selector ``Dataset``; the setting named as
    ``verispec.selector.study.Setting`` names it, ``sampling_text``), so that its actions are priced at the sizes
    decoding's trees have under that setting (``LatencyModel.for_setting``). A model without tree sizes is returned
    as it is. LatencyError (one line, naming ``what``) where the model carries sizes and the roots hold several
    settings (one vector of block times cannot price them all), or none for this setting."""
    import numpy as np

    from verispec.latency import LatencyError
    from verispec.selector.roots import sampling_text

    if not latency.tree_sizes:
        return latency
    names = sorted({sampling_text(data.samplings[int(index)]) for index in np.unique(data.setting)})
    if len(names) != 1:
        raise LatencyError(f"{what} holds roots of {len(names)} sampling settings ({'; '.join(names) or 'none'}), "
                           f"and the latency model's tree sizes price one setting's trees at a time: give a dataset "
                           "of one setting, or a latency model without tree sizes")
    return latency.for_setting(names[0])


def regime_features(data, latency: LatencyModel):
    """``data``'s (a selector ``Dataset``) features [N, F] with draft_time and target_time set to ``latency``'s t_q
    and t_p(1): they are the regime's, constant over the roots (``selector train --latency`` and the study's
    regimes both read the features this way)."""
    features = data.features.copy()  # [N, F]
    names = list(data.feature_names)
    for name, value in (("draft_time", latency.draft_step), ("target_time", latency.target_time(1))):
        if name in names:
            features[:, names.index(name)] = value
    return features


__all__ = ["H100_DRAFT_MS", "H100_DRAFT_RATIOS", "H100_TARGET_MS", "H100_TARGET_RATIOS", "REGIME_NAMES",
           "REGIME_TITLES", "dataset_latency", "h100_latency", "regime_features", "regime_models"]
