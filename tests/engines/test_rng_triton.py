"""Races inside Triton kernels under the interpreter (``verispec.external.rng.triton_races``): torch draws exponential
noise, a kernel takes ``argmax(w * (1 / E))``; exact mode reads it as one categorical draw from w.

The functions here are token-level verification in the ``chain`` layout with their own draws (``--rng capture``):
acceptance by a float64 ``torch.rand``, the recovered and the bonus token each by a race in a Triton kernel over a
noise row of their own, as vLLM's V1 sampler draws its recovered token. Correct, the law is the target's: on a
context-free problem the first token follows p (accepted with min(1, p/q), else (p - q)+ normalised), which the test
derives, so the exact TV is 0 up to float64. A row raced twice (vLLM races each request's row at every position) is
read by the second race's law given the first's winner, checked here against numerical integration. Broken twins: a
kernel that adds the noise to the weights (a continuous use, which exact mode must refuse rather than integrate), a
recovery racing the draft's own noise (vLLM #47386's class: lossy, at the TV of the zoo's simulation), and a third
race on one row (refused)."""

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

BLOCK = 8  # larger than V: the masked entries of the block must never win


@triton.jit
def _race_kernel(out_ptr, weights_ptr, inv_q_ptr, vocab, BLOCK_SIZE: tl.constexpr, ADDITIVE: tl.constexpr,
                 ZERO_MASKED: tl.constexpr = False):
    # the row's start in int64 (as vLLM's kernels take it), once: the interpreter checks every int32 product for
    # overflow, a large part of this small kernel's time
    start = tl.program_id(0).to(tl.int64) * vocab
    offsets = tl.arange(0, BLOCK_SIZE)
    mask = offsets < vocab
    weights = tl.load(weights_ptr + start + offsets, mask=mask, other=0.0)
    inv_q = tl.load(inv_q_ptr + start + offsets, mask=mask, other=0.0)
    if ADDITIVE:  # the broken twin: not a race, the noise used continuously
        score = tl.where(mask, weights + inv_q, float("-inf"))
    elif ZERO_MASKED:  # the block's tail left at 0 * 0, as vLLM's recovery kernel before 0.21 leaves it
        score = weights * inv_q
    else:
        score = tl.where(mask, weights * inv_q, float("-inf"))
    best, index = tl.max(score, axis=0, return_indices=True)
    tl.store(out_ptr + tl.program_id(0), index)


@triton.jit
def _divided_race_kernel(out_ptr, weights_ptr, q_ptr, vocab, BLOCK_SIZE: tl.constexpr, TIMES: tl.constexpr):
    # vLLM's recovery kernel to 0.16: the noise E itself loaded (the block's tail as -inf) and argmax(w / E) taken
    start = tl.program_id(0).to(tl.int64) * vocab
    offsets = tl.arange(0, BLOCK_SIZE)
    weights = tl.load(weights_ptr + start + offsets, mask=offsets < vocab, other=0.0)
    q = tl.load(q_ptr + start + offsets, mask=offsets < vocab, other=float("-inf"))
    score = weights * q if TIMES else weights / q  # TIMES, the broken twin: argmax(w E) is no race of law w
    tl.store(out_ptr + tl.program_id(0), tl.argmax(score, axis=0))


def _race(weights, inv_q, additive=False, zero_masked=False):
    """argmax over each row of weights [B, V] * inv_q [B, V] (1 / exponential noise), in a Triton kernel -> [B]."""
    out = torch.empty(weights.shape[0], dtype=torch.int32)
    _race_kernel[(weights.shape[0],)](out, weights.contiguous(), inv_q, weights.shape[1], BLOCK_SIZE=BLOCK,
                                      ADDITIVE=additive, ZERO_MASKED=zero_masked)
    return out.to(torch.int64)


