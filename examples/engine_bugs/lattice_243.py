"""lattice: n-gram speculative decoding commits the first draft token without verifying it
(ohdearquant/lattice#243, fix PR #258, 2026-06-23).

"``verify_draft`` ... commits the first draft token without verifying it against the target model's prediction at
the current position. This makes n-gram speculative decoding lossy" (#243). The loop fed each draft token to the
target and compared the target's choice after draft i with draft i + 1: "``forward_fn(draft[0], pos)`` conditions on
``draft[0]`` already being the token at ``pos`` and returns the logits for ``pos+1``. The target's actual greedy
choice at ``pos`` ... is never computed, so ``draft[0]`` is never checked. A length-1 draft is therefore always
accepted verbatim." The fix (#258): "``verify_draft`` now takes ``current_token`` (the last committed token) and
feeds it first, then each accepted draft", so the target's choice that gates draft i is read at the position
before it; greedy speculation is then token-identical to greedy decoding.

The re-creation is a batch step in the engine's shape: greedy requests go through ``verify_draft(draft_tokens,
forward_fn, current_token)`` with ``forward_fn(token)`` the target's logits after the sequence extended by that
token (the KV cache's position bookkeeping left out), the accepted drafts committed and then the target's choice
after them; sampled requests go through ``rejection_sample_draft`` (the engine's Leviathan rule from #46, seeded
per request), which the bug does not touch. Drafts come from the draft model (argmax for greedy requests) rather
than an n-gram lookup: the loop's offset does not depend on where the drafts came from. Left out: KV caches,
the budget clamp of #242, stopping on EOS. Written for verispec from the threads' description; no code copied.

Check: ``step-ragged`` (request 1 sampled at temperature 1 with one draft; requests 0 and 2 greedy, with 1 and 0
drafts, whose outputs verispec knows), V = 3, target p = (0.5, 0.3, 0.2), draft (0.2, 0.3, 0.5): greedy request 0
drafts token 2, which greedy decoding would replace by token 0, and the old loop commits it: exact TV 1 (every
step's greedy row 0 is wrong), 1e-17 for the loop that feeds the current token first.
"""

from __future__ import annotations

import torch

BUG = {
    "repository": "ohdearquant/lattice",
    "threads": ["ohdearquant/lattice#243", "ohdearquant/lattice#258"],
    "url": "https://github.com/ohdearquant/lattice/issues/243",
    "date": "2026-06-23",
    "title": "verify_draft commits the first draft token unverified (logits read one position late)",
    "class": "wrong slice or offset",
    "layout": "step-ragged", "tree": "chain:1",
    "target": [0.5, 0.3, 0.2], "draft": [0.2, 0.3, 0.5],
    "sampling": "temperature=1",
    "rng": "capture",
    "mode": "auto",
}


def verify_draft(draft_tokens, forward_fn, current_token, position_start, *, feed_current_first):
    """Greedy verification; ``forward_fn(token, pos)`` feeds ``token`` at position ``pos`` and returns the logits
    for ``pos + 1``; the drafts belong at ``position_start``, ``position_start + 1``, ... Returns the committed
    tokens (accepted drafts, then the target's next choice). ``feed_current_first`` False is the loop before #258:
    draft i is fed at its own position and only draft i + 1 is checked."""
    if not feed_current_first:
        accepted, logits = 0, None
        for i, draft_token in enumerate(draft_tokens):
            logits = forward_fn(draft_token, position_start + i)
            model_choice = int(torch.argmax(logits))
            accepted += 1  # draft i counted accepted unconditionally
            if i + 1 < len(draft_tokens) and model_choice != draft_tokens[i + 1]:
                break
        if logits is None:  # no draft: an ordinary decode step
            return [int(torch.argmax(forward_fn(current_token, position_start - 1)))]
        return list(draft_tokens[:accepted]) + [int(torch.argmax(logits))]
    logits = forward_fn(current_token, position_start - 1)
    out = []
    for i, draft_token in enumerate(draft_tokens):
        model_choice = int(torch.argmax(logits))
        if model_choice != draft_token:
            return out + [model_choice]
        out.append(draft_token)
        logits = forward_fn(draft_token, position_start + i)
    return out + [int(torch.argmax(logits))]


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


def _request(draft_model, target_model, ids, count, temperature, seed, feed_current_first):
    prompt = ids.shape[1]
    generator = torch.Generator()
    drafts, draft_logits = [], []
    draft_ids = ids
    for i in range(count):
        logits = draft_model(draft_ids)[0, -1]
        if temperature == 0:
            token = int(torch.argmax(logits))
        else:
            generator.manual_seed(seed * 4096 + i)
            token = int(torch.multinomial(torch.softmax(logits / temperature, dim=-1), 1, generator=generator))
        drafts.append(token)
        draft_logits.append(logits)
        draft_ids = torch.cat([draft_ids, torch.tensor([[token]])], dim=1)
    if temperature > 0:
        target_logits = target_model(draft_ids)[0, prompt - 1:]  # [K+1, V]
        return rejection_sample_draft(drafts, draft_logits, target_logits, temperature, generator, seed)
    sequence = ids[0].tolist()

    def forward_fn(token, pos):
        """The target's logits for position pos + 1, with ``token`` at ``pos`` (a KV cache truncated there)."""
        del sequence[pos:]
        sequence.append(int(token))
        return target_model(torch.tensor([sequence]))[0, -1]

    return verify_draft(drafts, forward_fn, int(ids[0, -1]), prompt, feed_current_first=feed_current_first)


def _step(draft_model, target_model, input_ids, num_draft_tokens, temperature, seeds, feed_current_first):
    count = input_ids.shape[0]
    out = torch.full((count, int(num_draft_tokens.max()) + 1), -1, dtype=torch.int64)
    for b in range(count):
        emitted = _request(draft_model, target_model, input_ids[b:b + 1], int(num_draft_tokens[b]),
                           float(temperature[b]), int(seeds[b]), feed_current_first)
        out[b, :len(emitted)] = torch.tensor(emitted)
    return out


def buggy(draft_model, target_model, input_ids, num_draft_tokens, temperature, top_k, top_p, min_p, seeds):
    return _step(draft_model, target_model, input_ids, num_draft_tokens, temperature, seeds,
                 feed_current_first=False)


def fixed(draft_model, target_model, input_ids, num_draft_tokens, temperature, top_k, top_p, min_p, seeds):
    return _step(draft_model, target_model, input_ids, num_draft_tokens, temperature, seeds,
                 feed_current_first=True)
