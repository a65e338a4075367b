"""Every command and example of the README runs as written.

The README is parsed generically: every ``verispec ...`` line of its fenced bash blocks (optional parts
written ``[--flag]`` dropped; set-up lines that create the virtual environment or install skipped) runs
through ``verispec.cli.main`` from a copy of ``examples/``, where its files (``problem.json``,
``my_rules.py``) live; every Python block is executed (the one that defines ``my_rule`` must print that
it is lossless); ``examples/my_rules.py`` must hold the README's ``my_rule`` verbatim.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
from pathlib import Path

import pytest

from verispec.cli import main
from verispec.simulator import load_problem, problem_from_json

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
EXAMPLES = ROOT / "examples"

#: The guides the README links to: their commands and Python blocks run like the README's.
GUIDES = ("verifiers", "exact_engine", "cli", "real_models", "sweeps_and_report", "selector", "rules_2025_26",
          "verifier_classes", "writing_a_rule", "check_external", "experiments", "layout")
GUIDE_TEXTS = {name: (ROOT / "docs" / "guides" / f"{name}.md").read_text() for name in GUIDES}
#: The README and its guides, one text (each document's blocks in turn).
DOCUMENTS = "\n".join([README, *GUIDE_TEXTS.values()])


def fenced_blocks(text: str, language: str) -> list[str]:
    """The bodies of the ```language fenced blocks of a markdown text."""
    return [match.group(1) for match in re.finditer(rf"^```{language}[ \t]*\n(.*?)^```", text, re.M | re.S)]


def readme_commands(text: str = DOCUMENTS) -> list[list[str]]:
    """argv (without the program name) of every 'verispec ...' line in the README's bash blocks."""
    commands = []
    for block in fenced_blocks(text, "bash"):
        for line in block.replace("\\\n", " ").splitlines():
            if "pip install" in line or "-m venv" in line:  # set-up lines
                continue
            words = shlex.split(re.sub(r"\s*\[[^\]]*\]", "", line), comments=True)
            if words and Path(words[0]).name == "verispec":
                commands.append(words[1:])
    return commands


#: The delay selector's steps build on each other's files (dataset, then train, then evaluate): they run in order
#: in one folder (``test_the_readme_selector_steps_run_in_order``); every other command runs alone, once (a command
#: the README and a guide both show, word for word, is one test).
SELECTOR_COMMANDS = [argv for argv in readme_commands() if argv[0] == "selector"]
COMMANDS = [list(argv) for argv in dict.fromkeys(tuple(argv) for argv in readme_commands() if argv[0] != "selector")]


def test_the_readme_parser_finds_the_commands():
    assert len(COMMANDS) >= 5 and {argv[0] for argv in COMMANDS} >= {"exact", "compare", "hunt"}
    sample = "```bash\nverispec optimum --k 2 [--without-replacement] --json  # alpha*\n" \
             "python3 -m venv .venv && .venv/bin/pip install -e . && .venv/bin/verispec compare\n```\n"
    assert readme_commands(sample) == [["optimum", "--k", "2", "--json"]]


def _slow(argv) -> bool:
    """Commands that take over a few seconds here (a search, a comparison on the random problem)."""
    return _searches(argv) or (argv[0] == "compare" and "random" in argv)


def _searches(argv) -> bool:
    """A witness search: 'hunt', or 'check-external' without a problem."""
    return argv[0] == "hunt" or (argv[0] == "check-external" and "--problem" not in argv and "--target" not in argv)


def _budgeted(argv) -> list[str]:
    """The command as run here: a search gets --max-examples 3 (the canonical suite, then three random problems) in
    place of its default 300 to 3,000 random problems in up to 60 s. The README's words still parse and run as
    written; what the search then finds is its verdict on the canonical suite (every gallery bug there has a
    witness in it), and the random search past it is tested in tests/verifiers/test_negative_controls.py and
    tests/simulator/test_verdicts.py."""
    return [*argv, "--max-examples", "3"] if _searches(argv) and "--max-examples" not in argv else list(argv)


def _needs_models(argv) -> bool:
    """Commands of real decoding: they run on a tiny pair installed where the real one would be."""
    return argv[0] in ("decode", "models", "derive", "latency") or (argv[0] == "predict" and "--pair" in argv)


