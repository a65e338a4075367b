"""ModelProblem: a live pair's conditionals at every prefix after a context, as a Problem the exact engine
analyses; and the bridge to real decoding: the exact law of tau that the engine computes on it at a context is
the law real decoding produces from that context (tiny pairs, V = 16)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from tests.support.tiny_models import forwards_memoised, laws_memoised
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


def _first_block_taus(pair_seed2, spec, name, seeds, **options) -> list[int]:
    """The first block's tau for each of ``seeds`` by ``SpeculativeDecoder.first_block_taus`` (the whole tree drafted,
    over caches prefilled once and rolled back: each seed's tau is that of a whole run with the seed,
    test_first_block_taus_roll_back_to_the_context_and_match_whole_runs_seed_for_seed), under ``forwards_memoised``
    and ``laws_memoised`` (each seed's draws as without them: tests/models/test_decoding.py, and here)."""
    decoder = SpeculativeDecoder(pair_seed2, spec, name, SAMPLING, stop_at_eos=False, **options)
    with forwards_memoised(pair_seed2.target, pair_seed2.draft), laws_memoised(decoder.verifier):
        return decoder.first_block_taus(CONTEXT, seeds)


@pytest.mark.slow  # about 3 s each; the fast loop checks real decoding's law in tests/models/test_decoding.py
@pytest.mark.parametrize("name,spec", [("specinfer", "delayed:2,1,1"), ("bv", "chain:2")])
def test_real_decoding_accepts_as_the_exact_engine_predicts(pair_seed2, name, spec):
    """The first block's tau over 600 seeded real runs follows the tau law the exact engine computes for the
    same context (exact binomial test, false-failure rate 1e-6); a top-2 filtered draft does not."""
    problem = ModelProblem(pair_seed2, CONTEXT, SAMPLING, horizon=parse_tree(spec).depth)
    predicted = analyze(problem, spec, REGISTRY[name])
    law = {tau: float(mass) for tau, mass in enumerate(predicted.tau_law)}
    measured = exact_binomial_test(Counter(_first_block_taus(pair_seed2, spec, name, range(600))), law)
    assert not measured.rejected, measured.describe()
    filtered = Counter(_first_block_taus(pair_seed2, spec, name, range(600),
                                         law_for_drafting=Sampling(1.0, top_k=2, top_p=0.97).probabilities))
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
    assert [len(laws) for laws in tight._laws] == [3, 3] and [len(laws) for laws in roomy._laws] == [5, 5]
    passes = tight.forward_passes
    for prefix in prefixes:
        # recomputed in a smaller batch: equal up to float64 rounding of a different batch's kernels
        np.testing.assert_allclose(tight.draft(prefix), roomy.draft(prefix), rtol=0, atol=1e-12)
        np.testing.assert_allclose(tight.target(prefix), roomy.target(prefix), rtol=0, atol=1e-12)
    assert tight.forward_passes > passes and [len(laws) for laws in tight._laws] == [3, 3]


def test_drafts_extended_level_by_level_equal_prepared_laws_and_feed_each_node_once(pair_seed2):
    """``extend_drafts`` keeps the draft's tree across calls: a tree asked for level by level feeds each node once
    (the draft's forwarded tokens equal the distinct nodes, the root included), runs no target forward, and
    gives the laws a one-shot ``prepare`` gives."""
    levels = [[()], [(3,), (9,)], [(3, 1), (3, 2), (9, 9)], [(3, 1, 4), (9, 9, 0)]]
    extended = ModelProblem(pair_seed2, CONTEXT, SAMPLING, horizon=4)
    for level in levels:
        extended.extend_drafts(level)
    nodes = {prefix for level in levels for prefix in level}
    assert extended.forwarded_tokens == [0, len(nodes)] and extended.passes == [0, len(levels)]
    prepared = ModelProblem(pair_seed2, CONTEXT, SAMPLING, horizon=3)
    prepared.prepare(nodes, target=False)
    assert prepared.passes == [0, 1]
    for prefix in nodes:
        np.testing.assert_allclose(extended.draft(prefix), prepared.draft(prefix), rtol=0, atol=1e-12)
        np.testing.assert_allclose(extended.draft(prefix), _alone(pair_seed2.draft, CONTEXT + list(prefix)), rtol=0,
                                   atol=1e-12)
    # a one-shot draft forward drops the kept tree; extending afterwards starts a new one, still right
    extended.prepare([(5,)])
    extended.extend_drafts([(5, 5), (3, 1, 4, 2)])
    for prefix in [(5, 5), (3, 1, 4, 2)]:
        np.testing.assert_allclose(extended.draft(prefix), _alone(pair_seed2.draft, CONTEXT + list(prefix)), rtol=0,
                                   atol=1e-12)
    # the control: a level fed under the wrong parents (the kept tree's indices off by one) gives other laws
    broken = ModelProblem(pair_seed2, CONTEXT, SAMPLING, horizon=3)
    broken.extend_drafts([(), (3,)])
    broken._draft_pending[(3,)] = 0  # (3, 1) now hangs under the root, not under 3
    broken.extend_drafts([(3, 1)])
    assert np.abs(broken.draft((3, 1)) - _alone(pair_seed2.draft, CONTEXT + [3, 1])).max() > 1e-3


@pytest.mark.parametrize("static", [False, True], ids=["dynamic-cache", "static-cache"])
def test_first_block_taus_roll_back_to_the_context_and_match_whole_runs_seed_for_seed(pair_seed2, static):
    seeds = list(range(12))
    decoder = SpeculativeDecoder(pair_seed2, "delayed:2,1,2", "specinfer", SAMPLING, 0, stop_at_eos=False,
                                 static_cache=static)
    rolled = decoder.first_block_taus(CONTEXT, seeds)
    whole = [SpeculativeDecoder(pair_seed2, "delayed:2,1,2", "specinfer", SAMPLING, seed, stop_at_eos=False)
             .run(CONTEXT, 4).blocks[0].accepted for seed in seeds]
    assert rolled == whole and len(set(rolled)) > 1
    if not static:  # the statistical test's cases (_first_block_taus) against a whole one-token run of each seed
        filtered = {"law_for_drafting": Sampling(1.0, top_k=2, top_p=0.97).probabilities}
        for spec, name, options in (("delayed:2,1,1", "specinfer", {}), ("chain:2", "bv", filtered)):
            whole = [SpeculativeDecoder(pair_seed2, spec, name, SAMPLING, seed, stop_at_eos=False, cut_drafts=False,
                                        **options).run(CONTEXT, 1).blocks[0].accepted for seed in seeds]
            assert _first_block_taus(pair_seed2, spec, name, seeds, **options) == whole, (spec, name)


def test_problems_on_a_shared_context_feed_only_new_tokens_and_give_the_fresh_laws(pair_seed2):
    """Successive problems on one ``SharedContext`` keep the caches over their common context prefix: the second
    context (the first plus 3 tokens) prefills 3 tokens, a third that leaves the first's path after 2 tokens
    prefills only its own suffix, and each gives the laws a problem with its own caches gives (float64, 1e-12).
    A problem whose caches a later one took is refused, not answered from the wrong context."""
    from verispec.models.problem import SharedContext

    shared = SharedContext(pair_seed2)
    contexts = [[4, 1, 7, 2], [4, 1, 7, 2, 9, 9, 3], [4, 1, 5, 6, 8]]
    prefilled = []
    problems = []
    for context in contexts:
        before = shared.prefilled_tokens
        problem = ModelProblem(pair_seed2, context, SAMPLING, shared=shared)
        prefilled.append(shared.prefilled_tokens - before)
        fresh = ModelProblem(pair_seed2, context, SAMPLING)
        problem.extend_drafts([(), (3,), (3, 1)])
        problem.prepare([(), (3,)], draft=False)
        for prefix in [(), (3,)]:
            np.testing.assert_allclose(problem.target(prefix), fresh.target(prefix), rtol=0, atol=1e-12)
        for prefix in [(), (3,), (3, 1)]:
            np.testing.assert_allclose(problem.draft(prefix), fresh.draft(prefix), rtol=0, atol=1e-12)
        problems.append(problem)
    # committed: context[:-1]; the first 3 tokens, then 3 more, then back to [4, 1] and 2 new ones
    assert prefilled == [3, 3, 2]
    with pytest.raises(VerispecError, match="another context"):
        problems[0].target((5,))
    with pytest.raises(VerispecError, match="SharedContext"):
        ModelProblem(pair_seed2, [1, 2], SAMPLING, shared=object())


def test_a_pack_runs_its_members_forwards_together_with_each_members_own_laws(pair_seed2):
    """``ProblemPack``: three problems of other contexts (one sharing another's prefix, one a single token) and
    samplings; inside ``together()`` a draft level of every member is one draft pass and the target over every
    member's nodes (with a deferred law) one target pass; every law equals a forward over its own context alone."""
    from verispec.models.problem import ProblemPack, SharedContext

    contexts = [CONTEXT, CONTEXT + [2, 5], [6]]
    samplings = [SAMPLING, Sampling(0.7, top_k=5), Sampling(1.0)]
    pack = ProblemPack(pair_seed2, contexts, samplings, horizon=4, shared=SharedContext(pair_seed2))
    levels = [[()], [(3,), (9,)], [(3, 1), (3, 2), (9, 9)]]
    for depth, level in enumerate(levels):
        with pack.together():
            for member in pack.problems:
                member.extend_drafts(level)
        assert [member.passes[1] for member in pack.problems] == [depth + 1] * 3
    targets = [(), (3,), (3, 1), (9,)]
    with pack.together():
        for member in pack.problems:
            member.defer([(9, 9)])
            member.prepare(targets, draft=False)
    assert [member.passes for member in pack.problems] == [[1, 3]] * 3
    assert [member.forwarded_tokens for member in pack.problems] == [[5, 6]] * 3
    for member, context, sampling in zip(pack.problems, contexts, samplings):
        for prefix in {prefix for level in levels for prefix in level}:
            np.testing.assert_allclose(member.draft(prefix), _alone(pair_seed2.draft, context + list(prefix),
                                                                    sampling), rtol=0, atol=1e-12)
        for prefix in targets + [(9, 9)]:
            np.testing.assert_allclose(member.target(prefix), _alone(pair_seed2.target, context + list(prefix),
                                                                     sampling), rtol=0, atol=1e-12)
    assert [member.passes for member in pack.problems] == [[1, 3]] * 3  # everything read was computed already
    # a member alone on the pack (outside together) still works, and a read inside together is refused
    np.testing.assert_allclose(pack.problems[2].target((5, 5)), _alone(pair_seed2.target, [6, 5, 5], samplings[2]),
                               rtol=0, atol=1e-12)
    with pytest.raises(VerispecError, match="inside together"), pack.together():
        pack.problems[0].target((1, 1))


def test_a_pack_is_refused_without_contexts_or_with_unequal_lists(pair_seed2):
    from verispec.models.problem import ProblemPack

    with pytest.raises(VerispecError, match="one sampling per context"):
        ProblemPack(pair_seed2, [], [])
    with pytest.raises(VerispecError, match="one sampling per context"):
        ProblemPack(pair_seed2, [CONTEXT], [SAMPLING, SAMPLING])


def test_a_float32_pairs_top_k_laws_are_stored_from_the_k_largest_logits(monkeypatch):
    """On float32 models (the Qwen pair's dtype) a top-k law is stored from its k largest logits
    (``Sampling.compact_probabilities``, no [rows, V] float64 law): the cached (support, values) equal, bit for bit,
    those stored through the whole law (``probabilities`` then ``compact_law``, the route it replaces), and the
    route was taken."""
    from verispec.models.sampling import Sampling as SamplingClass
    from verispec.models.tiny import tiny_pair

    pair = tiny_pair(seed=4, vocab=256)
    pair.target.float()
    pair.draft.float()
    sampling = Sampling(0.8, top_k=4, top_p=0.9)
    prefixes = [(), (1,), (2,), (1, 2), (2, 5)]
    calls = []
    original = SamplingClass.compact_probabilities
    monkeypatch.setattr(SamplingClass, "compact_probabilities",
                        lambda self, rows: calls.append(len(rows)) or original(self, rows))
    fast = ModelProblem(pair, CONTEXT, sampling, horizon=2)
    fast.prepare(prefixes)
    assert calls and all(isinstance(law, tuple) for cache in fast._laws for law in cache.values())
    monkeypatch.setattr(SamplingClass, "compact_probabilities", lambda self, rows: None)
    whole = ModelProblem(pair, CONTEXT, sampling, horizon=2)
    whole.prepare(prefixes)
    for prefix in prefixes:
        for mine, theirs in ((fast.target_compact(prefix), whole.target_compact(prefix)),
                             (fast.draft_compact(prefix), whole.draft_compact(prefix))):
            np.testing.assert_array_equal(mine[0], theirs[0])
            assert np.array_equal(mine[1], theirs[1])


def test_a_top_k_law_is_cached_as_its_support_and_read_back_whole():
    """At top-k the cache keeps (support, values) of each law: target/draft read back the [V] vector of an uncached
    forward, target_compact/draft_compact its positive entries, and the cache's bytes count 16 a kept token (plus
    the arrays' headers) instead of 8 a vocabulary token, so a cache of a given size holds many more prefixes."""
    from verispec.models.problem import SPARSE_LAW_OVERHEAD
    from verispec.models.tiny import tiny_pair
    from verispec.simulator.problems import compact_law

    pair = tiny_pair(seed=3, vocab=256)
    sampling = Sampling(0.8, top_k=4)
    cache_bytes = 2 * 7 * (16 * 4 + SPARSE_LAW_OVERHEAD)  # a model's half: seven compact laws, one dense [256] law
    assert cache_bytes // 2 < 2 * 8 * 256
    problem = ModelProblem(pair, CONTEXT, sampling, horizon=2, cache_bytes=cache_bytes)
    assert problem.cache_capacity == 7
    prefixes = [(), (1,), (2,), (3,), (1, 2), (1, 3), (2, 5)]
    problem.prepare(prefixes)
    assert [len(laws) for laws in problem._laws] == [7, 7]  # all seven stay
    for prefix in prefixes:
        for law, compact, model in ((problem.target(prefix), problem.target_compact(prefix), pair.target),
                                    (problem.draft(prefix), problem.draft_compact(prefix), pair.draft)):
            alone = _alone(model, CONTEXT + list(prefix), sampling)
            np.testing.assert_allclose(law, alone, rtol=0, atol=1e-12)
            assert np.count_nonzero(law) == 4 and not law.flags.writeable
            support, values = compact
            np.testing.assert_array_equal(support, np.flatnonzero(alone))
            np.testing.assert_array_equal(values, law[support])
            assert [np.array_equal(a, b) for a, b in zip(compact_law(law), compact)] == [True, True]
    assert problem._cache_used == [7 * (16 * 4 + SPARSE_LAW_OVERHEAD)] * 2


def test_a_shifted_model_problem_hands_out_its_compact_laws_without_the_whole_vector():
    """The labels read a root's laws through ``ShiftedProblem`` (the problem after the root token): its
    target_compact/draft_compact are the model problem's stored (support, values), bit for bit, and no [V] vector is
    built for them (before, each was expanded to V entries and cut back)."""
    from verispec.models.tiny import tiny_pair
    from verispec.simulator.problems import ShiftedProblem

    pair = tiny_pair(seed=3, vocab=256)
    problem = ModelProblem(pair, CONTEXT, Sampling(0.8, top_k=4), horizon=3)
    problem.prepare([(1,), (1, 2), (1, 3)])
    shifted, built, dense = ShiftedProblem(problem, (1,)), [], problem._dense
    problem._dense = lambda law: built.append(law) or dense(law)
    for prefix in [(), (2,), (3,)]:
        for mine, theirs in ((shifted.target_compact(prefix), problem.target_compact((1, *prefix))),
                             (shifted.draft_compact(prefix), problem.draft_compact((1, *prefix)))):
            assert mine[0] is not None and all(np.array_equal(a, b) for a, b in zip(mine, theirs))
    assert built == []


def test_a_cache_full_of_compact_laws_drops_the_oldest_by_bytes():
    from verispec.models.tiny import tiny_pair

    pair = tiny_pair(seed=3, vocab=256)
    sampling = Sampling(0.8, top_k=4)
    roomy = ModelProblem(pair, CONTEXT, sampling, horizon=2)
    tight = ModelProblem(pair, CONTEXT, sampling, horizon=2, cache_bytes=2 * 3 * (16 * 4 + 256))  # three laws a model
    prefixes = [(), (1,), (2,), (3,), (1, 2)]
    for problem in (roomy, tight):
        problem.prepare(prefixes)
    assert [len(laws) for laws in tight._laws] == [3, 3] and [list(laws) for laws in tight._laws] == [prefixes[2:]] * 2
    for prefix in prefixes:  # the dropped ones are recomputed, equal
        np.testing.assert_allclose(tight.target(prefix), roomy.target(prefix), rtol=0, atol=1e-12)
    assert [len(laws) for laws in tight._laws] == [3, 3]


def test_compact_and_expanded_laws_round_trip():
    from verispec.simulator.problems import compact_law, expand_law

    sparse = np.array([0.0, 0.25, 0.0, 0.0, 0.75, 0.0])
    support, values = compact_law(sparse)
    assert support.tolist() == [1, 4] and values.tolist() == [0.25, 0.75]
    np.testing.assert_array_equal(expand_law((support, values), 6), sparse)
    dense = np.array([0.1, 0.2, 0.3, 0.4])  # over half positive: kept whole
    kept, whole = compact_law(dense)
    assert kept is None and whole.tolist() == dense.tolist()
    np.testing.assert_array_equal(expand_law((None, whole), 4), dense)


def test_a_pack_splits_passes_past_its_node_limit_and_keeps_every_law(pair_seed2, monkeypatch):
    """A pack's members share passes up to ``MAX_PACKED_PASS_NODES`` nodes (their transients, the [n, V] logits
    above all, grow with a pass's nodes): three members of 4 nodes a forward under a limit of 6 run a 12-node level
    in passes of at most 6 nodes (one pass of 12 under a limit of 12), and every law still equals a forward over its
    own context alone."""
    import verispec.models.problem as problem_module
    from verispec.models.problem import ProblemPack, SharedContext
    from verispec.models.tree_forward import CachedModel

    monkeypatch.setattr(problem_module, "MAX_PACKED_PASS_NODES", 6)
    sizes = []
    extend = CachedModel.extend

    def counted(self, tokens, parents, **options):
        sizes.append(len(tokens))
        return extend(self, tokens, parents, **options)

    monkeypatch.setattr(CachedModel, "extend", counted)
    contexts = [CONTEXT, CONTEXT + [2], [6, 5]]
    pack = ProblemPack(pair_seed2, contexts, [SAMPLING] * 3, horizon=3, shared=SharedContext(pair_seed2),
                       nodes_per_forward=4)
    sizes.clear()
    targets = [(), (1,), (2,), (1, 3)]  # a 4-node trie a member: 12 nodes
    with pack.together():
        for member in pack.problems:
            member.prepare(targets, draft=False)
    assert sizes == [4, 4, 4]  # a member's feed is not split: two of them would pass the limit
    for member, context in zip(pack.problems, contexts):
        for prefix in targets:
            np.testing.assert_allclose(member.target(prefix), _alone(pair_seed2.target, context + list(prefix)),
                                       rtol=0, atol=1e-12)
    monkeypatch.setattr(problem_module, "MAX_PACKED_PASS_NODES", 12)
    roomy = ProblemPack(pair_seed2, contexts, [SAMPLING] * 3, horizon=3, shared=SharedContext(pair_seed2),
                        nodes_per_forward=4)
    sizes.clear()
    with roomy.together():
        for member in roomy.problems:
            member.prepare(targets, draft=False)
    assert sizes == [12]
