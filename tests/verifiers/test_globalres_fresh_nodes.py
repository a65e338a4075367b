"""Global Resolution without its node memo where every node is new (``node_cache.fresh_nodes``; issue 66, item 5):
real decoding asks about each tree node once, with its own (p, q), so the memo's key (NH over p and q, about 5% of a
node at V = 151,936) buys nothing there. Inside ``fresh_nodes`` the rule is built without a key and kept nowhere; the
laws must be the same bits as the cached route's, in the verifier's walk and in real decoding on the tiny pair. The
checks count the key's calls and compare with the cached route, and each has a broken twin that is caught."""

from __future__ import annotations

import numpy as np
import pytest

from verispec.simulator.trees import TreeBatch
from verispec.verifiers import globalres, node_cache
from verispec.verifiers.globalres import GlobalResolutionSolver
from verispec.verifiers.node_cache import fresh_nodes, nodes_are_fresh
from verispec.verifiers.tree_walk import TopDownVerifier

VOCAB = 700


def _batch() -> TreeBatch:
    """One tree on a vocabulary the integrals solve: the root draws three i.i.d. children (two agree: nodes 1, 1,
    2), node 1 draws two that agree (node 3); the root and node 1 are solved, nodes 2 and 3 are leaves."""
    rng = np.random.default_rng(5)
    logits = rng.standard_normal((1, 4, VOCAB)) * 2.0
    p = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    draft = np.exp(logits + rng.standard_normal(logits.shape))
    q = draft / draft.sum(-1, keepdims=True)
    return TreeBatch(vocab_size=VOCAB, parent=(-1, 0, 0, 1), depth=(0, 1, 1, 2),
                     child_lists=((1, 1, 2), (3, 3), (), ()), tokens=np.array([[-1, 11, 42, 7]]), p=p, q=q,
                     contexts=np.arange(4)[None])


def _counting_keys(monkeypatch) -> list:
    calls = []
    key = globalres.support_key

    def counted(*args):
        calls.append(1)
        return key(*args)

    monkeypatch.setattr(globalres, "support_key", counted)
    return calls


class _KeyedAnyway(GlobalResolutionSolver):
    """Broken twin: ignores ``fresh_nodes`` (keys and keeps every node)."""

    def resolution(self, p, q, num_drafts):
        key, value = globalres.support_key(p, q, num_drafts), super().resolution(p, q, num_drafts)
        self._cache.put(key, value)
        return value

    rule = resolution


class _FreshWrong(GlobalResolutionSolver):
    """Broken twin: its fresh route solves the node with one draft fewer."""

    def resolution(self, p, q, num_drafts):
        return super().resolution(p, q, num_drafts - 1 if nodes_are_fresh() else num_drafts)

    rule = resolution


def _fresh_laws(solver_type, monkeypatch):
    """(cached laws, fresh laws, key calls inside fresh_nodes, entries the fresh solver kept)."""
    batch = _batch()
    cached = TopDownVerifier(solver_type(method="integrals")).emission_laws(batch)
    calls = _counting_keys(monkeypatch)
    solver = solver_type(method="integrals")
    with fresh_nodes():
        assert nodes_are_fresh()
        fresh = TopDownVerifier(solver).emission_laws(batch)
    assert not nodes_are_fresh()
    return cached, fresh, len(calls), len(solver._cache._entries)


def test_inside_fresh_nodes_the_laws_are_the_cached_routes_bits_without_a_key(monkeypatch):
    cached, fresh, key_calls, kept = _fresh_laws(GlobalResolutionSolver, monkeypatch)
    assert key_calls == 0 and kept == 0
    assert np.array_equal(cached, fresh)
    assert abs(fresh.sum() - 1.0) < 1e-12  # a law over (node, token)


def test_a_solver_that_keys_anyway_or_solves_another_node_is_caught(monkeypatch):
    _, _, key_calls, kept = _fresh_laws(_KeyedAnyway, monkeypatch)
    assert key_calls == 2 and kept == 2  # the root and node 1
    cached, fresh, _, _ = _fresh_laws(_FreshWrong, monkeypatch)
    assert np.abs(cached - fresh).max() > 1e-6


def test_real_decoding_keys_no_node_and_decodes_the_same_laws(pair, monkeypatch):
    """The tiny pair with i.i.d. trees: decoding enters ``fresh_nodes`` (no key is computed) and its block laws are
    the cached route's bit for bit (the same run with the flag switched off in the solver computes keys: the
    counter works)."""
    pytest.importorskip("torch")
    from verispec.models import Sampling, decoding, generate

    runs, check = {}, decoding.check_emission_laws
    for route in ("fresh", "cached"):
        calls, laws = _counting_keys(monkeypatch), []

        def recorded(name, batch, emitted, check=check, laws=laws):
            laws.append(emitted.detach().cpu().numpy().copy())
            return check(name, batch, emitted)

        monkeypatch.setattr(decoding, "check_emission_laws", recorded)
        if route == "cached":
            monkeypatch.setattr(node_cache, "nodes_are_fresh", lambda: False)
        generation = generate(pair, [1, 2, 3], "iid:2,2", GlobalResolutionSolver().name, 6, Sampling(1.0), seed=4)
        runs[route] = (len(calls), laws, generation.tokens)
    (fresh_calls, fresh_laws, fresh_tokens), (cached_calls, cached_laws, cached_tokens) = runs["fresh"], \
        runs["cached"]
    assert fresh_calls == 0 and cached_calls > 0 and len(cached_laws) > 0
    assert fresh_tokens == cached_tokens
    assert len(fresh_laws) == len(cached_laws) and all(np.array_equal(a, b) for a, b in zip(fresh_laws, cached_laws))
