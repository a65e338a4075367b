"""psbv's float law at many drafted paths (issue 64: ``predict`` with psbv on ``delayed:50,1,1`` stopped with
"emission law is not a probability law (sum 1.00028)" where ``exact`` said LOSSLESS).

The cause was the selection law's integral (``position_measures.selection_probabilities``): the polynomial
k_i f_i (S_i - f_i s)^(k_i - 1) prod_j (S_j - f_j s)^(k_j) was expanded in powers of s, whose coefficients alternate in
sign and grow as binomials (C(49, 24) ~ 6e13 at K = 50), so its float sum cancelled to a few digits. The
expansion itself is right: evaluated in rationals (``expanded_selection``, the pre-fix computation kept here) it
is exact, and it is the reference the float law is held to at 1e-12. The same computation in floats is the
negative control: it misses the reference by far more than the tolerance, and fails the law check that ``predict``
runs, as it did before the fix.
"""

from __future__ import annotations

import json
from fractions import Fraction

import numpy as np
import pytest

from verispec.cli import main
from verispec.errors import VerifierError
from verispec.lp_analysis.position_measures import PositionMeasure, elementary_intervals, selection_probabilities
from verispec.simulator import analyze, load_problem
from verispec.simulator.laws import check_emission_laws
from verispec.simulator.problems import ContextFreeProblem
from verispec.simulator.trees import DraftTree
from verispec.verifiers import psbv
from verispec.verifiers.psbv import PositionSharingBlockVerifier


def expanded_selection(measures, copies):
    """The selection law as computed before the fix: each interval's polynomial expanded in powers of s (exact in
    rationals; in floats the alternating binomial coefficients cancel)."""
    masses = [m.mass() for m in measures]
    zero = masses[0] * 0
    totals = [zero] * len(measures)
    survival = [mass / mass if mass > 0 else zero + 1 for mass in masses]
    for start, stop, densities in elementary_intervals(measures):
        width = stop - start
        rates = [d / mass if mass > 0 else zero for d, mass in zip(densities, masses)]
        for i in range(len(measures)):
            if rates[i] == 0:
                continue
            poly = [copies[i] * rates[i]]
            for j in range(len(measures)):
                for _ in range(copies[j] - (1 if j == i else 0)):
                    factor = (survival[j], -rates[j])
                    poly = [(poly[n] if n < len(poly) else zero) * factor[0]
                            + (poly[n - 1] * factor[1] if n >= 1 else zero) for n in range(len(poly) + 1)]
            totals[i] = totals[i] + sum((c * width ** (n + 1) / (n + 1) for n, c in enumerate(poly)), zero)
        survival = [s - r * width for s, r in zip(survival, rates)]
    return totals


#: Leaves' measures that share [0, 1] (cut points, then each leaf's density on each cell; the densities of a cell add
#: up to 1, as psbv's measures of the leaves of one tree do), with the copies of each leaf: K = 50 to 120 paths.
SHARED = [
    (("0", "1/16", "1/8", "7/8", "15/16", "1"), (("0", "1/3", "2/3", "0", "1/2"), ("1", "2/3", "1/3", "1", "1/2")),
     (45, 5)),
    (("0", "3/8", "9/16", "3/4", "13/16", "1"),
     (("3/5", "0", "1/4", "1/3", "1/2"), ("2/5", "2/5", "3/8", "1/3", "0"), ("0", "3/5", "3/8", "1/3", "1/2")),
     (40, 7, 3)),
    (("0", "3/8", "9/16", "3/4", "13/16", "1"),
     (("3/5", "0", "1/4", "1/3", "1/2"), ("2/5", "2/5", "3/8", "1/3", "0"), ("0", "3/5", "3/8", "1/3", "1/2")),
     (70, 5, 5)),
    (("0", "1/16", "1/8", "7/8", "15/16", "1"), (("0", "1/3", "2/3", "0", "1/2"), ("1", "2/3", "1/3", "1", "1/2")),
     (100, 20)),
]


def shared_measures(cuts, densities):
    cuts = [Fraction(c) for c in cuts]
    return [PositionMeasure(tuple((a, b, Fraction(d)) for a, b, d in zip(cuts, cuts[1:], row) if Fraction(d) > 0))
            for row in densities]


def as_float(measure: PositionMeasure) -> PositionMeasure:
    return PositionMeasure(tuple((float(a), float(b), float(d)) for a, b, d in measure.pieces))


@pytest.mark.parametrize("cuts,densities,copies", SHARED)
def test_the_float_selection_law_matches_its_rational_value_at_many_paths(cuts, densities, copies):
    measures = shared_measures(cuts, densities)
    reference = expanded_selection(measures, list(copies))  # rationals: exact
    assert sum(reference) == 1  # the measures partition [0, 1]: some path is selected
    chosen = selection_probabilities([as_float(m) for m in measures], list(copies))
    assert abs(sum(chosen) - 1) <= 1e-12
    assert chosen == pytest.approx([float(x) for x in reference], abs=1e-12)
    # rationals run their own path (one denominator, integer coefficients): the same numbers exactly
    assert selection_probabilities(measures, list(copies)) == reference
    # negative control: the old float computation misses the rational values by far more than the tolerance
    old = expanded_selection([as_float(m) for m in measures], list(copies))
    assert max(abs(a - float(b)) for a, b in zip(old, reference)) > 1e-8


