"""A whole check of an external verification function: on a given problem, or by searching for a witness.

``check_external`` is what ``verispec check-external`` runs. Modes:

* ``exact``: the function's law by exact integration over its uniforms (threshold rules); the verdict is the
  exact engine's TV distance against ``threshold`` (1e-9, far above the 1e-16 scale of float breakpoints).
* ``blackbox``: the stratified Bernstein test of ``verispec.external.blackbox`` at false-failure rate
  ``alpha`` (1e-6), or with ``test="binomial"`` its plain sampled multinomial test (exact binomial tests).
* ``auto`` (default): exact where the function is of threshold form, black-box otherwise (the reason is kept
  in the report's note).

Without a problem, the search of ``verispec.hunt`` looks for the simplest lossy problem. In black-box mode
each candidate is screened by a smaller test (``screen_samples`` runs at ``screen_alpha``, seeded by the
candidate, so the search is deterministic); the witness it returns is then confirmed by a fresh test
(``samples`` runs, another seed) at ``alpha``. Only a confirmed witness makes the verdict "lossy", so the
many screening tests do not add to the stated false-failure rate.
"""

from __future__ import annotations

import json
import time
import zlib
from dataclasses import dataclass, field

from verispec.errors import VerispecError
from verispec.external.adapter import ExternalVerifier
from verispec.external.blackbox import DEFAULT_SAMPLES, BlackBoxResult, blackbox_test
from verispec.external.exact import NotPiecewiseConstantError
from verispec.simulator.drafters import Drafter, parse_tree
from verispec.simulator.engine import analyze
from verispec.simulator.problems import (
    Problem,
    load_problem,
    problem_from_json,
    problem_to_json,
    random_context_free_problem,
)
from verispec.statistics import DEFAULT_ALPHA

MODES = ("auto", "exact", "blackbox")
#: TV distance above which an exact result counts as lossy (hunt's default).
DEFAULT_THRESHOLD = 1e-9
#: Screening test of black-box witness search.
SCREEN_SAMPLES = 20_000
SCREEN_ALPHA = 1e-5


@dataclass
class CheckReport:
    """The verdict of one check, with what it rests on."""

    function: str
    layout: str
    tree: str
    mode: str
    lossless: bool
    #: Exact TV distance (exact mode) or the black-box estimate.
    tv_distance: float | None
    block_efficiency: float | None
    #: The problem the verdict rests on (given, or the witness found), as problem JSON.
    problem: dict | None
    problem_source: str
    seconds: float
    problems_tried: int = 0
    blackbox: BlackBoxResult | None = None
    uniforms: list[str] = field(default_factory=list)
    evaluations: int = 0
    note: str = ""

    def to_json(self) -> dict:
        return {"function": self.function, "layout": self.layout, "tree": self.tree, "mode": self.mode,
                "lossless": self.lossless, "tv_distance": self.tv_distance,
                "block_efficiency": self.block_efficiency, "problem_source": self.problem_source,
                "problem": self.problem, "problems_tried": self.problems_tried, "seconds": round(self.seconds, 3),
                "function_evaluations": self.evaluations, "uniforms": self.uniforms,
                "blackbox": None if self.blackbox is None else self.blackbox.to_json(), "note": self.note}

    def describe(self) -> str:
        verdict = "LOSSLESS" if self.lossless else "LOSSY"
        where = {"given": "on the given problem", "search": "witness found by search",
                 "none": "no lossy problem found by the search"}[self.problem_source]
        lines = [f"{self.function} ({self.layout} layout, {self.tree}): {verdict} - {self.mode} mode, {where}, "
                 f"{self.seconds:.1f} s"]
        if self.mode == "exact" and self.tv_distance is not None:
            lines.append(f"  exact TV distance {self.tv_distance:.6g} (lossy above {DEFAULT_THRESHOLD:g}); "
                         f"E[tau+1] = {self.block_efficiency:.6g}; {self.evaluations} function evaluations")
        if self.blackbox is not None:
            lines.append(f"  {self.blackbox.describe()}")
        for index, use in enumerate(self.uniforms):
            lines.append(f"  uniform {index}: {use}")
        if self.problems_tried:
            lines.append(f"  {self.problems_tried} problems tried")
        if self.note:
            lines.append(f"  note: {self.note}")
        return "\n".join(lines)


def _pilot_problem(max_vocab: int) -> Problem:
    """A fixed small problem on which a configuration error (wrong layout for the tree, a function that does not
    run) shows before a search would swallow it; context-free, so deep trees cost nothing to tabulate."""
    return random_context_free_problem(max_vocab, 0)


