"""Penalties that read the token history: repetition, frequency and presence, as vLLM applies them.

A penalised law is not a function of the logits alone: it reads the prompt and the tokens the request has emitted.
Speculative decoding keeps the penalised law only when the verifier penalises each position's target logits with
the history up to that position: the request's earlier output, then the drafts before the position (the bonus
token's after all of them), and the prompt for the repetition penalty alone.

The definitions are vLLM's (``vllm/model_executor/layers/utils.py:apply_penalties``, release 0.33), on raw logits
before temperature and the filters (``verispec.models.sampling``):

1. repetition r (> 0; 1 is off; Keskar et al. 2019, CTRL, section 4.1, and transformers'
   ``RepetitionPenaltyLogitsProcessor``): every token that occurs in the prompt or the output has its logit divided
   by r where the logit is > 0 and multiplied by r otherwise;
2. frequency f and presence a (the OpenAI API's parameter details): the logit of a token that occurs c times in the
   output (not the prompt) is lowered by f * c + a * [c > 0].

Where a logit is -inf (probability 0) it stays -inf. ``Penalties.apply`` is numpy float64 (the exact engine's small
vocabularies); an engine computes in float32, within the check's threshold.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from verispec.errors import VerispecError
from verispec.guard.limits import DEFAULT_PENALTIES
from verispec.models.sampling import read_parts

#: The parts of a penalties setting's text, in the order vLLM applies them.
PENALTY_PARTS = ("repetition", "frequency", "presence")


@dataclass(frozen=True)
class Penalties:
    """Repetition (> 0; 1 is off), frequency and presence (finite; 0 is off), applied as the module docstring
    states."""

    repetition: float = 1.0
    frequency: float = 0.0
    presence: float = 0.0

    def __post_init__(self):
        for name in PENALTY_PARTS:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise VerispecError(f"the {name} penalty must be a finite number, got {value!r}")
        if self.repetition <= 0:
            raise VerispecError(f"the repetition penalty must be > 0 (1 is off), got {self.repetition!r}")

    @classmethod
    def parse(cls, text: str) -> Penalties:
        """The setting of a text ``repetition=R,frequency=F,presence=A`` (every part optional, any order, each at
        most once; the empty text is no penalty); refused in one line (``VerispecError``) otherwise."""
        if not isinstance(text, str):
            raise VerispecError(f"a penalties setting is text such as '{DEFAULT_PENALTIES}', got {text!r}")
        parts = read_parts(text, PENALTY_PARTS, setting="the penalties", kind="penalty", example=DEFAULT_PENALTIES,
                           spelled=lambda name: name.replace("_penalty", ""))
        values = {}
        for name, value in parts.items():
            try:
                values[name] = float(value)
            except ValueError:
                raise VerispecError(f"the {name} penalty must be a number, got {value[:80]!r}") from None
        return cls(**values)

    def spec(self) -> str:
        """The canonical text (``parse`` gives it back)."""
        return ",".join(f"{name}={getattr(self, name)!r}" for name in PENALTY_PARTS)

    def as_dict(self) -> dict:
        return {name: getattr(self, name) for name in PENALTY_PARTS}

    @property
    def active(self) -> bool:
        return self.repetition != 1 or self.frequency != 0 or self.presence != 0

    def describe(self) -> str:
        """One line for reports."""
        if not self.active:
            return "no penalty"
        return (f"repetition {self.repetition:g} (prompt and output tokens), then frequency {self.frequency:g} and "
                f"presence {self.presence:g} (output tokens)")

    def apply(self, logits: np.ndarray, prompt, output) -> np.ndarray:
        """The penalised logits [V] (float64) of raw logits [V] after ``prompt`` and ``output`` (token ids)."""
        scores = np.array(logits, dtype=np.float64)
        size = scores.shape[-1]
        prompt, output = np.asarray(prompt, dtype=np.int64), np.asarray(output, dtype=np.int64)
        if np.any((prompt < 0) | (prompt >= size)) or np.any((output < 0) | (output >= size)):
            raise VerispecError(f"a history token lies outside the vocabulary 0..{size - 1}")
        counts = np.bincount(output, minlength=size).astype(np.float64)
        seen = counts > 0
        seen[prompt] = True
        if self.repetition != 1:
            scaled = np.where(scores > 0, scores / self.repetition, scores * self.repetition)
            scores = np.where(seen, scaled, scores)
        return scores - self.frequency * counts - self.presence * (counts > 0)


__all__ = ["DEFAULT_PENALTIES", "PENALTY_PARTS", "Penalties"]
