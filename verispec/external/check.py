"""A whole check of an external verification function, ending in a verdict one can act on.

``check_external`` is what ``verispec check-external`` runs. Its verdict (``verispec.verdict``) is

* LOSSLESS (exit 0) only when it is *proven* - the function's exact law, on every problem of the stated scope,
  within ``threshold`` of the target's - or *powered* - a black-box test that did not reject and that would
  have detected every TV of ``detect_tv`` or more with probability ``power``;
* LOSSY (exit 1) with a witness problem: found exactly, or confirmed by a test at false-failure rate ``alpha``;
* INCONCLUSIVE (exit 3) otherwise, with what was tried (``tried``) and what to run next (``next_step``);
* RAISES (exit 4) when the function raised on a problem of the scope and no lossy witness was found: the
  problem, the exception and the line (``raised``; ``verispec.verdict`` says why this is its own status).

Scopes. With ``problem`` the verdict is about that problem. Without one the search of ``verispec.hunt`` looks
for a witness, the canonical suite first and random problems after it; a search that finds nothing proves
nothing, so it ends INCONCLUSIVE - unless ``suite="canonical"``, which asks for the verdict on the canonical
suite itself: LOSSLESS when every problem of the suite was checked (exactly, or by a powered test) and none is
lossy, the random search (with the time left) having found no witness either.

Modes:

* ``exact``: the function's law by exact integration over its uniforms (threshold rules); lossy when the exact
  TV distance exceeds ``threshold`` (1e-9, far above the 1e-16 scale of float breakpoints).
* ``blackbox``: the stratified Bernstein and TV tests of ``verispec.external.blackbox`` at false-failure rate
  ``alpha`` (1e-6), or with ``test="binomial"`` its plain sampled test. Runs: ``samples``, or by default as many
  as make ``detect_tv`` detectable with probability ``power``.
* ``auto`` (default): exact where the function is of threshold form, black-box otherwise (the reason is kept in
  the report's note).

In a black-box search each candidate is screened by a smaller test (``SCREEN_SAMPLES`` runs at ``SCREEN_ALPHA``,
seeded by the candidate, so the search is deterministic); its witness is then confirmed by a fresh test at
``alpha``; with ``suite="canonical"`` every one of the n canonical problems gets a powered test at
``alpha / (2 n)`` and the confirmation ``alpha / 2``. The screening tests decide nothing, so the stated
false-failure rate ``alpha`` holds for the verdict.

Randomness the function draws itself (``_Check.refit``). Explicit mode forbids draws from the global
generators; a function that makes them anyway (and may ignore the uniforms it is handed) is checked with those
draws captured (``rng="explicit+capture"``), exactly. A batched call whose draws cannot be fed row by row is
called one tree at a time. Where nothing feeds the function's randomness (``os.urandom``, a generator created
before the call, CUDA's; two identical calls differ), exact mode is impossible: ``auto`` and ``blackbox`` then
test it as it is (``ExternalVerifier(unfed=True)``: one call per run on one tree, fresh randomness per call,
the same powered tests, whose validity needs only independent runs: they stratify by draft tree, never by
uniforms), and ``exact`` refuses with the reason. Each switch is said in the report's note.

Raises. An exception inside the function (``SystemExit`` and ``errors.UserCodeExit`` included) is a finding
(``runner.FunctionRaised``), not bad input, and one rule holds on every scope (``verispec.verdict``): LOSSY
whenever a loss is established - on a problem it raised on, too: the calls that did not raise may show it
(``verispec.external.raises``: exactly, the raise integrated as one more outcome; black-box, the runs go on past
raises and a one-sided test judges the others) - with the first raise listed beside it; RAISES when it raised and
no loss was shown. A search records the first problem the function raised on and goes on looking. A raise that
does not repeat when the same call is made again at once, and state the function keeps across calls, are said
(``raised['repeats']``, the note); state that changes on every call makes a LOSSLESS verdict INCONCLUSIVE. Bad
input stays exit 2: what is refused before the function runs on a problem (its signature against the layout's
arguments, the options).

Everything, search and tests, runs under one hard time budget (``time_budget`` seconds, ``verispec.guard.budget``):
when it ends, the verdict is whatever the evidence so far supports - LOSSY if a witness was found, RAISES if
the function raised, else INCONCLUSIVE.
"""

