"""Problem files: the float reading in bulk (``_checked_rows``) takes the same values and the same decisions as the
per-vector reading, and the binary .npz form (``problem_to_npz``) reads back what was written, validated like JSON.

* Float mode: every row equals the per-vector reading (JSON numbers as Decimals, ``as_distribution``) to 1e-15;
  a file the bulk path cannot take (strings such as "1/3", a bad row) goes the per-vector way, with its messages.
* .npz: float rows round-trip to 1e-15, exact rows (int64 numerator and denominator pairs) exactly; NaN, negative
  entries, bad sums and shapes are one-line errors naming the file; a .npz that is not a problem, a corrupt
  archive and a binary file that is neither form are named as such.
* ``derive`` and ``hunt`` write .npz; ``exact --problem FILE.npz`` gives the JSON file's answer.
* The fast paths of the float reading take the same decisions as the slow ones: problem_to_json's key layout,
  recognised by one comparison, reads as the per-key reading does (any other layout or spelling goes that way),
  and the scan of the file's numbers flags exactly the numbers that the one-by-one float reading refers to the
  exact reading.
"""

from __future__ import annotations

import io
import json
from decimal import Decimal
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.strategies import build_problem, problem_args
from verispec.cli import main
from verispec.errors import InvalidDistributionError, InvalidProblemError
from verispec.simulator.generators import random_context_free_problem, random_problem
from verispec.simulator.problem_files import (
    NPZ_FORMAT,
    _floats_read_plainly,
    _lexicographic_layout,
    _plain_float,
    _ReadExactly,
    load_problem,
    problem_from_json,
    problem_to_json,
    problem_to_npz,
)


def _rows(problem):
    return {**{("t",) + k: v for k, v in problem.target_table.items()},
            **{("d",) + k: v for k, v in problem.draft_table.items()}}


@given(args=problem_args(vocab=(2, 5), depth=(1, 3)))
@settings(max_examples=15)
def test_bulk_float_reading_equals_the_per_vector_reading(args, tmp_path_factory):
    problem = build_problem(args)
    text = json.dumps(problem_to_json(problem, args["depth"]))
    path = tmp_path_factory.mktemp("files") / "p.json"
    path.write_text(text)
    bulk = load_problem(path)
    per_vector = problem_from_json(json.loads(text, parse_float=Decimal), exact=False)  # Decimals: no bulk path
    assert bulk.horizon == per_vector.horizon
    expected = _rows(per_vector)
    got = _rows(bulk)
    assert got.keys() == expected.keys()
    for key, row in expected.items():
        np.testing.assert_allclose(got[key], row, rtol=0, atol=1e-15)
        assert not got[key].flags.writeable


def test_strings_and_bad_rows_take_the_per_vector_path(tmp_path):
    path = tmp_path / "p.json"
    path.write_text('{"vocab_size": 2, "target": {"": ["1/3", "2/3"]}, "draft": {"": [0.5, 0.5]}}')
    assert load_problem(path).target(())[0] == pytest.approx(1 / 3, abs=1e-16)
    for entry, message in (("-0.5", "negative"), ("0.7", "sum"), ("true", "cannot read")):
        path.write_text('{"vocab_size": 2, "target": {"": [' + entry + ', 0.5]}, "draft": {"": [0.5, 0.5]}}')
        with pytest.raises(InvalidDistributionError, match=message):
            load_problem(path)


@pytest.mark.parametrize("exact", [False, True])
def test_npz_round_trip(tmp_path, exact):
    problem = random_problem(3, 3, 4)
    if exact:
        problem = problem_from_json(json.loads(json.dumps(problem_to_json(problem, 3))), exact=True)
    path = tmp_path / "p.npz"
    problem_to_npz(problem, 3, path, metadata={"description": "a test"})
    back = load_problem(path, exact=exact)
    assert back.horizon == 3 and back.exact == exact
    written = _rows(back)
    assert len(written) == sum(3 ** k for k in range(4)) + sum(3 ** k for k in range(3))  # target to 3, draft to 2
    original = _rows(problem)
    for key, row in written.items():
        if exact:
            assert list(row) == list(original[key]) and isinstance(row[0], Fraction)
        else:
            np.testing.assert_allclose(row, original[key], rtol=0, atol=1e-15)
    assert np.load(path)["format"] == NPZ_FORMAT


