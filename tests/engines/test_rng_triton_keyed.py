"""Keyed noise drawn inside Triton kernels (``verispec.external.rng.triton_random``): ``tl.rand(seed, offsets)`` is
one of verispec's keyed uniforms, and a Gumbel-max race over a block of them is read as one categorical draw.

The step functions here are written as vLLM's V2 model runner draws (``vllm/v1/worker/gpu/sample/gumbel.py``): a
Gumbel kernel ``argmax(logits + G)`` with ``G = -log(-log u)`` and ``u = tl.rand(tl.randint(seed, pos), token)``
drafts the token, the acceptance uniform is ``tl.rand(seed, pos)``, and the resample at a rejection is the same
Gumbel kernel over log (p - q)+ at the rejected token's (seed, pos). Correct (the draft's positions salted, as
#54282 does), the first token follows p, which the test derives; with the draft's noise under the resample's key
(vLLM #47386) the resample races the noise that chose the rejected draft, and the exact TV matches the zoo's
2,000,000-run simulation of that race. Uses of the lanes other than the race and a third race on one key are
refused; arithmetic
on ``tl.randint``'s integer is integrated as the draw it is, and Triton's unfed random functions are refused.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.support.engines import triton_under_interpreter

torch, triton, tl = triton_under_interpreter()  # the kernels run on the CPU in numpy

from verispec.errors import VerispecError  # noqa: E402
from verispec.external.check import check_external  # noqa: E402
from verispec.simulator import ContextFreeProblem  # noqa: E402
from verispec.verdict import Verdict  # noqa: E402

#: the language patched once a launch, as the vLLM adapters run the interpreter (tests/engines/conftest.py)
pytestmark = pytest.mark.usefixtures("language_patched_once_per_launch")

BLOCK = 16  # wider than V: the masked lanes draw too, and must never win
SALT = 1 << 30  # #54282's salt of the draft's positions


@triton.jit
def _gumbel_kernel(out_ptr, logits_ptr, seed, pos, vocab, BLOCK_SIZE: tl.constexpr, MISUSE: tl.constexpr):
    lanes = tl.arange(0, BLOCK_SIZE)
    mask = lanes < vocab
    logits = tl.load(logits_ptr + lanes, mask=mask, other=float("-inf")).to(tl.float64)
    u = tl.rand(tl.randint(seed, pos), lanes)
    u = tl.maximum(u, 4.6566127342e-10)
    if MISUSE == 1:  # the noise's sum: not a race
        tl.store(out_ptr, tl.sum(u, axis=0).to(tl.int64))
    else:
        gumbel = -tl.log(-tl.log(u.to(tl.float64)))
        score = tl.where(mask, logits + gumbel, float("-inf"))
        best, index = tl.max(score, axis=0, return_indices=True)
        tl.store(out_ptr, index.to(tl.int64))


@triton.jit
def _uniform_kernel(out_ptr, seed, pos):
    tl.store(out_ptr, tl.rand(seed, pos).to(tl.float64))


@triton.jit
def _coin_kernel(out_ptr, seed, pos):
    bits = tl.randint(seed, pos)  # uint32
    tl.store(out_ptr, (bits >= 2147483648).to(tl.int64))


@triton.jit
def _unfed_kernel(out_ptr, seed, pos):
    a, b, c, d = tl.randint4x(seed, pos)
    tl.store(out_ptr, a.to(tl.int64))


def _gumbel(logits, seed: int, pos: int, misuse: int = 0) -> int:
    out = torch.zeros(1, dtype=torch.int64)
    _gumbel_kernel[(1,)](out, logits.to(torch.float64).contiguous(), seed, pos, logits.shape[0], BLOCK_SIZE=BLOCK,
                         MISUSE=misuse)
    return int(out[0])


def _uniform(seed: int, pos: int) -> float:
    out = torch.zeros(1, dtype=torch.float64)
    _uniform_kernel[(1,)](out, seed, pos)
    return float(out[0])


def _step(draft_model, target_model, input_ids, seed, *, salt: int, races: int = 2):
    """One draft at position P (key position P - 1, the row that verifies it), accepted when u q(x) < p(x), else the
    resample from (p - q)+ by the Gumbel kernel at the rejected token's (seed, P - 1)."""
    seed, prompt = int(seed), input_ids.shape[1]
    q = torch.softmax(draft_model(input_ids)[0, -1].to(torch.float64), -1)  # [V]
    x = _gumbel(torch.log(q), seed, prompt - 1 + salt)
    rows = torch.softmax(target_model(torch.cat([input_ids, torch.tensor([[x]])], dim=1))[0, -2:].to(torch.float64),
                         -1)  # [2, V]
    p, p_next = rows[0], rows[1]
    if _uniform(seed, prompt - 1) * float(q[x]) < float(p[x]):
        return torch.tensor([x, _gumbel(torch.log(p_next), seed, prompt)])
    residual = torch.log(torch.clamp(p - q, min=0))
    token = _gumbel(residual, seed, prompt - 1)
    for _ in range(races - 2):  # the same key raced again, its result discarded
        _gumbel(residual, seed, prompt - 1)
    return torch.tensor([token])


