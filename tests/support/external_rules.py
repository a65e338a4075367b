"""Small production-shape rules for the adapter's tests, with known laws or known failures.

Each is written here, independently of ``verispec.external``: a token-level chain rule in the ``chain`` layout,
and functions of plain uniforms whose laws have closed forms (or that exact mode must refuse).
"""

from __future__ import annotations

import numpy as np


def inverse_cdf(law, u):
    """First token whose cumulative mass exceeds u * total, clipped to the last token of positive mass."""
    cumulative = np.cumsum(law, axis=-1)
    tokens = np.sum(cumulative <= (u * cumulative[:, -1])[:, None], axis=-1)
    last = law.shape[-1] - 1 - np.argmax((law > 0)[:, ::-1], axis=-1)
    return np.minimum(tokens, last)


def _token_level(draft_tokens, draft_probs, target_probs, uniforms, from_residual: bool):
    count, length = draft_tokens.shape
    rows = np.arange(count)
    out = np.full((count, length + 1), -1, dtype=np.int64)
    alive = np.ones(count, dtype=bool)
    final = target_probs[:, length].copy()  # [B, V]
    stop = np.full(count, length)
    for i in range(length):
        x = draft_tokens[:, i]
        accept = uniforms[:, i] * draft_probs[rows, i, x] < target_probs[rows, i, x]
        rejected = alive & ~accept
        final[rejected] = (np.maximum(target_probs[rejected, i] - draft_probs[rejected, i], 0.0) if from_residual
                           else target_probs[rejected, i])
        stop[rejected] = i
        out[alive & accept, i] = x[alive & accept]
        alive &= accept
    out[rows, stop] = inverse_cdf(final, uniforms[:, length])
    return out


def token_level(draft_tokens, draft_probs, target_probs, uniforms):
    """Leviathan et al.'s rule on a chain, ``chain`` layout: u_i tests draft i, u_L draws the last token."""
    return _token_level(draft_tokens, draft_probs, target_probs, uniforms, from_residual=True)


def token_level_torch(draft_tokens, draft_probs, target_probs, uniforms):
    """``token_level`` on torch tensors, returning a tensor (the 'same kind out' half of the contract)."""
    import torch

    assert isinstance(draft_tokens, torch.Tensor)
    out = token_level(draft_tokens.numpy(), draft_probs.numpy(), target_probs.numpy(), uniforms.numpy())
    return torch.from_numpy(out)


def token_level_resample_from_target(draft_tokens, draft_probs, target_probs, uniforms):
    """A known lossy variant: after a rejection it draws from p instead of the residual norm((p - q)+)."""
    return _token_level(draft_tokens, draft_probs, target_probs, uniforms, from_residual=False)


def right_aligned(draft_tokens, draft_probs, target_probs, uniforms):
    """Emits the right tokens right-aligned (padding first): a malformed output."""
    out = token_level(draft_tokens, draft_probs, target_probs, uniforms)
    count = (out >= 0).sum(axis=1)
    shifted = np.full_like(out, -1)
    for row in range(len(out)):
        shifted[row, out.shape[1] - count[row]:] = out[row, :count[row]]
    return shifted


def emits_undrafted(draft_tokens, draft_probs, target_probs, uniforms):
    """Emits a token that was not drafted in an accepted position: a malformed output."""
    count, length = draft_tokens.shape
    out = np.full((count, length + 1), -1, dtype=np.int64)
    out[:, 0] = (draft_tokens[:, 0] + 1) % draft_probs.shape[-1]
    out[:, 1] = 0
    return out


def threshold_pair(a: float, b: float):
    """f(u0, u1) = 2 [u0 < a] + [u1 < b], as a 'chain' rule on one-token chains over V = 4: the outcome is
    written as the emitted first token (node 0). Law: ((1-a)(1-b), (1-a) b, a (1-b), a b)."""
    def rule(draft_tokens, draft_probs, target_probs, uniforms):
        out = np.full((len(uniforms), 2), -1, dtype=np.int64)
        out[:, 0] = 2 * (uniforms[:, 0] < a) + (uniforms[:, 1] < b)
        return out
    return rule


