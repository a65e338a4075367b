"""The verdict beyond DDTE (issue 56, item 3): under each sampling setting and latency regime, the best verifier
with its own selector, and its throughput ratio against SpecInfer, Traversal and traversal-iid each with its own
selector; DDTE's comparisons (SpecInfer's selector against Traversal and traversal-iid, at their best static trees
and with their own selectors; Thomas et al. 2026, arXiv 2602.16994, Sec. 5) restated the same way. Every rule
a dataset labels competes (psbv and globalres from a file of their own, ``verispec.selector.join``).

**Every source of spread.** A ratio of two policies' throughputs (sum E / sum T over the roots, DDTE Sec. 5)
moves with (1) the prompts, a sample, and (2) the training: the fold split of the prompts and the networks'
initialisation and batches. One trained selector and one split (``verispec.selector.study``) hold (2) fixed; on
the Qwen labels, retraining over 9 seeds moved SpecInfer-with-a-selector against traversal-iid-with-its-own from
x0.988 to x1.011 at T = 0.7, wider than the one-seed interval. Here a *replicate* r = 0..R-1 is a whole cross-fit
with seed s + r: its own K folds of prompts, its own training seeds; every root is chosen for by every rule's
selector and best static action fitted without its prompt. The estimate of a ratio is the mean over the R
replicates of its value on all prompts: the expected ratio of the training procedure, not one draw of it. Its 95%
interval is the percentile interval of a crossed bootstrap: each resample draws the prompts with replacement (the
same draw for every policy: paired) and R replicates with replacement, and takes the mean over the drawn replicates
of the ratio on the drawn prompts, so it covers the prompts and the finite number of seeds. Beside it, the range
over replicates of the one-replicate ratio: what one trained selector may give. A half-width above
``TARGET_HALF_WIDTH`` comes with the prompts it would take (half-widths scale as 1 / sqrt(prompts)).

**Oracles.** Each rule's true throughput oracle (``oracle_choice``: the best total throughput over per-root
choices, a ratio of sums) on the labels, biased upward by the labels' noise where they are conditional, and the
cross-fitted one (chosen on half of each root's sampled trees, scored on the other half), a feasible policy.

**The verifier's own work** (issue 66, item 4). A latency regime prices a block's forwards only; real decoding also
runs the rule's law over the drawn tree and its draws (``verispec.models.decoding``: ``verify_s``), milliseconds that
differ by rule (a few for SpecInfer at V = 151,936 on a CPU, tens for psbv's splits). Given a regime's measured
verification cost v(a) per block (``verispec.selector.verification_cost``, measured on the regime's device),
``priced_entry`` refits every rule's selector and best static action under T(a) + v(a) (the fits of
``priced_regime(regime)``) and reports the verdict so priced beside the forwards-only one, with the forwards-only
selector's own choices priced too; a regime whose device was not measured is ``UNPRICED`` and names no winner by
price.

Each rule's fit in each replicate is a row of a ``ResultStore`` (``OUT/verdict.rows.json``), keyed on the seed,
setting, regime, rule and the digest of what the fit reads (``label_digest``: the rule's labels, the features, the
roots), the store's parameters the folds, epochs, latency regimes and the prompts of the split: a run stopped by
its time budget resumes, and a rule added later (another file joined) is fitted alone.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from verispec.errors import VerispecError
from verispec.latency import LatencyModel
from verispec.report.common import with_interval
from verispec.selector.actions import action_times, policy_action_times
from verispec.selector.dataset_file import DatasetError
from verispec.selector.evaluate import (
    GroupBootstrap,
    best_static,
    crossfit_oracle_totals,
    oracle_choice,
    policy_totals,
    verifier_actions,
)
from verispec.selector.features import reads_draft
from verispec.selector.split import study_split
from verispec.selector.study import (
    LEAD,
    RIVALS,
    Setting,
    check_setting_prices,
    prompts_for_half_width,
    rule_choices,
    setting_folds,
)
from verispec.selector.verification_cost import pricing_run

#: The verdict's format, recorded in its JSON.
VERDICT_FORMAT = "verispec selector verdict"
#: The kind of the ``written_by`` marker of the verdict's JSON (``verispec.files.provenance``).
VERDICT_KIND = "selector verdict"

#: The half-width a ratio's interval should reach (issue 56: 1.5%), else the prompts it would take are named.
TARGET_HALF_WIDTH = 0.015

#: The rules the best one is measured against, each with its own selector.
REFERENCES = ("specinfer", "traversal", "traversal-iid")

#: The selector the verdict trains (the paper's network over the scalar features).
KIND = "mlp"

#: A regime's name with this suffix is that regime with each rule's verification ms added to its block times.
PRICED = "+verification"

#: What a table says of a regime whose device no verification cost was measured on.
UNPRICED = "verification unpriced"


def label_digest(data, verifier: str) -> str:
    """What a rule's choices in a replicate depend on besides the seed, folds, epochs and regime: its label columns,
    the features, the roots' prompts and keys (SHA-256, 16 hex digits). A rule's fitted choices are kept under it, so
    that adding another rule's file (a join) leaves every fitted rule's rows valid."""
    import hashlib

    columns = verifier_actions(data.grid, verifier)
    digest = hashlib.sha256()
    for array in (data.efficiency[:, columns], data.features):
        digest.update(np.ascontiguousarray(array, dtype=np.float64).tobytes())
    for array in (data.group, data.key):
        digest.update("\n".join(array.tolist()).encode())
    return digest.hexdigest()[:16]


def task_key(setting: Setting, regime: str, verifier: str, seed: int, verification: np.ndarray | None = None) -> str:
    """The row-store key of one rule's choices in one replicate; a fit under a priced regime (``verification``: the
    grid's [A] ms per block) is keyed on the rule's prices too, so that a remeasured file refits the rules it moved."""
    key = f"seed {seed} | {setting.name} | {regime} | {verifier} | {label_digest(setting.data, verifier)}"
    if verification is None:
        return key
    import hashlib

    columns = verifier_actions(setting.data.grid, verifier)
    digest = hashlib.sha256(np.ascontiguousarray(verification[columns], dtype=np.float64).tobytes()).hexdigest()
    return f"{key} | verification {digest[:16]}"


def priced_regime(regime: str) -> str:
    """The name the fits of ``regime`` priced with its device's verification cost go under."""
    return regime + PRICED


