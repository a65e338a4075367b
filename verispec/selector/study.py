"""The delay selector's study on a model pair's stored datasets (issue 33): every number of its tables, no model
loaded. ``verispec selector study`` and section 9 of ``verispec report`` both run ``run_study`` and write its result
with ``verispec.report.pair_section.write_study`` (the markdown and the figure).

Input: one pair's labelled datasets (``verispec selector dataset --pair``: one per sampling setting, or several
settings in one file) and latency regimes (``verispec.selector.regimes``: (a) gpu-large, (b) this CPU as
measured, (c) the H100). In every (setting, regime) and for every lossless rule (verifier) a dataset labels, on
the held-out prompts:

* tokens per target call and throughput of the best static action (chosen on the training prompts), the
  selector (the DDTE paper's network, Thomas et al. 2026, arXiv 2602.16994, Sec. 6, trained with its Eq. 12), its
  linear and lookup baselines (``verispec.selector.train``), the cross-fitted oracle and the in-sample oracle
  (biased upward on conditional-exact labels), each with a 95% group-bootstrap interval
  (``verispec.selector.evaluate``: groups are prompts, whose roots share a trace);
* the selector's gain over the best static action and its regret to the cross-fitted oracle, with paired
  intervals, and whether it beats its linear and lookup baselines: it does when the paired interval of its
  throughput ratio to the baseline excludes 1 from above;
* the DDTE comparisons (the paper's, and the one it skipped): selector-driven SpecInfer over Traversal and over
  Traversal-iid, each at its best static tree and with its own selector, with the interval's half-width
  hw = (high - low) / 2 in ratio units and, where hw exceeds 2%, the held-out prompts that would bring it to 2%:
  n (hw / 0.02)^2, rounded up (a half-width shrinks as 1 / sqrt(prompts));
* how often the best static action and the selector choose chain:0 (no draft), which the H100 regime may favour.

The split is by prompt (a dataset's ``group``), never by root, one for every setting, regime and rule, or
cross-fitted over ``folds`` folds of prompts (``verispec selector study --folds K``): ``verispec.selector.split``
states both rules.

A selector reads the draft's laws at the root to choose, so it is trained and scored with chain:0 at t_q + t_p(1)
(``verispec.selector.actions.policy_action_times``); the static actions and the oracles keep
``action_times``' prices (Eq. 11, each draft step at its width when the model measured the draft's widths).

The selectors read the scalar features, the latency features (draft_time, target_time) set to each regime's model,
as ``verispec selector train --latency`` does; every selector is trained with the study's seed. With ``hidden``
(``verispec selector study --hidden NAMES``, datasets built with ``selector dataset --hidden``) the paper's network
with the hidden states too (``HIDDEN_KIND``: each block projected to 128 with LayerNorm, as its Appendix E) is a
fourth policy of every rule: its rows, its ratio to the scalar network (paired; it earns its place when the
interval lies above 1), and the DDTE comparisons with it driving SpecInfer against each rival at its best static
tree and with a hidden-state selector of its own.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from verispec.errors import VerispecError, describe
from verispec.files.io import (
    FIGURE_OUTPUT,
    MARKDOWN_OUTPUT,
    OutputKind,
    check_inside,
    check_output,
    check_output_dir,
    check_output_file,
    json_format,
    marked_json,
)
from verispec.guard.limits import MAX_PROJECTION, MAX_THREADS, STUDY_THREADS
from verispec.latency import LatencyModel, throughput_unit
from verispec.selector.actions import ActionGrid, action_times, policy_action_times
from verispec.selector.dataset_file import Dataset, DatasetError
from verispec.selector.evaluate import (
    DEFAULT_BOOTSTRAP,
    best_static,
    crossfit_oracle_totals,
    evaluate_policies,
    oracle_choice,
    paired_policy_ratios,
    verifier_actions,
)
from verispec.selector.features import reads_draft
from verispec.selector.join import join_datasets
from verispec.selector.regimes import REGIME_TITLES, regime_features
from verispec.selector.roots import sampling_text
from verispec.selector.split import study_split

#: The half-width of a DDTE ratio's interval the study asks for (ratio units: 0.02 is 2%).
TARGET_HALF_WIDTH = 0.02
#: The selector (the paper's network) and its two baselines, trained for every rule and regime.
KINDS = ("mlp", "linear", "lookup")
#: The paper's network reading the hidden states as well (a study with ``hidden``).
HIDDEN_KIND = "mlp_hidden"
#: The DDTE comparison: the lead rule driven by its selector, against each rival at its best static tree and
#: with its own selector.
LEAD = "specinfer"
RIVALS = ("traversal", "traversal-iid")
NO_DRAFT = "chain:0"
DEFAULT_EPOCHS = 300
DEFAULT_TEST_FRACTION = 0.25

#: What the study writes into its folder (atomically).
JSON_FILE, MARKDOWN_FILE, FIGURE_FILE = "pair_selector.json", "pair_selector.md", "pair_selector.png"
OUTPUTS = (JSON_FILE, MARKDOWN_FILE, FIGURE_FILE)
STUDY_FORMAT = "verispec pair selector study"
#: The kind of the ``written_by`` marker of the study's JSON (``verispec.files.provenance``).
STUDY_KIND = "selector study"

@dataclass(frozen=True)
class Setting:
    """One sampling setting's roots (``name``: 'T=0.7 top-k=20 top-p=0.8'), from the dataset ``source``."""

    name: str
    source: str
    data: Dataset


