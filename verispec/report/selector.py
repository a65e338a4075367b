"""Study 7 of the report: the delay selector on a synthetic family with exact labels.

The DDTE paper's selector (Thomas et al. 2026, arXiv 2602.16994, Sec. 6): a dataset of roots
(``verispec.selector.dataset``, resumable in ``data/``), selectors trained per verifier on 75% of the roots with
the paper's objective (its Eq. 12), and static / selector / oracle on the rest (``verispec.selector.evaluate``),
in two latency regimes. Without torch the section says how to run it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from verispec.latency import LatencyModel, throughput_unit
from verispec.report.common import fixed, pyplot, save_figure


@dataclass(frozen=True)
class SelectorScale:
    """Section 7 (the delay selector): synthetic roots, the action grid, training epochs."""

    seeds: int
    ks: str
    l1s: str
    l2s: str
    epochs: int


QUICK_SELECTOR = SelectorScale(seeds=40, ks="1-2", l1s="0-1", l2s="0-2", epochs=150)
FULL_SELECTOR = SelectorScale(seeds=160, ks="1-3", l1s="0-2", l2s="0-3", epochs=300)
#: The selector's synthetic family: context-free pairs whose draft diverges from the target by these amounts
#: (cycled over the seeds), so that the best tree depends on how far q is from p, which the features see.
SELECTOR_FAMILY = "context-free"
SELECTOR_DIVERGENCES = (0.05, 0.3, 0.6, 1.0)
SELECTOR_VERIFIERS = ("specinfer", "traversal-iid")
#: The regime where speculation pays: a target forward costs 20 draft steps, whatever the tree's size.
SELECTOR_LATENCY = LatencyModel.from_ratio(20.0)
#: The regimes the selectors are trained and compared in: tree size free, and dear trees.
SELECTOR_LATENCIES = (SELECTOR_LATENCY, LatencyModel.from_ratio(5.0, per_node=0.1))
SELECTOR_TEST_FRACTION = 0.25
SELECTOR_DATASET = "selector_dataset.npz"

#: The study's sweep tables (``data/NAME.csv``), those it adds with a pair, and its figures (its dataset is
#: ``data/SELECTOR_DATASET``).
TABLES = ()
PAIR_TABLES = ()
FIGURES = ("selector.png",)


def run(report) -> None:
    """Section 7 of ``report``: the dataset, then in each latency regime the selectors' table and findings, and
    the figure of both regimes."""
    lines = ["## 7. Delay selector", ""]
    try:
        import torch  # noqa: F401
    except ImportError:
        lines.append("Not run: the selector is a torch network (pip install 'torch==2.13.0' -e '.[torch]').")
        report.sections.append("\n".join(lines))
        return
    from verispec.selector.actions import ActionGrid
    from verispec.selector.dataset import build_dataset
    from verispec.selector.roots import synthetic_roots

    start = time.perf_counter()
    scale = QUICK_SELECTOR if report.quick else FULL_SELECTOR
    grid = ActionGrid.parse(ks=scale.ks, l1s=scale.l1s, l2s=scale.l2s, verifiers=",".join(SELECTOR_VERIFIERS))
    roots = synthetic_roots(SELECTOR_FAMILY, report.scale.vocab, range(scale.seeds),
                            divergence=list(SELECTOR_DIVERGENCES))
    dataset = build_dataset(roots, grid, method="exact", out=report.out / "data" / SELECTOR_DATASET,
                            latency=SELECTOR_LATENCY, backend=report.run_options["backend"],
                            jobs=report.run_options["jobs"], address=report.run_options["address"],
                            progress=report.run_options["progress"], overwrite=report.run_options["overwrite"])
    train, test = dataset.split(SELECTOR_TEST_FRACTION, 0)
    lines += [f"{len(dataset)} roots of the {SELECTOR_FAMILY} family (V = {report.scale.vocab}, draft divergence "
              f"{', '.join(f'{d:g}' for d in SELECTOR_DIVERGENCES)} cycled over the seeds), each labelled with "
              f"the exact E[tau+1] of every action: delayed trees K in {scale.ks}, L1 in {scale.l1s}, L2 in "
              f"{scale.l2s} with {' and '.join(SELECTOR_VERIFIERS)} ({len(grid)} actions, "
              f"`data/{SELECTOR_DATASET}`). In each latency regime, selectors are trained on {len(train)} roots "
              f"with the paper's objective (its Eq. 12; base: plain decoding) and evaluated on the {len(test)} "
              "held-out roots (other seeds). Static: the best single action on the training roots; oracle: each "
              "held-out root's best labelled action. 95% intervals: bootstrap over roots. The regimes: a target "
              "forward worth 20 draft steps whatever the tree's size (a GPU's memory-bound regime), and one worth "
              "5 draft steps with each tree node adding a tenth of it (dear trees), where the best static tree "
              "is small and the context decides more."]
    panels = []
    for latency in SELECTOR_LATENCIES:
        selectors = _train(grid, train, latency, scale.epochs, dataset.samplings)
        lines += _regime(report, latency, selectors, train, test, panels)
    report.seconds["selector (dataset, train, evaluate)"] = time.perf_counter() - start
    name = _figure(report, panels)
    lines += ["", f"![throughput of the selector and the oracle over the best static action]({name})"]
    report.sections.append("\n".join(lines))


def _train(grid, train, latency: LatencyModel, epochs: int, samplings: list[dict]) -> dict:
    """{'VERIFIER KIND': a selector trained on ``train`` under ``latency``} over each verifier's own actions of
    ``grid``: the paper's network for every verifier, and the linear and lookup baselines for the first."""
    from verispec.selector.actions import policy_action_times
    from verispec.selector.features import reads_draft
    from verispec.selector.train import train_selector

    selectors = {}
    for verifier in SELECTOR_VERIFIERS:
        sub = grid.restricted((verifier,))
        columns = [grid.index(action) for action in sub.actions]
        # as the selector decodes: it reads the draft to choose, so chain:0 pays t_q too (plain decoding does not)
        times = policy_action_times(sub, latency, reads_draft=reads_draft(train.feature_names))
        plain = next(index for index, action in enumerate(sub.actions) if action.depth == 0)
        for kind in ("mlp", "linear", "lookup") if verifier == SELECTOR_VERIFIERS[0] else ("mlp",):
            selectors[f"{verifier} {kind}"] = train_selector(
                train.features, train.efficiency[:, columns], times, sub, kind=kind, base=plain, seed=0,
                epochs=epochs, metadata={"latency": latency, "samplings": samplings},
                base_time=latency.target_time(1))
    return selectors


