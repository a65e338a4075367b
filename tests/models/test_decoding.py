"""Real speculative decoding (verispec.models.generate) on tiny random models built from a config.

* Every drafter with every verifier valid for it decodes, and every emitted token is one the target's
  sampling law allows at its prefix (checked by an uncached forward of the target, independently of the
  decoder's caches and tree masks).
* Temperature 0 gives exactly the target's greedy decoding by transformers' own ``generate``.
* Losslessness in real decoding: for each verifier, the first two tokens emitted from a fixed context over
  many seeded runs follow the target's exact law (computed from uncached forwards of the same target), by
  exact binomial tests with a Bonferroni correction at false-failure rate 1e-6 (verispec.statistics).
* Negative control: drafting from a top-k filtered q while the verifier is handed the unfiltered q (the
  trap that made transformers' assisted generation lossy) is rejected by the same test.
* The statistical tests' seeded runs decode under ``forwards_memoised`` and ``laws_memoised``
  (tests/support/tiny_models.py): a forward whose exact inputs and cache contents, or a verifier's law whose exact
  batch, were seen before returns what it returned then. Runs under them emit each seed's tokens and blocks as
  without them, and a cache of other contents misses (checked here).
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from tests.support.tiny_models import VOCAB, forwards_memoised, laws_memoised, tiny_pair
from verispec.errors import IncompatibleDraftError, VerispecError
from verispec.simulator import parse_tree
from verispec.statistics import DEFAULT_ALPHA, exact_binomial_test
from verispec.verifiers import REGISTRY, get_verifier

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from verispec.models import Sampling, SpeculativeDecoder, generate, sample_target  # noqa: E402
from verispec.models.checks import STAT_CASES, decoding_fit, sequence_law  # noqa: E402

CONTEXT = [1, 2, 3]

#: One tree of every drafter kind (with branching where the kind has it).
DRAFTER_SPECS = ["chain:3", "iid:2,2", "delayed:2,1,2", "branch:2,2", "branch-iid:2,2", "hub-tree:2",
                 "greedy-tree:3,2", "dyspec:4"]

#: Seeded runs per verifier (and of the negative control, test_the_checks_law_and_fit_agree_with_the_tests_own, run
#: at this same size to show its power). With the Bonferroni exact test at 1e-6 this size catches the control (a top-2
#: filtered draft handed the full q) with a wide margin: its adjusted p-value is 1.3e-11 at 400 runs (1.7e-5 at
#: 300, 1e-17 at 600; seeds 0..runs-1, as here). Each verifier's exact law and its procedure's parity with that law
#: are checked exactly in tests/verifiers/test_registry_verifiers.py; here real decoding shows the loop runs each
#: rule faithfully, at the size that catches the control.
RUNS = 400
FAST_VERIFIERS = {"specinfer", "traversal"}


def _target_law(pair, prefix, sampling):
    """The target's sampling law after ``prefix`` from one uncached forward pass (no tree, no cache)."""
    with torch.no_grad():
        logits = pair.target(torch.tensor([list(prefix)], device=pair.device)).logits[0, -1]
    return sampling.probabilities(logits).cpu().numpy()


def _two_token_law(pair, sampling):
    first = _target_law(pair, CONTEXT, sampling)
    law = {}
    for x1 in np.flatnonzero(first > 0):
        second = _target_law(pair, CONTEXT + [int(x1)], sampling)
        for x2 in np.flatnonzero(second > 0):
            law[(int(x1), int(x2))] = float(first[x1] * second[x2])
    return law


def _two_token_counts(pair, decode_one, runs):
    # each run's tokens as without the memo: test_memoised_forwards_sample_each_seeds_tokens_and_key_the_caches_contents
    with forwards_memoised(pair.target, pair.draft):
        return Counter(tuple(decode_one(seed).tokens) for seed in range(runs))


