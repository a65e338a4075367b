"""The verdict beyond DDTE (verispec.selector.verdict, ``verispec selector verdict``): the best rule with its own
selector over several replicates (seeds and splits), every number recomputed by hand from the stored fits; the
crossed bootstrap's interval checked where it has a closed form (identical replicates: the prompts' interval; equal
prompts: the replicates' spread); fits kept per rule, so a rule added later is fitted alone and a rerun fits
nothing; bad input refused on one line."""

from __future__ import annotations

import json

import numpy as np
import pytest

from verispec.cli import main
from verispec.selector.evaluate import GroupBootstrap

pytest.importorskip("torch")
pytest.importorskip("matplotlib")

from tests.selector.test_dataset_join import _rules_only
from tests.selector.test_pair_selector_study import T07, T1, _refused, _write, pair_dataset

RULES = ("specinfer", "traversal", "traversal-iid")


def _crossed(groups, replicates, resamples=400, seed=0):
    from verispec.selector.verdict import _Crossed

    return _Crossed(np.asarray(groups), replicates, resamples, seed)


def test_identical_replicates_give_the_prompts_interval():
    """With every replicate the same policy, the crossed interval is the paired group bootstrap's (the same prompt
    draws: GroupBootstrap at the same seed), computed here from its weights."""
    rng = np.random.default_rng(1)
    groups = np.repeat(np.arange(12), 3)
    tokens_a, tokens_b = 1 + rng.random(36), 1 + rng.random(36)
    time_a, time_b = 1 + rng.random(36), 1 + rng.random(36)
    boot = _crossed(groups, 4)
    entry = boot.ratio(boot.rates([(tokens_a, time_a)] * 4), boot.rates([(tokens_b, time_b)] * 4))
    prompts = GroupBootstrap(groups, 400, 0)
    samples = (prompts.sums(tokens_a) / prompts.sums(time_a)) / (prompts.sums(tokens_b) / prompts.sums(time_b))
    assert entry["ratio_ci"] == pytest.approx(np.quantile(samples, [0.025, 0.975]).tolist(), abs=1e-12)
    assert entry["ratio"] == pytest.approx((tokens_a.sum() / time_a.sum()) / (tokens_b.sum() / time_b.sum()),
                                           abs=1e-12)
    assert entry["replicate_range"][0] == pytest.approx(entry["replicate_range"][1], abs=1e-15)


def test_equal_prompts_give_the_replicates_spread():
    """Every prompt alike (resampling prompts changes nothing): two replicates of ratios a < b; the mean of two
    draws with replacement is a (1/4), (a + b)/2 (1/2) or b (1/4), so the 95% interval is [a, b] and the estimate
    (a + b)/2."""
    groups = np.repeat(np.arange(6), 2)
    ones = np.ones(12)
    a, b = 1.1, 1.3
    boot = _crossed(groups, 2, resamples=2000)
    entry = boot.ratio(boot.rates([(a * ones, ones), (b * ones, ones)]), boot.rates([(ones, ones)] * 2))
    assert entry["ratio"] == pytest.approx((a + b) / 2, abs=1e-12)
    assert entry["ratio_ci"] == pytest.approx([a, b], abs=1e-12)
    assert entry["replicate_range"] == pytest.approx([a, b], abs=1e-12)
    assert entry["prompts_for_target"] == int(np.ceil(6 * ((b - a) / 2 / 0.015) ** 2))


def _setup(tmp_path):
    from verispec.latency import LatencyModel

    whole = pair_dataset(T07, prompts=8, seed=1)
    base = _write(tmp_path, "t07.npz", _rules_only(whole, RULES[:2]))
    side = _write(tmp_path, "t07-side.npz", _rules_only(whole, RULES[2:]))
    t1 = _write(tmp_path, "t1.npz", pair_dataset(T1, rules=RULES[:2], prompts=8, seed=2))
    latency = tmp_path / "cpu.json"
    latency.write_text(json.dumps(LatencyModel(30.0, (1, 8, 32), (60.0, 90.0, 200.0), "ms", "test CPU").as_dict()))
    return base, side, t1, str(latency)


