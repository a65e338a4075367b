"""Whole steps (``verispec.external.step``): code that drafts from raw logits under the requested sampling and
verifies, checked against the target after that sampling. Each layout meets a correct twin (LOSSLESS) and a
broken one (LOSSY); the expected laws come from the transform applied by hand and from Leviathan et al.'s closed
form, never from the step checker itself."""

from __future__ import annotations

import numpy as np
import pytest

from tests.support import step_rules
from tests.support.timing import timed
from verispec.cli import main
from verispec.errors import VerispecError
from verispec.external.check import check_external
from verispec.external.step import LogitsModel, greedy_output, requested_problem
from verispec.simulator.problems import ContextFreeProblem
from verispec.verdict import Verdict

torch = pytest.importorskip("torch")

TARGET, DRAFT = [0.5, 0.3, 0.2], [0.2, 0.2, 0.6]
PROBLEM = ContextFreeProblem(TARGET, DRAFT)
SAMPLING = "temperature=0.7,top_k=2"


def _check(function, layout, tree, **options):
    return check_external(function, layout, tree, problem=PROBLEM, rng="capture", sampling=SAMPLING, **options)


@pytest.mark.parametrize("layout,tree,correct,broken", [
    ("step", "chain:2", step_rules.step, step_rules.step_raw_q),
    ("step", "chain:1", step_rules.step, step_rules.step_bonus_only),
    ("step-ragged", "chain:1", step_rules.ragged_step, step_rules.ragged_step_shifted),
    ("step-tree", "iid:2,1", step_rules.tree_step, step_rules.tree_step_stale_residual),
])
def test_each_step_layout_passes_its_correct_twin_and_catches_its_broken_one(layout, tree, correct, broken):
    assert _check(correct, layout, tree).verdict is Verdict.LOSSLESS
    report = _check(broken, layout, tree)
    assert report.verdict is Verdict.LOSSY and report.tv_distance > 1e-3 and report.discrepancies


def test_raw_q_on_chain_1_has_the_closed_form_tv():
    """chain:1, T = 0.7, top-k 2. By hand: p' = (5^(1/.7), 3^(1/.7)) normalised on {0, 1}, q' on {2, 0} likewise
    (q's top two: 0.6 and 0.2, token 1 tied with 0 at 0.2 and kept too: top-k keeps ties). The verifier sees the
    raw q, so the first token's law is sum_x q'(x) min(1, p'(x)/q(x)) + the residual (p' - q)+ times the rejected
    mass; its TV from p' is the block's (the bonus continues with p')."""
    power = 1 / 0.7
    p = np.array([0.5 ** power, 0.3 ** power, 0.0])
    p /= p.sum()
    kept = np.array([0.2 ** power, 0.2 ** power, 0.6 ** power])  # ties at the k-th value are kept
    q_drafted = kept / kept.sum()
    q_raw = np.array(DRAFT)
    accepted = q_drafted * np.minimum(1.0, p / q_raw)
    residual = np.maximum(p - q_raw, 0.0)
    first = accepted + (1 - accepted.sum()) * residual / residual.sum()
    expected = 0.5 * np.abs(first - p).sum()
    report = _check(step_rules.step_raw_q, "step", "chain:1")
    assert abs(report.tv_distance - expected) < 1e-12 and expected > 0.01


def test_the_check_is_against_the_requested_law_not_the_raw_target():
    """Negative control: a step that ignores the settings everywhere (plain T = 1) is lossless for the RAW
    target, and LOSSY against the requested one."""
    def plain(draft_model, target_model, input_ids, num_draft_tokens, temperature, top_k, top_p, min_p, seed):
        return step_rules.step(draft_model, target_model, input_ids, num_draft_tokens, 1.0, 0, 1.0, 0.0, seed)

    assert check_external(plain, "step", "chain:1", problem=PROBLEM, rng="capture").verdict is Verdict.LOSSLESS
    assert _check(plain, "step", "chain:1").verdict is Verdict.LOSSY


