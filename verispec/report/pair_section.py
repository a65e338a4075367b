"""Section 9 of the report: the delay selector on a model pair's stored datasets (``verispec.selector.study``
computes the numbers, with no model loaded). Here: the study as markdown (tables titled with each regime's full
name), its figure (the selector's throughput over the best static action, one panel per regime), the writer of the
study's three files (``verispec selector study`` calls it too), and the report's section (``check``, ``run``).
"""

from __future__ import annotations

import textwrap
import time
from pathlib import Path

from verispec.errors import VerispecError
from verispec.files.io import atomic_write_json, atomic_write_text
from verispec.report.common import plural, pyplot, save_figure, with_interval
from verispec.selector.study import (
    DEFAULT_EPOCHS,
    FIGURE_FILE,
    HIDDEN_KIND,
    JSON_FILE,
    KINDS,
    LEAD,
    MARKDOWN_FILE,
    check_study_outputs,
    load_inputs,
    run_study,
)

#: The report's section (after study 8), and its selectors' epochs in the quick report.
SECTION = "9. Delay selector on a model pair"
QUICK_EPOCHS = 100
#: The report's sweep tables and figures: none of the first; its figure is written only with datasets, and
#: ``check`` checks it then.
TABLES = ()
PAIR_TABLES = ()
FIGURES = ()

#: The policies of a rule's table, in order, with their names in the markdown.
POLICY_NAMES = {"static": "best static", "mlp": "selector (mlp)", HIDDEN_KIND: "selector (mlp, hidden states)",
                "linear": "linear baseline",
                "lookup": "lookup baseline", "oracle_crossfit": "oracle, cross-fitted",
                "oracle": "oracle, in-sample"}


def _percent(entry: dict | None) -> str:
    if entry is None:
        return "n/a (no per-tree labels)"
    return f"{entry['estimate']:+.1%} [{entry['ci'][0]:+.1%}, {entry['ci'][1]:+.1%}]"


def _chosen(policy: str, row: dict) -> str:
    if policy == "static":
        return row["action"] + (" (no draft)" if row["no_draft"] else "")
    if policy in KINDS or policy == HIDDEN_KIND:
        return f"{plural(row['distinct_actions'], 'action')}; chain:0 at {row['no_draft_fraction']:.0%} of roots"
    return "chosen on half of each root's trees, scored on the rest" if policy == "oracle_crossfit" else \
        "each root's best label"


VERDICTS = {"better": "yes", "worse": "no: worse", "not shown": "no (interval holds 1)"}


def _policy_rows(table: dict) -> list[str]:
    lines = ["| rule | policy | tokens per target call | throughput | x best static | chosen |",
             "|---|---|---|---|---|---|"]
    for rule, entry in table["rules"].items():
        for policy, label in POLICY_NAMES.items():
            row = entry["policies"].get(policy)
            if row is None:
                continue
            label += " (biased upward)" if row.get("biased_upward") else ""
            calls = with_interval(row["tokens_per_target_call"], row["tokens_per_target_call_ci"])
            throughput = with_interval(row["throughput"], row["throughput_ci"], 4)
            lines.append(f"| {rule} | {label} | {calls} | {throughput} | "
                         f"{with_interval(row['ratio_to_static'], row['ratio_to_static_ci'])} | "
                         f"{_chosen(policy, row)} |")
    return lines


def _versus(entry: dict) -> str:
    """A paired ratio's cells: the ratio with its interval, and whether it lies above 1."""
    return f"{with_interval(entry['ratio'], entry['ratio_ci'])} | {VERDICTS[entry['verdict']]}"


def _baseline_rows(table: dict) -> list[str]:
    lines = ["| rule | selector's gain over best static | regret to the cross-fitted oracle | mlp / linear | "
             "beats linear | mlp / lookup | beats lookup |", "|---|---|---|---|---|---|---|"]
    for rule, entry in table["rules"].items():
        versus = entry["versus_baselines"]
        lines.append(f"| {rule} | {_percent(entry['gain_over_static'])} | "
                     f"{_percent(entry['regret_to_crossfit_oracle'])} | {_versus(versus['linear'])} | "
                     f"{_versus(versus['lookup'])} |")
    return lines