def _seeded_counts(pair, spec, verifier, sampling, runs, **options):
    """_two_token_counts of ``generate(pair, CONTEXT, spec, verifier, 2, sampling, seed, **options)`` for seeds
    0..runs-1, run by one decoder over caches prefilled once (``SpeculativeDecoder.runs``; that each of its runs is
    the seed's own ``generate``, token for token, is test_runs_over_one_prefill_are_each_seeds_own_run)."""
    decoder = SpeculativeDecoder(pair, spec, verifier, sampling, **options)
    # each run's tokens as without the memos (test_runs_over_one_prefill_are_each_seeds_own_run)
    with forwards_memoised(pair.target, pair.draft), laws_memoised(decoder.verifier):
        return Counter(tuple(generation.tokens) for generation in decoder.runs(CONTEXT, 2, range(runs)))


def test_every_drafter_with_every_valid_verifier_decodes(pair):
    sampling = Sampling(1.0, top_k=5)
    pairs = [(spec, name) for spec in DRAFTER_SPECS for name, verifier in sorted(REGISTRY.items())
             if parse_tree(spec).draft_laws & verifier.valid_for]
    assert {name for _, name in pairs} == set(REGISTRY)  # every verifier runs on some drafter
    assert {spec for spec, _ in pairs} == set(DRAFTER_SPECS)
    for spec, name in pairs:
        generation = generate(pair, CONTEXT, spec, name, 7, sampling, seed=3)
        drafter = parse_tree(spec)
        assert len(generation.tokens) == 7 == sum(block.emitted for block in generation.blocks)
        room = 7
        for block in generation.blocks:
            # a block drafts no deeper than the tokens still wanted allow (chains and delayed trees are cut there)
            drawn = drafter.cut(room - 1) or drafter if room - 1 < drafter.depth else drafter
            assert 0 <= block.accepted <= drawn.depth and block.tree_size <= drawn.max_nodes - 1
            assert block.target_calls == 1 and block.draft_calls >= (drawn.max_nodes > 1)
            room -= block.emitted
        assert generation.target_calls == len(generation.blocks)
        # each emitted token is in the target's top 5 at its prefix: caches, positions and masks were right
        prefix = list(CONTEXT)
        for token in generation.tokens:
            assert _target_law(pair, prefix, sampling)[token] > 0, (spec, name, prefix, token)
            prefix.append(token)


@pytest.mark.parametrize("spec,name", [("chain:4", "naive"), ("chain:4", "bv"), ("delayed:3,1,2", "specinfer"),
                                       ("branch:2,2", "traversal"), ("iid:3,2", "gbv"), ("hub-tree:2", "spechub"),
                                       ("greedy-tree:2,3", "greedy"), ("iid:2,2", "khisti")])
def test_temperature_zero_is_the_targets_greedy_decoding(pair, spec, name):
    _greedy_matches_transformers(pair, spec, name)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU here (GPU sessions run it)")
def test_on_cuda_decoding_runs_and_greedy_matches_transformers():
    """The same decoder on a GPU: the verifier's law runs on CUDA tensors, caches live on the device."""
    gpu_pair = tiny_pair(0, device="cuda")
    for spec, name in (("delayed:3,1,2", "specinfer"), ("iid:2,2", "gbv"), ("branch:2,2", "traversal")):
        _greedy_matches_transformers(gpu_pair, spec, name)
        generation = generate(gpu_pair, CONTEXT, spec, name, 7, Sampling(1.0, top_k=5), seed=3)
        prefix = list(CONTEXT)
        for token in generation.tokens:
            assert _target_law(gpu_pair, prefix, Sampling(1.0, top_k=5))[token] > 0
            prefix.append(token)


def _greedy_matches_transformers(pair, spec, name):
    generation = generate(pair, CONTEXT, spec, name, 16, Sampling(0.0), seed=0)
    with torch.no_grad():
        greedy = pair.target.generate(torch.tensor([CONTEXT], device=pair.device), do_sample=False, max_new_tokens=16,
                                      min_new_tokens=16, pad_token_id=0)[0, len(CONTEXT):].tolist()
    assert generation.tokens == greedy
    assert generation.tokens_per_target_call > 1  # the greedy drafts are accepted at least sometimes


