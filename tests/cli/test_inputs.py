"""Bad input at the public edge: problem files, tree specifications and the wording of every message."""

from __future__ import annotations

import json
from fractions import Fraction

import numpy as np
import pytest

from verispec.errors import InvalidDistributionError, InvalidProblemError, UnknownTreeError, VerispecError
from verispec.simulator import (
    ContextFreeProblem,
    DelayedDrafter,
    load_problem,
    parse_tree,
    problem_from_json,
    problem_to_json,
    random_problem,
)
from verispec.simulator.chooser import RandomChooser
from verispec.simulator.distributions import as_distribution, parse_distribution
from verispec.simulator.generators import random_markov_problem


def _depth_one(**extra) -> dict:
    return {"vocab_size": 2, "target": {"": ["1/3", "2/3"], "0": [0.5, 0.5], "1": [1, 0]},
            "draft": {"": [0.5, 0.5]}, **extra}


# -------------------------------------------------------------------------------------------------
# Problem files: duplicate and conflicting keys, unknown keys, float files read in exact mode


def test_problem_file_with_a_literally_repeated_key_is_refused(tmp_path):
    path = tmp_path / "p.json"
    # the same key twice in "target": json.loads would silently keep the last one
    path.write_text('{"vocab_size": 2, "target": {"": [0.5, 0.5], "0": [1, 0], "0": [0, 1], "1": [1, 0]}, '
                    '"draft": {"": [0.5, 0.5]}}')
    with pytest.raises(InvalidProblemError, match="key '0' appears twice"):
        load_problem(path)
    path.write_text('{"vocab_size": 2, "vocab_size": 3, "target": {"": [0.5, 0.5]}, "draft": {"": [0.5, 0.5]}}')
    with pytest.raises(InvalidProblemError, match="key 'vocab_size' appears twice"):
        load_problem(path)


@pytest.mark.parametrize("first,second,prefix", [("0", " 0", "0"), ("", " ", ""), ("0,1", "0, 1", "0,1"),
                                                 ("1", "01", "1")])
def test_prefix_keys_naming_the_same_prefix_are_refused(first, second, prefix):
    data = {"vocab_size": 2,
            "target": {"": [0.5, 0.5], "0": [0.5, 0.5], "1": [0.5, 0.5], "0,0": [1, 0], "0,1": [1, 0], "1,0": [1, 0],
                       "1,1": [1, 0]},
            "draft": {"": [0.5, 0.5], "0": [0.5, 0.5], "1": [0.5, 0.5]}}
    data["target"][second] = [0, 1]
    assert first in data["target"] and len(data["target"]) == 8
    with pytest.raises(InvalidProblemError) as caught:
        problem_from_json(data)
    message = str(caught.value)
    assert repr(first) in message and repr(second) in message and f"prefix '{prefix}'" in message


def test_unknown_top_level_key_is_refused_and_notes_are_allowed():
    with pytest.raises(InvalidProblemError) as caught:
        problem_from_json(_depth_one(targett={"": [1, 0]}))
    message = str(caught.value)
    assert "'targett'" in message and all(key in message for key in ("vocab_size", "target", "draft"))
    problem = problem_from_json(_depth_one(comment="Sun's toy at the root", description="depth 1"))
    assert problem.horizon == 1
    with pytest.raises(InvalidProblemError, match="'comment' must be a string"):
        problem_from_json(_depth_one(comment=3))


def test_float_problem_file_reads_back_in_exact_mode(tmp_path):
    floats = random_problem(3, 2, 0)
    path = tmp_path / "p.json"
    path.write_text(json.dumps(problem_to_json(floats, 2)))
    for exact_problem in (load_problem(path, exact=True), problem_from_json(problem_to_json(floats, 2), exact=True)):
        assert exact_problem.exact and exact_problem.horizon == 2
        for length, table in ((2, "target"), (1, "draft")):
            for prefix in [p for n in range(length + 1) for p in floats.prefixes(n)]:
                vector = getattr(exact_problem, table)(prefix)
                reference = getattr(floats, table)(prefix)
                assert all(isinstance(v, Fraction) for v in vector)
                assert sum(vector, Fraction(0)) == 1
                assert np.max(np.abs(np.array([float(v) for v in vector]) - reference)) < 1e-12


