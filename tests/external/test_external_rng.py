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
from pathlib import Path

import numpy as np
import pytest

from tests.support import external_rules as rules
from tests.support.timing import Stopwatch
from verispec.errors import VerifierError, VerispecError
from verispec.external.adapter import ExternalVerifier, load_function
from verispec.external.exact import NotPiecewiseConstantError, integrate
from verispec.external.rng import Capture, CaptureRefusal, GlobalRandomnessError, Tape
from verispec.external.runner import NondeterministicError
from verispec.simulator.engine import analyze
from verispec.simulator.generators import random_problem
from verispec.simulator.problems import ContextFreeProblem
from verispec.simulator.tree_specs import parse_tree
from verispec.simulator.trees import DraftTree, TreeBatch
from verispec.verifiers import get_verifier

torch = pytest.importorskip("torch")

from numpy.random import random_sample as bound_numpy_random  # noqa: E402 - bound before any call (not captured)
from torch import rand as bound_torch_rand  # noqa: E402 - bound before any call (captured through the mode)

GALLERY = Path(__file__).resolve().parents[2] / "examples" / "external"


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
    """The root token by argmax(p / E); ``extra``: None (a pure race), 'before' / 'after' (another use of E before
    or after the race), 'overwrite' (w written into after the division)."""
    def rule(draft_tokens, draft_probs, target_probs):
        law = target_probs[:, 0].clone()
        noise = torch.empty_like(law).exponential_()
        if extra == "before":
            noise = noise * 1.0  # a use of the noise other than the race
        score = law / noise
        if extra == "overwrite":
            law.zero_()  # the weights' memory reused after the division: the race has already read them
        last = torch.argmax(score, dim=-1)
        if extra == "after":
            last = last + (noise.sum() * 0).long()  # reads the noise after the race
        out = torch.full((len(law), draft_tokens.shape[1] + 1), -1, dtype=torch.int64)
        out[:, 0] = last
        return out
    return rule


def _token_level_torch(draft_tokens, draft_probs, target_probs, extra_draw=None):
    """Leviathan et al.'s rule on a batch of chains on torch's global RNG: ``torch.rand`` tests the drafts,
    ``torch.multinomial`` draws the correction or bonus token. ``extra_draw(u, accepted)`` -> whether to make one
    more (unused) draw before that token, given every row's tests (the whole batch's: the defect under test)."""
    count, length = draft_tokens.shape
    rows = torch.arange(count)
    q = draft_probs.gather(-1, draft_tokens[..., None]).squeeze(-1)  # [B, L]
    p = target_probs[:, :length].gather(-1, draft_tokens[..., None]).squeeze(-1)  # [B, L]
    u = torch.rand(count, length, dtype=torch.float64)
    accepted = torch.cumprod((u * q < p).long(), dim=1).sum(dim=1)  # [B]
    if extra_draw is not None and extra_draw(u, accepted):
        torch.rand(count, 1)
    at = target_probs[rows, accepted]  # [B, V]
    residual = (at - draft_probs[rows, accepted.clamp(max=length - 1)]).clamp(min=0)
    law = torch.where((accepted < length)[:, None], residual, at)
    last = torch.multinomial(law, 1)[:, 0]
    out = torch.full((count, length + 1), -1, dtype=torch.int64)
    for i in range(length):
        out[:, i] = torch.where(accepted > i, draft_tokens[:, i], out[:, i])
    out[rows, accepted] = last
    return out


def correction_only_when_some_row_rejects(draft_tokens, draft_probs, target_probs):
    """Leviathan et al.'s rule, batched, that draws the corrections only ``if rejected.any()`` and the bonus
    tokens after them: alone, a row that accepts everything takes its bonus token from its L-th uniform; beside a
    row that rejects, from its (L+1)-th."""
    count, length = draft_tokens.shape
    rows = torch.arange(count)
    q = draft_probs.gather(-1, draft_tokens[..., None]).squeeze(-1)
    p = target_probs[:, :length].gather(-1, draft_tokens[..., None]).squeeze(-1)
    accepted = torch.cumprod((torch.rand(count, length, dtype=torch.float64) * q < p).long(), dim=1).sum(dim=1)
    out = torch.full((count, length + 1), -1, dtype=torch.int64)
    for i in range(length):
        out[:, i] = torch.where(accepted > i, draft_tokens[:, i], out[:, i])
    rejected = accepted < length
    if rejected.any():
        at = accepted.clamp(max=length - 1)
        residual = (target_probs[rows, at] - draft_probs[rows, at]).clamp(min=0)
        residual = torch.where(rejected[:, None], residual, torch.ones_like(residual))
        correction = torch.multinomial(residual, 1)[:, 0]
        out[rows[rejected], accepted[rejected]] = correction[rejected]
    bonus = torch.multinomial(target_probs[:, length], 1)[:, 0]
    out[rows[~rejected], length] = bonus[~rejected]
    return out


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
    assert verifier.stats.rounds > 0 and verifier.stats.evaluations < 5_000  # the refused integration is counted