#: A draft peaked on token 0, as in the case of the issue: most of the K paths agree.
TARGET, DRAFT = [0.4, 0.35, 0.25], [0.85, 0.1, 0.05]

#: (K, how many of the K paths end in each of the tokens 0, 1, 2) after a trunk of one token: delayed:K,1,1 trees.
OUTCOMES = [(50, (45, 5, 0)), (50, (48, 1, 1)), (80, (60, 15, 5)), (120, (100, 12, 8)), (200, (150, 40, 10))]


def delayed_tree(outcome):
    paths = [(0, token) for token, count in enumerate(outcome) for _ in range(count)]
    return DraftTree.from_paths(ContextFreeProblem(TARGET, DRAFT), paths)


@pytest.mark.parametrize("paths,outcome", OUTCOMES)
def test_the_float_law_of_a_delayed_tree_is_a_probability_law_at_many_paths(paths, outcome, monkeypatch):
    assert sum(outcome) == paths
    batch = delayed_tree(outcome).as_batch()
    laws = np.asarray(PositionSharingBlockVerifier().emission_laws(batch), dtype=np.float64)
    assert abs(laws.sum() - 1) <= 1e-12 and laws.min() >= 0
    check_emission_laws("psbv", batch, laws)
    # negative control: with the old selection integral the law fails the check that stopped `predict`
    monkeypatch.setattr(psbv, "selection_probabilities", expanded_selection)
    laws = np.asarray(PositionSharingBlockVerifier().emission_laws(batch), dtype=np.float64)
    with pytest.raises(VerifierError, match="not a probability law"):
        check_emission_laws("psbv", batch, laws)


def write_problem(path):
    """A depth-2 problem over 2 tokens with a draft of 99/100 and more on token 0: the best-first search of
    delayed:50,1,1 meets its most likely trees (all or most of the 50 paths on token 0) first, and needs few."""
    target = {"": ["1/3", "2/3"], "0": ["1/2", "1/2"], "1": ["3/4", "1/4"], "0,0": ["2/5", "3/5"],
              "0,1": ["1/6", "5/6"], "1,0": ["5/8", "3/8"], "1,1": ["7/10", "3/10"]}
    draft = {"": ["99/100", "1/100"], "0": ["997/1000", "3/1000"], "1": ["99/100", "1/100"]}
    path.write_text(json.dumps({"vocab_size": 2, "target": target, "draft": draft}))
    return str(path)


def test_predict_with_psbv_on_delayed_50_contains_the_exact_value(tmp_path, capsys, monkeypatch):
    problem = write_problem(tmp_path / "peaked.json")
    arguments = ["predict", "--problem", problem, "--tree", "delayed:50,1,1", "--verifier", "psbv", "--epsilon",
                 "0.1", "--json"]
    assert main(arguments) == 0
    result = json.loads(capsys.readouterr().out)
    # the exact engine's value: psbv's position-selection sum in rationals (no selection integral, no floats)
    exact = analyze(load_problem(problem, exact=True), "delayed:50,1,1", PositionSharingBlockVerifier())
    assert result["lower"] <= float(exact.block_efficiency) <= result["upper"] and result["width"] <= 0.1
    # negative control: the old selection integral stops the search on its first tree, as in the issue
    monkeypatch.setattr(psbv, "selection_probabilities", expanded_selection)
    assert main(arguments) == 2
    err = capsys.readouterr().err
    assert "not a probability law" in err and len(err.strip().splitlines()) == 1


def test_predict_at_100_paths_contains_the_exact_value_where_the_old_integral_certified_a_wrong_one(
        tmp_path, capsys, monkeypatch):
    problem = write_problem(tmp_path / "peaked.json")
    arguments = ["predict", "--problem", problem, "--tree", "delayed:100,1,1", "--verifier", "psbv", "--epsilon",
                 "0.1", "--json"]
    # the position-selection sum (the positions' lemma: no selection integral) gives the value to 1e-12
    value = float(analyze(load_problem(problem), "delayed:100,1,1", PositionSharingBlockVerifier()).block_efficiency)
    assert main(arguments) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["lower"] <= value <= result["upper"]
    # negative control: the old integral's laws pass the law check on every tree the search meets here, and the
    # interval it certifies misses the value (exit 0: a silent wrong answer)
    monkeypatch.setattr(psbv, "selection_probabilities", expanded_selection)
    assert main(arguments) == 0
    old = json.loads(capsys.readouterr().out)
    assert not old["lower"] <= value <= old["upper"]
