"""Batched plain sampling (verispec.models.batched.sample_target_batch) against the one-prompt reference
(``sample_target``) on tiny float64 pairs with the tiny tokenizer (token 0, '<eos>', ends a generation):

* traces equal token for token for prompts of different lengths, several seeds, at temperature 1 and under top-k,
  prompts that end early on <eos> included, in the order the prompts were given (several batches of sorted lengths);
* the per-step laws of a left-padded prompt equal its own laws (one prompt, ``CachedModel``) to 1e-10, whatever the
  pad token; negative controls: without the attention mask, or with positions counted over the padded width
  (plain arange; a rotary model is blind to a shift common to a whole row but for its float32 cos/sin tables, so
  this one differs at ~1e-7), or with that count in the prompt but the real count after it, the comparison fails;
* a finished row leaves the batch and the columns that are padding in every remaining row are cut off (the rows and
  width of every forward, from the generations' lengths);
* one-line refusals: no prompts, one seed too many, an empty prompt.
"""

from __future__ import annotations

import pytest

from tests.support.tiny_models import tiny_pair, tiny_tokenizer
from verispec.errors import VerispecError

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from verispec.models import CachedModel, ModelPair, Sampling, sample_target  # noqa: E402
from verispec.models.batched import batch_forward, left_padded, positions_of, sample_target_batch  # noqa: E402

#: Token-id prompts of lengths 1 to 11, not sorted by length.
PROMPTS = [[1, 2, 3, 4, 5, 6, 7], [3], [4, 5], [9, 8, 7, 6, 5, 4, 3, 2, 1, 2, 3], [2, 2], [6, 1, 6, 1]]
SAMPLINGS = [Sampling(1.0), Sampling(0.8, top_k=3)]
TOKENS = 24


@pytest.fixture(scope="module")
def eos_pair():
    """tiny_pair(0) with two layers (so a pad's state could reach a real token through a second layer) and the tiny
    tokenizer, whose <eos> (token 0) ends a generation."""
    base = tiny_pair(0, layers=2)
    pair = ModelPair(base.target, base.draft, tiny_tokenizer(), "tiny-0-eos")
    assert pair.eos_token_ids == frozenset({0})
    return pair


@pytest.mark.parametrize("sampling", SAMPLINGS, ids=["T=1", "top-k=3"])
def test_batched_traces_equal_one_prompt_traces(eos_pair, sampling):
    ended_early = 0
    for first_seed in (0, 100, 200):
        seeds = [first_seed + index for index in range(len(PROMPTS))]
        batched = sample_target_batch(eos_pair, PROMPTS, TOKENS, sampling, seeds, batch_size=4)
        for prompt, seed, generation in zip(PROMPTS, seeds, batched):
            single = sample_target(eos_pair, prompt, TOKENS, sampling, seed)
            assert generation.prompt_tokens == prompt
            assert generation.tokens == single.tokens, (prompt, seed)
            assert generation.text == single.text
            assert len(generation.blocks) == len(generation.tokens) and generation.target_calls == len(single.tokens)
            ended_early += len(single.tokens) < TOKENS and single.tokens[-1] == 0
    assert ended_early >= 2  # the early stops were exercised


def test_traces_run_on_without_end_tokens(eos_pair):
    seeds = [7] * len(PROMPTS)
    batched = sample_target_batch(eos_pair, PROMPTS, 12, Sampling(1.0), seeds, stop_at_eos=False, batch_size=8)
    for prompt, generation in zip(PROMPTS, batched):
        assert generation.tokens == sample_target(eos_pair, prompt, 12, Sampling(1.0), 7, stop_at_eos=False).tokens


