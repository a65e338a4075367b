"""Study 4 of the report: GBV against block verification as the number of paths K grows, and every verifier's
gap to the LP optimum as the draft diverges (the ``gaps`` table).

Where GBV's E[tau+1] falls as K grows, the report says so with a two-token example computed by the exact engine
and the LP (``gbv_toy``, ``gbv_toy_text``).
"""

from __future__ import annotations

from collections import defaultdict
from fractions import Fraction

from verispec.report.common import (
    MARKERS,
    TIE,
    common_cells,
    fixed,
    mean,
    plural,
    problem_key,
    pyplot,
    save_figure,
    signed,
)
from verispec.study.grid import SweepGrid

#: The two-token problem of the GBV example in study 4 (target p, draft q): token 1 has the larger p/q.
GBV_TOY_TARGET = (Fraction(9, 10), Fraction(1, 10))
GBV_TOY_DRAFT = (Fraction(19, 20), Fraction(1, 20))

#: The study's sweep tables (``data/NAME.csv``), those it adds with a pair, and its figures.
TABLES = ("paths", "gaps")
PAIR_TABLES = ()
FIGURES = ("paths.png",)


def run(report) -> None:
    """Section 4 of ``report``: E[tau+1] as K grows on i.i.d. paths, and the gaps to the optimum by divergence."""
    plt = pyplot()
    depth = 3
    trees = tuple(f"iid:{k},{depth}" for k in report.scale.paths)
    rows = report.sweep("paths", SweepGrid(families=("markov",), vocab_sizes=(report.scale.vocab,),
                                           seeds=report.seeds(), trees=trees,
                                           verifiers=("bv", "naive", "gbv", "specinfer")))

    def paths_of(row):
        return int(row["tree"].split(":")[1].split(",")[0])

    # every (verifier, K) over the same problems
    by_item, cells = common_cells(rows, lambda row: (row["verifier"], paths_of(row)), problem_key)
    curves = defaultdict(dict)
    for (verifier, k), chosen in by_item.items():
        curves[verifier][k] = [row["block_efficiency"] for row in chosen]
    gaps = report.sweep("gaps", SweepGrid(families=("context-free",), vocab_sizes=(report.scale.vocab,),
                                          divergences=report.scale.divergences, seeds=report.seeds(),
                                          trees=("chain:3", "iid:2,2"), verifiers=("all",), gap=True))
    shared = len(set(gaps.keys) & set(report.study_keys.get("verifiers", ())))
    # per (tree, divergence), every verifier over the same seeds
    by_divergence = defaultdict(dict)
    for tree in ("chain:3", "iid:2,2"):
        for divergence in report.scale.divergences:
            chosen, _ = common_cells((row for row in gaps if row["tree"] == tree and row["divergence"] ==
                                      divergence), lambda row: row["verifier"], problem_key)
            for verifier, selected in chosen.items():
                by_divergence[(tree, verifier)][divergence] = mean(row["gap"] for row in selected)
    figure, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    for index, (verifier, points) in enumerate(sorted(curves.items())):  # points that coincide stay visible
        ks = sorted(points)
        left.plot(ks, [mean(points[k]) for k in ks], marker=MARKERS[index % len(MARKERS)],
                  markersize=11 - 2 * index % 8, label=verifier)
    left.set_xticks(list(report.scale.paths))
    left.set(xlabel="K, i.i.d. draft paths (K = 1: one path)", ylabel="E[tau+1], tokens per target forward",
             title=f"Paths of {depth} tokens, Markov V = {report.scale.vocab}")
    left.legend()
    for (tree, verifier), points in sorted(by_divergence.items()):
        if tree != "iid:2,2":
            continue
        divergences = sorted(points)
        right.plot(divergences, [points[x] for x in divergences], marker="o", label=verifier)
    right.set(xlabel="divergence", ylabel="LP optimum - E[tau+1], tokens", title="Gap to the optimum, iid:2,2")
    right.legend(fontsize=7)
    name = save_figure(figure, report.out / "paths.png")
    lines = ["## 4. GBV against block verification as K grows; gaps as divergence grows", "",
             f"Left: E[tau+1] on iid:K,{depth} (K = 1 is one path) on Markov problems, every (verifier, K) "
             f"averaged over the same {plural(len(cells), 'problem')}. Right: the gap to the LP optimum on "
             "context-free problems, at each divergence every verifier over the same problems "
             f"(`data/gaps.csv`: {plural(len(gaps), 'cell')}, {shared} of them cells of study 1, read from the "
             "shared store rather than computed again).", "",
             f"![Paths and gaps]({name})", "", "| verifier | " + " | ".join(f"K = {k}" for k in report.scale.paths)
             + " |", "|---|" + "---|" * len(report.scale.paths)]
    for verifier, points in sorted(curves.items()):
        lines.append(f"| {verifier} | " + " | ".join(fixed(mean(points[k])) if k in points else "-"
                                                    for k in report.scale.paths) + " |")
    if "gbv" in curves and 1 in curves.get("bv", {}):
        bv = mean(curves["bv"][1])
        gains = ", ".join(f"{signed(mean(curves['gbv'][k]) - bv)} at K = {k}" for k in sorted(curves["gbv"]))
        report.findings.append(f"GBV against block verification on one path (E[tau+1] {fixed(bv)}), each over the "
                               f"same {plural(len(cells), 'problem')}: {gains}.")
    lines += _gbv_drops(report, {k: chosen for (verifier, k), chosen in by_item.items() if verifier == "gbv"})
    # nss ignores the drafts' identities (Y ~ p): its gap says nothing about the verification rules
    largest = {key: max(points.values()) for key, points in by_divergence.items() if key[1] != "nss"}
    if largest:
        worst = max(largest, key=largest.get)
        report.findings.append(f"Leaving out nss (which ignores the drafts), the largest mean gap to the optimum "
                               f"in study 4 is {fixed(largest[worst])}, for {worst[1]} on {worst[0]}.")
    report.sections.append("\n".join(lines))