def test_the_race_reads_its_weights_when_the_division_runs():
    """``score = w / E; w.zero_(); argmax(score)``: the race ran on w = p, so the root token has law p (the race's
    closed form w / sum w); reading w at the argmax gave a point mass on token 0."""
    p = [0.5, 0.3, 0.2]
    tree = DraftTree.from_paths(ContextFreeProblem(p, [0.2, 0.2, 0.6]), [[0]])
    for per_row in (False, True):
        verifier = ExternalVerifier(_race_then("overwrite"), "chain", arrays="torch", rng="capture", per_row=per_row)
        law = verifier.emission_law(tree)[0]
        assert np.abs(law[:3] - p).max() < 1e-15 and law[3:].sum() == 0 and verifier.races_read > 0


def test_a_race_on_noise_in_numpy_memory_is_not_replaced():
    """Noise E = torch.from_numpy(buffer): the function reads the buffer after the race, which torch cannot see,
    and emits token 2 where the buffer's race disagrees with torch's argmax. Replacing the argmax by one draw
    made them disagree (a law with extra mass on token 2, and no error); the real race, which exact mode
    refuses, never disagrees."""
    def rule(draft_tokens, draft_probs, target_probs):
        law = target_probs[:, 0]
        buffer = np.empty(tuple(law.shape))
        noise = torch.from_numpy(buffer)
        noise.exponential_()
        last = torch.argmax(law / noise, dim=-1).numpy()
        agree = last == np.argmax(law.numpy() / buffer, axis=-1)
        out = np.full((len(last), draft_tokens.shape[1] + 1), -1, dtype=np.int64)
        out[:, 0] = np.where(agree, last, 2)
        return torch.from_numpy(out)

    verifier = ExternalVerifier(rule, "chain", arrays="torch", rng="capture")
    with pytest.raises(NotPiecewiseConstantError, match="moves when uniform"):
        analyze(ContextFreeProblem([0.5, 0.3, 0.2], [0.2, 0.2, 0.6]), "chain:1", verifier)
    assert verifier.races_read == 0


def test_sampling_a_race_runs_the_real_race():
    """Black-box sampling runs the real exponentials (no race rule): on a pure race argmax(p / E) no race is read
    as one draw, and every one of the 3 uniforms of the noise is read, where the race rule reads only the first
    (checked too, so that the check can fail). The root token has law p: each of the 3 frequencies over n =
    60,000 runs is within sqrt(log(6 / 1e-6) / (2 n)) of p (Hoeffding, union bound over 3 tokens and 2 sides):
    false-failure rate below 1e-6."""
    p = np.array([0.5, 0.3, 0.2])
    problem = ContextFreeProblem(p, [0.2, 0.2, 0.6])
    batch = DraftTree.from_paths(problem, [[0]]).as_batch()
    verifier = ExternalVerifier(_race_then(None), "chain", arrays="torch", rng="capture")
    runs = 60_000
    codes = verifier.sample_codes(batch, np.zeros(runs, dtype=np.int64), np.random.default_rng(1))
    assert verifier.races_read == 0
    frequencies = np.bincount(codes, minlength=3)[:3] / runs  # node 0: code = token
    assert np.abs(frequencies - p).max() < math.sqrt(math.log(6 / 1e-6) / (2 * runs))
    runner = verifier._runner(batch)
    uniforms = np.random.default_rng(2).random((4, runner.width_uniforms))
    for races, read in ((False, [True, True, True]), (True, [True, False, False])):
        with runner.session():
            _, used = runner.run(np.zeros(4, dtype=np.int64), uniforms, races=races)
        assert runner.width_uniforms == 3 and used.tolist() == [read] * 4


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
    # reading u0 again for the second draw would give (0, a, 1 - a): the law shows each draw had its own uniform
    assert np.allclose(law, [a * (1 - b), a * b, 1 - a], rtol=0, atol=1e-15)
    assert [use.describe() for use in verifier.stats.uses[:2]] == ["threshold test, up to 2 pieces on a line"] * 2
    # only the attempt that completed is counted: as many evaluations as one integration with that tape from the
    # start (the abandoned attempt with the probe's tape of 1 evaluated too, and is not counted)
    fresh = ExternalVerifier(rule, "chain", rng="capture", per_row=True)
    fresh._runner(tree.as_batch()).tape = verifier._runner(tree.as_batch()).tape
    assert np.array_equal(fresh.emission_law(tree)[0], law)
    assert fresh.stats.evaluations == verifier.stats.evaluations > 0


