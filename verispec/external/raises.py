"""A function that raises on some inputs: what the calls that did not raise prove, and state kept across calls.

The one rule (``verispec.verdict``): LOSSY whenever a loss is established, on a problem the function raised on as
much as on any other, with the raise listed beside it; RAISES only when the function raised and no loss was shown.
What a problem's calls that did not raise establish, whatever the function would have returned where it raised:
let L be the law of the outcomes of the inputs on which it does not raise (mass 1 - r, r the raising mass) and C
the block continued with the target (linear, ``OutputLaw.continued_with_target``). Any outputs R on the raising
inputs (mass r) give the law C(L) + C(R), and as C(R) >= 0,

    TV(C(L) + C(R), p) = sum_x (C(L)(x) + C(R)(x) - p(x))+ >= sum_x (C(L)(x) - p(x))+ =: excess.

So an excess above the threshold is a loss no completion of the raising inputs can undo: the function is lossy
whatever its raises stand for. The excess is exact here (``law_past_raises``: the raise integrated as one more
outcome) and tested in black-box mode (``blackbox``: the one-sided test on the runs that did not raise). A
function that raises on part of the inputs and is otherwise lossless has excess 0 (what it leaves out is missing,
not overproduced), and stays RAISES.

State across calls (``StateWatch``). A checked call is assumed to depend only on its inputs (and the uniforms
fed); a function that keeps state across calls (a counter in a module global, a closure, a mutable default) may
behave differently on its 500th call than on the few hundred a check makes, and no verdict about single calls
covers that. The names the function can reach (its module's globals, its closure cells, its defaults and
attributes, a bound instance's attributes) are fingerprinted before and after the check; where they changed, the
function is called twice more on the same inputs with a fingerprint between: state that changes again on an
identical call (a counter) is history the outcomes may depend on, and a LOSSLESS verdict becomes INCONCLUSIVE;
state that settled (a cache filled, a warn-once flag set) is said in a note. Random generators are left out (their
state is the randomness black-box mode tests), as is state outside the names the function reaches (a file, another
module's globals), which no fingerprint here sees.
"""

from __future__ import annotations

import types
from dataclasses import dataclass

import numpy as np

from verispec.external.blackbox import discrepancies
from verispec.external.rng import TorchEscape, UniformsExhausted
from verispec.external.runner import FunctionRaised, RaiseLog
from verispec.simulator.laws import OutputLaw
from verispec.simulator.problems import Problem, target_law
from verispec.simulator.trees import TreeBatch

#: How far into containers and objects a fingerprint looks, how many items of a container it reads, and how many
#: values one fingerprint of a function's state reads in all (past it, the rest is compared by identity).
DEPTH = 3
ITEMS = 256
VALUES = 50_000
#: Arrays up to this many bytes are fingerprinted by their contents (larger ones by shape and type).
ARRAY_BYTES = 1 << 20


@dataclass
class PastRaises:
    """What a problem's calls show past the function's raises (see the module docstring)."""

    #: sum_x (C(L)(x) - p(x))+: a lower bound on the TV distance of every completion of the raising inputs.
    excess: float
    #: The probability of the inputs on which the function raises (over the draft trees and the uniforms).
    raised_mass: float
    #: The sequences the calls that did not raise overproduce most (``blackbox.discrepancies``, overproduced only).
    discrepancies: dict
    #: The first raise met (its tree, uniforms and whether it repeats), or None where none was met.
    first: FunctionRaised | None
    evaluations: int


