"""The sampling law's support without a full-vocabulary law (``Sampling.support``, ``largest``, ``law_support``) and
the lazily computed laws of a policy's context (``verispec.models.block_context``).

* ``largest`` (one reduction over the vocabulary, then ``topk`` over the blocks with the largest maxima) returns
  the very values ``torch.topk`` returns, with ids holding them, at Qwen's V = 151,936 and with a tail after the
  last whole block (the largest entries put there and in one block on purpose); for float32 rows through the
  compiled kernel and, with the kernels off, through torch; rows with an infinite or NaN entry through torch.
* ``Sampling.support`` keeps exactly the tokens ``Sampling.probabilities`` keeps (the second route: the full law's
  nonzero entries), with its probabilities to 1e-12, for top-k, top-k with top-p, greedy and temperatures off 1;
  it declines (None) a tie at the k-th score (top-k then keeps every tied token), top-p alone and no filter.
* ``law_support`` is the full law's nonzero entries bit for bit, and a ``PositionLaw`` built from it gives the law
  back entry for entry (``torch.equal``); a law spread over more blocks than the limit is declined.
* ``BlockContext`` computes a law on its first read and keeps it.
"""

from __future__ import annotations

import contextlib
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from verispec import native  # noqa: E402
from verispec.models.block_context import BlockContext, PositionLaw, law_support, position_law  # noqa: E402
from verispec.models.sampling import LARGEST_BLOCK, Sampling, largest  # noqa: E402

QWEN_VOCAB = 151_936
#: 156 whole blocks of 128 and a tail of 32 entries
TAILED_VOCAB = 20_000


def _logits(vocab: int, seed: int, scale: float = 3.0):
    return torch.as_tensor(np.random.default_rng(seed).normal(0, scale, vocab))  # [V] float64


def _nonzero(law) -> tuple[list[int], np.ndarray]:
    ids = torch.nonzero(law).reshape(-1)
    return ids.tolist(), law[ids].numpy()


@pytest.mark.parametrize("vocab", [QWEN_VOCAB, TAILED_VOCAB])
@pytest.mark.parametrize("count", [1, 21, 41])
def test_largest_returns_topks_values(vocab, count):
    row = _logits(vocab, count)
    row[-3] = 50.0  # the largest entry in the tail (or the last block)
    row[5 * LARGEST_BLOCK + 7] = row[5 * LARGEST_BLOCK + 9] = 40.0  # two of the largest in one block
    values, ids = largest(row, count)
    expected = torch.topk(row, count).values
    assert torch.equal(values, expected)
    assert torch.equal(row[ids], values) and len(set(ids.tolist())) == count
    _, listed = largest(row, count, listed=True)
    assert listed == ids.tolist()


@pytest.mark.parametrize("vocab", [QWEN_VOCAB, TAILED_VOCAB])
@pytest.mark.parametrize("count", [1, 21, 41])
@pytest.mark.parametrize("kernels", ["compiled", "off"])
def test_largest_of_float32_rows_returns_topks_values(vocab, count, kernels):
    """A float32 row on the CPU (a model's logits) goes through the compiled kernel where there is one
    (``verispec.native.largest``) and through torch with the kernels off: the very values ``torch.topk`` returns
    either way, ids holding them, ties across and within blocks and a maximum in the tail included."""
    if kernels == "compiled" and native.kernel_status().startswith("numpy and torch routes"):
        pytest.skip("no usable C compiler on this machine")
    row = _logits(vocab, count).to(torch.float32)
    row[-3] = 50.0
    row[5 * LARGEST_BLOCK + 7] = row[5 * LARGEST_BLOCK + 9] = row[700] = 40.0  # a tie within a block and across
    with contextlib.ExitStack() as stack:
        if kernels == "off":
            stack.enter_context(native.kernels_off())
        assert (native.largest(row.numpy(), count, LARGEST_BLOCK) is None) == (kernels == "off")
        values, ids = largest(row, count)
        _, listed = largest(row, count, listed=True)
    assert torch.equal(values, torch.topk(row, count).values)
    assert torch.equal(row[ids], values) and len(set(ids.tolist())) == count and listed == ids.tolist()