def regime_prices(setting: Setting, regime: str, costs: Mapping) -> tuple[str, np.ndarray | None]:
    """(the latency regime, the verification ms [A] of the setting's grid or None) of a task's regime name:
    ``priced_regime(name)`` is ``name`` with its cost file's times (``costs``: regime -> ``VerificationCost``)."""
    if regime.endswith(PRICED):
        base = regime[:-len(PRICED)]
        return base, costs[base].per_action(setting.data.grid, setting.name)
    return regime, None


def verdict_tasks(settings: Sequence[Setting], regimes: Mapping[str, LatencyModel], seeds: Sequence[int],
                  costs: Mapping | None = None) -> list:
    """[(key, setting, regime, verifier, seed)] of every rule's fit in every replicate; with ``costs`` (regime ->
    ``VerificationCost``) also every priceable rule's fit under each priced regime (``priced_regime``). A regime
    whose latency model carries tree sizes but none for a setting is refused here, on one line, before any fit
    (``verispec.selector.study.check_setting_prices``)."""
    check_setting_prices(settings, regimes)
    tasks = []
    for seed in seeds:
        for setting in settings:
            for regime in regimes:
                tasks += [(task_key(setting, regime, verifier, seed), setting, regime, verifier, seed)
                          for verifier in setting.data.grid.verifiers]
            for regime, cost in (costs or {}).items():
                prices = cost.per_action(setting.data.grid, setting.name)
                unpriceable = cost.unpriceable(setting.data.grid, setting.name)
                tasks += [(task_key(setting, priced_regime(regime), verifier, seed, prices), setting,
                           priced_regime(regime), verifier, seed)
                          for verifier in setting.data.grid.verifiers if verifier not in unpriceable]
    return tasks


def fit_rule(setting: Setting, regime: str, latency: LatencyModel, verifier: str, *, seed: int, folds: int,
             epochs: int, groups: np.ndarray, verification: np.ndarray | None = None) -> dict[str, list[int]]:
    """One rule's choices in the replicate of ``seed``: {"static": [N], "selector": [N]} the action index (into the
    setting's grid) chosen at each root by its best static action and by its selector, both fitted on the other
    folds of the ``folds``-fold split of the prompts ``groups`` (every setting's, so one split for all) shuffled with
    ``seed``; the selector trained with ``seed`` too. ``verification`` [A]: each action's verification ms per block,
    added to its block time for both (a priced regime)."""
    plan, _, remedy = study_split(groups, folds=folds, fraction=0.25, seed=seed)
    latency = latency.for_setting(setting.name)  # the setting's tree sizes (one line where it has none)
    data = setting.data
    times = action_times(data.grid, latency)  # [A]
    if verification is not None:
        times = times + verification
    allowed = verifier_actions(data.grid, verifier)
    static, chosen = np.empty(len(data), dtype=np.int64), np.empty(len(data), dtype=np.int64)
    for prompts in setting_folds(setting, plan, remedy):
        fold = np.isin(data.group, prompts)  # [N]
        train = data.subset(~fold)
        static[fold] = best_static(train.efficiency, times, allowed)
        chosen[fold] = rule_choices(train, data.subset(fold), verifier, latency, seed=seed, epochs=epochs,
                                    kinds=(KIND,), verification=verification)[KIND]
    return {"static": static.tolist(), "selector": chosen.tolist()}