def test_exact_mode_reads_decimals_as_written():
    # 0.1 + 0.2 + 0.7 is exactly 1 as decimals (not as binary floats): read as 1/10, 1/5, 7/10
    data = {"vocab_size": 3, "target": {"": [0.1, 0.2, 0.7]}, "draft": {"": [0.7, 0.2, 0.1]}}
    problem = problem_from_json(data, exact=True)
    assert list(problem.target(())) == [Fraction(1, 10), Fraction(1, 5), Fraction(7, 10)]
    # decimals within 1e-8 of summing to one are rescaled exactly: 0.333333333 / 0.999999999 = 1/3
    data["target"][""] = [0.333333333, 0.666666666, 0]
    assert list(problem_from_json(data, exact=True).target(())) == [Fraction(1, 3), Fraction(2, 3), 0]


@pytest.mark.parametrize("values", [["1/3", "1/3", "1/4"], [1, 1, 0], [0.3333, 0.6666, 0]])
def test_exact_mode_still_refuses_sums_that_are_not_one(values):
    # integers and fraction strings must sum to exactly 1; decimals off by more than 1e-8 are not rounding
    data = {"vocab_size": 3, "target": {"": values}, "draft": {"": [0.5, 0.5, 0]}}
    with pytest.raises(InvalidDistributionError, match="sum to"):
        problem_from_json(data, exact=True)


@pytest.mark.parametrize("exact", [False, True])
@pytest.mark.parametrize("entry,message", [("1e-99999", "exponent"), ("1e400", "finite|sum to"),
                                           ("NaN", "finite"), ("true", "cannot read")])
def test_problem_file_numbers_out_of_range_are_refused(tmp_path, exact, entry, message):
    path = tmp_path / "p.json"
    path.write_text('{"vocab_size": 2, "target": {"": [' + entry + ', 1]}, "draft": {"": [0.5, 0.5]}}')
    with pytest.raises(InvalidDistributionError, match=message) as caught:
        load_problem(path, exact=exact)
    assert len(str(caught.value)) < 300


