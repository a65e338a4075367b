"""Study 8 of the report: Medusa's typical acceptance, lossy by design.

Typical acceptance (Cai et al. 2024, arXiv 2401.10774; ``verispec.verifiers.typical``) at several (epsilon,
alpha): its exact TV to the target and its block efficiency against a lossless rule on the same tree, on the
random family and, with a pair, on the derived problems of study 6.
"""

from __future__ import annotations

from collections import defaultdict

from verispec.report.common import (
    DIVERGENCE,
    MARKERS,
    common_cells,
    fixed,
    mean,
    problem_key,
    pyplot,
    save_figure,
)
from verispec.study.grid import SweepGrid

#: Medusa's typical acceptance at these (epsilon, alpha): Medusa's defaults first, then epsilon around them with
#: alpha about sqrt(epsilon) (Medusa's "recommended to be sqrt(posterior_threshold)").
TYPICAL_SETTINGS = ((0.09, 0.3), (0.01, 0.1), (0.03, 0.17), (0.2, 0.45), (0.5, 0.7))
#: Its trees, and the lossless rule each is compared with on the same tree.
TYPICAL_TREES = {"chain:3": "naive", "iid:2,2": "specinfer"}

#: The study's sweep tables (``data/NAME.csv``), those it adds with a pair, and its figures.
TABLES = ("typical",)
PAIR_TABLES = ("typical_live",)
FIGURES = ("typical.png",)


def run(report) -> None:
    """Section 8 of ``report``: the table of TV and E[tau+1] ratio for every setting, and the figure of TV
    against the gain (with a pair, on the derived problems of study 6 too: ``report.live_files``)."""
    from verispec.verifiers.typical import TypicalVerifier

    names = [TypicalVerifier(epsilon, alpha).name for epsilon, alpha in TYPICAL_SETTINGS]
    families = [("random", ("random",))]
    if report.live_files:
        families.append((f"derived from {report.pair}", tuple(report.live_files)))
    lines = ["## 8. Typical acceptance (lossy by design)", "",
             "Medusa's rule (Cai et al. 2024) accepts a drafted token x when p(x) > min(epsilon, alpha exp(-H(p))) "
             "and emits the next token from p restricted to the tokens above that threshold; it never reads q. "
             "Exact TV to the target law of the block (followed by target sampling) and E[tau+1] as a ratio to "
             f"a lossless rule on the same tree ({', '.join(f'{v} on {t}' for t, v in TYPICAL_TREES.items())}), "
             f"mean over the problems; alpha about sqrt(epsilon) but for Medusa's defaults ({names[0]}: epsilon "
             "0.09, alpha 0.3).", "",
             "| problems | tree | rule | TV to the target | E[tau+1] | x lossless |", "|---|---|---|---|---|---|"]
    points = defaultdict(list)
    for label, family in families:
        verifiers = tuple(dict.fromkeys((*TYPICAL_TREES.values(), *names)))
        grid = SweepGrid(families=family, vocab_sizes=(report.scale.vocab,), divergences=(DIVERGENCE,),
                         seeds=report.seeds(), trees=tuple(TYPICAL_TREES), verifiers=verifiers) \
            if family == ("random",) else SweepGrid(families=family, trees=tuple(TYPICAL_TREES),
                                                    verifiers=verifiers)
        rows = report.sweep("typical" if family == ("random",) else "typical_live", grid)
        for tree, lossless in TYPICAL_TREES.items():
            chosen, cells = common_cells((row for row in rows if row["tree"] == tree), lambda row: row["verifier"],
                                         problem_key)
            if lossless not in chosen:
                continue
            base = [row["block_efficiency"] for row in chosen[lossless]]
            lines.append(f"| {label} ({len(cells)}) | {tree} | {lossless} (lossless) | "
                         f"{fixed(mean(row['tv_distance'] for row in chosen[lossless]))} | {fixed(mean(base))} "
                         "| 1.0000 |")
            for name in names:
                if name not in chosen:
                    continue
                tv = mean(row["tv_distance"] for row in chosen[name])
                ratio = mean(row["block_efficiency"] / b for row, b in zip(chosen[name], base))
                lines.append(f"| {label} ({len(cells)}) | {tree} | {name} | {fixed(tv)} | "
                             f"{fixed(mean(row['block_efficiency'] for row in chosen[name]))} | {fixed(ratio)} |")
                points[(label, tree)].append((name, tv, ratio))
    for (label, tree), values in points.items():
        name, tv, ratio = values[0]
        report.findings.append(
            f"Typical acceptance at Medusa's defaults ({name}) on {tree}, {label} problems: exact TV "
            f"{fixed(tv)} to the target for x{fixed(ratio, 3)} the block efficiency of "
            f"{TYPICAL_TREES[tree]} (lossless).")
    plt = pyplot()
    figure, axis = plt.subplots(figsize=(7, 4))
    for index, ((label, tree), values) in enumerate(points.items()):
        axis.plot([tv for _, tv, _ in values], [ratio - 1 for _, _, ratio in values],
                  marker=MARKERS[index % len(MARKERS)], linestyle="none", label=f"{tree}, {label}")
        for (epsilon, _), (_, tv, ratio) in zip(TYPICAL_SETTINGS, values):
            axis.annotate(f"{epsilon:g}", (tv, ratio - 1), textcoords="offset points", xytext=(5, 4), fontsize=7)
        axis.scatter([values[0][1]], [values[0][2] - 1], s=140, facecolors="none", edgecolors="black")
    axis.axhline(0.0, color="black", linewidth=0.8)
    axis.set_xlabel("exact TV to the target")
    axis.set_ylabel("block-efficiency gain over the lossless rule")
    axis.set_title("Typical acceptance: what the gain costs (labels: epsilon; circled: Medusa's defaults)",
                   fontsize=9)
    axis.legend(fontsize=8)
    name = save_figure(figure, report.out / "typical.png")
    lines += ["", f"![TV against the block-efficiency gain of typical acceptance]({name})"]
    report.sections.append("\n".join(lines))
