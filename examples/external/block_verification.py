"""Block verification of a draft chain (layout "chain", numpy).

Published rule: block verification of Sun et al. 2024 (arXiv 2403.10444), which judges the L drafts jointly instead
of token by token and is lossless with an expected accepted length at least that of token-level verification.
With drafts x_1..x_L (x_i = draft_tokens[:, i-1], drawn from q_i = draft_probs[:, i-1]) and target laws
p_i = target_probs[:, i-1] before x_i:

    w_0 = 1,   w_i = min(1, w_{i-1} p_i(x_i) / q_i(x_i)),
    h_i = S_i / (S_i + 1 - w_i) with S_i = sum_x (w_i p(x | x_<=i) - q(x | x_<=i))+   for i < L  (1 if 0 / 0),
    h_L = w_L,

where p(. | x_<=i) = target_probs[:, i] and q(. | x_<=i) = draft_probs[:, i]. With eta_i = uniforms[:, i-1], the
accepted length tau is the LARGEST i with eta_i <= h_i (0 if none); the rule emits x_1..x_tau and then one token Y
drawn with uniforms[:, L] from norm((w_tau p(. | x_<=tau) - q(. | x_<=tau))+) if tau < L, or from
p(. | x_<=L) = target_probs[:, L] if tau = L. On Sun et al.'s toy (V = 2, p = (1/3, 2/3) and q = (2/3, 1/3) at every
prefix, L = 2) block verification accepts E[tau] = 11/9 tokens against 10/9 for token-level verification.

Bug re-implemented by `verify_target_off_by_one` (a representative indexing defect, not a reported issue): the
weights read the target probability of x_i one row too late, target_probs[:, i, x_i] (the law AFTER x_i) instead of
target_probs[:, i-1, x_i] (the law that x_i is a sample of). With context-dependent laws the weights, hence the
acceptance probabilities and the residuals, are those of a different target, so the emitted tokens do not follow
the target law: the function is LOSSY (it coincides with `verify` only when the target law ignores the prefix).
`verify` is correct.

Both functions are pure and deterministic: all randomness comes from `uniforms`.
"""

import numpy as np


def _inverse_cdf(r, u):
    """Inverse-CDF draw of the (maybe unnormalised) law r [B, V] with uniforms u [B]; returns int64 [B]."""
    c = np.cumsum(r, axis=-1)  # [B, V]
    threshold = u * c[:, -1]  # [B]
    token = np.sum(c <= threshold[:, None], axis=-1)  # [B]  first t with c[t] > u * sum(r)
    last_positive = r.shape[-1] - 1 - np.argmax(r[:, ::-1] > 0, axis=-1)  # [B]
    return np.minimum(token, last_positive).astype(np.int64)


def _block(draft_tokens, draft_probs, target_probs, uniforms, target_shift):
    draft_tokens = np.asarray(draft_tokens, dtype=np.int64)  # [B, L]
    draft_probs = np.asarray(draft_probs)  # [B, L, V]
    target_probs = np.asarray(target_probs)  # [B, L+1, V]
    uniforms = np.asarray(uniforms)  # [B, L+1]
    batch, length = draft_tokens.shape
    rows = np.arange(batch)  # [B]

    x = draft_tokens[..., None]  # [B, L, 1]
    p_x = np.take_along_axis(target_probs[:, target_shift : length + target_shift], x, axis=-1)[..., 0]  # [B, L]
    q_x = np.take_along_axis(draft_probs, x, axis=-1)[..., 0]  # [B, L]

    weights = np.ones((batch, length + 1))  # [B, L+1]  w_0 .. w_L
    with np.errstate(divide="ignore", invalid="ignore"):
        for i in range(1, length + 1):
            weights[:, i] = np.fmin(1.0, weights[:, i - 1] * p_x[:, i - 1] / q_x[:, i - 1])

    h = np.ones((batch, length))  # [B, L]  h_1 .. h_L
    if length > 0:
        w_inner = weights[:, 1:length, None]  # [B, L-1, 1]  w_1 .. w_{L-1}
        s = np.maximum(w_inner * target_probs[:, 1:length] - draft_probs[:, 1:length], 0.0).sum(axis=-1)  # [B, L-1]
        denominator = s + 1.0 - w_inner[..., 0]  # [B, L-1]
        h[:, : length - 1] = np.where(denominator > 0, s / np.where(denominator > 0, denominator, 1.0), 1.0)
        h[:, length - 1] = weights[:, length]

    passed = uniforms[:, :length] <= h  # [B, L]  eta_i <= h_i
    tau = (passed * np.arange(1, length + 1)).max(axis=1, initial=0)  # [B]  largest passing i, 0 if none

    p_row = target_probs[rows, tau]  # [B, V]  p(. | x_<=tau)
    if length == 0:
        law = p_row
    else:
        q_row = draft_probs[rows, np.minimum(tau, length - 1)]  # [B, V]  q(. | x_<=tau) when tau < L
        scaled = weights[rows, tau][:, None] * p_row  # [B, V]
        residual = np.maximum(scaled - q_row, 0.0)  # [B, V]
        residual = np.where(residual.sum(axis=-1, keepdims=True) > 0, residual, p_row)  # [B, V]
        law = np.where((tau < length)[:, None], residual, p_row)  # [B, V]
    final = _inverse_cdf(law, uniforms[:, length])  # [B]

    out = np.full((batch, length + 1), -1, dtype=np.int64)  # [B, L+1]
    out[:, :length] = np.where(np.arange(length) < tau[:, None], draft_tokens, -1)
    out[rows, tau] = final
    return out


def verify(draft_tokens, draft_probs, target_probs, uniforms):
    """Block verification (Sun et al. 2024; correct, lossless).

    draft_tokens int64 [B, L]; draft_probs float [B, L, V] (row i: draft law before position i, the law of
    draft_tokens[:, i]); target_probs float [B, L+1, V] (row i: target law before position i, row L: after all
    drafts); uniforms float64 [B, L+1] (eta_1..eta_L, then the final draw). Returns int64 [B, L+1]: the accepted
    drafts x_1..x_tau then one token Y, left-aligned and padded with -1.
    """
    return _block(draft_tokens, draft_probs, target_probs, uniforms, target_shift=0)


def verify_target_off_by_one(draft_tokens, draft_probs, target_probs, uniforms):
    """Block verification whose weights use target_probs[:, i, x_i] instead of target_probs[:, i-1, x_i] (LOSSY).

    Shapes as in `verify`: draft_tokens [B, L], draft_probs [B, L, V], target_probs [B, L+1, V],
    uniforms [B, L+1]; returns int64 [B, L+1].
    """
    return _block(draft_tokens, draft_probs, target_probs, uniforms, target_shift=1)
