"""transformers: candidate generators return a q they did not sample from (huggingface/transformers#47932,
#48007, 2026-08-12).

Assisted generation with ``do_sample=True`` drafts each candidate from the assistant's logits after the request's
logits processors (temperature, top-k, top-p), but the candidate generators named in the thread (DFlash's and
MTP's) handed ``_speculative_sampling`` the assistant's RAW logits as ``candidate_logits``. The verifier's q is then
softmax(raw) while the drafts came from the processed law: the ratio p_i / q_i is off by the raw mass the filters
kept, and the residual (p - q)+ subtracts mass q puts on tokens the drafter can never propose (the thread measured
a TV up to 0.31). The fix (#48007) returns the processor-applied logits the candidates were sampled from.

The re-creation keeps transformers' shape: a ``logits_processor`` list of warpers in transformers' order,
``AssistedCandidateGenerator.get_candidates(input_ids) -> (candidate_ids [1, L + gamma], candidate_logits [1, gamma,
V])`` sampling each candidate with ``torch.multinomial`` from the processed law, ``_assisted_decoding``'s target
pass (``new_logits`` [1, gamma + 1, V], each position processed) and ``_speculative_sampling(candidate_input_ids,
candidate_logits, candidate_length, new_logits)`` (Leviathan et al.'s Algorithm 1 with ``torch.rand_like`` and
``torch.multinomial`` on the global generator, seeded by the request's seed as ``set_seed`` does). Left out: KV
caches, the candidate-length schedule, stopping criteria, the ensemble weight. float64 throughout (transformers
casts the target's logits to float32; rounding is not this bug). Written for verispec from the thread's
description; no code copied.
"""

import torch

BUG = {
    "repository": "huggingface/transformers",
    "threads": ["huggingface/transformers#47932", "huggingface/transformers#48007"],
    "url": "https://github.com/huggingface/transformers/issues/47932",
    "date": "2026-08-12",
    "title": "candidate generators return raw logits as q while drafting from the processed law",
    "class": "draft q mismatch",
    "layout": "step", "tree": "chain:1",
    "target": [0.2, 0.3, 0.5], "draft": [0.5, 0.3, 0.2],
    "sampling": "temperature=1,top_k=2",
    "rng": "capture",
    "mode": "auto",
}


class TemperatureLogitsWarper:
    def __init__(self, temperature):
        self.temperature = temperature

    def __call__(self, input_ids, scores):  # scores [1, V]
        return scores / self.temperature


class TopKLogitsWarper:
    """Keeps the k largest scores (ties at the k-th kept), the rest -inf."""

    def __init__(self, top_k):
        self.top_k = top_k

    def __call__(self, input_ids, scores):
        kth = torch.topk(scores, min(self.top_k, scores.shape[-1])).values[..., -1, None]
        return scores.masked_fill(scores < kth, float("-inf"))


class TopPLogitsWarper:
    """Keeps the smallest set of most probable tokens whose mass reaches top_p (the most probable always)."""

    def __init__(self, top_p):
        self.top_p = top_p

    def __call__(self, input_ids, scores):
        ordered, index = torch.sort(scores, descending=False)
        drop = ordered.softmax(-1).cumsum(-1) <= 1 - self.top_p
        drop[..., -1:] = False
        return scores.masked_fill(drop.scatter(-1, index, drop), float("-inf"))


class MinPLogitsWarper:
    def __init__(self, min_p):
        self.min_p = min_p

    def __call__(self, input_ids, scores):
        probs = scores.softmax(-1)
        return scores.masked_fill(probs < self.min_p * probs.max(-1, keepdim=True).values, float("-inf"))


class LogitsProcessorList(list):
    def __call__(self, input_ids, scores):
        for processor in self:
            scores = processor(input_ids, scores)
        return scores


def _get_logits_processor(temperature, top_k, top_p, min_p):
    """The warpers ``generate`` builds for a sampling request, in transformers' order."""
    processors = LogitsProcessorList()
    if temperature != 1.0:
        processors.append(TemperatureLogitsWarper(temperature))
    if top_k > 0:
        processors.append(TopKLogitsWarper(top_k))
    if top_p < 1.0:
        processors.append(TopPLogitsWarper(top_p))
    if min_p > 0:
        processors.append(MinPLogitsWarper(min_p))
    return processors


