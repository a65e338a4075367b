"""verispec's pytest plugin (entry point ``pytest11``: installed with verispec, loaded by every pytest run).

A project checks its verification code in its own suite, in one of three ways::

    def test_our_sampler_is_lossless(verispec_check):                 # the fixture, on a function
        verispec_check(our_module.rejection_sample, "ragged", "chain:3")

    @pytest.mark.verispec_lossless(layout="ragged", tree="chain:3")   # the marker: the test returns the function
    def test_our_sampler():
        return our_module.rejection_sample

    def test_installed_vllm(verispec_check):                           # an installed engine's shipped sampler
        verispec_check.engine("vllm", checks=["v1-greedy", "v1-seeded"])

``verispec_check(function, layout, tree, problems=None, mode="auto", time_budget=None, **options)`` is
``verispec.testing.assert_lossless_confined``: the test passes only on a LOSSLESS verdict; LOSSY, INCONCLUSIVE and
RAISES fail it, with the witness problem as JSON and the sequences the function over- and under-produces there in the
failure message. The function is confined as ``verispec check-external`` confines a file's: the check runs in a
supervised fork of the test's process and the function in a sandbox forked from it, so whatever it does (exits,
signals, hangs, writes into verispec's objects or output) the test's outcome is verispec's verdict; it returns the
reports as ``check-external --json`` writes them. Where supervision is off (``VERISPEC_SUPERVISE=0``) it runs in the
test's process with an ``UnconfinedCheckWarning``.

``verispec_check.engine(name, checks=None, ...)`` runs what ``verispec check-engine NAME --check ...`` runs
(``verispec.engines.check``), in a process of its own so that the engine's import and Triton's interpreter switch
stay out of the test process, and fails unless the command's exit status would be 0, listing every check's line
and each failing check's evidence. Bad input (an unknown layout, check or engine, an engine not installed) fails the
test in one line naming the value and the fix.

``--verispec-time-budget SECONDS`` replaces the default budget where a test gives none: the whole of a function's
check (default 60 s, ``assert_lossless``'s) and each engine check (default 600 s, ``check-engine``'s).

Importing this module imports pytest and the standard library only: numpy, torch, vLLM and cvxpy are imported when
a check runs, never because the plugin is installed.
"""

from __future__ import annotations

import functools
import json
import math

import pytest

#: The marker's name and its line in ``pytest --markers``.
MARKER = "verispec_lossless"
MARKER_HELP = (f"{MARKER}(layout, tree, problems=None, mode='auto', time_budget=None, **options): the test returns a "
               "verification function; it passes only if verispec finds it LOSSLESS (verispec.testing.assert_lossless)")
#: The defaults ``--verispec-time-budget`` replaces (``assert_lossless``'s and ``check-engine``'s).
FUNCTION_BUDGET = 60.0
ENGINE_BUDGET = 600.0


def _budget_option(text: str) -> float:
    import argparse

    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text!r}")
    return value


def pytest_addoption(parser):
    group = parser.getgroup("verispec", "verispec: exact checks of speculative-decoding verification code")
    group.addoption("--verispec-time-budget", type=_budget_option, default=None, metavar="SECONDS",
                    help=f"seconds a verispec check may take where the test gives no time_budget (default "
                         f"{FUNCTION_BUDGET:g} for a function's whole check, {ENGINE_BUDGET:g} for each engine check)")


def pytest_configure(config):
    config.addinivalue_line("markers", MARKER_HELP)


