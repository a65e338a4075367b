"""Code whose randomness verispec cannot feed (issue 31, class 6): a generator created before the call,
``os.urandom``, or a global generator drawn from although uniforms are handed.

Such code has no law over verispec's uniforms, so exact mode is impossible; black-box mode tests it as it is, one
call per run on one tree, and ``auto`` falls back to that with a note. A function handed uniforms that draws from
torch's global generator instead is checked exactly, its draws captured. Expected values: the built-in rule's
losslessness, and a closed form for the lossy variant (derived in its test).
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from tests.support import external_rules as rules
from verispec.cli import main
from verispec.external.check import check_external
from verispec.external.runner import NondeterministicError
from verispec.simulator.problems import ContextFreeProblem
from verispec.verdict import EXIT_INCONCLUSIVE, EXIT_LOSSLESS, EXIT_LOSSY, Verdict

torch = pytest.importorskip("torch")

#: Created when the module is imported, before any call: verispec cannot feed or see its draws.
GENERATOR = np.random.default_rng(20_260_101)
TOY = ContextFreeProblem([1 / 3, 2 / 3], [2 / 3, 1 / 3])  # Sun et al.'s toy: p != q, so resampling from p is lossy
#: A TV this coarse is detectable with few runs (about 3,500 calls, one tree each).
COARSE = 0.1


def generator_at_import(draft_tokens, draft_probs, target_probs, uniforms):
    """Leviathan et al.'s rule, the handed uniforms ignored for draws from GENERATOR."""
    return rules.token_level(draft_tokens, draft_probs, target_probs, GENERATOR.random(uniforms.shape))


def generator_at_import_resampling(draft_tokens, draft_probs, target_probs, uniforms):
    """The same, drawing the correction from p instead of the residual (lossy where p != q)."""
    return rules.token_level_resample_from_target(draft_tokens, draft_probs, target_probs,
                                                  GENERATOR.random(uniforms.shape))


def from_urandom(draft_tokens, draft_probs, target_probs, uniforms):
    """Leviathan et al.'s rule on uniforms made from os.urandom (53 random bits each)."""
    raw = np.frombuffer(os.urandom(8 * uniforms.size), dtype=np.uint64).reshape(uniforms.shape)
    return rules.token_level(draft_tokens, draft_probs, target_probs, (raw >> np.uint64(11)) * 2.0 ** -53)


def one_draw_for_the_whole_call(draft_tokens, draft_probs, target_probs, uniforms):
    """One uniform per column shared by every row of the call: correct for a call on one tree, correlated across
    the rows of a batch (so only calls of one tree make independent runs)."""
    shared = np.broadcast_to(GENERATOR.random(uniforms.shape[1]), uniforms.shape)
    return rules.token_level(draft_tokens, draft_probs, target_probs, shared)


def torch_instead_of_uniforms(draft_tokens, draft_probs, target_probs, uniforms):
    """Handed uniforms, but draws its own from torch's global generator (numpy arrays in and out)."""
    return rules.token_level(draft_tokens, draft_probs, target_probs,
                             torch.rand(uniforms.shape, dtype=torch.float64).numpy())


def torch_instead_of_uniforms_resampling(draft_tokens, draft_probs, target_probs, uniforms):
    return rules.token_level_resample_from_target(draft_tokens, draft_probs, target_probs,
                                                  torch.rand(uniforms.shape, dtype=torch.float64).numpy())


@pytest.mark.parametrize("function", [generator_at_import, from_urandom])
def test_auto_mode_tests_unfed_randomness_as_a_black_box_with_its_power(function):
    report = check_external(function, "chain", "chain:1", problem=TOY, detect_tv=COARSE)
    assert report.verdict is Verdict.LOSSLESS and report.exit_status == EXIT_LOSSLESS and report.mode == "blackbox"
    assert report.blackbox.detectable_tv <= COARSE and not report.blackbox.rejected
    assert "exact mode is impossible" in report.note and "one call per run" in report.note


def test_a_lossy_function_on_unfed_randomness_is_caught_in_black_box_mode():
    report = check_external(generator_at_import_resampling, "chain", "chain:1", problem=TOY, mode="blackbox",
                            detect_tv=COARSE)
    assert report.verdict is Verdict.LOSSY and report.exit_status == EXIT_LOSSY and report.blackbox.rejected


