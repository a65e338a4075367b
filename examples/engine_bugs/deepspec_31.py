"""DeepSpec: draft sampling uses a different distribution than speculative rejection (deepseek-ai/DeepSpec#31,
2026-06-30).

DeepSpec's ``sample_tokens`` drew the draft tokens from the draft model's logits in their native dtype
(bfloat16): temperature division and softmax rounded to bf16, so the proposal law was the bf16-rounded one, while
the rejection test and the residual used ``logits_to_probs``, the same logits cast up before the division and the
softmax. The drafts came from one law and the acceptance ratio p/q and the correction (p - q)+ were computed with
another, so the output law leans by the rounding (a few parts in a thousand per token). The fix (PR #30) casts
the logits up before the temperature and the softmax in ``sample_tokens``, so the draft is drawn from the very q
the verifier uses.

The re-creation keeps DeepSpec's sampling helpers (``sample_tokens(logits [bsz, seq, V], temperature)``,
``logits_to_probs``, ``gather_token_probs``, ``sample_residual``, ``sample_from_probs``, all on the global torch
generator, seeded by the request's seed) and a one-sequence speculative step built from them; the draft model's
logits arrive in bf16 as a bf16 model returns them, the target's at full precision. Left out: DSpark's parallel
block drafting (the drafts here are drawn one position at a time), batching, caches. DeepSpec's full precision is
float32; here it is float64, so that the fixed twin's law equals the target's to 1e-12 and only the bf16 draw is
the bug. Written for verispec from the thread's description; no code copied.
"""

import torch

BUG = {
    "repository": "deepseek-ai/DeepSpec",
    "threads": ["deepseek-ai/DeepSpec#31", "deepseek-ai/DeepSpec#30"],
    "url": "https://github.com/deepseek-ai/DeepSpec/issues/31",
    "date": "2026-06-30",
    "title": "draft tokens sampled from bf16 probabilities, rejection computed with the full-precision q",
    "class": "precision",
    "layout": "step", "tree": "chain:1",
    "target": [0.6, 0.4], "draft": [0.3, 0.7],
    "sampling": "temperature=0.7",
    "rng": "capture",
    "mode": "auto",
}

#: DeepSpec's full precision (float32 there; float64 here, module docstring).
FULL = torch.float64


def logits_to_probs(logits, temperature):
    """The verifier's law: the logits cast up, then divided by the temperature, then softmax."""
    return torch.softmax(logits.to(FULL) / temperature, dim=-1)


def sample_from_probs(probs):  # probs [bsz, seq, V] -> [bsz, seq]
    bsz, seq_len, vocab_size = probs.shape
    return torch.multinomial(probs.reshape(-1, vocab_size), num_samples=1).reshape(bsz, seq_len)


def sample_tokens(logits, temperature, upcast):
    """Draft tokens from ``logits`` [bsz, seq, V]; ``upcast`` False is the bug: division and softmax in the
    logits' own dtype (bf16), so the draw is from the bf16-rounded law."""
    bsz, seq_len, vocab_size = logits.shape
    flat_logits = logits.reshape(-1, vocab_size)
    if upcast:
        flat_logits = flat_logits.to(FULL)
    probs = torch.softmax(flat_logits / temperature, dim=-1)
    # The draw reads the bf16 weights at their exact values (float32 holds every bf16 number); torch.multinomial
    # takes bf16 weights itself, but verispec's capture of it does not yet (the zoo's report).
    return torch.multinomial(probs.float() if probs.dtype == torch.bfloat16 else probs, num_samples=1).reshape(
        bsz, seq_len)


def gather_token_probs(probs, token_ids):  # [bsz, seq, V], [bsz, seq] -> [bsz, seq]
    return probs.gather(dim=-1, index=token_ids.unsqueeze(-1)).squeeze(-1)


def sample_residual(target_probs, draft_probs):  # [bsz, V] each -> [bsz]
    residual = torch.clamp(target_probs - draft_probs, min=0.0)
    residual = residual / residual.sum(dim=-1, keepdim=True)
    return sample_from_probs(residual.unsqueeze(1)).squeeze(1)


def speculative_step(draft_model, target_model, input_ids, num_draft_tokens, temperature, seed, upcast):
    """Draft ``num_draft_tokens`` tokens, score them with the target in one pass, accept each while
    u < p(x) / q(x), then the residual or the bonus token."""
    torch.manual_seed(seed)
    prompt = input_ids.shape[1]
    draft_logits = []
    for _ in range(num_draft_tokens):
        logits = draft_model(input_ids)[:, -1:, :].to(torch.bfloat16)  # [1, 1, V], a bf16 model's output
        token = sample_tokens(logits, temperature, upcast)  # [1, 1]
        input_ids = torch.cat([input_ids, token], dim=1)
        draft_logits.append(logits)
    proposed = input_ids[:, prompt:]  # [1, K]
    draft_probs = logits_to_probs(torch.cat(draft_logits, dim=1), temperature)  # [1, K, V]
    target_probs = logits_to_probs(target_model(input_ids)[:, prompt - 1:, :], temperature)  # [1, K + 1, V]
    ratio = gather_token_probs(target_probs[:, :-1], proposed) / gather_token_probs(draft_probs, proposed)
    accepted = torch.rand_like(ratio) < ratio  # [1, K]
    n = int(torch.cumprod(accepted.to(torch.int64), dim=-1).sum())
    if n < num_draft_tokens:
        last = sample_residual(target_probs[:, n], draft_probs[:, n])
    else:
        last = sample_from_probs(target_probs[:, n:n + 1]).squeeze(1)
    return torch.cat([proposed[0, :n], last])


def buggy(draft_model, target_model, input_ids, num_draft_tokens, temperature, top_k, top_p, min_p, seed):
    return speculative_step(draft_model, target_model, input_ids, num_draft_tokens, temperature, seed,
                            upcast=False)


def fixed(draft_model, target_model, input_ids, num_draft_tokens, temperature, top_k, top_p, min_p, seed):
    return speculative_step(draft_model, target_model, input_ids, num_draft_tokens, temperature, seed,
                            upcast=True)
