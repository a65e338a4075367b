"""A user's rule (``--verifier FILE.py:NAME``) that runs in its sandbox (``verispec.guard.sandbox``), as a verifier
here.

The rule is a procedure function, a ``Verifier`` or a ``NodeSolver``; ``describe`` (run in the sandbox) says which,
with the attributes the engines read, and the classes here stand for it in the worker: each call of its methods
is a call into the sandbox, and the chooser a procedure is handed stays here (the sandbox calls it back).

What crosses is the rule's law and outcomes, never its objects, and nothing the rule only declares about itself is
taken on trust: the shortcuts an engine would take on its word (``node_solver``, ``order_free``, ``rule_dp``,
``reads_forest``, a solver's ``sequential_tests``) are left out, so the engines compute the law from the rule's own
``emission_laws`` (a node solver's ``output_laws``), the law real decoding samples from. Taken on trust, they let a
lossy rule pass: a Verifier whose laws are lossy declaring SpecInfer's solver, or a solver restating SpecInfer's
sequential tests over lossy ``output_laws``, was LOSSLESS (exit 0) by the walk's dynamic program (found by this
issue's hostile tester; the procedure's enumeration said LOSSY).
"""

from __future__ import annotations

import inspect

from verispec.errors import UnknownVerifierError, VerifierError
from verispec.simulator import DraftLaw, NodeSolver, Verifier
from verispec.simulator.chooser import DEFAULT_MAX_TRACES, NegligibleBranch, enumerate_law
from verispec.simulator.interfaces import emission_law_of_procedure
from verispec.verifiers.base import ProcedureVerifier

#: Methods of a user's Verifier that the worker calls (the engines' interface).
VERIFIER_METHODS = ("emission_laws", "procedure")
#: Methods of a user's NodeSolver that the worker calls.
SOLVER_METHODS = ("output_laws", "sample")


def describe(target, register) -> dict:
    """In the sandbox: what the worker needs to know of the loaded rule, as plain values."""
    if isinstance(target, Verifier):
        return {"kind": "verifier", "name": str(getattr(target, "name", type(target).__name__)),
                "valid_for": _law_names(getattr(target, "valid_for", ())),
                "calls": {name: _call_name(getattr(target, name, None)) for name in VERIFIER_METHODS}}
    if isinstance(target, NodeSolver):
        return {"kind": "node_solver", **_solver(target)}
    if callable(target):
        return {"kind": "procedure", "valid_for": _law_names(getattr(target, "valid_for", {DraftLaw.SINGLE_PATH})),
                "calls": {"": _call_name(target)}}
    return {"kind": "other", "type": type(target).__name__}


def _solver(solver) -> dict:
    return {"name": str(getattr(solver, "name", type(solver).__name__)),
            "valid_for": _law_names(getattr(solver, "valid_for", ())),
            "outside_tokens_read": int(getattr(solver, "outside_tokens_read", 0)),
            "calls": {name: _call_name(getattr(solver, name, None)) for name in SOLVER_METHODS}}


def _law_names(laws) -> list:
    """Draft laws by name (anything else as its repr: the worker's compatibility check then names it)."""
    try:
        return [law.name if isinstance(law, DraftLaw) else repr(law) for law in laws]
    except TypeError:
        return [repr(laws)]


def _call_name(function) -> str:
    """How ``--call-timeout`` names a call of ``function``: as the call watchdog names a frame of the user's code."""
    function = getattr(function, "__func__", function)
    code = getattr(function, "__code__", None)
    if code is None:
        code = getattr(vars(type(function)).get("__call__"), "__code__", None)  # a callable object's own method
    if code is None:
        return f"a call of {type(function).__name__}"
    return f"the call of {code.co_qualname} ({code.co_filename}, line {code.co_firstlineno})"


def _laws(names) -> frozenset:
    return frozenset(DraftLaw[name] if name in DraftLaw.__members__ else name for name in names or ())


# --- a procedure's choice traces, run in the sandbox in one call and replayed here -----------------------------

class _Recording:
    """In the sandbox: the enumerator's chooser, with every decision the procedure asks for written down first."""

    def __init__(self, chooser, decisions: list):
        self._chooser, self._decisions = chooser, decisions

    def categorical(self, probs):
        return self._decide("categorical", probs)

    def bernoulli(self, prob):
        return self._decide("bernoulli", prob)

    def _decide(self, method: str, value):
        entry = [method, value, None]
        self._decisions.append(entry)
        choice = getattr(self._chooser, method)(value)
        entry[2] = choice
        return choice


class _Stop(BaseException):
    """Ends the sandbox's enumeration at a run that failed (the worker raises the failure when it replays it)."""


def traces_in_sandbox(function, args, kwargs, options):
    """In the sandbox: the call itself, or (``options["traces"]``) every choice trace of ``function(tree, chooser)``
    run by the generic enumerator in this process, each run's decisions (method, what was passed, the choice),
    outcome or failure written down for the worker to replay (``replayed_law``)."""
    if not options.get("traces"):
        return function(*args, **kwargs), None
    from verispec.guard.sandbox_process import failure, progress

    tree = args[0]
    runs: list[dict] = []

    def run(chooser):
        record = {"decisions": [], "outcome": None, "failure": None}
        runs.append(record)
        try:
            record["outcome"] = function(tree, _Recording(chooser, record["decisions"]))
        except NegligibleBranch:
            raise
        except BaseException as error:  # the rule's failure (or a chooser's refusal it let through): replayed there
            record["failure"] = failure(error)
            raise _Stop() from None
        finally:
            progress()  # each run is one call for --call-timeout
        return 0

    try:
        enumerate_law(run, exact=bool(options.get("exact")), max_traces=int(options["max_traces"]), name="rule")
    except _Stop:
        pass
    except Exception:  # the enumeration's own limit (too many traces): the worker's replay reaches it too
        pass
    return None, {"runs": runs}


