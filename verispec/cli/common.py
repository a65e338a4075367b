"""What several commands share when they run: the problem from --target/--draft or --problem, printing and
JSON, and the engine's functions as lazy stand-ins (their modules load at the first call)."""

from __future__ import annotations

import enum
import json
import sys
from collections.abc import Mapping
from fractions import Fraction
from typing import TYPE_CHECKING

from verispec.errors import InvalidProblemError, VerispecError

if TYPE_CHECKING:
    from verispec.simulator.problems import Problem


def _lazy(module: str, name: str):
    """A stand-in for ``module.name`` that imports the module at its first call."""

    def call(*args, **kwargs):
        import importlib

        return getattr(importlib.import_module(module), name)(*args, **kwargs)

    call.__name__ = name
    return call


# The engine's functions, loaded at their first call: the parser and --help import nothing heavier than the
# standard library, and each command loads only what it uses.
parse_distribution = _lazy("verispec.simulator.distributions", "parse_distribution")
parse_tree = _lazy("verispec.simulator.drafters", "parse_tree")
analyze = _lazy("verispec.simulator.engine", "analyze")
check_compatible = _lazy("verispec.simulator.engine", "check_compatible")
choose_method = _lazy("verispec.simulator.engine", "choose_method")
ContextFreeProblem = _lazy("verispec.simulator.problems", "ContextFreeProblem")
load_problem = _lazy("verispec.simulator.problems", "load_problem")
random_problem = _lazy("verispec.simulator.problems", "random_problem")
sun_toy_problem = _lazy("verispec.simulator.problems", "sun_toy_problem")
get_verifier = _lazy("verispec.verifiers", "get_verifier")
split_names = _lazy("verispec.verifiers", "split_names")


def _engine_limit() -> int:
    from verispec.simulator.engine import MAX_LAW_ENTRIES

    return MAX_LAW_ENTRIES


def _registry() -> dict:
    from verispec.verifiers import REGISTRY

    return REGISTRY


#: Built-in problems for ``compare``: name -> (description, factory(exact) -> Problem).
BUILTIN_PROBLEMS = {
    "sun-toy": ("Sun et al. 2024 toy: p=(1/3,2/3), q=(2/3,1/3), context-free",
                lambda exact: sun_toy_problem(exact=exact)),
    "random": ("seeded context-dependent Dirichlet problem, V=4, depth 4, divergence 0.5, seed 0",
               lambda exact: random_problem(4, 4, 0)),
}


def _problem_from_args(args) -> Problem:
    problem = _base_problem_from_args(args)
    if getattr(args, "drafts", None) is not None:
        from verispec.simulator.deterministic import DeterministicDrafts

        return DeterministicDrafts(problem, args.drafts)
    return problem


def _base_problem_from_args(args) -> Problem:
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


def _format(value) -> str:
    return f"{float(value):.12g}"


def plain_json(value):
    """``value`` with every number a plain Python int or float (numpy scalars and arrays converted,
    fractions as strings), mappings as dicts with string keys and sequences as lists, so that ``--json``
    output holds only str, int, float, bool, None, list and dict."""
    if value is None or type(value) in (bool, str, int, float):
        return value
    if isinstance(value, enum.Enum):
        return plain_json(value.value)
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, str):
        return str(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, Fraction):
        return str(value)
    if isinstance(value, Mapping):
        return {str(plain_json(key)): plain_json(item) for key, item in value.items()}
    if isinstance(value, (set, frozenset)):
        return sorted(plain_json(item) for item in value)
    if isinstance(value, (list, tuple)):
        return [plain_json(item) for item in value]
    if hasattr(value, "tolist"):  # numpy scalars and arrays
        return plain_json(value.tolist())
    raise TypeError(f"cannot write {type(value).__name__} as JSON")


def _print_json(data) -> None:
    print(json.dumps(plain_json(data)))


def _output_law_size(problem: Problem, drafter) -> tuple[str, str]:
    """(entries of the output law at length L+1, memory of the whole law in float64), in words."""
    size, depth = problem.vocab_size, drafter.depth
    if depth > 40:
        return f"{size}^{depth + 1}", "the output law alone would need far more memory than any machine has"
    entries = sum(size ** length for length in range(1, depth + 2))  # outputs of every length 1..L+1
    return f"{size ** (depth + 1):,}", f"the output law alone takes about {entries * 8 / 2**20:,.0f} MiB"


def _shown(value, exact: bool) -> str:
    return str(value) if exact else f"{float(value):.6f}"


def _note_capped_jobs(note: str) -> None:
    """The one line on stderr when --jobs, or the N of --address local:N, asks for more processes than there are
    cores: sweep and report cap it (``verispec.sweep.worker_processes``) and call this once their outputs have
    passed their checks, so a refusal stays one line."""
    print(f"verispec: note: {note}", file=sys.stderr)


def _latency_model(args):
    from verispec.latency import LatencyModel
    from verispec.sweep import DEFAULT_LATENCY

    if args.latency is not None:
        if args.cost_ratio is not None:
            raise VerispecError("give either --latency FILE or --cost-ratio, not both")
        return LatencyModel.load(args.latency)
    if args.cost_ratio is None:
        return DEFAULT_LATENCY if args.per_node == 0 else LatencyModel.from_ratio(4.0, args.per_node)
    return LatencyModel.from_ratio(args.cost_ratio, args.per_node)