def test_command_line_reads_a_float_problem_file_exactly(tmp_path, capsys):
    from verispec.cli import main

    path = tmp_path / "p.json"
    path.write_text(json.dumps(problem_to_json(random_problem(3, 2, 0), 2)))
    code = main(["exact", "--problem", str(path), "--tree", "chain:2", "--verifier", "bv", "--exact", "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert json.loads(out)["exact_values"]["tv_distance"] == "0"


# -------------------------------------------------------------------------------------------------
# Tree specifications: each kind names itself; without-replacement siblings fit the vocabulary; sizes


@pytest.mark.parametrize("spec,kind,name", [
    ("chain:-1", "chain", "L"), ("iid:0,2", "iid", "K"), ("iid:1,-1", "iid", "L"), ("delayed:0,1,1", "delayed", "K"),
    ("delayed:1,-1,1", "delayed", "L1"), ("delayed:1,1,-1", "delayed", "L2"), ("branch:2,0", "branch", "b"),
    ("branch-iid:0", "branch-iid", "b"), ("hub-tree:-1", "hub-tree", "L"), ("greedy:0", "greedy", "K"),
    ("greedy-tree:0,2", "greedy-tree", "K"), ("greedy-tree:2,-1", "greedy-tree", "L"), ("dyspec:-1", "dyspec", "N")])
def test_tree_errors_name_their_own_kind(spec, kind, name):
    with pytest.raises(UnknownTreeError) as caught:
        parse_tree(spec)
    assert str(caught.value).startswith(f"{kind}: {name} must be at least"), caught.value


def test_drafters_built_directly_name_the_spec_they_stand_for():
    with pytest.raises(UnknownTreeError, match="^iid: K"):
        DelayedDrafter(0, 0, 2)
    with pytest.raises(UnknownTreeError, match="^delayed: K"):
        DelayedDrafter(0, 1, 2)


def test_more_siblings_without_replacement_than_tokens_is_refused():
    problem = ContextFreeProblem([0.5, 0.5], [0.5, 0.5])
    drafter = parse_tree("branch:3")
    expected = "branch:3 draws 3 siblings without replacement but the vocabulary has only 2 tokens"
    for call in (lambda: drafter.outcomes(problem), lambda: drafter.check_problem(problem),
                 lambda: drafter.sample(problem, np.random.default_rng(0))):
        with pytest.raises(UnknownTreeError, match=expected):
            call()
    # at most V siblings, or with replacement, is fine: two tokens, two siblings cover the vocabulary
    assert sum(p for _, p in parse_tree("branch:2").outcomes(problem)) == pytest.approx(1)
    assert sum(p for _, p in parse_tree("branch-iid:3").outcomes(problem)) == pytest.approx(1)


@pytest.mark.parametrize("spec", ["chain:99999999999999999999999", "chain:" + "9" * 5000, "iid:2,10000001",
                                  "delayed:1,1000000,1000000", "branch:" + ",".join(["1"] * 1_000_001),
                                  "dyspec:123456789012345678901234567890", "greedy-tree:2,-99999999999999999999"])
def test_absurd_tree_sizes_give_one_short_line(spec, capsys):
    from verispec.cli import main

    with pytest.raises(UnknownTreeError) as caught:
        parse_tree(spec)
    assert len(str(caught.value)) < 200 and "\n" not in str(caught.value)
    code = main(["exact", "--target", "0.5,0.5", "--draft", "0.5,0.5", "--tree", spec, "--verifier", "specinfer"])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err


# -------------------------------------------------------------------------------------------------
# Messages print plain Python numbers, never numpy reprs


def _bad_inputs():
    rng = np.random.default_rng(0)
    return [
        ("negative", lambda: as_distribution(np.array([1.5, -0.5]))),
        ("negative", lambda: as_distribution([np.float64(1.5), np.float64(-0.5)], exact=True)),
        ("NaN", lambda: as_distribution(np.array([np.nan, 1.0]))),
        ("finite", lambda: as_distribution([np.float64("nan"), np.float64(1.0)], exact=True)),
        ("sum to", lambda: as_distribution(np.array([0.5, 0.6]))),
        ("sum to", lambda: ContextFreeProblem(np.array([0.5, 0.6]), np.array([0.5, 0.5]))),
        ("entries must be numbers", lambda: as_distribution(np.array(["a", "b"], dtype=object))),
        ("negative", lambda: RandomChooser(rng).categorical(np.array([1.5, -0.5]))),
        ("sum to", lambda: RandomChooser(rng).categorical(np.array([0.5, 0.6]))),
        ("outside", lambda: RandomChooser(rng).bernoulli(np.float64(1.5))),
        ("vocab_size", lambda: random_problem(np.int64(0), 1, 0)),
        ("divergence", lambda: random_problem(2, 1, 0, divergence=np.float64(1.5))),
        ("temperature", lambda: random_markov_problem(2, 0, temperature=np.float64(-1.0))),
        ("integer", lambda: DelayedDrafter(np.float64(2.0), 1, 1)),
        ("at least", lambda: DelayedDrafter(np.int64(0), 1, 1)),
        ("cannot read", lambda: parse_distribution("0.5,x")),
    ]


@pytest.mark.parametrize("index", range(len(_bad_inputs())))
def test_messages_have_no_numpy_reprs(index):
    expected, call = _bad_inputs()[index]
    with pytest.raises(VerispecError, match=expected) as caught:
        call()
    message = str(caught.value)
    assert "np." not in message and "float64" not in message and "int64" not in message, message
    assert "\n" not in message


def test_messages_show_the_value_received():
    with pytest.raises(InvalidDistributionError, match=r"index 1 \(-0\.5\)"):
        as_distribution(np.array([1.5, -0.5]))
    with pytest.raises(InvalidDistributionError, match=r"categorical: negative probability -0\.5 at index 1"):
        RandomChooser(np.random.default_rng(0)).categorical(np.array([1.5, -0.5]))
    with pytest.raises(InvalidProblemError, match=r"got 1\.5$"):
        random_problem(2, 1, 0, divergence=np.float64(1.5))