def test_exact_mode_refuses_unfed_randomness_with_the_way_out():
    with pytest.raises(NondeterministicError, match="black-box mode tests it as it is"):
        check_external(generator_at_import, "chain", "chain:1", problem=TOY, mode="exact")


def test_an_unpowered_black_box_pass_is_inconclusive():
    report = check_external(generator_at_import, "chain", "chain:1", problem=TOY, mode="blackbox", samples=200)
    assert report.verdict is Verdict.INCONCLUSIVE and report.exit_status == EXIT_INCONCLUSIVE
    assert report.blackbox.detectable_tv > 0.01 and "--samples" in report.next_step


def test_unfed_runs_are_calls_on_one_tree_so_randomness_shared_across_a_batch_stays_valid(monkeypatch):
    """Shared across the rows of one call, the draws would correlate the runs of a batch (all rows accept together)
    and void the test's bounds; one tree a call, every run has its own draws and the rule is lossless. The calls are
    counted where verispec makes them, not inside the function (whose state kept across calls a check reports)."""
    from verispec.external.runner import Runner

    sizes: list[int] = []
    call = Runner._call
    monkeypatch.setattr(Runner, "_call",
                        lambda self, arguments: sizes.append(len(arguments[0])) or call(self, arguments))
    report = check_external(one_draw_for_the_whole_call, "chain", "chain:1", problem=TOY, detect_tv=COARSE)
    assert report.verdict is Verdict.LOSSLESS and report.mode == "blackbox"
    assert len(sizes) > 1000 and set(sizes[2:]) == {1}  # after the probe's two batched calls, one tree a call


def test_a_function_handed_uniforms_that_draws_from_torch_instead_is_checked_exactly():
    report = check_external(torch_instead_of_uniforms, "chain", "chain:1", problem=TOY)
    assert report.verdict is Verdict.LOSSLESS and report.mode == "exact" and report.tv_distance < 1e-12
    assert "its draws were captured" in report.note


def test_the_captured_law_of_the_resampling_variant_has_its_closed_form_tv():
    """chain:1: a draft x is accepted with probability min(1, p(x)/q(x)), else the token is drawn from p, and what
    follows the first token is drawn from p in both cases. So the block law is the first token's law
    r = min(p, q) + (1 - beta) p with beta = sum min(p, q), continued by p, and TV = 1/2 sum |min(p, q) - beta p|."""
    p, q = np.array([1 / 3, 2 / 3]), np.array([2 / 3, 1 / 3])
    overlap = np.minimum(p, q)
    expected = 0.5 * np.abs(overlap - overlap.sum() * p).sum()
    report = check_external(torch_instead_of_uniforms_resampling, "chain", "chain:1", problem=TOY)
    assert report.verdict is Verdict.LOSSY and report.mode == "exact"
    assert abs(report.tv_distance - expected) < 1e-12 and expected > 0.1


def test_black_box_mode_captures_a_global_generator_too():
    report = check_external(torch_instead_of_uniforms, "chain", "chain:1", problem=TOY, mode="blackbox",
                            detect_tv=COARSE)
    assert report.verdict is Verdict.LOSSLESS and report.mode == "blackbox" and "captured" in report.note


def test_command_line_exit_statuses_for_unfed_randomness(capsys):
    here = f"{__file__}"
    common = ["--layout", "chain", "--tree", "chain:1", "--target", "1/3,2/3", "--draft", "2/3,1/3",
              "--detect-tv", str(COARSE)]
    assert main(["check-external", f"{here}:generator_at_import_resampling", *common]) == EXIT_LOSSY
    assert "exact mode is impossible" in capsys.readouterr().out
    assert main(["check-external", f"{here}:generator_at_import", *common, "--mode", "exact"]) == 2
    assert "black-box mode tests it as it is" in capsys.readouterr().err


@pytest.mark.slow
def test_a_search_finds_the_witness_of_a_lossy_function_on_unfed_randomness():
    report = check_external(generator_at_import_resampling, "chain", "chain:1", max_vocab=2, time_budget=120,
                            detect_tv=0.05)
    assert report.verdict is Verdict.LOSSY and report.mode == "blackbox" and report.problem_source == "search"
