"""The delay selector's core (DDTE, Thomas et al. 2026, arXiv 2602.16994, Sec. 5): actions, features, the
throughput loss of Eq. 12, training, the selector file and the decoding policy.

Every number asserted is derived here independently of verispec.selector: counts of the grid by closed form,
entropies and divergences of small vectors by hand, the loss by hand on three roots, and a synthetic sanity
check whose best action is a step function of the features fixed in the test (with a shuffled-label
negative control that must fail it).
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from tests.support.law_features import reference_law_features
from verispec.latency import LatencyModel
from verispec.models.sampling import Sampling
from verispec.selector import (
    PAPER_GRID,
    SCALAR_FEATURES,
    Action,
    ActionGrid,
    SelectorError,
    action_times,
    max_action_tree,
    scalar_features,
    scalar_features_batch,
)
from verispec.selector.features import KL_CAP
from verispec.selector.network import LookupSelector
from verispec.selector.selector import Selector, SelectorPolicy
from verispec.selector.train import throughput_loss, train_selector
from verispec.simulator.engine import check_compatible
from verispec.simulator.tree_specs import parse_tree
from verispec.verifiers import get_verifier


def one_line(error) -> bool:
    text = str(error.value)
    return bool(text) and "\n" not in text


# -- the action grid ---------------------------------------------------------------------------------------------

def test_the_paper_grid_has_324_actions_in_order():
    assert len(PAPER_GRID) == 4 * 9 * 9
    keys = [(a.verifier, a.k, a.l1, a.l2) for a in PAPER_GRID.actions]
    assert keys == sorted(keys) and len(set(keys)) == len(keys)
    assert len({a.name for a in PAPER_GRID}) == 324  # unique although every K with L1 = L2 = 0 is chain:0
    for index, action in enumerate(PAPER_GRID):
        assert PAPER_GRID.index(action) == index and PAPER_GRID[index] == action
        assert action.tree == ("chain:0" if action.l1 == action.l2 == 0
                               else f"delayed:{action.k},{action.l1},{action.l2}")
        drafter = parse_tree(action.tree)
        assert action.depth == action.l1 + action.l2 == drafter.depth
        assert action.nodes == 1 + action.l1 + action.k * action.l2 == drafter.max_nodes
    assert max_action_tree(PAPER_GRID) == "delayed:4,8,8"
    assert max_action_tree(ActionGrid(ks=(2,), l1s=(0,), l2s=(0,))) == "chain:0"


def test_validity_filtering_agrees_with_check_compatible_and_closed_counts():
    grid = ActionGrid(verifiers=("specinfer", "traversal", "gbv"))
    kept = set(grid.actions)
    for name in grid.verifiers:
        verifier = get_verifier(name)
        for k in range(1, 5):
            for l1 in range(9):
                for l2 in range(9):
                    action = Action(name, k, l1, l2)
                    try:
                        check_compatible(verifier, parse_tree(action.tree))
                        valid = True
                    except Exception:
                        valid = False
                    assert (action in kept) == valid, action.name
    count = {name: sum(a.verifier == name for a in grid) for name in grid.verifiers}
    # Traversal needs children without replacement: one path (K = 1) or no paths after the trunk (L2 = 0).
    assert count["traversal"] == 9 * 9 + 3 * 9
    # GBV takes i.i.d. paths from the root (L1 = 0) and, since TRUNK_IID_PATHS, after a trunk: every tree.
    assert count["gbv"] == 324
    assert count["specinfer"] == 324
    assert len(grid) == 324 + 108 + 324
    # Under the classification of format 1 (no TRUNK_IID_PATHS) it had all but K > 1, L1 > 0, L2 > 0; the others
    # are unchanged.
    then = grid.under_format_1()
    assert {name: sum(a.verifier == name for a in then) for name in grid.verifiers} == \
        {**count, "gbv": 324 - 3 * 8 * 8}


def test_grid_parse_round_trip_and_errors():
    assert ActionGrid.parse("1-4", "0-8", "0-8", "specinfer") == PAPER_GRID
    grid = ActionGrid.parse("1,2,4", "0-2,5", "3", "specinfer, traversal")
    assert grid.ks == (1, 2, 4) and grid.l1s == (0, 1, 2, 5) and grid.l2s == (3,)
    assert grid.verifiers == ("specinfer", "traversal")
    data = json.loads(json.dumps(grid.as_dict()))
    assert ActionGrid.from_dict(data) == grid and ActionGrid.from_dict(data).actions == grid.actions
    for bad in [dict(ks="1-x"), dict(ks="4-1"), dict(ks=""), dict(l1s="0-100"), dict(ks="0"),
                dict(verifiers="nope"), dict(verifiers="specinfer,specinfer")]:
        with pytest.raises(SelectorError) as error:
            ActionGrid.parse(**bad)
        assert one_line(error), bad
    for bad in [{"ks": [1]}, [1, 2], {"ks": [1], "l1s": [0], "l2s": [0], "verifiers": [], }]:
        with pytest.raises(SelectorError) as error:
            ActionGrid.from_dict(bad)
        assert one_line(error)
    with pytest.raises(SelectorError) as error:
        Action("specinfer", 0, 1, 1)
    assert one_line(error)
    with pytest.raises(SelectorError) as error:
        PAPER_GRID.index(Action("traversal", 1, 1, 1))
    assert one_line(error)
    with pytest.raises(SelectorError) as error:  # every tree here has K > 1 paths after a trunk
        _ = ActionGrid(ks=(2,), l1s=(1,), l2s=(1,), verifiers=("traversal",)).actions
    assert one_line(error)


def test_action_times_follow_eq_11():
    latency = LatencyModel.from_ratio(10.0, 0.05)
    times = action_times(PAPER_GRID, latency)
    for action, time in zip(PAPER_GRID, times):
        depth, nodes = action.l1 + action.l2, 1 + action.l1 + action.k * action.l2
        assert time == pytest.approx(depth * 1.0 + 10.0 * (1 + 0.05 * (nodes - 1)), rel=1e-12)


def test_a_selector_pays_the_draft_step_on_undrafted_blocks():
    """policy_action_times: Eq. 11's T(a), plus t_q on the depth-0 actions when the policy reads the draft's laws
    (every scalar feature set does); without draft features it is Eq. 11's."""
    from verispec.selector.actions import policy_action_times
    from verispec.selector.features import SCALAR_FEATURES, reads_draft

    latency = LatencyModel.from_ratio(10.0, 0.05)
    assert reads_draft(SCALAR_FEATURES) and not reads_draft(("context_length", "temperature"))
    plain, paid = action_times(PAPER_GRID, latency), policy_action_times(PAPER_GRID, latency, reads_draft=True)
    for action, before, after in zip(PAPER_GRID, plain, paid):
        assert after == (before + 1.0 if action.l1 + action.l2 == 0 else before)
    assert np.array_equal(policy_action_times(PAPER_GRID, latency, reads_draft=False), plain)