@pytest.mark.parametrize("spec,name", [("delayed:2,1,2", "specinfer"), ("dyspec:4", "traversal"), ("chain:3", "bv"),
                                       ("hub-tree:2", "spechub")])
def test_a_static_cache_decodes_the_same_tokens(pair, spec, name):
    """Same seed, same law: the static cache (fixed addresses, for graph capture on a GPU) changes nothing."""
    sampling = Sampling(1.0, top_p=0.95)
    for seed in range(3):
        dynamic = generate(pair, CONTEXT, spec, name, 12, sampling, seed)
        static = generate(pair, CONTEXT, spec, name, 12, sampling, seed, static_cache=True)
        assert static.tokens == dynamic.tokens
        assert [b.accepted for b in static.blocks] == [b.accepted for b in dynamic.blocks]
    assert sample_target(pair, CONTEXT, 12, sampling, 5, static_cache=True).tokens == \
        sample_target(pair, CONTEXT, 12, sampling, 5).tokens


def test_plain_sampling_follows_the_targets_law(pair):
    sampling = Sampling(1.0)
    counts = _two_token_counts(pair, lambda seed: sample_target(pair, CONTEXT, 2, sampling, seed), RUNS)
    result = exact_binomial_test(counts, _two_token_law(pair, sampling))
    assert not result.rejected, result.describe()


@pytest.mark.parametrize("name", [pytest.param(name, marks=() if name in FAST_VERIFIERS else pytest.mark.slow)
                                  for name in sorted(STAT_CASES)])
def test_real_decoding_is_lossless(pair, name):
    spec, sampling = STAT_CASES[name]
    # whole trees in every block (no cut at the token budget): two tokens test the tree's law at every depth
    counts = _seeded_counts(pair, spec, name, sampling, RUNS, cut_drafts=False)
    result = exact_binomial_test(counts, _two_token_law(pair, sampling), alpha=DEFAULT_ALPHA)
    assert not result.rejected, f"{name} on {spec}: {result.describe()}"


@pytest.mark.parametrize("static", [False, True])
def test_runs_over_one_prefill_are_each_seeds_own_run(pair, static):
    """``SpeculativeDecoder.runs`` (what the statistical tests and ``decoding_fit`` decode with) prefills once and
    rolls the caches back after every run: each run emits the tokens, blocks and acceptances of a decoder seeded with
    it, for trees, a procedure-only rule, a control's drafting law and a static cache (with a policy:
    tests/models/test_decoding_policy.py), at lengths that end mid-block and after several blocks; only the first run
    counts a prefill. So do the same runs under ``forwards_memoised`` and ``laws_memoised`` (what the statistical
    tests decode under), once filling the memos and once looking every forward and law up."""
    from pathlib import Path

    from verispec.models.decoding import SpeculativeDecoder as Decoder

    rule = get_verifier(f"{Path(__file__).resolve().parents[2] / 'examples' / 'my_rules.py'}:my_rule")
    cases = [("delayed:2,1,2", "specinfer", {}), ("iid:2,2", "gbv", {"cut_drafts": False}), ("chain:2", rule, {}),
             ("branch:2,2", "traversal", {"law_for_drafting": Sampling(1.0, top_k=2).probabilities})]
    seeds = [7, 0, 3]
    for spec, name, options in cases[:2] if static else cases:
        for length in (2, 9):
            decoder = Decoder(pair, spec, name, Sampling(1.0), static_cache=static, **options)
            runs = list(decoder.runs(CONTEXT, length, seeds))
            memoised = []
            with laws_memoised(decoder.verifier) as laws:  # (a procedure-only rule's law is never asked for)
                for _ in range(0 if static else 2):  # a static cache's forwards are not memoised: they just run
                    before = dict(laws)
                    with forwards_memoised(pair.target, pair.draft) as counts:
                        memoised.append(list(decoder.runs(CONTEXT, length, seeds)))
            if not static:  # the second pass looked every forward and every law up
                assert counts["hits"] and not counts["misses"], counts
                assert decoder.by_procedure or laws["hits"] > before["hits"] and laws["misses"] == before["misses"]
            for index, (seed, *decoded) in enumerate(zip(seeds, runs, *memoised, strict=True)):
                alone = Decoder(pair, spec, name, Sampling(1.0), seed, static_cache=static, **options).run(CONTEXT,
                                                                                                            length)
                for run in decoded:
                    assert run.tokens == alone.tokens, (spec, length, seed)
                    assert [(b.accepted, b.emitted, b.tree_size, b.draft_calls) for b in run.blocks] == \
                        [(b.accepted, b.emitted, b.tree_size, b.draft_calls) for b in alone.blocks]
                    assert (run.prefill_s == 0) == (index > 0)
    assert len({tuple(run.tokens) for run in runs}) > 1  # the seeds do draw differently


