"""Study 1 of the report: every verifier on every draft structure it is valid for.

E[tau+1], the TV distance of the output law and the gap to the LP optimum of any valid verifier, averaged over
seeded problems of three families; a new verifier joins with no other edit (the sweep's ``all``).
"""

from __future__ import annotations

import math

from verispec.report.common import (
    DIVERGENCE,
    common_cells,
    fixed,
    grid_text,
    mean,
    ok_rows,
    problem_key,
    pyplot,
    ranked,
    save_figure,
)
from verispec.study.grid import SweepGrid

#: Draft structures of the verifier table (each verifier takes those its draft law allows).
STRUCTURES = ("chain:3", "iid:2,2", "delayed:2,1,2", "branch:2,2")

#: A gap (LP optimum minus E[tau+1]) below this would mean a verifier beat the optimum of every valid verifier.
GAP_ALARM = -1e-7

#: The study's sweep tables (``data/NAME.csv``), those it adds with a pair, and its figures.
TABLES = ("verifiers",)
PAIR_TABLES = ()
FIGURES = ("verifiers.png",)


def run(report) -> None:
    """Section 1 of ``report``: the table, the figure and the findings of every verifier on every structure."""
    plt = pyplot()
    grid = SweepGrid(families=("context-free", "markov", "random"), vocab_sizes=(report.scale.vocab,),
                     divergences=(DIVERGENCE,), seeds=report.seeds(), trees=STRUCTURES, verifiers=("all",), gap=True)
    rows = report.sweep("verifiers", grid)
    by_tree = {tree: common_cells((row for row in rows if row["tree"] == tree), lambda row: row["verifier"],
                                  problem_key) for tree in STRUCTURES}
    lines = ["## 1. Every verifier on every draft structure", "",
             f"{grid_text(grid)}. On each tree every verifier is averaged over the same cells "
             "(those where all of them have a result; 'cells'). Gap: the LP optimum of any valid verifier minus "
             "E[tau+1]; TV: the largest total-variation distance of the output law from the target's (0: "
             "lossless). E[tau+1] is tokens per block, i.e. per target forward.", "",
             "| tree | verifier | E[tau+1] | gap to optimum | largest TV | cells |", "|---|---|---|---|---|---|"]
    for tree, (by_verifier, cells) in by_tree.items():
        for verifier, chosen in sorted(by_verifier.items()):
            tv = [row["tv_distance"] for row in chosen if row["tv_distance"] is not None]
            lines.append(f"| {tree} | {verifier} | {fixed(mean(r['block_efficiency'] for r in chosen))} | "
                         f"{fixed(mean(r['gap'] for r in chosen))} | "
                         f"{max(tv) if tv else math.nan:.1e} | {len(cells)} |")
    gaps = [row["gap"] for row in ok_rows(rows)]
    if gaps:
        alarming = sum(1 for gap in gaps if gap < GAP_ALARM)
        lines += ["", f"Gaps are shown to 4 decimals, a gap that rounds to zero as 0.0000. The smallest gap in "
                  f"the data is {min(gaps):.1e}"
                  + (" (float rounding of two exact computations; no verifier is above the optimum by more than "
                     f"{-GAP_ALARM:.0e})." if not alarming else
                     f"; {alarming} cells are below {GAP_ALARM:.0e}: a verifier above the LP optimum of every "
                     "valid verifier, which is a bug in the verifier or the LP.")]
        if alarming:
            report.findings.append(f"{alarming} cells of study 1 have E[tau+1] above the LP optimum by more than "
                                   f"{-GAP_ALARM:.0e}: a bug in a verifier or in the LP.")
    figure, axes = plt.subplots(1, len(STRUCTURES), figsize=(4.2 * len(STRUCTURES), 4.2), sharey=True)
    for axis, (tree, (by_verifier, _)) in zip(axes, by_tree.items()):
        names = sorted(by_verifier)
        values = [mean(r["block_efficiency"] for r in by_verifier[name]) for name in names]
        axis.bar(range(len(names)), values, color="tab:blue")
        if names:
            optimum = mean(r["optimum"] for r in by_verifier[names[0]])  # one optimum per cell
            axis.axhline(optimum, color="black", linestyle="--", linewidth=1, label="LP optimum")
            axis.legend(loc="lower right")
        axis.set_xticks(range(len(names)), names, rotation=60, ha="right")
        axis.set_title(tree)
    axes[0].set_ylabel("E[tau+1], tokens per target forward (mean)")
    name = save_figure(figure, report.out / "verifiers.png")
    lines += ["", f"![E[tau+1] of every verifier by draft structure]({name})", ""]
    lossy = sorted({row["verifier"] for row in ok_rows(rows) if row["lossless"] is False})
    checked = sum(1 for row in ok_rows(rows) if row["lossless"] is not None)
    unchecked = len(ok_rows(rows)) - checked  # methods that keep no output law
    report.findings.append(
        (f"Every registered verifier was lossless on all {checked} (problem, tree, verifier) cells of study 1 "
         "whose output law was computed" + (f" ({unchecked} cells kept only the law of tau)." if unchecked
                                            else ".")) if not lossy else f"Lossy in study 1: {', '.join(lossy)}.")
    for tree, (by_verifier, cells) in by_tree.items():
        means = {name: mean(r["block_efficiency"] for r in chosen) for name, chosen in by_verifier.items()}
        if not cells:
            continue
        groups = ranked(means)
        optimum = mean(r["optimum"] for r in next(iter(by_verifier.values())))
        best, worst = groups[0], groups[-1]
        text = (f"On {tree} ({len(cells)} cells) the best on average "
                f"{'is' if len(best[1]) == 1 else 'are (tied)'} {', '.join(best[1])} (E[tau+1] "
                f"{fixed(best[0])}, LP optimum {fixed(optimum)})")
        if len(groups) > 1:
            text += (f"; the weakest {'is' if len(worst[1]) == 1 else 'are (tied)'} {', '.join(worst[1])} "
                     f"({fixed(worst[0])})")
        report.findings.append(text + ".")
    report.sections.append("\n".join(lines))