@pytest.fixture(scope="module")
def tiny_installed_pair(tmp_path_factory):
    """A tiny pair in place of the installed qwen-coder pair (nothing is downloaded; seconds)."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from tests.support.tiny_models import install_tiny_pair_as

    cache = tmp_path_factory.mktemp("verispec-cache")
    return cache, install_tiny_pair_as(cache)


@pytest.fixture
def models_if_needed(request, monkeypatch):
    """For README commands and blocks that use real models: the tiny installed pair; else nothing."""
    cache, directories = request.getfixturevalue("tiny_installed_pair")
    monkeypatch.setenv("VERISPEC_CACHE", str(cache))
    return directories


@pytest.mark.parametrize("argv", [pytest.param(argv, marks=[pytest.mark.slow] if _slow(argv) else [])
                                  for argv in COMMANDS], ids=[" ".join(argv)[:60] for argv in COMMANDS])
def test_readme_command_runs(argv, tmp_path, monkeypatch, capsys, request):
    workdir = tmp_path / "examples"
    shutil.copytree(EXAMPLES, workdir)
    monkeypatch.chdir(workdir)
    if _needs_models(argv):
        for role, directory in zip(("target", "draft"), request.getfixturevalue("models_if_needed")):
            shutil.copytree(directory, workdir / f"{role}-model")
    code = main(_budgeted(argv))
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    if argv[0] == "hunt":  # 1: a witness (lossy); 3: none found (inconclusive), the answer for a lossless rule
        assert code in (1, 3), err
        assert "problems" in err
        if code == 1 and "--output" in argv:
            load_problem(workdir / argv[argv.index("--output") + 1], exact=True)
    elif argv[0] == "check-external":  # the exit status is the verdict's; the gallery's bugs are lossy
        verdict = json.loads(out)["verdict"] if "--json" in argv else out.split(": ", 1)[1].split()[0].lower()
        assert code == {"lossless": 0, "lossy": 1, "inconclusive": 3, "raises": 4}[verdict], err
        catalogue = json.loads((EXAMPLES / "external" / "gallery.json").read_text())
        assert (argv[1] in {f"external/{c['function']}" for c in catalogue if not c["lossless"]}) == (code == 1)
    else:
        assert code == 0, err
    if "--json" in argv:
        for line in out.strip().splitlines():
            json.loads(line)


def _python_example() -> str:
    blocks = [block for block in fenced_blocks(README, "python") if "def my_rule" in block]
    assert len(blocks) == 1, "the README should have one Python block defining my_rule"
    return blocks[0]


def _function_source(text: str, name: str) -> str:
    """The lines of 'def name' up to the next line that is not indented (blank lines at its end dropped)."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"def {name}("))
    end = next((i for i in range(start + 1, len(lines)) if lines[i].strip() and not lines[i][0].isspace()),
               len(lines))
    return "\n".join(lines[start:end]).rstrip()


def test_readme_python_example_prints_lossless(capsys):
    exec(compile(_python_example(), "README.md", "exec"), {"__name__": "readme_example"})
    assert capsys.readouterr().out.split()[0] == "True"


@pytest.mark.parametrize("index", range(len(fenced_blocks(DOCUMENTS, "python"))))
def test_every_readme_python_block_runs(index, capsys, request):
    block = fenced_blocks(DOCUMENTS, "python")[index]
    if "import torch" in block:
        pytest.importorskip("torch")
    if "verispec.models" in block:
        request.getfixturevalue("models_if_needed")
    exec(compile(block, "README.md", "exec"), {"__name__": f"readme_block_{index}"})
    assert capsys.readouterr().out.strip() != "" or "print(" not in block


def test_examples_my_rules_is_the_readme_rule():
    assert _function_source((EXAMPLES / "my_rules.py").read_text(), "my_rule") == \
        _function_source(_python_example(), "my_rule")


def test_examples_my_class_is_the_readme_class():
    block = next(block for block in fenced_blocks(DOCUMENTS, "python") if "def shallow_off_path" in block)
    assert _function_source((EXAMPLES / "my_class.py").read_text(), "shallow_off_path") == \
        _function_source(block, "shallow_off_path")


def test_the_readme_is_a_front_page_that_links_every_guide():
    assert len(README.splitlines()) <= 250
    for name in GUIDES:
        assert f"docs/guides/{name}.md" in README, name


def test_readme_problem_files_are_valid():
    blocks = [json.loads(block) for block in fenced_blocks(DOCUMENTS, "json")]
    problems = [block for block in blocks if isinstance(block, dict) and "vocab_size" in block]
    assert problems
    for data in problems:
        assert problem_from_json(data, exact=True).horizon >= 1
    assert load_problem(EXAMPLES / "problem.json", exact=True).horizon == 3


def test_the_readme_selector_steps_run_in_order(tmp_path, monkeypatch, capsys):
    pytest.importorskip("torch")
    assert [argv[1] for argv in SELECTOR_COMMANDS] == ["dataset", "train", "train", "evaluate", "study"]
    workdir = tmp_path / "examples"
    shutil.copytree(EXAMPLES, workdir)
    monkeypatch.chdir(workdir)
    for argv in SELECTOR_COMMANDS:
        code = main(list(argv))
        _, err = capsys.readouterr()
        assert code == 0 and "Traceback" not in err, f"{' '.join(argv)}: {err}"