def _count_fits(monkeypatch) -> list:
    import verispec.selector.verdict as module

    calls, original = [], module.fit_rule

    def counted(setting, regime, latency, verifier, **kwargs):
        calls.append((setting.name, regime, verifier, kwargs["seed"]))
        return original(setting, regime, latency, verifier, **kwargs)

    monkeypatch.setattr(module, "fit_rule", counted)
    return calls


def test_the_verdict_recomputes_from_its_fits_and_refits_only_what_is_new(tmp_path, capsys, monkeypatch):
    """Every number recomputed by hand from the stored fits; a rule added later is fitted alone and a rerun fits
    nothing. And --jobs 2 fits in spawned processes: every fit is seeded, so its tables equal those of the first run
    (--jobs 1, the default)."""
    base, side, t1, latency = _setup(tmp_path)
    out = tmp_path / "verdict"
    argv = ["selector", "verdict", "--dataset", base, "--dataset", t1, "--latency", latency, "--out", str(out),
            "--replicates", "2", "--folds", "2", "--epochs", "2", "--bootstrap", "200"]
    calls = _count_fits(monkeypatch)
    assert main(argv) == 0
    assert len(calls) == 2 * 3 * (2 + 2)  # replicates x regimes x rules (2 at T=0.7, 2 at T=1)
    assert len(json.loads((out / "verdict.rows.json").read_text())["rows"]) == 2 * 3 * (2 + 2)
    tables = json.loads((out / "verdict.json").read_text())["tables"]
    workers = tmp_path / "verdict-2"
    assert main([str(workers) if item == str(out) else item for item in argv] + ["--jobs", "2"]) == 0
    assert len(json.loads((workers / "verdict.rows.json").read_text())["rows"]) == 2 * 3 * (2 + 2)
    assert json.loads((workers / "verdict.json").read_text())["tables"] == tables
    calls.clear()
    assert main(argv + ["--dataset", side]) == 0  # traversal-iid joins T=0.7: only its fits are new
    assert sorted({(c[2], c[0]) for c in calls}) == [("traversal-iid", "T=0.7 top-k=20 top-p=0.8")]
    assert len(calls) == 2 * 3
    calls.clear()
    assert main(argv + ["--dataset", side]) == 0
    assert calls == []
    result = json.loads((out / "verdict.json").read_text())
    rows = json.loads((out / "verdict.rows.json").read_text())["rows"]
    from verispec.latency import LatencyModel
    from verispec.selector.actions import action_times, policy_action_times
    from verispec.selector.dataset_file import Dataset
    from verispec.selector.join import join_datasets

    data = join_datasets([("a", Dataset.load(base)), ("b", Dataset.load(side))])
    table = next(t for t in result["tables"] if t["setting"].startswith("T=0.7") and t["regime"] == "cpu")
    model = LatencyModel.from_dict(json.loads(open(latency).read()))
    times = action_times(data.grid, model)
    priced = policy_action_times(data.grid, model, reads_draft=True)
    rates = {}
    for rule in RULES:
        for policy, cost in (("selector", priced), ("static", times)):
            per = []
            for seed in (0, 1):
                row = next(r for r in rows if r["key"].startswith(f"seed {seed} | {table['setting']} | cpu | {rule} |"))
                choice = np.array(row["choices"][policy])
                per.append(data.efficiency[np.arange(len(choice)), choice].sum() / cost[choice].sum())
            rates[(rule, policy)] = np.array(per)
        assert table["rules"][rule]["selector"]["throughput"] == pytest.approx(rates[(rule, "selector")].mean(),
                                                                               rel=1e-12)
        assert table["rules"][rule]["static"]["throughput"] == pytest.approx(rates[(rule, "static")].mean(), rel=1e-12)
    best = max(RULES, key=lambda rule: rates[(rule, "selector")].mean())
    assert table["best"] == best
    for rule, entry in table["versus"].items():
        ratio = rates[(best, "selector")] / rates[(rule, "selector")]
        assert entry["ratio"] == pytest.approx(ratio.mean(), rel=1e-12)
        assert entry["replicate_range"] == pytest.approx([ratio.min(), ratio.max()], rel=1e-12)
        assert entry["ratio_ci"][0] <= entry["ratio_ci"][1]
    assert [row["rival"] for row in table["ddte"]] == ["traversal", "traversal", "traversal-iid", "traversal-iid"]
    text = (out / "verdict.md").read_text()
    assert result["sentence"] in text and "Made by `verispec" in text