def _npz(tmp_path, **changes):
    problem = random_problem(2, 1, 0)
    path = tmp_path / "good.npz"
    problem_to_npz(problem, 1, path)
    arrays = dict(np.load(path))
    arrays.update(changes)
    arrays = {key: value for key, value in arrays.items() if value is not None}
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    bad = tmp_path / "bad.npz"
    bad.write_bytes(buffer.getvalue())
    return bad


@pytest.mark.parametrize("changes,error,message", [
    (dict(target_values=np.array([[np.nan, 1.0], [0.5, 0.5], [0.5, 0.5]])), InvalidDistributionError, "finite|NaN"),
    (dict(target_values=np.array([[-0.5, 1.5], [0.5, 0.5], [0.5, 0.5]])), InvalidDistributionError, "negative"),
    (dict(target_values=np.array([[0.5, 0.7], [0.5, 0.5], [0.5, 0.5]])), InvalidDistributionError, "sum"),
    (dict(target_values=np.array([[0.5, 0.5]])), InvalidProblemError, "rows of shape"),
    (dict(draft_lengths=None), InvalidProblemError, "lacks the array 'draft_lengths'"),
    (dict(format=np.asarray("something-else")), InvalidProblemError, "not a verispec problem"),
])
def test_npz_validation(tmp_path, changes, error, message):
    with pytest.raises(error, match=message) as caught:
        load_problem(_npz(tmp_path, **changes))
    assert "bad.npz" in str(caught.value) and "\n" not in str(caught.value)


def test_files_of_the_wrong_kind_are_named(tmp_path):
    corrupt = tmp_path / "corrupt.npz"
    corrupt.write_bytes(b"PK\x03\x04" + b"\x00" * 64)
    with pytest.raises(InvalidProblemError, match="not a readable .npz"):
        load_problem(corrupt)
    binary = tmp_path / "binary.json"
    binary.write_bytes(bytes(range(128, 256)))
    with pytest.raises(InvalidProblemError, match="neither JSON"):
        load_problem(binary)
    other = tmp_path / "other.npz"
    np.savez(other, weights=np.zeros(3))
    with pytest.raises(InvalidProblemError, match="not a verispec problem .*found arrays: weights"):
        load_problem(other)


def test_exact_problem_too_fine_for_int64_is_refused(tmp_path):
    from verispec.simulator import ContextFreeProblem

    tiny = Fraction(1, 2 ** 70)
    problem = ContextFreeProblem([tiny, 1 - tiny], [Fraction(1, 2), Fraction(1, 2)], exact=True)
    with pytest.raises(InvalidProblemError, match="write this problem as JSON"):
        problem_to_npz(problem, 1, tmp_path / "p.npz")


