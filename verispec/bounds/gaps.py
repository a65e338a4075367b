"""Gap report: every valid verifier's block efficiency against the best any valid verifier can reach, or
against the best of a restricted class (``multistep.RESTRICTIONS``, e.g. GBV's "selected-path" class)."""

from __future__ import annotations

from dataclasses import dataclass, field

from verispec.bounds.multistep import RESTRICTIONS, coupling_bound, optimal_block_efficiency
from verispec.lp_analysis.solve import DEFAULT_MAX_VARIABLES
from verispec.simulator.drafters import Drafter
from verispec.simulator.engine import analyze
from verispec.simulator.problems import Problem


@dataclass(frozen=True)
class GapRow:
    verifier: str
    block_efficiency: float
    ratio: float  # block_efficiency / optimum (above 1 only for a verifier outside the restricted class)
    gap: float  # optimum - block_efficiency
    lossless: bool | None


@dataclass(frozen=True)
class GapReport:
    """``optimal_block_efficiency`` is the optimum the rows are compared with: of every valid verifier when
    ``restriction`` is None, else of that class. ``class_optima`` holds further class optima for reference
    (computed when no restriction is given)."""

    tree: str
    optimal_block_efficiency: float
    coupling_bound: float
    rows: tuple[GapRow, ...]
    lp_variables: int
    lp_seconds: float
    restriction: str | None = None
    class_optima: dict[str, float] = field(default_factory=dict)
    certificate: object = None  # RationalCertificate of the optimum, when asked for

    def to_json(self) -> dict:
        return {
            "tree": self.tree,
            "restriction": self.restriction,
            "optimal_block_efficiency": self.optimal_block_efficiency,
            "class_optima": dict(self.class_optima),
            "coupling_bound": self.coupling_bound,
            "lp_variables": self.lp_variables,
            "lp_seconds": self.lp_seconds,
            "verifiers": [row.__dict__ for row in self.rows],
            **({"certificate": self.certificate.to_json()} if self.certificate is not None else {}),
        }

    def table(self) -> str:
        header = ("verifier", "E[tau+1]", "ratio to optimum", "gap", "lossless")
        name = ("LP optimum (any valid verifier)" if self.restriction is None
                else f"LP optimum ({self.restriction} class)")
        best = self.optimal_block_efficiency
        rows = [(name, f"{best:.6f}", "1.000000", "0", "yes"),
                *((f"LP optimum ({label} class)", f"{value:.6f}", f"{value / best:.6f}", f"{best - value:.2e}",
                   "yes") for label, value in self.class_optima.items()),
                *((r.verifier, f"{r.block_efficiency:.6f}", f"{r.ratio:.6f}", f"{r.gap:.2e}",
                   "yes" if r.lossless else ("?" if r.lossless is None else "NO")) for r in self.rows)]
        widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]
        lines = ["  ".join(f"{cell:<{w}}" for cell, w in zip(row, widths)).rstrip()
                 for row in [header, tuple("-" * w for w in widths), *rows]]
        if self.restriction is not None:
            lines.append("(a ratio above 1 is a verifier outside the class)")
        lines.append(f"(coupling bound, not attainable in general: {self.coupling_bound:.6f})")
        if self.certificate is not None:
            lines.append(f"(optimum proved exactly by a rational primal-dual certificate: {self.certificate.optimum})")
        return "\n".join(lines)


def verifier_gaps(problem: Problem, drafter: Drafter, verifiers, best: float) -> tuple[GapRow, ...]:
    """Each verifier valid for ``drafter``, analysed exactly and compared with the optimum ``best``, best first."""
    rows = []
    for verifier in verifiers:
        if not drafter.draft_laws & verifier.valid_for:
            continue
        result = analyze(problem, drafter, verifier)
        efficiency = float(result.block_efficiency)
        rows.append(GapRow(verifier=verifier.name, block_efficiency=efficiency, ratio=efficiency / best,
                           gap=best - efficiency, lossless=None if result.lossless is None else bool(result.lossless)))
    return tuple(sorted(rows, key=lambda row: -row.block_efficiency))


def gap_report(problem: Problem, drafter: Drafter, verifiers, *, limit: int = DEFAULT_MAX_VARIABLES,
               restriction: str | None = None, certify: bool = False) -> GapReport:
    """Block efficiency of every verifier valid for ``drafter`` and the multi-step LP optimum (of the class
    ``restriction`` when given; without one, the optima of the restricted classes are added for reference,
    each an LP no larger than the unrestricted one)."""
    optimum = optimal_block_efficiency(problem, drafter, limit=limit, restriction=restriction, certify=certify)
    best = optimum.block_efficiency
    class_optima = {}
    if restriction is None:
        for name in RESTRICTIONS:
            class_optima[name] = optimal_block_efficiency(problem, drafter, limit=limit,
                                                          restriction=name).block_efficiency
    return GapReport(tree=drafter.spec, optimal_block_efficiency=best, coupling_bound=coupling_bound(problem, drafter),
                     rows=verifier_gaps(problem, drafter, verifiers, best),
                     lp_variables=optimum.num_variables, lp_seconds=optimum.seconds, restriction=restriction,
                     class_optima=class_optima, certificate=optimum.certificate)
