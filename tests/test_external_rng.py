"""Real verification code checked as it is written: RNG capture, the probes, fast race refusal, one-sequence
functions (transformers' ``_speculative_sampling`` itself), and loading a wrapper beside its siblings.

Expected laws come from the built-in ``naive`` verifier (a second algorithm: Leviathan et al.'s rule as a closed
form), from closed forms derived in the docstrings, or from the rule of each primitive applied by hand.
"""

from __future__ import annotations

import functools
import math
import random
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from tests import external_rules as rules
from verispec.errors import VerifierError, VerispecError
from verispec.external.adapter import ExternalVerifier, NondeterministicError, load_function
from verispec.external.exact import NotPiecewiseConstantError
from verispec.external.rng import Capture, CaptureRefusal, GlobalRandomnessError, Tape
from verispec.simulator.drafters import parse_tree
from verispec.simulator.engine import analyze
from verispec.simulator.problems import ContextFreeProblem, random_problem
from verispec.simulator.trees import DraftTree, TreeBatch
from verispec.verifiers import get_verifier

torch = pytest.importorskip("torch")

from numpy.random import random_sample as bound_numpy_random  # noqa: E402 - bound before any call (not captured)
from torch import rand as bound_torch_rand  # noqa: E402 - bound before any call (captured through the mode)

GALLERY = Path(__file__).resolve().parent.parent / "examples" / "external"


def _same_law_as_naive(verifier, tree: str, problem) -> float:
    """Largest difference between the external function's emission laws and the built-in naive rule's, over every
    draft tree of ``tree`` on ``problem``."""
    trees = [draft_tree for draft_tree, _ in parse_tree(tree).outcomes(problem)]
    worst = 0.0
    for batch, _ in TreeBatch.of_trees(trees):
        worst = max(worst, float(np.abs(verifier.emission_laws(batch) - get_verifier("naive").emission_laws(batch))
                                 .max()))
    return worst


# --------------------------------------------------------------------------------------------------
# Rules written against global generators (chain layout without the uniforms), each Leviathan et al.'s rule


def _inverse_cdf_row(law, u):
    cumulative = np.cumsum(law)
    return int(min(np.sum(cumulative <= u * cumulative[-1]), np.flatnonzero(law > 0)[-1]))


def _one_sequence(draft_tokens, draft_probs, target_probs, uniform, categorical):
    """Token-level rule on ONE chain ([1, L] arrays), with ``uniform()`` and ``categorical(law)`` as its draws."""
    tokens, q, p = np.asarray(draft_tokens)[0], np.asarray(draft_probs)[0], np.asarray(target_probs)[0]
    length = len(tokens)
    out = [-1] * (length + 1)
    for i, x in enumerate(tokens):
        if uniform() * q[i, x] < p[i, x]:
            out[i] = int(x)
            continue
        out[i] = categorical(np.maximum(p[i] - q[i], 0.0))
        return np.array([out], dtype=np.int64)
    out[length] = categorical(p[length])
    return np.array([out], dtype=np.int64)


def numpy_global_one_sequence(draft_tokens, draft_probs, target_probs):
    size = np.asarray(target_probs).shape[-1]
    return _one_sequence(draft_tokens, draft_probs, target_probs, np.random.random,
                         lambda law: int(np.random.choice(size, p=law / law.sum())))


def python_random_one_sequence(draft_tokens, draft_probs, target_probs):
    size = np.asarray(target_probs).shape[-1]
    return _one_sequence(draft_tokens, draft_probs, target_probs, random.random,
                         lambda law: random.choices(range(size), weights=list(law))[0])


def _batched(draft_tokens, draft_probs, target_probs, uniforms):
    """``rules.token_level`` with its [B, L+1] uniforms built by the caller from its own draws."""
    return rules.token_level(np.asarray(draft_tokens), np.asarray(draft_probs), np.asarray(target_probs), uniforms)


def numpy_generator_batched(draft_tokens, draft_probs, target_probs):
    generator = np.random.default_rng()  # created inside the call: captured
    count, length = np.asarray(draft_tokens).shape
    return _batched(draft_tokens, draft_probs, target_probs, generator.random((count, length + 1)))


