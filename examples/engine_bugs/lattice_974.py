"""lattice: the MTP rejection verifier softmaxes draft and target logits at temperature 1 whatever the request's
temperature (ohdearquant/lattice#974, defect #388, 2026-07-14).

"``rejection_sample_draft`` softmaxed raw draft/target logits with no temperature, so probabilistic MTP speculative
verification computed the acceptance ratio ``min(1, p(x)/q(x))`` under T=1.0 regardless of the caller's
``GenerateConfig.temperature``. That violates the ADR-050 speculative-sampling contract: the accept/reject
distribution must match the distribution the target decoder actually samples from" (#974). The fix: "Thread
``temperature: f32`` through ``rejection_sample_draft``, ``mtp_verify_draft``, and ``mtp_verify_draft_with_seed``.
Apply it to the ``p``, ``q``, and full-accept bonus softmaxes".

The re-creation keeps ``mtp_verify_draft_with_seed``'s shape: drafts from the draft model, one target pass,
``rejection_sample_draft(draft_tokens, draft_logits, target_logits, temperature, seed)`` (Leviathan et al.'s rule,
uniforms keyed by the request's seed and the position: accept with min(1, p/q), else the residual norm(max(p - q,
0)), the bonus from the target's last row). The drafts are drawn from the draft's law at the request's
temperature (the caller's sampler); the thread does not say how the MTP head drew them, and with this choice the
twins differ only in the temperature of the verifier's three softmaxes. Left out: the Metal greedy path (greedy
ignores temperature), the fail-closed checks, KV caches. Written for verispec from the thread's description; no code
copied.

Check: the ``step`` layout, chain:1, V = 3, target (0.5, 0.3, 0.2), draft (0.2, 0.3, 0.5), ``temperature=0.5``:
exact TV 141/722 = 0.195291 for the verifier at temperature 1, equal to the closed form over two-token blocks
(drafts from the tempered draft law, test, residual and bonus from the untempered laws, in Fractions), and 3e-17
with the temperature threaded through.
"""

from __future__ import annotations

import torch

BUG = {
    "repository": "ohdearquant/lattice",
    "threads": ["ohdearquant/lattice#974", "ohdearquant/lattice#388"],
    "url": "https://github.com/ohdearquant/lattice/pull/974",
    "date": "2026-07-14",
    "title": "MTP rejection verifier computes p, q and the bonus at temperature 1",
    "class": "sampling settings applied to some tokens",
    "layout": "step", "tree": "chain:1",
    "target": [0.5, 0.3, 0.2], "draft": [0.2, 0.3, 0.5],
    "sampling": "temperature=0.5",
    "rng": "capture",
    "mode": "auto",
}


def rejection_sample_draft(draft_tokens, draft_logits, target_logits, temperature, seed):
    """Leviathan et al.'s rule: ``draft_logits`` [K, V], ``target_logits`` [K+1, V]; ``temperature`` None is the
    verifier before #974 (plain softmax)."""
    scale = 1.0 if temperature is None else temperature
    generator = torch.Generator()
    out = []
    for i, x in enumerate(draft_tokens):
        p = torch.softmax(target_logits[i] / scale, dim=-1)
        q = torch.softmax(draft_logits[i] / scale, dim=-1)
        generator.manual_seed(seed * 4096 + 1000 + i)
        if float(torch.rand(1, dtype=torch.float64, generator=generator)) * float(q[x]) < float(p[x]):
            out.append(x)
            continue
        residual = torch.clamp(p - q, min=0)
        generator.manual_seed(seed * 4096 + 2000 + i)
        return out + [int(torch.multinomial(residual / residual.sum(), 1, generator=generator))]
    p = torch.softmax(target_logits[len(draft_tokens)] / scale, dim=-1)
    generator.manual_seed(seed * 4096 + 3000)
    return out + [int(torch.multinomial(p, 1, generator=generator))]


def mtp_verify_draft_with_seed(draft_model, target_model, input_ids, num_draft_tokens, temperature, seed, *,
                               thread_temperature):
    prompt = input_ids.shape[1]
    generator = torch.Generator()
    ids, drafts, draft_logits = input_ids, [], []
    for i in range(num_draft_tokens):  # the caller's sampler: the draft's law at the request's temperature
        logits = draft_model(ids)[0, -1]
        generator.manual_seed(seed * 4096 + i)
        token = int(torch.multinomial(torch.softmax(logits / temperature, dim=-1), 1, generator=generator))
        drafts.append(token)
        draft_logits.append(logits)
        ids = torch.cat([ids, torch.tensor([[token]])], dim=1)
    target_logits = target_model(ids)[0, prompt - 1:]  # [K+1, V]
    return torch.tensor(rejection_sample_draft(drafts, draft_logits, target_logits,
                                               temperature if thread_temperature else None, seed))


def buggy(draft_model, target_model, input_ids, num_draft_tokens, temperature, top_k, top_p, min_p, seed):
    return mtp_verify_draft_with_seed(draft_model, target_model, input_ids, num_draft_tokens, temperature, seed,
                                      thread_temperature=False)


def fixed(draft_model, target_model, input_ids, num_draft_tokens, temperature, top_k, top_p, min_p, seed):
    return mtp_verify_draft_with_seed(draft_model, target_model, input_ids, num_draft_tokens, temperature, seed,
                                      thread_temperature=True)
