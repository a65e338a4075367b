"""The pair study with the paper's full network (``verispec selector study --hidden``): a fourth policy that reads
the datasets' hidden states. Its rows and ratios recompute by hand from the choices it makes (choices forced by a
stand-in), it beats the scalar network where only the hidden states carry the roots' acceptance, and a dataset
without hidden states is refused on one line before any training."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.selector.test_pair_selector_study import T07, _refused, _times, _write, pair_dataset
from verispec.cli import main
from verispec.selector.dataset_file import Dataset
from verispec.selector.features import SCALAR_FEATURES

pytest.importorskip("torch")
pytest.importorskip("matplotlib")

WIDTH = 8


def with_hidden(data: Dataset, *, informative: bool, seed: int = 0) -> Dataset:
    """``data`` with hidden states ``draft_root`` [N, WIDTH] of noise, and, when ``informative``, labels a root's
    hidden value a in [0.05, 0.95] decides: per sampled tree E = 1 + 2 depth a for the trees of the largest K and
    1 + 2 depth (1 - a) for the others (times a noise in [0.9, 1.1]), a carried by the first hidden column alone
    (the scalar features are noise), so the best tree depends on what only the hidden states tell."""
    rng = np.random.default_rng(seed)
    fields = {name: getattr(data, name) for name in ("stderr", "lower", "upper", "group", "setting",
                                                      "context_length", "label_method", "key", "metadata")}
    hidden = rng.normal(size=(len(data), WIDTH))  # [N, WIDTH]
    features, per_sample = data.features.copy(), data.per_sample
    if informative:
        accept = rng.uniform(0.05, 0.95, size=len(data))  # [N]
        depth = np.array([action.depth for action in data.grid.actions])  # [A]
        wide = np.array([action.k == max(data.grid.ks) for action in data.grid.actions])  # [A]
        labels = 1 + 2 * depth * np.where(wide, accept[:, None], 1 - accept[:, None])  # [N, A]
        per_sample = labels[:, None, :] * rng.uniform(0.9, 1.1, size=data.per_sample.shape)  # [N, S, A]
        hidden[:, 0] = 4 * (accept - 0.5)
        features[:, SCALAR_FEATURES.index("l1_p_q_prev")] = rng.normal(size=len(data))
    return Dataset(features=features, efficiency=per_sample.mean(1), per_sample=per_sample,
                   hidden={"draft_root": hidden}, **fields)


def test_the_hidden_state_policy_rows_recompute_from_its_choices(monkeypatch):
    import verispec.selector.study as selector_study
    from verispec.selector.regimes import regime_models

    data = with_hidden(pair_dataset(T07, prompts=12, seed=7), informative=False)
    regimes = {"gpu-large": regime_models(None)["gpu-large"]}
    times = _times(data.grid, "gpu-large")
    rng = np.random.default_rng(1)
    forced, seen = {}, []

    def forcing(train, test, verifier, latency, **options):
        seen.append(tuple(options.get("hidden", ())))
        columns = [i for i, action in enumerate(data.grid.actions) if action.verifier == verifier and action.depth]
        chosen = {kind: rng.choice(columns, size=len(test)) for kind in (*selector_study.KINDS,
                                                                           selector_study.HIDDEN_KIND)}
        for kind, picks in chosen.items():
            forced.setdefault((verifier, kind), {}).update(zip(test.key, picks))
        return chosen

    monkeypatch.setattr(selector_study, "rule_choices", forcing)
    result = selector_study.run_study([("t07.npz", data)], regimes, seed=3, epochs=2, resamples=200, folds=3,
                                     hidden="all")
    assert result["hidden"] == ["draft_root"] and result["kinds"][-1] == selector_study.HIDDEN_KIND
    assert seen and all(names == ("draft_root",) for names in seen)
    (table,) = result["tables"]
    throughput = {}  # the forced choices draft at every root, so Eq. 11's prices are the selectors' too
    for rule, entry in table["rules"].items():
        for kind in ("mlp", selector_study.HIDDEN_KIND):
            picks = np.array([forced[(rule, kind)][key] for key in data.key])
            expected = data.efficiency[np.arange(len(data)), picks].sum() / times[picks].sum()
            assert entry["policies"][kind]["throughput"] == pytest.approx(expected, abs=1e-12)
            throughput[(rule, kind)] = expected
        hidden = entry["hidden_states"]
        assert hidden["versus_mlp"]["ratio"] == pytest.approx(
            throughput[(rule, selector_study.HIDDEN_KIND)] / throughput[(rule, "mlp")], abs=1e-12)
        static = entry["policies"]["static"]["throughput"]
        assert hidden["gain_over_static"]["estimate"] == pytest.approx(
            throughput[(rule, selector_study.HIDDEN_KIND)] / static - 1, abs=1e-12)
        low, high = hidden["versus_mlp"]["ratio_ci"]
        assert hidden["versus_mlp"]["verdict"] == ("better" if low > 1 else "worse" if high < 1 else "not shown")
    rows = {(row["lead_policy"], row["rival"], row["rival_policy"]): row for row in table["ddte"]}
    lead = throughput[("specinfer", selector_study.HIDDEN_KIND)]
    for rival in ("traversal", "traversal-iid"):
        own = rows[("selector with hidden states", rival, "selector with hidden states")]
        assert own["ratio"] == pytest.approx(lead / throughput[(rival, selector_study.HIDDEN_KIND)], abs=1e-12)
        assert rows[("selector", rival, "selector")]["ratio"] == pytest.approx(
            throughput[("specinfer", "mlp")] / throughput[(rival, "mlp")], abs=1e-12)
    from tests.selector.test_pair_selector_study import pair_selector_markdown

    text = pair_selector_markdown(result)
    assert "with hidden states / scalar mlp" in text and "with its hidden-state selector / traversal with its own " \
        "hidden-state selector" in text


def _trained_once(monkeypatch) -> dict:
    """``train_selector`` made to train each distinct fit once: a call with inputs equal to an earlier call's (every
    array byte for byte, every other argument alike) gets that call's selector. Training is seeded and gives the same
    weights bit for bit on the CPU (tests/selector/test_selector_core.py), so the choices are those of a fresh fit.
    Returns {key: selector}."""
    import verispec.selector.train as train_module

    fits, original = {}, train_module.train_selector

    def part(value):
        if isinstance(value, np.ndarray):
            return value.dtype.str, value.shape, value.tobytes()
        if isinstance(value, dict):
            return tuple((name, part(item)) for name, item in value.items())
        return repr(value)

    def once(features, efficiency, times, grid, **options):
        key = (part(np.asarray(features)), part(np.asarray(efficiency)), part(np.asarray(times)),
               tuple(action.name for action in grid.actions), part(options))
        if key not in fits:
            fits[key] = original(features, efficiency, times, grid, **options)
        return fits[key]

    monkeypatch.setattr(train_module, "train_selector", once)
    return fits


def test_the_network_reading_informative_hidden_states_beats_the_scalar_one(monkeypatch):
    """Only the hidden states carry each root's acceptance, which decides its best tree: the full network earns its
    place (the paired interval of its ratio to the scalar network lies above 1); the same labels with hidden states
    of noise leave it no better than the scalar network. The two studies differ in the hidden states alone, so the
    second trains only its hidden-state networks and takes the scalar selectors' fits (the same inputs) from the
    first (``_trained_once``)."""
    from verispec.selector.regimes import regime_models
    from verispec.selector.study import run_study

    regimes = {"h100": regime_models(None)["h100"]}
    verdicts, fits, trained = {}, _trained_once(monkeypatch), []
    for informative in (True, False):
        data = with_hidden(pair_dataset(T07, rules=("specinfer",), prompts=48, roots=4, seed=8, ks=(1, 2, 3)),
                           informative=True, seed=4)
        if not informative:  # the same labels, the hidden column of acceptance replaced by noise
            data.hidden["draft_root"][:, 0] = np.random.default_rng(5).normal(size=len(data))
        result = run_study([("t07.npz", data)], regimes, seed=0, epochs=150, resamples=400, folds=4, hidden="all")
        verdicts[informative] = result["tables"][0]["rules"]["specinfer"]["hidden_states"]["versus_mlp"]
        trained.append(len(fits))
    assert trained[1] - trained[0] == 4  # the second study trained its 4 folds' hidden-state networks alone
    assert verdicts[True]["verdict"] == "better", verdicts[True]
    assert verdicts[False]["verdict"] != "better", verdicts[False]


def test_the_study_command_reads_hidden_states_and_refuses_datasets_without_them(tmp_path, capsys):
    data = with_hidden(pair_dataset(T07, prompts=12, seed=9), informative=False)
    path = _write(tmp_path, "t07.npz", data)
    out = tmp_path / "study"
    assert main(["selector", "study", "--dataset", path, "--out", str(out), "--epochs", "2", "--bootstrap", "100",
                 "--hidden", "draft_root"]) == 0
    result = json.loads((out / "pair_selector.json").read_text())
    assert result["hidden"] == ["draft_root"]
    assert all("hidden_states" in entry for table in result["tables"] for entry in table["rules"].values())
    plain = _write(tmp_path, "plain.npz", pair_dataset(T07, prompts=12, seed=9))
    _refused(["selector", "study", "--dataset", plain, "--out", str(tmp_path / "r1"), "--hidden", "all"], capsys,
             "holds none (build it with 'selector dataset --hidden')")
    _refused(["selector", "study", "--dataset", path, "--out", str(tmp_path / "r2"), "--hidden", "target_prev"],
             capsys, "holds draft_root")
    assert not (tmp_path / "r1").exists() or not any((tmp_path / "r1").iterdir())


def test_the_study_command_sets_the_projection_width(tmp_path, capsys, monkeypatch):
    """--projection WIDTH trains the hidden-state network with projections that wide (and only it: the scalar
    network has none), records it in the JSON and says it in the tables' text; without --hidden, or out of range,
    it is refused in one line."""
    import verispec.selector.train as train_module

    widths = []
    original = train_module.train_selector

    def recording(*args, **kwargs):
        selector = original(*args, **kwargs)
        if kwargs.get("hidden"):
            widths.append(selector.model.projections[0][0].out_features)
        else:
            assert "projection" not in kwargs
        return selector

    monkeypatch.setattr(train_module, "train_selector", recording)
    path = _write(tmp_path, "t07.npz", with_hidden(pair_dataset(T07, prompts=12, seed=9), informative=False))
    out = tmp_path / "study"
    assert main(["selector", "study", "--dataset", path, "--out", str(out), "--epochs", "2", "--bootstrap", "100",
                 "--hidden", "all", "--projection", "3"]) == 0
    assert widths and set(widths) == {3}
    assert json.loads((out / "pair_selector.json").read_text())["projection"] == 3
    assert "each projected to 3 with LayerNorm" in (out / "pair_selector.md").read_text()
    base = ["selector", "study", "--dataset", path, "--out", str(tmp_path / "refused")]
    _refused(base + ["--projection", "3"], capsys, "--projection 3 sizes the hidden states' projections")
    _refused(base + ["--hidden", "all", "--projection", "0"], capsys, "--projection")
    assert not (tmp_path / "refused").exists()