def torch_exponential_race(draft_tokens, draft_probs, target_probs):
    """gpt-fast's way of drawing the last token: argmax(law / E), E ~ Exp(1) from ``exponential_``."""
    count, length = draft_tokens.shape
    rows = torch.arange(count)
    q = draft_probs.gather(-1, draft_tokens[..., None]).squeeze(-1)
    p = target_probs[:, :length].gather(-1, draft_tokens[..., None]).squeeze(-1)
    accepted = torch.cumprod((torch.rand_like(p) * q < p).long(), dim=1).sum(dim=1)
    at = target_probs[rows, accepted]
    residual = (at - draft_probs[rows, accepted.clamp(max=length - 1)]).clamp(min=0)
    law = torch.where((accepted < length)[:, None], residual, at)
    noise = torch.empty_like(law).exponential_(1)
    last = torch.argmax(law / noise, dim=-1)
    out = torch.full((count, length + 1), -1, dtype=torch.int64)
    for i in range(length):
        out[:, i] = torch.where(accepted > i, draft_tokens[:, i], out[:, i])
    out[rows, accepted] = last
    return out


def _race_then(extra):
    def rule(draft_tokens, draft_probs, target_probs):
        law = target_probs[:, 0]
        noise = torch.empty_like(law).exponential_()
        if extra == "before":
            noise = noise * 1.0  # a use of the noise other than the race
        last = torch.argmax(law / noise, dim=-1)
        if extra == "after":
            last = last + (noise.sum() * 0).long()  # reads the noise after the race
        out = torch.full((len(law), draft_tokens.shape[1] + 1), -1, dtype=torch.int64)
        out[:, 0] = last
        return out
    return rule


def _emit_at_root(tokens, width):
    out = np.full((len(tokens), width), -1, dtype=np.int64)
    out[:, 0] = tokens
    return out


# --------------------------------------------------------------------------------------------------
# Laws of captured functions against the built-in rule


@pytest.mark.parametrize("tree", ["chain:1", "chain:3"])
def test_a_function_on_torchs_global_rng_has_the_builtin_law_batched_and_row_by_row(tree):
    function = load_function(str(GALLERY / "global_rng.py:speculative_sampling"))
    problem = random_problem(3, parse_tree(tree).depth, 5)
    batched = ExternalVerifier(function, "chain", arrays="torch", rng="capture")
    assert _same_law_as_naive(batched, tree, problem) < 1e-12
    assert batched.draws.keys() == {"torch.rand_like", "torch.multinomial"}
    if tree == "chain:1":  # the batch helper: the same function called one tree at a time
        one_by_one = ExternalVerifier(function, "chain", arrays="torch", rng="capture", per_row=True)
        assert _same_law_as_naive(one_by_one, tree, problem) < 1e-12


@pytest.mark.parametrize("function", [numpy_global_one_sequence, python_random_one_sequence])
def test_one_sequence_functions_on_numpy_and_random_globals(function):
    problem = random_problem(3, 2, 8)
    verifier = ExternalVerifier(function, "chain", rng="capture", per_row=True)
    assert _same_law_as_naive(verifier, "chain:2", problem) < 1e-12
    # batched, their scalar draws belong to no row: refused with the fix, before any integration
    with pytest.raises(CaptureRefusal, match="--per-row") as error:
        analyze(problem, "chain:2", ExternalVerifier(function, "chain", rng="capture"))
    assert "\n" not in str(error.value)


def test_a_generator_created_inside_the_call_is_captured():
    problem = random_problem(3, 2, 9)
    verifier = ExternalVerifier(numpy_generator_batched, "chain", rng="capture")
    assert _same_law_as_naive(verifier, "chain:2", problem) < 1e-12
    assert "numpy.Generator.random" in verifier.draws


def test_a_generator_seeded_inside_the_call_is_left_alone_and_reseeding_a_global_one_is_refused():
    def seeded(draft_tokens, draft_probs, target_probs):  # the same draw on every call: a point mass
        return _emit_at_root([int(np.random.default_rng(7).random() * 3)], 2)

    expected = int(np.random.Generator(np.random.PCG64(7)).random() * 3)  # numpy's own stream, outside any capture
    tree = DraftTree.from_paths(ContextFreeProblem([1 / 3] * 3, [1 / 3] * 3), [[0]])
    law = ExternalVerifier(seeded, "chain", rng="capture", per_row=True).emission_law(tree)[0]
    assert law[expected] == 1.0

    def reseeding(draft_tokens, draft_probs, target_probs):
        np.random.seed(0)
        return _emit_at_root([int(np.random.random() * 3)], 2)

    with pytest.raises(CaptureRefusal, match="numpy.random.seed"):
        ExternalVerifier(reseeding, "chain", rng="capture", per_row=True).emission_law(tree)


