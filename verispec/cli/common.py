"""What several commands share when they run: the registry of verifiers, the problem of --target/--draft or
--problem, and printing JSON. Standard library only at the top: what a helper needs is imported when it runs."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING

from verispec.errors import InvalidProblemError, VerispecError
from verispec.files.io import plain_json

if TYPE_CHECKING:
    from verispec.simulator.problems import Problem


def registry() -> dict:
    """The verifiers by name (``verispec.verifiers.REGISTRY``), loaded at the first call. ``compare`` and ``bound``
    run every rule of it, as ``all`` does: a lossy-by-design rule put there by hand is refused on one line
    (``lossless_rules``) rather than compared as if it claimed to be lossless."""
    from verispec.verifiers import REGISTRY, lossless_rules

    lossless_rules()
    return REGISTRY


def problem_from_args(args) -> Problem:
    """The problem of --target P --draft Q or --problem FILE (read exactly with ``args.exact``), under the
    deterministic drafts of --drafts RULE when the command has that option."""
    problem = _base_problem_from_args(args)
    if getattr(args, "drafts", None) is not None:
        from verispec.simulator.deterministic import DeterministicDrafts

        return DeterministicDrafts(problem, args.drafts)
    return problem


def _base_problem_from_args(args) -> Problem:
    from verispec.simulator import ContextFreeProblem, load_problem
    from verispec.simulator.distributions import parse_distribution

    if args.problem is not None:
        if args.target is not None or args.draft is not None:
            raise VerispecError("give either --problem or --target/--draft, not both")
        return load_problem(args.problem, exact=args.exact)
    if args.target is None or args.draft is None:
        raise VerispecError("give a problem: --target P --draft Q, or --problem FILE")
    p = parse_distribution(args.target, exact=args.exact, name="--target")
    q = parse_distribution(args.draft, exact=args.exact, name="--draft")
    if len(p) != len(q):
        raise InvalidProblemError(f"--target has {len(p)} probabilities but --draft has {len(q)}")
    return ContextFreeProblem(p, q, exact=args.exact)


def print_json(data) -> None:
    """One line of --json output: ``data`` as plain JSON."""
    print(json.dumps(plain_json(data)))


def note_capped_jobs(note: str) -> None:
    """The one line on stderr when --jobs, or the N of --address local:N, asks for more processes than there are
    cores: sweep and report cap it (``verispec.study``) and call this once their outputs have passed their
    checks, so a refusal stays one line."""
    print(f"verispec: note: {note}", file=sys.stderr)
