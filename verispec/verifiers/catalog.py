"""The registry as text: ``verispec list``'s verifier lines and the verifier tables of the README and
docs/guides/verifiers.md, generated from ``REGISTRY`` and ``LOSSY_BY_DESIGN`` (each rule's name, one-line ``summary``,
``citation``, the draft laws it is valid for and the tree kinds whose drafts follow them), and the rules Layer
Verification lifts from them (``lv:<base>`` for each single-step base, ``verispec.verifiers.layer``).

The tables sit in their files between ``TABLE_START`` and ``TABLE_END``; ``with_tables`` rewrites that region,
``docs/generate.py`` applies it to the files, and a test fails when a file's region is not the text
generated now (a rule missing, renamed or described differently)."""

from __future__ import annotations

from verispec.guard.limits import TREE_FORMS
from verispec.simulator.drafters import DraftLaw
from verispec.simulator.interfaces import Verifier
from verispec.verifiers import LOSSY_BY_DESIGN, REGISTRY, get_verifier
from verispec.verifiers.layer import CITATION, LAYER_PREFIX, TOKEN_LEVEL_ALIAS, single_step_bases

TABLE_START = "<!-- verifier-table:start (generated from the registry by docs/generate.py; do not edit) -->"
TABLE_END = "<!-- verifier-table:end -->"
FORMATS = ("markdown", "compact", "text")


def draft_laws(verifier: Verifier) -> str:
    """The draft laws ``verifier`` is valid for, by name in alphabetical order (as ``verispec list`` has always
    printed them)."""
    return ", ".join(sorted(law.value for law in verifier.valid_for))


def _example_drafter(form: str):
    """The drafter of the tree kind ``form`` (``chain:L``...) with every parameter 2 (two drafts, two levels)."""
    from verispec.simulator import parse_tree

    kind, _, parameters = form.partition(":")
    count = len([name for name in parameters.split(",") if name and name != "..."])
    return parse_tree(f"{kind}:{','.join(['2'] * count)}" if count else kind)


def tree_kinds(verifier: Verifier) -> tuple[str, ...]:
    """The tree kinds (their forms, ``chain:L``...) whose drafts follow a draft law ``verifier`` is valid for, read
    from each kind's drafter with every parameter 2."""
    return tuple(form for form in TREE_FORMS if _example_drafter(form).draft_laws & verifier.valid_for)


def tree_kind_lines() -> list[str]:
    """``verispec list``'s tree kinds: each form and the draft laws its drafts follow (read from its drafter with
    every parameter 2), so that a rule's "valid for" line tells on which kinds it runs."""
    return [f"  {form:<21} {', '.join(sorted(law.value for law in _example_drafter(form).draft_laws))}"
            for form in TREE_FORMS]


def parameters_form(verifier: Verifier) -> str:
    """How a rule with parameters is named with them: ``typical(epsilon=E,alpha=A)`` (each key's initial)."""
    return f"{verifier.name}({','.join(f'{key}={key[0].upper()}' for key in verifier.parameters)})"


def _markdown_row(verifier: Verifier, *cells: str) -> str:
    return "| " + " | ".join((f"`{verifier.name}`", f"{verifier.summary} ({verifier.citation})", *cells)) + " |"


def _runs_on(verifier: Verifier) -> str:
    """The third column: draft laws and tree kinds, or 'every tree kind' for a rule valid for every draft law."""
    if verifier.valid_for == frozenset(DraftLaw):
        return "any draft law (every tree kind)"
    return f"{draft_laws(verifier)} ({', '.join(f'`{form}`' for form in tree_kinds(verifier))})"


def lifted_rules() -> list[Verifier]:
    """Layer Verification's rules, ``lv:<base>`` for every base ``lv:`` accepts now (``single_step_bases`` of the
    registry), in the order of their names: each valid for its base's draft laws."""
    return [get_verifier(LAYER_PREFIX + base) for base in single_step_bases(REGISTRY)]


def _base_cell(base: str) -> str:
    """The base of a lifted rule as the table names it: ``naive`` says which registered rule's step it is."""
    alias = TOKEN_LEVEL_ALIAS.get(base)
    return f"`{base}` (the token-level step: `{alias}`'s, on a node's first child)" if alias else f"`{base}`"


def _markdown_lifted() -> list[str]:
    """The table of the rules Layer Verification lifts, under its citation: name, base, draft laws (tree kinds)."""
    return ["", "Lifted by Layer Verification: `lv:<base>` turns the single-step rule <base> into a draft-tree "
                f"verifier ({CITATION}). Each is lossless where its base is and valid for its base's draft laws; "
                "named explicitly, not part of `all`:", "",
            "| name | base | valid draft law (tree kinds) |", "|---|---|---|",
            *(f"| `{rule.name}` | {_base_cell(rule.base)} | {_runs_on(rule)} |" for rule in lifted_rules())]


def _markdown() -> list[str]:
    lines = ["| name | rule | valid draft law (tree kinds) |", "|---|---|---|"]
    lines += [_markdown_row(verifier, _runs_on(verifier)) for verifier in REGISTRY.values()]
    lines += _markdown_lifted()
    if LOSSY_BY_DESIGN:
        lines += ["", "Lossy by design, kept to measure what they cost and never part of `all`:", "",
                  "| name | rule | runs on | parameters (default) |", "|---|---|---|---|"]
        for verifier in LOSSY_BY_DESIGN.values():
            keys = getattr(verifier, "parameters", ())
            defaults = ", ".join(f"{key} = {getattr(verifier, key):g}" for key in keys)
            setting = f"`{parameters_form(verifier)}` ({defaults})" if keys else "none"
            lines.append(_markdown_row(verifier, _runs_on(verifier), setting))
    return lines


