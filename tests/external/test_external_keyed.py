"""Keyed (counter-based) randomness in check-external: the same key the same uniforms, different keys independent
ones, a key read again by a later draw modelled as the reuse it is (vLLM #47386's class), and keys verispec
cannot read refused.

Expected laws come from a brute-force enumeration written here: every draft path, and a grid over the uniforms
of every key the rule reads, fine enough that each grid cell lies inside one piece of the rule (all breakpoints of
the problems below are multiples of 1/120), so the grid's law is exact. It shares nothing with verispec's capture
or its integrator.
"""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np
import pytest

from tests.support import keyed_rules
from verispec.cli import main
from verispec.external.adapter import ExternalVerifier
from verispec.external.check import check_external
from verispec.external.rng import KeyRefusal
from verispec.simulator.problems import ContextFreeProblem
from verispec.simulator.trees import DraftTree
from verispec.verdict import Verdict

torch = pytest.importorskip("torch")

RULES = "tests/support/keyed_rules.py"
#: (target, draft) with every breakpoint of token-level verification (p/q, the residual's and the target's CDFs) a
#: multiple of 1/120.
PROBLEMS = {3: ([1 / 2, 3 / 8, 1 / 8], [1 / 8, 1 / 8, 3 / 4]), 2: ([3 / 4, 1 / 4], [1 / 4, 3 / 4])}
GRID = 120


def _grid_law(target, draft, length: int, salt: int) -> dict[tuple, float]:
    """The law of the emitted tokens of token-level verification on a chain of ``length`` i.i.d. drafts, the accept
    test at i reading key i and the recovery at i and the bonus reading key i + salt (L + salt), enumerated: every
    draft path, every grid point of the keys' uniforms (cell midpoints, each of mass 1/GRID)."""
    size = len(target)
    keys = sorted(set(range(length)) | {i + salt for i in range(length + 1)})
    mid = (np.arange(GRID) + 0.5) / GRID
    grids = np.meshgrid(*([mid] * len(keys)), indexing="ij")
    uniform = {key: grid.reshape(-1) for key, grid in zip(keys, grids)}
    points = GRID ** len(keys)
    law: dict[tuple, float] = {}
    for path in itertools.product(range(size), repeat=length):
        weight = float(np.prod([draft[x] for x in path]))
        alive = np.ones(points, dtype=bool)
        for i, x in enumerate(path):
            accept = uniform[i] * draft[x] < target[x]
            rejected = alive & ~accept
            residual = [max(t - d, 0.0) for t, d in zip(target, draft)]
            total = sum(residual)
            edges = np.cumsum(residual) / total
            for token in range(size):
                low = edges[token - 1] if token else 0.0
                chosen = rejected & (uniform[i + salt] >= low) & (uniform[i + salt] < edges[token])
                key = (*path[:i], token)
                law[key] = law.get(key, 0.0) + weight * chosen.mean()
            alive &= accept
        edges = np.cumsum(target)
        for token in range(size):
            low = edges[token - 1] if token else 0.0
            chosen = alive & (uniform[length + salt] >= low) & (uniform[length + salt] < edges[token])
            key = (*path, token)
            law[key] = law.get(key, 0.0) + weight * chosen.mean()
    return law


def _engine_law(function, target, draft, length: int, **options) -> dict[tuple, float]:
    """The law of the emitted tokens from verispec's exact integration of ``function``, over every draft path."""
    problem = ContextFreeProblem(target, draft)
    verifier = ExternalVerifier(function, "chain", rng="capture", per_row=True, **options)
    law: dict[tuple, float] = {}
    for path in itertools.product(range(len(target)), repeat=length):
        weight = float(np.prod([draft[x] for x in path]))
        emission = verifier.emission_law(DraftTree.from_paths(problem, [list(path)]))  # [n, V]
        for node in range(length + 1):
            for token in range(len(target)):
                if emission[node, token] > 0:
                    key = (*path[:node], token)
                    law[key] = law.get(key, 0.0) + weight * float(emission[node, token])
    return law


def _distance(a: dict, b: dict) -> float:
    return max(abs(a.get(key, 0.0) - b.get(key, 0.0)) for key in set(a) | set(b))


@pytest.mark.parametrize("size,length,salt,function", [
    (3, 1, 0, keyed_rules.keyed_reused), (3, 2, 0, keyed_rules.keyed_reused), (2, 2, 0, keyed_rules.keyed_reused),
    (3, 1, 1, keyed_rules.keyed_next), (3, 1, keyed_rules.APART, keyed_rules.keyed_salted)])
