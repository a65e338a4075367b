"""The delay selector's study on a pair's stored datasets (``verispec.selector.study``, ``verispec selector
study``, ``verispec report --selector-dataset``): the split is by prompt and one for every rule, the static and
oracle rows and the DDTE ratios recompute by hand from the labels and each regime's latency formula, and bad input
is refused on one line. The datasets are pair-shaped (conditional-exact labels from sampled trees, prompts as
groups, one sampling setting each) and built here from a seeded generator."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from verispec.cli import main
from verispec.selector.actions import ActionGrid
from verispec.selector.dataset_file import DATASET_FORMAT, DATASET_VERSION, Dataset
from verispec.selector.features import SCALAR_FEATURES

pytest.importorskip("torch")
pytest.importorskip("matplotlib")

RULES = ("specinfer", "traversal", "traversal-iid")
T07 = {"temperature": 0.7, "top_k": 20, "top_p": 0.8}
T1 = {"temperature": 1.0, "top_k": None, "top_p": None}


def pair_dataset(sampling: dict, *, rules=RULES, prompts: int = 12, roots: int = 2, trees: int = 4, seed: int = 0,
                 pair: str = "tiny", ks=(1, 2)) -> Dataset:
    """``prompts`` prompts of ``roots`` roots each, labelled for K in ``ks``, L1 and L2 in 0..1 with ``rules``:
    E of each sampled tree is 1 + depth x (the root's acceptance x noise), chain:0 exactly 1."""
    grid = ActionGrid(ks, (0, 1), (0, 1), tuple(rules))
    rng = np.random.default_rng(seed)
    count, actions = prompts * roots, len(grid)
    depth = np.array([action.depth for action in grid.actions], dtype=float)  # [A]
    accept = rng.uniform(0.1, 0.9, size=(count, 1, 1))  # [N, 1, 1]
    per_sample = 1 + depth * accept * rng.uniform(0.4, 1.0, size=(count, trees, actions))  # [N, S, A]
    efficiency = per_sample.mean(1)  # [N, A]
    features = rng.normal(size=(count, len(SCALAR_FEATURES)))  # [N, F]
    features[:, SCALAR_FEATURES.index("l1_p_q_prev")] = 2 * (1 - accept[:, 0, 0])
    metadata = {"format": DATASET_FORMAT, "version": DATASET_VERSION, "grid": grid.as_dict(),
                "actions": grid.action_names(), "feature_names": list(SCALAR_FEATURES), "pair": pair, "tokenizer": None,
                "vocab_size": 32, "samplings": [sampling], "method": "conditional", "samples": trees, "seed": seed}
    zeros = np.zeros((count, actions))
    label = f"T{sampling['temperature']:g}"
    return Dataset(features=features, efficiency=efficiency, stderr=zeros, lower=efficiency, upper=efficiency,
                   group=np.repeat([f"HumanEval/{i}" for i in range(prompts)], roots), setting=np.zeros(count, int),
                   context_length=np.full(count, 16), label_method=np.full(count, "conditional"),
                   key=[f"{label}-{i}" for i in range(count)], metadata=metadata, per_sample=per_sample)


@pytest.fixture(scope="module")
def study():
    """The study of two settings (T=0.7 with three rules, T=1 with two) in the gpu-large and h100 regimes."""
    from verispec.selector.regimes import regime_models
    from verispec.selector.study import run_study

    datasets = [("t07.npz", pair_dataset(T07, seed=1)), ("t1.npz", pair_dataset(T1, rules=RULES[:2], seed=2))]
    return datasets, run_study(datasets, regime_models(None), seed=3, epochs=3, test_fraction=0.25, resamples=200)


def _times(grid: ActionGrid, regime: str) -> np.ndarray:
    """T(a) by each regime's formula: gpu-large (L1 + L2) + 20; h100 in ms, (L1 + L2) 3.3 + 5.4 r(n) with n = 1 + L1
    + K L2 tree nodes and r the H100's t_p(n) / t_p(1) as docs/guides/selector.md states it, linear between its
    sizes."""
    if regime == "gpu-large":
        return np.array([a.l1 + a.l2 + 20.0 for a in grid.actions])
    sizes, ratios = [1, 2, 4, 8, 16, 32, 64], [1.0, 1.149, 1.171, 1.206, 1.242, 1.276, 1.351]
    return np.array([(a.l1 + a.l2) * 3.3 + 5.4 * np.interp(1 + a.l1 + a.k * a.l2, sizes, ratios)
                     for a in grid.actions])


def test_the_split_is_by_prompt_and_the_same_for_every_setting_regime_and_rule(study):
    datasets, result = study
    groups = sorted({f"HumanEval/{i}" for i in range(12)})
    order = np.random.default_rng(3).permutation(len(groups))
    held = sorted(groups[i] for i in order[:3])  # round(0.25 x 12) = 3
    assert result["split"]["held_out"] == held and result["split"]["held_out_prompts"] == 3
    # one dataset of one setting: the split of 'selector train --test-fraction 0.25 --split-seed 3'
    assert sorted(set(datasets[0][1].split(0.25, 3)[1].group.tolist())) == held
    for setting in result["settings"].values():
        assert (setting["held_out_prompts"], setting["held_out_roots"], setting["train_roots"]) == (3, 6, 18)
    assert len(result["tables"]) == 4
    for table in result["tables"]:
        assert (table["held_out_prompts"], table["held_out_roots"]) == (3, 6)


def test_held_out_count_keeps_64_prompts_from_256():
    from verispec.selector.split import held_out_count

    assert held_out_count(256, 0.1) == 64 and held_out_count(1000, 0.1) == 100
    assert held_out_count(255, 0.1) == 26 and held_out_count(100, 0.25) == 25
    assert held_out_count(2, 0.9) == 1 and held_out_count(2, 0.01) == 1


def test_static_and_oracle_rows_recompute_from_the_labels(study):
    datasets, result = study
    held = result["split"]["held_out"]
    for (_, data), setting in zip(datasets, ("T=0.7 top-k=20 top-p=0.8", "T=1")):
        rows = np.isin(data.group, held)
        for table in (t for t in result["tables"] if t["setting"] == setting):
            times = _times(data.grid, table["regime"])
            for rule, entry in table["rules"].items():
                columns = [i for i, action in enumerate(data.grid.actions) if action.verifier == rule]
                static = columns[int(np.argmax(data.efficiency[~rows][:, columns].mean(0) / times[columns]))]
                test = data.efficiency[rows]  # [6, A]
                row = entry["policies"]["static"]
                assert row["action"] == data.grid.actions[static].name
                assert row["tokens_per_target_call"] == pytest.approx(test[:, static].mean(), abs=1e-12)
                assert row["throughput"] == pytest.approx(test[:, static].sum() / (6 * times[static]), abs=1e-12)
                best = [max(columns, key=lambda a: test[b, a] / times[a]) for b in range(6)]
                oracle = sum(test[b, best[b]] for b in range(6)) / sum(times[a] for a in best)
                assert entry["policies"]["oracle"]["throughput"] == pytest.approx(oracle, abs=1e-12)
                assert entry["policies"]["oracle"]["biased_upward"] is True
                tokens = time = 0.0  # cross-fitted: chosen on trees 1-2, scored on 3-4, and the other way round
                for b in np.flatnonzero(rows):
                    trees = data.per_sample[b]  # [4, A]
                    for choose, score in ((slice(0, 2), slice(2, 4)), (slice(2, 4), slice(0, 2))):
                        pick = max(columns, key=lambda a: trees[choose, a].mean() / times[a])
                        tokens += trees[score, pick].mean() / 2
                        time += times[pick] / 2
                crossfit = entry["policies"]["oracle_crossfit"]
                assert crossfit["throughput"] == pytest.approx(tokens / time, abs=1e-12)
                mlp = entry["policies"]["mlp"]
                assert entry["gain_over_static"]["estimate"] == pytest.approx(
                    mlp["throughput"] / row["throughput"] - 1, abs=1e-12)
                assert entry["regret_to_crossfit_oracle"]["estimate"] == pytest.approx(
                    1 - mlp["throughput"] / crossfit["throughput"], abs=1e-12)
                low, high = entry["versus_baselines"]["linear"]["ratio_ci"]
                verdict = "better" if low > 1 else "worse" if high < 1 else "not shown"
                assert entry["versus_baselines"]["linear"]["verdict"] == verdict


def test_the_ddte_ratios_are_those_of_the_rows(study):
    datasets, result = study
    from verispec.selector.study import TARGET_HALF_WIDTH

    for table in result["tables"]:
        rules = table["rules"]
        expected = [(rival, policy) for rival in RULES[1:] if rival in rules for policy in ("best static", "selector")]
        assert [(row["rival"], row["rival_policy"]) for row in table["ddte"]] == expected
        assert table["ddte_rules_missing"] == [rule for rule in RULES if rule not in rules]
        lead = rules["specinfer"]["policies"]["mlp"]["throughput"]
        for row in table["ddte"]:
            key = "static" if row["rival_policy"] == "best static" else "mlp"
            assert row["ratio"] == pytest.approx(lead / rules[row["rival"]]["policies"][key]["throughput"], abs=1e-12)
            if key == "static":
                assert row["rival_action"] == rules[row["rival"]]["policies"]["static"]["action"]
            low, high = row["ratio_ci"]
            assert row["half_width"] == pytest.approx((high - low) / 2, abs=1e-15)
            needed = math.ceil(3 * (row["half_width"] / TARGET_HALF_WIDTH) ** 2 - 1e-9)
            assert row["prompts_for_target"] == (needed if row["half_width"] > TARGET_HALF_WIDTH else None)


def test_prompts_for_a_half_width_of_two_percent():
    from verispec.selector.study import prompts_for_half_width

    # n (hw / 0.02)^2: 64 x 2^2 = 256 exactly; 64 x 1.5^2 = 144; 64 x 1.05^2 = 70.56 -> 71
    assert prompts_for_half_width(64, 0.04) == 256
    assert prompts_for_half_width(64, 0.03) == 144
    assert prompts_for_half_width(64, 0.021) == 71
    assert prompts_for_half_width(64, 0.02) is None and prompts_for_half_width(64, 0.001) is None


def test_no_draft_is_counted(study):
    _, result = study
    for table in result["tables"]:
        for entry in table["rules"].values():
            row = entry["policies"]["mlp"]
            assert row["no_draft_fraction"] == pytest.approx(row["no_draft_roots"] / 6, abs=1e-15)
            assert entry["policies"]["static"]["no_draft"] == (
                entry["policies"]["static"]["action"].endswith("L1=0 L2=0"))


def _write(tmp_path, name: str, data: Dataset) -> str:
    path = tmp_path / name
    data.save(path)
    return str(path)


def _refused(argv, capsys, needle: str) -> None:
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and needle in err, err


def test_the_study_command_writes_its_files_and_refuses_bad_input(tmp_path, capsys):
    from verispec.latency import LatencyModel
    from verispec.selector.regimes import REGIME_TITLES

    t07 = _write(tmp_path, "t07.npz", pair_dataset(T07, prompts=8, seed=1))
    t1 = _write(tmp_path, "t1.npz", pair_dataset(T1, rules=RULES[:2], prompts=8, seed=2))
    latency = tmp_path / "cpu.json"
    latency.write_text(json.dumps(LatencyModel(30.0, (1, 8, 32), (60.0, 90.0, 200.0), "ms", "test CPU").as_dict()))
    out = tmp_path / "study"
    argv = ["selector", "study", "--dataset", t07, "--dataset", t1, "--latency", str(latency), "--out", str(out),
            "--epochs", "2", "--bootstrap", "100"]
    assert main(argv) == 0
    result = json.loads((out / "pair_selector.json").read_text())
    assert [(t["setting"], t["regime"]) for t in result["tables"]] == [
        (s, r) for s in ("T=0.7 top-k=20 top-p=0.8", "T=1") for r in ("gpu-large", "cpu", "h100")]
    text = (out / "pair_selector.md").read_text()
    for title in REGIME_TITLES.values():  # every table titled with its regime: 3 tables x 2 settings (2 without DDTE)
        assert text.count(f"**Policies: {title};") == 2 and text.count(f"**DDTE comparisons: {title};") == 2
    assert "No draft (chain:0) here" in text
    assert (out / "pair_selector.png").read_bytes().startswith(b"\x89PNG")
    other_pair = _write(tmp_path, "other.npz", pair_dataset(T1, pair="other", prompts=4))
    other_grid = _write(tmp_path, "grid.npz", pair_dataset(T1, ks=(1,), prompts=4))
    one_prompt = _write(tmp_path, "one.npz", pair_dataset(T1, prompts=1))
    base = ["selector", "study", "--out", str(tmp_path / "refused"), "--dataset", t07]
    _refused(base + ["--dataset", other_pair], capsys, "of the pair 'other'")
    _refused(base + ["--pair", "qwen-coder"], capsys, "not of --pair qwen-coder")
    _refused(base + ["--dataset", other_grid], capsys, "one tree grid")
    _refused(base + ["--dataset", t07], capsys, "in both")
    _refused(base[:-1] + [one_prompt], capsys, "needs at least 2")
    _refused(base + ["--latency", str(tmp_path / "missing.json")], capsys, "missing.json")
    _refused(base + ["--dataset", str(tmp_path / "missing.npz")], capsys, "does not exist")
    assert not (tmp_path / "refused").exists()


def test_the_study_command_pins_torchs_threads(tmp_path, capsys):
    """--threads N sets torch's threads for the training (two studies on one box must not fight for every core);
    0 is refused in one line before anything runs."""
    import torch

    import verispec.selector.study as study

    data = _write(tmp_path, "t1.npz", pair_dataset(T1, rules=RULES[:1], prompts=4, seed=3))
    before, seen = torch.get_num_threads(), []
    real_table = study.regime_table

    def table_seeing_threads(*args, **kwargs):  # the training runs inside: the threads it runs under
        seen.append(torch.get_num_threads())
        return real_table(*args, **kwargs)

    try:
        torch.set_num_threads(2)  # not the value asked for, whatever an earlier test in this process left
        with pytest.MonkeyPatch.context() as patched:
            patched.setattr(study, "regime_table", table_seeing_threads)
            assert main(["selector", "study", "--dataset", data, "--out", str(tmp_path / "study"), "--epochs", "2",
                         "--bootstrap", "100", "--threads", "1"]) == 0
        assert seen and set(seen) == {1}  # pinned while it trains
        assert torch.get_num_threads() == 2  # and given back after
    finally:
        torch.set_num_threads(before)
    _refused(["selector", "study", "--dataset", data, "--out", str(tmp_path / "refused"), "--threads", "0"], capsys,
             "--threads")
    assert not (tmp_path / "refused").exists()


def test_the_report_adds_the_section_without_the_pair(tmp_path, monkeypatch, capsys):
    """``verispec report --pair tiny --selector-dataset F``, tiny not an installed pair: study 6 says why it did not
    run and section 9 runs from the dataset (the other studies stubbed out: they are the report's own tests)."""
    import verispec.report
    import verispec.report.pair_section as pair_section

    for study in ("verifiers", "depth", "delay", "paths", "orderings", "selector", "typical"):
        monkeypatch.setattr(getattr(verispec.report, study), "run", lambda report: None)
    monkeypatch.setattr(pair_section, "QUICK_EPOCHS", 2)
    data = _write(tmp_path, "t07.npz", pair_dataset(T07, prompts=6, seed=4))
    out = tmp_path / "report"
    assert main(["report", "--quick", "--backend", "serial", "--out", str(out), "--pair", "tiny",
                 "--selector-dataset", data, "--selector-folds", "2"]) == 0
    text = (out / "report.md").read_text()
    assert "## 9. Delay selector on a model pair" in text and "### T=0.7 top-k=20 top-p=0.8: (a)" in text
    assert "6 held-out prompts (12 roots, each in one of 2 folds)" in text
    assert "## 6. Derived and certified problems from a real pair\n\nNot run: " in text
    assert json.loads((out / "pair_selector.json").read_text())["pair"] == "tiny"
    _refused(["report", "--quick", "--out", str(tmp_path / "r2"), "--latency", str(tmp_path / "x.json")], capsys,
             "goes with --selector-dataset")
    _refused(["report", "--quick", "--out", str(tmp_path / "r3"), "--pair", "no-such-pair"], capsys, "no-such-pair")
    _refused(["report", "--quick", "--out", str(tmp_path / "r4"), "--pair", "no-such-pair", "--selector-dataset", data],
             capsys, "not of --pair no-such-pair")


def test_paired_policy_ratios_agree_with_paired_ratio():
    """The many-pair bootstrap gives paired_ratio's numbers on the same resamples, and a policy over itself is
    exactly 1."""
    from verispec.selector.evaluate import paired_policy_ratios, paired_ratio

    rng = np.random.default_rng(5)
    efficiency, times = 1 + rng.uniform(0, 2, size=(30, 4)), np.array([1.0, 2.0, 3.0, 4.0])  # [N, A], [A]
    groups = np.repeat(np.arange(10), 3)
    choices = {"a": rng.integers(0, 4, 30), "b": rng.integers(0, 4, 30)}
    ratios = paired_policy_ratios(efficiency, times, choices, groups, [("a", "b"), ("a", "a")], resamples=300, seed=7)
    single = paired_ratio(efficiency, times, choices["a"], efficiency, times, choices["b"], groups, resamples=300,
                          seed=7)
    assert ratios[("a", "b")]["ratio"] == pytest.approx(single["ratio"], abs=1e-12)
    assert ratios[("a", "b")]["ratio_ci"] == pytest.approx(single["ratio_ci"], abs=1e-12)
    assert ratios[("a", "a")] == {"ratio": 1.0, "ratio_ci": [1.0, 1.0]}


def test_cross_fitting_holds_every_prompt_out_once_with_policies_fitted_on_the_other_folds(monkeypatch, tmp_path,
                                                                                           capsys):
    """``folds=3``: the shuffled prompts cut into 3 folds, each held out once; every selector is fitted on roots of
    the other folds only and chooses for its own fold's roots; the static row recomputes by hand from a per-fold
    static action; the command and the report pass ``--folds`` / ``--selector-folds`` through and refuse more folds
    than prompts on one line."""
    import verispec.selector.study as selector_study
    from verispec.selector.regimes import regime_models

    data = pair_dataset(T07, prompts=12, seed=5)
    seen = []
    original = selector_study.rule_choices

    def recording(train, test, verifier, latency, **options):
        seen.append((set(train.group.tolist()), set(test.group.tolist())))
        return original(train, test, verifier, latency, **options)

    monkeypatch.setattr(selector_study, "rule_choices", recording)
    regimes = {"gpu-large": regime_models(None)["gpu-large"]}
    result = selector_study.run_study([("t07.npz", data)], regimes, seed=3, epochs=2, resamples=200, folds=3)
    groups = sorted({f"HumanEval/{i}" for i in range(12)})
    order = np.random.default_rng(3).permutation(12)
    folds = [sorted(groups[i] for i in order[start:start + 4]) for start in (0, 4, 8)]
    assert result["split"]["folds"] == folds and result["split"]["held_out_prompts"] == 12
    assert len(seen) == 3 * len(RULES)
    for train_groups, test_groups in seen:  # a fold's policies never saw its prompts
        assert sorted(test_groups) in folds and train_groups == set(groups) - test_groups
    (table,) = result["tables"]
    assert (table["held_out_prompts"], table["held_out_roots"], table["folds"]) == (12, 24, 3)
    times = _times(data.grid, "gpu-large")
    for rule, entry in table["rules"].items():
        columns = [i for i, action in enumerate(data.grid.actions) if action.verifier == rule]
        tokens = time = 0.0
        names = set()
        for fold in folds:
            rows = np.isin(data.group, fold)
            static = columns[int(np.argmax(data.efficiency[~rows][:, columns].mean(0) / times[columns]))]
            names.add(data.grid.actions[static].name)
            tokens += data.efficiency[rows, static].sum()
            time += rows.sum() * times[static]
        row = entry["policies"]["static"]
        assert row["throughput"] == pytest.approx(tokens / time, abs=1e-12)
        assert all(name in row["action"] for name in names)
    assert "each in one of 3 folds" in pair_selector_markdown(result)
    path = _write(tmp_path, "t07.npz", data)
    out = tmp_path / "study"
    assert main(["selector", "study", "--dataset", path, "--out", str(out), "--epochs", "2", "--bootstrap", "100",
                 "--folds", "4"]) == 0
    assert json.loads((out / "pair_selector.json").read_text())["split"]["held_out_prompts"] == 12
    _refused(["selector", "study", "--dataset", path, "--out", str(tmp_path / "r"), "--folds", "13"], capsys,
             "13 folds need at least 13 prompts")


def test_a_selector_that_drafts_nothing_still_pays_the_draft_step(monkeypatch):
    """Selectors forced to chain:0 at every root: throughput 1 / (t_p + t_q) under (a) (E = 1 exactly there), the
    draft step the features cost included; the static chain:0 would be 1 / t_p, and the DDTE ratios price each
    side's selector the same way."""
    import verispec.selector.study as selector_study
    from verispec.selector.regimes import regime_models

    data = pair_dataset(T07, prompts=12, seed=6)
    no_draft = [i for i, action in enumerate(data.grid.actions) if action.depth == 0]

    def undrafted(train, test, verifier, latency, **options):
        index = next(i for i in no_draft if data.grid.actions[i].verifier == verifier)
        return {kind: np.full(len(test), index) for kind in selector_study.KINDS}

    monkeypatch.setattr(selector_study, "rule_choices", undrafted)
    regimes = {"gpu-large": regime_models(None)["gpu-large"]}
    result = selector_study.run_study([("t07.npz", data)], regimes, seed=3, epochs=2, resamples=200)
    (table,) = result["tables"]
    for entry in table["rules"].values():
        for kind in selector_study.KINDS:
            assert entry["policies"][kind]["throughput"] == pytest.approx(1 / 21, abs=1e-12)
    ratios = {(row["rival"], row["rival_policy"]): row["ratio"] for row in table["ddte"]}
    assert ratios[("traversal", "selector")] == pytest.approx(1.0, abs=1e-12)


def test_the_study_trains_at_its_threads_and_restores_torchs(monkeypatch, tmp_path, capsys):
    """The study's training runs at ``threads`` torch threads (1 by default: ``STUDY_THREADS``, the command's
    default too) and torch's own setting is back afterwards; a thread count out of range is refused on one line."""
    import torch

    import verispec.selector.study as selector_study
    from verispec.cli.parser import build_parser
    from verispec.errors import VerispecError
    from verispec.guard.limits import STUDY_THREADS
    from verispec.selector.regimes import regime_models

    data, seen = pair_dataset(T07, prompts=6, seed=7), []
    monkeypatch.setattr(selector_study, "rule_choices", lambda train, test, *args, **options: seen.append(
        torch.get_num_threads()) or {kind: np.zeros(len(test), dtype=np.int64) for kind in selector_study.KINDS})
    regimes = {"gpu-large": regime_models(None)["gpu-large"]}
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        selector_study.run_study([("t07.npz", data)], regimes, seed=3, epochs=2, resamples=200)
        assert seen and set(seen) == {STUDY_THREADS} == {1} and torch.get_num_threads() == 2
        seen.clear()
        selector_study.run_study([("t07.npz", data)], regimes, seed=3, epochs=2, resamples=200, threads=2)
        assert set(seen) == {2}
    finally:
        torch.set_num_threads(before)
    for bad in (0, True, 1.5):
        with pytest.raises(VerispecError, match="torch threads must be an integer"):
            selector_study.run_study([("t07.npz", data)], regimes, seed=3, epochs=2, resamples=200, threads=bad)
    assert build_parser().parse_args(["selector", "study", "--dataset", "d.npz", "--out", "o"]).threads == 1


def pair_selector_markdown(result: dict) -> str:
    from verispec.report.pair_section import study_markdown

    return study_markdown(result, "study")