def test_a_name_bound_before_the_call_from_torch_is_captured_through_the_mode():
    def rule(draft_tokens, draft_probs, target_probs):
        count, length = draft_tokens.shape
        return _batched(draft_tokens, draft_probs, target_probs,
                        bound_torch_rand(count, length + 1, dtype=torch.float64).numpy())

    verifier = ExternalVerifier(rule, "chain", arrays="torch", rng="capture")
    assert _same_law_as_naive(verifier, "chain:2", random_problem(3, 2, 4)) < 1e-12


def test_an_exponential_race_is_read_as_one_categorical_draw():
    problem = random_problem(3, 2, 6)
    verifier = ExternalVerifier(torch_exponential_race, "chain", arrays="torch", rng="capture")
    assert _same_law_as_naive(verifier, "chain:2", problem) < 1e-12
    assert verifier.races_read > 0 and any("races read" in note for note in verifier.notes)
    # of the V uniforms each race draws, only one is read: the integration scans no line along the others
    assert verifier.stats.uses[-2].describe() == "unused" and verifier.stats.uses[-1].describe() == "unused"


@pytest.mark.parametrize("extra,message", [("before", "moves when uniform"), ("after", "read again")])
def test_a_race_whose_noise_is_used_otherwise_is_refused_fast(extra, message):
    problem = ContextFreeProblem([0.5, 0.3, 0.2], [0.2, 0.2, 0.6])
    verifier = ExternalVerifier(_race_then(extra), "chain", arrays="torch", rng="capture")
    with pytest.raises(NotPiecewiseConstantError, match=message):
        analyze(problem, "chain:1", verifier)
    assert verifier.stats.evaluations < 5_000


def test_sampling_a_race_runs_the_real_race():
    """Black-box sampling runs the real exponentials (no race rule): the root token of ``_race_then('before')``,
    argmax(p / E), has law p. Each of the 3 frequencies over n = 60,000 runs is within
    sqrt(log(6 / 1e-6) / (2 n)) of p (Hoeffding, union bound over 3 tokens and 2 sides): false-failure rate
    below 1e-6."""
    p = np.array([0.5, 0.3, 0.2])
    problem = ContextFreeProblem(p, [0.2, 0.2, 0.6])
    tree = DraftTree.from_paths(problem, [[0]])
    verifier = ExternalVerifier(_race_then("before"), "chain", arrays="torch", rng="capture")
    runs = 60_000
    codes = verifier.sample_codes(tree.as_batch(), np.zeros(runs, dtype=np.int64), np.random.default_rng(1))
    frequencies = np.bincount(codes, minlength=3)[:3] / runs  # node 0: code = token
    assert np.abs(frequencies - p).max() < math.sqrt(math.log(6 / 1e-6) / (2 * runs))


def test_a_row_that_draws_more_on_a_rare_path_grows_the_tape():
    """u0 < a: draw u1 and emit 1[u1 < b]; else emit 2. Law (a (1 - b), a b, 1 - a). With a = 1e-3 the probe's
    calls draw one uniform; integration meets the longer path, and starts again with two."""
    a, b = 1e-3, 0.3

    def rule(draft_tokens, draft_probs, target_probs):
        token = (1 if np.random.random() < b else 0) if np.random.random() < a else 2
        return _emit_at_root([token], 2)

    uniform = [1 / 3] * 3
    tree = DraftTree.from_paths(ContextFreeProblem(uniform, uniform), [[0]])
    verifier = ExternalVerifier(rule, "chain", rng="capture", per_row=True)
    law = verifier.emission_law(tree)[0]
    assert np.allclose(law, [a * (1 - b), a * b, 1 - a], rtol=0, atol=1e-15)
    assert list(verifier._tapes.values()) == [2]


def test_a_loop_without_bound_is_refused_when_it_outgrows_its_tape():
    def rule(draft_tokens, draft_probs, target_probs):
        draws = 1
        while np.random.random() < 0.5:  # no bound on its draws
            draws += 1
        return _emit_at_root([draws % 2], 2)

    tree = DraftTree.from_paths(ContextFreeProblem([0.5, 0.5], [0.5, 0.5]), [[0]])
    with pytest.raises(CaptureRefusal, match="more than 8 uniforms"):
        ExternalVerifier(rule, "chain", rng="capture", per_row=True, max_uniforms=8).emission_law(tree)