def prompts_for_half_width(prompts: int, half_width: float, target: float = TARGET_HALF_WIDTH) -> int | None:
    """Held-out prompts that would bring an interval of half-width ``half_width`` over ``prompts`` prompts to
    ``target``: n (hw / target)^2 rounded up (a half-width scales as 1 / sqrt(prompts)); None when it is
    already there."""
    if half_width <= target:
        return None
    return int(math.ceil(round(prompts * (half_width / target) ** 2, 9)))


def _trees(grid: ActionGrid) -> tuple:
    return grid.ks, grid.l1s, grid.l2s


def pair_settings(datasets: Sequence[tuple[str, Dataset]], pair: str | None = None) -> list[Setting]:
    """The sampling settings of ``datasets`` ((label, dataset) pairs), each checked, or a one-line
    ``DatasetError``: every dataset of one pair (``pair`` when given), of one tree grid (K, L1, L2; the rules may
    differ) and of the same features; a sampling setting in one dataset only; at least two prompts a setting."""
    if not datasets:
        raise DatasetError("give at least one dataset of the pair (--selector-dataset / --dataset FILE)")
    first_label, first = datasets[0]
    pairs = {label: data.metadata.get("pair") for label, data in datasets}
    expected = first.metadata.get("pair") if pair is None else pair
    for label, data in datasets:
        if pairs[label] != expected:
            against = f"--pair {pair}" if pair is not None else f"{first_label!r} (pair {expected!r})"
            raise DatasetError(f"dataset {label!r} holds roots of the pair {pairs[label]!r}, not of {against}; give "
                               "datasets of one pair")
        if _trees(data.grid) != _trees(first.grid):
            raise DatasetError(f"dataset {label!r} labels the trees of {data.grid.describe()}, {first_label!r} those "
                               f"of {first.grid.describe()}; give datasets of one tree grid (K, L1, L2)")
        if data.feature_names != first.feature_names:
            raise DatasetError(f"dataset {label!r} holds the {len(data.feature_names)} features "
                               f"{', '.join(data.feature_names)}, {first_label!r} the {len(first.feature_names)} "
                               f"features {', '.join(first.feature_names)}; rebuild both with this verispec "
                               "('verispec selector dataset')")
        for key in ("tokenizer", "vocab_size"):  # one pair name over other models (--target/--draft reused)
            if data.metadata.get(key) != first.metadata.get(key):
                raise DatasetError(f"dataset {label!r} has the {key} {data.metadata.get(key)!r}, {first_label!r} "
                                   f"{first.metadata.get(key)!r}; give datasets of one pair's models")
    parts: dict[str, list[tuple[str, Dataset]]] = {}  # a setting's roots in each dataset that holds it
    for label, data in datasets:
        for index, sampling in enumerate(data.samplings):
            rows = data.setting == index
            if rows.any():
                parts.setdefault(sampling_text(sampling), []).append((label, data.subset(rows)))
    settings: list[Setting] = []
    for name, held in parts.items():
        try:  # one setting in several datasets: the same roots labelled for other rules (--traces-of), side by side
            subset = held[0][1] if len(held) == 1 else join_datasets([(label, _one_setting(data))
                                                                      for label, data in held])
        except DatasetError as error:
            raise DatasetError(f"the sampling setting {name} is in {' and '.join(repr(label) for label, _ in held)}, "
                               f"which cannot be joined: {error}") from None
        source = " + ".join(label for label, _ in held)
        prompts = len(np.unique(subset.group))
        if prompts < 2:
            raise DatasetError(f"dataset {source!r} holds {_prompts(prompts)} at {name}; the study "
                               "splits by prompt and needs at least 2")
        settings.append(Setting(name, source, subset))
    return settings