def _verify(draft_tokens, draft_probs, target_probs, *, additive=False, shared_noise=False, zero_masked=False):
    """Token-level verification of one draft (chain:1): draft_tokens [B, 1], draft_probs [B, 1, V],
    target_probs [B, 2, V] -> [B, 2]. ``shared_noise``: the bonus race reads the recovery's noise row (vLLM's V1 races
    one row per request at every position; only one of the two is emitted on any path)."""
    batch = draft_tokens.shape[0]
    rows = torch.arange(batch)
    x = draft_tokens[:, 0]
    p, q = target_probs[:, 0], draft_probs[:, 0]
    accept = torch.rand(batch, dtype=torch.float64) * q[rows, x] < p[rows, x]
    recovery = torch.empty_like(p).exponential_().reciprocal()  # inv_q, computed once per row as vLLM does
    recovered = _race(torch.clamp(p - q, min=0), recovery, additive, zero_masked)
    bonus_inverse = recovery if shared_noise else torch.empty_like(p).exponential_().reciprocal()
    bonus = _race(target_probs[:, 1].contiguous(), bonus_inverse, additive, zero_masked)
    first = torch.where(accept, x, recovered)
    second = torch.where(accept, bonus, torch.full_like(bonus, -1))
    return torch.stack([first, second], dim=1)


def verify(draft_tokens, draft_probs, target_probs):
    return _verify(draft_tokens, draft_probs, target_probs)


def _verify_divided(draft_tokens, draft_probs, target_probs, times: bool):
    """``_verify`` with both races as ``argmax(w / E)`` over the noise itself (``times``: ``argmax(w E)``)."""
    batch = draft_tokens.shape[0]
    rows = torch.arange(batch)
    x = draft_tokens[:, 0]
    p, q = target_probs[:, 0], draft_probs[:, 0]
    accept = torch.rand(batch, dtype=torch.float64) * q[rows, x] < p[rows, x]
    tokens = []
    for weights in (torch.clamp(p - q, min=0).contiguous(), target_probs[:, 1].contiguous()):
        out = torch.empty(batch, dtype=torch.int32)
        _divided_race_kernel[(batch,)](out, weights, torch.empty_like(weights).exponential_(), weights.shape[1],
                                       BLOCK_SIZE=BLOCK, TIMES=times)
        tokens.append(out.to(torch.int64))
    recovered, bonus = tokens
    return torch.stack([torch.where(accept, x, recovered), torch.where(accept, bonus, torch.full_like(bonus, -1))],
                       dim=1)


def verify_divided(draft_tokens, draft_probs, target_probs):
    return _verify_divided(draft_tokens, draft_probs, target_probs, times=False)


def verify_noise_times_weights(draft_tokens, draft_probs, target_probs):
    return _verify_divided(draft_tokens, draft_probs, target_probs, times=True)


def verify_additive(draft_tokens, draft_probs, target_probs):
    return _verify(draft_tokens, draft_probs, target_probs, additive=True)


def verify_zero_masked(draft_tokens, draft_probs, target_probs):
    return _verify(draft_tokens, draft_probs, target_probs, zero_masked=True)


def verify_shared_noise(draft_tokens, draft_probs, target_probs):
    return _verify(draft_tokens, draft_probs, target_probs, shared_noise=True)


def _step(draft_model, target_model, input_ids, num_draft_tokens, temperature, top_k, top_p, min_p, seed, *,
          reuse: bool):
    """A whole step (``step`` layout, one draft, T = 1) drafting by a kernel race and recovering by another: with
    ``reuse`` the recovery races the draft's own noise row (vLLM #47386's class: draft and recovery noise under one
    key), else a fresh row (#54282's fix)."""
    q = torch.softmax(draft_model(input_ids)[0, -1], -1)  # [V]
    draft_inverse = torch.empty((1, q.shape[0]), dtype=torch.float64).exponential_().reciprocal()
    x = int(_race(q[None], draft_inverse)[0])
    rows = torch.softmax(target_model(torch.cat([input_ids, torch.tensor([[x]])], dim=1))[0, -2:], -1)  # [2, V]
    p, p_next = rows[0], rows[1]
    if float(torch.rand((), dtype=torch.float64)) * float(q[x]) < float(p[x]):
        bonus_inverse = torch.empty((1, q.shape[0]), dtype=torch.float64).exponential_().reciprocal()
        return torch.tensor([x, int(_race(p_next[None].contiguous(), bonus_inverse)[0])])
    recovery_inverse = draft_inverse if reuse else torch.empty((1, q.shape[0]),
                                                               dtype=torch.float64).exponential_().reciprocal()
    return torch.tensor([int(_race(torch.clamp(p - q, min=0)[None], recovery_inverse)[0])])


