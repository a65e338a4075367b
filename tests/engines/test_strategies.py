"""The public Hypothesis strategies (``verispec/strategies.py``).

Each property is read from the drawn object's own fields, not through the strategies' code: rows are summed with
``math.fsum`` (exactly, for Fraction laws), zeros and ties are counted on the floats themselves, tree strings are
parsed by ``parse_tree`` and settings by ``Sampling.parse``. The lossless verifier's law is compared with the target's
block law computed here from the problem's conditionals; the broken verifier's TV with the closed form of its first
token's law (derived in the test's docstring)."""

from __future__ import annotations

import itertools
import math
import re
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import HealthCheck, find, given, settings
from hypothesis import strategies as st

from verispec import strategies as vs
from verispec.errors import VerispecError
from verispec.simulator import ContextFreeProblem, MarkovProblem, TabularProblem, parse_tree

ROW_TOLERANCE = 1e-12
#: ``find``'s settings: no example database, so a result never depends on earlier runs.
FIND = settings(database=None, max_examples=500, suppress_health_check=[HealthCheck.too_slow])


def _rows(problem) -> list[tuple[str, list]]:
    """(which law, row) for every row the problem holds, read from its fields."""
    if isinstance(problem, ContextFreeProblem):
        return [("target", list(problem.p)), ("draft", list(problem.q))]
    if isinstance(problem, MarkovProblem):
        return ([("target", list(problem.target_initial)), ("draft", list(problem.draft_initial))]
                + [("target", list(row)) for row in problem.target_transition]
                + [("draft", list(row)) for row in problem.draft_transition])
    assert isinstance(problem, TabularProblem), type(problem)
    return ([("target", list(row)) for row in problem.target_table.values()]
            + [("draft", list(row)) for row in problem.draft_table.values()])


def _has_zero(row) -> bool:
    return any(x == 0 for x in row)


def _has_tie(row) -> bool:
    positive = [x for x in row if x > 0]
    return len(set(positive)) < len(positive)


@given(problem=vs.problems(vocab_size=(2, 5), depth=2))
def test_every_drawn_problem_is_valid(problem):
    for which, row in _rows(problem):
        assert len(row) == problem.vocab_size, which
        assert all(float(x) >= 0 for x in row), (which, row)
        assert abs(math.fsum(float(x) for x in row) - 1.0) <= ROW_TOLERANCE, (which, row)
    if isinstance(problem, TabularProblem):  # every prefix up to the depth asked for, draft one level less
        assert set(problem.target_table) == {prefix for length in range(3)
                                             for prefix in itertools.product(range(problem.vocab_size), repeat=length)}
        assert set(problem.draft_table) == {prefix for prefix in problem.target_table if len(prefix) < 2}


@given(problem=vs.problems(vocab_size=(2, 4), exact=True, depth=1))
def test_exact_laws_sum_to_one_exactly(problem):
    for which, row in _rows(problem):
        assert all(isinstance(x, Fraction) for x in row) and sum(row) == 1, (which, row)


@given(data=st.data(), zeros=st.sampled_from([True, False, None]), ties=st.sampled_from([True, False, None]))
def test_zeros_and_ties_are_present_when_asked_and_absent_when_refused(data, zeros, ties):
    problem = data.draw(vs.problems(vocab_size=(3, 5), depth=1, zeros=zeros, ties=ties))
    for which, row in _rows(problem):
        if zeros is not None:
            assert _has_zero(row) is zeros, (which, row)
        if ties is not None:
            assert _has_tie(row) is ties, (which, row)
        assert any(x > 0 for x in row)


@given(problem=vs.problems(vocab_size=(3, 4), depth=1, zeros=False, ties=False, draft_zeros=True, draft_ties=True))
def test_draft_rows_take_their_own_settings(problem):
    for which, row in _rows(problem):
        expected = which == "draft"
        assert _has_zero(row) is expected and _has_tie(row) is expected, (which, row)


def test_all_equal_rows_are_drawn():
    """A tie includes the all-equal row: uniform over V, and uniform over the support beside zeros."""
    row = find(vs.laws(4, ties=True), lambda law: len(set(law.tolist())) == 1, settings=FIND)
    assert row.tolist() == [0.25] * 4
    row = find(vs.laws(5, zeros=True, ties=True),
               lambda law: sum(x == 0 for x in law) == 2 and len({x for x in law if x > 0}) == 1, settings=FIND)
    assert sorted(row.tolist()) == [0.0, 0.0, 1 / 3, 1 / 3, 1 / 3]


