"""The delay selector's features by the routes decoding takes (``verispec.selector.features.context_features``),
tied to the full-vocabulary kernel (``scalar_features``) by parity and to an independent float64 reference.

* Filtered laws: ``support_law_features`` over the laws' supports equals the kernel on the full laws (1e-5
  relative, 1e-6 absolute: the kernel's own tolerance against float64) at Qwen's V = 151,936, for supports that
  are disjoint, nested, equal, one token (greedy), and around float32's zero (a probability of 1e-46 is 0 in
  float32, so no KL cap; 1e-44 is not, so a cap), and it equals a term-by-term float64 sum over the whole
  vocabulary written here. The caps are exactly ``KL_CAP``. Supports given in any order, as lists, numpy or torch,
  give the same features; a bad support is a one-line SelectorError.
* Unfiltered laws: the features from the logits (dot products) equal the kernel at T = 1 and T = 0.7; a law with a
  float32 zero (a logit 300 below the rest) takes the kernel itself.
* In decoding (a tiny pair with a 12,000-token vocabulary: whole blocks and a tail), the features a
  ``SelectorPolicy`` computes from each block's context equal the kernel on the context's full laws, and with
  top-k no full law of q at the root is computed for them.
* One root's choice (``Selector.choose``) is the batch's (``choose_batch``), and the network's evaluation forward
  gives the module calls' logits bit for bit, with and without hidden states.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from tests.support.law_features import reference_law_features  # noqa: E402
from verispec.latency import LatencyModel  # noqa: E402
from verispec.models.block_context import BlockContext, PositionLaw, law_support  # noqa: E402
from verispec.models.sampling import Sampling  # noqa: E402
from verispec.selector import SCALAR_FEATURES, ActionGrid, SelectorError, action_times, scalar_features  # noqa: E402
from verispec.selector.features import KL_CAP, context_features, support_law_features  # noqa: E402

VOCAB = 151_936
LATENCY = LatencyModel.from_ratio(7.0, 0.1)
FLOAT32_ZERO = 2.0 ** -150  # float64 values at or below it are 0 in float32


def _reference(p, q, r) -> list[float]:
    """H(p), H(q), H(r), KL(p||q), KL(q||p), L1 over the whole vocabulary, term by term in float64, a value at or
    below 2^-150 counted as 0 (the kernel's float32 convention) and a KL whose x puts mass where y has none capped."""
    p, q, r = (np.where(x > FLOAT32_ZERO, x, 0.0) for x in (np.asarray(p), np.asarray(q), np.asarray(r)))
    return reference_law_features(p, q, r)


def _law(logits, keep: int, temperature: float = 1.0):
    """softmax(logits / T) over the ``keep`` largest logits, 0 elsewhere [V] float64."""
    scores = logits / temperature
    return torch.softmax(scores.masked_fill(scores < torch.topk(scores, keep).values[-1], -math.inf), 0)


def _cases():
    generator = torch.Generator().manual_seed(5)
    a, b, c = (torch.randn(VOCAB, generator=generator, dtype=torch.float64) * 3 for _ in range(3))
    cases = {"disjoint top-40": (_law(a, 40), _law(b, 40), _law(c, 40)),
             "nested top-20 in top-60": (_law(a, 20, 0.7), _law(a, 60), _law(b, 20)),
             "equal supports": (_law(a, 30, 0.8), _law(a, 30, 1.3), _law(c, 5)),
             "greedy root": (_law(a, 20), _law(a, 20, 0.9), _law(c, 1))}
    for label, tiny in (("1e-46 is float32's 0", 1e-46), ("1e-44 is not", 1e-44)):
        p, q = _law(a, 20), _law(a, 20, 0.9)
        outside = int(torch.topk(a, 21).indices[-1])  # the 21st largest: in neither support
        p[outside] = tiny
        cases[label] = (p, q, _law(b, 10))
    return cases


CASES = _cases()


@pytest.mark.parametrize("case", CASES)
def test_the_support_path_equals_the_full_path_on_filtered_laws(case):
    p, q, r = CASES[case]
    supports = [law_support(law) for law in (p, q, r)]
    got = support_law_features(*supports)
    kernel = scalar_features(p, q, r, context_length=3, sampling=Sampling(1.0, 40), latency=LATENCY)[:6]
    np.testing.assert_allclose(got, kernel, rtol=1e-5, atol=1e-6)
    expected = _reference(p.numpy(), q.numpy(), r.numpy())
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)
    assert [value == KL_CAP for value in got[3:5]] == [value == KL_CAP for value in expected[3:5]]
    if case == "1e-46 is float32's 0":
        assert got[3] < KL_CAP  # the tiny entry counts as 0: p stays inside q's support
    if case == "1e-44 is not":
        assert got[3] == KL_CAP