def batched_laws(model, prompts, continuation, sampling, *, positions="cumulative", masked=True, pad=0):
    """The laws [steps, rows, V] of ``prompts`` left padded together, after each prompt and then after each token of
    ``continuation`` (fed to every row). ``positions``: 'cumulative' (each row's count of real tokens, right),
    'arange' (the padded width's count, prompt and new tokens alike) or 'mixed' (the padded width's count in the
    prompt, the real count after it); ``masked=False`` gives the model no attention mask."""
    from transformers import DynamicCache

    ids, mask = left_padded(prompts, model.device, pad)
    prompt_positions = positions_of(mask) if positions == "cumulative" else torch.arange(ids.shape[1]).expand_as(ids)
    cache = DynamicCache()
    laws = [sampling.probabilities(batch_forward(model, cache, ids, mask if masked else None, prompt_positions))]
    for token in continuation:
        new = torch.full((len(prompts), 1), token)
        count = mask.sum(-1, keepdim=True) if positions != "arange" else torch.full_like(new, mask.shape[1])
        mask = torch.cat([mask, torch.ones_like(new)], dim=-1)
        laws.append(sampling.probabilities(batch_forward(model, cache, new, mask if masked else None, count)))
    return torch.stack(laws)


def single_laws(model, prompt, continuation, sampling):
    """The laws [steps, V] of one prompt as ``sample_target`` computes them (a CachedModel, one token a forward)."""
    cached = CachedModel(model)
    if len(prompt) > 1:
        cached.prefill(prompt[:-1])
    laws = []
    for token in [prompt[-1], *continuation]:
        laws.append(sampling.probabilities(cached.extend([token], [-1])[0]))
        cached.commit([0])
    return torch.stack(laws)


def test_laws_of_a_padded_prompt_are_its_own(eos_pair):
    prompts, continuation = [[1, 2, 3, 4, 5, 6, 7, 8], [3, 4]], [5, 9, 1, 2]  # the second row: 6 pads
    for sampling in SAMPLINGS:
        own = [single_laws(eos_pair.target, prompt, continuation, sampling) for prompt in prompts]

        def gap(sampling=sampling, own=own, **control):
            laws = batched_laws(eos_pair.target, prompts, continuation, sampling, **control)
            return max(float((laws[:, row] - own[row]).abs().max()) for row in range(len(prompts)))

        assert gap() <= 1e-10
        assert gap(pad=7) <= 1e-10  # what the pads hold is never attended
        for control in ({"masked": False}, {"positions": "arange"}, {"positions": "mixed"}):
            assert gap(**control) > 1e-10, control


def test_finished_rows_leave_the_batch(eos_pair):
    """The forwards' (rows, width): the prompts' forward, then for step k the rows that drew more than k tokens,
    over the longest of their prompts + k columns."""
    prompts, seeds = PROMPTS[:4], [0, 1, 2, 3]
    shapes = []
    hook = eos_pair.target.register_forward_pre_hook(
        lambda _module, _args, kwargs: shapes.append(tuple(kwargs["attention_mask"].shape)), with_kwargs=True)
    try:
        generations = sample_target_batch(eos_pair, prompts, TOKENS, Sampling(1.0), seeds, batch_size=8)
    finally:
        hook.remove()
    lengths = [len(generation.tokens) for generation in generations]
    assert min(lengths) < max(lengths)  # a row finished early
    expected = [(len(prompts), max(map(len, prompts)))]
    for step in range(1, max(lengths)):
        rows = [index for index, length in enumerate(lengths) if length > step]
        expected.append((len(rows), max(len(prompts[index]) for index in rows) + step))
    assert shapes == expected


def test_bad_input_is_refused_on_one_line(eos_pair):
    cases = [(([], 4, None, []), "prompt list is empty"),
             (([[1, 2], [3]], 4, None, [1, 2, 3]), "one seed per prompt: 2 prompts and 3 seeds"),
             (([[1, 2], []], 4, None, [1, 2]), "prompt 1: the prompt is empty"),
             (([[1, 2]], 0, None, [1]), "max_new_tokens must be a positive integer")]
    for arguments, message in cases:
        with pytest.raises(VerispecError, match=message) as error:
            sample_target_batch(eos_pair, *arguments)
        assert "\n" not in str(error.value)
    with pytest.raises(VerispecError, match="batch_size must be a positive integer"):
        sample_target_batch(eos_pair, [[1, 2]], 4, None, [1], batch_size=0)