def test_importing_actions_and_features_leaves_torch_unloaded():
    code = ("import sys, verispec.selector, verispec.selector.actions, verispec.selector.features;"
            "from verispec.selector import PAPER_GRID, scalar_features;"
            "assert 'torch' not in sys.modules, 'torch imported'")
    subprocess.run([sys.executable, "-c", code], check=True)


# -- features ----------------------------------------------------------------------------------------------------

LATENCY = LatencyModel.from_ratio(7.0, 0.1)


def test_features_match_closed_forms():
    p = np.array([0.25, 0.25, 0.25, 0.25])
    q = np.array([0.5, 0.5, 0.0, 0.0])
    r = np.array([1.0, 0.0, 0.0, 0.0])
    values = dict(zip(SCALAR_FEATURES, scalar_features(p, q, r, context_length=37, sampling=Sampling(0.7, 20),
                                                       latency=LATENCY)))
    assert values["entropy_p_prev"] == pytest.approx(math.log(4), abs=1e-6)
    assert values["entropy_q_prev"] == pytest.approx(math.log(2), abs=1e-6)
    assert values["entropy_q_root"] == 0.0
    assert values["kl_p_q_prev"] == KL_CAP  # p puts mass where q has none: +inf, capped
    assert values["kl_q_p_prev"] == pytest.approx(2 * 0.5 * math.log(0.5 / 0.25), abs=1e-6)
    assert values["l1_p_q_prev"] == pytest.approx(2 * 0.25 + 2 * 0.25, abs=1e-6)
    assert (values["context_length"], values["temperature"], values["top_k"], values["top_p"]) == (37, 0.7, 20, 1.0)
    assert (values["draft_time"], values["target_time"]) == (1.0, 7.0)

    p = np.array([0.5, 0.25, 0.25])
    q = np.array([0.25, 0.5, 0.25])
    values = dict(zip(SCALAR_FEATURES, scalar_features(p, q, q, context_length=1, sampling=Sampling(1.0, None, 0.9),
                                                       latency=LATENCY)))
    assert values["entropy_p_prev"] == pytest.approx(1.5 * math.log(2), abs=1e-6)
    assert values["kl_p_q_prev"] == pytest.approx(0.5 * math.log(2) + 0.25 * math.log(0.5), abs=1e-6)
    assert values["kl_q_p_prev"] == pytest.approx(0.25 * math.log(0.5) + 0.5 * math.log(2), abs=1e-6)
    assert values["l1_p_q_prev"] == pytest.approx(0.5, abs=1e-6)
    assert (values["top_k"], values["top_p"]) == (0.0, 0.9)