def test_the_probe_refuses_a_function_that_draws_more_than_max_uniforms():
    """12 uniforms a call against max_uniforms = 10: the probe's first tape (8) runs out, and a longer one must
    not pass the cap (it used to become 16, and the function was integrated over 12 uniforms: 12 threshold
    tests, law (1 - 0.9^12, 0.9^12), and no refusal)."""
    def rule(draft_tokens, draft_probs, target_probs):
        return _emit_at_root([int(max(np.random.random() for _ in range(12)) < 0.9)], 2)

    tree = DraftTree.from_paths(ContextFreeProblem([0.5, 0.5], [0.5, 0.5]), [[0]])
    with pytest.raises(CaptureRefusal, match="more than 10 uniforms"):
        ExternalVerifier(rule, "chain", rng="capture", per_row=True, max_uniforms=10).emission_law(tree)


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


def test_a_batched_call_that_mixes_rows_symmetrically_is_refused_by_the_calls_alone():
    """Every row tests its drafts with the batch's mean uniforms: reversing the rows changes nothing, and every
    call draws alike, but a row called alone gets another outcome."""
    def rule(draft_tokens, draft_probs, target_probs):
        count, length = draft_tokens.shape
        uniforms = torch.rand(count, length + 1, dtype=torch.float64).mean(dim=0, keepdim=True)
        return _batched(draft_tokens, draft_probs, target_probs, uniforms.expand(count, length + 1).numpy())

    with pytest.raises(CaptureRefusal, match="when called on that tree alone"):
        analyze(random_problem(3, 1, 0), "chain:1", ExternalVerifier(rule, "chain", arrays="torch", rng="capture"))


@pytest.mark.parametrize("seed", [0, 1])
def test_a_batched_call_whose_draws_depend_on_the_other_rows_is_refused_and_is_right_row_by_row(seed):
    """``correction_only_when_some_row_rejects``: batched, a row's bonus token takes another uniform when a row
    beside it rejects, so its outcome is no function of its own tree and uniforms (this was integrated into a
    wrong law, TV 1.1e-4 on seed 0, with no error). Row by row it is Leviathan et al.'s rule."""
    problem = random_problem(3, 2, seed)
    batched = ExternalVerifier(correction_only_when_some_row_rejects, "chain", arrays="torch", rng="capture")
    with pytest.raises(CaptureRefusal, match="--per-row") as error:
        analyze(problem, "chain:2", batched)
    assert "\n" not in str(error.value)
    one_by_one = ExternalVerifier(correction_only_when_some_row_rejects, "chain", arrays="torch", rng="capture",
                                  per_row=True)
    assert _same_law_as_naive(one_by_one, "chain:2", problem) < 1e-12


