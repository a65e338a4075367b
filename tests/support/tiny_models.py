"""Tiny model pairs for the tests (verispec.models.tiny), and a tiny pair installed where `verispec models install`
puts the real one, so that commands and examples written for the installed pair run in seconds. The statistical
decoding tests' seeded runs go through ``forwards_memoised`` and ``laws_memoised``: a model forward, or a verifier's
law, whose exact inputs were seen before returns what it returned then (the same tokens, in a fraction of the time)."""

from __future__ import annotations

import contextlib
import functools

from verispec.models.tiny import VOCAB, WORDS, save_tiny_pair, tiny_causal_lm, tiny_pair, tiny_tokenizer

__all__ = ["VOCAB", "WORDS", "forwards_memoised", "install_tiny_pair_as", "laws_memoised", "save_tiny_pair",
           "tiny_causal_lm", "tiny_dataset_command", "tiny_pair", "tiny_tokenizer"]


def tiny_dataset_command(folder, *extra: str) -> list[str]:
    """``selector dataset`` on a tiny pair saved in ``folder``/pair, two short prompts at T = 1 top-k 3, a grid of
    K 1-2, L1 and L2 0-1 with specinfer and 2 sampled trees a root, then ``extra`` (without --out)."""
    from pathlib import Path

    target, draft = save_tiny_pair(Path(folder) / "pair")
    prompts = Path(folder) / "prompts.txt"
    prompts.write_text("a b c d\ne f g\n")
    return ["selector", "dataset", "--target", target, "--draft", draft, "--prompts", str(prompts), "--sampling",
            "temperature=1,top_k=3", "--every", "2", "--trace-tokens", "4", "--ks", "1-2", "--l1s", "0-1", "--l2s",
            "0-1", "--verifiers", "specinfer", "--samples", "2", *extra]


def install_tiny_pair_as(cache, name: str = "qwen-coder", seed: int = 0):
    """A tiny pair in ``cache`` with the completion markers of an install of ``name`` (nothing downloaded)."""
    import json
    from pathlib import Path

    from verispec.models.install import MARKER, MARKER_FORMAT, PAIRS

    root = Path(cache) / "models" / name
    target_dir, draft_dir = save_tiny_pair(root, seed)
    for source, directory in zip(PAIRS[name].models, (target_dir, draft_dir)):
        marker = {"format": MARKER_FORMAT, "source": {"sha256": source.sha256}, "note": "a tiny stand-in for tests"}
        (Path(directory) / MARKER).write_text(json.dumps(marker))
    return target_dir, draft_dir


@contextlib.contextmanager
def laws_memoised(*verifiers):
    """Within the block, each verifier's ``emission_laws`` is looked up by its batch's exact contents (topology, and
    the bytes of the tokens, p, q and context ids): a batch seen before in the block gets a copy of the law computed
    for it then, anything else (a batch off the CPU) is computed as usual. The rules memoised here compute their law
    from the batch alone (decoding calls them under ``node_cache.fresh_nodes``: none keeps anything between blocks), so
    decoding emits the very tokens it emits without the memo (tests/models/test_decoding.py holds the two token for
    token), while a statistical test's seeded runs, which meet the same trees over and over, compute each law once
    (the globalres test's ``EachNodeOnce`` does the same for one solver). The memo lives for the block only: a rule's
    settings may change between tests. Yields the counts {"hits", "misses"}. Verifiers given twice, or None (a
    policy's decoder has no one verifier), are taken once."""
    counts = {"hits": 0, "misses": 0}
    wrapped = list({id(verifier): verifier for verifier in verifiers if verifier is not None}.values())
    with _shadowing(wrapped, "emission_laws",
                    lambda verifier: functools.partial(_memoised_laws, verifier.emission_laws, {}, counts)):
        yield counts


@contextlib.contextmanager
def _shadowing(objects, name: str, replacement):
    """Within the block, each object's attribute ``name`` is ``replacement(object)`` (made from the attribute as it
    reads on entering: the class's, or an outer block's), set on the instance; on leaving, what the instance held
    before is restored (or the instance attribute removed)."""
    shadowed = []
    for item in objects:
        shadowed.append(item.__dict__.get(name))
        setattr(item, name, replacement(item))
    try:
        yield
    finally:
        for item, previous in zip(objects, shadowed, strict=True):
            if previous is None:
                delattr(item, name)
            else:
                setattr(item, name, previous)


def _memoised_laws(laws, memo, counts, batch):
    import torch

    arrays = (batch.tokens, batch.p, batch.q, batch.contexts)
    if not all(isinstance(array, torch.Tensor) and array.device.type == "cpu" for array in arrays):
        return laws(batch)
    key = (batch.vocab_size, batch.parent, batch.depth, batch.child_lists, *(_tensor_key(array) for array in arrays))
    if key not in memo:
        counts["misses"] += 1
        memo[key] = laws(batch).clone()
    else:
        counts["hits"] += 1
    return memo[key].clone()


#: Forward results kept per model (and per version of its weights) by ``forwards_memoised``: room for every distinct
#: forward of the statistical decoding tests in one test process (about 3,000 for the sixteen verifiers' cases of
#: tests/models/test_decoding.py, some 10 KB each with their keys), and a bound on its memory.
MEMO_ENTRIES = 20_000