def _hidden_rows(table: dict) -> list[str]:
    """The network reading the hidden states too: its gain, and its ratios to the scalar network and the lookup."""
    lines = ["| rule | its gain over best static | with hidden states / scalar mlp | earns its place | "
             "with hidden states / lookup | beats lookup |", "|---|---|---|---|---|---|"]
    for rule, entry in table["rules"].items():
        hidden = entry["hidden_states"]
        lines.append(f"| {rule} | {_percent(hidden['gain_over_static'])} | {_versus(hidden['versus_mlp'])} | "
                     f"{_versus(hidden['versus_lookup'])} |")
    return lines


def _selector_words(policy: str) -> str:
    return "selector" if policy == "selector" else "hidden-state selector"


def _ddte_rows(table: dict) -> list[str]:
    lines = ["| comparison | throughput ratio | half-width | held-out prompts for a half-width of 2% |",
             "|---|---|---|---|"]
    for row in table["ddte"]:
        lead = _selector_words(row.get("lead_policy", "selector"))
        rival = f"{row['rival']} at its best static tree ({row['rival_action']})" if row["rival_action"] else \
            f"{row['rival']} with its own {_selector_words(row['rival_policy'])}"
        needed = "met" if row["prompts_for_target"] is None else \
            f"{row['prompts_for_target']:,} (now {row['held_out_prompts']})"
        lines.append(f"| {row['lead']} with its {lead} / {rival} | {with_interval(row['ratio'], row['ratio_ci'])} | "
                     f"{row['half_width']:.1%} | {needed} |")
    return lines


def _no_draft_text(table: dict) -> str:
    """chain:0 (no draft) under the table's regime: the rules whose best static action it is, and how often each
    rule's selector picks it."""
    static = [rule for rule, entry in table["rules"].items() if entry["policies"]["static"]["no_draft"]]
    picks = ", ".join(f"{rule} {entry['policies']['mlp']['no_draft_fraction']:.0%} "
                      f"({entry['policies']['mlp']['no_draft_roots']} of {table['held_out_roots']})"
                      for rule, entry in table["rules"].items())
    return (f"No draft (chain:0) here: the best static action is chain:0 for "
            f"{', '.join(static) if static else 'no rule'}; the selector chooses chain:0 at {picks} held-out roots.")


def table_markdown(table: dict, level: int) -> list[str]:
    """The (setting, regime) section: its policies, its selector against baselines and oracle, its DDTE
    comparisons, each table titled with the regime's full name."""
    title = table["title"]
    folds = table.get("folds", 1)
    where = "" if folds == 1 else f", each in one of {folds} folds"
    lines = ["", f"{'#' * level} {table['setting']}: {title}", "",
             f"{plural(table['held_out_prompts'], 'held-out prompt')} ({plural(table['held_out_roots'], 'root')}"
             f"{where}); throughput in {table['throughput_unit']}; 95% intervals from a bootstrap over prompts, paired "
             "where two policies are compared.", "", f"**Policies: {title}; {table['setting']}.**", ""]
    lines += _policy_rows(table)
    lines += ["", f"**The selector (mlp) against its baselines and the oracle: {title}; {table['setting']}.** A "
              "baseline is beaten when the paired interval of the ratio lies above 1.", ""]
    lines += _baseline_rows(table)
    if all("hidden_states" in entry for entry in table["rules"].values()) and table["rules"]:
        lines += ["", f"**The selector reading the hidden states too (the paper's full network) against the scalar "
                  f"one: {title}; {table['setting']}.** It earns its place when the paired interval of the ratio "
                  "lies above 1.", ""]
        lines += _hidden_rows(table)
    if table["ddte"]:
        lines += ["", f"**DDTE comparisons: {title}; {table['setting']}.** Half-width (high - low) / 2 of the ratio's "
                  "interval; where it exceeds 2%, the held-out prompts n (hw / 0.02)^2 that would bring it to 2%.", ""]
        lines += _ddte_rows(table)
    if table["ddte_rules_missing"]:
        lines += ["", f"The DDTE comparisons leave out {', '.join(table['ddte_rules_missing'])}: not labelled at this "
                  "setting."]
    if table["regime"] == "h100":
        lines += ["", _no_draft_text(table)]
    return lines


def _fold_text(result: dict) -> str:
    folds = result.get("folds", 1)
    return "" if folds == 1 else f" (one a fold: the prompts of the other {folds - 1} folds)"