def test_the_keyed_model_is_the_brute_force_law(size, length, salt, function):
    target, draft = PROBLEMS[size]
    expected = _grid_law(target, draft, length, salt if salt != keyed_rules.APART else length + 1)
    assert _distance(_engine_law(function, target, draft, length), expected) < 1e-12


@pytest.mark.parametrize("function", [keyed_rules.numpy_reused, keyed_rules.torch_reused,
                                      keyed_rules.global_torch_reused])
def test_seeded_generators_read_their_keys(function):
    """A numpy Generator seeded by default_rng((seed, i)), a torch Generator and torch's global generator seeded
    by manual_seed(seed * 4096 + i): re-seeding with the accept test's key gives the recovery that test's uniform."""
    target, draft = PROBLEMS[3]
    arrays = "numpy" if function is keyed_rules.numpy_reused else "torch"
    problem = ContextFreeProblem(target, draft)
    verifier = ExternalVerifier(function, "chain", rng="capture", per_row=True, arrays=arrays)
    expected = _grid_law(target, draft, 1, 0)
    law = {}
    for x in range(3):
        emission = verifier.emission_law(DraftTree.from_paths(problem, [[x]]))
        for node, token in zip(*np.nonzero(emission)):
            key = ((x,) if node else ()) + (int(token),)
            law[key] = law.get(key, 0.0) + draft[x] * float(emission[node, token])
    assert _distance(law, expected) < 1e-12


def test_reuse_is_lossy_with_its_witness_and_the_salted_fix_lossless():
    """TV of the reuse on chain:1 by hand: a rejected draft 2 (u >= 1/6) recovers token 0 when u < 3/5, so token 0
    has 1/8 + 3/4 (3/5 - 1/6) = 0.45 against 1/2, token 1 0.425 against 3/8: TV 0.05 (the grid law agrees)."""
    target, draft = PROBLEMS[3]
    problem = ContextFreeProblem(target, draft)
    reused = check_external(keyed_rules.keyed_reused, "chain", "chain:1", problem=problem, rng="capture")
    assert reused.verdict is Verdict.LOSSY and abs(reused.tv_distance - 0.05) < 1e-12
    assert reused.discrepancies  # the witness: the sequences it over- and under-produces
    grid = _grid_law(target, draft, 1, 0)
    first = [sum(mass for key, mass in grid.items() if key[0] == token) for token in range(3)]
    assert abs(0.5 * sum(abs(a - b) for a, b in zip(first, target)) - 0.05) < 1e-12
    salted = check_external(keyed_rules.keyed_salted, "chain", "chain:2", problem=problem, rng="capture")
    assert salted.verdict is Verdict.LOSSLESS


def test_the_old_model_where_every_draw_is_fresh_misses_the_reuse():
    """Negative control: with keys='fresh' (verispec before keys were read) every draw takes fresh uniforms, so the
    reusing rule gets the law of the salted one (the grid law with no key read twice) and is called LOSSLESS."""
    target, draft = PROBLEMS[3]
    fresh = _engine_law(keyed_rules.keyed_reused, target, draft, 1, keys="fresh")
    assert _distance(fresh, _grid_law(target, draft, 1, 2)) < 1e-12
    assert _distance(fresh, _grid_law(target, draft, 1, 0)) > 0.01
    report = check_external(keyed_rules.keyed_reused, "chain", "chain:1", problem=ContextFreeProblem(target, draft),
                            rng="capture", keys="fresh")
    assert report.verdict is Verdict.LOSSLESS


def test_blackbox_mode_runs_the_keyed_model():
    """Each run a fresh tape: the keys' uniforms are fresh per run and shared within it; the reuse is caught by the
    powered test (TV 0.05 at --detect-tv 0.04) and the salted twin passes it."""
    target, draft = PROBLEMS[3]
    problem = ContextFreeProblem(target, draft)
    options = dict(problem=problem, rng="capture", mode="blackbox", detect_tv=0.04, seed=3)
    assert check_external(keyed_rules.keyed_reused, "chain", "chain:1", **options).verdict is Verdict.LOSSY
    assert check_external(keyed_rules.keyed_salted, "chain", "chain:1", **options).verdict is Verdict.LOSSLESS