def test_supports_in_any_order_and_any_container_agree():
    p, q, r = CASES["nested top-20 in top-60"]
    supports = [law_support(law) for law in (p, q, r)]
    got = support_law_features(*supports)
    rng = np.random.default_rng(0)
    shuffled = []
    for ids, values in supports:
        order = rng.permutation(len(ids))
        shuffled.append((np.asarray(ids)[order], torch.as_tensor(np.asarray(values)[order])))
    np.testing.assert_allclose(support_law_features(*shuffled), got, rtol=1e-13, atol=1e-15)


@pytest.mark.parametrize("bad,message", [
    (([0, 1], [1.5, -0.5]), "negative"), (([0, 1], [0.5, float("nan")]), "NaN"), (([0, 1], [0.5, 0.4]), "sums to"),
    (([3, 3], [0.5, 0.5]), "twice"), (([0.5, 1], [0.5, 0.5]), "integers"), ((np.array([0.5, 1.0]), [0.5, 0.5]),
                                                                             "integers"),
    ((np.zeros((2, 2)), [0.5, 0.5]), "vector")])
def test_bad_supports_are_refused_in_one_line(bad, message):
    good = ([0, 1], [0.5, 0.5])
    with pytest.raises(SelectorError, match=message) as error:
        support_law_features(good, bad, good)
    assert "\n" not in str(error.value) and "q_prev" in str(error.value)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_the_logit_route_equals_the_kernel_without_a_filter(temperature):
    generator = torch.Generator().manual_seed(9)
    logits = [torch.randn(VOCAB, generator=generator, dtype=torch.float64) * 3 for _ in range(3)]
    sampling = Sampling(temperature)
    laws = [PositionLaw(sampling, logits=row) for row in logits]
    context = BlockContext((1, 2, 3), 3, *laws, None, sampling)
    got = context_features(context, latency=LATENCY)
    kernel = scalar_features(context.p_prev, context.q_prev, context.q_root, context_length=3, sampling=sampling,
                             latency=LATENCY)
    np.testing.assert_allclose(got, kernel, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got[:6], _reference(*(law.law().numpy() for law in laws)), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("zeros", ["q_prev's token 7", "both laws' token 7", "token 0 of every law"])
def test_the_logit_route_reads_float32_zeros_as_the_kernel_does(zeros):
    """A logit 300 (or 400) below the rest gives a probability float32 counts as 0: KL is capped where the other
    law is not zero there, as the kernel caps it, and lse comes from another token when token 0 is such a zero."""
    generator = torch.Generator().manual_seed(10)
    logits = [torch.randn(VOCAB, generator=generator, dtype=torch.float64) * 3 for _ in range(3)]
    if zeros == "q_prev's token 7":
        logits[1][7] = logits[1].min() - 300
    elif zeros == "both laws' token 7":
        logits[0][7] = logits[0].min() - 300
        logits[1][7] = logits[1].min() - 300
    else:
        for row in logits:
            row[0] = row.min() - 400
    sampling = Sampling(1.0)
    laws = [PositionLaw(sampling, logits=row) for row in logits]
    context = BlockContext((1, 2, 3), 3, *laws, None, sampling)
    got = context_features(context, latency=LATENCY)
    assert all(law.logits is not None for law in laws) and not sampling.filters  # the logit route
    kernel = scalar_features(context.p_prev, context.q_prev, context.q_root, context_length=3, sampling=sampling,
                             latency=LATENCY)
    np.testing.assert_allclose(got, kernel, rtol=1e-5, atol=1e-6)
    expected = _reference(*(law.law().numpy() for law in laws))
    np.testing.assert_allclose(got[:6], expected, rtol=1e-10, atol=1e-10)
    assert (got[3] == KL_CAP, got[4] == KL_CAP) == (zeros == "q_prev's token 7", False)  # p has mass where q has none


@pytest.mark.parametrize("sampling", [Sampling(0.7, 20, 0.8), Sampling(1.0), Sampling(1.0, 5)], ids=str)
def test_a_selector_policys_features_in_decoding_equal_the_kernel(sampling):
    pytest.importorskip("transformers")
    from verispec.models.decoding import generate
    from verispec.models.tiny import tiny_pair
    from verispec.selector.selector import SelectorPolicy
    from verispec.selector.train import train_selector

    rng = np.random.default_rng(1)
    grid = ActionGrid(ks=(1, 2), l1s=(0, 1), l2s=(0, 1))
    selector = train_selector(rng.normal(size=(32, len(SCALAR_FEATURES))), 1 + rng.uniform(size=(32, len(grid))),
                              action_times(grid, LATENCY), grid, seed=0, epochs=1, hidden_sizes=(8,),
                              metadata={"latency": LATENCY})
    checked = []

    class Checking(SelectorPolicy):
        def choose(self, context):
            got = context_features(context, latency=self.latency)
            q_root_computed = context.laws["q_root"].materialised
            kernel = scalar_features(context.p_prev, context.q_prev, context.q_root,
                                     context_length=context.context_length, sampling=context.sampling,
                                     latency=self.latency)
            np.testing.assert_allclose(got, kernel, rtol=1e-5, atol=1e-6)
            checked.append(q_root_computed)
            if not sampling.filters:  # every law comes with its logits: the dot-product route
                assert all(law.logits is not None for law in context.laws.values())
            return super().choose(context)

    pair = tiny_pair(vocab=12_000)
    generation = generate(pair, [5, 9, 11], None, None, 24, sampling, 3, selector=Checking(selector),
                          stop_at_eos=False)
    assert len(checked) == len(generation.blocks) >= 6
    assert set({block.action for block in generation.blocks}) <= set(range(len(grid)))
    if sampling.top_k is not None:
        assert not any(checked)  # the features read the root's support, not its full law


def test_one_roots_choice_is_the_batchs_and_the_eval_forward_the_modules():
    """``Selector.choose`` (torch's argmax of one row) picks what ``choose_batch`` picks, and the network's evaluation
    forward (the layers' own forwards, no module calls) gives the module calls' logits bit for bit."""
    from verispec.selector.train import train_selector

    rng = np.random.default_rng(4)
    grid = ActionGrid(ks=(1, 2), l1s=(0, 1, 2), l2s=(0, 1))
    features = rng.normal(size=(64, len(SCALAR_FEATURES)))
    hidden = {"target_prev": rng.normal(size=(64, 6)), "draft_root": rng.normal(size=(64, 4))}
    for blocks in (None, hidden):
        selector = train_selector(features, 1 + rng.uniform(size=(64, len(grid))), action_times(grid, LATENCY), grid,
                                  hidden=blocks, seed=1, epochs=2, hidden_sizes=(16, 8), metadata={})
        batch = selector.choose_batch(features, blocks)
        rows = [{name: block[row] for name, block in blocks.items()} if blocks else None for row in range(64)]
        assert [selector.choose(features[row], rows[row]) for row in range(64)] == batch.tolist()
        model = selector.model
        scalars = torch.as_tensor(features, dtype=torch.float32)
        blocks_in = selector._hidden(blocks, 64) or []
        with torch.no_grad():
            parts = [model.standardise(scalars)] + [projection(block) for block, projection in
                                                    zip(blocks_in, model.projections)]
            by_modules = model.mlp(torch.cat(parts, dim=1))
            assert torch.equal(model(scalars, blocks_in), by_modules)
