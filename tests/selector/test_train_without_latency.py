"""`selector train` on a dataset whose metadata records no latency model (the tests' own ``pair_dataset`` writes such
datasets; issue 64: a KeyError). Its draft_time and target_time features were priced by a model no one recorded, so
training refuses on one line naming the dataset and the fix, and trains once the model is given (the features are
then set to that model's prices, as for any model other than the dataset's)."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")


@pytest.fixture
def unpriced(tmp_path):
    from tests.selector.test_pair_selector_study import T1, pair_dataset

    path = tmp_path / "helper.npz"
    pair_dataset(T1, seed=2).save(path)
    return path


def test_training_refuses_on_one_line_then_trains_with_a_given_model(unpriced, tmp_path, capsys):
    from verispec.cli import main
    from verispec.latency import LatencyModel
    from verispec.selector.dataset_file import Dataset
    from verispec.selector.selector import Selector

    assert "latency" not in Dataset.load(unpriced).metadata
    out = tmp_path / "s.pt"
    assert main(["selector", "train", "--dataset", str(unpriced), "--epochs", "1", "--out", str(out)]) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and repr(str(unpriced)) in error[0] and "records no latency model" in error[0]
    assert "--cost-ratio" in error[0] and "--latency FILE" in error[0] and not out.exists()
    assert main(["selector", "train", "--dataset", str(unpriced), "--epochs", "1", "--cost-ratio", "20", "--out",
                 str(out)]) == 0
    assert Selector.load(out).metadata["latency"] == LatencyModel.from_ratio(20.0).as_dict()


def test_negative_control_the_old_lookup_is_a_key_error(unpriced, monkeypatch):
    """The old code read ``metadata["latency"]`` unguarded: put back, the same dataset raises KeyError."""
    import verispec.selector.train as train
    from verispec.latency import LatencyModel
    from verispec.selector.dataset_file import Dataset

    monkeypatch.setattr(train, "recorded_latency", lambda dataset, name: LatencyModel.from_dict(
        dataset.metadata["latency"]))
    with pytest.raises(KeyError, match="latency"):
        train.train_on_dataset(Dataset.load(unpriced), dataset_name=str(unpriced), epochs=1)


def test_label_cost_names_what_a_dataset_lacks_for_labelling_its_roots_again(tmp_path, capsys, monkeypatch):
    """experiments/label_cost.py on such a dataset (the helper's, its keys made roots of a pair): one line naming the
    dataset and what it lacks, before any model loads. Negative control: the old unguarded read of the metadata put
    back, the same run is a KeyError."""
    import dataclasses

    import numpy as np

    import verispec.selector.roots as roots
    from tests.selector.test_pair_selector_study import T1, pair_dataset
    from tests.support.scripts import load_script
    from verispec.models.sampling import Sampling

    helper = pair_dataset(T1, seed=2)
    keys = [roots.Root((1, 2 + index), f"g{index % 3}", Sampling(1.0), pair="tiny").key()
            for index in range(len(helper.key))]
    path = tmp_path / "rooted.npz"
    dataclasses.replace(helper, key=np.array(keys, dtype=object)).save(path)
    script = load_script("experiments/label_cost.py", "label_cost_unpriced")
    arguments = ["--dataset", str(path), "--verifiers", "specinfer", "--out", str(tmp_path / "o.json")]
    assert script.main(arguments) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and f"the dataset {str(path)!r} records no latency, epsilon in its metadata" in error[0]
    monkeypatch.setattr(roots, "labelling_settings", lambda dataset, where: dataset.metadata)
    with pytest.raises(KeyError, match="latency"):
        script.main(arguments)