def test_every_batched_call_must_draw_as_the_first_did():
    """A draw made only when some row of the batch drew u_0 < 1e-9, before the token draw (which then takes the
    next uniform, in every row): the probe's uniforms (random, and (k + 1/2) / count) never go that low, the
    integration's first scan (which starts at u_0 = 0) does, and that call is refused by the check every batched
    call gets, before any law is formed from calls that drew differently."""
    def rule(draft_tokens, draft_probs, target_probs):
        return _token_level_torch(draft_tokens, draft_probs, target_probs,
                                  extra_draw=lambda u, accepted: bool((u[:, 0] < 1e-9).any()))

    problem = random_problem(3, 2, 0)
    verifier = ExternalVerifier(rule, "chain", arrays="torch", rng="capture")
    with pytest.raises(CaptureRefusal, match=r"torch.rand of 1 per row .* as draw #2 of a batched call where an "
                                             r"earlier call on the same tree shape drew torch.multinomial"):
        analyze(problem, "chain:2", verifier)
    assert verifier.stats.rounds == 1  # in the first round of the integration
    # the same rule without the extra draw is Leviathan et al.'s rule, batched
    assert _same_law_as_naive(ExternalVerifier(_token_level_torch, "chain", arrays="torch", rng="capture"),
                              "chain:2", problem) < 1e-12


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

    with Stopwatch() as watch, pytest.raises(VerifierError, match="call timeout of 0.3 s"):
        analyze(random_problem(3, 1, 0), "chain:1", ExternalVerifier(rule, "chain", call_timeout=0.3))
    assert watch.within(0.3, 4.7), watch  # the timeout, then CPU (stretched by the load); the loop runs for ever


def test_a_call_timeout_lets_a_function_that_returns_in_time_pass():
    verifier = ExternalVerifier(rules.token_level, "chain", call_timeout=5.0)
    assert _same_law_as_naive(verifier, "chain:2", random_problem(3, 2, 1)) < 1e-12


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
    with Stopwatch() as watch, pytest.raises(NotPiecewiseConstantError, match="moves when uniform"):
        analyze(ContextFreeProblem([0.5, 0.3, 0.2], [0.2, 0.2, 0.6]), "chain:2", verifier)
    # without the breakpoint check, the bounds on boxes alone refuse it only after more than a million
    # evaluations (docs/results/bench/earlier/bench_external.md, "without the breakpoint check"); 10 s of CPU on an
    # idle core, stretched by the load
    assert verifier.stats.rounds > 0 and verifier.stats.evaluations < 50_000 and watch.within(0, 10), watch


@pytest.mark.parametrize("limit", [31, 32])
def test_the_bound_on_boxes_over_the_batch_holds_exactly(limit):
    """floor(8 u) on each of 4 rows: 8 cells a row, 32 boxes in all (each row's bound, 100, is far). With
    max_total_boxes = 32 the law is 1/8 on each outcome; with 31 the batch is refused."""
    def evaluate(rows, points):
        return np.floor(points[:, 0] * 8).astype(np.int64)

    if limit == 31:
        with pytest.raises(NotPiecewiseConstantError, match="4 draft trees needed more than 31 boxes together"):
            integrate(evaluate, 4, 1, 8, max_boxes=100, max_total_boxes=limit)
    else:
        law = integrate(evaluate, 4, 1, 8, max_boxes=100, max_total_boxes=limit)
        assert np.array_equal(law, np.full((4, 8), 1 / 8))


@pytest.mark.parametrize("rule,length,size", [(rules.summed_uniforms, 1, 2), (rules.exponential_race, 2, 3)])
def test_combined_uniforms_are_refused_by_the_breakpoint_check(rule, length, size):
    uniform = [1 / size] * size
    tree = DraftTree.from_paths(ContextFreeProblem(uniform, uniform), [[0] * length])
    verifier = ExternalVerifier(rule, "chain")
    with pytest.raises(NotPiecewiseConstantError, match="moves when uniform"):
        verifier.emission_law(tree)
    assert verifier.stats.rounds > 0 and verifier.stats.evaluations < 5_000  # the refused integration is counted


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


def test_numpy_exponential_with_an_array_of_scales_takes_a_uniform_per_element():
    """scale [1, 2] and no size: two draws, -log(0.25) * 1 and -log(0.5) * 2 (one uniform reused for both gave
    -log(0.25) * [1, 2] and left the tape's cursor at 1)."""
    scales = np.array([1.0, 2.0])
    expected = [-math.log(0.25), -2 * math.log(0.5)]
    for draw in (lambda: np.random.exponential(scale=scales), lambda: np.random.default_rng().exponential(scales)):
        drawn, tape = _fed([0.25, 0.5], draw)
        assert drawn.tolist() == expected and tape.cursor == 2
    with pytest.raises(ValueError, match="scale < 0"):
        np.random.exponential(scale=-1.0)  # numpy's own refusal, outside any capture ...
    with pytest.raises(ValueError, match="scale < 0"):
        _fed([0.5], lambda: np.random.exponential(scale=-1.0))  # ... and the captured one's


