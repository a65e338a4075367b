"""The sampling law of a model's next token: temperature, then top-k, then top-p, as transformers samples.

Speculative decoding is lossless only when the draft tokens are drawn from exactly the q the verifier is
handed, and when the target law p the verifier preserves is the law plain sampling would use (docs/guides/reference.md,
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

import numpy as np

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

        narrow = logits.dtype in (torch.float32, torch.bfloat16, torch.float16)  # at most 24 significant bits
        if self.top_k is not None and self.top_k < logits.shape[-1] and narrow and not self.greedy:
            law = self._top_k_law(logits)
            if law is not None:
                return law
        scores = logits.to(torch.float64)
        if self.greedy:
            best = torch.argmax(scores, dim=-1, keepdim=True)  # the first maximum: the smallest id
            return torch.zeros_like(scores).scatter_(-1, best, 1.0)
        if self.temperature != 1:
            scores = scores / self.temperature  # (x / 1 is x exactly: a pass over the vocabulary saved)
        if not self.filters:
            return torch.softmax(scores, dim=-1)  # nothing removed: the masked softmax below, without the mask
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
                # 151,936 scores per row costs 6 ms on a CPU, 86 ms for a 20-node tree)
                ordered, order = _by_score(top.values, top.indices)
            else:
                masked = scores.masked_fill(removed, -math.inf)
                ordered, order = torch.sort(masked, dim=-1, stable=True)  # least likely first
            drop = self._top_p_drop(ordered)
            removed = removed.scatter(-1, order, drop | removed.gather(-1, order))
        return torch.softmax(scores.masked_fill(removed, -math.inf), dim=-1)

    def _top_k_law(self, logits):
        """``probabilities`` with top-k on logits of at most 24 significant bits, from the k largest logits alone:
        None where ties at the k-th logit keep more than k tokens (the whole-vocabulary path then). Such logits keep
        their order in float64 after division by the temperature (distinct ones differ by at least 2^-24 relative,
        rounding moves them 2^-53), so these k are the tokens and scores the whole-vocabulary path keeps; the law is
        the softmax over them scattered into zeros, equal to that path's to rounding (a sum over k entries instead
        of V; tests/models/test_models.py), in three passes over the vocabulary instead of about ten."""
        import torch

        kept = self._top_k_kept(logits)
        if kept is None:
            return None
        values, ids = kept
        law = torch.zeros(logits.shape, dtype=torch.float64, device=logits.device)
        return law.scatter_(-1, ids, values)

    def _top_k_kept(self, logits):
        """(probabilities [..., k] float64, token ids [..., k]) of ``_top_k_law``'s k tokens, or None where ties at the
        k-th logit keep more than k tokens."""
        import torch

        k = self.top_k
        # k + 1 largest (k < V on this path): more than k logits reach the k-th largest exactly when the (k+1)-th
        # equals it, a test on k + 1 values instead of a [..., V] comparison and count (4x the top-k's own cost);
        # topk ranks NaN above every number, so a row with a NaN shows it here and takes the whole-vocabulary path
        top = torch.topk(logits, k + 1, dim=-1)                                       # [..., k + 1] largest first
        if bool((top.values[..., k] == top.values[..., k - 1]).any() or torch.isnan(top.values).any()):
            return None
        scores, ids = top.values[..., :k].to(torch.float64), top.indices[..., :k]
        if self.temperature != 1:
            scores = scores / self.temperature
        if self.top_p is not None and self.top_p < 1:
            scores, ids = _by_score(scores, ids)  # least likely first, ties by id
            scores = scores.masked_fill(self._top_p_drop(scores), -math.inf)
        return torch.softmax(scores, dim=-1), ids

    def compact_probabilities(self, logits):
        """``probabilities(logits)`` of logits [rows, V] as one ``CompactLaw`` a row, (support, values): the tokens
        of nonzero probability ascending and their probabilities, float64 host arrays, what
        ``verispec.simulator.problems.compact_law`` gives of each row of ``probabilities`` (the same values: the same
        softmax over the same k scores), without making the [rows, V] float64 law. Only on ``_top_k_law``'s path
        (top-k below V/2 on logits of at most 24 significant bits, no ties at the k-th logit); None elsewhere, where
        the caller takes ``probabilities``. ``support`` gives one row's law without torch's top-k too, for the
        selector's features, but equal to this one to rounding only; a stored law must be ``probabilities``'s."""
        import torch

        narrow = logits.dtype in (torch.float32, torch.bfloat16, torch.float16)
        if self.top_k is None or 2 * self.top_k >= logits.shape[-1] or not narrow or self.greedy:
            return None
        kept = self._top_k_kept(logits)
        if kept is None:
            return None
        values, ids = (array.cpu().numpy() for array in kept)                         # [rows, k] each
        order = np.argsort(ids, axis=-1)
        ids, values = np.take_along_axis(ids, order, -1), np.take_along_axis(values, order, -1)
        laws = []
        for row_ids, row_values in zip(ids, values):
            nonzero = row_values != 0  # top-p's dropped tokens and any probability that underflowed
            laws.append((row_ids[nonzero].astype(np.int64), row_values[nonzero]))
        return laws

    def _top_p_drop(self, ordered):
        """Which of the scores ``ordered`` [..., n] (least likely first) top-p drops: those whose cumulative
        probability from the least likely up is at most 1 - top_p; the most likely always stays."""
        import torch

        drop = torch.softmax(ordered, dim=-1).cumsum(dim=-1) <= 1 - self.top_p
        drop[..., -1] = False
        return drop

    def _top_p_drop_listed(self, ordered: list[float], logits: list[float], device) -> list[bool]:
        """``_top_p_drop`` of a few scores (least likely first) as Python floats: their softmax and running sums in
        float64 on the host, which differ from torch's by a few ulps (k terms: under 1e-14), so every decision is
        torch's unless a running sum comes within ``TOP_P_MARGIN`` of 1 - top_p; there torch decides, on the
        scores it computes itself from those tokens' ``logits`` on their device, as ``probabilities`` does. On a CPU
        after a model's forward the torch calls cost 0.1-0.2 ms a row (their code is cold); these sums,
        microseconds."""
        top = ordered[-1]
        weights = [math.exp(score - top) for score in ordered]
        total = math.fsum(weights)
        threshold = 1 - self.top_p
        drop, running = [], 0.0
        for weight in weights:
            running += weight / total
            if abs(running - threshold) <= TOP_P_MARGIN:
                import torch

                scores = torch.tensor(logits, dtype=torch.float64, device=device)
                if self.temperature != 1:
                    scores = scores / self.temperature
                return self._top_p_drop(scores).tolist()
            drop.append(running <= threshold)
        drop[-1] = False
        return drop

    @property
    def filters(self) -> bool:
        """Whether the law may leave tokens out (greedy, top-k, or top-p below 1): its support may be small."""
        return self.greedy or self.top_k is not None or (self.top_p is not None and self.top_p < 1)

    def support(self, logits):
        """The support of the law of one row of logits [V] and its probabilities, without a full-vocabulary law:
        (token ids ascending, probabilities) as Python lists (a few tokens, which readers sum over on the host), or
        None where that would take more than one pass over the vocabulary (no top-k: top-p alone sorts it, or no
        filter at all; ties at the k-th score, which keep more than k tokens).

        The kept tokens are exactly those of ``probabilities(logits)``: the same top-k (the k largest logits; the
        division by T keeps their order and their ties), and top-p's decisions, from running sums on the host that
        are within 1e-14 of torch's and handed to torch's own softmax and cumsum where one comes within
        ``TOP_P_MARGIN`` of the threshold (a sort is exact, so the k kept scores are ordered in Python). Their
        probabilities are a softmax over the kept scores, in float64 on the host: equal to the full law's to
        rounding (the full softmax sums the vocabulary in another order). The k + 1 largest logits come from one
        reduction over the vocabulary (``largest``) instead of ``torch.topk`` over all of it."""
        import torch

        if logits.ndim != 1:
            raise VerispecError(f"Sampling.support takes one row of logits [V], got shape {tuple(logits.shape)}")
        if self.greedy:
            return [int(torch.argmax(logits.to(torch.float64)))], [1.0]  # the first maximum, as ``probabilities``
        if self.top_k is None or self.top_k >= logits.shape[-1]:
            return None
        values, ids = largest(logits, self.top_k + 1, listed=True)  # [k + 1] each, largest first; ids a list
        values = values.tolist()  # the logits' own values as Python floats (float32 and float64 exactly)
        if values[-1] == values[-2]:
            return None  # a tie at the k-th score: top-k keeps every tied token
        # the scores ``probabilities`` compares, divided on the host (x / 1 is x); a division that rounds
        # differently from torch's by an ulp moves no top-k decision (distinct logits stay ordered, equal stay equal)
        scores = values if self.temperature == 1 else [value / self.temperature for value in values]
        kept = sorted(zip(scores[:-1], ids[:-1]))  # least likely first, ties by token id (a stable sort's order)
        if self.top_p is not None and self.top_p < 1:
            raw = dict(zip(ids, values))
            drop = self._top_p_drop_listed([score for score, _ in kept], [raw[token] for _, token in kept],
                                           logits.device)
            kept = [pair for pair, dropped in zip(kept, drop) if not dropped]
        kept.sort(key=lambda pair: pair[1])
        top = max(score for score, _ in kept)
        weights = [math.exp(score - top) for score, _ in kept]
        total = math.fsum(weights)
        return [token for _, token in kept], [weight / total for weight in weights]


#: How close a running sum of a support's probabilities may come to 1 - top_p before ``Sampling.support`` asks
#: torch's softmax and cumsum for top-p's decision (its own sums on the host are within 1e-14 of torch's).
TOP_P_MARGIN = 1e-12

#: Entries per block in ``largest``'s one reduction (the block maxima of Qwen's V = 151,936 are 1,187 values).
LARGEST_BLOCK = 128


def largest(row, count: int, *, listed: bool = False):
    """The ``count`` largest entries of a row [V] and their ids, largest first, as ``torch.topk(row, count)``
    gives them (equal entries may come with other ids; ``listed``: the ids as a Python list), from one reduction
    over the row: its block maxima (blocks of ``LARGEST_BLOCK`` entries), then ``topk`` over the ``count`` blocks
    with the largest maxima and the tail. Exact: if a block holding one of the ``count`` largest entries is not
    among those blocks, each of them has a maximum at least as large, so the candidates hold ``count`` entries at
    least that large either way. A float32 row on the CPU goes through the compiled kernel of the same
    reduction (``verispec.native.largest``: one pass, 0.08 against 0.15 ms at Qwen's V with the row cold) where
    this process has it."""
    import torch

    vocab = row.shape[-1]
    blocks = vocab // LARGEST_BLOCK
    if blocks < 4 * count:
        values, ids = torch.topk(row, count)
        return values, (ids.tolist() if listed else ids)
    if row.device.type == "cpu" and row.dtype == torch.float32 and not row.requires_grad and row.ndim == 1:
        from verispec.native import largest as native_largest

        found = native_largest(row.numpy(), count, LARGEST_BLOCK)
        if found is not None:
            values, ids = found
            return torch.from_numpy(values), (ids.tolist() if listed else torch.from_numpy(ids))
    split = blocks * LARGEST_BLOCK
    main = row[:split].reshape(blocks, LARGEST_BLOCK)  # [blocks, width]
    chosen = torch.topk(main.amax(dim=1), count).indices  # [count] blocks
    candidates = main[chosen].view(-1)  # [count * width]
    if split < vocab:  # the tail after the last whole block
        candidates = torch.cat([candidates, row[split:]])
    values, at = torch.topk(candidates, count)
    # a candidate's id from its place (a few Python integers: cheaper than the tensor operations)
    blocks_of = chosen.tolist()
    reach = count * LARGEST_BLOCK
    ids = [blocks_of[place // LARGEST_BLOCK] * LARGEST_BLOCK + place % LARGEST_BLOCK if place < reach
           else split + place - reach for place in at.tolist()]
    return values, (ids if listed else torch.tensor(ids, dtype=torch.int64, device=row.device))


def _by_score(values, ids):
    """(scores, token ids) [..., k] of the kept tokens, least likely first, in the order the stable sort of the
    masked vocabulary gives them: by score, ties by token id."""
    import torch

    ids, by_id = torch.sort(ids, dim=-1)  # [..., k]
    ordered, within = torch.sort(torch.gather(values, -1, by_id), dim=-1, stable=True)
    return ordered, torch.gather(ids, -1, within)
