"""vLLM: the draft's Gumbel noise and the recovery draw keyed by one Philox (seed, position)
(vllm-project/vllm#47386, #54282, 2026-08-28).

In the V2 model runner a probabilistic draft token is sampled by ``gumbel_sample(logits, temperature, seed, pos)``:
Gumbel-max with noise from Philox keyed by the request's seed and the token's position. The rejection sampler keys
its recovery draw after a rejection (``gumbel_block_argmax``) by the same (seed, position), so "the recovery Gumbel
noise on rejection ... is therefore the identical noise vector that selected the rejected draft token" (#47386).
Given that the draft x won the race under q, every other token's noise is truncated below x's, most tightly for
the tokens q favours, so the recovered token leans away from them and the step's output is not p. The fix
(#54282) "adds a salt (1 << 30) to the offset of the draft's Philox stream", so draft noise, acceptance uniform and
recovery noise are independent.

The re-creation keeps the engine's shape: drafting by ``sample_draft`` through ``gumbel_sample`` per request and
position, then ``probabilistic_rejection_sample`` over the flattened ``target_logits`` / ``draft_logits``
``[num_logits, V]`` with ``draft_sampled``, ``expanded_idx_mapping``, ``expanded_local_pos``, per-request ``seed``
and ``temperature`` and per-token ``pos``; the acceptance uniform is ``tl.rand(seed, pos)`` and each Gumbel vector
reads ``tl.rand(gumbel_seed, vocab offsets)`` with ``gumbel_seed`` a fixed function of (seed, pos) (the kernel's
``tl.randint(seed, pos)``), both through ``verispec.keyed.rand``; greedy requests draw nothing. Left out: Triton
blocks, CUDA graphs, top-k/top-p (the V2 spec path takes temperature only), the next step's bookkeeping. Written for
verispec from the threads' description; no code copied.

The reused race is read twice through its key, so exact mode refuses it and the check runs black-box: on
p = (0.59, 0.4, 0.01), q = (0.35, 0.01, 0.64), one draft, T = 1, the bug's TV is 0.0856 (a 2,000,000-run
simulation of the race: token 1 emitted with probability 0.486 against 0.4), and the check is powered for 0.06.
"""

from __future__ import annotations

import torch

from verispec import keyed

BUG = {
    "repository": "vllm-project/vllm",
    "threads": ["vllm-project/vllm#47386", "vllm-project/vllm#54282"],
    "url": "https://github.com/vllm-project/vllm/pull/54282",
    "date": "2026-08-28",
    "title": "draft Gumbel noise and recovery noise share one Philox (seed, position)",
    "class": "keyed randomness reuse",
    "layout": "step-ragged", "tree": "chain:1",
    "target": [0.59, 0.4, 0.01], "draft": [0.35, 0.01, 0.64],
    "sampling": "temperature=1",
    "rng": "capture",
    "mode": "blackbox", "detect_tv": 0.06,
}

#: #54282's salt: the draft's Philox offsets live in a range of their own.
DRAFT_SALT = 1 << 30


def _gumbel_seed(seed: int, pos: int) -> int:
    """The per-(request, position) Philox seed of a Gumbel vector: the kernel's ``tl.randint(seed, pos)``, a fixed
    function of the pair (here the pair packed into one integer; positions stay below 2**32)."""
    return (int(seed) << 32) | int(pos)


def _gumbel_noise(seed: int, pos: int, vocab_size: int) -> torch.Tensor:
    """Gumbel noise [V] keyed by (seed, pos): -log(-log u) with u = tl.rand(gumbel_seed, vocab offsets)."""
    u = keyed.rand(_gumbel_seed(seed, pos), torch.arange(vocab_size))  # [V] float64
    return -torch.log(-torch.log(u))


def gumbel_sample(logits: torch.Tensor, temperature: float, seed: int, pos: int) -> int:
    """One token from softmax(logits / temperature) by Gumbel-max keyed by (seed, pos); argmax when greedy."""
    if temperature == 0:
        return int(torch.argmax(logits))
    return int(torch.argmax(logits / temperature + _gumbel_noise(seed, pos, logits.shape[-1])))


def sample_draft(draft_model, input_ids, num_draft_tokens, temperature, seeds, *, salted: bool):
    """Each request's drafts, drawn autoregressively by gumbel_sample at the drafted token's position (salted by
    #54282's fix). Returns (draft_sampled [num_drafts] int64, draft_logits [num_drafts, V] float64)."""
    prompt = input_ids.shape[1]
    sampled, logits_rows = [], []
    for request in range(len(num_draft_tokens)):
        ids = input_ids[request:request + 1]
        for i in range(int(num_draft_tokens[request])):
            logits = draft_model(ids)[0, -1]  # [V]
            pos = prompt + i  # the position the draft token will take
            token = gumbel_sample(logits, float(temperature[request]), int(seeds[request]),
                                  pos + DRAFT_SALT if salted else pos)
            sampled.append(token)
            logits_rows.append(logits)
            ids = torch.cat([ids, torch.tensor([[token]])], dim=1)
    vocab = draft_model(input_ids[:1]).shape[-1]
    return (torch.tensor(sampled, dtype=torch.int64),
            torch.stack(logits_rows) if logits_rows else torch.empty((0, vocab), dtype=torch.float64))


