"""mlx-lm's shipped speculative decoding, checked unmodified on MLX's Linux CPU backend.

mlx-lm (Apple's MLX language-model package, ``pip install mlx-lm[cpu]`` on Linux) verifies a draft model's tokens in
``mlx_lm.generate.speculative_generate_step`` by matching: the target samples its own token at every drafted
position with the request's sampler, and a draft is kept while it equals that sample; the first mismatch emits the
target's sample, and a fully kept draft is followed by the target's next sample. That is lossless for any draft
law (every emitted token is a target sample given the tokens before it), at a lower acceptance than rejection
sampling's min(p, q).

The step function (``verispec.engines.mlx_lm_step``, imported only where the engine's code runs) calls the
installed release's ``speculative_generate_step`` with mlx-lm's own ``make_sampler`` on two stand-in models; the
one draw mlx-lm makes (``mx.random.categorical``, from MLX's keyed generator) is made from verispec's fed
randomness with the same law, so the law of the step is exact.
"""

from __future__ import annotations

from verispec.engines import Check, installed_release, release_in_range, release_range

PACKAGE = "mlx-lm"
#: The releases the adapter has read and checked; every release between them is accepted.
FIRST, LAST = "0.32.2", "0.32.2"
#: The exact TV above which a check is LOSSY: mlx-lm computes in float32 (the stand-ins hand it float32 logits).
THRESHOLD = 1e-6
#: mlx-lm takes no ``--source``.
SAMPLER_MODULE = None
SOURCE_VARIABLE = "VERISPEC_ENGINE_SOURCE"
_STEP = "verispec.engines.mlx_lm_step"


def release() -> str:
    """The installed mlx-lm's release; EngineError when it is not installed."""
    return installed_release(PACKAGE, f"pip install 'mlx-lm[cpu]=={LAST}' (Linux: MLX's CPU backend)",
                             supported_range())


def supported_range() -> str:
    return release_range(FIRST, LAST)


def check_release(found: str | None = None, *, any_release: bool = False) -> str:
    """The installed release when it lies in the adapter's range (or ``any_release``); EngineError naming the
    range otherwise."""
    return release_in_range(PACKAGE, found or release(), FIRST, LAST, any_release)


def checks() -> list[Check]:
    """mlx-lm's speculative decoding in the configurations the adapter checks."""
    entry = "speculative_generate_step"
    common = {"layout": "step", "source_applies": False}
    function = f"{_STEP}:speculative_generate"
    return [
        Check("speculative-sampled", entry, function, "temperature 1, mlx-lm's make_sampler", **common),
        Check("speculative-temperature", entry, function, "temperature 0.7", sampling="temperature=0.7", **common),
        Check("speculative-top-k", entry, function, "top-k 2", sampling="temperature=1,top_k=2", **common),
        Check("speculative-top-p", entry, function, "top-p 0.75", sampling="temperature=1,top_p=0.75", **common),
        Check("speculative-min-p", entry, function, "min-p 0.5", sampling="temperature=1,min_p=0.5", **common),
    ]
