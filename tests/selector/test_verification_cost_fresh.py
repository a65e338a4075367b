"""experiments/verification_cost.py prices what real decoding pays: every timed call of a rule that keeps a node memo
(Global Resolution, Khisti, SpecTr, OT-LP) solves each of the block's nodes again, as decoding meets each node once.

The file it replaced (a45fe5e) warmed each rule on the block it then timed and kept the least of two calls, so a
memoizing rule was timed on its cache hits, not on its solves. The broken twin (a ``_verify`` outside
``node_cache.fresh_nodes``, as decoding was before 89d3e4b) solves nothing in its timed calls. Global Resolution stands
for the four here: tests/verifiers/test_node_cache_fresh.py holds each of them to ``fresh_nodes``."""

from __future__ import annotations

import contextlib

import pytest

from tests.support.scripts import load_script

pytest.importorskip("torch")

VOCAB = 48


@pytest.fixture(scope="module")
def script():
    return load_script("experiments/verification_cost.py", "verification_cost_under_test")


def solves_in_timed_calls(script, rule: str, tree: str, calls: int, monkeypatch) -> tuple[int, int]:
    """(step-1 solves counted in ``time_cell``'s timed calls after the script's warm call on the same block, the
    block's nodes with two or more children)."""
    from verispec.lp_analysis import global_resolution
    from verispec.models.decoding import _resolve_action
    from verispec.models.sampling import Sampling
    from verispec.verifiers import globalres

    counted = []
    real = global_resolution.resolve

    def counting(*args, **kwargs):
        counted.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(globalres, "resolve", counting)
    action = _resolve_action(tree, rule, VOCAB)
    block = script.make_block(action, VOCAB, Sampling(temperature=1.0), (0, 0))
    host = script._Host(0)
    script.time_cell(host, action, [block], None)  # the script's warm call, on the block it then times
    counted.clear()
    cpu, _, stopped = script.time_cell(host, action, [block], None, calls)
    assert stopped is None and len(cpu) == 1
    branching = sum(1 for children in block.layout.child_lists if len(children) > 1)
    return len(counted), branching


@pytest.mark.parametrize("tree", ["delayed:2,0,1", "delayed:3,1,2"])
def test_every_timed_call_solves_every_branching_node_again(script, tree, monkeypatch):
    solves, branching = solves_in_timed_calls(script, "globalres", tree, 2, monkeypatch)
    assert branching >= 1
    assert solves == 2 * branching  # two timed calls, each node solved in each


def test_a_verify_that_keeps_the_memo_is_timed_on_cache_hits(script, monkeypatch):
    """Negative control: without fresh_nodes the warm call fills the memo and the timed calls solve nothing."""
    from verispec.models import decoding

    monkeypatch.setattr(decoding, "fresh_nodes", contextlib.nullcontext)
    solves, branching = solves_in_timed_calls(script, "globalres", "delayed:2,0,1", 2, monkeypatch)
    assert branching >= 1 and solves == 0
