"""Token-level rejection sampling in vLLM's ragged layout (layout "ragged", numpy).

Published rule: the token-level speculative sampling of Leviathan et al. 2023 (arXiv 2211.17192), restated in the
shape of vLLM's rejection sampler: the drafts of all requests are concatenated ([T] and [T, V] arrays), request b
owning entries cu[b-1] .. cu[b]-1 of `cu_num_draft_tokens` (cu[-1] = 0 implied; a request may have 0 drafts). Draft
t is accepted iff uniform_probs[t] < p(x) / q(x); at the first rejection of a request a *recovered* token is drawn
from norm((p - q)+) by an exponential race (argmax over v of residual[v] / E[t, v] with E = -log(1 - u), i.e.
i.i.d. Exp(1) variables, which picks v with probability residual[v] / sum(residual)); if every draft passes, the
request's pre-sampled bonus token is emitted.

Bug re-implemented by `rejection_sample_log_space` (a representative port defect, not a reported vLLM issue): the
acceptance test is moved to log space, log_ratio = log p(x) - log q(x), and the -inf produced by log(0) is
"sanitised" with np.nan_to_num(log_ratio, nan=0.0, neginf=0.0). A draft whose target probability is exactly 0
(a token the target's own top-k / top-p filtering removed, say) then gets log_ratio = 0 and, since log(u) < 0 for
every u in [0, 1), it is ACCEPTED every time instead of never, so tokens the target cannot produce are emitted: the
function is LOSSY whenever the draft puts mass where the target has none. `rejection_sample` is correct.

Both functions are pure and deterministic: randomness comes only from `uniform_probs`, `recovered_uniforms` and the
given `bonus_token_ids`.
"""

import numpy as np


def _residual(a, b):
    """(a - b)+ per row [R, V]; rows where it sums to 0 fall back to a."""
    res = np.maximum(a - b, 0.0)  # [R, V]
    empty = res.sum(axis=-1) <= 0  # [R]
    return np.where(empty[:, None], a, res)


def _recover(target_rows, draft_rows, uniform_rows):
    """Exponential-race draw from norm((p - q)+): p, q, u [R, V] -> int64 [R]."""
    residual = _residual(target_rows, draft_rows)  # [R, V]
    exponential = np.maximum(-np.log1p(-uniform_rows), np.finfo(np.float64).tiny)  # [R, V]  Exp(1), never 0
    score = np.where(residual > 0, residual / exponential, -np.inf)  # [R, V]
    return np.argmax(score, axis=-1).astype(np.int64)


def _rejection_sample(
    draft_token_ids,
    cu_num_draft_tokens,
    draft_probs,
    target_probs,
    bonus_token_ids,
    uniform_probs,
    recovered_uniforms,
    log_space,
):
    draft_token_ids = np.asarray(draft_token_ids, dtype=np.int64)  # [T]
    cu = np.asarray(cu_num_draft_tokens, dtype=np.int64)  # [B]
    draft_probs = np.asarray(draft_probs)  # [T, V]
    target_probs = np.asarray(target_probs)  # [T, V]
    uniform_probs = np.asarray(uniform_probs)  # [T]
    num_tokens = draft_token_ids.shape[0]
    batch = cu.shape[0]

    starts = np.concatenate([np.zeros(1, dtype=np.int64), cu[:-1]])  # [B]
    counts = cu - starts  # [B]
    max_spec_len = int(counts.max()) if batch else 0

    # Acceptance test of every draft, over the flat [T] axis.
    t = np.arange(num_tokens)  # [T]
    p_x = target_probs[t, draft_token_ids]  # [T]
    q_x = draft_probs[t, draft_token_ids]  # [T]
    if log_space:
        with np.errstate(divide="ignore", invalid="ignore"):
            log_ratio = np.log(p_x) - np.log(q_x)  # [T]
            log_ratio = np.nan_to_num(log_ratio, nan=0.0, neginf=0.0)  # the bug: log(0) = -inf becomes 0
            accept_flat = np.log(uniform_probs) < log_ratio  # [T]
    else:
        accept_flat = uniform_probs * q_x < p_x  # [T]  u < p / q  (q(x) > 0 for drafted tokens)

    # Ragged -> padded [B, max_spec_len] view of the requests' drafts.
    pos = np.arange(max_spec_len)  # [M]
    valid = pos < counts[:, None]  # [B, M]
    idx = np.minimum(starts[:, None] + pos, max(num_tokens - 1, 0))  # [B, M]
    accept = accept_flat[idx] & valid if num_tokens else np.zeros((batch, max_spec_len), dtype=bool)  # [B, M]
    n_acc = np.cumprod(accept, axis=1).sum(axis=1)  # [B]

    final = np.asarray(bonus_token_ids, dtype=np.int64).reshape(batch).copy()  # [B]
    rejected = np.flatnonzero(n_acc < counts)  # [R]
    if rejected.size:
        at = starts[rejected] + n_acc[rejected]  # [R]  flat index of the first rejected draft
        final[rejected] = _recover(target_probs[at], draft_probs[at], np.asarray(recovered_uniforms)[at])

    out = np.full((batch, max_spec_len + 1), -1, dtype=np.int64)  # [B, M+1]
    if num_tokens:
        out[:, :max_spec_len] = np.where(pos < n_acc[:, None], draft_token_ids[idx], -1)
    out[np.arange(batch), n_acc] = final
    return out


def rejection_sample(
    draft_token_ids,
    cu_num_draft_tokens,
    draft_probs,
    target_probs,
    bonus_token_ids,
    uniform_probs,
    recovered_uniforms,
):
    """vLLM-style token-level rejection sampling over ragged requests (correct, lossless).

    draft_token_ids int64 [T]; cu_num_draft_tokens int64 [B] (cumulative draft counts); draft_probs float [T, V];
    target_probs float [T, V] (target law at each draft position); bonus_token_ids int64 [B];
    uniform_probs float64 [T]; recovered_uniforms float64 [T, V].
    Returns int64 [B, max_spec_len + 1]: accepted drafts then the recovered or bonus token, padded with -1.
    """
    return _rejection_sample(
        draft_token_ids,
        cu_num_draft_tokens,
        draft_probs,
        target_probs,
        bonus_token_ids,
        uniform_probs,
        recovered_uniforms,
        log_space=False,
    )


def rejection_sample_log_space(
    draft_token_ids,
    cu_num_draft_tokens,
    draft_probs,
    target_probs,
    bonus_token_ids,
    uniform_probs,
    recovered_uniforms,
):
    """The same rule with a log-space test whose log(0) is mapped to 0 by nan_to_num (LOSSY: p(x) = 0 accepted).

    Shapes as in `rejection_sample`: draft_token_ids [T], cu_num_draft_tokens [B], draft_probs [T, V],
    target_probs [T, V], bonus_token_ids [B], uniform_probs [T], recovered_uniforms [T, V];
    returns int64 [B, max_spec_len + 1].
    """
    return _rejection_sample(
        draft_token_ids,
        cu_num_draft_tokens,
        draft_probs,
        target_probs,
        bonus_token_ids,
        uniform_probs,
        recovered_uniforms,
        log_space=True,
    )
