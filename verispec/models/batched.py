"""Plain sampling from the target for several prompts at once (the selector dataset's traces):
``sample_target_batch``, the batched twin of ``verispec.models.generation.sample_target``.

A batch is decoded with plain transformers forwards over one ``DynamicCache``: one target forward per step for all
of its rows. Prompts of different lengths are LEFT padded (``left_padded``), so every row's next token sits in the
last column. Two things keep a padded row's laws those of its prompt decoded alone:

* the attention mask: a 2D mask [rows, cache length] of real (1) against pad (0) tokens, which transformers turns
  into the causal mask of each row, so no real token ever attends to a pad;
* the positions: each real token's position is the count of real tokens before it (``positions_of``: the mask's
  cumulative sum - 1, as transformers' own ``generate`` computes them for left padding); a new token's is its row's
  real token count. (A rotary model's attention depends on position differences only, so positions shifted by the
  same amount over a whole row give the same laws: what matters is that prompt and new tokens follow one count.)

Each row draws its tokens with its OWN ``numpy.random.default_rng(seed)`` and ``categorical``, exactly as
``sample_target`` draws them, so with equal laws (equal up to rounding: a batched forward runs other kernels) a
batched trace is the one-prompt trace token for token (tests/models/test_batched_traces.py). A row that emits an
end token leaves the batch: its cache rows are dropped, and the cache columns left padding in every remaining row
are cut off, so finished prompts cost nothing afterwards. Prompts are grouped by length (``length_batches``) to
limit padding; the generations come back in the order of the prompts.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np

from verispec.errors import ModelError, VerispecError
from verispec.models.generation import (
    BlockRecord,
    Generation,
    StepClock,
    categorical,
    check_max_new_tokens,
    synchronize,
)
from verispec.models.pair import ModelPair
from verispec.models.sampling import Sampling
from verispec.models.tree_forward import cache_keyword


def length_batches(lengths: Sequence[int], batch_size: int) -> list[list[int]]:
    """Indices 0..n-1 sorted by ``lengths`` (ties in their order) and cut into batches of ``batch_size``."""
    order = sorted(range(len(lengths)), key=lambda index: lengths[index])
    return [order[start:start + batch_size] for start in range(0, len(order), batch_size)]


def left_padded(rows: Sequence[Sequence[int]], device, pad: int = 0):
    """(token ids, mask), both [len(rows), longest row] long tensors on ``device``: each row right-aligned after
    ``pad`` tokens, the mask 1 on its real tokens and 0 on the padding."""
    import torch

    width = max(len(row) for row in rows)
    ids = torch.full((len(rows), width), int(pad), dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for index, row in enumerate(rows):
        ids[index, width - len(row):] = torch.tensor(list(row), dtype=torch.long)
        mask[index, width - len(row):] = 1
    return ids.to(device), mask.to(device)


def positions_of(mask):
    """Positions [rows, width] of left-padded tokens from their mask [rows, width]: the count of real tokens before
    each (pads get 0; nothing attends to them)."""
    return (mask.cumsum(-1) - 1).clamp(min=0)


def batch_forward(model, cache, ids, mask, positions):
    """The logits [rows, V] after the last column of ``ids`` [rows, n] (new tokens at ``positions`` [rows, n]),
    attending to the cached and new tokens that ``mask`` [rows, cached + n] marks real; the cache grows by n."""
    import torch

    with torch.no_grad():
        output = model(input_ids=ids, attention_mask=mask, position_ids=positions, **{cache_keyword(model): cache},
                       use_cache=True, logits_to_keep=1)
    return output.logits[:, -1]


def keep_rows(cache, mask, rows: list[int]):
    """Keep only the batch rows ``rows`` of the cache (in place) and of ``mask`` [rows, width], and cut off the
    leading columns that are padding in every kept row; returns the new mask."""
    import torch

    kept = torch.tensor(rows, dtype=torch.long, device=mask.device)
    mask = mask.index_select(0, kept)
    cut = int((mask.sum(0) == 0).sum())  # left padding: the all-pad columns come first
    for layer in cache.layers:
        if getattr(layer, "keys", None) is not None and layer.keys.numel():
            layer.keys = layer.keys.index_select(0, kept)[..., cut:, :]
            layer.values = layer.values.index_select(0, kept)[..., cut:, :]
    return mask[:, cut:]


def _checked(pair: ModelPair, prompts, max_new_tokens, sampling, seeds, batch_size):
    """(prompt token lists, seeds, sampling) after one-line refusals of what ``sample_target_batch`` cannot use."""
    check_max_new_tokens(max_new_tokens)
    if isinstance(prompts, (str, bytes)) or not isinstance(prompts, Sequence):
        raise VerispecError(f"prompts must be a list of prompts (texts or token-id lists), got "
                            f"{type(prompts).__name__}")
    if not prompts:
        raise VerispecError("the prompt list is empty: give at least one prompt")
    seeds = list(seeds) if hasattr(seeds, "__iter__") and not isinstance(seeds, (str, bytes)) else None
    if seeds is None or len(seeds) != len(prompts):
        raise VerispecError(f"give one seed per prompt: {len(prompts)} prompts and "
                            f"{'no list of' if seeds is None else len(seeds)} seeds")
    for seed in seeds:
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
            raise VerispecError(f"a seed must be a non-negative integer, got {seed!r}")
    if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
        raise VerispecError(f"batch_size must be a positive integer, got {batch_size!r}")
    tokens = []
    for index, prompt in enumerate(prompts):
        try:
            tokens.append(pair.encode(prompt))
        except ModelError as error:
            raise ModelError(f"prompt {index}: {error}") from None
    return tokens, [int(seed) for seed in seeds], sampling or Sampling()


def sample_target_batch(pair: ModelPair, prompts: Sequence[str | Sequence[int]], max_new_tokens: int,
                        sampling: Sampling | None, seeds: Sequence[int], *, stop_at_eos: bool = True,
                        batch_size: int = 8, progress=None) -> list[Generation]:
    """``sample_target(pair, prompts[i], max_new_tokens, sampling, seeds[i], stop_at_eos=...)`` for every i, decoded
    ``batch_size`` prompts at a time (grouped by length); one ``Generation`` per prompt, in their order.

    Each generation has one ``BlockRecord`` per token (accepted 0, one target call) whose phase times are the batch
    step's, shared equally among the rows it decoded; ``prefill_s`` is the batch's first forward (its prompts),
    shared likewise. ``progress``: anything with ``update(n)`` (a tqdm bar), advanced by the tokens drawn."""
    tokens, seeds, sampling = _checked(pair, prompts, max_new_tokens, sampling, seeds, batch_size)
    stops = pair.eos_token_ids if stop_at_eos else frozenset()
    generations: list[Generation | None] = [None] * len(tokens)
    for batch in length_batches([len(row) for row in tokens], int(batch_size)):
        rows = [tokens[index] for index in batch]
        rngs = [np.random.default_rng(seeds[index]) for index in batch]
        for index, generation in zip(batch, _decode(pair, rows, int(max_new_tokens), sampling, rngs, stops,
                                                    progress)):
            generation.text = pair.decode(generation.tokens)
            generations[index] = generation
    return generations


def _host_laws(sampling: Sampling, logits) -> np.ndarray:
    return sampling.probabilities(logits).cpu().numpy()


def _draw(rngs: list[np.random.Generator], laws: np.ndarray, active: list[int]) -> list[int]:
    """Row r's token drawn from laws[r] with the generator of the prompt it decodes (active[r])."""
    return [categorical(rngs[index], laws[row], "the target's sampling law") for row, index in enumerate(active)]


