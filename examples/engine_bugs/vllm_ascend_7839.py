"""vllm-ascend: block verification taken for n-gram drafts without draft probabilities, q(x) read as 1
(vllm-project/vllm-ascend#7603, #7839, 2026-03-31).

vllm-ascend's rejection sampler switched to block verification whenever ``max_spec_len >= 3``, including for the
suffix and n-gram drafters, which hand no draft probabilities (``draft_probs=None``). "Block verify uses
cumprod(target_probs / draft_probs) for joint acceptance. Suffix/ngram methods have draft_probs=None, the fallback
draft_token_probs=1.0 with cumprod is not equivalent to per-token verification, causing incorrect accept/reject
results" (#7603). The block path then accepts the longest prefix whose product of target probabilities is at least
the product of its uniforms, so a prefix can be accepted past a draft the per-token rule rejects. The fix: "using
block_verify = max_spec_len >= 3 and draft_probs is not None", i.e. n-gram drafts go through the per-token rule
for a point-mass draft (accept x when p(x) >= u, else recover from p with x removed), lossless for any proposal.

The re-creation keeps the port's shape: the flattened ragged batch (``draft_token_ids [num_tokens]``,
``cu_num_draft_tokens [batch_size]``, ``target_probs [num_tokens, V]``, ``bonus_token_ids``, ``uniform_probs``),
``rejection_sample`` choosing between the vectorised block path and ``rejection_random_sample_pytorch`` with
``IS_NGRAM``, and ``sample_recovered_tokens``'s n-gram branch (target with the draft token zeroed) as an exponential
race over the layout's ``recovered_uniforms``. The drafts are deterministic (``--tree argmax-chain:3``, the n-gram
drafter's shape); the layout's ``draft_probs`` are not passed on, as an n-gram drafter has none. Left out: greedy
rows, the NPU kernels. Written for verispec from the threads' description; no code copied.

Black-box (the recovery is a race over handed uniforms, which exact mode refuses; powered for TV 0.01): on p = (0.5,
0.3, 0.2) with drafts the argmax of q = (0.2, 0.2, 0.6) (token 2 three times), the bug's TV estimate is 0.17.
"""

from __future__ import annotations

import torch

BUG = {
    "repository": "vllm-project/vllm-ascend",
    "threads": ["vllm-project/vllm-ascend#7839", "vllm-project/vllm-ascend#7603"],
    "url": "https://github.com/vllm-project/vllm-ascend/pull/7839",
    "date": "2026-03-31",
    "title": "block verification with draft_probs=None: cumprod of target probabilities over q = 1",
    "class": "wrong residual",
    "layout": "ragged", "tree": "argmax-chain:3",
    "target": [0.5, 0.3, 0.2], "draft": [0.2, 0.2, 0.6],
    "arrays": "torch",
    "mode": "blackbox",
}


def _ragged_view(cu_num_draft_tokens, num_tokens: int):
    """(counts [B, 1], pos [1, M], valid [B, M], global_token_indices [B, M]) of the ragged batch."""
    counts = torch.diff(cu_num_draft_tokens, prepend=torch.zeros(1, dtype=torch.int64))[:, None]
    max_spec_len = int(counts.max())
    pos = torch.arange(max_spec_len)[None, :]
    return counts, pos, pos < counts, (cu_num_draft_tokens[:, None] - counts + pos).clamp(0, max(num_tokens - 1, 0))


def sample_recovered_tokens(draft_token_ids, target_probs, recovered_uniforms):
    """The n-gram branch: the target with the draft token zeroed, by the race argmax(prob / E), E = -log(1 - u)."""
    prob = target_probs.clone()
    prob[torch.arange(draft_token_ids.shape[0]), draft_token_ids] = 0
    return torch.argmax(prob / -torch.log1p(-recovered_uniforms), dim=-1)  # [num_tokens]


def _emit(draft_tokens, recovered, bonus_token_ids, counts, pos, valid, last_accepted):
    """Accepted drafts at positions <= last_accepted, the recovered token after them, the bonus when all passed."""
    batch_size, max_spec_len = draft_tokens.shape
    out = torch.full((batch_size, max_spec_len + 1), -1, dtype=torch.int64)
    out[:, :max_spec_len] = torch.where((pos <= last_accepted) & valid, draft_tokens, out[:, :max_spec_len])
    out[:, :max_spec_len] = torch.where((pos == last_accepted + 1) & valid, recovered, out[:, :max_spec_len])
    bonus = (last_accepted + 1 >= counts) & (torch.arange(max_spec_len + 1)[None, :] == counts)
    return torch.where(bonus, bonus_token_ids.reshape(-1, 1).expand(-1, max_spec_len + 1), out)