def test_problems_shrink_toward_small_vocabularies():
    assert find(vs.problems(vocab_size=(2, 6)), lambda problem: True, settings=FIND).vocab_size == 2
    assert find(vs.problems(vocab_size=(2, 6)), lambda problem: problem.vocab_size >= 4,
                settings=FIND).vocab_size == 4
    smallest = find(vs.problems(vocab_size=(2, 6), kinds=("markov", "tabular"), depth=1),
                    lambda problem: isinstance(problem, TabularProblem), settings=FIND)
    assert smallest.vocab_size == 2 and smallest.horizon == 1


@given(spec=vs.tree_specs(vs.TREE_KIND_NAMES, max_depth=3, max_paths=3))
def test_every_tree_spec_parses_and_keeps_its_depth(spec):
    drafter = parse_tree(spec)
    assert spec.partition(":")[0] in vs.TREE_KIND_NAMES
    assert 1 <= drafter.depth <= 3, spec


def test_trees_shrink_to_the_smallest():
    assert find(vs.tree_specs(), lambda spec: True, settings=FIND) == "chain:1"
    assert find(vs.tree_specs(), lambda spec: parse_tree(spec).depth >= 2, settings=FIND) == "chain:2"
    assert find(vs.iid_trees(), lambda spec: True, settings=FIND) == "iid:1,1"


@given(chain=vs.chain_trees(max_depth=4), iid=vs.iid_trees(max_paths=3, max_depth=2))
def test_chain_and_iid_trees(chain, iid):
    assert re.fullmatch(r"chain:[1-4]", chain)
    assert re.fullmatch(r"iid:[1-3],[1-2]", iid)
    assert parse_tree(chain).depth == int(chain[6:])
    assert parse_tree(iid).depth == int(iid.split(",")[1])


@given(setting=vs.sampling_settings(temperature=(0.5, 2.0), top_k=3))
def test_sampling_settings_read_back_as_the_step_layouts_take_them(setting):
    from verispec.models.sampling import Sampling

    parsed = Sampling.parse(setting.spec)
    assert (parsed.temperature, parsed.top_k, parsed.top_p, parsed.min_p) == (
        setting.temperature, setting.top_k, setting.top_p, setting.min_p)
    assert 0.5 <= setting.temperature <= 2.0 and setting.top_k in (None, 1, 2, 3)
    temperature, top_k, top_p, min_p = setting.step_arguments  # off: top_k 0, top_p 1.0, min_p 0.0
    assert temperature == setting.temperature
    assert top_k == (0 if setting.top_k is None else setting.top_k)
    assert top_p == (1.0 if setting.top_p is None else setting.top_p) and 0 < top_p <= 1
    assert min_p == (0.0 if setting.min_p is None else setting.min_p) and 0 <= min_p <= 1


def test_sampling_settings_shrink_to_plain_sampling():
    assert find(vs.sampling_settings(), lambda setting: True, settings=FIND) == vs.SamplingSetting(1.0)
    assert vs.SamplingSetting(1.0).spec == "temperature=1.0"
    assert vs.SamplingSetting(1.0).step_arguments == (1.0, 0, 1.0, 0.0)


@given(setting=vs.penalty_settings(repetition=(0.5, 2.0), additive=(-1.0, 1.0)))
def test_penalty_settings_read_back_in_range(setting):
    from verispec.models.penalties import Penalties

    assert Penalties.parse(setting.spec()) == setting
    assert 0.5 <= setting.repetition <= 2.0 and -1 <= setting.frequency <= 1 and -1 <= setting.presence <= 1


def test_penalty_settings_shrink_to_no_penalty_and_an_active_one_is_found():
    from verispec.models.penalties import Penalties

    assert find(vs.penalty_settings(), lambda setting: True, settings=FIND) == Penalties()
    found = find(vs.penalty_settings(), lambda setting: setting.active, settings=FIND)
    assert found.active and sum(value != off for value, off in zip(found.as_dict().values(), (1.0, 0.0, 0.0))) == 1


