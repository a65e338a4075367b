"""The sizes of decoding's trees (issue 66, item 3): drafts that coincide merge, so a drawn delayed tree has fewer
nodes and narrower draft forwards than its maximum, and a latency model that carries the sizes
(``LatencyModel.tree_sizes``, ``verispec.selector.tree_sizes``) prices an action at its expected block time over them.

* the sizes of each action's tree in sampled combs against the distinct prefixes counted from the comb arrays here
  (no TreeBuilder), with a negative control (the maximum, which merging undercuts on a peaked draft);
* the expected block time by hand, a model's sizes through ``as_dict``/``from_dict`` and ``action_times``;
* sizes that no tree of the drafter could have, or malformed entries, refused on one line;
* ``experiments/tree_sizes.py`` on a tiny pair: every action of the grid, counts summing to roots x combs, filed
  under the dataset's sampling setting beside another setting's sizes the model carried, which stay as they were.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from verispec.latency import LatencyError, LatencyModel
from verispec.selector.actions import ActionGrid, action_times
from verispec.selector.combs import sample_combs
from verispec.selector.tree_sizes import as_tree_sizes, comb_tree_sizes
from verispec.simulator import parse_tree, random_problem

MODEL = LatencyModel(60.0, (1, 2, 3, 4, 5), (170.0, 175.0, 240.0, 245.0, 410.0), "ms", "by hand",
                     draft_sizes=(1, 2, 3), draft_times=(60.0, 66.0, 79.0))


def _distinct_prefixes(tokens_by_path) -> tuple[int, tuple[int, ...]]:
    """(nodes, widths) of the tree of these root-to-leaf token paths (every path as long as the tree is deep):
    distinct prefixes, and per depth j the distinct prefixes of length j that some longer path extends."""
    depth = max(len(path) for path in tokens_by_path)
    prefixes = {tuple(path[:j]) for path in tokens_by_path for j in range(len(path) + 1)}
    internal = {tuple(path[:j]) for path in tokens_by_path for j in range(len(path))}
    return len(prefixes), tuple(sum(len(prefix) == j for prefix in internal) for j in range(depth))


def test_each_actions_sizes_are_the_distinct_prefixes_of_its_comb():
    grid = ActionGrid((1, 2, 3), (0, 1, 2), (0, 1, 2), ("specinfer",))
    # a peaked draft at V = 3: paths coincide often, so merging matters
    problem = random_problem(3, grid.max_depth, 7)
    combs = sample_combs(problem, grid, 40, np.random.default_rng(3))
    sizes = comb_tree_sizes([combs], grid)
    merged = False
    for action in grid.actions:
        drafter = action.drafter()
        expected = {}
        for s in range(combs.samples):
            trunk = combs.trunk[s, :action.l1].tolist()
            if action.l2 == 0:
                paths = [trunk]
            else:
                point = combs.points.index(action.l1)
                paths = [trunk + combs.paths[s, point, j, :action.l2].tolist() for j in range(action.k)]
            key = _distinct_prefixes(paths)
            expected[key] = expected.get(key, 0) + 1
        assert dict(sizes[drafter.spec]) == expected, action.name
        assert sum(expected.values()) == combs.samples
        most = (drafter.max_nodes, drafter.draft_widths)
        assert all(nodes <= most[0] and all(w <= m for w, m in zip(widths, most[1])) for nodes, widths in expected)
        merged |= any(key != most for key in expected)
    assert merged  # negative control: the maximum is not what these trees had


def test_a_model_with_sizes_prices_the_expected_block_time():
    sizes = {"iid:2,1": [[3, 2, [1]], [1, 3, [1]]], "delayed:3,1,2": [[2, 4, [1, 1, 1]], [2, 6, [1, 1, 2]]]}
    model = LatencyModel.from_dict({**MODEL.as_dict(), "tree_sizes": sizes, "tree_sizes_source": "by hand"})
    assert LatencyModel.from_dict(json.loads(json.dumps(model.as_dict()))) == model
    # by hand: 3 of 4 trees merged their 2 drafts into 1 (2 nodes), 1 kept both (3 nodes)
    assert model.drafter_time(parse_tree("iid:2,1")) == pytest.approx((3 * (60 + 175) + (60 + 240)) / 4, rel=1e-12)
    deep = parse_tree("delayed:3,1,2")
    # t_p(6) extrapolated from t_p(4) and t_p(5): 410 + (410 - 245)
    by_hand = (2 * (60 + 60 + 60 + 245) + 2 * (60 + 60 + 66 + 410 + 165)) / 4
    assert model.drafter_time(deep) == pytest.approx(by_hand, rel=1e-12)
    # a tree without sizes keeps its maximum; without sizes at all the model is the old one
    assert model.drafter_time(parse_tree("iid:3,1")) == MODEL.drafter_time(parse_tree("iid:3,1")) == 60 + 245
    assert MODEL.drafter_time(parse_tree("iid:2,1")) == 60 + 240  # negative control: the maximum, 3 nodes
    grid = ActionGrid((2,), (0,), (1,), ("specinfer",))
    assert action_times(grid, model).tolist() == [pytest.approx((3 * (60 + 175) + (60 + 240)) / 4, rel=1e-12)]


@pytest.mark.parametrize("sizes,message", [
    ({"iid:2,1": [[1, 4, [1]]]}, "not a tree of it"),
    ({"iid:2,1": [[1, 3, [1, 1]]]}, "not a tree of it"),
    ({"iid:2,2": [[1, 5, [1, 3]]]}, "not a tree of it"),
])
def test_sizes_no_tree_of_the_drafter_could_have_are_refused(sizes, message):
    model = LatencyModel.from_dict({**MODEL.as_dict(), "tree_sizes": sizes})
    spec = next(iter(sizes))
    with pytest.raises(LatencyError, match=message) as error:
        model.drafter_time(parse_tree(spec))
    assert "\n" not in str(error.value) and spec in str(error.value)


@pytest.mark.parametrize("sizes,message", [
    ({"iid:2,1": []}, "no sizes"), ({"iid:2,1": [[0, 2, [1]]]}, "bad entry"), ({"iid:2,1": [[1, 2, [0]]]}, "bad entry"),
    ({"iid:2,1": [[1, 2]]}, "not a latency model"), ([1, 2], "tree_sizes must map"),
])
def test_malformed_sizes_are_refused_on_one_line(sizes, message):
    with pytest.raises(LatencyError, match=message) as error:
        LatencyModel.from_dict({**MODEL.as_dict(), "tree_sizes": sizes})
    assert "\n" not in str(error.value)


def test_as_tree_sizes_lists_the_most_frequent_first():
    from collections import Counter

    table = as_tree_sizes({"iid:2,1": Counter({(2, (1,)): 1, (3, (1,)): 5})})
    assert table == {"iid:2,1": [[5, 3, [1]], [1, 2, [1]]]}


def test_the_script_adds_every_actions_sizes_to_a_latency_model(tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from tests.support.scripts import load_script
    from tests.support.tiny_models import tiny_dataset_command
    from verispec.cli import main
    from verispec.selector.dataset_file import Dataset
    from verispec.selector.roots import sampling_text

    dataset = tmp_path / "d.npz"
    command = tiny_dataset_command(tmp_path, "--threads", "1", "--out", str(dataset))
    assert main(command) == 0
    latency = tmp_path / "lat.json"
    other = {"iid:2,1": [[1, 2, [1]]]}  # another setting's sizes, already in the model: kept as they are
    latency.write_text(json.dumps(MODEL.with_tree_sizes("T=0.3", other, "by hand").as_dict()))
    out = tmp_path / "sized.json"
    script = load_script("experiments/tree_sizes.py")
    arguments = ["--dataset", str(dataset), "--latency", str(latency), "--roots", "2", "--samples", "3",
                 "--threads", "1", "--target", command[command.index("--target") + 1],
                 "--draft", command[command.index("--draft") + 1], "--out", str(out)]
    assert script.main(arguments) == 0
    model = LatencyModel.load(out)
    built = Dataset.load(dataset)
    grid = ActionGrid(built.metadata["grid"]["ks"], built.metadata["grid"]["l1s"], built.metadata["grid"]["l2s"],
                      ("specinfer",))
    specs = {action.drafter().spec for action in grid.actions}
    setting = sampling_text(built.samplings[0])  # the dataset's setting, as the study names it
    assert model.sized_settings == ("T=0.3", setting) and setting != "T=0.3"
    assert model.as_dict()["tree_sizes"]["T=0.3"] == {"source": "by hand", "trees": other}
    trees = next(trees for name, trees, _ in model.tree_sizes if name == setting)
    assert {spec for spec, _ in trees} == specs
    assert all(sum(count for count, _, _ in rows) == 2 * 3 for _, rows in trees)
    assert action_times(grid, model.for_setting(setting)).shape == (len(grid.actions),)
    assert setting in model.sizes_source(setting) and "d.npz" in model.sizes_source(setting)
    assert json.loads(out.read_text())["record"]["command"].startswith("python experiments/tree_sizes.py")
    # an --out verispec did not write is not replaced
    foreign = tmp_path / "notes.json"
    foreign.write_text("{}")
    assert script.main([*arguments[:-1], str(foreign)]) == 2
    assert foreign.read_text() == "{}"
