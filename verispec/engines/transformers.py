"""transformers' shipped assisted generation, checked unmodified on the CPU.

transformers verifies an assistant's drafts in ``GenerationMixin._assisted_decoding``
(``transformers/generation/utils.py``): with ``do_sample=True`` the ``AssistedCandidateGenerator`` drafts K tokens
with the assistant's own ``generate`` and hands back their processed float32 scores, the target scores the
candidates and processes each position with the request's logits processors, and ``_speculative_sampling``
accepts a draft x when ``rand <= p(x) / q(x)`` and draws the residual ``(p - q)+`` (or the bonus token) with
``torch.multinomial``, every draw on torch's global generator. verispec reads every draw (``--rng capture``), so
the law of a whole ``generate`` call is exact.

The step functions (``verispec.engines.transformers_step``, imported only where the engine's code runs) call the
installed release's ``generate`` itself on two weightless stand-in models that return verispec's raw logits:
verispec's are the models and the seed (``transformers.set_seed``, as a user's script does); transformers' are the
sampling settings' processors, the candidate generator, the verification and the rounds that complete the K + 1
tokens asked for.

Releases: every release from 4.46 to 5.24 imports on this CPU with its own pinned tokenizers and huggingface_hub
(``experiments/engine_releases.py --engine transformers`` checks the last patch of every minor release). A newer
release is refused unless ``--any-release``: its entry points are still found or refused in one line.
"""

from __future__ import annotations

from verispec.engines import Check, installed_release, release_in_range, release_range

PACKAGE = "transformers"
#: The first and the last release the adapter has read and checked; every release between them is accepted.
FIRST, LAST = "4.46.0", "5.24.0"
#: The exact TV above which a check is LOSSY. transformers casts both models' logits to float32 before it processes
#: them, so a correct release's law sits within float32 rounding of the target (as vLLM's: ``verispec.engines.vllm``).
#: Below it lies the float32-uniform effect of ``docs/findings/engine_bugs.md`` (a draw of exactly 0.0 accepts a
#: draft of target probability 0, about 4e-8 here), which ``examples/real_code/transformers_assisted.py`` shows.
THRESHOLD = 1e-6
#: transformers takes no ``--source``: its verification lives in ``generation/utils.py`` beside all of ``generate``.
SAMPLER_MODULE = None
SOURCE_VARIABLE = "VERISPEC_ENGINE_SOURCE"
_STEP = "verispec.engines.transformers_step"


def release() -> str:
    """The installed transformers's release; EngineError when it is not installed."""
    return installed_release(PACKAGE, f"pip install transformers=={LAST}", supported_range())


def supported_range() -> str:
    return release_range(FIRST, LAST)


def check_release(found: str | None = None, *, any_release: bool = False) -> str:
    """The installed release when it lies in the adapter's range (or ``any_release``); EngineError naming the
    range otherwise."""
    return release_in_range(PACKAGE, found or release(), FIRST, LAST, any_release)


def checks() -> list[Check]:
    """transformers' verification entry points in the configurations the adapter checks."""
    entry = "generate(assistant_model=..., do_sample=True)"
    ensemble_why = ("transformers documents assistant_ensemble_weight as relaxing verification to w p + (1 - w) q, "
                    "'at the cost of controlled distributional bias' (DIVERSE, arXiv 2604.07622)")
    common = {"layout": "step", "source_applies": False}
    return [
        Check("generate-sampled", entry, f"{_STEP}:assisted_generate",
              "assisted generation at temperature 1: the assistant's K drafts, _speculative_sampling, the rounds "
              "that complete K + 1 tokens", **common),
        Check("generate-temperature", entry, f"{_STEP}:assisted_generate", "temperature 0.7",
              sampling="temperature=0.7", **common),
        Check("generate-top-k", entry, f"{_STEP}:assisted_generate", "top-k 2 (both models' scores processed)",
              sampling="temperature=1,top_k=2", **common),
        Check("generate-top-p", entry, f"{_STEP}:assisted_generate", "top-p 0.75",
              sampling="temperature=1,top_p=0.75", **common),
        Check("generate-min-p", entry, f"{_STEP}:assisted_generate", "min-p 0.5",
              sampling="temperature=1,min_p=0.5", **common),
        Check("speculative-sampling", "_speculative_sampling", f"{_STEP}:speculative_sampling",
              "the acceptance rule alone, handed float64 logits (the transformers layout)", layout="transformers",
              sampling=None, source_applies=False),
        Check("generate-ensemble", entry, f"{_STEP}:assisted_generate_ensemble",
              "assistant_ensemble_weight 0.5 (DIVERSE's static ensemble verification; 5.x)", expect="lossy",
              why=ensemble_why, **common),
    ]