def test_the_logits_models_and_the_greedy_fillers():
    model = LogitsModel(PROBLEM.target, 3, 2)
    logits = model(torch.tensor([[9, 9, 9, 1, 2]]))  # P = 3 junk tokens, then the block's tokens 1, 2
    assert np.all(np.isnan(logits[0, :2].numpy()))
    assert np.allclose(np.exp(logits[0, 2:].numpy()), np.array([TARGET] * 3), atol=1e-15)
    # draft argmax is 2, the target's is 0: a greedy request with one draft emits the target's argmax at once
    assert greedy_output(PROBLEM, 1) == (0,) and greedy_output(PROBLEM, 0) == (0,)
    same = ContextFreeProblem([0.2, 0.2, 0.6], [0.1, 0.2, 0.7])
    assert greedy_output(same, 1) == (2, 2)
    from verispec.models.sampling import Sampling

    wanted = requested_problem(PROBLEM, Sampling(temperature=0.7, top_k=2), 2)
    power = np.array([0.5, 0.3, 0.0]) ** (1 / 0.7)  # T = 0.7, then the two most likely tokens, by hand
    for prefix in ((), (1,), (0, 2)):
        assert np.allclose(wanted.target(prefix), power / power.sum(), rtol=0, atol=1e-15)


@pytest.mark.parametrize("argv,message", [
    (["--sampling", "temperature=0"], "temperature"),
    (["--sampling", "top_p=1.5"], "top_p"),
    (["--sampling", "top_k=0"], "top_k"),
    (["--sampling", "min_p=-0.1"], "min_p"),
    (["--sampling", "temprature=0.7"], "temprature"),
])
def test_sampling_out_of_range_is_refused_in_one_line(capsys, argv, message):
    code = main(["check-external", "tests/support/step_rules.py:step", "--layout", "step", "--tree", "chain:1",
                 "--rng", "capture", "--target", "0.5,0.3,0.2", "--draft", "0.2,0.2,0.6", *argv])
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and message in lines[0]


def test_misnamed_arguments_and_sampling_on_a_plain_layout_are_refused(capsys):
    def misnamed(draft, target, input_ids, num_draft_tokens, temperature, top_k, top_p, min_p, seed):
        return torch.tensor([0])

    with pytest.raises(VerispecError, match="by these names and in this order"):
        check_external(misnamed, "step", "chain:1", problem=PROBLEM, rng="capture")
    code = main(["check-external", "tests/support/keyed_rules.py:keyed_salted", "--layout", "chain", "--tree",
                 "chain:1", "--rng", "capture", "--target", "0.5,0.3,0.2", "--draft", "0.2,0.2,0.6", "--sampling",
                 "temperature=0.7"])
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "whole-step layout" in lines[0]


def test_a_step_whose_keys_ignore_the_seed_or_follow_the_clock_is_refused():
    from verispec.external.rng import KeyRefusal

    def constant(draft_model, target_model, input_ids, num_draft_tokens, temperature, top_k, top_p, min_p, seed):
        return step_rules.step(draft_model, target_model, input_ids, num_draft_tokens, temperature, top_k, top_p,
                               min_p, 11)

    def clock(draft_model, target_model, input_ids, num_draft_tokens, temperature, top_k, top_p, min_p, seed):
        import time

        return step_rules.step(draft_model, target_model, input_ids, num_draft_tokens, temperature, top_k, top_p,
                               min_p, time.time_ns() % 2**20)

    with pytest.raises(KeyRefusal, match="does not depend on the request's seed"):
        _check(constant, "step", "chain:1")
    with pytest.raises(KeyRefusal, match="two identical calls"):
        _check(clock, "step", "chain:1")