def probabilistic_rejection_sample(target_logits, draft_logits, draft_sampled, expanded_idx_mapping,
                                   expanded_local_pos, num_draft_tokens, seed, pos, temperature):
    """Verify every request's drafts: accept x with u = tl.rand(seed, pos) when u * q(x) < p(x); on the first
    rejection emit the recovered token argmax((p - q)+ / E), E = -log of the Gumbel uniforms keyed by (seed, pos);
    when all are accepted, the bonus token by gumbel_sample at its position.

    target_logits [num_logits, V]: each request's rows for its drafts, then its bonus row; draft_logits
    [num_drafts, V], draft_sampled [num_drafts]; expanded_idx_mapping [num_logits] (the row's request),
    expanded_local_pos [num_logits] (the row's index within its request); seed, temperature [num_reqs];
    pos [num_logits]. Returns sampled [num_reqs, max(num_draft_tokens) + 1], padded with -1."""
    num_reqs = len(num_draft_tokens)
    out = torch.full((num_reqs, int(num_draft_tokens.max()) + 1), -1, dtype=torch.int64)
    draft_row = 0
    done = [False] * num_reqs
    for row in range(target_logits.shape[0]):
        request, local = int(expanded_idx_mapping[row]), int(expanded_local_pos[row])
        count, temp = int(num_draft_tokens[request]), float(temperature[request])
        if done[request]:
            draft_row += local < count
            continue
        if local == count:  # the bonus row: every draft was accepted
            out[request, local] = gumbel_sample(target_logits[row], temp, int(seed[request]), int(pos[row]))
            continue
        x = int(draft_sampled[draft_row])
        draft_row += 1
        if temp == 0:
            best = int(torch.argmax(target_logits[row]))
            out[request, local] = best
            done[request] = best != x
            continue
        p = torch.softmax(target_logits[row] / temp, -1)
        q = torch.softmax(draft_logits[draft_row - 1] / temp, -1)
        u = keyed.rand(int(seed[request]), torch.tensor([int(pos[row])]))[0]
        if u * q[x] < p[x]:
            out[request, local] = x
            continue
        residual = torch.clamp(p - q, min=0)
        e = -torch.log(keyed.rand(_gumbel_seed(int(seed[request]), int(pos[row])), torch.arange(p.shape[-1])))
        out[request, local] = int(torch.argmax(residual / e))  # gumbel_block_argmax of log residual
        done[request] = True
    return out


def _step(draft_model, target_model, input_ids, num_draft_tokens, temperature, seeds, *, salted: bool):
    prompt = input_ids.shape[1]
    draft_sampled, draft_logits = sample_draft(draft_model, input_ids, num_draft_tokens, temperature, seeds,
                                               salted=salted)
    rows, mapping, local_pos, pos = [], [], [], []
    start = 0
    for request in range(len(num_draft_tokens)):
        count = int(num_draft_tokens[request])
        drafts = draft_sampled[start:start + count]
        start += count
        ids = torch.cat([input_ids[request:request + 1], drafts[None]], dim=1)
        rows.append(target_model(ids)[0, prompt - 1:])  # [count + 1, V]: the drafts' rows, then the bonus row
        mapping += [request] * (count + 1)
        local_pos += list(range(count + 1))
        pos += [prompt + i for i in range(count + 1)]
    return probabilistic_rejection_sample(torch.cat(rows), draft_logits, draft_sampled, torch.tensor(mapping),
                                          torch.tensor(local_pos), num_draft_tokens, seeds, torch.tensor(pos),
                                          temperature)


def buggy(draft_model, target_model, input_ids, num_draft_tokens, temperature, top_k, top_p, min_p, seeds):
    """Before #54282: the draft's Gumbel noise keyed by the drafted token's own (seed, pos), which the recovery
    reads again."""
    return _step(draft_model, target_model, input_ids, num_draft_tokens, temperature, seeds, salted=False)


def fixed(draft_model, target_model, input_ids, num_draft_tokens, temperature, top_k, top_p, min_p, seeds):
    """#54282: the draft's Philox offsets salted by 1 << 30."""
    return _step(draft_model, target_model, input_ids, num_draft_tokens, temperature, seeds, salted=True)