def test_torch_numpy_and_batch_inputs_agree():
    rng = np.random.default_rng(3)
    laws = rng.dirichlet(np.ones(50), size=(3, 4))  # [3 laws, 4 rows, V]
    laws[1, 2, :10] = 0.0  # a truncated q row
    laws[1, 2] /= laws[1, 2].sum()
    settings = [Sampling(1.0), Sampling(0.5, 5), Sampling(1.0, None, 0.8), Sampling(0.0)]
    batch = scalar_features_batch(*laws, context_length=np.array([3, 4, 5, 6]), sampling=settings, latency=LATENCY)
    tensors = [torch.as_tensor(law) for law in laws]
    from_torch = scalar_features_batch(*tensors, context_length=np.array([3, 4, 5, 6]), sampling=settings,
                                       latency=LATENCY)
    np.testing.assert_allclose(from_torch, batch, rtol=1e-12, atol=1e-12)
    for row in range(4):
        single = scalar_features(*(law[row] for law in laws), context_length=3 + row, sampling=settings[row],
                                 latency=LATENCY)
        np.testing.assert_array_equal(single, batch[row])
        float32 = scalar_features(*(torch.as_tensor(law[row], dtype=torch.float32) for law in laws),
                                  context_length=3 + row, sampling=settings[row], latency=LATENCY)
        np.testing.assert_allclose(float32, batch[row], rtol=1e-5, atol=1e-6)
    # the L1 distance by a second route: 2 (1 - sum min(p, q))
    np.testing.assert_allclose(batch[:, SCALAR_FEATURES.index("l1_p_q_prev")],
                               2 * (1 - np.minimum(laws[0], laws[1]).sum(1)), atol=1e-6)  # float32 kernel


def _float64_features(p, q, r):
    """H(p), H(q), H(r), KL(p||q), KL(q||p), L1 in float64, term by term (a second route to the kernel's)."""
    return reference_law_features(p, q, r)


@pytest.mark.parametrize("filtered", [False, True])
def test_float32_kernel_matches_float64_at_qwens_vocabulary(filtered):
    """At V = 151,936 the float32 kernel agrees with float64 arithmetic to 1e-5 relative (1e-6 absolute), for
    dense laws (temperature 1, no filter) and top-k filtered ones with different supports (KL capped)."""
    vocab = 151_936
    generator = torch.Generator().manual_seed(7)
    laws = []
    for _ in range(3):
        logits = torch.randn(vocab, generator=generator, dtype=torch.float64) * 3
        if filtered:
            logits = logits.masked_fill(logits < torch.topk(logits, 40).values[-1], -math.inf)
        laws.append(torch.softmax(logits, 0))
    got = scalar_features(*laws, context_length=9, sampling=Sampling(), latency=LATENCY)[:6]
    expected = _float64_features(*(law.numpy() for law in laws))
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    if filtered:
        assert got[3] == KL_CAP and got[4] == KL_CAP  # disjoint top-40 sets


def test_nan_and_massless_rows_are_refused_in_one_line():
    good = np.full(4, 0.25)
    nan = torch.full((4,), float("nan"), dtype=torch.float64)
    with pytest.raises(SelectorError, match="p_prev") as error:
        scalar_features(nan, torch.as_tensor(good), torch.as_tensor(good), context_length=1, sampling=Sampling(),
                        latency=LATENCY)
    assert one_line(error) and "NaN" in str(error.value)
    with pytest.raises(SelectorError, match="q_root.*mass") as error:
        scalar_features(good, good, np.zeros(4), context_length=1, sampling=Sampling(), latency=LATENCY)
    assert one_line(error)
    for bad in [dict(q_prev=good[:3]), dict(q_prev=-good), dict(q_prev=good * 2), dict(q_prev=None)]:
        laws = dict(p_prev=good, q_prev=good, q_root=good) | bad
        with pytest.raises(SelectorError) as error:
            scalar_features(**laws, context_length=1, sampling=Sampling(), latency=LATENCY)
        assert one_line(error)
    with pytest.raises(SelectorError):
        scalar_features(good, good, good, context_length=-1, sampling=Sampling(), latency=LATENCY)


