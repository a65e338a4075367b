"""Settings and fixtures every test folder shares.

Hypothesis profiles: ``default`` (40 examples) for the README's test command and ``ci`` (40, derandomised) under
CI; the fast loop names its profile on the command line, ``pytest -m "not slow" --hypothesis-profile=fast``
(10 derandomised examples). Fixtures: ``pair``, the tiny config-built model pair (one per test process), and
``ray_cluster``. Strategies of random problems are in ``tests/support/strategies.py``.
"""

from __future__ import annotations

import os

# Nothing in the tests may reach a model hub: models are built from configs.
os.environ.setdefault("HF_HUB_OFFLINE", "1")

# One thread for torch (and the BLAS under numpy) in every test process, set before anything imports torch: a thread
# pool sized to the machine fights any other load (the traversal real-decoding test took 18 s on a quiet box and
# 1,709 s at load 100), and the tests' tensors are tiny. A variable the caller set is kept.
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
# Triton kernels in the suite run under Triton's interpreter on the CPU (tests/engines). Triton reads the switch when
# it is first imported, and torch._dynamo imports it (transformers' generate reaches it), so a test process that ran
# a model test first had Triton compiled-only and every kernel test there RAISED: the switch is set before anything
# imports Triton. No test compiles a Triton kernel (CI has no GPU); a caller's setting is kept.
os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "default", max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=False)
settings.register_profile(
    "ci", max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True,
    print_blob=True)
settings.register_profile(
    "fast", max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)
settings.load_profile("ci" if os.environ.get("CI") else os.environ.get("HYPOTHESIS_PROFILE", "default"))


@pytest.fixture(scope="session")
def ray_cluster():
    """One local Ray for every Ray test of a test process: starting it is most of their time (about 10 s here),
    so it starts once, with two CPUs and no dashboard, and is shut down at the end of the session. A build given
    --backend ray keeps a Ray its process already runs (``verispec.study.clusters.ray_session``). Ray is in the sweep
    extra that the test command installs, so these tests run rather than skip."""
    import logging

    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, logging_level=logging.ERROR, log_to_driver=False)
    yield ray
    ray.shutdown()


def pytest_configure(config):
    import sys

    if "torch" in sys.modules:  # imported before this file (a plugin): pin it the direct way
        sys.modules["torch"].set_num_threads(1)


def pytest_collection_finish(session):
    """Freeze what collection left alive (torch, transformers, every test module: some 400,000 objects) out of the
    collector's reach. Each full collection afterwards (a dataset build's after every labelled group at a real
    vocabulary, ``release_group_laws``, and the collector's own) then walks only what the tests made: in a process that
    collected the whole suite it walked 640,000 objects, and 29 selector dataset tests spent 76 of their 166 s in the
    collector (frozen: 29 of 100 s, most of it while collecting). What was alive at that point is reachable anyway; what
    a test makes is collected as before."""
    import gc

    gc.collect()
    gc.freeze()


@pytest.fixture(scope="session")
def pair():
    """The tiny config-built (target, draft) pair of the model tests (``tests.support.tiny_models.tiny_pair(0)``),
    built once per test process."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from tests.support.tiny_models import tiny_pair

    return tiny_pair(0)


@pytest.fixture(scope="session")
def pair_seed2():
    """``tiny_pair(2)``: the pair the model-problem and derive tests were written against. With it the negative
    control of real decoding against the exact engine has power (a top-2 filtered draft's tau law is rejected in
    600 runs); with ``tiny_pair(0)`` it is not told apart."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from tests.support.tiny_models import tiny_pair

    return tiny_pair(2)
