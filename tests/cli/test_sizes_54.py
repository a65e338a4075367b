"""Issue 54, class 4: sizes and budgets that still escaped.

* predict's whole-tree search (psbv on iid:50,1) ran for over an hour towards its 200,000-tree limit: the trees it
  would need are bounded from below (before the search from max q(root)^K, during it from the heap's top mass) and
  the search is refused in one line as soon as they pass the limit.
* Problem files expand when read: a .npz of repeated rows (a few hundred KB) holds millions of entries, each a
  Fraction in exact mode; a rational .npz became a Fraction per entry even in float mode. Exact readings are counted
  before any Fraction is made and refused in under a second; rational rows read as floats are divided by numpy.

Each refusal is timed and its traced allocations bounded; each has a negative control (the check patched out, the
old behaviour: the command runs on to its time budget).
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time
from fractions import Fraction

import numpy as np
import pytest

import verispec.simulator.certified as certified_module
from tests.support.timing import Stopwatch, timed
from tests.support.traced import traced_main
from verispec.errors import ProblemTooLargeError
from verispec.simulator.certified import certify_whole_trees
from verispec.simulator.expansion import MAX_NPZ_PREFIX_TOKENS, rational_floats
from verispec.simulator.generators import random_problem
from verispec.simulator.problem_files import load_problem, problem_to_json, problem_to_npz
from verispec.simulator.tree_specs import parse_tree
from verispec.sizes import MAX_EXACT_ENTRIES
from verispec.verifiers import get_verifier

MIB = 1 << 20
FORMAT = "verispec-problem-1"


@pytest.fixture(scope="module", autouse=True)
def _warm():
    """Import what the commands run, so that the timed, traced runs measure the refusal, not imports."""
    import verispec.simulator.engine  # noqa: F401
    from verispec.verifiers import REGISTRY  # noqa: F401


def _run(capsys, argv, *, seconds: float = 1.0, megabytes: float = 32):
    """(exit status, stderr lines, its Stopwatch) of ``verispec argv`` in this process; traced allocations must peak
    under ``megabytes``."""
    with Stopwatch() as watch:
        code, _, err, _, peak = traced_main(capsys, argv)
    err = err.strip().splitlines()
    assert peak < megabytes * MIB, f"peak {peak / MIB:.0f} MB: {err}"
    return code, err, watch


def _without(module: str, name: str, argv) -> tuple[int, float]:
    """(exit status, seconds) of ``verispec argv`` in a child process with ``module.name`` patched to do nothing:
    the old behaviour, for the negative controls (a child: past its budget the command may end its process)."""
    code = (f"import sys, {module} as m; setattr(m, {name!r}, lambda *a, **k: None); from verispec.cli import main; "
            "sys.exit(main(sys.argv[1:]))")
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", code, *map(str, argv)], capture_output=True, text=True, timeout=120)
    return done.returncode, time.perf_counter() - start


def _refused(capsys, argv, **limits) -> str:
    """The refusal's one line, after checking exit 2 and that it took under ``seconds`` of CPU on an idle core
    (stretched by the load measured around it): the work it refuses is CPU too, stretched alike, and a refusal
    left out runs on to the command's budget and exits 3."""
    code, err, watch = _run(capsys, argv, **limits)
    assert code == 2 and len(err) == 1 and err[0].startswith("verispec: error: "), (code, err)
    assert watch.within(0, limits.get("seconds", 1.0)), f"refused after {watch}: {err[0]}"
    return err[0]


def _npz(path, vocab: int, depth: int, rows: dict) -> None:
    """A .npz problem of every prefix of length 0..depth (draft 0..depth - 1) whose rows all equal ``rows``
    (name -> one row), written with numpy directly: equal rows compress to almost nothing."""
    arrays = {"format": np.asarray(FORMAT), "vocab_size": np.asarray(vocab, dtype=np.int64),
              "metadata": np.asarray("{}")}
    for law, last in (("target", depth), ("draft", depth - 1)):
        assert last <= 1
        count = 1 + (vocab if last >= 1 else 0)
        arrays[f"{law}_lengths"] = np.array([0] + [1] * (count - 1), dtype=np.int64)
        arrays[f"{law}_tokens"] = np.array([-1] + list(range(count - 1)), dtype=np.int64).reshape(count, 1)[:, :last]
        for name, row in rows.items():
            arrays[f"{law}_{name}"] = np.broadcast_to(row, (count, vocab)).copy()
    np.savez_compressed(path, **arrays)


