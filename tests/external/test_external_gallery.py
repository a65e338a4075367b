"""The gallery of examples/external/: every re-implemented public bug is caught with a witness, every correct
version passes, and the correct versions have the built-in verifiers' laws (a second algorithm).

Exact mode where the rule compares uniforms with thresholds; black-box mode (false-failure rate 1e-6) for the
vLLM-layout functions, whose recovered tokens come from an exponential race between uniforms.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from verispec.cli import main
from verispec.external.adapter import ExternalVerifier, load_function
from verispec.external.check import check_external
from verispec.simulator.engine import analyze
from verispec.simulator.generators import random_problem
from verispec.simulator.problem_files import problem_from_json
from verispec.simulator.problems import ContextFreeProblem
from verispec.simulator.tree_specs import parse_tree
from verispec.simulator.trees import TreeBatch
from verispec.verdict import Verdict
from verispec.verifiers import get_verifier

GALLERY = Path(__file__).resolve().parents[2] / "examples" / "external"

#: The gallery's catalogue: each function with its layout, tree, array kind, whether it is lossless (from the
#: rule it re-implements) and the mode auto takes on it (exact, or black-box where uniforms race).
CATALOGUE = json.loads((GALLERY / "gallery.json").read_text())
BUGS = [(c["function"], c["layout"], c["tree"], c["arrays"], c["mode"]) for c in CATALOGUE if not c["lossless"]]
CORRECT = [(c["function"], c["layout"], c["tree"], c["arrays"], c["mode"]) for c in CATALOGUE if c["lossless"]]


def test_the_catalogue_lists_every_gallery_function():
    import ast

    listed = {c["function"] for c in CATALOGUE}
    for path in GALLERY.glob("*.py"):
        public = set()
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.FunctionDef):
                public.add(node.name)
            elif isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):  # an alias, not a constant
                if not node.targets[0].id.isupper():
                    public.add(node.targets[0].id)
        public = {name for name in public if not name.startswith("_")}
        assert {f"{path.name}:{name}" for name in public} <= listed, path.name
    assert len(BUGS) == 7


def _function(spec: str):
    return load_function(str(GALLERY / spec))


def _options(spec: str) -> dict:
    """The catalogue's verifier options for ``spec`` (``rng``: 'capture' for functions that draw their own)."""
    entry = next(c for c in CATALOGUE if c["function"] == spec)
    return {"rng": entry["rng"]} if "rng" in entry else {}


def _arrays(arrays: str) -> str:
    if arrays == "torch":
        pytest.importorskip("torch")
    return arrays


@pytest.mark.parametrize("spec,layout,tree,arrays,mode", BUGS, ids=[case[0] for case in BUGS])
def test_every_gallery_bug_is_caught_with_a_witness(spec, layout, tree, arrays, mode):
    report = check_external(_function(spec), layout, tree, arrays=_arrays(arrays), name=spec, time_budget=60,
                            **_options(spec))
    assert report.verdict is Verdict.LOSSY and report.mode == mode and report.problem_source == "search"
    assert (report.tv_distance if mode == "exact" else report.tv_estimate) > 1e-3
    assert report.problem["vocab_size"] <= 3
    if mode == "blackbox":
        assert report.blackbox.rejected and report.blackbox.alpha == 1e-6 and "confirmed" in report.note
    # the witness reproduces on its own, as a given problem
    again = check_external(_function(spec), layout, tree, arrays=arrays, problem=problem_from_json(report.problem),
                           mode=mode, seed=7, **_options(spec))
    assert not again.lossless
    if mode == "blackbox":  # the plain multinomial test agrees
        plain = check_external(_function(spec), layout, tree, arrays=arrays,
                               problem=problem_from_json(report.problem), mode=mode, test="binomial", **_options(spec))
        assert not plain.lossless and plain.blackbox.test == "binomial"


@pytest.mark.parametrize("spec,layout,tree,arrays,mode", CORRECT, ids=[case[0] for case in CORRECT])
def test_every_correct_gallery_version_passes(spec, layout, tree, arrays, mode):
    function = _function(spec)
    depth = parse_tree(tree).depth
    # a residual with two tokens, where the vLLM layout's exponential race makes exact mode refuse
    problems = [ContextFreeProblem([0.5, 0.3, 0.2], [0.2, 0.2, 0.6]), random_problem(3, depth, 0),
                random_problem(4, depth, 1)]
    for index, problem in enumerate(problems):
        report = check_external(function, layout, tree, arrays=_arrays(arrays), problem=problem, detect_tv=0.02,
                                **_options(spec))
        assert report.verdict is Verdict.LOSSLESS
        # auto mode integrates exactly wherever the function is of threshold form on this problem (the race is
        # trivial when a residual has one token), else it tests as a black box
        assert report.mode == mode or (index > 0 and mode == "blackbox")
        if report.mode == "exact":
            assert report.tv_distance < 1e-12
        else:  # fails with probability <= 1e-6, and would have caught a TV of 0.02 with probability >= 0.99
            assert not report.blackbox.rejected and report.blackbox.detectable_tv <= 0.02
    searched = check_external(function, layout, tree, arrays=arrays, max_examples=15, suite="canonical",
                              detect_tv=0.05, **_options(spec))
    assert searched.verdict is Verdict.LOSSLESS and searched.problem_source == "none"


