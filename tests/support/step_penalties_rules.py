"""Whole steps in the ``step-penalties`` layout (``verispec.external.step_penalties``): a correct one and broken
twins, each a bug class of penalties under speculative decoding.

The penalties are written here from their definitions (CTRL's repetition penalty, Keskar et al. 2019, section 4.1;
the OpenAI API's frequency and presence penalties), in torch, independently of ``verispec.models.penalties``. The
step drafts from the draft model under the requested sampling (no penalties: engines draft without them), and
verifies with Leviathan et al.'s token-level rule against the target penalised after the prompt, the request's
earlier output and the drafts before each position.
"""

from __future__ import annotations

import torch

from tests.support.step_rules import _draw, _uniform, processed


def penalised(logits, prompt: list, output: list, repetition: float, frequency: float, presence: float, *,
              one_sign: bool = False):
    """Raw logits [V] (float64) after ``prompt`` and ``output`` token ids, penalised; ``one_sign`` (broken): the
    repetition penalty multiplies every logit, so a positive one rises instead of falling."""
    size = logits.shape[-1]
    counts = torch.zeros(size, dtype=torch.float64)
    for token in output:
        counts[token] += 1
    seen = counts > 0
    for token in prompt:
        seen[token] = True
    scaled = logits * repetition if one_sign else torch.where(logits > 0, logits / repetition, logits * repetition)
    return torch.where(seen, scaled, logits) - frequency * counts - presence * (counts > 0).to(torch.float64)


def _step(draft_model, target_model, input_ids, output_ids, count, settings, penalties, seed, *, history=True,
          prompt_as_output=False, bonus_without_drafts=False, one_sign=False):
    prompt, earlier = input_ids[0].tolist(), output_ids[0].tolist()
    ids = torch.cat([input_ids, output_ids], dim=1)
    before = ids.shape[1]
    generator = torch.Generator()
    drafts, laws = [], []
    for i in range(int(count)):
        law = processed(draft_model(ids)[0, -1], *settings)
        drafts.append(_draw(law, generator, seed * 4096 + i))
        laws.append(law)
        ids = torch.cat([ids, torch.tensor([[drafts[-1]]])], dim=1)
    scores = target_model(ids)[0, before - 1:]

    def target(i: int, prior: list):
        output = (earlier if history else []) + prior + (prompt if prompt_as_output else [])
        repetition, frequency, presence = penalties
        return processed(penalised(scores[i], prompt, output, repetition, frequency, presence, one_sign=one_sign),
                         *settings)

    out = []
    for i, x in enumerate(drafts):
        p, q = target(i, drafts[:i]), laws[i]
        if _uniform(generator, seed * 4096 + 1000 + i) * q[x] < p[x]:
            out.append(x)
            continue
        residual = torch.clamp(p - q, min=0)
        return out + [_draw(residual / residual.sum(), generator, seed * 4096 + 2000 + i)]
    bonus = target(len(drafts), [] if bonus_without_drafts else drafts)
    return out + [_draw(bonus, generator, seed * 4096 + 3000)]


def _entry(name: str, doc: str, **broken):
    def step(draft_model, target_model, input_ids, output_ids, num_draft_tokens, temperature, top_k, top_p, min_p,
             repetition_penalty, frequency_penalty, presence_penalty, seed):
        return torch.tensor(_step(draft_model, target_model, input_ids, output_ids, num_draft_tokens,
                                  (temperature, top_k, top_p, min_p),
                                  (repetition_penalty, frequency_penalty, presence_penalty), seed, **broken))

    step.__name__ = step.__qualname__ = name
    step.__doc__ = doc
    return step


penalties_step = _entry("penalties_step", "Correct: every position penalised after the prompt, the earlier output "
                        "and the drafts before it.")
penalties_step_no_history = _entry(
    "penalties_step_no_history", "Broken: the request's earlier output is not read (only the step's drafts count).",
    history=False)
penalties_step_prompt_as_output = _entry(
    "penalties_step_prompt_as_output", "Broken: the prompt's tokens are counted as output (frequency and presence "
    "penalise them too).", prompt_as_output=True)
penalties_step_bonus_without_drafts = _entry(
    "penalties_step_bonus_without_drafts", "Broken: the bonus token is penalised without the drafts accepted before "
    "it (the spec tokens not combined with the output).", bonus_without_drafts=True)
penalties_step_one_sign = _entry(
    "penalties_step_one_sign", "Broken: the repetition penalty multiplies every logit, positive ones too.",
    one_sign=True)
