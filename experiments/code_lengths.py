"""File and function lengths of the package: the facts behind the "no file over 600 lines, no function over 80" rule.

Usage::

    python experiments/code_lengths.py                      # this checkout's verispec/
    python experiments/code_lengths.py --ref 9ab7900        # a commit, read with `git show` (no checkout needed)
    python experiments/code_lengths.py --ref 9ab7900 --ref HEAD   # side by side

Lines are physical lines of the file (``wc -l``); a function's length runs from its ``def`` line (decorators
excluded) to its last line, nested functions and classes included; methods count as functions. The limits and
the stated exceptions live in ``tests/test_code_lengths.py``.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FILE_LIMIT = 600
FUNCTION_LIMIT = 80


def _sources_at(ref: str | None) -> dict[str, str]:
    """path -> source text of every ``verispec/**.py``, from the work tree (ref None) or a git commit."""
    if ref is None:
        return {str(path.relative_to(ROOT)): path.read_text() for path in sorted((ROOT / "verispec").rglob("*.py"))}
    listing = subprocess.run(["git", "ls-tree", "-r", "--name-only", ref, "verispec"], cwd=ROOT, check=True,
                             capture_output=True, text=True).stdout.split()
    return {path: subprocess.run(["git", "show", f"{ref}:{path}"], cwd=ROOT, check=True, capture_output=True,
                                 text=True).stdout
            for path in listing if path.endswith(".py")}


def function_lengths(source: str) -> list[tuple[str, int]]:
    """(qualified name, lines) of every function and method in ``source``."""
    found: list[tuple[str, int]] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = f"{prefix}{child.name}"
                found.append((name, child.end_lineno - child.lineno + 1))
                visit(child, name + ".")
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")
            else:
                visit(child, prefix)

    visit(ast.parse(source), "")
    return found


def measure(ref: str | None) -> dict:
    sources = _sources_at(ref)
    files = {path: len(text.splitlines()) for path, text in sources.items()}
    functions = [(f"{path}:{name}", length) for path, text in sources.items()
                 for name, length in function_lengths(text)]
    return {
        "ref": ref or "work tree",
        "files": len(files),
        "lines": sum(files.values()),
        "long_files": sorted(((path, n) for path, n in files.items() if n > FILE_LIMIT), key=lambda item: -item[1]),
        "functions": len(functions),
        "long_functions": sorted(((name, n) for name, n in functions if n > FUNCTION_LIMIT), key=lambda item: -item[1]),
        "largest_file": max(files.values()),
        "largest_function": max(n for _, n in functions),
    }


def main(argv: list[str] | None = None) -> int:
    from verispec.study.script_files import ScriptParser

    parser = ScriptParser("code_lengths", description=__doc__.splitlines()[0])
    parser.add_argument("--ref", action="append", default=None,
                        help="git commit to measure (repeatable; default: the work tree)")
    parser.add_argument("--list", action="store_true", help="list every long file and function")
    args = parser.parse_args(argv)
    results = []
    for ref in args.ref or [None]:
        try:
            results.append(measure(ref))
        except subprocess.CalledProcessError as error:  # git's own words name what is wrong with the ref
            detail = " ".join((error.stderr or "").split()) or f"git exited with status {error.returncode}"
            print(f"code_lengths: error: --ref {ref!r} cannot be read ({detail}); give a commit of this repository",
                  file=sys.stderr)
            return 2
    print("| | " + " | ".join(r["ref"] for r in results) + " |")
    print("|---|" + "---|" * len(results))
    for label, key in [("package files", "files"), ("lines", "lines"), ("functions and methods", "functions"),
                       ("largest file (lines)", "largest_file"), ("largest function (lines)", "largest_function")]:
        print(f"| {label} | " + " | ".join(f"{r[key]:,}" for r in results) + " |")
    print(f"| files over {FILE_LIMIT} lines | " + " | ".join(str(len(r["long_files"])) for r in results) + " |")
    print(f"| functions over {FUNCTION_LIMIT} lines | "
          + " | ".join(str(len(r["long_functions"])) for r in results) + " |")
    if args.list:
        for r in results:
            print(f"\n## {r['ref']}\n")
            for path, n in r["long_files"]:
                print(f"- file {path}: {n}")
            for name, n in r["long_functions"]:
                print(f"- function {name}: {n}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
