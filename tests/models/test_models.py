"""verispec.models against transformers itself, on tiny randomly initialised models built from a config
(no download, seconds): the sampling law equals transformers' logits warpers, and one tree-attention forward
over the KV cache equals feeding every root-to-node path alone."""

from __future__ import annotations

import math

import numpy as np
import pytest

from verispec.errors import VerispecError

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from verispec.models import CachedModel, Sampling  # noqa: E402  (after the optional imports)

VOCAB = 16


@pytest.fixture(scope="module")
def tiny_model():
    torch.manual_seed(0)
    config = transformers.Qwen2Config(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                      tie_word_embeddings=False)
    return transformers.Qwen2ForCausalLM(config).eval().double()


def _alone(model, tokens):
    """The model's logits after ``tokens`` fed alone, without a cache."""
    with torch.no_grad():
        return model(torch.tensor([tokens], device=model.device)).logits[0, -1]


# --- the sampling law -----------------------------------------------------------------------------------------

def _warped(logits, temperature, top_k, top_p):
    """transformers' own law: its warpers in generate's order, then a softmax."""
    scores = logits.clone()
    warpers = [transformers.TemperatureLogitsWarper(temperature)]
    if top_k is not None:
        warpers.append(transformers.TopKLogitsWarper(top_k))
    if top_p is not None:
        warpers.append(transformers.TopPLogitsWarper(top_p))
    for warper in warpers:
        scores = warper(None, scores)
    return torch.softmax(scores, dim=-1)


@pytest.mark.parametrize("temperature,top_k,top_p", [(1.0, None, None), (0.6, None, None), (1.3, 5, None),
                                                     (1.0, None, 0.8), (0.7, 8, 0.9), (1.0, 1, None),
                                                     (2.0, None, 0.05)])
def test_sampling_law_is_transformers_law(temperature, top_k, top_p):
    logits = torch.tensor(np.random.default_rng(3).normal(0, 2, (6, 50)), dtype=torch.float64)
    expected = _warped(logits, temperature, top_k, top_p)
    got = Sampling(temperature, top_k, top_p).probabilities(logits)
    assert got.dtype == torch.float64
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-12)


def _reference_law(row: np.ndarray, temperature: float, top_k, top_p) -> np.ndarray:
    """The documented law, one row, in plain numpy: top-k keeps every score >= the k-th largest; top-p keeps a
    token iff the probability of the tokens scoring strictly more than it is < top_p (a tie group is kept or
    removed whole), that mass summed from the most likely down (the code sums from the least likely up)."""
    scores = row / temperature
    kept = np.ones(len(scores), dtype=bool)
    if top_k is not None:
        kept &= scores >= np.sort(scores)[::-1][min(top_k, len(scores)) - 1]
    if top_p is not None:
        weights = np.where(kept, np.exp(scores - scores[kept].max()), 0.0)
        probability = weights / weights.sum()
        descending = np.sort(scores[kept])[::-1]
        running = np.concatenate([[0.0], np.cumsum(np.sort(probability[kept])[::-1])])
        above = np.searchsorted(-descending, -scores, side="left")  # how many kept tokens score strictly more
        kept &= running[above] < top_p
    weights = np.where(kept, np.exp(scores - scores[kept].max()), 0.0)
    return weights / weights.sum()


@pytest.mark.parametrize("top_k,top_p", [(20, 0.8), (50, 0.95), (3, 0.5), (2000, 0.9)])
def test_top_p_after_top_k_sorts_only_the_kept_tokens(top_k, top_p):
    """Top-p after top-k sorts the k kept tokens, not the vocabulary (6 ms a row at V = 151,936 on a CPU): the
    law is the documented one (a numpy reference, to 1e-12), with ties among the kept scores and at the k-th
    score (more than k kept: the whole-vocabulary path); rows without ties also equal transformers' law."""
    rng = np.random.default_rng(5)
    logits = torch.tensor(rng.normal(0, 2, (5, 2000)), dtype=torch.float64)
    logits[1, :40] = 3.0  # ties among the kept tokens
    logits[2, 100:110] = logits[2].max() + 0.5  # ten tied maxima
    logits[3] = torch.round(logits[3] * 2) / 2  # many ties, at the k-th score too
    for temperature in (0.7, 1.0):
        got = Sampling(temperature, top_k, top_p).probabilities(logits)
        for row in range(5):
            np.testing.assert_allclose(got[row].numpy(), _reference_law(logits[row].numpy(), temperature, top_k,
                                                                        top_p), rtol=0, atol=1e-12)
        untied = [0, 4]
        torch.testing.assert_close(got[untied], _warped(logits[untied], temperature, top_k, top_p), rtol=0,
                                   atol=1e-12)