class VerispecCheck:
    """The ``verispec_check`` fixture's object: call it on a function, or ``.engine(name)`` on an installed engine.
    ``time_budget``: what ``--verispec-time-budget`` gave (None: each check's own default)."""

    def __init__(self, time_budget: float | None = None):
        self.time_budget = time_budget

    def __call__(self, function, layout: str, tree: str, *, problems=None, mode: str = "auto",
                 time_budget: float | None = None, **options):
        """``assert_lossless_confined(function, layout, tree, ...)`` as a test's verdict: the reports (check-external's
        JSON) when LOSSLESS, a pytest failure carrying the evidence otherwise. ``problems``: None (the canonical
        suite), one problem (a ``verispec.simulator.Problem`` or a problem file) or a list of them."""
        from verispec.errors import VerispecError
        from verispec.simulator.problems import Problem
        from verispec.testing import LosslessnessAssertionError
        from verispec.testing import assert_lossless_confined as assert_lossless

        if isinstance(problems, (Problem, str)):
            problems = [problems]
        budget = time_budget if time_budget is not None else (self.time_budget or FUNCTION_BUDGET)
        try:
            return assert_lossless(function, layout, tree, problems=problems, mode=mode, time_budget=budget,
                                   **options)
        except LosslessnessAssertionError as error:
            message = str(error)
        except VerispecError as error:
            message = f"verispec_check: {_one_line(error)}"
        pytest.fail(message, pytrace=False)  # outside the handler: the evidence alone, no chained exception

    def engine(self, name: str, checks=None, *, tree: str | None = None, target=None, draft=None,
               mode: str = "exact", detect_tv: float = 0.01, alpha: float = 1e-6, time_budget: float | None = None,
               source: str | None = None, context_twin: bool = False, neighbours: str = "greedy") -> dict:
        """``verispec check-engine NAME`` as a test's verdict: ``checks`` (a list of names, or comma-separated text;
        None: every check of the installed release), ``tree``, ``target``/``draft`` (probabilities, a list or
        comma-separated text, for every check; default each check's own), ``mode``, ``detect_tv``, ``alpha``,
        ``time_budget`` (each check's), ``source`` (a mutant of the engine's sampler file), ``context_twin`` and
        ``neighbours`` as the command's options. Returns the command's JSON object when its exit status is 0; fails
        the test otherwise."""
        from verispec.errors import VerispecError

        budget = time_budget if time_budget is not None else (self.time_budget or ENGINE_BUDGET)
        try:
            problem = _engine_problem(target, draft)
            result = _engine_checks(name, checks, tree=tree, problem=problem, mode=mode, detect_tv=detect_tv,
                                    alpha=alpha, time_budget=budget, source=source, context_twin=context_twin,
                                    neighbours=neighbours)
        except VerispecError as error:
            message = f"verispec_check.engine({name!r}): {_one_line(error)}"
        else:
            if result["exit_status"] == 0:
                return result
            message = engine_failure(result)
        pytest.fail(message, pytrace=False)


def _engine_checks(name: str, checks, **options) -> dict:
    """``verispec.engines.check.run_engine_checks_in_child``: the engine's checks in a process of their own."""
    from verispec.engines.check import run_engine_checks_in_child

    return run_engine_checks_in_child(name, checks, **options)


def _one_line(error) -> str:
    return " ".join(str(error).split())


def _engine_problem(target, draft):
    """The context-free problem of ``target``/``draft`` (lists or comma-separated text), or None for each check's own;
    refused in one line as the command's ``--target``/``--draft``."""
    from verispec.errors import VerispecError

    if target is None and draft is None:
        return None
    if target is None or draft is None:
        raise VerispecError("give both target and draft, or neither (each check's own problem)")
    from verispec.errors import InvalidProblemError
    from verispec.simulator import ContextFreeProblem
    from verispec.simulator.distributions import parse_distribution

    laws = [parse_distribution(law if isinstance(law, str) else ",".join(map(str, law)), exact=False, name=label)
            for law, label in ((target, "target"), (draft, "draft"))]
    if len(laws[0]) != len(laws[1]):
        raise InvalidProblemError(f"target has {len(laws[0])} probabilities but draft has {len(laws[1])}")
    return ContextFreeProblem(*laws)