# --------------------------------------------------------------------------------------------------
# Probes and refusals


@pytest.mark.parametrize("draw", [lambda: torch.rand(1).item(), lambda: np.random.random(), lambda: random.random(),
                                  random.random, lambda: bound_torch_rand(1)])
def test_explicit_mode_refuses_a_function_that_draws_from_a_global_generator(draw):
    def rule(draft_tokens, draft_probs, target_probs, uniforms):
        draw()
        return rules.token_level(draft_tokens, draft_probs, target_probs, uniforms)

    with pytest.raises(GlobalRandomnessError, match="--rng capture") as error:
        analyze(random_problem(3, 1, 0), "chain:1", ExternalVerifier(rule, "chain"))
    assert "\n" not in str(error.value)


MODULE_GENERATOR = np.random.default_rng(0)  # created before any call: verispec cannot feed it


def test_a_generator_created_before_the_call_is_refused_at_once():
    def rule(draft_tokens, draft_probs, target_probs):
        count, length = np.asarray(draft_tokens).shape
        return _batched(draft_tokens, draft_probs, target_probs, MODULE_GENERATOR.random((count, length + 1)))

    verifier = ExternalVerifier(rule, "chain", rng="capture")
    with pytest.raises(NondeterministicError, match="not a function of its inputs and uniforms"):
        analyze(random_problem(3, 1, 0), "chain:1", verifier)
    assert verifier.stats.evaluations == 0  # the probe, before any integration


def test_a_numpy_name_bound_before_the_call_is_refused():
    def rule(draft_tokens, draft_probs, target_probs):
        count, length = np.asarray(draft_tokens).shape
        return _batched(draft_tokens, draft_probs, target_probs, bound_numpy_random((count, length + 1)))

    with pytest.raises(CaptureRefusal, match="imported before the call"):
        analyze(random_problem(3, 1, 0), "chain:1", ExternalVerifier(rule, "chain", rng="capture"))


def test_a_batched_call_whose_rows_depend_on_each_other_is_refused():
    def rule(draft_tokens, draft_probs, target_probs):  # every row uses row 0's uniforms
        count, length = draft_tokens.shape
        uniforms = torch.rand(count, length + 1, dtype=torch.float64).numpy()
        return _batched(draft_tokens, draft_probs, target_probs, np.repeat(uniforms[:1], count, axis=0))

    with pytest.raises(CaptureRefusal, match="reversed"):
        analyze(random_problem(3, 1, 0), "chain:1", ExternalVerifier(rule, "chain", arrays="torch", rng="capture"))


def test_a_function_that_writes_into_its_arguments_is_noted_and_its_law_is_right():
    def rule(draft_tokens, draft_probs, target_probs, uniforms):
        out = rules.token_level(draft_tokens, draft_probs, target_probs, uniforms)
        draft_probs[:] = 0.0  # junk left for the caller
        return out

    verifier = ExternalVerifier(rule, "chain")
    assert _same_law_as_naive(verifier, "chain:2", random_problem(3, 2, 2)) < 1e-12
    assert any("writes into its argument draft_probs" in note for note in verifier.notes)


def test_a_call_that_never_returns_is_stopped_by_the_call_timeout():
    def rule(draft_tokens, draft_probs, target_probs, uniforms):
        while True:
            pass

    start = time.monotonic()
    with pytest.raises(VerifierError, match="call timeout of 0.3 s"):
        analyze(random_problem(3, 1, 0), "chain:1", ExternalVerifier(rule, "chain", call_timeout=0.3))
    assert time.monotonic() - start < 5


@pytest.mark.parametrize("options,message", [
    (dict(rng="global"), "rng must be one of"), (dict(per_row=1), "per_row"), (dict(call_timeout=0), "call_timeout"),
    (dict(call_timeout=float("nan")), "call_timeout"),
])
def test_bad_options_are_one_line_errors(options, message):
    with pytest.raises(VerispecError, match=message):
        ExternalVerifier(rules.token_level, "chain", **options)


def test_layouts_that_need_or_cannot_take_capture_say_so():
    with pytest.raises(VerispecError, match="rng='capture'"):
        ExternalVerifier(rules.token_level, "transformers")
    with pytest.raises(VerispecError, match="per_row=True"):
        ExternalVerifier(rules.ragged_token_level, "ragged", rng="capture")


