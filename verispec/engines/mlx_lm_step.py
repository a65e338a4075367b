"""mlx-lm's speculative decoding driven in verispec's ``step`` layout (the function ``verispec check-engine mlx-lm``
checks).

``speculative_generate`` runs the installed release's ``mlx_lm.generate.speculative_generate_step`` unmodified on
MLX's CPU backend, with two stand-in models that return verispec's raw logits as MLX arrays and keep, as their
cache, the tokens they have been fed (trimmed as ``speculative_generate_step`` rewinds a rejected draft, so every
forward reads the exact prefix). The sampler is mlx-lm's own ``make_sampler`` (its top-p, min-p and top-k filters
on the log-probabilities, then ``categorical_sampling`` at the temperature). The one draw mlx-lm makes,
``mx.random.categorical`` inside ``categorical_sampling``, comes from MLX's keyed generator, which verispec does not
read; the adapter makes that draw from verispec's fed randomness instead, with the same law (a categorical draw from
``softmax(logits / T)`` by ``torch.multinomial`` in float64), so the law of the step is exact. Everything else is
mlx-lm's: the filters, the drafting loop, the verification (a draft is kept while it equals the target's own
sample at its position, Leviathan et al. 2023's baseline of matching), the bonus token and the cache rewinds.

The step asks for K + 1 tokens with ``num_draft_tokens = K``: the first round drafts K and emits the kept ones and
one more; the rounds after it complete the K + 1 tokens with mlx-lm's own rules.
"""

from __future__ import annotations

from verispec.engines import EngineError

_ENGINE = {}


def _engine() -> dict:
    """mlx-lm's pieces the check uses, read once; EngineError in one line where they do not import or moved."""
    if _ENGINE:
        return _ENGINE
    from verispec.engines.mlx_lm import supported_range

    try:
        import importlib

        import mlx.core as mx

        # the package's name ``generate`` is its function, which shadows the module of the same name
        generation = importlib.import_module("mlx_lm.generate")
        sample_utils = importlib.import_module("mlx_lm.sample_utils")
    except Exception as error:  # the wheel's own import: one line, never a verdict
        raise EngineError(f"mlx-lm fails to import on this machine ({type(error).__name__}: "
                          f"{str(error).splitlines()[0] if str(error) else ''}); on Linux: mlx-lm[cpu]") from None
    missing = [name for owner, name in ((generation, "speculative_generate_step"), (sample_utils, "make_sampler"),
                                        (sample_utils, "categorical_sampling")) if not hasattr(owner, name)]
    if missing:
        raise EngineError(f"mlx-lm's {', '.join(missing)} is gone: an entry point moved; verispec's adapter knows "
                          f"releases {supported_range()}")
    mx.set_default_device(mx.cpu)
    _ENGINE.update(mx=mx, step=generation.speculative_generate_step, sample_utils=sample_utils)
    return _ENGINE


class _TokenCache:
    """A stand-in model's cache: the tokens it has been fed, trimmed as mlx-lm trims a KV cache."""

    def __init__(self):
        self.tokens: list[int] = []

    def is_trimmable(self) -> bool:
        return True

    def trim(self, count: int) -> int:
        count = min(int(count), len(self.tokens))
        del self.tokens[len(self.tokens) - count:]
        return count

    @property
    def state(self):
        return _engine()["mx"].array(self.tokens or [0])


class _StandIn:
    """A causal LM for mlx-lm: ``model(tokens [1, n], cache) -> logits [1, n, V]`` (float32), verispec's raw logits
    of the whole sequence fed so far, at the n new positions."""

    def __init__(self, logits_of):
        self.logits_of = logits_of

    def make_cache(self):
        return [_TokenCache()]

    def __call__(self, inputs, cache=None):
        import numpy as np
        import torch

        mx = _engine()["mx"]
        new = [int(token) for token in np.asarray(inputs).reshape(-1)]
        cache[0].tokens.extend(new)
        logits = self.logits_of(torch.tensor([cache[0].tokens], dtype=torch.int64))[0, -len(new):]
        return mx.array(logits.numpy().astype(np.float32))[None]


def _fed_categorical(logits, temp: float):
    """``categorical_sampling``'s law, drawn from verispec's fed randomness: softmax(logits / temp) [..., V]."""
    import numpy as np
    import torch

    mx = _engine()["mx"]
    # the softmax in numpy: torch's on a [1, V] tensor enters its intra-op thread pool, which on a loaded machine
    # waits milliseconds for its threads (three quarters of a step's time, and more in a sandbox)
    scaled = np.asarray(logits, dtype=np.float64) * (1.0 / float(temp))
    rows = scaled.reshape(-1, scaled.shape[-1])
    with np.errstate(invalid="ignore", over="ignore"):  # a row of -inf gives NaN, as torch.softmax does
        weights = np.exp(rows - rows.max(axis=-1, keepdims=True))
        probs = weights / weights.sum(axis=-1, keepdims=True)
    drawn = torch.multinomial(torch.from_numpy(probs), 1)[:, 0]
    return mx.array(drawn.numpy().astype(np.uint32)).reshape(np.asarray(logits).shape[:-1])


def speculative_generate(draft_model, target_model, input_ids, num_draft_tokens, temperature, top_k, top_p, min_p,
                         seed):
    """``speculative_generate_step`` with mlx-lm's ``make_sampler`` (``step`` layout). -> the K + 1 tokens."""
    return run_step(_engine()["step"], draft_model, target_model, input_ids, num_draft_tokens, temperature, top_k,
                    top_p, min_p, seed)


def run_step(step, draft_model, target_model, input_ids, num_draft_tokens, temperature, top_k, top_p, min_p, seed):
    """``speculative_generate``'s call of ``step`` (the shipped ``speculative_generate_step``, or a planted copy of
    it in a test) on the stand-ins, with the fed categorical draw. -> the K + 1 tokens."""
    engine = _engine()
    mx, sample_utils = engine["mx"], engine["sample_utils"]
    mx.random.seed(int(seed))  # as a user's script does; the one draw is verispec's (module docstring)
    sampler = sample_utils.make_sampler(temp=float(temperature), top_p=float(top_p) if top_p < 1 else 0.0,
                                        min_p=float(min_p), top_k=int(top_k))
    steps = int(num_draft_tokens)
    prompt = mx.array([int(token) for token in input_ids[0].tolist()], dtype=mx.uint32)
    shipped = sample_utils.categorical_sampling
    sample_utils.categorical_sampling = _fed_categorical  # make_sampler's sampler reads the module's name per call
    try:
        tokens = [int(token) for token, _, _ in step(
            prompt, _StandIn(target_model), _StandIn(draft_model), num_draft_tokens=steps, max_tokens=steps + 1,
            sampler=sampler)]
    finally:
        sample_utils.categorical_sampling = shipped
    return tokens


def _warm_up() -> None:
    """One call outside any capture, so that what MLX and mlx-lm set up on a first call is set up here."""
    import torch

    def model(ids):
        return torch.zeros((ids.shape[0], ids.shape[1], 3), dtype=torch.float64)

    speculative_generate(model, model, torch.zeros((1, 3), dtype=torch.int64), 1, 1.0, 0, 1.0, 0.0, 1)


_warm_up()