@pytest.mark.parametrize("arguments", [
    dict(a=3, p=[0.5, 0.3, 0.3]),  # sums to 1.1
    dict(a=3, p=[0.5, 0.6, -0.1]),  # sums to 1, one negative entry
    dict(a=3, p=[0.5, float("nan"), 0.5]),
    dict(a=3, p=[[0.5, 0.5]]),  # p of two dimensions
    dict(a=3, p=[1.0, 0.0, 0.0], size=2, replace=False),  # fewer non-zero entries than draws
    dict(a=0),
])
@pytest.mark.parametrize("interface", ["numpy.random", "Generator"])
def test_numpy_choice_refuses_what_numpy_refuses_with_a_value_error(arguments, interface):
    """What numpy refuses (checked on numpy itself, outside any capture) the captured choice refuses with
    numpy's kind of error; p = [0.5, 0.3, 0.3] used to be drawn from as if normalised, and a negative entry gave
    torch's RuntimeError."""
    def choose(generator):
        return generator.choice(**arguments)

    with pytest.raises(ValueError):
        choose(np.random if interface == "numpy.random" else np.random.default_rng(0))
    with pytest.raises(ValueError):
        _fed([0.5, 0.5], lambda: choose(np.random if interface == "numpy.random" else np.random.default_rng()))


def test_numpy_choice_keeps_numpys_tolerance_and_its_two_dimensional_populations():
    """numpy accepts p whose total is within sqrt(eps) of 1 (1 + 1e-9 passes, 1 + 1e-7 does not), and
    Generator.choice draws rows of a 2-D population where np.random.choice refuses it."""
    close, far = [0.5, 0.5 + 1e-9], [0.5, 0.5 + 1e-7]
    assert int(np.random.default_rng(0).choice(2, p=close)) in (0, 1)
    with pytest.raises(ValueError):
        np.random.default_rng(0).choice(2, p=far)
    assert _fed([0.75], lambda: int(np.random.choice(2, p=close)))[0] == 1  # 0.75 of the total: past 0.5
    with pytest.raises(ValueError):
        _fed([0.75], lambda: np.random.choice(2, p=far))
    rows = np.array([[1, 2], [3, 4]])
    assert _fed([0.75], lambda: np.random.default_rng().choice(rows).tolist())[0] == [3, 4]
    with pytest.raises(ValueError):
        _fed([0.75], lambda: np.random.choice(rows))


def test_generator_choice_without_shuffling_is_refused():
    """Generator.choice(replace=False, shuffle=False) returns the chosen set in numpy's own order, which the
    sequential rule (a random order) does not give: refused, not fed."""
    def rule(draft_tokens, draft_probs, target_probs):
        return _emit_at_root([int(np.random.default_rng().choice(3, 2, replace=False, shuffle=False)[0])], 2)

    tree = DraftTree.from_paths(ContextFreeProblem([1 / 3] * 3, [1 / 3] * 3), [[0]])
    with pytest.raises(CaptureRefusal, match="shuffle=False"):
        ExternalVerifier(rule, "chain", rng="capture", per_row=True).emission_law(tree)


def test_random_choices_refuses_what_cpython_refuses():
    """CPython raises ValueError for weights of total 0 or not finite, and so does the captured choices; negative
    weights with a positive total CPython bisects as they are (no categorical law), which capture refuses."""
    for weights in ([0.0, 0.0], [1.0, float("inf")]):
        with pytest.raises(ValueError):
            random.choices("ab", weights=weights)
        with pytest.raises(ValueError):
            _fed([0.5], lambda weights=weights: random.choices("ab", weights=weights))

    def rule(draft_tokens, draft_probs, target_probs):
        return _emit_at_root([random.choices([0, 1], weights=[2.0, -0.5])[0]], 2)

    tree = DraftTree.from_paths(ContextFreeProblem([0.5, 0.5], [0.5, 0.5]), [[0]])
    with pytest.raises(CaptureRefusal, match="negative weight"):
        ExternalVerifier(rule, "chain", rng="capture", per_row=True).emission_law(tree)


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


