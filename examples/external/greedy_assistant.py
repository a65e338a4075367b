"""Token-level verification when the assistant drafts greedily (layout "chain", numpy).

Published rule: the token-level speculative sampling of Leviathan et al. 2023 (arXiv 2211.17192). Draft x_i is
accepted with probability min(1, p(x_i) / q(x_i)); at the first rejection one token is drawn from the residual
norm((p - q)+); when all L drafts pass, a bonus token is drawn from the target law after them. The rule is lossless
only if q is the law the draft token was actually drawn from.

Public bug re-implemented by `verify`: transformers' assisted generation forced the assistant model to decode
greedily (PR huggingface/transformers#30778) while `_speculative_sampling` kept receiving q = softmax of the
assistant's logits and used it as the proposal law. A greedy draft is a point mass at argmax q, not a draw from q, so
the ratio p(x) / q(x) over-accepts the argmax token and the residual (p - q)+ is built from mass the assistant never
proposes; the emitted text no longer follows the target model, i.e. the function is LOSSY under greedy drafting
(reported as huggingface/transformers#32867, fixed by making the assistant sample again in #33534).
`verify_point_mass` is the correct rule for a greedy assistant (q := one-hot of the drafted token) and
`verify_sampled` is the plain rule, correct when the assistant samples from q.

Every function is pure and deterministic: all randomness comes from `uniforms`. uniforms[:, i] (i < L) tests draft
i, uniforms[:, L] drives the single final inverse-CDF draw (correction or bonus).
"""

import numpy as np


def _inverse_cdf(r, u):
    """Inverse-CDF draw of the (maybe unnormalised) law r [B, V] with uniforms u [B]; returns int64 [B]."""
    c = np.cumsum(r, axis=-1)  # [B, V]
    threshold = u * c[:, -1]  # [B]
    token = np.sum(c <= threshold[:, None], axis=-1)  # [B]  first t with c[t] > u * sum(r)
    last_positive = r.shape[-1] - 1 - np.argmax(r[:, ::-1] > 0, axis=-1)  # [B]
    return np.minimum(token, last_positive).astype(np.int64)


def _residual(a, b):
    """(a - b)+ per row [B, V]; rows where it sums to 0 fall back to a (unnormalised: draws normalise)."""
    res = np.maximum(a - b, 0.0)  # [B, V]
    empty = res.sum(axis=-1) <= 0  # [B]
    return np.where(empty[:, None], a, res)


def _token_level(draft_tokens, draft_probs, target_probs, uniforms):
    """Token-level rule with draft laws draft_probs [B, L, V] (or None: a point mass at each drafted token)."""
    batch, length = draft_tokens.shape
    rows = np.arange(batch)  # [B]
    x = draft_tokens[..., None]  # [B, L, 1]
    p_x = np.take_along_axis(target_probs[:, :length], x, axis=-1)[..., 0]  # [B, L]
    if draft_probs is None:
        q_x = np.ones_like(p_x)  # [B, L]
    else:
        q_x = np.take_along_axis(draft_probs, x, axis=-1)[..., 0]  # [B, L]
    accept = uniforms[:, :length] * q_x < p_x  # [B, L]  u < min(1, p / q)
    n_acc = np.cumprod(accept, axis=1).sum(axis=1)  # [B]  accepted prefix length

    p_row = target_probs[rows, n_acc]  # [B, V]  target law after the accepted prefix
    if length == 0:
        law = p_row
    else:
        at = np.minimum(n_acc, length - 1)  # [B]
        if draft_probs is None:
            q_row = np.zeros_like(p_row)  # [B, V]
            q_row[rows, draft_tokens[rows, at]] = 1.0
        else:
            q_row = draft_probs[rows, at]  # [B, V]
        rejected = n_acc < length  # [B]
        law = np.where(rejected[:, None], _residual(p_row, q_row), p_row)  # [B, V]
    final = _inverse_cdf(law, uniforms[:, length])  # [B]

    out = np.full((batch, length + 1), -1, dtype=np.int64)  # [B, L+1]
    out[:, :length] = np.where(np.arange(length) < n_acc[:, None], draft_tokens, -1)
    out[rows, n_acc] = final
    return out


def verify(draft_tokens, draft_probs, target_probs, uniforms):
    """Plain token-level verification that takes the handed q as the draft law (LOSSY under greedy drafting).

    draft_tokens int64 [B, L]; draft_probs float [B, L, V] (row i: assistant law q before position i);
    target_probs float [B, L+1, V] (row i: target law p before position i, row L: after all drafts);
    uniforms float64 [B, L+1]. Returns int64 [B, L+1]: accepted drafts, then one correction or bonus token,
    left-aligned and padded with -1.
    """
    draft_tokens = np.asarray(draft_tokens, dtype=np.int64)
    return _token_level(draft_tokens, np.asarray(draft_probs), np.asarray(target_probs), np.asarray(uniforms))


def verify_point_mass(draft_tokens, draft_probs, target_probs, uniforms):
    """Token-level verification with the draft law of a greedy assistant: a point mass at the drafted token.

    Accepts x_i with probability p(x_i); on rejection draws from p with x_i removed, renormalised. draft_probs is
    ignored (the assistant's softmax is not the law of an argmax draft). Lossless under argmax drafting.
    Shapes as in `verify`: draft_tokens [B, L], draft_probs [B, L, V], target_probs [B, L+1, V],
    uniforms [B, L+1]; returns int64 [B, L+1].
    """
    draft_tokens = np.asarray(draft_tokens, dtype=np.int64)
    return _token_level(draft_tokens, None, np.asarray(target_probs), np.asarray(uniforms))


# The plain token-level rule is correct (lossless) when the assistant SAMPLES its drafts from q: same code as `verify`.
verify_sampled = verify
