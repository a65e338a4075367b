"""transformers' assisted generation (speculative sampling), checked as it ships: its acceptance rule alone and a
whole assisted step built from its own functions.

Upstream: huggingface/transformers at the version this project pins (``transformers>=5.0`` in pyproject.toml; the
installed 5.24.0 was checked), ``src/transformers/generation/utils.py``:

* ``_speculative_sampling(candidate_input_ids, candidate_logits, candidate_length, new_logits,
  assistant_ensemble_weight=None)``: Leviathan et al. 2023, Algorithm 1 (https://arxiv.org/abs/2211.17192); q and
  p are the softmax of the logits it is handed, one ``torch.rand_like`` per draft, ``torch.multinomial`` for the
  residual or the bonus token. verispec's ``--layout transformers`` calls it directly, with no adapter:
  ``python -m verispec check-external transformers.generation.utils:_speculative_sampling --layout transformers
  --tree chain:3 --rng capture --target 0.5,0.3,0.2 --draft 0.2,0.2,0.6 --mode exact``.
* ``GenerationMixin._assisted_decoding`` around it: the assistant drafts with ``generate`` (``_sample``: logits cast
  to float32, the logits processor list applied, ``softmax``, ``torch.multinomial``), returning the PROCESSED scores
  as ``candidate_logits`` (``AssistedCandidateGenerator._generate_candidates``: ``torch.stack(scores, 1)``, the fix
  of transformers #47932 / #48007); the target's logits are cast to float32 and processed position by position on
  ``candidate_input_ids[:, :cur_len + i]``; then ``_speculative_sampling``.

``assisted_step`` is that step in verispec's ``step`` layout (``verispec.external.step``): the models are verispec's
(raw logits of the problem), everything else is transformers' own code called unmodified - the processor list is
built by ``GenerationMixin._get_logits_processor`` from a ``GenerationConfig`` (temperature, top-k, top-p, min-p
warpers in transformers' order), the seed is set by ``transformers.set_seed`` as a user of ``generate`` does, and
acceptance is ``_speculative_sampling``. What the adapter writes itself is only the loop of ``_sample`` for the
K draft tokens (the five lines quoted above: float32 cast, processors, softmax, multinomial) and the target's
per-position processing of ``_assisted_decoding`` (steps 2.3), since both live inside methods that need a real
``PreTrainedModel`` with a cache. It converts verispec's arguments: ``min_p`` 0.0 (off) becomes ``None`` (off in
``GenerationConfig``), top_k 0 stays 0 (off in both). Check::

    python -m verispec check-external examples/real_code/transformers_assisted.py:assisted_step --layout step \
        --tree chain:2 --rng capture --sampling temperature=0.7,top_k=2 --target 0.5,0.3,0.2 --draft 0.2,0.2,0.6

``assisted_step_float64`` is the same step without the float32 casts, a control: the float32 step accepts a draft
of target probability 0 when ``torch.rand_like`` draws exactly 0.0 (probability 2^-24 per float32 draw; the test is
``r_i <= probability_ratio``), which the float64 step does with probability 2^-53 and verispec's continuous float64
uniforms never. ``speculative_sampling_float32`` shows the same on ``_speculative_sampling`` alone.
"""

from __future__ import annotations

import torch
import transformers
from transformers import GenerationConfig
from transformers.generation.utils import GenerationMixin, _speculative_sampling


class _BareGenerator(GenerationMixin):
    """A GenerationMixin with no model behind it: enough for ``_get_logits_processor``, which reads only the
    generation config for the sampling warpers."""


def _processors(temperature, top_k, top_p, min_p, prompt_length):
    config = GenerationConfig(do_sample=True, temperature=float(temperature), top_k=int(top_k), top_p=float(top_p),
                              min_p=float(min_p) if min_p > 0 else None)
    return GenerationMixin._get_logits_processor(_BareGenerator(), config, input_ids_seq_length=prompt_length,
                                                 device="cpu")


def _step(draft_model, target_model, input_ids, num_draft_tokens, temperature, top_k, top_p, min_p, seed, dtype):
    transformers.set_seed(int(seed))
    prompt = input_ids.shape[1]
    processor = _processors(temperature, top_k, top_p, min_p, prompt)
    ids, scores = input_ids, []
    for _ in range(int(num_draft_tokens)):  # the assistant's generate(): _sample's token selection
        next_token_logits = draft_model(ids)[:, -1].to(dtype=dtype)
        next_token_scores = processor(ids, next_token_logits)
        scores.append(next_token_scores)
        probs = torch.nn.functional.softmax(next_token_scores, dim=-1)
        next_tokens = torch.multinomial(probs, num_samples=1).squeeze(1)
        ids = torch.cat([ids, next_tokens[:, None]], dim=-1)
    candidate_length = ids.shape[1] - prompt
    candidate_logits = torch.stack(scores, dim=1)  # [1, K, V], the processed scores (AssistedCandidateGenerator)
    new_logits = target_model(ids)[:, -candidate_length - 1:].to(dtype=dtype)  # [1, K + 1, V]
    for i in range(candidate_length + 1):  # _assisted_decoding, step 2.3
        new_logits[:, i, :] = processor(ids[:, :prompt + i], new_logits[:, i, :])
    valid_tokens, _ = _speculative_sampling(ids, candidate_logits, candidate_length, new_logits)
    return valid_tokens[0]


def assisted_step(draft_model, target_model, input_ids, num_draft_tokens, temperature, top_k, top_p, min_p, seed):
    """One assisted-generation step as transformers runs it (float32 logits)."""
    return _step(draft_model, target_model, input_ids, num_draft_tokens, temperature, top_k, top_p, min_p, seed,
                 torch.float32)


def assisted_step_float64(draft_model, target_model, input_ids, num_draft_tokens, temperature, top_k, top_p, min_p,
                          seed):
    """The same step in float64: a control for float32 rounding."""
    return _step(draft_model, target_model, input_ids, num_draft_tokens, temperature, top_k, top_p, min_p, seed,
                 torch.float64)


def speculative_sampling_float32(candidate_input_ids, candidate_logits, candidate_length, new_logits):
    """``_speculative_sampling`` handed float32 logits, the dtype ``_assisted_decoding`` hands it (the target's logits
    ``.to(dtype=torch.float32)``, the assistant's float32 scores); verispec's ``transformers`` layout hands float64.
    Its ``torch.rand_like`` then draws float32 uniforms, which are 0.0 with probability 2^-24, and
    ``r_i <= probability_ratio`` accepts a draft of target probability 0 on that draw."""
    return _speculative_sampling(torch.as_tensor(candidate_input_ids), torch.as_tensor(candidate_logits).float(),
                                 int(candidate_length), torch.as_tensor(new_logits).float())
