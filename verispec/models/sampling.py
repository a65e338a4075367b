"""The sampling law of a model's next token: temperature, then top-k, then top-p, as transformers samples.

Speculative decoding is lossless only when the draft tokens are drawn from exactly the q the verifier is
handed, and when the target law p the verifier preserves is the law plain sampling would use (docs/reference.md,
trap 8: a draft filtered by top-k while the verifier sees the unfiltered q, or bf16 sampling against a
float32 q, silently breaks losslessness). ``Sampling.probabilities`` is that one law, computed in float64
from a model's logits and applied identically to the target and the draft; drafting samples from its
output and the verifier receives the same array.

Semantics follow transformers' logits warpers in their generation order (``TemperatureLogitsWarper``,
``TopKLogitsWarper``, ``TopPLogitsWarper``), so plain sampling here has the law of ``generate(do_sample=True)``
with the same settings (tests/models/test_models.py holds them equal): top-k keeps every token whose logit is at
least the k-th largest (ties at the threshold are kept); top-p sorts the tokens by probability, drops those
whose cumulative probability from the least likely up is at most 1 - top_p, and always keeps the most likely
token. Temperature 0 is greedy decoding: all mass on the largest logit (the smallest token id among tied
maxima).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from verispec.errors import VerispecError


@dataclass(frozen=True)
class Sampling:
    """Temperature (>= 0; 0 is greedy), top-k (a positive integer or None) and top-p (in (0, 1] or None)."""

    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None

    def __post_init__(self):
        temperature = self.temperature
        if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not math.isfinite(
                temperature) or temperature < 0:
            raise VerispecError(f"temperature must be a finite number >= 0 (0 is greedy), got {temperature!r}")
        if self.top_k is not None and (isinstance(self.top_k, bool) or not isinstance(self.top_k, int)
                                       or self.top_k < 1):
            raise VerispecError(f"top-k must be a positive integer (or none), got {self.top_k!r}")
        if self.top_p is not None and (isinstance(self.top_p, bool) or not isinstance(self.top_p, (int, float))
                                       or not 0 < self.top_p <= 1):
            raise VerispecError(f"top-p must lie in (0, 1] (or none), got {self.top_p!r}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def probabilities(self, logits):
        """The sampling law [..., V] in float64 on the logits' device, from logits [..., V] (any float dtype)."""
        import torch

        scores = logits.to(torch.float64)
        if self.greedy:
            best = torch.argmax(scores, dim=-1, keepdim=True)  # the first maximum: the smallest id
            return torch.zeros_like(scores).scatter_(-1, best, 1.0)
        scores = scores / self.temperature
        removed = torch.zeros_like(scores, dtype=torch.bool)
        top = None
        if self.top_k is not None:
            k = min(self.top_k, scores.shape[-1])
            top = torch.topk(scores, k, dim=-1)  # [..., k], largest first
            removed |= scores < top.values[..., -1:]
            if k < scores.shape[-1] and bool(((~removed).sum(-1) != k).any()):
                top = None  # ties at the k-th value keep more than k tokens: sort the whole vocabulary below
        if self.top_p is not None and self.top_p < 1:
            if top is not None:
                # top-k kept exactly the k tokens of ``top``: sort those instead of the whole vocabulary (a sort of
                # 151,936 scores per row costs 6 ms on a CPU, 86 ms for a 20-node tree). Ordered as the stable sort
                # of the masked vocabulary orders them: by score, ties by token id.
                ids, by_id = torch.sort(top.indices, dim=-1)  # [..., k]
                ordered, within = torch.sort(torch.gather(top.values, -1, by_id), dim=-1, stable=True)
                order = torch.gather(ids, -1, within)  # [..., k] token ids, least likely first
            else:
                masked = scores.masked_fill(removed, -math.inf)
                ordered, order = torch.sort(masked, dim=-1, stable=True)  # least likely first
            cumulative = torch.softmax(ordered, dim=-1).cumsum(dim=-1)
            drop = cumulative <= 1 - self.top_p
            drop[..., -1] = False  # the most likely token always stays
            removed = removed.scatter(-1, order, drop | removed.gather(-1, order))
        return torch.softmax(scores.masked_fill(removed, -math.inf), dim=-1)
