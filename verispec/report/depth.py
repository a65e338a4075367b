"""Study 2 of the report: acceptance by depth on one matched tree (K i.i.d. paths).

P(tau >= d) and the conditional acceptance by depth for the OT node solvers against Traversal and GBV, beside
the draft/target L1 distance by depth: the DDTE paper's Figure 1 question (Thomas et al. 2026, arXiv
2602.16994), do OT methods win near the root and lose deep in the tree?
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from verispec.report.common import (
    DIVERGENCE,
    MARKERS,
    PROBLEM_FIELDS,
    TIE,
    common_cells,
    fixed,
    grid_text,
    mean,
    problem_key,
    pyplot,
    save_figure,
)
from verispec.study.cells import build_problem
from verispec.study.grid import SweepGrid

#: The matched tree of the acceptance-by-depth study: K = 2 i.i.d. paths of 4 tokens.
MATCHED_TREE = "iid:2,4"

#: The OT node solvers of study 2 (top-down walks of optimal-transport rules on i.i.d. children), by name.
OT_SOLVERS = ("specinfer", "spectr", "otlp", "khisti")

#: The study's sweep tables (``data/NAME.csv``), those it adds with a pair, and its figures.
TABLES = ("depth",)
PAIR_TABLES = ()
FIGURES = ("depth.png",)


def l1_by_depth(depth: int, problems: Iterable[tuple]) -> list[float]:
    """E over prefixes (weighted by the target's path probability) of ||p - q||_1, by depth 1 .. ``depth``,
    averaged over ``problems`` (``problem_key`` tuples: each is rebuilt from every field of its key)."""
    problems = list(problems)
    totals = [0.0] * depth
    for key in problems:
        problem = build_problem(dict(zip(PROBLEM_FIELDS, key)), depth)
        level = {(): 1.0}
        for d in range(depth):
            totals[d] += sum(weight * float(abs(problem.target(prefix) - problem.draft(prefix)).sum())
                             for prefix, weight in level.items()) / len(problems)
            level = {prefix + (token,): weight * float(problem.target(prefix)[token])
                     for prefix, weight in level.items() for token in range(problem.vocab_size)}
    return totals


def run(report) -> None:
    """Section 2 of ``report``: acceptance and conditional acceptance by depth, and the L1 distance by depth."""
    plt = pyplot()
    verifiers = (*OT_SOLVERS, "traversal-iid", "gbv")
    grid = SweepGrid(families=("random",), vocab_sizes=(report.scale.vocab,), divergences=(DIVERGENCE,),
                     seeds=report.seeds(), trees=(MATCHED_TREE,), verifiers=verifiers)
    rows = report.sweep("depth", grid)
    by_verifier, cells = common_cells(rows, lambda row: row["verifier"], problem_key)
    depth = len(next(iter(by_verifier.values()))[0]["acceptance_by_depth"]) if cells else 0
    acceptance = {name: [mean(row["acceptance_by_depth"][d] for row in chosen) for d in range(depth)]
                  for name, chosen in by_verifier.items()} if cells else {}
    distance = l1_by_depth(depth, cells)
    figure, (left, middle, right) = plt.subplots(1, 3, figsize=(14, 4.2))
    for index, (name, curve) in enumerate(sorted(acceptance.items())):  # coinciding curves stay visible
        style = "-" if name in OT_SOLVERS else "--"
        left.plot(range(1, depth + 1), curve, style, marker=MARKERS[index % len(MARKERS)], label=name)
        conditional = [curve[0]] + [curve[d] / curve[d - 1] if curve[d - 1] else math.nan
                                    for d in range(1, depth)]
        middle.plot(range(1, depth + 1), conditional, style, marker=MARKERS[index % len(MARKERS)], label=name)
    left.set(xlabel="depth d", ylabel="P(tau >= d)", title=f"Acceptance by depth, {MATCHED_TREE}")
    middle.set(xlabel="depth d", ylabel="P(tau >= d | tau >= d - 1)", title="Conditional acceptance")
    right.plot(range(1, depth + 1), distance, marker="o", color="black")
    right.set(xlabel="depth d", ylabel="E ||p - q||_1 at the prefix", title="Draft/target L1 distance",
              ylim=(0, 2))
    for axis in (left, middle, right):
        axis.set_xticks(range(1, depth + 1))
    if acceptance:
        left.legend()
        middle.legend()
    name = save_figure(figure, report.out / "depth.png")
    lines = ["## 2. Acceptance by depth on a matched tree", "",
             f"{MATCHED_TREE} (K = 2 i.i.d. paths of 4 tokens), {grid_text(grid)}; mean over the same "
             f"{len(cells)} problems for every verifier. "
             "Solid: OT node solvers; dashed: Traversal (on i.i.d. rollouts) and GBV. The L1 distance is "
             "averaged over prefixes with the target's path probability.", "", f"![Acceptance by depth]({name})",
             "", "| verifier | " + " | ".join(f"P(tau >= {d + 1})" for d in range(depth)) + " |",
             "|---|" + "---|" * depth]
    for verifier, curve in sorted(acceptance.items()):
        lines.append(f"| {verifier} | " + " | ".join(fixed(value) for value in curve) + " |")
    ot = [n for n in OT_SOLVERS if n in acceptance]
    paths = [n for n in ("traversal-iid", "gbv") if n in acceptance]
    if ot and paths:
        best_ot = {d: max(acceptance[n][d] for n in ot) for d in range(depth)}
        best_path = {d: max(acceptance[n][d] for n in paths) for d in range(depth)}
        ahead = [d + 1 for d in range(depth) if best_ot[d] > best_path[d] + TIE]
        behind = [d + 1 for d in range(depth) if best_ot[d] < best_path[d] - TIE]
        report.findings.append(
            f"On {MATCHED_TREE}, the best OT solver's P(tau >= d) is ahead of Traversal/GBV at depths "
            f"{ahead or 'none'} and behind at depths {behind or 'none'} (at d = 1: "
            f"{fixed(best_ot[0])} against {fixed(best_path[0])}; at d = {depth}: {fixed(best_ot[depth - 1])} "
            f"against {fixed(best_path[depth - 1])}).")
    report.sections.append("\n".join(lines))