@pytest.mark.parametrize("value", [-math.inf, math.inf, math.nan])
def test_largest_leaves_rows_with_non_finite_entries_to_torch(value):
    """The kernel declines an infinite or NaN entry (torch orders NaN above every number); the result is torch's."""
    row = _logits(TAILED_VOCAB, 7).to(torch.float32)
    row[333] = value
    assert native.largest(row.numpy(), 21, LARGEST_BLOCK) is None
    values, ids = largest(row, 21)
    expected = torch.topk(row, 21).values
    assert torch.equal(values.isnan(), expected.isnan()) and torch.equal(values[~values.isnan()],
                                                                          expected[~expected.isnan()])


SETTINGS = [Sampling(1.0, 20), Sampling(0.7, 20, 0.8), Sampling(1.3, 5, 0.5), Sampling(0.5, 40, 0.99),
            Sampling(1.0, 1), Sampling(0.0), Sampling(0.0, 5, 0.5)]


@pytest.mark.parametrize("vocab", [QWEN_VOCAB, TAILED_VOCAB, 50])
@pytest.mark.parametrize("sampling", SETTINGS, ids=str)
def test_support_is_the_full_laws_nonzero_entries(vocab, sampling):
    for seed in range(3):
        logits = _logits(vocab, seed, scale=1.0 + seed)
        ids, values = sampling.support(logits)
        expected_ids, expected = _nonzero(sampling.probabilities(logits))
        assert ids == expected_ids
        np.testing.assert_allclose(values, expected, rtol=1e-12, atol=0)
        assert math.fsum(values) == pytest.approx(1.0, abs=1e-14)


@pytest.mark.parametrize("sampling", SETTINGS, ids=str)
def test_float32_logits_give_the_same_support(sampling):
    """Float32 logits (the compiled ``largest`` where there is one) keep the full law's tokens too."""
    for seed in range(3):
        logits = _logits(QWEN_VOCAB, 4 + seed, scale=1.0 + seed).to(torch.float32)
        ids, values = sampling.support(logits)
        expected_ids, expected = _nonzero(sampling.probabilities(logits))
        assert ids == expected_ids
        np.testing.assert_allclose(values, expected, rtol=1e-12)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_top_p_decided_on_the_host_keeps_what_the_full_law_keeps(dtype):
    """Top-p's decisions come from running sums on the host (``Sampling._top_p_drop_listed``), torch's softmax and
    cumsum deciding only within ``TOP_P_MARGIN`` of the threshold: over 400 random rows of a 300-token vocabulary
    (logit scales 0.3-6, temperatures 0.3-1.7, top-k 2-40, top-p 0.05-0.999) the support is the full law's nonzero
    entries token for token, and torch was asked at none of them (a host sum lands that close only by design)."""
    rng = np.random.default_rng(21)
    asked = []
    original = Sampling._top_p_drop

    def spy(self, ordered):
        asked.append(ordered)
        return original(self, ordered)

    Sampling._top_p_drop = spy
    try:
        for _ in range(400):
            logits = torch.as_tensor(rng.normal(0, rng.uniform(0.3, 6), 300)).to(dtype)
            sampling = Sampling(float(rng.uniform(0.3, 1.7)), int(rng.integers(2, 41)), float(rng.uniform(0.05, 0.999)))
            support = sampling.support(logits)
            assert asked == []
            law = sampling.probabilities(logits)
            asked.clear()  # probabilities' own top-p call is not the support's
            assert support is not None and support[0] == _nonzero(law)[0]
    finally:
        Sampling._top_p_drop = original
    assert asked == []