# --------------------------------------------------------------------------------------------------
# Fast refusal of races (before: only after 1024 boxes of a tree, over a million evaluations)


def test_the_vllm_race_is_refused_in_the_first_rounds():
    function = load_function(str(GALLERY / "vllm_rejection.py:rejection_sample"))
    verifier = ExternalVerifier(function, "ragged")
    start = time.monotonic()
    with pytest.raises(NotPiecewiseConstantError, match="moves when uniform"):
        analyze(ContextFreeProblem([0.5, 0.3, 0.2], [0.2, 0.2, 0.6]), "chain:2", verifier)
    # today's bound alone (1024 boxes of one tree) took 1,368,734 evaluations here (docs/bench_external.md)
    assert verifier.stats.evaluations < 50_000 and time.monotonic() - start < 10


@pytest.mark.parametrize("rule,length,size", [(rules.summed_uniforms, 1, 2), (rules.exponential_race, 2, 3)])
def test_combined_uniforms_are_refused_by_the_breakpoint_check(rule, length, size):
    uniform = [1 / size] * size
    tree = DraftTree.from_paths(ContextFreeProblem(uniform, uniform), [[0] * length])
    verifier = ExternalVerifier(rule, "chain")
    with pytest.raises(NotPiecewiseConstantError, match="moves when uniform"):
        verifier.emission_law(tree)
    assert verifier.stats.evaluations < 5_000


# --------------------------------------------------------------------------------------------------
# transformers' _speculative_sampling, unmodified


def _transformers():
    pytest.importorskip("transformers")
    from transformers.generation.utils import _speculative_sampling

    return _speculative_sampling


@pytest.mark.parametrize("length", [1, 2, pytest.param(3, marks=pytest.mark.slow)])
def test_transformers_speculative_sampling_is_lossless_exactly(length):
    problem = random_problem(3, length, 3)
    verifier = ExternalVerifier(_transformers(), "transformers", rng="capture")
    result = analyze(problem, f"chain:{length}", verifier)
    reference = analyze(problem, f"chain:{length}", get_verifier("naive"))
    assert result.tv_distance <= 1e-12
    assert abs(result.block_efficiency - reference.block_efficiency) < 1e-12
    assert verifier.draws.keys() == {"torch.rand_like", "torch.multinomial"}


@pytest.mark.parametrize("weight", [0.3, 0.8])
def test_transformers_ensemble_verification_has_the_closed_form_tv(weight):
    """DIVERSE's relaxation on chain:1, context-free p, q: the first token is accepted with probability
    min(q(x), v(x)) for v = w p + (1 - w) q, else drawn from norm((p - q)+); since v - q = w (p - q), its law is
    v - w (p - q)+ + w TV(p, q) (p - q)+ / TV(p, q) = v, and the next token comes from p either way. So the block
    continued with p has law v x p, and TV = TV(v, p) = (1 - w) TV(p, q)."""
    p, q = np.array([0.5, 0.3, 0.2]), np.array([0.2, 0.2, 0.6])
    problem = ContextFreeProblem(p, q)
    relaxed = functools.partial(_transformers(), assistant_ensemble_weight=weight)
    result = analyze(problem, "chain:1", ExternalVerifier(relaxed, "transformers", rng="capture"))
    assert abs(result.tv_distance - (1 - weight) * 0.5 * np.abs(p - q).sum()) < 1e-12
    lossy = analyze(random_problem(3, 2, 3), "chain:2", ExternalVerifier(relaxed, "transformers", rng="capture"))
    assert lossy.tv_distance > 1e-3


def test_a_transformers_shaped_function_with_inconsistent_counts_is_caught():
    def wrong_count(candidate_input_ids, candidate_logits, candidate_length, new_logits):
        torch.rand(1)
        return candidate_input_ids[:, -candidate_length:], 0  # every candidate, but n_matches 0

    with pytest.raises(VerifierError, match="n_matches = 0"):
        analyze(random_problem(3, 2, 0), "chain:2", ExternalVerifier(wrong_count, "transformers", rng="capture"))


