"""``verispec list``: the verifiers, tree kinds and layouts."""

from __future__ import annotations

from verispec.cli.options import EXTERNAL_LAYOUTS, TREE_FORMS


def _run_list(args) -> int:
    from verispec.verifiers import LOSSY_BY_DESIGN, REGISTRY

    print("verifiers:")
    for name, verifier in sorted(REGISTRY.items()):
        laws = ", ".join(sorted(law.value for law in verifier.valid_for))
        print(f"  {name:<12} valid for: {laws}")
    print("lossy by design (named explicitly, never in 'all'):")
    for name, verifier in sorted(LOSSY_BY_DESIGN.items()):
        print(f"  {name:<12} runs on every tree; typical(epsilon=E,alpha=A) sets its parameters "
              f"(default {verifier.epsilon:g}, {verifier.alpha:g}: Medusa's)")
    print("tree kinds:")
    for form in TREE_FORMS:
        print(f"  {form}")
    print("layouts of check-external:")
    print(f"  {', '.join(EXTERNAL_LAYOUTS)}")
    return 0