def test_temperature_zero_is_greedy_with_the_smallest_id_on_ties():
    logits = torch.tensor([[0.5, 2.0, 2.0, -1.0], [3.0, 0.0, 1.0, 3.0]])
    law = Sampling(temperature=0).probabilities(logits)
    assert law.tolist() == [[0.0, 1.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0]]


@pytest.mark.parametrize("options,message", [(dict(temperature=-1), "temperature"), (dict(temperature=math.nan),
                                                                                      "temperature"),
                                             (dict(top_k=0), "top-k"), (dict(top_k=2.5), "top-k"),
                                             (dict(top_p=0), "top-p"), (dict(top_p=1.5), "top-p")])
def test_bad_sampling_settings_are_one_line_errors(options, message):
    with pytest.raises(VerispecError, match=message) as caught:
        Sampling(**options)
    assert "\n" not in str(caught.value)


# --- one forward for the whole tree ---------------------------------------------------------------------------

@pytest.mark.parametrize("max_length", [None, 32], ids=["dynamic-cache", "static-cache"])
def test_tree_forward_equals_each_path_alone(tiny_model, max_length):
    prompt = [1, 2, 3, 4]
    cached = CachedModel(tiny_model, max_length)
    last = cached.prefill(prompt)
    torch.testing.assert_close(last, _alone(tiny_model, prompt), rtol=0, atol=1e-12)
    # the previous block's emitted token 9, then a tree under it: 5 -> (6, 7 -> 8), 10 -> 11
    tokens = [9, 5, 6, 7, 8, 10, 11]
    parents = [-1, 0, 1, 1, 3, 0, 5]
    logits = cached.extend(tokens, parents)
    for node in range(len(tokens)):
        path, walk = [], node
        while walk != -1:
            path.append(tokens[walk])
            walk = parents[walk]
        expected = _alone(tiny_model, prompt + path[::-1])
        torch.testing.assert_close(logits[node], expected, rtol=0, atol=1e-10, msg=f"node {node}")


@pytest.mark.parametrize("max_length", [None, 32], ids=["dynamic-cache", "static-cache"])
def test_last_only_gives_the_last_row_and_the_same_cache(tiny_model, max_length):
    """``extend(..., last_only=True)`` (a prefill) returns [1, V], the full extension's last row, and leaves the
    cache as the full extension does (the output layer is the only part cut)."""
    full, cut = CachedModel(tiny_model, max_length), CachedModel(tiny_model, max_length)
    prompt = [5, 1, 4, 2, 8, 3]
    everything = full.extend(prompt, list(range(-1, len(prompt) - 1)))
    last = cut.extend(prompt, list(range(-1, len(prompt) - 1)), last_only=True)
    assert tuple(last.shape) == (1, everything.shape[-1])
    torch.testing.assert_close(last[0], everything[-1], rtol=0, atol=1e-12)
    for model in (full, cut):
        model.commit(list(range(len(prompt))))
    torch.testing.assert_close(cut.extend([7, 6], [-1, -1]), full.extend([7, 6], [-1, -1]), rtol=0, atol=1e-12)


@pytest.mark.parametrize("max_length", [None, 32], ids=["dynamic-cache", "static-cache"])
def test_nodes_fed_one_at_a_time_on_top_of_pending_ones(tiny_model, max_length):
    # how the draft model is asked: each new node hangs under an earlier pending one
    cached = CachedModel(tiny_model, max_length)
    cached.prefill([3, 1])
    first = cached.extend([4], [-1])[0]
    second = cached.extend([5, 6], [0, 0])
    third = cached.extend([7], [2])[0]
    torch.testing.assert_close(first, _alone(tiny_model, [3, 1, 4]), rtol=0, atol=1e-10)
    torch.testing.assert_close(second[1], _alone(tiny_model, [3, 1, 4, 6]), rtol=0, atol=1e-10)
    torch.testing.assert_close(third, _alone(tiny_model, [3, 1, 4, 6, 7]), rtol=0, atol=1e-10)


