"""An engine's own in-kernel generator fed as ``tl.rand`` is (``rng.triton_random.feed_hashed_uniform``).

From release 0.31 vLLM's V2 runner computes its Gumbel noise as ``murmur3_uniform32(seed, pos, token)``, a hash of
integers inside the kernel, and takes it through ``_log1p_neg_stable`` (a series for log(1 - u) near 0); up to 0.30
its ``tl_rand64`` builds a float64 uniform from ``tl.randint4x``. Neither is a Triton random function, so unfed
the noise is a fixed function of the seed. The kernels here are written as vLLM's 0.33 ``gumbel_noised_argmax``
draws, with a hash of their own: registered, the race is read as one categorical draw from softmax(logits) (its
law is exact); unregistered, the same kernel gives one token per seed, and verispec says LOSSY; a key that differs
across lanes is refused. The shipped kernels themselves are checked in tests/engines/test_engine_releases.py.
"""

from __future__ import annotations

import pytest

from tests.support.engines import triton_under_interpreter

torch, triton, tl = triton_under_interpreter()  # the kernels run on the CPU in numpy

from verispec.errors import VerispecError  # noqa: E402
from verispec.external.check import check_external  # noqa: E402
from verispec.external.rng.triton_random import feed_hashed_uniform, read_as_log1p_neg  # noqa: E402
from verispec.simulator import ContextFreeProblem  # noqa: E402
from verispec.verdict import Verdict  # noqa: E402

BLOCK = 8  # wider than V: the masked lanes draw too, and must never win


@triton.jit
def _toy_hash_uniform(seed, pos, offset):
    """A multiplicative hash of (seed, pos, offset) to (0, 1), standing for vLLM's murmur3_uniform32."""
    h = (seed.to(tl.int64) * 0x9E3779B1 + pos.to(tl.int64) * 0x85EBCA6B + offset.to(tl.int64) * 0xC2B2AE35)
    h = (h ^ (h >> 15)) & 0xFFFFFF
    return (h.to(tl.float32) + 0.5) * 5.960464477539063e-08


#: The same hash under a name no one registered: a capture replaces the module's ``_toy_hash_uniform`` only, so a
#: kernel reading this name computes the hash itself.
_toy_hash_unregistered = _toy_hash_uniform


@triton.jit
def _toy_log1p_neg(value):
    """log(1 - u), by a series near 0 and the log elsewhere, as vLLM's _log1p_neg_stable computes it."""
    series = -value * (1.0 + value * (0.5 + value * (1.0 / 3.0 + value * 0.25)))
    direct = tl.log(tl.maximum(1.0 - value, 5.960464477539063e-08))
    return tl.where(value < 0.25, series, direct)


feed_hashed_uniform(__name__, "_toy_hash_uniform", ("seed", "pos"), "offset")
read_as_log1p_neg(__name__, "_toy_log1p_neg")


@triton.jit
def _hashed_race_kernel(out_ptr, logits_ptr, seed, pos, vocab, BLOCK_SIZE: tl.constexpr, HASH: tl.constexpr):
    lanes = tl.arange(0, BLOCK_SIZE)
    mask = lanes < vocab
    logits = tl.load(logits_ptr + lanes, mask=mask, other=float("-inf")).to(tl.float32)
    if HASH == 0:
        u = _toy_hash_uniform(seed, pos, lanes)
    elif HASH == 1:
        u = _toy_hash_unregistered(seed, pos, lanes)
    else:  # the key itself differs from lane to lane
        u = _toy_hash_uniform(seed + lanes, pos, lanes)
    gumbel = -tl.log(-_toy_log1p_neg(u))
    score = tl.where(mask, logits + gumbel, float("-inf"))
    best, index = tl.max(score, axis=0, return_indices=True)
    tl.store(out_ptr, index.to(tl.int64))


def _drafting(hash_kind: int):
    def step(draft_model, target_model, input_ids, num_draft_tokens, temperature, top_k, top_p, min_p, seed):
        logits = torch.log_softmax(draft_model(input_ids)[0, -1].to(torch.float32), -1).contiguous()
        out = torch.zeros(1, dtype=torch.int64)
        _hashed_race_kernel[(1,)](out, logits, int(seed), input_ids.shape[1] - 1, logits.shape[0], BLOCK_SIZE=BLOCK,
                                  HASH=hash_kind)
        return out

    return step


#: The token drafted is the whole emitted block, so its law must be the target's: here the draft's own law.
LAW = [0.5, 0.3, 0.2]


def _check(hash_kind: int):
    return check_external(_drafting(hash_kind), "step", "chain:1", problem=ContextFreeProblem(LAW, LAW),
                          mode="exact", rng="capture", sampling="temperature=1", time_budget=120, threshold=1e-6)


def test_a_registered_hash_is_fed_and_its_race_read_as_the_softmax_draw():
    # a race over a float32 softmax: the law is LAW to float32's rounding of the logits (about 1e-7)
    report = _check(0)
    assert report.verdict is Verdict.LOSSLESS and report.mode == "exact", (report.verdict, report.note)
    assert report.tv_distance < 1e-6


def test_the_same_kernel_with_an_unregistered_hash_is_not_lossless():
    # unfed, the noise is a function of (seed, pos): one token for the seed verispec hands, so the TV is 1 - LAW[x]
    # for that token, at least 1 - max(LAW)
    report = _check(1)
    assert report.verdict is Verdict.LOSSY and report.tv_distance >= 1 - max(LAW) - 1e-9, report.tv_distance


def test_a_key_that_differs_across_lanes_is_refused():
    with pytest.raises(VerispecError, match="differing across lanes"):
        _check(2)


def test_a_hashed_uniform_names_its_type():
    with pytest.raises(ValueError, match="float32 or float64"):
        feed_hashed_uniform(__name__, "_toy_hash_uniform", ("seed", "pos"), "offset", "float16")