def _decode(pair: ModelPair, prompts: list[list[int]], max_new_tokens: int, sampling: Sampling,
            rngs: list[np.random.Generator], stops: frozenset, progress) -> list[Generation]:
    """One batch: the generations of ``prompts`` (row i drawn with ``rngs[i]``), their text left empty."""
    import torch
    from transformers import DynamicCache

    start = time.perf_counter()
    ids, mask = left_padded(prompts, pair.device)
    cache = DynamicCache()
    logits = batch_forward(pair.target, cache, ids, mask, positions_of(mask))  # [rows, V]
    synchronize(pair.device)
    prefill = (time.perf_counter() - start) / len(prompts)
    generations = [Generation(list(prompt), [], "", prefill_s=prefill) for prompt in prompts]
    active = list(range(len(prompts)))  # batch row r decodes prompt active[r]
    clock = StepClock(pair.device)  # a step's clock runs from its forward (the first one's is the prefill)
    while True:
        laws = clock.time("target_s", _host_laws, sampling, logits)  # [rows, V]
        drawn = clock.time("verify_s", _draw, rngs, laws, active, wait=False)
        rows = [row for row, index in enumerate(active) if len(generations[index].tokens) + 1 < max_new_tokens
                and drawn[row] not in stops]
        if 0 < len(rows) < len(active):
            mask = clock.time("cache_s", keep_rows, cache, mask, rows)
        shares = {phase: seconds / len(active) for phase, seconds in clock.seconds.items()}
        for row, index in enumerate(active):
            generations[index].tokens.append(drawn[row])
            generations[index].blocks.append(BlockRecord(accepted=0, emitted=1, tree_size=0, target_calls=1,
                                                         draft_calls=0, **shares))
        if progress is not None:
            progress.update(len(active))
        if not rows:
            return generations
        active = [active[row] for row in rows]
        new = torch.tensor([[drawn[row]] for row in rows], dtype=torch.long, device=pair.device)  # [rows, 1]
        positions = mask.sum(-1, keepdim=True)  # [rows, 1]: the real tokens before the new one
        mask = torch.cat([mask, torch.ones_like(positions)], dim=-1)
        clock = StepClock(pair.device)
        logits = clock.time("target_s", batch_forward, pair.target, cache, new, mask, positions)


__all__ = ["batch_forward", "keep_rows", "left_padded", "length_batches", "positions_of", "sample_target_batch"]
