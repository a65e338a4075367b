"""Shared test settings and hypothesis strategies.

Random problems are drawn through their seed and knobs (the generators are seeded and deterministic),
so hypothesis explores vocabularies, depths, divergences, temperatures and sparsity; a failing example
prints the exact arguments that rebuild the problem.
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

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from verispec.simulator import random_problem

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
    --backend ray keeps a Ray its process already runs (``verispec.study.clusters.ray_session``). Ray is in the sweep extra
    that the test command installs, so these tests run rather than skip."""
    import logging

    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, logging_level=logging.ERROR, log_to_driver=False)
    yield ray
    ray.shutdown()


def pytest_configure(config):
    import sys

    if "torch" in sys.modules:  # imported before this file (a plugin): pin it the direct way
        sys.modules["torch"].set_num_threads(1)
    # The fast loop (pytest -m "not slow") runs every property test on 10 derandomised examples instead of
    # 40; the full run (CI, the README's test command) keeps 40.
    if "not slow" in (config.option.markexpr or "") and not os.environ.get("HYPOTHESIS_PROFILE"):
        settings.load_profile("fast")


@st.composite
def problem_args(draw, vocab=(2, 4), depth=(1, 4), max_size=512):
    """Keyword arguments of ``random_problem`` (V^depth kept below ``max_size`` prefixes)."""
    size = draw(st.integers(*vocab))
    length = draw(st.integers(*depth))
    while size ** length > max_size and length > depth[0]:
        length -= 1
    return dict(
        vocab_size=size,
        depth=length,
        seed=draw(st.integers(0, 2**32 - 1)),
        concentration=draw(st.sampled_from([0.2, 0.5, 1.0, 3.0])),
        divergence=draw(st.sampled_from([0.0, 0.2, 0.5, 0.9, 1.0])),
        temperature=draw(st.sampled_from([0.5, 1.0, 2.0])),
        zero_fraction=draw(st.sampled_from([0.0, 0.0, 0.3])),
    )


def build_problem(args: dict):
    return random_problem(**args)