def _arxiv_links(citation: str) -> str:
    """The arXiv identifiers a citation names, as links (``[2403.10444](https://arxiv.org/abs/2403.10444)``), or
    the citation itself when it names none (a rule of verispec's own names the page that derives it)."""
    import re

    found = list(dict.fromkeys(re.findall(r"arXiv (\d{4}\.\d{4,5})", citation)))
    links = ", ".join(f"[{key}](https://arxiv.org/abs/{key})" for key in found)
    if citation.startswith("verispec"):  # a rule of verispec's own: the paper it builds on
        return f"verispec, on {links}" if links else "verispec"
    return links or citation


def _compact() -> list[str]:
    """The README's table: each rule's name, summary, paper (arXiv links) and tree kinds; the lossy-by-design rules
    in one line after it."""
    lines = ["| name | rule | paper | tree kinds |", "|---|---|---|---|"]
    for verifier in REGISTRY.values():
        kinds = "every kind" if verifier.valid_for == frozenset(DraftLaw) else \
            ", ".join(f"`{form.split(':')[0]}`" for form in tree_kinds(verifier))
        lines.append(f"| `{verifier.name}` | {verifier.summary} | {_arxiv_links(verifier.citation)} | {kinds} |")
    bases = single_step_bases(REGISTRY)  # Layer Verification's lifts: one line, its bases read from the registry
    shown = [base for base in ("naive", "specinfer", "globalres") if base in bases] or bases[:3]
    lines += ["", "Lifted to trees by Layer Verification (reconstructed): "
                  + ", ".join(f"`{LAYER_PREFIX}{base}`" for base in shown) + f" and {len(bases) - len(shown)} more."]
    if LOSSY_BY_DESIGN:  # names and papers only: their rules are in docs/guides/verifiers.md (the README stays short)
        lines += ["", "Lossy by design, priced exactly (never in `all`; see "
                      "[docs/guides/verifiers.md](docs/guides/verifiers.md)): " + ", ".join(
                          f"`{verifier.name}` ({_arxiv_links(verifier.citation)})"
                          for verifier in LOSSY_BY_DESIGN.values()) + "."]
    return lines


def _text() -> list[str]:
    """``verispec list``'s verifier lines: each rule's line as it has always been, then its summary and citation
    on an indented line; the lifted rules (``lv:<base>``) each on one line under their citation."""
    lines = ["verifiers:"]
    for name, verifier in sorted(REGISTRY.items()):
        lines += [f"  {name:<12} valid for: {draft_laws(verifier)}", f"      {verifier.summary} ({verifier.citation})"]
    lines.append(f"lifted by Layer Verification (lv:<base>, the single-step rule <base> swept over the tree layer by "
                 f"layer; named explicitly, not in 'all') ({CITATION}):")
    lines += [f"  {rule.name:<12} valid for: {draft_laws(rule)}" for rule in lifted_rules()]
    lines.append("lossy by design (named explicitly, never in 'all'):")
    for name, verifier in sorted(LOSSY_BY_DESIGN.items()):
        runs_on = "runs on every tree" if verifier.valid_for == frozenset(DraftLaw) else \
            f"valid for: {draft_laws(verifier)}"
        keys = getattr(verifier, "parameters", ())
        defaults = ", ".join(f"{getattr(verifier, key):g}" for key in keys)
        setting = f"; {parameters_form(verifier)} sets its parameters (default {defaults})" if keys else ""
        lines += [f"  {name:<12} {runs_on}{setting}", f"      {verifier.summary} ({verifier.citation})"]
    return lines


def verifier_table(format: str = "markdown") -> str:
    """The registry's rules as text: ``markdown``, the table of docs/guides/verifiers.md (rules in registration
    order, the rules lifted by Layer Verification, then the lossy-by-design ones); ``compact``, the README's
    (summary, arXiv links, tree kinds); ``text``, the verifier lines of ``verispec list`` (sorted by name)."""
    if format not in FORMATS:
        raise ValueError(f"verifier_table: format is one of {', '.join(FORMATS)}, got {format!r}")
    return "\n".join({"markdown": _markdown, "compact": _compact, "text": _text}[format]())


def with_tables(text: str) -> str:
    """``text`` (a markdown file) with the region between each ``TABLE_START`` and ``TABLE_END`` replaced by the
    markdown table generated now; ValueError when the markers are missing or unpaired."""
    pieces = text.split(TABLE_START)
    if len(pieces) < 2:
        raise ValueError(f"no generated verifier table: the line {TABLE_START!r} is missing")
    rebuilt = [pieces[0]]
    for piece in pieces[1:]:
        if piece.count(TABLE_END) != 1:
            raise ValueError(f"each {TABLE_START!r} needs one {TABLE_END!r} after it, before the next table")
        rebuilt.append(f"{TABLE_START}\n{verifier_table('markdown')}\n{TABLE_END}{piece.split(TABLE_END, 1)[1]}")
    return "".join(rebuilt)


__all__ = ["FORMATS", "TABLE_END", "TABLE_START", "draft_laws", "lifted_rules", "parameters_form", "tree_kind_lines",
           "tree_kinds", "verifier_table", "with_tables"]