def _regime(report, latency: LatencyModel, selectors: dict, train, test, panels: list) -> list[str]:
    """The lines of one latency regime: every selector's static / selector / oracle on the held-out roots, the
    first verifier's network against the second's; its finding goes to ``report`` and its bars to ``panels``."""
    from verispec.selector.evaluate import compare_selected, evaluate

    evaluation = evaluate(test, train, selectors, per_setting=False)
    first, second = f"{SELECTOR_VERIFIERS[0]} mlp", f"{SELECTOR_VERIFIERS[1]} mlp"
    comparison = compare_selected(test, (first, selectors[first]), (second, selectors[second]), train)
    lines = ["", f"### {latency.source}", "", f"Throughput in {throughput_unit(latency)}.", "",
             "| selector | policy | tokens per target call | throughput | x static | action |",
             "|---|---|---|---|---|---|"]
    bars = []
    for name, entry in evaluation["selectors"].items():
        table = entry["settings"]["all"]
        for policy in ("static", "selector", "oracle"):
            row = table[policy]
            action = row.get("action", "")
            if policy == "selector":
                action = f"{len(row['actions'])} distinct; agrees with the oracle at " \
                    f"{row['agrees_with_oracle']:.0%} of roots"
            lines.append(f"| {name} | {policy} | {fixed(row['tokens_per_target_call'], 3)} "
                         f"[{fixed(row['tokens_per_target_call_ci'][0], 3)}, "
                         f"{fixed(row['tokens_per_target_call_ci'][1], 3)}] | {fixed(row['throughput'])} "
                         f"[{fixed(row['throughput_ci'][0])}, {fixed(row['throughput_ci'][1])}] | "
                         f"{fixed(row['ratio_to_static'], 3)} | {action} |")
        bars.append((name, table))
    lines.append("")
    for label, value in comparison.items():
        if label != "latency":
            lines.append(f"- {label}: x{fixed(value['ratio'], 3)} [{fixed(value['ratio_ci'][0], 3)}, "
                         f"{fixed(value['ratio_ci'][1], 3)}]")
    lead = evaluation["selectors"][first]["settings"]["all"]["selector"]
    versus = next(value for label, value in comparison.items() if label.endswith("selector") and
                  label != "latency")
    report.findings.append(
        f"Delay selector (synthetic, {latency.source}): the {first} selector runs "
        f"x{fixed(lead['ratio_to_static'], 3)} the throughput of {SELECTOR_VERIFIERS[0]}'s best static tree "
        f"(regret {lead['regret_to_oracle']:.1%} to the per-root oracle); against {SELECTOR_VERIFIERS[1]} "
        f"with a selector of its own it runs x{fixed(versus['ratio'], 3)} [{fixed(versus['ratio_ci'][0], 3)}, "
        f"{fixed(versus['ratio_ci'][1], 3)}].")
    panels.append((latency, bars))
    return lines


def _figure(report, panels: list) -> str:
    """Bars of the selector's and the oracle's throughput over the best static action, one panel per regime;
    the file's name."""
    figure, axes = pyplot().subplots(1, len(panels), figsize=(6 * len(panels), 3.5), squeeze=False)
    for axis, (latency, bars) in zip(axes[0], panels):
        for offset, policy in enumerate(("selector", "oracle")):
            values = [table[policy]["ratio_to_static"] for _, table in bars]
            errors = [[v - table[policy]["ratio_to_static_ci"][0] for v, (_, table) in zip(values, bars)],
                      [table[policy]["ratio_to_static_ci"][1] - v for v, (_, table) in zip(values, bars)]]
            axis.bar([i + 0.4 * offset for i in range(len(bars))], values, 0.4, yerr=errors, label=policy,
                     capsize=3)
        axis.axhline(1.0, color="black", linewidth=0.8)
        axis.set_xticks([i + 0.2 for i in range(len(bars))], [name for name, _ in bars], fontsize=8)
        axis.set_ylabel("throughput / best static")
        axis.set_title(latency.source, fontsize=9)
        axis.legend()
    figure.suptitle("Delay selector on held-out roots")
    figure.tight_layout()
    return save_figure(figure, report.out / "selector.png")