def test_bad_verdict_input_is_refused_on_one_line(tmp_path, capsys):
    base, _, _, _ = _setup(tmp_path)
    stem = ["selector", "verdict", "--dataset", base, "--epochs", "2", "--bootstrap", "100"]
    _refused(stem + ["--out", str(tmp_path / "a"), "--replicates", "1"], capsys, "--replicates")
    _refused(stem + ["--out", str(tmp_path / "a"), "--folds", "1"], capsys, "--folds")
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "verdict.json").write_text('{"my": "notes"}')
    _refused(stem + ["--out", str(mine)], capsys, "verdict.json")
    assert (mine / "verdict.json").read_text() == '{"my": "notes"}'
    assert not (tmp_path / "a").exists()


def test_the_edge_shares_count_the_choices_at_the_rules_largest_offered_values():
    """Hand-made: a rule offered K 1-2, L1 0-1, L2 0-2 (K 2 only with L2 <= 1), another rule on chains alone (K 1).
    Its five choices: (2,0,1) on the K edge; (1,1,2) on the L1 and L2 edges; (1,0,0) on none; (2,1,1) on K and L1;
    (1,0,2) on L2: K 2 of 5, L1 2 of 5, L2 2 of 5, any 4 of 5. The broken twin takes the edge from the choices made
    (their largest values), not from what was offered, and counts differently."""
    from types import SimpleNamespace

    from verispec.selector.verdict import edge_shares

    def action(verifier, k, l1, l2):
        return SimpleNamespace(verifier=verifier, k=k, l1=l1, l2=l2)

    offered = [action("a", k, l1, l2) for k in (1, 2) for l1 in (0, 1) for l2 in (0, 1, 2) if k == 1 or l2 <= 1]
    chains = [action("b", 1, l1, l2) for l1 in (0, 1) for l2 in (0, 1)]
    actions = offered + chains
    allowed = list(range(len(offered)))

    def at(k, l1, l2):
        return next(index for index, a in enumerate(offered) if (a.k, a.l1, a.l2) == (k, l1, l2))

    chosen = [at(2, 0, 1), at(1, 1, 2), at(1, 0, 0), at(2, 1, 1), at(1, 0, 2)]
    shares = edge_shares(actions, chosen, allowed)
    assert (shares["k"], shares["l1"], shares["l2"], shares["any"], shares["choices"]) == (0.4, 0.4, 0.4, 0.8, 5)
    # the chains-only rule offers one K: no K edge; its L1 and L2 edges at 1
    rule_b = edge_shares(actions, [len(offered), len(offered) + 3], list(range(len(offered), len(actions))))
    assert rule_b["k"] is None and (rule_b["l1"], rule_b["l2"], rule_b["any"]) == (0.5, 0.5, 0.5)

    def from_the_choices(actions, chosen, allowed):  # the broken twin
        return edge_shares(actions, chosen, [int(index) for index in chosen])

    # two choices inside the grid, (1,0,0) and (1,0,1): none at an edge offered, but the twin's L2 edge is 1
    inside = [at(1, 0, 0), at(1, 0, 1)]
    assert edge_shares(actions, inside, allowed)["any"] == 0.0
    assert from_the_choices(actions, inside, allowed)["any"] == 0.5