def test_transformers_layout_hands_logits_of_the_problem():
    problem = random_problem(3, 2, 7)
    seen = {}

    def spy(candidate_input_ids, candidate_logits, candidate_length, new_logits):
        seen.update(ids=candidate_input_ids.clone(), q=candidate_logits.softmax(-1), length=candidate_length,
                    p=new_logits.softmax(-1))
        torch.rand(1)
        return candidate_input_ids[:, -candidate_length:][:, :1], 0 * candidate_length

    tree = DraftTree.from_paths(problem, [[2, 0]])
    law = ExternalVerifier(spy, "transformers", rng="capture").emission_law(tree)
    assert law[0, 2] == 1.0  # it emits the first candidate as a correction, always
    assert seen["length"] == 2 and seen["ids"][0, -2:].tolist() == [2, 0]
    assert np.allclose(seen["q"][0].numpy(), [problem.draft(()), problem.draft((2,))], atol=1e-15)
    assert np.allclose(seen["p"][0].numpy(), [problem.target(()), problem.target((2,)), problem.target((2, 0))],
                       atol=1e-15)


# --------------------------------------------------------------------------------------------------
# Whole blocks that draft their own tokens (the gpt-fast layout), on a function written in gpt-fast's style


def _race(law):
    """One token from ``law`` by an exponential race, as gpt-fast samples without a device sync."""
    noise = torch.empty_like(law).exponential_(1)
    return torch.argmax(law / noise, dim=-1, keepdim=True)


def self_drafting_block(model, draft_model, cur_token, input_pos, speculate_k, residual_sign=1, temperature=1.0):
    """Drafts K tokens from ``draft_model`` one position at a time, scores them with ``model`` in one call and
    verifies them with Leviathan et al.'s rule; ``residual_sign=-1`` draws corrections from (q - p)+ (a bug),
    ``temperature`` drafts from a rescaled draft law (and verifies with it)."""
    drafts, draft_laws = [], []
    token = cur_token.view(1, 1)
    for index in range(speculate_k):
        logits = draft_model(token, torch.tensor([input_pos + index]))
        law = torch.softmax(logits[0, -1] / temperature, dim=-1)
        token = _race(law).view(1, 1)
        drafts.append(token.view(1))
        draft_laws.append(law)
    drafts, draft_laws = torch.cat(drafts), torch.stack(draft_laws)  # [K], [K, V]
    positions = torch.arange(input_pos, input_pos + speculate_k + 1)
    target = torch.softmax(model(torch.cat([cur_token.view(1), drafts]).view(1, -1), positions)[0], dim=-1)
    index = torch.arange(speculate_k)
    ratio = torch.clamp(target[index, drafts] / draft_laws[index, drafts], max=1.0)
    rejected = (torch.rand_like(ratio) > ratio).nonzero()
    if len(rejected) == 0:
        return torch.cat([drafts, _race(target[-1])])
    at = int(rejected[0])
    residual = torch.clamp(residual_sign * (target[at] - draft_laws[at]), min=0)
    return torch.cat([drafts[:at], _race(residual / residual.sum())])


@pytest.mark.parametrize("length", [1, pytest.param(2, marks=pytest.mark.slow)])
def test_a_self_drafting_block_is_checked_with_its_own_drafting(length):
    problem = random_problem(3, length, 2)
    verifier = ExternalVerifier(self_drafting_block, "gpt-fast", rng="capture")
    result = analyze(problem, f"chain:{length}", verifier)
    reference = analyze(problem, f"chain:{length}", get_verifier("naive"))
    assert result.tv_distance <= 1e-12 and abs(result.block_efficiency - reference.block_efficiency) < 1e-12
    assert verifier.races_read > 0


def test_a_self_drafting_block_that_resamples_from_the_wrong_residual_has_the_closed_form_tv():
    """Corrections from norm((q - p)+) on chain:1, context-free: the first token is min(p, q)(y) + TV(p, q)
    (q - p)+(y) / TV(p, q) = q(y), and the next comes from p either way, so TV = TV(q, p)."""
    p, q = np.array([0.5, 0.3, 0.2]), np.array([0.2, 0.2, 0.6])
    wrong = functools.partial(self_drafting_block, residual_sign=-1)
    result = analyze(ContextFreeProblem(p, q), "chain:1", ExternalVerifier(wrong, "gpt-fast", rng="capture"))
    assert abs(result.tv_distance - 0.5 * np.abs(p - q).sum()) < 1e-12