@pytest.mark.parametrize("function,arrays,message", [
    (keyed_rules.clock_key, "numpy", "two identical calls"),
    (keyed_rules.urandom_key, "numpy", "two identical calls"),
    (keyed_rules.os_seeded_torch, "torch", "torch.seed"),
    (keyed_rules.constant_key, "numpy", "does not depend on the request's seed"),
])
def test_keys_verispec_cannot_read_are_refused(function, arrays, message):
    target, draft = PROBLEMS[3]
    with pytest.raises(KeyRefusal, match=message):
        check_external(function, "chain", "chain:1", problem=ContextFreeProblem(target, draft), rng="capture",
                       arrays=arrays)


def test_command_line_refusals_are_one_line_and_exit_2(capsys):
    common = ["--layout", "chain", "--tree", "chain:1", "--rng", "capture", "--target", "0.5,0.375,0.125",
              "--draft", "0.125,0.125,0.75"]
    assert main(["check-external", f"{RULES}:clock_key", *common]) == 2
    assert main(["check-external", f"{RULES}:many_keys", *common, "--max-keys", "4"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 2 and all(line.startswith("verispec: error: external function") for line in lines)
    assert "two identical calls" in lines[0] and "more than 4 keys" in lines[1]
    assert main(["check-external", f"{RULES}:many_keys", *common, "--max-keys", "0"]) == 2  # out of range
    assert capsys.readouterr().err.strip().splitlines() == [
        "verispec: error: argument --max-keys: must be an integer in [1, 1000000], got '0'"]


def test_a_key_budget_counts_keys_not_draws():
    """many_keys draws once from each of 8 keys, then the rule reads the first again: refused under 8, checked at 8."""
    target, draft = PROBLEMS[3]
    problem = ContextFreeProblem(target, draft)
    with pytest.raises(KeyRefusal, match="more than 7 keys"):
        check_external(keyed_rules.many_keys, "chain", "chain:1", problem=problem, rng="capture", max_keys=7)
    report = check_external(keyed_rules.many_keys, "chain", "chain:1", problem=problem, rng="capture", max_keys=8)
    assert report.verdict is Verdict.LOSSLESS


def test_keyed_rand_outside_verispec_is_counter_based():
    from verispec import keyed

    first = keyed.rand(5, np.arange(6))
    assert np.array_equal(first, keyed.rand(5, np.arange(6)))  # the same key, the same numbers
    assert np.array_equal(first[2:4], keyed.rand(np.array([5, 5]), np.array([2, 3])))
    assert not np.any(first == keyed.rand(6, np.arange(6)))
    assert np.all((first >= 0) & (first < 1))
    assert Fraction(float(keyed.rand(torch.tensor(5), torch.arange(1), dtype=torch.float32)[0])).denominator <= 2**24


def test_a_one_dimensional_race_without_dim_is_read_as_one_categorical_draw():
    """argmax(w / E) over one row's noise, written without ``dim`` (as kernels' torch fallbacks write it), is the race
    along that row: exact mode reads it as one inverse-CDF draw and gets the token-level law (the draft law's closed
    form, Leviathan et al.), where it refused before; a 2-D argmax without dim (a flat index) is still left real."""
    from verispec.external.exact import NotPiecewiseConstantError

    target, draft = PROBLEMS[3]
    problem = ContextFreeProblem(target, draft)

    def race(draft_tokens, draft_probs, target_probs):
        x = int(draft_tokens[0, 0])
        p, q = target_probs[0, 0], draft_probs[0, 0]
        if torch.rand(1, dtype=torch.float64) * q[x] < p[x]:
            bonus = target_probs[0, 1]
            noise = torch.empty_like(bonus).exponential_()
            return torch.tensor([[x, int(torch.argmax(bonus / noise))]])
        residual = torch.clamp(p - q, min=0)
        noise = torch.empty_like(residual).exponential_()
        return torch.tensor([[int(torch.argmax(residual / noise)), -1]])

    report = check_external(race, "chain", "chain:1", problem=problem, rng="capture", arrays="torch", per_row=True,
                            mode="exact")
    assert report.verdict is Verdict.LOSSLESS and report.tv_distance < 1e-12

    def flat(draft_tokens, draft_probs, target_probs):
        law = target_probs[0, :1]  # [1, V]: argmax without dim is a flat index, not the row's race
        noise = torch.empty_like(law).exponential_()
        return torch.tensor([[int(torch.argmax(law / noise)), -1]])

    with pytest.raises(NotPiecewiseConstantError):
        check_external(flat, "chain", "chain:1", problem=problem, rng="capture", arrays="torch", per_row=True,
                       mode="exact")
