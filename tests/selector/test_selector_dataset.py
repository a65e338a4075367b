"""The selector's datasets (verispec.selector.dataset): synthetic and trace roots, labels equal to the exact
engine's on the problem after the root (built here without the dataset's shifting), features from the laws before
and after the root (recomputed from the model's forward), a resumable build that never duplicates or drops a root
(a build of a prefix of the roots, then the whole; and a build interrupted mid-way), the same rows on local
processes, progress, atomic files, a full collection after each labelled group at a large vocabulary only, and the
one-line refusals: a truncated or foreign file, another grid, an empty root or prompt set, NaN features (an
all-masked row)."""

from __future__ import annotations

import json
import time
import zipfile

import numpy as np
import pytest

import verispec
from verispec.latency import LatencyModel
from verispec.models.sampling import Sampling
from verispec.selector.actions import ActionGrid
from verispec.selector.dataset import build_dataset, store_path
from verispec.selector.dataset_file import Dataset, DatasetError
from verispec.selector.features import SCALAR_FEATURES
from verispec.selector.labelling import root_problem
from verispec.selector.roots import Root, synthetic_roots, trace_roots
from verispec.simulator import MarkovProblem, random_context_free_problem, random_markov_problem

GRID = ActionGrid((1, 2), (0, 1), (0, 1, 2), ("specinfer", "traversal-iid"))
LATENCY = LatencyModel.from_ratio(20.0)


def _entropy(law) -> float:
    law = np.asarray(law, dtype=np.float64)
    return float(-(law[law > 0] * np.log(law[law > 0])).sum())


def _build(roots, out, **options):
    return build_dataset(roots, options.pop("grid", GRID), out=out, latency=LATENCY, **options)


def test_context_free_roots_are_labelled_by_the_exact_engine(tmp_path):
    """A context-free problem is the same after any prefix: each root's labels are analyze() on the seed's problem,
    and its law features are the entropies of that problem's p and q."""
    roots = synthetic_roots("context-free", 3, [0, 1, 2], divergence=[0.2, 0.9])
    data = _build(roots, tmp_path / "cf.npz")
    assert len(data) == 3 and set(data.label_method) == {"exact"}
    for row, seed in enumerate([0, 1, 2]):
        problem = random_context_free_problem(3, seed, divergence=[0.2, 0.9][seed % 2])
        expected = [float(verispec.analyze(problem, action.tree, action.verifier).block_efficiency)
                    for action in GRID.actions]
        assert np.abs(data.efficiency[row] - expected).max() < 1e-12
        features = dict(zip(SCALAR_FEATURES, data.features[row]))
        assert abs(features["entropy_p_prev"] - _entropy(problem.p)) < 1e-6  # the float32 kernel
        assert abs(features["entropy_q_root"] - _entropy(problem.q)) < 1e-6  # the float32 kernel
        assert features["context_length"] == 2 and features["target_time"] == 20.0
    assert data.group.tolist() == [f"context-free/V=3/seed={seed}" for seed in (0, 1, 2)]


def test_markov_roots_use_the_problem_after_their_prefix(tmp_path):
    """After a prefix ending in token a, a Markov problem is the Markov problem started from row a: the labels
    equal analyze() on that problem, built here directly."""
    roots = synthetic_roots("markov", 3, [4, 5], roots_per_seed=2, prefix_length=3)
    data = _build(roots, tmp_path / "markov.npz")
    unique = list({root.key(): root for root in roots}.values())
    assert data.key.tolist() == [root.key() for root in unique]
    for row, root in enumerate(unique):
        base = random_markov_problem(3, root.problem["seed"], divergence=0.5)
        last, before = root.context[-1], root.context[-2]
        after = MarkovProblem(base.target_transition[last], base.draft_transition[last], base.target_transition,
                              base.draft_transition)
        expected = [float(verispec.analyze(after, action.tree, action.verifier).block_efficiency)
                    for action in GRID.actions]
        assert np.abs(data.efficiency[row] - expected).max() < 1e-12
        features = dict(zip(SCALAR_FEATURES, data.features[row]))
        assert abs(features["entropy_p_prev"] - _entropy(base.target_transition[before])) < 1e-6  # the float32 kernel
        assert abs(features["entropy_q_root"] - _entropy(base.draft_transition[last])) < 1e-6  # the float32 kernel