@pytest.mark.parametrize("max_length", [None, 32], ids=["dynamic-cache", "static-cache"])
def test_commit_keeps_the_accepted_path_only(tiny_model, max_length):
    cached = CachedModel(tiny_model, max_length)
    cached.prefill([1, 2])
    cached.extend([3, 4, 5, 6], [-1, 0, 0, 2])  # 3 -> (4, 5 -> 6)
    cached.commit([0, 2])  # accept 3, 5
    assert cached.committed == 4 and cached.pending == 0
    assert int(cached.cache.get_seq_length()) == 4
    after = cached.extend([12], [-1])[0]
    torch.testing.assert_close(after, _alone(tiny_model, [1, 2, 3, 5, 12]), rtol=0, atol=1e-10)


@pytest.mark.parametrize("tokens,parents,message", [([1, 2], [-1], "one parent per token"), ([1], [0], "parent 0"),
                                                    ([1, 2], [-1, 5], "parent 5")])
def test_malformed_extensions_are_refused(tiny_model, tokens, parents, message):
    cached = CachedModel(tiny_model)
    cached.prefill([1])
    with pytest.raises(VerispecError, match=message):
        cached.extend(tokens, parents)


def test_a_commit_that_is_not_a_path_is_refused(tiny_model):
    cached = CachedModel(tiny_model)
    cached.prefill([1])
    cached.extend([2, 3, 4], [-1, -1, 0])
    with pytest.raises(VerispecError, match="path"):
        cached.commit([1, 2])  # 4 hangs under 2, not under 3


def test_a_static_cache_refuses_to_overflow_and_stays_usable(tiny_model):
    cached = CachedModel(tiny_model, 6)
    cached.prefill([1, 2, 3])
    with pytest.raises(VerispecError, match="static KV cache holds 6 tokens; this forward needs 7"):
        cached.extend([4, 5, 6, 7], [-1, 0, 1, 2])
    assert cached.pending == 0  # the refused extension left nothing behind
    logits = cached.extend([4, 5], [-1, 0])
    torch.testing.assert_close(logits[1], _alone(tiny_model, [1, 2, 3, 4, 5]), rtol=0, atol=1e-10)
    with pytest.raises(VerispecError, match="max_length"):
        CachedModel(tiny_model, 0)


# --- graphed forwards: padded buckets over a static cache (CUDA graphs on a GPU, the same buffers eagerly here) ---

def _graphed_matches_plain(model, device_atol):
    """Every CachedModel operation through GraphedForward gives the logits of the plain dynamic-cache path:
    padding rows (each seeing only its own slot) change nothing for the real rows."""
    from verispec.models.tree_forward import BUCKETS, GraphedForward

    plain, graphed = CachedModel(model), CachedModel(model, 40, graphs=True)
    assert graphed.max_length % 512 == 0 and isinstance(graphed.runner, GraphedForward)
    for cached in (plain, graphed):
        cached.prefill([1, 2, 3, 4, 5])
    steps = [("extend", ([9, 5, 6, 7, 8], [-1, 0, 1, 1, 3])),  # 5 new tokens: a padded width-8 bucket
             ("extend", ([10], [4])), ("commit", ([0, 1, 3],)), ("extend", ([3, 4, 11], [-1, 0, 0])),
             ("discard", ()), ("extend", ([2], [-1]))]
    for name, arguments in steps:
        results = [getattr(cached, name)(*arguments) for cached in (plain, graphed)]
        if name == "extend":
            torch.testing.assert_close(results[1], results[0], rtol=0, atol=device_atol, msg=f"{name}{arguments}")
    assert set(graphed.runner.buffers) <= set(BUCKETS)
    # a second sequence on the same model reuses the runner (and, on a GPU, its captured graphs)
    again = CachedModel(model, 100, graphs=True)
    assert again.runner is graphed.runner and again.committed == 0
    torch.testing.assert_close(again.prefill([7, 1]), _alone(model, [7, 1]), rtol=0, atol=device_atol)
    return graphed.runner


def test_graphed_forwards_equal_plain_forwards(tiny_model):
    import copy

    runner = _graphed_matches_plain(tiny_model, 1e-12)
    assert runner.captures == 0  # no graph capture on a CPU: the same buffers run eagerly
    # a copy of the model (carrying its original's runners in its __dict__) gets runners of its own
    twin = copy.deepcopy(tiny_model)
    assert CachedModel(twin, 40, graphs=True).runner.model is twin


def test_graphs_need_a_static_cache_length(tiny_model):
    with pytest.raises(VerispecError, match="graphs=True needs a static cache"):
        CachedModel(tiny_model, graphs=True)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU here (GPU sessions run it)")