@contextlib.contextmanager
def forwards_memoised(*models):
    """Within the block, each model's forward over a ``DynamicCache`` (the forwards of ``CachedModel.extend`` in
    decoding) is looked up by its exact input bytes: the token ids, positions, 4D mask, every other argument AND the
    cache's keys and values, layer by layer. A forward seen before returns the logits it returned then and appends
    the keys and values it appended then; anything else (no cache, a StaticCache, a GPU tensor, an unknown argument,
    an attention other than the model's on entering, such as a packed model's by segment) runs as usual. A forward
    is a function of exactly those bytes (single-threaded CPU kernels: the same bits each time), so decoding emits
    the very tokens it emits without the memo, while the seeded runs of a statistical test from one context, which
    meet the same few trees over and over, skip most forwards (tests/models/test_decoding.py holds the two token for
    token, and the key to the cache's contents). Kept on the model across blocks, keyed by its weights' addresses and
    versions and its attention, so a changed model gets a fresh memo. Yields the counts {"hits", "misses"} of the
    block."""
    counts = {"hits": 0, "misses": 0}
    # model.forward on entering: the class's, bound (or an outer block's memo, restored on leaving this one)
    with _shadowing(models, "forward", lambda model: functools.partial(_memoised_forward, model.forward, _memo(model),
                                                                       counts, model.config)):
        yield counts


def _memo(model) -> dict:
    # what else a forward's output depends on: the weights (where they are, their in-place versions) and the attention
    # implementation the model dispatches to
    weights = tuple((parameter.data_ptr(), parameter._version, str(parameter.dtype), str(parameter.device))
                    for parameter in model.parameters()) + (getattr(model.config, "_attn_implementation", None),)
    memos = model.__dict__.setdefault("_tests_forward_memos", {})
    if weights not in memos:
        memos.clear()  # the weights changed (or moved): nothing kept describes the model any more
        memos[weights] = {"attention": weights[-1]}  # forwards under another attention just run
    return memos[weights]


def _memoised_forward(forward, memo, counts, config, *args, **kwargs):
    import types

    from transformers import DynamicCache
    from transformers.cache_utils import DynamicLayer

    caches = [value for value in (*args, *kwargs.values()) if isinstance(value, DynamicCache)]
    if len(caches) != 1 or not all(type(layer) is DynamicLayer for layer in caches[0].layers) or \
            getattr(config, "_attn_implementation", None) != memo["attention"]:  # e.g. a packed model's by segment
        return forward(*args, **kwargs)
    cache = caches[0]
    key = _key(args, kwargs, cache)
    if key is None:
        return forward(*args, **kwargs)
    if key in memo:
        counts["hits"] += 1
        logits, hidden, added = memo[key]
        for index, (keys, values) in enumerate(added):
            cache.update(keys, values, index)
        # what CachedModel reads of a forward's output (a ModelOutput costs more to build than the lookup)
        return types.SimpleNamespace(logits=logits.clone(), hidden_states=hidden and tuple(h.clone() for h in hidden),
                                     **{_output_cache_field(): cache})
    counts["misses"] += 1
    before = [layer.keys.shape[-2] if layer.is_initialized else 0 for layer in cache.layers]
    output = forward(*args, **kwargs)
    before += [0] * (len(cache.layers) - len(before))  # layers the first forward created
    added = tuple((layer.keys[..., length:, :].clone(), layer.values[..., length:, :].clone())
                  for layer, length in zip(cache.layers, before, strict=True))
    if len(memo) <= MEMO_ENTRIES:
        hidden = None if output.hidden_states is None else tuple(h.clone() for h in output.hidden_states)
        memo[key] = (output.logits.clone(), hidden, added)
    return output


@functools.cache
def _output_cache_field() -> str:
    """The output's field for the cache: ``cache`` in the transformers releases that renamed ``past_key_values``."""
    import dataclasses

    from transformers.modeling_outputs import CausalLMOutputWithPast

    names = {field.name for field in dataclasses.fields(CausalLMOutputWithPast)}
    return "cache" if "cache" in names else "past_key_values"


def _key(args, kwargs, cache):
    """Hashable bytes of a forward's arguments (in the order given: one call site gives one order) and of its cache's
    contents, or None where an argument is not understood (the forward then just runs)."""
    import torch

    parts = []
    for name, value in (*enumerate(args), *kwargs.items()):
        if value is cache:
            for layer in cache.layers:
                parts.append((_tensor_key(layer.keys), _tensor_key(layer.values)) if layer.is_initialized else None)
        elif isinstance(value, torch.Tensor):
            if value.device.type != "cpu" or value.requires_grad:
                return None
            parts.append((name, *_tensor_key(value)))
        elif value is None or isinstance(value, (bool, int, float, str)):
            parts.append((name, value))
        else:
            return None
    return tuple(parts)


def _tensor_key(tensor) -> tuple:
    # numpy's bytes are in C order whatever the strides (a rolled-back cache holds views)
    return tensor.dtype, tensor.shape, tensor.numpy().tobytes()
