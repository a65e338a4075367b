"""`verispec predict --json` on the whole-tree search (a rule without a node solver, or a tree the walk does not
take): the interval's bounds are numpy floats there (the explored mass sums numpy weights), so `reached` was a numpy
bool and `json.dumps` stopped with a traceback on every such run (found checking issue 64's psbv case)."""

from __future__ import annotations

import json

import pytest

from verispec.cli import main
from verispec.simulator import analyze, certified, load_problem
from verispec.verifiers import REGISTRY

EXAMPLE = "examples/problem.json"
ARGUMENTS = ["predict", "--problem", EXAMPLE, "--tree", "chain:2", "--verifier", "bv", "--epsilon", "0.01", "--json"]


def test_predict_json_on_the_whole_tree_search_is_one_json_object(capsys):
    assert main(ARGUMENTS) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["method"] == "certified whole trees" and result["reached"] is True
    exact = analyze(load_problem(EXAMPLE, exact=True), "chain:2", REGISTRY["bv"]).block_efficiency  # rationals
    assert result["lower"] <= float(exact) <= result["upper"] and result["width"] <= 0.01


def test_negative_control_a_numpy_bool_in_the_result_is_not_json(monkeypatch):
    # the old property returned the numpy comparison as it was
    monkeypatch.setattr(certified.CertifiedResult, "reached",
                        property(lambda self: self.width <= self.epsilon))
    with pytest.raises(TypeError, match="not JSON serializable"):
        main(ARGUMENTS)