def _hidden_text(result: dict) -> str:
    names = result.get("hidden") or []
    if not names:
        return " only"
    width = result.get("projection")
    if width is None:
        from verispec.selector.network import PROJECTION  # torch: a study with hidden states trained with it

        return (f" (and the same network reading the hidden states {', '.join(names)} too, each projected to "
                f"{PROJECTION} with LayerNorm: the paper's full network)")
    return (f" (and the same network reading the hidden states {', '.join(names)} too, each projected to {width} "
            "with LayerNorm: the paper's full network at another projection width)")


def study_markdown(result: dict, heading: str, level: int = 1, figure: str | None = FIGURE_FILE) -> str:
    """The study in markdown under ``heading`` (a heading of ``level``): the settings and split, then one section
    of tables per (setting, regime), then the figure."""
    split = result["split"]
    lines = [f"{'#' * level} {heading}", "",
             f"Pair {result['pair']}, no model loaded: every number comes from the stored datasets' labels. "
             f"Split by prompt, one split for every setting, regime and rule: {split['rule']}; "
             f"{split['held_out_prompts']} of {split['prompts']} prompts held out. For every rule, regime and setting: "
             f"the best static action on the training prompts{_fold_text(result)}, the selector (the DDTE paper's "
             f"network, its Eq. 12 against plain decoding, {result['epochs']} epochs, seed {result['seed']}) and its "
             "linear and lookup "
             "baselines over that rule's actions, reading the scalar features"
             f"{_hidden_text(result)}, the cross-fitted oracle (each "
             "root's action chosen on half of its sampled trees, scored on the others) and the in-sample oracle "
             "(biased upward on conditional-exact labels).", "",
             "| setting | dataset | rules | actions | labels | prompts (held out) | roots (held out) |",
             "|---|---|---|---|---|---|---|"]
    for name, setting in result["settings"].items():
        lines.append(f"| {name} | `{setting['dataset']}` | {', '.join(setting['rules'])} | {setting['actions']} "
                     f"({setting['grid']}) | {'/'.join(setting['label_methods'])} | {setting['prompts']} "
                     f"({setting['held_out_prompts']}) | {setting['roots']} ({setting['held_out_roots']}) |")
    lines += ["", "Regimes: " + "; ".join(entry["title"] for entry in result["regimes"].values()) + "."]
    # the run that made it (verispec.files.provenance.run_record); the inputs' SHA-256 in the JSON
    if "record" in result:
        from verispec.files.provenance import describe_record

        lines += ["", f"Made by {describe_record(result['record'])}."]
    for table in result["tables"]:
        lines += table_markdown(table, level + 1)
    if figure is not None:
        lines += ["", f"![selector throughput over the best static action, by rule, one panel per regime]({figure})"]
    return "\n".join(lines) + "\n"


def study_figure(result: dict, path: Path) -> str:
    """The selector's throughput ratio to the best static action per rule with its 95% interval (filled), beside
    the cross-fitted oracle's (open), a colour per setting, one panel per regime; the file's name."""
    regimes, settings = list(result["regimes"]), list(result["settings"])
    figure, axes = pyplot().subplots(1, len(regimes), figsize=(5.5 * len(regimes), 4.0), squeeze=False)
    step = 0.7 / (2 * len(settings))
    for axis, regime in zip(axes[0], regimes):
        tables = {table["setting"]: table for table in result["tables"] if table["regime"] == regime}
        rules = list(dict.fromkeys(rule for table in tables.values() for rule in table["rules"]))
        for offset, setting in enumerate(settings):
            colour = f"C{offset}"
            for shift, policy, face in ((0, "mlp", colour), (1, "oracle_crossfit", "white")):
                points = [(index, tables[setting]["rules"][rule]["policies"][policy])
                          for index, rule in enumerate(rules)
                          if policy in tables[setting]["rules"].get(rule, {}).get("policies", {})]
                if not points:
                    continue
                values = [row["ratio_to_static"] for _, row in points]
                errors = [[max(0.0, v - row["ratio_to_static_ci"][0]) for v, (_, row) in zip(values, points)],
                          [max(0.0, row["ratio_to_static_ci"][1] - v) for v, (_, row) in zip(values, points)]]
                place = (2 * offset + shift) * step - 0.35 + step / 2
                axis.errorbar([index + place for index, _ in points], values, yerr=errors, fmt="o", color=colour,
                              markerfacecolor=face, capsize=3, linestyle="none",
                              label=f"{setting}: {'selector' if policy == 'mlp' else 'oracle, cross-fitted'}")
        axis.axhline(1.0, color="black", linewidth=0.8)
        axis.set_xticks(range(len(rules)), rules, rotation=30, ha="right", fontsize=7)
        axis.set_ylabel("throughput / best static")
        axis.set_title(textwrap.fill(result["regimes"][regime]["title"], 50), fontsize=8)
        axis.legend(fontsize=6)
    figure.suptitle(f"Delay selector on {result['pair']}: held-out prompts, 95% intervals")
    return save_figure(figure, Path(path))


