"""Token-level speculative sampling written against torch's global RNG (layout "chain", torch, --rng capture).

Neither function is handed a uniform: each calls `torch.rand_like` (or `torch.rand`) for its acceptance tests and
`torch.multinomial` for the correction or bonus token, as transformers' `_speculative_sampling` does. With
`--rng capture` verispec feeds those draws from its own uniforms for the duration of each call, so the
unmodified functions are checked exactly; the arguments are the chain layout's without the uniforms:
draft_tokens [B, L] int64, draft_probs [B, L, V], target_probs [B, L+1, V] (torch, float64).

Published rule: Leviathan et al. 2023 (arXiv 2211.17192), Algorithm 1: draft i is accepted iff u_i < p(x_i) / q(x_i)
with a fresh uniform u_i per draft; at the first rejection the token is drawn from norm((p - q)+), and if every
draft passes, from p after the last draft. `speculative_sampling` is that rule (lossless).

Bug re-implemented by `speculative_sampling_one_uniform` (a representative defect, not a reported issue): ONE
uniform per sequence, `torch.rand(B, 1)`, is compared with every draft's ratio, so the acceptances are
correlated (after accepting draft 1 with u < p/q, draft 2 is tested with the same small u and passes more often
than p/q says). It is LOSSY from L = 2 on, and lossless at L = 1, where only one test is made.
"""

import torch


def _speculative_sampling(draft_tokens, draft_probs, target_probs, one_uniform):
    count, length = draft_tokens.shape
    rows = torch.arange(count)
    index = draft_tokens[..., None]  # [B, L, 1]
    q = draft_probs.gather(-1, index).squeeze(-1)  # [B, L]
    p = target_probs[:, :length].gather(-1, index).squeeze(-1)  # [B, L]
    if one_uniform:
        u = torch.rand(count, 1, dtype=p.dtype).expand(count, length)  # [B, L]: the bug, one uniform per row
    else:
        u = torch.rand_like(p)  # [B, L]
    accepted = torch.cumprod((u * q < p).long(), dim=1).sum(dim=1)  # [B]: the accepted prefix's length
    at = target_probs[rows, accepted]  # [B, V]: target law after the accepted prefix
    residual = (at - draft_probs[rows, accepted.clamp(max=length - 1)]).clamp(min=0)  # [B, V]
    law = torch.where((accepted < length)[:, None], residual, at)  # [B, V]
    last = torch.multinomial(law, 1).squeeze(1)  # [B]
    positions = torch.arange(length + 1)[None, :]  # [1, L+1]
    padded = torch.cat([draft_tokens, torch.zeros_like(draft_tokens[:, :1])], dim=1)  # [B, L+1]
    out = torch.where(positions < accepted[:, None], padded, torch.full_like(padded, -1))  # [B, L+1]
    out[rows, accepted] = last
    return out


def speculative_sampling(draft_tokens, draft_probs, target_probs):
    """Leviathan et al.'s rule on a batch of chains, drawing from torch's global RNG (correct, lossless).

    draft_tokens int64 [B, L]; draft_probs float [B, L, V]; target_probs float [B, L+1, V].
    Returns int64 [B, L+1]: the accepted drafts, then the correction or bonus token, padded with -1.
    """
    return _speculative_sampling(draft_tokens, draft_probs, target_probs, one_uniform=False)


def speculative_sampling_one_uniform(draft_tokens, draft_probs, target_probs):
    """The same rule with one uniform per sequence for all its acceptance tests (LOSSY from L = 2).

    Shapes as in `speculative_sampling`: draft_tokens [B, L], draft_probs [B, L, V], target_probs [B, L+1, V];
    returns int64 [B, L+1].
    """
    return _speculative_sampling(draft_tokens, draft_probs, target_probs, one_uniform=True)