def _one_setting(data: Dataset) -> Dataset:
    """A dataset's roots of one sampling setting with that setting alone in its metadata (index 0), so that the
    same setting's roots in two files, whatever its index in each, can be joined."""
    index = int(data.setting[0])
    return Dataset(**{name: getattr(data, name) for name in ("features", "efficiency", "stderr", "lower", "upper",
                                                             "group", "context_length", "label_method", "key")},
                   setting=np.zeros(len(data), dtype=np.int64), per_sample=data.per_sample, hidden=data.hidden,
                   metadata={**data.metadata, "samplings": [data.samplings[index]]})


def rule_choices(train: Dataset, test: Dataset, verifier: str, latency: LatencyModel, *, seed: int,
                 epochs: int, hidden: Sequence[str] = (), projection: int | None = None,
                 kinds: Sequence[str] = KINDS, verification: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """{kind: [N_test] action index into the dataset's grid} of the selectors of ``KINDS`` trained on ``train``
    over ``verifier``'s actions under ``latency`` (Eq. 12 against plain decoding, as ``selector train`` does), and
    of ``HIDDEN_KIND`` (the network reading the hidden states ``hidden`` too, each projected to ``projection``
    dimensions, the paper's 128 when None) when any are named. ``kinds``: the selectors to train (a subset of
    ``KINDS``). ``verification`` [A] (the dataset grid's actions): each action's verification time per block, in
    the latency's unit, added to its block time and to plain decoding's (``verispec.selector.verdict``)."""
    from verispec.selector.train import train_selector

    grid = train.grid
    sub = grid.restricted((verifier,))  # the dataset's recorded actions of the verifier
    columns = np.array([grid.index(action) for action in sub.actions], dtype=np.int64)  # [A']
    times = policy_action_times(sub, latency, reads_draft=reads_draft(train.feature_names))  # [A'] as it decodes
    plain = [index for index, action in enumerate(sub.actions) if action.depth == 0]
    base_time = latency.target_time(1) if plain else None
    if verification is not None:
        times = times + verification[columns]
        base_time = None if base_time is None else base_time + float(verification[columns[plain[0]]])
    train_x, test_x = regime_features(train, latency), regime_features(test, latency)  # [N, F], [N_test, F]
    chosen = {}
    for kind in (*kinds, HIDDEN_KIND) if hidden else kinds:
        reads = {name: train.hidden[name] for name in hidden} if kind == HIDDEN_KIND else None  # {name: [N, d]}
        width = {} if reads is None or projection is None else {"projection": int(projection)}
        selector = train_selector(train_x, train.efficiency[:, columns], times, sub,
                                  kind="mlp" if kind == HIDDEN_KIND else kind, hidden=reads,
                                  base=plain[0] if plain else None,
                                  base_time=base_time, seed=seed, epochs=epochs,
                                  feature_names=train.feature_names,
                                  metadata={"latency": latency.as_dict(), "samplings": train.samplings}, **width)
        chosen[kind] = columns[selector.choose_batch(
            test_x, None if reads is None else {name: test.hidden[name] for name in hidden})]  # [N_test]
    return chosen


def static_names(grid: ActionGrid, chosen: np.ndarray) -> str:
    """The static action(s) of ``chosen`` [N] (one a fold under cross-fitting): its name, or each name with the
    share of roots it serves, most common first."""
    actions, counts = np.unique(chosen, return_counts=True)
    if len(actions) == 1:
        return grid.actions[int(actions[0])].name
    order = np.argsort(-counts, kind="stable")
    return ", ".join(f"{grid.actions[int(actions[i])].name} ({counts[i] / counts.sum():.0%} of roots)" for i in order)


def _with_ci(entry: dict, shift: float = 0.0, sign: float = 1.0) -> dict:
    """{"estimate", "ci"} of sign (ratio - shift) from a paired ratio ``entry`` (a gain: shift 1; a regret:
    shift 1, sign -1, the interval's ends swapped)."""
    low, high = sorted(sign * (value - shift) for value in entry["ratio_ci"])
    return {"estimate": sign * (entry["ratio"] - shift), "ci": [low, high]}


def verdict(interval: Sequence[float]) -> str:
    """'better' when a ratio's interval lies above 1, 'worse' below it, else 'not shown' (it holds 1)."""
    return "better" if interval[0] > 1 else "worse" if interval[1] < 1 else "not shown"


def rule_entry(test: Dataset, times: np.ndarray, verifier: str, choices: Mapping[str, np.ndarray],
               totals: Mapping[str, tuple], *, resamples: int, seed: int,
               selector_times: np.ndarray | None = None) -> dict:
    """One rule's rows: every policy's tokens per target call and throughput (with ``ratio_to_static``), the
    selector's gain, regret and ratios to its baselines (paired intervals), and its choices of chain:0; with the
    choices of ``HIDDEN_KIND`` too, its gain and its paired ratios to the scalar network and the lookup. The
    selectors (``KINDS`` and ``HIDDEN_KIND``) are priced by ``selector_times`` [A] when given
    (``policy_action_times``)."""
    grid = test.grid
    kinds = (*KINDS, HIDDEN_KIND) if f"{verifier} {HIDDEN_KIND}" in choices else KINDS
    priced = {} if selector_times is None else dict.fromkeys(kinds, selector_times)
    mine = {policy: choices[f"{verifier} {policy}"] for policy in ("static", *kinds, "oracle")}
    extra = {"oracle_crossfit": totals[f"{verifier} oracle_crossfit"]} if f"{verifier} oracle_crossfit" in totals \
        else {}
    policies = evaluate_policies(test.efficiency, times, mine, test.group, resamples=resamples, seed=seed,
                                 baseline="static", totals=extra, policy_times=priced)
    pairs = [("mlp", "linear"), ("mlp", "lookup"), ("mlp", "oracle"), *(("mlp", name) for name in extra),
             *([(HIDDEN_KIND, "mlp"), (HIDDEN_KIND, "lookup")] if HIDDEN_KIND in kinds else [])]
    ratios = paired_policy_ratios(test.efficiency, times, mine, test.group, pairs, totals=extra,
                                  resamples=resamples, seed=seed, policy_times=priced)
    statics = np.unique(mine["static"])
    policies["static"].update(action=static_names(grid, mine["static"]),
                              no_draft=bool(all(grid.actions[int(a)].tree == NO_DRAFT for a in statics)))
    policies["oracle"]["biased_upward"] = bool(np.any(test.label_method == "conditional"))
    no_draft = np.array([action.tree == NO_DRAFT for action in grid.actions])  # [A]
    for kind in kinds:
        chosen = mine[kind]
        policies[kind].update(distinct_actions=int(len(np.unique(chosen))),
                              no_draft_roots=int(no_draft[chosen].sum()),
                              no_draft_fraction=float(no_draft[chosen].mean()),
                              agrees_with_oracle=float(np.mean(chosen == mine["oracle"])))
    gain = {"ratio": policies["mlp"]["ratio_to_static"], "ratio_ci": policies["mlp"]["ratio_to_static_ci"]}
    crossfit = ratios.get(("mlp", "oracle_crossfit"))
    hidden = {}
    if HIDDEN_KIND in kinds:  # the network with hidden states: its gain, and whether it beats the scalar one
        row = policies[HIDDEN_KIND]
        hidden = {"hidden_states": {
            "gain_over_static": _with_ci({"ratio": row["ratio_to_static"], "ratio_ci": row["ratio_to_static_ci"]}, 1.0),
            **{f"versus_{name}": {**ratios[(HIDDEN_KIND, name)], "verdict": verdict(ratios[(HIDDEN_KIND, name)][
                "ratio_ci"])} for name in ("mlp", "lookup")}}}
    return {
        **hidden,
        "policies": policies,
        "gain_over_static": _with_ci(gain, 1.0),
        "regret_to_crossfit_oracle": None if crossfit is None else _with_ci(crossfit, 1.0, -1.0),
        "regret_to_oracle": _with_ci(ratios[("mlp", "oracle")], 1.0, -1.0),
        "versus_baselines": {name: {**ratios[("mlp", name)], "verdict": verdict(ratios[("mlp", name)]["ratio_ci"])}
                             for name in ("linear", "lookup")},
    }


def ddte_comparisons(test: Dataset, times: np.ndarray, choices: Mapping[str, np.ndarray], prompts: int, *,
                     resamples: int, seed: int, selector_times: np.ndarray | None = None) -> list[dict]:
    """Selector-driven ``LEAD`` over each rival of ``RIVALS`` the grid labels, at the rival's best static tree and
    with its own selector: the throughput ratio with its paired interval, the half-width, and the held-out prompts
    a half-width of ``TARGET_HALF_WIDTH`` would take (None when it is met)."""
    grid = test.grid
    if LEAD not in grid.verifiers:
        return []
    leads = ("mlp", HIDDEN_KIND) if f"{LEAD} {HIDDEN_KIND}" in choices else ("mlp",)
    pairs = [(f"{LEAD} {lead}", f"{rival} {policy}") for lead in leads for rival in RIVALS if rival in grid.verifiers
             for policy in ("static", lead)]
    priced = {} if selector_times is None else \
        {name: selector_times for name in choices if name.rsplit(" ", 1)[-1] in (*KINDS, HIDDEN_KIND)}  # pay the draft
    ratios = paired_policy_ratios(test.efficiency, times, choices, test.group, pairs, resamples=resamples, seed=seed,
                                  policy_times=priced)
    rows = []
    for lead, rival in pairs:
        name, policy = rival.rsplit(" ", 1)
        entry = ratios[(lead, rival)]
        half_width = (entry["ratio_ci"][1] - entry["ratio_ci"][0]) / 2
        lead_policy = "selector" if lead.endswith(" mlp") else "selector with hidden states"
        rows.append({"lead": LEAD, "lead_policy": lead_policy, "rival": name,
                     "rival_policy": "best static" if policy == "static" else lead_policy,
                     "rival_action": static_names(grid, choices[rival]) if policy == "static" else None,
                     **entry, "half_width": half_width, "held_out_prompts": prompts,
                     "prompts_for_target": prompts_for_half_width(prompts, half_width)})
    return rows


def regime_table(setting: Setting, held: Sequence[str] | Sequence[Sequence[str]], regime: str,
                 latency: LatencyModel, *, seed: int, epochs: int, resamples: int, hidden: Sequence[str] = (),
                 projection: int | None = None) -> dict:
    """The (setting, regime) table: every rule's entry (``rule_entry``), the DDTE comparisons, on the roots of
    the held-out prompts ``held``, the static actions and the selectors fitted on the others. ``held`` may be a
    list of folds (lists of prompts): then each fold's roots are chosen for by the policies fitted on the rest,
    and the table covers the roots of every fold. ``latency`` prices the setting's trees at the sizes it carries for
    this setting (``LatencyModel.for_setting``; one line where it carries only other settings')."""
    latency = latency.for_setting(setting.name)
    data = setting.data
    folds = [list(held)] if not held or isinstance(held[0], str) else [list(fold) for fold in held]
    in_fold = [np.isin(data.group, fold) for fold in folds]  # [N] each
    rows = np.logical_or.reduce(in_fold)  # [N]
    test = data.subset(rows)
    grid, times = data.grid, action_times(data.grid, latency)  # [A]
    selector_times = policy_action_times(grid, latency, reads_draft=reads_draft(data.feature_names))  # [A]
    choices, totals = {}, {}
    for verifier in grid.verifiers:
        allowed = verifier_actions(grid, verifier)
        choices[f"{verifier} static"] = np.empty(len(test), dtype=np.int64)
        for kind in (*KINDS, HIDDEN_KIND) if hidden else KINDS:
            choices[f"{verifier} {kind}"] = np.empty(len(test), dtype=np.int64)
        for fold in in_fold:
            train, where = data.subset(~fold), np.flatnonzero(fold[rows])  # where: the fold's rows in ``test``
            choices[f"{verifier} static"][where] = best_static(train.efficiency, times, allowed)
            for kind, chosen in rule_choices(train, data.subset(fold), verifier, latency, seed=seed,
                                             epochs=epochs, hidden=hidden, projection=projection).items():
                choices[f"{verifier} {kind}"][where] = chosen
        choices[f"{verifier} oracle"] = oracle_choice(test.efficiency, times, allowed)
        crossfit = None if test.per_sample is None else \
            crossfit_oracle_totals(test.per_sample, test.efficiency, times, allowed)
        if crossfit is not None:
            totals[f"{verifier} oracle_crossfit"] = crossfit
    prompts = len(np.unique(test.group))
    return {"setting": setting.name, "regime": regime, "title": REGIME_TITLES.get(regime, latency.source),
            "throughput_unit": throughput_unit(latency), "held_out_prompts": prompts, "held_out_roots": len(test),
            "folds": len(folds),
            "rules": {verifier: rule_entry(test, times, verifier, choices, totals, resamples=resamples, seed=seed,
                                           selector_times=selector_times) for verifier in grid.verifiers},
            "ddte": ddte_comparisons(test, times, choices, prompts, resamples=resamples, seed=seed,
                                     selector_times=selector_times),
            "ddte_rules_missing": [name for name in (LEAD, *RIVALS) if name not in grid.verifiers]}


def _check_numbers(regimes, seed, epochs, test_fraction, resamples, folds=1) -> None:
    if not isinstance(regimes, Mapping) or not regimes or \
            not all(isinstance(model, LatencyModel) for model in regimes.values()):
        raise VerispecError(f"the study needs latency regimes {{name: LatencyModel}}, got {describe(regimes)}")
    for value, what, least in ((seed, "the seed", 0), (epochs, "epochs", 1), (resamples, "bootstrap resamples", 100),
                               (folds, "the folds", 1)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < least:
            raise VerispecError(f"{what} must be an integer >= {least}, got {describe(value)}")
    if isinstance(test_fraction, bool) or not isinstance(test_fraction, (int, float)) or not 0 < test_fraction < 1:
        raise VerispecError(f"the held-out fraction must lie in (0, 1), got {describe(test_fraction)}")


def run_study(datasets: Sequence[tuple[str, Dataset]], regimes: Mapping[str, LatencyModel], *, seed: int = 0,
              epochs: int = DEFAULT_EPOCHS, test_fraction: float = DEFAULT_TEST_FRACTION,
              resamples: int = DEFAULT_BOOTSTRAP, pair: str | None = None, folds: int = 1,
              hidden: Sequence[str] = (), projection: int | None = None, threads: int = STUDY_THREADS) -> dict:
    """The study (module docstring) of ``datasets`` ((label, Dataset) pairs of one pair) in each regime of
    ``regimes`` ({name: LatencyModel}, e.g. ``regime_models(cpu_file)``): JSON-ready, every number in it.
    ``folds`` >= 2 cross-fits over that many folds of prompts instead of one split (``test_fraction`` unused).
    ``hidden``: the hidden states the ``HIDDEN_KIND`` network reads as well (every dataset must hold them), each
    projected to ``projection`` dimensions (None: the paper's 128). ``threads``: torch's CPU threads while it runs
    (``study_threads``)."""
    _check_numbers(regimes, seed, epochs, test_fraction, resamples, folds)
    if projection is not None and (isinstance(projection, bool) or not isinstance(projection, int) or
                                   not 1 <= projection <= MAX_PROJECTION):
        raise DatasetError(f"the hidden states' projection width must be an integer from 1 to {MAX_PROJECTION}, "
                           f"got {projection!r}")
    settings = pair_settings(datasets, pair)
    check_setting_prices(settings, regimes)
    hidden = check_hidden(settings, hidden)
    groups = np.concatenate([setting.data.group for setting in settings])
    result = {"format": STUDY_FORMAT, "pair": settings[0].data.metadata.get("pair"), "seed": int(seed),
              "epochs": int(epochs), "kinds": [*KINDS, *([HIDDEN_KIND] if hidden else [])],
              "hidden": list(hidden), "folds": int(folds),
              **({"projection": int(projection)} if hidden and projection is not None else {}),
              "bootstrap": {"resamples": int(resamples), "seed": int(seed), "level": 0.95, "over": "prompts"},
              "regimes": {name: {"title": REGIME_TITLES.get(name, model.source), "latency": model.as_dict()}
                          for name, model in regimes.items()},
              "settings": {}, "tables": []}
    plan, result_split, remedy = study_split(groups, folds=folds, fraction=test_fraction, seed=seed)
    if folds == 1:
        result["test_fraction"] = float(test_fraction)
    result["split"] = result_split
    with study_threads(threads):
        for setting in settings:
            here = setting_folds(setting, plan, remedy)
            result["settings"][setting.name] = _setting_record(setting, here)
            for name, latency in regimes.items():
                result["tables"].append(regime_table(setting, here if folds != 1 else here[0], name, latency,
                                                     seed=seed, epochs=epochs, resamples=resamples, hidden=hidden,
                                                     projection=projection))
    return result


def check_setting_prices(settings: Sequence[Setting], regimes: Mapping[str, LatencyModel]) -> None:
    """Refuse on one line, before any training, a regime whose latency model carries tree sizes but none for one of
    the settings (``LatencyModel.for_setting``): its trees would be priced at another setting's sizes."""
    from verispec.latency import LatencyError

    for setting in settings:
        for name, model in regimes.items():
            try:
                model.for_setting(setting.name)
            except LatencyError as error:
                raise LatencyError(f"the {name} regime at {setting.name} ({setting.source}): {error}") from None


def setting_folds(setting: Setting, plan: Sequence[Sequence[str]], remedy: str) -> list[list[str]]:
    """The held-out prompts of each fit of ``plan`` that ``setting`` holds, or a one-line ``DatasetError`` (naming
    ``remedy``) when a fit would hold out none of its prompts or all of them."""
    groups = set(np.unique(setting.data.group).tolist())
    here = [sorted(groups & set(fold)) for fold in plan]
    for fold in here:
        if not fold or fold == sorted(groups):
            raise DatasetError(f"the split holds out {_prompts(len(fold))} of the {len(groups)} of "
                               f"{setting.name} ({setting.source!r}) at once; {remedy}")
    return here


def _setting_record(setting: Setting, here: Sequence[Sequence[str]]) -> dict:
    """What the study's JSON says of one setting: its dataset, grid and labels, and its prompts and roots on each
    side of the split (``here``: the held-out prompts of each fit)."""
    data = setting.data
    groups = set(np.unique(data.group).tolist())
    in_fold = [np.isin(data.group, fold) for fold in here]  # [N] each
    held_rows = np.logical_or.reduce(in_fold)  # [N]
    return {"dataset": setting.source, "rules": list(data.grid.verifiers), "grid": data.grid.describe(),
            "actions": len(data.grid), "label_methods": sorted(set(data.label_method.tolist())),
            "prompts": len(groups), "roots": len(data),
            "train_prompts": len(groups) - max(len(fold) for fold in here),  # the fewest a policy was fitted on
            "held_out_prompts": sum(len(fold) for fold in here),
            "train_roots": int(len(data) - max(int(rows.sum()) for rows in in_fold)),
            "held_out_roots": int(held_rows.sum())}


@contextmanager
def study_threads(threads: int):
    """torch's CPU threads pinned to ``threads`` for the block, then restored. Why: the study trains many small
    networks, whose operations are too short to gain from threads; at torch's default (every core) each one waits
    on every core, and on a box shared with other work a documented study ran about 10x slower than at 1 thread
    (43 min against 4), with the same outputs byte for byte."""
    if isinstance(threads, bool) or not isinstance(threads, (int, np.integer)) or not 1 <= threads <= MAX_THREADS:
        raise VerispecError(f"the study's torch threads must be an integer from 1 to {MAX_THREADS}, got "
                            f"{describe(threads)}")
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(int(threads))
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _prompts(count: int) -> str:
    return f"{count} prompt" if count == 1 else f"{count} prompts"


def check_hidden(settings: Sequence[Setting], hidden: Sequence[str] | str | None) -> tuple[str, ...]:
    """The hidden-state names a study reads (``hidden``: names, or "all" for those every dataset holds), refused in
    one line where a dataset lacks one."""
    if not hidden:
        return ()
    held = [set(setting.data.hidden or {}) for setting in settings]
    names = sorted(set.intersection(*held)) if hidden == "all" else list(dict.fromkeys(hidden))
    for setting, have in zip(settings, held):
        missing = [name for name in names if name not in have]
        if missing or not names:
            raise DatasetError(f"the study's hidden states {', '.join(names) or '(none)'}: {setting.source!r} holds "
                               f"{', '.join(sorted(have)) or 'none'} (build it with 'selector dataset --hidden')")
    return tuple(names)


def load_inputs(paths: Sequence[str], latency_file: str | None, pair: str | None = None
                ) -> tuple[list[tuple[str, Dataset]], dict[str, LatencyModel]]:
    """(the datasets as (path, Dataset), the regimes of ``regime_models(latency_file)``), every refusal on one
    line before any training: a missing or foreign file, datasets that do not agree (``pair_settings``)."""
    from verispec.selector.regimes import regime_models

    datasets = [(str(path), Dataset.load(path)) for path in paths]
    settings = pair_settings(datasets, pair)
    regimes = regime_models(latency_file)
    check_setting_prices(settings, regimes)
    return datasets, regimes


def check_study_outputs(out: str | Path, what: str = "--out") -> None:
    """Refuse, before any work, a folder that cannot take the study's files (``OUTPUTS``), or where one of them is
    a link (``check_inside``: no output follows a link out of its folder)."""
    check_output_dir(out, what)
    for name in OUTPUTS:
        check_inside(out, Path(out) / name, what)
        check_output_file(Path(out) / name, what)



#: The study's JSON: carries the ``written_by`` marker of ``STUDY_KIND``.
STUDY_JSON = OutputKind("verispec selector study (JSON)", marked_json(STUDY_KIND), json_format(STUDY_FORMAT), JSON_FILE)


def check_study_owned(out: str | Path, *, overwrite: bool = False, what: str = "--out") -> None:
    """Refuse on one line, before any work, a file in ``out`` of one of the study's names (``OUTPUTS``) that
    verispec cannot show it wrote (its marker: ``STUDY_JSON``, ``MARKDOWN_OUTPUT``, ``FIGURE_OUTPUT``), unless
    ``overwrite``: the study would replace a file of the user's (issue 64). Then ``check_study_outputs``."""
    check_study_outputs(out, what)
    for name, kind in ((JSON_FILE, STUDY_JSON), (MARKDOWN_FILE, MARKDOWN_OUTPUT), (FIGURE_FILE, FIGURE_OUTPUT)):
        check_output(Path(out) / name, kind, what=what, overwrite=overwrite)


__all__ = ["DEFAULT_EPOCHS", "DEFAULT_TEST_FRACTION", "FIGURE_FILE", "HIDDEN_KIND", "JSON_FILE", "KINDS", "LEAD",
           "MARKDOWN_FILE", "NO_DRAFT", "OUTPUTS", "RIVALS", "STUDY_FORMAT", "STUDY_JSON", "STUDY_KIND", "Setting",
           "TARGET_HALF_WIDTH", "check_hidden", "check_setting_prices", "check_study_outputs", "check_study_owned",
           "ddte_comparisons", "load_inputs", "pair_settings",
           "prompts_for_half_width", "regime_table", "rule_choices", "rule_entry", "run_study",
           "static_names", "study_threads", "verdict"]