# -- the loss of Eq. 12 --------------------------------------------------------------------------------------------

def test_throughput_loss_by_hand():
    # Three roots, two actions, T = (1, 2). Policies (1/4, 3/4), (1/2, 1/2), (1/2, 1/2); base = action 0.
    logits = torch.tensor([[0.0, math.log(3)], [0.0, 0.0], [0.0, 0.0]], dtype=torch.float64)
    efficiency = torch.tensor([[1.0, 3.0], [2.0, 2.0], [1.0, 1.0]])
    times = torch.tensor([1.0, 2.0])
    # root 0: (1/4 + 9/4) / (1/4 + 6/4) = 10/7 against 1/1; root 1: 2 / (3/2) = 4/3 against 2/1 -> 2/3;
    # root 2: 1 / (3/2) = 2/3 against 1/1.
    ratios = [10 / 7, 2 / 3, 2 / 3]
    main = -sum(math.log(r) for r in ratios) / 3
    assert float(throughput_loss(logits, efficiency, times, 0, penalty=0.0)) == pytest.approx(main, rel=1e-12)
    # alpha = 0.5: the worst ceil(1.5) = 2 roots, each short by 1/3: mean (1/3)^2 = 1/9, penalty 2.
    loss = throughput_loss(logits, efficiency, times, 0, penalty=2.0, alpha=0.5)
    assert float(loss) == pytest.approx(main + 2 / 9, rel=1e-12)
    # alpha = 0.2: the worst ceil(0.6) = 1 root.
    assert float(throughput_loss(logits, efficiency, times, 0, penalty=2.0, alpha=0.2)) == \
        pytest.approx(main + 2 / 9, rel=1e-12)
    per_root = throughput_loss(logits, efficiency, times.expand(3, 2), 0, penalty=2.0, alpha=0.5)
    assert float(per_root) == pytest.approx(float(loss), rel=1e-15)
    # base = action 1 (throughputs 3/2, 1, 1/2): ratios (10/7) / (3/2), (4/3) / 1, (2/3) / (1/2).
    other = [10 / 7 / 1.5, 4 / 3 / 1, 2 / 3 / 0.5]
    assert float(throughput_loss(logits, efficiency, times, 1, penalty=0.0)) == \
        pytest.approx(-sum(math.log(r) for r in other) / 3, rel=1e-12)
    # base action 0 run at base_time 0.5 (plain decoding, while the selector's chain:0 costs 1): its throughputs
    # 2, 4, 2 halve every ratio of the first case
    halved = [r / 2 for r in ratios]
    assert float(throughput_loss(logits, efficiency, times, 0, penalty=0.0, base_time=0.5)) == \
        pytest.approx(-sum(math.log(r) for r in halved) / 3, rel=1e-12)
    with pytest.raises(SelectorError):
        throughput_loss(logits, efficiency, times, 0, alpha=1.5)


# -- the synthetic sanity check ----------------------------------------------------------------------------------

CHAINS = ActionGrid(ks=(1,), l1s=(0,), l2s=(0, 1, 2, 4, 8))  # chain:0 and delayed:1,0,L (= chain:L)
CHAIN_TIMES = action_times(CHAINS, LatencyModel.from_ratio(10.0, 0.05))  # [5]
NAMES = ("l1", "entropy", "noise")


def step_family(count: int, rng, rule):
    """Roots with features (l1 in U(0, 2), entropy in U(0, 5), a standard normal nuisance) whose best action is
    rule(features): it has throughput 1.3 (x noise) where every other action has 1.0 (x noise), the labels E
    being throughput x T(a) with 2% multiplicative noise."""
    features = np.stack([rng.uniform(0, 2, count), rng.uniform(0, 5, count), rng.normal(size=count)], 1)  # [N, 3]
    best = rule(features)  # [N]
    gain = np.ones((count, len(CHAINS)))
    gain[np.arange(count), best] = 1.3
    efficiency = CHAIN_TIMES[None] / CHAIN_TIMES[0] * gain * (1 + 0.02 * rng.normal(size=gain.shape))  # [N, A]
    return features, efficiency, best


