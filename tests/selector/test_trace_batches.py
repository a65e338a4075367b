"""The traces of a pair's roots decoded in batches (``trace_roots(..., batch_size=N)``, through
verispec.selector.traces and verispec.models.batched): every stored trace is the one-prompt ``sample_target`` trace
from the seed its key records, under the key format that stores written one trace at a time hold (so they resume),
and the roots do not depend on the batch size; a store holding part of the traces gets only the missing ones, in
batches."""

from __future__ import annotations

import json

import pytest

from verispec.models.sampling import Sampling
from verispec.selector.dataset_file import DatasetError
from verispec.selector.roots import trace_roots

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

#: Prompts of lengths 1 to 6 (a 1-token prompt has no root at its start), by name.
PROMPTS = {"a": [1, 2, 3], "b": [4, 5], "c": [6, 7, 8, 9, 10, 11], "d": [12], "e": [2, 4, 6, 8]}
SAMPLINGS = [Sampling(1.0), Sampling(0.7, top_k=3)]
#: The fields of a trace's key in stores written one trace at a time (before batching).
KEY_FIELDS = {"pair", "group", "prompt", "sampling", "seed", "max_new_tokens"}


def _store(path, pair):
    from verispec.files.io import ResultStore

    return ResultStore(path, parameters={"pair": pair.name, "seed": 0})


def test_batched_traces_are_the_one_prompt_traces_of_their_seeds(pair, tmp_path):
    from verispec.models import sample_target

    store = _store(tmp_path / "traces.json", pair)
    roots = trace_roots(pair, PROMPTS, SAMPLINGS, every=3, max_new_tokens=9, seed=0, store=store, batch_size=3)
    assert len(store.rows) == len(PROMPTS) * len(SAMPLINGS)
    for key, row in store.rows.items():
        cell = json.loads(key)
        assert set(cell) == KEY_FIELDS and cell["pair"] == pair.name and cell["max_new_tokens"] == 9
        assert cell["prompt"] == PROMPTS[cell["group"]]
        sampling = Sampling(cell["sampling"]["temperature"], cell["sampling"]["top_k"], cell["sampling"]["top_p"])
        single = sample_target(pair, cell["prompt"], 9, sampling, cell["seed"])
        assert row["prompt_length"] == len(cell["prompt"])
        assert row["tokens"] == cell["prompt"] + single.tokens
    for batch_size in (1, 8):
        again = trace_roots(pair, PROMPTS, SAMPLINGS, every=3, max_new_tokens=9, seed=0, batch_size=batch_size)
        assert [root.key() for root in again] == [root.key() for root in roots]


def test_a_partial_store_decodes_only_the_missing_traces(pair, tmp_path, monkeypatch):
    import verispec.models.batched as batched

    first = _store(tmp_path / "first.json", pair)
    roots = trace_roots(pair, PROMPTS, SAMPLINGS, every=3, max_new_tokens=9, seed=0, store=first, batch_size=4)
    partial = _store(tmp_path / "partial.json", pair)
    kept = sorted(first.rows)[::2]
    partial.add_many({key: {name: first.rows[key][name] for name in ("prompt_length", "tokens")} for key in kept})
    decoded, real = [], batched.sample_target_batch

    def counting(pair_, prompts, *args, **kwargs):
        decoded.append(len(prompts))
        return real(pair_, prompts, *args, **kwargs)

    monkeypatch.setattr(batched, "sample_target_batch", counting)
    again = trace_roots(pair, PROMPTS, SAMPLINGS, every=3, max_new_tokens=9, seed=0, store=partial, batch_size=2)
    missing = len(first.rows) - len(kept)
    assert sum(decoded) == missing and max(decoded) <= 2 and len(decoded) >= missing // 2
    assert [root.key() for root in again] == [root.key() for root in roots]
    assert {key: row["tokens"] for key, row in partial.rows.items()} == \
        {key: row["tokens"] for key, row in first.rows.items()}
    with pytest.raises(DatasetError, match="batch_size must be an integer >= 1"):
        trace_roots(pair, PROMPTS, SAMPLINGS, max_new_tokens=4, batch_size=0)


def test_the_command_passes_trace_batch_through(tmp_path, monkeypatch, capsys):
    """``verispec selector dataset --trace-batch N`` hands N to trace_roots (8 when not given); 0 is refused."""
    import verispec.selector.roots as roots_module
    from tests.support.tiny_models import save_tiny_pair
    from verispec.cli import main
    from verispec.errors import VerispecError

    target, draft = save_tiny_pair(tmp_path / "pair")
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("a b c\nd e\n")
    seen = []

    def stop(*_args, batch_size, first_root, **_kwargs):
        seen.append((batch_size, first_root))
        raise VerispecError("stopped after the traces' options")

    monkeypatch.setattr(roots_module, "trace_roots", stop)
    command = ["selector", "dataset", "--target", target, "--draft", draft, "--prompts", str(prompts), "--ks", "1",
               "--l1s", "0", "--l2s", "0", "--verifiers", "specinfer", "--threads", "1"]
    assert main([*command, "--out", str(tmp_path / "a.npz"), "--trace-batch", "3"]) == 2
    assert main([*command, "--out", str(tmp_path / "b.npz")]) == 2
    assert main([*command, "--out", str(tmp_path / "d.npz"), "--trace-tokens", "8", "--first-root", "8"]) == 2
    assert seen == [(3, 0), (8, 0), (8, 8)]
    capsys.readouterr()
    assert main([*command, "--out", str(tmp_path / "c.npz"), "--trace-batch", "0"]) == 2
    assert "--trace-batch: must be an integer in [1, 256]" in capsys.readouterr().err
    # a first root past the traces' end is refused in one line before any model loads
    assert main([*command, "--out", str(tmp_path / "e.npz"), "--trace-tokens", "8", "--first-root", "9"]) == 2
    error = capsys.readouterr().err.strip()
    assert "--first-root 9 is past the traces' end (--trace-tokens 8)" in error and len(error.splitlines()) == 1
    assert seen == [(3, 0), (8, 0), (8, 8)]