@pytest.mark.parametrize("rule", ["naive", "bv"])
def test_the_step_layout_passes_verispec_own_rules(rule):
    """verispec's drafter and its registered rule as a procedure, inside the step: LOSSLESS; the same with the
    problem's raw laws in place of the requested ones (the settings ignored) is LOSSY (negative control)."""
    assert _check(step_rules.own_rule_step(rule), "step", "chain:1").verdict is Verdict.LOSSLESS
    own = step_rules.own_rule_step(rule)

    def ignoring(draft_model, target_model, input_ids, num_draft_tokens, temperature, top_k, top_p, min_p, seed):
        return own(draft_model, target_model, input_ids, num_draft_tokens, 1.0, 0, 1.0, 0.0, seed)

    assert _check(ignoring, "step", "chain:1").verdict is Verdict.LOSSY


@pytest.mark.parametrize("sampling", ["temperature=1.3,top_p=0.7", "min_p=0.5", "temperature=0.8,top_k=2,min_p=0.7"])
def test_every_part_of_the_requested_sampling_reaches_the_check(sampling):
    """The correct step under top-p and min-p settings is LOSSLESS; the settings honoured by the bonus token only
    (vLLM #42802: min_p dropped on the verified tokens) is LOSSY under each."""
    options = dict(problem=PROBLEM, rng="capture", sampling=sampling)
    assert check_external(step_rules.step, "step", "chain:1", **options).verdict is Verdict.LOSSLESS
    assert check_external(step_rules.step_bonus_only, "step", "chain:1", **options).verdict is Verdict.LOSSY


def test_a_greedy_filler_may_draft_anything_and_an_out_of_vocabulary_token_is_lossy():
    """Greedy fillers are held to the target's argmax tokens (ties to the smallest id, as plain greedy decoding)
    whatever their drafts, a shorter output included; a token outside the
    vocabulary is an outcome no correct step has: LOSSY with its mass, not a refusal (vLLM #53029's symptom)."""
    from verispec.external.step import greedy_consistent

    tied = ContextFreeProblem([0.4, 0.4, 0.2], [0.2, 0.3, 0.5])
    assert greedy_consistent((0,), tied, 1) and greedy_consistent((0, 0), tied, 1)
    assert not greedy_consistent((1,), tied, 1) and not greedy_consistent((0, 0, 0), tied, 1)

    def outside(draft_model, target_model, input_ids, num_draft_tokens, temperature, top_k, top_p, min_p, seed):
        emitted = step_rules.step(draft_model, target_model, input_ids, num_draft_tokens, temperature, top_k, top_p,
                                  min_p, seed)
        return torch.where(emitted == 1, torch.tensor(3), emitted)  # token 1 becomes id V

    report = _check(outside, "step", "chain:1")
    assert report.verdict is Verdict.LOSSY and "outside the vocabulary" in report.note


def test_auto_mode_falls_back_to_black_box_within_its_budget():
    """Exact mode on ten compared uniforms a token does not finish in half of a 3 s budget (nor in 40 s: the budget's
    size is not what the test is about, and each check spends all of it); auto mode then runs black-box until most
    of the rest is spent and says what its runs can detect. The correct twin is never LOSSY (alpha 1e-6); the broken
    one (the largest uniform, TV about 0.8 here) is LOSSY even at a few hundred runs (1.5 s of black-box time made
    about 3,300 runs on a loaded 2-core box, a threshold of 0.064: a quarter of those runs still shows a TV of
    0.8)."""
    problem = ContextFreeProblem([0.6, 0.4], [0.3, 0.7])
    for rule, lossy in ((step_rules.many_thresholds, False), (step_rules.many_thresholds_biased, True)):
        report, watch = timed(check_external, rule, "step", "chain:1", problem=problem, rng="capture", mode="auto",
                              time_budget=3, detect_tv=0.05)
        assert report.mode == "blackbox" and "exact mode did not finish" in report.note, report.note
        # the budget holds: 3 s and 10%, then CPU of an idle core stretched by the load (the last runs, the report);
        # exact mode not stopped runs past 40 s of CPU
        assert watch.within(1.1 * 3, 5), watch
        assert (report.verdict is Verdict.LOSSY) is lossy
        if not lossy:
            assert report.blackbox.detectable_tv > 0 and report.verdict in (Verdict.LOSSLESS, Verdict.INCONCLUSIVE)
