"""The prompts a pair's selector dataset traces: the named sets and files ``--prompts`` accepts
(``read_prompt_specs``), among them verispec's 12 hand-written English prose prompts (``prose_small_prompts``).

Why those 12 ship inside the package (``verispec/selector/prompts/prose_small.txt``, package data read with
``importlib.resources``): ``--prompts prose-small`` must name the same texts wherever verispec is installed, not
only in a checkout, since a dataset's traces, roots and split are keyed on them."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from verispec.errors import VerispecError
from verispec.guard.limits import MAX_PROMPTS_FILE_BYTES

#: The small prose set, package data of ``verispec.selector`` (one prompt per line).
PROSE_SMALL = ("prompts", "prose_small.txt")


def prose_small_prompts() -> list[tuple[str, str]]:
    """verispec's 12 hand-written prose prompts as (group, text), groups 'prose:i' as when they were the ``prose``
    set, so traces and splits of datasets built then are the same."""
    text = resources.files("verispec.selector").joinpath(*PROSE_SMALL).read_text(encoding="utf-8")
    return [(f"prose:{index}", line) for index, line in enumerate(_lines(text))]


def read_prompt_specs(specs: list[str] | None) -> list[tuple[str, str]]:
    """(group name, prompt text) for each prompt of the --prompts specs, in order: ``humaneval`` (the 164 HumanEval
    prompts, groups their task ids) or ``humaneval:N`` (the first N); ``prose`` or ``prose:N`` (the English prose of
    ``verispec.models.prompts.prose_prompts``, cut from Python's own documentation, groups 'prose:SOURCE#i');
    ``prose-small`` or ``prose-small:N`` (``prose_small_prompts``); or FILE (one prompt per line, groups
    'NAME:i'). A count beyond its set is refused with the set's size."""
    from verispec.files.io import read_user_file
    from verispec.models.prompts import humaneval_prompts, prose_prompts

    if not specs:
        raise VerispecError("give the prompts of the traces: --prompts humaneval[:N], prose[:N], prose-small[:N] or "
                            "FILE")
    sets = {"humaneval": humaneval_prompts, "prose": prose_prompts, "prose-small": prose_small_prompts}
    prompts: list[tuple[str, str]] = []
    for spec in specs:
        name, colon, text = spec.partition(":")
        if name not in sets:
            path = Path(spec)
            text = read_user_file(path, limit=MAX_PROMPTS_FILE_BYTES, what="--prompts",
                                  why="a prompts file is text, one per line")
            prompts += [(f"{path.name}:{index}", line) for index, line in enumerate(_lines(text))]
            continue
        if colon and (not (text.isascii() and text.isdigit()) or int(text[:19]) < 1):  # 19 digits: beyond any set
            raise VerispecError(f"--prompts {spec[:40]!r}: give {name}:N with N a positive integer (or {name} for "
                                "all)")
        found = sets[name]()
        count = int(text[:19]) if colon else len(found)
        if count > len(found):  # refused rather than silently cut
            raise VerispecError(f"--prompts {spec[:40]!r} asks for {count:,} prompts but {name} holds {len(found)}; "
                                f"give {name}:N with N <= {len(found)}, or {name} for all")
        prompts += found[:count]
    if not prompts:
        raise VerispecError(f"--prompts {', '.join(specs)} holds no prompt; give at least one non-empty line")
    return prompts


def _lines(text: str) -> list[str]:
    """The non-empty lines of a prompts file, stripped: one prompt each."""
    return [line.strip() for line in text.splitlines() if line.strip()]


__all__ = ["PROSE_SMALL", "prose_small_prompts", "read_prompt_specs"]
