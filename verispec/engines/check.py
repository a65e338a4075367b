"""An engine's checks run as a library call: what ``verispec check-engine NAME`` runs, and what the pytest plugin's
``verispec_check.engine(NAME)`` runs (``verispec.pytest_plugin``), with the same rows and the same exit status.

``run_engine_checks`` selects the adapter's checks (``select_checks``), runs each through ``check_external`` (the
engine's code under check-external's capture) or, for greedy decoding, against the target's argmax on every draft
list (``verispec.engines.greedy``), or, for seeds, by replaying seeded requests (``verispec.engines.seeds``), and
returns the command's JSON object: ``engine``, ``release``, ``source``, ``exit_status`` and one row a check. The exit
status is the worst finding: 1 a check LOSSY that should hold the law (or a seeded request IRREPRODUCIBLE), 4 one
that raised, 2 one whose kernel the interpreter cannot run, 3 one inconclusive, 0 every check as a correct release
gets it (a LOSSY that the engine documents counts as expected and is listed with its TV; where the check
names a ``reference`` rule of verispec's, the engine's exact law must also be that rule's, or the row counts 1, and 3
where no exact law was made to compare). A check of an entry point the release predates (``Check.since``) is an
ABSENT row that runs nothing; it counts for nothing, unless every row asked is ABSENT (exit 2: nothing was checked).

Importing the adapter's step functions imports the engine and switches Triton's interpreter on for the process
(``verispec.engines.vllm_v1``): run these checks in a process of their own (the command's supervised worker, the
plugin's child process), never in a process that goes on to use the engine on a device. In the command's worker the
run's functions are loaded in one sandbox (``SharedLoader``), so the engine is imported once a run.
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Sequence

from verispec.engines import source_refusal, version_key
from verispec.errors import VerispecError
from verispec.guard.limits import DEFAULT_CHECK_BUDGET
from verispec.verdict import EXIT_BAD_INPUT, EXIT_INCONCLUSIVE, Verdict

__all__ = ["CHILD_STARTUP_SECONDS", "DEFAULT_CHECK_BUDGET", "INTERPRETER_ERROR", "MODES", "SharedLoader",
           "check_options", "exit_status", "row_line", "run_check", "run_engine_checks", "run_engine_checks_in_child",
           "select_checks"]
#: The exception Triton's interpreter raises for a kernel it cannot run.
INTERPRETER_ERROR = "InterpreterError"
#: Check-external's modes an engine check takes.
MODES = ("auto", "exact", "blackbox")


def select_checks(engine: str, names: str | Sequence[str] | None = None):
    """(the adapter module of ``engine``, its checks named by ``names``: comma-separated text or a list, in the
    order named, each once; None: all, in the adapter's order); EngineError or VerispecError on one line naming
    the checks known."""
    from verispec.engines import adapter

    module = adapter(engine)
    checks = module.checks()
    if names is None:
        return module, checks
    if isinstance(names, str):
        shown, parts = names, names.split(",")
    else:
        parts = list(names)
        if not all(isinstance(name, str) for name in parts):
            raise VerispecError(f"checks of {engine} are named by strings, got {parts!r}: choose from "
                                f"{', '.join(sorted(check.name for check in checks))}")
        shown = ",".join(parts)
    wanted = [name.strip() for name in parts if name.strip()]
    known = {check.name for check in checks}
    unknown = [name for name in wanted if name not in known]
    if unknown or not wanted:
        raise VerispecError(f"unknown check {', '.join(unknown) or repr(shown)} of {engine}: choose "
                            f"from {', '.join(sorted(known))}")
    by_name = {check.name: check for check in checks}
    return module, [by_name[name] for name in dict.fromkeys(wanted)]  # the order named: --fail-fast stops there


def run_engine_checks(engine: str, checks: str | Sequence[str] | None = None, *, tree: str | None = None,
                      problem=None, mode: str = "exact", detect_tv: float = 0.01, alpha: float = 1e-6,
                      time_budget: float = DEFAULT_CHECK_BUDGET, source: str | None = None,
                      any_release: bool = False, fail_fast: bool = False, context_twin: bool = False,
                      neighbours: str = "greedy") -> dict:
    """Run ``engine``'s checks (``checks`` as for ``select_checks``) on the installed release and return
    ``verispec check-engine``'s JSON object (before ``plain_json``): ``engine``, ``release``, ``source``,
    ``exit_status`` and ``checks``, one row a check.

    ``tree``: the draft tree of every check (default each check's, ``chain:1``); ``problem``: a ``Problem`` for every
    check (default each check's own context-free one); ``mode``, ``detect_tv``, ``alpha``: as for check-external;
    ``time_budget``: seconds each check may take; ``source``: a file loaded in place of the engine's sampler module
    (a mutant of the shipped file; the installed files are not changed); ``any_release``: check a release outside
    the adapter's list (its entry points are still verified where a check loads them); ``fail_fast``: stop after the
    first check whose exit status is not 0 (the rows end there, as pytest's ``-x``: what a mutation run or a CI
    needs to know first); ``context_twin``: a step check on a context-free problem also checks its context twin,
    where code reading another position's row is seen (``verispec.external.step_context``); ``neighbours``:
    "sampled" makes the batch checks' (``step-ragged``) neighbours sample, their joint law checked
    (``verispec.external.step_neighbours``). Refused in one line
    (EngineError, VerispecError) before any check runs: an engine or check that is not known, an engine not
    installed or of a release the adapter does not know, a ``source`` that is not a file, an option out of range."""
    check_options(mode=mode, detect_tv=detect_tv, alpha=alpha, time_budget=time_budget)
    module, selected = select_checks(engine, checks)
    release = module.check_release(any_release=any_release)
    refusal = None if source is None else source_refusal(engine, module, source)
    if refusal:
        raise VerispecError(refusal)
    elsewhere = [check.name for check in selected if not check.source_applies]
    if source is not None and elsewhere:
        raise VerispecError(f"source replaces {module.SAMPLER_MODULE}, which {', '.join(elsewhere)} does not run: "
                            "check those without a source (their verdict would be the installed code's)")
    before = os.environ.get(module.SOURCE_VARIABLE)
    if source is not None:
        os.environ[module.SOURCE_VARIABLE] = os.path.abspath(source)
    # the run's functions in one sandbox where the command runs them in sandboxes: the engine imported once
    load = SharedLoader([check.function for check in selected if not _absent(module, check)])
    try:
        rows = []
        for check in selected:
            rows.append(run_check(module, check, engine=engine, tree=tree, problem=problem, mode=mode,
                                  detect_tv=detect_tv, alpha=alpha, time_budget=time_budget, load=load,
                                  context_twin=context_twin, neighbours=neighbours))
            if fail_fast and exit_status(rows[-1:]) != 0:
                break
    finally:
        if before is None:
            os.environ.pop(module.SOURCE_VARIABLE, None)
        else:
            os.environ[module.SOURCE_VARIABLE] = before
    return {"engine": engine, "release": release, "source": source, "exit_status": exit_status(rows),
            "checks": rows}


def check_options(*, mode: str = "exact", detect_tv: float = 0.01, alpha: float = 1e-6,
                  time_budget: float = DEFAULT_CHECK_BUDGET, **_) -> None:
    """VerispecError in one line unless ``mode`` is one of ``MODES`` and the numbers are positive and finite (the
    command's own parser refuses the same; check-external checks the rest of their ranges)."""
    if mode not in MODES:
        raise VerispecError(f"unknown mode {mode!r} of an engine check: choose one of {', '.join(MODES)}")
    for name, value in (("detect_tv", detect_tv), ("alpha", alpha), ("time_budget", time_budget)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < float("inf"):
            raise VerispecError(f"{name} must be a positive finite number, got {value!r}")


def run_check(module, check, *, engine: str, tree: str | None, problem, mode: str, detect_tv: float, alpha: float,
              time_budget: float, load=None, context_twin: bool = False, neighbours: str = "greedy") -> dict:
    """One check's row: what was checked (entry, function, layout, tree, sampling, problem, expected verdict,
    threshold), the verdict and its evidence (TV, discrepancies, the greedy check's witness, what raised), the
    seconds it took and whether the verdict is the one a correct release gets. ``load``: how the check's function
    is loaded (``load_function`` by default; ``run_engine_checks`` hands its run's ``SharedLoader``)."""
    from verispec.engines.greedy import greedy_check
    from verispec.external.adapter import load_function
    from verispec.simulator import ContextFreeProblem

    tree = tree or check.tree
    start = time.monotonic()
    if problem is None:
        problem = ContextFreeProblem(list(check.target), list(check.draft))
    row = {"check": check.name, "entry": check.entry, "description": check.description, "function": check.function,
           "layout": check.layout, "tree": tree, "sampling": "greedy" if check.exhaustive else check.sampling,
           "target": [float(x) for x in problem.target(())], "draft": [float(x) for x in problem.draft(())],
           "expected": check.expect, "why": check.why or None, "threshold": module.THRESHOLD}
    absent = _absent(module, check)
    function = None if absent else (load or load_function)(check.function)
    if absent:
        row.update(verdict="ABSENT", note=absent)
    elif check.exhaustive:
        row.update(greedy_check(function, tree, problem))
    elif check.seeds:
        from verispec.engines.seeds import seeds_check

        row.update(seeds_check(function, tree, problem, check.sampling, time_budget=time_budget))
    else:
        from verispec.external.check import check_external

        context_twin = context_twin or check.context_twin
        # a check out of time is an INCONCLUSIVE report (check_external's), so its row says so and the others run
        report = check_external(function, check.layout, tree, problem=problem, mode=mode,
                                name=f"{engine}:{check.name}", detect_tv=detect_tv, alpha=alpha,
                                time_budget=time_budget, sampling=check.sampling, rng="capture",
                                threshold=module.THRESHOLD, **({"context_twin": True} if context_twin else {}),
                                **({"neighbours": neighbours} if check.layout == "step-ragged" else {}))
        found = report.to_json()
        row.update(verdict=report.verdict.word, mode=report.mode, tv_distance=report.tv_distance,
                   tv_estimate=report.tv_estimate, power=found.get("power"), discrepancies=report.discrepancies,
                   evaluations=report.evaluations, note=report.note, raised=report.raised,
                   offsets_visible=report.offsets_visible)
        if check.reference:
            row.update(reference_comparison(check, report, problem, tree, context_twin, module.THRESHOLD))
    if row["verdict"] == "RAISES" and (row.get("raised") or {}).get("exception") == INTERPRETER_ERROR:
        row["verdict"] = "UNRUNNABLE"
        row["note"] = (f"Triton's interpreter cannot run a kernel on this route "
                       f"({(row.get('raised') or {}).get('message', '')}); nothing was checked")
    row["seconds"] = round(time.monotonic() - start, 3)
    row["as_expected"] = row["verdict"] in (check.expect.upper(), "ABSENT") or (check.expect == "lossy"
                                                                                and row["verdict"] == "LOSSLESS")
    if row.get("reference_matches") is False:  # lossy by design, but not by the rule it claims
        row["as_expected"] = False
    return row


def reference_comparison(check, report, problem, tree: str, context_twin: bool, threshold: float) -> dict:
    """The row's ``reference`` fields: the rule ``check.reference``, the exact TV between the engine's emitted-block
    law and that rule's on the requested problem (the given problem after the check's sampling, drafted by ``tree``),
    and whether it is within ``threshold``; None where no exact block law of the given problem was made (black-box
    mode, a raise, or ``context_twin``, whose verdict may rest on the twin)."""
    import numpy as np

    from verispec.external.step_entry import layout_penalties
    from verispec.external.step_penalties import requested_problem
    from verispec.models.sampling import Sampling
    from verispec.simulator import analyze
    from verispec.simulator.tree_specs import parse_tree
    from verispec.verifiers import get_verifier

    found = {"reference": check.reference, "reference_tv": None, "reference_matches": None}
    if report.mode != "exact" or report.block_tables is None or context_twin:
        return found
    drafter = parse_tree(tree)
    # the law the check compared with the target's: the same sampling and, on step-penalties, the same penalties
    wanted = requested_problem(problem, Sampling.parse(check.sampling), drafter.depth + 1,
                               layout_penalties(None, check.layout))
    law = analyze(wanted, drafter, get_verifier(check.reference), need_output_law=True).output_law
    distance = 0.5 * sum(float(np.abs(np.asarray(ours, dtype=np.float64) - np.asarray(theirs, dtype=np.float64))
                               .sum()) for ours, theirs in zip(report.block_tables, law.by_length, strict=True))
    return {**found, "reference_tv": distance, "reference_matches": distance <= threshold}


def _absent(module, check) -> str | None:
    """Why the installed release has no entry point for ``check`` (it predates ``check.since``), or None."""
    if not check.since:
        return None
    release = module.release()
    if version_key(release) >= version_key(check.since):
        return None
    return f"{check.name} needs {module.PACKAGE} {check.since} or later, and this is {release}: nothing was checked"


def exit_status(rows) -> int:
    """The worst finding of the rows (see the module docstring); rows of entry points the release does not have
    count for nothing, unless nothing else was asked (then nothing was checked: exit 2)."""
    if rows and all(row["verdict"] == "ABSENT" for row in rows):
        return EXIT_BAD_INPUT
    verdicts = [(row["verdict"], row["as_expected"]) for row in rows]
    # a LOSSY that should hold the law, or a law that is not the reference rule's (either verdict, ``reference``)
    if any(verdict in ("LOSSY", "LOSSLESS") and not expected or verdict == "IRREPRODUCIBLE"
           for verdict, expected in verdicts):
        return Verdict.LOSSY.exit_status
    if any(verdict == "RAISES" for verdict, _ in verdicts):
        return Verdict.RAISES.exit_status
    if any(verdict == "UNRUNNABLE" for verdict, _ in verdicts):
        return EXIT_BAD_INPUT
    if any(verdict == "INCONCLUSIVE" for verdict, _ in verdicts):
        return EXIT_INCONCLUSIVE
    # a rule the law must be whose law was not compared (no exact law of the given problem): nothing proven of it
    if any(row.get("reference") and row.get("reference_matches") is None and row["verdict"] in ("LOSSY", "LOSSLESS")
           for row in rows):
        return EXIT_INCONCLUSIVE
    return 0


def row_line(row: dict) -> str:
    """One check's line of the command's text output (a second line for a documented loss or a note)."""
    if row["verdict"] == "ABSENT":
        return f"  {row['check']:20} ABSENT: {row['note']}"
    verdict = row["verdict"] + ("" if row["as_expected"] else f" (expected {row['expected'].upper()})")
    if row.get("tv_distance") is not None:
        measure = f"exact TV {row['tv_distance']:.3g} (lossy above {row['threshold']:g})"
    elif row.get("tv_estimate") is not None:
        power = row.get("power") or {}
        measure = f"TV estimate {row['tv_estimate']:.3g}; {power.get('statement', '')}"
    else:
        measure = ""
    text = (f"  {row['check']:20} {verdict:12} {row.get('mode', '')}, {row['tree']}, "
            f"{row['sampling'] or 'the laws as handed'}: {measure}")
    text += f" ({row['seconds']:.1f} s)"
    if row.get("reference_tv") is not None:
        text += (f"\n      {'matches' if row['reference_matches'] else 'DIFFERS FROM'} verispec's {row['reference']}: "
                 f"exact TV {row['reference_tv']:.3g} between the laws (differs above {row['threshold']:g})")
    elif row.get("reference"):
        text += f"\n      not compared with verispec's {row['reference']}: no exact law of the given problem"
    if row.get("why") and row["verdict"] == "LOSSY":
        text += f"\n      documented: {row['why']}"
    if row["verdict"] not in ("LOSSLESS",) and row.get("note"):
        text += f"\n      {row['note']}"
    return text


#: Seconds a child process running engine checks gets beyond its checks' budgets (starting Python, importing the
#: engine and torch, the first call of every route).
CHILD_STARTUP_SECONDS = 120.0


def run_engine_checks_in_child(engine: str, checks: str | Sequence[str] | None = None, **options) -> dict:
    """``run_engine_checks`` in a fresh process of its own (``multiprocessing``'s spawn), so that the engine's import
    and the interpreter switch (``TRITON_INTERPRET``, no CUDA device) never reach the calling process: the pytest
    plugin's route. The same result; the child's typed errors are raised here again, with the same class and line.
    A child that runs past its checks' budgets plus ``CHILD_STARTUP_SECONDS`` is ended (``AnalysisTimeoutError``);
    one that dies without answering is an ``EngineError`` naming its exit code."""
    import multiprocessing

    from verispec.engines import EngineError
    from verispec.errors import AnalysisTimeoutError

    check_options(**options)  # refused here, at once, without starting a process
    _, selected = select_checks(engine, checks)
    budget = float(options.get("time_budget", DEFAULT_CHECK_BUDGET))
    limit = len(selected) * budget * 1.25 + CHILD_STARTUP_SECONDS
    context = multiprocessing.get_context("spawn")
    reader, writer = context.Pipe(duplex=False)
    child = context.Process(target=_child, args=(writer, engine, [check.name for check in selected], options),
                            name=f"verispec-engine-{engine}", daemon=True)
    child.start()
    writer.close()
    try:
        if not reader.poll(limit):
            raise AnalysisTimeoutError(f"{engine}'s checks ran past {limit:g} s ({len(selected)} checks of "
                                       f"time_budget {budget:g} s, and {CHILD_STARTUP_SECONDS:g} s to start): "
                                       "INCONCLUSIVE; raise time_budget")
        try:
            answer = reader.recv()
        except EOFError:
            child.join(10)
            raise EngineError(f"the process running {engine}'s checks ended (exit code {child.exitcode}) without "
                              "answering: the engine's code crashed it") from None
    finally:
        reader.close()
        if child.is_alive():
            child.kill()
        child.join(10)
    kind, payload = answer
    if kind == "result":
        return payload
    error_class, message = payload
    try:
        error = error_class(message)
    except TypeError:  # a typed error whose constructor takes more: its class's base, with the same line
        error = VerispecError(message)
    raise error


def _child(writer, engine: str, names: list[str], options: dict) -> None:
    """The spawned process's side: one answer, ("result", the dict) or ("error", (a VerispecError class, its
    message)); any other exception is a bug and is sent as a RuntimeError with its traceback. Where it can, the
    process supervises its checks as ``verispec check-engine`` does (``verispec.guard.supervisor``): the engine's
    code runs in a sandbox, and the answer is read from the file the supervisor writes once every process of that
    code has ended, which the code cannot reach (``_supervised_checks``)."""
    import traceback

    from verispec.guard import supervisor

    try:
        if supervisor.available():
            answer = _supervised_checks(engine, names, options)
        else:
            answer = ("result", run_engine_checks(engine, names, **options))
    except VerispecError as error:
        answer = ("error", (type(error), str(error)))
    except Exception:
        answer = ("error", (RuntimeError, f"verispec's engine check failed inside its process:\n"
                                          f"{traceback.format_exc()}"))
    writer.send(answer)
    writer.close()


def _supervised_checks(engine: str, names: list[str], options: dict):
    """``run_engine_checks`` in a supervised worker, its answer through the supervisor's ``--json-out`` file."""
    import importlib
    import json
    import tempfile

    from verispec.files.io import plain_json
    from verispec.guard import supervisor

    def work() -> int:
        try:
            print(json.dumps(plain_json({"result": run_engine_checks(engine, names, **options)})))
        except VerispecError as error:
            print(json.dumps({"error": [type(error).__module__, type(error).__qualname__, str(error)]}))
        return 0

    budget = float(options.get("time_budget", DEFAULT_CHECK_BUDGET))
    with tempfile.TemporaryDirectory(prefix="verispec-engine-") as folder:
        out = os.path.join(folder, "answer.json")
        status = supervisor.run_supervised(work, supervisor.Supervision(
            command=f"verispec check-engine {engine} with {', '.join(names)}", json_output=True, json_out=out,
            time_limit=len(names) * budget * 1.25 + CHILD_STARTUP_SECONDS, checking=f"{engine}'s checks"))
        try:
            with open(out, encoding="utf-8") as file:
                document = json.load(file)
        except (OSError, ValueError):
            raise VerispecError(f"{engine}'s checks ended (status {status}) without an answer: the engine's code "
                                "crashed or stopped the process running them") from None
    if "error" in document:
        module, name, message = document["error"]
        error_class = getattr(importlib.import_module(module), name, VerispecError)
        return "error", (error_class if isinstance(error_class, type) else VerispecError, message)
    return "result", document["result"]


# -- the run's functions in one sandbox: the engine imported once a run, not once a check
#
# In a supervised worker (``verispec check-engine``), ``load_function`` starts a sandbox for every function it loads
# (``verispec.guard.sandbox``): a fork of the worker that imports the function's module, and with it the engine. vLLM's
# import alone is some 8 s of CPU (torch, Triton, transformers, openai), paid again by every check of a run while the
# sandboxes of the checks before it sit idle. The adapter's functions of one run import the same engine, so
# ``SharedLoader`` loads them all in one sandbox, each registered there under an object id of its own, and hands each
# check a ``SandboxedFunction`` over its id, as ``load_function`` hands one over a sandbox of its own.
#
# What a check sees is the same: its function runs in a process that is not the worker, every call is a message, and
# a function that cannot be loaded is refused when its own check loads it (the checks before it run, and
# ``--fail-fast`` still stops first), with the error a sandbox of its own gives. What changes is what that process
# ran before: the earlier checks of the run, in the same engine, as the pytest plugin's child process
# (``run_engine_checks_in_child``) and the Python API have always run them. A sandbox ended in the middle of a call (a
# time limit) starts again at the next call and loads every function again, in the same order, under the same ids.
# Outside a supervised worker, or for one function, ``load_function`` itself loads it. In a worker, torch is imported
# before any sandbox forks (``_torch_before_the_fork``).


class SharedLoader:
    """``load_function`` for the adapter functions ``specs`` (``package.module:NAME``) of one run: called with one
    of them, its ``SandboxedFunction`` in the run's one sandbox (started at the first call)."""

    def __init__(self, specs):
        self.specs = list(dict.fromkeys(specs))
        self._box = None

    def __call__(self, spec: str):
        from verispec.external.adapter import load_function
        from verispec.guard import sandbox

        if not sandbox.enabled():
            return load_function(spec)
        _torch_before_the_fork()
        if len(self.specs) < 2 or spec not in self.specs:
            return load_function(spec)
        from verispec.errors import UnknownVerifierError
        from verispec.external.sandboxed import SandboxedFunction, call_in_sandbox

        if self._box is None:
            modules = ", ".join(dict.fromkeys(spec.rpartition(":")[0] for spec in self.specs))
            label = f"{modules}:{','.join(spec.rpartition(':')[2] for spec in self.specs)}"  # what messages name
            self._box = sandbox.Sandbox(label, "function", _describe_each, call_in_sandbox,
                                        loader=functools.partial(_load_each, tuple(self.specs)))
        entry = self._box.load()[self.specs.index(spec)]
        if "refused" in entry:
            raise UnknownVerifierError(str(entry["refused"]))
        if "failure" in entry:  # the import exited or raised past load_attribute: as a sandbox of its own says
            sandbox.raise_failure(entry["failure"])
        if not entry["description"]["callable"]:
            raise UnknownVerifierError(f"{spec!r} is not a function (it is {entry['description']['type']})")
        return SandboxedFunction(_Registered(self._box, entry["id"], entry["description"]))


def _torch_before_the_fork() -> None:
    """Import torch in the worker before a sandbox forks from it: the worker imports it anyway for the checks' arrays
    (the step layouts hand torch tensors), and a sandbox forked after it inherits it instead of importing it again
    with the engine (some 2 s of CPU a sandbox). torch is verispec's own dependency, not the code under check; the
    engine itself is imported in the sandbox only."""
    try:
        import torch  # noqa: F401
    except Exception:  # no torch, or one that does not import: the sandbox imports what it needs and says why not
        pass


class _Registered:
    """One function of the shared sandbox, as ``SandboxedFunction`` uses a sandbox of its own: its description, and
    calls that reach it by its id."""

    def __init__(self, box, object_id: int, description: dict):
        self._box, self._id, self.description = box, object_id, description
        self.spec = box.spec

    def call(self, object_id: int, method, args: tuple, kwargs: dict, options=None, *, what: str):
        return self._box.call(self._id, method, args, kwargs, options, what=what)


class _NotLoaded:
    """In the sandbox: a function whose module could not be loaded, with what its check raises in the worker."""

    def __init__(self, entry: dict):
        self.entry = entry


def _load_each(specs: tuple, label: str, what: str) -> list:
    """In the sandbox: every function of ``specs``, loaded as ``load_function`` loads one (``load_attribute``), or
    a ``_NotLoaded`` with the refusal or failure that loading it alone would have sent."""
    from verispec.errors import UnknownVerifierError
    from verispec.guard.sandbox_process import failure
    from verispec.user_code import load_attribute

    loaded = []
    for spec in specs:
        try:
            loaded.append(load_attribute(spec, what))
        except UnknownVerifierError as error:
            loaded.append(_NotLoaded({"refused": str(error)}))
        except BaseException as error:  # an exit at import: the sandbox of its own would have sent this failure
            loaded.append(_NotLoaded({"failure": failure(error)}))
    return loaded


def _describe_each(loaded: list, register) -> list:
    """In the sandbox: for each function, its object id and ``describe``'s description, or its refusal; every spec
    gets an id in order (a function not loaded registers nothing callable), so a restarted sandbox keeps them."""
    from verispec.external.sandboxed import describe

    entries = []
    for function in loaded:
        object_id = register(None if isinstance(function, _NotLoaded) else function)
        entries.append(function.entry if isinstance(function, _NotLoaded) else
                       {"id": object_id, "description": describe(function, register)})
    return entries