from __future__ import annotations

import json
import math
import time
import zlib

import numpy as np

from verispec.errors import AnalysisTimeoutError, VerifierError, VerispecError
from verispec.external.adapter import ExternalVerifier
from verispec.external.blackbox import (
    DEFAULT_DETECT_TV,
    DEFAULT_POWER,
    BlackBoxResult,
    blackbox_test,
    discrepancies,
    underpowered,
)
from verispec.external.check_options import CheckOptions
from verispec.external.check_report import CheckReport
from verispec.external.exact import NotPiecewiseConstantError
from verispec.external.raises import PastRaises, StateWatch, law_past_raises, say_state
from verispec.external.rng import CaptureRefusal, GlobalRandomnessError, KeyRefusal, RowByRowRefusal
from verispec.external.runner import FunctionRaised, NondeterministicError, RaiseLog
from verispec.external.step_auto import ExactOutOfTime, runs_that_fit, within_share
from verispec.guard import budget, supervisor
from verispec.guard.limits import DEFAULT_THRESHOLD
from verispec.simulator.drafters import Drafter
from verispec.simulator.engine import ExactResult, analyze
from verispec.simulator.generators import random_context_free_problem
from verispec.simulator.problem_files import load_problem, problem_from_json, problem_to_json
from verispec.simulator.problems import Problem, target_law
from verispec.simulator.tree_specs import parse_tree
from verispec.statistics import DEFAULT_ALPHA
from verispec.verdict import Verdict

MODES = ("auto", "exact", "blackbox")
SUITES = ("canonical",)
#: Screening test of black-box witness search.
SCREEN_SAMPLES = 20_000
SCREEN_ALPHA = 1e-5
#: What says a verifier cannot feed the function's randomness as configured (``_Check.refit`` tries the next).
RANDOMNESS_ERRORS = (NondeterministicError, CaptureRefusal, GlobalRandomnessError)


def _pilot_problem(max_vocab: int) -> Problem:
    """A fixed small problem on which a configuration error (wrong layout for the tree, a function that does not
    run) shows before a search would swallow it; context-free, so deep trees cost nothing to tabulate."""
    return random_context_free_problem(max_vocab, 0)