def engine_failure(result: dict) -> str:
    """The failure message of an engine check whose exit status is not 0: what the status means, every check's
    line (a greedy check's with the draft list it failed on), and for each check that is not as a correct release
    gets it, its witness: the problem, the command that reproduces it, the sequences over- and under-produced, what
    raised."""
    from verispec.engines.check import row_line

    meaning = {1: "a check that should hold the law is LOSSY", 4: "a check raised",
               2: "a check's kernel cannot run under the interpreter (nothing was checked)",
               3: "a check is INCONCLUSIVE"}
    status = result["exit_status"]
    lines = [f"verispec check-engine {result['engine']}: exit status {status}, "
             f"{meaning.get(status, 'not every check as a correct release gets it')}",
             f"{result['engine']} {result['release']}" + (f" with {result['source']}" if result["source"] else "")]
    for row in result["checks"]:
        lines.append(row_line(row))
    for row in result["checks"]:
        if row["as_expected"] and row["verdict"] != "INCONCLUSIVE":
            continue
        lines.extend(_witness(result, row))
    return "\n".join(lines)


def _witness(result: dict, row: dict) -> list[str]:
    target, draft = (",".join(repr(float(x)) for x in row[which]) for which in ("target", "draft"))
    command = (f"verispec check-engine {result['engine']} --check {row['check']} --tree {row['tree']} --target "
               f"{target} --draft {draft}" + (f" --source {result['source']}" if result["source"] else ""))
    lines = [f"  {row['check']}: witness problem (context-free: the same laws at every prefix) "
             f"{json.dumps({'target': row['target'], 'draft': row['draft']})}", f"    reproduce: {command}"]
    for kind in ("overproduced", "underproduced"):
        for entry in (row.get("discrepancies") or {}).get(kind, []):
            lines.append(f"    {kind} {entry['sequence']}: {entry['rule']:.6g} against the target's "
                         f"{entry['target']:.6g}")
    raised = row.get("raised")
    if raised:
        lines.append(f"    raised {raised.get('exception')}: {raised.get('message')} (at {raised.get('line')})")
    return lines


@pytest.fixture(scope="session")
def verispec_check(request) -> VerispecCheck:
    """Check verification code in a test: ``verispec_check(function, layout, tree, ...)`` or
    ``verispec_check.engine(name, checks=[...])`` (see ``verispec.pytest_plugin``). Session-scoped and stateless, so
    Hypothesis tests (``@given``) may take it."""
    return VerispecCheck(request.config.getoption("verispec_time_budget"))


def pytest_collection_modifyitems(config, items):
    """A test marked ``verispec_lossless`` returns the function to check: its call is wrapped so that the returned
    function is checked (and the test returns None, as pytest expects)."""
    for item in items:
        marker = item.get_closest_marker(MARKER)
        if marker is not None and isinstance(item, pytest.Function):
            item.obj = _checking(item.obj, marker, item.nodeid, config.getoption("verispec_time_budget"))


def _checking(test, marker, nodeid: str, time_budget: float | None):
    @functools.wraps(test)
    def checked(*args, **kwargs):
        layout, tree, options = _marker_arguments(marker, nodeid)
        function = test(*args, **kwargs)
        if not callable(function):
            pytest.fail(f"{nodeid} is marked {MARKER} but returned {type(function).__name__} {function!r:.60}: "
                        "return the verification function to check", pytrace=False)
        VerispecCheck(time_budget)(function, layout, tree, **options)

    return checked


def _marker_arguments(marker, nodeid: str) -> tuple[str, str, dict]:
    """(layout, tree, the other options) of a ``verispec_lossless`` marker: layout and tree by keyword (or as the
    first two positional arguments), the rest by keyword; a test failure in one line otherwise."""
    options = dict(marker.kwargs)
    if len(marker.args) > 2:
        pytest.fail(f"{nodeid}: {MARKER} takes layout and tree positionally and the rest by keyword, got "
                    f"{len(marker.args)} positional arguments", pytrace=False)
    for name, value in zip(("layout", "tree"), marker.args):
        if name in options:
            pytest.fail(f"{nodeid}: {MARKER} got {name} twice; give it once", pytrace=False)
        options[name] = value
    missing = [name for name in ("layout", "tree") if not isinstance(options.get(name), str)]
    if missing:
        pytest.fail(f"{nodeid}: {MARKER} needs {' and '.join(missing)} as text, e.g. "
                    f"@pytest.mark.{MARKER}(layout='chain', tree='chain:2'); got "
                    f"{', '.join(f'{name}={options.get(name)!r}' for name in missing)}", pytrace=False)
    return options.pop("layout"), options.pop("tree"), options