def test_commands_read_and_write_npz(tmp_path, capsys):
    problem = random_problem(3, 2, 1)
    json_path, npz_path = tmp_path / "p.json", tmp_path / "p.npz"
    json_path.write_text(json.dumps(problem_to_json(problem, 2)))
    problem_to_npz(problem, 2, npz_path)
    answers = []
    for path in (json_path, npz_path):
        assert main(["exact", "--problem", str(path), "--tree", "iid:2,2", "--verifier", "specinfer", "--json"]) == 0
        answers.append(json.loads(capsys.readouterr().out)["block_efficiency"])
    assert answers[0] == pytest.approx(answers[1], abs=1e-12)
    witness = tmp_path / "witness.npz"
    code = main(["hunt", "--verifier", "tests/support/broken.py:naive_correction_from_target", "--tree", "chain:1",
                 "--output", str(witness)])
    capsys.readouterr()
    assert code == 1
    found = load_problem(witness, exact=True)
    assert main(["exact", "--problem", str(witness), "--tree", "chain:1", "--verifier",
                 "tests/support/broken.py:naive_correction_from_target", "--exact", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["lossless"] is False and found.vocab_size >= 2


@pytest.mark.parametrize("exact", [False, True])
def test_numbers_past_the_exponent_limit_are_refused_in_both_modes(tmp_path, exact):
    # 0.000...01 with 10,001 zeros: a float would read it as 0, the exact reading refuses it; both modes must refuse
    path = tmp_path / "p.json"
    tiny = "0." + "0" * 10_001 + "1"
    path.write_text('{"vocab_size": 2, "target": {"": [' + tiny + ', 1]}, "draft": {"": [0.5, 0.5]}}')
    with pytest.raises(InvalidDistributionError, match="exponent"):
        load_problem(path, exact=exact)


def _per_key(keys):
    return [tuple(map(int, key.split(","))) if key.strip() else () for key in keys]


@pytest.mark.parametrize("size, depth", [(1, 0), (1, 3), (2, 3), (3, 2), (11, 2)])
def test_problem_to_json_layout_is_recognised_and_read_as_the_per_key_reading(size, depth):
    keys = list(problem_to_json(random_context_free_problem(size, 0), depth)["target"])
    parsed, found_depth = _lexicographic_layout(keys, size)
    assert parsed == _per_key(keys) and found_depth == depth
    # any other list of keys is left to the per-key reading, or (at V = 1, one key more or fewer) is the layout of
    # another depth and read as such
    for other in (keys[::-1], [key.replace(",", ", ") for key in keys], keys[:-1], keys + ["0"],
                  [("0" + key if key else key) for key in keys]):
        found = _lexicographic_layout(other, size)
        assert found is None or found[0] == _per_key(other)
    if size > 1 and depth > 0:
        assert _lexicographic_layout(keys[::-1], size) is None and _lexicographic_layout(keys[:-1], size) is None


def test_key_layouts_read_alike(tmp_path):
    # problem_to_json's layout (every prefix in lexicographic order), a shuffled one and one with spaces: one problem
    problem = random_problem(3, 2, 5)
    data = problem_to_json(problem, 2)
    canonical = load_problem(_written(tmp_path / "a.json", data))
    for name, change in (("shuffled", lambda table: dict(reversed(list(table.items())))),
                         ("spaced", lambda table: {key.replace(",", ", "): row for key, row in table.items()})):
        changed = dict(data, target=change(data["target"]), draft=change(data["draft"]))
        other = load_problem(_written(tmp_path / f"{name}.json", changed))
        assert _rows(other).keys() == _rows(canonical).keys() and other.horizon == canonical.horizon == 2
        for key, row in _rows(canonical).items():
            assert np.array_equal(_rows(other)[key], row)
    incomplete = dict(data, target={key: row for key, row in data["target"].items() if key != "2,2"})
    assert load_problem(_written(tmp_path / "short.json", incomplete)).horizon == 1
    doubled = dict(data, target={**data["target"], "01": data["target"]["1"]})
    with pytest.raises(InvalidProblemError, match="'1' and '01' both name the prefix '1'"):
        load_problem(_written(tmp_path / "twice.json", doubled))


def _written(path, data):
    path.write_text(json.dumps(data))
    return path


@given(numbers=st.lists(st.one_of(
    st.floats(min_value=0, max_value=1).map(repr),
    st.builds(lambda m, e: f"{m}e{e}", st.integers(1, 9), st.integers(-99_999, 99_999)),
    st.builds(lambda zeros: "0." + "0" * zeros + "1", st.integers(0, 60))), min_size=1, max_size=8))
def test_the_number_scan_flags_every_number_the_float_reading_refers_to_the_exact_one(numbers):
    text = "[" + ", ".join(numbers) + "]"
    referred = []
    for number in numbers:
        try:
            _plain_float(number)
        except _ReadExactly:
            referred.append(number)
    assert _floats_read_plainly(text.encode()) == (not referred)


def test_an_ordinary_problem_file_needs_no_number_by_number_reading():
    text = json.dumps(problem_to_json(random_problem(4, 3, 0, zero_fraction=0.3, temperature=0.3), 3))
    assert _floats_read_plainly(text.encode())


def test_window_scan_is_the_direct_one():
    from verispec.simulator.problem_files import _all_in_window

    rng = np.random.default_rng(0)
    for _ in range(300):
        mask, width = rng.random(int(rng.integers(0, 60))) < 0.9, int(rng.integers(1, 45))
        direct = np.array([mask[i:i + width].all() for i in range(len(mask) - width + 1)], dtype=bool)
        assert np.array_equal(_all_in_window(mask, width), direct)