def _last(mask):
    """The last True position of each row [B, 1], -1 where none."""
    width = mask.shape[1]
    return torch.where(mask.any(dim=-1, keepdim=True),
                       width - mask.flip(dims=[-1]).float().argmax(dim=-1, keepdim=True) - 1, -1)


def rejection_random_sample_block_verify_pytorch(draft_token_ids, cu_num_draft_tokens, draft_probs, target_probs,
                                                 bonus_token_ids, uniform_probs, recovered_token_ids):
    """The block path: the longest prefix with cumprod(min(1, p/q)) >= cumprod(u); q(x) := 1 without draft_probs."""
    counts, pos, valid, index = _ragged_view(cu_num_draft_tokens, draft_token_ids.shape[0])
    draft_tokens = draft_token_ids[index]  # [B, M]
    draft_token_probs = (torch.ones_like(draft_tokens, dtype=target_probs.dtype) if draft_probs is None
                         else draft_probs[index, draft_tokens])
    pi = torch.cumprod((target_probs[index, draft_tokens] / draft_token_probs).clamp(max=1.0), dim=-1)
    legal = (draft_token_probs > 0) & (pi >= torch.cumprod(uniform_probs[index], dim=-1)) & valid
    return _emit(draft_tokens, recovered_token_ids[index], bonus_token_ids, counts, pos, valid, _last(legal))


def rejection_random_sample_pytorch(draft_token_ids, cu_num_draft_tokens, draft_probs, target_probs, bonus_token_ids,
                                    uniform_probs, recovered_token_ids):
    """The per-token path: accept while q(x) > 0 and p(x) / q(x) >= u (q(x) := 1 for n-gram drafts)."""
    counts, pos, valid, index = _ragged_view(cu_num_draft_tokens, draft_token_ids.shape[0])
    draft_tokens = draft_token_ids[index]
    draft_token_probs = (torch.ones_like(draft_tokens, dtype=target_probs.dtype) if draft_probs is None
                         else draft_probs[index, draft_tokens])
    accepted = (draft_token_probs > 0) & (target_probs[index, draft_tokens] / draft_token_probs
                                          >= uniform_probs[index])
    prefix = torch.cumprod((accepted | ~valid).to(torch.int64), dim=-1).bool() & valid
    return _emit(draft_tokens, recovered_token_ids[index], bonus_token_ids, counts, pos, valid, _last(prefix))


def rejection_sample(draft_token_ids, cu_num_draft_tokens, draft_probs, target_probs, bonus_token_ids, uniform_probs,
                     recovered_uniforms, *, skip_block_without_probs: bool):
    """Recovered tokens, then the block path when max_spec_len >= 3 (and, after #7603, draft_probs is given)."""
    max_spec_len = int(torch.diff(cu_num_draft_tokens, prepend=torch.zeros(1, dtype=torch.int64)).max())
    recovered_token_ids = sample_recovered_tokens(draft_token_ids, target_probs, recovered_uniforms)
    using_block_verify = max_spec_len >= 3 and (draft_probs is not None or not skip_block_without_probs)
    sample = rejection_random_sample_block_verify_pytorch if using_block_verify else rejection_random_sample_pytorch
    return sample(draft_token_ids, cu_num_draft_tokens, draft_probs, target_probs, bonus_token_ids, uniform_probs,
                  recovered_token_ids)


def buggy(draft_token_ids, cu_num_draft_tokens, draft_probs, target_probs, bonus_token_ids, uniform_probs,
          recovered_uniforms):
    """Before #7603: n-gram drafts (no draft_probs) through the block path."""
    return rejection_sample(draft_token_ids, cu_num_draft_tokens, None, target_probs, bonus_token_ids, uniform_probs,
                            recovered_uniforms, skip_block_without_probs=False)


def fixed(draft_token_ids, cu_num_draft_tokens, draft_probs, target_probs, bonus_token_ids, uniform_probs,
          recovered_uniforms):
    """#7603 / #7839: block verification only where draft_probs is given."""
    return rejection_sample(draft_token_ids, cu_num_draft_tokens, None, target_probs, bonus_token_ids, uniform_probs,
                            recovered_uniforms, skip_block_without_probs=True)
