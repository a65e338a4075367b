"""The one-line refusals of issue 67, through the command line (exit 2, one line on stderr, no traceback), each with
its negative control: an ``lv`` base that is not a lossless single step (a whole-tree rule, a lifted rule, a lossy
one), a ``ddtree`` too large to enumerate (refused from its size before any tree is built), and a lossy rule put
inside ``all`` (refused by every command that runs the whole registry, not only ``sweep``)."""

from __future__ import annotations

import math

import pytest

from verispec.cli import main
from verispec.errors import ProblemTooLargeError, UnknownVerifierError
from verispec.simulator import ContextFreeProblem, parse_tree
from verispec.verifiers import LOSSY_BY_DESIGN, REGISTRY
from verispec.verifiers.layer import lifted

TOY = ["--target", "0.6,0.4", "--draft", "0.3,0.7"]


def _one_line_refusal(capsys, argv: list[str]) -> str:
    code = main(argv)
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "Traceback" not in captured.err, (code, captured.err)
    return lines[0]


@pytest.mark.parametrize("name,says", [
    ("lv:psbv", "verifies a whole draft tree, not a single step"),
    ("lv:gbv", "verifies a whole draft tree, not a single step"),
    ("lv:traversal-iid", "verifies a whole draft tree, not a single step"),
    ("lv:lv:globalres", "verifies a whole draft tree, not a single step"),
    ("lv:typical", "is lossy by design"), ("lv:fly(theta=0.2)", "is lossy by design")])
def test_an_lv_base_that_is_not_a_lossless_single_step_is_refused_on_one_line(name, says, capsys):
    line = _one_line_refusal(capsys, ["exact", *TOY, "--tree", "chain:2", "--verifier", name])
    assert says in line and repr(name) in line and "lv:globalres" in line  # the bad name, and what to give instead


def test_negative_control_a_lossy_base_read_without_the_lossy_rules_is_only_unknown():
    """The lossy-by-design names are what tells the refusal apart: without them lv:typical is an unknown base."""
    with pytest.raises(UnknownVerifierError, match="unknown base 'typical'"):
        lifted("lv:typical", REGISTRY)
    with pytest.raises(UnknownVerifierError, match="lossy by design"):
        lifted("lv:typical", REGISTRY, LOSSY_BY_DESIGN)


class WorkStarted(AssertionError):
    """The ddtree's tree was being built before its size was checked."""


def _sentinel(*_args, **_kwargs):
    raise WorkStarted("the ddtree was built before its size was checked")


@pytest.mark.parametrize("argv", [
    ["exact", *TOY, "--tree", "ddtree:1000000,30", "--verifier", "nss"],
    ["bound", *TOY, "--tree", "ddtree:1000000,30"],
    ["exact", *TOY, "--tree", "ddtree:150000,20", "--verifier", "nss"]])
def test_a_ddtree_too_large_to_enumerate_is_refused_on_one_line_before_it_is_built(argv, capsys, monkeypatch):
    from verispec.simulator import ddtree

    monkeypatch.setattr(ddtree, "best_first_paths", _sentinel)
    line = _one_line_refusal(capsys, argv)
    assert "ddtree:" in line and "drafted nodes, above the limit of 100,000" in line and "smaller budget B" in line


def test_negative_control_without_the_size_check_the_ddtree_is_built(monkeypatch):
    from verispec.simulator import ddtree

    monkeypatch.setattr(ddtree, "best_first_paths", _sentinel)
    monkeypatch.setattr(ddtree.DDTreeDrafter, "check_problem", lambda self, problem: None)
    with pytest.raises(WorkStarted):  # 150,000 nodes: an output law of 2^21 entries, which no other limit refuses
        main(["exact", *TOY, "--tree", "ddtree:150000,20", "--verifier", "nss"])


class EveryPrefixAState(ContextFreeProblem):
    """A draft whose every prefix is a state of its own (as a network's is): its marginals cost a state a prefix."""

    def state(self, prefix):
        return prefix

    def log_state_count(self, length: int) -> float:
        return length * math.log(self.vocab_size)


