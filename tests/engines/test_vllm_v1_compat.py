"""The V1 adapter calls each vLLM release as its own model runner does (``verispec.engines.vllm_v1_compat``); these
run without vLLM, on stand-ins shaped as the releases' own classes."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest
import torch

from verispec.engines import EngineError
from verispec.engines.vllm_v1_compat import RunnerOrder, parsed, release_fields


@dataclasses.dataclass
class _OldMetadata:  # 0.8's fields: min-p and logit bias held here, no logits processors, no allowed-ids mask
    temperature: object
    min_p: object
    logit_bias: object


def test_fields_a_release_lacks_are_dropped_only_when_they_ask_for_nothing():
    fields = {"temperature": 1.0, "min_p": None, "logit_bias": [None], "allowed_token_ids_mask": None,
              "bad_words_token_ids": {}, "logitsprocs": None}
    assert release_fields(_OldMetadata, fields) == {"temperature": 1.0, "min_p": None, "logit_bias": [None]}
    with pytest.raises(EngineError, match="no field 'allowed_token_ids_mask'"):  # a ban the release cannot take
        release_fields(_OldMetadata, {**fields, "allowed_token_ids_mask": torch.ones(1, 3, dtype=torch.bool)})

    @dataclasses.dataclass
    class NewMetadata:  # min-p moved to a logits processor (not loaded with speculative decoding): left out
        temperature: object

    assert release_fields(NewMetadata, {"temperature": 1.0, "min_p": torch.tensor([0.5])}) == {"temperature": 1.0}


def test_before_0_11_the_bonus_token_is_drawn_first_and_handed_to_the_rejection_sampler():
    calls = []

    def sampler(logits, sampling_metadata):
        calls.append(("sampler", logits.tolist()))
        return SimpleNamespace(sampled_token_ids=torch.tensor([[7]]), logprobs_tensors=None)

    def rejection_sampler(metadata, draft_probs, target_logits, bonus_token_ids, sampling_metadata):
        calls.append(("rejection", target_logits.tolist(), bonus_token_ids.tolist()))
        return torch.tensor([[1, 7]])

    metadata = SimpleNamespace(bonus_logits_indices=torch.tensor([1]), target_logits_indices=torch.tensor([0]))
    output = RunnerOrder(rejection_sampler, sampler)(metadata, None, torch.tensor([[0.0, 1.0], [2.0, 3.0]]), None)
    assert calls == [("sampler", [[2.0, 3.0]]), ("rejection", [[0.0, 1.0]], [[7]])]
    assert output.sampled_token_ids.tolist() == [[1, 7]]


def test_parse_output_is_read_in_each_releases_shape():
    output = SimpleNamespace(sampled_token_ids=torch.tensor([[4, -1]]), logprobs_tensors="tensors")

    def newest(ids, vocab, logprobs_tensors=None):  # 0.14 on: tokens and logprobs lists
        return [[4]], ("lists", logprobs_tensors)

    def counts(ids, vocab, discard_req_indices=(), return_cu_num_tokens=False):  # 0.11 to 0.13
        return [[4]], None

    def oldest(ids, vocab):  # before 0.11: the tokens alone
        return [[4]]

    assert parsed(newest, output, 5) == ([[4]], ("lists", "tensors"))
    assert parsed(counts, output, 5) == ([[4]], None) and parsed(oldest, output, 5) == ([[4]], None)