def step_draft_noise_reused(draft_model, target_model, input_ids, num_draft_tokens, temperature, top_k, top_p, min_p,
                            seed):
    return _step(draft_model, target_model, input_ids, num_draft_tokens, temperature, top_k, top_p, min_p, seed,
                 reuse=True)


def step_fresh_recovery_noise(draft_model, target_model, input_ids, num_draft_tokens, temperature, top_k, top_p,
                              min_p, seed):
    return _step(draft_model, target_model, input_ids, num_draft_tokens, temperature, top_k, top_p, min_p, seed,
                 reuse=False)


def verify_three_races(draft_tokens, draft_probs, target_probs):
    """The shared row raced a third time (read and discarded): refused, not guessed."""
    out = _verify(draft_tokens, draft_probs, target_probs)
    inverse = torch.empty_like(target_probs[:, 0]).exponential_().reciprocal()
    for weights in (target_probs[:, 0], target_probs[:, 1], draft_probs[:, 0]):
        _race(weights.contiguous(), inverse)
    return out


PROBLEM = ContextFreeProblem([0.5, 0.3, 0.2], [0.2, 0.2, 0.6])
#: V = 2, where one of the residual's two weights is 0: for what does not depend on the vocabulary's size.
SMALL = ContextFreeProblem([0.6, 0.4], [0.3, 0.7])


#: Seconds of wall time a check may take: some 30 s of CPU each, which a loaded 2-core box running the suite in four
#: processes stretched past 120 s (an INCONCLUSIVE report, the test failed; nothing here is about speed).
BUDGET = 600


def _check(function, mode="exact", problem=PROBLEM):
    # one tree a call: the kernel launches one program per row, and a race is read where a call holds one row
    return check_external(function, "chain", "chain:1", problem=problem, mode=mode, arrays="torch", rng="capture",
                          per_row=True, time_budget=BUDGET)


def test_race_in_a_kernel_is_read_exactly():
    report = _check(verify)
    assert report.verdict is Verdict.LOSSLESS and report.mode == "exact"
    assert report.tv_distance < 1e-12
    # the first token's law, derived: P(x) = q(x) min(1, p(x)/q(x)) + P(reject) (p - q)+(x) / sum (p - q)+ = p(x)
    p, q = np.array([0.5, 0.3, 0.2]), np.array([0.2, 0.2, 0.6])
    residual = np.maximum(p - q, 0)
    first = q * np.minimum(1, p / q) + (1 - np.minimum(p, q).sum()) * residual / residual.sum()
    assert np.allclose(first, p, atol=1e-15)
    # E[tau+1] of token-level verification on one draft: 1 + P(accept) = 1 + sum min(p, q)
    assert abs(report.block_efficiency - (1 + np.minimum(p, q).sum())) < 1e-12


def test_a_kernels_race_tells_exact_integration_all_its_breakpoints(monkeypatch):
    """A race read as one categorical draw hands exact integration its uniform's breakpoints as all of them
    (``Capture.know_categorical``: the winner is all the kernel learns of that uniform), so the line along it is
    scanned at those points alone. Control: told nothing, the integration bisects to the same breakpoints and
    gives the same law (the same TV and E[tau + 1], to the last bit), in more evaluations."""
    from verispec.external.rng import Capture

    told = _check(verify, problem=SMALL)
    monkeypatch.setattr(Capture, "know_categorical", lambda self, columns, laws: None)
    bisected = _check(verify, problem=SMALL)
    assert told.verdict is Verdict.LOSSLESS and bisected.verdict is Verdict.LOSSLESS
    assert told.tv_distance == bisected.tv_distance and told.block_efficiency == bisected.block_efficiency
    assert told.evaluations < bisected.evaluations


def test_a_race_whose_block_tail_is_masked_to_zero_is_read_exactly():
    """The masked lanes score 0 * 0 instead of -inf (vLLM's recovery kernel before 0.21): with any positive weight
    they never win, so the race is the same and its law the target's, at V = 2 (p = (0.6, 0.4), q = (0.3, 0.7)),
    where one of the residual's two weights is 0 too."""
    report = _check(verify_zero_masked, problem=SMALL)
    assert report.verdict is Verdict.LOSSLESS and report.mode == "exact" and report.tv_distance < 1e-12