def largest_passing(h):
    """tau = the largest i with u_i <= h_i (0 if none), over len(h) uniforms, emitted as token tau at node 0
    (block verification's selection); law P(tau = i) = h_i prod_{j > i} (1 - h_j), P(0) = prod (1 - h_j)."""
    h = np.asarray(h)

    def rule(draft_tokens, draft_probs, target_probs, uniforms):
        passing = uniforms[:, :len(h)] <= h[None, :]
        index = np.arange(1, len(h) + 1)[None, :]
        out = np.full((len(uniforms), draft_tokens.shape[1] + 1), -1, dtype=np.int64)
        out[:, 0] = np.max(np.where(passing, index, 0), axis=1)
        return out
    return rule


def reused_uniform(a: float, law):
    """One uniform used twice: accept (token 0) if u < a, else token 1 + inverse-CDF of ``law`` at (u - a) / (1 - a).
    Law: a for token 0 and (1 - a) law[t] for token 1 + t."""
    law = np.asarray(law, dtype=np.float64)

    def rule(draft_tokens, draft_probs, target_probs, uniforms):
        u = uniforms[:, 0]
        rescaled = np.clip((u - a) / (1 - a), 0.0, np.nextafter(1.0, 0.0))
        drawn = 1 + inverse_cdf(np.broadcast_to(law, (len(u), len(law))), rescaled)
        out = np.full((len(u), draft_tokens.shape[1] + 1), -1, dtype=np.int64)
        out[:, 0] = np.where(u < a, 0, drawn)
        return out
    return rule


def summed_uniforms(draft_tokens, draft_probs, target_probs, uniforms):
    """[u0 + u1 < 1]: its boundary is a diagonal, not a threshold on either uniform (exact mode must refuse)."""
    out = np.full((len(uniforms), draft_tokens.shape[1] + 1), -1, dtype=np.int64)
    out[:, 0] = (uniforms[:, 0] + uniforms[:, 1] < 1).astype(np.int64)
    return out


def exponential_race(draft_tokens, draft_probs, target_probs, uniforms):
    """argmax_v p_v / E_v with E_v = -log(1 - u_v), one uniform per token (a correct draw from p, but the race
    between uniforms is not of threshold form: exact mode must refuse). Chain layout, V uniforms read from the
    first V of the L + 1 given (L + 1 >= V)."""
    size = target_probs.shape[-1]
    noise = -np.log1p(-uniforms[:, :size])
    with np.errstate(divide="ignore", invalid="ignore"):
        score = np.where(target_probs[:, 0] > 0, target_probs[:, 0] / noise, -np.inf)
    out = np.full((len(uniforms), draft_tokens.shape[1] + 1), -1, dtype=np.int64)
    out[:, 0] = np.argmax(score, axis=1)
    return out


def parity_of_fine_grid(draft_tokens, draft_probs, target_probs, uniforms):
    """floor(u0 * 2^20) mod 2: a continuous use of one uniform (a million pieces)."""
    out = np.full((len(uniforms), draft_tokens.shape[1] + 1), -1, dtype=np.int64)
    out[:, 0] = np.floor(uniforms[:, 0] * 2.0**20).astype(np.int64) % 2
    return out


def race_when_binary(draft_tokens, draft_probs, target_probs, uniforms):
    """Emits one token drawn from p at the root: by an exponential race between the two uniforms when V = 2
    (not of threshold form), else by inverse CDF of the last uniform. Lossless either way."""
    size = target_probs.shape[-1]
    out = np.full((len(uniforms), draft_tokens.shape[1] + 1), -1, dtype=np.int64)
    if size == 2 and uniforms.shape[1] >= 2:
        noise = -np.log1p(-uniforms[:, :2])
        with np.errstate(divide="ignore", invalid="ignore"):
            score = np.where(target_probs[:, 0] > 0, target_probs[:, 0] / noise, -np.inf)
        out[:, 0] = np.argmax(score, axis=1)
    else:
        out[:, 0] = inverse_cdf(target_probs[:, 0], uniforms[:, -1])
    return out


