"""The verispec command: contract keys, human output, and one clear line on stderr for every bad input."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from fractions import Fraction

import pytest

from verispec.cli import main
from verispec.simulator import DraftLaw
from verispec.verifiers import REGISTRY

TOY = ["--target", "1/3,2/3", "--draft", "2/3,1/3"]


def run(capsys, *argv):
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_exact_json_contract(capsys):
    code, out, err = run(capsys, "exact", *TOY, "--tree", "chain:2", "--verifier", "bv", "--json")
    assert code == 0 and err == ""
    data = json.loads(out)
    assert data["block_efficiency"] == pytest.approx(20 / 9, abs=1e-12)  # Sun et al.: E[tau] = 11/9
    assert data["lossless"] is True and data["tv_distance"] < 1e-12
    assert data["tau_law"] == pytest.approx([3 / 9, 1 / 9, 5 / 9], abs=1e-12)


def test_exact_rational_json(capsys):
    code, out, _ = run(capsys, "exact", *TOY, "--tree", "chain:2", "--verifier", "naive", "--json", "--exact")
    data = json.loads(out)
    assert code == 0 and data["exact_values"]["expected_accepted"] == "10/9" and data["tv_distance"] == 0


def test_exact_human_output(capsys):
    code, out, _ = run(capsys, "exact", *TOY, "--tree", "chain:2", "--verifier", "naive", "--method", "enumerate")
    assert code == 0 and "block efficiency" in out and "lossless" in out


def test_problem_file(capsys, tmp_path):
    path = tmp_path / "problem.json"
    path.write_text(json.dumps({"vocab_size": 2, "target": {"": ["1/3", "2/3"], "0": [0.5, 0.5], "1": [1, 0]},
                                "draft": {"": [0.5, 0.5]}}))
    code, out, err = run(capsys, "exact", "--problem", str(path), "--tree", "chain:1", "--verifier", "bv", "--json")
    assert code == 0, err
    # one position: sum min(p, q) = 1/3 + 1/2
    assert json.loads(out)["block_efficiency"] == pytest.approx(1 + 1 / 3 + 1 / 2, abs=1e-12)


def test_fail_if_lossy_exit_code(capsys):
    code, _, _ = run(capsys, "exact", *TOY, "--tree", "chain:2", "--verifier", "bv", "--fail-if-lossy")
    assert code == 0


@pytest.mark.parametrize("argv,message", [
    (["exact", "--target", "0.5,0.6", "--draft", "0.5,0.5", "--tree", "chain:1", "--verifier", "bv"], "sum to"),
    (["exact", "--target", "1.5,-0.5", "--draft", "0.5,0.5", "--tree", "chain:1", "--verifier", "bv"], "negative"),
    (["exact", "--target", "nan,1", "--draft", "0.5,0.5", "--tree", "chain:1", "--verifier", "bv"], "NaN"),
    (["exact", "--target", "0.5,0.5", "--draft", "0.2,0.3,0.5", "--tree", "chain:1", "--verifier", "bv"], "--draft"),
    (["exact", *TOY, "--tree", "star:2", "--verifier", "bv"], "unknown tree kind"),
    (["exact", *TOY, "--tree", "chain:2", "--verifier", "nope"], "valid verifiers: " + ", ".join(sorted(REGISTRY))),
    (["exact", *TOY, "--tree", "iid:2,2", "--verifier", "naive"], "valid only for draft laws"),
    (["exact", "--target", "1/3,2/3", "--tree", "chain:2", "--verifier", "bv"], "give a problem"),
    (["exact", *TOY, "--problem", "x.json", "--tree", "chain:2", "--verifier", "bv"], "not both"),
    (["exact", "--problem", "/nonexistent/p.json", "--tree", "chain:2", "--verifier", "bv"], "cannot read"),
    (["exact", *TOY, "--tree", "chain:2"], "required"),
    (["exact", *TOY, "--tree", "chain:2", "--verifier", "bv", "--frobnicate"], "unrecognized"),
    (["compare", "--problem", "nonsense"], "unknown problem"),
    (["compare", "--depths", "1,x"], "--depths"),
    ([], "required"),
])
def test_bad_input_gives_one_line(capsys, argv, message):
    code, out, err = run(capsys, *argv)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("verispec: error:") and message in lines[0], err
    assert "Traceback" not in err


def test_problem_too_shallow_for_tree(capsys, tmp_path):
    path = tmp_path / "problem.json"
    path.write_text(json.dumps({"vocab_size": 2, "target": {"": [0.5, 0.5]}, "draft": {"": [0.5, 0.5]}}))
    code, _, err = run(capsys, "exact", "--problem", str(path), "--tree", "chain:2", "--verifier", "bv")
    assert code == 2 and "missing" in err and len(err.strip().splitlines()) == 1


def test_compare_table_and_json(capsys):
    code, out, _ = run(capsys, "compare", "--problem", "sun-toy", "--depths", "2", "--exact")
    assert code == 0
    rows = [line.split() for line in out.strip().splitlines()[2:]]
    values = {row[2]: row[3] for row in rows}
    assert values["naive"] == "19/9" and values["bv"] == "20/9"  # Sun et al.: E[tau] = 10/9 and 11/9
    code, out, _ = run(capsys, "compare", "--depths", "1,2", "--json")
    rows = [json.loads(line) for line in out.strip().splitlines()]
    chain_verifiers = [v for v in REGISTRY.values() if DraftLaw.SINGLE_PATH in v.valid_for]
    assert len(rows) == 2 * 2 * len(chain_verifiers) and all(row["lossless"] for row in rows)


def test_list(capsys):
    code, out, _ = run(capsys, "list")
    assert code == 0 and "naive" in out and "delayed:K,L1,L2" in out


def test_module_entry_point_has_no_traceback():
    completed = subprocess.run([sys.executable, "-m", "verispec", "exact", *TOY, "--tree", "chain:2",
                                "--verifier", "nope"], capture_output=True, text=True, timeout=120)
    assert completed.returncode == 2
    assert completed.stderr.count("\n") == 1 and "Traceback" not in completed.stderr
    completed = subprocess.run([sys.executable, "-m", "verispec", "exact", *TOY, "--tree", "chain:2",
                                "--verifier", "bv", "--json"], capture_output=True, text=True, timeout=120)
    assert completed.returncode == 0 and json.loads(completed.stdout)["lossless"] is True


@pytest.mark.skipif(shutil.which("verispec", path=os.path.dirname(sys.executable)) is None,
                    reason="the console script is installed only by 'pip install' (the README's commands)")
def test_installed_console_script():
    script = shutil.which("verispec", path=os.path.dirname(sys.executable))
    completed = subprocess.run([script, "exact", *TOY, "--tree", "chain:2", "--verifier", "naive", "--json"],
                               capture_output=True, text=True, timeout=120)
    assert completed.returncode == 0 and json.loads(completed.stdout)["block_efficiency"] == pytest.approx(19 / 9)


TREE_KIND_EXAMPLES = ["chain:2", "iid:2,2", "delayed:2,1,1", "branch:2,1", "branch-iid:2,1", "hub", "hub-tree:2",
                      "greedy:2", "greedy-tree:2,2", "dyspec:3", "argmax-chain:2", "topk-chain:2,2",
                      "ddtree:3,2"]


def test_every_tree_kind_has_an_example():
    from verispec.simulator.tree_specs import TREE_KINDS

    assert {spec.split(":")[0] for spec in TREE_KIND_EXAMPLES} == set(TREE_KINDS)


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_exact_accepts_every_verifier_on_every_valid_tree_kind(capsys, name):
    from verispec.simulator import parse_tree

    ran = 0
    for spec in TREE_KIND_EXAMPLES:
        if not parse_tree(spec).draft_laws & REGISTRY[name].valid_for:
            continue
        code, out, err = run(capsys, "exact", "--target", "0.5,0.3,0.2", "--draft", "0.2,0.3,0.5", "--tree", spec,
                             "--verifier", name, "--json")
        assert code == 0, err
        assert json.loads(out)["lossless"] is True
        ran += 1
    assert ran > 0


@pytest.mark.parametrize("verifier,method", [
    ("specinfer", "closed-form"), ("specinfer", "enumerate"), ("gbv", "fast-enumeration"), ("specinfer", "dp"),
    ("specinfer", "dp-metrics")])
def test_exact_human_output_for_every_method(capsys, verifier, method):
    code, out, err = run(capsys, "exact", *TOY, "--tree", "iid:2,2", "--verifier", verifier, "--method", method)
    assert code == 0, err
    assert f"method                     {method}" in out
    assert ("not checked" in out) == (method == "dp-metrics")


def test_compare_any_tree(capsys):
    code, out, _ = run(capsys, "compare", "--problem", "sun-toy", "--tree", "iid:2,1", "--json")
    rows = [json.loads(line) for line in out.strip().splitlines()]
    from verispec.simulator import parse_tree

    expected = {name for name, v in REGISTRY.items() if parse_tree("iid:2,1").draft_laws & v.valid_for}
    assert code == 0 and {row["verifier"] for row in rows} == expected and all(row["lossless"] for row in rows)
    # one position, two i.i.d. drafts on the toy: alpha* = 1 + min_T [p(T) - q(T)^2] = 1 + (1/3 - 4/9) = 8/9
    otlp = next(row for row in rows if row["verifier"] == "otlp")
    assert otlp["expected_accepted"] == pytest.approx(8 / 9, abs=1e-12)


# -------------------------------------------------------------------------------------------------
# Option values: refused with one line and status 2 before any work, or honoured


@pytest.mark.parametrize("argv,message", [
    (["exact", *TOY, "--tree", "chain:2", "--verifier", "bv", "--tolerance", "-1"], "--tolerance: must be a finite"),
    (["exact", *TOY, "--tree", "chain:2", "--verifier", "bv", "--tolerance", "nan"], "--tolerance: must be a finite"),
    (["exact", *TOY, "--tree", "chain:2", "--verifier", "bv", "--tolerance", "inf"], "--tolerance: must be a finite"),
    (["exact", *TOY, "--tree", "chain:2", "--verifier", "bv", "--tolerance", "x"], "--tolerance: must be a finite"),
    (["hunt", "--verifier", "bv", "--tree", "chain:1", "--threshold", "-1"], "--threshold: must be a finite"),
    (["hunt", "--verifier", "bv", "--tree", "chain:1", "--threshold", "nan"], "--threshold: must be a finite"),
    (["hunt", "--verifier", "bv", "--tree", "chain:1", "--time-budget", "0"], "--time-budget: must be a finite"),
    (["hunt", "--verifier", "bv", "--tree", "chain:1", "--time-budget", "-3"], "--time-budget: must be a finite"),
    (["hunt", "--verifier", "bv", "--tree", "chain:1", "--time-budget", "nan"], "--time-budget: must be a finite"),
    (["hunt", "--verifier", "bv", "--tree", "chain:1", "--max-examples", "0"], "--max-examples: must be an integer"),
    (["hunt", "--verifier", "bv", "--tree", "chain:1", "--max-vocab", "1"], "--max-vocab: must be an integer"),
    (["hunt", "--verifier", "bv", "--tree", "chain:1", "--max-vocab", "10000000000000000000000"],
     "--max-vocab: must be an integer from 2 to"),
    (["bound", *TOY, "--tree", "chain:2", "--max-variables", "0"], "--max-variables: must be an integer from 1 to"),
    (["bound", *TOY, "--tree", "chain:2", "--max-variables", "-5"], "--max-variables: must be an integer from 1 to"),
    (["optimum", *TOY, "--k", "0"], "--k: must be an integer"),
    (["hunt", "--verifier", "rrsw", "--tree", "branch:4", "--max-vocab", "3"], "use b <= 3 or branch-iid"),
    (["exact", "--target", "0.5,0.5", "--draft", "0.5,0.5", "--tree", "branch:2,3", "--verifier", "rrsw"],
     "branch:2,3 draws 3 siblings without replacement but the vocabulary has only 2 tokens; use b <= 2"),
    (["compare", "--problem", "sun-toy", "--tree", "branch:3"], "problem 'sun-toy': branch:3 draws 3 siblings"),
    (["bound", *TOY, "--tree", "branch:3"], "branch:3 draws 3 siblings"),
])
def test_bad_option_values_give_one_line(capsys, monkeypatch, argv, message):
    import verispec.hunt

    monkeypatch.setattr(verispec.hunt, "hunt", lambda *a, **k: pytest.fail("the search ran despite bad input"))
    code, out, err = run(capsys, *argv)
    lines = err.strip().splitlines()
    assert code == 2 and out == "" and len(lines) == 1 and message in lines[0], err


def _unwritable_outputs(tmp_path):
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    return {"directory": str(tmp_path), "under a file": str(a_file / "witness.json"),
            "under /proc": "/proc/verispec-no-such-process/witness.json"}


@pytest.mark.parametrize("case,message", [("directory", "is a directory"), ("under a file", "not a folder"),
                                          ("under /proc", "cannot be written")])
def test_hunt_refuses_an_unwritable_output_before_searching(capsys, monkeypatch, tmp_path, case, message):
    import verispec.hunt

    monkeypatch.setattr(verispec.hunt, "hunt", lambda *a, **k: pytest.fail("the search ran before the check"))
    output = _unwritable_outputs(tmp_path)[case]
    code, out, err = run(capsys, "hunt", "--verifier", "tests/support/broken.py:bv_first_failure", "--tree", "chain:2",
                         "--output", output)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and message in lines[0] and repr(output) in lines[0], err


def test_hunt_output_in_a_new_folder_is_written(capsys, tmp_path):
    path = tmp_path / "new" / "folder" / "witness.json"
    code, _, err = run(capsys, "hunt", "--verifier", "tests/support/broken.py:bv_first_failure", "--tree", "chain:2",
                       "--output", str(path))
    assert code == 1 and "LOSSY" in err, err
    assert json.loads(path.read_text())["vocab_size"] >= 2
    # no probe or temporary file left; the lock of the one writer stays (verispec.files.store_lock: removing it would
    # let a
    # third run lock a new file while a second still holds the old one)
    assert sorted(p.name for p in path.parent.iterdir()) == ["witness.json", "witness.json.lock"]


def test_hunt_always_says_how_many_problems_it_tried(capsys):
    import re

    code, out, err = run(capsys, "hunt", "--verifier", "bv", "--tree", "chain:1", "--max-examples", "20")
    counts = re.findall(r"all (\d+) canonical problems and (\d+) random problems", err)
    assert code == 3 and out == "" and len(counts) == 1 and 1 <= int(counts[0][1]) <= 20, err
    assert "INCONCLUSIVE" in err and "proves nothing" in err
    code, out, err = run(capsys, "hunt", "--verifier", "tests/support/broken.py:bv_first_failure", "--tree", "chain:2")
    counts = re.findall(r"after (\d+) problems", err)
    assert code == 1 and json.loads(out)["vocab_size"] >= 2 and len(counts) == 1 and int(counts[0]) >= 1, err


def test_version(capsys):
    from importlib import metadata

    code, out, err = run(capsys, "--version")
    assert code == 0 and err == "" and out == f"verispec {metadata.version('verispec')}\n"
    completed = subprocess.run([sys.executable, "-m", "verispec", "--version"], capture_output=True, text=True,
                               timeout=120)
    assert completed.returncode == 0 and completed.stdout == out


BIG_TREE = ["--target", "0.5,0.3,0.2", "--draft", "0.2,0.2,0.6", "--tree", "iid:2,14", "--verifier", "specinfer"]


@pytest.mark.parametrize("argv,message", [
    # 3^15 = 14,348,907 > 2^22 output-law entries: auto picks dp-metrics, which has no output law
    (BIG_TREE, "--method auto chose dp-metrics"),
    (["exact", *TOY, "--tree", "iid:2,2", "--verifier", "specinfer", "--method", "dp-metrics"], "--method dp-metrics"),
])
def test_fail_if_lossy_refuses_a_method_that_cannot_check_it(capsys, monkeypatch, argv, message):
    import verispec.simulator.engine

    monkeypatch.setattr(verispec.simulator.engine, "analyze", lambda *a, **k: pytest.fail("analysed although refused"))
    argv = argv if argv[0] == "exact" else ["exact", *argv]
    code, out, err = run(capsys, *argv, "--fail-if-lossy")
    lines = err.strip().splitlines()
    assert code == 2 and out == "" and len(lines) == 1, err
    assert message in lines[0] and "cannot be checked" in lines[0] and "--method dp" in lines[0]


def test_auto_says_when_losslessness_was_not_checked(capsys):
    code, out, err = run(capsys, "exact", *BIG_TREE)
    assert code == 0, err
    rows = dict(line.split(None, 1) for line in out.splitlines() if line.startswith(("method", "lossless")))
    assert rows["method"].startswith("dp-metrics (chosen by auto)") and "NOT checked" in rows["method"]
    assert rows["lossless"].startswith("not checked") and "dp-metrics keeps only the law of tau" in rows["lossless"]


# -------------------------------------------------------------------------------------------------
# --json output holds only plain JSON types


def _assert_plain(value, where="$"):
    assert type(value) in (dict, list, str, int, float, bool, type(None)), f"{where}: {type(value).__name__}"
    if type(value) is dict:
        for key, item in value.items():
            assert type(key) is str, f"{where}: key {key!r}"
            _assert_plain(item, f"{where}.{key}")
    elif type(value) is list:
        for index, item in enumerate(value):
            _assert_plain(item, f"{where}[{index}]")


@pytest.mark.parametrize("argv", [
    ["exact", *TOY, "--tree", "chain:2", "--verifier", "bv", "--json"],
    ["exact", *TOY, "--tree", "chain:2", "--verifier", "bv", "--json", "--exact"],
    ["exact", *TOY, "--tree", "iid:2,2", "--verifier", "gbv", "--json", "--method", "fast-enumeration"],
    ["exact", *TOY, "--tree", "iid:2,2", "--verifier", "specinfer", "--json", "--method", "dp"],
    ["exact", *TOY, "--tree", "iid:2,2", "--verifier", "specinfer", "--json", "--method", "dp-metrics"],
    ["compare", "--problem", "sun-toy", "--depths", "1,2", "--json"],
    ["compare", "--problem", "sun-toy", "--tree", "iid:2,1", "--json", "--exact"],
    ["optimum", "--target", "0.5,0.3,0.2", "--draft", "0.2,0.2,0.6", "--k", "2", "--json", "--lp"],
    ["optimum", "--target", "1/2,3/10,1/5", "--draft", "1/5,1/5,3/5", "--k", "2", "--json", "--exact",
     "--without-replacement"],
    ["bound", *TOY, "--tree", "chain:2", "--json"],
    ["bound", *TOY, "--tree", "iid:2,1", "--json", "--restriction", "selected-path"],
    ["hunt", "--verifier", "tests/support/broken.py:bv_first_failure", "--tree", "chain:2"],
])
def test_json_output_holds_only_plain_types(capsys, monkeypatch, argv):
    import types

    monkeypatch.setenv("VERISPEC_SUPERVISE", "0")  # the serialised values are recorded in this process

    from verispec.cli import common
    from verispec.cli.parser import COMMANDS

    serialised = []

    def checking_dumps(value, **kwargs):
        _assert_plain(value)
        serialised.append(value)
        return json.dumps(value, **kwargs)

    for module in {*COMMANDS.values(), common}:  # every module printing JSON
        if hasattr(module, "json"):
            monkeypatch.setattr(module, "json", types.SimpleNamespace(dumps=checking_dumps, loads=json.loads))
    code, out, err = run(capsys, *argv)
    assert code == (1 if argv[0] == "hunt" else 0), err  # hunt's witness: exit 1, lossy
    lines = out.strip().splitlines()
    assert len(serialised) == len(lines) >= 1
    for line, value in zip(lines, serialised):
        assert json.loads(line) == value


def test_plain_json_converts_numpy_and_fractions():
    import numpy as np

    from verispec.cli import plain_json

    data = plain_json({"a": np.float64(0.5), "b": np.int64(3), "c": np.array([1, 2]), "d": Fraction(1, 3),
                       "e": (np.bool_(True),), 4: frozenset({2, 1})})
    assert data == {"a": 0.5, "b": 3, "c": [1, 2], "d": "1/3", "e": [True], "4": [1, 2]}
    _assert_plain(data)


@pytest.mark.parametrize("command", [["exact", *TOY], ["hunt", "--max-examples", "5"]])
def test_a_failing_user_rule_is_one_line(capsys, tmp_path, command):
    rule = tmp_path / "rules.py"
    rule.write_text("def broken(tree, chooser):\n    return 0, 1 // 0\n")
    code, out, err = run(capsys, *command, "--tree", "chain:1", "--verifier", f"{rule}:broken")
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "raised ZeroDivisionError" in lines[0] and "Traceback" not in err, err


def test_help_imports_nothing_heavy():
    # start-up: --help builds every command's parser (each command module's top level: the standard library and
    # verispec's standard-library-only ground floor) without numpy, scipy, torch or the engine. Its CPU time is
    # 0.06 s on an idle box and reached 0.11 s on a loaded CI box (shared caches), so the bound is 0.3 s: a start-up
    # five times slower still fails, while the heavy imports themselves are caught by name above
    code = ("import resource, sys\nstart = resource.getrusage(resource.RUSAGE_SELF)\nfrom verispec import cli\n"
            "try:\n    cli.main(['--help'])\nexcept SystemExit:\n    pass\n"
            "end = resource.getrusage(resource.RUSAGE_SELF)\n"
            "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('numpy', 'scipy', 'torch', 'tqdm', "
            "'hypothesis', 'transformers') or m.startswith(('verispec.simulator', 'verispec.verifiers', "
            "'verispec.lp_analysis', 'verispec.bounds', 'verispec.models', 'verispec.selector', 'verispec.study', "
            "'verispec.external', 'verispec.hunt', 'verispec.report', 'verispec.sizes')))\n"
            "print('HEAVY', heavy)\n"
            "print('CPU', end.ru_utime - start.ru_utime + end.ru_stime - start.ru_stime)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "HEAVY []" in out, out[-300:]
    seconds = float(out.split("CPU")[1])
    assert seconds < 0.3, out[-300:]


def test_every_command_has_its_module():
    # the parser's commands are exactly the command table's, each a module with add_parser and run
    import argparse

    from verispec.cli.parser import COMMANDS, build_parser

    parser = build_parser()
    commands = next(action for action in parser._actions if isinstance(action, argparse._SubParsersAction))
    assert list(commands.choices) == list(COMMANDS)
    for module in COMMANDS.values():
        assert callable(module.add_parser) and callable(module.run)


@pytest.mark.parametrize("argv, light", [
    (["list"], ("scipy", "torch", "tqdm", "verispec.simulator.engine")),
    (["exact", "--target", "0.5,0.3,0.2", "--draft", "0.2,0.6,0.2", "--tree", "chain:2", "--verifier", "bv"],
     ("scipy", "torch", "array_api_compat.numpy")),
])
def test_a_command_imports_only_what_it_runs(argv, light):
    # start-up (issue 23): 'list' needs the verifiers, not the engine, tqdm, scipy or torch; a small exact analysis
    # needs the engine but not scipy, torch or array-api-compat's copy of numpy (0.1 s of imports)
    import subprocess
    import sys

    code = (f"import sys, io, contextlib\nfrom verispec import cli\nwith contextlib.redirect_stdout(io.StringIO()):"
            f"\n    assert cli.main({argv!r}) == 0\nprint('LOADED', sorted(m for m in {light!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "LOADED []" in out, out[-300:]


# --- the one latency option group (sweep, selector dataset, selector train) ---------------------------------------


def _latency(argv: list[str], default):
    from verispec.cli.options import latency_model
    from verispec.cli.parser import build_parser

    return latency_model(build_parser().parse_args(argv), default)


@pytest.mark.parametrize("prefix,default", [(["sweep"], 4.0), (["selector", "dataset", "--out", "d.npz"], 20.0)])
def test_per_node_means_one_thing_with_or_without_a_cost_ratio(prefix, default):
    """t_p(n) = C (1 + S (n - 1)) in draft steps: C from --cost-ratio, else the command's default ratio."""
    with_ratio = _latency([*prefix, "--cost-ratio", "8", "--per-node", "0.25"], default)
    assert with_ratio.draft_step == 1 and with_ratio.target_time(5) == pytest.approx(8 * (1 + 0.25 * 4), abs=1e-12)
    alone = _latency([*prefix, "--per-node", "0.5"], default)
    assert alone.target_time(3) == pytest.approx(default * (1 + 0.5 * 2), abs=1e-12)
    assert _latency(prefix, default).target_time(7) == pytest.approx(default, abs=1e-12)


def test_per_node_is_refused_where_it_would_be_ignored(tmp_path):
    from verispec.errors import VerispecError
    from verispec.latency import LatencyModel

    measured = LatencyModel(1.0, (1, 8), (3.0, 5.0))
    with pytest.raises(VerispecError, match="--per-node goes with --cost-ratio"):
        _latency(["sweep", "--latency", str(tmp_path / "l.json"), "--per-node", "0.5"], 4.0)
    with pytest.raises(VerispecError, match="either --latency FILE or --cost-ratio"):
        _latency(["sweep", "--latency", str(tmp_path / "l.json"), "--cost-ratio", "2"], 4.0)
    with pytest.raises(VerispecError, match="--per-node goes with --cost-ratio"):
        _latency(["selector", "train", "--dataset", "d.npz", "--out", "s.pt", "--per-node", "0.5"], measured)
    assert _latency(["selector", "train", "--dataset", "d.npz", "--out", "s.pt"], measured) is measured