class _Check:
    """One run of ``check_external``: the options, the clock, and the report being built."""

    def __init__(self, verifier: ExternalVerifier, build, drafter: Drafter, options: CheckOptions, progress=None):
        #: ``build(**changes)``: the function's ExternalVerifier with some options changed (``refit``).
        self.build = build
        self.verifier, self.drafter = verifier, drafter
        self.options = options
        self.mode = self.requested = options.mode  # the mode in force: "auto" becomes the one that ran
        self.progress = progress
        self.start = time.monotonic()
        self.deadline = self.start + options.time_budget
        self.note = ""
        self.tried = 0
        self.suite_total = 0
        #: The first raise of the function (CheckReport.raised), and the canonical problems' labels by problem.
        self.raised: dict | None = None
        self.labels: dict[str, str] = {}

    # --- randomness and raises ----------------------------------------------------------------------------------

    def refit(self, error: VerispecError) -> bool:
        """Go on with a verifier that can run the function, where ``error`` (one of RANDOMNESS_ERRORS) says this one
        cannot feed its randomness; False where none is left (see the module docstring, 'Randomness')."""
        verifier = self.verifier
        if isinstance(error, KeyRefusal):  # a key verispec cannot read is refused, never guessed at by black-box runs
            return False
        if isinstance(error, GlobalRandomnessError) and verifier.rng == "explicit":
            # a flattened layout's draws run over draft tokens: fed one tree a call
            self.verifier = self.build(rng="explicit+capture",
                                       per_row=verifier.per_row or not verifier.layout.rows_first)
            self.add_note("it draws from a global random generator besides the uniforms it is handed, so its draws "
                          "were captured (fed from verispec's uniforms, after the handed ones) and both integrated")
            return True
        if isinstance(error, RowByRowRefusal) and not verifier.per_row:
            self.verifier = self.build(rng=verifier.rng, per_row=True)
            self.add_note(f"called one tree at a time, since {error}")
            return True
        if verifier.unfed or verifier.layout.self_drafting or self.requested == "exact":
            return False
        self.verifier = self.build(rng=verifier.rng, per_row=True, unfed=True)
        self.add_note(f"exact mode is impossible ({error}), so black-box mode tested the function as it is: one "
                      "call per run on one tree, with fresh randomness from its own generator in every call")
        self.mode = "blackbox"
        return True

    def record_raise(self, error: FunctionRaised, problem: Problem | dict, label: str = "") -> None:
        """Keep the first raise (the simplest problem: a search meets the canonical suite first)."""
        if self.raised is not None:
            return
        problem = _json(problem, self.drafter) if isinstance(problem, Problem) else problem
        if not label:
            label = self.labels.get(json.dumps(problem, sort_keys=True), "")
        self.raised = {"problem": problem, "witness_label": label, **error.to_json()}
        if error.repeats is False:
            self.add_note("the raise did not repeat when the same call was made again at once: it depends on the "
                          "call history (state kept across calls) or on randomness verispec does not feed, so the "
                          "inputs listed may not reproduce it")

    def past_raises(self, problem: Problem) -> PastRaises | None:
        """What ``problem``'s calls that did not raise show, exactly (``raises.law_past_raises``; None where the
        function cannot be integrated that way); the raise it meets first is recorded."""
        try:
            past = law_past_raises(problem, self.drafter, self.verifier)
        except (NotPiecewiseConstantError, FunctionRaised, *RANDOMNESS_ERRORS):
            return None
        if past.first is not None:
            self.record_raise(past.first, problem)
        return past

    def past_raises_report(self, past: PastRaises, problem, scope: str, source: str, **details) -> CheckReport:
        """LOSSY where the calls that did not raise overproduce beyond the threshold, else RAISES (the one rule)."""
        if past.excess <= self.options.threshold:
            self.add_note(f"the calls that did not raise show no loss: they overproduce no sequence by more than "
                          f"{self.options.threshold:g} in all (the raising inputs have probability "
                          f"{past.raised_mass:.3g})")
            return self.raises_report(scope, source=source, **details)
        self.add_note(f"the calls that did not raise already overproduce sequences by {past.excess:.6g} in all, which "
                      f"no outputs of the raising inputs (probability {past.raised_mass:.3g}) could undo: "
                      "tv_distance is that lower bound on the TV")
        report = self.report(Verdict.LOSSY, scope, problem=problem, source=source, tv_distance=past.excess,
                             **details)
        report.discrepancies, report.tv_lower_bound = past.discrepancies, True
        return report

    def raises_report(self, scope: str, **details) -> CheckReport:
        """The RAISES verdict on the recorded raise."""
        raised = self.raised
        label = raised["witness_label"]
        if label:
            scope = f"on the canonical problem '{label}'"
        report = self.report(Verdict.RAISES, scope, problem=raised["problem"], label=label,
                             next_step=details.pop("next_step", "") or
                             f"the function raised {raised['exception']} at {raised['line']}: fix that, or guard "
                             "the case, and check again", **details)
        return report

    def without_raises(self, judge):
        """``judge`` (problem, deadline) -> distance, recording a raise of the function and taking as the distance
        what the calls that did not raise show (``past_raises``: 0 where nothing), so that a search goes on past
        it (for a lossy witness, or to the end)."""
        def judged(candidate: Problem, deadline=None) -> float:
            try:
                return judge(candidate, deadline)
            except FunctionRaised as error:
                self.record_raise(error, candidate)
                past = self.past_raises(candidate)
                return 0.0 if past is None else past.excess
        return judged

    # --- the report ---------------------------------------------------------------------------------------------

    def report(self, verdict: Verdict, scope: str, *, problem: Problem | dict | None = None, source: str = "none",
               exact: ExactResult | None = None, blackbox: BlackBoxResult | None = None, tv_distance=None,
               tried: str = "", next_step: str = "", hunted=None, label: str = "") -> CheckReport:
        checked = problem if isinstance(problem, Problem) or problem is None else problem_from_json(problem)
        if isinstance(problem, Problem):
            problem = _json(problem, self.drafter)
        differences = None
        if exact is not None:
            tv_distance = float(exact.tv_distance)
            law = exact.output_law.continued_with_target(checked)  # (V,)*(L+1)
            differences = discrepancies(np.asarray(law, dtype=np.float64),
                                        np.asarray(target_law(checked, self.drafter.depth + 1), dtype=np.float64))
        elif blackbox is not None:
            differences = blackbox.discrepancies
        if verdict is Verdict.LOSSLESS:
            differences = None  # nothing is over- or under-produced beyond rounding or noise
        exact_mode = self.mode == "exact"
        raised = None if self.raised is None else dict(self.raised)
        return CheckReport(
            function=self.verifier.name, layout=self.verifier.layout.name, tree=self.drafter.spec, mode=self.mode,
            verdict=verdict, scope=scope, tv_distance=tv_distance,
            tv_estimate=None if blackbox is None else blackbox.tv_estimate,
            block_efficiency=(float(exact.block_efficiency) if exact is not None else
                              None if blackbox is None else blackbox.block_efficiency_estimate),
            problem=problem, problem_source=source, seconds=time.monotonic() - self.start,
            problems_tried=self.tried if hunted is None else hunted.examples_tried,
            canonical_checked=(self.tried if self.suite_total else 0) if hunted is None else len(hunted.canonical),
            canonical_total=self.suite_total if hunted is None else hunted.canonical_total,
            blackbox=blackbox, discrepancies=differences,
            uniforms=_uses(self.verifier) if exact_mode else [], evaluations=self.verifier.stats.evaluations,
            tried=tried, next_step=next_step, note="; ".join([self.note, *self.verifier.notes] if self.note
                                                             else self.verifier.notes),
            witness_label=label, raised=raised, threshold=self.options.threshold)

    def add_note(self, text: str) -> None:
        self.note = f"{self.note}; {text}" if self.note else text

    def more_time(self) -> str:
        return f"run again with a larger --time-budget (it was {self.options.time_budget:g} s)"

    # --- black-box tests ----------------------------------------------------------------------------------------

    def powered_test(self, problem: Problem, alpha: float, seed: int, label: str = "",
                     samples: int | None = None) -> BlackBoxResult:
        """The test on ``problem``, going on past raises (the first is recorded; the test is then one-sided);
        ``samples`` (the runs that fit the clock, ``runs_by_clock``) in place of the option's."""
        log = RaiseLog()
        try:
            options = self.options
            return blackbox_test(problem, self.drafter, self.verifier, samples=samples or options.samples, alpha=alpha,
                                 seed=seed, test=options.test, detect_tv=options.detect_tv, power=options.power,
                                 raises=log)
        finally:  # out of time too: the raise stands
            if log.first is not None:
                self.record_raise(log.first, problem, label)

    def blackbox_verdict(self, result: BlackBoxResult, problem: Problem, clocked: bool = False) -> tuple[Verdict, str]:
        """(verdict, next step) of one powered test (``clocked``: as many runs as fit the time left)."""
        if result.rejected:
            return Verdict.LOSSY, ""
        if self.raised is not None:  # no loss shown, and it raised
            return Verdict.RAISES, ""
        if result.detectable_tv <= self.options.detect_tv:
            return Verdict.LOSSLESS, ""
        target = np.asarray(target_law(problem, self.drafter.depth + 1), dtype=np.float64)
        return Verdict.INCONCLUSIVE, underpowered(result, target, self.options.detect_tv, clocked)

    # --- a given problem ----------------------------------------------------------------------------------------

    def given(self, problem: Problem) -> CheckReport:
        while True:
            try:
                return self._given(problem)
            except FunctionRaised as error:  # in the exact attempt: integrated again past its raises
                self.tried = 1
                self.record_raise(error, problem)
                past = self.past_raises(problem)
                if past is None and self.mode == "auto":  # not of threshold form past its raises: tested instead
                    self.add_note("exact integration past the raises was refused, so black-box mode was used")
                    self.mode = "blackbox"
                    continue
                self.mode = "exact" if self.mode == "auto" else self.mode
                if past is None:
                    return self.raises_report("on the given problem", source="given")
                return self.past_raises_report(past, problem, "on the given problem", "given")
            except RANDOMNESS_ERRORS as error:
                if not self.refit(error):
                    raise

    def _given(self, problem: Problem) -> CheckReport:
        scope, clocked = "on the given problem", None
        if self.mode in ("auto", "exact"):
            try:  # auto: exact mode within its share of the time left, then black-box runs that fit the rest
                result = (analyze(problem, self.drafter, self.verifier) if self.mode == "exact" else within_share(
                    lambda: analyze(problem, self.drafter, self.verifier), lambda: self.verifier.stats.evaluations))
            except NotPiecewiseConstantError as error:
                if self.mode == "exact":
                    raise
                self.add_note(f"exact mode refused, so black-box mode was used: {error}")
                self.mode = "blackbox"
            except ExactOutOfTime as ran_out:
                self.mode, clocked = "blackbox", runs_that_fit(problem, self.drafter, self.verifier, self.options)
                self.add_note(ran_out.fallback(clocked))
            else:
                self.mode, self.tried = "exact", 1
                lossy = float(result.tv_distance) > self.options.threshold
                return self.report(Verdict.LOSSY if lossy else Verdict.LOSSLESS, scope, problem=problem,
                                   source="given", exact=result)
        result = self.powered_test(problem, self.options.alpha, self.options.seed, samples=clocked)
        self.tried = 1
        verdict, next_step = self.blackbox_verdict(result, problem, clocked is not None)
        if verdict is Verdict.RAISES:
            return self.raises_report(scope, source="given", blackbox=result)
        return self.report(verdict, scope, problem=problem, source="given", blackbox=result, next_step=next_step)

    # --- no problem: the search (and the canonical suite) ---------------------------------------------------------

    def search(self) -> CheckReport:
        while True:
            try:
                return self._search()
            except RANDOMNESS_ERRORS as error:  # (the hunt re-raises the verifier's error as its own class)
                if not self.refit(error):
                    raise

    def _search(self) -> CheckReport:
        from verispec.hunt import build_problem, canonical_problems, hunt  # hypothesis; only a search needs it

        if self.mode == "auto":
            # exact until a candidate shows the function is not of threshold form (the search then switches)
            self.mode = "exact"
        elif self.mode == "blackbox":  # a configuration error shows here, before the search could swallow it
            pilot = _pilot_problem(self.options.max_vocab)
            try:
                blackbox_test(pilot, self.drafter, self.verifier, samples=min(self.options.samples or 1000, 1000),
                              alpha=self.options.alpha, seed=self.options.seed, test=self.options.test)
            except FunctionRaised as error:
                self.record_raise(error, pilot)
        suite = canonical_problems(self.drafter.depth, self.options.max_vocab, self.options.context_free)
        self.labels = {json.dumps(_json(build_problem(member.candidate), self.drafter), sort_keys=True): member.label
                       for member in suite}
        self.suite_total = len(suite)
        suite_checked: list = []
        if self.mode == "blackbox" and self.options.suite is not None:
            found = self.blackbox_suite(suite, suite_checked)
            if found is not None:
                return found

        screened: dict[str, float] = {}

        def screen(candidate: Problem, deadline=None) -> float:
            # remembered: a search must see one answer per candidate, and code on randomness verispec does not
            # feed (``unfed``) would give another on a second test, which the search's shrinking takes for flakiness
            text = json.dumps(problem_to_json(candidate, self.drafter.depth), sort_keys=True, default=str)
            if text not in screened:  # going on past raises (the first recorded): one-sided where runs raised
                log = RaiseLog()
                result = blackbox_test(candidate, self.drafter, self.verifier, samples=SCREEN_SAMPLES,
                                       alpha=SCREEN_ALPHA, seed=zlib.crc32(text.encode()), test="bernstein",
                                       raises=log)
                if log.first is not None:
                    self.record_raise(log.first, candidate)
                screened[text] = result.tv_estimate if result.rejected else 0.0
            return screened[text]

        def exact_distance(candidate: Problem, deadline=None) -> float:  # hunt's own measure, as a judge
            return float(analyze(candidate, self.drafter, self.verifier, deadline=deadline).tv_distance)

        def run_hunt(canonical: bool):
            judge = screen if self.mode == "blackbox" else exact_distance
            options = self.options
            return hunt(self.verifier, self.drafter, max_vocab=options.max_vocab, max_examples=options.max_examples,
                        threshold=options.threshold, context_free=options.context_free, progress=self.progress,
                        time_budget=max(0.0, self.deadline - time.monotonic()),
                        judge=self.without_raises(judge), canonical=canonical)

        canonical = not suite_checked
        try:
            hunted = run_hunt(canonical)
        except NotPiecewiseConstantError as error:
            if self.requested == "exact":
                raise
            # the first candidates were of threshold form but a later one is not: search again as a black box
            self.add_note(f"exact mode refused on a candidate, so black-box mode was used: {error}")
            self.mode = "blackbox"
            if self.options.suite is not None:
                found = self.blackbox_suite(suite, suite_checked)
                if found is not None:
                    return found
            hunted = run_hunt(canonical=self.options.suite is None)
        if hunted.witness is not None:
            return self.witness(hunted)
        return self.no_witness(hunted, suite, suite_checked)

    def blackbox_suite(self, suite, checked: list) -> CheckReport | None:
        """Powered tests on every canonical problem (alpha / (2 n) each); a report if one is lossy."""
        from verispec.hunt import build_problem

        share = self.options.alpha / (2 * max(1, len(suite)))
        for index, member in enumerate(suite):
            problem = build_problem(member.candidate)
            supervisor.note(f"the black-box test of the canonical problem '{member.label}'")
            try:
                result = self.powered_test(problem, share, self.options.seed + index, member.label)
            except (AnalysisTimeoutError, VerifierError):  # out of time, or the function itself failed
                raise
            except VerispecError as error:  # the tree cannot be drawn on this problem
                checked.append((member, None, str(error)))
                continue
            self.tried += 1
            if result.rejected:
                return self.report(Verdict.LOSSY, f"on the canonical problem '{member.label}'", problem=problem,
                                   source="search", blackbox=result, label=member.label)
            # a raise is a finding: recorded (powered_test), and the suite goes on
            checked.append((member, None, "the function raised") if result.raised_runs else (member, result, ""))
        return None

    def witness(self, hunted) -> CheckReport:
        witness = hunted.witness
        found = problem_from_json(witness.problem_json)
        scope = "witness found by the search"
        if self.mode == "exact":
            try:
                result = analyze(found, self.drafter, self.verifier)
            except FunctionRaised:  # a witness past its raises (``without_raises``): what they show, again
                past = self.past_raises(found)
                if past is not None:
                    return self.past_raises_report(past, witness.problem_json, scope, "search", hunted=hunted,
                                                   label=witness.label)
                return self.report(Verdict.LOSSY, scope, problem=witness.problem_json, source="search",
                                   tv_distance=witness.tv_distance, hunted=hunted, label=witness.label)
            except AnalysisTimeoutError:  # the search's exact TV stands; only the details are missing
                return self.report(Verdict.LOSSY, scope, problem=witness.problem_json, source="search",
                                   tv_distance=witness.tv_distance, hunted=hunted, label=witness.label)
            return self.report(Verdict.LOSSY, scope, problem=witness.problem_json, source="search", exact=result,
                               hunted=hunted, label=witness.label)
        # with the suite's tests (alpha / 2 in all) beside it, the confirmation gets the other half
        confirm_alpha = self.options.alpha if self.options.suite is None else self.options.alpha / 2
        confirmation = self.powered_test(found, confirm_alpha, self.options.seed + 1, witness.label)
        if not confirmation.rejected and confirmation.raised_runs:  # not confirmed; the raise is a witness of its own
            return self.raises_report("a search", source="search", hunted=hunted, tried=hunted.describe())
        if confirmation.rejected:
            self.add_note("the witness was confirmed by a fresh test")
            return self.report(Verdict.LOSSY, scope, problem=witness.problem_json, source="search",
                               blackbox=confirmation, hunted=hunted, label=witness.label)
        return self.report(Verdict.INCONCLUSIVE, "a search", problem=witness.problem_json, source="search",
                           blackbox=confirmation, hunted=hunted, label=witness.label,
                           tried=f"{hunted.describe()}; the screening test's candidate was NOT confirmed by a fresh "
                                 f"test at alpha = {confirm_alpha:g}",
                           next_step="check the candidate with more runs: --problem FILE (see --output) --samples N")

    def no_witness(self, hunted, suite, suite_checked: list) -> CheckReport:
        from verispec.hunt import next_search

        tried = hunted.describe()
        if self.raised is not None:  # no lossy witness, but the function raised
            return self.raises_report("a problem found by the search", source="search", hunted=hunted, tried=tried)
        if self.options.suite is None:
            return self.report(Verdict.INCONCLUSIVE, "a search", hunted=hunted, tried=tried,
                               next_step="a search that finds nothing proves nothing: check given problems with "
                                         "--problem FILE, ask for the verdict on the canonical suite with --suite "
                                         f"canonical, or search further ("
                                         f"{next_search(hunted, self.options.max_examples, self.options.time_budget)})")
        scope = f"the canonical suite ({len(suite)} problems)"
        if self.mode == "exact":
            complete = hunted.canonical_complete
            skipped = [check for check in hunted.canonical if check.skipped]
        else:
            complete = len(suite_checked) == len(suite)
            skipped = [entry for entry in suite_checked if entry[1] is None]
            weak = [entry for entry in suite_checked if entry[1] is not None
                    and entry[1].detectable_tv > self.options.detect_tv]
            if complete and weak:
                worst = max(entry[1].detectable_tv for entry in weak)
                return self.report(Verdict.INCONCLUSIVE, scope, hunted=hunted, tried=tried,
                                   next_step=f"{len(weak)} canonical problems were tested without the power to detect "
                                             f"a TV of {self.options.detect_tv:g} (the weakest detects "
                                             f"{worst:.3g}): leave --samples out, or raise --detect-tv")
        if not complete:
            return self.report(Verdict.INCONCLUSIVE, scope, hunted=hunted, tried=tried,
                               next_step=f"the canonical suite was not finished: {self.more_time()}")
        if len(skipped) == len(suite):
            reason = skipped[0].skipped if self.mode == "exact" else skipped[0][2]
            return self.report(Verdict.INCONCLUSIVE, scope, hunted=hunted, tried=tried,
                               next_step=f"no canonical problem could be checked ({reason}): check a problem of "
                                         "your own with --problem FILE")
        if skipped:
            self.add_note(f"{len(skipped)} canonical problems cannot be drawn for {self.drafter.spec} and were left "
                          "out")
        verdict_scope = scope if self.mode == "exact" else f"{scope}, each by a powered test"
        report = self.report(Verdict.LOSSLESS, verdict_scope, hunted=hunted, tried=tried)
        if self.mode == "blackbox":
            tested = [entry[1] for entry in suite_checked if entry[1] is not None]
            weakest = max(tested, key=lambda result: result.detectable_tv)
            report.blackbox = weakest
            report.tv_estimate = weakest.tv_estimate
            report.block_efficiency = None
            report.discrepancies = None
        return report