def _ragged_token_level(draft_token_ids, cu_num_draft_tokens, draft_probs, target_probs, bonus_token_ids,
                        uniform_probs, recovered_uniforms, equal_lengths: bool):
    batch = len(cu_num_draft_tokens)
    starts = np.concatenate([[0], cu_num_draft_tokens[:-1]])
    counts = cu_num_draft_tokens - starts
    if equal_lengths:  # the bug: every request is taken to have T / B drafts
        counts = np.full(batch, len(draft_token_ids) // max(batch, 1))
        starts = np.arange(batch) * counts
    width = int(counts.max(initial=0)) + 1
    out = np.full((batch, width), -1, dtype=np.int64)
    alive = np.ones(batch, dtype=bool)
    for i in range(width - 1):
        has = alive & (i < counts)
        index = np.minimum(starts + i, len(draft_token_ids) - 1)
        x = draft_token_ids[index]
        accept = uniform_probs[index] * draft_probs[index, x] < target_probs[index, x]
        residual = np.maximum(target_probs[index] - draft_probs[index], 0.0)
        recovered = inverse_cdf(residual, recovered_uniforms[index, 0])
        out[has & accept, i] = x[has & accept]
        out[has & ~accept, i] = recovered[has & ~accept]
        alive &= ~has | accept
    finished = alive
    out[finished, np.minimum(counts, width - 1)[finished]] = bonus_token_ids[finished]
    return out


def ragged_token_level(*args):
    """Token-level verification in the ``ragged`` layout; the recovered token by inverse CDF of the first
    recovered uniform (threshold form, so exact mode applies)."""
    return _ragged_token_level(*args, equal_lengths=False)


def ragged_assuming_equal_lengths(*args):
    """The same, but it takes every request to have T / B drafts: wrong as soon as the batch is ragged."""
    return _ragged_token_level(*args, equal_lengths=True)


def accept_all(draft_tokens, draft_probs, target_probs, uniforms):
    """Accepts every draft, then draws a bonus token from the last target row: lossy whenever q differs from p.
    On chain:1 with context-free p, q it emits (x, y) with probability q(x) p(y) (the target's is p(x) p(y)), so
    its TV is TV(p, q) exactly."""
    bonus = inverse_cdf(target_probs[:, -1], uniforms[:, -1])
    return np.concatenate([draft_tokens, bonus[:, None]], axis=1).astype(np.int64)


def leaky_token_level(leak: float):
    """Token-level verification on a chain that accepts draft i with probability min(1, p/q + leak) instead of
    min(1, p/q): lossy for leak > 0, its TV growing with ``leak`` (the exact engine measures it)."""

    def verify(draft_tokens, draft_probs, target_probs, uniforms):
        count, length = draft_tokens.shape
        rows = np.arange(count)
        out = np.full((count, length + 1), -1, dtype=np.int64)
        alive = np.ones(count, dtype=bool)
        final = target_probs[:, length].copy()
        stop = np.full(count, length)
        for i in range(length):
            x = draft_tokens[:, i]
            q, p = draft_probs[rows, i, x], target_probs[rows, i, x]
            accept = uniforms[:, i] * q < p + leak * q
            rejected = alive & ~accept
            final[rejected] = np.maximum(target_probs[rejected, i] - draft_probs[rejected, i], 0.0)
            stop[rejected] = i
            out[alive & accept, i] = x[alive & accept]
            alive &= accept
        out[rows, stop] = inverse_cdf(final, uniforms[:, length])
        return out

    return verify


def slowed(function, seconds: float):
    """``function``, taking ``seconds`` longer per call (a slow function, for time-budget tests)."""
    import time

    def slow(*args):
        time.sleep(seconds)
        return function(*args)

    slow.__name__ = f"slow_{function.__name__}"
    return slow
