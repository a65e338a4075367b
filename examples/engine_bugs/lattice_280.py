"""lattice: the speculative path's argmax breaks ties toward the last index, every other greedy path toward the first
(ohdearquant/lattice#280, fix PR #281, 2026-06-24).

"``speculative::argmax`` breaks ties toward the last max index, but every other greedy path in the engine breaks
ties toward the first index. Since speculative decoding is documented as a pure speedup (output must be
token-identical to plain greedy), a tied top logit makes speculative output diverge from non-speculative greedy"
(#280): the function used ``iter().enumerate().max_by(...)``, and Rust's ``max_by`` "returns the last element among
equals", while the engine's greedy decode, ``argmax_f32_scalar`` and ``torch.argmax`` keep the first. The fix
(#281): "``argmax`` -> a first-wins loop matching ``sampling::argmax_f32_scalar``".

The re-creation is a batch step in the engine's shape: greedy requests draft with ``speculative::argmax`` and are
verified by ``verify_draft`` (the target's ``argmax`` at each position, drafts kept while equal, the first mismatch's
choice committed), sampled requests draft from the draft law and are verified by ``rejection_sample_draft`` (the
engine's Leviathan rule from #46, seeded per request: accept with min(1, p/q), else the residual norm(max(p - q,
0)), the bonus from p). ``argmax`` is written as Rust's ``max_by`` scan (a later equal value replaces the best) and,
fixed, as the first-wins loop (only a strictly larger value does). Left out: the n-gram and MTP drafters' own
proposals (drafts come from the draft model), KV caches, Metal kernels. Written for verispec from the threads'
description; no code copied.

Check: ``step-ragged`` (request 1 sampled at temperature 1 with one draft; requests 0 and 2 greedy, with 1 and 0
drafts, whose outputs verispec knows: plain greedy with ties to the smallest id), V = 3, target p = (0.4, 0.4,
0.2), draft (0.2, 0.3, 0.5). The target's top two probabilities are tied, so the last-wins argmax commits token 1
where greedy decoding commits token 0, and every step's greedy rows are wrong: exact TV 1 (all the mass on
verispec's FILLER outcome), and 9e-17 for the first-wins argmax. The sampled request is correct in both.
"""

from __future__ import annotations

import torch

BUG = {
    "repository": "ohdearquant/lattice",
    "threads": ["ohdearquant/lattice#280", "ohdearquant/lattice#281"],
    "url": "https://github.com/ohdearquant/lattice/issues/280",
    "date": "2026-06-24",
    "title": "speculative argmax breaks ties last-wins, plain greedy first-wins",
    "class": "other",
    "layout": "step-ragged", "tree": "chain:1",
    "target": [0.4, 0.4, 0.2], "draft": [0.2, 0.3, 0.5],
    "sampling": "temperature=1",
    "rng": "capture",
    "mode": "auto",
}


def argmax(logits, *, first_wins):
    """``speculative::argmax`` over a row: ``first_wins`` False is Rust's ``max_by`` (a later equal value wins)."""
    best_index, best_value = 0, float("-inf")
    for index, value in enumerate(logits.tolist()):
        if value > best_value or (not first_wins and value == best_value):
            best_index, best_value = index, value
    return best_index


def verify_draft(draft_tokens, target_logits, *, first_wins):
    """Greedy verification: ``target_logits`` [K+1, V], row i the target after the drafts before i."""
    out = []
    for i, draft_token in enumerate(draft_tokens):
        choice = argmax(target_logits[i], first_wins=first_wins)
        if choice != draft_token:
            return out + [choice]
        out.append(draft_token)
    return out + [argmax(target_logits[len(draft_tokens)], first_wins=first_wins)]


def rejection_sample_draft(draft_tokens, draft_logits, target_logits, temperature, generator, seed):
    """Leviathan et al.'s rule: ``draft_logits`` [K, V], ``target_logits`` [K+1, V]; uniforms keyed by position."""
    out = []
    for i, x in enumerate(draft_tokens):
        p = torch.softmax(target_logits[i] / temperature, dim=-1)
        q = torch.softmax(draft_logits[i] / temperature, dim=-1)
        generator.manual_seed(seed * 4096 + 1000 + i)
        if float(torch.rand(1, dtype=torch.float64, generator=generator)) * float(q[x]) < float(p[x]):
            out.append(x)
            continue
        residual = torch.clamp(p - q, min=0)
        generator.manual_seed(seed * 4096 + 2000 + i)
        return out + [int(torch.multinomial(residual / residual.sum(), 1, generator=generator))]
    p = torch.softmax(target_logits[len(draft_tokens)] / temperature, dim=-1)
    generator.manual_seed(seed * 4096 + 3000)
    return out + [int(torch.multinomial(p, 1, generator=generator))]


def _request(draft_model, target_model, ids, count, temperature, seed, first_wins):
    prompt = ids.shape[1]
    generator = torch.Generator()
    drafts, draft_logits = [], []
    for i in range(count):
        logits = draft_model(ids)[0, -1]
        if temperature == 0:
            token = argmax(logits, first_wins=first_wins)
        else:
            generator.manual_seed(seed * 4096 + i)
            token = int(torch.multinomial(torch.softmax(logits / temperature, dim=-1), 1, generator=generator))
        drafts.append(token)
        draft_logits.append(logits)
        ids = torch.cat([ids, torch.tensor([[token]])], dim=1)
    target_logits = target_model(ids)[0, prompt - 1:]  # [K+1, V]
    if temperature == 0:
        return verify_draft(drafts, target_logits, first_wins=first_wins)
    return rejection_sample_draft(drafts, draft_logits, target_logits, temperature, generator, seed)


def _step(draft_model, target_model, input_ids, num_draft_tokens, temperature, seeds, first_wins):
    count = input_ids.shape[0]
    out = torch.full((count, int(num_draft_tokens.max()) + 1), -1, dtype=torch.int64)
    for b in range(count):
        emitted = _request(draft_model, target_model, input_ids[b:b + 1], int(num_draft_tokens[b]),
                           float(temperature[b]), int(seeds[b]), first_wins)
        out[b, :len(emitted)] = torch.tensor(emitted)
    return out


def buggy(draft_model, target_model, input_ids, num_draft_tokens, temperature, top_k, top_p, min_p, seeds):
    return _step(draft_model, target_model, input_ids, num_draft_tokens, temperature, seeds, first_wins=False)


def fixed(draft_model, target_model, input_ids, num_draft_tokens, temperature, top_k, top_p, min_p, seeds):
    return _step(draft_model, target_model, input_ids, num_draft_tokens, temperature, seeds, first_wins=True)