def steps_in_l1(features):  # a linear-separable rule: longer chains where p and q are closer
    return np.array([4, 3, 1, 0])[np.searchsorted([0.4, 0.9, 1.5], features[:, 0])]


def xor_rule(features):  # not linear: chain:2 when (l1 < 1) == (entropy < 2.5), else chain:0
    return np.where((features[:, 0] < 1) == (features[:, 1] < 2.5), 2, 0)


def _accuracy(selector, features, best) -> float:
    return float((selector.choose_batch(features) == best).mean())


def test_the_selector_recovers_a_known_rule_and_shuffled_labels_do_not():
    rng = np.random.default_rng(5)
    train_x, train_e, _ = step_family(1500, rng, steps_in_l1)
    test_x, _, test_best = step_family(1000, rng, steps_in_l1)
    majority = np.bincount(test_best).max() / len(test_best)
    assert majority < 0.35  # four actions, none dominant: accuracy is informative
    common = dict(feature_names=NAMES, seed=0, lr=1e-2, epochs=20)
    mlp = train_selector(train_x, train_e, CHAIN_TIMES, CHAINS, kind="mlp", **common)
    linear = train_selector(train_x, train_e, CHAIN_TIMES, CHAINS, kind="linear", **common | dict(lr=0.1, epochs=60))
    lookup = train_selector(train_x, train_e, CHAIN_TIMES, CHAINS, kind="lookup", feature_names=NAMES,
                            lookup_feature="l1", bins=8)
    assert _accuracy(mlp, test_x, test_best) >= 0.9
    assert _accuracy(linear, test_x, test_best) >= 0.9
    assert _accuracy(lookup, test_x, test_best) >= 0.85  # bins of l1 straddle the thresholds
    # Negative control: the same roots with labels shuffled across roots carry no signal.
    shuffled = train_selector(train_x, train_e[rng.permutation(len(train_e))], CHAIN_TIMES, CHAINS, kind="mlp",
                              **common)
    assert _accuracy(shuffled, test_x, test_best) <= majority + 0.05


def test_the_network_earns_its_place_on_a_nonlinear_rule():
    rng = np.random.default_rng(6)
    train_x, train_e, _ = step_family(1500, rng, xor_rule)
    test_x, _, test_best = step_family(1000, rng, xor_rule)
    majority = np.bincount(test_best).max() / len(test_best)
    mlp = train_selector(train_x, train_e, CHAIN_TIMES, CHAINS, kind="mlp", feature_names=NAMES, seed=0, lr=1e-2,
                         epochs=20)
    linear = train_selector(train_x, train_e, CHAIN_TIMES, CHAINS, kind="linear", feature_names=NAMES, seed=0,
                            lr=0.1, epochs=60)
    assert _accuracy(mlp, test_x, test_best) >= 0.9
    assert _accuracy(linear, test_x, test_best) <= majority + 0.25  # one hyperplane cannot carve an XOR


def test_a_physical_chain_family_the_throughput_best_length():
    """Chains at roots where every drafted token is accepted with probability a = 1 - l1 / 2 (one token's
    acceptance is 1 - TV): E[tau + 1] of chain:L is sum_(i <= L) a^i, T(L) = L + r with r in U(2, 30) the
    cost ratio (a second feature). The best L is a step function of (a, r); the selector must find it where it
    matters (the best beats the runner-up by 3% or more) and lose little throughput anywhere."""
    lengths = np.array([a.depth for a in CHAINS])  # [5]

    def family(count):
        l1, ratio, noise = rng.uniform(0, 2, count), rng.uniform(2, 30, count), rng.normal(size=count)
        accept = 1 - l1 / 2
        exact = np.array([[sum(a ** i for i in range(length + 1)) for length in lengths] for a in accept])  # [N, A]
        times = lengths[None] + ratio[:, None]  # [N, A]
        return np.stack([l1, ratio, noise], 1), exact, times

    rng = np.random.default_rng(7)
    train_x, train_e, train_t = family(2000)
    test_x, test_e, test_t = family(1000)
    noisy = train_e * (1 + 0.02 * rng.normal(size=train_e.shape))
    # The baseline of Eq. 12 is plain decoding (chain:0). Against the best static action (chain:8 here) the
    # selector leaves chain:0's region (l1 near 2, 6% of roots) unlearned: there the penalty term never fires
    # (chain:8 is far worse) and the -log term's gradient vanishes once the softmax settles on chain:1.
    mlp = train_selector(train_x, noisy, train_t, CHAINS, kind="mlp", feature_names=("l1", "ratio", "noise"), seed=0,
                         lr=1e-2, epochs=30, base=0)
    rate = test_e / test_t  # [N, A] throughput
    ordered = np.sort(rate, axis=1)
    clear = ordered[:, -1] >= 1.03 * ordered[:, -2]
    chosen = mlp.choose_batch(test_x)
    assert clear.mean() > 0.5
    assert (chosen[clear] == rate[clear].argmax(1)).mean() >= 0.9
    oracle = rate.max(1).mean()
    selected = rate[np.arange(len(chosen)), chosen].mean()
    static = rate.mean(0).max()
    assert selected >= 0.99 * oracle and oracle > 1.1 * static  # the per-root choice matters here