def step_salted(draft_model, target_model, input_ids, num_draft_tokens, temperature, top_k, top_p, min_p, seed):
    return _step(draft_model, target_model, input_ids, seed, salt=SALT)


def step_shared_key(draft_model, target_model, input_ids, num_draft_tokens, temperature, top_k, top_p, min_p, seed):
    return _step(draft_model, target_model, input_ids, seed, salt=0)


def step_three_races(draft_model, target_model, input_ids, num_draft_tokens, temperature, top_k, top_p, min_p, seed):
    return _step(draft_model, target_model, input_ids, seed, salt=0, races=3)


def _misused(misuse: int):
    def step(draft_model, target_model, input_ids, num_draft_tokens, temperature, top_k, top_p, min_p, seed):
        logits = draft_model(input_ids)[0, -1].to(torch.float64)
        return torch.tensor([_gumbel(logits, int(seed), input_ids.shape[1], misuse=misuse)])

    return step


def step_coin(draft_model, target_model, input_ids, num_draft_tokens, temperature, top_k, top_p, min_p, seed):
    out = torch.zeros(1, dtype=torch.int64)
    _coin_kernel[(1,)](out, int(seed), input_ids.shape[1])
    return torch.tensor([int(out[0])])


def step_unfed(draft_model, target_model, input_ids, num_draft_tokens, temperature, top_k, top_p, min_p, seed):
    out = torch.zeros(1, dtype=torch.int64)
    _unfed_kernel[(1,)](out, int(seed), input_ids.shape[1])
    return torch.tensor([int(out[0]) % 3])


PROBLEM = ContextFreeProblem([0.59, 0.4, 0.01], [0.35, 0.01, 0.64])


def _check(function):
    # tl.rand's uniforms are float32 (multiples of 2^-24): a correct law is within about 1e-7 of the target, so the
    # threshold is an engine's, 1e-6 (verispec.engines.vllm.THRESHOLD)
    return check_external(function, "step", "chain:1", problem=PROBLEM, mode="exact", rng="capture",
                          sampling="temperature=1", time_budget=600, threshold=1e-6)


def test_a_gumbel_race_over_keyed_lanes_is_read_exactly_and_its_salted_twin_is_lossless():
    """The draft's noise salted: draft, acceptance and resample read independent keys, so the first token follows
    q(x) min(1, p(x)/q(x)) + P(reject) (p - q)+(x) / sum (p - q)+ = p(x). The acceptance uniform is tl.rand's
    float32 (a multiple of 2^-24), so the law is p to within the grid's 2^-24 per comparison."""
    p, q = np.array(PROBLEM.target(())), np.array(PROBLEM.draft(()))
    residual = np.maximum(p - q, 0)
    first = q * np.minimum(1, p / q) + (1 - np.minimum(p, q).sum()) * residual / residual.sum()
    assert np.allclose(first, p, atol=1e-15)
    report = _check(step_salted)
    assert report.verdict is Verdict.LOSSLESS and report.mode == "exact", report.tv_distance
    assert report.tv_distance < 1e-6
    assert abs(report.block_efficiency - (1 + np.minimum(p, q).sum())) < 1e-6


def test_the_resample_racing_the_drafts_key_is_lossy_at_the_simulated_tv():
    """vLLM #47386 in kernels: the resample races the Gumbel noise that chose the rejected draft. Its exact TV, read
    through the law of a second race given the first's winner, matches the zoo's 2,000,000-run simulation
    (examples/engine_bugs/vllm_47386.py: 0.0856, standard error about 0.0004)."""
    report = _check(step_shared_key)
    assert report.verdict is Verdict.LOSSY and abs(report.tv_distance - 0.0856) < 0.003


@pytest.mark.parametrize("function, message", [
    (step_three_races, "raced again"),
    (_misused(1), "used otherwise than in a Gumbel-max race"),
    (step_unfed, "tl.randint4x"),
])
def test_what_the_rule_cannot_read_is_refused_not_integrated(function, message):
    with pytest.raises(VerispecError, match=message):
        _check(function)


def test_a_randint_used_as_noise_is_integrated_as_the_draw_it_is():
    """``tl.randint(seed, pos) >= 2^31`` is a fair coin: fed, its law is (1/2, 1/2) exactly; left to Philox it would
    be a fixed function of the seed, one token always (TV 1/2 against this target)."""
    report = check_external(step_coin, "step", "chain:1", problem=ContextFreeProblem([0.5, 0.5], [0.5, 0.5]),
                            mode="exact", rng="capture", sampling="temperature=1", time_budget=60)
    assert report.verdict is Verdict.LOSSLESS and report.tv_distance < 1e-12
