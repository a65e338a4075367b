"""The adapter for verification code written elsewhere: layouts, exact integration, the black-box test.

Expected values come from closed forms of the test rules (tests/support/external_rules.py), from the problem's own
conditionals, or from the built-in verifiers (a second algorithm for the same rule).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from tests.support import external_rules as rules
from verispec.errors import IncompatibleDraftError, InvalidTreeError, VerifierError, VerispecError
from verispec.external.adapter import ExternalVerifier, load_function
from verispec.external.blackbox import blackbox_test
from verispec.external.check import check_external
from verispec.external.exact import NotPiecewiseConstantError, integrate
from verispec.external.layouts import ExpandedTree, get_layout
from verispec.external.tree_arrays import TreeArrays, inverse_cdf
from verispec.simulator.engine import analyze, check_compatible
from verispec.simulator.generators import random_problem
from verispec.simulator.problems import ContextFreeProblem
from verispec.simulator.tree_specs import parse_tree
from verispec.simulator.trees import DraftTree, TreeBatch
from verispec.verdict import Verdict
from verispec.verifiers import get_verifier


def _node0_law(rule, length: int, size: int) -> np.ndarray:
    """The law of a test rule's first emitted token at the root, on a uniform problem's chain of ``length``."""
    uniform = [1 / size] * size
    tree = DraftTree.from_paths(ContextFreeProblem(uniform, uniform), [[0] * length])
    return ExternalVerifier(rule, "chain").emission_law(tree)[0]


# --------------------------------------------------------------------------------------------------
# Exact integration against closed forms


@pytest.mark.parametrize("a,b", [(0.3, 0.7), (1e-7, 0.5), (0.0, 1.0), (0.999999, 2**-40)])
def test_two_thresholds(a, b):
    law = _node0_law(rules.threshold_pair(a, b), 1, 4)
    expected = [(1 - a) * (1 - b), (1 - a) * b, a * (1 - b), a * b]
    assert np.allclose(law, expected, rtol=0, atol=1e-15)


def test_largest_passing_index_whose_relevant_uniforms_depend_on_the_others():
    h = np.array([0.3, 0.6, 0.25])
    law = _node0_law(rules.largest_passing(h), 2, 4)
    expected = [np.prod(1 - h)] + [h[i] * np.prod(1 - h[i + 1:]) for i in range(3)]
    assert np.allclose(law, expected, rtol=0, atol=1e-15)


def test_a_uniform_used_twice_threshold_then_categorical():
    draw = np.array([0.2, 0.0, 0.5, 0.3])
    law = _node0_law(rules.reused_uniform(0.35, draw), 0, 5)
    assert np.allclose(law, [0.35, *(0.65 * draw)], rtol=0, atol=1e-15)


def test_the_integrator_alone_on_an_inverse_cdf_per_row():
    laws = np.array([[0.1, 0.0, 0.6, 0.3], [0.0, 0.0, 0.0, 1.0], [0.25, 0.25, 0.25, 0.25]])

    def evaluate(rows, points):
        return inverse_cdf(laws[rows], points[:, 0])

    assert np.allclose(integrate(evaluate, 3, 1, 4), laws, rtol=0, atol=1e-15)


@pytest.mark.parametrize("count", [2, 7, 101, 256])
def test_an_integer_draws_breakpoints_are_the_first_floats_of_each_value(count):
    """integer_breaks(n)[k - 1] is the least float64 u with floor(u n) = k: checked at it and at the float below."""
    from verispec.external.rng.rules import integer_breaks, integers

    at = integer_breaks(count)
    assert len(at) == count - 1
    assert np.array_equal(integers(at, 0, count), np.arange(1, count))
    assert np.array_equal(integers(np.nextafter(at, 0.0), 0, count), np.arange(0, count - 1))
    assert integer_breaks(257) is None and integer_breaks(1) is None


def test_a_categorical_draws_breakpoints_are_the_first_floats_of_each_token():
    """categorical_breaks(w) lists, for each token after the first of positive mass, the least float64 u at which
    inverse_cdf(w, u) reaches it: checked at each point and the float below it, and on a dense grid (every change
    between neighbouring grid points has a listed point between them), on laws with zeros, float32 masses and a
    token of mass 1e-300 (a piece narrower than any scan)."""
    from verispec.external.tree_arrays import categorical_breaks

    rng = np.random.default_rng(5)
    for trial in range(300):
        law = rng.random(6) * (rng.random(6) < 0.7)
        law[rng.integers(6)] = [1e-300, 0.0, 0.4][trial % 3]
        if trial % 2:
            law = law.astype(np.float32).astype(np.float64)
        at = categorical_breaks(law)
        if law.sum() == 0:
            assert at is None
            continue
        tokens = lambda u, law=law: inverse_cdf(np.repeat(law[None], len(u), axis=0), np.asarray(u))  # noqa: E731
        assert np.all(tokens(at) > tokens(np.nextafter(at, 0.0)))
        grid = np.unique(np.concatenate([np.linspace(0.0, np.nextafter(1.0, 0.0), 2001), at, np.nextafter(at, 0.0)]))
        drawn = tokens(grid)
        for index in np.flatnonzero(drawn[1:] != drawn[:-1]):
            assert np.any((at > grid[index]) & (at <= grid[index + 1]))
        assert len(at) == len(set(drawn.tolist())) - 1  # one point per token reached


def test_all_of_a_uniforms_breakpoints_are_scanned_alone_and_the_law_is_exact():
    """An inverse-CDF draw told all its breakpoints (exact.AllBreaks) is integrated from them and the line's ends
    alone: the law is the weights, a token of mass 1e-12 included (its piece is found although no scan of 16
    points lands in it), in fewer evaluations than with the points merely added to the scan. Negative control:
    told nothing, the scan alone finds the same law only by bisecting each change."""
    from verispec.external.exact import AllBreaks
    from verispec.external.tree_arrays import categorical_breaks

    law = np.array([0.3, 1e-12, 0.5, 0.2 - 1e-12])

    def outcome(rows, points):
        return inverse_cdf(np.repeat(law[None], len(rows), axis=0), points[:, 0])

    def told(kind):
        def evaluate(rows, points):
            return outcome(rows, points), np.ones(points.shape, dtype=bool), [{0: kind(categorical_breaks(law))}
                                                                                for _ in rows]
        return evaluate

    (alone, calls_alone), (added, calls_added), (bare, calls_bare) = (
        _counted(told(AllBreaks)), _counted(told(np.asarray)), _counted(outcome))
    for evaluate in (alone, added, bare):
        assert np.abs(integrate(evaluate, 1, 1, 4) - law).max() < 1e-15
    assert sum(calls_alone) + 16 <= sum(calls_added) and sum(calls_added) + 3 * 30 < sum(calls_bare)


def test_a_captured_categorical_draw_tells_the_tape_all_its_breakpoints_unless_its_column_is_read_again():
    """torch.multinomial and an exponential race read as one draw each record their column's points as all of them
    (tape.complete: the token is all the code learns of that uniform); a keyed draw that reads a column again, or
    a read of its value past the draw, takes that away, before or after it; a uniform draw records nothing."""
    import torch

    from verispec.external.rng import Capture, Tape

    weights = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64)

    def calls():
        torch.rand(())
        torch.multinomial(weights, 1)
        torch.argmax(weights / torch.empty(3, dtype=torch.float64).exponential_())
        generator = torch.Generator()
        generator.manual_seed(7)
        torch.multinomial(weights, 1, generator=generator)
        generator.manual_seed(7)
        torch.rand(1, generator=generator)  # the same key's first uniform: column 5 read twice

    capture = Capture("f")
    capture.handed_seed = True
    with capture:
        tape = Tape(np.array([[0.1, 0.6, 0.9, 0.2, 0.2, 0.4, 0.7]]))
        capture.start(tape)
        calls()
        capture.start(None)
    assert sorted(tape.breaks) == [1, 2, 5] and tape.complete == {1, 2}
    for column in (1, 2):
        assert np.allclose(tape.breaks[column], [0.5, 0.8], rtol=0, atol=1e-15)
    assert sorted(tape.known()) == [1, 2, 5] and not isinstance(tape.known()[5], type(tape.known()[1]))
    tape.read_past(2)  # a Triton kernel loading the race's noise: its token is no longer all the call learned
    tape.know(2, tape.breaks[2], complete=True)
    assert tape.complete == {1}


def test_a_deeper_bisection_finds_the_same_breakpoints_in_fewer_calls():
    """Thresholds at float64 values between scan points (no float32 shortcut): three cuts a call (a batched
    function's) give the law of one cut a call, to the last bit, in fewer calls and more evaluations."""
    thresholds = np.array([0.1 + 1e-13, 0.2 + 3e-14, 0.7 - 1e-15])

    def outcome(rows, points):
        return (points[:, 0, None] >= thresholds).sum(axis=1)

    (one, calls_one), (three, calls_three) = _counted(outcome), _counted(outcome)
    law_one, law_three = integrate(one, 1, 1, 4), integrate(three, 1, 1, 4, bisect_depth=3)
    cells = np.diff(np.concatenate([[0.0], thresholds, [1.0]]))  # [t_k, t_k+1): each threshold its own first float
    assert np.array_equal(law_one[0], cells) and np.array_equal(law_three[0], cells)
    assert len(calls_three) * 2 < len(calls_one) and sum(calls_three) > sum(calls_one)


def _counted(evaluate):
    calls = []

    def counted(rows, points):
        calls.append(len(rows))
        return evaluate(rows, points)
    return counted, calls


def test_known_breakpoints_are_scanned_not_bisected_and_the_law_is_unchanged():
    """An integer draw over 7 values, read mod 3: the law is (3, 2, 2) / 7 by counting. Told its six breakpoints,
    the integration finds them among its scan points (no bisection: about 2 evaluations each, on one line), and
    gets the same law as without them; without them each takes a bisection of about 50 evaluations."""
    from verispec.external.rng.rules import integer_breaks, integers

    def outcome(rows, points):
        return integers(points[:, 0], 0, 7) % 3

    def told(rows, points):
        return outcome(rows, points), np.ones(points.shape, dtype=bool), [{0: integer_breaks(7)} for _ in rows]

    with_points, calls_told = _counted(told)
    without, calls_bisected = _counted(outcome)
    law_told, law_bisected = integrate(with_points, 1, 1, 3), integrate(without, 1, 1, 3)
    expected = np.array([[3, 2, 2]]) / 7
    assert np.abs(law_told - expected).max() < 1e-15 and np.abs(law_bisected - expected).max() < 1e-15
    # six breakpoints, each a bisection of at least 40 steps from a scan interval of width 1/16 to adjacent floats
    assert sum(calls_told) + 6 * 40 < sum(calls_bisected)


def test_a_float32_threshold_is_found_by_float32_probes_to_the_same_float():
    """accept iff u <= t with t a float32 ratio (as vLLM's kernels compare): the breakpoint is the float64 just
    above t, found to the last bit, in far fewer evaluations than float64 bisection's 50-odd."""
    t = float(np.float32(0.3) / np.float32(0.7))

    def accept(rows, points):
        return (points[:, 0] <= t).astype(np.int64)

    counted, calls = _counted(accept)
    law = integrate(counted, 1, 1, 2)
    above = np.nextafter(t, 1.0)
    assert law[0, 1] == above and law[0, 0] == 1 - above  # the cell boundary is exactly the first rejecting float
    # float64 bisection from a scan interval of width 1/16 near 0.43 to adjacent floats takes at least 48 steps:
    # with the anchor, 18 scan points, 36 re-readings of the breakpoint and 8 probes, at least 111 evaluations
    assert sum(calls) < 100


@pytest.mark.parametrize("rule,length,size,why", [
    (rules.summed_uniforms, 1, 2, "blackbox"),
    (rules.exponential_race, 2, 3, "blackbox"),
    (rules.parity_of_fine_grid, 0, 2, "blackbox"),
])
def test_exact_mode_refuses_rules_that_are_not_threshold_rules(rule, length, size, why):
    uniform = [1 / size] * size
    tree = DraftTree.from_paths(ContextFreeProblem(uniform, uniform), [[0] * length])
    with pytest.raises(NotPiecewiseConstantError, match=why):
        ExternalVerifier(rule, "chain", max_boxes=256).emission_law(tree)


# --------------------------------------------------------------------------------------------------
# Whole checks against a second algorithm


@pytest.mark.parametrize("tree", ["chain:1", "chain:3"])
def test_token_level_function_has_the_builtin_law_on_every_draft_tree(tree):
    problem = random_problem(4, 3, 5)
    external = ExternalVerifier(rules.token_level, "chain")
    builtin = get_verifier("naive")
    trees = [draft_tree for draft_tree, _ in parse_tree(tree).outcomes(problem)]
    for batch, _ in TreeBatch.of_trees(trees):
        assert np.abs(external.emission_laws(batch) - builtin.emission_laws(batch)).max() < 1e-12


def test_chain_verifier_at_v4_l4_is_exact():
    problem = random_problem(4, 4, 0)
    result = analyze(problem, "chain:4", ExternalVerifier(rules.token_level, "chain"))
    reference = analyze(problem, "chain:4", get_verifier("naive"))
    assert result.tv_distance < 1e-12
    assert abs(result.block_efficiency - reference.block_efficiency) < 1e-12
    lossy = analyze(problem, "chain:4", ExternalVerifier(rules.token_level_resample_from_target, "chain"))
    assert lossy.tv_distance > 1e-3


def test_torch_arrays_in_and_out():
    pytest.importorskip("torch")
    problem = random_problem(3, 2, 1)
    numpy_result = analyze(problem, "chain:2", ExternalVerifier(rules.token_level, "chain"))
    torch_result = analyze(problem, "chain:2", ExternalVerifier(rules.token_level_torch, "chain", arrays="torch"))
    assert abs(numpy_result.block_efficiency - torch_result.block_efficiency) < 1e-15


def test_external_verifiers_accept_every_draft_law_and_refuse_rational_problems():
    check_compatible(ExternalVerifier(rules.token_level, "chain"), parse_tree("argmax-chain:2"))
    exact_problem = ContextFreeProblem(["1/2", "1/2"], ["1/2", "1/2"], exact=True)
    with pytest.raises(VerispecError, match="float64"):
        analyze(exact_problem, "chain:1", ExternalVerifier(rules.token_level, "chain"))


def test_the_procedure_samples_the_integrated_law():
    problem = random_problem(3, 1, 2)
    tree = parse_tree("chain:1").sample(problem, np.random.default_rng(0))
    verifier = ExternalVerifier(rules.token_level, "chain")
    assert np.abs(verifier.enumerated_emission_law(tree) - verifier.emission_law(tree)).max() < 1e-12


# --------------------------------------------------------------------------------------------------
# Malformed outputs and bad input


@pytest.mark.parametrize("rule,message", [
    (rules.right_aligned, "left-aligned"),
    (rules.emits_undrafted, "not an accepted draft path"),
    (lambda *args: np.zeros((3, 3)), "int64"),
    (lambda *args: np.zeros((1, 1), dtype=np.int64), "shape"),
    (lambda *args: 1 / 0, "ZeroDivisionError"),
])
def test_malformed_outputs_are_one_line_errors(rule, message):
    problem = ContextFreeProblem([0.8, 0.2], [0.5, 0.5])
    with pytest.raises(VerifierError, match=message) as error:
        analyze(problem, "chain:2", ExternalVerifier(rule, "chain"))
    assert "\n" not in str(error.value)


def test_loading_functions(tmp_path):
    path = tmp_path / "rule.py"
    path.write_text("X = 3\ndef f(*a):\n    return None\n")
    assert load_function(f"{path}:f").__name__ == "f"
    for spec, message in [(f"{path}:g", "no attribute"), (f"{path}:X", "not a function"),
                          ("missing.py:f", "does not exist"), ("nocolon", "FILE.py:NAME")]:
        with pytest.raises(VerispecError, match=message):
            load_function(spec)
    with pytest.raises(VerispecError, match="unknown layout"):
        get_layout("flat")


# --------------------------------------------------------------------------------------------------
# Layouts


def _tree(problem, paths):
    return DraftTree.from_paths(problem, paths)


def test_chain_arguments_are_the_problems_conditionals():
    problem = random_problem(3, 2, 7)
    tree = _tree(problem, [[2, 0]])
    trees = TreeArrays(tree.as_batch())
    tokens, draft, target, uniforms = get_layout("chain").arguments(trees, np.array([0]), np.full((1, 3), 0.25))
    assert tokens.tolist() == [[2, 0]] and tokens.dtype == np.int64
    assert np.array_equal(draft[0], [problem.draft(()), problem.draft((2,))])
    assert np.array_equal(target[0], [problem.target(()), problem.target((2,)), problem.target((2, 0))])
    assert uniforms.dtype == np.float64 and uniforms.shape == (1, 3)


def test_padded_layout_pads_with_junk_that_a_length_blind_function_trips_over():
    problem = random_problem(3, 2, 7)
    trees = TreeArrays(_tree(problem, [[2, 0]]).as_batch())
    ids, lengths, draft, target, uniforms = get_layout("padded").arguments(trees, np.array([0]), np.zeros((1, 3)))
    assert ids.shape == (1, 3) and lengths.tolist() == [2] and draft.shape == (1, 3, 3) and target.shape == (1, 4, 3)
    assert uniforms.shape == (1, 4)

    def length_blind(ids, lengths, draft, target, uniforms):  # treats every column as a real candidate
        return rules.token_level(ids, draft, target, uniforms)

    with pytest.raises(VerifierError):
        analyze(problem, "chain:2", ExternalVerifier(length_blind, "padded"))


def test_ragged_layout_offsets_and_bonus():
    problem = random_problem(3, 2, 7)
    other = DraftTree.from_paths(problem, [[0, 0]])
    batch, _ = TreeBatch.of_trees([DraftTree.from_paths(problem, [[1, 2]]), other])[0]
    layout = get_layout("ragged")
    assert layout.num_uniforms(batch) == 2 + 2 * 3 + 1
    u = np.linspace(0.05, 0.95, 2 * 9).reshape(2, 9)
    tokens, cumulative, draft, target, bonus, accept, recovered = layout.arguments(TreeArrays(batch), np.arange(2), u)
    # requests: filler (0 drafts), tree 0 (2), filler (1 draft), tree 1 (2)
    assert cumulative.tolist() == [0, 2, 3, 5] and tokens[[0, 1, 3, 4]].tolist() == [1, 2, 0, 0]
    assert np.array_equal(target[1], problem.target((1,))) and np.array_equal(draft[4], problem.draft((0,)))
    assert accept[[0, 1, 3, 4]].tolist() == [u[0, 0], u[0, 1], u[1, 0], u[1, 1]] and recovered.shape == (5, 3)
    assert np.array_equal(recovered[1], u[0, 5:8])
    leaf = problem.target((1, 2))
    assert bonus[1] == int(np.searchsorted(np.cumsum(leaf), u[0, -1], side="right"))


def test_ragged_layout_exactly_and_with_an_offset_bug():
    problem = random_problem(3, 3, 2)
    good = analyze(problem, "chain:3", ExternalVerifier(rules.ragged_token_level, "ragged"))
    reference = analyze(problem, "chain:3", get_verifier("naive"))
    assert good.tv_distance < 1e-12 and abs(good.block_efficiency - reference.block_efficiency) < 1e-12
    # the filler requests make the batch ragged, so a function that assumes equal lengths goes wrong: it emits
    # tokens that are not an accepted draft path (a VerifierError), or a lossy law
    try:
        wrong = analyze(problem, "chain:3", ExternalVerifier(rules.ragged_assuming_equal_lengths, "ragged"))
    except VerifierError as error:
        assert "emitted" in str(error)
    else:
        assert wrong.tv_distance > 1e-3


def test_tree_expansion_splits_merged_duplicates_into_their_paths():
    problem = random_problem(3, 2, 7)
    # two i.i.d. root paths that agree on their first token: verispec merges node (0,)
    tree = _tree(problem, [[0, 1], [0, 2]])
    expanded = ExpandedTree.of(tree.as_batch())
    assert expanded.parent == (-1, 0, 0, 1, 2)
    merged_tokens = [tree.paths[node][-1] if node else -1 for node in expanded.merged]
    assert merged_tokens == [-1, 0, 0, 1, 2]
    trees = TreeArrays(tree.as_batch())
    parent_args = get_layout("tree-parent").arguments(trees, np.array([0]), np.zeros((1, 5)))
    sibling_args = get_layout("tree-sibling").arguments(trees, np.array([0]), np.zeros((1, 5)))
    assert parent_args[1].tolist() == [[0, 0, 1, 2]]
    first, following, mask = sibling_args[1][0], sibling_args[2][0], sibling_args[3][0]
    assert first.tolist() == [1, 3, 4, -1, -1] and following.tolist() == [-1, 2, -1, -1, -1]
    for node, parent in enumerate(expanded.parent):  # the mask is the ancestor-or-self relation
        ancestors = {node}
        while parent >= 0:
            ancestors.add(parent)
            parent = expanded.parent[parent]
        assert set(np.flatnonzero(mask[node])) == ancestors
    # node 2 was drawn at the root, node 3 at (0,); node 4 is the prefix (0, 2)
    assert np.array_equal(parent_args[2][0, 1], problem.draft(())) and np.array_equal(parent_args[2][0, 2],
                                                                                         problem.draft((0,)))
    assert np.array_equal(parent_args[3][0, 4], problem.target((0, 2)))


def test_chain_layouts_refuse_trees():
    problem = random_problem(3, 2, 7)
    with pytest.raises(InvalidTreeError, match="tree-parent"):
        analyze(problem, "iid:2,1", ExternalVerifier(rules.token_level, "chain"))


# --------------------------------------------------------------------------------------------------
# Drafts not drawn from the q handed over (trap 8)


def test_argmax_and_topk_chains_draw_as_stated():
    p, q = [0.2, 0.5, 0.3], [0.3, 0.25, 0.45]
    problem = ContextFreeProblem(p, q)
    (only, probability), = parse_tree("argmax-chain:2").outcomes(problem)
    assert only.paths[-1] == (2, 2) and probability == 1 and np.array_equal(only.q[0], q)
    laws = {tree.paths[-1]: probability for tree, probability in parse_tree("topk-chain:2,2").outcomes(problem)}
    kept = {0: 0.3 / 0.75, 2: 0.45 / 0.75}
    assert set(laws) == {(a, b) for a in kept for b in kept}
    for (a, b), probability in laws.items():
        assert probability == pytest.approx(kept[a] * kept[b], abs=1e-15)
    for spec in ("argmax-chain:2", "topk-chain:2,2"):
        with pytest.raises(IncompatibleDraftError):
            check_compatible(get_verifier("naive"), parse_tree(spec))


# --------------------------------------------------------------------------------------------------
# The black-box test


def test_blackbox_passes_a_correct_rule_and_catches_a_lossy_one():
    problem = random_problem(3, 2, 3)
    good = blackbox_test(problem, parse_tree("chain:2"), ExternalVerifier(rules.token_level, "chain"))
    bad = blackbox_test(problem, parse_tree("chain:2"),
                        ExternalVerifier(rules.token_level_resample_from_target, "chain"))
    # good fails with probability <= 1e-6 (the test's guarantee); bad is the negative control
    assert not good.rejected and good.stratified and good.tv_estimate < 0.02
    assert bad.rejected and bad.tv_estimate > 0.02
    exact = analyze(problem, "chain:2", get_verifier("naive"))
    assert abs(good.block_efficiency_estimate - exact.block_efficiency) < 0.02


def test_blackbox_without_stratification():
    problem = random_problem(3, 2, 3)
    good = blackbox_test(problem, parse_tree("chain:2"), ExternalVerifier(rules.token_level, "chain"),
                         samples=50_000, max_strata=1)
    bad = blackbox_test(problem, parse_tree("chain:2"),
                        ExternalVerifier(rules.token_level_resample_from_target, "chain"), samples=50_000, max_strata=1)
    assert not good.stratified and not good.rejected and bad.rejected


def test_blackbox_false_failure_rate_is_at_most_alpha():
    """At alpha = 0.2 a correct rule may be called lossy in at most 20% of independent tests. Over 30 seeds the
    count is then stochastically below Binomial(30, 0.2); the bound used fails a correct test with probability
    below 1e-6."""
    problem = random_problem(3, 1, 4)
    verifier = ExternalVerifier(rules.token_level, "chain")
    runs = 30
    limit = int(stats.binom.isf(1e-6, runs, 0.2))
    rejections = sum(blackbox_test(problem, parse_tree("chain:1"), verifier, samples=5_000, alpha=0.2,
                                   seed=seed).rejected for seed in range(runs))
    assert rejections <= limit


def test_blackbox_rejects_an_impossible_sequence_outright():
    problem = ContextFreeProblem([0.0, 0.5, 0.5], [0.5, 0.25, 0.25])

    def accepts_all(draft_tokens, draft_probs, target_probs, uniforms):
        out = np.concatenate([draft_tokens, rules.inverse_cdf(target_probs[:, -1], uniforms[:, -1])[:, None]], 1)
        return out.astype(np.int64)

    result = blackbox_test(problem, parse_tree("chain:1"), ExternalVerifier(accepts_all, "chain"), samples=1000)
    assert result.rejected and result.adjusted_p == 0 and result.worst_target == 0


@pytest.mark.parametrize("samples,alpha", [(0, 1e-6), (10, 0.0), (10, 1.5)])
def test_blackbox_bad_options(samples, alpha):
    with pytest.raises(VerispecError):
        blackbox_test(random_problem(2, 1, 0), parse_tree("chain:1"), ExternalVerifier(rules.token_level, "chain"),
                      samples=samples, alpha=alpha)


# --------------------------------------------------------------------------------------------------
# Whole checks


def test_check_finds_a_witness_and_passes_the_correct_rule():
    lossy = check_external(rules.token_level_resample_from_target, "chain", "chain:2", time_budget=30)
    assert not lossy.lossless and lossy.mode == "exact" and lossy.problem_source == "search"
    assert lossy.tv_distance > 1e-3 and lossy.problem["vocab_size"] == 2
    # a search that finds nothing proves nothing: inconclusive, saying what it tried
    searched = check_external(rules.token_level, "chain", "chain:2", max_examples=30)
    assert searched.verdict is Verdict.INCONCLUSIVE and searched.lossless is None and searched.exit_status == 3
    assert searched.problem_source == "none" and "proves nothing" in searched.next_step
    assert searched.canonical_checked == searched.canonical_total > 0
    assert searched.problems_tried == searched.canonical_total + 30
    # the verdict on the canonical suite, every problem of it checked exactly
    suite = check_external(rules.token_level, "chain", "chain:2", max_examples=30, suite="canonical")
    assert suite.verdict is Verdict.LOSSLESS and suite.exit_status == 0 and "canonical suite" in suite.scope


def test_auto_mode_falls_back_to_blackbox_and_says_why():
    problem = ContextFreeProblem([0.2, 0.3, 0.5], [0.2, 0.3, 0.5])
    report = check_external(rules.exponential_race, "chain", "chain:2", problem=problem, detect_tv=0.05)
    assert report.mode == "blackbox" and "exact mode refused" in report.note and report.blackbox is not None
    # the race is a correct draw from p at the root, then the block stops: lossless, with the power stated
    assert report.verdict is Verdict.LOSSLESS and report.tv_distance is None and report.tv_estimate is not None
    assert report.blackbox.detectable_tv <= 0.05 and "would have been detected" in report.power()["statement"]
    # too few runs for that power: inconclusive, with the runs that would do
    weak = check_external(rules.exponential_race, "chain", "chain:2", problem=problem, samples=2_000)
    assert weak.verdict is Verdict.INCONCLUSIVE and "--samples" in weak.next_step
    with pytest.raises(NotPiecewiseConstantError):
        check_external(rules.exponential_race, "chain", "chain:2", problem=problem, mode="exact")


def test_blackbox_search_confirms_its_witness():
    report = check_external(rules.token_level_resample_from_target, "chain", "chain:1", mode="blackbox",
                            time_budget=30, samples=50_000)
    assert report.verdict is Verdict.LOSSY and report.blackbox.rejected and "confirmed" in report.note
    assert report.tv_distance is None and math.isfinite(report.tv_estimate)  # an estimate, named as one


def test_a_search_that_meets_a_non_threshold_candidate_continues_as_a_black_box():
    # the pilot problem (V = 3) is of threshold form; the search's V = 2 candidates are not
    report = check_external(rules.race_when_binary, "chain", "chain:1", max_examples=20, detect_tv=0.1,
                            context_free=True, suite="canonical")
    assert report.verdict is Verdict.LOSSLESS and report.mode == "blackbox"
    assert "refused on a candidate" in report.note and "powered test" in report.scope
    with pytest.raises(NotPiecewiseConstantError, match="hunt stopped"):
        check_external(rules.race_when_binary, "chain", "chain:1", mode="exact", max_examples=20, context_free=True)


def test_the_plain_binomial_test_agrees_with_the_bernstein_test():
    """The sampled multinomial test (no stratification, continuation sampled) as a cross-check: the correct rule
    passes (false-failure rate <= 1e-6) and the lossy one is caught."""
    problem = random_problem(3, 2, 3)
    drafter = parse_tree("chain:2")
    good = blackbox_test(problem, drafter, ExternalVerifier(rules.token_level, "chain"), test="binomial")
    bad = blackbox_test(problem, drafter, ExternalVerifier(rules.token_level_resample_from_target, "chain"),
                        test="binomial")
    assert good.test == "binomial" and not good.rejected and good.tv_estimate < 0.02
    assert bad.rejected and "binomial" in bad.describe()
    exact = analyze(problem, drafter, get_verifier("naive"))
    assert abs(good.block_efficiency_estimate - exact.block_efficiency) < 0.02
    with pytest.raises(VerispecError, match="unknown black-box test"):
        blackbox_test(problem, drafter, ExternalVerifier(rules.token_level, "chain"), test="chi2")


def test_blackbox_refuses_to_tabulate_too_many_sequences():
    problem = ContextFreeProblem([0.1] * 10, [0.1] * 10)
    with pytest.raises(VerispecError, match="V\\^\\(L\\+1\\)"):
        blackbox_test(problem, parse_tree("chain:7"), ExternalVerifier(rules.token_level, "chain"))


def test_real_decoding_batches_are_refused_clearly():
    pytest.importorskip("torch")
    problem = random_problem(3, 1, 0)
    tree = parse_tree("chain:1").sample(problem, np.random.default_rng(0))
    with pytest.raises(VerispecError, match="small vocabularies"):
        ExternalVerifier(rules.token_level, "chain").emission_laws(tree.as_batch().to_torch())
