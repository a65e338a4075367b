"""vLLM: min_p dropped on every verified target token, honoured by the bonus token only
(vllm-project/vllm#42744, #42802, 2026-05-16).

``RejectionSampler.apply_logits_processors`` "only iterates ``sampling_metadata.logitsprocs.non_argmax_invariant``"
(#42744), and min-p is registered as argmax-invariant ("Min-p never impacts greedy sampling"), so "min_p is silently
dropped on every verified target token - only the bonus token via the regular ``Sampler`` path honors it" (#42802).
The verified positions then follow the target at the request's temperature without the min-p filter: a token below
min_p times the largest probability, which the request forbids, is accepted as a draft or drawn as a recovered
token. The fix applies min-p to the ``[sum(num_draft_tokens), V]`` verification logits too, with each request's
min_p repeated over its draft rows (``apply_with_spec_decode(logits, num_draft_tokens)``).

The re-creation keeps V1's shape: ``RejectionSampler.forward``-like ``rejection_sampler_forward`` over the flattened
target logits ``[num_tokens + num_reqs, V]`` split by ``target_logits_indices`` / ``bonus_logits_indices``,
``cu_num_draft_tokens``, per-request ``temperature`` / ``min_p`` and per-request ``torch.Generator``s seeded by the
request's seed; the bonus token sampled first by the regular sampler (temperature and min-p, an exponential race),
then ``rejection_sample`` (accept x when u <= p(x) / q(x), u from the request's generator) and the recovered token
``argmax((p - q)+ / E)`` with E exponential from that generator. Drafts come from the drafter's q = softmax(draft
logits / T) (the drafter takes temperature only) by an exponential race on the global generator, as V1's EAGLE
proposer draws them; greedy requests take argmaxes and draw nothing. Left out: Triton kernels, logprobs, the other
logits processors, the guard that today refuses min_p with spec decode (#42802 removes it). Written for verispec
from the threads' description; no code copied.

On p = (0.6, 0.3, 0.1), q = (0.2, 0.4, 0.4), one draft, T = 1, min_p = 0.2, the request asks for (2/3, 1/3, 0);
the bug's first token follows (0.6, 0.3, 0.1), TV 0.1 exactly (checked in exact mode).
"""

from __future__ import annotations

import torch

BUG = {
    "repository": "vllm-project/vllm",
    "threads": ["vllm-project/vllm#42802", "vllm-project/vllm#42744"],
    "url": "https://github.com/vllm-project/vllm/pull/42802",
    "date": "2026-05-16",
    "title": "min_p dropped on verified target tokens; only the bonus token honours it",
    "class": "sampling settings applied to some tokens",
    "layout": "step-ragged", "tree": "chain:1",
    "target": [0.6, 0.3, 0.1], "draft": [0.2, 0.4, 0.4],
    "sampling": "temperature=1,min_p=0.2",
    "rng": "capture",
    "mode": "auto",
}


def apply_min_p(logits: torch.Tensor, min_p: torch.Tensor) -> torch.Tensor:
    """MinPLogitsProcessor: mask tokens whose probability is below min_p times the row's largest.
    logits [rows, V], min_p [rows]."""
    probs = torch.softmax(logits, -1)
    threshold = min_p[:, None] * probs.max(-1, keepdim=True).values
    return logits.masked_fill(probs < threshold, float("-inf"))


def apply_with_spec_decode(logits: torch.Tensor, min_p: torch.Tensor, num_draft_tokens: torch.Tensor):
    """#42802's addition: min-p on the verification rows, each request's min_p repeated over its drafts."""
    return apply_min_p(logits, min_p.repeat_interleave(num_draft_tokens))


def _race(probs: torch.Tensor, generator) -> int:
    """One token from ``probs`` [V] by the exponential race argmax(probs / E), E from ``generator`` (None: global)."""
    noise = torch.empty_like(probs).exponential_(generator=generator)
    return int((probs / noise).argmax(-1))


def propose(draft_model, input_ids, num_draft_tokens, temperature):
    """The drafter: each request's drafts from softmax(logits / T) by a race on the global generator (argmax when
    greedy). Returns (draft_token_ids [num_tokens] int64, draft_probs [num_tokens, V] float64)."""
    tokens, probs_rows = [], []
    for request in range(len(num_draft_tokens)):
        ids = input_ids[request:request + 1]
        temp = float(temperature[request])
        for _ in range(int(num_draft_tokens[request])):
            logits = draft_model(ids)[0, -1]  # [V]
            if temp == 0:
                token, probs = int(logits.argmax()), torch.softmax(logits, -1)
            else:
                probs = torch.softmax(logits / temp, -1)
                token = _race(probs, None)
            tokens.append(token)
            probs_rows.append(probs)
            ids = torch.cat([ids, torch.tensor([[token]])], dim=1)
    return torch.tensor(tokens, dtype=torch.int64), torch.stack(probs_rows)


