"""Numbers in the docs that nobody types: marked blocks of Markdown rewritten from committed result files.

A number the README or a findings page states lives between two markers, and ``docs/generate.py`` writes it from a
result file under ``docs/results/``; ``docs/generate.py --check`` (run by tests/test_generated_docs.py) fails when a
marked block differs from what its result file gives, or when the file is missing or states no run record.

Markers (HTML comments, which no renderer shows)::

    <!--v:KEY-->x1.042 [1.030, 1.053]<!--/v-->        one value inside a sentence
    <!--table:KEY-->                                    a whole block: a table, a list
    | ... |
    <!--/table-->

Each KEY names a function of the result files (``ResultFiles``) that returns the text. A result file is JSON with a
``record`` (``verispec.files.provenance.run_record``: the command line, the commit, the date, the machine and the
SHA-256
of its inputs): a file without one is refused, so every generated number can be traced to the run that made it.
``typed_numbers`` finds numbers a page states outside any marker (the test's second half: a number typed by hand is
caught even where nobody put a marker).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from verispec.errors import VerispecError

#: What a result file's ``record`` must state (issue 55).
RECORD_KEYS = ("command", "commit", "date", "machine", "inputs")
MACHINE_KEYS = ("cores", "threads", "device", "load")

VALUE = re.compile(r"<!--v:(?P<key>[\w./:+=-]+)-->(?P<body>.*?)<!--/v-->", re.S)
TABLE = re.compile(r"(?P<open><!--table:(?P<key>[\w./:+=-]+)-->\n)(?P<body>.*?)(?P<close><!--/table-->)", re.S)

#: Numbers as a page states results: decimals, fractions, percentages, ratios written x1.04.
RESULT_NUMBER = re.compile(r"(?<![\w.])(?:x\d+(?:\.\d+)?|\d+\.\d+|\d+/\d+|\d+(?:\.\d+)?%)(?![\w])")
CODE = re.compile(r"```.*?```|`[^`\n]*`", re.S)
#: Numbers that state an input, not a result: arXiv identifiers, a problem's p = (...) and q = (...), and settings
#: written ``name = value`` (divergence, epsilon, alpha, V, T).
SETTING = re.compile(r"arXiv \d{4}\.\d{4,5}|\b[pq] = \([^)]*\)|\b(?:divergence|epsilon|alpha|V|T)(?: = | )[\d.]+")
LINK_TARGET = re.compile(r"\]\([^)]*\)")


class GeneratedDocsError(VerispecError):
    """A result file is missing, unreadable or states no run record, or a marker names no known block."""


class ResultFiles:
    """The result files under ``folder``, each read once, its record checked; ``read`` lists the names used."""

    def __init__(self, folder: str | Path):
        self.folder = Path(folder)
        self._loaded: dict[str, dict] = {}

    @property
    def read(self) -> list[str]:
        return sorted(self._loaded)

    def __call__(self, name: str) -> dict:
        if name not in self._loaded:
            self._loaded[name] = load_result(self.folder / name)
        return self._loaded[name]


def load_result(path: str | Path) -> dict:
    """A result file (JSON) with a complete run record, or a one-line ``GeneratedDocsError``. Read with a bound
    (``MAX_RESULT_BYTES``) and only when it is a regular file: a FIFO in its place hung the generator, and a link
    to /dev/zero filled memory (issue 64). Every object in it is a ``ResultObject``: a key it lacks is refused on
    one line naming the file and the key, not a KeyError."""
    from verispec.files.io import read_user_file
    from verispec.files.provenance import MAX_RESULT_BYTES

    path = Path(path)
    if not path.exists() and not path.is_symlink():
        raise GeneratedDocsError(f"result file {path} is missing: run the command that writes it "
                                 "(data/MANIFEST or the page that cites it names it), then python docs/generate.py")
    text = read_user_file(path, limit=MAX_RESULT_BYTES, what="result file", error=GeneratedDocsError,
                          regular_only=True, why="the largest result file verispec writes is under 1 MB")
    try:
        result = _located(json.loads(text), str(path), "")
    except (ValueError, RecursionError) as error:
        raise GeneratedDocsError(f"result file {path} cannot be read as JSON ({error}); rerun its command") from None
    record = result.get("record") if isinstance(result, dict) else None
    missing = [key for key in RECORD_KEYS if not isinstance(record, dict) or key not in record]
    if not missing:
        missing = [f"machine.{key}" for key in MACHINE_KEYS if key not in record["machine"]]
    if missing:
        raise GeneratedDocsError(f"result file {path} states no {', '.join(missing)} in its 'record': rerun its "
                                 "command with a verispec that records its runs (verispec.files.provenance.run_record)")
    return result


class ResultObject(dict):
    """A JSON object of a result file that knows where it lies: a key it lacks raises a one-line
    ``GeneratedDocsError`` naming the file, the key's place and the fix (a result file without ``tables`` gave
    a KeyError traceback, issue 64)."""

    def __init__(self, items, file: str, place: str):
        super().__init__(items)
        self.file, self.place = file, place

    def __missing__(self, key):
        where = f"{self.place}.{key}" if self.place else str(key)
        raise GeneratedDocsError(f"result file {self.file} has no {where!r}, which the docs read: it is from "
                                 "another version or damaged; rerun the command its record names")


def _located(value, file: str, place: str):
    """``value`` (parsed JSON) with every object a ``ResultObject`` naming its place (``tables[0].ddte``)."""
    if isinstance(value, dict):
        return ResultObject({key: _located(item, file, f"{place}.{key}" if place else str(key))
                             for key, item in value.items()}, file, place)
    if isinstance(value, list):
        return [_located(item, file, f"{place}[{index}]") for index, item in enumerate(value)]
    return value


Renderers = Mapping[str, Callable[[ResultFiles], str]]


def render(text: str, values: Renderers, tables: Renderers, results: ResultFiles, where: str = "") -> str:
    """``text`` with every marked value and table rewritten from ``results``; an unknown key is refused."""

    def one(kind: str, renderers: Renderers, key: str) -> str:
        if key not in renderers:
            raise GeneratedDocsError(f"{where or 'a page'}: no generated {kind} named {key!r} (known: "
                                     f"{', '.join(sorted(renderers))}); fix the marker or add it to docs/generate.py")
        try:
            return renderers[key](results)
        except GeneratedDocsError:
            raise
        except (KeyError, IndexError, TypeError, ValueError, AttributeError, ZeroDivisionError) as error:
            # a value of the wrong type where the docs read one (a list for an object, null for a number)
            raise GeneratedDocsError(f"{where or 'a page'}: the {kind} {key!r} cannot be made from the result files "
                                     f"it reads ({', '.join(results.read) or 'none read'}): "
                                     f"{type(error).__name__}: {' '.join(str(error).split())[:200]}; rerun the "
                                     "command each file's record names") from None

    text = VALUE.sub(lambda match: f"<!--v:{match['key']}-->{one('value', values, match['key'])}<!--/v-->", text)
    return TABLE.sub(lambda match: f"{match['open']}{one('table', tables, match['key']).rstrip()}\n"
                                   f"{match['close']}", text)


def stale_markers(text: str, generated: str) -> list[str]:
    """The keys whose block in ``text`` differs from ``generated`` (the same text rendered), in order."""
    ours = [(match["key"], match["body"]) for pattern in (VALUE, TABLE) for match in pattern.finditer(text)]
    theirs = [(match["key"], match["body"]) for pattern in (VALUE, TABLE) for match in pattern.finditer(generated)]
    return [key for (key, body), (_, fresh) in zip(ours, theirs) if body != fresh]


def typed_numbers(text: str, allowed: Iterable[str] = ()) -> list[str]:
    """The result-like numbers ``text`` states outside markers, code and link targets, less the inputs ``SETTING``
    matches and the phrases of ``allowed`` (names such as ``Qwen2.5``)."""
    for pattern in (VALUE, TABLE):
        text = pattern.sub(" ", text)
    text = LINK_TARGET.sub("]", CODE.sub(" ", text))
    text = SETTING.sub(" ", re.sub(r"<!--.*?-->", " ", text, flags=re.S))
    for phrase in sorted(allowed, key=len, reverse=True):
        text = text.replace(phrase, " ")
    return RESULT_NUMBER.findall(text)


def section(text: str, heading: str) -> str:
    """The body of the ``## heading`` section of a Markdown text (to the next ``## ``), or '' when absent."""
    match = re.search(rf"^## {re.escape(heading)}[ \t]*\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    return match.group(1) if match else ""


def ratio(entry: Mapping, key: str = "ratio", ci: str = "ratio_ci") -> str:
    """A ratio and its 95% interval as the docs write them: ``x1.042 [1.030, 1.053]``."""
    from verispec.report.common import with_interval

    return f"x{with_interval(entry[key], entry[ci])}"


__all__ = ["GeneratedDocsError", "ResultFiles", "ResultObject", "load_result", "ratio", "render", "section",
           "stale_markers", "typed_numbers"]