@pytest.mark.parametrize("make, message", [
    (lambda: vs.penalty_settings(repetition=(0.0, 2.0)), r"repetition must be a finite range .* low > 0"),
    (lambda: vs.penalty_settings(additive=(1.0, -1.0)), r"additive must be a finite range .* got \(1.0, -1.0\)"),
    (lambda: vs.laws(1, zeros=True), r"zeros=True needs vocab_size >= 2 .* got 1"),
    (lambda: vs.laws(2, zeros=True, ties=True), r"ties=True with zeros=True needs vocab_size >= 3 .* got 2"),
    (lambda: vs.laws(3, ties="yes"), r"ties must be True, False or None \(either\), got 'yes'"),
    (lambda: vs.problems(vocab_size=(5, 2)), r"vocab_size must be an integer >= 1 or a pair .* got \(5, 2\)"),
    (lambda: vs.problems(kinds=("markov", "oak")), r"unknown problem kinds \['oak'\]: choose from context-free"),
    (lambda: vs.problems(vocab_size=6, depth=3), r"a tabular problem at V = 6, depth 3 holds more than 200"),
    (lambda: vs.tree_specs(("chain", "oak")), r"unknown tree kinds \['oak'\]: choose from chain, iid"),
    (lambda: vs.sampling_settings(temperature=(0, 1)), r"temperature must be a range .* got \(0, 1\)"),
    (lambda: vs.sampling_settings(top_k=0), r"top_k must be a positive integer .* got 0"),
])
def test_bad_arguments_are_refused_in_one_line(make, message):
    with pytest.raises(VerispecError, match=message) as caught:
        make()
    assert "\n" not in str(caught.value)


# -- the strategies driving checks of verifiers


def _target_block_law(problem, length: int) -> np.ndarray:
    """The target's law of ``length`` tokens [V]*length, each the product of its conditionals."""
    size = problem.vocab_size
    law = np.zeros((size,) * length)
    for sequence in itertools.product(range(size), repeat=length):
        law[sequence] = math.prod(float(problem.target(sequence[:j])[sequence[j]]) for j in range(length))
    return law


def _continued(problem, output_law, length: int) -> np.ndarray:
    """The emitted block's law continued with the target to ``length`` tokens [V]*length."""
    size = problem.vocab_size
    law = np.zeros((size,) * length)
    for sequence in itertools.product(range(size), repeat=length):
        law[sequence] = sum(
            float(output_law.by_length[emitted - 1][sequence[:emitted]])
            * math.prod(float(problem.target(sequence[:j])[sequence[j]]) for j in range(emitted, length))
            for emitted in range(1, length + 1))
    return law


@settings(max_examples=30, deadline=None)
@given(problem=vs.problems(vocab_size=(2, 3), depth=2, ties=True),
       tree=vs.tree_specs(("chain", "iid"), max_depth=2, max_paths=2))
def test_a_registry_verifier_keeps_the_target_law_on_drawn_problems(problem, tree):
    """SpecInfer (verispec's registry) on problems with ties (and zeros where drawn): its exact block law, continued
    with the target, is the target's law of L + 1 tokens to 1e-12."""
    from verispec import analyze

    depth = parse_tree(tree).depth
    result = analyze(problem, tree, "specinfer")
    difference = np.abs(_continued(problem, result.output_law, depth + 1) - _target_block_law(problem, depth + 1))
    assert difference.max() <= ROW_TOLERANCE, (tree, difference.max())


def test_a_broken_verifier_is_caught_on_a_drawn_problem():
    """The correction drawn from p instead of norm((p - q)+) (tests/support/broken.py), on ``chain:1``: the first
    token is the draft x ~ q kept with probability min(1, p(x)/q(x)), else a draw from p, so its law is
    min(p, q) + (1 - sum min(p, q)) p; the next token follows the target either way, so the block's TV from the
    target is TV(that law, p). ``find`` draws problems with ties until one is lossy; the engine's TV there must
    equal the closed form."""
    from tests.support.broken import BROKEN_CHAIN_VERIFIERS
    from verispec import analyze

    broken = BROKEN_CHAIN_VERIFIERS["naive-correction-from-target"]

    def closed_form(problem) -> float:
        p = np.asarray(problem.target(()), dtype=np.float64)
        q = np.asarray(problem.draft(()), dtype=np.float64)
        overlap = np.minimum(p, q)
        return 0.5 * float(np.abs(overlap + (1 - overlap.sum()) * p - p).sum())

    witness = find(vs.problems(vocab_size=(2, 4), ties=True),
                   lambda problem: analyze(problem, "chain:1", broken).tv_distance > 1e-9, settings=FIND)
    expected = closed_form(witness)
    assert expected > 1e-9
    assert abs(analyze(witness, "chain:1", broken).tv_distance - expected) <= ROW_TOLERANCE
