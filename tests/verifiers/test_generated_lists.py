"""The lists generated from the registry and the path of a new rule into it.

``verispec list`` and the verifier tables of README.md and docs/guides/verifiers.md come from the registry (a missing or
stale row fails here and in tests/test_generated_docs.py); rules with parameters go through one hook; ``register``
refuses what the lists cannot show;
and the worked example of docs/guides/writing_a_rule.md (a node-local rule in a temporary package plus its registry
line) is seen by the list, the tables, the registry-wide tests and a sweep, and found lossless."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

from tests.cli.test_readme import fenced_blocks
from tests.verifiers import test_registry_verifiers
from verispec.cli import main
from verispec.simulator import DraftLaw, analyze, parse_tree, random_problem
from verispec.verifiers import (
    LOSSY_BY_DESIGN,
    REGISTRY,
    TopDownVerifier,
    get_verifier,
    is_registered,
    register,
    takes_parameters,
)
from verispec.verifiers.catalog import verifier_table, with_tables
from verispec.verifiers.nss import NaiveSamplingSolver

ROOT = Path(__file__).resolve().parents[2]
GUIDE = (ROOT / "docs" / "guides" / "writing_a_rule.md").read_text()


def test_the_readme_table_is_the_registry_in_short():
    """The README's compact table (a generated block, checked for staleness with every other one by
    tests/test_generated_docs.py) has a row per registered rule, its summary and its tree kinds."""
    readme = (ROOT / "README.md").read_text()
    for name, verifier in REGISTRY.items():
        assert f"| `{name}` | {verifier.summary} |" in readme, name
    assert "| `typical` |" not in readme and "`typical` ([" in readme  # the lossy-by-design rules: one line after


def test_a_missing_or_stale_row_is_not_the_generated_text():
    text = (ROOT / "docs" / "guides" / "verifiers.md").read_text()
    row = next(line for line in text.splitlines() if line.startswith("| `specinfer` |"))
    assert with_tables(text) == text
    assert with_tables(text.replace(row + "\n", "")) == text
    assert with_tables(text.replace("recursive rejection sampling with replacement", "rejection sampling")) == text
    with pytest.raises(ValueError, match="missing"):
        with_tables("# a file without a generated table\n")
    with pytest.raises(ValueError, match="format"):
        verifier_table("html")


def test_list_shows_every_rule_with_its_summary_and_citation(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    for name, verifier in {**REGISTRY, **LOSSY_BY_DESIGN}.items():
        assert f"\n  {name:<12} " in out and f"      {verifier.summary} ({verifier.citation})\n" in out, name
    assert ("  typical      runs on every tree; typical(epsilon=E,alpha=A) sets its parameters "
            "(default 0.09, 0.3)") in out


def test_rules_with_parameters_go_through_one_hook():
    assert all(is_registered(name) for name in ("bv", "typical", "typical(epsilon=0.05)", "typical(eps=1)"))
    assert not any(is_registered(name) for name in ("my_rules.py:my_rule", "bv(x=1)", "typical[0.1]"))
    assert takes_parameters("typical(alpha=0.5)") and not takes_parameters("typical")
    assert not takes_parameters("specinfer(k=2)")  # specinfer names no parameters
    verifier = get_verifier("typical(alpha=0.5)")
    assert (verifier.epsilon, verifier.alpha, verifier.name) == (0.09, 0.5, "typical(epsilon=0.09,alpha=0.5)")


def test_register_refuses_what_the_lists_cannot_show():
    class Unsummarised(NaiveSamplingSolver):
        name, summary = "unsummarised", ""

    class Parenthesised(NaiveSamplingSolver):
        name = "nss(2)"

    before = (dict(REGISTRY), dict(LOSSY_BY_DESIGN))
    with pytest.raises(ValueError, match="taken"):
        register(NaiveSamplingSolver())
    with pytest.raises(ValueError, match="one-line summary"):
        register(Unsummarised())
    with pytest.raises(ValueError, match="name"):
        register(Parenthesised())
    with pytest.raises(TypeError, match="Verifier or a NodeSolver"):
        register(object())
    assert (REGISTRY, LOSSY_BY_DESIGN) == before


@pytest.fixture
def worked_example(tmp_path, monkeypatch):
    """The module of docs/guides/writing_a_rule.md in a temporary package, its registry line run; afterwards the
    registry and the import system as they were."""
    block = next(block for block in fenced_blocks(GUIDE, "python") if "class LastChildSolver" in block)
    line = next(line.strip() for line in GUIDE.splitlines() if line.strip().startswith("register(LastChildSolver"))
    package = tmp_path / "throwaway"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "lastchild.py").write_text(block)
    monkeypatch.syspath_prepend(str(tmp_path))
    saved = dict(REGISTRY)
    module = importlib.import_module("throwaway.lastchild")
    try:
        exec(line, {"register": register, "LastChildSolver": module.LastChildSolver})
        yield module
    finally:
        REGISTRY.clear()
        REGISTRY.update(saved)
        for name in ("throwaway.lastchild", "throwaway"):
            sys.modules.pop(name, None)


def test_the_worked_example_is_picked_up_everywhere(worked_example, tmp_path, capsys):
    from verispec.study.grid import SweepGrid
    from verispec.study.sweep import run_sweep

    assert "lastchild" in REGISTRY
    # verispec list, and every command by name
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "  lastchild    valid for: i.i.d. children\n      token-level rule on the last child (Leviathan" in out
    assert main(["exact", "--target", "0.5,0.3,0.2", "--draft", "0.2,0.2,0.6", "--tree", "delayed:2,1,2",
                 "--verifier", "lastchild", "--fail-if-lossy"]) == 0
    capsys.readouterr()
    # the generated table: its row, so the README is stale until the table is rewritten
    assert ("| `lastchild` | token-level rule on the last child (Leviathan et al. 2023, arXiv 2211.17192, Alg. 1, on "
            "one child (docs/guides/writing_a_rule.md)) | i.i.d. children (`chain:L`, `iid:K,L`, `delayed:K,L1,L2`, "
            "`branch-iid:b1,b2,...`) |") in verifier_table("markdown")
    guide = (ROOT / "docs" / "guides" / "verifiers.md").read_text()
    assert with_tables(guide) != guide
    assert "| `lastchild` | token-level rule on the last child |" in verifier_table("compact")
    # the registry-wide tests' parameters, and their bodies run on it: lossless, law == enumerated procedure
    specs = [spec for name, spec in test_registry_verifiers.valid_pairs() if name == "lastchild"]
    assert {"iid:2,2", "delayed:2,1,2", "branch-iid:2,1"} <= set(specs) and "branch:2,1" not in specs
    for spec in specs:
        test_registry_verifiers.test_lossless_and_procedure_matches_closed_form_on_one_problem("lastchild", spec)
    test_registry_verifiers.test_exact_rational_mode_is_exactly_lossless("lastchild")
    # a sweep over 'all' runs it where it is valid and skips it elsewhere
    rows = run_sweep(SweepGrid(trees=("iid:2,2", "branch:2,1"), verifiers=("all",)), tmp_path / "sweep.csv",
                     backend="serial", progress=False)
    mine = [row for row in rows if row["verifier"] == "lastchild"]
    assert [(row["tree"], row["lossless"]) for row in mine] == [("iid:2,2", True)]
    # the engine tells the claim apart: the same rule on draws without replacement is lossy
    problem = random_problem(3, 2, seed=0)
    assert analyze(problem, parse_tree("iid:3,2"), get_verifier("lastchild")).lossless

    class ClaimsWithoutReplacement(worked_example.LastChildSolver):
        valid_for = frozenset({DraftLaw.WITHOUT_REPLACEMENT})

    result = analyze(problem, parse_tree("branch:2,1"), TopDownVerifier(ClaimsWithoutReplacement()))
    assert not result.lossless and result.tv_distance > 1e-3


# ---- the rules Layer Verification lifts (lv:<base>), listed from the registry ----

#: Single-step rules of the registry (walked down the tree node by node), named here by hand from their modules:
#: lv must accept each. The whole-tree rules below it must refuse.
NODE_LOCAL = {"naivetree", "nss", "specinfer", "spectr", "otlp", "khisti", "globalres", "rrsw", "spechub", "greedy"}
WHOLE_TREE = {"bv", "gbv", "psbv", "traversal", "traversal-iid"}


def test_list_and_the_table_show_every_lifted_rule_with_its_draft_laws_and_citation(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    table = verifier_table("markdown")
    for base in NODE_LOCAL | {"naive"}:
        assert f"\n  lv:{base:<9} valid for: " in out and f"| `lv:{base}` | `{base}`" in table, base
    for base in WHOLE_TREE:
        assert f"lv:{base} " not in out and f"`lv:{base}`" not in table, base
    # a base's draft laws, written here from the rules' papers: SpecInfer's i.i.d. children, Sequoia's draws without
    # replacement, and naive sampling on every tree, DDTree's deterministic one among them
    assert "\n  lv:specinfer valid for: i.i.d. children\n" in out
    assert "| `lv:rrsw` | `rrsw` | children without replacement (`chain:L`, `branch:b1,b2,...`, `dyspec:N`) |" in table
    assert "| `lv:nss` | `nss` | any draft law (every tree kind) |" in table
    assert "one deterministic tree (no draws)" in out.split("\n  lv:nss")[1].splitlines()[0]
    for text in (out, table):
        assert "Cha, Cho & Yun 2026" in text and "OpenReview XrqcUo6B6L" in text and "reconstructed" in text


def test_negative_control_a_node_local_rule_registered_later_is_listed_lifted(worked_example, capsys):
    """The lists are read from the registry, not typed: the worked example's rule is listed lifted at once (and a
    list that did not read the registry would miss it)."""
    assert main(["list"]) == 0
    assert "\n  lv:lastchild valid for: i.i.d. children\n" in capsys.readouterr().out
    assert "| `lv:lastchild` | `lastchild` | i.i.d. children (" in verifier_table("markdown")


def test_negative_control_without_the_worked_example_no_lastchild_is_listed(capsys):
    assert main(["list"]) == 0
    assert "lv:lastchild" not in capsys.readouterr().out and "lv:lastchild" not in verifier_table("markdown")


def _lifted_tv_on_every_listed_kind(rule, examples, problem) -> dict:
    """{tree example: exact TV of ``rule``} on every example whose draft laws meet ``rule.valid_for``."""
    return {spec: analyze(problem, parse_tree(spec), rule).tv_distance for spec in examples
            if parse_tree(spec).draft_laws & rule.valid_for}


def test_every_lifted_rule_listed_is_lossless_in_rationals_on_every_tree_kind_it_is_listed_for():
    """What the list claims of each lv:<base> holds: exactly lossless on an example of every tree kind it is valid
    for (a context-dependent problem in rationals; ddtree:3,2 for the rules valid on every draft law)."""
    from tests.cli.test_cli import TREE_KIND_EXAMPLES
    from tests.verifiers.test_layer_verification import _problem
    from verispec.verifiers.catalog import lifted_rules

    problem = _problem(seed=3, size=3, depth=3)
    for rule in lifted_rules():
        distances = _lifted_tv_on_every_listed_kind(rule, TREE_KIND_EXAMPLES, problem)
        assert distances and all(distance == 0 for distance in distances.values()), (rule.name, distances)
    assert "ddtree:3,2" in _lifted_tv_on_every_listed_kind(get_verifier("lv:nss"), TREE_KIND_EXAMPLES, problem)


def test_negative_control_a_lifted_rule_listed_for_ddtree_without_being_valid_there_is_caught():
    """lv:specinfer claiming DDTree's deterministic law (min(1, p/q) on a tree q did not draw): the check above
    finds it lossy on ddtree:3,2."""
    from tests.verifiers.test_layer_verification import _problem
    from verispec.verifiers.layer import LayerVerifier

    rule = LayerVerifier(get_verifier("lv:specinfer").solver, "specinfer")
    rule.valid_for = rule.valid_for | {DraftLaw.DETERMINISTIC}
    distances = _lifted_tv_on_every_listed_kind(rule, ["ddtree:3,2"], _problem(seed=3, size=3, depth=3))
    assert distances["ddtree:3,2"] > 0


# ---- the prose lists of the guides: every tree kind and every module of the exact core named ----

def _unnamed_tree_kinds(guide: str) -> list[str]:
    """The forms of ``verispec.guard.limits.TREE_FORMS`` that the "Tree kinds:" paragraph of ``guide`` leaves out (a
    form
    with a list of parameters is named by its kind and a colon, as `branch:b1,..,bD`)."""
    from verispec.guard.limits import TREE_FORMS

    paragraph = guide.split("\nTree kinds: ", 1)[1].split("\n\n", 1)[0]
    return [form for form in TREE_FORMS if f"`{form.split(',...')[0].split(',')[0]}" not in paragraph]


def _unnamed_modules(layout: str) -> list[str]:
    """The modules of the simulator and the bounds (the exact core's engines and judges) that docs/guides/layout.md
    does not name."""
    return [f"{package}/{path.name}" for package in ("simulator", "bounds")
            for path in sorted((ROOT / "verispec" / package).glob("*.py"))
            if path.name != "__init__.py" and f"`{path.name}`" not in layout]


def test_the_guides_name_every_tree_kind_and_every_module_of_the_core():
    guide = (ROOT / "docs" / "guides" / "verifiers.md").read_text()
    layout = (ROOT / "docs" / "guides" / "layout.md").read_text()
    assert _unnamed_tree_kinds(guide) == [] and _unnamed_modules(layout) == []
    assert "`layer.py`" in layout and "`lv:<base>`" in layout  # Layer Verification's module, by its rules' name
    # negative controls: the guides as they were before DDTree was named in them
    assert _unnamed_tree_kinds(guide.replace("`ddtree:B,L`", "DDTree")) == ["ddtree:B,L"]
    assert _unnamed_modules(layout.replace("`ddtree.py`", "its module")) == ["simulator/ddtree.py"]


def test_list_shows_every_tree_kind_with_the_draft_law_its_drafts_follow(capsys):
    """Each kind's line names its drafts' laws (DDTree's: one deterministic tree), the words a rule's "valid for"
    line uses, so the list says where each rule runs."""
    from verispec.guard.limits import TREE_FORMS

    assert main(["list"]) == 0
    out = capsys.readouterr().out
    kinds = out.split("\ntree kinds (the draft laws their drafts follow):\n")[1].split("\nlayouts")[0]
    assert [line.split()[0] for line in kinds.splitlines()] == list(TREE_FORMS)
    assert "\n  ddtree:B,L            one deterministic tree (no draws)" in "\n" + kinds
    assert "\n  iid:K,L               i.i.d. children, i.i.d. paths from the root" in "\n" + kinds
    assert "\n  branch:b1,b2,...      children without replacement" in "\n" + kinds
