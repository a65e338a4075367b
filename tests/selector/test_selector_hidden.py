"""The hidden-state selector end to end on a tiny pair: a dataset that keeps each root's hidden states (checked
against transformers' own forward of the whole context), a network trained on them, evaluation, and decoding
in which the policy sees exactly the states the dataset stored for the same context (no train/serve skew)."""

from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from verispec.cli import main  # noqa: E402
from verispec.models import generate  # noqa: E402
from verispec.models.sampling import Sampling  # noqa: E402
from verispec.selector.dataset import build_dataset  # noqa: E402
from verispec.selector.dataset_file import Dataset, DatasetError  # noqa: E402
from verispec.selector.hidden_states import HIDDEN_NAMES, root_hidden  # noqa: E402
from verispec.selector.roots import Root  # noqa: E402
from verispec.selector.selector import Selector, SelectorPolicy  # noqa: E402


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    from tests.support.tiny_models import save_tiny_pair
    from verispec.models import load_pair

    folder = tmp_path_factory.mktemp("hidden")
    target, draft = save_tiny_pair(folder / "pair")
    prompts = folder / "prompts.txt"
    prompts.write_text("\n".join(f"prompt {i} for the hidden state test" for i in range(4)) + "\n")
    dataset = folder / "d.npz"
    assert main(["selector", "dataset", "--target", target, "--draft", draft, "--prompts", str(prompts),
                 "--sampling", "temperature=1", "--every", "3", "--trace-tokens", "6", "--ks", "1-2", "--l1s", "0-1",
                 "--l2s", "0-1", "--verifiers", "specinfer", "--samples", "2", "--hidden", "--out", str(dataset),
                 "--threads", "1"]) == 0
    return folder, load_pair(target, draft), dataset


def _direct_hidden(model, tokens) -> np.ndarray:
    """The last layer's hidden states of every position, by one plain transformers forward (a second route)."""
    with torch.inference_mode():
        output = model(torch.tensor([tokens]), output_hidden_states=True)
    return output.hidden_states[-1][0].float().numpy()  # [n, d]


