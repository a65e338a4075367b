"""transformers: the single-position MTP candidate generator drafts by argmax but reports the softmax of its logits
as q (huggingface/transformers#47961, #47932, #32867, 2026-08-14).

``SinglePositionMultiTokenCandidateGenerator.get_candidates`` (Gemma 4's assistant) drafts each candidate as
``outputs.logits.argmax(dim=-1)``, with no logits processors and whatever ``do_sample`` says, and returns the raw
logits as ``candidate_logits``. With ``do_sample=True``, ``_assisted_decoding`` hands them to
``_speculative_sampling``, which treats softmax(raw) as the law the candidate was drawn from: a token proposed with
probability 1 is accepted with min(1, p/q) and the residual (p - q)+ is built from mass the drafter never
proposes. PR #47961's table lists it ("deterministic argmax | raw logits"); the same mistake was issue #32867 in
2024 for the assistant run greedily (its example, q = (0.8, 0.2) against p = (0.6, 0.4), gives (0.75, 0.25)).
The merged fix #48007 mended the DFlash generator only; this one is unchanged in transformers 5.24.0
(candidate_generator.py, checked). The fix #47961 proposed: return one-hot logits, a point mass on the drafted
token, so the verifier accepts it with probability p(x) and otherwise draws from p with x removed.

The re-creation keeps transformers' shape: ``get_candidates(input_ids) -> (candidate_ids [1, L + gamma],
candidate_logits [1, gamma, V])`` drafting by argmax from a fixed position, ``_assisted_decoding``'s target pass
with the request's processors applied per position, and ``_speculative_sampling(candidate_input_ids,
candidate_logits, candidate_length, new_logits)`` on the global torch generator seeded by the request's seed.
Left out: the shared KV states, hidden-state inputs and embeddings of the Gemma 4 assistant (the draft model is
read at the sequence's last token), the first-iteration skip, float32 (float64 here). Written for verispec from
the threads; no code copied.
"""

import torch

BUG = {
    "repository": "huggingface/transformers",
    "threads": ["huggingface/transformers#47961", "huggingface/transformers#47932",
                "huggingface/transformers#32867"],
    "url": "https://github.com/huggingface/transformers/pull/47961",
    "date": "2026-08-14",
    "title": "argmax-drafted candidates verified with the softmax of the raw logits as q (still in 5.24.0)",
    "class": "deterministic tree verified as sampled",
    "layout": "step", "tree": "chain:1",
    "target": [0.6, 0.4], "draft": [0.8, 0.2],
    "sampling": "temperature=1",
    "rng": "capture",
    "mode": "auto",
}

NEG = float("-inf")


def _logits_processor(input_ids, scores, temperature, top_k, top_p, min_p):
    """The request's warpers in transformers' order on scores [1, V]."""
    scores = scores / temperature
    if top_k > 0:
        kth = torch.topk(scores, min(top_k, scores.shape[-1])).values[..., -1, None]
        scores = scores.masked_fill(scores < kth, NEG)
    if top_p < 1.0:
        ordered, index = torch.sort(scores, descending=False)
        drop = ordered.softmax(-1).cumsum(-1) <= 1 - top_p
        drop[..., -1:] = False
        scores = scores.masked_fill(drop.scatter(-1, index, drop), NEG)
    if min_p > 0:
        probs = scores.softmax(-1)
        scores = scores.masked_fill(probs < min_p * probs.max(-1, keepdim=True).values, NEG)
    return scores


class SinglePositionMultiTokenCandidateGenerator:
    """Drafts ``num_assistant_tokens`` candidates by argmax. ``one_hot_logits`` False is the bug (the raw logits
    returned as q); True is #47961's fix (a point mass on each drafted token)."""

    def __init__(self, assistant_model, num_assistant_tokens, one_hot_logits):
        self.assistant_model = assistant_model
        self.num_assistant_tokens = num_assistant_tokens
        self.one_hot_logits = one_hot_logits

    def get_candidates(self, input_ids):
        drafted_logits, drafted_tokens = [], []
        candidate_ids = input_ids
        for _ in range(self.num_assistant_tokens):
            logits = self.assistant_model(candidate_ids)[:, -1:, :]  # [1, 1, V]
            last_token_id = logits.argmax(dim=-1)  # [1, 1]
            if self.one_hot_logits:
                logits = torch.full_like(logits, NEG).scatter(-1, last_token_id.unsqueeze(-1), 0.0)
            drafted_logits.append(logits)
            drafted_tokens.append(last_token_id)
            candidate_ids = torch.cat([candidate_ids, last_token_id], dim=1)
        return candidate_ids, torch.cat(drafted_logits, dim=1)  # [1, L + gamma], [1, gamma, V]


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
    return torch.cat((new_candidate_input_ids[:, :n_matches], t), dim=-1), n_matches


def _assisted_decoding_step(model, assistant_model, input_ids, num_assistant_tokens, settings, seed, one_hot_logits):
    torch.manual_seed(seed)  # the request's seed (transformers' set_seed)
    cur_len = input_ids.shape[1]
    generator = SinglePositionMultiTokenCandidateGenerator(assistant_model, num_assistant_tokens, one_hot_logits)
    candidate_input_ids, candidate_logits = generator.get_candidates(input_ids)
    candidate_length = candidate_input_ids.shape[1] - cur_len
    new_logits = model(candidate_input_ids)[:, -candidate_length - 1:].clone()  # [1, gamma + 1, V]
    for i in range(candidate_length + 1):
        new_logits[:, i, :] = _logits_processor(candidate_input_ids[:, :cur_len + i], new_logits[:, i, :], *settings)
    valid_tokens, _ = _speculative_sampling(candidate_input_ids, candidate_logits, candidate_length, new_logits)
    return valid_tokens[0]


def buggy(draft_model, target_model, input_ids, num_draft_tokens, temperature, top_k, top_p, min_p, seed):
    return _assisted_decoding_step(target_model, draft_model, input_ids, num_draft_tokens,
                                   (temperature, top_k, top_p, min_p), seed, one_hot_logits=False)


def fixed(draft_model, target_model, input_ids, num_draft_tokens, temperature, top_k, top_p, min_p, seed):
    return _assisted_decoding_step(target_model, draft_model, input_ids, num_draft_tokens,
                                   (temperature, top_k, top_p, min_p), seed, one_hot_logits=True)
