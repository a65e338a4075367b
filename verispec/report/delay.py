"""Study 3 of the report: the delayed-tree action space (K, L1, L2).

Throughput E[tau+1]/T under the report's latency model and E[tau+1] as heatmaps per verifier, the best
configuration at each divergence, and where the best trunk length L1 lies as the draft diverges from the target
(the DDTE paper's delayed trees, Thomas et al. 2026, arXiv 2602.16994).
"""

from __future__ import annotations

import math
from collections import defaultdict

from verispec.latency import throughput_unit
from verispec.report.common import (
    MARKERS,
    REPORT_LATENCY,
    TIE,
    common_cells,
    fixed,
    mean,
    ok_rows,
    price_text,
    problem_key,
    pyplot,
    ranked,
    save_figure,
    tied,
)
from verispec.study.grid import SweepGrid

#: The study whose delayed trees have their own table (this section), left out of the winner table (section 5).
DELAY_STUDY = "delay"

#: The study's sweep tables (``data/NAME.csv``), those it adds with a pair, and its figures.
TABLES = (DELAY_STUDY,)
PAIR_TABLES = ()
FIGURES = ("delay_heatmaps.png", "delay_best_l1.png")

#: The verifiers compared on every delayed tree.
VERIFIERS = ("specinfer", "spectr")