class _Crossed:
    """The crossed bootstrap (module docstring): prompt weights [B, G] (``GroupBootstrap``) and, per resample, R
    replicates drawn with replacement (counts [B, R] / R)."""

    def __init__(self, groups: np.ndarray, replicates: int, resamples: int, seed: int):
        self.prompts = GroupBootstrap(groups, resamples, seed)
        rng = np.random.default_rng([seed, 1])
        draws = rng.integers(0, replicates, size=(resamples, replicates))  # [B, R]
        self.share = np.zeros((resamples, replicates))
        np.add.at(self.share, (np.arange(resamples)[:, None], draws), 1.0 / replicates)

    def rates(self, totals: Sequence[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
        """(full [R], resampled [R, B]) throughputs of a policy given its per-root (tokens, time) in each
        replicate."""
        full = np.array([tokens.sum() / time.sum() for tokens, time in totals])  # [R]
        resampled = np.stack([self.prompts.sums(tokens) / self.prompts.sums(time) for tokens, time in totals])
        return full, resampled

    def ratio(self, first, second) -> dict:
        """The ratio entry of two policies' (full, resampled) rates: the mean over replicates, its crossed
        interval, the range over replicates, the half-width and the prompts a half-width of TARGET_HALF_WIDTH would
        take."""
        (full_a, boot_a), (full_b, boot_b) = first, second
        per_replicate = full_a / full_b  # [R]
        samples = (self.share * (boot_a / boot_b).T).sum(axis=1)  # [B] mean over the drawn replicates
        low, high = np.quantile(samples, [0.025, 0.975])
        half = float(high - low) / 2
        return {"ratio": float(per_replicate.mean()), "ratio_ci": [float(low), float(high)],
                "replicate_range": [float(per_replicate.min()), float(per_replicate.max())], "half_width": half,
                "prompts_for_target": prompts_for_half_width(self.prompts.groups, half, TARGET_HALF_WIDTH)}

    def rate(self, rates) -> dict:
        """A policy's throughput entry: the mean over replicates, its crossed interval, the range over them."""
        full, boot = rates
        samples = (self.share * boot.T).sum(axis=1)  # [B]
        low, high = np.quantile(samples, [0.025, 0.975])
        return {"throughput": float(full.mean()), "throughput_ci": [float(low), float(high)],
                "replicate_range": [float(full.min()), float(full.max())]}


#: The action's dimensions whose largest offered value is the grid's edge (issue 78, item 2).
EDGE_DIMENSIONS = ("k", "l1", "l2")


def edge_shares(actions: Sequence, chosen: Sequence[int], allowed: Sequence[int]) -> dict:
    """How many of a policy's choices lie on the edge of what its rule was offered (issue 78, item 2): ``actions``
    the grid's actions (each with ``k``, ``l1``, ``l2``), ``chosen`` the choices as indices into them (every root of
    every replicate), ``allowed`` the indices of the rule's own actions. A dimension's edge is its largest value among
    the rule's actions, and counts only where they offer more than one value (a rule on chains alone has no K edge).
    -> {"k", "l1", "l2": the share of choices at that edge (None where the dimension offers one value), "any": the
    share at any of them, "choices": how many}."""
    offered = [actions[index] for index in allowed]
    picked = [actions[int(index)] for index in chosen]
    shares, anywhere = {}, np.zeros(len(picked), dtype=bool)
    for dimension in EDGE_DIMENSIONS:
        values = {getattr(action, dimension) for action in offered}
        if len(values) < 2:
            shares[dimension] = None
            continue
        top = max(values)
        at = np.array([getattr(action, dimension) == top for action in picked], dtype=bool)
        shares[dimension] = float(at.mean()) if len(picked) else None
        anywhere |= at
    return {**shares, "any": float(anywhere.mean()) if len(picked) else None, "choices": len(picked)}


def verdict_table(setting: Setting, regime: str, latency: LatencyModel, fits: Mapping[str, Mapping],
                  seeds: Sequence[int], *, resamples: int, seed: int, verification: np.ndarray | None = None,
                  rules_of: Sequence[str] | None = None) -> dict:
    """The (setting, regime) verdict from every rule's fits (``fits``: ``task_key`` -> ``fit_rule``'s choices) in
    the replicates of ``seeds``; ``seed``: the bootstrap's. ``verification`` [A]: the regime priced with each
    action's verification ms per block (the fits of ``priced_regime(regime)``); ``rules_of``: the rules compared
    (default every rule of the grid). ``latency`` prices the setting's trees at its sizes for this setting
    (``LatencyModel.for_setting``)."""
    latency = latency.for_setting(setting.name)
    data = setting.data
    grid = data.grid
    times = action_times(grid, latency)  # [A]
    selector_times = policy_action_times(grid, latency, reads_draft=reads_draft(data.feature_names))  # [A]
    fitted = regime
    if verification is not None:
        times, selector_times, fitted = times + verification, selector_times + verification, priced_regime(regime)
    verifiers = tuple(grid.verifiers if rules_of is None else rules_of)
    boot = _Crossed(data.group, len(seeds), resamples, seed)
    rates, rules = {}, {}
    for verifier in verifiers:
        keys = [task_key(setting, fitted, verifier, replicate, verification) for replicate in seeds]
        missing = [key for key in keys if key not in fits]
        if missing:
            raise VerispecError(f"no fit of {missing[0]!r}; fit every replicate first (verdict_tasks, fit_rule)")
        for policy, priced in (("static", times), ("selector", selector_times)):
            totals = [policy_totals(data.efficiency, priced, np.asarray(fits[key][policy], dtype=np.int64))
                      for key in keys]
            rates[(verifier, policy)] = boot.rates(totals)
        allowed = verifier_actions(grid, verifier)
        oracle = policy_totals(data.efficiency, times, oracle_choice(data.efficiency, times, allowed))
        crossfit = None if data.per_sample is None else \
            crossfit_oracle_totals(data.per_sample, data.efficiency, times, allowed)
        rules[verifier] = {
            "selector": boot.rate(rates[(verifier, "selector")]),
            "static": boot.rate(rates[(verifier, "static")]),
            "selector_over_static": boot.ratio(rates[(verifier, "selector")], rates[(verifier, "static")]),
            "oracle": {"throughput": float(oracle[0].sum() / oracle[1].sum()),
                       "biased_upward": bool(np.any(data.label_method == "conditional"))},
            "oracle_crossfit": None if crossfit is None else
            {"throughput": float(crossfit[0].sum() / crossfit[1].sum())},
            # where the choices sit on the grid: on its edge, the optimum may lie beyond it (issue 78, item 2)
            "edge": {policy: edge_shares(grid.actions, np.concatenate([np.asarray(fits[key][policy]) for key in keys]),
                                         allowed) for policy in ("static", "selector")},
        }
    best = max(verifiers, key=lambda name: rules[name]["selector"]["throughput"])
    versus = {name: boot.ratio(rates[(best, "selector")], rates[(name, "selector")])
              for name in REFERENCES if name in verifiers and name != best}
    ddte = []
    if LEAD in verifiers:
        for rival in RIVALS:
            if rival not in verifiers:
                continue
            for policy in ("static", "selector"):
                ddte.append({"lead": LEAD, "rival": rival,
                             "rival_policy": "best static" if policy == "static" else "selector",
                             **boot.ratio(rates[(LEAD, "selector")], rates[(rival, policy)])})
    return {"setting": setting.name, "regime": regime, "prompts": int(boot.prompts.groups), "roots": len(data),
            "best": best, "versus": versus, "ddte": ddte, "rules": rules}


def priced_entry(setting: Setting, regime: str, latency: LatencyModel, fits: Mapping[str, Mapping],
                 seeds: Sequence[int], forwards: Mapping, cost=None, *, resamples: int, seed: int) -> dict:
    """The (setting, regime) verdict with each rule's own verification priced (issue 66, item 4), for the table's
    ``priced`` key beside the forwards-only one (``forwards``: ``verdict_table``'s). ``cost``: the regime's
    ``VerificationCost`` (measured on its device), or None: then {"verification": UNPRICED, "best": None}, no winner
    named by price. Else the verdict of the fits of ``priced_regime(regime)`` (selectors and best static actions
    refitted under T(a) + v(a)), its rules' entries with, beside them, ``forwards_only``: the forwards-only
    selector's throughput and that same selector's choices priced with v (what it gets on the device), and
    ``verification_ms_per_block``: v over the priced selector's blocks (the mean over replicates of sum v / blocks);
    ``run``: whether the forwards and the verification were timed in one run on one box (``pricing_run``).
    A rule a budget stopped at some action is ``unpriceable`` and left out of the comparison."""
    if cost is None:
        return {"verification": UNPRICED, "best": None}
    latency = latency.for_setting(setting.name)
    data = setting.data
    prices = cost.per_action(data.grid, setting.name)  # [A] ms
    unpriceable = cost.unpriceable(data.grid, setting.name)
    rules = [name for name in data.grid.verifiers if name not in unpriceable]
    table = verdict_table(setting, regime, latency, fits, seeds, resamples=resamples, seed=seed, verification=prices,
                          rules_of=rules)
    priced_times = policy_action_times(data.grid, latency, reads_draft=reads_draft(data.feature_names)) + prices
    for name in rules:
        aware, spent = [], []
        for replicate in seeds:
            choice = np.asarray(fits[task_key(setting, regime, name, replicate)]["selector"], dtype=np.int64)
            tokens, time = policy_totals(data.efficiency, priced_times, choice)  # [N], [N]
            aware.append(tokens.sum() / time.sum())
            refitted = np.asarray(fits[task_key(setting, priced_regime(regime), name, replicate, prices)]["selector"],
                                  dtype=np.int64)
            spent.append(prices[refitted].mean())
        table["rules"][name]["forwards_only"] = {"selector": forwards["rules"][name]["selector"]["throughput"],
                                                 "selector_priced": float(np.mean(aware))}
        table["rules"][name]["verification_ms_per_block"] = float(np.mean(spent))
    return {"verification": "priced", "cost": cost.describe(), "run": pricing_run(latency.measured, cost.measured),
            "best": table["best"], "versus": table["versus"], "ddte": table["ddte"], "rules": table["rules"],
            "unpriceable": unpriceable}


def priced_sentence(tables: Sequence[Mapping]) -> str:
    """One sentence of the priced verdict: per (setting, regime) the best rule with its own selector once each
    rule's verification is priced, beside the forwards-only best, or UNPRICED where the regime's device was not
    measured."""
    parts = []
    for table in tables:
        priced = table["priced"]
        where = f"{table['setting']}, {table['regime']}"
        if priced["best"] is None:
            parts.append(f"{where}: {UNPRICED}")
            continue
        against = "; ".join(f"x{with_interval(entry['ratio'], entry['ratio_ci'])} vs {name}"
                            for name, entry in priced["versus"].items())
        parts.append(f"{where}: {priced['best']} (forwards only: {table['best']}" +
                     (f"; {against})" if against else ")"))
    return "Best verifier with its own selector, its verification priced: " + "; ".join(parts) + "."


def verdict_sentence(tables: Sequence[Mapping]) -> str:
    """One sentence of the verdict: the best rule with its own selector in every (setting, regime), and its
    ratios against the references, each with its crossed interval."""
    parts = []
    for table in tables:
        against = "; ".join(f"x{with_interval(entry['ratio'], entry['ratio_ci'])} vs {name}"
                            for name, entry in table["versus"].items())
        parts.append(f"{table['setting']}, {table['regime']}: {table['best']}" + (f" ({against})" if against else ""))
    return "Best verifier with its own selector: " + "; ".join(parts) + "."


def check_verdict_numbers(replicates: int, folds: int) -> None:
    """Refuse, on one line, a verdict that could not cover the training spread or hold every root out once."""
    if isinstance(replicates, bool) or not isinstance(replicates, int) or replicates < 2:
        raise DatasetError(f"the verdict needs at least 2 replicates (seeds and splits) to measure the training "
                           f"spread, got {replicates!r}; give --replicates 2 or more")
    if isinstance(folds, bool) or not isinstance(folds, int) or folds < 2:
        raise DatasetError(f"the verdict cross-fits (every prompt held out once), so it needs at least 2 folds, got "
                           f"{folds!r}; give --folds 2 or more")


__all__ = ["KIND", "PRICED", "REFERENCES", "TARGET_HALF_WIDTH", "UNPRICED", "VERDICT_FORMAT", "VERDICT_KIND",
           "check_verdict_numbers", "fit_rule", "label_digest", "priced_entry", "priced_regime", "priced_sentence",
           "regime_prices", "task_key", "verdict_sentence", "verdict_table", "verdict_tasks"]
