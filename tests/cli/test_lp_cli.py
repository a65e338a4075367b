"""The 'optimum' and 'bound' commands: contract keys and values from independent derivations."""

from __future__ import annotations

import itertools
import json

import pytest

from verispec.cli import main


def run(capsys, *argv):
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _alpha_by_all_subsets(p, q, k):
    # alpha* = 1 + min over every token set T of p(T) - q(T)^K (docs/guides/reference.md, "OT optimum"), by brute force
    best = 0.0
    for size in range(len(p) + 1):
        for subset in itertools.combinations(range(len(p)), size):
            best = min(best, sum(p[t] for t in subset) - sum(q[t] for t in subset) ** k)
    return 1 + best


@pytest.mark.parametrize("k", [1, 2, 3])
def test_optimum_json(capsys, k):
    p, q = [0.5, 0.3, 0.2], [0.2, 0.2, 0.6]
    code, out, _ = run(capsys, "optimum", "--target", "0.5,0.3,0.2", "--draft", "0.2,0.2,0.6", "--k", str(k),
                       "--json", "--lp")
    data = json.loads(out)
    assert code == 0
    assert data["alpha_star"] == pytest.approx(_alpha_by_all_subsets(p, q, k), abs=1e-12)
    assert data["lp_alpha_star"] == pytest.approx(data["alpha_star"], abs=1e-9)
    if k == 1:
        assert data["alpha_star"] == pytest.approx(sum(min(a, b) for a, b in zip(p, q)), abs=1e-12)


def test_optimum_without_replacement_two_tokens(capsys):
    # V = 2, K = 2 without replacement: both tokens are always drafted, so every Y ~ p is accepted.
    code, out, _ = run(capsys, "optimum", "--target", "0.9,0.1", "--draft", "0.1,0.9", "--k", "2",
                       "--without-replacement", "--json", "--exact")
    assert code == 0 and json.loads(out)["alpha_star_exact"] == "1"


def test_bound_on_sun_toy(capsys):
    code, out, _ = run(capsys, "bound", "--target", "1/3,2/3", "--draft", "2/3,1/3", "--tree", "chain:2", "--json")
    data = json.loads(out)
    assert code == 0
    assert data["optimal_block_efficiency"] == pytest.approx(20 / 9, abs=1e-9)  # hand derivation: 1 + 11/9
    assert data["coupling_bound"] == pytest.approx(21 / 9, abs=1e-12)  # Sun et al.'s oracle: 1 + 12/9
    rows = {row["verifier"]: row for row in data["verifiers"]}
    assert rows["bv"]["ratio"] == pytest.approx(1.0, abs=1e-9)
    assert rows["naive"]["block_efficiency"] == pytest.approx(19 / 9, abs=1e-12)


@pytest.mark.parametrize("argv,message", [
    (["bound", "--target", "1/3,2/3", "--draft", "2/3,1/3", "--tree", "iid:3,3", "--max-variables", "100"],
     "variables"),
    (["optimum", "--target", "0.5,0.5", "--draft", "0.5,0.5", "--k", "0"], "--k"),
    (["optimum", "--target", "0.5,0.5", "--draft", "0.2,0.3,0.5", "--k", "2"], "--draft"),
])
def test_lp_command_errors(capsys, argv, message):
    code, _, err = run(capsys, *argv)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1
