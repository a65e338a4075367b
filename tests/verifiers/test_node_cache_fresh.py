"""Every cached node solver skips its memo where every node is new (``node_cache.fresh_nodes``, which real decoding
enters): no key is computed (NH or SHA-256 over p and q, 0.2-0.45 ms a node at V = 151,936) and nothing is kept, and
the laws are the cached route's bits. ``NodeCache.get_or_build`` does it for Khisti, OT-LP and Global Resolution;
SpecTr, which batches its misses, asks ``nodes_are_fresh`` itself. A cache that ignores the flag is caught."""

from __future__ import annotations

import numpy as np
import pytest

from verispec.simulator.trees import TreeBatch
from verispec.verifiers import globalres, khisti, node_cache, otlp, spectr
from verispec.verifiers.node_cache import NodeCache, fresh_nodes
from verispec.verifiers.tree_walk import TopDownVerifier

VOCAB = 12

#: (solver, the module whose key function it calls, that function's name)
SOLVERS = {
    "khisti": (lambda: khisti.KhistiSolver(), khisti, "node_key"),
    "otlp": (lambda: otlp.OTLPSolver(), otlp, "node_key"),
    "spectr": (lambda: spectr.SpecTrSolver(), spectr, "node_key"),
    "globalres": (lambda: globalres.GlobalResolutionSolver(), globalres, "support_key"),
}


def _batch(rows: int = 2) -> TreeBatch:
    """Two trees: the root draws three i.i.d. children (two agree), node 1 draws two that agree; a node's (p, q)
    differs between the trees, so the cached route keys four nodes."""
    rng = np.random.default_rng(11)
    logits = rng.standard_normal((rows, 4, VOCAB)) * 1.5
    p = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    draft = np.exp(logits + rng.standard_normal(logits.shape))
    q = draft / draft.sum(-1, keepdims=True)
    return TreeBatch(vocab_size=VOCAB, parent=(-1, 0, 0, 1), depth=(0, 1, 1, 2),
                     child_lists=((1, 1, 2), (3, 3), (), ()), tokens=np.array([[-1, 3, 8, 5]] * rows), p=p, q=q,
                     contexts=np.arange(4 * rows).reshape(rows, 4))


class _IgnoresFreshNodes(NodeCache):
    """Broken twin: a memo that keys and keeps every node whatever the flag says."""

    def get_or_build(self, key_of, build):
        key = key_of()
        if key not in self:
            self.put(key, build())
        return self.get(key)


def _laws(name: str, monkeypatch, cache_type=None):
    """(cached laws, fresh laws, key calls inside fresh_nodes, entries kept inside it)."""
    make, module, function = SOLVERS[name]
    batch = _batch()
    cached = TopDownVerifier(make()).emission_laws(batch)
    calls, key = [], getattr(module, function)
    monkeypatch.setattr(module, function, lambda *args: calls.append(1) or key(*args))
    solver = make()
    if cache_type is not None:
        solver._cache = cache_type()
    with fresh_nodes():
        fresh = TopDownVerifier(solver).emission_laws(batch)
    return cached, fresh, len(calls), len(solver._cache._entries)


@pytest.mark.parametrize("name", sorted(SOLVERS))
def test_inside_fresh_nodes_no_key_no_entry_and_the_same_laws(name, monkeypatch):
    cached, fresh, key_calls, kept = _laws(name, monkeypatch)
    assert key_calls == 0 and kept == 0
    assert np.array_equal(cached, fresh)
    assert np.allclose(fresh.reshape(2, -1).sum(-1), 1.0, atol=1e-12)  # a law over (node, token) per tree


@pytest.mark.parametrize("name", sorted(SOLVERS))
def test_a_memo_that_ignores_the_flag_is_caught(name, monkeypatch):
    if name == "spectr":  # it reads and fills its cache itself: the twin is SpecTr blind to the flag
        monkeypatch.setattr(spectr, "nodes_are_fresh", lambda: False)
    _, _, key_calls, kept = _laws(name, monkeypatch, None if name == "spectr" else _IgnoresFreshNodes)
    assert key_calls == 4 and kept == 4  # the root and node 1 of each tree


def test_outside_fresh_nodes_the_memo_keys_and_keeps_each_node_once(monkeypatch):
    calls, key = [], node_cache.node_key
    cache = NodeCache()
    built = []
    p, q = np.full(4, 0.25), np.array([0.1, 0.2, 0.3, 0.4])
    for _ in range(3):
        cache.get_or_build(lambda: calls.append(1) or key(p, q, 2), lambda: built.append(1) or "rule")
    assert len(calls) == 3 and len(built) == 1 and len(cache._entries) == 1
    with fresh_nodes():
        assert cache.get_or_build(lambda: calls.append(1), lambda: built.append(1) or "fresh") == "fresh"
    assert len(calls) == 3 and len(built) == 2 and len(cache._entries) == 1