def check_external(function, layout: str, tree: str | Drafter, *, problem: Problem | str | None = None,
                   mode: str = "auto", arrays: str = "numpy", device: str = "cpu", name: str | None = None,
                   samples: int = DEFAULT_SAMPLES, alpha: float = DEFAULT_ALPHA, seed: int = 0,
                   test: str = "bernstein",
                   threshold: float = DEFAULT_THRESHOLD, max_vocab: int = 3, max_examples: int = 300,
                   time_budget: float = 60.0, context_free: bool | None = None, progress=None) -> CheckReport:
    """Check ``function`` (a production-shape verification function in ``layout``) on ``tree``; see the module
    docstring. ``problem`` may be a Problem or a problem file."""
    start = time.monotonic()
    if mode not in MODES:
        raise VerispecError(f"unknown mode {mode!r}; choose one of {', '.join(MODES)}")
    requested = mode
    drafter = parse_tree(tree) if isinstance(tree, str) else tree
    if isinstance(problem, str):
        problem = load_problem(problem)
    verifier = ExternalVerifier(function, layout, name=name, arrays=arrays, device=device)
    note = ""
    pilot = problem if problem is not None else _pilot_problem(max_vocab)
    if mode in ("auto", "exact"):
        try:
            pilot_result = analyze(pilot, drafter, verifier)
        except NotPiecewiseConstantError as error:
            if mode == "exact":
                raise
            note, mode = f"exact mode refused, so black-box mode was used: {error}", "blackbox"
        else:
            mode = "exact"
    elif problem is None:  # with a problem, its own test shows any configuration error
        blackbox_test(pilot, drafter, verifier, samples=min(samples, 1000), alpha=alpha, seed=seed, test=test)
    common = dict(function=verifier.name, layout=verifier.layout.name, tree=drafter.spec, mode=mode)
    if problem is not None:
        if mode == "exact":
            result = pilot_result
            return CheckReport(**common, lossless=float(result.tv_distance) <= threshold,
                               tv_distance=float(result.tv_distance), block_efficiency=float(result.block_efficiency),
                               problem=_json(problem, drafter), problem_source="given",
                               seconds=time.monotonic() - start, uniforms=_uses(verifier),
                               evaluations=verifier.stats.evaluations, note=note)
        result = blackbox_test(problem, drafter, verifier, samples=samples, alpha=alpha, seed=seed, test=test)
        return CheckReport(**common, lossless=not result.rejected, tv_distance=result.tv_estimate,
                           block_efficiency=result.block_efficiency_estimate, problem=_json(problem, drafter),
                           problem_source="given", seconds=time.monotonic() - start, blackbox=result, note=note)
    from verispec.hunt import hunt  # imports hypothesis; only a search needs it

    def judge(candidate: Problem, deadline=None) -> float:
        text = json.dumps(problem_to_json(candidate, drafter.depth), sort_keys=True, default=str)
        screen = blackbox_test(candidate, drafter, verifier, samples=SCREEN_SAMPLES, alpha=SCREEN_ALPHA,
                               seed=zlib.crc32(text.encode()))
        return screen.tv_estimate if screen.rejected else 0.0

    tried = 0

    def counted(count: int) -> None:
        nonlocal tried
        tried = count
        if progress is not None:
            progress(count)

    search = dict(max_vocab=max_vocab, max_examples=max_examples, threshold=threshold, context_free=context_free,
                  progress=counted)
    try:
        witness = hunt(verifier, drafter, time_budget=time_budget, judge=judge if mode == "blackbox" else None,
                       **search)
    except NotPiecewiseConstantError as error:
        if requested == "exact":
            raise
        # the pilot problem was of threshold form but a candidate is not: search again as a black box
        note, mode = f"exact mode refused on a candidate, so black-box mode was used: {error}", "blackbox"
        common["mode"] = mode
        witness = hunt(verifier, drafter, time_budget=max(1.0, time_budget - (time.monotonic() - start)),
                       judge=judge, **search)
    if witness is None:
        return CheckReport(**common, lossless=True, tv_distance=None, block_efficiency=None, problem=None,
                           problem_source="none", seconds=time.monotonic() - start,
                           problems_tried=tried, uniforms=_uses(verifier) if mode == "exact" else [],
                           evaluations=verifier.stats.evaluations,
                           note=(note + "; " if note else "") + f"searched vocabularies up to {max_vocab}; no lossy "
                           "problem is not a proof of losslessness")
    found = problem_from_json(witness.problem_json)
    if mode == "exact":
        result = analyze(found, drafter, verifier)
        return CheckReport(**common, lossless=False, tv_distance=float(result.tv_distance),
                           block_efficiency=float(result.block_efficiency), problem=witness.problem_json,
                           problem_source="search", seconds=time.monotonic() - start,
                           problems_tried=witness.examples_tried, uniforms=_uses(verifier),
                           evaluations=verifier.stats.evaluations, note=note)
    confirmation = blackbox_test(found, drafter, verifier, samples=samples, alpha=alpha, seed=seed + 1, test=test)
    confirmed = confirmation.rejected
    return CheckReport(**common, lossless=not confirmed, tv_distance=confirmation.tv_estimate,
                       block_efficiency=confirmation.block_efficiency_estimate, problem=witness.problem_json,
                       problem_source="search", seconds=time.monotonic() - start,
                       problems_tried=witness.examples_tried, blackbox=confirmation,
                       note=(note + "; " if note else "") + ("the witness was confirmed by a fresh test" if confirmed
                                                            else "the search's witness was NOT confirmed by a fresh "
                                                            "test, so no lossiness is claimed"))


def _json(problem: Problem, drafter: Drafter) -> dict:
    return json.loads(json.dumps(problem_to_json(problem, drafter.depth), default=str))


def _uses(verifier: ExternalVerifier) -> list[str]:
    return [use.describe() for use in verifier.stats.uses]

