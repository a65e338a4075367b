"""Uniforms overwritten before any read are unused (``verispec.external.rng.torch_fresh``): vLLM's V1 pattern, a
global ``torch.rand`` for the batch whose seeded slice is drawn again from the request's own generator. Token-level
verification of one draft (chain:1, Leviathan et al.): the first token follows p, and E[tau + 1] = 1 + sum min(p, q).
The recovery races exponential noise, as vLLM's does (capture follows uniforms only where it already follows noise).
Told that the global draw is unused, exact integration skips its line and gives the same law to the last bit in
fewer evaluations; code that reads the global draw before the refill keeps it used, and a follower that missed that
read (the planted ``note_use`` that sees nothing) never yields a LOSSLESS: exact integration's random probes find
the acceptance changing inside a box where no scanned line changes it, and refuse."""

from __future__ import annotations

import numpy as np
import pytest

from verispec.external.check import check_external
from verispec.external.exact import NotPiecewiseConstantError
from verispec.external.rng import torch_fresh as rng_torch_fresh
from verispec.simulator import ContextFreeProblem
from verispec.verdict import Verdict

torch = pytest.importorskip("torch")

P, Q = np.array([0.5, 0.3, 0.2]), np.array([0.2, 0.2, 0.6])
PROBLEM = ContextFreeProblem(P, Q)


def _verify(draft_tokens, draft_probs, target_probs, *, read_before=False):
    """draft_tokens [B, 1], draft_probs [B, 1, V], target_probs [B, 2, V] -> [B, 2]; ``read_before``: the
    acceptance uses a copy of the global draw taken before the refill (still a uniform, so still lossless)."""
    rows = torch.arange(draft_tokens.shape[0])
    x, p, q = draft_tokens[:, 0], target_probs[:, 0], draft_probs[:, 0]
    noise = torch.empty_like(p).exponential_()  # the recovery's race noise, drawn first (capture follows it)
    uniforms = torch.rand(draft_tokens.shape[0], dtype=torch.float64)  # the batch's global draw
    stale = uniforms.clone() if read_before else None
    uniforms[0:1].uniform_(generator=torch.Generator().manual_seed(7))  # the seeded request's own draw
    accept = (stale if read_before else uniforms) * q[rows, x] < p[rows, x]
    recovered = (torch.clamp(p - q, min=0) / noise).argmax(dim=-1)  # an exponential race: one draw from (p - q)+
    bonus = torch.multinomial(target_probs[:, 1], 1)[:, 0]
    return torch.stack([torch.where(accept, x, recovered), torch.where(accept, bonus, -1)], dim=1)


def refilled(draft_tokens, draft_probs, target_probs):
    return _verify(draft_tokens, draft_probs, target_probs)


def read_then_refilled(draft_tokens, draft_probs, target_probs):
    return _verify(draft_tokens, draft_probs, target_probs, read_before=True)


def _check(function):
    return check_external(function, "chain", "chain:1", problem=PROBLEM, mode="exact", arrays="torch",
                          rng="capture", per_row=True, time_budget=300)


def test_a_draw_refilled_before_any_read_is_skipped_and_the_law_is_the_same(monkeypatch):
    told = _check(refilled)
    assert told.verdict is Verdict.LOSSLESS and told.tv_distance < 1e-12
    assert abs(told.block_efficiency - (1 + np.minimum(P, Q).sum())) < 1e-12
    monkeypatch.setattr(rng_torch_fresh, "track", lambda capture, tensor, columns: None)
    scanned = _check(refilled)
    assert scanned.tv_distance == told.tv_distance and scanned.block_efficiency == told.block_efficiency
    assert told.evaluations < scanned.evaluations


def test_a_draw_read_before_its_refill_stays_used_and_a_follower_blind_to_that_read_is_caught(monkeypatch):
    kept = _check(read_then_refilled)
    assert kept.verdict is Verdict.LOSSLESS and kept.tv_distance < 1e-12
    assert abs(kept.block_efficiency - (1 + np.minimum(P, Q).sum())) < 1e-12
    monkeypatch.setattr(rng_torch_fresh, "note_use", lambda involved: None)  # planted: the clone is not seen
    try:  # the acceptance then seems not to depend on its uniform: the random probes inside a box see it does
        blind = _check(read_then_refilled)
    except NotPiecewiseConstantError:
        return
    assert blind.verdict is Verdict.LOSSY, blind  # never a LOSSLESS built on the skipped line
