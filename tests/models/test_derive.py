"""Derived problems (verispec.models.derive, `verispec derive`): a live pair at a context as a V-token problem
file: the top V-1 tokens by p + q at each prefix and an 'other' bucket holding the rest."""

from __future__ import annotations

import json

import numpy as np
import pytest

from verispec.errors import VerispecError
from verispec.simulator import analyze, load_problem
from verispec.verifiers import REGISTRY

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from tests.support.tiny_models import WORDS, save_tiny_pair  # noqa: E402
from verispec.cli import main  # noqa: E402
from verispec.models import Sampling  # noqa: E402
from verispec.models.derive import derive_problem  # noqa: E402
from verispec.models.problem import ModelProblem  # noqa: E402

CONTEXT = [4, 1, 7]
SAMPLING = Sampling(1.0, top_p=0.97)


@pytest.mark.parametrize("name,spec", [("specinfer", "delayed:2,1,1"), ("bv", "chain:2"), ("spectr", "iid:2,1")])
def test_the_full_vocabulary_derives_a_relabelled_copy_with_the_same_block_efficiency(pair_seed2, name, spec):
    """V = 16 of 16: the bucket holds one token, so the derived problem is the live one with its tokens
    relabelled at each prefix; these rules do not look at token ids, so E[tau+1] is unchanged."""
    live = ModelProblem(pair_seed2, CONTEXT, SAMPLING, horizon=3)
    derived, _ = derive_problem(live, 16, 3)
    assert abs(analyze(derived, spec, REGISTRY[name]).block_efficiency
               - analyze(live, spec, REGISTRY[name]).block_efficiency) < 1e-12


def test_the_bucket_holds_the_rest_and_the_provenance_names_real_tokens(pair_seed2):
    live = ModelProblem(pair_seed2, CONTEXT, SAMPLING, horizon=2)
    derived, provenance = derive_problem(live, 4, 2)
    p, q = live.target(()), live.draft(())
    top = sorted(range(16), key=lambda t: (-(p[t] + q[t]), t))
    np.testing.assert_allclose(derived.target(())[:3], p[top[:3]], rtol=0, atol=1e-15)
    np.testing.assert_allclose(derived.draft(())[3], 1 - q[top[:3]].sum(), rtol=0, atol=1e-12)
    assert [provenance[str(i)]["tokens"] for i in range(4)] == [[t] for t in top[:4]]  # bucket: likeliest left
    # after derived token 1, the conditionals are the models' after real token top[1]
    second = live.target((top[1],))
    inner = sorted(range(16), key=lambda t: (-(second[t] + live.draft((top[1],))[t]), t))
    np.testing.assert_allclose(derived.target((1,))[:3], second[inner[:3]], rtol=0, atol=1e-15)
    assert provenance["1,0"]["tokens"] == [top[1], inner[0]]
    assert abs(provenance[""]["other_target"] - (1 - p[top[:3]].sum())) < 1e-12


def test_a_level_larger_than_the_law_cache_is_derived_in_batches_it_holds(pair_seed2):
    """Level 3 of V = 4 has 64 prefixes and the cache holds 5: asked for all at once, 59 would be evicted and
    recomputed one forward each. In batches of at most 5 every prefix costs one row of one batched pass:
    85 prefixes in all, so at most 4 levels + 85 / 5 = 21 passes, and the same problem as with a roomy cache."""
    tight = ModelProblem(pair_seed2, CONTEXT, SAMPLING, horizon=3, cache_bytes=5 * 16 * 16)
    assert tight.cache_capacity == 5
    derived, _ = derive_problem(tight, 4, 3)
    assert tight.forward_passes <= 4 + 85 // 5
    roomy, _ = derive_problem(ModelProblem(pair_seed2, CONTEXT, SAMPLING, horizon=3), 4, 3)
    for prefix in roomy.prefixes(3):  # other batches, other float32 rounding of the same forwards
        np.testing.assert_allclose(derived.target(prefix), roomy.target(prefix), rtol=0, atol=1e-6)


@pytest.mark.parametrize("vocab,depth,message", [(1, 2, "vocab"), (17, 2, "vocab"), (4, 0, "depth"),
                                                 (16, 5, "prefixes")])
def test_bad_sizes_are_refused(pair_seed2, vocab, depth, message):
    with pytest.raises(VerispecError, match=message):
        derive_problem(ModelProblem(pair_seed2, CONTEXT, SAMPLING), vocab, depth)


def test_derive_writes_a_file_every_command_reads(tmp_path, capsys):
    target, draft = save_tiny_pair(tmp_path / "pair", 1)
    output = tmp_path / "derived.json"
    assert main(["derive", "--target", str(target), "--draft", str(draft), "--context", " ".join(WORDS[2:6]),
                 "--vocab", "5", "--depth", "2", "--top-k", "8", "--output", str(output)]) == 0
    assert "wrote" in capsys.readouterr().out
    data = json.loads(output.read_text())
    assert data["derived"]["vocab"] == 5 and data["derived"]["top_k"] == 8 and len(data["derived"]["prefixes"]) == 31
    problem = load_problem(output)
    assert problem.vocab_size == 5
    assert main(["exact", "--problem", str(output), "--tree", "delayed:2,1,1", "--verifier", "specinfer"]) == 0
    binary = tmp_path / "derived.npz"  # the binary form: the same problem, its provenance kept as metadata
    assert main(["derive", "--target", str(target), "--draft", str(draft), "--context", " ".join(WORDS[2:6]),
                 "--vocab", "5", "--depth", "2", "--top-k", "8", "--output", str(binary)]) == 0
    again = load_problem(binary)
    for prefix, row in problem.target_table.items():
        assert np.allclose(again.target(prefix), row, rtol=0, atol=1e-15)
    metadata = json.loads(str(np.load(binary)["metadata"]))
    assert metadata["derived"]["top_k"] == 8 and len(metadata["derived"]["prefixes"]) == 31
    assert main(["derive", "--target", str(target), "--draft", str(draft), "--context", "x", "--vocab", "99",
                 "--depth", "1", "--output", str(output)]) == 2