def test_cuda_graph_replays_equal_plain_forwards(tiny_model):
    import copy

    model = copy.deepcopy(tiny_model).to("cuda")
    runner = _graphed_matches_plain(model, 1e-10)
    assert runner.captures >= 3 and set(runner.graphs) <= set(runner.buffers)


def test_rollback_returns_to_an_earlier_length(tiny_model):
    for max_length in (None, 32):
        cached = CachedModel(tiny_model, max_length)
        cached.prefill([1, 2, 3])
        cached.extend([4, 5], [-1, 0])
        cached.commit([0, 1])
        cached.rollback(2)
        assert cached.committed == 2 and cached.pending == 0
        torch.testing.assert_close(cached.extend([9], [-1])[0], _alone(tiny_model, [1, 2, 9]), rtol=0, atol=1e-10)
        with pytest.raises(VerispecError, match="rollback needs a length in 0..2"):
            cached.rollback(3)


@pytest.mark.parametrize("top_k,top_p", [(20, 0.8), (20, None), (3, 0.5), (50, 0.95), (1, None)])
def test_top_k_on_model_logits_takes_the_k_largest_alone(top_k, top_p):
    """Float32 logits (a model's) with top-k take the short path (the law from the k largest logits, scattered into
    zeros); it gives the whole-vocabulary law (the same logits in float64, which take the long path) to rounding
    and the documented law (numpy reference), for tie-free rows; rows with ties at the k-th logit fall back to the
    long path (equal bit for bit), and so do NaN rows."""
    from verispec.models.sampling import Sampling

    rng = np.random.default_rng(11)
    logits = torch.tensor(rng.normal(0, 3, (6, 5000)), dtype=torch.float32)
    logits[4, :60] = logits[4].max() + 1  # sixty tied maxima: a tie at the k-th logit
    logits[5] = float("nan")
    for temperature in (0.7, 1.0, 1.3):
        sampling = Sampling(temperature, top_k, top_p)
        calls = []
        original = Sampling._top_k_law

        def spy(self, rows, calls=calls, original=original):
            calls.append(rows.shape)
            return original(self, rows)

        Sampling._top_k_law = spy
        try:
            short = sampling.probabilities(logits[:4])
            tied = sampling.probabilities(logits[4:6])
        finally:
            Sampling._top_k_law = original
        assert calls == [(4, 5000), (2, 5000)]  # both asked; the tied and NaN rows fell back
        long = sampling.probabilities(logits[:4].to(torch.float64))
        torch.testing.assert_close(short, long, rtol=0, atol=1e-15)
        assert int((short > 0).sum()) <= 4 * top_k
        for row in range(4):
            np.testing.assert_allclose(short[row].numpy(), _reference_law(logits[row].double().numpy(), temperature,
                                                                          top_k, top_p), rtol=0, atol=1e-12)
        assert torch.equal(tied[0], sampling.probabilities(logits[4:5].to(torch.float64))[0])
        assert bool(torch.isnan(tied[1]).all())


@pytest.mark.parametrize("top_k", [1, 2, 5, 20])
def test_the_short_top_k_path_declines_exactly_the_rows_with_a_tie_at_the_kth_logit(top_k):
    """The short path is taken exactly where the k largest logits are the only ones at or above the k-th (counted
    here over the whole row with numpy): a tie between the k-th and (k+1)-th declines it, a tie among the k, one
    just below them, or a -inf tail keeps it; a single NaN anywhere declines it."""
    from verispec.models.sampling import Sampling

    rng = np.random.default_rng(13)
    base = rng.permutation(np.arange(400, dtype=np.float32)) / 8  # distinct, exact in float32
    kth = np.sort(base)[::-1][top_k - 1]
    rows = []
    for variant in range(6):
        row = base.copy()
        ordered = np.argsort(-row)
        if variant == 1:
            row[ordered[top_k]] = kth  # (k+1)-th equals the k-th
        elif variant == 2 and top_k > 1:
            row[ordered[top_k - 2]] = kth  # (k-1)-th equals the k-th: a tie inside the k
        elif variant == 3:
            row[ordered[top_k + 1]] = row[ordered[top_k]]  # a tie just below the k
        elif variant == 4:
            row[ordered[top_k:]] = -np.inf
        elif variant == 5:
            row[ordered[200]] = np.nan
        rows.append(row)
    logits = torch.tensor(np.array(rows))
    for temperature in (0.7, 1.0):
        sampling = Sampling(temperature, top_k, None)
        for row in logits:
            numbers = row.numpy()
            ranked = np.sort(numbers)[::-1]
            short = not np.isnan(numbers).any() and int((numbers >= ranked[top_k - 1]).sum()) == top_k
            assert (sampling._top_k_kept(row[None]) is not None) == short
            if short:
                kept = np.sort(np.argsort(-numbers, kind="stable")[:top_k])
                assert np.array_equal(np.sort(sampling._top_k_kept(row[None])[1][0].numpy()), kept)