def test_a_race_dividing_by_the_noise_itself_is_read_exactly():
    """argmax(w / E) over the noise E as drawn (vLLM's recovery kernel to 0.16 loads q and divides; later releases
    multiply by 1/E) is the same race, read exactly: the target's law, derived in the first test. Control: argmax(w E)
    is no race of law w (E's larger values win), and exact mode refuses it as a continuous use."""
    report = _check(verify_divided, problem=SMALL)
    assert report.verdict is Verdict.LOSSLESS and report.mode == "exact" and report.tv_distance < 1e-12
    with pytest.raises(VerispecError, match="exact mode cannot integrate"):
        _check(verify_noise_times_weights, problem=SMALL)


def test_noise_used_continuously_in_a_kernel_is_refused_not_integrated():
    """Both races add the noise to the weights: the winner moves continuously with every lane's noise, at any
    vocabulary, so the smaller problem serves (the bonus race's two live lanes each carry noise)."""
    with pytest.raises(VerispecError, match="exact mode cannot integrate"):
        _check(verify_additive, problem=SMALL)


def test_one_row_raced_twice_is_read_by_its_joint_law():
    """Only one of the two races on the shared row is emitted on any path, so the rule stays lossless; the second
    race is read from the law given the first's winner (``second_race_law``)."""
    report = _check(verify_shared_noise)
    assert report.verdict is Verdict.LOSSLESS and report.tv_distance < 1e-12


def test_recovery_racing_the_drafts_noise_is_lossy_by_the_joint_law():
    """vLLM #47386's mechanism in kernels: the draft x won a race on a noise row and the recovery races that row
    again, so the recovered token leans away from the tokens q favours. Its exact TV through the joint law of two
    races matches the zoo's 2,000,000-run simulation of the race (examples/engine_bugs/vllm_47386.py: 0.0856,
    token 1 at 0.486 against p = 0.4; standard error about 0.0004); the fresh-noise twin is lossless."""
    problem = ContextFreeProblem([0.59, 0.4, 0.01], [0.35, 0.01, 0.64])
    common = dict(problem=problem, mode="exact", rng="capture", sampling="temperature=1", time_budget=BUDGET)
    fixed = check_external(step_fresh_recovery_noise, "step", "chain:1", **common)
    assert fixed.verdict is Verdict.LOSSLESS and fixed.tv_distance < 1e-12
    reused = check_external(step_draft_noise_reused, "step", "chain:1", **common)
    assert reused.verdict is Verdict.LOSSY and abs(reused.tv_distance - 0.0856) < 0.003


def test_a_third_race_on_one_row_is_refused():
    with pytest.raises(VerispecError, match="exact mode cannot integrate"):
        _check(verify_three_races)


@pytest.mark.parametrize("seed", [0, 1])
def test_second_race_law_matches_numerical_integration(seed):
    """P(b | a) against scipy's quadrature of the defining integrals over E_a (and E_b), another algorithm: with
    r = w1 / w1[a], a and b win when E_b in [E_a r_b, E_a w2[b] / w2[a]] and E_i >= max(E_a r_i, E_b w2_i / w2_b)."""
    from scipy import integrate

    from verispec.external.rng.triton_races import second_race_law

    rng = np.random.default_rng(seed)
    w1, w2 = rng.random(4), rng.random(4)
    for a in range(4):
        law = second_race_law(w1, a, w2)
        expected = []
        for b in range(4):
            rest = [i for i in range(4) if i not in (a, b)]
            if b == a:
                slope = 1 + sum(max(w1[i] / w1[a], w2[i] / w2[a]) for i in rest)
                value = integrate.quad(lambda x, slope=slope: np.exp(-x * slope), 0, np.inf, epsabs=1e-13)[0]
            elif w1[b] / w1[a] >= w2[b] / w2[a]:
                value = 0.0
            else:
                r, s = w1 / w1[a], w2 / w2[b]

                def density(y, x, r=r, s=s, rest=rest):
                    return np.exp(-x - y - sum(max(x * r[i], y * s[i]) for i in rest))

                low, high = r[b], 1 / s[a]
                value = integrate.dblquad(density, 0, 60, lambda x, low=low: x * low, lambda x, high=high: x * high,
                                          epsabs=1e-12, epsrel=1e-10)[0]
            expected.append(value * w1.sum() / w1[a])
        assert np.abs(np.array(expected) - law).max() < 1e-9
