"""The report of a check of an external verification function: its verdict and what the verdict rests on.

``CheckReport`` is what ``check.check_external`` returns and ``verispec check-external`` prints (``describe``)
or writes as JSON (``to_json``); the verdicts and what each promises: ``check``'s module docstring.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from verispec.external.blackbox import BlackBoxResult
from verispec.guard.limits import DEFAULT_THRESHOLD
from verispec.verdict import Verdict


@dataclass
class CheckReport:
    """The verdict of one check, with what it rests on (see ``check``'s module docstring)."""

    function: str
    layout: str
    tree: str
    mode: str
    verdict: Verdict
    #: What the verdict is about: 'the given problem', 'the canonical suite (n problems)', or 'a search'.
    scope: str
    #: Exact TV distance on ``problem`` (exact mode only; None otherwise).
    tv_distance: float | None
    #: The black-box test's estimate of the TV distance on ``problem`` (black-box mode only).
    tv_estimate: float | None
    block_efficiency: float | None
    #: The problem the verdict rests on (given, or the witness found), as problem JSON.
    problem: dict | None
    #: 'given', 'search' (a witness found by the search) or 'none'.
    problem_source: str
    seconds: float
    problems_tried: int = 0
    canonical_checked: int = 0
    canonical_total: int = 0
    blackbox: BlackBoxResult | None = None
    #: The sequences the function over- and under-produces most on ``problem`` (see blackbox.discrepancies).
    discrepancies: dict | None = None
    uniforms: list[str] = field(default_factory=list)
    evaluations: int = 0
    #: What was tried (for an inconclusive verdict above all) and what to run next.
    tried: str = ""
    next_step: str = ""
    note: str = ""
    #: The name of the canonical problem that is the witness, if it is one.
    witness_label: str = ""
    #: The first raise of the function: {problem, witness_label, exception, message, line, draft_paths, uniforms,
    #: repeats}.
    raised: dict | None = None
    #: ``tv_distance`` is a lower bound: the excess the calls that did not raise show (``verispec.external.raises``).
    tv_lower_bound: bool = False
    #: The exact TV above which the verdict is LOSSY (float64 code: 1e-9; a float32 engine's check states its own).
    threshold: float = DEFAULT_THRESHOLD
    #: Whole-step layouts: whether the problem checked can show a function that reads another position's row (False
    #: on a context-free problem: every row is the same; ``verispec.external.step_context``); None for other layouts.
    offsets_visible: bool | None = None
    #: Whole-step layouts in exact mode: the checked request's exact emitted-block law on the given problem, one table
    #: a block length [(V,)*l for l = 1..D+1], kept in memory (not in the JSON) for a comparison with a reference
    #: rule's law (``verispec.engines.check``); None otherwise.
    block_tables: list | None = field(default=None, repr=False, compare=False)

    @property
    def lossless(self) -> bool | None:
        """True for LOSSLESS, False for LOSSY and RAISES, None for INCONCLUSIVE."""
        return {Verdict.LOSSLESS: True, Verdict.LOSSY: False, Verdict.RAISES: False}.get(self.verdict)

    @property
    def exit_status(self) -> int:
        return self.verdict.exit_status

    def power(self) -> dict | None:
        """The power statement of a black-box verdict (None in exact mode)."""
        if self.blackbox is None:
            return None
        result = self.blackbox
        verdict = f"lossless at alpha = {result.alpha:g}; " if self.verdict is Verdict.LOSSLESS else ""
        return {"alpha": result.alpha, "detectable_tv": result.detectable_tv, "probability": result.power,
                "samples": result.samples, "statement": verdict + result.power_statement()}

    def to_json(self) -> dict:
        return {"function": self.function, "layout": self.layout, "tree": self.tree, "mode": self.mode,
                "verdict": self.verdict.value, "lossless": self.lossless, "scope": self.scope,
                "tv_distance": self.tv_distance, "tv_estimate": self.tv_estimate, "power": self.power(),
                "block_efficiency": self.block_efficiency, "problem_source": self.problem_source,
                "problem": self.problem, "witness_label": self.witness_label,
                "discrepancies": self.discrepancies, "problems_tried": self.problems_tried,
                "canonical": {"checked": self.canonical_checked, "total": self.canonical_total},
                "seconds": round(self.seconds, 3), "function_evaluations": self.evaluations,
                "uniforms": self.uniforms, "blackbox": None if self.blackbox is None else self.blackbox.to_json(),
                "tried": self.tried, "next": self.next_step, "note": self.note, "raised": self.raised,
                "tv_distance_lower_bound": self.tv_lower_bound, "threshold": self.threshold,
                "offsets_visible": self.offsets_visible}

    def describe(self) -> str:
        lines = [f"{self.function} ({self.layout} layout, {self.tree}): {self.verdict.word} - {self.mode} mode, "
                 f"{self.scope}, {self.seconds:.1f} s"]
        if self.verdict is Verdict.LOSSLESS:
            if self.blackbox is not None:
                lines.append(f"  {self.power()['statement']}")
            else:
                where = f"on every problem of {self.scope}" if "suite" in self.scope else self.scope
                lines.append(f"  proven: the function's exact law is within {DEFAULT_THRESHOLD:g} of the target's "
                             f"{where}")
        if self.tv_distance is not None:
            efficiency = "" if self.block_efficiency is None else f"; E[tau+1] = {self.block_efficiency:.6g}"
            bound = " at least" if self.tv_lower_bound else ""
            lines.append(f"  exact TV distance{bound} {self.tv_distance:.6g} (lossy above {self.threshold:g})"
                         f"{efficiency}; {self.evaluations} function evaluations")
        if self.blackbox is not None:
            lines.append(f"  {self.blackbox.describe()}")
        if self.witness_label:
            lines.append(f"  the witness is the canonical problem '{self.witness_label}'")
        if self.raised is not None:
            raised = self.raised
            where = (f" on draft tree {raised['draft_paths']} with uniforms {raised['uniforms']}"
                     if raised["draft_paths"] is not None else "")
            lines.append(f"  raised {raised['exception']}: {raised['message']} (at {raised['line']}){where}")
            if self.verdict is not Verdict.RAISES and raised["problem"] != self.problem:  # a problem of its own
                label = f" (canonical problem '{raised['witness_label']}')" if raised["witness_label"] else ""
                lines.append(f"  it raised on the problem{label} {json.dumps(raised['problem'])}")
        for kind in ("overproduced", "underproduced"):
            for entry in (self.discrepancies or {}).get(kind, []):
                lines.append(f"  {kind} {entry['sequence']}: {entry['rule']:.6g} against the target's "
                             f"{entry['target']:.6g}")
        for index, use in enumerate(self.uniforms):
            lines.append(f"  uniform {index}: {use}")
        if self.tried:
            lines.append(f"  tried: {self.tried}")
        if self.next_step:
            lines.append(f"  next: {self.next_step}")
        if self.note:
            lines.append(f"  note: {self.note}")
        return "\n".join(lines)
