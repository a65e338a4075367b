"""Token-level verification of top-k sampled drafts (layout "padded", torch float64).

Published rule: the token-level speculative sampling of Leviathan et al. 2023 (arXiv 2211.17192), in the padded
batch shape of transformers' `_speculative_sampling`: draft i is accepted with probability min(1, p(x_i) / q(x_i));
at the first rejection one token is drawn from norm((p - q)+); if every candidate of the row passes, a bonus token
is drawn from the target law after them. Rows carry their own number of candidates (`candidate_lengths`); columns
past it are padding and are never read as data.

Setting: the draft model SAMPLES its candidates from its top-k filtered law (keep the TOP_K most probable tokens of
q, ties broken towards the lower token id, renormalise) but hands over its full, unfiltered q.

Public bug re-implemented by `speculative_sampling`: the proposal law passed to the verifier is not the law the
candidates were drawn from, the mismatch reported for transformers' candidate generators in
huggingface/transformers#47932 (tokens sampled from processor-applied logits, e.g. the default top_k=50, while the
raw logits are returned as q). The unfiltered q(x) under-states the real proposal probability q(x) / Z (Z = mass
kept by the filter), so the ratio p / q inflates acceptance by 1 / Z, and the residual (p - q)+ keeps subtracting
mass on tokens the filtered drafter can never propose. The emitted tokens do not follow the target law: the
function is LOSSY. `speculative_sampling_filtered` applies the same filter to q before the ratio test and the
residual, and is lossless.

Both functions are pure and deterministic: all randomness comes from `uniforms`; u[:, i] tests candidate i and
u[:, n] (n = the row's length) drives the single final inverse-CDF draw.
"""

import torch

TOP_K = 2


def _inverse_cdf(r, u):
    """Inverse-CDF draw of the (maybe unnormalised) law r [B, V] with uniforms u [B]; returns int64 [B]."""
    c = torch.cumsum(r, dim=-1)  # [B, V]
    threshold = u * c[:, -1]  # [B]
    token = (c <= threshold[:, None]).sum(dim=-1)  # [B]  first t with c[t] > u * sum(r)
    last_positive = r.shape[-1] - 1 - torch.argmax(torch.flip(r > 0, dims=(-1,)).to(torch.int8), dim=-1)  # [B]
    return torch.minimum(token, last_positive).to(torch.int64)


def _residual(a, b):
    """(a - b)+ per row [B, V]; rows where it sums to 0 fall back to a (unnormalised: draws normalise)."""
    res = torch.clamp(a - b, min=0.0)  # [B, V]
    empty = res.sum(dim=-1) <= 0  # [B]
    return torch.where(empty[:, None], a, res)


def _top_k_filter(q, k):
    """Keep the k most probable tokens of each row of q [..., V] (ties to the lower id) and renormalise."""
    if k >= q.shape[-1]:
        return q
    order = torch.sort(q, dim=-1, descending=True, stable=True).indices  # [..., V]  ties keep id order
    keep = torch.zeros_like(q, dtype=torch.bool).scatter_(-1, order[..., :k], True)  # [..., V]
    kept = torch.where(keep, q, torch.zeros_like(q))  # [..., V]
    total = kept.sum(dim=-1, keepdim=True)  # [..., 1]
    return torch.where(total > 0, kept / torch.where(total > 0, total, torch.ones_like(total)), q)


def _padded_token_level(candidate_ids, candidate_lengths, draft_probs, target_probs, uniforms, top_k):
    batch, width = candidate_ids.shape
    vocab = target_probs.shape[-1]
    device = target_probs.device
    rows = torch.arange(batch, device=device)  # [B]
    lengths = candidate_lengths.to(device=device, dtype=torch.int64)  # [B]
    if top_k is not None:
        draft_probs = _top_k_filter(draft_probs, top_k)  # [B, K, V]

    ids = candidate_ids.to(device=device, dtype=torch.int64)  # [B, K]
    valid = torch.arange(width, device=device) < lengths[:, None]  # [B, K]
    safe_ids = torch.where(valid, ids, torch.zeros_like(ids)).clamp(0, vocab - 1)  # [B, K]  padding may be junk
    p_x = torch.gather(target_probs[:, :width], -1, safe_ids[..., None])[..., 0]  # [B, K]
    q_x = torch.gather(draft_probs, -1, safe_ids[..., None])[..., 0]  # [B, K]
    accept = (uniforms[:, :width] * q_x < p_x) & valid  # [B, K]  u < min(1, p / q)
    n_acc = torch.cumprod(accept.to(torch.int64), dim=1).sum(dim=1)  # [B]

    p_row = target_probs[rows, n_acc]  # [B, V]
    if width == 0:
        law = p_row
    else:
        q_row = draft_probs[rows, n_acc.clamp(max=width - 1)]  # [B, V]
        rejected = n_acc < lengths  # [B]
        law = torch.where(rejected[:, None], _residual(p_row, q_row), p_row)  # [B, V]
    final = _inverse_cdf(law, uniforms[rows, lengths])  # [B]

    out = torch.full((batch, width + 1), -1, dtype=torch.int64, device=device)  # [B, K+1]
    out[:, :width] = torch.where(torch.arange(width, device=device) < n_acc[:, None], ids, -1)
    out[rows, n_acc] = final
    return out


def speculative_sampling(candidate_ids, candidate_lengths, draft_probs, target_probs, uniforms):
    """Token-level rule with the unfiltered draft law as handed (LOSSY for top-k sampled candidates).

    candidate_ids int64 [B, K] (columns >= candidate_lengths[b] are padding); candidate_lengths int64 [B];
    draft_probs float64 [B, K, V] (row i: full draft law before candidate i); target_probs float64 [B, K+1, V]
    (row i: target law before position i, valid for i <= length); uniforms float64 [B, K+1].
    Returns int64 [B, K+1]: accepted candidates then one correction or bonus token, left-aligned, padded with -1.
    """
    return _padded_token_level(candidate_ids, candidate_lengths, draft_probs, target_probs, uniforms, None)


def speculative_sampling_filtered(candidate_ids, candidate_lengths, draft_probs, target_probs, uniforms):
    """Token-level rule after applying the drafter's top-k filter (TOP_K, ties to the lower id) to q. Lossless.

    Shapes as in `speculative_sampling`: candidate_ids [B, K], candidate_lengths [B], draft_probs [B, K, V],
    target_probs [B, K+1, V], uniforms [B, K+1]; returns int64 [B, K+1].
    """
    return _padded_token_level(candidate_ids, candidate_lengths, draft_probs, target_probs, uniforms, TOP_K)