# -- the file, what it fits, determinism, the policy ----------------------------------------------------------

META = {"pair": "qwen-test", "tokenizer": "qwen-tok", "vocab_size": 100,
        "samplings": [Sampling(1.0), Sampling(0.7, 20, 0.8)], "latency": LATENCY}


def _small_selector(kind="mlp", **extra):
    rng = np.random.default_rng(11)
    grid = ActionGrid(ks=(1, 2), l1s=(0, 1), l2s=(0, 2))
    features = rng.normal(size=(64, len(SCALAR_FEATURES)))
    efficiency = 1 + rng.uniform(size=(64, len(grid)))
    times = action_times(grid, LATENCY)
    return train_selector(features, efficiency, times, grid, kind=kind, seed=3, epochs=3, metadata=META,
                          hidden_sizes=(16, 8), **extra), features


@pytest.mark.parametrize("kind", ["mlp", "linear", "lookup"])
def test_save_load_round_trip(tmp_path, kind):
    selector, features = _small_selector(kind)
    path = tmp_path / "sel.pt"
    selector.save(path)
    loaded = Selector.load(path)
    np.testing.assert_array_equal(loaded.logits(features), selector.logits(features))
    np.testing.assert_array_equal(loaded.choose_batch(features), selector.choose_batch(features))
    assert loaded.grid == selector.grid and loaded.metadata == selector.metadata
    assert loaded.metadata["samplings"][1] == {"temperature": 0.7, "top_k": 20, "top_p": 0.8}
    assert loaded.metadata["training_roots"] == 64 and loaded.metadata["kind"] == kind
    assert loaded.action(features[0]) == selector.grid.actions[selector.choose(features[0])]


