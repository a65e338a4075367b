"""``verispec list``: the verifiers (generated from the registry, ``verispec.verifiers.catalog``), tree kinds with
their draft laws, and layouts."""

from __future__ import annotations

from verispec.guard.limits import EXTERNAL_LAYOUTS


def add_parser(subparsers) -> None:
    subparsers.add_parser("list", help="list verifiers (with their valid draft laws) and tree kinds")


def run(args) -> int:
    from verispec.verifiers.catalog import tree_kind_lines, verifier_table

    print(verifier_table("text"))
    print("tree kinds (the draft laws their drafts follow):")
    print("\n".join(tree_kind_lines()))
    print("layouts of check-external:")
    print(f"  {', '.join(EXTERNAL_LAYOUTS)}")
    return 0