def test_resumed_build_computes_only_the_missing_roots(tmp_path, monkeypatch):
    """Build a prefix of the roots, then all of them: the second run labels only the rest, the file holds every
    root once in the order given, and its rows equal those of one uninterrupted build (the conditional
    estimator's seed is derived from the root, not from its position)."""
    import verispec.selector.labelling as module  # where the workers look label_root up

    roots = synthetic_roots("markov", 3, range(6), divergence=[0.1, 0.9])
    calls = []
    original = module.label_root
    monkeypatch.setattr(module, "label_root", lambda root, *a, **k: calls.append(root.key()) or original(root, *a, **k))
    out = tmp_path / "resumed.npz"
    options = {"method": "conditional", "samples": 3, "seed": 7}
    first = _build(roots[:2], out, **options)
    assert len(first) == 2 and len(calls) == 2
    whole = _build(roots + roots[:1], out, **options)  # a root given twice is labelled and kept once
    assert len(calls) == 6 and calls[2:] == [root.key() for root in roots[2:]]
    again = Dataset.load(out, grid=GRID)
    assert again.key.tolist() == [root.key() for root in roots]
    assert len(set(again.key.tolist())) == len(roots)
    once = _build(roots, tmp_path / "once.npz", **options)
    for name in ("features", "efficiency", "stderr", "lower", "upper"):
        assert np.array_equal(getattr(whole, name), getattr(once, name))
    assert np.array_equal(again.efficiency, once.efficiency)
    # each root's sampled trees are kept: their mean is its label, and they survive save, load and subset
    assert again.per_sample.shape == (6, 3, len(GRID))
    np.testing.assert_allclose(again.per_sample.mean(1), again.efficiency, rtol=0, atol=1e-12)
    assert np.array_equal(again.subset([1, 4]).per_sample, again.per_sample[[1, 4]])
    # a third run computes nothing
    _build(roots, out, **options)
    assert len(calls) == 6 + 6  # the uninterrupted build of 'once' labelled its own 6


def test_interrupted_build_keeps_what_it_finished(tmp_path, monkeypatch):
    """An interruption after three roots (KeyboardInterrupt in the fourth) leaves those three in the row store; the
    rerun labels the other three, and no root is duplicated or dropped."""
    import verispec.selector.labelling as module  # where the workers look label_root up

    roots = synthetic_roots("context-free", 3, range(6))
    original, calls = module.label_root, []

    def flaky(root, *args, **kwargs):
        calls.append(root.key())
        if len(calls) == 4:
            raise KeyboardInterrupt
        return original(root, *args, **kwargs)

    monkeypatch.setattr(module, "label_root", flaky)
    out = tmp_path / "interrupted.npz"
    with pytest.raises(KeyboardInterrupt):
        _build(roots, out)
    assert not out.exists()
    stored = json.loads(store_path(out).read_text())["rows"]
    assert [row["key"] for row in stored] == [root.key() for root in roots[:3]]
    data = _build(roots, out)
    assert calls[4:] == [root.key() for root in roots[3:]]
    assert data.key.tolist() == [root.key() for root in roots]


def test_local_processes_give_the_serial_rows(tmp_path, capsys):
    roots = synthetic_roots("markov", 3, range(4))
    serial = _build(roots, tmp_path / "serial.npz", progress=True)
    assert "dataset roots" in capsys.readouterr().err
    local = _build(roots, tmp_path / "local.npz", backend="local", jobs=2)
    for name in ("features", "efficiency", "group", "key"):
        assert np.array_equal(getattr(serial, name), getattr(local, name))
    leftovers = [path.name for path in tmp_path.iterdir() if path.name.startswith(".")]
    assert leftovers == []  # atomic writes leave no temporary file