@pytest.mark.parametrize("top_k,top_p", [(20, 0.8), (20, None), (3, 0.5), (1, None)])
def test_compact_probabilities_are_the_laws_nonzero_entries(top_k, top_p):
    """``Sampling.compact_probabilities`` (the model problem's store at top-k: no [rows, V] float64 law) gives each
    row's ``compact_law`` of ``probabilities``, bit for bit (the same softmax over the same k scores), on float32
    logits at three temperatures; it declines (None, the caller then takes ``probabilities``) where that path does
    not apply: ties at the k-th logit, NaN rows, float64 logits, no top-k, greedy, top-k of half the vocabulary."""
    from verispec.models.sampling import Sampling
    from verispec.simulator.problems import compact_law

    rng = np.random.default_rng(12)
    logits = torch.tensor(rng.normal(0, 3, (7, 5000)), dtype=torch.float32)
    logits[5, :60] = logits[5].max() + 1  # a tie at the k-th logit
    logits[6] = float("nan")
    for temperature in (0.7, 1.0, 1.3):
        sampling = Sampling(temperature, top_k, top_p)
        compact = sampling.compact_probabilities(logits[:5])
        whole = sampling.probabilities(logits[:5]).numpy()
        assert len(compact) == 5
        for (support, values), row in zip(compact, whole):
            expected_support, expected_values = compact_law(row)
            assert support.dtype == np.int64 and values.dtype == np.float64
            np.testing.assert_array_equal(support, expected_support)
            assert np.array_equal(values, expected_values)  # bit for bit
        assert sampling.compact_probabilities(logits[4:6]) is None
        assert sampling.compact_probabilities(logits[6:7]) is None
        assert sampling.compact_probabilities(logits[:5].to(torch.float64)) is None
    assert Sampling(0.7).compact_probabilities(logits[:5]) is None
    assert Sampling(0.0, top_k=5).compact_probabilities(logits[:5]) is None
    assert Sampling(0.7, top_k=2500).compact_probabilities(logits[:5]) is None


# --- the cache keyword across transformers releases ---------------------------------------------------------------

def test_the_cache_goes_by_the_keyword_the_forward_takes(tiny_model):
    """transformers renamed forward's ``past_key_values`` to ``cache`` (5.24 warns the old name goes in 5.40):
    the keyword comes from the installed release's signature, and an older signature keeps the old name."""
    import inspect

    from verispec.models.tree_forward import cache_keyword

    keyword = cache_keyword(tiny_model)
    assert keyword in inspect.signature(type(tiny_model).forward).parameters

    class OlderRelease(torch.nn.Module):
        def forward(self, input_ids=None, past_key_values=None, attention_mask=None):
            return past_key_values

    class NewerRelease(torch.nn.Module):
        def forward(self, input_ids=None, cache=None, attention_mask=None, **kwargs):
            return cache

    assert cache_keyword(OlderRelease()) == "past_key_values"
    assert cache_keyword(NewerRelease()) == "cache"


def test_no_forward_passes_a_deprecated_cache_keyword(tiny_model):
    """The tree forward, the graphed forward's buffers and the batched traces' forward each run without a
    deprecation warning (turned into an error here), whatever the installed release calls the cache."""
    import warnings

    from transformers import DynamicCache

    from verispec.models.batched import batch_forward, left_padded, positions_of

    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        warnings.simplefilter("error", DeprecationWarning)
        torch.testing.assert_close(CachedModel(tiny_model).prefill([7, 1]), _alone(tiny_model, [7, 1]),
                                   rtol=0, atol=1e-12)
        torch.testing.assert_close(CachedModel(tiny_model, 40, graphs=True).prefill([7, 1]),
                                   _alone(tiny_model, [7, 1]), rtol=0, atol=1e-12)
        ids, mask = left_padded([[7, 1]], tiny_model.device, 0)
        torch.testing.assert_close(batch_forward(tiny_model, DynamicCache(), ids, mask, positions_of(mask))[0],
                                   _alone(tiny_model, [7, 1]), rtol=0, atol=1e-12)
