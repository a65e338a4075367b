"""Study 5 of the report: published orderings checked exactly on the cells of every other study.

Block verification against token-level verification on one path in every chain cell, the rules that give the
same law of tau (the cause of most ties), and the winner by mean E[tau+1] in each (tree, divergence) regime, every
verifier of a regime averaged over the same cells (``winner_table``). It runs no sweep of its own: it reads the
rows of the studies before it (the delay study's delayed trees have their own section).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable

from verispec.report.common import (
    SAME_LAW,
    TIE,
    common_cells,
    fixed,
    mean,
    ok_rows,
    problem_key,
    ranked,
    tied,
)
from verispec.report.delay import DELAY_STUDY

#: The study's sweep tables (``data/NAME.csv``), those it adds with a pair, and its figures: none.
TABLES = ()
PAIR_TABLES = ()
FIGURES = ()


def run(report) -> None:
    """Section 5 of ``report``: block against token-level verification, coinciding rules and the winner table."""
    compared = report.distinct_rows(leave_out=(DELAY_STUDY,))
    chains = [row for row in report.distinct_rows() if row["tree"].startswith("chain:")
              and row["verifier"] in ("bv", "naive")]
    by_verifier, cells = common_cells(chains, lambda row: row["verifier"], lambda row: (problem_key(row),
                                                                                      row["tree"]))
    differences = [a["block_efficiency"] - b["block_efficiency"]
                   for a, b in zip(by_verifier.get("bv", []), by_verifier.get("naive", []))]
    lines = ["## 5. Published orderings, checked exactly", ""]
    if differences:
        below = sum(1 for d in differences if d < -1e-12)
        lines.append(f"Block verification against token-level verification on one path: {len(differences)} "
                     f"(problem, chain) cells; bv - naive in [{min(differences):.2e}, {max(differences):.4f}], "
                     f"bv below naive in {below} of them.")
        report.findings.append(
            f"Block verification is never below token-level verification on one path in the "
            f"{len(differences)} exact cells of this run (smallest difference {min(differences):.1e}). That "
            f"covers these {len(differences)} cells only; if it held on the problems of the DDTE paper's model "
            "pairs too, its Table 2 (block verification below token-level on every pair) would measure "
            "something other than the rules' exact acceptance." if below == 0
            else
            f"Block verification fell below token-level verification in {below} of {len(differences)} cells.")
    lines += _coincidences(compared)
    table = winner_table(compared)
    left_out = f" Rows of study 3 ({DELAY_STUDY}) are left out: its delayed trees are compared in section 3." \
        if DELAY_STUDY in report.study_keys else ""
    lines += ["", "Winner by mean E[tau+1] (tokens per target forward) in each (tree, divergence) regime of "
              "the sweeps: every verifier of the regime is averaged over the same cells, those where all of "
              f"them have a result ('cells'); verifiers within {TIE:g} of the best are tied, joined by '='."
              + left_out, "",
              "| tree | divergence | verifiers | cells | winner | E[tau+1] | runner-up | its E[tau+1] |",
              "|---|---|---|---|---|---|---|---|"]
    for entry in table:
        if not entry["cells"]:
            lines.append(f"| {entry['tree']} | {entry['divergence']} | {len(entry['verifiers'])} | 0 | "
                         "no cell common to all | - | - | - |")
            continue
        runner = (tied(entry["runners_up"]), fixed(entry["runner_value"])) if entry["runners_up"] else ("-", "-")
        lines.append(f"| {entry['tree']} | {entry['divergence']} | {len(entry['verifiers'])} | {entry['cells']} | "
                     f"{tied(entry['winners'])} | {fixed(entry['value'])} | {runner[0]} | {runner[1]} |")
    report.sections.append("\n".join(lines))


def _coincidences(rows: list[dict]) -> list[str]:
    """Which rules give the same law of tau in every cell they share, tree by tree (the cause of most ties)."""
    lines = []
    for tree in sorted({row["tree"] for row in ok_rows(rows)}):
        classes, cells = coinciding_rules(rows, tree)
        shared = [members for members in classes if len(members) > 1]
        if shared:
            lines.append(f"| {tree} | {cells} | " + "; ".join(" = ".join(members) for members in shared) + " |")
    if not lines:
        return []
    return ["", f"Rules that give the same law of tau (to {SAME_LAW:g}) in every cell of a tree that all the "
            "tree's verifiers have ('cells'), so that they tie in every regime of that tree below:", "",
            "| tree | cells | same law of tau |", "|---|---|---|", *lines]


def winner_table(rows: Iterable[dict]) -> list[dict]:
    """The winner by mean E[tau+1] of every (tree, divergence) regime of ``rows`` (each cell once; the report
    passes every study's rows but the delay study's, which has its own table), every verifier of the regime
    averaged over the same cells (``common_cells``): dicts with the tree, divergence, the verifiers compared,
    the number of common cells, the tied winners and their mean, the tied runners-up and theirs. Rows of a
    problem file (no divergence) are left out."""
    regimes = defaultdict(list)
    for row in ok_rows(rows):
        if row["divergence"] is None:
            continue
        regimes[(row["tree"], row["divergence"])].append(row)
    table = []
    for (tree, divergence), group in sorted(regimes.items()):
        by_verifier, cells = common_cells(group, lambda row: row["verifier"], problem_key)
        means = {name: mean(row["block_efficiency"] for row in chosen) for name, chosen in by_verifier.items()}
        groups = ranked(means) if cells else []
        table.append({"tree": tree, "divergence": divergence, "verifiers": sorted(by_verifier), "cells": len(cells),
                      "winners": groups[0][1] if groups else [], "value": groups[0][0] if groups else math.nan,
                      "runners_up": groups[1][1] if len(groups) > 1 else [],
                      "runner_value": groups[1][0] if len(groups) > 1 else math.nan})
    return table


def coinciding_rules(rows: Iterable[dict], tree: str) -> tuple[list[list[str]], int]:
    """(classes of the verifiers on ``tree`` whose laws of tau agree to ``SAME_LAW`` on every common cell, the
    number of common cells). Each class is compared through its first member."""
    by_verifier, cells = common_cells((row for row in rows if row["tree"] == tree), lambda row: row["verifier"],
                                      problem_key)
    classes: list[list[str]] = []
    for name in sorted(by_verifier):
        for members in classes:
            if all(len(a["tau_law"]) == len(b["tau_law"]) and
                   max(abs(x - y) for x, y in zip(a["tau_law"], b["tau_law"])) <= SAME_LAW
                   for a, b in zip(by_verifier[members[0]], by_verifier[name])):
                members.append(name)
                break
        else:
            classes.append([name])
    return classes, len(cells)
