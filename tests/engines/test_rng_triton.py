"""Races inside Triton kernels under the interpreter (``verispec.external.rng_triton``): torch draws exponential
noise, a kernel takes ``argmax(w * (1 / E))``; exact mode reads it as one categorical draw from w.

The functions here are token-level verification in the ``chain`` layout with their own draws (``--rng capture``):
acceptance by a float64 ``torch.rand``, the recovered and the bonus token each by a race in a Triton kernel over a
noise row of their own, as vLLM's V1 sampler draws its recovered token. Correct, the law is the target's: on a
context-free problem the first token follows p (accepted with min(1, p/q), else (p - q)+ normalised), which the test
derives, so the exact TV is 0 up to float64. Broken twins: one kernel that adds the noise to the weights (a
continuous use, which exact mode must refuse rather than integrate), and one whose bonus race reads the recovery's
noise row again (two races on one noise: refused too)."""

from __future__ import annotations

import os

import numpy as np
import pytest

os.environ.setdefault("TRITON_INTERPRET", "1")  # the kernels run on the CPU in numpy
if os.environ.get("TRITON_INTERPRET") != "1":
    pytest.skip("TRITON_INTERPRET is set to something else in this process", allow_module_level=True)
torch = pytest.importorskip("torch")
triton = pytest.importorskip("triton")
tl = pytest.importorskip("triton.language")

from verispec.errors import VerispecError  # noqa: E402
from verispec.external.check import check_external  # noqa: E402
from verispec.simulator import ContextFreeProblem  # noqa: E402
from verispec.verdict import Verdict  # noqa: E402

BLOCK = 8  # larger than V: the masked entries of the block must never win


@triton.jit
def _race_kernel(out_ptr, weights_ptr, inv_q_ptr, vocab, BLOCK_SIZE: tl.constexpr, ADDITIVE: tl.constexpr):
    row = tl.program_id(0)
    offsets = tl.arange(0, BLOCK_SIZE)
    mask = offsets < vocab
    weights = tl.load(weights_ptr + row * vocab + offsets, mask=mask, other=0.0)
    inv_q = tl.load(inv_q_ptr + row * vocab + offsets, mask=mask, other=0.0)
    if ADDITIVE:  # the broken twin: not a race, the noise used continuously
        score = tl.where(mask, weights + inv_q, float("-inf"))
    else:
        score = tl.where(mask, weights * inv_q, float("-inf"))
    best, index = tl.max(score, axis=0, return_indices=True)
    tl.store(out_ptr + row, index)


def _race(weights, noise, additive=False):
    """argmax over each row of weights [B, V] * (1 / noise [B, V]), in a Triton kernel -> [B] int64."""
    out = torch.empty(weights.shape[0], dtype=torch.int32)
    _race_kernel[(weights.shape[0],)](out, weights.contiguous(), noise.reciprocal(), weights.shape[1],
                                      BLOCK_SIZE=BLOCK, ADDITIVE=additive)
    return out.to(torch.int64)


def _verify(draft_tokens, draft_probs, target_probs, *, additive=False, shared_noise=False):
    """Token-level verification of one draft (chain:1): draft_tokens [B, 1], draft_probs [B, 1, V],
    target_probs [B, 2, V] -> [B, 2]."""
    batch = draft_tokens.shape[0]
    rows = torch.arange(batch)
    x = draft_tokens[:, 0]
    p, q = target_probs[:, 0], draft_probs[:, 0]
    accept = torch.rand(batch, dtype=torch.float64) * q[rows, x] < p[rows, x]
    recovery_noise = torch.empty_like(p).exponential_()
    recovered = _race(torch.clamp(p - q, min=0), recovery_noise, additive)
    bonus_noise = recovery_noise if shared_noise else torch.empty_like(p).exponential_()
    bonus = _race(target_probs[:, 1].contiguous(), bonus_noise, additive)
    first = torch.where(accept, x, recovered)
    second = torch.where(accept, bonus, torch.full_like(bonus, -1))
    return torch.stack([first, second], dim=1)


def verify(draft_tokens, draft_probs, target_probs):
    return _verify(draft_tokens, draft_probs, target_probs)


def verify_additive(draft_tokens, draft_probs, target_probs):
    return _verify(draft_tokens, draft_probs, target_probs, additive=True)


def verify_shared_noise(draft_tokens, draft_probs, target_probs):
    return _verify(draft_tokens, draft_probs, target_probs, shared_noise=True)


PROBLEM = ContextFreeProblem([0.5, 0.3, 0.2], [0.2, 0.2, 0.6])


def _check(function, mode="exact"):
    # one tree a call: the kernel launches one program per row, and a race is read where a call holds one row
    return check_external(function, "chain", "chain:1", problem=PROBLEM, mode=mode, arrays="torch", rng="capture",
                          per_row=True, time_budget=120)


def test_race_in_a_kernel_is_read_exactly():
    report = _check(verify)
    assert report.verdict is Verdict.LOSSLESS and report.mode == "exact"
    assert report.tv_distance < 1e-12
    # the first token's law, derived: P(x) = q(x) min(1, p(x)/q(x)) + P(reject) (p - q)+(x) / sum (p - q)+ = p(x)
    first = np.zeros(3)
    p, q = np.array([0.5, 0.3, 0.2]), np.array([0.2, 0.2, 0.6])
    residual = np.maximum(p - q, 0)
    rejected = 1 - np.minimum(p, q).sum()
    first += q * np.minimum(1, p / q) + rejected * residual / residual.sum()
    assert np.allclose(first, p, atol=1e-15)
    # E[tau+1] of token-level verification on one draft: 1 + P(accept) = 1 + sum min(p, q)
    assert abs(report.block_efficiency - (1 + np.minimum(p, q).sum())) < 1e-12


def test_noise_used_continuously_in_a_kernel_is_refused_not_integrated():
    with pytest.raises(VerispecError, match="exact mode cannot integrate"):
        _check(verify_additive)


def test_one_noise_row_raced_twice_is_refused():
    with pytest.raises(VerispecError, match="read again|raced"):
        _check(verify_shared_noise)