def law_past_raises(problem: Problem, drafter, verifier) -> PastRaises:
    """The law of ``verifier``'s (an ``ExternalVerifier``) outcomes on the inputs it does not raise on, integrated
    exactly over every draft tree of ``drafter``, and the excess it shows (module docstring)."""
    problem.require_depth(drafter.depth)
    drafter.check_problem(problem)
    size, depth = problem.vocab_size, drafter.depth
    emitted = [np.zeros((size,) * length) for length in range(1, depth + 2)]
    outcomes = drafter.outcomes(problem)
    trees = [tree for tree, _ in outcomes]
    log = RaiseLog()
    raised_mass = 0.0
    before = verifier.stats.evaluations
    for batch, members in TreeBatch.of_trees(trees):
        laws, raised = verifier.laws_past_raises(batch, log)
        for row, index in enumerate(members):
            tree, probability = outcomes[index]
            raised_mass += float(probability) * float(raised[row])
            for node, path in enumerate(tree.paths):
                emitted[len(path)][path] += float(probability) * laws[row][node]
    continued = OutputLaw(size, depth, tuple(emitted)).continued_with_target(problem)
    target = np.asarray(target_law(problem, depth + 1), dtype=np.float64)
    shown = discrepancies(continued, target)
    shown["underproduced"] = []  # what the raising inputs leave out is missing, not shown to be underproduced
    return PastRaises(excess=float(np.clip(continued - target, 0, None).sum()), raised_mass=raised_mass,
                      discrepancies=shown, first=log.first, evaluations=verifier.stats.evaluations - before)


# --- state kept across calls ------------------------------------------------------------------------------------

_RANDOM_TYPES = ("Generator", "RandomState", "Random", "SystemRandom", "BitGenerator", "PCG64", "MT19937", "Philox",
                 "SFC64")


def _fingerprint(value, depth: int = DEPTH, seen: frozenset = frozenset(), left: list | None = None):
    """A comparable summary of ``value``'s state: scalars by value, containers and objects' attributes to ``depth``
    levels, small arrays by contents; modules, functions and classes by identity (a rebinding shows, their insides
    are not the function's state); random generators not at all (module docstring). ``left``: [values it may still
    read], shared by the fingerprints of one state."""
    left = [VALUES] if left is None else left
    left[0] -= 1
    if value is None or isinstance(value, (bool, int, float, complex, str, bytes)):
        return repr(value)
    kind = type(value)
    if kind.__name__ in _RANDOM_TYPES or kind.__module__.startswith(("torch", "jax")):
        return ("opaque", kind.__name__)
    if isinstance(value, (types.ModuleType, types.FunctionType, types.BuiltinFunctionType, type,
                          types.MethodType)) or id(value) in seen:
        return ("id", id(value))
    if isinstance(value, np.ndarray):
        small = value.nbytes <= ARRAY_BYTES and value.dtype != object
        return ("array", value.shape, str(value.dtype), value.tobytes() if small else id(value))
    if kind.__module__ == "itertools":  # count(), cycle(): their repr holds their position
        return ("itertools", repr(value))
    if depth <= 0 or left[0] <= 0:
        return ("type", kind.__name__, id(value), len(value) if hasattr(value, "__len__") else None)
    seen = seen | {id(value)}
    if isinstance(value, dict):
        return ("dict", len(value), tuple((repr(key)[:80], _fingerprint(item, depth - 1, seen, left))
                                          for key, item in list(value.items())[:ITEMS]))
    if isinstance(value, (list, tuple)):
        return (kind.__name__, len(value), tuple(_fingerprint(item, depth - 1, seen, left) for item in value[:ITEMS]))
    if isinstance(value, (set, frozenset)):
        return ("set", len(value), tuple(sorted(repr(item)[:80] for item in list(value)[:ITEMS])))
    attributes = getattr(value, "__dict__", None)
    if isinstance(attributes, dict):
        return ("object", kind.__name__, _fingerprint(attributes, depth - 1, seen, left))
    return ("id", kind.__name__, id(value))