def write_study(result: dict, out: str | Path, heading: str | None = None, level: int = 1) -> str:
    """Write the study's JSON, figure and markdown (its heading ``heading`` of ``level``) into ``out``, each
    atomically; the markdown's text."""
    from verispec.files.provenance import MARKER_KEY, markdown_marker, written_by
    from verispec.selector.study import STUDY_KIND

    out = Path(out)
    check_study_outputs(out)
    # each file carries verispec's marker, so a rerun can show it wrote what it replaces (issue 64)
    atomic_write_json(out / JSON_FILE, {**result, MARKER_KEY: written_by(STUDY_KIND, "selector study")}, within=out)
    study_figure(result, out / FIGURE_FILE)
    text = study_markdown(result, heading or f"Delay selector on {result['pair']}: stored datasets", level)
    atomic_write_text(out / MARKDOWN_FILE, f"{markdown_marker('selector study')}\n{text}", within=out)
    return text


def study_findings(result: dict) -> list[str]:
    """One finding per setting, in the gpu-large regime: the lead rule's selector over its best static action, and
    against Traversal with its own selector."""
    findings = []
    for table in result["tables"]:
        lead = table["rules"].get(LEAD)
        if table["regime"] != "gpu-large" or lead is None:
            continue
        gain = lead["gain_over_static"]
        text = (f"Delay selector on {result['pair']} ({table['setting']}; {table['title']}): {LEAD}'s selector "
                f"{gain['estimate']:+.1%} [{gain['ci'][0]:+.1%}, {gain['ci'][1]:+.1%}] over its best static action "
                f"on {table['held_out_prompts']} held-out prompts")
        for row in table["ddte"]:
            if row["rival_policy"] == "selector" and row.get("lead_policy", "selector") == "selector":
                text += (f"; x{with_interval(row['ratio'], row['ratio_ci'])} against {row['rival']} with its own "
                         "selector")
        findings.append(text + ".")
    return findings


def check(report):
    """Section 9's refusals before any study runs: ``--latency`` without ``--selector-dataset``, the study's
    output files, and the datasets and latency model (``load_inputs``, against ``--pair`` when given); the loaded
    inputs, or None without datasets."""
    if not report.selector_datasets:
        if report.selector_latency is not None:
            raise VerispecError("--latency FILE (the CPU latency model of the pair selector study) goes with "
                                "--selector-dataset FILE")
        return None
    check_study_outputs(report.out)
    return load_inputs(report.selector_datasets, report.selector_latency, report.pair)


def run(report) -> None:
    """Section 9 of ``report``: the study of ``report.selector_inputs`` (loaded by ``check``), written into the
    report's folder (``OUTPUTS``), its text the section, its lead findings the report's."""
    lines = [f"## {SECTION}", ""]
    if report.selector_inputs is None:
        lines.append("Not run: no stored datasets given (`--selector-dataset FILE`, repeatable, each from `verispec "
                     "selector dataset --pair NAME`; `--latency FILE` adds the CPU regime). `verispec selector study` "
                     "runs it alone.")
        report.sections.append("\n".join(lines))
        return
    try:
        import torch  # noqa: F401
    except ImportError:
        lines.append("Not run: the selector is a torch network (pip install 'torch==2.13.0' -e '.[torch]').")
        report.sections.append("\n".join(lines))
        return
    start = time.perf_counter()
    datasets, regimes = report.selector_inputs
    result = run_study(datasets, regimes, seed=0, epochs=QUICK_EPOCHS if report.quick else DEFAULT_EPOCHS,
                       pair=report.pair, folds=getattr(report, "selector_folds", 1))
    report.sections.append(write_study(result, report.out, heading=SECTION, level=2).rstrip())
    report.findings.extend(study_findings(result))
    report.seconds["pair selector (train, evaluate)"] = time.perf_counter() - start


__all__ = ["FIGURES", "PAIR_TABLES", "POLICY_NAMES", "QUICK_EPOCHS", "SECTION", "TABLES", "VERDICTS", "check", "run",
           "study_figure", "study_findings", "study_markdown", "table_markdown", "write_study"]