# --- predict: the whole-tree search --------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def small_problem(tmp_path_factory):
    path = tmp_path_factory.mktemp("p") / "p.npz"
    problem = random_problem(4, 3, seed=1)
    problem_to_npz(problem, 3, path)
    return path, problem


def test_predict_refuses_psbv_on_fifty_iid_paths_at_once(capsys, small_problem):
    path, problem = small_problem
    line = _refused(capsys, ["predict", "--problem", path, "--tree", "iid:50,1", "--verifier", "psbv",
                             "--epsilon", "1e-3"])
    # independently: no tree is likelier than max q(root)^50, and the width needs mass 1 - (1e-3 - 2e-12)
    largest = max(float(x) for x in problem.draft(()))
    needed = math.log(1 - (1e-3 - 2e-12) - 1e-9) - 50 * math.log(largest)
    assert f"needs at least 10^{needed / math.log(10):.1f} more draft trees" in line
    assert "above the limit of 200,000 trees" in line


def test_negative_control_without_the_estimate_predict_runs_to_its_budget(small_problem):
    path, _ = small_problem
    code, elapsed = _without("verispec.simulator.certified", "_check_trees_needed",
                             ["predict", "--problem", path, "--tree", "iid:50,1", "--verifier", "psbv",
                              "--epsilon", "1e-3", "--time-budget", "2"])
    assert code == 3 and elapsed >= 2.0  # the old search: still far from an answer at the budget


def test_the_search_refuses_as_it_goes_for_drafters_without_a_bound(small_problem, monkeypatch):
    """chain:3 gets no bound before the search (max q(root)^1 is no bound worth the name); the heap's top mass
    refuses it long before its 50th tree. Negative control: without the check, only the 51st tree refuses."""
    _, problem = small_problem
    drafter, verifier = parse_tree("chain:3"), get_verifier("traversal")
    trees = []
    real = certified_module._node_masses
    monkeypatch.setattr(certified_module, "_node_masses", lambda *a: trees.append(1) or real(*a))
    with pytest.raises(ProblemTooLargeError, match="more draft trees"):
        certify_whole_trees(problem, drafter, verifier, 1e-9, max_outcomes=50)
    assert len(trees) < 50
    trees.clear()
    monkeypatch.setattr(certified_module, "_check_trees_needed", lambda *args: None)
    with pytest.raises(ProblemTooLargeError, match="needs over 50 draft trees"):
        certify_whole_trees(problem, drafter, verifier, 1e-9, max_outcomes=50)
    assert len(trees) == 50  # then the 51st is refused


def test_a_search_that_can_finish_is_not_refused(small_problem, monkeypatch):
    _, problem = small_problem
    drafter, verifier = parse_tree("iid:2,1"), get_verifier("psbv")
    result = certify_whole_trees(problem, drafter, verifier, 1e-3)
    monkeypatch.setattr(certified_module, "_check_trees_needed", lambda *args: None)
    control = certify_whole_trees(problem, drafter, verifier, 1e-3)
    assert result.reached and (result.lower, result.upper) == (control.lower, control.upper)


# --- problem files that expand -----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def expanding(tmp_path_factory):
    """A float .npz of 3,000 x 3,001 probabilities (72 MB as float64, 9M Fractions) and a rational one of 2,048 x
    2,049, each a few hundred KB on disk."""
    folder = tmp_path_factory.mktemp("npz")
    row = np.random.default_rng(0).random(3000)
    _npz(folder / "float.npz", 3000, 1, {"values": row / row.sum()})
    _npz(folder / "rational.npz", 2048, 1, {"numerators": np.ones(2048, dtype=np.int64),
                                            "denominators": np.full(2048, 2048, dtype=np.int64)})
    return folder


@pytest.mark.parametrize("name, entries", [("float.npz", 3001 * 3000 + 3000), ("rational.npz", 2049 * 2048 + 2048)])
def test_an_exact_reading_that_expands_is_refused_at_once(capsys, expanding, name, entries):
    assert (expanding / name).stat().st_size < 1 * MIB
    line = _refused(capsys, ["exact", "--exact", "--problem", expanding / name, "--tree", "chain:1",
                             "--verifier", "naive"], megabytes=8)
    assert f"reading its {entries:,} probabilities exactly" in line and f"{MAX_EXACT_ENTRIES:,}" in line