def test_a_block_that_drafts_from_another_law_is_refused_with_both_probabilities():
    tempered = functools.partial(self_drafting_block, temperature=0.5)
    verifier = ExternalVerifier(tempered, "gpt-fast", rng="capture")
    with pytest.raises(VerifierError, match="does not draft from the draft model's conditionals"):
        analyze(random_problem(3, 1, 2), "chain:1", verifier)
    tree = DraftTree.from_paths(random_problem(3, 1, 2), [[0]])
    with pytest.raises(VerifierError, match="drafts its own tokens"):  # no black-box run on a given tree
        verifier.sample_codes(tree.as_batch(), np.zeros(3, dtype=np.int64), np.random.default_rng(0))


# --------------------------------------------------------------------------------------------------
# The rule of each primitive, by hand


def _fed(values, function):
    capture = Capture("f")
    with capture:
        tape = Tape(np.array([values], dtype=np.float64))
        capture.start(tape)
        out = function()
        capture.start(None)
    return out, tape


def test_each_primitive_follows_its_stated_rule():
    weights = np.array([0.2, 0.0, 0.5, 0.3])  # cumulative 0.2, 0.2, 0.7, 1.0
    drawn, _ = _fed([0.65], lambda: torch.multinomial(torch.tensor(weights), 1).item())
    assert drawn == 2
    drawn, _ = _fed([0.7], lambda: int(np.random.choice(4, p=weights)))
    assert drawn == 3  # cumulative 0.7 <= 0.7: the next token
    drawn, _ = _fed([0.19], lambda: random.choices("abcd", weights=list(weights))[0])
    assert drawn == "a"
    drawn, _ = _fed([0.25], lambda: torch.empty(1, dtype=torch.float64).exponential_(2.0).item())
    assert drawn == -math.log(0.25) / 2
    drawn, _ = _fed([0.4, 0.6], lambda: torch.bernoulli(torch.tensor([0.5, 0.5])).tolist())
    assert drawn == [1.0, 0.0]
    drawn, _ = _fed([0.99], lambda: torch.randint(2, 7, (1,)).item())
    assert drawn == 6
    drawn, _ = _fed([0.3, 0.8], lambda: np.random.uniform(-1.0, 1.0, size=2).tolist())
    assert drawn == [-1.0 + 2 * 0.3, -1.0 + 2 * 0.8]
    drawn, _ = _fed([0.5], lambda: random.gauss(1.0, 2.0))
    assert drawn == 1.0
    drawn, tape = _fed([0.1, 0.9, 0.5], lambda: torch.multinomial(torch.tensor([1.0, 1.0, 1.0]), 2).tolist())
    assert drawn == [0, 2] and tape.cursor == 2  # without replacement: token 0, then 0.9 of what is left
    below_one = 1 - 2 ** -53  # float32 and bfloat16 would round it up to 1.0; draws round down
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        drawn, _ = _fed([below_one], lambda dtype=dtype: torch.rand(1, dtype=dtype).item())
        assert drawn < 1.0


def test_a_capture_restores_every_generator_also_after_an_error():
    originals = (torch.rand, torch.multinomial, np.random.random, np.random.default_rng, random.random)
    with pytest.raises(ZeroDivisionError):
        with Capture("f", torch_full=True):
            assert torch.rand is not originals[0] and "exponential_" in vars(torch.Tensor)
            assert torch.overrides._get_current_function_mode() is not None
            raise ZeroDivisionError
    assert (torch.rand, torch.multinomial, np.random.random, np.random.default_rng, random.random) == originals
    assert "exponential_" not in vars(torch.Tensor)  # the TensorBase method again, not an override
    assert torch.overrides._get_current_function_mode() is None


# --------------------------------------------------------------------------------------------------
# Loading a wrapper beside its siblings


def test_a_wrapper_imports_its_siblings_and_leaves_nothing_behind(tmp_path):
    for name, value in (("one", 1), ("two", 2)):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "verispec_sibling_helper.py").write_text(f"VALUE = {value}\n")
        (folder / "wrapper.py").write_text("import verispec_sibling_helper\n"
                                           "def value():\n    return verispec_sibling_helper.VALUE\n")
    path_before = list(sys.path)
    assert load_function(f"{tmp_path / 'one' / 'wrapper.py'}:value")() == 1
    assert load_function(f"{tmp_path / 'two' / 'wrapper.py'}:value")() == 2  # its own sibling, not the first's
    assert sys.path == path_before and "verispec_sibling_helper" not in sys.modules
