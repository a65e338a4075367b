"""The verdict with each rule's own verification priced (issue 66, item 4; ``verispec.selector.verdict.priced_entry``,
``verispec.selector.verification_cost``): the priced throughputs and winner on hand-made labels and hand-made fits,
computed here as sums of E over sums of T + v, where pricing changes the winner (a zero-cost twin keeps the
forwards-only one); a regime whose device was not measured names no winner ("verification unpriced"); a cost file
that misses an action of the grid is refused on one line, naming the action (the complete file passes)."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("matplotlib")

from tests.selector.test_pair_selector_study import T07, T1, _refused, _write, pair_dataset
from verispec.latency import LatencyModel
from verispec.selector.actions import Action
from verispec.selector.dataset_file import Dataset
from verispec.selector.roots import sampling_text
from verispec.selector.study import Setting
from verispec.selector.verdict import UNPRICED, priced_entry, priced_regime, priced_sentence, task_key, verdict_table
from verispec.selector.verification_cost import FORMAT, VerificationCost, VerificationCostError

#: t_q = 1 ms at every width, t_p = 20 ms at every size: T(a) = L1 + L2 + 20 ms.
FLAT = LatencyModel(1.0, (1, 2), (20.0, 20.0), "ms", "a hand-made CPU")
SEEDS = (0, 1)
#: The hand-made labels: E[tau+1] of the actions the fits choose (every root alike), and their verification ms.
A1, A2, B1 = Action("specinfer", 1, 1, 1), Action("specinfer", 1, 1, 0), Action("traversal", 1, 1, 1)
LABELS = {A1: 3.0, A2: 2.6, B1: 2.9}
COSTS = {A1: 5.0, A2: 1.0, B1: 0.5}
OTHER_COST = 0.25


def _setting() -> Setting:
    """Two rules, specinfer and traversal, at 16 roots of 8 prompts; E = LABELS at the chosen actions, 1 elsewhere."""
    base = pair_dataset(T07, rules=("specinfer", "traversal"), prompts=8, seed=3)
    efficiency = np.ones_like(base.efficiency)  # [N, A]
    for action, value in LABELS.items():
        efficiency[:, base.grid.index(action)] = value
    fields = {name: getattr(base, name) for name in ("features", "stderr", "group", "setting", "context_length",
                                                     "label_method", "key")}
    data = Dataset(**fields, efficiency=efficiency, lower=efficiency, upper=efficiency, metadata=base.metadata,
                   per_sample=np.repeat(efficiency[:, None, :], 4, axis=1))
    return Setting(sampling_text(T07), "hand-made", data)


def _cost(setting: Setting, costs=COSTS, other=OTHER_COST, drop=None) -> VerificationCost:
    times = {action.name: costs.get(action, other) for action in setting.data.grid.actions if action != drop}
    return VerificationCost("cpu", "a hand-made CPU", 32, {setting.name: times}, {setting.name: {}}, source="hand")


def _fits(setting: Setting, prices: np.ndarray, priced_choice: Action) -> dict:
    """Hand-made fits: forwards only, specinfer chooses A1 and traversal B1 at every root; priced, specinfer
    chooses ``priced_choice`` and traversal B1 again (static policies as the selectors)."""
    grid, roots = setting.data.grid, len(setting.data)
    fits = {}
    for seed in SEEDS:
        for rule, forwards, priced in (("specinfer", A1, priced_choice), ("traversal", B1, B1)):
            for regime, action, vector in (("cpu", forwards, None), (priced_regime("cpu"), priced, prices)):
                choice = [grid.index(action)] * roots
                fits[task_key(setting, regime, rule, seed, vector)] = {"static": choice, "selector": choice}
    return fits


def test_pricing_the_verifier_changes_the_winner_on_hand_made_labels():
    setting = _setting()
    cost = _cost(setting)
    prices = cost.per_action(setting.data.grid, setting.name)
    fits = _fits(setting, prices, A2)
    forwards = verdict_table(setting, "cpu", FLAT, fits, SEEDS, resamples=200, seed=0)
    priced = priced_entry(setting, "cpu", FLAT, fits, SEEDS, forwards, cost, resamples=200, seed=0)
    # forwards only: T = depth + 20 ms; specinfer 3.0 / 22 beats traversal 2.9 / 22
    assert forwards["rules"]["specinfer"]["selector"]["throughput"] == pytest.approx(3.0 / 22, rel=1e-12)
    assert forwards["rules"]["traversal"]["selector"]["throughput"] == pytest.approx(2.9 / 22, rel=1e-12)
    assert forwards["best"] == "specinfer"
    # priced: specinfer refitted to A2, 2.6 / (21 + 1); traversal 2.9 / (22 + 0.5): traversal wins
    assert priced["verification"] == "priced" and priced["best"] == "traversal"
    rules = priced["rules"]
    assert rules["specinfer"]["selector"]["throughput"] == pytest.approx(2.6 / 22, rel=1e-12)
    assert rules["traversal"]["selector"]["throughput"] == pytest.approx(2.9 / 22.5, rel=1e-12)
    assert rules["specinfer"]["static"]["throughput"] == pytest.approx(2.6 / 22, rel=1e-12)
    # beside them: the forwards-only selector, and its own choices priced (A1 pays 5 ms a block)
    assert rules["specinfer"]["forwards_only"] == pytest.approx({"selector": 3.0 / 22, "selector_priced": 3.0 / 27},
                                                                rel=1e-12)
    assert rules["traversal"]["forwards_only"]["selector_priced"] == pytest.approx(2.9 / 22.5, rel=1e-12)
    assert rules["specinfer"]["verification_ms_per_block"] == pytest.approx(1.0)
    assert rules["traversal"]["verification_ms_per_block"] == pytest.approx(0.5)
    ratio = (2.9 / 22.5) / (2.6 / 22)  # every root and replicate alike: the interval is the point
    assert priced["versus"]["specinfer"]["ratio"] == pytest.approx(ratio, rel=1e-12)
    assert priced["versus"]["specinfer"]["ratio_ci"] == pytest.approx([ratio, ratio], rel=1e-9)
    assert priced["cost"]["device"] == "a hand-made CPU" and priced["unpriceable"] == []
    sentence = priced_sentence([{**forwards, "priced": priced}])
    assert f"{setting.name}, cpu: traversal (forwards only: specinfer" in sentence


def test_a_free_verifier_leaves_the_forwards_only_winner():
    """The negative control: the same fits with every verification at 0 ms price nothing, and specinfer (refitted to
    A1 as before) stays best at the forwards-only throughputs."""
    setting = _setting()
    cost = _cost(setting, costs={}, other=0.0)
    prices = cost.per_action(setting.data.grid, setting.name)
    fits = _fits(setting, prices, A1)
    forwards = verdict_table(setting, "cpu", FLAT, fits, SEEDS, resamples=200, seed=0)
    priced = priced_entry(setting, "cpu", FLAT, fits, SEEDS, forwards, cost, resamples=200, seed=0)
    assert priced["best"] == forwards["best"] == "specinfer"
    for rule in ("specinfer", "traversal"):
        assert priced["rules"][rule]["selector"]["throughput"] == pytest.approx(
            forwards["rules"][rule]["selector"]["throughput"], rel=1e-12)


def test_a_regime_without_a_measured_device_names_no_winner_by_price():
    setting = _setting()
    fits = _fits(setting, _cost(setting).per_action(setting.data.grid, setting.name), A2)
    forwards = verdict_table(setting, "h100", FLAT, {key.replace("| cpu |", "| h100 |"): value
                                                     for key, value in fits.items()}, SEEDS, resamples=200, seed=0)
    unpriced = priced_entry(setting, "h100", FLAT, {}, SEEDS, forwards, None, resamples=200, seed=0)
    assert unpriced == {"verification": UNPRICED, "best": None}
    sentence = priced_sentence([{**forwards, "priced": unpriced}])
    assert f"{setting.name}, h100: {UNPRICED}" in sentence and "specinfer" not in sentence


def test_a_cost_file_missing_an_action_is_refused_naming_it():
    setting = _setting()
    regimes = {"cpu": FLAT}
    _cost(setting).check_covers([setting], regimes)  # the complete file passes: the negative control
    with pytest.raises(VerificationCostError, match="misses the action 'traversal K=1 L1=1 L2=1'") as error:
        _cost(setting, drop=B1).check_covers([setting], regimes)
    assert "\n" not in str(error.value) and "experiments/verification_cost.py" in str(error.value)
    with pytest.raises(VerificationCostError, match="prices the regime 'cpu', which this verdict does not have"):
        _cost(setting).check_covers([setting], {"gpu-large": FLAT})


def _cost_file(path, datasets, drop: str | None = None) -> str:
    """A verification-cost file of every action of ``datasets`` (0.5 ms each), without the action named ``drop``."""
    settings = {}
    for data in datasets:
        actions = {action.name: 0.5 for action in data.grid.actions if action.name != drop}
        settings[sampling_text(data.samplings[0])] = {"sampling": data.samplings[0], "actions": actions}
    path.write_text(json.dumps({"format": FORMAT, "regime": "cpu", "device": "test", "vocab_size": 32, "unit": "ms",
                                "settings": settings}))
    return str(path)


def test_the_command_refuses_a_cost_file_missing_an_action(tmp_path, capsys):

    t07, t1 = pair_dataset(T07, prompts=4, seed=1), pair_dataset(T1, rules=("specinfer",), prompts=4, seed=2)
    paths = [_write(tmp_path, "t07.npz", t07), _write(tmp_path, "t1.npz", t1)]
    latency = tmp_path / "cpu.json"
    latency.write_text(json.dumps(FLAT.as_dict()))
    stem = ["selector", "verdict", "--dataset", paths[0], "--dataset", paths[1], "--latency", str(latency),
            "--replicates", "2", "--folds", "2", "--epochs", "1", "--out", str(tmp_path / "out")]
    missing = _cost_file(tmp_path / "short.json", [t07, t1], drop="specinfer K=2 L1=1 L2=1")
    _refused(stem + ["--verification-cost", missing], capsys, "misses the action 'specinfer K=2 L1=1 L2=1'")
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_the_command_prices_the_cpu_regime_and_leaves_the_others_unpriced(tmp_path):
    """End to end (a few seconds): the priced fits are made and stored, each priced throughput recomputes from them as
    sum E / sum (T + v), and gpu-large and h100 say "verification unpriced"."""
    from verispec.cli import main
    from verispec.selector.actions import policy_action_times

    t07, t1 = pair_dataset(T07, prompts=6, seed=1), pair_dataset(T1, rules=("specinfer",), prompts=6, seed=2)
    paths = [_write(tmp_path, "t07.npz", t07), _write(tmp_path, "t1.npz", t1)]
    latency = tmp_path / "cpu.json"
    latency.write_text(json.dumps(FLAT.as_dict()))
    out = tmp_path / "out"
    assert main(["selector", "verdict", "--dataset", paths[0], "--dataset", paths[1], "--latency", str(latency),
                 "--replicates", "2", "--folds", "2", "--epochs", "2", "--bootstrap", "100", "--out", str(out),
                 "--verification-cost", _cost_file(tmp_path / "cost.json", [t07, t1])]) == 0
    result = json.loads((out / "verdict.json").read_text())
    rows = {row["key"]: row for row in json.loads((out / "verdict.rows.json").read_text())["rows"]}
    assert len(rows) == 2 * (3 * 4 + 4)  # replicates x (regimes x rules + the priced cpu regime's rules)
    for table in result["tables"]:
        if table["regime"] != "cpu":
            assert table["priced"] == {"verification": UNPRICED, "best": None}
            continue
        data = t07 if table["setting"].startswith("T=0.7") else t1
        times = policy_action_times(data.grid, FLAT, reads_draft=True) + 0.5  # [A]
        for rule, entry in table["priced"]["rules"].items():
            rates = []
            for seed in SEEDS:
                key = next(key for key in rows if key.startswith(f"seed {seed} | {table['setting']} | "
                                                                 f"{priced_regime('cpu')} | {rule} |"))
                choice = np.array(rows[key]["choices"]["selector"])
                rates.append(data.efficiency[np.arange(len(choice)), choice].sum() / times[choice].sum())
            assert entry["selector"]["throughput"] == pytest.approx(np.mean(rates), rel=1e-12)
            assert entry["verification_ms_per_block"] == pytest.approx(0.5)
    assert UNPRICED in (out / "verdict.md").read_text() and result["verification_cost"]["cpu"]["device"] == "test"
