"""vllm-ascend: block verification with the token-wise residual and a product-of-uniforms acceptance
(vllm-project/vllm-ascend#7807, #7808, 2026-03-29).

vllm-ascend's rejection sampler switches to block verification (Sun et al. 2024, "Block Verification Accelerates
Speculative Decoding", arXiv 2403.10444) when ``max_spec_len >= 3``. The port "uses the same acceptance criteria as
the token-wise algorithm and does not adjust the distribution according to the correct formula mentioned in the
paper" (#7807): it accepts the longest prefix whose product of ratios min(1, p/q) is at least the product of its
uniforms, and "``sample_recovered_tokens`` draws tokens from the same distribution, regardless of whether
block_verify is enabled" (#7808): the token-wise residual norm((p - q)+). The fix implements the paper's Equation 5
(accept up to the last i with eta_i <= h_i, h_i = Z_i / (Z_i + 1 - w_i), w_i the prefix's capped product of
ratios, h_L = w_L) and Equation 4 (recover from norm((w_tau p - q)+)); verispec's own rule ``bv``
(``verispec/verifiers/block.py``) states the same law.

The re-creation keeps the port's shape: the flattened ragged batch (``draft_token_ids [num_tokens]``,
``cu_num_draft_tokens [batch_size]``, ``draft_probs`` / ``target_probs [num_tokens, V]``, ``bonus_token_ids``,
``uniform_probs [num_tokens]``), the vectorised ``rejection_random_sample_block_verify_pytorch`` over
``[batch_size, max_spec_len]`` masks and ``sample_recovered_tokens`` as an exponential race argmax(residual / E)
(its exponentials from the layout's ``recovered_uniforms``, one row per draft; the port draws one row per request,
of which only the rejected position's is read). Left out: greedy rows, the NPU kernels, the reduced vocabulary,
the entropy-verify options. Written for verispec from the threads' description; no code copied.

The recovered token is an exponential race over handed uniforms, which exact mode refuses, so the check runs black-box
(the ragged layout calls the function on every run at once, so it is fast; powered for TV 0.01); on p = (0.5, 0.3, 0.2),
q = (0.2, 0.2, 0.6), three drafts, the black-box estimate of the bug's TV is 0.31 (the product of uniforms accepts far
too often).
"""

from __future__ import annotations

import torch

BUG = {
    "repository": "vllm-project/vllm-ascend",
    "threads": ["vllm-project/vllm-ascend#7808", "vllm-project/vllm-ascend#7807"],
    "url": "https://github.com/vllm-project/vllm-ascend/pull/7808",
    "date": "2026-03-29",
    "title": "block verification ported with the token-wise residual and a product-of-uniforms acceptance",
    "class": "wrong residual",
    "layout": "ragged", "tree": "chain:3",
    "target": [0.5, 0.3, 0.2], "draft": [0.2, 0.2, 0.6],
    "arrays": "torch",
    "mode": "blackbox",
}


def _ragged_view(cu_num_draft_tokens, num_tokens: int):
    """(start [B, 1], counts [B, 1], pos [1, M], valid [B, M], global_token_indices [B, M]) of the ragged batch."""
    counts = torch.diff(cu_num_draft_tokens, prepend=torch.zeros(1, dtype=torch.int64))[:, None]
    start = cu_num_draft_tokens[:, None] - counts
    max_spec_len = int(counts.max())
    pos = torch.arange(max_spec_len)[None, :]
    valid = pos < counts
    return start, counts, pos, valid, (start + pos).clamp(0, max(num_tokens - 1, 0))


def sample_recovered_tokens(draft_probs, target_probs, recovered_uniforms, prefix_weight=None):
    """A recovered token for every draft row by the race argmax(residual / E), E = -log(1 - u) ~ Exp(1):
    residual (p - q)+ (token-wise), or (w p - q)+ with the row's prefix weight w (#7808's Equation 4).
    Returns [num_tokens] int64."""
    scaled = target_probs if prefix_weight is None else prefix_weight[:, None] * target_probs
    residual = torch.clamp(scaled - draft_probs, min=0)  # [num_tokens, V]
    exponential = -torch.log1p(-recovered_uniforms)  # [num_tokens, V]
    return torch.argmax(residual / exponential, dim=-1)


def _emit(draft_tokens, recovered, bonus_token_ids, counts, pos, valid, last_accepted):
    """Accepted drafts at positions <= last_accepted, the recovered token after them, the bonus when all passed.
    Returns [batch_size, max_spec_len + 1] int64, padded with -1."""
    batch_size, max_spec_len = draft_tokens.shape
    out = torch.full((batch_size, max_spec_len + 1), -1, dtype=torch.int64)
    out[:, :max_spec_len] = torch.where((pos <= last_accepted) & valid, draft_tokens, out[:, :max_spec_len])
    out[:, :max_spec_len] = torch.where((pos == last_accepted + 1) & valid, recovered, out[:, :max_spec_len])
    all_positions = torch.arange(max_spec_len + 1)[None, :]
    bonus = (last_accepted + 1 >= counts) & (all_positions == counts)
    return torch.where(bonus, bonus_token_ids.reshape(-1, 1).expand(-1, max_spec_len + 1), out)