def _reachable(function) -> dict:
    """The state ``function`` can keep across calls, by name: its module's globals (dunder names left out), its
    closure cells, defaults and attributes, and for a bound method or a callable object the instance's attributes."""
    names: dict = {}
    target = function
    if isinstance(function, types.MethodType):
        names["self"] = function.__self__
        target = function.__func__
    elif not isinstance(function, types.FunctionType) and hasattr(function, "__dict__"):
        names["self"] = function
        target = type(function).__dict__.get("__call__")  # the class's own method, for its globals
    code_globals = getattr(target, "__globals__", None) or {}
    names.update({f"global {key}": value for key, value in code_globals.items() if not key.startswith("__")})
    for cell_name, cell in zip(getattr(getattr(target, "__code__", None), "co_freevars", ()),
                               getattr(target, "__closure__", None) or ()):
        try:
            names[f"closure {cell_name}"] = cell.cell_contents
        except ValueError:  # an empty cell
            pass
    names["defaults"] = getattr(target, "__defaults__", None)
    names["keyword defaults"] = getattr(target, "__kwdefaults__", None)
    names["attributes"] = getattr(target, "__dict__", None)
    return names


#: The key under which a sandboxed function's fingerprints name the process that took them.
SANDBOX_PROCESS = "(sandbox process)"


class StateWatch:
    """Fingerprints of the state a function can keep across calls, taken before a check (see the module
    docstring); ``changed`` names what differs since."""

    def __init__(self, function):
        self.function = function
        self.before = self.take()

    def take(self) -> dict:
        if hasattr(self.function, "sandbox_state"):  # a function in its sandbox: fingerprinted there
            return self.function.sandbox_state()
        left = [VALUES]
        try:
            return {name: _fingerprint(value, left=left) for name, value in _reachable(self.function).items()}
        except Exception:  # an object whose attributes cannot be read: nothing to compare
            return {}

    def changed(self, since: dict | None = None) -> list[str]:
        """The names whose state differs from ``since`` (default: before the check). Nothing where the function was
        loaded again since (its sandbox was ended in the middle of a call and started afresh: its state is new)."""
        since = self.before if since is None else since
        now = self.take()
        if since.get(SANDBOX_PROCESS) != now.get(SANDBOX_PROCESS):
            return []
        return sorted(name for name in set(since) | set(now) if since.get(name) != now.get(name))

    def evolves(self, verifier) -> bool | None:
        """Whether the state changes again on two identical calls (the probe's kind, on a topology the check ran):
        True for history the outcomes may depend on (a counter); None where no call could be made."""
        runner = next(iter(verifier._runners.values()), None)
        if runner is None or runner.layout.self_drafting:
            return None
        rows = np.arange(min(4, runner.trees.batch.num_rows), dtype=np.int64)
        uniforms = np.random.default_rng(0).random((len(rows), runner.width_uniforms))
        try:
            with runner.session():
                runner.run(rows, uniforms, races=False)
                middle = self.take()
                runner.run(rows, uniforms, races=False)
        except (Exception, UniformsExhausted, TorchEscape):  # a raise, a longer tape: nothing learnt either way
            return None
        return bool(self.changed(middle))


def say_state(report, watch: StateWatch, verifier) -> None:
    """Add to ``report`` (a ``CheckReport``) what ``watch`` saw of the function's state over the check: state that
    changes on every identical call turns LOSSLESS into INCONCLUSIVE (the verdict is about single calls, and the
    function's outcomes may depend on their history); otherwise a note (module docstring)."""
    from verispec.verdict import Verdict

    changed = watch.changed()
    if not changed:
        return
    evolves = watch.evolves(verifier)
    names = ", ".join(changed[:4]) + (f" and {len(changed) - 4} more" if len(changed) > 4 else "")
    if evolves:
        text = (f"{report.function} keeps state across calls that changes on every call ({names} changed again "
                "when the same call was made twice): its outcomes may depend on the call history, which a check "
                "of single calls does not cover")
        if report.verdict is Verdict.LOSSLESS:
            report.verdict = Verdict.INCONCLUSIVE
            report.tried = (f"{report.tried}; " if report.tried else "") + f"the calls were lossless, but {text}"
            report.next_step = ("make the function keep no state across calls (pass it in, or reset it), or check "
                                "the stateful part on its own")
            return
    else:
        text = (f"the state {report.function} keeps across calls ({names}) changed during the check"
                + (" and then stayed the same on identical calls (a cache, or a once-only flag)" if evolves is False
                   else "") + ": the verdict assumes it does not change the outcomes")
    report.note = f"{report.note}; {text}" if report.note else text
