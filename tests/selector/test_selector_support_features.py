"""The delay selector's features by the routes decoding takes (``verispec.selector.features.context_features``),
tied to the full-vocabulary kernel (``scalar_features``) by parity and to an independent float64 reference.

* Filtered laws: ``support_law_features`` over the laws' supports equals the kernel on the full laws (1e-5
  relative, 1e-6 absolute: the kernel's own tolerance against float64) at Qwen's V = 151,936, for supports that
  are disjoint, nested, equal, one token (greedy), and around float32's zero (a probability of 1e-46 is 0 in
  float32, so no KL cap; 1e-44 is not, so a cap), and it equals a term-by-term float64 sum over the whole
  vocabulary written here. The caps are exactly ``KL_CAP``. Supports given in any order, as lists, numpy or torch,
  give the same features; a bad support is a one-line SelectorError.
* Unfiltered laws: the features from the logits (float32 like the kernel: a softmax's parts and dot products)
  equal the kernel at T = 1 and T = 0.7 and the float64 reference to the kernel's tolerance, without the root's
  full law; a law with a float32 zero (a logit 300 below the rest) or a probability within a nat of it takes the
  kernel itself.
* In decoding (a tiny pair with a 12,000-token vocabulary: whole blocks and a tail), the features a
  ``SelectorPolicy`` computes from each block's context equal the kernel on the context's full laws, and no full
  law of q at the root is computed for them.
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
    assert not any(law.materialised for law in laws)  # no float64 law for the features
    kernel = scalar_features(context.p_prev, context.q_prev, context.q_root, context_length=3, sampling=sampling,
                             latency=LATENCY)
    np.testing.assert_allclose(got, kernel, rtol=1e-5, atol=1e-6)
    # float32 like the kernel, so to the kernel's tolerance against the float64 reference
    np.testing.assert_allclose(got[:6], _reference(*(law.law().numpy() for law in laws)), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
@pytest.mark.parametrize("given", ["p_prev", "p_prev and q_prev", "all three"])
def test_the_logit_route_reads_the_laws_the_decoder_has(temperature, given):
    """Where the decoder has computed a law already (p_prev from the verify forward, q_prev from drafting: a
    PositionLaw with its law and its logits), the route casts that law instead of taking an exponential: the
    features still equal the kernel and the float64 reference to the kernel's tolerance, and the route without the
    laws to float32's rounding."""
    generator = torch.Generator().manual_seed(12)
    logits = [(torch.randn(VOCAB, generator=generator) * 3).to(torch.float32) for _ in range(3)]  # as Qwen gives them
    sampling = Sampling(temperature)
    count = {"p_prev": 1, "p_prev and q_prev": 2, "all three": 3}[given]
    laws = [PositionLaw(sampling, logits=row, law=sampling.probabilities(row) if index < count else None)
            for index, row in enumerate(logits)]
    bare = [PositionLaw(sampling, logits=row) for row in logits]
    got, without = (context_features(BlockContext((1, 2, 3), 3, *rows, None, sampling), latency=LATENCY)
                    for rows in (laws, bare))
    assert [law.materialised for law in laws] == [index < count for index in range(3)]  # none computed for them
    np.testing.assert_allclose(got, without, rtol=2e-6, atol=2e-7)
    kernel = scalar_features(*(law.law() for law in laws), context_length=3, sampling=sampling, latency=LATENCY)
    np.testing.assert_allclose(got, kernel, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got[:6], _reference(*(law.law().numpy() for law in laws)), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("wrong", ["another row's law", "the law at another temperature", "a shifted law"])
def test_a_law_that_is_not_its_logits_softmax_is_refused(wrong):
    """The route reads log x from the logits and x from a given law, so the two must agree: a law of other logits,
    of another temperature, or moved by one token (the controls) is a one-line SelectorError naming the input,
    not features of neither."""
    generator = torch.Generator().manual_seed(13)
    logits = [(torch.randn(VOCAB, generator=generator) * 3).to(torch.float32) for _ in range(3)]
    sampling = Sampling(1.0)
    law = {"another row's law": sampling.probabilities(logits[2]),
           "the law at another temperature": Sampling(0.9).probabilities(logits[1]),
           "a shifted law": torch.roll(sampling.probabilities(logits[1]), 1)}[wrong]
    rows = [PositionLaw(sampling, logits=logits[0], law=sampling.probabilities(logits[0])),
            PositionLaw(sampling, logits=logits[1], law=law), PositionLaw(sampling, logits=logits[2])]
    with pytest.raises(SelectorError, match="q_prev's law is not the sampling law of its logits") as error:
        context_features(BlockContext((1, 2, 3), 3, *rows, None, sampling), latency=LATENCY)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("zeros", ["q_prev's token 7", "both laws' token 7", "token 0 of every law",
                                   "q_prev's token 7 at 2^-149"])
def test_the_logit_route_reads_float32_zeros_as_the_kernel_does(zeros):
    """A logit 300 (or 400) below the rest gives a probability float32 counts as 0, and one of 2^-149 is float32's
    smallest but one: in both the route leaves the laws to the kernel, whose zeros cap KL where the other law is
    not zero there."""
    generator = torch.Generator().manual_seed(10)
    logits = [torch.randn(VOCAB, generator=generator, dtype=torch.float64) * 3 for _ in range(3)]
    if zeros == "q_prev's token 7 at 2^-149":
        logits[1][7] = torch.logsumexp(logits[1], 0) - 149 * math.log(2)  # q_7 = 2^-149 (to float64's rounding)
    elif zeros == "q_prev's token 7":
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
    np.testing.assert_array_equal(got, kernel)  # the kernel itself: its zeros and caps, entry by entry
    expected = _reference(*(law.law().numpy() for law in laws))
    np.testing.assert_allclose(got[:6], expected, rtol=1e-5, atol=1e-6)
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
    assert not any(checked)  # the features read the root's support or its logits, not its full law


def test_one_roots_choice_is_the_batchs_and_the_eval_forward_the_modules():
    """``Selector.choose`` (one row) picks what ``choose_batch`` picks, and the network's torch evaluation forward (the
    layers' own forwards, no module calls) gives the module calls' logits bit for bit."""
    from verispec.selector.train import train_selector

    rng = np.random.default_rng(4)
    grid = ActionGrid(ks=(1, 2), l1s=(0, 1, 2), l2s=(0, 1))
    features = rng.normal(size=(64, len(SCALAR_FEATURES)))
    hidden = {"target_prev": rng.normal(size=(64, 6)), "draft_root": rng.normal(size=(64, 4))}
    for blocks in (None, hidden):
        selector = train_selector(features, 1 + rng.uniform(size=(64, len(grid))), action_times(grid, LATENCY), grid,
                                  hidden=blocks, seed=1, epochs=2, hidden_sizes=(16, 8), metadata={})
        batch = selector.choose_batch(features, blocks)
        rows = [{name: torch.as_tensor(block[row]) for name, block in blocks.items()} if blocks else None
                for row in range(64)]  # as decoding gives them: torch rows
        assert [selector.choose(features[row], rows[row]) for row in range(64)] == batch.tolist()
        model = selector.model
        scalars = torch.as_tensor(features, dtype=torch.float32)
        blocks_in = selector._hidden(blocks, 64, False) or []
        with torch.no_grad():
            parts = [model.standardise(scalars)] + [projection(block) for block, projection in
                                                    zip(blocks_in, model.projections)]
            by_modules = model.mlp(torch.cat(parts, dim=1))
            assert torch.equal(model(scalars, blocks_in), by_modules)


def _trained(kind: str, hidden=None):
    from verispec.selector.train import train_selector

    rng = np.random.default_rng(7)
    grid = ActionGrid(ks=(1, 2), l1s=(0, 1, 2), l2s=(0, 1, 2))
    features = rng.normal(size=(96, len(SCALAR_FEATURES))) * rng.uniform(0.1, 10, size=len(SCALAR_FEATURES))
    selector = train_selector(features, 1 + rng.uniform(size=(96, len(grid))), action_times(grid, LATENCY), grid,
                              hidden=hidden, kind=kind, seed=2, epochs=3, hidden_sizes=(32, 8), metadata={})
    return selector, features


@pytest.mark.parametrize("kind,with_hidden", [("mlp", False), ("mlp", True), ("linear", False), ("lookup", False)])
def test_the_host_forward_gives_the_modules_logits(kind, with_hidden):
    """On the CPU a selector chooses through ``HostForward`` (numpy float32): its logits equal the torch modules' to
    float32's rounding (1e-5), its choices are theirs wherever the two best logits are 1e-4 apart, and a host
    forward that skips the feature standardisation, or a lookup's table shifted by one action (the controls), is
    caught."""
    from verispec.selector.network import HostForward

    rng = np.random.default_rng(8)
    hidden = {"target_prev": rng.normal(size=(96, 24)) * 3, "draft_root": rng.normal(size=(96, 16))} if with_hidden \
        else None
    selector, features = _trained(kind, hidden)
    host = selector.logits(features, hidden)  # [N, A], the host forward
    assert selector._host is not None
    blocks = selector._hidden(hidden, 96, False)
    with torch.no_grad():
        modules = selector.model(torch.as_tensor(features, dtype=torch.float32), blocks).numpy()
    np.testing.assert_allclose(host, modules, rtol=1e-5, atol=1e-5)
    ordered = np.sort(modules, axis=1)
    clear = ordered[:, -1] - ordered[:, -2] > 1e-4  # [N]
    assert clear.sum() > 48
    np.testing.assert_array_equal(host.argmax(1)[clear], modules.argmax(1)[clear])
    broken = HostForward(selector.model)
    if kind == "lookup":  # each bin's action shifted by one
        feature, edges, table, actions = broken.lookup
        broken.lookup = (feature, edges, (table + 1) % actions, actions)
    else:
        broken.mean, broken.scale = np.zeros_like(broken.mean), np.ones_like(broken.scale)
    host_blocks = selector._hidden(hidden, 96, True) or ()
    assert not np.allclose(broken(features, host_blocks), modules, rtol=1e-5, atol=1e-5)
    if with_hidden:
        with pytest.raises(SelectorError, match="reads 2 hidden-state blocks, got 1"):
            HostForward(selector.model)(features, host_blocks[:1])


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_the_logit_routes_torch_path_equals_its_numpy_path(temperature):
    """The logit route's reductions on an accelerator run in torch (``_logit_parts`` given tensors); run here on CPU
    tensors, they equal the host's numpy reductions to float32's rounding."""
    from verispec.selector.features import _logit_parts

    generator = torch.Generator().manual_seed(11)
    rows = [torch.randn(VOCAB, generator=generator) * 3 for _ in range(3)]  # float32
    by_torch = _logit_parts(rows, 1 / temperature)
    by_numpy = _logit_parts([row.numpy() for row in rows], 1 / temperature)
    assert by_torch.shape == by_numpy.shape == (12,)
    np.testing.assert_allclose(by_torch, by_numpy, rtol=2e-5, atol=1e-6)


def test_bad_logits_and_hidden_states_are_refused_in_one_line():
    """Logits rows of different lengths (the logit route), and hidden states of the wrong width, count or number of
    blocks: one-line SelectorErrors naming the input, not numpy's shape errors."""
    sampling = Sampling(1.0)
    rows = [torch.zeros(50), torch.zeros(50), torch.zeros(60)]
    context = BlockContext((1, 2), 2, *(PositionLaw(sampling, logits=row) for row in rows), None, sampling)
    with pytest.raises(SelectorError, match=r"q_root \(60,\)") as error:
        context_features(context, latency=LATENCY)
    assert "\n" not in str(error.value)
    selector, _ = _trained("mlp", {"target_prev": np.zeros((96, 5)), "draft_root": np.ones((96, 3))})
    features = np.zeros(len(SCALAR_FEATURES))
    good = {"target_prev": np.zeros(5), "draft_root": np.zeros(3)}
    assert 0 <= selector.choose(features, good) < len(selector.grid)
    for bad, message in ((dict(good, target_prev=np.zeros(4)), "target_prev must be 5 values"),
                         (dict(good, draft_root=np.zeros((2, 3))), "draft_root must be 3 values"),
                         ([good["target_prev"]], "reads 2 hidden-state blocks")):
        with pytest.raises(SelectorError, match=message) as error:
            selector.choose(features, bad)
        assert "\n" not in str(error.value)
    with pytest.raises(SelectorError, match="target_prev must be 5 values a root \\(3 root"):
        selector.choose_batch(np.zeros((3, len(SCALAR_FEATURES))), {"target_prev": np.zeros((3, 6)),
                                                                    "draft_root": np.zeros((3, 3))})
