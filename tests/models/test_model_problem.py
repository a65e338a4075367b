"""ModelProblem: a live pair's conditionals at every prefix after a context, as a Problem the exact engine
analyses; and the bridge to real decoding: the exact law of tau that the engine computes on it at a context is
the law real decoding produces from that context (tiny pairs, V = 16)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from verispec.errors import InvalidProblemError, VerispecError
from verispec.simulator import TabularProblem, analyze, parse_tree
from verispec.statistics import exact_binomial_test
from verispec.verifiers import REGISTRY

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from verispec.models import Sampling, SpeculativeDecoder, generate  # noqa: E402
from verispec.models.problem import ModelProblem  # noqa: E402

CONTEXT = [4, 1, 7]
SAMPLING = Sampling(1.0, top_p=0.97)


def _alone(model, tokens, sampling=SAMPLING):
    with torch.no_grad():
        return sampling.probabilities(model(torch.tensor([list(tokens)])).logits[0, -1]).numpy()


def test_conditionals_equal_uncached_forwards_and_come_in_batches(pair_seed2):
    problem = ModelProblem(pair_seed2, CONTEXT, SAMPLING, horizon=2)
    problem.prefetch(2)  # 1 + 16 + 256 prefixes: one trie per forward, at most 512 nodes each
    assert problem.forward_passes == 3  # one pass per depth (prefetch prepares depth by depth)
    for prefix in [(), (3,), (15, 0), (9, 9)]:
        np.testing.assert_allclose(problem.target(prefix), _alone(pair_seed2.target, CONTEXT + list(prefix)), rtol=0,
                                   atol=1e-12)
        np.testing.assert_allclose(problem.draft(prefix), _alone(pair_seed2.draft, CONTEXT + list(prefix)), rtol=0,
                                   atol=1e-12)
    assert problem.forward_passes == 3  # cached


def test_small_batches_give_the_same_laws(pair_seed2):
    big = ModelProblem(pair_seed2, CONTEXT, SAMPLING)
    small = ModelProblem(pair_seed2, CONTEXT, SAMPLING, nodes_per_forward=5)
    prefixes = [(), (1,), (1, 2), (3, 4), (3, 5), (6, 7, 8), (6,)]
    big.prepare(prefixes)
    small.prepare(prefixes)
    assert big.forward_passes == 1 and small.forward_passes > 1
    for prefix in prefixes:
        np.testing.assert_allclose(small.target(prefix), big.target(prefix), rtol=0, atol=1e-12)


@pytest.mark.parametrize("name,spec", [("bv", "chain:2"), ("specinfer", "delayed:2,1,1"), ("traversal", "branch:2,1")])
def test_the_engine_analyses_it_like_the_same_table(pair_seed2, name, spec):
    problem = ModelProblem(pair_seed2, CONTEXT, SAMPLING, horizon=2)
    problem.prefetch(2)
    table = TabularProblem(16, {prefix: _alone(pair_seed2.target, CONTEXT + list(prefix)) for length in range(3)
                                for prefix in problem.prefixes(length)},
                           {prefix: _alone(pair_seed2.draft, CONTEXT + list(prefix)) for length in range(2)
                            for prefix in problem.prefixes(length)})
    live, tabular = analyze(problem, spec, REGISTRY[name]), analyze(table, spec, REGISTRY[name])
    assert live.lossless and abs(live.block_efficiency - tabular.block_efficiency) < 1e-12


def _first_block_taus(pair_seed2, spec, name, runs, **options):
    counts = Counter()
    for seed in range(runs):
        decoder = SpeculativeDecoder(pair_seed2, spec, name, SAMPLING, seed, stop_at_eos=False, **options)
        counts[decoder.run(CONTEXT, parse_tree(spec).depth + 1).blocks[0].accepted] += 1
    return counts


@pytest.mark.slow  # 11-12 s each; the fast loop checks real decoding's law in tests/models/test_decoding.py
@pytest.mark.parametrize("name,spec", [("specinfer", "delayed:2,1,1"), ("bv", "chain:2")])
def test_real_decoding_accepts_as_the_exact_engine_predicts(pair_seed2, name, spec):
    """The first block's tau over 600 seeded real runs follows the tau law the exact engine computes for the
    same context (exact binomial test, false-failure rate 1e-6); a top-2 filtered draft does not."""
    problem = ModelProblem(pair_seed2, CONTEXT, SAMPLING, horizon=parse_tree(spec).depth)
    predicted = analyze(problem, spec, REGISTRY[name])
    law = {tau: float(mass) for tau, mass in enumerate(predicted.tau_law)}
    measured = exact_binomial_test(_first_block_taus(pair_seed2, spec, name, 600), law)
    assert not measured.rejected, measured.describe()
    filtered = _first_block_taus(pair_seed2, spec, name, 600,
                                 law_for_drafting=Sampling(1.0, top_k=2, top_p=0.97).probabilities)
    assert exact_binomial_test(filtered, law).rejected


def test_bad_arguments(pair_seed2):
    with pytest.raises(InvalidProblemError, match="horizon"):
        ModelProblem(pair_seed2, CONTEXT, horizon=-1)
    problem = ModelProblem(pair_seed2, CONTEXT, horizon=1)
    with pytest.raises(InvalidProblemError, match="beyond the problem's horizon 1"):
        problem.target((1, 2))
    with pytest.raises(InvalidProblemError, match="outside the vocabulary"):
        problem.draft((16,))
    with pytest.raises(VerispecError, match="prefetching depth 6"):
        problem.prefetch(6)
    assert generate(pair_seed2, CONTEXT, "chain:1", "naive", 1).tokens  # the pair is still usable


def test_a_small_cache_drops_old_laws_and_recomputes_them_equal(pair_seed2):
    roomy = ModelProblem(pair_seed2, CONTEXT, SAMPLING, horizon=2)
    tight = ModelProblem(pair_seed2, CONTEXT, SAMPLING, horizon=2, cache_bytes=3 * 16 * 16)  # three prefixes at V = 16
    prefixes = [(), (1,), (2,), (3,), (1, 2)]
    for problem in (roomy, tight):
        problem.prepare(prefixes)
    assert len(tight._laws) == 3 and len(roomy._laws) == 5
    passes = tight.forward_passes
    for prefix in prefixes:
        # recomputed in a smaller batch: equal up to float64 rounding of a different batch's kernels
        np.testing.assert_allclose(tight.draft(prefix), roomy.draft(prefix), rtol=0, atol=1e-12)
        np.testing.assert_allclose(tight.target(prefix), roomy.target(prefix), rtol=0, atol=1e-12)
    assert tight.forward_passes > passes and len(tight._laws) == 3


@pytest.mark.parametrize("static", [False, True], ids=["dynamic-cache", "static-cache"])
def test_first_block_taus_roll_back_to_the_context_and_match_whole_runs_seed_for_seed(pair_seed2, static):
    seeds = list(range(12))
    decoder = SpeculativeDecoder(pair_seed2, "delayed:2,1,2", "specinfer", SAMPLING, 0, stop_at_eos=False,
                                 static_cache=static)
    rolled = decoder.first_block_taus(CONTEXT, seeds)
    whole = [SpeculativeDecoder(pair_seed2, "delayed:2,1,2", "specinfer", SAMPLING, seed, stop_at_eos=False)
             .run(CONTEXT, 4).blocks[0].accepted for seed in seeds]
    assert rolled == whole and len(set(rolled)) > 1