def rejection_random_sample_block_verify_pytorch(draft_token_ids, cu_num_draft_tokens, draft_probs, target_probs,
                                                 bonus_token_ids, uniform_probs, recovered_uniforms):
    """Before #7808: accept the longest prefix with cumprod(min(1, p/q)) >= cumprod(u); recover from the token-wise
    residual."""
    start, counts, pos, valid, index = _ragged_view(cu_num_draft_tokens, draft_token_ids.shape[0])
    draft_tokens = draft_token_ids[index]  # [B, M]
    draft_token_probs = draft_probs[index, draft_tokens]
    target_token_probs = target_probs[index, draft_tokens]
    pi = torch.cumprod((target_token_probs / draft_token_probs).clamp(max=1.0), dim=-1)
    uniform_token_probs = torch.cumprod(uniform_probs[index], dim=-1)
    legal = (draft_token_probs > 0) & (pi >= uniform_token_probs) & valid
    max_spec_len = draft_tokens.shape[1]
    last_accepted = torch.where(legal.any(dim=-1, keepdim=True),
                                max_spec_len - legal.flip(dims=[-1]).float().argmax(dim=-1, keepdim=True) - 1, -1)
    recovered = sample_recovered_tokens(draft_probs, target_probs, recovered_uniforms)[index]
    return _emit(draft_tokens, recovered, bonus_token_ids, counts, pos, valid, last_accepted)


def rejection_random_sample_block_verify_fixed(draft_token_ids, cu_num_draft_tokens, draft_probs, target_probs,
                                               bonus_token_ids, uniform_probs, recovered_uniforms):
    """#7808: Equation 5's acceptance (the last i with eta_i <= h_i) and Equation 4's residual."""
    start, counts, pos, valid, index = _ragged_view(cu_num_draft_tokens, draft_token_ids.shape[0])
    draft_tokens = draft_token_ids[index]  # [B, M]
    ratio = torch.where(valid, target_probs[index, draft_tokens] / draft_probs[index, draft_tokens], 1.0)
    batch_size, max_spec_len = draft_tokens.shape
    weights = [torch.ones(batch_size, dtype=target_probs.dtype)]  # w_0 = 1; w_i = min(1, w_{i-1} p/q)
    for i in range(max_spec_len):
        weights.append(torch.clamp(weights[-1] * ratio[:, i], max=1.0))
    weight = torch.stack(weights, dim=1)  # [B, M + 1]
    # Z_i of the row after i accepted drafts (row i of the request), for i = 1 .. M - 1.
    residual = torch.clamp(weight[:, :max_spec_len, None] * target_probs[index] - draft_probs[index], min=0)
    mass = residual.sum(-1)  # [B, M]: mass[:, i] = Z_i
    passed = torch.zeros((batch_size, max_spec_len), dtype=torch.bool)
    for i in range(1, max_spec_len + 1):
        w = weight[:, i]
        if i < max_spec_len:
            denominator = mass[:, i] + 1 - w
            h = torch.where(denominator > 0, mass[:, i] / torch.where(denominator > 0, denominator, 1.0), 1.0)
        else:
            h = w
        h = torch.where(i == counts[:, 0], w, h)  # h_L = w_L at each request's own length
        passed[:, i - 1] = (uniform_probs[index[:, i - 1]] <= h) & valid[:, i - 1]
    last_accepted = torch.where(passed.any(dim=-1, keepdim=True),
                                max_spec_len - passed.flip(dims=[-1]).float().argmax(dim=-1, keepdim=True) - 1, -1)
    row_weight = torch.zeros(draft_token_ids.shape[0], dtype=target_probs.dtype)
    row_weight[index[valid]] = weight[:, :max_spec_len][valid]
    recovered = sample_recovered_tokens(draft_probs, target_probs, recovered_uniforms, row_weight)[index]
    return _emit(draft_tokens, recovered, bonus_token_ids, counts, pos, valid, last_accepted)


def buggy(draft_token_ids, cu_num_draft_tokens, draft_probs, target_probs, bonus_token_ids, uniform_probs,
          recovered_uniforms):
    return rejection_random_sample_block_verify_pytorch(draft_token_ids, cu_num_draft_tokens, draft_probs,
                                                        target_probs, bonus_token_ids, uniform_probs,
                                                        recovered_uniforms)


def fixed(draft_token_ids, cu_num_draft_tokens, draft_probs, target_probs, bonus_token_ids, uniform_probs,
          recovered_uniforms):
    return rejection_random_sample_block_verify_fixed(draft_token_ids, cu_num_draft_tokens, draft_probs,
                                                      target_probs, bonus_token_ids, uniform_probs,
                                                      recovered_uniforms)