class AssistedCandidateGenerator:
    """Drafts ``num_assistant_tokens`` candidates by sampling the assistant under the request's processors.
    ``return_processed_logits`` False is the bug: the raw logits go back as ``candidate_logits``."""

    def __init__(self, assistant_model, logits_processor, num_assistant_tokens, return_processed_logits):
        self.assistant_model = assistant_model
        self.logits_processor = logits_processor
        self.num_assistant_tokens = num_assistant_tokens
        self.return_processed_logits = return_processed_logits

    def get_candidates(self, input_ids):
        raw_logits, scores = [], []
        for _ in range(self.num_assistant_tokens):
            next_token_logits = self.assistant_model(input_ids)[:, -1, :]  # [1, V] raw
            next_token_scores = self.logits_processor(input_ids, next_token_logits)
            probs = next_token_scores.softmax(dim=-1)
            next_tokens = torch.multinomial(probs, num_samples=1)  # [1, 1]
            input_ids = torch.cat([input_ids, next_tokens], dim=-1)
            raw_logits.append(next_token_logits)
            scores.append(next_token_scores)
        candidate_logits = torch.stack(scores if self.return_processed_logits else raw_logits, dim=1)
        return input_ids, candidate_logits  # [1, L + gamma], [1, gamma, V]


def _speculative_sampling(candidate_input_ids, candidate_logits, candidate_length, new_logits):
    """Leviathan et al. 2023, Algorithm 1, on one sequence: returns (valid_tokens [1, n + 1], n_matches)."""
    new_candidate_input_ids = candidate_input_ids[:, -candidate_length:]  # [1, gamma]
    q = candidate_logits.softmax(dim=-1)  # [1, gamma, V]
    q_i = q[0, torch.arange(candidate_length), new_candidate_input_ids[0]]  # [gamma]
    p = new_logits.softmax(dim=-1)  # [1, gamma + 1, V]
    p_i = p[0, torch.arange(candidate_length), new_candidate_input_ids[0]]
    probability_ratio = p_i / q_i
    r_i = torch.rand_like(probability_ratio)
    is_accepted = r_i <= probability_ratio
    n_matches = int(((~is_accepted).cumsum(dim=-1) < 1).sum())
    if n_matches < candidate_length:
        p_prime = torch.clamp(p[:, n_matches, :] - q[:, n_matches, :], min=0)
        p_prime = p_prime / p_prime.sum()
    else:
        p_prime = p[:, n_matches, :]
    t = torch.multinomial(p_prime, num_samples=1)  # [1, 1]
    valid_tokens = torch.cat((new_candidate_input_ids[:, :n_matches], t), dim=-1)
    return valid_tokens, n_matches


def _assisted_decoding_step(model, assistant_model, input_ids, num_assistant_tokens, logits_processor, seed,
                            return_processed_logits):
    """One iteration of ``_assisted_decoding`` with ``do_sample=True``: candidates, one target pass, verification."""
    torch.manual_seed(seed)  # the request's seed (transformers' set_seed)
    cur_len = input_ids.shape[1]
    candidate_generator = AssistedCandidateGenerator(assistant_model, logits_processor, num_assistant_tokens,
                                                     return_processed_logits)
    candidate_input_ids, candidate_logits = candidate_generator.get_candidates(input_ids)
    candidate_length = candidate_input_ids.shape[1] - cur_len
    new_logits = model(candidate_input_ids)[:, -candidate_length - 1:].clone()  # [1, gamma + 1, V]
    for i in range(candidate_length + 1):
        new_logits[:, i, :] = logits_processor(candidate_input_ids[:, :cur_len + i], new_logits[:, i, :])
    valid_tokens, _ = _speculative_sampling(candidate_input_ids, candidate_logits, candidate_length, new_logits)
    return valid_tokens[0]


def buggy(draft_model, target_model, input_ids, num_draft_tokens, temperature, top_k, top_p, min_p, seed):
    return _assisted_decoding_step(target_model, draft_model, input_ids, num_draft_tokens,
                                   _get_logits_processor(temperature, top_k, top_p, min_p), seed,
                                   return_processed_logits=False)


def fixed(draft_model, target_model, input_ids, num_draft_tokens, temperature, top_k, top_p, min_p, seed):
    return _assisted_decoding_step(target_model, draft_model, input_ids, num_draft_tokens,
                                   _get_logits_processor(temperature, top_k, top_p, min_p), seed,
                                   return_processed_logits=True)
