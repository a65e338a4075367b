"""speculative-sampling (jaymody): drafts taken by argmax, verified as if drawn from the draft's softmax
(jaymody/speculative-sampling#3, fix PR #4, 2023-08-17; an older report, kept for its class: a deterministic draft
verified as sampled).

The reference implementation's ``speculative_sampling(x, draft_model, target_model, N, K)`` drafted each token with
``sample(p)``, which took the argmax, while the acceptance test ``r < min(1, q(x) / p(x))`` and the residual
``max_fn(q - p)`` used ``p = softmax(draft logits)`` (the repository's naming: p the draft, q the target). The
maintainer: "The rejection criteria + resampling method only recover the target distribution if we sample from the
draft probability distribution, which we are not doing when we take argmax ... p is the softmax of the raw logits,
even though we are picking the highest probability next word with 100% probability. The fix is to actually sample
from the distribution" (#3); #4: "Fix issue in sampling where target distribution was not being recovered."

The re-creation keeps the function's loop (K drafts, one target pass over them, the per-token test with
``np.random.random()``, ``max_fn`` residual, the bonus from the target's last row) and its numpy draws on the global
generator, seeded once by the request's seed (``np.random.seed``); ``sample`` is the argmax before the fix and
``np.random.choice`` from the tempered softmax after it. Left out: GPT-2, the outer loop over N tokens, KV caches.
Written for verispec from the thread's description; no code copied.

Check: the ``step`` layout, chain:1, V = 3, target (0.3, 0.3, 0.4), draft (0.5, 0.4, 0.1), temperature 1: the
argmax draft is token 0, accepted with probability min(1, 0.3 / 0.5) = 0.6 (for the 0.3 the target gives it) and
otherwise replaced by a draw from max(q - p, 0), which holds token 2 only: the first token's law is (0.6, 0, 0.4)
for (0.3, 0.3, 0.4), exact TV 0.3; 1e-16 with the drafts sampled.
"""

from __future__ import annotations

import numpy as np

BUG = {
    "repository": "jaymody/speculative-sampling",
    "threads": ["jaymody/speculative-sampling#3", "jaymody/speculative-sampling#4"],
    "url": "https://github.com/jaymody/speculative-sampling/issues/3",
    "date": "2023-08-17",
    "title": "argmax drafts verified with the draft's softmax as if sampled",
    "class": "deterministic tree verified as sampled",
    "layout": "step", "tree": "chain:1",
    "target": [0.3, 0.3, 0.4], "draft": [0.5, 0.4, 0.1],
    "sampling": "temperature=1",
    "rng": "capture",
    "mode": "auto",
}


def softmax(logits, temperature):
    scaled = np.asarray(logits, dtype=np.float64) / temperature
    scaled = np.exp(scaled - scaled.max())
    return scaled / scaled.sum()


def max_fn(x):
    x_max = np.where(x > 0, x, 0)
    return x_max / np.sum(x_max)


def speculative_sampling(x, draft_model, target_model, K, temperature, *, sample_drafts):
    """One iteration: ``x`` the sequence so far (a list of ids); returns the tokens it appends."""
    prompt = len(x)
    p = []  # the draft's laws
    for _ in range(K):
        law = softmax(_logits(draft_model, x)[-1], temperature)
        p.append(law)
        token = int(np.random.choice(np.arange(law.shape[-1]), p=law)) if sample_drafts else int(np.argmax(law))
        x = x + [token]
    q = [softmax(row, temperature) for row in _logits(target_model, x)[prompt - 1:]]  # K + 1 target laws
    out = []
    for i in range(K):
        j = x[prompt + i]
        r = np.random.random()
        if r < min(1, q[i][j] / p[i][j]):
            out.append(j)
            continue
        return out + [int(np.random.choice(np.arange(q[i].shape[-1]), p=max_fn(q[i] - p[i])))]
    return out + [int(np.random.choice(np.arange(q[K].shape[-1]), p=q[K]))]


def _logits(model, x):
    import torch

    return model(torch.tensor([x], dtype=torch.int64))[0].numpy()


def _step(draft_model, target_model, input_ids, num_draft_tokens, temperature, seed, sample_drafts):
    np.random.seed(seed)
    return np.array(speculative_sampling(input_ids[0].tolist(), draft_model, target_model, num_draft_tokens,
                                         temperature, sample_drafts=sample_drafts))


def buggy(draft_model, target_model, input_ids, num_draft_tokens, temperature, top_k, top_p, min_p, seed):
    return _step(draft_model, target_model, input_ids, num_draft_tokens, temperature, seed, sample_drafts=False)


def fixed(draft_model, target_model, input_ids, num_draft_tokens, temperature, top_k, top_p, min_p, seed):
    return _step(draft_model, target_model, input_ids, num_draft_tokens, temperature, seed, sample_drafts=True)