@pytest.mark.parametrize("spec,layout,tree,builtin", [
    ("greedy_assistant.py:verify_sampled", "chain", "chain:3", "naive"),
    ("block_verification.py:verify", "chain", "chain:3", "bv"),
    ("tree_specinfer.py:verify", "tree-parent", "iid:2,2", "specinfer"),
    ("tree_specinfer.py:verify_sibling", "tree-sibling", "delayed:2,1,1", "specinfer"),
    ("best_of_k.py:verify", "tree-parent", "iid:3,1", "gbv"),
])
def test_correct_versions_have_the_builtin_law_on_every_draft_tree(spec, layout, tree, builtin):
    problem = random_problem(3, parse_tree(tree).depth, 11)
    external, reference = ExternalVerifier(_function(spec), layout), get_verifier(builtin)
    trees = [draft_tree for draft_tree, _ in parse_tree(tree).outcomes(problem)]
    compared = 0
    for batch, _ in TreeBatch.of_trees(trees):
        # where i.i.d. paths share a prefix, verispec merges them into one node whose walk continues with every
        # copy's continuation, while the tree layouts hand the function the drawn paths as separate branches: two
        # different (both lossless) rules, compared below; the laws are compared where no repeated child has children
        repeated = {child for children in batch.child_lists for child in children if children.count(child) > 1}
        if any(batch.child_lists[child] for child in repeated):
            continue
        assert np.abs(external.emission_laws(batch) - reference.emission_laws(batch)).max() < 1e-12
        compared += batch.num_rows
    assert compared >= len(trees) // 2


def test_merged_and_separate_duplicate_paths_are_both_lossless_and_merging_accepts_more():
    """Given that the walk accepted a token drawn by both root paths, the merged node tests both continuations
    and the separate branch only one; SpecInfer's acceptance 1 - prod_j (1 - beta_j) grows with the number of
    i.i.d. drafts, so merging can only accept more (strictly here, where some root draws agree)."""
    problem = random_problem(3, 2, 11)
    external = analyze(problem, "iid:2,2", ExternalVerifier(_function("tree_specinfer.py:verify"), "tree-parent"))
    merged = analyze(problem, "iid:2,2", get_verifier("specinfer"))
    assert external.tv_distance < 1e-12 and merged.tv_distance < 1e-12
    assert merged.block_efficiency > external.block_efficiency + 1e-3


def test_point_mass_rule_under_greedy_drafts_has_the_closed_form_efficiency():
    """Greedy drafts x_1, x_2 (argmax of q); the point-mass rule accepts each with probability p(x_i | x_<i), so
    E[tau + 1] = 1 + p(x_1) + p(x_1) p(x_2 | x_1)."""
    problem = random_problem(3, 2, 4)
    first = int(np.argmax(problem.draft(())))
    second = int(np.argmax(problem.draft((first,))))
    expected = 1 + problem.target(())[first] * (1 + problem.target((first,))[second])
    result = analyze(problem, "argmax-chain:2", ExternalVerifier(_function("greedy_assistant.py:verify_point_mass"),
                                                                  "chain"))
    assert result.tv_distance < 1e-12 and abs(result.block_efficiency - expected) < 1e-12


def test_sun_toy_block_efficiency():
    """Sun et al. 2024's toy (p = (1/3, 2/3), q = (2/3, 1/3), L = 2): E[tau] = 11/9 for block verification and
    10/9 token by token."""
    problem = ContextFreeProblem([1 / 3, 2 / 3], [2 / 3, 1 / 3])
    block = analyze(problem, "chain:2", ExternalVerifier(_function("block_verification.py:verify"), "chain"))
    token = analyze(problem, "chain:2", ExternalVerifier(_function("greedy_assistant.py:verify_sampled"), "chain"))
    assert abs(block.expected_accepted - 11 / 9) < 1e-12 and abs(token.expected_accepted - 10 / 9) < 1e-12


def test_command_line_exit_status_json_and_witness_file(tmp_path, capsys):
    bug = str(GALLERY / "block_verification.py:verify_target_off_by_one")
    witness = tmp_path / "witness.json"
    assert main(["check-external", bug, "--layout", "chain", "--tree", "chain:2", "--output", str(witness),
                 "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["lossless"] is False and data["mode"] == "exact"
    assert data["problem"] == _without_marker(json.loads(witness.read_text()))
    assert main(["check-external", bug, "--layout", "chain", "--tree", "chain:2", "--problem", str(witness)]) == 1
    assert "LOSSY" in capsys.readouterr().out
    good = str(GALLERY / "block_verification.py:verify")
    assert main(["check-external", good, "--layout", "chain", "--tree", "chain:2", "--target", "0.5,0.3,0.2",
                 "--draft", "0.2,0.2,0.6"]) == 0
    assert "LOSSLESS" in capsys.readouterr().out
    assert main(["check-external", good, "--layout", "ragged", "--tree", "chain:2", "--target", "0.5,0.5",
                 "--draft", "0.5,0.5"]) == 2  # a chain function cannot take the ragged layout's arguments
    assert "cannot take the 7 arguments" in capsys.readouterr().err
    assert main(["check-external", good, "--layout", "chain", "--tree", "chain:2", "--alpha", "2"]) == 2


def _without_marker(problem: dict) -> dict:
    """The witness file's problem without the ``written_by`` marker the writer adds (the report's copy has none)."""
    assert problem.pop("written_by")["tool"] == "verispec"
    return problem