@pytest.mark.slow
def test_dask_local_cluster_gives_the_serial_rows(tmp_path):
    pytest.importorskip("distributed")
    roots = synthetic_roots("context-free", 3, range(3))
    serial = _build(roots, tmp_path / "serial.npz")
    dask = _build(roots, tmp_path / "dask.npz", backend="dask", address="local:1")
    assert np.array_equal(serial.efficiency, dask.efficiency)


def test_a_ray_cluster_gives_the_serial_rows(tmp_path, ray_cluster):
    """Synthetic roots go through the sweep's executor, Ray included (the session's local Ray, ``ray_cluster``; a
    pair's roots on Ray: tests/selector/test_pair_workers.py)."""
    roots = synthetic_roots("markov", 3, range(4))
    serial = _build(roots, tmp_path / "serial.npz")
    clustered = _build(roots, tmp_path / "ray.npz", backend="ray")
    for name in ("features", "efficiency", "stderr", "group", "key", "label_method"):
        assert np.array_equal(getattr(serial, name), getattr(clustered, name)), name


def test_exact_labels_out_of_a_builds_reach_are_refused_or_made_conditional_before_the_first_root(tmp_path):
    """The default grid (K 1-4, L1 and L2 0-8) with traversal, whose exact labels need chains up to 16 at V = 3
    (an output law of 3 + .. + 3^17 entries: minutes and tens of GB a root), ran past two minutes at 2.8 GB
    without a word. Before the first root: 'exact' is refused naming the costliest action and the options,
    'auto' labels conditional-exact at once with a one-line note (its rows equal a 'conditional' build's), and a
    grid within reach stays exact (the negative control)."""
    from verispec.selector.actions import PAPER_GRID

    grid = ActionGrid(PAPER_GRID.ks, PAPER_GRID.l1s, PAPER_GRID.l2s, ("traversal",))
    roots = synthetic_roots("markov", 3, range(2))
    start = time.perf_counter()
    with pytest.raises(DatasetError, match=r"markov roots at V=3 .*traversal on delayed:1,8,8.* --method conditional"):
        _build(roots, tmp_path / "exact.npz", grid=grid, method="exact")
    assert time.perf_counter() - start < 2 and not store_path(tmp_path / "exact.npz").exists()
    # certified labels search the 3^16 trees of delayed:1,8,8 best-first at about 0.6 ms a tree (chain:12 at V = 3
    # searched 200,000 trees for 147 s before it refused)
    with pytest.raises(DatasetError, match=r"certified labels of markov roots at V=3 .* or a larger --epsilon"):
        _build(roots, tmp_path / "certified.npz", grid=grid, method="certified")
    notes = []
    auto = _build(roots, tmp_path / "auto.npz", grid=grid, method="auto", note=notes.append)
    assert time.perf_counter() - start < 20 and len(notes) == 1 and "conditional-exact" in notes[0]
    assert set(auto.label_method) == {"conditional"}
    conditional = _build(roots, tmp_path / "conditional.npz", grid=grid, method="conditional")
    assert np.array_equal(auto.efficiency, conditional.efficiency)
    small = ActionGrid((1, 2), (0, 1), (0, 1, 2), ("traversal",))
    notes.clear()
    assert set(_build(roots, tmp_path / "small.npz", grid=small, note=notes.append).label_method) == {"exact"}
    assert notes == []


def test_save_load_round_trip_and_split_by_group(tmp_path):
    roots = synthetic_roots("context-free", 3, range(8))
    data = _build(roots, tmp_path / "data.npz")
    loaded = Dataset.load(tmp_path / "data.npz", grid=GRID)
    assert loaded.metadata == data.metadata
    assert loaded.metadata["grid"] == GRID.as_dict() and loaded.metadata["roots"] == 8
    assert loaded.metadata["feature_names"] == list(SCALAR_FEATURES) and loaded.metadata["vocab_size"] == 3
    for name in ("features", "efficiency", "stderr", "lower", "upper", "group", "setting", "context_length", "key"):
        assert np.array_equal(getattr(loaded, name), getattr(data, name))
    assert loaded.grid == GRID
    train, test = loaded.split(0.25, seed=1)
    assert len(train) + len(test) == 8 and len(test) == 2
    assert not set(train.group) & set(test.group)
    assert sorted(train.key.tolist() + test.key.tolist()) == sorted(loaded.key.tolist())
    assert loaded.split(0.25, seed=1)[1].key.tolist() == test.key.tolist()
    with pytest.raises(DatasetError, match="at least two groups"):
        loaded.subset(loaded.group == loaded.group[0]).split(0.5)
    with pytest.raises(DatasetError, match="test_fraction"):
        loaded.split(1.0)


