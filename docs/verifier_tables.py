"""Rewrite the verifier tables of README.md and docs/guides/verifiers.md from the registry.

    python docs/verifier_tables.py           # rewrite the region between the verifier-table markers
    python docs/verifier_tables.py --check   # rewrite nothing; exit 1 naming each file that is stale

The table is ``verispec.verifiers.catalog.verifier_table("markdown")``: one row per registered rule (its name,
summary, citation, draft laws and tree kinds), so a rule registered with ``verispec.verifiers.register`` appears
here with no other edit. tests/verifiers/test_generated_lists.py runs the check.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from verispec.verifiers.catalog import with_tables

ROOT = Path(__file__).resolve().parent.parent
#: The files that hold the generated table.
FILES = (ROOT / "README.md", ROOT / "docs" / "guides" / "verifiers.md")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when a file's table is stale; write nothing")
    args = parser.parse_args(argv)
    stale = []
    for path in FILES:
        text = path.read_text()
        generated = with_tables(text)
        if generated != text:
            stale.append(path.relative_to(ROOT))
            if not args.check:
                path.write_text(generated)
    for path in stale:
        print(f"{path}: {'stale; run python docs/verifier_tables.py' if args.check else 'rewritten'}")
    return 1 if stale and args.check else 0


if __name__ == "__main__":
    sys.exit(main())
