"""``check_external``'s entry for the whole-step layouts (``verispec.external.step``): the options checked, the
step checked on the given problem under the time budget and, where that problem cannot show a function that reads
another position's row (``step_context.offset_blind``), the report says so, or with ``context_twin`` the problem's
context-dependent twin is checked too and the worse verdict stands."""

from __future__ import annotations

import math
import time

from verispec.errors import AnalysisTimeoutError, VerispecError
from verispec.external.rng import MAX_KEYS
from verispec.external.step import check_step
from verispec.external.step_context import BLIND_NOTE, context_twin, offset_blind
from verispec.external.step_neighbours import check_neighbours, neighbour_sampling
from verispec.external.step_penalties import requested_problem
from verispec.guard import budget
from verispec.guard.limits import DEFAULT_THRESHOLD
from verispec.verdict import Verdict

#: The options a whole-step layout takes beside the check's own (``check_external``'s ``verifier_options``).
STEP_OPTIONS = {"rng", "call_timeout", "keys", "max_keys", "per_row", "context_twin", "neighbours", "penalties"}


def check_whole_step(function, layout, tree, problem, mode, name, samples, detect_tv, power, alpha, seed,
                     time_budget, sampling, verifier_options, threshold: float = DEFAULT_THRESHOLD):
    """``check.check_external`` for a whole-step layout: its options checked, then ``check_step`` under the time
    budget, on the given problem and, with ``context_twin``, on its twin where the given one is offset-blind."""
    from verispec.external.check_report import CheckReport
    from verispec.models.sampling import Sampling
    from verispec.simulator.problem_files import load_problem
    from verispec.simulator.tree_specs import parse_tree

    unknown = sorted(set(verifier_options) - STEP_OPTIONS)
    if unknown:
        raise VerispecError(f"a whole-step layout takes no {', '.join(unknown)}")
    if verifier_options.get("rng", "capture") != "capture":
        raise VerispecError(f"layout {layout!r} hands no uniforms (the step draws its own): use --rng capture")
    if problem is None:
        raise VerispecError(f"layout {layout!r} checks a whole step on a given problem: give --target/--draft or "
                            "--problem")
    if isinstance(problem, str):
        problem = load_problem(problem)
    if problem.exact:
        raise VerispecError("a whole step runs in float64; analyse a float problem (leave out --exact)")
    if not (isinstance(time_budget, (int, float)) and math.isfinite(time_budget) and time_budget > 0):
        raise VerispecError(f"time_budget must be a positive number of seconds, got {time_budget!r}")
    sampling = Sampling.parse(sampling) if isinstance(sampling, str) else sampling or Sampling()
    drafter = parse_tree(tree) if isinstance(tree, str) else tree
    problem.require_depth(drafter.depth + 1)
    name = name or getattr(function, "__name__", "external")
    sampled = check_neighbours(verifier_options.get("neighbours", "greedy"), layout) == "sampled"
    penalties = layout_penalties(verifier_options.get("penalties"), layout)
    start = time.monotonic()

    def checked(on):
        return check_step(function, layout, drafter, on, sampling, name=name, mode=mode, samples=samples,
                          alpha=alpha, detect_tv=detect_tv, power=power, seed=seed,
                          call_timeout=verifier_options.get("call_timeout"), keys=verifier_options.get("keys", "keyed"),
                          max_keys=verifier_options.get("max_keys", MAX_KEYS), threshold=threshold,
                          neighbours=neighbour_sampling() if sampled else None, penalties=penalties)

    try:
        with budget.time_budget(start + time_budget, what=f"the check of {name}"):
            report = checked(problem)  # refuses a block too large to tabulate before the prefixes are walked
            blind = offset_blind(problem, drafter.depth + 1, None if penalties is None else requested_problem(
                problem, sampling, drafter.depth + 1, penalties).target)
            report.offsets_visible = not blind
            if not blind or report.verdict is not Verdict.LOSSLESS:
                return report
            if not verifier_options.get("context_twin"):
                report.note += f"; {BLIND_NOTE}"
                return report
            return _with_twin(report, checked, problem, drafter, start)
    except AnalysisTimeoutError:  # a report, as the other layouts give (its JSON is what a CI reads), never a verdict
        return CheckReport(function=name, layout=layout, tree=drafter.spec, mode=mode, verdict=Verdict.INCONCLUSIVE,
                           scope="on the given problem", tv_distance=None, tv_estimate=None, block_efficiency=None,
                           problem=None, problem_source="given", seconds=time.monotonic() - start,
                           tried=f"the time budget of {time_budget:g} s ran out before a verdict",
                           next_step="run again with a larger --time-budget",
                           note=f"the check of {name} ran past its time budget of {time_budget:g} s",
                           threshold=threshold)


def layout_penalties(value, layout: str):
    """``step-penalties``' ``Penalties`` (given as one or its text; ``DEFAULT_PENALTIES`` where none is given), None
    for the other layouts; a penalty asked of another layout is refused in one line."""
    from verispec.models.penalties import DEFAULT_PENALTIES, Penalties

    if layout != "step-penalties":
        if value is not None:
            raise VerispecError(f"--penalties needs the step-penalties layout; the {layout} layout hands no token "
                                "history")
        return None
    if isinstance(value, Penalties):
        return value
    return Penalties.parse(DEFAULT_PENALTIES if value is None else value)


def _with_twin(report, checked, problem, drafter, start: float):
    """The given problem's LOSSLESS report, or its twin's where the twin's verdict is worse (LOSSY, RAISES): the
    twin is checked within what is left of the same time budget."""
    from verispec.simulator.problem_files import problem_to_json

    twin = context_twin(problem)
    if twin is None:
        report.note += ("; the problem is context-free and its laws are uniform, so no rotation of them makes a "
                        "context-dependent twin: offsets are not seen")
        return report
    described = "its context twin (after d tokens, p and q rotated by d)"
    try:
        found = checked(twin)
    except AnalysisTimeoutError:
        report.note += f"; {described} was not finished within the time budget, so offsets are not seen"
        report.seconds = time.monotonic() - start
        return report
    if found.verdict is Verdict.LOSSLESS:
        report.offsets_visible = True
        report.note += f"; {described} is LOSSLESS too ({found.mode} mode), so an offset would be seen"
        report.evaluations += found.evaluations
        report.seconds = time.monotonic() - start
        return report
    if found.verdict is Verdict.INCONCLUSIVE:
        report.note += f"; {described} is INCONCLUSIVE, so offsets are not seen"
        report.seconds = time.monotonic() - start
        return report
    found.offsets_visible = True
    found.scope = "on the given problem's context twin"
    found.problem_source = "context twin"
    found.problem = problem_to_json(twin, drafter.depth + 1)
    found.note = (f"LOSSLESS on the given problem, which is context-free; {found.verdict.word} on {described}: the "
                  f"function reads another position's row, or otherwise depends on the context; {found.note}")
    found.evaluations += report.evaluations
    found.seconds = time.monotonic() - start
    return found


__all__ = ["STEP_OPTIONS", "check_whole_step"]