def _one_line(error) -> str:
    text = str(error.value)
    assert "\n" not in text
    return text


def test_truncated_and_foreign_files_are_refused(tmp_path):
    path = tmp_path / "data.npz"
    _build(synthetic_roots("context-free", 3, range(2)), path)
    content = path.read_bytes()
    for cut in (len(content) // 2, len(content) - 10, 20):
        truncated = tmp_path / f"cut{cut}.npz"
        truncated.write_bytes(content[:cut])
        with pytest.raises(DatasetError, match="truncated") as error:
            Dataset.load(truncated)
        _one_line(error)
    foreign = tmp_path / "foreign.npz"
    foreign.write_text("not a dataset\n")
    with pytest.raises(DatasetError):
        Dataset.load(foreign)
    other = tmp_path / "other.npz"
    np.savez(other, x=np.zeros(3))
    with pytest.raises(DatasetError, match="not a verispec selector dataset"):
        Dataset.load(other)
    single = tmp_path / "single.npy"
    np.save(single, np.zeros(3))
    with pytest.raises(DatasetError, match="not a verispec selector dataset"):
        Dataset.load(single)
    with pytest.raises(DatasetError, match="does not exist"):
        Dataset.load(tmp_path / "missing.npz")


def test_another_grid_is_refused(tmp_path):
    path = tmp_path / "data.npz"
    _build(synthetic_roots("context-free", 3, range(2)), path)
    other = ActionGrid((1, 2, 3), (0, 1), (0, 1, 2), ("specinfer", "traversal-iid"))
    with pytest.raises(DatasetError, match="labelled for the action grid") as error:
        Dataset.load(path, grid=other)
    _one_line(error)
    with pytest.raises(DatasetError, match="other parameters") as error:
        _build(synthetic_roots("context-free", 3, range(2)), path, grid=other)
    _one_line(error)
    rebuilt = _build(synthetic_roots("context-free", 3, range(2)), path, grid=other, overwrite=True)
    assert Dataset.load(path, grid=other).efficiency.shape == rebuilt.efficiency.shape == (2, len(other))


def test_output_without_its_row_store_is_refused(tmp_path):
    path = tmp_path / "data.npz"
    path.write_text("mine\n")
    with pytest.raises(DatasetError, match="without its row store"):
        _build(synthetic_roots("context-free", 3, range(1)), path)
    assert path.read_text() == "mine\n"


def test_a_groups_laws_are_collected_after_it_at_a_large_vocabulary_only(monkeypatch):
    """``release_group_laws`` (after each labelled group of a pair's roots): a full collection and a heap trim at
    Qwen's vocabulary, whose model problems hold up to 2 GiB of laws a root in reference cycles; none at a tiny
    pair's, whose laws are kilobytes (a full collection walks every live object)."""
    from verispec.selector import labelling

    calls = []
    monkeypatch.setattr(labelling.gc, "collect", lambda *args: calls.append("collect"))
    monkeypatch.setattr(labelling, "trim_heap", lambda: calls.append("trim"))
    labelling.release_group_laws(16)
    labelling.release_group_laws(labelling.COLLECT_FROM_VOCAB - 1)
    assert calls == []
    labelling.release_group_laws(151_936)
    assert calls == ["collect", "trim"]


def test_empty_inputs_and_nan_features_are_refused(tmp_path):
    with pytest.raises(DatasetError, match="root set is empty"):
        _build([], tmp_path / "empty.npz")
    with pytest.raises(DatasetError, match="seed set is empty"):
        synthetic_roots("markov", 3, [])
    data = _build(synthetic_roots("context-free", 3, range(2)), tmp_path / "data.npz")
    with pytest.raises(DatasetError, match="empty"):
        data.subset(np.zeros(len(data), dtype=bool))
    arrays = {name: getattr(data, name) for name in ("efficiency", "stderr", "lower", "upper", "group", "setting",
                                                     "context_length", "label_method", "key")}
    features = data.features.copy()
    features[1, 0] = np.nan
    with pytest.raises(DatasetError, match="NaN") as error:
        Dataset(features=features, **arrays, metadata=data.metadata)
    _one_line(error)
    nan_file = tmp_path / "nan.npz"
    np.savez(nan_file, metadata=np.array(json.dumps(data.metadata)), features=features, **arrays)
    with pytest.raises(DatasetError, match="NaN"):
        Dataset.load(nan_file)
    with zipfile.ZipFile(tmp_path / "data.npz") as archive:
        # the arrays, and the marker that shows verispec wrote the file (verispec.files.provenance)
        assert sorted(archive.namelist()) == sorted(f"{name}.npy" for name in ["metadata", "features", *arrays,
                                                                               "written_by"])


# --- roots of a model pair ----------------------------------------------------------------------------------------

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")


SMALL = ActionGrid((1, 2), (0, 1), (0, 1), ("specinfer",))


def test_trace_roots_are_prefixes_of_target_traces(pair):
    samplings = [Sampling(1.0), Sampling(0.7, top_k=3)]
    roots = trace_roots(pair, {"a": [1, 2, 3], "b": [4, 5]}, samplings, every=4, max_new_tokens=10, seed=0)
    for group, prompt in (("a", [1, 2, 3]), ("b", [4, 5])):
        for sampling in samplings:
            mine = [root for root in roots if root.group == group and root.sampling == sampling]
            lengths = [len(root.context) for root in mine]
            assert lengths == list(range(len(prompt), len(prompt) + 11, 4))[:len(mine)] and len(mine) >= 1
            assert all(list(root.context[:len(prompt)]) == prompt for root in mine)
            assert all(mine[-1].context[:len(root.context)] == root.context for root in mine)
    assert {root.pair for root in roots} == {pair.name}
    again = trace_roots(pair, {"a": [1, 2, 3], "b": [4, 5]}, samplings, every=4, max_new_tokens=10, seed=0)
    assert [root.key() for root in again] == [root.key() for root in roots]
    # the first root after 3 sampled tokens: the same traces (same seeds), cut at 3, 7 tokens
    later = trace_roots(pair, {"a": [1, 2, 3], "b": [4, 5]}, samplings, every=4, max_new_tokens=10, seed=0,
                        first_root=3)
    for group, prompt in (("a", [1, 2, 3]), ("b", [4, 5])):
        for sampling in samplings:
            mine = [root for root in roots if root.group == group and root.sampling == sampling]
            theirs = [root for root in later if root.group == group and root.sampling == sampling]
            assert [len(root.context) for root in theirs] == \
                list(range(len(prompt) + 3, len(prompt) + 11, 4))[:len(theirs)]
            assert all(mine[-1].context[:len(root.context)] == root.context for root in theirs
                       if len(root.context) <= len(mine[-1].context))
    for wrong in (-1, 11, 2.5, True):
        with pytest.raises(DatasetError, match="first_root must be an integer in"):
            trace_roots(pair, {"a": [1, 2, 3]}, samplings, max_new_tokens=10, first_root=wrong)
    with pytest.raises(DatasetError, match="prompt set is empty"):
        trace_roots(pair, [], samplings, max_new_tokens=4)
    with pytest.raises(DatasetError, match="sampling settings are empty"):
        trace_roots(pair, [[1, 2]], [], max_new_tokens=4)


def test_traces_kept_in_a_store_are_reused(pair, tmp_path, monkeypatch):
    """A resumed build reads its finished traces back instead of decoding them again, and gets the same roots."""
    import verispec.models.batched as batched
    from verispec.files.io import ResultStore

    samplings = [Sampling(1.0), Sampling(0.7, top_k=3)]
    prompts = {"a": [1, 2, 3], "b": [4, 5]}
    store = ResultStore(tmp_path / "traces.json", parameters={"pair": pair.name, "seed": 0})
    first = trace_roots(pair, prompts, samplings, every=4, max_new_tokens=10, seed=0, store=store)
    assert len(store.rows) == 4

    def refuse(*_args, **_kwargs):
        raise AssertionError("a stored trace was decoded again")

    monkeypatch.setattr(batched, "sample_target_batch", refuse)
    reread = ResultStore(tmp_path / "traces.json", parameters={"pair": pair.name, "seed": 0})
    again = trace_roots(pair, prompts, samplings, every=4, max_new_tokens=10, seed=0, store=reread)
    assert [root.key() for root in again] == [root.key() for root in first]


def test_model_root_features_and_problem_come_from_the_models(pair, tmp_path):
    """p_prev is the target's law after context[:-1] (recomputed here by a plain forward of the model), and the
    root's problem gives the laws of a ModelProblem over the whole context."""
    from verispec.models import ModelProblem

    sampling = Sampling(1.0, top_k=3)
    root = Root((1, 5, 2, 7), "g", sampling, pair=pair.name)
    data = _build([root], tmp_path / "model.npz", grid=SMALL, pair=pair, method="conditional", samples=5)
    assert data.label_method.tolist() == ["conditional"] and data.metadata["pair"] == pair.name
    assert data.metadata["vocab_size"] == pair.vocab_size
    with torch.no_grad():
        logits = pair.target(input_ids=torch.tensor([[1, 5, 2]])).logits[0, -1]
    p_prev = sampling.probabilities(logits).numpy()
    features = dict(zip(SCALAR_FEATURES, data.features[0]))
    assert abs(features["entropy_p_prev"] - _entropy(p_prev)) < 1e-6
    assert features["top_k"] == 3 and features["context_length"] == 4
    problem, *_ = root_problem(root, SMALL.max_depth, pair)
    whole = ModelProblem(pair, [1, 5, 2, 7], sampling)
    for prefix in [(), (3,), (3, 4)]:
        assert np.abs(problem.target(prefix) - whole.target(prefix)).max() < 1e-12
        assert np.abs(problem.draft(prefix) - whole.draft(prefix)).max() < 1e-12
    with pytest.raises(DatasetError, match="pass that one pair"):
        _build([root], tmp_path / "nopair.npz", grid=SMALL)


def test_nan_laws_at_a_root_are_refused(pair, tmp_path):
    """A target whose logits are NaN (every token masked: the top-k row has no mass) gives NaN features: refused
    on one line, naming the root."""
    from tests.support.tiny_models import tiny_pair

    broken = tiny_pair(0)
    with torch.no_grad():
        broken.target.lm_head.weight.fill_(float("nan"))
    root = Root((1, 5, 2), "prompt:3", Sampling(1.0, top_k=3), pair=broken.name)
    with pytest.raises(DatasetError, match="NaN") as error:
        _build([root], tmp_path / "nan.npz", grid=SMALL, pair=broken)
    assert "prompt:3" in _one_line(error)


def test_a_rule_that_refuses_a_root_stops_the_build_naming_the_root(pair, tmp_path, monkeypatch):
    """A rule's own limit at one root (psbv's decomposition, here lowered) ends the build on one line that names the
    root, keeps the roots labelled before it and says what would let the build through; no dataset file."""
    import verispec.verifiers.psbv_split as psbv_split

    roots = [Root((1, 5, 2), "prompt:3", Sampling(1.0), pair=pair.name),
             Root((4, 4), "prompt:7", Sampling(1.0), pair=pair.name)]
    grid = ActionGrid((2,), (0,), (1,), ("psbv",))
    out = tmp_path / "refused.npz"
    first = _build(roots[:1], out, grid=grid, pair=pair)  # the first root labels at the real limit
    monkeypatch.setattr(psbv_split, "MAX_DECOMPOSITION_STEPS", 1)
    with pytest.raises(DatasetError) as error:
        _build(roots, out, grid=grid, pair=pair)
    line = _one_line(error)
    assert "at a root of 'prompt:7' (2 context tokens)" in line and "psbv: a float split" in line
    assert "the 1 root(s) labelled before it are saved" in line and "--verifiers" in line
    assert not out.exists() or Dataset.load(out).key.tolist() == first.key.tolist()  # the first build's file stands
    assert len(json.loads(store_path(out).read_text())["rows"]) == 1


def test_roots_of_one_prompt_share_the_models_caches_and_keep_their_labels(pair, tmp_path, monkeypatch):
    """A build labels a pair's roots in context order through one ``SharedContext``: the roots of one trace (and of
    one prompt under two settings) prefill only what their contexts add, and every row equals the row of a build
    of that root alone (float64 tiny pair, 1e-12)."""
    from verispec.models.problem import SharedContext

    prefilled = []
    original = SharedContext.take

    def take(self, owner, tokens):
        before = self.prefilled_tokens
        models = original(self, owner, tokens)
        prefilled.append(self.prefilled_tokens - before)
        return models

    monkeypatch.setattr(SharedContext, "take", take)
    top3, top2 = Sampling(1.0, top_k=3), Sampling(0.8, top_k=2)
    roots = [Root((1, 5, 2, 7, 3, 3), "g", top3, pair=pair.name), Root((1, 5, 2, 7), "g", top3, pair=pair.name),
             Root((1, 5, 2, 7), "g", top2, pair=pair.name), Root((4, 4, 9), "h", top3, pair=pair.name)]
    options = {"grid": SMALL, "pair": pair, "method": "conditional", "samples": 3}
    together = _build(roots, tmp_path / "together.npz", **options)
    # the caches hold a root's context but its last two tokens (the one before the root is fed with each tree):
    # in context order (1,5,2,7) twice (1,5 prefilled, then nothing), (1,5,2,7,3,3) (2,7 more), (4,4,9) (4, anew)
    assert prefilled == [2, 0, 2, 1]
    assert together.key.tolist() == [root.key() for root in roots]  # the file keeps the order given
    for index, root in enumerate(roots):
        alone = _build([root], tmp_path / f"alone{index}.npz", **options)
        for name in ("features", "efficiency", "stderr"):
            np.testing.assert_allclose(getattr(together, name)[index], getattr(alone, name)[0], rtol=0, atol=1e-12)


def test_a_build_past_its_time_budget_stops_saved_and_resumes(tmp_path, capsys, monkeypatch):
    """``selector dataset --time-budget`` on a tiny saved pair: the budget runs out after the first trace (the soft
    check between trace batches, made to fire there: a real budget small enough to fire before the first batch
    would also hit the command's set-up at a random point), so the build exits 3 with one line saying how to
    continue and that trace saved; the same command without the budget then decodes only the other trace and
    finishes, and its dataset equals one built in one go."""
    from tests.support.tiny_models import tiny_dataset_command
    from verispec.cli import main
    from verispec.errors import AnalysisTimeoutError
    from verispec.guard import budget

    command = tiny_dataset_command(tmp_path, "--threads", "1", "--trace-batch", "1")
    out, whole = tmp_path / "budget.npz", tmp_path / "whole.npz"
    calls = []

    def check(what):
        calls.append(what)
        if len(calls) == 2:  # before the second trace batch
            raise AnalysisTimeoutError(f"{what} ran past its time budget")

    monkeypatch.setattr(budget, "check", check)
    capsys.readouterr()
    assert main(command + ["--out", str(out), "--time-budget", "600"]) == 3
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err[-1].splitlines()) == 1 and "time budget" in err[-1]
    assert "run the same command again to continue" in err[-1]
    assert err[-1].count("ran past its time budget") == 1  # the stage's own words are not repeated
    assert not out.exists() and len(json.loads((tmp_path / "budget.npz.traces.json").read_text())["rows"]) == 1
    monkeypatch.undo()
    assert main(command + ["--out", str(out)]) == 0
    assert main(command + ["--out", str(whole)]) == 0
    resumed, once = Dataset.load(out), Dataset.load(whole)
    assert resumed.key.tolist() == once.key.tolist() and len(set(resumed.key.tolist())) == len(resumed)
    np.testing.assert_array_equal(resumed.efficiency, once.efficiency)