def run(report) -> None:
    """Section 3 of ``report``: the heatmaps, the best configuration by divergence and where the best L1 lies."""
    scale = report.scale
    trees = tuple(f"delayed:{k},{l1},{l2}" for k in range(1, scale.max_k + 1) for l1 in range(scale.max_trunk + 1)
                  for l2 in range(scale.max_tail + 1))
    rows = report.sweep(DELAY_STUDY, SweepGrid(families=("markov",), vocab_sizes=(scale.vocab,),
                                               divergences=scale.divergences, seeds=report.seeds(), trees=trees,
                                               verifiers=VERIFIERS, methods=("dp-metrics",)))
    means, seeds = _means(rows, scale.divergences)
    middle = scale.divergences[len(scale.divergences) // 2]
    unit = throughput_unit(REPORT_LATENCY)
    latency, price = price_text(REPORT_LATENCY, "(L1 + L2)", (row["nodes"] for row in ok_rows(rows)))
    heatmaps = _heatmaps(report, means, middle, latency)
    best_l1, largest_depth = defaultdict(dict), defaultdict(list)
    lines = ["## 3. The delayed-tree action space", "",
             f"Delayed trees (K, L1, L2) for K <= {scale.max_k}, L1 <= {scale.max_trunk}, L2 <= "
             f"{scale.max_tail} on Markov problems, V = {scale.vocab}; at each divergence every configuration "
             f"is averaged over the same seeds ({', '.join(str(seeds[d]) for d in scale.divergences)} at "
             f"divergence {', '.join(str(d) for d in scale.divergences)}). Throughput is E[tau+1]/T in {unit} "
             f"(t_q: the time of one draft step), under the latency model {REPORT_LATENCY.source}: {price}; T "
             f"counts the L1 + L2 draft steps AND the target's forward. Heatmaps at "
             f"divergence {middle}, K = {scale.max_k}. Configurations within {TIE:g} of the best are tied ('=').",
             "", f"![Delay heatmaps]({heatmaps})", "",
             f"| verifier | divergence | best (K, L1, L2) by E[tau+1]/T | E[tau+1]/T ({unit}) | "
             "its E[tau+1] | largest E[tau+1] (K, L1, L2) |", "|---|---|---|---|---|---|"]
    for verifier in VERIFIERS:
        for divergence in scale.divergences:
            configurations = {key[2:]: value for key, value in means.items()
                              if key[0] == divergence and key[1] == verifier}
            if not configurations:
                continue
            best_value, best = ranked({c: value[0] for c, value in configurations.items()})[0]
            deep_value, deepest = ranked({c: value[1] for c, value in configurations.items()})[0]
            best_l1[verifier][divergence] = sorted({c[1] for c in best})
            largest_depth[verifier].append(all(c[1] + c[2] == scale.max_trunk + scale.max_tail for c in deepest))
            lines.append(f"| {verifier} | {divergence} | {tied(best)} | {fixed(best_value)} | "
                         f"{tied(fixed(configurations[c][1]) for c in best)} | {fixed(deep_value)} at "
                         f"{tied(deepest)} |")
    lines += ["", f"![Best L1 against divergence]({_best_l1_figure(report, best_l1, latency)})", ""]
    for verifier, points in best_l1.items():
        deepest = largest_depth[verifier]
        report.findings.append(
            f"{verifier}: the best trunk length L1 by E[tau+1]/T ({REPORT_LATENCY.source}) goes "
            + ", ".join(f"{' or '.join(str(v) for v in value)} at divergence {key}"
                        for key, value in points.items())
            + f"; the configuration of largest E[tau+1] has the largest depth L1 + L2 = "
            f"{scale.max_trunk + scale.max_tail} at {sum(deepest)} of {len(deepest)} divergences"
            + (", so choosing by E[tau+1] alone would pick the deepest tree." if all(deepest) else "."))
    report.sections.append("\n".join(lines))


def _means(rows: list[dict], divergences) -> tuple[dict, dict]:
    """({(divergence, verifier, K, L1, L2): (mean E[tau+1]/T, mean E[tau+1])}, {divergence: seeds}): at each
    divergence, every configuration over the same seeds (``common_cells``)."""
    def configuration(row):
        return (row["verifier"], *(int(x) for x in row["tree"].split(":")[1].split(",")))

    means, seeds = {}, {}
    for divergence in divergences:
        by_item, cells = common_cells((row for row in rows if row["divergence"] == divergence), configuration,
                                      problem_key)
        seeds[divergence] = len(cells)
        for item, chosen in by_item.items():
            means[(divergence, *item)] = (mean(r["throughput"] for r in chosen),
                                          mean(r["block_efficiency"] for r in chosen))
    return means, seeds


def _heatmaps(report, means: dict, middle: float, latency: str) -> str:
    """The heatmaps of E[tau+1]/T and E[tau+1] over (L1, L2) at divergence ``middle`` and the largest K, one
    column per verifier; the file's name."""
    plt, scale = pyplot(), report.scale
    k, unit = scale.max_k, throughput_unit(REPORT_LATENCY)
    figure, axes = plt.subplots(2, len(VERIFIERS), figsize=(5.4 * len(VERIFIERS), 8.8))
    for column, verifier in enumerate(VERIFIERS):
        for line, (index, label) in enumerate(((0, f"E[tau+1]/T, {unit}"), (1, "E[tau+1], tokens"))):
            grid = [[means.get((middle, verifier, k, l1, l2), (math.nan, math.nan))[index]
                     for l2 in range(scale.max_tail + 1)] for l1 in range(scale.max_trunk + 1)]
            axis = axes[line][column]
            image = axis.imshow(grid, origin="lower", cmap="viridis", aspect="auto")
            axis.set(xlabel="L2 (branch length, tokens)", ylabel="L1 (trunk length, tokens)",
                     title=f"{verifier}, K = {k}: {label.split(',')[0]}"
                           + (f"\n{latency}" if index == 0 else ""))
            axis.set_xticks(range(scale.max_tail + 1))
            axis.set_yticks(range(scale.max_trunk + 1))
            figure.colorbar(image, ax=axis, label=label)
    return save_figure(figure, report.out / "delay_heatmaps.png")


def _best_l1_figure(report, best_l1: dict, latency: str) -> str:
    """The best trunk length L1 against divergence, one line per verifier; the file's name."""
    figure, axis = pyplot().subplots(figsize=(5.8, 4.2))
    for index, (verifier, points) in enumerate(best_l1.items()):  # lines that coincide stay visible
        axis.plot(list(points), [values[0] for values in points.values()], marker=MARKERS[index % len(MARKERS)],
                  linestyle=("-", "--", ":")[index % 3], markersize=9 - 2 * index % 6, label=verifier)
    axis.set(xlabel="divergence of the draft from the target",
             ylabel="L1 of the best E[tau+1]/T (tokens)",
             title=f"Where the best trunk length lies\n(E[tau+1]/T, {latency})")
    axis.legend()
    return save_figure(figure, report.out / "delay_best_l1.png")
