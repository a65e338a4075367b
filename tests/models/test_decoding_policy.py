"""Real decoding with a blockwise policy (verispec.models.generate(..., selector=policy)) on tiny models.

* chain:0 runs no draft model at all and is plain sampling: the same tokens as ``sample_target`` with the same
  seed (a one-node tree draws no node, so the uniforms line up), zero draft forwards (counted by a hook on the
  draft model, independently of the decoder's records).
* What a policy sees is what exists before the block's draws: p_prev, q_prev, q_root and the hidden states in
  ``BlockContext`` equal the laws and states of uncached forwards of each model over the sequence (no cache, no
  tree mask), through chain:0 blocks whose tokens the draft catches up on later in one forward.
* Losslessness: the first two tokens from a fixed context over RUNS seeded runs follow the target's exact law
  (exact binomial tests at DEFAULT_ALPHA, as in tests/models/test_decoding.py) for policies that switch tree and
  verifier by features of the context (its length and last token; the draft's q at the root and the L1 distance
  of p and q at the previous token); the negative control, a policy whose action is cut after seeing the target's
  probabilities of the drafted tokens (verispec.policy.PeekingVerifier), is rejected by the same test,
  and its exact TV at this context (the engine, composed over blocks) is stated. Their seeded runs decode under
  ``forwards_memoised`` and ``laws_memoised`` (tests/support/tiny_models.py), each run's tokens, actions and
  acceptances as without them (checked here, and for plain trees in tests/models/test_decoding.py).
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from tests.support.tiny_models import forwards_memoised, laws_memoised
from verispec.errors import IncompatibleDraftError, VerispecError
from verispec.statistics import DEFAULT_ALPHA, exact_binomial_test
from verispec.verifiers import get_verifier

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from verispec.models import BlockContext, BlockPolicy, ModelProblem, Sampling, generate, sample_target  # noqa: E402
from verispec.models.checks import sequence_law  # noqa: E402
from verispec.models.decoding import SpeculativeDecoder  # noqa: E402
from verispec.policy import PeekingVerifier, policy_output_law  # noqa: E402
from verispec.simulator.problems import target_law  # noqa: E402

CONTEXT = [1, 2, 3]
#: Seeded runs of the lossless policies, as in tests/models/test_decoding.py (whose negative control shows the power of
#: this size).
RUNS = 400
#: Runs of the negative control: at its TV at this context (0.149, asserted > 0.1 below) the test at DEFAULT_ALPHA
#: rejected 40 of 40 simulated samples of this size drawn from the control's exact law (0.95 at 600 runs).
CONTROL_RUNS = 1000


def _uncached(model, tokens, sampling):
    """(law [V] float64, last hidden state [H]) after ``tokens`` by one plain forward (no cache, no tree mask)."""
    with torch.no_grad():
        output = model(torch.tensor([list(tokens)]), output_hidden_states=True)
    return sampling.probabilities(output.logits[0, -1]), output.hidden_states[-1][0, -1]


class _Counter:
    """Counts forward passes of a model (a forward hook: independent of the decoder's own records)."""

    def __init__(self, model):
        self.calls = 0
        self.handle = model.register_forward_hook(self._hook)

    def _hook(self, *_):
        self.calls += 1

    def remove(self):
        self.handle.remove()


class ByContext:
    """Chooses from the sequence alone: no draft at odd lengths, else a tree and verifier by the last token."""

    needs_draft = False
    needs_hidden = False
    ACTIONS = (("chain:0", "specinfer"), ("delayed:2,1,2", "specinfer"), ("iid:2,2", "gbv"),
               ("iid:2,1", "traversal-iid"))

    def actions(self):
        return self.ACTIONS

    def choose(self, context: BlockContext) -> int:
        if context.context_length % 2:
            return 0
        return 1 + context.tokens[-1] % 3


class ByDraft:
    """Reads the draft's q at the root and p, q at the previous token (the paper's kind of features)."""

    needs_draft = True
    needs_hidden = False
    ACTIONS = (("chain:0", "specinfer"), ("delayed:2,1,1", "specinfer"), ("iid:2,2", "traversal-iid"),
               ("chain:2", "naive"))

    def actions(self):
        return self.ACTIONS

    def choose(self, context: BlockContext) -> int:
        distance = float((context.p_prev - context.q_prev).abs().sum())
        if distance > 1.2:
            return 0
        confident = float(context.q_root.max()) > 0.5
        return 3 if confident and context.context_length % 2 else (1 if confident else 2)


class Recording:
    """Checks every BlockContext against uncached forwards, and records its choices (cycling through actions)."""

    needs_draft = True
    needs_hidden = True
    ACTIONS = (("chain:0", "specinfer"), ("delayed:2,1,2", "specinfer"), ("chain:0", "gbv"), ("chain:0", "specinfer"),
               ("iid:2,2", "gbv"), ("chain:3", "bv"))

    def __init__(self, pair, sampling):
        self.pair, self.sampling = pair, sampling
        self.chosen: list[int] = []
        self.checked = 0

    def actions(self):
        return self.ACTIONS

    def choose(self, context: BlockContext) -> int:
        tokens = list(context.tokens)
        assert context.context_length == len(tokens) and context.sampling == self.sampling
        p_prev, target_hidden = _uncached(self.pair.target, tokens[:-1], self.sampling)
        q_prev, draft_prev = _uncached(self.pair.draft, tokens[:-1], self.sampling)
        q_root, draft_root = _uncached(self.pair.draft, tokens, self.sampling)
        for given, expected in ((context.p_prev, p_prev), (context.q_prev, q_prev), (context.q_root, q_root),
                                (context.hidden["target_prev"], target_hidden),
                                (context.hidden["draft_prev"], draft_prev), (context.hidden["draft_root"], draft_root)):
            assert given.shape == expected.shape
            assert torch.allclose(given.double(), expected.double(), rtol=0, atol=1e-9)
        self.checked += 1
        self.chosen.append(len(self.chosen) % len(self.ACTIONS))
        return self.chosen[-1]


class Peeking:
    """The negative control: its one action, chain:2, is cut to a shorter chain after seeing that the target's
    probability of a drafted token is below the threshold."""

    needs_draft = False
    needs_hidden = False

    def __init__(self, threshold: float = 0.3):
        self.verifier = PeekingVerifier(get_verifier("naive"), threshold)

    def actions(self):
        return (("chain:2", self.verifier),)

    def choose(self, context: BlockContext) -> int:
        return 0


def _two_token_counts(pair, policy, sampling, runs=RUNS):
    """Counts of the first two tokens over seeded runs, and of the actions the blocks ran."""
    tokens, actions = Counter(), Counter()
    # whole trees (no cut at the budget): two tokens test each action's tree law at every depth. One decoder runs the
    # seeds over caches prefilled once: each run is generate(..., seed, selector=policy) token for token
    # (test_runs_over_one_prefill_are_each_seeds_own_run_with_a_policy), under the memos (the same runs)
    decoder = SpeculativeDecoder(pair, sampling=sampling, selector=policy, stop_at_eos=False, cut_drafts=False)
    with forwards_memoised(pair.target, pair.draft), _laws_memoised(decoder):
        for generation in decoder.runs(CONTEXT, 2, range(runs)):
            tokens[tuple(generation.tokens)] += 1
            actions[tuple(block.action for block in generation.blocks)] += 1
    return tokens, actions


def _laws_memoised(decoder):
    """``laws_memoised`` over the verifiers of every action of a policy's decoder."""
    return laws_memoised(*(action.verifier for action in decoder.actions))


@pytest.mark.parametrize("policy", [ByContext(), ByDraft()], ids=["by-context", "by-draft"])
def test_runs_over_one_prefill_are_each_seeds_own_run_with_a_policy(pair, policy):
    """``SpeculativeDecoder.runs`` with a policy: each run chooses the actions, emits the tokens and accepts as
    ``generate`` with that seed does, though the laws the prefill left (p and q before the root) serve every run;
    and so do the same runs under ``forwards_memoised`` and ``laws_memoised`` (what the statistical tests decode
    under), twice."""
    seeds = [4, 0, 9, 4]
    for length in (2, 7):
        decoder = SpeculativeDecoder(pair, sampling=Sampling(1.0), selector=policy, cut_drafts=False)
        memoised = []
        with _laws_memoised(decoder) as laws:
            for _ in range(2):
                with forwards_memoised(pair.target, pair.draft):
                    memoised.append(list(decoder.runs(CONTEXT, length, seeds)))
        assert laws["hits"]
        for seed, run, *again in zip(seeds, decoder.runs(CONTEXT, length, seeds), *memoised, strict=True):
            alone = generate(pair, CONTEXT, None, None, length, Sampling(1.0), seed, selector=policy, cut_drafts=False)
            for decoded in (run, *again):
                assert decoded.tokens == alone.tokens
                assert [(b.action, b.accepted, b.draft_calls) for b in decoded.blocks] == \
                    [(b.action, b.accepted, b.draft_calls) for b in alone.blocks]


def test_the_policies_here_are_block_policies():
    for policy in (ByContext(), ByDraft(), Peeking()):
        assert isinstance(policy, BlockPolicy)


@pytest.mark.parametrize("sampling", [Sampling(1.0), Sampling(0.8, top_k=5), Sampling(1.1, top_p=0.9)])
def test_chain0_runs_no_draft_model_and_is_plain_sampling(pair, sampling):
    counter = _Counter(pair.draft)
    try:
        for seed in range(4):
            decoded = generate(pair, CONTEXT, "chain:0", "specinfer", 24, sampling, seed, stop_at_eos=False)
            plain = sample_target(pair, CONTEXT, 24, sampling, seed, stop_at_eos=False)
            assert decoded.tokens == plain.tokens
            assert all(block.draft_calls == 0 and block.tree_size == 0 for block in decoded.blocks)
        static = generate(pair, CONTEXT, "chain:0", "gbv", 24, sampling, 9, stop_at_eos=False, static_cache=True)
        assert static.tokens == sample_target(pair, CONTEXT, 24, sampling, 9, stop_at_eos=False).tokens
    finally:
        counter.remove()
    assert counter.calls == 0


def test_the_policy_sees_exactly_the_laws_before_the_block(pair):
    """p_prev, q_prev, q_root and the hidden states equal uncached forwards, through chain:0 blocks (the draft
    then catches up on several tokens at once) and after blocks of every other action."""
    sampling = Sampling(1.0, top_k=6)
    policy = Recording(pair, sampling)
    generation = generate(pair, CONTEXT, None, None, 30, sampling, seed=2, selector=policy, stop_at_eos=False)
    assert policy.checked == len(generation.blocks) >= 12
    assert [block.action for block in generation.blocks] == policy.chosen
    for block in generation.blocks:
        assert block.select_s > 0
        parts = block.drafting_s + block.target_s + block.verify_s + block.cache_s + block.select_s
        assert block.total_s == pytest.approx(parts, rel=1e-12)
        assert block.draft_calls >= 1  # this policy reads q: the draft catches up on the root every block
    summary = generation.summary()
    assert summary["select_s"] == pytest.approx(sum(block.select_s for block in generation.blocks))
    assert summary["decode_s"] == pytest.approx(sum(block.total_s for block in generation.blocks))
    prefix = list(CONTEXT)
    for token in generation.tokens:  # every token allowed by the target's top 6 at its prefix
        assert _uncached(pair.target, prefix, sampling)[0][token] > 0
        prefix.append(token)


def test_a_policy_that_reads_no_draft_skips_it_on_chain0_blocks(pair):
    sampling = Sampling(1.0, top_k=5)
    counter = _Counter(pair.draft)
    try:
        generation = generate(pair, CONTEXT, None, None, 40, sampling, seed=1, selector=ByContext(),
                              stop_at_eos=False, cut_drafts=False)
    finally:
        counter.remove()
    blocks = generation.blocks
    assert {block.action for block in blocks} == {0, 1, 2, 3}
    for block in blocks:
        if block.action == 0:
            assert block.draft_calls == 0 and block.tree_size == 0
        else:  # one catch-up forward (all unseen tokens at once), then one per tree level
            assert block.draft_calls == 1 + {1: 2, 2: 1, 3: 0}[block.action]  # leaves are never fed
    assert counter.calls == 1 + sum(block.draft_calls for block in blocks)  # + the prompt's prefill
    prefix = list(CONTEXT)
    for token in generation.tokens:
        assert _uncached(pair.target, prefix, sampling)[0][token] > 0
        prefix.append(token)


def test_a_static_cache_and_graphed_forwards_decode_the_same_tokens_with_a_policy(pair):
    sampling = Sampling(1.0, top_p=0.95)
    dynamic = generate(pair, CONTEXT, None, None, 24, sampling, 5, selector=ByDraft())
    for options in ({"static_cache": True}, {"graphs": True}):
        assert generate(pair, CONTEXT, None, None, 24, sampling, 5, selector=ByDraft(), **options).tokens == \
            dynamic.tokens


@pytest.mark.parametrize("policy", [ByContext(), ByDraft()], ids=["by-context", "by-draft"])
def test_decoding_with_a_policy_keeps_the_targets_law(pair, policy):
    sampling = Sampling(1.0)
    counts, actions = _two_token_counts(pair, policy, sampling)
    # the second block's action depends on the first block's tokens: at least two of them were chosen
    assert len({sequence[1] for sequence in actions if len(sequence) > 1}) >= 2, actions
    result = exact_binomial_test(counts, sequence_law(pair, CONTEXT, 2, sampling), alpha=DEFAULT_ALPHA)
    assert not result.rejected, result.describe()


@pytest.mark.slow  # about 3 s (1000 runs); the exact-law control in tests/simulator/test_policy_law.py runs always
def test_a_policy_that_chooses_after_seeing_p_is_caught(pair):
    sampling = Sampling(1.0)
    policy = Peeking()
    # its exact law at this context: the engine's block laws composed over the prefixes (not the decoder)
    problem = ModelProblem(pair, CONTEXT, sampling, horizon=3)
    problem.prefetch(3)
    law = policy_output_law(problem, lambda prefix, _: ("chain:2", policy.verifier), 2)
    tv = float(np.abs(law - target_law(problem, 2)).sum() / 2)
    assert tv > 0.1, f"the control's TV at this context is only {tv:.4f}"
    counts, _ = _two_token_counts(pair, policy, sampling, CONTROL_RUNS)
    result = exact_binomial_test(counts, sequence_law(pair, CONTEXT, 2, sampling), alpha=DEFAULT_ALPHA)
    assert result.rejected, f"TV {tv:.4f} not detected: {result.describe()}"


def test_bad_policies_are_one_line_errors(pair):
    class Wrong(ByContext):
        def __init__(self, actions=ByContext.ACTIONS, index=0):
            self._actions, self.index = actions, index

        def actions(self):
            return self._actions

        def choose(self, context):
            return self.index

    with pytest.raises(IncompatibleDraftError, match="action 1"):
        generate(pair, CONTEXT, None, None, 4, selector=Wrong((("chain:0", "gbv"), ("dyspec:3", "specinfer"))))
    with pytest.raises(VerispecError, match="action 0.*unknown tree kind"):
        generate(pair, CONTEXT, None, None, 4, selector=Wrong((("nope:2", "specinfer"),)))
    with pytest.raises(VerispecError, match="lists no actions"):
        generate(pair, CONTEXT, None, None, 4, selector=Wrong(()))
    for index in (4, -1, True, 1.0):
        with pytest.raises(VerispecError, match="choose returned"):
            generate(pair, CONTEXT, None, None, 4, selector=Wrong(index=index))
    with pytest.raises(VerispecError, match="without a drafter or verifier"):
        generate(pair, CONTEXT, "chain:2", "naive", 4, selector=ByContext())
    with pytest.raises(VerispecError, match="or a policy"):
        generate(pair, CONTEXT, None, "naive", 4)
    with pytest.raises(VerispecError, match="hidden states"):
        generate(pair, CONTEXT, None, None, 4, selector=Recording(pair, Sampling()), graphs=True)
    with pytest.raises(VerispecError, match="policy"):
        SpeculativeDecoder(pair, selector=ByContext()).first_block_taus(CONTEXT, [0])