def test_memoised_forwards_sample_each_seeds_tokens_and_key_the_caches_contents(pair):
    """``forwards_memoised`` keeps plain sampling's tokens too (decoding's are held in
    test_runs_over_one_prefill_are_each_seeds_own_run); and its key holds the cache's contents: the same token at the
    same position over the caches of two other prompts runs the forward twice, each giving its own prompt's logits
    (an uncached forward's), while a repeated prompt is looked up, logits and cache alike."""
    import copy

    from verispec.models.tree_forward import CachedModel

    for length in (2, 9):
        plain = [sample_target(pair, CONTEXT, length, Sampling(1.0), seed).tokens for seed in range(6)]
        for _ in range(2):
            with forwards_memoised(pair.target, pair.draft):
                assert [sample_target(pair, CONTEXT, length, Sampling(1.0), seed).tokens for seed in range(6)] == plain
    target = copy.deepcopy(pair.target)  # weights of its own: a memo of its own, empty
    looked_up, outputs = [], []
    with forwards_memoised(target) as counts:
        for prompt in ([9, 4, 11], [6, 4, 11], [9, 4, 11]):
            model = CachedModel(target)
            model.prefill(prompt[:-1])
            misses = counts["misses"]
            logits = model.extend([prompt[-1]], [-1])[0]
            looked_up.append(counts["misses"] == misses)
            outputs.append((logits, [(layer.keys, layer.values) for layer in model.cache.layers]))
            with torch.no_grad():
                alone = pair.target(torch.tensor([prompt])).logits[0, -1]
            assert torch.allclose(logits, alone, rtol=0, atol=1e-12), prompt
    assert looked_up == [False, False, True]
    (first, first_cache), (again, again_cache) = outputs[0], outputs[2]
    assert torch.equal(first, again) and all(torch.equal(a, b) for layers in zip(first_cache, again_cache)
                                             for a, b in zip(*layers))


def test_every_registered_verifier_has_a_statistical_case():
    assert set(STAT_CASES) == set(REGISTRY)
    for name, (spec, _) in STAT_CASES.items():
        assert parse_tree(spec).draft_laws & REGISTRY[name].valid_for


