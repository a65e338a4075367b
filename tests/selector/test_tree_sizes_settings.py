"""Tree sizes per sampling setting (issue 66, items 3-4): a latency model's sizes of decoding's trees are filed under
the setting they were sampled at (``LatencyModel.tree_sizes``), and every consumer prices a setting's actions with
that setting's sizes (``LatencyModel.for_setting``).

* each setting's expected block time computed here by hand from its sizes, through the model, the verdict's table
  (throughput = sum E / sum T over hand-made fits) and ``selector train`` (the times it trains with);
* a model with sizes for other settings only refused on one line naming the setting and experiments/tree_sizes.py,
  in the library, the study's and verdict's checks and the CLI (exit 2); negative control: the same call with the
  right setting passes;
* an old file (plain ``tree_sizes`` and ``tree_sizes_source``) loads, writes back as it was, prices as before when not
  bound, and is refused when bound until its setting is named; the committed T = 0.7 file names its setting;
* adding a second setting keeps the first's sizes unchanged (the same setting's are replaced: the broken twin).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from verispec.latency import UNKNOWN_SETTING, LatencyError, LatencyModel
from verispec.simulator import parse_tree

T07_NAME, T1_NAME = "T=0.7 top-k=20 top-p=0.8", "T=1"
#: t_q(1) = 60, t_q(2) = 66; t_p(1..5) = 170, 175, 240, 245, 410 (ms)
BASE = LatencyModel(60.0, (1, 2, 3, 4, 5), (170.0, 175.0, 240.0, 245.0, 410.0), "ms", "by hand",
                    draft_sizes=(1, 2), draft_times=(60.0, 66.0))
#: iid:2,1 (one draft forward of 1 token, at most 3 nodes): at T = 0.7 three of four trees merged their two drafts
#: (2 nodes), at T = 1 one of four did.
T07_TREES = {"iid:2,1": [[3, 2, [1]], [1, 3, [1]]]}
T1_TREES = {"iid:2,1": [[1, 2, [1]], [3, 3, [1]]]}
T07_TIME = (3 * (60 + 175) + 1 * (60 + 240)) / 4  # 251.25
T1_TIME = (1 * (60 + 175) + 3 * (60 + 240)) / 4  # 283.75
MOST_TIME = 60 + 240  # no sizes: the most nodes (3)
ROOT = Path(__file__).resolve().parents[2]


def _sized(*settings: str) -> LatencyModel:
    model = BASE
    for name in settings:
        model = model.with_tree_sizes(name, T07_TREES if name == T07_NAME else T1_TREES, f"sampled at {name}")
    return model


def test_each_setting_prices_its_trees_at_its_own_sizes():
    model = LatencyModel.from_dict(json.loads(json.dumps(_sized(T07_NAME, T1_NAME).as_dict())))
    tree = parse_tree("iid:2,1")
    assert model.for_setting(T07_NAME).drafter_time(tree) == pytest.approx(T07_TIME, rel=1e-12)
    assert model.for_setting(T1_NAME).drafter_time(tree) == pytest.approx(T1_TIME, rel=1e-12)
    assert T07_TIME != T1_TIME != MOST_TIME  # the three prices differ, so each check above tells them apart
    # a tree without sizes keeps its maximum at every setting; a model without sizes ignores the setting
    assert model.for_setting(T1_NAME).drafter_time(parse_tree("iid:3,1")) == 60 + 245
    assert BASE.for_setting(T1_NAME) is BASE and BASE.drafter_time(tree) == MOST_TIME
    # not bound: one setting's sizes price as before settings were named; two settings' are a guess, refused
    assert _sized(T07_NAME).drafter_time(tree) == pytest.approx(T07_TIME, rel=1e-12)
    with pytest.raises(LatencyError, match="say which sampling setting") as error:
        model.drafter_time(tree)
    assert "\n" not in str(error.value)


def test_a_setting_without_sizes_is_refused_on_one_line_naming_the_fix():
    model = _sized(T07_NAME)
    with pytest.raises(LatencyError) as error:
        model.for_setting(T1_NAME)
    message = str(error.value)
    assert "\n" not in message and "not for T=1" in message and "experiments/tree_sizes.py" in message
    assert T07_NAME in message
    # negative control: the setting it has sizes for binds and prices
    assert model.for_setting(T07_NAME).drafter_time(parse_tree("iid:2,1")) == pytest.approx(T07_TIME, rel=1e-12)


def test_an_old_file_loads_prices_as_before_and_is_refused_once_bound():
    old = {**BASE.as_dict(), "tree_sizes": T07_TREES, "tree_sizes_source": "64 roots of qwen-t07-m64.npz"}
    model = LatencyModel.from_dict(old)
    assert model.sized_settings == (UNKNOWN_SETTING,) and model.sizes_source(UNKNOWN_SETTING).startswith("64 roots")
    assert model.as_dict() == old  # written back as it was
    assert model.drafter_time(parse_tree("iid:2,1")) == pytest.approx(T07_TIME, rel=1e-12)
    with pytest.raises(LatencyError, match="do not name the sampling setting") as error:
        model.for_setting(T07_NAME)
    assert "\n" not in str(error.value) and "experiments/tree_sizes.py" in str(error.value)
    with pytest.raises(LatencyError, match="do not name their sampling setting"):
        model.with_tree_sizes(T1_NAME, T1_TREES, "")  # could be T=1's: not merged
    named = model.naming_unknown(T07_NAME)  # what the committed file's rewrite did
    assert named.for_setting(T07_NAME).drafter_time(parse_tree("iid:2,1")) == pytest.approx(T07_TIME, rel=1e-12)
    assert named.as_dict()["tree_sizes"] == {T07_NAME: {"source": old["tree_sizes_source"], "trees": T07_TREES}}


def test_the_committed_t07_model_names_its_setting():
    model = LatencyModel.load(ROOT / "data" / "latency" / "latency-cpu-small-batch-t07.json")
    assert model.sized_settings == (T07_NAME,)
    assert "qwen-t07-m64.npz" in model.sizes_source(T07_NAME)
    with pytest.raises(LatencyError, match="not for T=1"):
        model.for_setting(T1_NAME)


def test_adding_a_second_setting_keeps_the_firsts_sizes():
    first = _sized(T07_NAME)
    both = first.with_tree_sizes(T1_NAME, T1_TREES, "sampled at T=1")
    assert both.sized_settings == (T07_NAME, T1_NAME)
    assert both.as_dict()["tree_sizes"][T07_NAME] == first.as_dict()["tree_sizes"][T07_NAME]
    assert both.for_setting(T07_NAME).drafter_time(parse_tree("iid:2,1")) == pytest.approx(T07_TIME, rel=1e-12)
    # the broken twin: sizes added for the SAME setting replace it (so "kept" above is not vacuous)
    again = first.with_tree_sizes(T07_NAME, T1_TREES, "resampled")
    assert again.sized_settings == (T07_NAME,) and again.sizes_source(T07_NAME) == "resampled"
    assert again.for_setting(T07_NAME).drafter_time(parse_tree("iid:2,1")) == pytest.approx(T1_TIME, rel=1e-12)


@pytest.mark.parametrize("data,message", [
    ({"T=1": {"source": "", "trees": {}}}, "list no tree"),
    ({"T=1": {"source": ""}}, "not a latency model"),
    ({"T=1": {"source": "", "trees": {"iid:2,1": [[0, 2, [1]]]}}}, "bad entry"),
])
def test_malformed_setting_sizes_are_refused_on_one_line(data, message):
    with pytest.raises(LatencyError, match=message) as error:
        LatencyModel.from_dict({**BASE.as_dict(), "tree_sizes": data})
    assert "\n" not in str(error.value)


# -- the consumers ------------------------------------------------------------------------------------------------


def _t1_setting():
    pytest.importorskip("torch")
    pytest.importorskip("matplotlib")
    from tests.selector.test_pair_selector_study import T1, pair_dataset
    from verispec.selector.roots import sampling_text
    from verispec.selector.study import Setting

    data = pair_dataset(T1, rules=("specinfer", "traversal"), prompts=4, seed=5)
    assert sampling_text(data.samplings[0]) == T1_NAME
    return Setting(T1_NAME, "t1.npz", data)


def test_the_verdict_prices_a_setting_at_its_sizes_and_refuses_one_it_has_none_for():
    from verispec.selector.actions import Action
    from verispec.selector.study import check_setting_prices
    from verispec.selector.verdict import task_key, verdict_table, verdict_tasks

    setting = _t1_setting()
    data = setting.data
    # specinfer's iid:2,1 has sizes; traversal's iid:1,1 has none (its most: 2 nodes, t_q + t_p(2) = 235 ms)
    columns = {"specinfer": data.grid.index(Action("specinfer", 2, 0, 1)),
               "traversal": data.grid.index(Action("traversal", 1, 0, 1))}
    by_hand_times = {"specinfer": T1_TIME, "traversal": 60 + 175}
    fits = {task_key(setting, "cpu", rule, seed): {"static": [column] * len(data), "selector": [column] * len(data)}
            for seed in (0, 1) for rule, column in columns.items()}
    table = verdict_table(setting, "cpu", _sized(T07_NAME, T1_NAME), fits, (0, 1), resamples=100, seed=0)
    for rule, column in columns.items():
        by_hand = data.efficiency[:, column].sum() / (len(data) * by_hand_times[rule])
        assert table["rules"][rule]["static"]["throughput"] == pytest.approx(by_hand, rel=1e-12)
        assert table["rules"][rule]["selector"]["throughput"] == pytest.approx(by_hand, rel=1e-12)
    # negative controls: T = 0.7's sizes only are refused, before any fit (verdict_tasks) and in the table
    with pytest.raises(LatencyError, match="not for T=1"):
        verdict_table(setting, "cpu", _sized(T07_NAME), fits, (0, 1), resamples=100, seed=0)
    with pytest.raises(LatencyError, match="the cpu regime at T=1") as error:
        verdict_tasks([setting], {"cpu": _sized(T07_NAME)}, (0,))
    assert "\n" not in str(error.value) and "experiments/tree_sizes.py" in str(error.value)
    check_setting_prices([setting], {"cpu": _sized(T1_NAME), "flat": BASE})  # passes


def test_selector_train_trains_at_the_datasets_setting_sizes(monkeypatch):
    from verispec.selector import train as train_module
    from verispec.selector.actions import Action

    setting = _t1_setting()

    class Seen(Exception):
        pass

    def capture(features, efficiency, times, grid, **options):
        raise Seen(dict(zip((action.name for action in grid.actions), times)))

    monkeypatch.setattr(train_module, "train_selector", capture)
    with pytest.raises(Seen) as seen:
        train_module.train_on_dataset(setting.data, dataset_name="t1.npz", verifiers="specinfer",
                                      latency=_sized(T07_NAME, T1_NAME), epochs=1)
    assert seen.value.args[0][Action("specinfer", 2, 0, 1).name] == pytest.approx(T1_TIME, rel=1e-12)
    with pytest.raises(LatencyError, match="not for T=1") as error:  # negative control: T = 0.7's sizes only
        train_module.train_on_dataset(setting.data, dataset_name="t1.npz", verifiers="specinfer",
                                      latency=_sized(T07_NAME), epochs=1)
    assert "\n" not in str(error.value)


def test_the_cli_refuses_a_model_without_the_settings_sizes_with_exit_2(tmp_path, capsys):
    from tests.selector.test_pair_selector_study import T07, _refused, _write, pair_dataset

    t07, t1 = pair_dataset(T07, prompts=4, seed=1), _t1_setting().data
    paths = [_write(tmp_path, "t07.npz", t07), _write(tmp_path, "t1.npz", t1)]
    latency = tmp_path / "cpu.json"
    latency.write_text(json.dumps(_sized(T07_NAME).as_dict()))
    out = tmp_path / "out"
    _refused(["selector", "verdict", "--dataset", paths[0], "--dataset", paths[1], "--latency", str(latency),
              "--replicates", "2", "--folds", "2", "--epochs", "1", "--out", str(out)], capsys, "not for T=1")
    _refused(["selector", "study", "--dataset", paths[0], "--dataset", paths[1], "--latency", str(latency),
              "--out", str(tmp_path / "study")], capsys, "experiments/tree_sizes.py")
    _refused(["selector", "train", "--dataset", paths[1], "--latency", str(latency), "--out",
              str(tmp_path / "s.pt")], capsys, "not for T=1")
    assert not out.exists() and not (tmp_path / "s.pt").exists()
    # negative control: with T = 1's sizes beside T = 0.7's, the same datasets pass the check the CLI runs first
    from verispec.selector.study import load_inputs

    latency.write_text(json.dumps(_sized(T07_NAME, T1_NAME).as_dict()))
    datasets, regimes = load_inputs(paths, str(latency))
    assert regimes["cpu"].sized_settings == (T07_NAME, T1_NAME) and len(datasets) == 2


def test_sizes_from_puts_a_models_sizes_on_re_measured_times_loading_no_model(tmp_path, capsys):
    """experiments/tree_sizes.py --sizes-from: both settings' sizes of a hand-made model on other times; each setting's
    block time computed by hand from its sizes and the new times. Refused on one line (exit 2): a donor without named
    sizes, and --dataset with --sizes-from."""
    from tests.support.scripts import load_script

    script = load_script("experiments/tree_sizes.py")
    donor, times, out = tmp_path / "donor.json", tmp_path / "times.json", tmp_path / "out.json"
    donor.write_text(json.dumps(_sized(T07_NAME, T1_NAME).as_dict()))
    doubled = LatencyModel(120.0, (1, 2, 3, 4, 5), (340.0, 350.0, 480.0, 490.0, 820.0), "ms", "re-measured",
                           draft_sizes=(1, 2), draft_times=(120.0, 132.0))
    times.write_text(json.dumps(doubled.as_dict()))
    assert script.main(["--latency", str(times), "--sizes-from", str(donor), "--out", str(out)]) == 0
    model = LatencyModel.load(out)
    tree = parse_tree("iid:2,1")
    assert model.for_setting(T07_NAME).drafter_time(tree) == pytest.approx((3 * (120 + 350) + (120 + 480)) / 4)
    assert model.for_setting(T1_NAME).drafter_time(tree) == pytest.approx(((120 + 350) + 3 * (120 + 480)) / 4)
    assert model.for_setting(T07_NAME).drafter_time(tree) == pytest.approx(2 * T07_TIME)  # the old times, doubled
    assert "taken from donor.json" in dict((name, source) for name, _, source in model.tree_sizes)[T1_NAME]
    assert json.loads(out.read_text())["record"]["command"].startswith("python experiments/tree_sizes.py")
    capsys.readouterr()
    assert script.main(["--latency", str(times), "--sizes-from", str(times), "--out", str(tmp_path / "x.json")]) == 2
    assert "carries no tree sizes of a named sampling setting" in capsys.readouterr().err
    assert script.main(["--latency", str(times), "--sizes-from", str(donor), "--dataset", str(donor),
                        "--out", str(tmp_path / "y.json")]) == 2
    assert "one" in capsys.readouterr().err.strip().splitlines()[-1]
