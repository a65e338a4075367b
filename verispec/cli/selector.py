"""``verispec selector``: the delay selector's steps (verispec.selector.command)."""

from __future__ import annotations

from verispec.cli.models import _load_pair


def _run_selector(args) -> int:
    from verispec.selector.command import run

    return run(args, _load_pair)