def test_the_checks_law_and_fit_agree_with_the_tests_own(pair):
    """verispec.models.checks (used by experiments/lossless_real_decoding.py on any device) computes the same
    exact law as this file's own derivation, and its fit passes a lossless decoder and rejects the control."""
    sampling = Sampling(0.9, top_p=0.95)
    ours, theirs = _two_token_law(pair, sampling), sequence_law(pair, CONTEXT, 2, sampling)
    assert ours.keys() == theirs.keys()
    assert max(abs(ours[key] - theirs[key]) for key in ours) < 1e-12
    # each run's tokens as without the memos (test_runs_over_one_prefill_are_each_seeds_own_run)
    with forwards_memoised(pair.target, pair.draft), laws_memoised(get_verifier("specinfer")):
        assert not decoding_fit(pair, "iid:2,2", "specinfer", Sampling(1.0), context=CONTEXT, runs=200).rejected
    # The negative control, run once (a separate test ran the same decodes through this file's own loop): the
    # verifier is handed the unfiltered q, but the drafter samples from q filtered to its top 2. decoding_fit
    # decodes exactly as _seeded_counts would (SpeculativeDecoder(..., cut_drafts=False).runs, seeds 0..runs-1),
    # and its law is this file's own to 1e-12 (checked here at this sampling too).
    ours, theirs = _two_token_law(pair, Sampling(1.0)), sequence_law(pair, CONTEXT, 2, Sampling(1.0))
    assert ours.keys() == theirs.keys() and max(abs(ours[key] - theirs[key]) for key in ours) < 1e-12
    with forwards_memoised(pair.target, pair.draft), laws_memoised(get_verifier("specinfer")):
        control = decoding_fit(pair, "delayed:2,1,2", "specinfer", Sampling(1.0), context=CONTEXT, runs=RUNS,
                               law_for_drafting=Sampling(1.0, top_k=2).probabilities)
    assert control.samples == RUNS and control.rejected, control.describe()


def test_bad_arguments_are_one_line_errors(pair):
    with pytest.raises(IncompatibleDraftError, match="specinfer"):
        generate(pair, CONTEXT, "dyspec:3", "specinfer", 4)
    with pytest.raises(VerispecError, match="max_new_tokens"):
        generate(pair, CONTEXT, "chain:2", "naive", 0)
    with pytest.raises(VerispecError, match="outside the vocabulary"):
        generate(pair, [VOCAB + 3], "chain:2", "naive", 2)
    with pytest.raises(VerispecError, match="token ids"):
        generate(pair, "text needs a tokenizer", "chain:2", "naive", 2)
    with pytest.raises(VerispecError, match="seed"):
        generate(pair, CONTEXT, "chain:2", "naive", 2, seed=-1)


def test_a_rule_written_only_as_a_procedure_runs_as_written(pair, monkeypatch):
    """A researcher's prototype (the README's my_rule: a procedure, no law) decodes by running the procedure
    with the run's generator, never by enumerating its choices, and keeps the target's law; the published
    trap of correcting a rejection from p instead of (p - q)+ (tests/support/broken.py) is caught in real decoding."""
    from pathlib import Path

    from tests.support.broken import BROKEN_CHAIN_VERIFIERS
    from verispec.verifiers import ProcedureVerifier

    def never(*_args):
        raise AssertionError("real decoding enumerated a procedure's law")

    monkeypatch.setattr(ProcedureVerifier, "emission_laws", never)
    rule = get_verifier(f"{Path(__file__).resolve().parents[2] / 'examples' / 'my_rules.py'}:my_rule")
    sampling = Sampling(1.0)
    law = _two_token_law(pair, sampling)
    counts = _seeded_counts(pair, "chain:2", rule, sampling, RUNS, cut_drafts=False)
    assert not exact_binomial_test(counts, law).rejected
    broken = BROKEN_CHAIN_VERIFIERS["naive-correction-from-target"]
    # 600 runs, as before RUNS became 400: this trap (TV 0.144 here, spread over many sequences) is far harder to see
    # than the top-2 control (samples of 600 drawn from its exact law were rejected 78 times in 200; 9 in 200 at 300)
    counts = _seeded_counts(pair, "chain:2", broken, sampling, 600, cut_drafts=False)
    assert exact_binomial_test(counts, law).rejected