@pytest.mark.parametrize("temperature", [1.0, 0.5])
def test_top_p_at_its_threshold_is_torchs_decision(temperature, monkeypatch):
    """Two kept tokens of probabilities 1/4 and 3/4 under top-p 0.75: the less likely one's running sum is the
    threshold 1 - top_p itself, where the host's sums and torch's may round either way, so torch's softmax and
    cumsum decide (asked once, on the scores it divides itself), and the support is the full law's; with no
    margin (the control) the host decides alone and torch is not asked."""
    import verispec.models.sampling as sampling_module

    logits = torch.full((64,), -60.0, dtype=torch.float64)
    logits[9], logits[40] = temperature * math.log(1.0), temperature * math.log(3.0)
    sampling = Sampling(temperature, 2, 0.75)
    asked = []
    original = Sampling._top_p_drop
    monkeypatch.setattr(Sampling, "_top_p_drop", lambda self, ordered: asked.append(ordered) or original(self,
                                                                                                        ordered))
    ids, values = sampling.support(logits)
    assert len(asked) == 1 and asked[0].dtype == torch.float64 and asked[0].shape == (2,)
    law = sampling.probabilities(logits)
    assert ids == _nonzero(law)[0]
    np.testing.assert_allclose(values, _nonzero(law)[1], rtol=1e-12)
    asked.clear()
    monkeypatch.setattr(sampling_module, "TOP_P_MARGIN", -1.0)
    sampling.support(logits)
    assert asked == []


def test_support_declines_what_would_take_more_than_one_pass():
    logits = _logits(QWEN_VOCAB, 5)
    order = torch.argsort(logits, descending=True)
    tied = logits.clone()
    tied[order[20]] = tied[order[19]]  # the 20th and 21st largest equal: top-20 keeps 21 tokens
    assert Sampling(1.0, 20).support(tied) is None
    assert int((Sampling(1.0, 20).probabilities(tied) > 0).sum()) == 21
    inside = logits.clone()
    inside[order[3]] = inside[order[2]]  # a tie inside the top 20 changes nothing
    ids, _ = Sampling(1.0, 20, 0.9).support(inside)
    assert ids == _nonzero(Sampling(1.0, 20, 0.9).probabilities(inside))[0]
    for sampling in (Sampling(1.0), Sampling(0.7), Sampling(1.0, None, 0.8), Sampling(1.0, QWEN_VOCAB)):
        assert sampling.support(logits) is None
    with pytest.raises(Exception, match="one row"):
        Sampling(1.0, 20).support(logits.reshape(2, -1))


@pytest.mark.parametrize("vocab", [QWEN_VOCAB, TAILED_VOCAB, 50])
def test_law_support_is_the_law_and_gives_it_back(vocab):
    sampling = Sampling(0.8, 30, 0.9)
    law = sampling.probabilities(_logits(vocab, 6))
    law[-1] = 1e-300  # a tiny entry in the tail (or last block) is an entry too
    law[0] = 0.0
    ids, values = law_support(law)
    expected_ids, expected = _nonzero(law)
    assert ids == expected_ids and np.array_equal(values, expected)
    kept = position_law(sampling, law, None)
    assert kept.support() == (ids, values) and torch.equal(kept.law(), law)
    if vocab > 8 * LARGEST_BLOCK:  # a dense law is spread over every block
        assert law_support(Sampling(1.0).probabilities(_logits(vocab, 7)), limit=8 * LARGEST_BLOCK) is None


def test_position_laws_compute_once_and_the_context_reads_them_lazily():
    sampling = Sampling(0.7, 20, 0.8)
    logits = _logits(QWEN_VOCAB, 8)
    root = PositionLaw(sampling, logits=logits)
    assert root.support() == sampling.support(logits) and root.support() is root.support()
    context = BlockContext((1, 2), 2, None, None, root, None, sampling)
    assert context.laws["q_root"] is root and context.p_prev is None
    assert torch.equal(context.q_root, sampling.probabilities(logits)) and context.q_root is context.q_root
    dense = PositionLaw(Sampling(1.0), law=torch.ones(4) / 4, logits=torch.zeros(4))
    assert dense.support() is None  # no filter: no support to read
    with pytest.raises(Exception, match="needs the logits"):
        PositionLaw(sampling, support=([0], [1.0]))
