"""``verispec list``: the verifiers (generated from the registry, ``verispec.verifiers.catalog``), tree kinds and
layouts."""

from __future__ import annotations

from verispec.limits import EXTERNAL_LAYOUTS, TREE_FORMS


def add_parser(subparsers) -> None:
    subparsers.add_parser("list", help="list verifiers (with their valid draft laws) and tree kinds")


def run(args) -> int:
    from verispec.verifiers.catalog import verifier_table

    print(verifier_table("text"))
    print("tree kinds:")
    for form in TREE_FORMS:
        print(f"  {form}")
    print("layouts of check-external:")
    print(f"  {', '.join(EXTERNAL_LAYOUTS)}")
    return 0