def test_damaged_and_foreign_files_are_refused_in_one_line(tmp_path):
    selector, _ = _small_selector()
    path = tmp_path / "sel.pt"
    selector.save(path)
    data = path.read_bytes()
    cases = {"truncated.pt": data[: len(data) // 2], "text.pt": b"not a selector\n"}
    for name, content in cases.items():
        (tmp_path / name).write_bytes(content)
    torch.save({"weights": torch.zeros(3)}, tmp_path / "foreign.pt")
    state = selector.state()
    state["state_dict"] = {k: v for k, v in state["state_dict"].items() if "mlp.0" not in k}
    torch.save(state, tmp_path / "missing.pt")
    for name in [*cases, "foreign.pt", "missing.pt", "absent.pt"]:
        with pytest.raises(SelectorError) as error:
            Selector.load(tmp_path / name)
        assert one_line(error) and name in str(error.value), str(error.value)


def test_check_fits_names_both_sides():
    selector, _ = _small_selector()
    selector.check_fits(pair="qwen-test", vocab_size=100, verifiers=["specinfer"], grid=selector.grid,
                        sampling=Sampling(0.7, 20, 0.8), latency=LATENCY)
    cases = [
        (dict(pair="llama"), ("'llama'", "'qwen-test'")),
        (dict(pair=SimpleNamespace(name="gemma")), ("'gemma'", "'qwen-test'")),
        (dict(vocab_size=99), ("99", "100")),
        (dict(verifiers="traversal"), ("traversal", "specinfer")),
        (dict(grid=PAPER_GRID), ("K 1-4, L1 0-8", "K 1,2, L1 0,1, L2 0,2")),
        (dict(sampling=Sampling(0.5)), ("T=0.5", "T=1; T=0.7 top-k=20 top-p=0.8")),
        (dict(latency=LatencyModel.from_ratio(20.0)), ("t_p/t_q = 20", "t_p/t_q = 7")),
    ]
    for arguments, names in cases:
        with pytest.raises(SelectorError) as error:
            selector.check_fits(**arguments)
        assert one_line(error) and all(name in str(error.value) for name in names), str(error.value)
    bare = Selector(selector.model, selector.grid, kind="mlp", metadata={})
    with pytest.raises(SelectorError, match="synthetic"):
        bare.check_fits(pair="qwen-test")


def test_training_is_deterministic_and_leaves_the_global_rng_alone():
    state = torch.get_rng_state()
    first, _ = _small_selector(dropout=0.2)
    assert torch.equal(torch.get_rng_state(), state)
    second, _ = _small_selector(dropout=0.2)
    a, b = first.model.state_dict(), second.model.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    rng = np.random.default_rng(11)
    grid = first.grid
    features, efficiency = rng.normal(size=(64, len(SCALAR_FEATURES))), 1 + rng.uniform(size=(64, len(grid)))
    other = train_selector(features, efficiency, action_times(grid, LATENCY), grid, seed=4, epochs=3,
                           hidden_sizes=(16, 8), dropout=0.2)
    assert not torch.equal(other.model.state_dict()["mlp.0.weight"], a["mlp.0.weight"])


def test_the_lookup_table_by_hand():
    # Feature 0 at 0.1, 0.2 | 0.8, 0.9 (two bins, edge at the median 0.5); T = (1, 2).
    features = np.array([[0.1], [0.2], [0.8], [0.9]])
    efficiency = np.array([[1.0, 3.0], [1.0, 2.5], [2.0, 3.0], [2.0, 3.5]])
    # bin 0: action 0 gives 2/2 = 1, action 1 gives 5.5/4 -> action 1; bin 1: 4/2 = 2 against 6.5/4 -> action 0.
    model = LookupSelector(1, 2, feature=0, bins=2)
    model.fit(features, efficiency, np.array([1.0, 2.0]))
    assert model.edges.tolist() == [0.5] and model.table.tolist() == [1, 0]
    grid = ActionGrid(ks=(1,), l1s=(0,), l2s=(0, 1))
    selector = train_selector(features, efficiency, [1.0, 2.0], grid, kind="lookup", feature_names=("x",),
                              lookup_feature="x", bins=2)
    assert selector.choose_batch([[0.0], [0.49], [0.5], [3.0]]).tolist() == [1, 1, 0, 0]


def test_selector_policy_reads_the_block_context():
    selector, _ = _small_selector()
    policy = SelectorPolicy(selector)  # the latency model recorded at training
    assert policy.needs_draft and not policy.needs_hidden
    assert list(policy.actions()) == [(a.tree, a.verifier) for a in selector.grid.actions]
    rng = np.random.default_rng(2)
    for _ in range(5):
        p, q, r = (torch.as_tensor(rng.dirichlet(np.ones(30))) for _ in range(3))
        context = SimpleNamespace(tokens=[1, 2, 3], context_length=3, p_prev=p, q_prev=q, q_root=r, hidden=None,
                                  sampling=Sampling(0.7, 20, 0.8))
        expected = selector.choose(scalar_features(p.numpy(), q.numpy(), r.numpy(), context_length=3,
                                                   sampling=Sampling(0.7, 20, 0.8), latency=LATENCY))
        assert policy.choose(context) == expected

    hidden = {"target_prev": rng.normal(size=(64, 6)), "draft_root": rng.normal(size=(64, 4))}
    with_hidden, features = _small_selector(hidden=hidden)
    assert with_hidden.hidden_names == ("target_prev", "draft_root")
    policy = SelectorPolicy(with_hidden, LATENCY)
    assert policy.needs_hidden
    context = SimpleNamespace(tokens=[1, 2], context_length=2, p_prev=p, q_prev=q, q_root=r, sampling=Sampling(),
                              hidden={name: torch.as_tensor(block[0]) for name, block in hidden.items()})
    row = scalar_features(p, q, r, context_length=2, sampling=Sampling(), latency=LATENCY)
    assert policy.choose(context) == with_hidden.choose(row, {name: block[0] for name, block in hidden.items()})
    with pytest.raises(SelectorError):
        policy.choose(SimpleNamespace(**{**vars(context), "hidden": None}))