def test_negative_control_without_the_count_the_exact_reading_runs_to_the_budget(expanding):
    code, elapsed = _without("verispec.simulator.problem_files", "check_npz_expansion",
                             ["exact", "--exact", "--problem", expanding / "float.npz", "--tree", "chain:1",
                              "--verifier", "naive", "--time-budget", "2"])
    assert code == 3 and elapsed >= 2.0


def test_a_rational_npz_reads_as_floats_without_fractions(expanding):
    problem, watch = timed(load_problem, expanding / "rational.npz")
    assert watch.within(0, 10), watch  # CPU, stretched by the load: 30 s through 4.2M Fractions before, stretched alike
    assert problem.target((5,))[7] == 1 / 2048


def test_rational_floats_round_as_fractions_do():
    rng = np.random.default_rng(3)
    big = np.array([2**61 - 1, 2**62 + 7, 2**53 + 1, 3], dtype=np.int64)
    numerators = np.concatenate([rng.integers(-2**62, 2**62, 500), big, rng.integers(0, 100, 500)])
    denominators = np.concatenate([rng.integers(1, 2**62, 500), big + 2, rng.integers(1, 100, 500)])
    expected = [float(Fraction(int(a), int(b))) for a, b in zip(numerators, denominators)]
    assert rational_floats(numerators, denominators).tolist() == expected
    # negative control: dividing the float64 conversions (two roundings) misses the correctly rounded value
    naive = (numerators.astype(np.float64) / denominators.astype(np.float64)).tolist()
    assert naive != expected


def test_a_npz_of_long_prefixes_is_refused_before_its_tuples(capsys, tmp_path):
    """V = 1 and prefixes of length 0..8,199: 33.6M tokens held as int8 zeros (65 KB on disk) would become 8,200
    tuples of 33.6M slots in all."""
    count = 8200
    tokens = np.zeros((count, count), dtype=np.int8)
    arrays = {"format": np.asarray(FORMAT), "vocab_size": np.asarray(1, dtype=np.int64), "metadata": np.asarray("{}")}
    for law, n in (("target", count), ("draft", count - 1)):
        arrays[f"{law}_lengths"] = np.arange(n, dtype=np.int64)
        arrays[f"{law}_tokens"] = tokens[:n, :max(n - 1, 0)]
        arrays[f"{law}_values"] = np.ones((n, 1))
    np.savez_compressed(tmp_path / "long.npz", **arrays)
    tokens_in_all = count * (count - 1) // 2  # lengths 0..8,199
    assert tokens_in_all > MAX_NPZ_PREFIX_TOKENS
    line = _refused(capsys, ["exact", "--problem", tmp_path / "long.npz", "--tree", "chain:1", "--verifier",
                             "naive"], megabytes=8)
    assert f"{count:,} prefixes of {tokens_in_all:,} tokens in all" in line


def test_an_exact_json_reading_is_counted_before_its_decimals(capsys, tmp_path):
    problem = random_problem(600, 1, seed=0)
    (tmp_path / "p.json").write_text(json.dumps(problem_to_json(problem, 1)))
    line = _refused(capsys, ["exact", "--exact", "--problem", tmp_path / "p.json", "--tree", "chain:1",
                             "--verifier", "naive"], seconds=2.0, megabytes=160)
    assert f"reading its {601 * 600 + 600:,} probabilities exactly" in line
    # within the limit the exact reading is as before: every vector sums to exactly 1
    small = random_problem(4, 2, seed=0)
    (tmp_path / "s.json").write_text(json.dumps(problem_to_json(small, 2)))
    exact = load_problem(tmp_path / "s.json", exact=True)
    assert sum(exact.target((1, 2))) == 1 and isinstance(exact.target(())[0], Fraction)


def test_negative_control_without_the_json_count_the_exact_reading_runs_on(tmp_path):
    problem = random_problem(600, 1, seed=0)
    (tmp_path / "p.json").write_text(json.dumps(problem_to_json(problem, 1)))
    code, elapsed = _without("verispec.simulator.problem_files", "check_json_exact_entries",
                             ["exact", "--exact", "--problem", tmp_path / "p.json", "--tree", "chain:1",
                              "--verifier", "naive", "--time-budget", "2"])
    assert code == 3 and elapsed >= 2.0