def test_a_verifier_whose_law_is_not_a_law_is_stopped(pair):
    """Real decoding runs the exact engine's check on every block's law: a rule that returns a signed
    'law' summing to one is a VerifierError, not a silently skewed sample."""
    from verispec.errors import VerifierError
    from verispec.verifiers.naive import NaiveVerifier

    class Signed(NaiveVerifier):
        name = "signed"

        def emission_laws(self, batch):
            law = super().emission_laws(batch).clone()
            law[..., 0, 0] += 2.0
            law[..., 0, 1] -= 2.0
            return law

    with pytest.raises(VerifierError, match="signed"):
        generate(pair, CONTEXT, "chain:2", Signed(), 4)


@pytest.mark.parametrize("spec,name", [("delayed:2,1,2", "specinfer"), ("iid:2,2", "gbv"), ("chain:3", "bv")])
def test_graphed_forwards_decode_the_same_tokens(pair, spec, name):
    """Same seed, same law: graphed forwards (padded buckets; CUDA graphs on a GPU) change nothing."""
    sampling = Sampling(1.0, top_p=0.95)
    plain = generate(pair, CONTEXT, spec, name, 24, sampling, seed=5)
    graphed = generate(pair, CONTEXT, spec, name, 24, sampling, seed=5, graphs=True)
    assert graphed.tokens == plain.tokens
    assert sample_target(pair, CONTEXT, 12, sampling, seed=2, graphs=True).tokens == \
        sample_target(pair, CONTEXT, 12, sampling, seed=2).tokens


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU here (GPU sessions run it)")
def test_on_cuda_graphed_decoding_matches_eager_decoding():
    gpu_pair = tiny_pair(0, device="cuda")
    for spec, name in (("delayed:3,1,2", "specinfer"), ("branch:2,2", "traversal")):
        eager = generate(gpu_pair, CONTEXT, spec, name, 20, Sampling(1.0), seed=4)
        graphed = generate(gpu_pair, CONTEXT, spec, name, 20, Sampling(1.0), seed=4, graphs=True)
        assert graphed.tokens == eager.tokens
    assert gpu_pair.target.__dict__["_verispec_graphed_forwards"]  # the runner (and its graphs) stayed on the model


def test_a_law_too_large_to_compute_refuses_before_any_decoding(pair, monkeypatch):
    """The exact law is sized by the sequences of positive mass (a top-k filter keeps a real vocabulary's law
    small), and decoding_fit computes it first, so a law too large refuses at once, not after the runs."""
    from verispec.errors import VerispecError
    from verispec.models import checks

    monkeypatch.setattr(checks, "MAX_SEQUENCES", 3)
    assert len(sequence_law(pair, CONTEXT, 2, Sampling(1.0, top_k=3))) <= 9  # 3 prefixes: allowed
    with pytest.raises(VerispecError, match="forward passes or more"):
        sequence_law(pair, CONTEXT, 2, Sampling(1.0, top_k=4))
    monkeypatch.setattr(checks, "SpeculativeDecoder", None)  # any decoding would fail with a TypeError
    with pytest.raises(VerispecError, match="forward passes or more"):
        decoding_fit(pair, "iid:2,2", "specinfer", Sampling(1.0), context=CONTEXT, runs=5)


