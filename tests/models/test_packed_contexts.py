"""Packed contexts (``CachedModel.packed``): trees grown under several contexts in one forward pass give each tree
the logits its own context's forward gives (float64 tiny pairs), and a pack's misuse is a one-line error."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from verispec.errors import VerispecError  # noqa: E402
from verispec.models.tiny import tiny_causal_lm  # noqa: E402
from verispec.models.tree_forward import CachedModel, CommittedState  # noqa: E402

CONTEXTS = [[3, 1, 4, 1, 5, 9, 2], [2, 7], [6, 5, 3, 5, 8, 9, 7, 9, 3, 2, 3], [8]]
#: per context: a small tree (tokens, parents among its own nodes, -1 its root) fed in two levels
TREES = [([5, 6, 7, 1], [-1, 0, 0, 1]), ([9, 9], [-1, 0]), ([1, 2, 3, 4, 5], [-1, 0, 1, 1, 0]), ([4, 3], [-1, -1])]


@pytest.fixture(scope="module")
def model():
    return tiny_causal_lm(3, layers=2)


def alone(model, context, tokens, parents):
    cached = CachedModel(model)
    if context:
        cached.prefill(context)
    return cached.extend(tokens, parents)


def states(model, contexts):
    """Each context committed on ONE model in turn (as SharedContext hands a cache from root to root), snapshots
    taken between: later prefills and rollbacks must leave an earlier snapshot intact."""
    cached, taken = CachedModel(model), []
    for context in contexts:
        cached.rollback(0)
        if context:
            cached.prefill(context)
        taken.append(cached.snapshot())
    return taken


def test_one_forward_over_several_contexts_equals_each_alone(model):
    packed = CachedModel.packed(model, states(model, CONTEXTS))
    assert packed.segments == ((0, 7), (7, 2), (9, 11), (20, 1))
    tokens, parents, segments, where = [], [], [], []
    for segment, (tree_tokens, tree_parents) in enumerate(TREES):
        base = len(tokens)
        where.append(range(base, base + len(tree_tokens)))
        tokens += tree_tokens
        parents += [-1 if parent == -1 else base + parent for parent in tree_parents]
        segments += [segment] * len(tree_tokens)
    logits = packed.extend(tokens, parents, segments=segments)
    for context, (tree_tokens, tree_parents), rows in zip(CONTEXTS, TREES, where):
        expected = alone(model, context, tree_tokens, tree_parents)
        assert torch.allclose(logits[list(rows)], expected, rtol=0, atol=1e-12)


def test_levels_fed_one_after_another_and_a_context_of_no_committed_token(model):
    """A tree fed level by level on a pack (the labels' draft) and a segment of length 0 (a one-token context)."""
    contexts = [[3, 1, 4], []]
    packed = CachedModel.packed(model, states(model, contexts))
    first = packed.extend([5, 2], [-1, -1], segments=[0, 1])                  # the two roots
    second = packed.extend([6, 7, 8], [0, 0, 1], segments=[0, 0, 1])          # their children
    for segment, context in enumerate(contexts):
        own = [[5], [2]][segment]
        children = [[6, 7], [8]][segment]
        expected = alone(model, context, own + children, [-1] + [0] * len(children))
        assert torch.allclose(first[segment], expected[0], rtol=0, atol=1e-12)
        rows = [0, 1] if segment == 0 else [2]
        assert torch.allclose(second[rows], expected[1:], rtol=0, atol=1e-12)
    packed.discard()
    assert packed.pending == 0 and packed.committed == 3
    again = packed.extend([5], [-1], segments=[0])
    assert torch.allclose(again[0], first[0], rtol=0, atol=1e-12)


def test_control_a_pack_without_segments_mixes_contexts(model):
    """The control the equality test must catch: the same packed cache read as ONE sequence (every slot visible,
    positions counted from the pack's end) gives other logits."""
    packed = CachedModel.packed(model, states(model, CONTEXTS[:2]))
    mixed = CachedModel(model)
    mixed.cache, mixed.committed = packed.cache, packed.committed
    wrong = mixed.extend([9], [-1])
    right = alone(model, CONTEXTS[1], [9], [-1])
    assert not torch.allclose(wrong[0], right[0], rtol=0, atol=1e-6)


def test_misuse_is_refused_in_one_line(model):
    taken = states(model, CONTEXTS[:2])
    packed = CachedModel.packed(model, taken)
    with pytest.raises(VerispecError, match="one segment per token"):
        packed.extend([1], [-1])
    with pytest.raises(VerispecError, match="one segment per token"):
        CachedModel(model).extend([1], [-1], segments=[0])
    with pytest.raises(VerispecError, match="segment 2"):
        packed.extend([1], [-1], segments=[2])
    packed.extend([1], [-1], segments=[0])
    with pytest.raises(VerispecError, match="its parent's segment"):
        packed.extend([2], [0], segments=[1])
    assert packed.pending == 1  # the refused tokens left nothing behind
    with pytest.raises(VerispecError, match="commits nothing"):
        packed.commit([0])
    with pytest.raises(VerispecError, match="segments stay whole"):
        packed.rollback(0)
    with pytest.raises(VerispecError, match="CommittedState"):
        CachedModel.packed(model, [])
    with pytest.raises(VerispecError, match="CommittedState"):
        CachedModel.packed(model, [CommittedState((), 0), "state"])
    with pytest.raises(VerispecError, match="no pending tokens"):
        packed.snapshot()


def _packed_trees(model, by_segment=True):
    packed = CachedModel.packed(model, states(model, CONTEXTS), by_segment=by_segment)
    tokens, parents, segments = [], [], []
    for segment, (tree_tokens, tree_parents) in enumerate(TREES):
        base = len(tokens)
        tokens += tree_tokens
        parents += [-1 if parent == -1 else base + parent for parent in tree_parents]
        segments += [segment] * len(tree_tokens)
    return packed, tokens, parents, segments


def test_attention_runs_per_segment_and_equals_the_dense_masked_forward(model, monkeypatch):
    """The packed forward's attention goes segment by segment (each segment's queries against its own committed span
    and its own pending nodes only: the key widths are counted), gives the dense masked forward's logits to 1e-12, and
    leaves the model's attention implementation as it found it."""
    from verispec.models import segmented_attention

    widths = []
    original = torch.nn.functional.scaled_dot_product_attention

    def counted(query, key, value, *args, **kwargs):
        widths.append((query.shape[2], key.shape[2]))
        return original(query, key, value, *args, **kwargs)

    before = model.config._attn_implementation
    packed, tokens, parents, segments = _packed_trees(model)
    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", counted)
    fast = packed.extend(tokens, parents, segments=segments)
    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", original)
    assert model.config._attn_implementation == before
    # per layer, one call a segment: its tree's nodes against its context's slots plus its own tree's nodes
    expected = [(len(tree), len(context) + len(tree)) for context, (tree, _) in zip(CONTEXTS, TREES)]
    assert widths == expected * model.config.num_hidden_layers
    dense_model, *_ = _packed_trees(model, by_segment=False)
    dense = dense_model.extend(tokens, parents, segments=segments)
    assert torch.allclose(fast, dense, rtol=0, atol=1e-12)
    assert segmented_attention.ATTENTION_NAME != before


def test_a_second_level_sees_the_first_levels_nodes_of_its_own_segment_only(model):
    """The plan of a level fed after another: a node's columns are its context's span and the pending nodes of its
    own segment (those of the other segments are never among them)."""
    from verispec.models.segmented_attention import segment_plan

    allowed = torch.ones((3, 20 + 5), dtype=torch.bool)
    spans = ((0, 7), (7, 2), (9, 11))
    pending = [0, 2, 0, 2, 0]  # two pending tokens before, three new: segments 2 and 0
    plan = segment_plan(allowed, [2, 0, 0], spans, 20, pending, torch.float64, "cpu")
    parts = {int(rows[0]): (rows.tolist(), columns.tolist()) for rows, columns, _ in plan.parts}
    assert parts[1] == ([1, 2], list(range(0, 7)) + [20, 22, 24])
    assert parts[0] == ([0], list(range(9, 20)) + [21, 23])


def test_the_attention_implementation_is_restored_when_the_forward_fails(model, monkeypatch):
    packed, tokens, parents, segments = _packed_trees(model)
    before = model.config._attn_implementation

    def broken(*args, **kwargs):
        raise RuntimeError("a forward that fails")

    monkeypatch.setattr(model, "forward", broken)
    with pytest.raises(RuntimeError, match="fails"):
        packed.extend(tokens, parents, segments=segments)
    assert model.config._attn_implementation == before
    from verispec.models.segmented_attention import _PLAN

    assert _PLAN.get() is None


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU here (GPU sessions run it)")
def test_packed_forwards_by_segment_on_cuda_equal_each_context_alone(model):
    """The packed forward by segment on a GPU (the plan's index tensors and masks made on the model's device): each
    tree's logits equal its own context's forward on the same device to 1e-10 (float64), for a first level and a second
    one fed after it, and the dense packed forward agrees."""
    import copy

    cuda = copy.deepcopy(model).to("cuda")
    packed, tokens, parents, segments = _packed_trees(cuda)
    logits = packed.extend(tokens, parents, segments=segments)
    assert logits.device.type == "cuda"
    base = 0
    for context, (tree_tokens, tree_parents) in zip(CONTEXTS, TREES):
        expected = alone(cuda, context, tree_tokens, tree_parents)
        assert torch.allclose(logits[base:base + len(tree_tokens)], expected, rtol=0, atol=1e-10)
        base += len(tree_tokens)
    dense, *_ = _packed_trees(cuda, by_segment=False)
    assert torch.allclose(dense.extend(tokens, parents, segments=segments), logits, rtol=0, atol=1e-10)
    second = packed.extend([6, 7], [0, 0], segments=[0, 0])  # children of the first tree's root, level two
    expected = alone(cuda, CONTEXTS[0], TREES[0][0] + [6, 7], TREES[0][1] + [0, 0])
    assert torch.allclose(second, expected[-2:], rtol=0, atol=1e-10)