def _count_packed_passes(monkeypatch) -> list:
    """Record every forward pass of a packed model (the labels' forwards; the contexts' prefills are not packed)."""
    from verispec.models.tree_forward import CachedModel

    passes, original = [], CachedModel.extend

    def extend(self, tokens, parents, **options):
        if self.segments is not None:
            passes.append((len(self.segments), len(tokens)))
        return original(self, tokens, parents, **options)

    monkeypatch.setattr(CachedModel, "extend", extend)
    return passes


def test_roots_labelled_together_keep_their_labels_and_share_the_passes(pair, tmp_path, monkeypatch):
    """``root_batch``: a pair's roots labelled together (one ``ProblemPack``, combs drawn in lockstep) give every
    row the values of the roots labelled one by one (float64 tiny pair, 1e-12; each root draws from its own seed),
    in a quarter of the forward passes when all four go together; a build stopped by its time budget after the first
    group resumes to the very rows of an uninterrupted build (groups are cut from all the roots, not the rest)."""
    from verispec.errors import AnalysisTimeoutError
    from verispec.guard import budget

    top3, top2 = Sampling(1.0, top_k=3), Sampling(0.8, top_k=2)
    roots = [Root((1, 5, 2, 7, 3, 3), "g", top3, pair=pair.name), Root((1, 5, 2, 7), "g", top3, pair=pair.name),
             Root((1, 5, 2, 7), "g", top2, pair=pair.name), Root((4, 4, 9), "h", top3, pair=pair.name)]
    options = {"grid": SMALL, "pair": pair, "method": "conditional", "samples": 3}
    passes = _count_packed_passes(monkeypatch)
    alone = _build(roots, tmp_path / "alone.npz", root_batch=1, **options)
    alone_passes, passes[:] = len(passes), []
    together = _build(roots, tmp_path / "together.npz", root_batch=4, **options)
    assert {segments for segments, _ in passes} == {4} and len(passes) * 4 <= alone_passes
    for name in ("features", "efficiency", "stderr", "lower", "upper", "per_sample"):
        np.testing.assert_allclose(getattr(together, name), getattr(alone, name), rtol=0, atol=1e-12)

    calls = []

    def check(what):
        calls.append(what)
        if len(calls) == 2:  # before the second group of two
            raise AnalysisTimeoutError(f"{what} ran past its time budget")

    monkeypatch.setattr(budget, "check", check)
    out = tmp_path / "resumed.npz"
    with pytest.raises(AnalysisTimeoutError):
        _build(roots, out, root_batch=2, **options)
    assert len(json.loads(store_path(out).read_text())["rows"]) == 2
    monkeypatch.setattr(budget, "check", lambda what: None)
    resumed = _build(roots, out, root_batch=2, **options)
    once = _build(roots, tmp_path / "once.npz", root_batch=2, **options)
    assert resumed.key.tolist() == once.key.tolist() == [root.key() for root in roots]
    for name in ("features", "efficiency", "per_sample"):
        np.testing.assert_array_equal(getattr(resumed, name), getattr(once, name))
    with pytest.raises(DatasetError, match="root_batch must be an integer from 1 to 64"):
        _build(roots, tmp_path / "bad.npz", root_batch=0, **options)


def test_roots_of_a_setting_without_a_filter_are_labelled_one_at_a_time(pair, tmp_path, monkeypatch):
    """Dense laws (no top-k, no top-p) are labelled one root at a time whatever ``root_batch`` says (their laws, not
    the forwards, are their cost, and several at once lift the peak memory); filtered roots go together."""
    top3 = Sampling(1.0, top_k=3)
    roots = [Root((1, 5, 2, 7), "g", top3, pair=pair.name), Root((4, 4, 9), "h", top3, pair=pair.name),
             Root((1, 5, 2, 7), "g", Sampling(1.0), pair=pair.name), Root((4, 4, 9), "h", Sampling(0.9),
                                                                              pair=pair.name)]
    passes = _count_packed_passes(monkeypatch)
    data = _build(roots, tmp_path / "mixed.npz", grid=SMALL, pair=pair, method="conditional", samples=2,
                  root_batch=4)
    assert data.key.tolist() == [root.key() for root in roots]
    assert sorted({segments for segments, _ in passes}) == [1, 2]