def test_a_module_importable_without_the_wrappers_folder_stays_one_module(tmp_path, monkeypatch):
    """The wrapper's folder is on sys.path already, so its package was importable anyway: taking it out of
    sys.modules after the load made the next import of it a second module object."""
    package = tmp_path / "verispec_test_shared_package"
    package.mkdir()
    (package / "__init__.py").write_text("MARK = object()\n")
    (tmp_path / "wrapper.py").write_text("import verispec_test_shared_package\n"
                                         "def package():\n    return verispec_test_shared_package\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        loaded = load_function(f"{tmp_path / 'wrapper.py'}:package")()
        import verispec_test_shared_package

        assert verispec_test_shared_package is loaded and sys.modules["verispec_test_shared_package"] is loaded
    finally:
        sys.modules.pop("verispec_test_shared_package", None)


def test_an_integer_draw_tells_the_tape_where_its_value_changes():
    """torch.randint(0, 5, (2,)) reads two columns; each changes value at k/5 (k = 1..4), which the tape records
    for exact integration to scan; a uniform draw records none."""
    import torch

    out, tape = _fed([0.5, 0.1, 0.95], lambda: (torch.rand(()), torch.randint(0, 5, (2,))))
    assert out[1].tolist() == [0, 4]
    assert sorted(tape.breaks) == [1, 2]
    for column in (1, 2):
        assert np.allclose(tape.breaks[column], np.arange(1, 5) / 5, rtol=0, atol=1e-15)


def test_an_integer_draws_breakpoints_cross_from_the_sandbox_to_the_workers_tape():
    """A sandboxed call records its tape (what it read, its discrete results, and now its known breakpoints) and the
    worker writes them into its own tape: the integer draw's points reach the integration, as in one process."""
    import torch

    from verispec.external import sandboxed

    values = np.array([[0.5, 0.3]])
    config = {"key": "test-breaks", "name": "f", "mode": "capture", "races": True, "torch_full": False,
              "keys": "keyed", "max_keys": 8, "clock_offset": 0.0, "handed_seed": False, "values": values,
              "expected": None}
    try:
        result, records = sandboxed.call_in_sandbox(lambda: torch.randint(0, 4, ()), (), {}, {"capture": config})
    finally:
        sandboxed.call_in_sandbox(None, (), {}, {"close": "test-breaks", "check": False})
    assert int(result) == 2  # floor(0.5 * 4)
    capture = Capture("f")
    with capture:
        tape = Tape(values)
        capture.start(tape)
        sandboxed._apply(capture, records)
        capture.start(None)
    assert sorted(tape.breaks) == [0] and np.allclose(tape.breaks[0], [0.25, 0.5, 0.75], rtol=0, atol=1e-15)
    assert tape.complete == {0}  # the integer is all the call learned of its uniform, in the sandbox as here
    assert tape.used.tolist() == [True, False]


def test_tensors_cross_to_the_sandbox_as_numpy_arrays_and_arrive_as_the_runner_hands_them():
    """A plain CPU tensor crosses as its array (``sandboxed._Tensor``) and arrives equal, of its dtype, on numpy's
    memory (``torch.from_numpy``, as the in-process runner converts arguments); what the array would not carry - a
    gradient, strides, bfloat16, a subclass - crosses by torch's own pickling, as before."""
    import pickle

    from verispec.external import sandboxed

    plain = [(torch.arange(6) % 4).to(dtype).reshape(2, 3) for dtype in (torch.float64, torch.float32, torch.int64,
                                                                          torch.bool, torch.float16)]
    kept = [torch.ones(2, requires_grad=True), torch.arange(6.0).reshape(2, 3).t(), torch.ones(2, dtype=torch.bfloat16),
            torch.nn.Parameter(torch.ones(2))]
    packed = sandboxed._packed((*plain, kept, 3, "text"))
    assert all(isinstance(item, sandboxed._Tensor) for item in packed[:len(plain)])
    assert all(item is original for item, original in zip(packed[len(plain)], kept)) and packed[-2:] == (3, "text")
    arrived = pickle.loads(pickle.dumps(packed, protocol=pickle.HIGHEST_PROTOCOL))
    for before, after in zip(plain, arrived):
        assert after.dtype == before.dtype and torch.equal(after, before) and not after.untyped_storage().resizable()
    for before, after in zip(kept, arrived[len(plain)]):
        assert type(after) is type(before) and after.dtype == before.dtype and after.stride() == before.stride()
        assert after.requires_grad == before.requires_grad and torch.equal(after.detach(), before.detach())