def test_a_ddtree_whose_marginals_need_too_many_states_is_refused_on_one_line():
    """ddtree:20,12 (depth 12): the marginals of 12 positions at V = 4 would visit 1 + 4 + .. + 4^11 = 5,592,405
    prefix states (over the limit of 1,000,000); of 3 positions, 21 (the control: accepted)."""
    problem = EveryPrefixAState([0.4, 0.3, 0.2, 0.1], [0.1, 0.2, 0.3, 0.4])
    with pytest.raises(ProblemTooLargeError, match="prefix states, above the limit of 1,000,000") as error:
        parse_tree("ddtree:20,12").check_problem(problem)
    assert "\n" not in str(error.value)
    parse_tree("ddtree:10,3").check_problem(problem)


@pytest.mark.parametrize("argv", [["sweep", "--trees", "chain:1", "--verifiers", "all", "--out", "{out}"],
                                  ["compare", "--depths", "1"], ["bound", *TOY, "--tree", "chain:1"]])
def test_a_lossy_rule_put_inside_all_is_refused_on_one_line_by_every_command_that_runs_all(argv, tmp_path, capsys,
                                                                                           monkeypatch):
    monkeypatch.setitem(REGISTRY, "fly", LOSSY_BY_DESIGN["fly"])
    line = _one_line_refusal(capsys, [part.replace("{out}", str(tmp_path / "rows.csv")) for part in argv])
    assert "'fly' is lossy by design and cannot be part of 'all'" in line
    assert not (tmp_path / "rows.csv").exists()


def test_negative_control_compare_without_the_check_runs_the_lossy_rule_as_if_lossless(monkeypatch, capsys):
    import verispec.verifiers

    monkeypatch.setitem(REGISTRY, "fly", LOSSY_BY_DESIGN["fly"])
    monkeypatch.setattr(verispec.verifiers, "lossless_rules", lambda: sorted(REGISTRY))
    code = main(["compare", "--depths", "1"])
    assert code != 2 and " fly " in capsys.readouterr().out


@pytest.mark.parametrize("name", ["lv:naive", "typical", "fly(theta=0.2)"])
def test_verispecs_own_rules_outside_the_registry_get_no_default_budget_for_a_users_rule(name, monkeypatch, capsys):
    """A rule of the user's own runs under a default --time-budget (its code may hang); lv:<base> and the lossy
    rules are verispec's: with that default cut to a nanosecond, they still run to the end (exit 0 or 1)."""
    from verispec import cli

    monkeypatch.setattr(cli.options, "DEFAULT_USER_RULE_BUDGET", 1e-9)
    code = main(["exact", *TOY, "--tree", "chain:2", "--verifier", name])
    assert code in (0, 1) and "rule of your own" not in capsys.readouterr().err


def test_negative_control_read_as_a_users_rule_lv_naive_runs_out_of_the_default_budget(monkeypatch, capsys):
    """The old test (a name outside REGISTRY is the user's) gives lv:naive the default budget, and it stops."""
    from verispec import cli

    monkeypatch.setattr(cli.options, "DEFAULT_USER_RULE_BUDGET", 1e-9)
    monkeypatch.setattr(cli.options, "_is_registered", lambda name: name in REGISTRY)
    assert main(["exact", *TOY, "--tree", "chain:2", "--verifier", "lv:naive"]) == 3
    assert "the default for a rule of your own" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["lv:" + "x" * 100_000, "y" * 100_000])
def test_a_huge_name_is_cut_in_the_middle_of_one_readable_line(capsys, name):
    """A 100,000-character rule name echoed back was a 200 KB line: the line keeps its start and its end, where the
    fix is named, and says how much it left out."""
    from verispec.cli import MAX_ERROR_LINE

    line = _one_line_refusal(capsys, ["exact", *TOY, "--tree", "chain:1", "--verifier", name])
    assert len(line) <= MAX_ERROR_LINE + 60 and "characters left out" in line
    assert line.startswith("verispec: error: ")
    if name.startswith("lv:"):
        assert "lv lifts a single-step rule: lv:" in line[-MAX_ERROR_LINE // 4:]  # the end, naming the fix
