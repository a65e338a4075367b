"""Gap report: every valid verifier's block efficiency against the best any valid verifier can reach."""

from __future__ import annotations

from dataclasses import dataclass

from verispec.lp_analysis.multistep import coupling_bound, optimal_block_efficiency
from verispec.lp_analysis.solve import DEFAULT_MAX_VARIABLES
from verispec.simulator.drafters import Drafter
from verispec.simulator.engine import analyze
from verispec.simulator.problems import Problem


@dataclass(frozen=True)
class GapRow:
    verifier: str
    block_efficiency: float
    ratio: float  # block_efficiency / optimum
    gap: float  # optimum - block_efficiency
    lossless: bool | None


@dataclass(frozen=True)
class GapReport:
    tree: str
    optimal_block_efficiency: float
    coupling_bound: float
    rows: tuple[GapRow, ...]
    lp_variables: int
    lp_seconds: float

    def to_json(self) -> dict:
        return {
            "tree": self.tree,
            "optimal_block_efficiency": self.optimal_block_efficiency,
            "coupling_bound": self.coupling_bound,
            "lp_variables": self.lp_variables,
            "lp_seconds": self.lp_seconds,
            "verifiers": [row.__dict__ for row in self.rows],
        }

    def table(self) -> str:
        header = ("verifier", "E[tau+1]", "ratio to optimum", "gap", "lossless")
        rows = [("LP optimum (any valid verifier)", f"{self.optimal_block_efficiency:.6f}", "1.000000", "0", "yes"),
                *((r.verifier, f"{r.block_efficiency:.6f}", f"{r.ratio:.6f}", f"{r.gap:.2e}",
                   "yes" if r.lossless else ("?" if r.lossless is None else "NO")) for r in self.rows)]
        widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]
        lines = ["  ".join(f"{cell:<{w}}" for cell, w in zip(row, widths)).rstrip()
                 for row in [header, tuple("-" * w for w in widths), *rows]]
        lines.append(f"(coupling bound, not attainable in general: {self.coupling_bound:.6f})")
        return "\n".join(lines)


def gap_report(problem: Problem, drafter: Drafter, verifiers, *, limit: int = DEFAULT_MAX_VARIABLES) -> GapReport:
    """Block efficiency of every verifier valid for ``drafter`` and the multi-step LP optimum."""
    optimum = optimal_block_efficiency(problem, drafter, limit=limit)
    best = optimum.block_efficiency
    rows = []
    for verifier in verifiers:
        if not drafter.draft_laws & verifier.valid_for:
            continue
        result = analyze(problem, drafter, verifier)
        efficiency = float(result.block_efficiency)
        rows.append(GapRow(verifier=verifier.name, block_efficiency=efficiency, ratio=efficiency / best,
                           gap=best - efficiency, lossless=None if result.lossless is None else bool(result.lossless)))
    rows.sort(key=lambda row: -row.block_efficiency)
    return GapReport(tree=drafter.spec, optimal_block_efficiency=best,
                     coupling_bound=coupling_bound(problem, drafter), rows=tuple(rows),
                     lp_variables=optimum.num_variables, lp_seconds=optimum.seconds)
