"""The selector commands (verispec selector dataset | train | evaluate) and verispec.selector.evaluate.

* The policy statistics against hand computations: the best static action, the per-root oracle, tokens per target
  call and throughput (sum E / sum T), and the paired ratio of a policy to itself (exactly 1, interval [1, 1]).
* End to end on a synthetic family: the dataset's file, a selector per verifier, and 'evaluate --json' whose static
  and oracle figures are recomputed here from the dataset's own arrays and the latency formula
  T = (L1 + L2) t_q + t_p, independently of the evaluator.
* Bad input exits with status 2 and one line: both root sources or none, a malformed sampling setting, a dataset
  that is truncated, a selector evaluated on a dataset it was not trained on, an unknown --compare name.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from verispec.cli import main
from verispec.errors import VerispecError

pytest.importorskip("torch")

from verispec.selector.evaluate import (
    best_static,
    crossfit_oracle_totals,
    evaluate_policies,
    oracle_choice,
    paired_ratio,
    policy_totals,
)


def test_static_oracle_and_throughput_by_hand():
    efficiency = np.array([[1.0, 3.0, 2.0], [1.0, 1.5, 4.0]])  # [N=2, A=3]
    times = np.array([1.0, 2.0, 3.0])
    # static: mean E / T per action = 1/1, 2.25/2, 3/3 -> action 1 (1.125)
    assert best_static(efficiency, times, [0, 1, 2]) == 1
    assert best_static(efficiency, times, [0, 2]) == 0  # ties (1.0 and 1.0) go to the first
    # oracle: root 0: 1, 1.5, 0.667 -> 1; root 1: 1, 0.75, 1.333 -> 2
    assert oracle_choice(efficiency, times, [0, 1, 2]).tolist() == [1, 2]
    tokens, spent = policy_totals(efficiency, times, np.array([1, 2]))
    assert tokens.tolist() == [3.0, 4.0] and spent.tolist() == [2.0, 3.0]
    table = evaluate_policies(efficiency, times, {"static": np.array([1, 1]), "oracle": np.array([1, 2])},
                              np.array([0, 1]), resamples=200)
    assert table["static"]["throughput"] == pytest.approx((3.0 + 1.5) / 4.0, abs=1e-12)
    assert table["oracle"]["throughput"] == pytest.approx(7.0 / 5.0, abs=1e-12)
    assert table["oracle"]["tokens_per_target_call"] == pytest.approx(3.5, abs=1e-12)
    assert table["oracle"]["ratio_to_static"] == pytest.approx((7 / 5) / (4.5 / 4), abs=1e-12)
    low, high = table["oracle"]["throughput_ci"]
    assert low <= table["oracle"]["throughput"] <= high


def test_crossfit_oracle_by_hand():
    """Root 0 has 4 sampled trees over 2 actions (times 1, 2); root 1 is exact (NaN trees), labels (3, 6). The
    first half's means at root 0 are (2, 2.5), so the choices over both roots have throughputs (2 + 3)/2 = 2.5,
    (2 + 6)/3 = 2.67, (2.5 + 3)/3 = 1.83, (2.5 + 6)/4 = 2.125: the oracle of the first half takes (0, 1), and
    root 0's action 0 is scored on trees 3-4: 1.5. The second half's means at root 0 are (1.5, 3.5): (1.5 + 3)/2 =
    2.25, (1.5 + 6)/3 = 2.5, (3.5 + 3)/3 = 2.17, (3.5 + 6)/4 = 2.375: (0, 1) again, scored on trees 1-2: 2. Root 0:
    tokens 0.5 (1.5 + 2) = 1.75, time 1; root 1: tokens 6, time 2 both times. (Per root, E / T would take root
    0's action 1 on the second half, 1.75 > 1.5.)"""
    per_sample = np.array([[[2.0, 2.0], [2.0, 3.0], [1.0, 3.0], [2.0, 4.0]],
                           [[np.nan] * 2] * 4])  # [N=2, S=4, A=2]
    efficiency = np.array([[1.75, 3.0], [3.0, 6.0]])
    times = np.array([1.0, 2.0])
    tokens, spent = crossfit_oracle_totals(per_sample, efficiency, times, [0, 1])
    assert tokens.tolist() == pytest.approx([1.75, 6.0], abs=1e-12)
    assert spent.tolist() == pytest.approx([1.0, 2.0], abs=1e-12)
    assert crossfit_oracle_totals(per_sample[:, :1], efficiency, times, [0, 1]) is None  # one tree: no split
    table = evaluate_policies(efficiency, times, {"static": np.array([0, 0])}, np.array([0, 1]), resamples=100,
                              totals={"oracle_crossfit": (tokens, spent)})
    assert table["oracle_crossfit"]["throughput"] == pytest.approx(7.75 / 3.0, abs=1e-12)
    assert table["oracle_crossfit"]["ratio_to_static"] == pytest.approx((7.75 / 3) / (4.75 / 2), abs=1e-12)


def test_crossfit_oracle_removes_the_winners_curse():
    """Ten actions of equal true value 1, each tree's estimate 1 + noise (Gaussian, sd 0.5): the in-sample
    oracle (best of the 4-tree means) exceeds 1 by about sd/sqrt(4) E[max of 10 normals] = 0.25 x 1.54 = 0.38;
    the cross-fitted one's scores are means of independent trees, so over 20,000 roots their mean is 1 within
    5 standard errors (sd 0.5/sqrt(2) per root: 5 x 0.354/sqrt(20,000) = 0.0125; false failure < 1e-6)."""
    rng = np.random.default_rng(0)
    roots, trees, actions = 20_000, 4, 10
    per_sample = 1 + 0.5 * rng.standard_normal((roots, trees, actions))
    efficiency = per_sample.mean(1)
    times = np.ones(actions)
    biased = efficiency.max(1).mean()
    tokens, _ = crossfit_oracle_totals(per_sample, efficiency, times, range(actions))
    assert biased > 1.3
    assert abs(tokens.mean() - 1.0) < 0.0125


def test_a_policy_against_itself_is_exactly_one():
    rng = np.random.default_rng(0)
    efficiency = 1 + rng.random((30, 4))
    times = np.array([1.0, 2.0, 3.0, 4.0])
    choice = rng.integers(0, 4, 30)
    result = paired_ratio(efficiency, times, choice, efficiency, times, choice, rng.integers(0, 6, 30), resamples=300)
    assert result["ratio"] == pytest.approx(1.0, abs=1e-12)
    assert result["ratio_ci"] == pytest.approx([1.0, 1.0], abs=1e-12)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    folder = tmp_path_factory.mktemp("selector")
    dataset = folder / "d.npz"
    assert main(["selector", "dataset", "--family", "context-free", "--vocab", "2", "--seeds", "0-15", "--ks", "1-2",
                 "--l1s", "0-1", "--l2s", "0-1", "--verifiers", "specinfer,traversal-iid", "--backend", "serial",
                 "--out", str(dataset)]) == 0
    for verifier in ("specinfer", "traversal-iid"):
        assert main(["selector", "train", "--dataset", str(dataset), "--verifiers", verifier, "--epochs", "30",
                     "--out", str(folder / f"{verifier}.pt")]) == 0
    return folder


def test_evaluate_recomputes_static_and_oracle_from_the_dataset(trained, capsys):
    capsys.readouterr()
    assert main(["selector", "evaluate", "--dataset", str(trained / "d.npz"), "--selector",
                 str(trained / "specinfer.pt"), "--selector", str(trained / "traversal-iid.pt"),
                 "--compare", "specinfer,traversal-iid", "--json", "--bootstrap", "200"]) == 0
    report = json.loads(capsys.readouterr().out)
    from verispec.selector.dataset_file import Dataset

    data = np.load(trained / "d.npz")
    meta = json.loads(str(data["metadata"]))
    grid = meta["grid"]
    actions = [(v, k, l1, l2) for v in grid["verifiers"] for k in grid["ks"] for l1 in grid["l1s"]
               for l2 in grid["l2s"]]
    assert len(actions) == data["efficiency"].shape[1]  # every pair valid here: delayed trees, i.i.d. paths
    # the cost ratio 20 regime, tree size free: T = (L1 + L2) + 20
    times = np.array([l1 + l2 + 20.0 for _, _, l1, l2 in actions])
    train, test = Dataset.load(trained / "d.npz").split(0.25, 0)
    rows = np.isin(data["group"], test.group)
    train_rows = ~rows
    for name in ("specinfer", "traversal-iid"):
        columns = [i for i, action in enumerate(actions) if action[0] == name]
        entry = report["selectors"][name]["settings"]["all"]
        rate = data["efficiency"][train_rows][:, columns].mean(0) / times[columns]
        static = columns[int(np.argmax(rate))]
        efficiency = data["efficiency"][rows]
        expected = efficiency[:, static].sum() / (times[static] * rows.sum())
        assert entry["static"]["throughput"] == pytest.approx(expected, abs=1e-12)
        best = np.array(columns)[np.argmax(efficiency[:, columns] / times[columns], 1)]
        per_root = efficiency[np.arange(len(best)), best].sum() / times[best].sum()
        # the best total throughput lam* is the root of the decreasing max over choices of sum_b (E_b,a - lam T_a):
        # the reported oracle's rate must be it, and at least the per-root best's
        oracle = entry["oracle"]["throughput"]
        slack = (efficiency[:, columns] - oracle * times[columns]).max(axis=1).sum()
        assert slack == pytest.approx(0.0, abs=1e-9 * times[columns].max() * len(best))
        assert oracle >= per_root * (1 - 1e-12)
        assert 0 <= entry["selector"]["agrees_with_oracle"] <= 1
        assert entry["oracle"]["biased_upward"] is False and "oracle_crossfit" not in entry  # exact labels
        # the selector reads the draft to choose, so a block it leaves undrafted costs t_q (1 here) + t_p
        from verispec.selector.evaluate import selector_choice
        from verispec.selector.selector import Selector

        chosen = selector_choice(Selector.load(trained / f"{name}.pt"), test)
        paid = times + np.array([l1 + l2 == 0 for _, _, l1, l2 in actions])
        expected = efficiency[np.arange(len(chosen)), chosen].sum() / paid[chosen].sum()
        assert entry["selector"]["throughput"] == pytest.approx(expected, abs=1e-12)
    assert set(report["comparison"]) >= {"latency"} and len(report["comparison"]) == 3


def test_a_selector_evaluated_on_roots_it_was_not_trained_for_is_refused_in_one_line(trained, capsys):
    """Another pair (a synthetic selector on a pair's roots), a sampling setting it never saw, another grid."""
    from verispec.selector.actions import ActionGrid
    from verispec.selector.dataset_file import Dataset
    from verispec.selector.evaluate import check_dataset_fits
    from verispec.selector.selector import Selector

    selector = Selector.load(trained / "specinfer.pt")
    dataset = Dataset.load(trained / "d.npz")
    check_dataset_fits(selector, dataset)  # its own dataset fits
    other_grid = ActionGrid.from_dict({**dataset.metadata["grid"], "ks": [1]})  # the grid and its recorded actions
    for metadata, needle in [({"pair": "qwen-coder"}, "synthetic problems"),
                             ({"grid": other_grid.as_dict(), "actions": other_grid.action_names()},
                              "not in the dataset's grid")]:
        other = _with_metadata(dataset, metadata)
        with pytest.raises(VerispecError, match=needle) as error:
            check_dataset_fits(selector, other)
        assert "\n" not in str(error.value)
    paired = _with_metadata(dataset, {"pair": "qwen-coder"})
    selector.metadata["pair"], selector.metadata["vocab_size"] = "qwen-coder", paired.metadata["vocab_size"]
    selector.metadata["samplings"] = [{"temperature": 1.0, "top_k": None, "top_p": None}]
    unseen = _with_metadata(paired, {"samplings": [{"temperature": 0.7, "top_k": 20, "top_p": 0.8}]})
    with pytest.raises(VerispecError, match="sampling T=0.7 top-k=20 top-p=0.8"):
        check_dataset_fits(selector, unseen)


def _with_metadata(dataset, changes: dict):
    """A copy of ``dataset`` whose metadata has ``changes`` (its arrays shared)."""
    import copy

    other = copy.copy(dataset)
    object.__setattr__(other, "metadata", {**dataset.metadata, **changes})
    return other


def _refused(argv, capsys, needle: str) -> None:
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and needle in err, err


def test_prose_prompt_specs():
    from importlib import resources

    from verispec.errors import VerispecError
    from verispec.selector.prompt_sets import PROSE_SMALL, read_prompt_specs

    text = resources.files("verispec.selector").joinpath(*PROSE_SMALL).read_text(encoding="utf-8")  # package data
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    # the 12 hand-written prompts keep the groups they had as the 'prose' set (traces are seeded from the group)
    assert read_prompt_specs(["prose-small"]) == [(f"prose:{i}", line) for i, line in enumerate(lines)]
    assert read_prompt_specs(["prose-small:3"]) == [(f"prose:{i}", line) for i, line in enumerate(lines[:3])]
    for bad in ("prose-small:0", "prose-small:x"):
        with pytest.raises(VerispecError, match="prose-small:N"):
            read_prompt_specs([bad])


def test_bad_input_is_one_line_with_status_2(trained, tmp_path, capsys):
    _refused(["selector", "dataset", "--out", str(tmp_path / "x.npz")], capsys, "give the roots")
    _refused(["selector", "dataset", "--family", "markov", "--pair", "qwen-coder", "--out", str(tmp_path / "x.npz")],
             capsys, "give the roots")
    from verispec.errors import VerispecError
    # a comb too large is refused before any pair is loaded (this pair does not exist: its error would come later)
    _refused(["selector", "dataset", "--pair", "no-such-pair", "--prompts", "prose", "--ks", "1-16", "--l2s", "0-32",
              "--out", str(tmp_path / "x.npz")], capsys, "4,617 nodes")
    from verispec.selector.roots import parse_setting

    with pytest.raises(VerispecError, match="cannot read"):
        parse_setting("temperature=0.7,topk20")
    truncated = tmp_path / "t.npz"
    truncated.write_bytes((trained / "d.npz").read_bytes()[:200])
    _refused(["selector", "evaluate", "--dataset", str(truncated), "--selector", str(trained / "specinfer.pt")],
             capsys, "truncated")
    other = tmp_path / "other.npz"
    assert main(["selector", "dataset", "--family", "context-free", "--vocab", "2", "--seeds", "20-27", "--ks", "1-2",
                 "--l1s", "0-1", "--l2s", "0-1", "--verifiers", "specinfer,traversal-iid", "--backend", "serial",
                 "--out", str(other)]) == 0
    _refused(["selector", "evaluate", "--dataset", str(other), "--selector", str(trained / "specinfer.pt")], capsys,
             "trained on other roots")
    _refused(["selector", "evaluate", "--dataset", str(trained / "d.npz"), "--selector", str(trained / "specinfer.pt"),
              "--compare", "specinfer,nope"], capsys, "--compare")
    _refused(["selector", "train", "--dataset", str(trained / "d.npz"), "--verifiers", "gbv", "--out",
              str(tmp_path / "g.pt")], capsys, "labels the verifiers")


def _brute_force_best(efficiency: np.ndarray, times: np.ndarray, allowed) -> float:
    """The largest sum E / sum T over every assignment of an allowed action to each root (enumerated)."""
    import itertools

    rows = np.arange(efficiency.shape[0])
    return max(efficiency[rows, list(pick)].sum() / times[list(pick)].sum()
               for pick in itertools.product(list(allowed), repeat=len(rows)))


def test_the_oracle_is_the_best_total_throughput_not_the_per_root_best():
    """Root 0: actions (E, T) = (1, 1) and (2.2, 2): E / T 1 < 1.1 picks the long one; root 1: (10, 1) and (10, 2):
    the short one. Per root: (2.2 + 10) / (2 + 1) = 4.07; keeping root 0 short: (1 + 10) / (1 + 1) = 5.5, the best
    total (the other two choices: (1 + 10) / 3 = 3.67, (2.2 + 10) / 4 = 3.05)."""
    efficiency = np.array([[1.0, 2.2], [10.0, 10.0]])
    times = np.array([1.0, 2.0])
    assert np.argmax(efficiency / times, axis=1).tolist() == [1, 0]
    choice = oracle_choice(efficiency, times, [0, 1])
    assert choice.tolist() == [0, 0]
    assert efficiency[np.arange(2), choice].sum() / times[choice].sum() == pytest.approx(11 / 2, abs=1e-12)


def test_the_oracle_equals_brute_force_on_random_labels():
    rng = np.random.default_rng(0)
    for _ in range(200):
        roots, actions = int(rng.integers(1, 6)), int(rng.integers(1, 5))
        efficiency = 1 + 4 * rng.random((roots, actions))
        times = 1 + 3 * rng.random(actions)
        allowed = sorted(rng.choice(actions, size=int(rng.integers(1, actions + 1)), replace=False).tolist())
        choice = oracle_choice(efficiency, times, allowed)
        assert set(choice.tolist()) <= set(allowed)
        rows = np.arange(roots)
        best = _brute_force_best(efficiency, times, allowed)
        assert efficiency[rows, choice].sum() / times[choice].sum() == pytest.approx(best, rel=1e-12)
        per_root = np.asarray(allowed)[np.argmax(efficiency[:, allowed] / times[allowed], axis=1)]
        assert efficiency[rows, per_root].sum() / times[per_root].sum() <= best * (1 + 1e-12)