def rejection_sample(draft_token_ids, cu_num_draft_tokens, draft_probs, target_probs, target_logits,
                     bonus_token_ids, is_greedy, generators):
    """Each request's accepted drafts, then its recovered or bonus token. draft_token_ids [num_tokens],
    cu_num_draft_tokens [num_reqs], draft_probs / target_probs / target_logits [num_tokens, V], bonus_token_ids
    [num_reqs], is_greedy [num_reqs]. Returns output_token_ids [num_reqs, max_spec_len + 1], padded with -1."""
    counts = torch.diff(cu_num_draft_tokens, prepend=torch.zeros(1, dtype=torch.int64))
    out = torch.full((len(counts), int(counts.max()) + 1), -1, dtype=torch.int64)
    for request, count in enumerate(counts.tolist()):
        start = int(cu_num_draft_tokens[request]) - count
        if not is_greedy[request]:
            uniform_probs = torch.rand(count, dtype=torch.float64, generator=generators[request])
        for i in range(count):
            row, x = start + i, int(draft_token_ids[start + i])
            if is_greedy[request]:
                best = int(target_logits[row].argmax())
                out[request, i] = best
                if best != x:
                    break
                continue
            p, q = target_probs[row], draft_probs[row]
            if q[x] > 0 and p[x] / q[x] >= uniform_probs[i]:
                out[request, i] = x
                continue
            residual = torch.clamp(p - q, min=0)
            out[request, i] = _race(residual, generators[request])  # the recovered token
            break
        else:
            out[request, count] = int(bonus_token_ids[request])
    return out


def rejection_sampler_forward(target_logits, draft_token_ids, draft_probs, num_draft_tokens, temperature, min_p,
                              seeds, *, min_p_on_drafts: bool):
    """V1's ``RejectionSampler.forward``: the bonus rows through the regular sampler, the verification rows through
    temperature and the logits processors, then ``rejection_sample``. target_logits [num_tokens + num_reqs, V]:
    each request's draft rows, then its bonus row."""
    cu_num_draft_tokens = torch.cumsum(num_draft_tokens, 0)
    ends = cu_num_draft_tokens + torch.arange(1, len(num_draft_tokens) + 1)
    bonus_logits_indices = ends - 1
    target_logits_indices = torch.cat([torch.arange(int(end) - 1 - int(n), int(end) - 1)
                                       for end, n in zip(ends, num_draft_tokens)])
    is_greedy = (temperature == 0).tolist()
    generators = [torch.Generator().manual_seed(int(seed)) for seed in seeds]
    safe_temperature = torch.where(temperature == 0, torch.ones_like(temperature), temperature)
    # The regular sampler on the bonus rows: temperature, min-p, then a race from the request's generator.
    bonus = apply_min_p(target_logits[bonus_logits_indices] / safe_temperature[:, None], min_p)
    bonus_token_ids = torch.tensor([int(row.argmax()) if is_greedy[r] else _race(torch.softmax(row, -1),
                                                                                 generators[r])
                                    for r, row in enumerate(bonus)])
    # The verification rows: temperature, then only the non-argmax-invariant processors (min-p is not one).
    logits = target_logits[target_logits_indices]
    scaled = logits / safe_temperature.repeat_interleave(num_draft_tokens)[:, None]
    if min_p_on_drafts:
        scaled = apply_with_spec_decode(scaled, min_p, num_draft_tokens)
    target_probs = torch.softmax(scaled, -1)
    return rejection_sample(draft_token_ids, cu_num_draft_tokens, draft_probs, target_probs, logits,
                            bonus_token_ids, is_greedy, generators)


def _step(draft_model, target_model, input_ids, num_draft_tokens, temperature, min_p, seeds, *, min_p_on_drafts):
    prompt = input_ids.shape[1]
    draft_token_ids, draft_probs = propose(draft_model, input_ids, num_draft_tokens, temperature)
    rows, start = [], 0
    for request in range(len(num_draft_tokens)):
        count = int(num_draft_tokens[request])
        ids = torch.cat([input_ids[request:request + 1], draft_token_ids[None, start:start + count]], dim=1)
        rows.append(target_model(ids)[0, prompt - 1:])  # [count + 1, V]
        start += count
    return rejection_sampler_forward(torch.cat(rows), draft_token_ids, draft_probs, num_draft_tokens, temperature,
                                     min_p, seeds, min_p_on_drafts=min_p_on_drafts)


def buggy(draft_model, target_model, input_ids, num_draft_tokens, temperature, top_k, top_p, min_p, seeds):
    """Before #42802: min-p skipped on the verification rows."""
    return _step(draft_model, target_model, input_ids, num_draft_tokens, temperature, min_p, seeds,
                 min_p_on_drafts=False)


def fixed(draft_model, target_model, input_ids, num_draft_tokens, temperature, top_k, top_p, min_p, seeds):
    """#42802: min-p applied to the verification rows, per request."""
    return _step(draft_model, target_model, input_ids, num_draft_tokens, temperature, min_p, seeds,
                 min_p_on_drafts=True)