def test_stored_hidden_states_are_the_models_own(built):
    """Every root's stored states, computed one forward a prompt's trace (``chain_hidden``), against transformers'
    forward of that root's own context."""
    folder, pair, path = built
    data = Dataset.load(path)
    assert sorted(data.hidden) == sorted(HIDDEN_NAMES)
    contexts = [tuple(json.loads(key)["context"]) for key in data.key.tolist()]
    assert any(a != b and b[:len(a)] == a for a in contexts for b in contexts)  # chains of several roots were cut
    for row, key in enumerate(data.key.tolist()):
        context = json.loads(key)["context"]
        target = _direct_hidden(pair.target, context[:-1])
        draft = _direct_hidden(pair.draft, context)
        np.testing.assert_allclose(data.hidden["target_prev"][row], target[-1], rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(data.hidden["draft_prev"][row], draft[-2], rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(data.hidden["draft_root"][row], draft[-1], rtol=1e-4, atol=1e-5)
    subset = data.subset([0, 2])
    assert np.array_equal(subset.hidden["draft_root"], data.hidden["draft_root"][[0, 2]])


def test_a_hidden_state_selector_trains_evaluates_and_decodes(built, capsys):
    folder, pair, path = built
    out = folder / "hidden.pt"
    assert main(["selector", "train", "--dataset", str(path), "--hidden", "all", "--epochs", "5", "--out",
                 str(out)]) == 0
    selector = Selector.load(out)
    assert selector.uses_hidden and set(selector.hidden_names) == set(HIDDEN_NAMES)
    capsys.readouterr()
    assert main(["selector", "evaluate", "--dataset", str(path), "--selector", str(out), "--json",
                 "--bootstrap", "100"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["selectors"]["hidden"]["settings"]["all"]["selector"]["throughput"] > 0

    seen = []

    class Recording(SelectorPolicy):
        def choose(self, context):
            seen.append((context.tokens, {name: value.float().cpu().numpy() for name, value in context.hidden.items()}))
            return super().choose(context)

    generation = generate(pair, "prompt 1 for the hidden state test", None, None, 8, Sampling(1.0), seed=3,
                          selector=Recording(selector))
    assert len(generation.tokens) >= 1 and seen
    for tokens, hidden in seen[:3]:  # the decoder's states are the ones the dataset stores for that context
        stored = root_hidden(Root(tokens, "g", Sampling(1.0), pair=pair.name), pair)
        for name in HIDDEN_NAMES:
            if name in hidden:
                np.testing.assert_allclose(hidden[name], stored[name], rtol=1e-4, atol=1e-5)


def test_hidden_states_are_refused_without_a_pair_or_in_the_dataset(built, tmp_path, capsys):
    from verispec.latency import LatencyModel
    from verispec.selector import ActionGrid
    from verispec.selector.roots import synthetic_roots

    with pytest.raises(DatasetError, match="hidden states come from a model pair"):
        build_dataset(synthetic_roots("context-free", 2, [0]), ActionGrid((1,), (0,), (0, 1), ("specinfer",)),
                      out=tmp_path / "s.npz", latency=LatencyModel.from_ratio(20), hidden=True)
    plain = tmp_path / "plain.npz"
    assert main(["selector", "dataset", "--family", "context-free", "--vocab", "2", "--seeds", "0-3", "--ks", "1",
                 "--l1s", "0", "--l2s", "0-1", "--verifiers", "specinfer", "--backend", "serial", "--out",
                 str(plain)]) == 0
    capsys.readouterr()
    assert main(["selector", "train", "--dataset", str(plain), "--hidden", "all", "--out",
                 str(tmp_path / "x.pt")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "holds the hidden states none" in err


def test_a_narrower_projection_is_trained_and_chooses_through_its_host_forward(built, capsys):
    from verispec.selector.network import HostForward

    folder, pair, path = built
    out = folder / "narrow.pt"
    assert main(["selector", "train", "--dataset", str(path), "--hidden", "all", "--projection", "16", "--epochs", "3",
                 "--out", str(out)]) == 0
    selector = Selector.load(out)
    model = selector.model
    assert model.config["projection"] == 16
    assert [linear.out_features for linear, _ in model.projections] == [16] * len(HIDDEN_NAMES)
    assert model.mlp[0].in_features == model.num_scalars + 16 * len(HIDDEN_NAMES)
    data = Dataset.load(path)
    blocks = [data.hidden[name][:4].astype(np.float32) for name in selector.hidden_names]
    with torch.no_grad():
        expected = model(torch.as_tensor(data.features[:4], dtype=torch.float32),
                         [torch.as_tensor(block) for block in blocks]).numpy()
    np.testing.assert_allclose(HostForward(model)(data.features[:4], blocks), expected, rtol=1e-4, atol=1e-5)
    generation = generate(pair, "prompt 2 for the hidden state test", None, None, 6, Sampling(1.0), seed=1,
                          selector=SelectorPolicy(selector))
    assert len(generation.tokens) >= 1


@pytest.mark.parametrize("extra", [[], ["--kind", "linear", "--hidden", "all"]])
def test_a_projection_without_hidden_states_is_refused_in_one_line(built, tmp_path, capsys, extra):
    folder, pair, path = built
    capsys.readouterr()
    assert main(["selector", "train", "--dataset", str(path), "--projection", "16", *extra, "--out",
                 str(tmp_path / "x.pt")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--projection 16" in err
    assert not (tmp_path / "x.pt").exists()


def test_roots_are_cut_into_chains_of_prefixes():
    from types import SimpleNamespace

    from verispec.selector.hidden_states import hidden_chains

    def root(context, pair="p"):
        return SimpleNamespace(context=tuple(context), pair=pair)

    roots = [root([1, 2, 3]), root([1, 2, 3, 4, 5]), root([1, 2, 9]), root([7, 8]), root([1, 2]), root([1, 2, 3], "o")]
    chains = hidden_chains(roots)
    assert sorted(sorted(chain) for chain in chains) == [[0, 1, 4], [2], [3], [5]]
    for chain in chains:  # the head is the longest, and every member begins it
        head = roots[chain[0]].context
        assert all(head[:len(roots[i].context)] == roots[i].context for i in chain)
        assert len(head) == max(len(roots[i].context) for i in chain)


def test_a_chain_gives_each_root_its_own_states_and_refuses_roots_that_are_not_prefixes(built):
    from verispec.selector.hidden_states import chain_hidden

    folder, pair, path = built
    roots = [Root((5, 6, 7, 8, 9, 10, 11), "g", Sampling(1.0), pair=pair.name),
             Root((5, 6, 7), "g", Sampling(1.0), pair=pair.name)]
    for root, states in zip(roots, chain_hidden(roots, pair)):
        target, draft = _direct_hidden(pair.target, list(root.context[:-1])), _direct_hidden(pair.draft,
                                                                                              list(root.context))
        np.testing.assert_allclose(states["target_prev"], target[-1], rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(states["draft_prev"], draft[-2], rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(states["draft_root"], draft[-1], rtol=1e-4, atol=1e-5)
    with pytest.raises(DatasetError, match="share their contexts' prefixes"):
        chain_hidden([roots[0], Root((5, 6, 8), "g", Sampling(1.0), pair=pair.name)], pair)


def test_a_labelled_build_gains_hidden_states_without_labelling_again(built, tmp_path, monkeypatch):
    """The same build command again with --hidden: the row store of labels is left as it was (no root labelled
    again), the dataset's labels are the same, and it now holds every root's hidden states."""
    import verispec.selector.dataset as dataset_module

    folder, pair, _ = built
    target, draft = str(folder / "pair" / "target"), str(folder / "pair" / "draft")
    prompts = folder / "prompts.txt"
    out = tmp_path / "d.npz"
    command = ["selector", "dataset", "--target", target, "--draft", draft, "--prompts", str(prompts), "--sampling",
               "temperature=1", "--every", "3", "--trace-tokens", "6", "--ks", "1-2", "--l1s", "0-1", "--l2s", "0-1",
               "--verifiers", "specinfer", "--samples", "2", "--out", str(out), "--threads", "1"]
    assert main(command) == 0
    store = out.with_name(out.name + ".roots.json")
    before, labels = store.read_bytes(), Dataset.load(out)
    assert labels.hidden is None

    def no_labelling(groups, *args, **options):
        if list(groups):
            raise AssertionError("a labelled root was labelled again")
        yield from ()

    monkeypatch.setattr(dataset_module, "_label_groups_here", no_labelling)
    assert main([*command, "--hidden"]) == 0
    assert store.read_bytes() == before
    gained = Dataset.load(out)
    assert np.array_equal(gained.efficiency, labels.efficiency) and list(gained.key) == list(labels.key)
    assert sorted(gained.hidden) == sorted(HIDDEN_NAMES) and all(len(block) == len(labels) for block in
                                                                 gained.hidden.values())
