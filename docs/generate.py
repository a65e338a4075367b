"""Rewrite every generated block of the README and the docs: the verifier tables from the registry, and every number
of the findings and of "How fast" from the committed result files under docs/results/.

    python docs/generate.py           # rewrite the blocks
    python docs/generate.py --check   # rewrite nothing; exit 1 naming each stale block (tests/test_generated_docs.py)

A number the docs state lives between markers (``verispec.report.generated_docs``): ``<!--v:KEY-->...<!--/v-->``
inside a sentence, ``<!--table:KEY-->`` ... ``<!--/table-->`` for a block. Each KEY is a function below of the
result files; a findings page states its claim between ``<!--claim-->`` and ``<!--/claim-->``, and the README's
"Findings" list is those claims, generated from the pages in ``FINDINGS`` order. Each result file names the command
that writes it (its ``record``); rerun that command, then this script.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from fractions import Fraction
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the checkout's verispec, whatever is installed

from verispec.errors import VerispecError  # noqa: E402
from verispec.files.io import atomic_write_text  # noqa: E402
from verispec.report.generated_docs import (  # noqa: E402
    GeneratedDocsError,
    ResultFiles,
    ratio,
    render,
    section,
    stale_markers,
    typed_numbers,
)
from verispec.verifiers.catalog import verifier_table, with_tables  # noqa: E402

RESULTS = ROOT / "docs" / "results"
FINDINGS_DIR = ROOT / "docs" / "findings"
#: The findings pages, in the README's order (the headline first).
FINDINGS = ("ddte", "best_verifier", "assisted_generation", "single_path_optimum", "multipath_optimum",
            "gbv_commitment", "traversal_iid", "ddtree", "lossy_rules", "engine_bugs")
#: Findings pages the README reaches through another page's claim (their numbers are generated all the same).
MORE_FINDINGS = ("engine_releases", "engine_mutants")
CLAIM = re.compile(r"<!--claim-->(?P<body>.*?)<!--/claim-->", re.S)
#: Parameters and names a findings text may state outside markers (they are settings, not results).
ALLOWED = ("the paper's 5%", "by 5%", "t_p = 20 t_q", "top-p 0.8", "Qwen2.5-Coder 1.5B/0.5B", "Qwen2.5", "top-k 20",
           "95%", "x1.5", "2-core", "Theorem 5.3")
#: The study's regime of the DDTE verdict and its file.
DDTE_STUDY, DDTE_REGIME = "ddte-study/pair_selector.json", "gpu-large"
#: The verdict over several training seeds (``verispec selector verdict``).
VERDICT = "verdict/verdict.json"


def pages() -> list[Path]:
    """Every file this script rewrites."""
    return [ROOT / "README.md", ROOT / "docs" / "guides" / "verifiers.md", ROOT / "docs" / "guides" / "experiments.md",
            *(FINDINGS_DIR / f"{name}.md" for name in (*FINDINGS, *MORE_FINDINGS)),
            ROOT / "docs" / "guides" / "performance.md"]


# --- values ---------------------------------------------------------------------------------------------------------

def _ninths(value: str | float) -> str:
    """E[tau] written over 9 when it has that denominator (Sun et al.'s toy is stated in ninths)."""
    fraction = Fraction(value).limit_denominator(1000)
    return f"{fraction.numerator * (9 // fraction.denominator)}/9" if 9 % fraction.denominator == 0 else str(fraction)


def _sun(results, key):
    toy = results("exact-findings.json")["sun_toy"]
    value = {"optimum_tau": Fraction(toy["optimum"]) - 1, "coupling_tau": Fraction(toy["coupling_bound"]) - 1,
             "naive_tau": Fraction(toy["block_efficiency"]["naive"]) - 1}[key]
    return _ninths(value)


def _gbv(results, key):
    entry = results("exact-findings.json")["gbv_commitment"]
    value = entry["block_efficiency"]["gbv"] if key == "gbv" else entry[key]
    return f"{value:.3f}"


def _multipath(results, key):
    gap = results("multipath_gap.json")
    if key == "psbv_best":
        return f"{gap['psbv_at_least_best_other']} of {gap['problems']}"
    if key == "psbv_example_gap":
        return f"{gap['example']['rules']['psbv']['gap']:.4f}"
    if key == "next_example_gap":
        rules = {name: row["gap"] for name, row in gap["example"]["rules"].items() if name != "psbv"}
        best = min(rules, key=rules.get)
        return f"{rules[best]:.3f} ({best})"
    if key == "share_closed":
        return f"{gap['psbv_share_closed_mean']:.0%}"
    raise KeyError(key)


def _delayed(results, key):
    gap = results("multipath_gap.json")["delayed"]
    if key == "problems":
        return f"{gap['problems']}"
    if key == "psbv_best":
        return f"{gap['psbv_at_least_best_other']} of {gap['problems']}"
    if key == "psbv_at_optimum":
        return f"{gap['psbv_at_optimum']}"
    if key == "psbv_gap":
        return f"{gap['mean_gap']['psbv']:.4f}"
    if key == "next":
        rules = {name: value for name, value in gap["mean_gap"].items() if name != "psbv"}
        best = min(rules, key=rules.get)
        return f"{rules[best]:.4f} ({best})"
    if key == "share_closed":
        return f"{gap['psbv_share_closed_mean']:.0%}"
    raise KeyError(key)


def delayed_table(results) -> str:
    """Every rule valid on the delayed trees: its mean gap to the optimum over the random problems."""
    gap = results("multipath_gap.json")["delayed"]
    lines = ["| rule | mean E[tau+1] below the optimum |", "|---|---|"]
    for name, value in sorted(gap["mean_gap"].items(), key=lambda item: item[1]):
        lines.append(f"| `{name}` | {value:.4f} |")
    trees = ", ".join(f"`{tree}`" for tree in gap["trees"])
    lines += ["", f"Over {gap['problems']} random problems on {trees} (V in 2-4, two divergences): psbv is at least "
                  f"the best other rule on {gap['psbv_at_least_best_other']}, reaches the optimum (1e-9) on "
                  f"{gap['psbv_at_optimum']}, and closes {gap['psbv_share_closed_mean']:.0%} of the gap the best "
                  f"other rule leaves (mean; median {gap['psbv_share_closed_median']:.0%})."]
    return "\n".join(lines)


def _compared(entry: dict) -> dict | None:
    """psbv against the best published rule over the same roots (``real_context_gaps.compared``). A result written
    before that summary holds each rule's gap over the roots IT reached; those are the same roots only where no rule
    refused a root (then every rule ran on every solved root), so only there they stand in; else None."""
    if "compared" in entry:
        return entry["compared"]
    if entry["rules_refused"] == 0:
        return {"roots": entry["solved"], "left_out": {}, "mean_optimum": entry["mean_optimum"],
                "gap_psbv": entry["gap_psbv"], "gap_best_published": entry["gap_best_published"]}
    return None


def real_gaps_table(results) -> str:
    """At real roots of the pair: per tree, the optimum of any valid verifier (where its LP fits) and the mean gaps of
    psbv and of the best published rule over the SAME roots (both computed there), with their intervals over
    prompts; the rules that refused roots, by name."""
    gaps = results("real_context_gaps.json")
    lines = ["| tree | roots solved (refused) | roots compared (left out) | support V' median (max) | mean optimum "
             "E[tau+1] | psbv below it | best published rule below it | at the optimum: psbv, best published |",
             "|---|---|---|---|---|---|---|---|"]

    def gap(entry):
        if entry["mean"] is None:
            return "-"
        if abs(entry["mean"]) < 1e-9 and entry["max"] < 1e-9:
            return "0 (every root)"
        low, high = entry["bootstrap_95"]
        return f"{entry['mean']:.4f} [{max(low, 0.0):.4f}, {high:.4f}]"

    def share(entry):
        return "-" if entry["within_1e-9"] is None else format(entry["within_1e-9"], ".0%")

    largest, unnamed, named, none = 0, [], [], []
    for spec, entry in gaps["by_tree"].items():
        sizes = f"; LPs of {min(entry['lp_variables_refused']):,}+ variables" if entry["lp_variables_refused"] else ""
        if entry.get("table_prefixes_refused"):
            sizes += f"; tables of {min(entry['table_prefixes_refused']):,}+ prefixes"
        tokens = entry["tokens"]
        largest = max([largest, *([entry["lp_variables_solved"]["max"]] if entry["lp_variables_solved"] else [])])
        if "rule_refusals" in entry:
            named += [f"`{name}` {count} on `{spec}`" for name, count in entry["rule_refusals"].items()]
            none += [] if entry["rule_refusals"] else [f"`{spec}`"]
        elif entry["rules_refused"]:
            unnamed.append(f"{entry['rules_refused']} on `{spec}`")
        compared = _compared(entry)
        if compared is None:
            cells = ["not compared (a rule refused roots; rerun)", "-", "-", "-", "-"]
        else:
            left = ", ".join(f"{name} {count}" for name, count in compared["left_out"].items())
            optimum = "-" if compared["mean_optimum"] is None else f"{compared['mean_optimum']:.4f}"
            cells = [f"{compared['roots']}" + (f" ({left})" if left else ""), optimum, gap(compared["gap_psbv"]),
                     gap(compared["gap_best_published"]),
                     f"{share(compared['gap_psbv'])}, {share(compared['gap_best_published'])}"]
        lines.append(f"| `{spec}` | {entry['solved']} ({entry['refused']}{sizes}) | {cells[0]} | {tokens['median']:g} "
                     f"({tokens['max']}) | " + " | ".join(cells[1:]) + " |")
    refused = sum(entry["refused"] for entry in gaps["by_tree"].values())
    lines += ["", f"{gaps['roots_done']} of the {gaps['roots']} sampled roots of `{gaps['dataset']}` "
                  f"({', '.join(gaps['samplings'])}); {gaps['interval']}; intervals clipped at 0. psbv and the best "
                  "published rule are compared over the same roots: those solved where psbv and every published rule "
                  "ran (a root a rule refused is left out of both, in brackets by that rule). "
                  + ("Every LP fitted" if not refused else
                     f"{refused} (root, tree) pairs did not fit, the LP or the restriction's table (the sizes they "
                     "would need in brackets)")
                  + f"; the largest LP solved: {largest:,} variables."
                  + (f" Roots refused by a rule's own size limit: {'; '.join(named)}." if named else "")
                  + (f" No rule refused a root on {', '.join(none)}." if none else "")
                  + (f" (Root, rule) refusals this result does not name the rules of: {'; '.join(unnamed)}; rerun "
                     "its command to name them and compare those trees." if unnamed else "")]
    return "\n".join(lines)


def _typical(results, key):
    cost = results("exact-findings.json")["typical_cost"]["chain:3"]
    return f"{cost['tv_mean']:.2f}" if key == "tv" else f"x{cost['efficiency_ratio_mean']:.2f}"


def _ddte_row(results, setting_prefix: str, rival: str, rival_policy: str) -> dict:
    study = results(DDTE_STUDY)
    for table in study["tables"]:
        if table["regime"] == DDTE_REGIME and table["setting"].startswith(setting_prefix):
            for row in table["ddte"]:
                if row["rival"] == rival and row["rival_policy"] == rival_policy and row["lead_policy"] == "selector":
                    return row
    raise GeneratedDocsError(f"{DDTE_STUDY}: no DDTE row {setting_prefix} {rival} {rival_policy} in regime "
                             f"{DDTE_REGIME}; rerun the study command its record names")


DDTE_COLUMNS = (("traversal", "best static", "Traversal, best static chain (as the paper ran it)"),
                ("traversal", "selector", "Traversal, own selector"),
                ("traversal-iid", "selector", "traversal-iid, own selector"))
DDTE_SETTINGS = (("T=0.7", "T = 0.7 top-k 20"), ("T=1", "T = 1"))


#: The DDTE paper's claim: SpecInfer with its selector 5% over Traversal (arXiv 2602.16994).
PAPER_GAIN = 1.05


def _ddte(results, key):
    if key.endswith("/paper"):  # where the paper's 5% lies against the interval over Traversal as it ran it
        low, high = _ddte_row(results, key.split("/")[0], "traversal", "best static")["ratio_ci"]
        where = "inside" if low <= PAPER_GAIN <= high else "above" if high < PAPER_GAIN else "below"
        return f"the paper's 5% {where}"
    setting, rival, policy = key.split("/")
    return ratio(_ddte_row(results, setting, rival, {"static": "best static", "selector": "selector"}[policy]))


def ddte_table(results) -> str:
    """SpecInfer with DDTE's selector against each rival, both temperatures: ratio of throughput, 95% interval."""
    study = results(DDTE_STUDY)
    header = "| sampling | " + " | ".join(f"against {title}" for _, _, title in DDTE_COLUMNS) + " |"
    lines = [header, "|---|" + "---|" * len(DDTE_COLUMNS)]
    for prefix, label in DDTE_SETTINGS:
        cells = [ratio(_ddte_row(results, prefix, rival, policy)) for rival, policy, _ in DDTE_COLUMNS]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    prompts = {table["held_out_prompts"] for table in study["tables"] if table["regime"] == DDTE_REGIME}
    folds = study["split"].get("folds", 1)
    folds = len(folds) if isinstance(folds, list) else folds
    lines += ["", f"Throughput ratios under t_p = 20 t_q, {', '.join(map(str, sorted(prompts)))} prompts, each held "
                  f"out once ({folds}-fold cross-fitting); 95% paired bootstrap intervals over prompts."]
    return "\n".join(lines)


def ddte_regimes_table(results) -> str:
    """The same comparisons in every latency regime of the study."""
    study = results(DDTE_STUDY)
    lines = ["| sampling | latency regime | " + " | ".join(f"against {title}" for _, _, title in DDTE_COLUMNS) + " |",
             "|---|---|" + "---|" * len(DDTE_COLUMNS)]
    for table in study["tables"]:
        rows = {(row["rival"], row["rival_policy"]): row for row in table["ddte"] if row["lead_policy"] == "selector"}
        cells = [ratio(rows[(rival, policy)]) if (rival, policy) in rows else "-" for rival, policy, _ in DDTE_COLUMNS]
        lines.append(f"| {table['setting']} | {table['title']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _verdict_table(results, setting_prefix: str, regime: str = DDTE_REGIME) -> dict:
    for table in results(VERDICT)["tables"]:
        if table["regime"] == regime and table["setting"].startswith(setting_prefix):
            return table
    raise GeneratedDocsError(f"{VERDICT}: no table {setting_prefix} in regime {regime}; rerun the verdict command its "
                             "record names")


def _verdict(results, key):
    """A value of the verdict: 'T=0.7/best' (the best rule with its own selector), 'T=0.7/traversal/static' (DDTE's
    SpecInfer with a selector against that rival's policy), in the DDTE regime."""
    parts = key.split("/")
    if parts[1] == "priced":  # the regime whose verification was priced: its best rule, against specinfer
        return _verdict_priced(results, parts[0], "/".join(parts[2:]))
    table = _verdict_table(results, parts[0])
    if parts[1] == "regime":
        return _regime_words(results(VERDICT), table)
    if parts[1] == "best":
        return f"`{table['best']}`"
    if parts[1] == "edge":  # the share of the best rule's selector choices on the edge of its grid (issue 78)
        edge = table["rules"][table["best"]].get("edge")
        if edge is None:
            raise GeneratedDocsError(f"{VERDICT}: no edge shares (a verdict before issue 78); rerun its command")
        return f"{edge['selector']['any']:.0%}"
    if parts[1] == "seeds":
        return f"{results(VERDICT)['replicates']} training seeds"
    if parts[1] == "versus":
        entry = table["versus"].get(parts[2])
        if entry is None:
            raise GeneratedDocsError(f"{VERDICT}: the best rule of {parts[0]} is {table['best']}, not measured "
                                     f"against {parts[2]}")
        return f"x{entry['ratio']:.3f}" if parts[3:] == ["point"] else ratio(entry)
    rival, policy = parts[1], {"static": "best static", "selector": "selector"}[parts[2]]
    row = next((row for row in table["ddte"] if row["rival"] == rival and row["rival_policy"] == policy), None)
    if row is None:
        raise GeneratedDocsError(f"{VERDICT}: no DDTE row {key}")
    if len(parts) == 4 and parts[3] == "paper":
        low, high = row["ratio_ci"]
        where = "inside" if low <= PAPER_GAIN <= high else "above" if high < PAPER_GAIN else "below"
        return f"the paper's 5% {where}"
    return ratio(row)


def _regime_words(verdict: dict, table: dict) -> str:
    """How a verdict table's latency regime was had and whether verification is in it: 'modelled latency
    (t_p = 20 t_q), verification unpriced' (DDTE's model), or the device it was measured on."""
    regime = verdict["regimes"][table["regime"]]
    priced = table["priced"]["verification"] == "priced"
    price = "verification priced" if priced else "verification unpriced"
    if regime["source"].startswith("cost ratio"):  # DDTE's model: the target's forward a fixed multiple of the draft's
        return f"modelled latency (t_p = {regime['target_times'][0] / regime['draft_step']:g} t_q), {price}"
    device = (table["priced"]["cost"]["device"] if priced else table["regime"]).split(" (")[0]
    return f"measured latency ({device}), {price}"


def _verdict_priced(results, setting: str, what: str) -> str:
    """'best' (the best rule once its verification is priced, in the one regime priced), 'versus' (it against
    specinfer's), 'regime' (that regime's words), 'edge' (the share of its selector's choices on the grid's edge)."""
    verdict = results(VERDICT)
    tables = [table for table in verdict["tables"] if table["setting"].startswith(setting)
              and table["priced"]["verification"] == "priced"]
    if len(tables) != 1:
        raise GeneratedDocsError(f"{VERDICT}: {len(tables)} priced regimes for {setting}; the README names one")
    table = tables[0]
    if what == "best":
        return f"`{table['priced']['best']}`"
    if what == "versus":
        return ratio(table["priced"]["versus"]["specinfer"])
    if what == "versus/point":  # the ratio alone (the front page's sentence; its page's tables give the interval)
        return f"x{table['priced']['versus']['specinfer']['ratio']:.3f}"
    if what == "regime":
        return _regime_words(verdict, table)
    if what == "edge":  # the share of the priced best rule's selector choices on the grid's edge (issue 78)
        return f"{table['priced']['rules'][table['priced']['best']]['edge']['selector']['any']:.0%}"
    raise KeyError(what)


def verdict_priced_table(results) -> str:
    """Under each setting and regime, the best rule on the forwards alone beside the best once each rule's own
    verification time a block is added (or that the regime's device was not measured, and so names no winner)."""
    rows = []
    for table in results(VERDICT)["tables"]:
        priced = table["priced"]
        if priced["best"] is None:
            rows.append((table["setting"], table["regime"], f"`{table['best']}`", priced["verification"], "-", "-"))
            continue
        versus = priced["versus"].get("specinfer")
        how = priced["run"]["words"] if "run" in priced else f"verification measured on {priced['cost']['device']}"
        # the priced rules' selectors chose under the priced throughput: the grid's reach is their choices'
        rows.append((table["setting"], table["regime"], f"`{table['best']}`", f"`{priced['best']}` ({how})",
                     ratio(versus) if versus else "(is it)", _grid_holds(priced)))
    return _table(("sampling", "latency regime", "best on the forwards alone", "best, its verification priced",
                   "priced, against specinfer", "the grid, priced"), rows)


#: The rules whose choices the edge table shows (issue 78: the rules that lead somewhere).
EDGE_RULES = ("psbv", "globalres", "specinfer", "traversal", "traversal-iid")


def verdict_edge_table(results) -> str:
    """Under each setting and regime, the share of each leading rule's selector choices on the edge of the grid it
    was offered (its largest K, L1 or L2; ``verispec.selector.verdict.edge_shares``), over every root and replicate."""
    def share(value) -> str:
        return "-" if value is None else f"{value:.0%}"

    rows = []
    for table in results(VERDICT)["tables"]:
        for rule in EDGE_RULES:
            entry = table["rules"].get(rule)
            if entry is None:
                continue
            if "edge" not in entry:
                raise GeneratedDocsError(f"{VERDICT}: no edge shares (a verdict before issue 78); rerun its command")
            edge = entry["edge"]["selector"]
            rows.append((table["setting"], table["regime"], f"`{rule}`", share(edge["k"]), share(edge["l1"]),
                         share(edge["l2"]), share(edge["any"])))
    return _table(("sampling", "latency regime", "rule", "at the largest K", "at the largest L1",
                   "at the largest L2", "on any edge"), rows)


#: The largest share of the best rule's selector choices on the grid's edge at which the grid is said to hold the
#: optimum (issue 78, item 2: under 10% of the choices in each regime).
EDGE_HOLDS = 0.10


def _grid_holds(table) -> str:
    """Which of issue 78's two holds for a verdict entry: the grid holds the optimum (under ``EDGE_HOLDS`` of the best
    rule's selector choices on its edge), or the optimum lies beyond it (its edge share given)."""
    edge = table["rules"][table["best"]].get("edge")
    if edge is None:
        raise GeneratedDocsError(f"{VERDICT}: no edge shares (a verdict before issue 78); rerun its command")
    share = edge["selector"]["any"]
    if share < EDGE_HOLDS:
        return f"holds the optimum ({share:.0%} of choices on its edge)"
    return f"optimum beyond it: {share:.0%} of choices on its edge"


def verdict_table(results) -> str:
    """Under each setting and regime, the best rule with its own selector and its ratio against each reference."""
    verdict = results(VERDICT)
    references = ("specinfer", "traversal", "traversal-iid")
    lines = ["| sampling | latency regime | best, with its own selector | " +
             " | ".join(f"against {name}, own selector" for name in references) + " | the grid |",
             "|---|---|---|" + "---|" * len(references) + "---|"]
    for table in verdict["tables"]:
        cells = []
        for name in references:
            entry = table["versus"].get(name)
            low, high = (None, None) if entry is None else entry["replicate_range"]
            cells.append("(itself)" if name == table["best"] else "-" if entry is None else
                         f"{ratio(entry)} (one seed: {low:.3f}-{high:.3f})")
        cells.append(_grid_holds(table))
        lines.append(f"| {table['setting']} | {table['regime']} | `{table['best']}` | " + " | ".join(cells) + " |")
    lines += ["", f"Means over {verdict['replicates']} replicates, each a {verdict['folds']}-fold cross-fit with its "
                  "own folds and training seeds; 95% intervals from a bootstrap over prompts and replicates together; "
                  "in brackets the range a single trained selector gave."]
    return "\n".join(lines)


ASSISTED = "bench/bench-assisted.json"
#: Issue 66's goal for the selector over transformers' assisted generation at its best configuration (tuned on the
#: training prompts: the ``hf-best`` row).
ASSISTED_GOAL = 1.2
ASSISTED_BEST = "hf-best"


#: What psbv's labels cost at T = 1 (experiments/label_cost.py): its exact split, and its cheap realisation.
PSBV_T1_COST, PSBV_BLEND_T1_COST = "psbv-t1-label-cost.json", "psbv-blend-t1-label-cost.json"
#: psbv(blend=1)'s E[tau+1] against psbv's exact split on small problems, in rationals
#: (experiments/psbv_realisation.py).
PSBV_REALISATION = "psbv-realisation.json"


def _label_cost(results, key, name: str = PSBV_T1_COST):
    """A rule's T = 1 labels at the roots measured (``name``): 'outcome' (labelled in how long, refused after how
    long), 'projected' (hours for every root of the dataset at the labelled roots' mean, or that none was labelled)."""
    cost = results(name)
    rows = cost["rows"]
    if not rows:
        raise GeneratedDocsError(f"{name}: no root measured; rerun the command its record names")
    if key == "projected":
        if cost["projected_hours"] is None:
            return f"no root labelled, so no projection to the dataset's {cost['dataset_roots']} roots"
        return f"about {cost['projected_hours']:.0f} hours for the dataset's {cost['dataset_roots']} roots"
    parts = []
    for refused, words in ((False, "labelled in"), (True, "refused (a split past its step limit) after")):
        minutes = sorted(row["seconds"] / 60 for row in rows if (row["refused"] is not None) == refused)
        if minutes:
            parts.append(f"{len(minutes)} {words} {', '.join(f'{m:.0f}' for m in minutes)} minutes")
    return f"{len(rows)} roots sampled, {' and '.join(parts)} on {cost['threads']} core(s)"


#: What labels on a widened grid would cost for the leading rules, at T = 0.7 and T = 1 (issue 78, item 2;
#: experiments/label_cost.py --ks --l1s --l2s).
WIDE_COSTS = {"t07": "widened-grid-t07-label-cost.json", "t1": "widened-grid-t1-label-cost.json"}


def _wide_label_cost(results, key):
    """'t07/outcome', 't1/projected' (``_label_cost`` of each file), 'total' (the projections' sum, hours of one
    core), 'grid' (the widened grid's axes, the same in both files)."""
    if key == "total":
        hours = [results(name)["projected_hours"] for name in WIDE_COSTS.values()]
        if None in hours:
            raise GeneratedDocsError("a widened-grid label cost projects nothing (no root labelled); rerun it")
        return (f"about {sum(hours):.0f} hours of one core, and so of this box: one labelling process holds the "
                "pair (its 9.6 GB of weights, 11.5 GB at its peak), and a second does not fit beside it in 24 GB")
    if key == "grid":
        grids = {json.dumps({axis: results(name)["grid"][axis] for axis in ("ks", "l1s", "l2s")})
                 for name in WIDE_COSTS.values()}
        if len(grids) != 1:
            raise GeneratedDocsError(f"the widened-grid label costs were measured on {len(grids)} grids, not one")
        grid = json.loads(grids.pop())
        return ", ".join(f"{axis} {min(grid[name])}-{max(grid[name])}" for axis, name in
                         (("K", "ks"), ("L1", "l1s"), ("L2", "l2s")))
    setting, what = key.split("/")
    return _label_cost(results, what, WIDE_COSTS[setting])


#: Where the optimum lies beyond the grid (issue 78, item 2; experiments/grid_reach.py over label_cost.py's labels
#: on a probe grid).
GRID_REACH = "grid-reach.json"
#: The candidates of grid_reach.py, in the order shown.
REACH_CANDIDATES = ("dataset", "widened", "probe")


def _grid_reach(results, key):
    """'probe' (the probe grid's axes), 'roots' (roots a setting, joined), '<setting>/cost' (seconds a root and the
    hours for the dataset's roots), '<setting>/<regime>' (over the leading rules: the share of the oracle's choices on
    the probe's edge, and the probe's gain over the dataset's grid, each as a range)."""
    reach = results(GRID_REACH)
    settings = reach["settings"]
    if key == "probe":
        grids = {json.dumps(entry["probe_grid"]) for entry in settings.values()}
        if len(grids) != 1:
            raise GeneratedDocsError(f"{GRID_REACH}: the settings were probed on {len(grids)} grids, not one")
        return _axes(json.loads(grids.pop()))
    if key == "roots":
        return " and ".join(f"{entry['roots']}" for entry in settings.values())
    if key == "total":  # one labelling process at a time fits this box (the pair's weights: _wide_label_cost)
        hours = sum(entry["cost"]["projected_hours"] for entry in settings.values())
        return f"about {hours:.0f} hours ({hours / 24:.1f} days) of this box in all"
    setting, what = key.split("/", 1)
    entry = next((value for name, value in settings.items() if name.startswith(setting)), None)
    if entry is None:
        raise GeneratedDocsError(f"{GRID_REACH}: no setting {setting!r} (have {sorted(settings)}); rerun its command")
    if what == "cost":
        cost = entry["cost"]
        return (f"{cost['seconds_per_root']:.0f} s a root on {cost['threads']} core with {entry['samples']} combs a "
                f"root, about {cost['projected_hours']:.0f} hours for the dataset's {cost['dataset_roots']} roots")
    regime, _, candidate = what.partition("/")
    rules = entry["regimes"][regime]
    if candidate:  # '<setting>/<regime>/widened': the share on that candidate's edge
        shares = [rules[rule][candidate]["edge"]["any"] for rule in rules]
        return f"{_value_range(shares, '{:.0%}')} of the oracle's choices on the {candidate} grid's edge"
    edges = [rules[rule]["probe"]["edge"]["any"] for rule in rules]
    gains = [rules[rule]["dataset"]["probe_gain"] for rule in rules]
    return (f"{_value_range(edges, '{:.0%}')} of the oracle's choices sit on the probe's edge and the probe gains "
            f"x{_value_range(gains, '{:.3f}')} over the dataset's grid")


def _value_range(values, form: str) -> str:
    """The least and largest of ``values`` in ``form``, one value where they read the same."""
    low, high = min(values), max(values)
    return form.format(low) if form.format(low) == form.format(high) else f"{form.format(low)}-{form.format(high)}"


def _axes(grid: dict) -> str:
    from verispec.selector.actions import axes_text

    return axes_text(grid["ks"], grid["l1s"], grid["l2s"])


def _grid_reach_record(results) -> str:
    """The record lines of grid_reach.py's run and of the label_cost.py runs it read."""
    from verispec.files.provenance import describe_record

    labels = [describe_record(entry["labels_record"]) for entry in results(GRID_REACH)["settings"].values()]
    return f"Made by {record_line(results, GRID_REACH)}, from the labels made by {'; and by '.join(labels)}."


def grid_reach_table(results) -> str:
    """Per setting, regime and leading rule: the cross-fitted oracle's share of choices on the edge of the dataset's
    grid, the widened grid and the probe grid, the probe's gain over the dataset's grid (in-sample beside it), and the
    rule's oracle against SpecInfer's on the dataset's grid and on the probe grid (does the ranking move?)."""
    reach = results(GRID_REACH)
    rows = []
    for setting, entry in reach["settings"].items():
        for regime, rules in entry["regimes"].items():
            for rule, found in rules.items():
                edges = [f"{found[name]['edge']['any']:.0%}" if name in found else "-" for name in REACH_CANDIDATES]
                gain = found["dataset"]
                versus = ["(itself)" if rule == "specinfer" else
                          f"x{found[name]['throughput'] / rules['specinfer'][name]['throughput']:.3f}"
                          for name in ("dataset", "probe")]
                rows.append((setting, regime, f"`{rule}`", *edges,
                             f"x{gain['probe_gain']:.3f} (in-sample x{gain['in_sample_gain']:.3f})", *versus))
    header = ("sampling", "latency regime", "rule", *(f"on the {name} grid's edge" for name in REACH_CANDIDATES),
              "the probe grid over the dataset's", "against specinfer, dataset grid", "against specinfer, probe grid")
    grids = next(iter(reach["settings"].values()))["candidates"]
    return "\n".join([_table(header, rows), "", "Grids: " + "; ".join(
        f"{name} {_axes(grids[name])}" for name in REACH_CANDIDATES if name in grids) + "."])


def _blend_label_cost(results, key):
    """``_label_cost`` of psbv(blend=1), psbv's cheap realisation."""
    return _label_cost(results, key, PSBV_BLEND_T1_COST)


def _psbv_blend(realisation: dict) -> str:
    """psbv(blend=1) and GBV (the tiling vertex) against psbv's exact split: mean and least ratio of E[tau+1]."""
    return (f"x{realisation['blend_mean_ratio']:.3f} on average (least x{realisation['blend_min_ratio']:.3f}) over "
            f"{realisation['problems']} problems, where GBV reaches x{realisation['gbv_mean_ratio']:.3f}")


def _assisted_row(results, method_suffix: str) -> dict:
    rows = [row for row in results(ASSISTED)["rows"] if row["method"].endswith(method_suffix)]
    if len(rows) != 1:
        raise GeneratedDocsError(f"{ASSISTED}: {len(rows)} rows of a method ending {method_suffix!r}; rerun the "
                                 "command its record names")
    return rows[0]


def _assisted(results, key):
    """'selector' / 'static' / 'plain': the method's speed over transformers' assisted generation at its default;
    'selector/hf-best' over assisted generation at the configuration tuned on the training prompts, 'selector/hf-plain'
    over plain generate; 'prompts': how many held-out prompts; 'best': the tuned configuration; 'goal': where the
    issue's x1.2 over the tuned assisted generation lies against the selector's interval."""
    if key == "prompts":
        return f"{_assisted_row(results, 'selector')['prompts']} held-out prompts"
    if key == "best":
        return _assisted_best(results)
    if key == "goal":
        low, high = _assisted_row(results, "selector")[f"vs_{ASSISTED_BEST}_ci"]
        goal = f"x{ASSISTED_GOAL:g}"
        # missed: the whole interval lies below it; undecided: inside it
        return (f"the {goal} goal is met" if low > ASSISTED_GOAL else f"the {goal} goal is missed"
                if high < ASSISTED_GOAL else f"the {goal} goal is undecided")
    method, _, baseline = key.partition("/")
    baseline = baseline or "hf-assisted"
    return ratio(_assisted_row(results, method), f"vs_{baseline}", f"vs_{baseline}_ci")


def _assisted_best(results) -> str:
    """The tuned configuration in words, e.g. '4 drafts a block, no confidence stop', and what it was tuned on."""
    bench = results(ASSISTED)
    name = bench["parameters"].get("hf_best")
    if not name:
        raise GeneratedDocsError(f"{ASSISTED}: no tuned configuration (hf_best); rerun with --tune-prompts")
    options = dict(part.split("=", 1) for part in name.removeprefix("hf:").split(","))
    threshold = options.get("threshold")
    stop = "no confidence stop" if threshold in ("0", "0.0") else "default confidence stop" if \
        threshold == "default" else f"confidence stop {threshold}"
    prompts = {row["prompts"] for row in bench.get("tuning", [])}
    drafts = "1 draft" if options["k"] == "1" else f"{options['k']} drafts"
    return f"{drafts} a block, {stop}, tuned on {', '.join(map(str, sorted(prompts)))} training prompts"


def assisted_tuning_table(results) -> str:
    """transformers' configurations on the training prompts: tokens/s and its interval, the chosen one marked."""
    bench = results(ASSISTED)
    best = bench["parameters"].get("hf_best")
    lines = ["| configuration (training prompts) | tokens/s [95%] | load (max) |", "|---|---|---|"]
    for row in sorted(bench.get("tuning", []), key=lambda row: -row["tokens_per_s"]):
        low, high = row["tokens_per_s_ci"]
        mark = " (chosen)" if row["config"] == best else ""
        lines.append(f"| `{row['config']}`{mark} | {row['tokens_per_s']:.2f} [{low:.2f}, {high:.2f}] | "
                     f"{row['load_average_max']:.1f} |")
    return "\n".join(lines)


def assisted_table(results) -> str:
    """Every method of the benchmark: tokens/s and its ratios to transformers' two decoders, with intervals."""
    bench = results(ASSISTED)
    parameters = bench["parameters"]
    lines = ["| method | tokens per target call | tokens/s [95%] | vs tuned assisted generation [95%] | vs its "
             "default [95%] | same, prefill included | vs plain `generate` [95%] |", "|---|---|---|---|---|---|---|"]
    for row in bench["rows"]:
        calls = row.get("tokens_per_target_call")
        low, high = row["tokens_per_s_ci"]
        lines.append(f"| {row['method']} | {'-' if calls is None else format(calls, '.2f')} | "
                     f"{row['tokens_per_s']:.2f} [{low:.2f}, {high:.2f}] | "
                     f"{ratio(row, f'vs_{ASSISTED_BEST}', f'vs_{ASSISTED_BEST}_ci')} | "
                     f"{ratio(row, 'vs_hf-assisted', 'vs_hf-assisted_ci')} | "
                     f"{ratio(row, 'vs_hf-assisted_with_prefill', 'vs_hf-assisted_with_prefill_ci')} | "
                     f"{ratio(row, 'vs_hf-plain', 'vs_hf-plain_ci')} |")
    assistant = parameters["hf_assistant"]
    static = "; ".join(f"{name}: {', '.join(actions)}" for name, actions in parameters["static"].items())
    lines += ["", f"{bench['rows'][0]['setting']}, {bench['rows'][0]['prompts']} held-out prompts, "
                  f"{parameters['max_new_tokens']} new tokens each, {parameters['threads']} threads, "
                  f"{parameters['linears']} linear kernels for every method, {parameters['dtype']}; transformers "
                  f"{parameters['transformers']} (assistant: {assistant['num_assistant_tokens']} tokens, schedule "
                  f"{assistant['num_assistant_tokens_schedule']}, confidence threshold "
                  f"{assistant['assistant_confidence_threshold']}); best static action ({static}). "
                  f"{_window(parameters)}95% intervals: percentile bootstrap over prompts, paired for the ratios."]
    return "\n".join(lines)


SAME_ALGORITHM, LATENCY_CHECK = "bench/bench-same-algorithm.json", "bench/bench-latency-model.json"
#: The same algorithm again at one K on more prompts (issue 66, item 2: K = 6's interval).
SAME_ALGORITHM_MORE = "bench/bench-same-algorithm-k6.json"


def same_algorithm_table(results, name: str = SAME_ALGORITHM) -> str:
    """Issue 66, item 2: verispec's chain:K naive against transformers' constant K, per K: the tokens/s ratio, each
    one's block time and tokens a block, and the share of a block that is not the two models' forwards."""
    bench = results(name)
    rows = []
    for row in bench["rows"]:
        v, t = row["verispec"], row["hf"]
        low, high = row["ratio_ci"]
        if "block_rate_ratio" in row:  # blocks a second v / t: the tokens/s ratio at equal tokens a block
            b_low, b_high = row["block_rate_ratio_ci"]
            blocks = f"x{row['block_rate_ratio']:.3f} [{b_low:.3f}, {b_high:.3f}]"
        else:
            blocks = f"x{t['block_ms'] / v['block_ms']:.3f}"
        rows.append((row["k"], f"x{row['ratio']:.3f} [{low:.3f}, {high:.3f}]",
                     f"{v['block_ms']:.0f}, {t['block_ms']:.0f}", blocks,
                     f"{v['tokens_per_block']:.2f}, {t['tokens_per_block']:.2f}",
                     f"{v['rest_share']:.1%}, {t['rest_share']:.1%}"))
    parameters = bench["parameters"]
    return _table(("K", "verispec / transformers tokens/s [95%]", "ms a block (v, t)", "blocks a second v / t [95%]",
                   "tokens a block (v, t)", "not the forwards (v, t)"), rows) + (
        f"\n\n{len(parameters['prompts'])} prompts, {parameters['max_new_tokens']} new tokens each, "
        f"{parameters['threads']} thread(s), {parameters['linears']} linears, {parameters['sampling']}; "
        f"transformers {parameters['transformers']}. {_window(parameters)}Made by "
        f"{record_line(results, name)}.")


def _window(parameters: dict) -> str:
    """What a decoding benchmark's rates time: after each generation's first block (``window``), else the earlier cut
    (transformers' call less an estimate of verispec's prefill)."""
    if parameters.get("window", "").startswith("steady"):
        return ("Rates after each generation's first block (prefill and first block excluded alike for every "
                "decoder). ")
    return "Prefill excluded (transformers' estimated: its first block mostly uncounted). "


def latency_check_table(results) -> str:
    """Issue 66, item 3: each latency model against the same measured rows of every static action: how many actions'
    block time it predicts within the tolerance, the median and the worst measured / predicted, and on how many the
    whole bootstrap interval of the measured block time lies outside the tolerance (a miss the rows' noise cannot
    explain)."""
    bench = results(LATENCY_CHECK)
    rows = [(f"`{name}`", bench["parameters"]["latency_kernels"].get(name, "-") if "latency_kernels" in
             bench["parameters"] else "-", f"{m['time']['within']} of {m['time']['actions']}",
             f"x{m['time']['median']:.3f}", f"x{m['time']['worst']:.3f}", f"{m['time']['within_scaled']}",
             f"{m['time']['sd_log']:.3f}", f"{m['time'].get('beyond_noise', '-')}")
            for name, m in bench["models"].items()]
    noise, parameters = bench["noise"], bench["parameters"]
    prompts = {row["prompts"] for row in bench["rows"]}
    spreads = [tree["spread"] for tree in noise["trees"].values()]
    return _table(("latency model", "linears it was measured with", f"block time within {bench['tolerance']:.0%}",
                   "median measured / predicted", "worst", f"within {bench['tolerance']:.0%} of its median ratio",
                   "sd of log(measured / predicted)", f"outside {bench['tolerance']:.0%} beyond the rows' 95% "
                   "interval"), rows) + (
        f"\n\n{'/'.join(str(p) for p in sorted(prompts))} held-out prompts, {parameters['max_new_tokens']} new tokens "
        f"each, {parameters['threads']} threads. The rows' own noise: the actions that draw the same tree (a chain "
        f"whatever K when L2 = 0) decode identical work, and their block times spread by up to {max(spreads):.1%} "
        f"({len(noise['trees'])} trees); pooled sd of log block time {noise['sd_log']:.3f}. "
        f"Made by {record_line(results, LATENCY_CHECK)}.")


def record_line(results, name: str) -> str:
    """Where a result came from: its command, commit, date and machine, one line."""
    from verispec.files.provenance import describe_record

    return describe_record(results(name)["record"])


def multipath_table(results) -> str:
    gap = results("multipath_gap.json")
    example = gap["example"]
    lines = ["| rule | E[tau+1] | below the optimum |", "|---|---|---|",
             f"| every valid verifier (the optimum) | {example['optimum']:.6f} | 0 |"]
    for name, row in sorted(example["rules"].items(), key=lambda item: -item[1]["block_efficiency"]):
        lines.append(f"| `{name}` | {row['block_efficiency']:.6f} | {row['gap']:.6f} |")
    lines += ["", f"Over {gap['problems']} random problems (`iid:K,L`, K, L in 2-3, V in 2-4, two divergences): psbv "
                  f"is at least the best other rule on {gap['psbv_at_least_best_other']}, reaches the optimum "
                  f"(1e-9) on {gap['psbv_at_optimum']}, and closes {gap['psbv_share_closed_mean']:.0%} of the gap "
                  f"the best other rule leaves (mean; median {gap['psbv_share_closed_median']:.0%})."]
    return "\n".join(lines)


def _table(header: tuple[str, ...], rows) -> str:
    """A Markdown table: the header, its rule line and one line per row of cells."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows])


def gbv_table(results) -> str:
    entry = results("exact-findings.json")["gbv_commitment"]
    return _table(("program or rule", "E[tau+1]"), [
        ("every valid verifier (multi-step LP)", f"{entry['optimum']:.6f}"),
        ("GBV's path, then at most one token off it, at any depth (`one_off_path`, `examples/my_class.py`)",
         f"{entry['off_path_any_depth_optimum']:.6f}"),
        ("GBV's path, or one token off it at depth 1 only (`shallow_off_path`, `examples/my_class.py`)",
         f"{entry['off_path_depth_1_optimum']:.6f}"),
        ("only along GBV's greedily selected path", f"{entry['selected_path_optimum']:.6f}"),
        ("`gbv`", f"{entry['block_efficiency']['gbv']:.6f}")])


def sun_table(results) -> str:
    toy = results("exact-findings.json")["sun_toy"]
    tau = {name: _ninths(Fraction(value) - 1) for name, value in
           (("optimum", toy["optimum"]), ("coupling", toy["coupling_bound"]), *toy["block_efficiency"].items())}
    return _table(("quantity", "E[tau]"), [
        ("every valid verifier (multi-step LP, proved in rationals)", tau["optimum"]),
        ("block verification (`bv`)", tau["bv"]), ("token-level verification (`naive`)", tau["naive"]),
        ("the per-length coupling bound (the paper's oracle)", tau["coupling"])])


LAYER, DDTREE, OPTIMALITY = "layer-verification.json", "ddtree.json", "optimality-claims.json"
#: Layer Verification's finding: the trees on which lv:globalres and psbv both run (i.i.d. paths, delayed trees).
LAYER_PATH_TREES = ("iid:2,2", "iid:3,2", "delayed:2,1,1", "delayed:2,1,2")
#: The rows of the Layer Verification table, lifted rules beside the rules they are compared with.
LAYER_RULES = ("lv:globalres", "psbv", "globalres", "lv:specinfer", "specinfer", "lv:naive", "naivetree", "lv:rrsw",
               "rrsw", "traversal")


def _layer(results, key):
    """'gap/<rule>': the largest over ``LAYER_PATH_TREES`` of the rule's mean gap of E[tau+1] to the optimum;
    'problems': random problems per tree."""
    summary = results(LAYER)["summary"]
    if key == "problems":
        cells = {entry["cells"] for entry in summary.values()}
        return ", ".join(map(str, sorted(cells)))
    rule = key.removeprefix("gap/")
    return f"{max(summary[spec]['rules'][rule]['mean_gap'] for spec in LAYER_PATH_TREES):.3f}"


def layer_table(results) -> str:
    """Each rule's mean gap of E[tau+1] to the optimum on each tree (largest in brackets); '-' where not valid."""
    data = results(LAYER)
    summary = data["summary"]

    def cell(rules, name):
        row = rules.get(name)
        return "-" if row is None else f"{max(row['mean_gap'], 0.0):.3f} ({max(row['max_gap'], 0.0):.3f})"

    rows = [("random problems", *(str(entry["cells"]) for entry in summary.values())),
            ("every valid verifier: mean optimum E[tau+1]", *(f"{entry['mean_optimum']:.3f}"
                                                              for entry in summary.values()))]
    rows += [(f"`{name}`", *(cell(entry["rules"], name) for entry in summary.values())) for name in LAYER_RULES]
    return _table(("rule: mean gap to the optimum (largest)", *(f"`{spec}`" for spec in summary)), rows) + (
        f"\n\nRandom context-dependent problems, {data['seeds']} seeds for each V (2-3) and "
        f"divergence ({', '.join(f'{d:g}' for d in data['divergences'])}); '-': the rule is not valid for the tree's "
        "draft law.")


def _ddtree(results, key):
    """'witness/tv': the smallest witness's exact TV of min(1, p/q) ('witness/where': its size); 'bias/tv': the
    range of the mean TV of the q-based rules on random problems; 'bound/lp': the largest |LP - (1 + sum p)|;
    'light/ratio': the range over targets of the speed-of-light term over the best tree's E[tau] at the largest P;
    'product/...': block verification's E[tau+1] on the product law and on the autoregressive chain."""
    data = results(DDTREE)
    if key == "witness/tv":
        return str(Fraction(data["witness"]["tv_naivetree"]))
    if key == "witness/where":
        witness = data["witness"]
        nodes = "one node" if witness["budget"] == 1 else f"{witness['budget']} nodes"
        return f"V = {witness['vocab']}, {nodes}"
    if key == "bias/tv":
        values = [row["mean_tv"] for name, row in data["random_bias"]["rules"].items() if name != "nss"]
        return f"{min(values):.2f}-{max(values):.2f}"
    if key == "bound/lp":
        return f"{max(row['max_abs_lp_minus_bound'] for row in data['fixed_tree_bound_vs_lp']):.0e}"
    if key == "light/ratio":
        largest = max(row["capacity"] for row in data["speed_of_light"])
        ratios = [row["term_nats"] / row["best_tree_E_tau"] for row in data["speed_of_light"]
                  if row["capacity"] == largest]
        return f"x{min(ratios):.1f}-x{max(ratios):.1f}"
    if key == "light/capacity":
        return f"10^{math.log10(max(row['capacity'] for row in data['speed_of_light'])):.0f}"
    efficiency = data["product_law"]["mean_block_efficiency"]
    return f"{efficiency[key.removeprefix('product/')]:.2f}"


def ddtree_light_table(results) -> str:
    """The speed-of-light term against the exact best tree of P nodes, per i.i.d. target and capacity."""
    rows = [(", ".join(f"{value:g}" for value in row["target"]), f"10^{math.log10(row['capacity']):.0f}",
             f"{row['best_tree_E_tau']:.2f}", f"{row['term_nats']:.2f}", f"{row['term_bits']:.2f}",
             f"x{row['term_nats'] / row['best_tree_E_tau']:.2f}", f"{row['log_P_over_mu']:.2f}")
            for row in results(DDTREE)["speed_of_light"]]
    return _table(("target p (i.i.d.)", "P", "best tree's E[tau]", "leading term (nats)", "(bits)",
                   "term / best", "log P / mu"), rows)


def ddtree_table(results) -> str:
    """The bias of the q-based rules on DDTree's trees, the fixed-tree bound against the LP, the product law."""
    data = results(DDTREE)
    bias, product = data["random_bias"], data["product_law"]
    rows = [(f"`{name}` on `{bias['tree']}`, V = {bias['vocab']}: exact TV to the target", f"{row['mean_tv']:.3f}",
             f"{row['min_tv']:.3f}-{row['max_tv']:.3f}") for name, row in bias["rules"].items()]
    rows += [(f"`{row['tree']}`, V = {row['vocab']}: abs(LP optimum - (1 + sum of p over the nodes))", "-",
              f"at most {row['max_abs_lp_minus_bound']:.1e}") for row in data["fixed_tree_bound_vs_lp"]]
    named = {"bv_product_chain": "`bv` on the product law's chain", "bv_autoregressive_chain": "`bv` on the "
             "autoregressive chain", "nss_ddtree_3": "`nss` on `ddtree:3,3`", "best_tree_3": "the best tree of 3 "
             "nodes", "nss_ddtree_8": "`nss` on `ddtree:8,3`"}
    rows += [(f"{named.get(name, name)}: E[tau+1], V = {product['vocab']}", f"{value:.3f}", "-")
             for name, value in product["mean_block_efficiency"].items()]
    return _table(("quantity", "mean", "range"), rows) + (
        f"\n\nRandom problems: {bias['problems']} for the bias, "
        f"{', '.join(str(row['problems']) for row in data['fixed_tree_bound_vs_lp'])} for the bound, "
        f"{product['problems']} for the product law (divergence {product['divergence']:g}); block verification on "
        f"the product law: largest TV {product['max_tv_bv_on_product_chain']:.0e}.")


def _optimality(results, key):
    """'witness/K=k': SpecTr-GBV's formula against the certified optimum at the witness for K = k; 'above' /
    'below': on how many random problems of K >= 2 the formula exceeds the optimum / falls below it; 'greedy/gap':
    the largest relative gap of ``greedy`` to the multi-step optimum on greedy trees deeper than one position,
    'greedy/mean' the range over those trees of its mean gap relative to its mean E[tau+1]."""
    data = results(OPTIMALITY)
    if key.startswith("witness/"):
        witness = data["spectr_gbv"]["witnesses"][key.removeprefix("witness/")]
        return f"{Fraction(witness['claimed'])} against {Fraction(witness['optimum_certified'])}"
    if key in ("above", "below"):
        cells = [cell for name, cell in data["spectr_gbv"]["by_K_L"].items() if not name.startswith("K=1,")]
        count = sum(cell[f"formula_{key}_optimum"] for cell in cells)
        return f"{count} of {sum(cell['problems'] for cell in cells)}"
    deep = [cell for name, cell in data["univer_greedy_trees"].items() if name.startswith("greedy-tree")]
    if key == "greedy/gap":
        return f"{max(cell['greedy_gap_relative_max'] for cell in deep):.1%}"
    if key == "greedy/mean":
        shares = [cell["greedy_gap_mean"] / cell["greedy_mean"] for cell in deep]
        return f"{min(shares):.1%}-{max(shares):.1%}"
    raise KeyError(key)


def spectr_gbv_table(results) -> str:
    """By (K, L): random problems, where the formula exceeds / falls below the optimum, largest excess, shortfall."""
    data = results(OPTIMALITY)
    rows = [(name.replace(",", ", "), cell["problems"], cell["formula_above_optimum"], cell["formula_below_optimum"],
             f"{cell['largest_excess']:.4f}" if cell["formula_above_optimum"] else "-",
             f"{cell['largest_shortfall']:.4f}" if cell["formula_below_optimum"] else "-")
            for name, cell in data["spectr_gbv"]["by_K_L"].items()]
    return _table(("cell", "problems", "formula above the optimum", "below it", "largest excess",
                   "largest shortfall"), rows) + (
        f"\n\nProblems: families {', '.join(data['families'])}, V = 2 and 3 (V = 2 only where K >= 3 and L = 3), "
        f"divergences {', '.join(f'{d:g}' for d in data['divergences'])}, {data['seeds']} seeds each; above or below "
        "by more than 1e-9 ('-': never); E[tau] (tokens accepted before the correction).")


def spectr_gbv_witnesses_table(results) -> str:
    """For each K, the smallest context-free witness on V = 2 where the formula exceeds the certified optimum."""
    rows = []
    for name, witness in results(OPTIMALITY)["spectr_gbv"]["witnesses"].items():
        if witness is None:
            rows.append((name.replace("=", " = "), "none found", "-", "-", "-", "-"))
            continue
        rows.append((name.replace("=", " = "), f"`{witness['tree']}`", ", ".join(witness["p"]),
                     ", ".join(witness["q"]), str(Fraction(witness["claimed"])),
                     str(Fraction(witness["optimum_certified"]))))
    return _table(("K", "tree", "p", "q", "formula's E[tau]", "optimum, certified in rationals"), rows)


def univer_table(results) -> str:
    """Per greedy tree and V: the multi-step optimum, greedy's gap to it, the coupling bound, the same shape drafted
    i.i.d. or without replacement."""
    rows = []
    for name, cell in results(OPTIMALITY)["univer_greedy_trees"].items():
        spec, size = name.rsplit(" ", 1)
        others = "; ".join(f"`{other}` {entry['optimum_mean']:.3f} (best rule {entry['best_rule_mean']:.3f}, "
                           f"{', '.join(entry['best_rules'])})" for other, entry in cell.items()
                           if isinstance(entry, dict))
        gap = f"{max(cell['greedy_gap_mean'], 0.0):.4f} ({cell['greedy_gap_relative_max']:.1%})"
        rows.append((f"`{spec}`, {size.replace('=', ' = ')}", cell["problems"], f"{cell['optimum_mean']:.4f}",
                     f"{cell['greedy_mean']:.4f}", gap, f"{cell['greedy_at_optimum']}",
                     f"{cell['coupling_bound_mean']:.4f}", others or "-"))
    return _table(("tree", "problems", "optimum E[tau+1]", "`greedy`", "gap: mean (largest, relative)",
                   "greedy at the optimum", "coupling bound", "same shape drafted otherwise: optimum"), rows)


LOSSY, LOSSY_QWEN = "lossy-rules.json", "lossy-rules-qwen.json"
#: The rule settings of the lossy finding's claim, each its rule's own default or the paper's middle setting: the
#: rules that trade TV for longer blocks along the frontier (docs/findings/lossy_rules.md).
LOSSY_TRADERS = ("ensemble(weight=0.6)", "lenience", "fly(theta=0.5,window=2)")
#: The truncation rules at the papers' larger thresholds, which the claim says decode slower and stay lossy.
LOSSY_TRUNCATION = ("minp", "eta")


def _lossy(results, key):
    """'gain' / 'tv': the range over ``LOSSY_TRADERS`` of E[tau+1] over the lossless rule's and of the exact TV, on
    chain:3 at the largest vocabulary; 'vocab': that vocabulary; 'slow': the truncation rules' ratios at their
    defaults there."""
    by_vocab = results(LOSSY)["by_vocab"]
    vocab = max(by_vocab, key=int)
    settings = by_vocab[vocab]["trees"]["chain:3"]["settings"]
    if key == "vocab":
        return f"V = {vocab}"
    if key == "slow":
        return ", ".join(f"`{name}` x{settings[name]['ratio_mean']:.2f}" for name in LOSSY_TRUNCATION)
    values = [settings[name]["ratio_mean" if key == "gain" else "tv_mean"] for name in LOSSY_TRADERS]
    low, high = min(values), max(values)
    return f"x{low:.2f}-x{high:.2f}" if key == "gain" else f"{low:.2f}-{high:.2f}"


def _lossy_problems(problems: dict) -> str:
    """What a lossy run priced: its random problems, or the contexts and samplings of the pair its laws came from."""
    if problems.get("family") == "derived":
        return (f"{len(problems['contexts'])} {problems['pair']} contexts x {len(problems['samplings'])} samplings "
                f"({', '.join(problems['samplings'])}), laws derived to V tokens")
    return f"{problems['seeds']} random problems"


def lossy_table(results, name: str = LOSSY) -> str:
    """Every rule setting of the lossy run ``name``: exact TV and E[tau+1] over the lossless rule on chain:3 and
    iid:2,2, at each vocabulary; bold where no setting (the lossless rule included) is at least as good on both."""
    lines = []
    for vocab, entry in sorted(results(name)["by_vocab"].items(), key=lambda item: int(item[0])):
        trees = entry["trees"]
        names = list(trees["chain:3"]["settings"])
        lines += [f"**V = {vocab}** ({_lossy_problems(entry['problems'])}, depth {entry['problems']['depth']}; "
                  "lossless E[tau+1]: " + ", ".join(f"{spec} {tree['lossless_block_efficiency_mean']:.3f}"
                                                    for spec, tree in trees.items()) + ")", ""]
        rows = []
        for name in names:
            cells = []
            for spec in ("chain:3", "iid:2,2"):
                cell = trees[spec]["settings"].get(name)
                if cell is None:
                    cells += ["chain rule", "-"]
                    continue
                bold = "**" if cell["frontier"] else ""
                cells += [f"{bold}{cell['tv_mean']:.3f}{bold}", f"{bold}x{cell['ratio_mean']:.3f}{bold}"]
            rows.append((f"`{name}`", *cells))
        lines += [_table(("setting", "chain:3 TV", "chain:3 x E[tau+1]", "iid:2,2 TV", "iid:2,2 x E[tau+1]"), rows),
                  ""]
    return "\n".join(lines).rstrip()


def typical_table(results) -> str:
    cost = results("exact-findings.json")["typical_cost"]
    return _table(("tree", "lossless rule", "exact TV to the target (mean, range)", "E[tau+1] over the lossless rule"),
                  [(f"`{spec}`", f"`{entry['lossless_rule']}`",
                    f"{entry['tv_mean']:.3f} ({entry['tv_min']:.3f}-{entry['tv_max']:.3f})",
                    f"x{entry['efficiency_ratio_mean']:.3f}") for spec, entry in cost.items()])


ENGINE_BUGS, REAL_CODE = "engine-bugs.json", "real-code.json"


def _engine_bugs(results, key):
    summary = results(ENGINE_BUGS)["summary"]
    if key == "caught":
        return f"{summary['goal_met']} of {summary['bugs']}"
    if key == "repositories":
        return f"{summary['repositories']}"
    raise KeyError(key)


def _tv_cell(row: dict) -> str:
    if row.get("tv") is None:
        return "-"
    return f"{row['tv']:.3g}" + (" (est.)" if row.get("tv_kind") == "estimate" else "")


def engine_bugs_table(results) -> str:
    """One line per bug: its thread, class, check, and the verdicts of the buggy and fixed versions."""
    data = results(ENGINE_BUGS)
    by_bug: dict = {}
    for row in data["rows"]:
        by_bug.setdefault(row["bug"], {})[row["version"]] = row
    lines = []
    for bug in data["bugs"]:
        rows = by_bug.get(bug["id"], {})
        buggy, fixed = rows.get("buggy"), rows.get("fixed")
        witness = (buggy or {}).get("witness") or {}
        over = witness.get("overproduced") or {}
        shown = (f"{witness.get('problem')}, `{bug['tree']}`" + (f", {witness['sampling']}" if witness.get("sampling")
                 else "") + (f"; over-produces {over['sequence']}" if over else "")) if witness else "-"
        lines.append((f"`{bug['id']}`", ", ".join(f"[{thread}](https://github.com/{thread.replace('#', '/issues/')})"
                                                  for thread in bug["threads"]), bug["class"], f"`{bug['layout']}`",
                      "not expressible: " + (bug.get("reason") or "") if not bug["expressible"] else
                      f"{buggy['verdict']} ({buggy['mode']}, TV {_tv_cell(buggy)}, {buggy['seconds']} s)"
                      if buggy else "-",
                      f"{fixed['verdict']} ({fixed['mode']}, {fixed['seconds']} s)" if fixed else "-", shown))
    return _table(("bug", "thread", "class", "layout", "buggy", "fixed", "smallest witness"), lines)


def real_code_table(results) -> str:
    """The unmodified engine code checked: its verdict on each check."""
    rows = results(REAL_CODE)["rows"]

    def check(row: dict) -> str:
        return ", ".join(part for part in (f"`{row['layout']}`", f"`{row['tree']}`", row.get("problem"),
                                           row.get("sampling")) if part)

    return _table(("code", "upstream", "check", "verdict", "TV", "seconds"), [
        (f"`{row['code']}`", f"{row['repository']} at {row.get('commit') or '?'}", check(row),
         f"{row['verdict']} ({row.get('mode')})", _tv_cell(row), row.get("seconds", "-")) for row in rows])


ENGINE_RELEASES = "engine-releases.json"


ENGINE_RELEASES_TRANSFORMERS = "engine-releases-transformers.json"
#: The target law of the findings page's acceptance example (the drafting probe's assistant is (0.3, 0.7)).
ACCEPTANCE_TARGET = (0.6, 0.4)


def _release_rows(results, name: str = ENGINE_RELEASES) -> tuple[list[str], list[str], dict]:
    """(releases oldest first, checks, {(release, check): row}) of a release history (vLLM's by default)."""
    data = results(name)
    return data["releases"], list(data["checks"]), {(row["release"], row["check"]): row for row in data["rows"]}


def _lossy_span(releases: list[str], rows: dict, check: str, lossy: bool) -> list[str]:
    return [release for release in releases if (rows.get((release, check)) or {}).get("verdict")
            == ("LOSSY" if lossy else "LOSSLESS")]


def _span(names: list[str], releases: list[str]) -> str:
    """Releases as a range where they are consecutive in ``releases``, else listed."""
    if not names:
        return "none"
    where = sorted(releases.index(name) for name in names)
    if where == list(range(where[0], where[-1] + 1)):
        return names[0] if len(names) == 1 else f"{releases[where[0]]} to {releases[where[-1]]}"
    return ", ".join(releases[index] for index in where)


def _engine_releases(results, key):
    """'releases' (how many, from which to which), 'v2-lossy' / 'v2-lossless' (the releases the V2 check reads
    LOSSY / LOSSLESS in), 'lossy/CHECK' / 'lossless/CHECK' (the same for any check), 'v2-tv' (its largest exact
    TV), 'v1' (the releases every V1 check holds the law in)."""
    releases, checks, rows = _release_rows(results)
    if key == "releases":
        return f"{len(releases)} releases, {releases[0]} to {releases[-1]}"
    if key in ("v2-lossy", "v2-lossless"):
        return _span(_lossy_span(releases, rows, "v2-seeded", key == "v2-lossy"), releases)
    if key.startswith(("lossy/", "lossless/")):  # the releases a check reads LOSSY / LOSSLESS in
        verdict, check = key.split("/")
        return _span(_lossy_span(releases, rows, check, verdict == "lossy"), releases)
    if key == "v2-tv":
        values = [row["tv_distance"] for row in rows.values() if row["check"] == "v2-seeded"
                  and row.get("verdict") == "LOSSY" and row.get("tv_distance") is not None]
        return f"{max(values):.3f}" if values else "-"
    v1 = [check for check in checks if check.startswith("v1-")]
    read = [release for release in releases if any((rows.get((release, check)) or {}).get("verdict") in CHECKED
                                                   for check in v1)]
    if key == "v1":  # of the releases whose V1 sampler was read (not refused)
        held = [release for release in read
                if all((rows.get((release, check)) or {}).get("as_expected") for check in v1)]
        return f"{len(held)} of {len(read)}"
    if key == "v1-read":  # the first and last release whose V1 sampler was read, and those refused
        refused = [release for release in releases if release not in read]
        span = f"{read[0]} to {read[-1]}" if len(read) > 1 else read[0]
        return span + (f"; refused: {', '.join(refused)}" if refused else "")
    raise KeyError(key)


#: The verdicts of a row that checked something (the others say why nothing was checked).
CHECKED = ("LOSSY", "LOSSLESS", "REPRODUCIBLE", "IRREPRODUCIBLE")


def engine_releases_table(results, name: str = ENGINE_RELEASES) -> str:
    """Release by check: each verdict (LOSSY with its exact TV; ABSENT, UNREAD or REFUSED with the reason below);
    for transformers a last column, the drafting probe's reading (the temperature applied once or twice)."""
    releases, checks, rows = _release_rows(results, name)
    drafting = {row["release"]: row for row in results(name).get("drafting", [])}

    def cell(row: dict | None) -> str:
        if not row:
            return "-"
        verdict = row["verdict"]
        if verdict in ("LOSSY", "LOSSLESS") and row.get("tv_distance") is not None:
            mark = "" if row.get("as_expected") else " (unexpected)" if verdict == "LOSSY" else ""
            return f"{verdict} {row['tv_distance']:.3g}{mark}"
        return verdict

    def draft(release: str) -> str:
        row = drafting.get(release) or {}
        return (f"{row['applied']} (q^({row['times_temperature']:.3g}/T))" if row.get("applied")
                else row.get("error", "-"))

    extra = ("drafting temperature",) if drafting else ()
    return _table(("release", *(f"`{check}`" for check in checks), *extra),
                  [(release, *(cell(rows.get((release, check))) for check in checks),
                    *((draft(release),) if drafting else ())) for release in releases])


def _transformers_releases(results, key):
    """'releases' (how many minor releases, from which to which), 'held' (the releases every lossless check holds
    the law in, of all), 'twice' / 'once' (the releases whose assistant drafts at the temperature applied twice /
    once), 'ensemble' (the releases with DIVERSE's ensemble, and its exact TV)."""
    releases, checks, rows = _release_rows(results, ENGINE_RELEASES_TRANSFORMERS)
    drafting = {row["release"]: row.get("applied") for row in results(ENGINE_RELEASES_TRANSFORMERS)["drafting"]}
    if key == "releases":
        return f"{len(releases)} minor releases, {releases[0]} to {releases[-1]}"
    if key == "held":
        lossless = [check for check in checks if check != "generate-ensemble"]
        held = [release for release in releases
                if all((rows.get((release, check)) or {}).get("verdict") == "LOSSLESS" for check in lossless)]
        return f"{len(held)} of {len(releases)}"
    if key in ("twice", "once"):
        return _span([release for release in releases if drafting.get(release) == key], releases)
    if key in ("probe", "example"):  # the drafting probe's setting, and the acceptance example's
        probe = results(ENGINE_RELEASES_TRANSFORMERS)["drafting"][0]
        law = ", ".join(f"{value:g}" for value in probe["draft"])
        if key == "probe":
            return f"T = {probe['temperature']:g} for an assistant of law ({law})"
        target = ", ".join(f"{value:g}" for value in ACCEPTANCE_TARGET)
        return f"at T = {probe['temperature']:g}, p = ({target}), q = ({law})"
    if key.startswith("accept/"):  # a draft's acceptance, sum min(p_T, handed q), at the probe's handed law
        probe = next((row for row in results(ENGINE_RELEASES_TRANSFORMERS)["drafting"]
                      if row.get("applied") == key.split("/")[1]), None)
        if probe is None:
            return "-"
        target = [value ** (1 / probe["temperature"]) for value in ACCEPTANCE_TARGET]
        return f"{sum(min(a / sum(target), b) for a, b in zip(target, probe['handed'])):.3f}"
    if key == "ensemble":
        found = [row for row in rows.values() if row["check"] == "generate-ensemble" and row["verdict"] == "LOSSY"]
        tvs = sorted({f"{row['tv_distance']:.3g}" for row in found})
        return (f"{_span(sorted({row['release'] for row in found}, key=releases.index), releases)} "
                f"(exact TV {', '.join(tvs)})") if found else "none"
    raise KeyError(key)


def engine_releases_reasons_table(results, name: str = ENGINE_RELEASES) -> str:
    """The distinct reasons of the rows that checked nothing (ABSENT, UNREAD, REFUSED), with their releases."""
    releases, checks, rows = _release_rows(results, name)
    reasons: dict = {}
    for (release, check), row in rows.items():
        if row["verdict"] not in CHECKED:  # one line for the releases a reason holds for, its release named once
            why = re.sub(rf"(?<![\d.]){re.escape(release)}(?![\d.]*\d)", "the row's release",
                         row.get("error") or row.get("note") or "")
            reasons.setdefault((check, row["verdict"], why), []).append(release)
    return _table(("check", "verdict", "releases", "why"), [
        (f"`{check}`", verdict, _span(names, releases), why.replace("verispec: error: ", ""))
        for (check, verdict, why), names in sorted(reasons.items())])


ENGINE_MUTANTS = "engine-mutants.json"


def _wilson(successes: int, trials: int) -> tuple[float, float]:
    """The 95% Wilson interval of a share, as ``experiments/engine_mutants.py`` states its shares (scipy's)."""
    from scipy.stats import binomtest

    interval = binomtest(successes, trials).proportion_ci(confidence_level=0.95, method="wilson")
    return interval.low, interval.high


def _share(judge: dict) -> str:
    low, high = judge.get("wilson95") or (0.0, 1.0)
    return f"{judge['killed']} ({judge['share']:.0%}, 95% interval {low:.0%} to {high:.0%})"


def _engine_mutants(results, key):
    """'judged' (mutants judged, of those drawn and listed), 'verispec' / 'engine_tests' (each judge's kills with
    their Wilson interval), 'split' (killed by one judge alone, by neither), 'seconds' (each judge's seconds in
    all), 'goal' (issue 76's: verispec kills at least 95%, and 20 points more than vLLM's tests), 'release'."""
    data = results(ENGINE_MUTANTS)
    summary = data["summary"]
    if key == "judged":
        pending = summary.get("pending", 0)
        waiting = f"; {pending} not yet judged by both" if pending else ""
        return (f"the {summary['mutants']} mutant{'s' if summary['mutants'] != 1 else ''} judged by both judges of a "
                f"uniform sample of {data['drawn']} (drawn from the "
                f"{data['mutants_listed'] - data['equivalent_in_annotations']['count']} that cosmic-ray makes outside "
                f"type annotations; {summary['equivalent']} argued equivalent and left out{waiting})")
    if key in ("verispec", "engine_tests"):
        return _share(summary[key])
    if key == "verispec_alone":  # every mutant verispec judged, the ones vLLM's tests have not yet judged too
        argued = {entry["key"] for entry in data["equivalent"]}
        mine = [row for row in data["rows"] if row["verispec"]["outcome"] != "pending" and row["key"] not in argued]
        killed = sum(row["verispec"]["outcome"] == "killed" for row in mine)
        low, high = _wilson(killed, len(mine))
        return (f"{killed} of the {len(mine)} it judged ({killed / len(mine):.0%}, 95% interval {low:.0%} to "
                f"{high:.0%})") if mine else "none judged"
    if key == "split":
        return (f"{summary['verispec_only']} by verispec alone, {summary['engine_tests_only']} by vLLM's tests alone, "
                f"{summary['neither']} by neither")
    if key == "seconds":
        return (f"{summary['verispec']['seconds_total']:,.0f} s for verispec and "
                f"{summary['engine_tests']['seconds_total']:,.0f} s for vLLM's tests")
    if key == "goal":
        ours, theirs = summary["verispec"]["share"] or 0.0, summary["engine_tests"]["share"] or 0.0
        met = ours >= 0.95 and ours - theirs >= 0.20
        return (f"{'met' if met else 'not met'} on this sample ({(ours - theirs) * 100:+.0f} points; the goal is at "
                "least 95% and 20 points more than vLLM's tests)")
    if key == "release":
        return f"vLLM {data['settings']['release']}'s `{data['settings']['file']}`"
    raise KeyError(key)


def engine_mutants_table(results) -> str:
    """Each judged mutant: where, what changed, and each judge's outcome with its seconds (or 'not reached')."""
    def cell(found: dict) -> str:
        if found["outcome"] == "pending":
            return "not yet judged"
        if found.get("not_executed"):
            return "survived (never runs the line)"
        ran = "" if found.get("parts_run") is None else f", {found['parts_run']} of {found['parts']} parts"
        by = f": {found['by']}" if found["outcome"] == "killed" and found.get("by") else ""
        return f"{found['outcome']}{by[:90]} ({found['seconds']:,.0f} s{ran})"

    return _table(("mutant", "line", "change", "verispec", "vLLM's tests"), [
        (f"`{row['key'].split('/')[-1]}`", row["line"],
         f"`{row['change']['before'].strip()[:60]}` -> `{row['change']['after'].strip()[:60]}`".replace("|", "\\|"),
         cell(row["verispec"]), cell(row["engine_tests"])) for row in results(ENGINE_MUTANTS)["rows"]])


def _bound(function, key: str):
    """A value renderer of the result files: ``function(results, key)`` with ``key`` fixed."""
    return lambda results: function(results, key)


VALUES = {
    **{f"sun.{key}": _bound(_sun, key) for key in ("optimum_tau", "coupling_tau", "naive_tau")},
    **{f"gbv.{key}": _bound(_gbv, key) for key in ("optimum", "selected_path_optimum", "off_path_depth_1_optimum",
                                                     "off_path_any_depth_optimum", "gbv")},
    **{f"multipath.{key}": _bound(_multipath, key)
       for key in ("psbv_best", "psbv_example_gap", "next_example_gap", "share_closed")},
    **{f"typical.{key}": _bound(_typical, key) for key in ("tv", "ratio")},
    **{f"lossy.{key}": _bound(_lossy, key) for key in ("gain", "tv", "vocab", "slow")},
    **{f"delayed.{key}": _bound(_delayed, key)
       for key in ("problems", "psbv_best", "psbv_at_optimum", "psbv_gap", "next", "share_closed")},
    **{f"ddte.{setting}/{rival}/{policy}": _bound(_ddte, f"{setting}/{rival}/{policy}")
       for setting in ("T=0.7", "T=1") for rival, policy in (("traversal", "static"), ("traversal", "selector"),
                                                              ("traversal-iid", "selector"))},
    **{f"ddte.{setting}/paper": _bound(_ddte, f"{setting}/paper") for setting in ("T=0.7", "T=1")},
    **{f"verdict.{setting}/{what}": _bound(_verdict, f"{setting}/{what}") for setting in ("T=0.7", "T=1")
       for what in ("best", "edge", "seeds", "regime", "priced/best", "priced/edge", "priced/versus",
                    "priced/versus/point",
                    "priced/regime", "versus/specinfer/point", "traversal/static",
                    "traversal/static/paper", "traversal/selector", "traversal-iid/static", "traversal-iid/selector",
                    "versus/specinfer", "versus/traversal", "versus/traversal-iid")},
    **{f"label_cost.{key}": _bound(_label_cost, key) for key in ("outcome", "projected")},
    **{f"label_cost_blend.{key}": _bound(_blend_label_cost, key) for key in ("outcome", "projected")},
    **{f"label_cost_wide.{key}": _bound(_wide_label_cost, key)
       for key in ("t07/outcome", "t07/projected", "t1/outcome", "t1/projected", "total", "grid")},
    **{f"grid_reach.{key}": _bound(_grid_reach, key)
       for key in ("probe", "roots", "total", "T=0.7/cost", "T=1/cost",
                   *(f"{setting}/{regime}{widened}" for setting in ("T=0.7", "T=1") for regime in ("gpu-large", "cpu",
                                                                                                   "h100")
                     for widened in ("", "/widened")))},
    "psbv_blend.ratio": lambda results: _psbv_blend(results(PSBV_REALISATION)),
    **{f"assisted.{key}": _bound(_assisted, key) for key in ("selector", "static", "plain", "selector/hf-plain",
                                                             "selector/hf-best", "hf-best", "prompts", "best",
                                                             "goal")},
    **{f"engine_bugs.{key}": _bound(_engine_bugs, key) for key in ("caught", "repositories")},
    **{f"releases.{key}": _bound(_engine_releases, key) for key in ("releases", "v2-lossy", "v2-lossless", "v2-tv",
                                                                    "v1", "v1-read", *(f"{verdict}/{check}"
                                                                            for verdict in ("lossy", "lossless")
                                                                            for check in ("v2-block", "v2-adaptive")))},
    **{f"mutants.{key}": _bound(_engine_mutants, key) for key in ("judged", "verispec", "engine_tests", "split",
                                                                  "seconds", "goal", "release", "verispec_alone")},
    **{f"releases_tf.{key}": _bound(_transformers_releases, key)
       for key in ("releases", "held", "twice", "once", "ensemble", "accept/once", "accept/twice", "probe",
                   "example")},
    **{f"lv.{key}": _bound(_layer, key) for key in ("problems", *(f"gap/{rule}" for rule in LAYER_RULES[:7]))},
    **{f"ddtree.{key}": _bound(_ddtree, key)
       for key in ("witness/tv", "witness/where", "bias/tv", "bound/lp", "light/ratio", "light/capacity",
                   "product/bv_product_chain", "product/bv_autoregressive_chain")},
    **{f"optimality.{key}": _bound(_optimality, key)
       for key in ("witness/K=1", "witness/K=2", "witness/K=3", "witness/K=4", "above", "below", "greedy/gap",
                   "greedy/mean")},
}


def _made_by(name: str, verb: str = "Made"):
    """A table renderer of one result file's record line: '<verb> by <command> at commit ...'."""
    return lambda results: f"{verb} by {record_line(results, name)}."


TABLES = {
    "verifiers": lambda results: verifier_table("compact"),
    "ddte": ddte_table,
    "ddte-regimes": ddte_regimes_table,
    "ddte-record": _made_by(DDTE_STUDY),
    "verdict": verdict_table,
    "verdict-record": _made_by(VERDICT),
    "multipath": multipath_table,
    "multipath-record": _made_by('multipath_gap.json'),
    "delayed": delayed_table,
    "real-gaps": real_gaps_table,
    "assisted": assisted_table,
    "assisted-record": _made_by(ASSISTED),
    "assisted-tuning": assisted_tuning_table,
    "same-algorithm": same_algorithm_table,
    "same-algorithm-more": lambda results: same_algorithm_table(results, SAME_ALGORITHM_MORE),
    "latency-check": latency_check_table,
    "label-cost-record": _made_by(PSBV_T1_COST, "Measured"),
    "label-cost-blend-record": lambda results: f"Measured by {record_line(results, PSBV_BLEND_T1_COST)}; "
                                               f"the ratios by {record_line(results, PSBV_REALISATION)}.",
    "real-gaps-record": _made_by('real_context_gaps.json'),
    "grid-reach": grid_reach_table,
    "grid-reach-record": _grid_reach_record,
    "label-cost-wide-record": lambda results: "Measured by " + "; and by ".join(
        record_line(results, name) for name in WIDE_COSTS.values()) + ".",
    "gbv": gbv_table,
    "sun": sun_table,
    "typical": typical_table,
    "lossy": lossy_table,
    "verdict-priced": verdict_priced_table,
    "verdict-edge": verdict_edge_table,
    "lossy-record": _made_by(LOSSY),
    "lossy-qwen": lambda results: lossy_table(results, LOSSY_QWEN),
    "lossy-qwen-record": _made_by(LOSSY_QWEN),
    "exact-record": _made_by('exact-findings.json'),
    "engine-bugs": engine_bugs_table,
    "engine-bugs-record": _made_by(ENGINE_BUGS),
    "engine-releases": engine_releases_table,
    "engine-releases-reasons": engine_releases_reasons_table,
    "engine-releases-record": _made_by(ENGINE_RELEASES),
    "engine-mutants": engine_mutants_table,
    "engine-mutants-record": _made_by(ENGINE_MUTANTS),
    "engine-releases-transformers": lambda results: engine_releases_table(results, ENGINE_RELEASES_TRANSFORMERS),
    "engine-releases-transformers-reasons": lambda results: engine_releases_reasons_table(
        results, ENGINE_RELEASES_TRANSFORMERS),
    "engine-releases-transformers-record": _made_by(ENGINE_RELEASES_TRANSFORMERS),
    "real-code": real_code_table,
    "real-code-record": _made_by(REAL_CODE),
    "lv": layer_table,
    "lv-record": _made_by(LAYER),
    "ddtree": ddtree_table,
    "ddtree-light": ddtree_light_table,
    "ddtree-record": _made_by(DDTREE),
    "spectr-gbv": spectr_gbv_table,
    "spectr-gbv-witnesses": spectr_gbv_witnesses_table,
    "univer": univer_table,
    "optimality-record": _made_by(OPTIMALITY),
}


def claims(results) -> list[tuple[str, str]]:
    """(page name, its claim rendered) for every findings page, in ``FINDINGS`` order."""
    out = []
    for name in FINDINGS:
        path = FINDINGS_DIR / f"{name}.md"
        match = CLAIM.search(read_page(path)) if path.exists() else None
        if match is None:
            raise GeneratedDocsError(f"{path.relative_to(ROOT)} states no claim between <!--claim--> and "
                                     "<!--/claim-->")
        text = render(match["body"], VALUES, {}, results, where=str(path.relative_to(ROOT)))
        out.append((name, " ".join(text.split())))
    return out


def findings_list(results) -> str:
    """The README's findings: each page's claim (one sentence) and its link."""
    return "\n".join(f"- {claim} ([docs/findings/{name}.md](docs/findings/{name}.md))"
                     for name, claim in claims(results))


TABLES["findings"] = findings_list


def scripts_index(results) -> str:
    """Every script under experiments/ and benchmarks/ with the first paragraph of its docstring (read with ast,
    nothing imported): a script added without a docstring, or left out, makes this block stale."""
    import ast

    lines = []
    for folder in ("experiments", "benchmarks"):
        for path in sorted((ROOT / folder).glob("*.py")):
            try:
                docstring = ast.get_docstring(ast.parse(read_page(path))) or ""
            except (SyntaxError, ValueError) as error:  # ValueError: a null byte in the source
                raise GeneratedDocsError(f"{folder}/{path.name} cannot be parsed ({error}); fix the script") from None
            first = " ".join(docstring.split("\n\n")[0].split())
            if not first:
                raise GeneratedDocsError(f"{folder}/{path.name} has no docstring: say in its first paragraph what "
                                         "it measures or computes")
            lines.append(f"- `{folder}/{path.name}`: {first}")
    return "\n".join(lines)


TABLES["scripts"] = scripts_index


def _bench_row(results, name: str, **match) -> dict:
    rows = [row for row in results(f"bench/{name}.json")["rows"] if all(row.get(k) == v for k, v in match.items())]
    if len(rows) != 1:
        raise GeneratedDocsError(f"docs/results/bench/{name}.json: {len(rows)} rows match {match}; rerun "
                                 f"benchmarks/{name}.py with the options its record names")
    return rows[0]


def _seconds(value: float) -> str:
    return f"{value * 1e3:.1f} ms" if value < 1 else f"{value:.2f} s"


#: The README's rows: (what, benchmark, the row's keys, how a time is written, the baseline in words).
HOW_FAST = (
    ("traversal-iid, `delayed:4,3,3`, V = 4", "bench_rule_dp",
     {"verifier": "traversal-iid", "tree": "delayed:4,3,3"}, _seconds, "enumeration"),
    ("gbv, `iid:4,3`, V = 4", "bench_rule_dp", {"verifier": "gbv", "tree": "iid:4,3"}, _seconds,
     "enumeration"),
    ("`bound`, `chain:8`, V = 3", "bench_chain_lp", {"tree": "chain:8"}, _seconds, "the full LP"),
    ("globalres, a node at V = 151,936, K = 4", "bench_globalres",
     {"law": "dense", "V": 151936, "top_k": None, "K": 4}, lambda ms: f"{ms:.0f} ms", "commit"),
    ("gbv's law, a node at V = 151,936", "bench_gbv_large_vocab", {"tree": "iid:1,1", "rows": 1},
     lambda ms: f"{ms:.1f} ms", "its former law"),
    ("choosing a block's tree in decoding, T = 1, V = 151,936", "bench_selector_decoding",
     {"hidden": "no hidden states", "sampling": "T=1", "forward": "nproute"}, lambda ms: f"{ms:.2f} ms",
     "the numpy route"),
)


def how_fast(results) -> str:
    """The README's "How fast": each row read from a benchmark's result file under docs/results/bench/, "now"
    against the baseline measured in the same run; the machine stated once above the table."""
    lines = ["| what | now | before | speed-up | baseline, same run |", "|---|---|---|---|---|"]
    machines, loads = set(), []
    for what, name, match, written, baseline in HOW_FAST:
        result, row = results(f"bench/{name}.json"), _bench_row(results, name, **match)
        machine = result["record"]["machine"]
        machines.add(f"{machine['cores']}-core {machine.get('cpu', 'CPU')}")
        loads.append(machine["load"])
        if baseline == "commit":
            baseline = f"commit {result['before_commit'][:7]}"
        if row["before"] is None:
            before, ratio = f"not run (10^{row['log10_trees']:.0f} draft trees)", "-"
        else:
            before, ratio = written(row["before"]), f"x{row['ratio']:.1f}" if row["ratio"] < 100 else \
                f"x{row['ratio']:,.0f}"
        lines.append(f"| {what} | {written(row['now'])} | {before} | {ratio} | {baseline} (`{name}`) |")
    header = (f"One thread, float64, {' or '.join(sorted(machines))} (load {min(loads):.1f}-{max(loads):.1f}); "
              "each row against its baseline in the same run (commands: `docs/results/bench/`).")
    return "\n".join([header, "", *lines])


TABLES["how-fast"] = how_fast


#: Most bytes of a page (the README, a guide, a findings page) or a script this generator reads.
MAX_PAGE_BYTES = 1 << 24


def read_page(path: Path) -> str:
    """A page or script this generator reads: a regular file of at most ``MAX_PAGE_BYTES`` (a FIFO or a device in
    its place is refused on one line instead of hanging the generator or filling memory)."""
    from verispec.files.io import read_user_file

    return read_user_file(path, limit=MAX_PAGE_BYTES, what="the page", error=GeneratedDocsError, regular_only=True)


def generated(path: Path, results: ResultFiles) -> str:
    text = read_page(path)
    if "verifier-table:start" in text:
        text = with_tables(text)
    return render(text, VALUES, TABLES, results, where=str(path.relative_to(ROOT)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 naming each stale block; write nothing")
    args = parser.parse_args(argv)
    results, stale = ResultFiles(RESULTS), []
    try:
        for path in pages():
            if not path.exists():
                raise GeneratedDocsError(f"{path.relative_to(ROOT)} is missing")
            text, fresh = read_page(path), generated(path, results)
            if fresh != text:
                keys = stale_markers(text, fresh) or ["the verifier table"]
                stale.append(f"{path.relative_to(ROOT)}: {', '.join(keys)}")
                if not args.check:
                    # a new file renamed over the page, never the page truncated and rewritten in place: on a full
                    # disk that left README.md empty (issue 64); now the page stays whole and the run says why
                    atomic_write_text(path, fresh)
    except VerispecError as error:  # GeneratedDocsError, and OutputError from a write (a full disk, read-only)
        print(f"docs/generate.py: {' '.join(str(error).split())}", file=sys.stderr)
        return 2
    for line in stale:
        print(f"{line}: {'stale; run python docs/generate.py' if args.check else 'rewritten'}")
    return 1 if stale and args.check else 0


__all__ = ["ALLOWED", "FINDINGS", "TABLES", "VALUES", "claims", "generated", "main", "pages", "section",
           "typed_numbers"]

if __name__ == "__main__":
    sys.exit(main())
