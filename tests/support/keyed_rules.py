"""Token-level verification (Leviathan et al. 2023, Algorithm 1) on one chain, its accept tests and its recovery
and bonus draws read from keyed sources: the shapes of the reuse behind vLLM #47386, where a draw after a
rejection re-reads the key of a draw before it. Each takes the request's ``seed`` after the chain layout's
arguments (``--rng capture``); ``salt`` is the offset between the accept tests' keys and the later draws' keys
(0: the recovery at position i re-reads the accept test's key at i; large: no key is read twice)."""

from __future__ import annotations

import numpy as np

from verispec import keyed

#: Offsets that keep the later draws' keys apart from the accept tests' (the fixed twins).
APART = 1000


def _token_level(draft_tokens, draft_probs, target_probs, uniform, salt: int) -> np.ndarray:
    """The rule with ``uniform(index)`` as the uniform at key index ``index``; accept test i reads index i, the
    recovery at i and the bonus (at L) read index i + salt."""
    count, length = np.shape(draft_tokens)
    out = np.full((count, length + 1), -1, dtype=np.int64)
    for row in range(count):
        for i in range(length):
            x = int(draft_tokens[row, i])
            p, q = np.asarray(target_probs[row, i], float), np.asarray(draft_probs[row, i], float)
            if uniform(i) * q[x] < p[x]:
                out[row, i] = x
                continue
            residual = np.maximum(p - q, 0.0)
            out[row, i] = int(np.searchsorted(np.cumsum(residual) / residual.sum(), uniform(i + salt), side="right"))
            break
        else:
            law = np.asarray(target_probs[row, length], float)
            out[row, length] = int(np.searchsorted(np.cumsum(law), uniform(length + salt), side="right"))
    return out


def keyed_reused(draft_tokens, draft_probs, target_probs, seed):
    """verispec.keyed.rand(seed, offset) everywhere; the recovery at i re-reads the accept test's offset i."""
    return _token_level(draft_tokens, draft_probs, target_probs, lambda i: keyed.rand(seed, np.array([i]))[0], 0)


def keyed_salted(draft_tokens, draft_probs, target_probs, seed):
    """The fixed twin: the later draws read offsets of their own."""
    return _token_level(draft_tokens, draft_probs, target_probs, lambda i: keyed.rand(seed, np.array([i]))[0],
                        APART)


def keyed_next(draft_tokens, draft_probs, target_probs, seed):
    """The recovery at i reads the NEXT accept test's offset i + 1 (never read on that path: lossless), and the bonus
    at L offset L + 1, fresh."""
    return _token_level(draft_tokens, draft_probs, target_probs, lambda i: keyed.rand(seed, np.array([i]))[0], 1)


def numpy_reused(draft_tokens, draft_probs, target_probs, seed):
    """A numpy Generator seeded per position with default_rng((seed, i)); the recovery seeds the same key again."""
    return _token_level(draft_tokens, draft_probs, target_probs,
                        lambda i: float(np.random.default_rng((seed, i)).random()), 0)


def torch_reused(draft_tokens, draft_probs, target_probs, seed):
    """torch.Generator.manual_seed(seed * 4096 + position) before each draw; the recovery re-seeds the accept test's
    key and draws with torch.multinomial (inverse CDF of the same uniform)."""
    import torch

    count, length = draft_tokens.shape
    out = torch.full((count, length + 1), -1, dtype=torch.int64)
    generator = torch.Generator()
    for row in range(count):
        for i in range(length):
            x = int(draft_tokens[row, i])
            p, q = target_probs[row, i], draft_probs[row, i]
            generator.manual_seed(seed * 4096 + i)
            if torch.rand(1, dtype=torch.float64, generator=generator) * q[x] < p[x]:
                out[row, i] = x
                continue
            generator.manual_seed(seed * 4096 + i)
            residual = torch.clamp(p - q, min=0)
            out[row, i] = torch.multinomial(residual / residual.sum(), 1, generator=generator)[0]
            break
        else:
            generator.manual_seed(seed * 4096 + length)
            out[row, length] = torch.multinomial(target_probs[row, length], 1, generator=generator)[0]
    return out


def global_torch_reused(draft_tokens, draft_probs, target_probs, seed):
    """torch.manual_seed(seed) inside the call, then one uniform per accept test, and the recovery re-seeded."""
    import torch

    def uniform(i):
        torch.manual_seed(seed * 4096 + i)
        return float(torch.rand(1, dtype=torch.float64))

    return _token_level(draft_tokens.numpy(), draft_probs.numpy(), target_probs.numpy(), uniform, 0)


def constant_key(draft_tokens, draft_probs, target_probs, seed):
    """Keys that ignore the seed: every request draws the same numbers (refused)."""
    return _token_level(draft_tokens, draft_probs, target_probs, lambda i: keyed.rand(7, np.array([i]))[0], APART)


def clock_key(draft_tokens, draft_probs, target_probs, seed):
    """A generator seeded from the clock (refused: verispec cannot read that key)."""
    import time

    generator = np.random.default_rng(time.time_ns())
    return _token_level(draft_tokens, draft_probs, target_probs, lambda i: float(generator.random()), APART)


def urandom_key(draft_tokens, draft_probs, target_probs, seed):
    """A generator seeded from os.urandom (refused)."""
    import os

    generator = np.random.default_rng(int.from_bytes(os.urandom(8), "little"))
    return _token_level(draft_tokens, draft_probs, target_probs, lambda i: float(generator.random()), APART)


def os_seeded_torch(draft_tokens, draft_probs, target_probs, seed):
    """torch.seed(): a seed from the operating system (refused)."""
    import torch

    torch.seed()
    return _token_level(draft_tokens.numpy(), draft_probs.numpy(), target_probs.numpy(),
                        lambda i: float(torch.rand(1, dtype=torch.float64)), APART)


def many_keys(draft_tokens, draft_probs, target_probs, seed):
    """Eight keys (seed .. seed + 7; the rule's own is seed): past a --max-keys below 8 (refused)."""
    for index in range(8):
        keyed.rand(seed + index, np.array([0]))
    return keyed_salted(draft_tokens, draft_probs, target_probs, seed)