def replayed_law(remote: _Remote, method: str | None, tree, name: str):
    """The emission law of a procedure in the sandbox: its choice traces run there in one call
    (``traces_in_sandbox``), replayed here through the generic enumerator, whose own chooser decides every choice
    again from what the procedure passed and computes every weight. A run whose recorded choice differs from this
    chooser's, or a run missing, is refused (a rule not deterministic given its choices, or one that rewrote the
    sandbox's chooser)."""
    options = {"traces": True, "exact": bool(tree.exact), "max_traces": DEFAULT_MAX_TRACES}
    _, records = remote._box.call(remote._id, method, (tree,), {}, options,
                                  what=remote._calls.get(method or "", remote._box.spec))
    runs = iter((records or {}).get("runs") or [])

    def differs() -> VerifierError:
        return VerifierError(f"verifier '{name}' decided otherwise when its traces were replayed: it is not "
                             "deterministic given its choices (another source of randomness, or state kept between "
                             "calls), or it rewrote the chooser verispec handed it")

    def replay(_tree, chooser):
        record = next(runs, None)
        if not isinstance(record, dict) or not isinstance(record.get("decisions"), list):
            raise differs()
        for decision in record["decisions"]:
            if not (isinstance(decision, list) and len(decision) == 3 and decision[0] in ("categorical", "bernoulli")):
                raise differs()
            kind, value, recorded = decision
            choice = getattr(chooser, kind)(value)
            if recorded is None or choice != recorded:
                raise differs()
        if record.get("failure") is not None:
            from verispec.guard.sandbox import raise_failure

            raise_failure(record["failure"])
        return record.get("outcome")

    return emission_law_of_procedure(replay, tree, name=name)


class _Remote:
    """A call into one object of the sandbox."""

    def __init__(self, box, object_id: int, calls: dict):
        self._box, self._id, self._calls = box, object_id, calls

    def _call(self, method: str | None, *args):
        value, _ = self._box.call(self._id, method, args, {}, what=self._calls.get(method or "", self._box.spec))
        return value


class SandboxedVerifier(Verifier):
    """A user's ``Verifier`` in its sandbox."""

    def __init__(self, box, object_id: int, info: dict):
        self._remote = _Remote(box, object_id, info.get("calls") or {})
        self.name = info["name"]
        self.valid_for = _laws(info["valid_for"])

    def emission_laws(self, batch):
        return self._remote._call("emission_laws", batch)

    def procedure(self, tree, chooser):
        return self._remote._call("procedure", tree, chooser)

    def enumerated_emission_law(self, tree):
        return replayed_law(self._remote, "procedure", tree, self.name)


class SandboxedSolver(NodeSolver):
    """A user's ``NodeSolver`` in its sandbox."""

    def __init__(self, box, object_id: int, info: dict):
        self._remote = _Remote(box, object_id, info.get("calls") or {})
        self.name = info["name"]
        self.valid_for = _laws(info["valid_for"])
        self.outside_tokens_read = info["outside_tokens_read"]

    def output_laws(self, p, q, children):
        return self._remote._call("output_laws", p, q, children)

    def sample(self, p, q, children, chooser):
        return self._remote._call("sample", p, q, children, chooser)

    @property
    def has_sequential_tests(self) -> bool:
        return False  # a declaration, not the law (module docstring)


class SandboxedProcedure:
    """A user's procedure function in its sandbox: ``procedure(tree, chooser) -> (node, token)``."""

    def __init__(self, box, info: dict):
        self._remote = _Remote(box, 0, info.get("calls") or {})
        self.__name__ = box.spec.rpartition(":")[2]
        self.__signature__ = inspect.Signature([inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD)
                                                for name in ("tree", "chooser")])

    def __call__(self, tree, chooser):
        return self._remote._call(None, tree, chooser)


class SandboxedProcedureVerifier(ProcedureVerifier):
    """``ProcedureVerifier`` of a procedure in its sandbox: each tree's choice traces cross in one call."""

    def enumerated_emission_law(self, tree):
        return replayed_law(self._procedure._remote, None, tree, self.name)


def sandboxed_rule(spec: str, box) -> Verifier:
    """The verifier standing for the rule loaded in ``box`` (see the module docstring)."""
    from verispec.verifiers.tree_walk import TopDownVerifier

    info = box.description
    kind = info.get("kind") if isinstance(info, dict) else None
    if kind == "verifier":
        return SandboxedVerifier(box, 0, info)
    if kind == "node_solver":
        return TopDownVerifier(SandboxedSolver(box, 0, info))
    if kind == "procedure":
        return SandboxedProcedureVerifier(spec.rpartition(":")[2], SandboxedProcedure(box, info),
                                          _laws(info["valid_for"]))
    raise UnknownVerifierError(f"{spec!r} is neither a Verifier, a NodeSolver nor a procedure function")


__all__ = ["SandboxedProcedure", "SandboxedProcedureVerifier", "SandboxedSolver", "SandboxedVerifier", "describe",
           "replayed_law", "sandboxed_rule", "traces_in_sandbox"]