def check_external(function, layout: str, tree: str | Drafter, *, problem: Problem | str | None = None,
                   mode: str = "auto", arrays: str = "numpy", device: str = "cpu", name: str | None = None,
                   samples: int | None = None, detect_tv: float = DEFAULT_DETECT_TV, power: float = DEFAULT_POWER,
                   alpha: float = DEFAULT_ALPHA, seed: int = 0, test: str = "bernstein",
                   threshold: float = DEFAULT_THRESHOLD, max_vocab: int = 3, max_examples: int = 300,
                   time_budget: float = 60.0, context_free: bool | None = None, suite: str | None = None,
                   progress=None, sampling=None, **verifier_options) -> CheckReport:
    """Check ``function`` (a production-shape verification function in ``layout``) on ``tree``; see the module
    docstring. ``problem`` may be a Problem or a problem file. ``verifier_options`` go to ``ExternalVerifier``
    (``rng``, ``per_row``, ``call_timeout``, ...). A whole-step layout (``verispec.external.step``) hands the
    function raw logits and ``sampling`` (a ``Sampling`` or its text; default plain sampling at temperature 1)."""
    if mode not in MODES:
        raise VerispecError(f"unknown mode {mode!r}; choose one of {', '.join(MODES)}")
    from verispec.external.step import STEP_LAYOUTS
    from verispec.external.step_entry import check_whole_step

    if layout in STEP_LAYOUTS:
        return check_whole_step(function, layout, tree, problem, mode, name, samples, detect_tv, power, alpha, seed,
                                 time_budget, sampling, verifier_options, threshold)
    if verifier_options.pop("context_twin", False):
        raise VerispecError(f"--context-twin needs a whole-step layout (step, step-ragged, step-tree); the {layout} "
                            "layout is checked on the problems it is given or searches")
    if verifier_options.pop("penalties", None) is not None:
        raise VerispecError(f"--penalties needs the step-penalties layout; the {layout} layout hands no token history")
    if sampling is not None:
        raise VerispecError(f"--sampling needs a whole-step layout (step, step-ragged, step-tree), which hands raw "
                            f"logits; the {layout} layout hands laws already processed")
    if suite is not None and suite not in SUITES:
        raise VerispecError(f"unknown suite {suite!r}; choose one of {', '.join(SUITES)}")
    if suite is not None and problem is not None:
        raise VerispecError("give either a problem or --suite canonical, not both")
    if not (isinstance(time_budget, (int, float)) and math.isfinite(time_budget) and time_budget > 0):
        raise VerispecError(f"time_budget must be a positive number of seconds, got {time_budget!r}")
    drafter = parse_tree(tree) if isinstance(tree, str) else tree
    if isinstance(problem, str):
        problem = load_problem(problem)
    def build(**changes) -> ExternalVerifier:
        return ExternalVerifier(function, layout, name=name, arrays=arrays, device=device,
                                **{**verifier_options, **changes})

    verifier = build()  # refused here, before any call: a signature that cannot take the layout's arguments
    if verifier.layout.self_drafting:  # it draws its own drafts, so it cannot be run on sampled draft trees
        if mode == "blackbox":
            raise VerispecError(f"layout {verifier.layout.name!r} runs a whole block that drafts its own tokens, which "
                                "black-box mode cannot run on given draft trees; use --mode exact (or auto)")
        mode = "exact"
    options = CheckOptions(mode=mode, samples=samples, detect_tv=detect_tv, power=power, alpha=alpha, seed=seed,
                           test=test, threshold=threshold, max_vocab=max_vocab, max_examples=max_examples,
                           time_budget=time_budget, context_free=context_free, suite=suite)
    check = _Check(verifier, build, drafter, options, progress)
    # the phases keep check.deadline; the hard timer allows a moment more to write up what they found
    grace = min(1.0, 0.05 * time_budget)
    watch = StateWatch(function)  # the state it keeps across calls, said on the report (``raises.say_state``)
    try:
        with budget.time_budget(check.deadline + grace, hard=True, what=f"the check of {verifier.name}"), \
                budget.time_budget(check.deadline):
            report = check.given(problem) if problem is not None else check.search()
            say_state(report, watch, check.verifier)
            return report
    except AnalysisTimeoutError:
        scope = "on the given problem" if problem is not None else "a search"
        if check.raised is not None:  # the raise found so far stands
            return check.raises_report(scope, source="given" if problem is not None else "search",
                                       tried=f"the time budget of {time_budget:g} s ran out")
        return check.report(Verdict.INCONCLUSIVE, scope, problem=problem,
                            source="given" if problem is not None else "none",
                            tried=f"the time budget of {time_budget:g} s ran out before a verdict",
                            next_step=check.more_time())


def _json(problem: Problem, drafter: Drafter) -> dict:
    return json.loads(json.dumps(problem_to_json(problem, drafter.depth), default=str))


def _uses(verifier: ExternalVerifier) -> list[str]:
    return [use.describe() for use in verifier.stats.uses]