def test_each_draft_forward_feeds_at_most_the_drafters_stated_width(pair, monkeypatch):
    """``Drafter.draft_widths`` (what a width-priced latency model charges a block) against the draft forwards
    decoding runs: per block, one forward per depth; after the catch-up (which also feeds the accepted tokens the
    draft never saw), forward j feeds at most the stated width, and the widest levels are reached."""
    from verispec.models.tree_forward import CachedModel

    widths = []
    extend = CachedModel.extend

    def recording(self, tokens, parents, **options):
        if self.model is pair.draft:
            widths.append(len(tokens))
        return extend(self, tokens, parents, **options)

    monkeypatch.setattr(CachedModel, "extend", recording)
    for spec in DRAFTER_SPECS:
        drafter = parse_tree(spec)
        verifier = next(name for name, rule in sorted(REGISTRY.items()) if drafter.draft_laws & rule.valid_for)
        reached = [0] * drafter.depth
        for seed in range(4):
            widths.clear()
            generation = generate(pair, CONTEXT, spec, verifier, 6, Sampling(1.0), seed=seed, cut_drafts=False)
            start = len(widths) - sum(block.draft_calls for block in generation.blocks)
            assert start in (0, 1), spec  # the prompt's prefill, if it runs through extend
            for block in generation.blocks:
                fed = widths[start:start + block.draft_calls]
                start += block.draft_calls
                # dyspec may grow several children of one node from one law: fewer forwards than its depth
                assert 1 <= block.draft_calls <= drafter.depth and (spec == "dyspec:4" or
                                                                    block.draft_calls == drafter.depth), spec
                assert all(w <= stated for w, stated in zip(fed[1:], drafter.draft_widths[1:])), \
                    (spec, fed, drafter.draft_widths)
                reached = [max(r, w) for r, w in zip(reached, [1, *fed[1:]])]
        assert reached == list(drafter.draft_widths) or spec == "dyspec:4", (spec, reached)


def test_the_last_blocks_draft_no_deeper_than_the_tokens_left_and_keep_the_law(pair):
    """A run drafts no deeper than the tokens it still wants minus one (transformers' assisted generation drafts
    min(K, tokens left - 1) alike): every block of chain:5 in a 3-token run forwards at most room - 1 drafts, where
    the uncut decoder forwards all 5; and the cut trees keep the target's law (an argmax draft handed the full q on
    the same cut trees is caught by the same test, with three times the runs: adjusted p 3e-11 at 1,200 runs,
    2e-8 at 900, 3e-5 at 600, seeds 0..runs-1)."""
    sampling = Sampling(1.0)
    for cut_drafts, most in ((True, None), (False, 5)):
        generation = generate(pair, CONTEXT, "chain:5", "naive", 3, sampling, seed=2, stop_at_eos=False,
                              cut_drafts=cut_drafts)
        room = 3
        for block in generation.blocks:
            assert block.tree_size == (room - 1 if most is None else most)  # a chain of drafts: all distinct nodes
            room -= block.emitted
    law = _two_token_law(pair, sampling)
    counts = _seeded_counts(pair, "delayed:2,1,2", "specinfer", sampling, RUNS)
    assert not exact_binomial_test(counts, law).rejected
    filtered = _seeded_counts(pair, "delayed:2,1,2", "specinfer", sampling, 3 * RUNS,
                              law_for_drafting=Sampling(1.0, top_k=1).probabilities)
    assert exact_binomial_test(filtered, law).rejected


def test_the_drafts_catch_up_computes_only_the_roots_output_row(pair, monkeypatch):
    """The draft's catch-up forward feeds every token it has not seen, but a static decoder reads q at the root
    only: the output layer runs on that one row (at V = 151,936 a row of it is a large part of a small draft's
    forward on a CPU). Every extension of the draft that feeds more than one token in a chain (a catch-up) asks for
    the last row alone, while tree levels (siblings) get every row; the catch-ups of several tokens do occur."""
    from verispec.models.tree_forward import CachedModel

    calls = []
    extend = CachedModel.extend

    def recording(self, tokens, parents, **options):
        if self.model is pair.draft:
            calls.append((len(tokens), list(parents), options.get("last_only", False)))
        return extend(self, tokens, parents, **options)

    monkeypatch.setattr(CachedModel, "extend", recording)
    for seed in range(6):
        generate(pair, CONTEXT, "chain:3", "naive", 12, Sampling(1.0, top_k=3), seed=seed, stop_at_eos=False)
    catch_ups = [call for call in calls if call[1] and call[1][0] == -1]  # fed from the committed end
    assert catch_ups and all(last_only for _, _, last_only in catch_ups)
    assert any(count > 1 for count, _, _ in catch_ups)  # some catch-up fed the accepted leaf and the bonus token