def _gbv_drops(report, gbv: dict[int, list[dict]]) -> list[str]:
    """Where GBV's mean E[tau+1] falls as K grows (``gbv``: K -> its rows on the common problems, in one
    order), the lines that say so: how many problems fall, whether GBV stays lossless on them, and the
    two-token example of ``gbv_toy``, every number computed here."""
    ks = sorted(gbv)
    values = {k: [row["block_efficiency"] for row in gbv[k]] for k in ks}
    drops = [(a, b) for a, b in zip(ks, ks[1:]) if mean(values[b]) < mean(values[a]) - TIE]
    if not drops:
        return []
    said = "; ".join(
        f"from K = {a} to K = {b} ({fixed(mean(values[a]))} to {fixed(mean(values[b]))}; lower in "
        f"{sum(1 for x, y in zip(values[a], values[b]) if y < x - TIE)} of {plural(len(values[a]), 'problem')})"
        for a, b in drops)
    checked = [row for k in ks for row in gbv[k] if row["tv_distance"] is not None]
    lossy = sum(1 for row in checked if row["lossless"] is False)
    law = (f"GBV's output law is the target's in all {len(checked)} of its cells here with a computed output "
           f"law, every K (largest TV {max(row['tv_distance'] for row in checked):.1e})" if checked and not lossy
           else f"GBV is lossy in {lossy} of its {len(checked)} cells here with a computed output law" if checked
           else "no output law of GBV was computed here")
    text = f"GBV's mean E[tau+1] falls {said}; {law}. {gbv_toy_text(max(b for _, b in drops))}"
    report.findings.append(text)
    return ["", text]


def gbv_toy(max_paths: int) -> list[tuple[int, float, float]]:
    """(K, GBV's E[tau+1], the LP optimum of every valid verifier) on iid:K,1 for K = 1 .. ``max_paths`` (at
    least 2) at p = ``GBV_TOY_TARGET``, q = ``GBV_TOY_DRAFT``, by the exact engine and the LP. Token 1 has the
    larger p/q (2 against 18/19), so GBV's selected token is 1 whenever a path drew it, with probability
    1 - (19/20)^K, and by hand E[tau+1] = 1 + min(9/10, (19/20)^K) + min(1/10, 1 - (19/20)^K)."""
    import numpy as np

    from verispec.bounds.multistep import optimal_block_efficiency
    from verispec.simulator import ContextFreeProblem, analyze, parse_tree
    from verispec.verifiers import get_verifier

    problem = ContextFreeProblem(np.array([float(x) for x in GBV_TOY_TARGET]),
                                 np.array([float(x) for x in GBV_TOY_DRAFT]))
    return [(k, float(analyze(problem, f"iid:{k},1", get_verifier("gbv")).block_efficiency),
             float(optimal_block_efficiency(problem, parse_tree(f"iid:{k},1")).block_efficiency))
            for k in range(1, max(max_paths, 2) + 1)]


def gbv_toy_text(max_paths: int) -> str:
    """The two-token example of study 4 in words, every number computed from ``GBV_TOY_TARGET``,
    ``GBV_TOY_DRAFT`` and ``gbv_toy``: the token of largest p/q, the chance that one of K paths draws it
    (the law GBV's verified token puts on it), GBV's E[tau+1] and the LP optimum, and where GBV falls."""
    p, q = GBV_TOY_TARGET, GBV_TOY_DRAFT
    ratios = [a / b for a, b in zip(p, q)]
    top = max(range(len(p)), key=ratios.__getitem__)
    toy = gbv_toy(max_paths)
    ks = [k for k, _, _ in toy]
    gbv = {k: value for k, value, _ in toy}
    optimum = {k: value for k, _, value in toy}
    falls = [(a, b) for a, b in zip(ks, ks[1:]) if gbv[b] < gbv[a] - TIE]

    def listed(values) -> str:
        return ", ".join(values)

    others = listed(str(ratio) for token, ratio in enumerate(ratios) if token != top)
    text = (f"A two-token case, computed by the exact engine and the LP: p = ({listed(str(x) for x in p)}) and q = "
            f"({listed(str(x) for x in q)}) on iid:K,1. Token {top} has the largest p/q ({ratios[top]}, against "
            f"{others}), so GBV verifies token {top} whenever a path drew it, with probability 1 - "
            f"({1 - q[top]})^K = {listed(fixed(float(1 - (1 - q[top]) ** k)) for k in ks)} for K = "
            f"{listed(str(k) for k in ks)}, against the target's {p[top]}; GBV's E[tau+1] is "
            f"{listed(fixed(gbv[k]) for k in ks)} and the LP optimum of any valid verifier "
            f"{listed(fixed(optimum[k]) for k in ks)}")
    if not falls:
        return text + f": GBV does not fall here for K <= {ks[-1]}."
    return text + ": " + "; ".join(
        f"from K = {a} to K = {b} GBV falls by {fixed(gbv[a] - gbv[b])} while the optimum "
        + (f"rises by {fixed(optimum[b] - optimum[a])}" if optimum[b] > optimum[a] + TIE else
           "stays" if optimum[b] >= optimum[a] - TIE else f"falls by {fixed(optimum[a] - optimum[b])}")
        for a, b in falls) + "."
