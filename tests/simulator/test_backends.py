"""One law per rule, on every array backend: each registered verifier's batched law on torch tensors
equals its law on numpy float64, on random trees and on many-row batches; so does each rule Layer Verification
lifts (``lv:<base>`` for every single-step base of the registry).

* torch float64 (CPU here; CUDA too when a GPU is present): equal to numpy to 1e-12 per entry. The same
  arithmetic runs in the same order, so only the libraries' reduction order differs (~1e-16).
* torch float32: equal to 2e-5 per entry (FLOAT32_TOLERANCE). float32 keeps about 7 significant digits; a
  law entry is a product and sum of at most a few dozen rounded terms, so its error stays near 1e-6 of the
  largest probability involved (the largest seen over every verifier and tree kind here: 3.1e-7). The
  tolerance is 20 times that; a wrong rule differs by far more (the negative control below: 0.25).
* Node couplings solved on the host (otlp and khisti by max flow, spectr's rho*) accept and return tensors
  on the input's device and dtype.

Skipped as a whole when torch is not installed (it is an optional extra; test_layering checks the exact
core without it).
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.verifiers.test_registry_verifiers import TREE_SPECS
from verispec.simulator import DraftTree, parse_tree, random_problem, sun_toy_problem
from verispec.simulator.fast_enumeration import tree_batches
from verispec.verifiers import REGISTRY, get_verifier

torch = pytest.importorskip("torch")

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
FLOAT32_TOLERANCE = 2e-5

PAIRS = [(name, spec) for name, verifier in sorted(REGISTRY.items()) for spec in TREE_SPECS
         if parse_tree(spec).draft_laws & verifier.valid_for]


def _sampled_batches(spec: str, seed: int, count: int = 8):
    """One-row batches of trees drawn at random (V = 4, context-dependent, drafts diverging from target)."""
    problem = random_problem(4, 3, seed, divergence=0.7, concentration=0.7)
    rng = np.random.default_rng(seed)
    drafter = parse_tree(spec)
    return [drafter.sample(problem, rng).as_batch() for _ in range(count)]


def _on_torch(name, batch, device, dtype):
    laws = get_verifier(name).emission_laws(batch.to_torch(device, dtype))
    assert isinstance(laws, torch.Tensor) and laws.device.type == device and laws.dtype == dtype
    return laws.double().cpu().numpy()


@pytest.mark.parametrize("seed", [0, pytest.param(1, marks=pytest.mark.slow), pytest.param(2, marks=pytest.mark.slow)])
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name,spec", PAIRS)
def test_torch_float64_equals_numpy(name, spec, device, seed):
    for batch in _sampled_batches(spec, seed):
        expected = REGISTRY[name].emission_laws(batch)
        np.testing.assert_allclose(_on_torch(name, batch, device, torch.float64), expected, rtol=0, atol=1e-12,
                                   err_msg=f"{name} on {batch.shape(0)}")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name,spec", PAIRS)
def test_torch_float32_is_within_its_tolerance(name, spec, device):
    for batch in _sampled_batches(spec, seed=11):
        expected = REGISTRY[name].emission_laws(batch)
        got = _on_torch(name, batch, device, torch.float32)
        np.testing.assert_allclose(got, expected, rtol=0, atol=FLOAT32_TOLERANCE, err_msg=f"{name} on {batch.shape(0)}")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name,spec", [(n, s) for n, s in PAIRS if parse_tree(s).slot_plan() is not None])
def test_many_row_batches_agree(name, spec, device):
    # Fast enumeration's batches: many rows of one topology, shared node contexts (the walk solves each
    # distinct node once), node ids that are not breadth first.
    problem = random_problem(3, 3, 5, divergence=0.8)
    for batch, _ in tree_batches(problem, parse_tree(spec)):
        expected = REGISTRY[name].emission_laws(batch)
        np.testing.assert_allclose(_on_torch(name, batch, device, torch.float64), expected, rtol=0, atol=1e-12)


#: Layer Verification's rules (``lv:<base>``, verispec.verifiers.layer), every base of the registry, on trees of their
#: bases' draft laws: the lifting runs its base's batched node law on V + 1 tokens, and its sweep in backend
#: operations, so it runs on every backend its base runs on.
LIFTED_PAIRS = [("lv:naive", "chain:3"), ("lv:naive", "branch:2,2"), ("lv:specinfer", "iid:2,2"),
                ("lv:specinfer", "delayed:2,1,2"), ("lv:globalres", "iid:2,2"), ("lv:globalres", "delayed:2,1,2"),
                ("lv:spectr", "iid:2,2"), ("lv:otlp", "iid:2,2"), ("lv:khisti", "iid:3,1"), ("lv:rrsw", "branch:2,2"),
                ("lv:nss", "branch:2,1,1"), ("lv:nss", "ddtree:4,2"), ("lv:naivetree", "dyspec:3"),
                ("lv:greedy", "greedy-tree:2,2"), ("lv:spechub", "hub-tree:2")]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name,spec", LIFTED_PAIRS)
def test_lifted_rules_on_torch_equal_numpy(name, spec, device):
    for batch in _sampled_batches(spec, seed=3, count=4):
        expected = get_verifier(name).emission_laws(batch)
        np.testing.assert_allclose(_on_torch(name, batch, device, torch.float64), expected, rtol=0, atol=1e-12,
                                   err_msg=f"{name} on {spec}")
        np.testing.assert_allclose(_on_torch(name, batch, device, torch.float32), expected, rtol=0,
                                   atol=FLOAT32_TOLERANCE, err_msg=f"{name} on {spec}")


def test_the_parity_check_catches_a_different_rule():
    # Negative control: the comparison above is able to fail. Token-level and block verification differ
    # on Sun et al.'s toy path (a, a): token-level rejects a at the root w.p. 1 - (1/3)/(2/3) = 1/2 and
    # emits b there; block verification has w_1 = 1/2, w_2 = 1/4, h_1 = 0 (S_1 = 0), so it emits b at the
    # root w.p. 1 - w_2 = 3/4. The entries differ by 1/4.
    batch = DraftTree.from_paths(sun_toy_problem(), [(0, 0)]).as_batch()
    token_level = REGISTRY["naive"].emission_laws(batch)
    block = _on_torch("bv", batch, "cpu", torch.float64)
    assert np.abs(token_level - block).max() > 1e-2


def test_every_base_lv_accepts_is_checked_on_torch():
    from verispec.verifiers.layer import single_step_bases

    assert {name for name, _ in LIFTED_PAIRS} == {f"lv:{base}" for base in single_step_bases(REGISTRY)}


def test_lifted_token_level_on_torch_is_block_verification_not_token_level():
    # lv:naive on one path is block verification (verispec.verifiers.layer); on Sun et al.'s toy path its torch law
    # equals bv's numpy law and differs from token-level's by 1/4 (the control above), so the lifted parity can fail.
    batch = DraftTree.from_paths(sun_toy_problem(), [(0, 0)]).as_batch()
    lifted = _on_torch("lv:naive", batch, "cpu", torch.float64)
    np.testing.assert_allclose(lifted, REGISTRY["bv"].emission_laws(batch), rtol=0, atol=1e-12)
    assert np.abs(lifted - REGISTRY["naive"].emission_laws(batch)).max() > 1e-2
