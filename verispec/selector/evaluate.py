"""Evaluation of delay selectors on held-out roots: static, selector and oracle policies from exact labels.

A labelled dataset (``verispec.selector.dataset``) gives, at each root b and for each action a of its grid, the
expected tokens of one block E_ba = E[tau + 1] (exact, certified or conditional-exact), and a latency model gives
the block's time T_a (``verispec.selector.actions.action_times``: T = (L1 + L2) t_q + t_p(1 + L1 + K L2), the DDTE
paper's Eq. 11, with the last L2 - 1 draft steps priced at t_q(K) when the model measured the draft's width). A
policy chooses one action per root; over a set of roots (each root one block) it runs

    tokens per target call = mean_b E_b,pi(b)         (one target forward per block, chain:0 included),
    throughput             = sum_b E_b,pi(b) / sum_b T_pi(b)     (tokens per unit of the latency model's time),

the throughput of the DDTE paper (Thomas et al. 2026, arXiv 2602.16994, Sec. 5: TP = sum E / sum T). Three
policies per verifier:

* ``static``: the one action of highest throughput on the TRAINING roots (the paper's static baseline, chosen
  per verifier and sampling setting when ``per_setting``), then applied to the held-out roots;
* ``selector``: a trained ``Selector``, which sees only the root's features;
* ``oracle``: the held-out roots' labelled actions of the largest total throughput (``oracle_choice``: a ratio of
  sums, found by Dinkelbach's iteration; the per-root best E_ba / T_a is 0.1-0.3% below it on the Qwen labels):
  the bound a selector of these labels can reach; it is not in the paper.

95% intervals come from a bootstrap over groups (prompts for real roots, seeds for synthetic ones): a group's
roots share a trace, so they are not independent. Paired quantities (a selector's gain over static, its regret
against the oracle, selector-driven SpecInfer against Traversal) are bootstrapped on the same resamples, so
their intervals are those of the difference, not of two separate figures.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from verispec.latency import LatencyModel
from verispec.selector.actions import ActionGrid, SelectorError, action_times, policy_action_times
from verispec.selector.features import reads_draft
from verispec.selector.regimes import dataset_latency
from verispec.selector.roots import sampling_text

#: Bootstrap resamples of the groups for the 95% intervals.
DEFAULT_BOOTSTRAP = 2000

#: Dinkelbach's iteration of the throughput oracle (``oracle_choice``): at most this many steps (it ends in a
#: handful: each step's choice is that of a larger rate, among finitely many), stopping when the rate rises by less
#: than this relative amount (rounding).
ORACLE_STEPS, ORACLE_TOLERANCE = 100, 1e-13


def best_static(efficiency: np.ndarray, times: np.ndarray, allowed: Sequence[int]) -> int:
    """The action (an index among ``allowed``) of highest throughput over the roots of ``efficiency`` [N, A]
    (``verispec.selector.train.best_static`` on those actions' columns); ties go to the first."""
    from verispec.selector.train import best_static as best_among

    allowed = np.asarray(allowed, dtype=np.int64)
    if efficiency.shape[0] == 0 or allowed.size == 0:
        raise SelectorError("no roots or no actions to choose a static action from")
    return int(allowed[best_among(efficiency[:, allowed], times[allowed])])


def oracle_choice(efficiency: np.ndarray, times: np.ndarray, allowed: Sequence[int]) -> np.ndarray:
    """The allowed action at every root of the largest total throughput sum_b E_b,a(b) / sum_b T_a(b) over all
    per-root choices: the true oracle of the throughput the study reports (a ratio of sums). The per-root best
    E_ba / T_a (a sum of ratios' choice) is not it: a root where a long tree gains little per unit of time is
    better spent short when time is shared. Dinkelbach's iteration (Dinkelbach 1967, "On nonlinear fractional
    programming"): with lam the throughput of the current choice, choose at every root argmax_a E_ba - lam T_a; lam
    rises strictly until no root improves, and then max over choices of sum (E - lam T) = 0, which is lam's
    optimality. It starts from the per-root best, so it ends in a few steps; ties go to the first allowed action."""
    allowed = np.asarray(allowed, dtype=np.int64)
    values, spent = efficiency[:, allowed], times[allowed]                           # [N, A'], [A']
    rows = np.arange(values.shape[0])
    pick = np.argmax(values / spent, axis=1)                                         # [N] the per-root best
    rate = values[rows, pick].sum() / spent[pick].sum()
    for _ in range(ORACLE_STEPS):
        better = np.argmax(values - rate * spent, axis=1)                             # [N]
        new_rate = values[rows, better].sum() / spent[better].sum()
        if not new_rate > rate * (1 + ORACLE_TOLERANCE):
            break
        pick, rate = better, new_rate
    return allowed[pick]  # [N]


def crossfit_oracle_totals(per_sample: np.ndarray, efficiency: np.ndarray, times: np.ndarray,
                           allowed: Sequence[int]) -> tuple[np.ndarray, np.ndarray] | None:
    """Per root, the expected tokens [N] and time [N] of the cross-fitted oracle, or None when some root's labels
    come from a single sampled tree (nothing to split).

    The per-root oracle of conditional-exact labels picks the largest of noisy estimates and scores it on the same
    estimates: the winner's curse biases it upward (on the Qwen labels of 4 trees, x1.22 over the best static
    tree). The cross-fitted oracle chooses each root's action on half of its sampled trees (the throughput oracle,
    ``oracle_choice``, of the means over trees 1..h of every root) and scores that action on the other half
    (h+1..S), then the same with the halves swapped, and takes the mean of the two: the scoring trees are
    independent of the choice, so its tokens are unbiased estimates of what a policy that chooses from h sampled
    trees would get. That policy is a feasible lower bound of the true oracle; the in-sample oracle, an upper one
    in expectation. Roots with exact or certified labels (their ``per_sample`` rows NaN) are chosen and scored on
    ``efficiency`` itself (no noise), in both halves.

    ``per_sample`` [N, S, A] (NaN for missing trees), ``efficiency`` [N, A], ``times`` [A]."""
    allowed = np.asarray(allowed, dtype=np.int64)
    counts = np.isfinite(per_sample[:, :, 0]).sum(axis=1)  # [N] trees per root
    if ((counts > 0) & (counts < 2)).any():
        return None
    halves = [efficiency.copy(), efficiency.copy()]  # [N, A] each: the means of each half's trees
    for row in np.flatnonzero(counts > 0):  # the noiseless rows keep their labels in both halves
        half = counts[row] // 2
        halves[0][row] = per_sample[row, :half].mean(0)
        halves[1][row] = per_sample[row, half:counts[row]].mean(0)
    tokens, time, _ = crossfit_oracle(np.stack(halves), times, allowed)
    return tokens, time


def crossfit_oracle(halves: np.ndarray, times: np.ndarray, allowed: Sequence[int]):
    """(tokens [N], time [N], choices [2, N]) of the oracle chosen on one half of each root's labels (``halves``
    [2, N, A]: each root's mean labels over each half of its sampled trees; the throughput oracle over all roots,
    ``oracle_choice``) and scored on the other, both ways, each way weighing one half: ``crossfit_oracle_totals``'
    estimator, and the choices each half made."""
    rows = np.arange(halves.shape[1])
    tokens, time = np.zeros(len(rows)), np.zeros(len(rows))  # [N], [N]
    picks = []
    for choose, score in ((0, 1), (1, 0)):  # chosen on one half (the oracle over all roots), scored on the other
        pick = oracle_choice(halves[choose], times, allowed)  # [N]
        tokens += 0.5 * halves[score][rows, pick]
        time += 0.5 * times[pick]
        picks.append(pick)
    return tokens, time, np.stack(picks)


def policy_totals(efficiency: np.ndarray, times: np.ndarray, choice: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per root, the tokens E_b,pi(b) and the time T_pi(b) of the chosen action."""
    rows = np.arange(efficiency.shape[0])
    return efficiency[rows, choice], times[choice]  # [N], [N]


def _group_sums(values: np.ndarray, group_index: np.ndarray, groups: int) -> np.ndarray:
    return np.bincount(group_index, weights=values, minlength=groups)


class GroupBootstrap:
    """Resampled group weights: each resample draws the groups with replacement, and a root counts as many
    times as its group was drawn. Every statistic is a ratio of weighted sums, so one weight matrix serves all."""

    def __init__(self, groups: np.ndarray, resamples: int, seed: int):
        _, self.index = np.unique(groups, return_inverse=True)
        count = int(self.index.max()) + 1 if self.index.size else 0
        rng = np.random.default_rng(seed)
        draws = rng.integers(0, count, size=(resamples, count))  # [R, G]
        self.weights = np.zeros((resamples, count))
        np.add.at(self.weights, (np.arange(resamples)[:, None], draws), 1.0)
        self.groups = count

    def sums(self, values: np.ndarray) -> np.ndarray:
        """Resampled sums of per-root ``values`` [N] -> [R]."""
        return self.weights @ _group_sums(values, self.index, self.groups)


def _interval(samples: np.ndarray) -> list[float]:
    low, high = np.quantile(samples, [0.025, 0.975])
    return [float(low), float(high)]


def _given(efficiency, times, choices, totals, policy_times) -> dict:
    """name -> (tokens [N], time [N]) of each policy: ``choices`` priced by ``policy_times[name]`` where given
    (a selector's, ``policy_action_times``), else by ``times``; then ``totals`` as given."""
    policy_times = dict(policy_times or {})
    return {name: policy_totals(efficiency, policy_times.get(name, times), np.asarray(choice, dtype=np.int64))
            for name, choice in choices.items()} | dict(totals or {})


def evaluate_policies(efficiency: np.ndarray, times: np.ndarray, choices: Mapping[str, np.ndarray],
                      groups: np.ndarray, *, resamples: int = DEFAULT_BOOTSTRAP, seed: int = 0,
                      baseline: str = "static", totals: Mapping[str, tuple] | None = None,
                      policy_times: Mapping[str, np.ndarray] | None = None) -> dict:
    """Tokens per target call and throughput of each policy in ``choices`` (name -> [N] action index) on the
    roots of ``efficiency`` [N, A], and of each policy in ``totals`` (name -> its per-root tokens [N] and time
    [N], for a policy that is no single action per root, like the cross-fitted oracle), with 95% group-bootstrap
    intervals, and each policy's throughput ratio to ``baseline`` (paired, on the same resamples). A policy named
    in ``policy_times`` (name -> [A]) is priced by those times instead of ``times``."""
    if efficiency.shape[0] == 0:
        raise SelectorError("no held-out roots to evaluate on; give a test set with at least one root")
    boot = GroupBootstrap(np.asarray(groups), resamples, seed)
    count = boot.sums(np.ones(efficiency.shape[0]))  # [R] roots per resample
    results, rates = {}, {}
    given = _given(efficiency, times, choices, totals, policy_times)
    for name, (tokens, time) in given.items():
        token_sums, time_sums = boot.sums(tokens), boot.sums(time)
        rates[name] = token_sums / time_sums
        results[name] = {
            "tokens_per_target_call": float(tokens.mean()),
            "tokens_per_target_call_ci": _interval(token_sums / count),
            "throughput": float(tokens.sum() / time.sum()),
            "throughput_ci": _interval(rates[name]),
        }
    if baseline in given:
        for name in given:
            reference = results[baseline]["throughput"]
            results[name]["ratio_to_" + baseline] = results[name]["throughput"] / reference
            results[name]["ratio_to_" + baseline + "_ci"] = _interval(rates[name] / rates[baseline])
    return results


def paired_ratio(efficiency_a: np.ndarray, times_a: np.ndarray, choice_a: np.ndarray,
                 efficiency_b: np.ndarray, times_b: np.ndarray, choice_b: np.ndarray, groups: np.ndarray, *,
                 resamples: int = DEFAULT_BOOTSTRAP, seed: int = 0) -> dict:
    """Throughput of policy a over policy b on the same roots, with a paired 95% group-bootstrap interval."""
    boot = GroupBootstrap(np.asarray(groups), resamples, seed)
    tokens_a, time_a = policy_totals(efficiency_a, times_a, choice_a)
    tokens_b, time_b = policy_totals(efficiency_b, times_b, choice_b)
    ratio = (tokens_a.sum() / time_a.sum()) / (tokens_b.sum() / time_b.sum())
    samples = (boot.sums(tokens_a) / boot.sums(time_a)) / (boot.sums(tokens_b) / boot.sums(time_b))
    return {"ratio": float(ratio), "ratio_ci": _interval(samples)}


def paired_policy_ratios(efficiency: np.ndarray, times: np.ndarray, choices: Mapping[str, np.ndarray],
                         groups: np.ndarray, pairs: Sequence[tuple[str, str]], *,
                         totals: Mapping[str, tuple] | None = None, resamples: int = DEFAULT_BOOTSTRAP,
                         seed: int = 0, policy_times: Mapping[str, np.ndarray] | None = None) -> dict:
    """{(a, b): {"ratio", "ratio_ci"}}: the throughput of policy a over policy b for each pair of ``pairs``, on the
    roots of ``efficiency`` [N, A], with a paired 95% group-bootstrap interval (one weight matrix for every pair,
    the resamples of ``evaluate_policies`` at the same seed). Policies are named in ``choices`` (name -> [N] action
    index; priced by ``policy_times[name]`` where given, else ``times``) or ``totals`` (name -> per-root tokens
    [N] and time [N])."""
    boot = GroupBootstrap(np.asarray(groups), resamples, seed)
    given = _given(efficiency, times, choices, totals, policy_times)
    missing = sorted({name for pair in pairs for name in pair} - set(given))
    if missing:
        raise SelectorError(f"no policy named {', '.join(missing)} to compare")
    rates = {name: boot.sums(tokens) / boot.sums(time) for name, (tokens, time) in given.items()}  # [R] each
    point = {name: float(tokens.sum() / time.sum()) for name, (tokens, time) in given.items()}
    return {(a, b): {"ratio": point[a] / point[b], "ratio_ci": _interval(rates[a] / rates[b])} for a, b in pairs}


def verifier_actions(grid: ActionGrid, verifier: str) -> list[int]:
    """Indices of ``grid``'s actions verified by ``verifier``."""
    return [index for index, action in enumerate(grid.actions) if action.verifier == verifier]


def selector_choice(selector, dataset) -> np.ndarray:
    """The selector's action at every root of ``dataset``, as indices into the DATASET's grid (a selector
    trained on a sub-grid, one verifier's actions say, is mapped by action)."""
    hidden = None
    if selector.uses_hidden:
        held = dataset.hidden or {}
        missing = [name for name in selector.hidden_names if name not in held]
        if missing:
            raise SelectorError(f"the selector reads the hidden states {', '.join(missing)}, which the dataset does "
                                "not hold (build it with 'selector dataset --hidden')")
        hidden = {name: held[name] for name in selector.hidden_names}
    chosen = np.asarray(selector.choose_batch(dataset.features, hidden), dtype=np.int64)  # [N], selector's grid
    mapping = np.array([dataset.grid.index(action) for action in selector.grid.actions], dtype=np.int64)
    return mapping[chosen]


def check_dataset_fits(selector, dataset, *, name: str = "the selector", source: str = "the dataset") -> None:
    """Refuse on one line a selector evaluated on roots it was not trained for (``verispec.selector.fits``):
    another pair or vocabulary (a synthetic dataset for a pair's selector, or the reverse), other sampling
    settings, another action grid, or other features."""
    from verispec.selector.fits import check_dataset_fits as check

    check(selector, dataset, name=name, source=source)


def evaluate(test, train, selectors: Mapping[str, object], *, per_setting: bool = True,
             resamples: int = DEFAULT_BOOTSTRAP, seed: int = 0) -> dict:
    """The issue's table: for each selector (named; each trained for one verifier's actions, or several), on the
    held-out roots of ``test``: static (chosen on ``train``), selector and oracle, under the selector's own
    latency model (the one it was trained for), overall and per sampling setting. JSON-ready."""
    if not selectors:
        raise SelectorError("no selector to evaluate; give at least one --selector FILE")
    report = {"roots": {"train": int(train.features.shape[0]), "test": int(test.features.shape[0])},
              "groups": {"train": int(len(np.unique(train.group))), "test": int(len(np.unique(test.group)))},
              "bootstrap": {"resamples": resamples, "seed": seed, "level": 0.95, "over": "groups"},
              "selectors": {}}
    for name, selector in selectors.items():
        check_dataset_fits(selector, test, name=f"selector {name!r}")
        latency = dataset_latency(selector_latency(selector), test,
                                  f"the held-out roots of selector {name!r}")  # the setting's tree sizes
        times = action_times(test.grid, latency)
        chosen_times = policy_action_times(test.grid, latency, reads_draft=reads_draft(selector.feature_names))
        allowed = [test.grid.index(action) for action in selector.grid.actions]
        chosen = selector_choice(selector, test)
        entry = {"verifiers": sorted({action.verifier for action in selector.grid.actions}),
                 "kind": selector.metadata.get("kind"), "latency": latency.as_dict(),
                 "throughput_unit": f"tokens per {latency.unit}", "settings": {}}
        settings = sorted(set(np.asarray(test.setting).tolist()))
        for setting in ([None] + settings if per_setting and len(settings) > 1 else [None]):
            rows = np.ones(test.features.shape[0], dtype=bool) if setting is None else \
                np.asarray(test.setting) == setting
            train_rows = np.ones(train.features.shape[0], dtype=bool) if setting is None or not per_setting \
                else np.asarray(train.setting) == setting
            if not rows.any() or not train_rows.any():
                continue
            static = best_static(train.efficiency[train_rows], times, allowed)
            efficiency = test.efficiency[rows]
            choices = {"static": np.full(int(rows.sum()), static), "selector": chosen[rows],
                       "oracle": oracle_choice(efficiency, times, allowed)}
            crossfit = None if test.per_sample is None else \
                crossfit_oracle_totals(test.per_sample[rows], efficiency, times, allowed)
            table = evaluate_policies(efficiency, times, choices, np.asarray(test.group)[rows],
                                      resamples=resamples, seed=seed,
                                      totals=None if crossfit is None else {"oracle_crossfit": crossfit},
                                      policy_times={"selector": chosen_times})
            noisy = bool(np.any(np.asarray(test.label_method)[rows] == "conditional"))
            table["oracle"]["biased_upward"] = noisy  # the best of noisy labels scored on themselves
            table["static"]["action"] = test.grid.actions[static].name
            picked, counts = np.unique(chosen[rows], return_counts=True)
            table["selector"]["actions"] = {test.grid.actions[i].name: int(c) for i, c in zip(picked, counts)}
            table["selector"]["agrees_with_oracle"] = float(np.mean(chosen[rows] == choices["oracle"]))
            table["selector"]["regret_to_oracle"] = 1.0 - table["selector"]["throughput"] / \
                table["oracle"]["throughput"]
            table["selector"]["gain_over_static"] = table["selector"]["ratio_to_static"] - 1.0
            if crossfit is not None:
                table["selector"]["regret_to_crossfit_oracle"] = 1.0 - table["selector"]["throughput"] / \
                    table["oracle_crossfit"]["throughput"]
            entry["settings"]["all" if setting is None else _setting_name(test, setting)] = table
        report["selectors"][name] = entry
    return report


def selector_latency(selector) -> LatencyModel:
    """The latency model ``selector`` was trained under (its metadata's), with tree sizes of an unknown setting (a
    model file written before sizes named their setting) named as the one sampling setting the selector was trained
    on, the only one they can be; where it was trained on several they stay unknown (binding them is refused)."""
    latency = LatencyModel.from_dict(selector.metadata["latency"])
    samplings = selector.metadata.get("samplings") or []
    return latency.naming_unknown(sampling_text(samplings[0])) if len(samplings) == 1 else latency


def _setting_name(dataset, setting) -> str:
    samplings = dataset.metadata.get("samplings") or []
    if isinstance(setting, (int, np.integer)) and 0 <= setting < len(samplings):
        return sampling_text(samplings[int(setting)])
    return str(setting)


def compare_selected(test, first: tuple[str, object], second: tuple[str, object], train, *,
                     resamples: int = DEFAULT_BOOTSTRAP, seed: int = 0) -> dict:
    """The paper's comparison and the one it skipped, on the same held-out roots and one latency model:
    ``first`` (name, selector), e.g. selector-driven SpecInfer, against the second selector's verifier at its
    best static action (chosen on ``train``) AND against that verifier with its own selector."""
    (name_a, selector_a), (name_b, selector_b) = first, second
    latency = selector_latency(selector_a)
    if selector_latency(selector_b) != latency:
        raise SelectorError(f"selectors {name_a!r} and {name_b!r} were trained for different latency models; "
                            "compare selectors trained for the same one")
    latency = dataset_latency(latency, test, "the held-out roots")  # the setting's tree sizes
    times = action_times(test.grid, latency)
    times_a, times_b = (policy_action_times(test.grid, latency, reads_draft=reads_draft(selector.feature_names))
                        for selector in (selector_a, selector_b))  # a selector pays the draft at chain:0
    allowed_b = [test.grid.index(action) for action in selector_b.grid.actions]
    static_b = best_static(train.efficiency, times, allowed_b)
    choice_a = selector_choice(selector_a, test)
    choice_b = selector_choice(selector_b, test)
    groups = np.asarray(test.group)
    return {
        "latency": latency.as_dict(),
        f"{name_a} selector / {name_b} best static ({test.grid.actions[static_b].name})": paired_ratio(
            test.efficiency, times_a, choice_a, test.efficiency, times,
            np.full(test.features.shape[0], static_b), groups, resamples=resamples, seed=seed),
        f"{name_a} selector / {name_b} selector": paired_ratio(
            test.efficiency, times_a, choice_a, test.efficiency, times_b, choice_b, groups, resamples=resamples,
            seed=seed),
    }


def evaluate_held_out(dataset, selectors: Mapping[str, object], *, sources: Mapping[str, str] | None = None,
                      source: str = "the dataset", compare: str | Sequence[str] | None = None,
                      resamples: int = DEFAULT_BOOTSTRAP, seed: int = 0) -> dict:
    """``evaluate`` of the named ``selectors`` on ``dataset``'s held-out roots (``verispec selector evaluate``): the
    split each recorded (``verispec.selector.split.held_out``; ``sources`` names each selector's file in its
    refusals, ``source`` the dataset), which must be one split for all of them; with ``compare`` (two selector
    names, "A,B" or a pair) the report's "comparison" is ``compare_selected`` of A against B. Checking each
    selector against the dataset (``check_dataset_fits``) is the caller's, as it loads them."""
    from verispec.errors import VerispecError
    from verispec.selector.split import held_out

    if not selectors:
        raise SelectorError("no selector to evaluate; give at least one --selector FILE")
    sources = sources or {}
    splits = {name: held_out(dataset, selector, name=sources.get(name, f"selector {name!r}"), source=source)
              for name, selector in selectors.items()}
    first = next(iter(splits.values()))
    for name, (train, _) in splits.items():
        if list(train.group) != list(first[0].group):
            raise VerispecError(f"selector {name!r} was trained on another split than {next(iter(splits))!r}; "
                                "evaluate selectors of one split together")
    train, test = first
    report = evaluate(test, train, selectors, resamples=resamples, seed=seed)
    if compare is not None:
        names = [part.strip() for part in compare.split(",")] if isinstance(compare, str) else list(compare)
        if len(names) != 2 or any(name not in selectors for name in names):
            raise VerispecError(f"--compare {compare!r}: give two selector names among {', '.join(selectors)}")
        report["comparison"] = compare_selected(test, (names[0], selectors[names[0]]),
                                                (names[1], selectors[names[1]]), train,
                                                resamples=resamples, seed=seed)
    return report


def label_quality(estimated: np.ndarray, reference: np.ndarray, reference_width: np.ndarray | None = None,
                  times: np.ndarray | None = None) -> dict:
    """Conditional-exact labels ``estimated`` [N, A] against exact or certified ``reference`` [N, A] at the same
    roots: bias (mean of estimated - reference), spread (its standard deviation), the largest certified width,
    and how often the estimated labels pick the reference's best action (by E, or by E / T given ``times``)."""
    if estimated.shape != reference.shape or estimated.size == 0:
        raise SelectorError(f"label sets of shapes {estimated.shape} and {reference.shape} do not cover the same "
                            "roots and actions")
    error = estimated - reference
    score = (lambda e: e / times) if times is not None else (lambda e: e)
    result = {"bias": float(error.mean()), "spread": float(error.std()),
              "max_abs_error": float(np.abs(error).max()),
              "rank_agreement": float(np.mean(np.argmax(score(estimated), 1) == np.argmax(score(reference), 1))),
              "roots": int(estimated.shape[0]), "actions": int(estimated.shape[1])}
    if reference_width is not None:
        result["max_reference_width"] = float(np.max(reference_width))
    result["regret_of_estimated_best"] = float(np.mean(
        1 - score(reference)[np.arange(len(reference)), np.argmax(score(estimated), 1)]
        / np.max(score(reference), 1)))
    return result


__all__ = ["DEFAULT_BOOTSTRAP", "GroupBootstrap", "best_static", "compare_selected", "crossfit_oracle",
           "crossfit_oracle_totals",
           "evaluate",
           "evaluate_held_out", "evaluate_policies", "label_quality", "oracle_choice", "paired_policy_ratios",
           "paired_ratio", "policy_totals", "selector_choice", "selector_latency", "verifier_actions"]
